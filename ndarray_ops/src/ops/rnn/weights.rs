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

/// Weight blocks packed by earlier passes over parameters of one stamp: for the plain product,
/// and split for Strassen's.
#[derive(Default)]
pub(crate) struct Packs {
    /// The parameters' var id and version the packs were made from.
    stamp: Option<(u64, u64)>,
    packed: Mutex<Vec<(BlockKey, Arc<gemm::Packed>)>>,
    split: Mutex<Vec<(BlockKey, Arc<gemm::Strassen>)>>,
}

impl Packs {
    /// These packs for parameters at `stamp`: emptied first if they were made from others.
    pub(super) fn at(&mut self, stamp: (u64, u64)) -> &Packs {
        if self.stamp != Some(stamp) {
            self.packed.get_mut().clear();
            self.split.get_mut().clear();
            self.stamp = Some(stamp);
        }
        self
    }
}

/// The kept value for `view` in `kept`, or `make(view)` now (and kept).
fn get_or_make<T, P>(
    kept: &Mutex<Vec<(BlockKey, Arc<P>)>>,
    view: &ArrayView2<'_, T>,
    make: impl FnOnce(&ArrayView2<'_, T>) -> Option<P>,
) -> Option<Arc<P>> {
    let st = view.strides();
    let key = (view.as_ptr() as usize, view.dim(), (st[0], st[1]));
    if let Some((_, p)) = kept.lock().iter().find(|(k, _)| *k == key) {
        return Some(p.clone());
    }
    // Made outside the lock: the two threads of a wavefront pack theirs at once.
    let p = Arc::new(make(view)?);
    kept.lock().push((key, p.clone()));
    Some(p)
}

/// Whether `MXRS_RNN_STRASSEN` leaves the steps' products by Strassen's split on (unset, `1`,
/// `on`, `true`) or turns them off (`0`, `off`, `false`); read once. Any other value is an
/// error, which the first RNN op reports.
pub(crate) fn strassen_setting() -> Result<bool, String> {
    static ON: OnceLock<Result<bool, String>> = OnceLock::new();
    ON.get_or_init(|| {
        crate::switches::switch("MXRS_RNN_STRASSEN")
            .map_err(|reason| format!("MXRS_RNN_STRASSEN={reason}"))
    })
    .clone()
}

/// Weights multiplied at every step: packed once for the f32 GEMM where it runs (packing
/// the hidden weights at each step's product cost as much as a tenth of an LSTM's step), by
/// the first product, so that the units of a step pack theirs in parallel; taken from `packs`
/// where a pass has them. With `strassen`, products of the shapes it fits
/// ([`Real::splits`]) run as Strassen's seven half products on the weights split and packed
/// once ([`gemm::Strassen`]).
pub(super) struct Weights<'a, T> {
    view: ArrayView2<'a, T>,
    packs: Option<&'a Packs>,
    strassen: bool,
    packed: OnceLock<Option<Arc<gemm::Packed>>>,
    split: OnceLock<Option<Arc<gemm::Strassen>>>,
}

impl<'a, T: Real> Weights<'a, T> {
    pub(super) fn new(view: ArrayView2<'a, T>, packs: Option<&'a Packs>, strassen: bool) -> Self {
        Weights {
            view,
            packs,
            strassen,
            packed: OnceLock::new(),
            split: OnceLock::new(),
        }
    }

    /// Whether a product of `rows` rows runs on Strassen's split.
    fn splits(&self, rows: usize) -> bool {
        let (k, n) = self.view.dim();
        self.strassen && T::splits(rows, k, n)
    }

    /// Packs the weights (where the GEMM packs them) as a product of `rows` rows multiplies
    /// by them, now instead of at the first product.
    pub(super) fn prepare(&self, rows: usize) {
        match self.splits(rows) {
            true => drop(self.split()),
            false => drop(self.packed()),
        }
    }

    fn packed(&self) -> Option<&gemm::Packed> {
        self.packed
            .get_or_init(|| match self.packs {
                Some(packs) => get_or_make(&packs.packed, &self.view, T::pack),
                None => T::pack(&self.view).map(Arc::new),
            })
            .as_deref()
    }

    fn split(&self) -> Option<&gemm::Strassen> {
        self.split
            .get_or_init(|| match self.packs {
                Some(packs) => get_or_make(&packs.split, &self.view, T::split),
                None => T::split(&self.view).map(Arc::new),
            })
            .as_deref()
    }

    /// `c = a x self`, or with `add` `c += a x self`, on the calling thread.
    pub(super) fn product(&self, a: &ArrayView2<'_, T>, c: &mut ArrayViewMut2<'_, T>, add: bool) {
        if self.splits(a.nrows())
            && self
                .split()
                .is_some_and(|s| T::gemm_split(a, s, c, (add, false)))
        {
            return;
        }
        if !self
            .packed()
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
        if self.splits(a.nrows())
            && self
                .split()
                .is_some_and(|s| T::gemm_split(a, s, c, (false, true)))
        {
            return;
        }
        if !self
            .packed()
            .is_some_and(|p| T::gemm_packed(a, p, c, (false, true)))
        {
            T::gemm(a, &self.view, c);
        }
    }
}
