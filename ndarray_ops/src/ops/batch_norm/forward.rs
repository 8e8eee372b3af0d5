//! BatchNorm's forward kernel on the CPU: per channel, the statistics (the batch's in training,
//! updating the moving ones), then each element normalized, scaled and shifted.

use super::lanes;
use super::{bn_settings, Bn};
use crate::ops::par::{for_ranges, Shared};
use crate::ops::Call;
use crate::ops::{Attrs, KResult, TensorRef};
use crate::resources::KernelRes;
use crate::{DType, Element};

pub(super) fn bn_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    bn_forward(op, attrs, ins, outs, false)
}

/// BatchNorm's forward pass: `ins` are (data, gamma, beta, moving mean, moving variance),
/// `outs` (output, mean used, variance used); `relu` applies ReLU to each output element as it
/// is written (the fused `_fused_BatchNormReLU`, bit-identical to BatchNorm then ReLU).
/// The output may be the data itself (normalized in place).
pub(crate) fn bn_forward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    relu: bool,
) -> KResult {
    let e = |e: crate::NdError| e.to_string();
    let x = &ins[0];
    let bn = bn_settings(op, attrs, &x.shape).map_err(e)?;
    let Bn {
        layout: (outer, c, inner),
        momentum,
        batch_stats,
        update_moving: update,
        ..
    } = bn;
    let count = (outer * inner).max(1) as f64;
    let runs = ChannelRuns { c, inner, outer };
    let in_place = x.buf.ptr == outs[0].buf.ptr;
    crate::with_dtype!(x.dtype, T => {
        let [xs, gamma, beta, mm, mv] = [0, 1, 2, 3, 4].map(|k| Shared::new(ins[k].ptr::<T>()));
        let [ys, mean_out, var_out] = [0, 1, 2].map(|k| Shared::new(outs[k].ptr::<T>()));
        // Channels are independent: a range of them is normalized by one thread.
        for_ranges(c, 3 * outer * inner, |lo, hi| {
            for ch in lo..hi {
                // SAFETY: (every block below) read access to data, gamma and beta; the moving
                // statistics are declared mutated inputs (write access); the outputs are
                // disjoint from the inputs, or the output is the data (`in_place`), whose
                // channel is then read before it is written. This range alone touches channel
                // `ch`: its elements of the data and output, its entries of the statistics.
                let [moving_mean, moving_var, gamma, beta] = [mm, mv, gamma, beta].map(|p| {
                    // SAFETY: entry `ch` of a statistic or parameter, read here.
                    unsafe { p.read(ch) }.to_f64()
                });
                // SAFETY: channel `ch`'s runs of the data, read only while these slices live.
                let x = || unsafe { runs.of(xs, ch) };
                let (mean, var) = if batch_stats {
                    let mean = x().map(lanes::sum).sum::<f64>() / count;
                    let sq: f64 = x().map(|r| lanes::squares(r, mean)).sum();
                    let var = sq / count;
                    let blend = |old: f64, new: f64| T::from_f64(old * momentum + new * (1.0 - momentum));
                    if update {
                        // SAFETY: entry `ch` of the moving statistics is this range's alone.
                        unsafe {
                            mm.write(ch, blend(moving_mean, mean));
                            mv.write(ch, blend(moving_var, var));
                        }
                    }
                    (mean, var)
                } else {
                    (moving_mean, moving_var)
                };
                let c = bn.affine(mean, var, gamma, beta);
                // SAFETY: channel `ch`'s runs of the output are this range's alone; no slice
                // of the data is alive when the output is the data.
                let y_runs = unsafe { runs.of_mut(ys, ch) };
                match (in_place, relu) {
                    (true, false) => y_runs.for_each(|yr| lanes::normalize::<T, false>(None, yr, c)),
                    (true, true) => y_runs.for_each(|yr| lanes::normalize::<T, true>(None, yr, c)),
                    (false, false) => x().zip(y_runs).for_each(|(xr, yr)| lanes::normalize::<T, false>(Some(xr), yr, c)),
                    (false, true) => x().zip(y_runs).for_each(|(xr, yr)| lanes::normalize::<T, true>(Some(xr), yr, c)),
                }
                // SAFETY: entry `ch` of the saved statistics is this range's alone.
                unsafe {
                    mean_out.write(ch, T::from_f64(mean));
                    var_out.write(ch, T::from_f64(var));
                }
            }
        });
    });
    Ok(())
}

/// BatchNorm outside training over float32 data of shape `shape`, as [`bn_forward`] would
/// normalize it: per channel `[mean, scale, beta]` of `(x - mean)·scale + beta`, from the
/// moving statistics, the saved mean and variance written to `outs[1]` and `outs[2]` as
/// [`bn_forward`] writes them. `ins` are gamma, beta and the moving mean and variance. `None`
/// (nothing written) where [`bn_forward`] must run itself: batch statistics, or not float32.
pub(crate) fn bn_inference_map(
    op: &str,
    attrs: &Attrs,
    shape: &[usize],
    ins: &[TensorRef],
    outs: &[TensorRef],
) -> Result<Option<Vec<[f32; 3]>>, String> {
    let bn = bn_settings(op, attrs, shape).map_err(|e| e.to_string())?;
    if bn.batch_stats || outs[0].dtype != DType::F32 {
        return Ok(None);
    }
    // SAFETY: the parameters and statistics hold one float32 per channel, the saved statistics
    // too (shapes from inference, every input of the data's type); nothing else writes them
    // while the op runs.
    let ([gamma, beta, mm, mv], [mean_out, var_out]) = unsafe {
        (
            [0, 1, 2, 3].map(|k| ins[k].slice::<f32>()),
            [1, 2].map(|k| outs[k].slice_mut::<f32>()),
        )
    };
    let map = (0..bn.layout.1)
        .map(|ch| {
            let (mean, var) = (f64::from(mm[ch]), f64::from(mv[ch]));
            mean_out[ch] = mm[ch];
            var_out[ch] = mv[ch];
            bn.affine(mean, var, f64::from(gamma[ch]), f64::from(beta[ch]))
                .map(|v| v as f32)
        })
        .collect();
    Ok(Some(map))
}

/// Where one channel's elements lie in a tensor laid out (outer, c, inner): `outer` runs of
/// `inner` contiguous elements, `c * inner` apart.
#[derive(Clone, Copy)]
pub(super) struct ChannelRuns {
    pub(super) c: usize,
    pub(super) inner: usize,
    pub(super) outer: usize,
}

impl ChannelRuns {
    /// Channel `ch`'s runs in the tensor at `p`.
    ///
    /// # Safety
    /// `p` holds `outer * c * inner` elements, and nobody writes channel `ch`'s while the runs
    /// are read.
    pub(super) unsafe fn of<'a, T: 'a>(
        self,
        p: Shared<T>,
        ch: usize,
    ) -> impl Iterator<Item = &'a [T]> {
        (0..self.outer).map(move |o| {
            // SAFETY: run `o` of channel `ch` lies inside the tensor (the contract).
            unsafe { p.piece(o * self.c + ch, self.inner) }
        })
    }

    /// Channel `ch`'s runs in the tensor at `p`, to write.
    ///
    /// # Safety
    /// As for [`ChannelRuns::of`], and nobody else reads or writes channel `ch`'s elements
    /// while the runs live.
    pub(super) unsafe fn of_mut<'a, T: 'a>(
        self,
        p: Shared<T>,
        ch: usize,
    ) -> impl Iterator<Item = &'a mut [T]> {
        (0..self.outer).map(move |o| {
            // SAFETY: run `o` of channel `ch` lies inside the tensor and is this caller's alone
            // (the contract).
            unsafe { p.piece_mut(o * self.c + ch, self.inner) }
        })
    }
}

/// Σ f(a, b) over two runs of equal length, in f64 with four partial sums: a single chain of
/// dependent adds would wait out the adder's latency at every element.
pub(super) fn sum_zip<T: Element>(a: &[T], b: &[T], f: impl Fn(f64, f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (qa, qb) in ca.zip(cb) {
        for k in 0..4 {
            acc[k] += f(qa[k].to_f64(), qb[k].to_f64());
        }
    }
    let tail: f64 = ra
        .iter()
        .zip(rb)
        .map(|(x, y)| f(x.to_f64(), y.to_f64()))
        .sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}
