//! Whole programs and properties on the GPU back end: dropout masks, in-place outputs, every
//! model op having a kernel, training graphs, generators, the RNN's kept state, refused indices.

use super::*;

/// Dropout on the emulated GPU in training: every mask entry is 0 or 1 / (1 - p), the output is
/// the data times the mask, about p of the entries are dropped, and the seed decides the mask.
#[test]
pub(super) fn dropout_masks_hold_the_cpus_values_at_the_rate_asked() {
    let lib = kernels().expect("a C++ compiler builds the kernels");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let rng = &mut StdRng::seed_from_u64(5);
    let n = 20_000;
    let data = rt
        .from_vec(random(rng, &[n]).1, &[n], Context::cpu(0))
        .expect("data");
    let run_with = |seed: u64, p: f64| {
        let outs: Vec<NDArray> = (0..2)
            .map(|_| rt.empty(&[n], DType::F32, Context::cpu(0)).expect("out"))
            .collect();
        rt.wait_all().expect("ready");
        let attrs = Attrs::new()
            .with("p", p)
            .with(IS_TRAIN, true)
            .with(crate::ops::gpu::nn::SEED, seed);
        let def = lookup("Dropout").expect("registered");
        let kernel = def.gpu.expect("gpu kernel");
        let stream = HostStream::new(lib);
        let mut ins = vec![data.tensor()];
        let o: Vec<_> = outs.iter().map(NDArray::tensor).collect();
        run(
            def,
            kernel,
            def.alias_safe,
            &attrs,
            &mut ins,
            &o,
            &stream,
            None,
        )
        .expect("dropout");
        let read = |a: &NDArray| a.to_vec::<f32>().expect("read");
        (read(&outs[0]), read(&outs[1]))
    };
    let x = data.to_vec::<f32>().expect("read");
    for p in [0.1, 0.5, 0.9] {
        let (y, mask) = run_with(1, p);
        // MXNet's p is a float, as the CPU kernel reads it.
        let keep = (1.0 / (1.0 - f64::from(p as f32))) as f32;
        assert!(
            mask.iter().all(|&m| m == 0.0 || m == keep),
            "p={p}: mask values"
        );
        assert!(y.iter().zip(&x).zip(&mask).all(|((y, x), m)| *y == x * m));
        let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / n as f64;
        // The count is binomial: its standard deviation is at most 0.0036 here.
        assert!((dropped - p).abs() < 0.02, "p={p}: dropped {dropped}");
    }
    assert_eq!(
        run_with(9, 0.5).1,
        run_with(9, 0.5).1,
        "same seed, same mask"
    );
    assert_ne!(
        run_with(9, 0.5).1,
        run_with(10, 0.5).1,
        "another seed, another mask"
    );
}

/// Runs `op` on the emulated GPU with output 0 in input 0's memory, as an in-place plan or an
/// `out=` call makes it; the CPU kernel on separate memory is the reference.
pub(super) fn check_in_place(op: &str, attrs: &Attrs, inputs: &[Input]) {
    let lib = kernels().expect("a C++ compiler builds the kernels");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let want = cpu_outputs(op, attrs, inputs);
    let gpu_in = arrays(&rt, inputs);
    // Outputs after the first in fresh memory.
    let rest: Vec<NDArray> = want[1..]
        .iter()
        .map(|(s, _)| rt.empty(s, DType::F32, Context::cpu(0)).expect("output"))
        .collect();
    rt.wait_all().expect("ready");
    let def = lookup(op).expect("registered");
    let mut ins: Vec<_> = gpu_in.iter().map(NDArray::tensor).collect();
    let mut outs = vec![ins[0].clone()];
    outs.extend(rest.iter().map(NDArray::tensor));
    let kernel = def.gpu.expect("gpu kernel");
    run(
        def,
        kernel,
        def.alias_safe,
        attrs,
        &mut ins,
        &outs,
        &HostStream::new(lib),
        None,
    )
    .expect("run");
    close(
        op,
        &gpu_in[0].to_vec::<f32>().expect("read"),
        &want[0].1,
        1e-5,
    );
    for (k, (got, (_, want))) in rest.iter().zip(&want[1..]).enumerate() {
        let what = format!("{op} output {}", k + 1);
        close(&what, &got.to_vec::<f32>().expect("read"), want, 1e-5);
    }
}

#[test]
pub(super) fn outputs_in_an_inputs_memory_give_the_same_result() {
    let rng = &mut StdRng::seed_from_u64(11);
    // Kernels that handle an output on their input (each index reads before it writes).
    check_in_place(
        "elemwise_add",
        &Attrs::new(),
        &[random(rng, &[3, 4]), random(rng, &[3, 4])],
    );
    check_in_place(
        "add_n",
        &Attrs::new(),
        &(0..12).map(|_| random(rng, &[3, 4])).collect::<Vec<_>>(),
    );
    // prelu's gradient over its output's gradient: gamma's gradient reads it first.
    check_in_place(
        "_backward_LeakyReLU",
        &Attrs::new().with("act_type", "prelu"),
        &[
            random(rng, &[2, 3, 4]),
            random(rng, &[2, 3, 4]),
            random(rng, &[3]),
        ],
    );
    // A kernel that does not (rows are read after they are written): its input is moved aside.
    check_in_place(
        "SoftmaxOutput",
        &Attrs::new(),
        &[random(rng, &[3, 4]), labels(rng, 3, 4)],
    );
}

#[test]
pub(super) fn the_model_ops_all_have_gpu_kernels() {
    // Every op of the train_digits networks, ResNet, VGG and a transformer block, forward and
    // backward, and what the trainer and the gradient pass add.
    let ops = [
        "Convolution",
        "_backward_Convolution",
        "BatchNorm",
        "_backward_BatchNorm",
        "Activation",
        "_backward_Activation",
        "Pooling",
        "_backward_Pooling",
        "Flatten",
        "FullyConnected",
        "_backward_FullyConnected",
        "SoftmaxOutput",
        "_backward_SoftmaxOutput",
        "elemwise_add",
        "broadcast_add",
        "add_n",
        "_copy",
        "_CrossDeviceCopy",
        "sgd_mom_update",
        "sgd_update",
        "_zeros",
        // VGG's and a transformer block's.
        "Dropout",
        "softmax",
        "_backward_softmax",
        "LayerNorm",
        "_backward_LayerNorm",
        "transpose",
        "batch_dot",
        "SliceChannel",
        "Concat",
        "LeakyReLU",
        "_backward_LeakyReLU",
    ];
    for op in ops {
        assert!(lookup(op).expect("registered").gpu.is_some(), "{op}");
    }
    let without: Vec<_> = crate::ops::op_names()
        .into_iter()
        .filter(|op| {
            lookup(op).expect("registered").gpu.is_none() && !crate::ops::fused::is_fused(op)
        })
        .collect();
    assert!(without.is_empty(), "ops without a GPU kernel: {without:?}");
    let add = lookup("elemwise_add").expect("registered");
    let f64_add = gpu_check(add, [DType::F64; 3]);
    assert_eq!(
        f64_add.err().as_deref(),
        Some("elemwise_add: GPU kernels take float32 arrays, got float64")
    );
}

#[test]
pub(super) fn every_op_of_the_shared_models_and_a_transformer_block_trains_on_the_gpu() {
    // The training graph (outputs and every argument's gradient) of each model in `graphs/`, of
    // MXNet's transformer block fixture and of train_digits' LSTM: each op has a GPU kernel
    // taking its attributes.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let files = ["mlp", "resnet18_v1", "resnet50_v1", "mobilenet1.0", "vgg16"]
        .map(|m| format!("{root}/graphs/{m}-symbol.json"))
        .into_iter()
        .chain([
            format!("{root}/ndarray_ops/tests/data/mxnet/block64-symbol.json"),
            // train_digits' LSTM, as `train_digits --save` writes it.
            format!("{root}/ndarray_ops/tests/data/digits_lstm-symbol.json"),
        ]);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let sym = crate::Symbol::from_json(&text).expect("graph");
        let ops = training_ops_on_the_gpu(&file, &sym);
        assert!(ops.len() > 2, "{file}: {ops:?}");
    }
}

/// The ops of `sym`'s training graph (outputs and every argument's gradient), each checked to
/// have a GPU kernel.
pub(super) fn training_ops_on_the_gpu(what: &str, sym: &crate::Symbol) -> BTreeSet<&'static str> {
    let args = sym.list_arguments();
    let train = crate::symbol::gradient(sym, &args).expect("gradient graph");
    let mut ops = BTreeSet::new();
    for node in train.indexed().nodes {
        if let Some(def) = node.op {
            if let Err(e) = gpu_check(def, [DType::F32]) {
                panic!("{what}: node {}: {e}", node.name);
            }
            ops.insert(def.name);
        }
    }
    ops
}

/// The GPU's uniform and normal generators: values in range, the moments and the share within
/// one deviation of the mean as the distributions have them, the same seed the same numbers,
/// another seed others.
#[test]
pub(super) fn random_generators_draw_their_distributions_from_the_seed() {
    let lib = kernels().expect("a C++ compiler builds the kernels");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let n = 20_000;
    let draw = |op: &str, seed: u64, a: f64, b: f64| -> Vec<f64> {
        let out = rt.empty(&[n], DType::F32, Context::cpu(0)).expect("out");
        rt.wait_all().expect("ready");
        let (ka, kb) = match op {
            "_random_uniform" => ("low", "high"),
            _ => ("loc", "scale"),
        };
        let attrs = Attrs::new()
            .with("shape", format!("({n},)"))
            .with(ka, a)
            .with(kb, b)
            .with(crate::ops::gpu::nn::SEED, seed);
        let def = lookup(op).expect("registered");
        let kernel = def.gpu.expect("gpu kernel");
        let stream = HostStream::new(lib);
        run(
            def,
            kernel,
            def.alias_safe,
            &attrs,
            &mut [],
            &[out.tensor()],
            &stream,
            None,
        )
        .expect(op);
        let v = out.to_vec::<f32>().expect("read");
        v.into_iter().map(f64::from).collect()
    };
    let moments = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var)
    };
    let u = draw("_random_uniform", 3, -2.0, 3.0);
    assert!(u.iter().all(|x| (-2.0..3.0).contains(x)), "uniform range");
    let (mean, var) = moments(&u);
    // Standard errors here: the mean's 0.010, the variance's 0.013.
    assert!((mean - 0.5).abs() < 0.05, "uniform mean {mean}");
    assert!((var - 25.0 / 12.0).abs() < 0.07, "uniform variance {var}");
    let z = draw("_random_normal", 3, 1.0, 2.0);
    let (mean, var) = moments(&z);
    assert!((mean - 1.0).abs() < 0.07, "normal mean {mean}");
    assert!((var - 4.0).abs() < 0.2, "normal variance {var}");
    let within = z.iter().filter(|x| (*x - 1.0).abs() < 2.0).count() as f64 / n as f64;
    assert!(
        (within - 0.6827).abs() < 0.02,
        "normal within one deviation {within}"
    );
    assert_eq!(
        draw("_random_normal", 8, 0.0, 1.0),
        draw("_random_normal", 8, 0.0, 1.0)
    );
    assert_ne!(
        draw("_random_uniform", 8, 0.0, 1.0),
        draw("_random_uniform", 9, 0.0, 1.0)
    );
}

#[test]
pub(super) fn segmentation_and_sequence_graphs_train_on_the_gpu() {
    // Graphs built of the ops the shared models lack: an encoder-decoder with Deconvolution,
    // bilinear UpSampling, skip connections through Concat and a crop by slice_like, a
    // regression head; and a sequence model masking and picking its last steps, clipped. Every
    // node of their training graphs has a GPU kernel taking its attributes.
    use crate::Symbol;
    let node = |op: &str, name: &str, ins: &[&Symbol], attrs: Attrs| {
        Symbol::op(op, name, ins, attrs).unwrap_or_else(|e| panic!("{op}: {e}"))
    };
    let data = Symbol::var("data");
    let conv = |name: &str, x: &Symbol, k: usize, s: usize| {
        let attrs = conv_attrs(k, s, k / 2, 1, 8, 1, true);
        let (w, b) = (
            Symbol::var(&format!("{name}_weight")),
            Symbol::var(&format!("{name}_bias")),
        );
        node("Convolution", name, &[x, &w, &b], attrs)
    };
    let down = conv("down", &data, 3, 2);
    let deconv_attrs = Attrs::new()
        .with("kernel", "(4, 4)")
        .with("stride", "(2, 2)")
        .with("pad", "(1, 1)")
        .with("num_filter", 8);
    let up = node(
        "Deconvolution",
        "up",
        &[&down, &Symbol::var("up_weight")],
        deconv_attrs,
    );
    let bilinear = Attrs::new()
        .with("sample_type", "bilinear")
        .with("scale", 2)
        .with("num_filter", 8)
        .with("num_args", 2);
    let weight = Symbol::var("up2_weight");
    let up2 = node("UpSampling", "up2", &[&down, &weight], bilinear);
    let skip = conv("skip", &data, 1, 1);
    let crop = node("slice_like", "crop", &[&up2, &skip], Attrs::new());
    let cat = node(
        "Concat",
        "cat",
        &[&up, &skip, &crop],
        Attrs::new().with("num_args", 3),
    );
    let head = conv("head", &cat, 3, 1);
    let clipped = node(
        "clip",
        "clip",
        &[&head],
        Attrs::new().with("a_min", -3).with("a_max", 3),
    );
    let label = Symbol::var("label");
    let seg = node(
        "LinearRegressionOutput",
        "loss",
        &[&clipped, &label],
        Attrs::new(),
    );

    let steps = Symbol::var("steps");
    let lengths = Symbol::var("lengths");
    let on = Attrs::new().with("use_sequence_length", true);
    let masked = node("SequenceMask", "mask", &[&steps, &lengths], on.clone());
    let scores = node(
        "broadcast_mul",
        "scale",
        &[&masked, &Symbol::var("w")],
        Attrs::new(),
    );
    let last = node("SequenceLast", "last", &[&scores, &lengths], on);
    let tail = node(
        "slice_axis",
        "tail",
        &[&last],
        Attrs::new()
            .with("axis", 1)
            .with("begin", 1)
            .with("end", "None"),
    );
    let loss = node(
        "MakeLoss",
        "seq_loss",
        &[&node("norm", "n", &[&tail], Attrs::new())],
        Attrs::new(),
    );
    for (what, sym) in [("encoder-decoder", seg), ("sequence model", loss)] {
        let ops = training_ops_on_the_gpu(what, &sym);
        assert!(ops.len() > 5, "{what}: {ops:?}");
    }
}

/// A bound RNN node's kept state on the GPU: the backward pass reads the forward pass's outputs
/// and traces instead of running it again (and matches the CPU), and the sequence lengths the
/// forward pass read back instead of reading them again; with dropout between layers it
/// draws the forward pass's masks again from the kept seed, and matches a reference built from
/// the CPU kernel one layer at a time with those masks (three layers, so two masks). Without
/// the state a backward pass with dropout is refused with the CPU's message.
#[test]
pub(super) fn rnn_kept_state_serves_the_backward_pass_and_its_dropout_masks() {
    let rng = &mut StdRng::seed_from_u64(31);
    let (steps, batch, input, hidden) = (4, 3, 5, 6);
    for (mode, layers, dirs, p, lengths) in [
        ("lstm", 2, 2, 0.0, false),
        ("gru", 3, 1, 0.0, false),
        ("lstm", 2, 2, 0.0, true),
        ("lstm", 3, 2, 0.5, false),
        ("gru", 3, 1, 0.3, false),
        ("rnn_tanh", 2, 2, 0.6, false),
    ] {
        let attrs = rnn_attrs(mode, hidden, layers, dirs)
            .with("state_outputs", true)
            .with("use_sequence_length", lengths)
            .with("p", p)
            .with(IS_TRAIN, true);
        let mut ins = rnn_inputs(rng, &attrs, [steps, batch, input]);
        if lengths {
            ins.push((vec![batch], vec![3.0, 0.0, 4.0]));
        }
        let mut heads = vec![random(rng, &[steps, batch, dirs * hidden])];
        for _ in 1..crate::ops::rnn::Rnn::parse("RNN", &attrs)
            .expect("ok")
            .outputs()
        {
            heads.push(random(rng, &[layers * dirs, batch, hidden]));
        }
        let bw_ins: Vec<Input> = heads.iter().chain(&ins).cloned().collect();
        let what = format!("{mode} layers {layers} dirs {dirs} p {p} lengths {lengths}");
        // A forward pass with another seed first: the kept state is the last pass's.
        let mut slot: StateSlot = None;
        for seed in [7u64, 8] {
            let seeded = attrs.clone().with(crate::ops::gpu::nn::SEED, seed);
            emulate("RNN", &seeded, &ins, Some(&mut slot)).expect("forward");
        }
        let fwd_attrs = attrs.clone().with(crate::ops::gpu::nn::SEED, 8u64);
        let fwd = emulate("RNN", &fwd_attrs, &ins, Some(&mut slot)).expect("forward");
        let bwd = emulate("_backward_RNN", &attrs, &bw_ins, Some(&mut slot)).expect("backward");
        assert!(
            !bwd.launched.contains(&"rnn_step_fwd"),
            "{what}: the backward pass ran the forward pass again"
        );
        assert_eq!(
            (fwd.downloads, bwd.downloads),
            (usize::from(lengths), 0),
            "{what}: reads back (forward, backward)"
        );
        let (want_fwd, want_bwd) = match p > 0.0 {
            false => (
                cpu_outputs("RNN", &attrs, &ins),
                cpu_outputs("_backward_RNN", &attrs, &bw_ins),
            ),
            true => layer_by_layer(&attrs, &ins, &heads, 8),
        };
        for (k, (g, w)) in fwd.outs.iter().zip(&want_fwd).enumerate() {
            close(&format!("{what}: output {k}"), g, &w.1, 1e-4);
        }
        for (k, (g, w)) in bwd.outs.iter().zip(&want_bwd).enumerate() {
            close(&format!("{what}: gradient {k}"), g, &w.1, 1e-4);
        }
        if p > 0.0 {
            let err = emulate("_backward_RNN", &attrs, &bw_ins, None)
                .err()
                .expect("refused without the state");
            let r = crate::ops::rnn::Rnn::parse("_backward_RNN", &attrs).expect("ok");
            assert_eq!(err, crate::ops::rnn::masks_lost("_backward_RNN", &r));
        }
    }
}

/// A multi-layer RNN with dropout between layers, built from single-layer CPU RNNs with the
/// masks the GPU kernels draw from `seed`: its outputs and its backward op's, as the GPU op
/// returns them.
pub(super) fn layer_by_layer(
    attrs: &Attrs,
    ins: &[Input],
    heads: &[Input],
    seed: u64,
) -> (Vec<Input>, Vec<Input>) {
    use crate::ops::gpu::Stream;
    use crate::ops::rnn::{Pass, Rnn};
    let r = Rnn::parse("RNN", attrs).expect("attributes");
    let (l_count, dirs, h) = (r.layers, r.dirs, r.hidden);
    let x = &ins[0];
    let full = Pass::new(r, &x.0, &ins[1].1, None);
    let (steps, batch) = (x.0[0], x.0[1]);
    let per_state = dirs * batch * h;
    let mode = attrs.get("mode").expect("mode").to_string();
    let one = rnn_attrs(&mode, h, 1, dirs)
        .with("state_outputs", true)
        .with(IS_TRAIN, true);
    let one_r = Rnn::parse("RNN", &one).expect("attributes");
    let state_part = |v: &Input, l: usize| {
        (
            vec![dirs, batch, h],
            v.1[l * per_state..(l + 1) * per_state].to_vec(),
        )
    };
    // Layer l's parameters as a one-layer RNN's, and back.
    let width = |l: usize| if l == 0 { x.0[2] } else { dirs * h };
    let layer_params = |l: usize| -> (Vec<f32>, Vec<[usize; 3]>) {
        let shape = [steps, batch, width(l)];
        let single = Pass::<f32>::new(one_r, &shape, &[], None);
        let size = single.slot(0, dirs - 1).bh + one_r.gh();
        let mut params = vec![0.0; size];
        let mut moves = Vec::new();
        for d in 0..dirs {
            let (f, o) = (full.slot(l, d), single.slot(0, d));
            let gh = one_r.gh();
            for (from, to, n) in [
                (f.wx, o.wx, gh * width(l)),
                (f.wh, o.wh, gh * h),
                (f.bx, o.bx, gh),
                (f.bh, o.bh, gh),
            ] {
                params[to..to + n].copy_from_slice(&ins[1].1[from..from + n]);
                moves.push([from, to, n]);
            }
        }
        (params, moves)
    };
    let lib = kernels().expect("a C++ compiler builds the kernels");
    let dropout = |l: usize, y: &[f32]| -> (Vec<f32>, Vec<f32>) {
        let (mut dropped, mut mask) = (vec![0f32; y.len()], vec![0f32; y.len()]);
        let a = crate::ops::gpu::nn::Dropout {
            n: y.len() as i64,
            out: dropped.as_mut_ptr(),
            mask: mask.as_mut_ptr(),
            x: y.as_ptr().cast_mut(),
            seed: crate::ops::rnn::gpu::layer_seed(seed, l) as i64,
            p: r.p as f32,
            scale: (1.0 / (1.0 - r.p)) as f32,
        };
        let host = HostStream::new(lib);
        let s: &dyn Stream = &host;
        s.run(crate::ops::gpu::nn::k::dropout, y.len(), &a)
            .expect("dropout");
        (dropped, mask)
    };
    let lstm = r.lstm();
    let mut layer_ins: Vec<Vec<Input>> = Vec::new();
    let (mut masks, mut hy, mut cy) = (Vec::new(), Vec::new(), Vec::new());
    let mut below = x.clone();
    let mut top = Vec::new();
    for l in 0..l_count {
        let mut li = vec![
            below.clone(),
            (vec![0], layer_params(l).0),
            state_part(&ins[2], l),
        ];
        li[1].0 = vec![li[1].1.len()];
        if lstm {
            li.push(state_part(&ins[3], l));
        }
        let outs = cpu_outputs("RNN", &one, &li);
        hy.extend_from_slice(&outs[1].1);
        if lstm {
            cy.extend_from_slice(&outs[2].1);
        }
        layer_ins.push(li);
        if l + 1 < l_count {
            let (dropped, mask) = dropout(l, &outs[0].1);
            masks.push(mask);
            below = (outs[0].0.clone(), dropped);
        } else {
            top = outs[0].clone().1;
        }
    }
    let state_shape = vec![l_count * dirs, batch, h];
    let mut forward = vec![
        (vec![steps, batch, dirs * h], top),
        (state_shape.clone(), hy),
    ];
    if lstm {
        forward.push((state_shape.clone(), cy));
    }
    // Backward from the top: each layer's input gradient, through the mask below it, is the
    // gradient of the output of the layer below.
    let mut dparams = vec![0f32; ins[1].1.len()];
    let (mut dh0, mut dc0) = (vec![0f32; ins[2].1.len()], vec![0f32; ins[2].1.len()]);
    let mut dy = heads[0].clone();
    let mut dx = Vec::new();
    for l in (0..l_count).rev() {
        let mut bw = vec![dy.clone(), state_part(&heads[1], l)];
        if lstm {
            bw.push(state_part(&heads[2], l));
        }
        bw.extend(layer_ins[l].iter().cloned());
        let g = cpu_outputs("_backward_RNN", &one, &bw);
        for [from, to, n] in layer_params(l).1 {
            dparams[from..from + n].copy_from_slice(&g[1].1[to..to + n]);
        }
        let part = l * per_state..(l + 1) * per_state;
        dh0[part.clone()].copy_from_slice(&g[2].1);
        if lstm {
            dc0[part].copy_from_slice(&g[3].1);
        }
        match l {
            0 => dx = g[0].1.clone(),
            _ => {
                let through: Vec<f32> = g[0]
                    .1
                    .iter()
                    .zip(&masks[l - 1])
                    .map(|(a, m)| a * m)
                    .collect();
                dy = (g[0].0.clone(), through);
            }
        }
    }
    let mut backward = vec![
        (x.0.clone(), dx),
        (ins[1].0.clone(), dparams),
        (ins[2].0.clone(), dh0),
    ];
    if lstm {
        backward.push((ins[2].0.clone(), dc0));
    }
    (forward, backward)
}

/// Each unary function's training graph (forward and gradient nodes) runs on the GPU.
#[test]
pub(super) fn unary_gradients_run_on_the_gpu() {
    for op in crate::ops::unary::Unary::ALL.map(|m| m.name()) {
        let data = crate::Symbol::var("data");
        let sym = crate::Symbol::op(op, "f", &[&data], Attrs::new()).expect("node");
        let train = crate::symbol::gradient(&sym, &["data".to_string()]).expect("gradient");
        for node in train.indexed().nodes {
            if let Some(def) = node.op {
                if let Err(e) = gpu_check(def, [DType::F32]) {
                    panic!("the gradient graph of {op}: node {}: {e}", node.name);
                }
            }
        }
    }
}

/// An index the CPU kernels refuse (a coordinate outside its axis in gather_nd and the scatters,
/// take's mode raise, a label that is no class, in the cross entropy and SoftmaxOutput) fails the GPU path with the CPU's message, before
/// any kernel runs (it reads the indices back and checks them with the CPU's code).
#[test]
pub(super) fn indices_the_cpu_refuses_are_refused_on_the_gpu_with_its_message() {
    let lib = kernels().expect("a C++ compiler builds the kernels");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let mut rng = StdRng::seed_from_u64(3);
    let coords = (vec![2, 2], vec![0.0, 1.0, 2.0, 5.0]);
    let shape = Attrs::new().with("shape", "(2, 3)");
    let outside = "index 5 (coordinate 1 of position 1) is outside axis 1 of size 3";
    let labels = (vec![2], vec![1.0, 3.0]);
    let no_class = "label 3 is not a class index below 3";
    let cases = [
        (
            "gather_nd",
            Attrs::new(),
            vec![random(&mut rng, &[2, 3]), coords.clone()],
            outside,
        ),
        (
            "scatter_nd",
            shape.clone(),
            vec![random(&mut rng, &[2]), coords.clone()],
            outside,
        ),
        (
            "_backward_gather_nd",
            shape,
            vec![random(&mut rng, &[2]), coords],
            outside,
        ),
        (
            "take",
            Attrs::new().with("mode", "raise"),
            vec![random(&mut rng, &[4, 3]), (vec![2], vec![0.0, 7.0])],
            "index 7 is outside an axis of length 4 (mode raise)",
        ),
        (
            "softmax_cross_entropy",
            Attrs::new(),
            vec![random(&mut rng, &[2, 3]), labels.clone()],
            no_class,
        ),
        (
            "_backward_softmax_cross_entropy",
            Attrs::new(),
            vec![
                random(&mut rng, &[1]),
                random(&mut rng, &[2, 3]),
                labels.clone(),
            ],
            no_class,
        ),
        (
            "_backward_SoftmaxOutput",
            Attrs::new(),
            vec![random(&mut rng, &[2, 3]), labels],
            "label 3 of row 1 is not a class in [0, 3)",
        ),
        (
            "ROIPooling",
            roi_pool_attrs(1.0),
            vec![
                random(&mut rng, &[2, 1, 4, 4]),
                (vec![1, 5], vec![2.0, 0.0, 0.0, 1.0, 1.0]),
            ],
            "region 0 names image 2, outside the batch of 2",
        ),
        (
            "_contrib_ROIAlign",
            Attrs::new()
                .with("pooled_size", "(2, 2)")
                .with("spatial_scale", 1.0),
            vec![
                random(&mut rng, &[2, 1, 4, 4]),
                (vec![1, 5], vec![0.5, 0.0, 0.0, 1.0, 1.0]),
            ],
            "region 0 names image 0.5, outside the batch of 2",
        ),
    ];
    for (op, attrs, inputs, want) in cases {
        let ins = arrays(&rt, &inputs);
        let refs: Vec<&NDArray> = ins.iter().collect();
        let cpu = invoke_on(&rt, Context::cpu(0), op, &refs, &attrs, None)
            .and_then(|o| rt.wait_all().map(|_| o))
            .expect_err("the CPU refuses the index");
        let outs: Vec<NDArray> = cpu_shapes(op, &attrs, &inputs)
            .iter()
            .map(|s| rt.empty(s, DType::F32, Context::cpu(0)).expect("output"))
            .collect();
        let def = lookup(op).expect("registered");
        let kernel = def.gpu.expect("a GPU kernel");
        let stream = HostStream::new(lib);
        let gpu = run(
            def,
            kernel,
            def.alias_safe,
            &attrs,
            &mut ins.iter().map(NDArray::tensor).collect::<Vec<_>>(),
            &outs.iter().map(NDArray::tensor).collect::<Vec<_>>(),
            &stream,
            None,
        )
        .expect_err("the GPU path refuses the index");
        assert!(gpu.contains(want), "{op} on the GPU: {gpu}");
        assert!(cpu.to_string().contains(want), "{op} on the CPU: {cpu}");
        assert!(stream.launched.borrow().is_empty(), "{op} ran kernels");
    }
}
