//! What the examples that time graphs bind for training and fill in.

use std::collections::HashMap;

use ndarray_ops::{invoke_on, Attrs, Executor, GradReq, Runtime, Symbol};
use storage::Context;

/// A gradient for every argument of `sym` but the inputs named in `inputs`.
pub fn training_grads<V>(sym: &Symbol, inputs: &HashMap<String, V>) -> HashMap<String, GradReq> {
    sym.list_arguments()
        .into_iter()
        .filter(|n| !inputs.contains_key(n))
        .map(|n| (n, GradReq::Write))
        .collect()
}

/// Fills every argument of `exec` with uniform values in [-0.05, 0.05] (small enough that
/// activations stay finite), in name order, and head gradients with ones. Values are drawn on
/// the CPU (the GPU back end has no random kernels), then copied over.
pub fn randomize(rt: &std::sync::Arc<Runtime>, exec: &Executor) -> ndarray_ops::Result<()> {
    let mut args: Vec<_> = exec.arg_dict().into_iter().collect();
    args.sort_by(|x, y| x.0.cmp(&y.0));
    for (name, arr) in args {
        if name.contains("_head_grad") {
            arr.fill(1.0)?;
            continue;
        }
        let shape = format!("{:?}", arr.shape())
            .replace('[', "(")
            .replace(']', ")");
        let attrs = Attrs::new()
            .with("low", -0.05)
            .with("high", 0.05)
            .with("shape", shape)
            .with("dtype", arr.dtype().name());
        let host = invoke_on(rt, Context::cpu(0), "_random_uniform", &[], &attrs, None)?;
        host[0].copy_into(&arr)?;
    }
    Ok(())
}
