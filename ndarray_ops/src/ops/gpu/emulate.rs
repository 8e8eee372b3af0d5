//! A host [`Stream`] for the tests: the kernels ([`args::source`], from `kernels/*.cu`) compiled as C++ by the system compiler and
//! loaded as a shared library, each launch one call that loops over every index (the kernels'
//! grid-stride loops with a grid of one thread), and a reference GEMM. It runs the GPU op layer
//! and the device code on any machine, so both are tested against the CPU kernels without a GPU.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::args::{self, RawArgs};
use super::{DeviceBlock, Gemm, Stream};

/// The compiled kernels, or why there are none (no C++ compiler here).
pub(super) fn kernels() -> Result<&'static libloading::Library, String> {
    static LIB: OnceLock<Result<libloading::Library, String>> = OnceLock::new();
    LIB.get_or_init(compile).as_ref().map_err(Clone::clone)
}

fn compile() -> Result<libloading::Library, String> {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("mxrs-gpu-emulation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (src, lib) = (dir.join("kernels.cpp"), dir.join("libkernels.so"));
    // Each kernel gets an entry point that takes its arguments by address, so that one Rust
    // signature calls them all.
    let mut code = args::source().to_string();
    for (kernel, ty) in args::kernel_structs() {
        code += &format!(
            "extern \"C\" void {kernel}_host(const void* a) {{ {kernel}(*(const {ty}*)a); }}\n"
        );
    }
    std::fs::write(&src, code).map_err(|e| format!("{}: {e}", src.display()))?;
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&compiler)
        .args(["-O1", "-shared", "-fPIC", "-ffp-contract=off", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .map_err(|e| format!("{compiler} cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{compiler} rejected the kernels:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // SAFETY: a library we just built from our own source; it runs no initializers of note.
    let loaded =
        unsafe { libloading::Library::new(&lib) }.map_err(|e| format!("{}: {e}", lib.display()));
    // Loaded, the files are no longer needed (one directory per test process otherwise piles
    // up in the temp directory).
    let _ = std::fs::remove_dir_all(&dir);
    loaded
}

/// One op's stream on the host: scratch blocks live as long as it does.
pub(super) struct HostStream {
    lib: &'static libloading::Library,
    scratch: RefCell<Vec<Vec<u64>>>,
    /// Every kernel launched, in order (the tests check coverage with it).
    pub(super) launched: RefCell<Vec<&'static str>>,
    /// How many times the op read device memory back (each a wait for the device on a GPU).
    pub(super) downloads: std::cell::Cell<usize>,
}

impl HostStream {
    pub(super) fn new(lib: &'static libloading::Library) -> HostStream {
        HostStream {
            lib,
            scratch: RefCell::default(),
            launched: RefCell::default(),
            downloads: std::cell::Cell::default(),
        }
    }
}

impl Stream for HostStream {
    fn launch_raw(
        &self,
        kernel: &'static str,
        _threads: usize,
        args: RawArgs,
    ) -> Result<(), String> {
        if !args::kernel_names().any(|k| k == kernel) {
            return Err(format!("kernel {kernel} is not in the kernel tables"));
        }
        // SAFETY: `compile` gave every kernel a `<kernel>_host` entry of exactly this signature.
        let f = unsafe {
            self.lib
                .get::<unsafe extern "C" fn(*const u8)>(format!("{kernel}_host").as_bytes())
        }
        .map_err(|e| format!("kernel {kernel}: {e}"))?;
        self.launched.borrow_mut().push(kernel);
        // SAFETY: `args` is the struct `kernel` takes (its `Kernel` constant says so), holding
        // pointers to host buffers of the sizes the kernel reads.
        unsafe { f(args.ptr) };
        Ok(())
    }

    fn gemm_batched(&self, g: &Gemm, batch: usize, strides: [usize; 3]) -> Result<(), String> {
        for i in 0..batch {
            // SAFETY: the op layer sizes the matrices for `batch` products at these strides.
            let (a, b, c) = unsafe {
                (
                    g.a.add(i * strides[0]),
                    g.b.add(i * strides[1]),
                    g.c.add(i * strides[2]),
                )
            };
            reference_gemm(&Gemm { a, b, c, ..*g });
        }
        Ok(())
    }

    fn copy(&self, src: *const u8, dst: *mut u8, bytes: usize) -> Result<(), String> {
        // SAFETY: the op layer passes buffers of at least `bytes` that do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
        Ok(())
    }

    fn scratch(&self, bytes: usize) -> Result<*mut u8, String> {
        // Filled with a NaN pattern: a kernel that reads scratch before writing it shows.
        let mut block = vec![u64::MAX; bytes.div_ceil(8)];
        let ptr = block.as_mut_ptr().cast();
        self.scratch.borrow_mut().push(block);
        Ok(ptr)
    }

    fn download(&self, t: &super::TensorRef) -> Result<Vec<f32>, String> {
        self.downloads.set(self.downloads.get() + 1);
        // SAFETY: the op layer passes a float32 tensor it may read.
        Ok(unsafe { t.slice::<f32>() }.to_vec())
    }

    fn lasting(&self, bytes: usize) -> Result<Box<dyn DeviceBlock>, String> {
        let mut block = vec![u64::MAX; bytes.div_ceil(8).max(1)];
        let ptr = block.as_mut_ptr().cast();
        Ok(Box::new(HostBlock { ptr, _block: block }))
    }

    fn upload(&self, table: &[i64]) -> Result<*mut u8, String> {
        let bytes = std::mem::size_of_val(table);
        let ptr = self.scratch(bytes)?;
        // SAFETY: fresh scratch of `bytes`, not overlapping the table.
        unsafe { std::ptr::copy_nonoverlapping(table.as_ptr().cast(), ptr, bytes) };
        Ok(ptr)
    }
}

/// Host memory standing for a lasting device block (filled with a NaN pattern, as scratch is).
struct HostBlock {
    ptr: *mut u8,
    _block: Vec<u64>,
}

// SAFETY: the block owns its buffer (moving the Vec leaves the buffer where `ptr` points).
unsafe impl Send for HostBlock {}

impl DeviceBlock for HostBlock {
    fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

/// `C = op(A) op(B) + beta C`, one dot product at a time in double.
fn reference_gemm(g: &Gemm) {
    for i in 0..g.m {
        for j in 0..g.n {
            let mut acc = 0.0f64;
            for p in 0..g.k {
                // SAFETY: the op layer sizes the matrices for these strides.
                let (a, b) = unsafe {
                    (
                        *g.a.add(if g.ta { p * g.lda + i } else { i * g.lda + p }),
                        *g.b.add(if g.tb { j * g.ldb + p } else { p * g.ldb + j }),
                    )
                };
                acc += f64::from(a) * f64::from(b);
            }
            // SAFETY: as above.
            unsafe {
                let c = g.c.add(i * g.ldc + j);
                // Like BLAS, beta = 0 never reads C (it may hold anything).
                *c = if g.beta == 0.0 {
                    acc as f32
                } else {
                    acc as f32 + g.beta * *c
                };
            }
        }
    }
}
