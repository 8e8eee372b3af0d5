//! What one fuzzing input exercises, reader by reader. The coverage-guided targets in `fuzz/`
//! and the structured fuzz test in the normal suite call these same functions, so both check
//! one thing: a reader given any bytes returns a result or an error, and never panics, aborts
//! or hangs; whatever it accepts is used as far as a user would (inferred, bound, run, planned).
//!
//! Each harness takes the runtime to load into; give it a memory limit, so that a file that
//! asks for more memory than the machine has is refused by the limit and not the allocator.

use std::collections::HashMap;
use std::sync::Arc;

use storage::Context;

use crate::{ndfile, plan, Attrs, Executor, Runtime, Symbol};

/// Most bytes of entries a fuzzed symbol may bind (arguments and internal entries).
const BIND_BYTES: usize = 16 << 20;

/// A symbol JSON file: parsed, its shapes inferred from its `__shape__` attributes, and, when
/// every argument's shape is known and the graph is small, bound and run forward.
pub fn symbol_json(rt: &Arc<Runtime>, data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sym) = Symbol::from_json(text) else {
        return;
    };
    let _ = sym.to_json();
    let _ = sym.list_outputs();
    let Ok(inferred) = crate::symbol::infer(&sym, &HashMap::new(), &HashMap::new()) else {
        return;
    };
    let bytes = inferred
        .shapes
        .iter()
        .zip(&inferred.dtypes)
        .try_fold(0usize, |total, (s, d)| {
            let n = s.iter().try_fold(d.size(), |a, &x| a.checked_mul(x))?;
            total.checked_add(n)
        });
    if bytes.is_none_or(|b| b > BIND_BYTES) {
        return;
    }
    if let Ok(exec) = Executor::simple_bind(rt, Context::cpu(0), &sym, &HashMap::new()) {
        if exec.forward(false).is_ok() {
            for out in exec.outputs() {
                let _ = out.wait_to_read();
            }
        }
    }
    let _ = rt.wait_all();
}

/// An MXNet NDArray file (`.params`, `.nd`): loaded, and every array it holds read back.
pub fn ndarray_file(rt: &Arc<Runtime>, data: &[u8]) {
    if let Ok(loaded) = ndfile::read_arrays(&mut &data[..], rt, Context::cpu(0)) {
        for a in &loaded.arrays {
            let _ = a.to_vec::<f64>();
        }
        let _ = loaded.into_named();
    }
    let _ = rt.wait_all();
}

/// An MXNet bound-graph dump: read by both readers, and each problem planned and verified.
pub fn bound_graph(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(gp) = plan::bound_graph_problem(text) {
        plan_and_verify(&gp.problem);
    }
    if let Ok((problem, _)) = storage::plan::mxnet::liveness_problem(text) {
        plan_and_verify(&problem);
    }
}

fn plan_and_verify(problem: &storage::plan::Problem) {
    use storage::plan::SolverKind;
    if problem.validate().is_err() {
        return;
    }
    let _ = storage::plan::lower_bound(problem);
    let kinds = [
        SolverKind::GreedyBySize,
        SolverKind::BestFitHeap,
        SolverKind::NnvmBlocks(16),
    ];
    for kind in kinds {
        let p = storage::plan::solve(problem, kind);
        assert!(
            storage::plan::verify(problem, &p).is_ok(),
            "the {} plan of a valid problem failed its verifier",
            kind.name()
        );
    }
}

/// Operator attributes: the input's lines are `op`, then `key=value` pairs; every typed reader
/// reads every value, and the op runs with them on small inputs of each rank from 1 to 4 (as
/// many as it takes), the way a user's call or a graph's node would.
pub fn attributes(rt: &Arc<Runtime>, data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.lines();
    let op = lines.next().unwrap_or("").trim();
    let mut attrs = Attrs::new();
    let mut keys = Vec::new();
    for line in lines {
        if let Some((k, v)) = line.split_once('=') {
            attrs = attrs.with(k.trim(), v.trim());
            keys.push(k.trim().to_string());
        }
    }
    for k in &keys {
        let _ = attrs.int(op, k, None, -1000..=1000);
        let _ = attrs.count(op, k, None, 0..=1000);
        let _ = attrs.float(op, k, None);
        let _ = attrs.bool(op, k, false);
        let _ = attrs.ints(op, k);
    }
    let _ = attrs.dtype(op);
    let Ok(def) = crate::ops::lookup(op) else {
        return;
    };
    let arity = match def.arity {
        crate::ops::Arity::Exactly(n) | crate::ops::Arity::AtLeast(n) => n,
    };
    for rank in 1..=4 {
        let shape: Vec<usize> = (0..rank).map(|i| 2 + i).collect();
        let Ok(x) = rt.ones(&shape, crate::DType::F32, Context::cpu(0)) else {
            return;
        };
        let inputs = vec![&x; arity];
        if let Ok(outs) = crate::invoke(op, &inputs, &attrs, None) {
            for o in outs {
                let _ = o.wait_to_read();
            }
        }
    }
    let _ = rt.wait_all();
}
