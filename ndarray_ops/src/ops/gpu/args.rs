//! Kernel arguments: one named struct per kernel (or per family of kernels that read the same
//! things), declared once here and written out as the C struct the device code takes, so that the
//! two sides cannot disagree on a field's place or type.
//!
//! [`kernel_args!`] declares a struct, the kernels that take it and its fields; it makes the
//! `#[repr(C)]` struct, a [`Kernel`] constant per kernel (in the family's module `k`) (a misspelt kernel is a compile error,
//! and a kernel launched with another kernel's arguments is a type error) and the struct's C
//! declaration, which [`source`] puts between `kernels/common.cuh` and the kernel families.
//! Field types are those of [`CType`]: device pointers, index tables, integers, [`Dim`]s
//! (integers a kernel divides by) and floats.

use std::marker::PhantomData;
use std::sync::OnceLock;

use crate::ops::TensorRef;

/// A field type of a kernel's arguments, and its C name in the device code.
pub(crate) trait CType: Copy {
    /// How `kernels/*.cu` spells it (an array: its element type).
    const C: &'static str;
    /// What follows the field's name in C (an array's length).
    const SUFFIX: &'static str = "";
}

impl CType for *mut f32 {
    const C: &'static str = "float*";
}
impl CType for *const i64 {
    const C: &'static str = "const i64*";
}
impl CType for *mut i64 {
    const C: &'static str = "i64*";
}
impl CType for *mut f64 {
    const C: &'static str = "double*";
}
impl CType for *const f64 {
    const C: &'static str = "const double*";
}
impl CType for i64 {
    const C: &'static str = "i64";
}
impl CType for f32 {
    const C: &'static str = "float";
}
impl CType for f64 {
    const C: &'static str = "double";
}
impl CType for Dim {
    const C: &'static str = "Dim";
}
/// Fixed-length arrays of a field type: `[T; N]` is `T name[N]` in C.
macro_rules! array_ctypes {
    ($($t:ty, $c:literal, $n:literal;)*) => {$(
        impl CType for [$t; $n] {
            const C: &'static str = $c;
            const SUFFIX: &'static str = concat!("[", stringify!($n), "]");
        }
    )*};
}
array_ctypes! {
    Dim, "Dim", 6;
    i64, "i64", 6;
    Dim, "Dim", 4;
    i64, "i64", 4;
    *mut f32, "float*", 7;
}

/// The most dims a kernel's array fields hold (`array_ctypes!` has arrays of this length).
pub(crate) const MAX_RANK: usize = 6;

/// An integer the kernel divides by, with its multiplier and shift for `split` in
/// `kernels/common.cuh` (the `Dim` there, field for field).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dim {
    n: i64,
    /// `divider(n)`.
    m: u64,
}

impl Dim {
    /// `n`, ready to divide by.
    pub(crate) fn new(n: usize) -> Dim {
        let n = n as i64;
        Dim { n, m: divider(n) }
    }
}

/// `d`'s multiplier and shift for dividing by it with a multiply-high, an add and a shift
/// (Granlund and Montgomery, "Division by invariant integers using multiplication"): with
/// `s = ceil(log2 d)` and `m = 2^32 (2^s - d) / d + 1`, `t / d = (umulhi(t, m) + t) >> s` for all
/// `t, d < 2^31`. Packed as `m | s << 32` for `kernels/common.cuh`'s `split`; 0 (divide plainly) where
/// `d` is 0 or too large.
pub(super) fn divider(d: i64) -> u64 {
    if !(1..1 << 31).contains(&d) {
        return 0;
    }
    let d = d as u64;
    let s = u64::from(64 - (d - 1).leading_zeros());
    let m = (((1u64 << s) - d) << 32) / d + 1;
    m | s << 32
}

/// A tensor's memory, for a pointer field.
pub(crate) fn ptr(t: &TensorRef) -> *mut f32 {
    t.ptr::<f32>()
}

/// A count or an index, for an `i64` field.
pub(crate) fn int(n: usize) -> i64 {
    n as i64
}

/// The most bytes a kernel's arguments may take (the streams pass them through a buffer of
/// this size).
pub(crate) const MAX_ARGS_BYTES: usize = 512;

/// One kernel, launched with arguments of type `A`.
pub(crate) struct Kernel<A> {
    /// Its name in the device code.
    pub(crate) name: &'static str,
    args: PhantomData<fn(A)>,
}

impl<A> Clone for Kernel<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Kernel<A> {}

impl<A> Kernel<A> {
    /// The kernel called `name` (made by [`kernel_args!`] only).
    pub(crate) const fn new(name: &'static str) -> Kernel<A> {
        Kernel {
            name,
            args: PhantomData,
        }
    }
}

/// A struct of kernel arguments as the device code declares it.
pub(crate) struct Decl {
    /// Its name (the C struct's).
    pub(crate) name: &'static str,
    /// Its fields: name, C type and what follows the name (an array's length), in order.
    pub(crate) fields: &'static [(&'static str, &'static str, &'static str)],
    /// The kernels that take it.
    pub(crate) kernels: &'static [&'static str],
}

impl Decl {
    fn c(&self) -> String {
        let mut s = format!("struct {} {{\n", self.name);
        for (field, ty, suffix) in self.fields {
            s += &format!("    {ty} {field}{suffix};\n");
        }
        s + "};\n"
    }
}

/// Declares kernel argument structs: `struct Name [kernel, ...] { field: type, ... }`, each field
/// with a doc comment saying what the kernels read or write there.
macro_rules! kernel_args {
    ($(
        $(#[$doc:meta])*
        struct $name:ident [$($kernel:ident),+ $(,)?] {
            $($(#[$fdoc:meta])* $field:ident: $ty:ty),* $(,)?
        }
    )*) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug)]
            pub(crate) struct $name {
                $($(#[$fdoc])* pub(crate) $field: $ty,)*
            }
            const _: () = assert!(std::mem::size_of::<$name>() <= $crate::ops::gpu::args::MAX_ARGS_BYTES);
        )*
        /// The kernels of this table, each with its argument struct.
        #[allow(non_upper_case_globals, dead_code)]
        pub(crate) mod k {
            $($(
                #[doc = concat!("Kernel `", stringify!($kernel), "`, with [`", stringify!($name), "`](super::", stringify!($name), ").")]
                pub(crate) const $kernel: $crate::ops::gpu::args::Kernel<super::$name> =
                    $crate::ops::gpu::args::Kernel::new(stringify!($kernel));
            )+)*
        }
        /// Every struct of this table, as the device code declares it.
        pub(crate) const DECLS: &[$crate::ops::gpu::args::Decl] = &[$(
            $crate::ops::gpu::args::Decl {
                name: stringify!($name),
                fields: &[$((
                    stringify!($field),
                    <$ty as $crate::ops::gpu::args::CType>::C,
                    <$ty as $crate::ops::gpu::args::CType>::SUFFIX,
                )),*],
                kernels: &[$(stringify!($kernel)),+],
            },
        )*];
    };
}
pub(crate) use kernel_args;

/// The kernels' source: `kernels/common.cuh`, the argument structs, the kernel families.
pub(crate) fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut s = String::from(include_str!("kernels/common.cuh"));
        s += "\n// The binary family's codes, written from ops/family.rs.\n";
        s += &crate::ops::Binary::c_defines();
        s += &format!("#define SMOOTH_L1 {}\n", crate::ops::scalar::gpu::SMOOTH_L1);
        s += "\n// The unary family's and the activations' codes, written from ops/unary.\n";
        s += &crate::ops::unary::gpu::c_defines();
        s += &crate::ops::reduce::Reduce::c_defines();
        s += "\n// The kernels' arguments, written from gpu/args.rs and the op families' tables.\n";
        for decl in decls() {
            s += &decl.c();
        }
        for family in super::FAMILIES {
            s += family;
        }
        s
    })
}

/// Every argument struct.
pub(crate) fn decls() -> impl Iterator<Item = &'static Decl> {
    super::ARG_TABLES.iter().flat_map(|t| t.iter())
}

/// Every kernel's name.
pub(crate) fn kernel_names() -> impl Iterator<Item = &'static str> {
    decls().flat_map(|d| d.kernels.iter().copied())
}

/// Every kernel's name and the C name of its argument struct.
#[cfg(test)]
pub(crate) fn kernel_structs() -> impl Iterator<Item = (&'static str, &'static str)> {
    decls().flat_map(|d| d.kernels.iter().map(|k| (*k, d.name)))
}

/// A kernel's arguments as a stream passes them: their address and size.
pub(crate) struct RawArgs {
    pub(crate) ptr: *const u8,
    pub(crate) bytes: usize,
}

impl RawArgs {
    /// `args`'s bytes (borrowed for as long as the launch call).
    pub(crate) fn of<A>(args: &A) -> RawArgs {
        RawArgs {
            ptr: (args as *const A).cast(),
            bytes: std::mem::size_of::<A>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{kernel_structs, source};

    /// Every kernel the device code defines is in a family's table with the struct it takes,
    /// and every table's kernel is defined: a table left out of `ARG_TABLES`, or a kernel whose
    /// C signature names another struct, fails here rather than at compile or launch time.
    #[test]
    fn the_tables_name_every_kernel_with_the_struct_it_takes() {
        let mut defined: Vec<(String, String)> = source()
            .lines()
            .filter_map(|l| l.strip_prefix("KERNEL void "))
            .filter_map(|rest| {
                let (name, args) = rest.split_once('(')?;
                let ty = args.split_whitespace().next()?;
                Some((name.to_string(), ty.to_string()))
            })
            .collect();
        let mut tables: Vec<(String, String)> = kernel_structs()
            .map(|(k, s)| (k.to_string(), s.to_string()))
            .collect();
        defined.sort();
        tables.sort();
        assert_eq!(defined, tables);
        assert!(tables.len() >= 70, "{} kernels", tables.len());
    }
}
