//! Symbols and executors for `mx.sym`: graph building, MXNet's JSON, shape and dtype inference,
//! and binding a graph to arrays for forward and backward passes.

use std::collections::HashMap;

use ndarray_ops::symbol::mirror::Mirror;
use ndarray_ops::symbol::{infer_partial, Inferred};
use ndarray_ops::{BindOptions, DType, Executor, GradReq, NDArray, Symbol};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{attrs_of, context, dtype, err, runtime, wrap, Array, MXNetError};

/// One node of a graph as Python sees it (see `Sym::nodes`): name, op, visible outputs, inputs
/// as (node index, output index), input names.
type NodeRow = (String, String, usize, Vec<(usize, usize)>, Vec<String>);

/// A graph: the outputs of some nodes.
#[pyclass(module = "mxrs._native", name = "Sym", frozen)]
pub(crate) struct Sym {
    pub(crate) s: Symbol,
}

fn sym(s: Symbol) -> Sym {
    Sym { s }
}

/// `(arguments, outputs, auxiliary states)`, each a list in the symbol's order.
type ThreeLists<T> = (Vec<T>, Vec<T>, Vec<T>);

impl Sym {
    fn inferred(
        &self,
        shapes: HashMap<String, Vec<usize>>,
        dtypes: HashMap<String, String>,
    ) -> PyResult<Inferred> {
        let dtypes = dtypes
            .into_iter()
            .map(|(k, v)| Ok((k, dtype(&v)?)))
            .collect::<PyResult<HashMap<String, DType>>>()?;
        infer_partial(&self.s, &shapes, &dtypes).map_err(err)
    }

    fn by_name<T>(&self, inf: &Inferred, pick: impl Fn(usize) -> T) -> ThreeLists<T> {
        // Each name's first node, as a search in node order finds it (one pass, not one per
        // name).
        let mut first: HashMap<&str, usize> = HashMap::with_capacity(inf.graph.nodes.len());
        for (i, n) in inf.graph.nodes.iter().enumerate() {
            first.entry(n.name.as_str()).or_insert(i);
        }
        let entry = |name: &str| first.get(name).map(|&n| inf.graph.entry(n, 0));
        let named = |names: Vec<String>| {
            names
                .iter()
                .filter_map(|name| entry(name))
                .map(&pick)
                .collect::<Vec<T>>()
        };
        let outs = inf
            .graph
            .outputs
            .iter()
            .map(|&(n, i)| pick(inf.graph.entry(n, i)))
            .collect();
        (
            named(self.s.list_arguments()),
            outs,
            named(self.s.list_auxiliary_states()),
        )
    }
}

#[pymethods]
impl Sym {
    /// A variable, with attributes (`__shape__`, `__dtype__`, `__lr_mult__`, ...).
    #[staticmethod]
    fn var(name: &str, attrs: Vec<(String, String)>) -> Sym {
        sym(Symbol::var_with(name, attrs_of(attrs)))
    }

    /// Op `op` applied to `inputs` (each with one output), as node `name`.
    #[staticmethod]
    fn op(
        op: &str,
        name: &str,
        inputs: Vec<Py<Sym>>,
        attrs: Vec<(String, String)>,
    ) -> PyResult<Sym> {
        let inputs: Vec<&Symbol> = inputs.iter().map(|s| &s.get().s).collect();
        Symbol::op(op, name, &inputs, attrs_of(attrs))
            .map(sym)
            .map_err(err)
    }

    /// The outputs of several symbols as one.
    #[staticmethod]
    fn group(symbols: Vec<Py<Sym>>) -> Sym {
        let v: Vec<Symbol> = symbols.iter().map(|s| s.get().s.clone()).collect();
        sym(Symbol::group(&v))
    }

    /// A symbol from MXNet's JSON.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Sym> {
        Symbol::from_json(text).map(sym).map_err(err)
    }

    /// A symbol from a `-symbol.json` file.
    #[staticmethod]
    fn load(path: &str) -> PyResult<Sym> {
        Symbol::load(path).map(sym).map_err(err)
    }

    /// MXNet's JSON of the graph.
    fn to_json(&self) -> String {
        self.s.to_json()
    }

    /// Writes the JSON to `path` (a temporary file renamed into place).
    fn save(&self, path: &str) -> PyResult<()> {
        self.s.save(path).map_err(err)
    }

    fn list_arguments(&self) -> Vec<String> {
        self.s.list_arguments()
    }

    fn list_outputs(&self) -> Vec<String> {
        self.s.list_outputs()
    }

    fn list_auxiliary_states(&self) -> Vec<String> {
        self.s.list_auxiliary_states()
    }

    /// Output `i` alone.
    fn get_output(&self, i: usize) -> PyResult<Sym> {
        self.s.get_output(i).map(sym).map_err(err)
    }

    /// Every node's outputs (hidden ones included), as MXNet's `get_internals`.
    fn get_internals(&self) -> Sym {
        sym(self.s.get_internals())
    }

    /// Every node in graph order (each after its inputs): its name, its op's name (`null` for
    /// a variable), its visible outputs, its inputs as (node index, output index) and their
    /// names (`data`, `weight`, ...; empty for a variable).
    fn nodes(&self) -> Vec<NodeRow> {
        let g = self.s.indexed();
        g.nodes
            .iter()
            .zip(&g.inputs)
            .map(|(n, inputs)| {
                let names = match n.op {
                    Some(def) => ndarray_ops::ops::signature::input_names(def.name, &n.attrs)
                        .map(|v| v.iter().map(|s| s.to_string()).collect())
                        .unwrap_or_default(),
                    None => Vec::new(),
                };
                let op = n.op.map_or("null", |d| d.name).to_string();
                (
                    n.name.clone(),
                    op,
                    n.num_visible_outputs(),
                    inputs.clone(),
                    names,
                )
            })
            .collect()
    }

    /// The inputs of the output nodes, as one symbol (None for variables).
    fn get_children(&self) -> Option<Sym> {
        self.s.get_children().map(sym)
    }

    /// The number of outputs.
    fn num_outputs(&self) -> usize {
        self.s.outputs().len()
    }

    /// The name of the node of a one-output symbol.
    fn name(&self) -> Option<String> {
        match self.s.outputs() {
            [e] => Some(e.node.name.clone()),
            _ => None,
        }
    }

    /// The attributes of the node of a one-output symbol.
    fn attrs(&self) -> Vec<(String, String)> {
        match self.s.outputs() {
            [e] => e
                .node
                .attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The graph with the variables named in `args` replaced by those symbols.
    fn compose(&self, args: HashMap<String, Py<Sym>>) -> PyResult<Sym> {
        let args: HashMap<String, Symbol> = args
            .into_iter()
            .map(|(k, v)| (k, v.get().s.clone()))
            .collect();
        self.s.compose(&args).map(sym).map_err(err)
    }

    /// Shapes from the known ones, in both directions: `(arguments, outputs, auxiliary
    /// states)`; unknown dimensions are 0 and unknown shapes empty. A clash raises.
    fn infer_shape(&self, shapes: HashMap<String, Vec<usize>>) -> PyResult<ThreeLists<Vec<usize>>> {
        let inf = self.inferred(shapes, HashMap::new())?;
        Ok(self.by_name(&inf, |e| inf.shapes[e].clone()))
    }

    /// Dtypes from the known ones (float32 where nothing says otherwise).
    fn infer_type(&self, dtypes: HashMap<String, String>) -> PyResult<ThreeLists<&'static str>> {
        let inf = self.inferred(HashMap::new(), dtypes)?;
        Ok(self.by_name(&inf, |e| inf.dtypes[e].name()))
    }
}

/// A symbol bound to arrays.
#[pyclass(module = "mxrs._native", name = "Exec", frozen)]
pub(crate) struct Exec {
    e: Executor,
}

fn grad_reqs(reqs: HashMap<String, String>) -> PyResult<HashMap<String, GradReq>> {
    reqs.into_iter()
        .map(|(k, v)| {
            let r = match v.as_str() {
                "write" => GradReq::Write,
                "add" => GradReq::Add,
                "null" => GradReq::Null,
                other => {
                    return Err(MXNetError::new_err(format!(
                        "grad_req {other:?} for {k} is not one of write, add, null"
                    )))
                }
            };
            Ok((k, r))
        })
        .collect()
}

fn arrays(map: HashMap<String, Py<Array>>) -> HashMap<String, NDArray> {
    map.into_iter()
        .map(|(k, v)| (k, v.get().handle()))
        .collect()
}

fn dict(map: HashMap<String, NDArray>) -> HashMap<String, Array> {
    map.into_iter().map(|(k, v)| (k, wrap(v))).collect()
}

/// Binds `symbol` on `(dev_type, dev_id)`: `shapes` for arguments not given, `given` arrays
/// (arguments and auxiliary states), gradient requests, gradient arrays to write into, and
/// recomputation during backward (`mirror`: a byte budget, `auto`, `cheap` or `off`; `None`:
/// as `MXRS_BACKWARD_MIRROR` says).
#[pyfunction]
#[pyo3(signature = (symbol, dev_type, dev_id, shapes, given, grad_req, grad_arrays, mirror=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn bind(
    py: Python<'_>,
    symbol: &Sym,
    dev_type: &str,
    dev_id: u32,
    shapes: HashMap<String, Vec<usize>>,
    given: HashMap<String, Py<Array>>,
    grad_req: HashMap<String, String>,
    grad_arrays: HashMap<String, Py<Array>>,
    mirror: Option<String>,
) -> PyResult<Exec> {
    let (rt, ctx) = (runtime()?, context(dev_type, dev_id)?);
    let mirror = match mirror {
        Some(m) => Some(m.parse::<Mirror>().map_err(PyValueError::new_err)?),
        None => None,
    };
    let opts = BindOptions {
        grad_req: grad_reqs(grad_req)?,
        grad_arrays: arrays(grad_arrays),
        mirror,
        ..BindOptions::default()
    };
    let given = arrays(given);
    let s = symbol.s.clone();
    py.detach(move || Executor::bind_with_options(&rt, ctx, &s, &shapes, given, &opts))
        .map(|e| Exec { e })
        .map_err(err)
}

#[pymethods]
impl Exec {
    /// Pushes the forward pass (training behaviour when `is_train`).
    fn forward(&self, py: Python<'_>, is_train: bool) -> PyResult<()> {
        py.detach(|| self.e.forward(is_train)).map_err(err)
    }

    /// Pushes the backward pass, with head gradients for outputs that are not losses.
    #[pyo3(signature = (head_grads=None))]
    fn backward(&self, py: Python<'_>, head_grads: Option<Vec<Py<Array>>>) -> PyResult<()> {
        match head_grads {
            None => py.detach(|| self.e.backward()),
            Some(g) => {
                let g: Vec<NDArray> = g.iter().map(|a| a.get().handle()).collect();
                py.detach(|| self.e.backward_with(&g))
            }
        }
        .map_err(err)
    }

    fn outputs(&self) -> Vec<Array> {
        self.e.outputs().into_iter().map(wrap).collect()
    }

    fn arg_dict(&self) -> HashMap<String, Array> {
        dict(self.e.arg_dict())
    }

    fn grad_dict(&self) -> HashMap<String, Array> {
        dict(self.e.grad_dict())
    }

    fn aux_dict(&self) -> HashMap<String, Array> {
        dict(self.e.aux_dict())
    }

    /// Copies the given arguments and auxiliary states into the bound arrays.
    #[pyo3(signature = (args, aux, allow_extra))]
    fn copy_params_from(
        &self,
        args: HashMap<String, Py<Array>>,
        aux: HashMap<String, Py<Array>>,
        allow_extra: bool,
    ) -> PyResult<()> {
        self.e
            .copy_params_from(&arrays(args), &arrays(aux), allow_extra)
            .map_err(err)
    }

    /// A readable dump of the bound graph and its memory.
    fn debug_str(&self) -> String {
        self.e.debug_str()
    }
}
