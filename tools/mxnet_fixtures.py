"""Writes the MXNet-made fixtures that ndarray_ops/tests/mxnet_files.rs reads.

    python3 -m venv /tmp/mxv && /tmp/mxv/bin/pip install numpy==1.23.5 mxnet==1.9.1
    /tmp/mxv/bin/python tools/mxnet_fixtures.py ndarray_ops/tests/data/mxnet

Two things come out of MXNet 1.9.1 itself, so that the Rust side is checked against the real
implementation rather than against our reading of it:

* dtypes.nd: mx.nd.save of a dict with one array of every element type the runtime has, with
  values the test recomputes (k * 0.5 - 3 for element k, cast to the type);
* net-symbol.json / net-0001.params: a small convolutional net with two BatchNorms (one with
  fix_gamma), max and global average pooling, a residual add, a fully connected layer and
  softmax, saved by Module.save_checkpoint with random weights and running statistics;
* net-expected.nd: for a fixed input, MXNet's inference output, and then one training step:
  the training-mode output, the gradient of every argument (data included) for a fixed head
  gradient, and the auxiliary states after the step (BatchNorm's running statistics).

With --check DIR, instead loads the files the Rust tests wrote into DIR (written by
`cargo test -p ndarray_ops --test mxnet_files` with MXRS_WRITE_FOR_MXNET=DIR) and checks that
MXNet reads them back with the values the test put in.
"""

import os
import sys

import mxnet as mx
import numpy as np

SHAPE = (2, 3, 12, 12)


def values(n, dtype):
    return (np.arange(n) * 0.5 - 3).astype(dtype)


def dtypes(out):
    arrays = {
        "f32": values(24, np.float32).reshape(2, 3, 4),
        "f64": values(5, np.float64),
        "i32": values(6, np.int32).reshape(3, 2),
        "i64": values(4, np.int64).reshape(1, 4),
        "u8": np.arange(7, dtype=np.uint8) * 37,
    }
    mx.nd.save(os.path.join(out, "dtypes.nd"),
               {k: mx.nd.array(v, dtype=v.dtype) for k, v in arrays.items()})


def net():
    data = mx.sym.var("data")
    c0 = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv0")
    b0 = mx.sym.BatchNorm(c0, fix_gamma=False, eps=1e-5, name="bn0")
    r0 = mx.sym.Activation(b0, act_type="relu", name="relu0")
    p0 = mx.sym.Pooling(r0, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    c1 = mx.sym.Convolution(p0, num_filter=8, kernel=(3, 3), pad=(1, 1), no_bias=True,
                            name="conv1")
    b1 = mx.sym.BatchNorm(c1, name="bn1")  # fix_gamma defaults to True
    s1 = mx.sym.elemwise_add(b1, p0, name="add1")
    r1 = mx.sym.Activation(s1, act_type="tanh", name="tanh1")
    gp = mx.sym.Pooling(r1, global_pool=True, pool_type="avg", kernel=(1, 1), name="gap")
    fl = mx.sym.Flatten(gp, name="flat")
    fc = mx.sym.FullyConnected(fl, num_hidden=10, name="fc")
    return mx.sym.softmax(fc, name="prob")


def checkpoint(out):
    rng = np.random.RandomState(0)
    sym = net()
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.init_params(mx.init.Xavier(magnitude=2.0))
    args, aux = mod.get_params()
    for name in sorted(args):
        args[name] = mx.nd.array(rng.uniform(-0.5, 0.5, args[name].shape))
    for name in sorted(aux):
        low = 0.5 if name.endswith("var") else -0.3
        aux[name] = mx.nd.array(rng.uniform(low, low + 1.0, aux[name].shape))
    mod.set_params(args, aux)
    mod.save_checkpoint(os.path.join(out, "net"), 1)

    x = mx.nd.array(rng.uniform(-1, 1, SHAPE))
    head = mx.nd.array(rng.uniform(-1, 1, (SHAPE[0], 10)))
    expected = {"data": x, "head_grad": head}
    exe = sym.simple_bind(mx.cpu(), data=SHAPE, grad_req="write")
    for name, a in args.items():
        a.copyto(exe.arg_dict[name])
    for name, a in aux.items():
        a.copyto(exe.aux_dict[name])
    x.copyto(exe.arg_dict["data"])
    # Copied out synchronously: MXNet 1.9.1's `.copy()` of an executor output taken before the
    # next forward was seen to hold that next forward's values.
    snap = lambda a: mx.nd.array(a.asnumpy())
    expected["infer:prob"] = snap(exe.forward(is_train=False)[0])
    expected["train:prob"] = snap(exe.forward(is_train=True)[0])
    exe.backward(out_grads=[head])
    for name, g in exe.grad_dict.items():
        expected["grad:" + name] = snap(g)
    for name, a in exe.aux_dict.items():
        expected["aux_after:" + name] = snap(a)
    mx.nd.save(os.path.join(out, "net-expected.nd"), expected)


def check(dirname):
    """What the Rust tests wrote: the same dtypes file, and a checkpoint of the net."""
    got = mx.nd.load(os.path.join(dirname, "dtypes-from-rust.nd"))
    want = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
    for k, t in want.items():
        a = got[k].asnumpy()
        assert a.dtype == t, (k, a.dtype)
        assert np.array_equal(a.ravel(), values(a.size, t)), k
    assert np.array_equal(got["u8"].asnumpy(), np.arange(7, dtype=np.uint8) * 37)
    sym, args, aux = mx.model.load_checkpoint(os.path.join(dirname, "net-from-rust"), 1)
    exe = sym.simple_bind(mx.cpu(), data=SHAPE, grad_req="null")
    for name, a in args.items():
        a.copyto(exe.arg_dict[name])
    for name, a in aux.items():
        a.copyto(exe.aux_dict[name])
    expected = mx.nd.load(os.path.join(dirname, "net-expected-from-rust.nd"))
    expected["data"].copyto(exe.arg_dict["data"])
    out = exe.forward(is_train=False)[0].asnumpy()
    np.testing.assert_allclose(out, expected["prob"].asnumpy(), rtol=1e-5, atol=1e-6)
    print("MXNet", mx.__version__, "read the Rust files:", sorted(got), len(args), "args,",
          len(aux), "aux; outputs agree")


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        os.makedirs(sys.argv[1], exist_ok=True)
        dtypes(sys.argv[1])
        checkpoint(sys.argv[1])
