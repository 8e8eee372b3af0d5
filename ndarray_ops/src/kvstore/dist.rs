//! Stores across processes, over MPI (the `mpi` feature): `dist_sync` and `dist_device_sync`.
//!
//! One communication thread per process owns MPI (it initializes it, `MPI_THREAD_FUNNELED`) and
//! runs every collective. MPI needs each rank to call the same collectives in the same order,
//! while the engine runs ops in whatever order their inputs become ready, which differs between
//! ranks. So a store takes a **ticket** (a sequence number) when a call is made, on the calling
//! thread, where every rank runs the same program in the same order; the engine op, when it
//! runs, hands its work to the thread under that ticket, and the thread runs the work strictly in
//! ticket order, holding back work that arrives early.
//!
//! An engine op that never runs (an input failed) still owes its ticket: dropping it hands the
//! thread a stand-in that joins the collective with zeros, so the other ranks are not left
//! waiting, and marks itself failed. Every sum carries each rank's health (a second, one-integer
//! allreduce): where a rank contributed nothing, every rank fails that key's op, with the same
//! message, so the update is skipped everywhere and the ranks' weights stay equal.
//!
//! A collective that does not complete within the timeout (`MXRS_KVSTORE_TIMEOUT` seconds,
//! default 120: a peer died or stalled) ends the job with `MPI_Abort` after printing which rank,
//! key and call waited: MPI cannot abandon a collective and go on, and a hang is what must not
//! happen.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::traits::*;

use crate::error::{invalid, Result};
use crate::ops::TensorRef;
use crate::DType;

/// One collective.
pub(super) enum Work {
    /// `recv` = the sum over ranks of `send`.
    Sum { send: TensorRef, recv: TensorRef },
    /// `buf` = rank 0's `buf`.
    Broadcast { buf: TensorRef },
    /// This rank's op for a sum never ran: join it with zeros of this many elements.
    SkippedSum { len: usize, dtype: DType },
    /// This rank's op for a broadcast never ran: join it with a scratch buffer.
    SkippedBroadcast { len: usize, dtype: DType },
    /// Every rank's `(key, elements)`, to check they agree before a key is used.
    Agree { key: String, elements: u64 },
    /// Wait for every rank.
    Barrier,
}

/// What a finished collective tells its op: `Err` with the message every rank gives.
pub(super) type Done = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;

struct Request {
    ticket: u64,
    /// What the call was (for messages): `allreduce of key 'w'`.
    what: String,
    work: Work,
    done: Done,
}

/// This process's link to the others: its rank, their number, and the communication thread.
pub(super) struct Comm {
    tx: mpsc::Sender<Request>,
    rank: usize,
    size: usize,
    next: AtomicU64,
}

impl Comm {
    /// This process's rank.
    pub(super) fn rank(&self) -> usize {
        self.rank
    }

    /// How many processes take part.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// A ticket: the place of the next collective in this process's order of calls.
    pub(super) fn ticket(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands `work` to the communication thread under `ticket`.
    pub(super) fn submit(&self, ticket: u64, what: String, work: Work, done: Done) {
        let req = Request {
            ticket,
            what,
            work,
            done,
        };
        if let Err(mpsc::SendError(req)) = self.tx.send(req) {
            (req.done)(Err("the MPI communication thread has stopped".to_string()));
        }
    }

    /// Runs `work` under a fresh ticket and waits for it (for calls that answer at once:
    /// `barrier`, the checks of `init`).
    pub(super) fn run(&self, what: String, work: Work) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        let ticket = self.ticket();
        self.submit(
            ticket,
            what.clone(),
            work,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        match rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(invalid("kvstore", e)),
            Err(_) => Err(invalid(
                "kvstore",
                format!("{what}: the MPI communication thread has stopped"),
            )),
        }
    }
}

/// How long a collective may take before the job is ended.
fn timeout() -> Duration {
    let secs = std::env::var("MXRS_KVSTORE_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(120.0);
    Duration::from_secs_f64(secs)
}

/// The process's communicator, started on first use.
pub(super) fn comm() -> Result<&'static Comm> {
    static COMM: OnceLock<std::result::Result<Comm, String>> = OnceLock::new();
    COMM.get_or_init(start)
        .as_ref()
        .map_err(|e| invalid("kvstore create", e.clone()))
}

fn start() -> std::result::Result<Comm, String> {
    let (tx, rx) = mpsc::channel::<Request>();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("mxrs-mpi".into())
        .spawn(move || {
            let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            else {
                let _ = ready_tx.send(Err(
                    "MPI could not be initialized (it was initialized before, outside mxrs)"
                        .to_string(),
                ));
                return;
            };
            let world = universe.world();
            let (rank, size) = (world.rank() as usize, world.size() as usize);
            let _ = ready_tx.send(Ok((rank, size)));
            serve(&world, rank, rx, timeout());
            // MPI is finalized when the universe drops: only once every store is gone and the
            // channel closed, which for the process-wide communicator is at exit, if ever.
            drop(universe);
        })
        .map_err(|e| format!("cannot start the MPI communication thread: {e}"))?;
    let (rank, size) = ready_rx
        .recv()
        .map_err(|_| "the MPI communication thread stopped while starting".to_string())??;
    Ok(Comm {
        tx,
        rank,
        size,
        next: AtomicU64::new(0),
    })
}

/// The communication thread: runs requests in ticket order.
fn serve(
    world: &mpi::topology::SimpleCommunicator,
    rank: usize,
    rx: mpsc::Receiver<Request>,
    limit: Duration,
) {
    let mut early: BTreeMap<u64, Request> = BTreeMap::new();
    let mut expected = 0u64;
    while let Ok(req) = rx.recv() {
        early.insert(req.ticket, req);
        while let Some(req) = early.remove(&expected) {
            expected += 1;
            let result = execute(world, rank, &req, limit);
            (req.done)(result);
        }
    }
}

/// Waits for `req` to complete, testing it; past `limit`, ends the job.
fn finish<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    world: &mpi::topology::SimpleCommunicator,
    mut req: mpi::request::Request<'a, D, S>,
    rank: usize,
    what: &str,
    limit: Duration,
) {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        match req.test() {
            Ok(_) => return,
            Err(pending) => req = pending,
        }
        spins += 1;
        if spins > 256 {
            std::thread::sleep(Duration::from_micros(20));
        }
        if start.elapsed() > limit {
            eprintln!(
                "mxrs kvstore: rank {rank}: {what} did not complete within {:.0} s: a peer rank \
                 died or stalled (MXRS_KVSTORE_TIMEOUT sets the limit); ending the job",
                limit.as_secs_f64()
            );
            world.abort(70);
        }
    }
}

/// One health flag per rank, summed: how many ranks contributed.
fn healthy_ranks(
    world: &mpi::topology::SimpleCommunicator,
    ok: bool,
    rank: usize,
    what: &str,
    limit: Duration,
) -> i32 {
    let mine = i32::from(ok);
    let mut total = 0i32;
    mpi::request::scope(|scope| {
        let req = world.immediate_all_reduce_into(scope, &mine, &mut total, SystemOperation::sum());
        finish(world, req, rank, what, limit);
    });
    total
}

/// A typed view of a tensor's memory.
///
/// # Safety
/// The caller holds the engine's access to the memory for the call's duration (the request's
/// op is running and completes only after this returns).
unsafe fn slice_mut<'a, T>(t: &TensorRef) -> &'a mut [T] {
    // SAFETY: per the caller's contract; TensorRef memory is aligned for its dtype.
    unsafe { std::slice::from_raw_parts_mut(t.ptr::<T>(), t.len()) }
}

macro_rules! by_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
        }
    };
}

fn execute(
    world: &mpi::topology::SimpleCommunicator,
    rank: usize,
    req: &Request,
    limit: Duration,
) -> std::result::Result<(), String> {
    let what = req.what.as_str();
    let size = world.size() as usize;
    match &req.work {
        Work::Sum { send, recv } => {
            by_dtype!(send.dtype, T => {
                // SAFETY: the sum's engine op reads `send` and writes `recv` and is running.
                let (s, r) = unsafe { (slice_mut::<T>(send), slice_mut::<T>(recv)) };
                mpi::request::scope(|scope| {
                    let req = world.immediate_all_reduce_into(scope, &s[..], &mut r[..], SystemOperation::sum());
                    finish(world, req, rank, what, limit);
                });
            });
            let healthy = healthy_ranks(world, true, rank, what, limit) as usize;
            match healthy == size {
                true => Ok(()),
                false => Err(format!(
                    "{what}: {} of {size} ranks had no value to give (their op failed); the sum \
                     is not applied on any rank",
                    size - healthy
                )),
            }
        }
        Work::SkippedSum { len, dtype } => {
            by_dtype!(*dtype, T => {
                let s = vec![T::default(); *len];
                let mut r = vec![T::default(); *len];
                mpi::request::scope(|scope| {
                    let req = world.immediate_all_reduce_into(scope, &s[..], &mut r[..], SystemOperation::sum());
                    finish(world, req, rank, what, limit);
                });
            });
            let healthy = healthy_ranks(world, false, rank, what, limit) as usize;
            Err(format!(
                "{what}: {} of {size} ranks had no value to give (their op failed, this rank's \
                 among them); the sum is not applied on any rank",
                size - healthy
            ))
        }
        Work::Broadcast { buf } => {
            by_dtype!(buf.dtype, T => {
                // SAFETY: the broadcast's engine op writes `buf` and is running.
                let b = unsafe { slice_mut::<T>(buf) };
                let root = world.process_at_rank(0);
                mpi::request::scope(|scope| {
                    let req = root.immediate_broadcast_into(scope, &mut b[..]);
                    finish(world, req, rank, what, limit);
                });
            });
            let healthy = healthy_ranks(world, true, rank, what, limit) as usize;
            match healthy == size {
                true => Ok(()),
                false => Err(format!(
                    "{what}: {} of {size} ranks failed to take part",
                    size - healthy
                )),
            }
        }
        Work::SkippedBroadcast { len, dtype } => {
            by_dtype!(*dtype, T => {
                let mut b = vec![T::default(); *len];
                let root = world.process_at_rank(0);
                mpi::request::scope(|scope| {
                    let req = root.immediate_broadcast_into(scope, &mut b[..]);
                    finish(world, req, rank, what, limit);
                });
            });
            healthy_ranks(world, false, rank, what, limit);
            Err(format!(
                "{what}: this rank's op failed before it could take part"
            ))
        }
        Work::Agree { key, elements } => {
            // Every rank's element count, and a hash of its key, side by side.
            let mine = [key_hash(key), *elements];
            let mut all = vec![0u64; 2 * size];
            mpi::request::scope(|scope| {
                let req = world.immediate_all_gather_into(scope, &mine[..], &mut all[..]);
                finish(world, req, rank, what, limit);
            });
            if let Some(r) = all.chunks(2).position(|p| p[0] != mine[0]) {
                return Err(format!(
                    "{what}: rank {r} initialized another key at this point (the ranks must \
                     call the store in the same order)"
                ));
            }
            if all.chunks(2).any(|p| p[1] != mine[1]) {
                let sizes: Vec<String> = all
                    .chunks(2)
                    .enumerate()
                    .map(|(r, p)| format!("rank {r}: {}", p[1]))
                    .collect();
                return Err(format!(
                    "{what}: the ranks give it different sizes ({} elements)",
                    sizes.join(", ")
                ));
            }
            Ok(())
        }
        Work::Barrier => {
            let req = world.immediate_barrier();
            finish(world, req, rank, what, limit);
            Ok(())
        }
    }
}

/// A stable hash of a key's text (FNV-1a), the same on every rank.
fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
