//! `NDArray`: an asynchronous, device-placed array. Every call returns at once; the engine runs
//! the kernel when the array's earlier readers and writers allow.
//!
//! An array is a view (shape, dtype, byte offset) of a shared [`Chunk`]: a storage block plus the
//! engine var that orders every op touching it. Views, slices and reshapes share the chunk and
//! its var. When the last view is dropped, the chunk pushes a delete op on its var that hands
//! the block back to the storage pool — after every op still using it has finished. Kernels
//! therefore capture plain pointers into the block: the var's ordering keeps them valid.
//!
//! A *region* is a chunk carved out of another one with a var of its own (the executor's planned
//! arena: one block, one region per planned buffer, so ops on different buffers do not serialize
//! on one var). Its delete op releases its hold on the parent, so the parent block goes back to
//! the pool only after every op on every region has finished. Ordering between regions that
//! share addresses is the carver's job.

mod make;
pub(crate) mod tape;

use std::fmt;
use std::sync::{Arc, Mutex};

use engine::{FnProperty, Op, Var};
use ndarray::{ArrayD, IxDyn};
use storage::{Context, Handle};

use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::{cheap_copy_if_small, Attrs, Dims, RawBuf, TensorRef};
use crate::runtime::Runtime;
use crate::{DType, Element};

/// A storage block (or a region of another chunk's block) and the engine var that orders access
/// to it.
pub(crate) struct Chunk {
    rt: Arc<Runtime>,
    var: Var,
    ctx: Context,
    ptr: usize,
    /// The chunk's length: an array over fewer bytes is a view of part of it.
    bytes: usize,
    /// What keeps the memory alive; released by the var's delete op.
    owner: Option<Owner>,
}

enum Owner {
    /// The block itself, handed back to its pool.
    Block(#[allow(dead_code)] Handle),
    /// A region of a parent chunk, which lives at least as long.
    Region(#[allow(dead_code)] Arc<Chunk>),
    /// Memory another library owns (see [`NDArray::from_foreign`]); dropping this gives it back.
    Foreign(#[allow(dead_code)] Box<dyn Send + Sync>),
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            // The memory is released only once every op pushed on the var has finished. The var
            // belongs to this chunk alone, so the delete cannot be refused.
            let _ = self
                .rt
                .engine()
                .delete_var(Box::new(move || drop(owner)), &self.var);
        }
    }
}

/// An n-dimensional array on a device (row-major, contiguous).
#[derive(Clone)]
pub struct NDArray {
    chunk: Arc<Chunk>,
    shape: Dims,
    dtype: DType,
    /// Bytes from the start of the chunk.
    offset: usize,
    /// Where autograd recorded it (`None` outside a recorded graph).
    entry: Option<Arc<tape::Entry>>,
}

fn elements(op: &str, shape: &[usize], dtype: DType) -> Result<(usize, usize)> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let bytes = n.and_then(|n| n.checked_mul(dtype.size()));
    match (n, bytes) {
        (Some(n), Some(b)) if b <= isize::MAX as usize => Ok((n, b)),
        _ => Err(shape_error(
            op,
            "shape",
            shape,
            "a size that fits in memory",
        )),
    }
}

/// The error for GPU work in a build without the GPU back end.
#[cfg(not(feature = "cuda"))]
pub(crate) fn no_device(op: &str, ctx: Context) -> NdError {
    NdError::Context {
        op: op.into(),
        arg: "array".into(),
        found: ctx.to_string(),
        expected: "a CPU context (this build has no GPU back end: build with --features cuda)"
            .into(),
    }
}

impl NDArray {
    pub(crate) fn alloc(
        rt: &Arc<Runtime>,
        shape: &[usize],
        dtype: DType,
        ctx: Context,
    ) -> Result<NDArray> {
        let (_, bytes) = elements("empty", shape, dtype)?;
        let handle = rt.storage(ctx).alloc(bytes)?;
        let ptr = handle.addr();
        Ok(NDArray::over(
            rt,
            ctx,
            ptr,
            Owner::Block(handle),
            shape,
            dtype,
        ))
    }

    /// A new array of `shape` and `dtype` at `ptr` on `ctx`, with a var of its own, whose memory
    /// `owner` keeps alive.
    fn over(
        rt: &Arc<Runtime>,
        ctx: Context,
        ptr: usize,
        owner: Owner,
        shape: &[usize],
        dtype: DType,
    ) -> NDArray {
        let chunk = Chunk {
            rt: rt.clone(),
            var: rt.engine().new_var(),
            ctx,
            ptr,
            bytes: shape.iter().product::<usize>() * dtype.size(),
            owner: Some(owner),
        };
        NDArray {
            chunk: Arc::new(chunk),
            shape: Dims::from_slice(shape),
            dtype,
            offset: 0,
            entry: None,
        }
    }

    /// An array over CPU memory another library owns, without a copy: `keep` is what holds that
    /// memory (dropping it gives the memory back), dropped once the array, its clones and
    /// views are gone and every op pushed on them has finished. Refused, with nothing taken,
    /// when `ptr` is null or not aligned for `dtype`: copy the data in instead.
    ///
    /// # Safety
    /// `ptr` must point at `shape`'s elements of `dtype`, row-major and contiguous, readable
    /// and writable until `keep` is dropped; while the array lives, the owner must not write
    /// them (and must not read them while an op pushed on the array may write them).
    pub unsafe fn from_foreign(
        rt: &Arc<Runtime>,
        ptr: *mut u8,
        shape: &[usize],
        dtype: DType,
        keep: Box<dyn Send + Sync>,
    ) -> Result<NDArray> {
        elements("from_foreign", shape, dtype)?;
        if ptr.is_null() || !(ptr as usize).is_multiple_of(dtype.size()) {
            return Err(invalid(
                "from_foreign",
                format!("memory at {ptr:p} is not aligned for {dtype}; copy it in instead"),
            ));
        }
        let owner = Owner::Foreign(keep);
        Ok(NDArray::over(
            rt,
            Context::cpu(0),
            ptr as usize,
            owner,
            shape,
            dtype,
        ))
    }

    /// An array of `shape` and `dtype` at byte `offset` of this array's chunk, in a region with
    /// a var of its own: ops on it are not ordered against ops on this array or on other regions,
    /// so the caller must order them where their bytes overlap.
    pub(crate) fn region(&self, offset: usize, shape: &[usize], dtype: DType) -> Result<NDArray> {
        let (_, bytes) = elements("region", shape, dtype)?;
        let have = self.size() * self.dtype.size();
        if offset.checked_add(bytes).is_none_or(|end| end > have) {
            return Err(invalid(
                "region",
                format!("{bytes} bytes at offset {offset} do not fit in an array of {have} bytes"),
            ));
        }
        let ptr = self.chunk.ptr + self.offset + offset;
        let owner = Owner::Region(self.chunk.clone());
        Ok(NDArray::over(
            self.runtime(),
            self.chunk.ctx,
            ptr,
            owner,
            shape,
            dtype,
        ))
    }

    /// The same chunk (and var) read as another shape and dtype that fit in it.
    pub(crate) fn retyped(&self, shape: &[usize], dtype: DType) -> Result<NDArray> {
        let (_, bytes) = elements("retype", shape, dtype)?;
        let have = self.size() * self.dtype.size();
        if bytes > have {
            return Err(invalid(
                "retype",
                format!("{bytes} bytes do not fit in an array of {have} bytes"),
            ));
        }
        Ok(NDArray {
            shape: Dims::from_slice(shape),
            dtype,
            entry: None,
            ..self.clone()
        })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device.
    pub fn ctx(&self) -> Context {
        self.chunk.ctx
    }

    /// The runtime that made it.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.chunk.rt
    }

    /// The engine var ordering access to its chunk (shared by its views).
    pub fn var(&self) -> &Var {
        &self.chunk.var
    }

    /// Whether this array spans its whole chunk, so that a write of every element replaces
    /// everything its var holds. A view of part of the chunk does not: an op writing it is an
    /// update of the var (it reads it too), so a failure the var holds stops that op and stays,
    /// instead of being cleared by a write that left the rest of the chunk as the failed op
    /// left it.
    pub fn spans_chunk(&self) -> bool {
        self.offset == 0 && self.size() * self.dtype.size() == self.chunk.bytes
    }

    /// The vars of those of `arrays` that are views of part of their chunk: an op writing them
    /// lists these among its reads too (see [`NDArray::spans_chunk`]).
    pub(crate) fn partial_vars<'a>(
        arrays: impl IntoIterator<Item = &'a NDArray>,
    ) -> impl Iterator<Item = &'a Var> {
        arrays
            .into_iter()
            .filter(|a| !a.spans_chunk())
            .map(NDArray::var)
    }

    /// Where autograd recorded it.
    pub(crate) fn entry(&self) -> Option<&Arc<tape::Entry>> {
        self.entry.as_ref()
    }

    pub(crate) fn set_entry(&mut self, entry: Option<Arc<tape::Entry>>) {
        self.entry = entry;
    }

    /// The address of the first element, for handing the memory to another library without a
    /// copy (DLPack). Reading through it is sound only after [`NDArray::wait_to_read`] and until
    /// an op pushed later writes the array; writing through it, only after
    /// [`NDArray::wait_to_write`] and while no op is pushed on the array. The memory stays valid
    /// while this array or a clone of it lives.
    pub fn data_ptr(&self) -> *mut u8 {
        (self.chunk.ptr + self.offset) as *mut u8
    }

    /// Whether two arrays share one chunk (one is a view of the other, or both of a third).
    pub fn shares_chunk(&self, other: &NDArray) -> bool {
        Arc::ptr_eq(&self.chunk, &other.chunk)
    }

    /// Whether both are the same elements of the same chunk (one view, perhaps two handles):
    /// copying one into the other changes nothing.
    pub fn same_view(&self, other: &NDArray) -> bool {
        self.shares_chunk(other)
            && self.offset == other.offset
            && self.shape == other.shape
            && self.dtype == other.dtype
    }

    pub(crate) fn tensor(&self) -> TensorRef {
        TensorRef {
            buf: RawBuf {
                ptr: (self.chunk.ptr + self.offset) as *mut u8,
                bytes: self.size() * self.dtype.size(),
            },
            // `from_slice` copies the dims at once, where `clone` pushes them one by one.
            shape: Dims::from_slice(&self.shape),
            dtype: self.dtype,
        }
    }

    pub(crate) fn push(
        &self,
        name: &'static str,
        reads: &[&NDArray],
        writes: &[&NDArray],
        f: impl FnOnce() -> std::result::Result<(), String> + Send + 'static,
    ) -> Result<()> {
        let engine = self.runtime().engine();
        let op = Op::sync(name, move |_| f().map_err(Into::into))
            .on(self.ctx())
            .writes(writes.iter().map(|a| a.var()))
            .reads(reads.iter().map(|a| a.var()))
            .reads(NDArray::partial_vars(writes.iter().copied()));
        // Fills, writes from the host and reads back: each moves the arrays' bytes once.
        let bytes = reads
            .iter()
            .chain(writes)
            .map(|a| a.size() * a.dtype.size())
            .sum();
        Ok(engine.push(cheap_copy_if_small(op, bytes))?)
    }

    /// Sets every element to `value` (converted to the dtype).
    pub fn fill(&self, value: f64) -> Result<()> {
        tape::check_write("fill", self)?;
        if !self.ctx().is_cpu() {
            return self.fill_on_device(value);
        }
        let t = self.tensor();
        self.push("fill", &[], &[self], move || {
            crate::with_dtype!(t.dtype, T => {
                // SAFETY: the engine gives this op exclusive access to the block.
                unsafe { t.slice_mut::<T>() }.fill(T::from_f64(value));
            });
            Ok(())
        })
    }

    #[cfg(feature = "cuda")]
    fn fill_on_device(&self, value: f64) -> Result<()> {
        if self.dtype != DType::F32 {
            return Err(NdError::DType {
                op: "fill".into(),
                arg: "array".into(),
                found: self.dtype.to_string(),
                expected: format!("float32 (the GPU kernels' type) on {}", self.ctx()),
            });
        }
        let pool = self.runtime().storage(self.ctx());
        let op = crate::ops::gpu::cuda::fill_op(self.tensor(), value, pool)
            .on(self.ctx())
            .write(self.var())
            .reads(NDArray::partial_vars([self]));
        Ok(self.runtime().engine().push(op)?)
    }

    #[cfg(not(feature = "cuda"))]
    fn fill_on_device(&self, _: f64) -> Result<()> {
        Err(no_device("fill", self.ctx()))
    }

    /// Copies `data` in (its length must equal the size; its type the dtype).
    pub(crate) fn write_from<T: Element>(&self, data: Vec<T>) -> Result<()> {
        self.check_dtype::<T>("write")?;
        if data.len() != self.size() {
            return Err(invalid(
                "write",
                format!(
                    "{} values for an array of {} elements",
                    data.len(),
                    self.size()
                ),
            ));
        }
        if !self.ctx().is_cpu() {
            // Through host memory and a copy op, as MXNet's `SyncCopyFromCPU` does.
            let staging = self
                .runtime()
                .empty(&self.shape, self.dtype, Context::cpu(0))?;
            staging.write_from(data)?;
            return staging.copy_into(self);
        }
        let t = self.tensor();
        self.push("write", &[], &[self], move || {
            // SAFETY: the engine gives this op exclusive access to the block.
            unsafe { t.slice_mut::<T>() }.copy_from_slice(&data);
            Ok(())
        })
    }

    fn check_dtype<T: Element>(&self, op: &str) -> Result<()> {
        if self.dtype == T::DTYPE {
            Ok(())
        } else {
            Err(NdError::DType {
                op: op.into(),
                arg: "array".into(),
                found: self.dtype.to_string(),
                expected: T::DTYPE.to_string(),
            })
        }
    }

    /// Waits for the pending writes and copies the elements out.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>("to_vec")?;
        if !self.ctx().is_cpu() {
            return self.copy_to(Context::cpu(0))?.to_vec();
        }
        let out: Arc<Mutex<Vec<T>>> = Arc::default();
        let (t, sink) = (self.tensor(), out.clone());
        self.push("copy_out", &[self], &[], move || {
            // SAFETY: the engine orders this read after every earlier write of the block.
            let data = unsafe { t.slice::<T>() }.to_vec();
            *sink.lock().map_err(|e| e.to_string())? = data;
            Ok(())
        })?;
        self.wait_to_read()?;
        let v = std::mem::take(&mut *out.lock().map_err(|e| invalid("to_vec", e.to_string()))?);
        Ok(v)
    }

    /// Waits for the pending writes and copies the elements out as bytes (row-major, native
    /// byte order).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if !self.ctx().is_cpu() {
            return self.copy_to(Context::cpu(0))?.to_bytes();
        }
        let out: Arc<Mutex<Vec<u8>>> = Arc::default();
        let (buf, sink) = (self.tensor().buf, out.clone());
        self.push("copy_out", &[self], &[], move || {
            // Moved whole (a capture of its raw-pointer field alone would not be `Send`).
            let whole = buf;
            let RawBuf { ptr, bytes } = whole;
            // SAFETY: the engine orders this read after every earlier write of the block, whose
            // first `bytes` bytes are the array's.
            let data = unsafe { std::slice::from_raw_parts(ptr, bytes) }.to_vec();
            *sink.lock().map_err(|e| e.to_string())? = data;
            Ok(())
        })?;
        self.wait_to_read()?;
        let v = std::mem::take(&mut *out.lock().map_err(|e| invalid("to_bytes", e.to_string()))?);
        Ok(v)
    }

    /// Waits and copies out as an `ndarray` array.
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(&self.shape), v)
            .map_err(|e| invalid("to_ndarray", e.to_string()))
    }

    /// Returns when every op pushed so far that writes this array has finished; reports the
    /// failure of one of them (or of an op they depended on). For a GPU array, also when its
    /// device has run them (GPU ops end once queued; see the GPU back end).
    pub fn wait_to_read(&self) -> Result<()> {
        self.runtime().engine().wait_for_var(self.var())?;
        #[cfg(feature = "cuda")]
        crate::ops::gpu::cuda::settle(self.ctx())?;
        Ok(())
    }

    /// Returns when every op pushed so far that reads or writes this array has finished.
    pub fn wait_to_write(&self) -> Result<()> {
        // The engine's wait marker is exclusive, so it also waits for earlier reads.
        self.wait_to_read()
    }

    /// A view with another shape of the same size (shares the chunk).
    pub fn reshape(&self, shape: &[usize]) -> Result<NDArray> {
        let (n, _) = elements("reshape", shape, self.dtype)?;
        if n != self.size() {
            return Err(shape_error(
                "reshape",
                "new shape",
                shape,
                format!(
                    "{} elements, as the array of shape {:?} has",
                    self.size(),
                    self.shape
                ),
            ));
        }
        let view = NDArray {
            shape: Dims::from_slice(shape),
            entry: None,
            ..self.clone()
        };
        let attrs = || Attrs::new().with("shape", format!("{shape:?}"));
        tape::record_view("Reshape", attrs, self, view)
    }

    /// Rows `start..end` of the first axis (shares the chunk).
    pub fn slice(&self, start: usize, end: usize) -> Result<NDArray> {
        let rows = *self
            .shape
            .first()
            .ok_or_else(|| invalid("slice", "a 0-d array has no first axis"))?;
        if start > end || end > rows {
            return Err(invalid(
                "slice",
                format!(
                    "range {start}..{end} is outside 0..{rows} of shape {:?}",
                    self.shape
                ),
            ));
        }
        let row_bytes = self.shape[1..].iter().product::<usize>() * self.dtype.size();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        let view = NDArray {
            shape,
            offset: self.offset + start * row_bytes,
            entry: None,
            ..self.clone()
        };
        let attrs = || {
            Attrs::new()
                .with("axis", 0)
                .with("begin", start)
                .with("end", end)
        };
        tape::record_view("slice_axis", attrs, self, view)
    }

    /// Row `i` of the first axis, without that axis (shares the chunk).
    pub fn at(&self, i: usize) -> Result<NDArray> {
        let s = self.slice(i, i + 1)?;
        s.reshape(&s.shape[1..])
    }

    /// A copy on `ctx` (an asynchronous copy op; copy workers run it when a GPU is involved).
    pub fn copy_to(&self, ctx: Context) -> Result<NDArray> {
        let dst = self.runtime().empty(&self.shape, self.dtype, ctx)?;
        self.copy_into(&dst)?;
        let op = match ctx == self.ctx() {
            true => "_copy",
            false => "_CrossDeviceCopy",
        };
        tape::record_view(op, Attrs::new, self, dst)
    }

    /// This array on `ctx`: itself if it is already there, else a copy.
    pub fn as_in_context(&self, ctx: Context) -> Result<NDArray> {
        if ctx == self.ctx() {
            Ok(self.clone())
        } else {
            self.copy_to(ctx)
        }
    }

    /// Copies this array's elements into `dst` (same shape and dtype, any context).
    pub fn copy_into(&self, dst: &NDArray) -> Result<()> {
        tape::check_write("copy", dst)?;
        let op = self.copy_op(dst, "copy")?;
        Ok(self.runtime().engine().push(op)?)
    }

    /// The engine op of [`NDArray::copy_into`], not yet pushed, named `name` (for errors and the
    /// profiler). Between two devices it is a copy op, which the destination's copy workers run.
    pub(crate) fn copy_op<'a>(&'a self, dst: &'a NDArray, name: &'static str) -> Result<Op<'a>> {
        if dst.shape != self.shape || dst.dtype != self.dtype {
            return Err(shape_error(
                "copy",
                "destination",
                &dst.shape,
                format!(
                    "shape {:?} and dtype {} like the source (it has {})",
                    self.shape, self.dtype, dst.dtype
                ),
            ));
        }
        if !Arc::ptr_eq(self.runtime(), dst.runtime()) {
            return Err(invalid("copy", "the arrays belong to different runtimes"));
        }
        if !self.ctx().is_cpu() || !dst.ctx().is_cpu() {
            return self.device_copy_op(dst, name);
        }
        let (src_t, dst_t) = (self.tensor(), dst.tensor());
        let prop = if self.ctx() == dst.ctx() {
            FnProperty::Normal
        } else {
            FnProperty::CopyToDevice
        };
        let op = Op::sync(name, move |_| {
            // SAFETY: the engine orders this op after the source's writes and gives it exclusive
            // access to the destination; ranges of distinct arrays in one chunk may overlap, so
            // the copy tolerates overlap.
            unsafe { src_t.copy_bytes_to(&dst_t) };
            Ok(())
        })
        .on(dst.ctx())
        .prop(prop)
        .read(self.var())
        .write(dst.var())
        .reads(NDArray::partial_vars([dst]));
        Ok(cheap_copy_if_small(op, self.size() * self.dtype.size()))
    }
}

impl NDArray {
    /// The copy op between two contexts of which one at least is a GPU.
    #[cfg(feature = "cuda")]
    fn device_copy_op<'a>(&'a self, dst: &'a NDArray, name: &'static str) -> Result<Op<'a>> {
        let op = crate::ops::gpu::cuda::copy_op(
            name,
            self.tensor(),
            dst.tensor(),
            self.ctx(),
            dst.ctx(),
        );
        Ok(op
            .read(self.var())
            .write(dst.var())
            .reads(NDArray::partial_vars([dst])))
    }

    #[cfg(not(feature = "cuda"))]
    fn device_copy_op<'a>(&'a self, dst: &'a NDArray, _: &'static str) -> Result<Op<'a>> {
        let gpu = if self.ctx().is_cpu() {
            dst.ctx()
        } else {
            self.ctx()
        };
        Err(no_device("copy", gpu))
    }
}

impl fmt::Debug for NDArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NDArray({:?}, {}, {})",
            self.shape,
            self.dtype,
            self.ctx()
        )
    }
}
