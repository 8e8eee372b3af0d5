//! What kernels are handed: raw buffers and tensor views with shape, strides and dtype.

use super::*;

/// A pointer and length into a chunk, handed to kernels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBuf {
    pub(crate) ptr: *mut u8,
    pub(crate) bytes: usize,
}

// SAFETY: a RawBuf is only dereferenced inside engine ops that name the chunk's var, so the
// engine orders every access to the memory and the chunk's delete op keeps it alive until then.
unsafe impl Send for RawBuf {}
// SAFETY: as above; sharing the pointer value itself is harmless.
unsafe impl Sync for RawBuf {}

/// A shape, stored inline up to 6 dimensions (no allocation on the hot path of small ops).
pub(crate) type Dims = smallvec::SmallVec<[usize; 6]>;

/// An op's inputs, then its outputs, as its kernel sees them: one allocation per op, and a
/// small closure to move around (a tiny op's closure is built, boxed and called once each).
pub(crate) struct Tensors {
    pub(super) all: Vec<TensorRef>,
    pub(super) inputs: usize,
}

impl Tensors {
    /// The first `inputs` of `all` are the inputs; the rest, the outputs.
    #[inline]
    pub(crate) fn new(all: Vec<TensorRef>, inputs: usize) -> Tensors {
        Tensors { all, inputs }
    }

    /// The inputs (a kernel runner may point one at a copy) and the outputs.
    pub(crate) fn split(&mut self) -> (&mut [TensorRef], &[TensorRef]) {
        let (ins, outs) = self.all.split_at_mut(self.inputs);
        (ins, outs)
    }
}

/// What a kernel sees of an array: memory, shape and dtype (row-major, contiguous).
#[derive(Clone, Debug)]
pub(crate) struct TensorRef {
    pub(crate) buf: RawBuf,
    pub(crate) shape: Dims,
    pub(crate) dtype: DType,
}

impl TensorRef {
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub(crate) fn ptr<T>(&self) -> *mut T {
        self.buf.ptr.cast()
    }

    /// # Safety
    /// The caller holds read access to the memory (an engine op reading its var) and nothing
    /// writes it through another reference meanwhile.
    pub(crate) unsafe fn slice<T>(&self) -> &[T] {
        // SAFETY: per the caller's contract; the pointer is aligned (64-byte blocks, offsets in
        // whole elements) and the length is within the block.
        unsafe { std::slice::from_raw_parts(self.ptr::<T>(), self.len()) }
    }

    /// Every element as f64 (index, label and length inputs of any dtype).
    ///
    /// # Safety
    /// As for [`TensorRef::slice`]: the caller holds read access to the memory.
    pub(crate) unsafe fn to_f64s(&self) -> Vec<f64> {
        crate::with_dtype!(self.dtype, T => {
            // SAFETY: per the caller's contract.
            unsafe { self.slice::<T>() }.iter().map(|v| crate::Element::to_f64(*v)).collect()
        })
    }

    /// # Safety
    /// The caller holds write access to the memory and no other reference to it exists.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut<T>(&self) -> &mut [T] {
        // SAFETY: per the caller's contract, as for `slice`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr::<T>(), self.len()) }
    }

    /// Copies this tensor's bytes over `dst`'s (ranges may overlap).
    ///
    /// # Safety
    /// Read access to `self`, write access to `dst`, and `dst` at least as large.
    pub(crate) unsafe fn copy_bytes_to(&self, dst: &TensorRef) {
        // SAFETY: per the caller's contract.
        unsafe { std::ptr::copy(self.buf.ptr, dst.buf.ptr, self.buf.bytes.min(dst.buf.bytes)) }
    }

    pub(crate) fn overlaps(&self, other: &TensorRef) -> bool {
        let (a, b) = (self.buf.ptr as usize, other.buf.ptr as usize);
        a < b + other.buf.bytes
            && b < a + self.buf.bytes
            && self.buf.bytes > 0
            && other.buf.bytes > 0
    }

    pub(crate) fn same_memory(&self, other: &TensorRef) -> bool {
        self.buf.ptr == other.buf.ptr && self.buf.bytes == other.buf.bytes
    }
}
