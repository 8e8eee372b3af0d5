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

/// Per-row constants of the map above, indexed from the product's first row.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Epilogue<'a> {
    /// `bias[i]` of each row.
    pub(crate) bias: Option<&'a [f32]>,
    /// `[mean, scale, beta]` of each row.
    pub(crate) norm: Option<&'a [[f32; 3]]>,
    pub(crate) relu: bool,
}

impl<'a> Epilogue<'a> {
    /// The same map for the rows from `first` on (a group's filters).
    pub(crate) fn rows_from(self, first: usize) -> Epilogue<'a> {
        Epilogue {
            bias: self.bias.map(|b| &b[first..]),
            norm: self.norm.map(|n| &n[first..]),
            relu: self.relu,
        }
    }

    /// Whether the map changes anything (with no bias, normalization or ReLU it is the
    /// identity, and the product skips it).
    pub(crate) fn applies(&self) -> bool {
        self.bias.is_some() || self.norm.is_some() || self.relu
    }

    /// Applies the map to `run`, elements of row `i`.
    pub(crate) fn apply(&self, i: usize, run: &mut [f32]) {
        let bias = self.bias.map(|b| b[i]);
        let norm = self.norm.map(|n| n[i]);
        for v in run {
            let mut z = *v;
            if let Some(b) = bias {
                z += b;
            }
            if let Some([mean, scale, beta]) = norm {
                z = (z - mean) * scale + beta;
            }
            if self.relu && z.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                z = 0.0;
            }
            *v = z;
        }
    }
}
