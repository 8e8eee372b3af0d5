//! MXNet's NDArray file format: what `mx.nd.save` writes and `mx.nd.load` reads, and so a
//! checkpoint's `.params` file. Weights move between this runtime and MXNet through it.
//!
//! A file, every number little-endian (MXNet writes its machine's order; every platform it ships
//! on is little-endian):
//!
//! ```text
//! u64 0x112, u64 0, u64 n, n arrays, u64 m (0 or n), m names (u64 byte length, UTF-8 bytes)
//! ```
//!
//! An array as MXNet 1.x writes it (version 2):
//!
//! ```text
//! u32 0xF993FAC9, i32 storage type (0: dense), i32 ndim, ndim x i64 dims,
//! i32 device type, i32 device id, i32 type flag, the elements in row-major order
//! ```
//!
//! Version 1 (magic 0xF993FAC8) has no storage type; before it, the first u32 was `ndim` itself
//! and dims were u32. Both still load. Only dense arrays of the runtime's element types load;
//! anything else is a clear error naming the array, never a panic or a huge allocation: sizes
//! read from the file are checked before they are trusted.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::sync::Arc;

use storage::{Context, DeviceType};

use crate::files::{file_error, write_atomically};
use crate::{DType, Element, NDArray, NdError, Result, Runtime, Symbol};

const LIST_MAGIC: u64 = 0x112;
const V2_MAGIC: u32 = 0xF993_FAC9;
const V1_MAGIC: u32 = 0xF993_FAC8;
/// More dimensions than any real array has: a larger count means a damaged file.
const MAX_NDIM: usize = 32;

/// The arrays of a file, with their names when it has them (`mx.nd.save` of a dict) or none
/// (of a list).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The arrays, in file order.
    pub arrays: Vec<NDArray>,
    /// One name per array, or empty.
    pub names: Vec<String>,
}

impl Loaded {
    /// The arrays by name; an error for a file saved without names, or naming one twice.
    pub fn into_named(self) -> Result<HashMap<String, NDArray>> {
        let bad = |reason: String| NdError::Invalid {
            op: "load".into(),
            reason,
        };
        if self.names.is_empty() && !self.arrays.is_empty() {
            return Err(bad(format!(
                "the file holds {} arrays without names (saved from a list, not a dict)",
                self.arrays.len()
            )));
        }
        let mut named = HashMap::with_capacity(self.arrays.len());
        for (name, a) in self.names.into_iter().zip(self.arrays) {
            if named.contains_key(&name) {
                return Err(bad(format!("the file names two arrays {name:?}")));
            }
            named.insert(name, a);
        }
        Ok(named)
    }
}

/// Saves named arrays (MXNet's `mx.nd.save(path, dict)`), in the order given.
pub fn save(path: impl AsRef<Path>, arrays: &[(&str, &NDArray)]) -> Result<()> {
    let (names, arrays): (Vec<&str>, Vec<&NDArray>) = arrays.iter().copied().unzip();
    save_to(path.as_ref(), &arrays, &names)
}

/// Saves arrays without names (MXNet's `mx.nd.save(path, list)`).
pub fn save_list(path: impl AsRef<Path>, arrays: &[&NDArray]) -> Result<()> {
    save_to(path.as_ref(), arrays, &[])
}

fn save_to(path: &Path, arrays: &[&NDArray], names: &[&str]) -> Result<()> {
    write_atomically("save", path, |w| {
        write_arrays(w, arrays, names).map_err(|e| match e {
            NdError::Invalid { op, reason } => NdError::Invalid {
                op,
                reason: format!("writing {}: {reason}", path.display()),
            },
            other => other,
        })
    })
}

/// Writes arrays (waiting for their pending writes) and their names (empty, or one per array)
/// in MXNet's format.
pub fn write_arrays(w: &mut impl Write, arrays: &[&NDArray], names: &[&str]) -> Result<()> {
    if !names.is_empty() && names.len() != arrays.len() {
        return Err(NdError::Invalid {
            op: "save".into(),
            reason: format!(
                "{} names for {} arrays (give one per array, or none)",
                names.len(),
                arrays.len()
            ),
        });
    }
    let io = |e: std::io::Error| NdError::Invalid {
        op: "save".into(),
        reason: e.to_string(),
    };
    let mut head = Vec::with_capacity(24);
    put(&mut head, LIST_MAGIC.to_le_bytes());
    put(&mut head, 0u64.to_le_bytes());
    put(&mut head, (arrays.len() as u64).to_le_bytes());
    w.write_all(&head).map_err(io)?;
    for a in arrays {
        w.write_all(&array_bytes(a)?).map_err(io)?;
    }
    let mut tail = Vec::new();
    put(&mut tail, (names.len() as u64).to_le_bytes());
    for n in names {
        put(&mut tail, (n.len() as u64).to_le_bytes());
        tail.extend_from_slice(n.as_bytes());
    }
    w.write_all(&tail).map_err(io)
}

fn put<const N: usize>(out: &mut Vec<u8>, bytes: [u8; N]) {
    out.extend_from_slice(&bytes);
}

/// One array, version 2, dense. A 0-dimensional array is refused: MXNet 1.x reads a shape of no
/// dimensions as its empty (none) array, so the value would not come back.
fn array_bytes(a: &NDArray) -> Result<Vec<u8>> {
    if a.ndim() == 0 {
        return Err(NdError::Invalid {
            op: "save".into(),
            reason: "a 0-dimensional array cannot be saved in MXNet's format (it would load as \
                     an empty array); reshape it to [1]"
                .into(),
        });
    }
    let mut out = Vec::with_capacity(40 + 8 * a.ndim() + a.size() * a.dtype().size());
    put(&mut out, V2_MAGIC.to_le_bytes());
    put(&mut out, 0i32.to_le_bytes());
    put(&mut out, (a.ndim() as i32).to_le_bytes());
    for &d in a.shape() {
        put(&mut out, (d as i64).to_le_bytes());
    }
    let ctx = a.ctx();
    put(&mut out, device_flag(ctx.dev_type).to_le_bytes());
    put(&mut out, (ctx.dev_id as i32).to_le_bytes());
    put(&mut out, type_flag(a.dtype()).to_le_bytes());
    crate::with_dtype!(a.dtype(), T => {
        for x in a.to_vec::<T>()? {
            x.put_le(&mut out);
        }
    });
    Ok(out)
}

/// MXNet's device type numbers.
fn device_flag(t: DeviceType) -> i32 {
    match t {
        DeviceType::Cpu => 1,
        DeviceType::Gpu => 2,
        DeviceType::CpuPinned => 3,
        DeviceType::CpuShared => 5,
    }
}

/// mshadow's type flags, for the element types the runtime has.
fn type_flag(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::U8 => 3,
        DType::I32 => 4,
        DType::I64 => 6,
    }
}

fn dtype_of_flag(flag: i32) -> std::result::Result<DType, String> {
    Ok(match flag {
        0 => DType::F32,
        1 => DType::F64,
        3 => DType::U8,
        4 => DType::I32,
        6 => DType::I64,
        other => {
            let name = match other {
                2 => "float16",
                5 => "int8",
                7 => "bool",
                8 => "int16",
                9 => "uint16",
                10 => "uint32",
                11 => "uint64",
                12 => "bfloat16",
                _ => "unknown",
            };
            return Err(format!(
                "type flag {other} ({name}) is not an element type of this runtime \
                 (float32, float64, uint8, int32, int64)"
            ));
        }
    })
}

/// Loads every array of a file onto `ctx` (the device each was saved from is not kept, as
/// after `mx.nd.load(...)` and `as_in_context(ctx)`).
pub fn load(path: impl AsRef<Path>, rt: &Arc<Runtime>, ctx: Context) -> Result<Loaded> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| file_error("load", path, "cannot open", e))?;
    read_arrays(&mut BufReader::new(file), rt, ctx).map_err(|e| match e {
        NdError::Invalid { op, reason } => NdError::Invalid {
            op,
            reason: format!("{}: {reason}", path.display()),
        },
        other => other,
    })
}

/// Reads a file's arrays from `r` onto `ctx`.
pub fn read_arrays(r: &mut impl Read, rt: &Arc<Runtime>, ctx: Context) -> Result<Loaded> {
    let mut r = Reader { r, at: 0 };
    let magic = r.u64("the file header")?;
    if magic != LIST_MAGIC {
        return Err(r.bad(format!(
            "starts with {magic:#x}, not MXNet's NDArray list header {LIST_MAGIC:#x}"
        )));
    }
    r.u64("the header's reserved word")?;
    let n = r.u64("the array count")?;
    let mut arrays = Vec::new();
    for k in 0..n {
        arrays.push(read_array(&mut r, k, rt, ctx)?);
    }
    let m = r.u64("the name count")?;
    if m != 0 && m != n {
        return Err(r.bad(format!("{m} names for {n} arrays")));
    }
    let mut names = Vec::new();
    for k in 0..m {
        let len = r.u64("a name's length")?;
        let bytes = r.bytes(len, &format!("name {k}"))?;
        let name = String::from_utf8(bytes).map_err(|_| r.bad(format!("name {k} is not UTF-8")))?;
        names.push(name);
    }
    Ok(Loaded { arrays, names })
}

fn read_array(r: &mut Reader<'_>, k: u64, rt: &Arc<Runtime>, ctx: Context) -> Result<NDArray> {
    let what = format!("array {k}");
    let first = r.u32(&what)?;
    let shape = match first {
        V2_MAGIC => {
            let stype = r.i32(&what)?;
            if stype != 0 {
                let kind = match stype {
                    1 => "row_sparse",
                    2 => "csr",
                    _ => "unknown",
                };
                return Err(r.bad(format!(
                    "{what} has storage type {stype} ({kind}); only dense arrays load"
                )));
            }
            let ndim = r.i32(&what)?;
            read_dims(r, &what, ndim.into(), |r, w| r.i64(w))?
        }
        V1_MAGIC => {
            let ndim = r.i32(&what)?;
            read_dims(r, &what, ndim.into(), |r, w| r.i64(w))?
        }
        // Before version 1 the first word was the dimension count, and dims were u32.
        ndim => read_dims(r, &what, ndim.into(), |r, w| r.u32(w).map(i64::from))?,
    };
    r.i32(&what)?; // device type: the caller says where the array goes
    r.i32(&what)?; // device id
    let flag = r.i32(&what)?;
    let dtype = dtype_of_flag(flag).map_err(|e| r.bad(format!("{what}: {e}")))?;
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .and_then(|n| n.checked_mul(dtype.size()).map(|b| (n, b)));
    let Some((n, bytes)) = count else {
        return Err(r.bad(format!("{what} has shape {shape:?}, too large to hold")));
    };
    // An array past the device's memory limit is refused from its header, before any of its
    // bytes are read or held.
    let pool = rt.storage(ctx).stats();
    if let Some(limit) = pool
        .limit
        .filter(|&l| bytes > l.saturating_sub(pool.in_use))
    {
        return Err(r.bad(format!(
            "{what} ({shape:?}, {bytes} bytes of {}) does not fit under {ctx}'s memory limit of \
             {limit} bytes ({} in use)",
            dtype.name(),
            pool.in_use
        )));
    }
    crate::with_dtype!(dtype, T => {
        // Read a megabyte at a time (a whole number of elements of any type) and grown as the
        // bytes arrive, so that the file's bytes and their values are never both held whole,
        // and a file that ends early fails before anything its header claims is reserved.
        let mut v: Vec<T> = Vec::new();
        let mut left = bytes;
        while left > 0 {
            let chunk = left.min(1 << 20);
            let data = r.bytes(chunk as u64, &format!("{what}'s {} elements", dtype.name()))?;
            v.extend(data.chunks_exact(dtype.size()).map(T::get_le));
            left -= chunk;
        }
        debug_assert_eq!(v.len(), n);
        rt.from_vec(v, &shape, ctx)
    })
}

/// A shape of `ndim` dimensions, each read by `dim`.
fn read_dims(
    r: &mut Reader<'_>,
    what: &str,
    ndim: i64,
    mut dim: impl FnMut(&mut Reader<'_>, &str) -> Result<i64>,
) -> Result<Vec<usize>> {
    if ndim <= 0 {
        return Err(r.bad(format!(
            "{what} has {ndim} dimensions: MXNet's empty (none) array, which holds nothing to load"
        )));
    }
    if ndim as usize > MAX_NDIM {
        return Err(r.bad(format!(
            "{what} claims {ndim} dimensions (more than {MAX_NDIM}): not an NDArray file, or damaged"
        )));
    }
    let mut shape = Vec::with_capacity(ndim as usize);
    for i in 0..ndim {
        let d = dim(r, what)?;
        let d = usize::try_from(d)
            .map_err(|_| r.bad(format!("{what}: dimension {i} is {d}, not a size")))?;
        shape.push(d);
    }
    Ok(shape)
}

/// Reads numbers and counted byte runs, knowing how far it is into the stream so that an
/// error can say where the file went wrong.
struct Reader<'r> {
    r: &'r mut dyn Read,
    at: u64,
}

impl Reader<'_> {
    fn bad(&self, reason: String) -> NdError {
        NdError::Invalid {
            op: "load".into(),
            reason: format!("at byte {}: {reason}", self.at),
        }
    }

    fn exact<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| self.ended(what, e))?;
        self.at += N as u64;
        Ok(b)
    }

    fn ended(&self, what: &str, e: std::io::Error) -> NdError {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                self.bad(format!("the file ends inside {what} (truncated?)"))
            }
            _ => self.bad(format!("reading {what}: {e}")),
        }
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.exact(what).map(u32::from_le_bytes)
    }

    fn i32(&mut self, what: &str) -> Result<i32> {
        self.exact(what).map(i32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.exact(what).map(u64::from_le_bytes)
    }

    fn i64(&mut self, what: &str) -> Result<i64> {
        self.exact(what).map(i64::from_le_bytes)
    }

    /// `len` bytes; the buffer grows as bytes arrive, so a damaged length fails at the end of
    /// the file instead of allocating what it claims.
    fn bytes(&mut self, len: u64, what: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let got = (&mut self.r)
            .take(len)
            .read_to_end(&mut out)
            .map_err(|e| self.ended(what, e))?;
        if got as u64 != len {
            return Err(self.bad(format!(
                "the file ends inside {what}: {len} bytes expected, {got} left (truncated?)"
            )));
        }
        self.at += len;
        Ok(out)
    }
}

/// Little-endian element bytes.
trait LeBytes: Element {
    fn put_le(self, out: &mut Vec<u8>);
    /// From exactly `size_of::<Self>()` bytes.
    fn get_le(b: &[u8]) -> Self;
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}

le_bytes!(f32, f64, i32, i64, u8);

/// A model as MXNet's `save_checkpoint` leaves it: the symbol, and the learned arguments and
/// auxiliary states (`arg:NAME` and `aux:NAME` in the `.params` file).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The graph.
    pub symbol: Symbol,
    /// Arguments by name (weights, biases).
    pub arg_params: HashMap<String, NDArray>,
    /// Auxiliary states by name (BatchNorm's running statistics).
    pub aux_params: HashMap<String, NDArray>,
}

/// The two files of a checkpoint: `PREFIX-symbol.json` and `PREFIX-EPOCH.params` (epoch in
/// four digits), as MXNet names them.
pub fn checkpoint_paths(prefix: &str, epoch: usize) -> (String, String) {
    (
        format!("{prefix}-symbol.json"),
        format!("{prefix}-{epoch:04}.params"),
    )
}

/// Writes a checkpoint (MXNet's `mx.model.save_checkpoint`); names are written sorted, so the
/// same model gives the same file.
pub fn save_checkpoint(
    prefix: &str,
    epoch: usize,
    symbol: &Symbol,
    arg_params: &HashMap<String, NDArray>,
    aux_params: &HashMap<String, NDArray>,
) -> Result<()> {
    let (json_path, params_path) = checkpoint_paths(prefix, epoch);
    let json = symbol.to_json();
    write_atomically("save_checkpoint", Path::new(&json_path), |w| {
        w.write_all(json.as_bytes())
            .map_err(|e| file_error("save_checkpoint", Path::new(&json_path), "cannot write", e))
    })?;
    save_params(&params_path, arg_params, aux_params)
}

/// Writes a checkpoint's `.params` file alone: arguments as `arg:NAME`, auxiliary states as
/// `aux:NAME`, sorted by key.
pub fn save_params(
    path: impl AsRef<Path>,
    arg_params: &HashMap<String, NDArray>,
    aux_params: &HashMap<String, NDArray>,
) -> Result<()> {
    let mut entries: Vec<(String, &NDArray)> = arg_params
        .iter()
        .map(|(n, a)| (format!("arg:{n}"), a))
        .chain(aux_params.iter().map(|(n, a)| (format!("aux:{n}"), a)))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let named: Vec<(&str, &NDArray)> = entries.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    save(path, &named)
}

/// Reads a checkpoint (MXNet's `mx.model.load_checkpoint`), its arrays onto `ctx`.
pub fn load_checkpoint(
    prefix: &str,
    epoch: usize,
    rt: &Arc<Runtime>,
    ctx: Context,
) -> Result<Checkpoint> {
    let (json_path, params_path) = checkpoint_paths(prefix, epoch);
    let text = std::fs::read_to_string(&json_path)
        .map_err(|e| file_error("load_checkpoint", Path::new(&json_path), "cannot read", e))?;
    let symbol = Symbol::from_json(&text)?;
    let (arg_params, aux_params) = split_params(load(&params_path, rt, ctx)?.into_named()?)
        .map_err(|reason| NdError::Invalid {
            op: "load_checkpoint".into(),
            reason: format!("{params_path}: {reason}"),
        })?;
    Ok(Checkpoint {
        symbol,
        arg_params,
        aux_params,
    })
}

/// Argument and auxiliary arrays by name, from a checkpoint's `arg:`/`aux:` keys.
type ParamMaps = (HashMap<String, NDArray>, HashMap<String, NDArray>);

/// Splits `arg:NAME` / `aux:NAME` keys into the two maps.
pub fn split_params(named: HashMap<String, NDArray>) -> std::result::Result<ParamMaps, String> {
    let (mut args, mut aux) = (HashMap::new(), HashMap::new());
    for (key, a) in named {
        match key.split_once(':') {
            Some(("arg", name)) => args.insert(name.to_string(), a),
            Some(("aux", name)) => aux.insert(name.to_string(), a),
            _ => {
                return Err(format!(
                    "key {key:?} is neither 'arg:NAME' nor 'aux:NAME', as a checkpoint's keys are"
                ))
            }
        };
    }
    Ok((args, aux))
}
