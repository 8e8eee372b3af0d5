//! Element types.

use std::fmt;

use ndarray::{ArrayView2, ArrayViewMut2};

/// The element type of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 => 1,
        }
    }

    /// MXNet's name (`float32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
        }
    }

    /// Parses MXNet's names (and `f32`-style short ones).
    pub fn parse(s: &str) -> Option<DType> {
        match s.trim() {
            "float32" | "f32" => Some(DType::F32),
            "float64" | "f64" => Some(DType::F64),
            "int32" | "i32" => Some(DType::I32),
            "int64" | "i64" => Some(DType::I64),
            "uint8" | "u8" => Some(DType::U8),
            _ => None,
        }
    }

    /// Whether it is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be an array element. Integer arithmetic wraps (as in MXNet's kernels);
/// integer division by zero gives zero instead of trapping.
pub trait Element: Copy + Send + Sync + PartialOrd + Default + fmt::Debug + 'static {
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Converts from f64 (saturating for integers).
    fn from_f64(v: f64) -> Self;
    /// Converts to f64.
    fn to_f64(self) -> f64;
    /// `a + b`.
    fn add(self, b: Self) -> Self;
    /// `a - b`.
    fn sub(self, b: Self) -> Self;
    /// `a * b`.
    fn mul(self, b: Self) -> Self;
    /// `a / b`.
    fn div(self, b: Self) -> Self;
    /// `c = a x b` (a blocked GEMM for floats, a plain triple loop for integers).
    fn gemm(a: &ArrayView2<'_, Self>, b: &ArrayView2<'_, Self>, c: &mut ArrayViewMut2<'_, Self>) {
        c.fill(Self::default());
        Self::gemm_add(a, b, c);
    }
    /// `c += a x b`: a sum over several products (a weight gradient over images) built in place.
    fn gemm_add(
        a: &ArrayView2<'_, Self>,
        b: &ArrayView2<'_, Self>,
        c: &mut ArrayViewMut2<'_, Self>,
    ) {
        for i in 0..a.nrows() {
            for j in 0..b.ncols() {
                let mut acc = c[(i, j)];
                for p in 0..a.ncols() {
                    acc = acc.add(a[(i, p)].mul(b[(p, j)]));
                }
                c[(i, j)] = acc;
            }
        }
    }
}

/// Below this many rows of `a`, [`small_gemm`] beats packing for a blocked GEMM.
const SMALL_GEMM_ROWS: usize = 8;

/// `c = a x b` one row of `a` at a time, without packing: dot products against the columns of
/// `b` when they are contiguous (`x W^T`), scaled row sums when its rows are. Returns false,
/// touching nothing, when `b` has neither layout.
fn small_gemm<T>(a: &ArrayView2<'_, T>, b: &ArrayView2<'_, T>, c: &mut ArrayViewMut2<'_, T>) -> bool
where
    T: ndarray::LinalgScalar,
{
    let (k, n) = b.dim();
    let col_major = b.strides()[0] == 1 || k <= 1;
    let row_major = b.strides()[1] == 1 || n <= 1;
    if col_major {
        for (ar, mut cr) in a.outer_iter().zip(c.outer_iter_mut()) {
            for (bc, cv) in b.columns().into_iter().zip(cr.iter_mut()) {
                *cv = ar.dot(&bc);
            }
        }
    } else if row_major {
        for (ar, mut cr) in a.outer_iter().zip(c.outer_iter_mut()) {
            cr.fill(T::zero());
            for (av, br) in ar.iter().zip(b.outer_iter()) {
                cr.scaled_add(*av, &br);
            }
        }
    } else {
        return false;
    }
    true
}

/// `matrixmultiply` shares a product among its threads by blocks of this many rows of `c`.
const GEMM_ROW_BLOCK: usize = 64;

/// Products of fewer multiply-adds than this are left in their order: turned, they timed
/// alike (32x32 -> 128, 32x64 -> 128, 64x128 -> 128), and each share would wake a thread for
/// a few microseconds of work.
const GEMM_TURN_WORK: usize = 1 << 20;

/// `c = a x b + beta c` by `matrixmultiply`. A product with one block of rows or fewer (a
/// batch of 64 through FullyConnected, a convolution with 64 output channels, an RNN's step)
/// would run on one thread, so when `c` has more columns than that (and the product is not
/// tiny) it is computed as `c^T = b^T a^T`, the same products with the columns as the rows
/// the threads share: FullyConnected 64x784 -> 512 took 0.40–0.62x the time on two threads,
/// 32x256 -> 1024 (an LSTM's step) 0.46–0.65x; with one thread the two orders time alike.
fn blocked_gemm<T>(
    a: &ArrayView2<'_, T>,
    b: &ArrayView2<'_, T>,
    beta: T,
    c: &mut ArrayViewMut2<'_, T>,
) where
    T: ndarray::LinalgScalar,
{
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    if m <= GEMM_ROW_BLOCK && n > GEMM_ROW_BLOCK && m * k * n >= GEMM_TURN_WORK {
        let mut ct = c.view_mut().reversed_axes();
        ndarray::linalg::general_mat_mul(T::one(), &b.t(), &a.t(), beta, &mut ct);
    } else {
        ndarray::linalg::general_mat_mul(T::one(), a, b, beta, c);
    }
}

/// `c = a b + beta c` by [`crate::gemm::sgemm`] where the CPU has AVX-512 (the convolutions'
/// GEMMs of ResNet-50 ran at about twice `matrixmultiply`'s rate there: docs/benchmarks.md);
/// false, touching nothing, elsewhere.
fn avx512_gemm(
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    beta: f32,
    c: &mut ArrayViewMut2<'_, f32>,
) -> bool {
    use crate::gemm::{available, sgemm, Mat};
    if !available() {
        return false;
    }
    let ((m, k), n) = (a.dim(), b.ncols());
    let strides = |s: &[isize]| (s[0], s[1]);
    let ((ars, acs), (brs, bcs)) = (strides(a.strides()), strides(b.strides()));
    let (crs, ccs) = strides(c.strides());
    let (a, b) = (a.as_ptr(), b.as_ptr());
    let c = c.as_mut_ptr();
    // SAFETY: the views describe valid `m x k`, `k x n` and `m x n` matrices at these strides
    // (ndarray's invariant; a mutable view's elements are distinct), `c` is borrowed mutably
    // so it overlaps neither input, and `available()` holds.
    unsafe {
        sgemm(
            m,
            k,
            n,
            Mat {
                ptr: a,
                rs: ars,
                cs: acs,
            },
            Mat {
                ptr: b,
                rs: brs,
                cs: bcs,
            },
            beta,
            Mat {
                ptr: c,
                rs: crs,
                cs: ccs,
            },
        )
    };
    true
}

/// The f64 products always go through `matrixmultiply`.
fn no_fast_gemm<T>(
    _: &ArrayView2<'_, T>,
    _: &ArrayView2<'_, T>,
    _: T,
    _: &mut ArrayViewMut2<'_, T>,
) -> bool {
    false
}

macro_rules! float_element {
    ($t:ty, $d:expr, $fast:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn add(self, b: Self) -> Self {
                self + b
            }
            fn sub(self, b: Self) -> Self {
                self - b
            }
            fn mul(self, b: Self) -> Self {
                self * b
            }
            fn div(self, b: Self) -> Self {
                self / b
            }
            fn gemm(
                a: &ArrayView2<'_, Self>,
                b: &ArrayView2<'_, Self>,
                c: &mut ArrayViewMut2<'_, Self>,
            ) {
                // A blocked GEMM packs all of `b` on every call, which for a few rows of `a`
                // (FullyConnected at batch 1, a depthwise convolution) costs more than the
                // multiply itself; those products go row by row without packing.
                if a.nrows() < SMALL_GEMM_ROWS && small_gemm(a, b, c) {
                    return;
                }
                if !$fast(a, b, 0.0, c) {
                    blocked_gemm(a, b, 0.0, c);
                }
            }
            fn gemm_add(
                a: &ArrayView2<'_, Self>,
                b: &ArrayView2<'_, Self>,
                c: &mut ArrayViewMut2<'_, Self>,
            ) {
                if !$fast(a, b, 1.0, c) {
                    blocked_gemm(a, b, 1.0, c);
                }
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn add(self, b: Self) -> Self {
                self.wrapping_add(b)
            }
            fn sub(self, b: Self) -> Self {
                self.wrapping_sub(b)
            }
            fn mul(self, b: Self) -> Self {
                self.wrapping_mul(b)
            }
            fn div(self, b: Self) -> Self {
                if b == 0 {
                    0
                } else {
                    self.wrapping_div(b)
                }
            }
        }
    };
}

float_element!(f32, DType::F32, avx512_gemm);
float_element!(f64, DType::F64, no_fast_gemm);
int_element!(i32, DType::I32);
int_element!(i64, DType::I64);
int_element!(u8, DType::U8);

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use ndarray::{s, Array2};
    use proptest::prelude::*;

    use super::Element;

    fn reference(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
        Array2::from_shape_fn((a.nrows(), b.ncols()), |(i, j)| {
            (0..a.ncols()).map(|p| a[(i, p)] * b[(p, j)]).sum()
        })
    }

    proptest! {
        /// Small and large row counts, `b` row-major, column-major (a transposed view) and
        /// strided (a slice with step), all against a plain triple loop.
        #[test]
        fn gemm_matches_the_triple_loop(m in 0usize..12, k in 0usize..20, n in 1usize..20, seed in 0u64..1000) {
            let val = |i: usize| ((i as u64 * 2654435761 + seed) % 1000) as f64 / 500.0 - 1.0;
            let a = Array2::from_shape_fn((m, k), |(i, j)| val(i * 31 + j));
            let b = Array2::from_shape_fn((k, n), |(i, j)| val(i * 17 + j + 7));
            let want = reference(&a, &b);
            let bt = b.t().to_owned();
            let wide = Array2::from_shape_fn((k, 2 * n), |(i, j)| if j % 2 == 0 { b[(i, j / 2)] } else { 9.0 });
            let views = [b.view(), bt.t(), wide.slice(s![.., ..;2])];
            for bv in views {
                let mut c = Array2::from_elem((m, n), f64::NAN);
                f64::gemm(&a.view(), &bv, &mut c.view_mut());
                for (x, y) in c.iter().zip(want.iter()) {
                    prop_assert!((x - y).abs() < 1e-9, "{x} vs {y} (m {m}, k {k}, n {n})");
                }
            }
        }
    }

    /// Products large enough to be turned (`c^T = b^T a^T`) and their neighbours that are not
    /// (one row more, one column fewer, too little work), each as `gemm` and as `gemm_add` onto
    /// a non-zero `c`, with `b` row-major and transposed, in f32 and f64: small integers, so
    /// every sum is exact and the results must equal the triple loop's.
    #[test]
    fn turned_products_equal_the_triple_loop() {
        fn check<T: Element + ndarray::LinalgScalar>(to: fn(f64) -> T, back: fn(T) -> f64) {
            let shapes = [(64, 256, 128), (65, 256, 128), (64, 256, 64), (32, 32, 128)];
            for (m, k, n) in shapes {
                let val = |i: usize| ((i * 7) % 5) as f64 - 2.0;
                let a = Array2::from_shape_fn((m, k), |(i, j)| val(i * 31 + j));
                let b = Array2::from_shape_fn((k, n), |(i, j)| val(i * 17 + j + 3));
                let c0 = Array2::from_shape_fn((m, n), |(i, j)| val(i + j * 3));
                let want = reference(&a, &b);
                let (at, bt) = (a.mapv(to), b.t().mapv(to));
                for b in [b.mapv(to).view(), bt.t()] {
                    for add in [false, true] {
                        let mut c = c0.mapv(to);
                        match add {
                            false => T::gemm(&at.view(), &b, &mut c.view_mut()),
                            true => T::gemm_add(&at.view(), &b, &mut c.view_mut()),
                        }
                        for ((&got, &w), &was) in c.iter().zip(&want).zip(&c0) {
                            let w = if add { w + was } else { w };
                            assert_eq!(back(got), w, "m {m}, k {k}, n {n}, add {add}");
                        }
                    }
                }
            }
        }
        check::<f32>(|v| v as f32, f64::from);
        check::<f64>(|v| v, |v| v);
    }
}
