//! What a product does to each element of `c` once its last block of depth is summed, while
//! the tile is still in the first-level cache: a convolution's bias, an inference BatchNorm's
//! affine map and ReLU, which would otherwise each read and write the whole output again.
//!
//! ```text
//! v = v + bias[i]                       with a bias
//! v = (v - mean[i]) * scale[i] + beta[i] with a normalization
//! v = v if v > 0 else 0                  with ReLU
//! ```
//!
//! for an element of row `i` of `c` (a convolution's filter): the operations, in this order
//! and rounded one by one, that the convolution's bias pass, BatchNorm's and ReLU's kernels
//! run, so the fused result has their bits.

/// An inference BatchNorm's per-row `[mean, scale, beta]`, and whether ReLU follows it.
pub(crate) type Norm<'a> = (&'a [[f32; 3]], bool);

/// Per-row constants of the map above, indexed from the product's first row.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Epilogue<'a> {
    /// `bias[i]` of each row.
    pub(crate) bias: Option<&'a [f32]>,
    /// The normalization, and ReLU after it.
    pub(crate) norm: Option<Norm<'a>>,
}

/// `(v - mean)·scale + beta`, then with `relu` ReLU as the `relu` op computes it (NaN and
/// both zeros to +0): BatchNorm's inference map, centred first as on the GPU (`v·scale +
/// (beta - mean·scale)` cancels for data far from zero). BatchNorm's own kernel and the
/// epilogue both call it, so that a fused node has the unfused graph's bits.
#[inline(always)]
pub(crate) fn normalized(v: f32, [mean, scale, beta]: [f32; 3], relu: bool) -> f32 {
    let z = (v - mean) * scale + beta;
    if !relu || z > 0.0 {
        z
    } else {
        0.0
    }
}

impl<'a> Epilogue<'a> {
    /// The same map for the rows from `first` on (a group's filters).
    pub(crate) fn rows_from(self, first: usize) -> Epilogue<'a> {
        Epilogue {
            bias: self.bias.map(|b| &b[first..]),
            norm: self.norm.map(|(n, relu)| (&n[first..], relu)),
        }
    }

    /// Whether the map changes anything (with no bias and no normalization it is the identity,
    /// and the product skips it).
    pub(crate) fn applies(&self) -> bool {
        self.bias.is_some() || self.norm.is_some()
    }

    /// Applies the map to `run`, elements of row `i`.
    pub(crate) fn apply(&self, i: usize, run: &mut [f32]) {
        let bias = self.bias.map(|b| b[i]);
        let norm = self.norm.map(|(n, relu)| (n[i], relu));
        for v in run {
            if let Some(b) = bias {
                *v += b;
            }
            if let Some((c, relu)) = norm {
                *v = normalized(*v, c, relu);
            }
        }
    }
}
