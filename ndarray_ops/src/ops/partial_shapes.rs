//! Shape rules on partial shapes, in both directions: what an op's inputs and outputs must be,
//! given what is known of them so far. A shape is `None` when nothing is known, and a dimension
//! of 0 is unknown, as in MXNet's partial shapes. These rules give the shapes of parameters from
//! the data (what lets a model file leave weight shapes out, as MXNet's files do) and the
//! dimensions a forward pass cannot give (a begin state's batch, taken from what consumes it).
//!
//! The graph driver (`symbol::infer`) unifies every proposal with what it knows and reports a
//! clash; a rule proposes freely and leaves a dimension 0 where it cannot tell. Forward
//! inference on partial inputs, and outputs that keep an input's shape, are found by the driver
//! for every op (it probes the op's own inference); the rules cover what probing cannot see. An
//! op's own rule sits with the op (`conv/partial.rs`, `softmax`, `stack`, ...); this file holds
//! their shared vocabulary, the rules several ops share, and those of the shape ops.

use super::params::{EmbeddingParams, Params, SliceChannelParams};
use super::shape::concat_axis;
use super::{Attrs, Partial};
use crate::error::Result;

/// What is known of the inputs or the outputs.
pub(super) type Known = [Option<Vec<usize>>];
/// What a rule proposes.
pub(super) type Found = Result<Partial>;

/// Proposals for the inputs only.
pub(super) fn inputs(proposed: Vec<Option<Vec<usize>>>) -> Found {
    Ok(Partial {
        inputs: proposed,
        outputs: vec![],
    })
}

/// `a` with the dimensions `b` knows filled in (`a` wins where both know; shapes of another
/// rank are left to the driver, which reports the clash).
pub(crate) fn merge(a: Option<Vec<usize>>, b: &Option<Vec<usize>>) -> Option<Vec<usize>> {
    match (a, b) {
        (None, b) => b.clone(),
        (Some(a), Some(b)) if a.len() == b.len() => Some(
            a.iter()
                .zip(b)
                .map(|(&x, &y)| if x == 0 { y } else { x })
                .collect(),
        ),
        (a, _) => a,
    }
}

/// Embedding: weight (input_dim, output_dim); the indices have the output's shape but its last
/// axis.
pub(super) fn embedding(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if ins.len() > 1 {
        let a = EmbeddingParams::get(op, attrs)?;
        out[1] = Some(vec![a.input_dim.0, a.output_dim.0]);
    }
    if let (Some(Some(y)), false) = (outs.first(), ins.is_empty()) {
        if !y.is_empty() {
            out[0] = Some(y[..y.len() - 1].to_vec());
        }
    }
    inputs(out)
}

/// Same-shape ops: every input and output has the shape of all the known ones together.
pub(super) fn same_shape(_op: &str, _attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let all = ins.iter().chain(outs).fold(None, merge);
    Ok(Partial {
        inputs: vec![all.clone(); ins.len()],
        outputs: vec![all; outs.len()],
    })
}

/// Regression outputs: a label not given has the data's shape (a given one may also drop the
/// data's trailing 1, which the op checks).
pub(super) fn label_like_data(_op: &str, _attrs: &Attrs, ins: &Known, _outs: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let (Some(Some(x)), Some(None)) = (ins.first(), ins.get(1)) {
        out[1] = Some(x.clone());
    }
    inputs(out)
}

/// Concat: every input and the output agree off the axis; along it the output is the inputs'
/// sum, and an input whose length alone is unknown is what the output leaves for it.
pub(super) fn concat(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let Some(ndim) = ins.iter().chain(outs).flatten().map(Vec::len).next() else {
        return inputs(vec![None; ins.len()]);
    };
    let axis = concat_axis(op, attrs, ndim)?;
    let off_axis = |s: &Option<Vec<usize>>| {
        s.as_ref().filter(|s| s.len() == ndim).map(|s| {
            let mut s = s.clone();
            s[axis] = 0;
            s
        })
    };
    let common = ins
        .iter()
        .chain(outs)
        .map(off_axis)
        .fold(None, |a, b| merge(a, &b));
    let along =
        |s: &Option<Vec<usize>>| s.as_ref().map_or(0, |s| s.get(axis).copied().unwrap_or(0));
    let lengths: Vec<usize> = ins.iter().map(along).collect();
    let total = outs.first().map_or(0, along);
    let unknown: Vec<usize> = (0..ins.len()).filter(|&i| lengths[i] == 0).collect();
    let with_length = |len: usize| {
        common.clone().map(|mut s| {
            s[axis] = len;
            s
        })
    };
    let mut proposed: Vec<Option<Vec<usize>>> = lengths.iter().map(|&l| with_length(l)).collect();
    let output = match unknown.as_slice() {
        [] => with_length(lengths.iter().sum()),
        [i] => {
            let rest: usize = lengths.iter().sum();
            if total > rest {
                proposed[*i] = with_length(total - rest);
            }
            with_length(total)
        }
        _ => with_length(total),
    };
    Ok(Partial {
        inputs: proposed,
        outputs: vec![output],
    })
}

/// SliceChannel: the pieces are alike, and the input is a piece put back `num_outputs` times
/// along the axis (or, with `squeeze_axis`, the axis put back with that length).
pub(super) fn slice_channel(op: &str, attrs: &Attrs, _ins: &Known, outs: &Known) -> Found {
    let a = SliceChannelParams::get(op, attrs)?;
    let (n, squeeze) = (a.num_outputs.0, a.squeeze_axis);
    let piece = outs.iter().fold(None, merge);
    let mut input = None;
    if let Some(p) = &piece {
        let ndim = p.len() + usize::from(squeeze);
        let axis = super::norm_axes(op, &[a.axis], ndim)?[0];
        let mut x = p.clone();
        match squeeze {
            true => x.insert(axis.min(x.len()), n),
            false => x[axis] *= n,
        }
        input = Some(x);
    }
    Ok(Partial {
        inputs: vec![input],
        outputs: vec![piece; outs.len()],
    })
}

/// Ops whose output is their input reinterpreted (Reshape, Flatten, expand_dims, ...) keep its
/// size: an input with one unknown dimension takes it from a known output's size.
pub(crate) fn same_size(x: &[usize], y: &[usize]) -> Option<Vec<usize>> {
    if y.contains(&0) || x.iter().filter(|&&d| d == 0).count() != 1 {
        return None;
    }
    let total: usize = y.iter().product();
    let known: usize = x.iter().filter(|&&d| d != 0).product();
    if known == 0 || total == 0 || !total.is_multiple_of(known) {
        return None;
    }
    Some(
        x.iter()
            .map(|&d| if d == 0 { total / known } else { d })
            .collect(),
    )
}
