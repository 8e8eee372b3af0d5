//! Per-device resources kernels may ask for, as MXNet's resource manager provides them:
//!
//! * a seeded random generator: random ops take write access to its engine var, so they draw in
//!   push order and a program gives the same numbers for the same seed on every engine;
//! * temporary space from the device's storage pool, grown on demand and reused by every op that
//!   asks for it (those ops are ordered by its var, so one buffer serves them all);
//! * per bound node, the state an op keeps from its forward pass for its backward pass
//!   ([`OpState`], MXNet's stateful ops).

use std::any::Any;
use std::sync::Arc;

use engine::Var;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::SeedableRng;
use storage::{Context, Handle, StorageManager};

/// Which resources an op's kernel needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// The device's random generator.
    Random,
    /// The device's temporary space.
    TempSpace,
}

/// A device's resources.
pub(crate) struct DeviceResources {
    pub(crate) ctx: Context,
    pub(crate) rng: Mutex<StdRng>,
    pub(crate) rng_var: Var,
    pub(crate) temp: Mutex<TempSpace>,
    pub(crate) temp_var: Var,
}

/// Scratch memory from the storage pool, kept between ops.
pub(crate) struct TempSpace {
    pool: StorageManager,
    block: Option<Handle>,
    /// Leading bytes of the (host) block written at least once, by [`TempSpace::get_written`]
    /// or by the ops that used them since.
    written: usize,
}

impl TempSpace {
    /// At least `bytes` bytes of scratch (contents unspecified), 64-byte aligned.
    pub(crate) fn get(&mut self, bytes: usize) -> Result<*mut u8, String> {
        if self.block.as_ref().is_none_or(|b| b.capacity() < bytes) {
            self.block = None;
            self.written = 0;
            self.block = Some(
                self.pool
                    .alloc(bytes)
                    .map_err(|e| format!("temp space: {e}"))?,
            );
        }
        Ok(self
            .block
            .as_ref()
            .map_or(std::ptr::null_mut(), Handle::as_ptr))
    }

    /// As [`TempSpace::get`], in host memory every byte of which has been written: the part
    /// never handed out before is zeroed, the rest holds what the last op left. A kernel may
    /// then view it as floats without writing all of it first, and a block reused call after
    /// call (an RNN's 7 MB trace) is not cleared each time.
    pub(crate) fn get_written(&mut self, bytes: usize) -> Result<*mut u8, String> {
        let ptr = self.get(bytes)?;
        if bytes > self.written {
            // SAFETY: the block holds at least `bytes` bytes of host memory (asked above).
            unsafe { std::ptr::write_bytes(ptr.add(self.written), 0, bytes - self.written) };
            self.written = bytes;
        }
        Ok(ptr)
    }
}

/// The seed of device `ctx` under the runtime seed `seed`: different devices draw different
/// streams.
pub(crate) fn device_seed(seed: u64, ctx: Context) -> u64 {
    seed ^ (u64::from(ctx.dev_id) << 32) ^ ((ctx.dev_type as u64) << 48) ^ 0x5DEE_CE66_D1CE_4E5B
}

impl DeviceResources {
    pub(crate) fn new(
        ctx: Context,
        pool: StorageManager,
        rng_var: Var,
        temp_var: Var,
        seed: u64,
    ) -> Arc<Self> {
        Arc::new(DeviceResources {
            ctx,
            rng: Mutex::new(StdRng::seed_from_u64(device_seed(seed, ctx))),
            rng_var,
            temp: Mutex::new(TempSpace {
                pool,
                block: None,
                written: 0,
            }),
            temp_var,
        })
    }
}

/// What a kernel gets: the resources its op declared, locked for the kernel's duration (the
/// engine already serializes their users, so the locks are never contended).
pub(crate) struct KernelRes<'a> {
    pub(crate) rng: Option<&'a mut StdRng>,
    pub(crate) temp: Option<&'a mut TempSpace>,
    /// The node's kept state, when the executor gave it one (see [`OpState`]).
    pub(crate) state: Option<&'a mut StateSlot>,
    /// Whether a backward node reads that state ([`OpState::paired`]).
    pub(crate) paired: bool,
    /// Bit `k` set: nothing reads output `k` (see [`KernelRes::wanted`]).
    pub(crate) unread: u64,
    /// The inputs' vars, given to a node that keeps state (see [`KernelRes::input_stamp`]);
    /// empty otherwise.
    pub(crate) stamped: &'a [Var],
}

/// What an [`OpState`] holds: nothing until the forward kernel keeps something, then whatever
/// type that op's kernels agree on.
pub(crate) type StateSlot = Option<Box<dyn Any + Send>>;

/// What a forward node keeps for its backward node, as MXNet's stateful ops keep theirs (the
/// fused RNN: every step's gates, so its backward pass need not run the forward pass again).
///
/// The executor makes one per bound forward node of an op with
/// [`OpDef::keeps_state`](crate::ops::OpDef) and hands the same one to the backward node it
/// pairs with it. The forward op writes the state's var and the backward op reads it, so the
/// engine orders the two as it orders arrays, and the lock is never contended. Imperative calls
/// have none: the backward kernel then works without (the RNN recomputes the forward pass).
///
/// A forward node whose backward node does not run (an inference bind) gets one too, unpaired:
/// the op may keep there what it derives from its inputs between passes (the RNN's packed
/// weights), but no trace for a backward pass.
#[derive(Clone)]
pub(crate) struct OpState {
    pub(crate) var: Var,
    pub(crate) slot: Arc<Mutex<StateSlot>>,
    /// Whether a backward node reads it.
    pub(crate) paired: bool,
}

impl OpState {
    pub(crate) fn new(var: Var, paired: bool) -> Self {
        OpState {
            var,
            slot: Arc::new(Mutex::new(None)),
            paired,
        }
    }
}

impl KernelRes<'_> {
    /// Whether anything reads output `k`: a kernel may skip the work of one nobody reads (a
    /// bound graph's gradient of an input that asked for none), leaving it unwritten.
    pub(crate) fn wanted(&self, k: usize) -> bool {
        k >= 64 || self.unread & (1 << k) == 0
    }

    /// What input `i` holds, as its var's id and version, for a node that keeps state:
    /// such a node runs alone (see `engine::Op::alone`), so equal stamps mean the same
    /// contents. `None` for other ops and imperative calls.
    pub(crate) fn input_stamp(&self, i: usize) -> Option<(u64, u64)> {
        self.stamped.get(i).map(|v| (v.id(), v.version()))
    }

    pub(crate) fn rng(&mut self) -> Result<&mut StdRng, String> {
        self.rng
            .as_deref_mut()
            .ok_or_else(|| "op did not declare the random resource".to_string())
    }

    pub(crate) fn temp(&mut self, bytes: usize) -> Result<*mut u8, String> {
        self.temp
            .as_deref_mut()
            .ok_or_else(|| "op did not declare temp space".to_string())?
            .get(bytes)
    }

    /// Host temp space of at least `bytes` bytes every one of which has been written
    /// ([`TempSpace::get_written`]).
    pub(crate) fn temp_written(&mut self, bytes: usize) -> Result<*mut u8, String> {
        self.temp
            .as_deref_mut()
            .ok_or_else(|| "op did not declare temp space".to_string())?
            .get_written(bytes)
    }
}
