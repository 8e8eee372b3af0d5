"""Writes the MXNet-made fixtures that ndarray_ops/tests/mxnet_files.rs reads.

    python3 -m venv /tmp/mxv && /tmp/mxv/bin/pip install numpy==1.23.5 mxnet==1.9.1
    /tmp/mxv/bin/python tools/mxnet_fixtures.py ndarray_ops/tests/data/mxnet

What comes out of MXNet 1.9.1 itself, so that the Rust side is checked against the real
implementation rather than against our reading of it:

* dtypes.nd: mx.nd.save of a dict with one array of every element type the runtime has, with
  values the test recomputes (k * 0.5 - 3 for element k, cast to the type);
* net-symbol.json / net-0001.params: a small convolutional net with two BatchNorms (one with
  fix_gamma), max and global average pooling, a residual add, a fully connected layer and
  softmax, saved by mx.model.save_checkpoint with random weights and running statistics, and
  net64-* the same in float64 (where the two implementations must agree to rounding);
* block64-*: a transformer encoder block (LayerNorm, attention through batch_dot and softmax,
  an ELU feed-forward) in float64, with its expected outputs and gradients as for the net;
* optim64.nd: one step of sgd_update, sgd_mom_update and adam_update in float64, with and
  without gradient clipping, with their inputs;
* net-expected.nd (net64-expected.nd): for a fixed input, MXNet's inference output, and then one training step:
  the training-mode output, the gradient of every argument (data included) for a fixed head
  gradient, and the auxiliary states after the step (BatchNorm's running statistics);
* lm-symbol.json / lm-0000.params / lm-expected.nd / lm-shapes.json: a word language model as
  Gluon exports it (Embedding, two LSTMCells unrolled over 5 steps with `_zeros` begin states of
  shape (0, 24) whose batch MXNet infers from their consumers, Dropout, a Dense head), its
  weights, MXNet's output and one training step's gradients for fixed token ids, and the shape
  MXNet infers for every internal output from the data shape alone. `--gluon-lm OUT` writes
  only these.

With --models GRAPHS OUT DTYPE [NAME...], writes the same for the real graphs (`graphs/*-symbol.json`, batch 2,
random weights, float32 or float64) into OUT, too large to commit: MXRS_MXNET_MODELS=OUT cargo test --release -p
ndarray_ops --test mxnet_files -- --ignored compares them.

With --check DIR, instead loads the files the Rust tests wrote into DIR (written by
`cargo test -p ndarray_ops --test mxnet_files` with MXRS_WRITE_FOR_MXNET=DIR) and checks that
MXNet reads them back with the values the test put in.
"""

import json
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


BLOCK_SHAPE = (2, 5, 8)


def block():
    """A transformer encoder block (pre-norm, two heads of 4): LayerNorm, position-wise
    FullyConnected, split, Reshape with its special codes, transpose, batch_dot, scaled softmax
    attention, residual adds, and an ELU feed-forward (MXNet computes GELU's and SELU's
    constants in float, which float64 would show)."""
    x = mx.sym.var("data")
    h = mx.sym.LayerNorm(x, name="ln0")
    qkv = mx.sym.FullyConnected(h, num_hidden=24, flatten=False, name="qkv")
    q, k, v = mx.sym.split(qkv, num_outputs=3, axis=-1, name="split")

    def heads(t, n):  # (b, s, 8) -> (b * 2, s, 4)
        t = mx.sym.reshape(t, shape=(0, 0, 2, 4), name=n + "_r")
        t = mx.sym.transpose(t, axes=(0, 2, 1, 3), name=n + "_t")
        return mx.sym.reshape(t, shape=(-3, -2), name=n + "_h")

    scores = mx.sym.batch_dot(heads(q, "q"), heads(k, "k"), transpose_b=True, name="scores")
    att = mx.sym.softmax(scores / 2.0, axis=-1, name="att")
    ctx = mx.sym.batch_dot(att, heads(v, "v"), name="ctx")
    ctx = mx.sym.reshape(ctx, shape=(-4, -1, 2, -2), name="ctx_r")
    ctx = mx.sym.transpose(ctx, axes=(0, 2, 1, 3), name="ctx_t")
    ctx = mx.sym.reshape(ctx, shape=(0, 0, -3), name="ctx_m")
    x1 = mx.sym.elemwise_add(x, mx.sym.FullyConnected(ctx, num_hidden=8, flatten=False,
                                                      name="proj"), name="res0")
    f = mx.sym.FullyConnected(mx.sym.LayerNorm(x1, name="ln1"), num_hidden=16, flatten=False,
                              name="ff1")
    f = mx.sym.LeakyReLU(f, act_type="elu", slope=0.5, name="act")
    f = mx.sym.FullyConnected(f, num_hidden=8, flatten=False, name="ff2")
    return mx.sym.elemwise_add(x1, f, name="out")


def checkpoint(out, name, dtype, sym=None, shape=SHAPE):
    rng = np.random.RandomState(0)
    sym = sym if sym is not None else net()
    args, aux = {}, {}
    arg_shapes, _, aux_shapes = sym.infer_shape(data=shape)
    for n, s in sorted(zip(sym.list_arguments(), arg_shapes)):
        if n != "data":
            args[n] = mx.nd.array(rng.uniform(-0.5, 0.5, s), dtype=dtype)
    for n, s in sorted(zip(sym.list_auxiliary_states(), aux_shapes)):
        low = 0.5 if n.endswith("var") else -0.3
        aux[n] = mx.nd.array(rng.uniform(low, low + 1.0, s), dtype=dtype)
    prefix = os.path.join(out, name)
    mx.model.save_checkpoint(prefix, 1, sym, args, aux)
    expected(sym, args, aux, shape, rng, prefix + "-expected.nd", True, dtype)


def expected(sym, args, aux, shape, rng, path, train, dtype="float32"):
    """Runs `sym` with these weights on a random input and saves what it computed: the input,
    the inference output and, with `train`, one training step's output, the gradients of every
    argument for a random head gradient, and the auxiliary states after it."""
    x = mx.nd.array(rng.uniform(-1, 1, shape), dtype=dtype)
    exe = sym.simple_bind(mx.cpu(), data=shape, grad_req="write" if train else "null",
                          type_dict={n: dtype for n in sym.list_arguments()})
    for name, a in args.items():
        a.copyto(exe.arg_dict[name])
    for name, a in aux.items():
        a.copyto(exe.aux_dict[name])
    x.copyto(exe.arg_dict["data"])
    # Copied out synchronously: MXNet 1.9.1's `.copy()` of an executor output taken before the
    # next forward was seen to hold that next forward's values.
    snap = lambda a: mx.nd.array(a.asnumpy(), dtype=a.dtype)
    saved = {"data": x, "infer:output": snap(exe.forward(is_train=False)[0])}
    if train:
        saved["train:output"] = snap(exe.forward(is_train=True)[0])
        head = mx.nd.array(rng.uniform(-1, 1, exe.outputs[0].shape), dtype=dtype)
        saved["head_grad"] = head
        exe.backward(out_grads=[head])
        for name, g in exe.grad_dict.items():
            saved["grad:" + name] = snap(g)
        for name, a in exe.aux_dict.items():
            saved["aux_after:" + name] = snap(a)
    mx.nd.save(path, saved)


LM_SHAPE = (5, 4)  # (steps, batch) of token ids


def gluon_lm(out):
    """A Gluon word language model exported as Gluon writes it, with MXNet's results on it."""
    from mxnet import gluon
    from mxnet.gluon import nn, rnn

    class LM(gluon.HybridBlock):
        def __init__(self, vocab=50, emb=16, hidden=24, layers=2, **kw):
            super().__init__(**kw)
            with self.name_scope():
                self.embed = nn.Embedding(vocab, emb)
                self.cells = rnn.HybridSequentialRNNCell()
                for _ in range(layers):
                    self.cells.add(rnn.LSTMCell(hidden))
                self.drop = nn.Dropout(0.2)
                self.out = nn.Dense(vocab, flatten=False)

        def hybrid_forward(self, F, x):
            outs, _ = self.cells.unroll(LM_SHAPE[0], self.embed(x), layout="TNC",
                                        merge_outputs=True)
            return self.out(self.drop(outs))

    mx.random.seed(0)
    rng = np.random.RandomState(0)
    net = LM(prefix="lm_")
    net.initialize(mx.init.Uniform(0.3))
    net.hybridize()
    x = mx.nd.array(rng.randint(0, 50, LM_SHAPE), dtype="float32")
    net(x)
    prefix = os.path.join(out, "lm")
    net.export(prefix)
    sym = mx.sym.load(prefix + "-symbol.json")
    internals = sym.get_internals()
    _, shapes, _ = internals.infer_shape(data=LM_SHAPE)
    with open(prefix + "-shapes.json", "w") as f:
        json.dump({"data": list(LM_SHAPE),
                   "outputs": dict(zip(internals.list_outputs(), [list(s) for s in shapes]))},
                  f, indent=0, sort_keys=True)
    params = mx.nd.load(prefix + "-0000.params")
    args = {k[4:]: v for k, v in params.items() if k.startswith("arg:")}
    grads = {n: ("null" if n == "data" else "write") for n in sym.list_arguments()}
    exe = sym.simple_bind(mx.cpu(), data=LM_SHAPE, grad_req=grads)
    for name, a in args.items():
        a.copyto(exe.arg_dict[name])
    x.copyto(exe.arg_dict["data"])
    snap = lambda a: mx.nd.array(a.asnumpy(), dtype=a.dtype)
    saved = {"data": x, "infer:output": snap(exe.forward(is_train=False)[0])}
    head = mx.nd.array(rng.uniform(-1, 1, exe.outputs[0].shape), dtype="float32")
    saved["head_grad"] = head
    # Training mode draws dropout masks; the gradients are taken in inference mode so that
    # both sides compute the same function (dropout is the identity there).
    exe.forward(is_train=False)
    exe.backward(out_grads=[head])
    for name, g in exe.grad_dict.items():
        if name != "data":
            saved["grad:" + name] = snap(g)
    mx.nd.save(prefix + "-expected.nd", saved)


def models(graphs, out, dtype, only=None):
    """The real graphs with random weights (He-scaled, BatchNorm statistics near their
    defaults), batch 2, in `dtype`; VGG-16 (dropout) in inference only. In float32 the training
    step is ill-conditioned (BatchNorm over a batch of 2 divides by small deviations): MXNet with
    and without MKLDNN differ by up to 4% of a gradient's largest magnitude; in float64 they
    agree to 1e-10, and so can we."""
    for name, train in [("mlp", True), ("resnet18_v1", True), ("mobilenet1.0", True),
                        ("resnet50_v1", True), ("vgg16", False)]:
        if only and name not in only:
            continue
        rng = np.random.RandomState(1)
        with open(os.path.join(graphs, name + "-symbol.json")) as f:
            graph = json.load(f)
        # The files pin every variable to float32 (`__dtype__`); other dtypes drop the pin.
        if dtype != "float32":
            for node in graph["nodes"]:
                node.get("attrs", {}).pop("__dtype__", None)
        sym = mx.sym.load_json(json.dumps(graph))
        with open(os.path.join(graphs, name + "-shapes.json")) as f:
            shape = tuple([2] + json.load(f)["data"][1:])
        arg_shapes, _, aux_shapes = sym.infer_shape(data=shape)
        args, aux = {}, {}
        for n, s in zip(sym.list_arguments(), arg_shapes):
            if n == "data":
                continue
            if n.endswith("weight"):
                fan_in = int(np.prod(s[1:]))
                v = rng.normal(0, np.sqrt(2.0 / fan_in), s)
            elif n.endswith("gamma"):
                v = rng.uniform(0.5, 1.5, s)
            else:
                v = rng.uniform(-0.1, 0.1, s)
            args[n] = mx.nd.array(v, dtype=dtype)
        for n, s in zip(sym.list_auxiliary_states(), aux_shapes):
            low = 0.5 if n.endswith("var") else -0.1
            aux[n] = mx.nd.array(rng.uniform(low, low + (1.0 if low > 0 else 0.2), s), dtype=dtype)
        prefix = os.path.join(out, name)
        mx.model.save_checkpoint(prefix, 0, sym, args, aux)
        expected(sym, args, aux, shape, rng, prefix + "-expected.nd", train, dtype)
        print(name, shape, "saved")


def optimizers(out):
    """One step of each optimizer update in float64, with and without gradient clipping:
    inputs and MXNet's results (optim64.nd)."""
    rng = np.random.RandomState(2)
    f64 = lambda v: mx.nd.array(v, dtype="float64")
    n = 200
    saved = {
        "weight": f64(rng.uniform(-1, 1, n)),
        "grad": f64(rng.uniform(-3, 3, n)),
        "mom": f64(rng.uniform(-0.1, 0.1, n)),
        "mean": f64(rng.uniform(-0.1, 0.1, n)),
        "var": f64(rng.uniform(0, 0.1, n)),
    }
    common = dict(lr=0.1, wd=1e-4, rescale_grad=1.0 / 32)
    for clip in (-1.0, 0.05):
        tag = "clip" if clip > 0 else "noclip"
        w = saved["weight"].copy()
        mx.nd.sgd_update(w, saved["grad"], clip_gradient=clip, out=w, **common)
        saved["sgd_%s:weight" % tag] = w
        w, m = saved["weight"].copy(), saved["mom"].copy()
        mx.nd.sgd_mom_update(w, saved["grad"], m, momentum=0.9, clip_gradient=clip, out=w,
                             **common)
        saved["sgd_mom_%s:weight" % tag], saved["sgd_mom_%s:mom" % tag] = w, m
        w, mean, var = saved["weight"].copy(), saved["mean"].copy(), saved["var"].copy()
        mx.nd.adam_update(w, saved["grad"], mean, var, beta1=0.9, beta2=0.999, epsilon=1e-8,
                          clip_gradient=clip, out=w, **common)
        saved["adam_%s:weight" % tag] = w
        saved["adam_%s:mean" % tag], saved["adam_%s:var" % tag] = mean, var
    mx.nd.save(os.path.join(out, "optim64.nd"),
               {k: mx.nd.array(v.asnumpy(), dtype="float64") for k, v in saved.items()})


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
    np.testing.assert_allclose(out, expected["output"].asnumpy(), rtol=1e-5, atol=1e-6)
    print("MXNet", mx.__version__, "read the Rust files:", sorted(got), len(args), "args,",
          len(aux), "aux; outputs agree")


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    elif sys.argv[1] == "--gluon-lm":
        os.makedirs(sys.argv[2], exist_ok=True)
        gluon_lm(sys.argv[2])
    elif sys.argv[1] == "--models":
        os.makedirs(sys.argv[3], exist_ok=True)
        models(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    else:
        os.makedirs(sys.argv[1], exist_ok=True)
        dtypes(sys.argv[1])
        checkpoint(sys.argv[1], "net", "float32")
        checkpoint(sys.argv[1], "net64", "float64")
        checkpoint(sys.argv[1], "block64", "float64", block(), BLOCK_SHAPE)
        optimizers(sys.argv[1])
        gluon_lm(sys.argv[1])
