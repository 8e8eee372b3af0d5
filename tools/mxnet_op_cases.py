"""Single-op cases for ndarray_ops/tests/mxnet_ops.rs, computed by MXNet 1.9.1 in float64.

    /tmp/mxv/bin/python tools/mxnet_op_cases.py ndarray_ops/tests/data/mxnet

Writes ops64.json (each case: op, attributes as MXNet's JSON writes them, input names, which
inputs are auxiliary states, which get gradients, whether the forward runs in training mode)
and ops64.nd (per case its inputs, MXNet's outputs, and, for a random head gradient per
output, MXNet's gradient of every input that has one). Float64, so that a difference in what
is computed (a default, a convention, an order of operations that matters) shows instead of
hiding in float32 rounding.
"""

import json
import os
import sys

import mxnet as mx
import numpy as np

rng = np.random.RandomState(3)


def u(shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape)


def ints(shape, high):
    return rng.randint(0, high, shape).astype(np.float64)


# (name, op, attrs, [(input, array)], aux input names, inputs without gradient, train)
CASES = []

# Cases whose MXNet gradient is wrong, with why: their expected gradients are central
# differences of MXNet's own forward pass instead (meta "grad_source": "numeric").
MXNET_GRAD_WRONG = {
    "selu": "MXNet's selu_grad gives lambda * (y + alpha) below zero; the derivative of "
            "lambda * alpha * (e^x - 1) is y + lambda * alpha",
}

# Cases whose MXNet gradient is wrong where central differences are too coarse (float32-only
# ops), with why: their expected gradient is the derivative applied to MXNet's own forward
# output (meta "grad_source": "derived").
MXNET_GRAD_DERIVED = {
    # Its forward takes the softmax over the last axis, its backward over each whole sample.
    "softmax_activation_3d": lambda y, h: y * (h - (h * y).sum(axis=-1, keepdims=True)),
}


# Ops MXNet only runs in float32 (its legacy InstanceNorm, SoftmaxActivation and Crop): those cases
# are float32.
FLOAT32_ONLY = {"InstanceNorm", "SoftmaxActivation", "Crop"}


def case(name, op, attrs, inputs, aux=(), no_grad=(), train=False):
    CASES.append((name, op, {k: str(v) for k, v in attrs.items()}, inputs, set(aux),
                  set(no_grad), train))


x4 = lambda: u((2, 4, 7, 7))
case("fc", "FullyConnected", {"num_hidden": 6},
     [("data", u((3, 4, 5))), ("weight", u((6, 20))), ("bias", u((6,)))])
case("fc_noflat", "FullyConnected", {"num_hidden": 6, "flatten": False, "no_bias": True},
     [("data", u((3, 4, 5))), ("weight", u((6, 5)))])
case("conv", "Convolution",
     {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "dilate": (2, 2), "num_filter": 6,
      "num_group": 2},
     [("data", u((2, 4, 9, 9))), ("weight", u((6, 2, 3, 3))), ("bias", u((6,)))])
case("conv_rect", "Convolution",
     {"kernel": (1, 3), "stride": (1, 2), "pad": (0, 2), "num_filter": 3, "no_bias": True},
     [("data", u((2, 2, 5, 8))), ("weight", u((3, 2, 1, 3)))])
case("deconv", "Deconvolution",
     {"kernel": (4, 4), "stride": (2, 2), "pad": (1, 1), "num_filter": 3, "no_bias": False},
     [("data", u((2, 4, 5, 5))), ("weight", u((4, 3, 4, 4))), ("bias", u((3,)))])
# No `no_bias`: MXNet's Deconvolution has no bias by default (its Convolution has one).
case("deconv_adj", "Deconvolution",
     {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "adj": (1, 1), "num_filter": 2},
     [("data", u((1, 3, 4, 4))), ("weight", u((3, 2, 3, 3)))])
case("deconv_target", "Deconvolution",
     {"kernel": (3, 3), "stride": (2, 2), "target_shape": (10, 9), "num_filter": 2},
     [("data", u((1, 3, 5, 5))), ("weight", u((3, 2, 3, 3)))])
for conv in ("valid", "full"):
    case("maxpool_" + conv, "Pooling",
         {"kernel": (3, 3), "stride": (2, 2), "pool_type": "max", "pooling_convention": conv},
         [("data", u((2, 3, 8, 8)))])
case("maxpool_pad", "Pooling",
     {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "max"}, [("data", x4())])
for incl in (True, False):
    case("avgpool_pad_%s" % incl, "Pooling",
         {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
          "count_include_pad": incl}, [("data", x4())])
case("avgpool_full", "Pooling",
     {"kernel": (2, 2), "stride": (2, 2), "pool_type": "avg", "pooling_convention": "full"},
     [("data", x4())])
for t in ("max", "avg", "sum"):
    case("global_" + t, "Pooling", {"kernel": (1, 1), "global_pool": True, "pool_type": t},
         [("data", x4())])
for a in ("relu", "sigmoid", "tanh", "softrelu", "softsign"):
    case("act_" + a, "Activation", {"act_type": a}, [("data", u((3, 5)) * 3)])
case("leaky", "LeakyReLU", {"act_type": "leaky", "slope": 0.1}, [("data", u((3, 5)))])
case("elu", "LeakyReLU", {"act_type": "elu", "slope": 0.3}, [("data", u((3, 5)))])
for a in ("selu", "gelu"):
    case(a, "LeakyReLU", {"act_type": a}, [("data", u((3, 5)) * 2)])
case("prelu", "LeakyReLU", {"act_type": "prelu"},
     [("data", u((2, 3, 4))), ("gamma", u((3,), 0.1, 0.5))])
case("prelu_shared", "LeakyReLU", {"act_type": "prelu"},
     [("data", u((2, 3, 2, 2))), ("gamma", u((1,), 0.1, 0.5))])
bn_in = lambda c: [("data", u((2, c, 3, 4)) * 2 + 0.5), ("gamma", u((c,), 0.5, 1.5)),
                   ("beta", u((c,))), ("moving_mean", u((c,))),
                   ("moving_var", u((c,), 0.5, 1.5))]
case("bn_train", "BatchNorm", {"fix_gamma": False, "eps": 1e-4, "momentum": 0.8}, bn_in(3),
     aux=("moving_mean", "moving_var"), train=True)
case("bn_train_fixgamma", "BatchNorm", {}, bn_in(3), aux=("moving_mean", "moving_var"),
     train=True)
case("bn_infer", "BatchNorm", {"fix_gamma": False}, bn_in(3),
     aux=("moving_mean", "moving_var"), no_grad=("data", "gamma", "beta"))
case("bn_global_stats", "BatchNorm", {"fix_gamma": False, "use_global_stats": True}, bn_in(3),
     aux=("moving_mean", "moving_var"), train=True)
case("bn_axis_last", "BatchNorm", {"fix_gamma": False, "axis": -1},
     [("data", u((2, 3, 4)) * 2), ("gamma", u((4,), 0.5, 1.5)), ("beta", u((4,))),
      ("moving_mean", u((4,))), ("moving_var", u((4,), 0.5, 1.5))],
     aux=("moving_mean", "moving_var"), train=True)
ln_in = lambda shape, c: [("data", u(shape) * 2 + 0.3), ("gamma", u((c,), 0.5, 1.5)),
                          ("beta", u((c,)))]
case("layer_norm", "LayerNorm", {}, ln_in((3, 5), 5))
case("layer_norm_axis1", "LayerNorm", {"axis": 1, "eps": 1e-3, "output_mean_var": True},
     ln_in((2, 4, 3), 4))
case("layer_norm_axis0", "LayerNorm", {"axis": 0}, ln_in((4, 3), 4))
case("instance_norm", "InstanceNorm", {}, ln_in((2, 3, 4, 2), 3))
case("instance_norm_eps", "InstanceNorm", {"eps": 1e-5}, ln_in((2, 3, 5), 3))
case("group_norm", "GroupNorm", {"num_groups": 2}, ln_in((2, 4, 3, 2), 2))
case("group_norm_mean_var", "GroupNorm", {"num_groups": 3, "output_mean_var": True},
     ln_in((2, 6, 2), 3))
for mode in ("instance", "channel", "spatial"):
    case("l2norm_" + mode, "L2Normalization", {"mode": mode}, [("data", u((2, 3, 2, 2)))])
case("softmax_activation", "SoftmaxActivation", {}, [("data", u((3, 4)) * 3)])
case("softmax_activation_3d", "SoftmaxActivation", {}, [("data", u((2, 3, 2)) * 3)])
case("softmax_activation_channel", "SoftmaxActivation", {"mode": "channel"},
     [("data", u((2, 3, 2, 2)) * 3)])
case("softmax", "softmax", {"axis": -1}, [("data", u((3, 5)) * 3)])
case("softmax_axis0_temp", "softmax", {"axis": 0, "temperature": 2.0},
     [("data", u((3, 5)) * 3)])
case("log_softmax", "log_softmax", {"axis": 1}, [("data", u((2, 4, 3)) * 3)])
case("softmax_output", "SoftmaxOutput", {},
     [("data", u((4, 5)) * 2), ("label", ints((4,), 5))], no_grad=("label",))
case("softmax_output_scaled", "SoftmaxOutput",
     {"grad_scale": 0.5, "normalization": "batch"},
     [("data", u((4, 5)) * 2), ("label", ints((4,), 5))], no_grad=("label",))
case("softmax_output_ignore", "SoftmaxOutput",
     {"use_ignore": True, "ignore_label": 2, "normalization": "valid", "grad_scale": 2.0},
     [("data", u((5, 4)) * 2), ("label", np.array([0.0, 2.0, 3.0, 2.0, 1.0]))],
     no_grad=("label",))
case("softmax_output_valid", "SoftmaxOutput", {"normalization": "valid"},
     [("data", u((4, 5)) * 2), ("label", ints((4,), 5))], no_grad=("label",))
for r in ("LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"):
    case(r, r, {}, [("data", u((3, 4))), ("label", u((3, 4)))], no_grad=("label",))
    case(r + "_scaled", r, {"grad_scale": 0.7}, [("data", u((4, 1))), ("label", u((4,)))],
         no_grad=("label",))
case("MakeLoss", "MakeLoss", {}, [("data", u((2, 3)))])
case("MakeLoss_batch", "MakeLoss", {"normalization": "batch", "grad_scale": 2.0},
     [("data", u((4, 3)))])
case("MakeLoss_valid", "MakeLoss", {"normalization": "valid", "valid_thresh": 0.2},
     [("data", u((4, 3)))])
case("make_loss", "make_loss", {}, [("data", u((2, 3)))])
case("softmax_cross_entropy", "softmax_cross_entropy", {},
     [("data", u((4, 5)) * 3), ("label", ints((4,), 5))], no_grad=("label",))
case("concat", "Concat", {"dim": 1, "num_args": 2},
     [("a", u((2, 3, 2))), ("b", u((2, 1, 2)))])
case("slice_channel", "SliceChannel", {"num_outputs": 2, "axis": 1},
     [("data", u((2, 4, 3)))])
case("slice_channel_squeeze", "SliceChannel",
     {"num_outputs": 3, "axis": 0, "squeeze_axis": True}, [("data", u((3, 2, 2)))])
case("stack", "stack", {"axis": 1, "num_args": 2}, [("a", u((2, 3))), ("b", u((2, 3)))])
case("transpose", "transpose", {"axes": (2, 0, 1)}, [("data", u((2, 3, 4)))])
case("reshape_codes", "Reshape", {"shape": (0, -1, 2)}, [("data", u((2, 3, 4)))])
case("reshape_split", "Reshape", {"shape": (-4, 1, 2, -2)}, [("data", u((2, 3, 4)))])
case("reshape_merge", "Reshape", {"shape": (-3, -2)}, [("data", u((2, 3, 4)))])
case("reshape_split_infer", "Reshape", {"shape": (-4, -1, 2, -2)}, [("data", u((4, 3, 2)))])
case("reshape_keep_rest", "Reshape", {"shape": (-1, -2)}, [("data", u((2, 3, 4)))])
case("reshape_reverse", "Reshape", {"shape": (0, -1), "reverse": True},
     [("data", u((2, 3, 4)))])
case("flatten", "Flatten", {}, [("data", u((2, 3, 4)))])
case("expand_dims", "expand_dims", {"axis": 1}, [("data", u((2, 3)))])
case("squeeze", "squeeze", {"axis": 1}, [("data", u((2, 1, 3)))])
case("slice", "slice", {"begin": (0, 1), "end": (2, None), "step": (1, 2)},
     [("data", u((3, 6)))])
case("slice_neg", "slice", {"begin": (-2, None), "end": (None, -1)}, [("data", u((3, 6)))])
case("slice_reverse", "slice", {"begin": (None, 4), "end": (None, 0), "step": (-1, -2)},
     [("data", u((3, 6)))])
case("slice_step3", "slice", {"begin": (1,), "end": (None,), "step": (3,)},
     [("data", u((8, 2)))])
case("slice_axis", "slice_axis", {"axis": 1, "begin": 1, "end": -1}, [("data", u((2, 5)))])
case("broadcast_to", "broadcast_to", {"shape": (2, 0, 4)}, [("data", u((1, 3, 1)))])
case("broadcast_axis", "broadcast_axis", {"axis": (0, 2), "size": (3, 2)},
     [("data", u((1, 2, 1)))])
case("broadcast_axes", "broadcast_axes", {"axis": 1, "size": 4}, [("data", u((2, 1)))])
case("broadcast_like", "broadcast_like", {}, [("lhs", u((1, 3))), ("rhs", u((4, 3)))],
     no_grad=("rhs",))
case("broadcast_like_axes", "broadcast_like", {"lhs_axes": (0,), "rhs_axes": (1,)},
     [("lhs", u((1, 3))), ("rhs", u((2, 5)))], no_grad=("rhs",))
case("tile", "tile", {"reps": (2, 1, 3)}, [("data", u((2, 3)))])
case("tile_short", "tile", {"reps": (2,)}, [("data", u((2, 3)))])
case("repeat", "repeat", {"repeats": 3, "axis": 1}, [("data", u((2, 2, 2)))])
case("repeat_flat", "repeat", {"repeats": 2}, [("data", u((2, 3)))])
case("reverse", "reverse", {"axis": (0, 2)}, [("data", u((2, 3, 4)))])
case("flip", "flip", {"axis": 1}, [("data", u((2, 3)))])
case("swapaxis", "SwapAxis", {"dim1": 0, "dim2": 2}, [("data", u((2, 3, 4)))])
case("swapaxes", "swapaxes", {"dim1": 1, "dim2": -1}, [("data", u((2, 3, 4)))])
for mode in ("constant", "edge", "reflect"):
    case("pad_" + mode, "Pad",
         {"mode": mode, "pad_width": (0, 0, 0, 0, 1, 2, 2, 1), "constant_value": 0.5},
         [("data", u((2, 2, 3, 4)))])
case("pad_5d", "pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, 1, 0, 0, 1, 2, 2)},
     [("data", u((1, 2, 2, 3, 2)))])
case("upsampling", "UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 1},
     [("data", u((2, 3, 2, 3)))])
case("depth_to_space", "depth_to_space", {"block_size": 2}, [("data", u((2, 8, 2, 3)))])
case("space_to_depth", "space_to_depth", {"block_size": 2}, [("data", u((1, 3, 4, 6)))])
case("slice_like", "slice_like", {}, [("data", u((3, 4))), ("shape_like", u((2, 3)))],
     no_grad=("shape_like",))
case("slice_like_axes", "slice_like", {"axes": (1,)},
     [("data", u((3, 4))), ("shape_like", u((1, 2)))], no_grad=("shape_like",))
case("clip", "clip", {"a_min": -0.3, "a_max": 0.5}, [("data", u((4, 5)))])
case("where", "where", {},
     [("condition", ints((3, 4), 2)), ("x", u((3, 4))), ("y", u((3, 4)))],
     no_grad=("condition",))
case("take", "take", {"axis": 0}, [("a", u((5, 3))), ("indices", ints((2, 4), 5))],
     no_grad=("indices",))
case("take_clip", "take", {"axis": 1, "mode": "clip"},
     [("a", u((2, 4))), ("indices", np.array([-1.0, 2.0, 7.0]))], no_grad=("indices",))
case("take_wrap_last", "take", {"axis": -1, "mode": "wrap"},
     [("a", u((2, 3, 4))), ("indices", np.array([[5.0, -1.0], [0.0, 3.0]]))],
     no_grad=("indices",))
case("pick", "pick", {"axis": 1}, [("data", u((3, 4))), ("index", ints((3,), 4))],
     no_grad=("index",))
case("pick_keep_wrap", "pick", {"axis": 0, "keepdims": True, "mode": "wrap"},
     [("data", u((3, 2, 2))), ("index", np.array([[[4.0, -1.0], [0.0, 2.0]]]))],
     no_grad=("index",))
case("pick_last_clip", "pick", {},
     [("data", u((2, 3))), ("index", np.array([5.0, -2.0]))], no_grad=("index",))
case("sequence_mask", "SequenceMask", {"use_sequence_length": True, "value": -1.5},
     [("data", u((4, 3, 2))), ("sequence_length", np.array([2.0, 4.0, 0.0]))],
     no_grad=("sequence_length",))
case("sequence_mask_axis1", "SequenceMask", {"use_sequence_length": True, "axis": 1},
     [("data", u((2, 5, 3))), ("sequence_length", np.array([3.0, 1.0]))],
     no_grad=("sequence_length",))
case("sequence_mask_off", "SequenceMask", {}, [("data", u((3, 2)))])
case("topk_value", "topk", {"k": 2, "ret_typ": "value", "axis": 1}, [("data", u((2, 4, 3)))])
case("topk_both", "topk", {"k": 3, "ret_typ": "both"}, [("data", u((2, 5)))])
case("topk_indices_flat", "topk", {"k": 4, "axis": "None", "is_ascend": True},
     [("data", u((2, 3)))], no_grad=("data",))
case("topk_mask", "topk", {"k": 2, "ret_typ": "mask", "axis": 0}, [("data", u((4, 3)))],
     no_grad=("data",))
case("sort", "sort", {"axis": 0, "is_ascend": False}, [("data", u((4, 3)))])
case("argsort", "argsort", {"dtype": "float64"}, [("data", u((3, 5)))], no_grad=("data",))
case("sequence_last", "SequenceLast", {"use_sequence_length": True},
     [("data", u((4, 3, 2))), ("sequence_length", np.array([2.0, 4.0, 1.0]))],
     no_grad=("sequence_length",))
case("sequence_last_axis1", "SequenceLast", {"use_sequence_length": True, "axis": 1},
     [("data", u((2, 5))), ("sequence_length", np.array([3.0, 5.0]))],
     no_grad=("sequence_length",))
case("sequence_last_off", "SequenceLast", {}, [("data", u((3, 2, 2)))])
case("sequence_reverse", "SequenceReverse", {"use_sequence_length": True},
     [("data", u((4, 3, 2))), ("sequence_length", np.array([2.0, 4.0, 1.0]))],
     no_grad=("sequence_length",))
case("sequence_reverse_off", "SequenceReverse", {}, [("data", u((3, 2)))])
case("arange", "_arange", {"start": 1.5, "stop": 4.0, "step": 0.5, "repeat": 2,
                          "dtype": "float64"}, [])
case("arange_stop_only", "_arange", {"start": 5, "dtype": "float64"}, [])
case("arange_down", "_arange", {"start": 3, "stop": -1, "step": -1.5, "dtype": "float64"}, [])
case("embedding", "Embedding", {"input_dim": 6, "output_dim": 3},
     [("data", ints((2, 3), 6)), ("weight", u((6, 3)))], no_grad=("data",))
case("one_hot", "one_hot", {"depth": 4, "on_value": 2.0, "off_value": -1.0},
     [("indices", ints((3,), 4))], no_grad=("indices",))
for ta in (False, True):
    for tb in (False, True):
        a = u((4, 3)) if ta else u((3, 4))
        b = u((5, 4)) if tb else u((4, 5))
        case("dot_%d%d" % (ta, tb), "dot", {"transpose_a": ta, "transpose_b": tb},
             [("a", a), ("b", b)])
case("batch_dot", "batch_dot", {"transpose_b": True}, [("a", u((2, 3, 4))), ("b", u((2, 5, 4)))])
case("batch_dot_ta", "batch_dot", {"transpose_a": True}, [("a", u((2, 4, 3))), ("b", u((2, 4, 5)))])
case("add_n", "add_n", {"num_args": 3}, [("a", u((2, 3))), ("b", u((2, 3))), ("c", u((2, 3)))])
case("argmax", "argmax", {"axis": 1}, [("data", u((3, 5)))], no_grad=("data",))
case("argmax_keep", "argmax", {"axis": 0, "keepdims": True}, [("data", u((3, 5)))],
     no_grad=("data",))
for b in ("broadcast_equal", "broadcast_not_equal", "broadcast_greater",
          "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal"):
    case(b, b, {}, [("a", np.round(u((2, 3)))), ("b", np.round(u((1, 3))))],
         no_grad=("a", "b"))
for c in ("_equal_scalar", "_greater_scalar", "_lesser_scalar"):
    case(c, c, {"scalar": 0.0}, [("data", np.round(u((3, 4))))], no_grad=("data",))
for r in ("sum", "mean", "max", "min"):
    case(r + "_axis", r, {"axis": 1}, [("data", u((2, 3, 4)))])
    case(r + "_keep_exclude", r, {"axis": (0,), "keepdims": True, "exclude": True},
         [("data", u((2, 3, 4)))])
case("prod_axis", "prod", {"axis": 1}, [("data", u((2, 3, 4), 0.5, 1.5))])
case("prod_all", "prod", {}, [("data", u((2, 3), 0.5, 1.5))])
case("norm", "norm", {}, [("data", u((3, 4)))])
case("norm_axis_keep", "norm", {"axis": 1, "keepdims": True}, [("data", u((2, 3, 4)))])
case("norm_l1", "norm", {"ord": 1, "axis": (0, 2)}, [("data", u((2, 3, 4)))])
case("argmin", "argmin", {"axis": 1}, [("data", u((3, 5)))], no_grad=("data",))
case("sum_all", "sum", {}, [("data", u((2, 3)))])
for b in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
          "broadcast_maximum", "broadcast_minimum"):
    case(b, b, {}, [("a", u((2, 1, 4))), ("b", u((3, 1)) + 2.0)])
case("broadcast_power", "broadcast_power", {},
     [("a", u((2, 3), 0.5, 2.0)), ("b", u((1, 3)))])
for e in ("elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"):
    case(e, e, {}, [("a", u((3, 4))), ("b", u((3, 4)) + 2.0)])
for s in ("_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar",
          "_rdiv_scalar", "_maximum_scalar", "_minimum_scalar"):
    case(s, s, {"scalar": 0.3}, [("data", u((3, 4)) + 2.0)])
for c in ("_not_equal_scalar", "_greater_equal_scalar", "_lesser_equal_scalar"):
    case(c, c, {"scalar": 0.0}, [("data", np.round(u((3, 4))))], no_grad=("data",))
case("_rpower_scalar", "_rpower_scalar", {"scalar": 1.7}, [("data", u((3, 4)))])
case("_mod_scalar", "_mod_scalar", {"scalar": 0.7}, [("data", u((3, 4)) * 3)])
case("_mod_scalar_neg", "_mod_scalar", {"scalar": -0.7}, [("data", u((3, 4)) * 3)])
case("_hypot_scalar", "_hypot_scalar", {"scalar": 0.5}, [("data", u((3, 4)))])
for b in ("_maximum", "_minimum", "_hypot"):
    case(b, b, {}, [("a", u((2, 3))), ("b", u((2, 3)))])
case("_power", "_power", {}, [("a", u((2, 3), 0.5, 2.0)), ("b", u((2, 3)))])
case("_mod", "_mod", {}, [("a", u((2, 3)) * 3), ("b", u((2, 3), 0.5, 1.0))])
case("broadcast_mod", "broadcast_mod", {}, [("a", u((2, 3)) * 3), ("b", -u((1, 3), 0.5, 1.0))])
case("broadcast_hypot", "broadcast_hypot", {}, [("a", u((2, 3))), ("b", u((2, 1)))])
for b in ("_equal", "_not_equal", "_greater", "_greater_equal", "_lesser", "_lesser_equal",
          "_logical_and", "_logical_or", "_logical_xor"):
    case(b, b, {}, [("a", np.round(u((2, 3)))), ("b", np.round(u((2, 3))))], no_grad=("a", "b"))
for b in ("broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor"):
    case(b, b, {}, [("a", np.round(u((2, 3)))), ("b", np.round(u((1, 3))))], no_grad=("a", "b"))
case("smooth_l1", "smooth_l1", {"scalar": 1.5}, [("data", u((3, 4)) * 2)])
case("smooth_l1_default", "smooth_l1", {}, [("data", u((3, 4)) * 2)])
case("_power_scalar", "_power_scalar", {"scalar": 2.5}, [("data", u((3, 4), 0.1, 2.0))])
for f in ("abs", "negative", "square", "exp", "tanh", "sigmoid", "relu"):
    case("unary_" + f, f, {}, [("data", u((3, 4)) * 2)])
for f in ("sqrt", "log"):
    case("unary_" + f, f, {}, [("data", u((3, 4), 0.1, 3.0))])
for f in ("sin", "cos", "tan", "arctan", "sinh", "cosh", "arcsinh", "erf", "expm1", "log1p",
          "softsign", "degrees", "radians"):
    case("math_" + f, f, {}, [("data", u((3, 4)) * 0.9)])
for f in ("rsqrt", "reciprocal", "cbrt", "rcbrt", "log2", "log10"):
    case("math_" + f, f, {}, [("data", u((3, 4), 0.2, 2.0))])
for f in ("arcsin", "arccos", "arctanh"):
    case("math_" + f, f, {}, [("data", u((3, 4), -0.9, 0.9))])
case("math_arccosh", "arccosh", {}, [("data", u((3, 4), 1.2, 3.0))])
halves = np.array([[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, 0.3, -0.7], [0.0, 3.49, -3.51, 7.2]])
for f in ("round", "rint", "fix", "trunc", "floor", "ceil", "sign"):
    case("math_" + f, f, {}, [("data", halves)])
case("hard_sigmoid", "hard_sigmoid", {"alpha": 0.3, "beta": 0.4}, [("data", u((3, 5)) * 4)])
case("hard_sigmoid_default", "hard_sigmoid", {}, [("data", u((3, 5)) * 4)])
for f in ("BlockGrad", "stop_gradient", "zeros_like", "ones_like", "identity"):
    case("unit_" + f, f, {}, [("data", u((2, 3)))])
case("cast_f32", "Cast", {"dtype": "float32"}, [("data", u((2, 3)))])
case("cast_i32", "cast", {"dtype": "int32"}, [("data", u((2, 3)) * 5)], no_grad=("data",))
case("dropout_infer", "Dropout", {"p": 0.5}, [("data", u((3, 4)))], no_grad=("data",))



def rnn_case(name, mode, layers, bidir, state_outputs, steps=4, batch=3, inputs=3, hidden=5,
             no_grad=(), **extra):
    """A fused RNN node: data (T, N, I), the flat parameters, the initial state(s)."""
    gates = {"lstm": 4, "gru": 3}.get(mode, 1)
    dirs = 2 if bidir else 1
    count = 0
    for layer in range(layers):
        width = inputs if layer == 0 else dirs * hidden
        count += dirs * gates * hidden * (width + hidden + 2)
    state = (layers * dirs, batch, hidden)
    ins = [("data", u((steps, batch, inputs))), ("parameters", u((count,), -0.5, 0.5)),
           ("state", u(state))]
    if mode == "lstm":
        ins.append(("state_cell", u(state)))
    attrs = {"mode": mode, "state_size": hidden, "num_layers": layers, "bidirectional": bidir,
             "state_outputs": state_outputs}
    attrs.update(extra)
    case(name, "RNN", attrs, ins, no_grad=no_grad)


rnn_case("rnn_lstm_2x2", "lstm", 2, True, True)
rnn_case("rnn_lstm", "lstm", 1, False, False, steps=6)
rnn_case("rnn_gru_2", "gru", 2, False, True)
rnn_case("rnn_gru_bi", "gru", 1, True, False)
rnn_case("rnn_tanh_2x2", "rnn_tanh", 2, True, True, steps=3)
rnn_case("rnn_relu", "rnn_relu", 1, False, True)
rnn_case("rnn_lstm_dropout_infer", "lstm", 2, False, True, p=0.4,
         no_grad=("data", "parameters", "state", "state_cell"))
# Coordinates along the first axes; duplicates add up in gather_nd's gradient. Negative
# coordinates only in a forward case: MXNet 1.9.1 wraps them in gather_nd's forward pass, but its
# _backward_gather_nd writes outside the gradient with them (the process dies of a corrupted
# heap) and its scatter_nd drops them (ours wrap in all three).
case("gather_nd", "gather_nd", {},
     [("data", u((3, 4, 2))), ("indices", np.array([[0, 2, 2, 0], [1, 0, 3, 1]], float))],
     no_grad=("indices",))
case("gather_nd_full", "gather_nd", {},
     [("data", u((2, 3))), ("indices", np.array([[[1, 0], [1, 1]], [[2, 0], [1, 0]]], float))],
     no_grad=("indices",))
case("gather_nd_negative", "gather_nd", {},
     [("data", u((3, 4, 2))), ("indices", np.array([[0, -1, 2], [-4, 3, -2]], float))],
     no_grad=("data", "indices"))
case("scatter_nd", "scatter_nd", {"shape": (4, 3, 2)},
     [("data", u((2, 3, 2))), ("indices", np.array([[3, 0]], float))], no_grad=("indices",))
for name, size, shape in (("adaptive_pool", (3, 2), (2, 3, 7, 5)), ("adaptive_pool_square", 4, (1, 2, 9, 9)),
                          ("adaptive_pool_global", None, (2, 2, 4, 3))):
    case(name, "_contrib_AdaptiveAvgPooling2D", {} if size is None else {"output_size": size},
         [("data", u(shape))])
for name, attrs in (("resize_up", {"height": 7, "width": 9}),
                    ("resize_down_unaligned", {"height": 3, "width": 4, "align_corners": False}),
                    ("resize_up_unaligned", {"height": 8, "width": 11, "align_corners": False}),
                    ("resize_scale", {"scale_height": 1.5, "scale_width": 2.0}),
                    ("resize_odd_scale", {"mode": "odd_scale", "scale_height": 2.0, "scale_width": 1.5}),
                    ("resize_to_even_up", {"mode": "to_even_up"})):
    case(name, "_contrib_BilinearResize2D", attrs, [("data", u((2, 3, 5, 6)))])
case("resize_like", "_contrib_BilinearResize2D", {"mode": "like"},
     [("data", u((2, 3, 5, 6))), ("like", u((2, 3, 4, 9)))])
rois = np.array([[0, 1, 1, 6, 6], [1, 0, 2, 7, 4], [0, 3, 3, 3, 3], [1, 5.2, 0.4, 13, 9]], float)
case("roi_pooling", "ROIPooling", {"pooled_size": (2, 3), "spatial_scale": 1.0},
     [("data", u((2, 3, 8, 8))), ("rois", rois)], no_grad=("rois",))
case("roi_pooling_scaled", "ROIPooling", {"pooled_size": (3, 3), "spatial_scale": 0.5},
     [("data", u((2, 2, 8, 8))), ("rois", rois * [1, 1.5, 1.5, 1.5, 1.5])], no_grad=("rois",))
align_rois = np.array([[0, 1.3, 0.7, 6.2, 5.9], [1, 0, 2, 7.5, 4.1], [0, 3, 3, 3.4, 3.2],
                       [1, -1.5, 5.5, 9, 9.5]], float)
for name, attrs, c in (("roi_align", {}, 3), ("roi_align_aligned", {"aligned": True}, 3),
                       ("roi_align_ratio", {"sample_ratio": 2, "spatial_scale": 0.5}, 3),
                       ("roi_align_ps", {"position_sensitive": True}, 12)):
    full = {"pooled_size": (2, 2), "spatial_scale": 1.0}
    full.update(attrs)
    case(name, "_contrib_ROIAlign", full, [("data", u((2, c, 8, 8))), ("rois", align_rois)],
         no_grad=("rois",))
case("crop", "Crop", {"num_args": 1, "h_w": (3, 4), "offset": (1, 2)}, [("data", u((2, 3, 6, 7)))])
case("crop_center", "Crop", {"num_args": 1, "h_w": (4, 2), "center_crop": True},
     [("data", u((2, 3, 7, 7)))])
case("crop_like", "Crop", {"num_args": 2, "offset": (2, 1)},
     [("data", u((2, 3, 6, 7))), ("crop_like", u((2, 3, 3, 5)))])
for scale in (2, 3):
    k = 2 * scale - scale % 2
    case("upsampling_bilinear_%d" % scale, "UpSampling",
         {"scale": scale, "num_filter": 3, "sample_type": "bilinear", "num_args": 2},
         [("data", u((2, 3, 4, 5))), ("weight", u((3, 1, k, k)))])

def numeric_grad(exe, n, heads, h=1e-6):
    """d(sum_k heads[k] . outputs[k]) / d input n by central differences of MXNet's forward."""
    x = exe.arg_dict[n]
    base = x.asnumpy().copy()
    g = np.zeros_like(base)

    def loss():
        outs = exe.forward(is_train=True)
        return sum(float((o.asnumpy() * hd.asnumpy()).sum()) for o, hd in zip(outs, heads))

    for i in np.ndindex(base.shape):
        for sgn in (1, -1):
            v = base.copy()
            v[i] += sgn * h
            x[:] = v
            g[i] += sgn * loss() / (2 * h)
    x[:] = base
    return g


def run(out):
    saved, meta = {}, []
    for name, op, attrs, inputs, aux, no_grad, train in CASES:
        vars_ = [mx.sym.var(n) for n, _ in inputs]
        make = (getattr(mx.sym.contrib, op[len("_contrib_"):], None) if op.startswith("_contrib_")
                else None) or getattr(mx.sym, op, None) or getattr(mx.sym._internal, op)
        sym = make(*vars_, name="node", **attrs)
        dt = "float32" if op in FLOAT32_ONLY else "float64"
        args = {n: mx.nd.array(v, dtype=dt) for n, v in inputs}
        arg_names = sym.list_arguments()
        grads = [n for n in arg_names if n not in no_grad]
        types = {n: dt for n in arg_names}
        exe = sym.simple_bind(mx.cpu(), type_dict=types,
                              grad_req={n: ("write" if n in grads else "null")
                                        for n in arg_names} or "null",
                              **{n: v.shape for n, v in inputs if n not in aux})
        for n, v in args.items():
            (exe.aux_dict if n in aux else exe.arg_dict)[n][:] = v
        outs = exe.forward(is_train=True if grads or train else False)
        outs = [o.asnumpy() for o in outs]
        for n, v in args.items():
            saved["%s/in/%s" % (name, n)] = v
        for k, o in enumerate(outs):
            saved["%s/out/%d" % (name, k)] = mx.nd.array(o, dtype=o.dtype)
        heads = [mx.nd.array(u(o.shape), dtype=o.dtype) for o in outs]
        if grads:
            exe.backward(out_grads=heads)
            for k, h in enumerate(heads):
                saved["%s/head/%d" % (name, k)] = h
            for n in grads:
                g = exe.grad_dict[n].asnumpy()
                if name in MXNET_GRAD_WRONG:
                    g = numeric_grad(exe, n, heads)
                if name in MXNET_GRAD_DERIVED:
                    g = MXNET_GRAD_DERIVED[name](outs[0], heads[0].asnumpy())
                saved["%s/grad/%s" % (name, n)] = mx.nd.array(g, dtype=dt)
        for n in aux:
            saved["%s/aux_after/%s" % (name, n)] = mx.nd.array(
                exe.aux_dict[n].asnumpy(), dtype=dt)
        meta.append({"name": name, "op": op, "attrs": attrs,
                     "inputs": [n for n, _ in inputs], "aux": sorted(aux),
                     "grads": grads, "outputs": len(outs), "train": bool(grads or train),
                     "grad_source": "numeric" if name in MXNET_GRAD_WRONG else
                     "derived" if name in MXNET_GRAD_DERIVED else "mxnet"})
    mx.nd.save(os.path.join(out, "ops64.nd"), saved)
    with open(os.path.join(out, "ops64.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(len(meta), "cases")


if __name__ == "__main__":
    run(sys.argv[1])
