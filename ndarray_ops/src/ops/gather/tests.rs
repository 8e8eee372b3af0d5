//! The gather rules and layouts against plain index arithmetic.

use super::*;

/// The member named `op`.
fn m(op: &str) -> Gather {
    Gather::named(op).expect("a gather op")
}

fn offsets(op: &str, attrs: Attrs, x: &[usize]) -> (Vec<usize>, Vec<Option<usize>>) {
    let out = out_shape(m(op), &attrs, &[x.to_vec()]).unwrap();
    let maps = rules(m(op), &attrs, x, &out).unwrap();
    let maps = maps.offset_maps(op).unwrap();
    (out, read(&maps, x))
}

/// What each output element reads: the input's offsets gathered, padding as `None`.
fn read(maps: &OffsetMaps, x: &[usize]) -> Vec<Option<usize>> {
    let n: usize = x.iter().product();
    let iota: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut y = vec![0.0; maps_len(maps)];
    maps.gather(&iota, &mut y, -1.0);
    y.iter()
        .map(|&v| (v >= 0.0).then_some(v as usize))
        .collect()
}

fn maps_len(maps: &OffsetMaps) -> usize {
    match maps {
        OffsetMaps::Narrow(l) => l.len(),
        OffsetMaps::Wide(l) => l.len(),
    }
}

impl<O> Layout<O> {
    fn len(&self) -> usize {
        self.outer.iter().map(Vec::len).product::<usize>() * self.row_len
    }
}

/// A run read index by index is what [`Index::at`] reads there, for every rule shape,
/// from every start and with rows shorter and longer than the axis.
#[test]
fn index_runs_read_what_at_says() {
    let mut rules = vec![Index::Same, Index::Zero];
    for n in 0..6 {
        rules.extend([Index::Wrap(n.max(1)), Index::Div(n.max(1)), Index::Rev(n)]);
        for before in 0..8 {
            for mode in [PadMode::Constant, PadMode::Edge, PadMode::Reflect] {
                rules.push(Index::Pad { n, before, mode });
            }
        }
    }
    for index in rules {
        for len in 1..24 {
            assert!(
                AxisRule {
                    from: None,
                    len,
                    index
                }
                .runs()
                .count()
                    <= index.most_runs(len)
            );
            let mut read: Vec<usize> = (0..len).filter_map(|i| index.at(i)).collect();
            let n = read.len();
            read.sort_unstable();
            read.dedup();
            // Pad's output axis holds the input axis (not empty) and its padding.
            let real = match index {
                Index::Pad { n, before, .. } => n > 0 && len >= before + n,
                _ => true,
            };
            let distinct = read.len() == n;
            assert!(!real || index.injective(len) == distinct, "{index:?} {len}");
            for start in 0..len {
                let (read, n) = index.run(start, len - start);
                assert!((1..=len - start).contains(&n));
                for k in 0..n {
                    let got = match read {
                        Read::Pad => None,
                        Read::Same(j) => Some(j),
                        Read::Up(j) => Some(j + k),
                        Read::Down(j) => j.checked_sub(k),
                    };
                    let want = index.at(start + k);
                    // A reversed axis read past its end wraps; a run reading below 0
                    // is refused by the same check (see `Rules::check`).
                    if want.is_some_and(|w| w > 1 << 32) {
                        continue;
                    }
                    assert_eq!(got, want, "{index:?}: run {k} from {start} of {len}");
                }
            }
        }
    }
}

#[test]
fn maps_read_the_elements_numpy_would() {
    let (s, o) = offsets("tile", Attrs::new().with("reps", "(2,)"), &[3]);
    assert_eq!((s, o), (vec![6], [0, 1, 2, 0, 1, 2].map(Some).to_vec()));
    let (s, o) = offsets(
        "repeat",
        Attrs::new().with("repeats", 2).with("axis", 1),
        &[2, 2],
    );
    assert_eq!(
        (s, o),
        (vec![2, 4], [0, 0, 1, 1, 2, 2, 3, 3].map(Some).to_vec())
    );
    let (_, o) = offsets("reverse", Attrs::new().with("axis", "(0,)"), &[3, 1]);
    assert_eq!(o, [2, 1, 0].map(Some).to_vec());
    let (s, o) = offsets(
        "SwapAxis",
        Attrs::new().with("dim1", 0).with("dim2", 1),
        &[2, 3],
    );
    assert_eq!((s, o), (vec![3, 2], [0, 3, 1, 4, 2, 5].map(Some).to_vec()));
    let pad = |mode: &str| {
        let attrs = Attrs::new().with("mode", mode).with("pad_width", "(2, 1)");
        offsets("Pad", attrs, &[3]).1
    };
    assert_eq!(
        pad("constant"),
        vec![None, None, Some(0), Some(1), Some(2), None]
    );
    assert_eq!(pad("edge"), [0, 0, 0, 1, 2, 2].map(Some).to_vec());
    assert_eq!(pad("reflect"), [2, 1, 0, 1, 2, 1].map(Some).to_vec());
}

/// Every output element's offset from the walks' index lists, one element at a time.
fn reference(w: &Walks) -> Vec<Option<usize>> {
    let st = strides(&w.input);
    let dims: Vec<usize> = w.axes.iter().map(|a| a.index.len()).collect();
    let n: usize = dims.iter().product();
    (0..n)
        .map(|mut i| {
            let mut at = 0;
            for (a, &len) in w.axes.iter().zip(&dims).rev() {
                let j = a.index[i % len]?;
                at += a.from.map_or(0, |f| j * st[f]);
                i /= len;
            }
            Some(at)
        })
        .collect()
}

/// Long rows go through runs (copies, fills, reversed copies); what each output element
/// reads, and what each gradient element sums, are the element-by-element reference's.
#[test]
fn runs_read_and_sum_what_the_elements_would() {
    let cases = [
        ("reverse", Attrs::new().with("axis", "(0, 1)"), vec![3, 17]),
        ("reverse", Attrs::new().with("axis", 0), vec![3, 17]),
        ("tile", Attrs::new().with("reps", "(2, 3)"), vec![2, 9]),
        (
            "repeat",
            Attrs::new().with("repeats", 5).with("axis", 1),
            vec![2, 7],
        ),
        ("repeat", Attrs::new().with("repeats", 3), vec![4, 6]),
        (
            "broadcast_to",
            Attrs::new().with("shape", "(3, 20)"),
            vec![3, 1],
        ),
        (
            "broadcast_to",
            Attrs::new().with("shape", "(4, 20)"),
            vec![1, 20],
        ),
        (
            "SwapAxis",
            Attrs::new().with("dim1", 0).with("dim2", 1),
            vec![20, 3],
        ),
        (
            "UpSampling",
            Attrs::new().with("scale", 4).with("sample_type", "nearest"),
            vec![1, 2, 3, 5],
        ),
    ];
    let pads = ["constant", "edge", "reflect"].map(|m| {
        (
            "Pad",
            Attrs::new()
                .with("mode", m)
                .with("pad_width", "(0, 0, 0, 0, 1, 2, 7, 9)"),
            vec![1, 2, 3, 12],
        )
    });
    for (op, attrs, x) in cases.into_iter().chain(pads) {
        let out = out_shape(m(op), &attrs, std::slice::from_ref(&x)).unwrap();
        let maps = rules(m(op), &attrs, &x, &out)
            .unwrap()
            .offset_maps(op)
            .unwrap();
        let OffsetMaps::Narrow(layout) = &maps else {
            panic!("{op}: wide offsets for a small input")
        };
        // Only SwapAxis (a strided row) and the flattened repeat of 3 (runs too short)
        // read their rows element by element.
        let flat_repeat = op == "repeat" && attrs.get("axis").is_none();
        let by_elements = op == "SwapAxis" || flat_repeat;
        let runs = matches!(layout.row, Row::Runs(_));
        assert_eq!(runs, !by_elements, "{op} {attrs:?}");
        let want = reference(&walks(m(op), &attrs, &x, &out).unwrap());
        let mut readers = vec![0; x.iter().product()];
        want.iter().flatten().for_each(|&o| readers[o] += 1);
        let injective = rules(m(op), &attrs, &x, &out).unwrap().injective();
        assert_eq!(injective, readers.iter().all(|&n| n <= 1), "{op} {attrs:?}");
        assert_eq!(read(&maps, &x), want, "{op} {attrs:?}");
        // Gradient: every output element carries its own value, so a term added in the
        // wrong place shows.
        let g: Vec<f64> = (0..want.len()).map(|i| 1.0 + i as f64 * 1e-3).collect();
        let mut acc = vec![0.0; x.iter().product()];
        maps.scatter(&g, &mut acc, |a, v| *a += v);
        let mut expect = vec![0.0; acc.len()];
        for (i, o) in want.iter().enumerate() {
            if let Some(o) = o {
                expect[*o] += g[i];
            }
        }
        assert_eq!(acc, expect, "{op} gradient");
    }
}

/// A gather that only permutes its input's axes goes to the transpose kernel; one that
/// broadcasts, reverses, pads or repeats walks its maps.
#[test]
fn permutations_go_to_the_transpose_kernel() {
    let plan = |op: &str, attrs: Attrs, x: &[usize]| {
        let out = out_shape(m(op), &attrs, &[x.to_vec()]).unwrap();
        rules(m(op), &attrs, x, &out).unwrap().plan(op).unwrap()
    };
    let swap = Attrs::new().with("dim1", 0).with("dim2", 2);
    assert!(matches!(plan("SwapAxis", swap, &[2, 3, 4]), Plan::Permute(a) if a == [2, 1, 0]));
    let same = Attrs::new().with("shape", "(2, 3)");
    assert!(matches!(plan("broadcast_to", same, &[2, 3]), Plan::Permute(a) if a == [0, 1]));
    let wider = Attrs::new().with("shape", "(4, 3)");
    assert!(matches!(
        plan("broadcast_to", wider, &[1, 3]),
        Plan::Maps(_)
    ));
    let rev = Attrs::new().with("axis", 0);
    assert!(matches!(plan("reverse", rev, &[2, 3]), Plan::Maps(_)));
}

/// The narrow maps (4 bytes an index, for inputs under 2^32 elements) and the wide ones
/// read the same offsets, padding included; a rule reading past its input axis is refused
/// instead of reading some other element.
#[test]
fn narrow_and_wide_maps_agree_and_reads_stay_inside_the_input() {
    let cases = [
        ("tile", Attrs::new().with("reps", "(2, 1, 3)"), vec![2, 3]),
        ("repeat", Attrs::new().with("repeats", 3), vec![2, 2]),
        ("reverse", Attrs::new().with("axis", "(0, 1)"), vec![3, 2]),
        (
            "Pad",
            Attrs::new()
                .with("mode", "constant")
                .with("pad_width", "(1, 2, 0, 1)"),
            vec![2, 3],
        ),
    ];
    let flat = |maps: &OffsetMaps, x: &[usize]| read(maps, x);
    for (op, attrs, x) in cases {
        let out = out_shape(m(op), &attrs, std::slice::from_ref(&x)).unwrap();
        let r = rules(m(op), &attrs, &x, &out).unwrap();
        let narrow = OffsetMaps::Narrow(r.layout(op).unwrap());
        let wide = OffsetMaps::Wide(r.layout(op).unwrap());
        assert_eq!(flat(&narrow, &r.input), flat(&wide, &r.input), "{op}");
        assert!(matches!(r.offset_maps(op).unwrap(), OffsetMaps::Narrow(_)));
    }
    // A reverse's output gradient longer than its data: the rule would read index -1.
    let attrs = Attrs::new().with("axis", 0);
    let r = rules(m("reverse"), &attrs, &[3], &[4]).unwrap();
    let e = r.offset_maps("reverse").err().unwrap().to_string();
    assert!(
        e.contains("index 3 of an output axis reads past input axis 0, of size 3"),
        "{e}"
    );
    let e = check_backward(m("reverse"), &attrs, &[3], &[4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("[4]") && e.contains("data [3]"), "{e}");
    assert!(check_backward(m("reverse"), &attrs, &[3], &[3]).is_ok());
    let like = Attrs::new();
    assert!(check_backward(m("broadcast_like"), &like, &[1, 3], &[4, 3]).is_ok());
    assert!(check_backward(m("broadcast_like"), &like, &[2, 3], &[4, 3]).is_err());
    assert!(check_backward(m("slice_like"), &like, &[5, 3], &[4, 3]).is_ok());
    assert!(check_backward(m("slice_like"), &like, &[3, 3], &[4, 3]).is_err());
}
