//! Weights as the steps multiply by them: packed for the f32 GEMM where it runs, and kept
//! packed between passes while the parameters are unchanged.
//!
//! ```text
//! a bound node's pass over parameters whose var stands at (id, version):
//!     its kept Packs hold another stamp -> drop them all, take this one
//!     each weight block's first product: a pack of the same block (address, shape, strides)
//!         among the kept ones -> use it; else pack it and keep it
//! ```
//!
//! A node that keeps state runs alone (never inside a bulk unit), so the version it sees
//! counts every write pushed before it: an equal stamp is the same contents. Packing is a
//! transpose of every weight (3 MiB for a two-layer LSTM of 256 units) and took about 5% of
//! that LSTM's forward pass at batch 32.

use std::sync::{Arc, OnceLock};

use ndarray::{ArrayView2, ArrayViewMut2};
use parking_lot::Mutex;

use super::real::Real;
use crate::gemm;

/// Where a block of weights lies: its first element's address, shape and strides.
type BlockKey = (usize, (usize, usize), (isize, isize));

/// Weight blocks packed by earlier passes over parameters of one stamp.
#[derive(Default)]
pub(crate) struct Packs {
    /// The parameters' var id and version the packs were made from.
    stamp: Option<(u64, u64)>,
    packed: Mutex<Vec<(BlockKey, Arc<gemm::Packed>)>>,
}

impl Packs {
    /// These packs for parameters at `stamp`: emptied first if they were made from others.
    pub(super) fn at(&mut self, stamp: (u64, u64)) -> &Packs {
        if self.stamp != Some(stamp) {
            self.packed.get_mut().clear();
            self.stamp = Some(stamp);
        }
        self
    }

    /// The kept pack of `view`, or `view` packed now (and kept).
    fn get_or_pack<T: Real>(&self, view: &ArrayView2<'_, T>) -> Option<Arc<gemm::Packed>> {
        let st = view.strides();
        let key = (view.as_ptr() as usize, view.dim(), (st[0], st[1]));
        if let Some((_, p)) = self.packed.lock().iter().find(|(k, _)| *k == key) {
            return Some(p.clone());
        }
        // Packed outside the lock: the two threads of a wavefront pack theirs at once.
        let p = Arc::new(T::pack(view)?);
        self.packed.lock().push((key, p.clone()));
        Some(p)
    }
}

/// Weights multiplied at every step: packed once for the f32 GEMM where it runs (packing
/// the hidden weights at each step's product cost as much as a tenth of an LSTM's step), by
/// the first product, so that the units of a step pack theirs in parallel; taken from `packs`
/// where a pass has them.
pub(super) struct Weights<'a, T> {
    view: ArrayView2<'a, T>,
    packs: Option<&'a Packs>,
    packed: OnceLock<Option<Arc<gemm::Packed>>>,
}

impl<'a, T: Real> Weights<'a, T> {
    pub(super) fn new(view: ArrayView2<'a, T>, packs: Option<&'a Packs>) -> Self {
        Weights {
            view,
            packs,
            packed: OnceLock::new(),
        }
    }

    /// Packs the weights (where the GEMM packs them) now instead of at the first product.
    pub(super) fn prepare(&self) -> Option<&gemm::Packed> {
        self.packed
            .get_or_init(|| match self.packs {
                Some(packs) => packs.get_or_pack(&self.view),
                None => T::pack(&self.view).map(Arc::new),
            })
            .as_deref()
    }

    /// `c = a x self`, or with `add` `c += a x self`, on the calling thread.
    pub(super) fn product(&self, a: &ArrayView2<'_, T>, c: &mut ArrayViewMut2<'_, T>, add: bool) {
        if !self
            .prepare()
            .is_some_and(|p| T::gemm_packed(a, p, c, (add, false)))
        {
            match add {
                true => T::gemm_add(a, &self.view, c),
                false => T::gemm(a, &self.view, c),
            }
        }
    }

    /// `c = a x self` on the pool's threads (every step's input projection at once).
    pub(super) fn product_wide(&self, a: &ArrayView2<'_, T>, c: &mut ArrayViewMut2<'_, T>) {
        if !self
            .prepare()
            .is_some_and(|p| T::gemm_packed(a, p, c, (false, true)))
        {
            T::gemm(a, &self.view, c);
        }
    }
}
