//! Vector operations at two widths, 16 lanes (AVX-512F) and 8 (AVX2), for kernels written
//! once over [`Lanes`] (Winograd's transforms, the implicit convolutions' column fill). Each
//! width is a token that is made only where the CPU has its instructions, so its arithmetic is
//! safe to call; loads and stores take raw pointers and stay unsafe. A lane's arithmetic is
//! the same at either width, so the two give the same bits.
//!
//! Every method is inlined into its caller; [`widest!`] compiles a kernel's body once per
//! width, inside a function built for that width's instructions, where the intrinsics inline
//! too. So a body (`#[inline(always)]`) calls the methods directly or through
//! `#[inline(always)]` functions, never from a closure: a closure is a function of its own,
//! which rustc may place in another codegen unit than the width's function; an intrinsic cannot
//! inline into it (it lacks the width's target features), and every vector operation becomes a
//! call. Winograd's transforms once did so, and ran 30-40% slower (the convolutions of ResNet-18)
//! when an unrelated module moved and the units were cut differently.

use std::arch::x86_64::*;

/// `pub(super) unsafe fn $name(args)` running `$body(lanes, args)` with the lanes the products
/// run with ([`crate::gemm::isa`]: 16 with AVX-512, 8 with AVX2), in a function compiled for
/// their instructions, so that the body and the lanes' methods inline into it. `$name` may be
/// called only where [`crate::gemm::available`] holds.
macro_rules! widest {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:path;) => {
        $(#[$doc])*
        pub(super) unsafe fn $name($($arg: $ty),*) {
            #[target_feature(enable = "avx512f")]
            unsafe fn wide($($arg: $ty),*) {
                // SAFETY: called only where the CPU has AVX-512F (below); the rest is the
                // caller's contract.
                unsafe { $body($crate::ops::simd::W16::new(), $($arg),*) }
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn narrow($($arg: $ty),*) {
                // SAFETY: called only where the CPU has AVX2 (below); the rest is the caller's
                // contract.
                unsafe { $body($crate::ops::simd::W8::new(), $($arg),*) }
            }
            // SAFETY: each runs where the CPU has its instructions; the rest is the caller's
            // contract.
            match $crate::gemm::isa() {
                // SAFETY: the width's instructions exist here (the token); the floats as the
                // method's contract says.
                Some($crate::gemm::Isa::Avx512) => unsafe { wide($($arg),*) },
                // SAFETY: the width's instructions exist here (the token); the floats as the
                // method's contract says.
                Some($crate::gemm::Isa::Avx2) => unsafe { narrow($($arg),*) },
                None => unreachable!("called where the GEMM does not run"),
            }
        }
    };
}
pub(crate) use widest;

/// Vectors of [`Lanes::N`] floats.
pub(super) trait Lanes: Copy {
    /// A vector.
    type V: Copy;
    /// Floats in a vector.
    const N: usize;

    /// All lanes `x`.
    fn splat(self, x: f32) -> Self::V;
    /// `a + b`, lane by lane.
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a - b`, lane by lane.
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b`, lane by lane.
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a0 b0 a1 b1 ...`, the two vectors' lanes interleaved: its first `N` lanes and its last.
    fn interleave(self, a: Self::V, b: Self::V) -> (Self::V, Self::V);

    /// Lanes `0..n` from the floats at `p` (all of them for `n >= N`), zeros past them.
    ///
    /// # Safety
    /// `min(n, N)` floats at `p` are valid to read.
    unsafe fn load(self, p: *const f32, n: usize) -> Self::V;

    /// Lanes `0..n` of `v` (all of them for `n >= N`) to the floats at `p`; none past them.
    ///
    /// # Safety
    /// `min(n, N)` floats at `p` are valid to write.
    unsafe fn store(self, p: *mut f32, v: Self::V, n: usize);

    /// `acc` with lane `l` read from `p + l` for each bit `l` set in `bits`, the other lanes
    /// kept; the floats under clear bits are not touched (`p` may point before the floats).
    ///
    /// # Safety
    /// The float at `p + l` is valid to read for each bit `l` set in `bits`.
    unsafe fn load_lanes(self, acc: Self::V, p: *const f32, bits: u32) -> Self::V;

    /// Lane `l < n` from `p + l * stride`, zeros past them.
    ///
    /// # Safety
    /// Those floats are valid to read.
    unsafe fn gather(self, p: *const f32, stride: usize, n: usize) -> Self::V;

    /// Lane `l < n` of `v` to `p + l * stride`.
    ///
    /// # Safety
    /// Those floats are valid to write, and no two are the same.
    unsafe fn scatter(self, p: *mut f32, stride: usize, v: Self::V, n: usize);

    /// The even and the odd floats of the `2 N` at `p`.
    ///
    /// # Safety
    /// `2 N` floats at `p` are valid to read.
    unsafe fn halves(self, p: *const f32) -> (Self::V, Self::V);
}

/// 16 lanes, AVX-512F.
#[derive(Clone, Copy)]
pub(super) struct W16(());

impl W16 {
    /// # Safety
    /// The CPU has AVX-512F.
    pub(super) unsafe fn new() -> Self {
        W16(())
    }

    /// Lanes `0..n` (all for `n >= 16`).
    #[inline(always)]
    fn first(n: usize) -> __mmask16 {
        if n >= 16 {
            0xFFFF
        } else {
            ((1u32 << n) - 1) as __mmask16
        }
    }

    /// `l * stride` in lane `l`.
    #[inline(always)]
    fn offsets(stride: usize) -> __m512i {
        // SAFETY: the token exists only where the CPU has AVX-512F.
        unsafe {
            let lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            _mm512_mullo_epi32(lane, _mm512_set1_epi32(stride as i32))
        }
    }
}

impl Lanes for W16 {
    type V = __m512;
    const N: usize = 16;

    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm512_set1_ps(x) }
    }

    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm512_add_ps(a, b) }
    }

    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm512_sub_ps(a, b) }
    }

    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm512_mul_ps(a, b) }
    }

    #[inline(always)]
    fn interleave(self, a: __m512, b: __m512) -> (__m512, __m512) {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            let lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
            let hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
            (
                _mm512_permutex2var_ps(a, lo, b),
                _mm512_permutex2var_ps(a, hi, b),
            )
        }
    }

    #[inline(always)]
    unsafe fn load(self, p: *const f32, n: usize) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm512_maskz_loadu_ps(Self::first(n), p) }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m512, n: usize) {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm512_mask_storeu_ps(p, Self::first(n), v) }
    }

    #[inline(always)]
    unsafe fn load_lanes(self, acc: __m512, p: *const f32, bits: u32) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); masked-off lanes do not
        // touch memory; the floats as the method's contract says.
        unsafe { _mm512_mask_loadu_ps(acc, bits as __mmask16, p) }
    }

    #[inline(always)]
    unsafe fn gather(self, p: *const f32, stride: usize, n: usize) -> __m512 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            _mm512_mask_i32gather_ps::<4>(
                _mm512_setzero_ps(),
                Self::first(n),
                Self::offsets(stride),
                p.cast(),
            )
        }
    }

    #[inline(always)]
    unsafe fn scatter(self, p: *mut f32, stride: usize, v: __m512, n: usize) {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            _mm512_mask_i32scatter_ps::<4>(p.cast(), Self::first(n), Self::offsets(stride), v)
        }
    }

    #[inline(always)]
    unsafe fn halves(self, p: *const f32) -> (__m512, __m512) {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
            let (lo, hi) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
            (
                _mm512_permutex2var_ps(lo, even, hi),
                _mm512_permutex2var_ps(lo, odd, hi),
            )
        }
    }
}

/// 8 lanes, AVX2 (and FMA, which the GEMM beside it needs).
#[derive(Clone, Copy)]
pub(super) struct W8(());

impl W8 {
    /// # Safety
    /// The CPU has AVX2.
    pub(super) unsafe fn new() -> Self {
        W8(())
    }

    /// All ones in lanes `0..n`, the mask of AVX2's masked loads.
    #[inline(always)]
    fn first(n: usize) -> __m256i {
        // SAFETY: the token exists only where the CPU has AVX2.
        unsafe {
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), lane)
        }
    }
}

impl Lanes for W8 {
    type V = __m256;
    const N: usize = 8;

    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm256_set1_ps(x) }
    }

    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm256_add_ps(a, b) }
    }

    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm256_sub_ps(a, b) }
    }

    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm256_mul_ps(a, b) }
    }

    #[inline(always)]
    fn interleave(self, a: __m256, b: __m256) -> (__m256, __m256) {
        // Within each 128-bit half: a0 b0 a1 b1 | a4 b4 a5 b5 and a2 b2 a3 b3 | a6 b6 a7 b7;
        // then the halves regrouped.
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            let (lo, hi) = (_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
            (
                _mm256_permute2f128_ps::<0x20>(lo, hi),
                _mm256_permute2f128_ps::<0x31>(lo, hi),
            )
        }
    }

    #[inline(always)]
    unsafe fn load(self, p: *const f32, n: usize) -> __m256 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            match n >= 8 {
                true => _mm256_loadu_ps(p),
                // Masked-off lanes read nothing and are zero.
                false => _mm256_maskload_ps(p, Self::first(n)),
            }
        }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m256, n: usize) {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            match n >= 8 {
                true => _mm256_storeu_ps(p, v),
                // Through the stack: AMD's cores take many micro-operations for a masked store.
                false => {
                    let mut lanes = [0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), v);
                    std::ptr::copy_nonoverlapping(lanes.as_ptr(), p, n);
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn load_lanes(self, acc: __m256, p: *const f32, bits: u32) -> __m256 {
        // Lane `l`'s mask all ones where bit `l` is set; masked-off lanes of the load read
        // nothing, and the blend keeps `acc` there.
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            let bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
            let set = _mm256_and_si256(_mm256_set1_epi32(bits as i32), bit);
            let mask = _mm256_cmpeq_epi32(set, bit);
            _mm256_blendv_ps(acc, _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask))
        }
    }

    #[inline(always)]
    unsafe fn gather(self, p: *const f32, stride: usize, n: usize) -> __m256 {
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let offsets = _mm256_mullo_epi32(lane, _mm256_set1_epi32(stride as i32));
            let mask = _mm256_castsi256_ps(Self::first(n));
            _mm256_mask_i32gather_ps::<4>(_mm256_setzero_ps(), p, offsets, mask)
        }
    }

    #[inline(always)]
    unsafe fn scatter(self, p: *mut f32, stride: usize, v: __m256, n: usize) {
        // AVX2 has no scatter: lane by lane.
        let mut lanes = [0f32; 8];
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        for (l, &x) in lanes.iter().enumerate().take(n) {
            // SAFETY: the width's instructions exist here (the token); the floats as the
            // method's contract says.
            unsafe { *p.add(l * stride) = x };
        }
    }

    #[inline(always)]
    unsafe fn halves(self, p: *const f32) -> (__m256, __m256) {
        // Within each 128-bit half: lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6 (and the odd ones); then
        // the 64-bit pairs reordered 0 2 1 3.
        // SAFETY: the width's instructions exist here (the token); the floats as the
        // method's contract says.
        unsafe {
            let (lo, hi) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            let odd = _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi);
            let order = |v: __m256| {
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
            };
            (order(even), order(odd))
        }
    }
}
