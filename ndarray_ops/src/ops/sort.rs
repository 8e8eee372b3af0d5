//! Sorting along an axis: `topk` (values, indices, both, or a mask of the top k), `sort` and
//! `argsort`, as MXNet computes them: indices are floats (`dtype`, float32 by default), `k < 1`
//! sorts the whole lane, no axis sorts the flattened array, and equal values keep their order.
//!
//! Ops that return values also keep the indices (a hidden output for `sort` and `topk` with
//! `ret_typ=value`, as in MXNet), which `_backward_topk` reads to put each value's gradient back
//! where the value came from.

use super::params::{attr_enum, op_params, Params as _};
use super::{norm_axes, Arity, Attrs, OpDef, Outputs, TensorRef};
use crate::error::{invalid, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

struct Params {
    /// The axis sorted, or `None`: the flattened array.
    axis: Option<usize>,
    /// How many of each lane are kept (the whole lane when MXNet's k < 1).
    k: usize,
    ascending: bool,
    /// What the node computes (sort: the values, argsort: the indices).
    returns: RetTyp,
    index_dtype: DType,
}

op_params! {
    /// sort's attributes.
    pub struct SortParams for "sort" {
        axis: Option<i64>,
        is_ascend: bool,
    }
}

op_params! {
    /// argsort's attributes.
    pub struct ArgsortParams for "argsort" {
        axis: Option<i64>,
        is_ascend: bool,
        dtype: DType,
    }
}

attr_enum! {
    /// What topk returns.
    pub enum RetTyp {
        /// The kept values.
        Value = "value",
        /// Their indices.
        Indices = "indices",
        /// Both.
        Both = "both",
        /// A mask of the input: 1 where an element is kept.
        Mask = "mask",
    }
}

op_params! {
    /// topk's attributes.
    pub struct TopkParams for "topk" {
        axis: Option<i64>,
        k: i64,
        ret_typ: RetTyp,
        is_ascend: bool,
        dtype: DType,
    }
}

fn params(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Params> {
    // The backward op carries its forward op's name and attributes.
    let fwd = attrs.get("__fwd__").unwrap_or(op);
    // (axis, k, what it returns, ascending, the indices' dtype); k < 1 sorts the whole axis, as
    // in MXNet.
    let (axis, k, returns, ascending, index_dtype) = match fwd {
        "sort" => {
            let a = SortParams::get(op, attrs)?;
            (a.axis, 0, RetTyp::Value, a.is_ascend, DType::F32)
        }
        "argsort" => {
            let a = ArgsortParams::get(op, attrs)?;
            (a.axis, 0, RetTyp::Indices, a.is_ascend, a.dtype)
        }
        _ => {
            let a = TopkParams::get(op, attrs)?;
            (a.axis, a.k, a.ret_typ, a.is_ascend, a.dtype)
        }
    };
    let axis = match axis {
        None => None,
        Some(a) => Some(norm_axes(op, &[a], shape.len())?[0]),
    };
    let lane = axis.map_or(shape.iter().product(), |a| shape[a]);
    if k > 0 && k as usize > lane {
        return Err(invalid(
            op,
            format!("k={k} is more than the {lane} elements along the axis"),
        ));
    }
    Ok(Params {
        axis,
        k: if k < 1 { lane } else { k as usize },
        ascending,
        returns,
        index_dtype,
    })
}

/// The shape of the kept values or indices.
fn kept_shape(p: &Params, shape: &[usize]) -> Vec<usize> {
    match p.axis {
        None => vec![p.k],
        Some(a) => {
            let mut s = shape.to_vec();
            s[a] = p.k;
            s
        }
    }
}

fn infer_sort(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let p = params(op, attrs, &s[0])?;
    let kept = kept_shape(&p, &s[0]);
    Ok(match p.returns {
        // Values, then the indices they came from (hidden unless asked for).
        RetTyp::Value | RetTyp::Both => (vec![kept.clone(), kept], vec![d[0], p.index_dtype]),
        RetTyp::Indices => (vec![kept], vec![p.index_dtype]),
        RetTyp::Mask => (vec![s[0].clone()], vec![d[0]]),
    })
}

/// `(outer, lane, inner)` around the sorted axis (the flattened array is one lane).
fn lanes(p: &Params, shape: &[usize]) -> (usize, usize, usize) {
    match p.axis {
        None => (1, shape.iter().product(), 1),
        Some(a) => (
            shape[..a].iter().product(),
            shape[a],
            shape[a + 1..].iter().product(),
        ),
    }
}

/// For each lane, in order, the positions along it of its k kept elements.
fn ranked(p: &Params, shape: &[usize], values: &[f64]) -> Vec<Vec<usize>> {
    let (outer, lane, inner) = lanes(p, shape);
    let mut all = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| values[(o * lane + j) * inner + i];
            let mut order: Vec<usize> = (0..lane).collect();
            // Stable: equal values keep their order either way.
            order.sort_by(|&a, &b| {
                let c = at(a).total_cmp(&at(b));
                if p.ascending {
                    c
                } else {
                    c.reverse()
                }
            });
            order.truncate(p.k);
            all.push(order);
        }
    }
    all
}

/// A sort as the GPU runs it: data laid out `(outer, lane, inner)` around the sorted axis, the
/// first `k` of each lane kept, and what the node returns.
pub(crate) struct Plan {
    pub(crate) outer: usize,
    pub(crate) lane: usize,
    pub(crate) inner: usize,
    pub(crate) k: usize,
    pub(crate) descending: bool,
    /// A mask of the kept elements (outputs: the mask), else the kept values and their
    /// positions (outputs: the values then the positions) or the positions alone.
    pub(crate) mask: bool,
    pub(crate) values: bool,
}

/// The plan of `op` (topk, sort, argsort or `_backward_topk`) over data of `shape`.
pub(crate) fn plan(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Plan> {
    let p = params(op, attrs, shape)?;
    let (outer, lane, inner) = lanes(&p, shape);
    Ok(Plan {
        outer,
        lane,
        inner,
        k: p.k,
        descending: !p.ascending,
        mask: p.returns == RetTyp::Mask,
        values: matches!(p.returns, RetTyp::Value | RetTyp::Both),
    })
}

fn sort_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let x = &ins[0];
    let p = params(op, attrs, &x.shape).map_err(|e| e.to_string())?;
    // SAFETY: read access to the data.
    let values = unsafe { x.to_f64s() };
    let (_, lane, inner) = lanes(&p, &x.shape);
    let order = ranked(&p, &x.shape, &values);
    // Lane `l` (outer o, inner i) holds its kept element r at (o * k + r) * inner + i.
    let source = |l: usize, j: usize| ((l / inner) * lane + j) * inner + l % inner;
    let kept = |l: usize, r: usize| ((l / inner) * p.k + r) * inner + l % inner;
    let write = |t: &TensorRef, f: &dyn Fn(usize, usize) -> f64| {
        crate::with_dtype!(t.dtype, T => {
            // SAFETY: exclusive access to this output (not alias-safe).
            let out = unsafe { t.slice_mut::<T>() };
            for (l, js) in order.iter().enumerate() {
                for (r, &j) in js.iter().enumerate() {
                    out[kept(l, r)] = T::from_f64(f(l, j));
                }
            }
        })
    };
    match p.returns {
        RetTyp::Value | RetTyp::Both => {
            write(&outs[0], &|l, j| values[source(l, j)]);
            write(&outs[1], &|_, j| j as f64);
        }
        RetTyp::Indices => write(&outs[0], &|_, j| j as f64),
        RetTyp::Mask => crate::with_dtype!(outs[0].dtype, T => {
            // SAFETY: exclusive access to the output (not alias-safe).
            let out = unsafe { outs[0].slice_mut::<T>() };
            out.fill(T::default());
            for (l, js) in order.iter().enumerate() {
                for &j in js {
                    out[source(l, j)] = T::from_f64(1.0);
                }
            }
        }),
    }
    Ok(())
}

/// `_backward_topk(ograd, indices, data)`: each kept value's gradient back at its position;
/// the indices are the forward op's second output.
fn infer_sort_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let forward = super::named_forward(op, attrs, "__fwd__", Some("topk"), &["topk", "sort"])?;
    let grads = [(0, &s[0][..], d[0]), (1, &s[1][..], d[1])];
    super::check_against_forward(op, forward, attrs, (&s[2..], &d[2..]), &grads)?;
    Ok((vec![s[2].clone()], vec![d[0]]))
}

fn sort_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let shape = &outs[0].shape;
    let p = params(op, attrs, shape).map_err(|e| e.to_string())?;
    let (_, lane, inner) = lanes(&p, shape);
    let index: Vec<usize> = crate::with_dtype!(ins[1].dtype, I => {
        // SAFETY: read access to the indices.
        unsafe { ins[1].slice::<I>() }.iter().map(|v| v.to_f64() as usize).collect()
    });
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to d data (not alias-safe).
        let (g, dx) = unsafe { (ins[0].slice::<T>(), outs[0].slice_mut::<T>()) };
        dx.fill(T::default());
        for (e, (&j, g)) in index.iter().zip(g).enumerate() {
            // Kept element e is rank (e / inner) % k of lane (outer, e % inner).
            let (o, i) = (e / inner / p.k, e % inner);
            let at = (o * lane + j.min(lane - 1)) * inner + i;
            dx[at] = dx[at].add(*g);
        }
    });
    Ok(())
}

/// Whether a node of `op` returns values (and so has a gradient).
pub(crate) fn returns_values(op: &str, attrs: &Attrs) -> bool {
    match op {
        "sort" => true,
        "topk" => TopkParams::get(op, attrs)
            .is_ok_and(|a| matches!(a.ret_typ, RetTyp::Value | RetTyp::Both)),
        _ => false,
    }
}

/// topk's counts: values keep their indices as a hidden output, as in MXNet.
fn topk_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    Ok(match TopkParams::get(op, attrs)?.ret_typ {
        RetTyp::Value => (2, 1),
        RetTyp::Both => (2, 2),
        RetTyp::Indices | RetTyp::Mask => (1, 1),
    })
}

pub(super) fn ops() -> &'static [OpDef] {
    const fn def(name: &'static str) -> OpDef {
        OpDef {
            alias_safe: false,
            ..OpDef::new(name, Arity::Exactly(1), infer_sort, sort_kernel)
        }
    }
    static OPS: &[OpDef] = &[
        def("topk")
            .outputs(Outputs::By(topk_outputs))
            .grad(grad::sort)
            .on_gpu(gpu::sort::sort),
        // The values keep their indices as a hidden output, as in MXNet.
        def("sort")
            .outputs(Outputs::Fixed(2, 1))
            .grad(grad::sort)
            .on_gpu(gpu::sort::sort),
        def("argsort").grad(grad::sort).on_gpu(gpu::sort::sort),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_topk",
                Arity::Exactly(3),
                infer_sort_backward,
                sort_backward_kernel,
            )
        }
        .on_gpu(gpu::sort::sort),
    ];
    OPS
}
