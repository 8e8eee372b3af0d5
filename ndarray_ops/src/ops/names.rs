//! Every registered op name (aliases included), so that a name written inside the crate is
//! checked when the crate compiles: `op_name!` fails the build on a name no op
//! answers to. A unit test keeps this list equal to the registry's; it is written anew with
//! `MXRS_WRITE_OP_NAMES=1 cargo test -p ndarray_ops --lib op_names_are_the_registrys`.

/// The registry's names, sorted.
pub(crate) const NAMES: &[&str] = &[
    "Activation",
    "BatchNorm",
    "BlockGrad",
    "Cast",
    "Concat",
    "Convolution",
    "Crop",
    "Deconvolution",
    "Dropout",
    "ElementWiseSum",
    "Embedding",
    "Flatten",
    "FullyConnected",
    "GroupNorm",
    "InstanceNorm",
    "L2Normalization",
    "LayerNorm",
    "LeakyReLU",
    "LinearRegressionOutput",
    "LogisticRegressionOutput",
    "MAERegressionOutput",
    "MakeLoss",
    "Pad",
    "Pooling",
    "RNN",
    "ROIPooling",
    "Reshape",
    "SequenceLast",
    "SequenceMask",
    "SequenceReverse",
    "SliceChannel",
    "Softmax",
    "SoftmaxActivation",
    "SoftmaxOutput",
    "SwapAxis",
    "UpSampling",
    "_CrossDeviceCopy",
    "_Div",
    "_DivScalar",
    "_EqualScalar",
    "_GreaterScalar",
    "_LesserScalar",
    "_MaximumScalar",
    "_MinimumScalar",
    "_Minus",
    "_MinusScalar",
    "_Mul",
    "_MulScalar",
    "_Plus",
    "_PlusScalar",
    "_PowerScalar",
    "_RDivScalar",
    "_RMinusScalar",
    "_add",
    "_arange",
    "_assign",
    "_backward_Activation",
    "_backward_AdaptiveAvgPooling2D",
    "_backward_BatchNorm",
    "_backward_BilinearResize2D",
    "_backward_Concat",
    "_backward_Convolution",
    "_backward_Crop",
    "_backward_Deconvolution",
    "_backward_FullyConnected",
    "_backward_GroupNorm",
    "_backward_InstanceNorm",
    "_backward_L2Normalization",
    "_backward_LayerNorm",
    "_backward_LeakyReLU",
    "_backward_LinearRegressionOutput",
    "_backward_LogisticRegressionOutput",
    "_backward_MAERegressionOutput",
    "_backward_MakeLoss",
    "_backward_Pooling",
    "_backward_RNN",
    "_backward_ROIAlign",
    "_backward_ROIPooling",
    "_backward_SequenceLast",
    "_backward_SequenceMask",
    "_backward_SoftmaxActivation",
    "_backward_SoftmaxOutput",
    "_backward_fused_BatchNormReLU",
    "_backward_gather",
    "_backward_gather_nd",
    "_backward_log_softmax",
    "_backward_math",
    "_backward_pick",
    "_backward_slice",
    "_backward_softmax",
    "_backward_softmax_cross_entropy",
    "_backward_take",
    "_backward_topk",
    "_broadcast_backward",
    "_cast_like",
    "_contrib_AdaptiveAvgPooling2D",
    "_contrib_BilinearResize2D",
    "_contrib_ROIAlign",
    "_copy",
    "_div",
    "_div_scalar",
    "_equal",
    "_equal_scalar",
    "_fused_BatchNormReLU",
    "_fused_Convolution",
    "_fused_ConvolutionBias",
    "_fused_elemwise",
    "_grad_add",
    "_greater",
    "_greater_equal",
    "_greater_equal_scalar",
    "_greater_scalar",
    "_hypot",
    "_hypot_scalar",
    "_lesser",
    "_lesser_equal",
    "_lesser_equal_scalar",
    "_lesser_scalar",
    "_logical_and",
    "_logical_or",
    "_logical_xor",
    "_maximum",
    "_maximum_scalar",
    "_minimum",
    "_minimum_scalar",
    "_minus",
    "_minus_scalar",
    "_mod",
    "_mod_scalar",
    "_mul",
    "_mul_scalar",
    "_not_equal",
    "_not_equal_scalar",
    "_ones",
    "_plus",
    "_plus_scalar",
    "_power",
    "_power_scalar",
    "_random_normal",
    "_random_uniform",
    "_rdiv_scalar",
    "_rminus_scalar",
    "_rpower_scalar",
    "_sub",
    "_sum_to_like",
    "_zeros",
    "abs",
    "adam_update",
    "add_n",
    "arange",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctanh",
    "argmax",
    "argmin",
    "argsort",
    "batch_dot",
    "batch_take",
    "broadcast_add",
    "broadcast_axes",
    "broadcast_axis",
    "broadcast_div",
    "broadcast_equal",
    "broadcast_greater",
    "broadcast_greater_equal",
    "broadcast_hypot",
    "broadcast_lesser",
    "broadcast_lesser_equal",
    "broadcast_like",
    "broadcast_logical_and",
    "broadcast_logical_or",
    "broadcast_logical_xor",
    "broadcast_maximum",
    "broadcast_minimum",
    "broadcast_minus",
    "broadcast_mod",
    "broadcast_mul",
    "broadcast_not_equal",
    "broadcast_plus",
    "broadcast_power",
    "broadcast_sub",
    "broadcast_to",
    "cast",
    "cbrt",
    "ceil",
    "choose_element_0index",
    "clip",
    "concat",
    "cos",
    "cosh",
    "crop",
    "degrees",
    "depth_to_space",
    "dot",
    "elemwise_add",
    "elemwise_div",
    "elemwise_mul",
    "elemwise_sub",
    "erf",
    "exp",
    "expand_dims",
    "expm1",
    "fix",
    "flatten",
    "flip",
    "floor",
    "gather_nd",
    "hard_sigmoid",
    "identity",
    "log",
    "log10",
    "log1p",
    "log2",
    "log_softmax",
    "make_loss",
    "max",
    "max_axis",
    "mean",
    "min",
    "min_axis",
    "negative",
    "norm",
    "normal",
    "one_hot",
    "ones",
    "ones_like",
    "pad",
    "pick",
    "prod",
    "radians",
    "random_normal",
    "random_uniform",
    "rcbrt",
    "reciprocal",
    "relu",
    "repeat",
    "reshape",
    "reshape_like",
    "reverse",
    "rint",
    "round",
    "rsqrt",
    "scatter_nd",
    "sgd_mom_update",
    "sgd_update",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "slice",
    "slice_axis",
    "slice_like",
    "smooth_l1",
    "softmax",
    "softmax_cross_entropy",
    "softrelu",
    "softsign",
    "sort",
    "space_to_depth",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "stop_gradient",
    "sum",
    "sum_axis",
    "swapaxes",
    "take",
    "tan",
    "tanh",
    "tile",
    "topk",
    "transpose",
    "trunc",
    "uniform",
    "where",
    "zeros",
    "zeros_like",
];

/// Whether `name` is in [`NAMES`] (at compile time: a plain loop, as `const fn` allows).
pub(crate) const fn registered(name: &str) -> bool {
    let mut i = 0;
    while i < NAMES.len() {
        if eq(NAMES[i].as_bytes(), name.as_bytes()) {
            return true;
        }
        i += 1;
    }
    false
}

const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// An op name, checked when the crate compiles: `op_name!("add_n")` is `"add_n"`, and a name
/// no registered op answers to is a compile error.
macro_rules! op_name {
    ($name:literal) => {{
        const _: () = assert!(
            crate::ops::names::registered($name),
            concat!("no op is registered as \"", $name, "\"")
        );
        $name
    }};
}
pub(crate) use op_name;

#[cfg(test)]
mod tests {
    use super::NAMES;

    #[test]
    fn op_names_are_the_registrys() {
        let registry = crate::ops::op_names();
        if std::env::var_os("MXRS_WRITE_OP_NAMES").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/ops/names.rs");
            let text = std::fs::read_to_string(path).unwrap();
            let (head, rest) = text
                .split_once("pub(crate) const NAMES: &[&str] = &[\n")
                .unwrap();
            let (_, tail) = rest.split_once("\n];\n").unwrap();
            let list: Vec<String> = registry.iter().map(|n| format!("    \"{n}\",")).collect();
            let fresh = format!(
                "{head}pub(crate) const NAMES: &[&str] = &[\n{}\n];\n{tail}",
                list.join("\n")
            );
            std::fs::write(path, fresh).unwrap();
            return;
        }
        assert_eq!(
            NAMES,
            registry.as_slice(),
            "ops/names.rs is stale: write it anew with \
             MXRS_WRITE_OP_NAMES=1 cargo test -p ndarray_ops --lib op_names_are_the_registrys"
        );
    }
}
