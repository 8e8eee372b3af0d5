//! Which vector instruction set the products run with: detected once, or named by `MXRS_CPU`.

/// The vector instruction set the micro-kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512F: 16 lanes, 32 registers ([`super::avx512::kernel`]).
    Avx512,
    /// AVX2 and FMA: 8 lanes, 16 registers ([`super::avx2::kernel`]).
    Avx2,
}

impl Isa {
    /// Floats per fused multiply-add (two FMA units a core on the CPUs timed).
    pub(super) fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => 16,
            Isa::Avx2 => 8,
        }
    }
}

/// The instruction set the products run with here: the widest the CPU has, or the one
/// `MXRS_CPU` names (`avx512`, `avx2`, or `none` for the portable fallback) where the CPU has
/// it, so that the AVX2 kernels can be run and timed on an AVX-512 machine. Never under Miri.
#[inline]
pub(crate) fn isa() -> Option<Isa> {
    static ISA: std::sync::OnceLock<Option<Isa>> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let detected = detect();
        match std::env::var("MXRS_CPU").ok().as_deref() {
            None | Some("") => detected.first().copied(),
            Some("none") => None,
            Some(name) => {
                let asked = match name {
                    "avx512" => Some(Isa::Avx512),
                    "avx2" => Some(Isa::Avx2),
                    _ => None,
                };
                match asked.filter(|isa| detected.contains(isa)) {
                    Some(isa) => Some(isa),
                    None => {
                        eprintln!(
                            "mxrs: MXRS_CPU={name} is not one of this CPU's instruction sets \
                             {detected:?} (or none); using {:?}",
                            detected.first()
                        );
                        detected.first().copied()
                    }
                }
            }
        }
    })
}

/// The instruction sets this CPU has, widest first.
pub(super) fn detect() -> Vec<Isa> {
    let mut found = Vec::new();
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            found.push(Isa::Avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            found.push(Isa::Avx2);
        }
    }
    found
}

/// Whether [`sgemm`] can run here: x86-64 with AVX-512F, or with AVX2 and FMA.
pub(crate) fn available() -> bool {
    isa().is_some()
}

/// Floats in half this core's second-level cache: the packed block of `b`, and the working
/// set other kernels size to stay in that cache beside it (Winograd's chunks of tiles).
pub(crate) fn half_l2_floats() -> usize {
    super::caches::blocking().b_block
}

/// Whether the products run with AVX-512 (the kernels written for it alone check this).
pub(crate) fn avx512() -> bool {
    isa() == Some(Isa::Avx512)
}
