//! The examples' global allocator: mimalloc, asked for plain blocks.
//!
//! The `mimalloc` crate's `MiMalloc` sends every request through mimalloc's aligned API. In
//! mimalloc 3 that API takes its fast path only while the size class's page has a block ready in
//! its free list, and otherwise, unless the block size is a power of two, over-allocates through
//! the generic path. A program that frees and makes again a few small objects per step (a tiny
//! NDArray op: its closure, tensor lists, array and var; the engine's op records) empties that
//! list on nearly every allocation, since mimalloc puts freed blocks on a second list that only
//! the generic path moves back. The plain API does the same work on its own, cheaper, generic
//! path. Measured with `ndarray_bench --tiny-only` (see docs/engine-tuning.md): about 10% per tiny op.
//!
//! A plain block is almost always aligned enough (mimalloc's blocks sit at multiples of their
//! size class), but rather than lean on that, each block is checked and a misaligned one is
//! given back for an aligned request, so the allocator is sound whatever mimalloc's build does
//! with alignment.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc_aligned, mi_zalloc, mi_zalloc_aligned,
};

/// mimalloc through its plain API where the block it gives is aligned enough.
pub struct PlainMiMalloc;

/// A block for `layout` from the plain call when it is aligned enough (a null one, out of
/// memory, passes the check and is returned as is); otherwise from the aligned call, the plain
/// block given back.
///
/// # Safety
/// `plain` and `aligned` are mimalloc's (zeroing or not) allocation calls; `layout` is valid.
unsafe fn plain_or_aligned(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: plain C allocation calls; a block that does not fit is freed once.
    unsafe {
        let p = plain(layout.size());
        if (p as usize) & (layout.align() - 1) == 0 {
            return p.cast();
        }
        mi_free(p);
        aligned(layout.size(), layout.align()).cast()
    }
}

// SAFETY: every pointer handed out comes from mimalloc and is aligned for its layout (checked,
// or from mimalloc's aligned API); mimalloc frees and reallocates blocks from either API.
unsafe impl GlobalAlloc for PlainMiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation calls, a layout from the caller.
        unsafe { plain_or_aligned(layout, mi_malloc, mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { plain_or_aligned(layout, mi_zalloc, mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from mimalloc with `layout`. Growing is rare next to allocating,
        // so it goes through the aligned API, which keeps the old block when it fails.
        unsafe { mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast() }
    }
}
