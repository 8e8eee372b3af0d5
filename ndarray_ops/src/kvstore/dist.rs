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
//! Sums are **bucketed**: a store collects the values pushed for its keys (after each key's sum
//! within the process) and sends them as one contiguous buffer, one allreduce for many small
//! gradients, when the bucket holds `MXRS_KVSTORE_BUCKET_BYTES` (default 4 MiB, the same on
//! every rank) or before anything that must see them (a pull, a barrier, an init). A trainer
//! pushes every parameter, then pulls them, so a model's small gradients travel together while
//! large ones go as soon as their bucket is full, overlapping the rest of the backward pass.
//!
//! An engine op that never runs (an input failed) still owes its ticket: dropping it hands the
//! thread a stand-in that joins the collective with zeros, so the other ranks are not left
//! waiting. Every sum carries each rank's health (one more element in a packed bucket, a second
//! one-integer allreduce for a single array): where a rank contributed nothing, every rank fails
//! the bucket's op with the same message, so its updates are skipped everywhere and the ranks'
//! weights stay equal.
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

use super::Key;
use crate::error::{invalid, Result};
use crate::ops::TensorRef;
use crate::{DType, NDArray};

/// One collective.
pub(super) enum Work {
    /// Each `recv` = the sum over ranks of its `send` (one dtype).
    Sum { parts: Vec<(TensorRef, TensorRef)> },
    /// `buf` = rank 0's `buf`.
    Broadcast { buf: TensorRef },
    /// This rank's op for a sum never ran: join it with zeros of these lengths.
    SkippedSum { lens: Vec<usize>, dtype: DType },
    /// This rank's op for a broadcast never ran: join it with a scratch buffer.
    SkippedBroadcast { len: usize, dtype: DType },
    /// Every rank's `(key, elements)`, to check they agree before a key is used.
    Agree { key: String, elements: u64 },
    /// Wait for every rank.
    Barrier,
    /// Time `iters` of the MPI library's own allreduce of `len` floats (the baseline a store's
    /// sums are measured against); the mean seconds go into `seconds`.
    Measure {
        len: usize,
        iters: usize,
        seconds: std::sync::Arc<parking_lot::Mutex<f64>>,
    },
}

/// What a finished collective tells its op: `Err` with the message every rank gives.
pub(super) type Done = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;

/// What the communication thread is sent.
enum Msg {
    /// A collective to run in ticket order.
    Run(Request),
    /// The process is exiting: finalize MPI, then say so.
    Finish(mpsc::Sender<()>),
}

struct Request {
    ticket: u64,
    /// What the call was (for messages): `allreduce of key 'w'`.
    what: String,
    work: Work,
    done: Done,
}

/// This process's link to the others: its rank, their number, and the communication thread.
pub(super) struct Comm {
    tx: mpsc::Sender<Msg>,
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
        if let Err(mpsc::SendError(Msg::Run(req))) = self.tx.send(Msg::Run(req)) {
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
static COMM: OnceLock<std::result::Result<Comm, String>> = OnceLock::new();

/// The process's communicator, started on first use.
pub(super) fn comm() -> Result<&'static Comm> {
    COMM.get_or_init(start)
        .as_ref()
        .map_err(|e| invalid("kvstore create", e.clone()))
}

/// Runs at process exit (registered with `atexit` once MPI is up): has the communication thread
/// finalize MPI and waits for it, up to the collective timeout. A rank that exits without
/// `MPI_Finalize` is taken by MPI's launcher for a crashed one, and the launcher kills the ranks
/// still working; `MPI_Finalize` may wait for the other ranks to finalize too, hence the bound.
extern "C" fn finalize_at_exit() {
    let Some(Ok(comm)) = COMM.get() else {
        return;
    };
    let (ack, finished) = mpsc::channel();
    if comm.tx.send(Msg::Finish(ack)).is_ok() {
        let _ = finished.recv_timeout(timeout());
    }
}

fn start() -> std::result::Result<Comm, String> {
    let (tx, rx) = mpsc::channel::<Msg>();
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
            let finished = serve(&world, rank, rx, timeout());
            // MPI is finalized when the universe drops.
            drop(universe);
            if let Some(ack) = finished {
                let _ = ack.send(());
            }
        })
        .map_err(|e| format!("cannot start the MPI communication thread: {e}"))?;
    let (rank, size) = ready_rx
        .recv()
        .map_err(|_| "the MPI communication thread stopped while starting".to_string())??;
    // SAFETY: `finalize_at_exit` is a plain function that touches only a static and channels;
    // registering it has no precondition.
    if unsafe { libc::atexit(finalize_at_exit) } != 0 {
        eprintln!("mxrs kvstore: cannot register MPI's finalization at exit");
    }
    Ok(Comm {
        tx,
        rank,
        size,
        next: AtomicU64::new(0),
    })
}

/// The communication thread: runs requests in ticket order until the process exits (the
/// `Finish` message, returned) or every sender is gone. Requests still held back then fail.
fn serve(
    world: &mpi::topology::SimpleCommunicator,
    rank: usize,
    rx: mpsc::Receiver<Msg>,
    limit: Duration,
) -> Option<mpsc::Sender<()>> {
    let mut early: BTreeMap<u64, Request> = BTreeMap::new();
    let mut expected = 0u64;
    let mut finished = None;
    while let Some(msg) = next_request(&rx) {
        let req = match msg {
            Msg::Run(req) => req,
            Msg::Finish(ack) => {
                finished = Some(ack);
                break;
            }
        };
        early.insert(req.ticket, req);
        while let Some(req) = early.remove(&expected) {
            expected += 1;
            let result = execute(world, rank, &req, limit);
            (req.done)(result);
        }
    }
    for (_, req) in early {
        (req.done)(Err("the process is exiting".to_string()));
    }
    finished
}

/// The next request: looked for without blocking for a few microseconds first (a training
/// step's requests come in quick succession, and waking a blocked thread costs more), then
/// waited for. `None` once every sender is gone.
fn next_request(rx: &mpsc::Receiver<Msg>) -> Option<Msg> {
    for _ in 0..200 {
        match rx.try_recv() {
            Ok(req) => return Some(req),
            Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
            Err(mpsc::TryRecvError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

/// Waits for `req` to complete, testing it (which also drives MPI's progress: a sum over shared
/// memory moves only while its processes poll), yielding the core between tests to any thread
/// that needs it; after 200 ms (a peer is late) sleeping briefly between tests; past `limit`,
/// ends the job.
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
        if spins < 64 {
            std::hint::spin_loop();
        } else if start.elapsed() < Duration::from_millis(200) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
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

/// What a sum tells its op: every rank gave a value, or which did not.
fn sum_result(
    what: &str,
    healthy: usize,
    size: usize,
    mine: &str,
) -> std::result::Result<(), String> {
    match healthy == size {
        true => Ok(()),
        false => Err(format!(
            "{what}: {} of {size} ranks had no value to give (their op failed{mine}); the sum \
             is not applied on any rank",
            size - healthy
        )),
    }
}

/// Sums each part's send buffer over the ranks into its receive buffer; returns how many ranks
/// were healthy. One part goes as it is (its health in a second, one-integer allreduce); several
/// are packed into one buffer with the health as its last element, one allreduce for all.
fn sum_parts<T>(
    world: &mpi::topology::SimpleCommunicator,
    rank: usize,
    mut parts: Vec<(&mut [T], &mut [T])>,
    ok: bool,
    what: &str,
    limit: Duration,
) -> usize
where
    T: mpi::datatype::Equivalence + Copy + Default + num_traits::NumCast,
{
    // A large array alone is summed where it lies; small ones are packed (one collective
    // instead of two: the health rides along).
    let total: usize = parts.iter().map(|(s, _)| s.len()).sum();
    if let ([(send, recv)], true) = (&mut parts[..], total * size_of::<T>() >= 64 << 10) {
        mpi::request::scope(|scope| {
            let req = world.immediate_all_reduce_into(
                scope,
                &send[..],
                &mut recv[..],
                SystemOperation::sum(),
            );
            finish(world, req, rank, what, limit);
        });
        return healthy_ranks(world, ok, rank, what, limit) as usize;
    }
    let mut packed: Vec<T> = Vec::with_capacity(total + 1);
    for (send, _) in &parts {
        packed.extend_from_slice(send);
    }
    packed.push(T::from(u8::from(ok)).unwrap_or_default());
    let mut sums = vec![T::default(); total + 1];
    mpi::request::scope(|scope| {
        let req = world.immediate_all_reduce_into(
            scope,
            &packed[..],
            &mut sums[..],
            SystemOperation::sum(),
        );
        finish(world, req, rank, what, limit);
    });
    let mut at = 0;
    for (_, recv) in &mut parts {
        recv.copy_from_slice(&sums[at..at + recv.len()]);
        at += recv.len();
    }
    num_traits::cast::<T, usize>(sums[total]).unwrap_or(0)
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

fn execute(
    world: &mpi::topology::SimpleCommunicator,
    rank: usize,
    req: &Request,
    limit: Duration,
) -> std::result::Result<(), String> {
    let what = req.what.as_str();
    let size = world.size() as usize;
    match &req.work {
        Work::Sum { parts } => {
            let dtype = parts.first().map_or(DType::F32, |p| p.0.dtype);
            let healthy = crate::with_dtype!(dtype, T => {
                // SAFETY: the sum's engine op reads every `send` and writes every `recv` and is
                // running.
                let views: Vec<(&mut [T], &mut [T])> = parts
                    .iter()
                    .map(|(s, r)| unsafe { (s.slice_mut::<T>(), r.slice_mut::<T>()) })
                    .collect();
                sum_parts(world, rank, views, true, what, limit)
            });
            sum_result(what, healthy, size, "")
        }
        Work::SkippedSum { lens, dtype } => {
            let healthy = crate::with_dtype!(*dtype, T => {
                let mut bufs: Vec<(Vec<T>, Vec<T>)> =
                    lens.iter().map(|&n| (vec![T::default(); n], vec![T::default(); n])).collect();
                let views = bufs.iter_mut().map(|(s, r)| (&mut s[..], &mut r[..])).collect();
                sum_parts(world, rank, views, false, what, limit)
            });
            sum_result(what, healthy, size, ", this rank's among them")
        }
        Work::Broadcast { buf } => {
            crate::with_dtype!(buf.dtype, T => {
                // SAFETY: the broadcast's engine op writes `buf` and is running.
                let b = unsafe { buf.slice_mut::<T>() };
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
            crate::with_dtype!(*dtype, T => {
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
        Work::Measure {
            len,
            iters,
            seconds,
        } => {
            let send = vec![1f32; *len];
            let mut recv = vec![0f32; *len];
            world.barrier();
            let start = Instant::now();
            for _ in 0..*iters {
                world.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum());
            }
            *seconds.lock() = start.elapsed().as_secs_f64() / (*iters).max(1) as f64;
            Ok(())
        }
    }
}

/// A collective's ticket, held by its engine op: if the op is dropped without running (an
/// input failed), the ticket still joins the collective (see `dist`).
struct Ticket {
    comm: &'static Comm,
    number: u64,
    what: String,
    /// The stand-in work if the op never runs.
    skipped: Option<Work>,
}

impl Ticket {
    fn submit(mut self, work: Work, done: Done) {
        self.skipped = None;
        self.comm
            .submit(self.number, std::mem::take(&mut self.what), work, done);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(work) = self.skipped.take() {
            let what = std::mem::take(&mut self.what);
            self.comm.submit(self.number, what, work, Box::new(|_| {}));
        }
    }
}

/// Pushes the engine op that sums each pending value over the ranks into its `reduced` array:
/// one collective for the whole bucket (one dtype).
pub(super) fn push_sum(comm: &'static Comm, parts: &[super::Pending]) -> Result<()> {
    let Some(first) = parts.first() else {
        return Ok(());
    };
    let keys: Vec<String> = parts.iter().map(|p| p.key.to_string()).collect();
    let what = match keys.len() {
        1 => format!("the sum of key {} across ranks", keys[0]),
        n => format!("the sum of {n} keys ({}) across ranks", keys.join(", ")),
    };
    let ticket = Ticket {
        comm,
        number: comm.ticket(),
        what,
        skipped: Some(Work::SkippedSum {
            lens: parts.iter().map(|p| p.merged.size()).collect(),
            dtype: first.merged.dtype(),
        }),
    };
    let tensors: Vec<(TensorRef, TensorRef)> = parts
        .iter()
        .map(|p| (p.merged.tensor(), p.reduced.tensor()))
        .collect();
    let op = engine::Op::asynchronous("kvstore_allreduce", move |_, done| {
        ticket.submit(
            Work::Sum { parts: tensors },
            Box::new(move |result| done.complete(result.map_err(Into::into))),
        );
    })
    .on(first.reduced.ctx())
    .reads(parts.iter().map(|p| p.merged.var()))
    .writes(parts.iter().map(|p| p.reduced.var()));
    Ok(first.reduced.runtime().engine().push(op)?)
}

/// Pushes the engine op that overwrites `buf` with rank 0's.
pub(super) fn push_broadcast(comm: &'static Comm, key: &Key, buf: &NDArray) -> Result<()> {
    let ticket = Ticket {
        comm,
        number: comm.ticket(),
        what: format!("the broadcast of key {key} from rank 0"),
        skipped: Some(Work::SkippedBroadcast {
            len: buf.size(),
            dtype: buf.dtype(),
        }),
    };
    let b = buf.tensor();
    let op = engine::Op::asynchronous("kvstore_broadcast", move |_, done| {
        ticket.submit(
            Work::Broadcast { buf: b },
            Box::new(move |result| done.complete(result.map_err(Into::into))),
        );
    })
    .on(buf.ctx())
    .write(buf.var());
    Ok(buf.runtime().engine().push(op)?)
}

/// A stable hash of a key's text (FNV-1a), the same on every rank.
fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
