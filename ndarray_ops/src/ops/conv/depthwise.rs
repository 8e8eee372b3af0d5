//! Convolutions whose groups each read one input channel (`num_group` equal to the channels:
//! depthwise, as in MobileNet), run on the planes themselves: an output row is the sum of its
//! taps' input rows, each shifted and scaled by one weight ([`Tap`]). Through columns, a plane
//! cost a column buffer of `kh * kw` copies of itself and a GEMM of one row, which has nothing to
//! block; that made a 3x3 depthwise layer cost more than a dense 1x1 layer with as many
//! channels.
//!
//! With a horizontal stride `s` above 1, a tap reads every `s`-th column of its input row, which
//! does not vectorize; so the input plane (and backward, the data gradient) is laid out with each
//! row's columns grouped by phase (`by_phase`), where every tap reads one contiguous run.
//!
//! Forward, the output planes split across threads; backward, the groups do, each walking every
//! image, so that a group's weight gradient (summed over images) and its data gradient planes
//! have one writer.

use super::{by_phase, from_phase, Conv, ConvDims, Tap};
use crate::ops::par::{for_ranges, Shared};
use crate::Element;

/// Whether the direct kernels run this convolution: one input channel per group, and more than
/// one group. A single group is a dense convolution, which the GEMM serves better: the digits
/// CNN's first layer (one channel, 16 filters over 8x8 planes) trained 2–3x slower directly.
pub(super) fn applies(c: &Conv, d: &ConvDims) -> bool {
    d.cg == 1 && c.groups > 1
}

/// The forward pass: `out` `(N, F, Ho, Wo)` from data `x` `(N, C, H, W)`, weights `(F, 1, kh,
/// kw)` and an optional bias `(F,)`.
///
/// # Safety
/// The buffers hold the sizes above (`c` and `d` describe them, and `applies` holds); `out` is
/// disjoint from the inputs.
pub(super) unsafe fn forward<T: Element>(
    c: &Conv,
    d: &ConvDims,
    x: *const T,
    weight: *const T,
    bias: Option<&[T]>,
    out: *mut T,
) {
    let taps = Tap::window(c.k, c.s, c.p, c.d, d.w, d.wo);
    let (plane_in, plane_out) = (d.h * d.w, d.ho * d.wo);
    let (x, weight, out) = (Shared::new(x), Shared::new(weight), Shared::new(out));
    let (taps, s) = (&taps, c.s.1);
    for_ranges(d.n * c.filters, plane_out * taps.len(), move |lo, hi| {
        let mut phased = vec![T::default(); if s > 1 { plane_in } else { 0 }];
        // Which input plane `phased` holds: the filters of a group read the same one.
        let mut phased_plane = None;
        for p in lo..hi {
            let f = p % c.filters;
            let k = (p / c.filters) * d.ch + f / d.fg;
            // SAFETY: plane `p` of the output is this range's alone; the input plane, filter and
            // output plane lie inside their buffers (the contract).
            let (mut input, weights, plane) = unsafe {
                (
                    x.piece(k, plane_in),
                    weight.piece(f, taps.len()),
                    out.piece_mut(p, plane_out),
                )
            };
            if s > 1 {
                if phased_plane != Some(k) {
                    by_phase(input, d.w, s, &mut phased);
                    phased_plane = Some(k);
                }
                input = &phased;
            }
            let b = bias.map(|b| b[f]);
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            if crate::ops::par::has_wide() {
                // SAFETY: `has_wide` found the features this twin is compiled for.
                unsafe { avx2::forward_plane(taps, weights, input, plane, d, b) };
                continue;
            }
            forward_plane(taps, weights, input, plane, d, b);
        }
    });
}

#[inline(always)]
fn forward_plane<T: Element>(
    taps: &[Tap],
    weights: &[T],
    input: &[T],
    plane: &mut [T],
    d: &ConvDims,
    bias: Option<T>,
) {
    for (y, row) in plane.chunks_exact_mut(d.wo.max(1)).enumerate() {
        row.fill(T::default());
        for (tap, &wv) in taps.iter().zip(weights) {
            if let Some(iy) = tap.input_row(y, d.h) {
                tap.add_scaled(wv, &input[iy * d.w..(iy + 1) * d.w], row);
            }
        }
        if let Some(b) = bias {
            row.iter_mut().for_each(|v| *v = v.add(b));
        }
    }
}

/// The backward pass: data gradient `dx` `(N, C, H, W)` and weight gradient `dw` `(F, 1, kh,
/// kw)` from the output gradient `dy` `(N, F, Ho, Wo)`, the data `x` and the weights. Both
/// gradients are written whole (not added to).
///
/// # Safety
/// As [`forward`]; `dx` and `dw` are disjoint from each other and from the inputs.
pub(super) unsafe fn backward<T: Element>(
    c: &Conv,
    d: &ConvDims,
    (dy, x, weight): (*const T, *const T, *const T),
    dx: *mut T,
    dw: *mut T,
) {
    let taps = Tap::window(c.k, c.s, c.p, c.d, d.w, d.wo);
    let (plane_in, plane_out) = (d.h * d.w, d.ho * d.wo);
    let (dy, x, weight) = (Shared::new(dy), Shared::new(x), Shared::new(weight));
    let (dx, dw) = (Shared::new(dx), Shared::new(dw));
    let (taps, s) = (&taps, c.s.1);
    let cost = d.n * d.fg * plane_out * taps.len() * 2;
    for_ranges(c.groups, cost, move |lo, hi| {
        let half = if s > 1 { plane_in } else { 0 };
        let mut scratch = vec![T::default(); 2 * half];
        let (phased_input, phased_grad) = scratch.split_at_mut(half);
        for g in lo..hi {
            // SAFETY: group `g`'s filters' weight gradients are this range's alone.
            let grads = unsafe { dw.piece_mut(g, d.fg * taps.len()) };
            grads.fill(T::default());
            for img in 0..d.n {
                let k = img * d.ch + g;
                // SAFETY: input plane `k` of the data gradient is this range's alone (group `g`
                // of image `img`); every piece lies inside its buffer (the contract).
                let (mut input, dx_plane) =
                    unsafe { (x.piece(k, plane_in), dx.piece_mut(k, plane_in)) };
                let mut plane = &mut *dx_plane;
                if s > 1 {
                    by_phase(input, d.w, s, phased_input);
                    input = phased_input;
                    plane = &mut *phased_grad;
                }
                plane.fill(T::default());
                for f in g * d.fg..(g + 1) * d.fg {
                    // SAFETY: as above.
                    let (weights, dy) = unsafe {
                        (
                            weight.piece(f, taps.len()),
                            dy.piece(img * c.filters + f, plane_out),
                        )
                    };
                    let grads = &mut grads[(f - g * d.fg) * taps.len()..][..taps.len()];
                    let inputs = (dy, input);
                    #[cfg(all(target_arch = "x86_64", not(miri)))]
                    if crate::ops::par::has_wide() {
                        // SAFETY: `has_wide` found the features this twin is compiled for.
                        unsafe { avx2::backward_plane(taps, weights, inputs, plane, grads, d) };
                        continue;
                    }
                    backward_plane(taps, weights, inputs, plane, grads, d);
                }
                if s > 1 {
                    from_phase(phased_grad, d.w, s, dx_plane);
                }
            }
        }
    });
}

/// The plane functions compiled for AVX2 and FMA, called when `par::has_wide` says the CPU has
/// them (`par::wide`'s closure would not do: LLVM does not inline a body this large into it).
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx2 {
    use super::{ConvDims, Element, Tap};

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn forward_plane<T: Element>(
        taps: &[Tap],
        weights: &[T],
        input: &[T],
        plane: &mut [T],
        d: &ConvDims,
        bias: Option<T>,
    ) {
        super::forward_plane(taps, weights, input, plane, d, bias)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn backward_plane<T: Element>(
        taps: &[Tap],
        weights: &[T],
        inputs: (&[T], &[T]),
        plane: &mut [T],
        grads: &mut [T],
        d: &ConvDims,
    ) {
        super::backward_plane(taps, weights, inputs, plane, grads, d)
    }
}

/// One filter's share of one image: its output gradient `dy` added into the data gradient
/// `plane` and, against the `input` plane, into its weight gradients `grads`.
#[inline(always)]
fn backward_plane<T: Element>(
    taps: &[Tap],
    weights: &[T],
    (dy, input): (&[T], &[T]),
    plane: &mut [T],
    grads: &mut [T],
    d: &ConvDims,
) {
    for (y, dy_row) in dy.chunks_exact(d.wo.max(1)).enumerate() {
        for ((tap, &wv), grad) in taps.iter().zip(weights).zip(grads.iter_mut()) {
            if let Some(iy) = tap.input_row(y, d.h) {
                let row = iy * d.w..(iy + 1) * d.w;
                *grad = grad.add(tap.dot(dy_row, &input[row.clone()]));
                tap.scatter_scaled(wv, dy_row, &mut plane[row]);
            }
        }
    }
}
