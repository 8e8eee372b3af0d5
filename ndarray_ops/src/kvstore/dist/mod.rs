//! Stores across processes, over MPI (the `mpi` feature): `dist_sync` and `dist_device_sync`
//! here, `dist_async`'s protocol in `dist_async`.
//!
//! One communication thread per process initializes MPI (`MPI_THREAD_SERIALIZED`) and runs the
//! collectives. MPI needs each rank to call the same collectives in the same order, while the
//! engine runs ops in whatever order their inputs become ready, which differs between ranks. So
//! a store takes a **ticket** (a sequence number) when a call is made, on the calling thread,
//! where every rank runs the same program in the same order; the engine op, when it runs, hands
//! its work to the thread under that ticket, and the thread runs the work strictly in ticket
//! order, holding back work that arrives early.
//!
//! A collective may instead run **in place**, on the thread that asks for it, when that thread
//! would otherwise wait for it: an engine op run by its pusher at the push (its inputs were
//! ready: [`engine::running_at_push`]), or a call that returns only with the result (`barrier`,
//! `init`'s checks). It does so only while the communication thread is idle (nothing held back,
//! no reply awaited, no `dist_async` store served) and the ticket is the next one, under the
//! [`Gate`] that hands MPI from one thread to the other, so the order is the tickets' still. A
//! value ready at its push is then summed, and copied out by its pull, without a hand-over
//! between threads: each cost a few microseconds, more than a small sum takes. On a worker an
//! op still hands its work over, so that a rank ahead of the others does not hold a worker in a
//! collective while its backward pass has ops to run.
//!
//! Sums are **bucketed**: a store copies the values pushed for its keys (after each key's sum
//! within the process) one after another into a buffer at their pushes and sends it whole, one
//! allreduce for many small gradients, when the bucket holds `MXRS_KVSTORE_BUCKET_BYTES`
//! (default 4 MiB, the same on every rank) or before anything that must see them (a pull, a
//! barrier, an init). A value of 64 KB or more goes at its push, in an allreduce of its own,
//! read where it lies (packing it would cost more in copies than the collective's latency
//! saves). A trainer pushes every parameter, then pulls them, so a model's small gradients
//! travel together while large ones go as they come, overlapping the rest of the backward pass.
//!
//! An engine op that never runs (an input failed) still owes its ticket: dropping it hands the
//! thread a stand-in that joins the collective with zeros, so the other ranks are not left
//! waiting. Every sum carries each rank's health (one more element in a bucket's packed buffer,
//! or, for a bucket with nothing packed, a one-integer allreduce beside its sums): where a rank
//! contributed nothing, every rank fails the bucket's op with the same message, so its updates
//! are skipped everywhere and the ranks' weights stay equal.
//!
//! A collective that does not complete within the timeout (`MXRS_KVSTORE_TIMEOUT` seconds,
//! default 120: a peer died or stalled) ends the job with `MPI_Abort` after printing which rank,
//! key and call waited: MPI cannot abandon a collective and go on, and a hang is what must not
//! happen.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use mpi::traits::*;

mod collective;

use super::dist_async::{reply_id, Reply, Service, Table, TAG_REPLY, TAG_REQUEST};
use super::Key;
use crate::error::{invalid, Result};
use crate::ops::TensorRef;
use crate::{DType, NDArray};
use collective::execute;
pub(super) use collective::send_bytes;

/// One collective.
pub(super) enum Work {
    /// Each `recv` = the sum over ranks of its `send`, and each of `packed`'s parts the sum of
    /// its span of the packed buffer (one dtype).
    Sum {
        alone: Vec<(TensorRef, TensorRef)>,
        packed: Option<Packed>,
    },
    /// `buf` = rank 0's `buf`.
    Broadcast { buf: TensorRef },
    /// This rank's op for a sum never ran: join it with zeros of these lengths (the parts
    /// sent alone, and those packed).
    SkippedSum {
        alone: Vec<usize>,
        packed: Vec<usize>,
        dtype: DType,
    },
    /// This rank's op for a broadcast never ran: join it with a scratch buffer.
    SkippedBroadcast { len: usize, dtype: DType },
    /// Every rank's `(key, elements)`, to check they agree before a key is used.
    Agree { key: String, elements: u64 },
    /// Wait for every rank.
    Barrier,
    /// Time `iters` of the MPI library's own allreduce of `len` floats, through `buffers`
    /// pairs of arrays in turn (the baseline a store's sums are measured against); the mean
    /// seconds go into `seconds`.
    Measure {
        len: usize,
        buffers: usize,
        iters: usize,
        seconds: std::sync::Arc<parking_lot::Mutex<f64>>,
    },
    /// Send `bytes` to rank 0 as a `dist_async` request that has no reply (a push).
    Send { bytes: Vec<u8> },
    /// Send `request` (whose id is `id`) to rank 0 and hand its reply to `then` (a
    /// `dist_async` pull or sync). The thread goes on with the next tickets meanwhile: the
    /// reply is taken, and the call's `done` told, whenever it arrives.
    Fetch {
        id: u64,
        request: Vec<u8>,
        then: Then,
    },
    /// Nothing: the stand-in for a point-to-point call whose op never ran (no other rank waits
    /// for it, but its ticket must be used).
    Skip,
}

/// A bucket's small values, copied at their pushes one after another into one buffer, whose
/// last element is left for the rank's health; the sums are copied out into `recvs`, in order.
pub(super) struct Packed {
    pub(super) buf: TensorRef,
    pub(super) recvs: Vec<TensorRef>,
}

/// What takes a `dist_async` reply: `Err` if it says the call failed.
pub(super) type Then = Box<dyn FnOnce(&[u8]) -> std::result::Result<(), String> + Send>;

/// What a finished collective tells its op: `Err` with the message every rank gives.
pub(super) type Done = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;

/// What the communication thread is sent.
enum Msg {
    /// A collective to run in ticket order.
    Run(Request),
    /// The process is exiting: finalize MPI, then say so.
    Finish(mpsc::Sender<()>),
    /// Rank 0: serve the other ranks' requests to this `dist_async` store.
    Serve(Arc<Table>),
    /// Rank 0: the store with this id is gone.
    Unserve(u32),
}

struct Request {
    ticket: u64,
    /// What the call was (for messages): `allreduce of key 'w'`.
    what: String,
    work: Work,
    done: Done,
}

/// Which thread makes MPI's calls, one at a time: the communication thread, or, while it is
/// idle, a caller holding the next ticket (see the module doc).
struct Gate {
    turn: parking_lot::Mutex<Turn>,
    /// MPI granted `MPI_THREAD_SERIALIZED` (calls from any thread, one at a time): without it
    /// the gate stays shut.
    serialized: bool,
}

struct Turn {
    /// The ticket whose collective comes next.
    next: u64,
    /// The communication thread is idle and makes no MPI call before it shuts the gate: a
    /// caller holding `next` may run it, holding the lock while it does.
    open: bool,
    /// `dist_async` stores this process serves (rank 0), counted when the call is made, before
    /// the thread hears of it: while any is served the gate lets nothing through, since a
    /// collective on another thread would keep the communication thread from answering the
    /// requests the other ranks send before their half of it (a `barrier`'s exchange).
    served: usize,
}

impl Gate {
    /// The communication thread, idle, lets callers run ticket `next` on.
    fn open(&self, next: u64) {
        if self.serialized {
            let mut turn = self.turn.lock();
            turn.next = next;
            turn.open = true;
        }
    }

    /// The communication thread takes MPI back (waiting for a caller's collective to finish);
    /// returns the next ticket, `next` unless callers ran some meanwhile.
    fn shut(&self, next: u64) -> u64 {
        let mut turn = self.turn.lock();
        match std::mem::replace(&mut turn.open, false) {
            true => turn.next,
            false => next,
        }
    }
}

/// This process's link to the others: its rank, their number, and the communication thread.
pub(super) struct Comm {
    tx: mpsc::Sender<Msg>,
    gate: Arc<Gate>,
    /// How long a collective may take.
    limit: Duration,
    /// Where rank 0's `dist_async` ops leave the replies the thread sends.
    replies: mpsc::Sender<Reply>,
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

    /// A sender of replies for rank 0's thread to send.
    pub(super) fn replies(&self) -> mpsc::Sender<Reply> {
        self.replies.clone()
    }

    /// Rank 0: has the thread serve `table`'s requests from the other ranks.
    pub(super) fn serve(&self, table: Arc<Table>) {
        self.gate.turn.lock().served += 1;
        let _ = self.tx.send(Msg::Serve(table));
    }

    /// Rank 0: stops serving the store numbered `id`.
    pub(super) fn unserve(&self, id: u32) {
        let _ = self.tx.send(Msg::Unserve(id));
        let mut turn = self.gate.turn.lock();
        turn.served = turn.served.saturating_sub(1);
    }

    /// Hands `work` to the communication thread under `ticket`, or runs it here (see the
    /// module doc) when the caller would wait for it anyway: `caller_waits`, or an op run at
    /// its push.
    pub(super) fn submit(
        &self,
        ticket: u64,
        what: String,
        work: Work,
        done: Done,
        caller_waits: bool,
    ) {
        let req = Request {
            ticket,
            what,
            work,
            done,
        };
        let here = caller_waits || engine::running_at_push();
        let Some(req) = (match here {
            true => self.run_here(req),
            false => Some(req),
        }) else {
            return;
        };
        if let Err(mpsc::SendError(Msg::Run(req))) = self.tx.send(Msg::Run(req)) {
            (req.done)(Err("the MPI communication thread has stopped".to_string()));
        }
    }

    /// Runs `req`'s collective on this thread if the gate is open at its ticket; otherwise
    /// gives it back. Point-to-point work and stand-ins stay with the thread.
    fn run_here(&self, req: Request) -> Option<Request> {
        let collective = matches!(
            req.work,
            Work::Sum { .. } | Work::Broadcast { .. } | Work::Agree { .. } | Work::Barrier
        );
        if !collective || !self.gate.serialized {
            return Some(req);
        }
        let mut turn = self.gate.turn.lock();
        if !turn.open || turn.next != req.ticket || turn.served > 0 {
            return Some(req);
        }
        let world = mpi::topology::SimpleCommunicator::world();
        let result = execute(&world, &req.what, req.work, self.limit);
        turn.next += 1;
        drop(turn);
        (req.done)(result);
        None
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
            true,
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
    let limit = timeout();
    let (replies, replies_rx) = mpsc::channel::<Reply>();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("mxrs-mpi".into())
        .spawn(move || {
            let Some((universe, threading)) =
                mpi::initialize_with_threading(mpi::Threading::Serialized)
            else {
                let _ = ready_tx.send(Err(
                    "MPI could not be initialized (it was initialized before, outside mxrs)"
                        .to_string(),
                ));
                return;
            };
            let world = universe.world();
            let (rank, size) = (world.rank() as usize, world.size() as usize);
            let gate = Arc::new(Gate {
                turn: parking_lot::Mutex::new(Turn {
                    next: 0,
                    open: false,
                    served: 0,
                }),
                serialized: matches!(
                    threading,
                    mpi::Threading::Serialized | mpi::Threading::Multiple
                ),
            });
            let _ = ready_tx.send(Ok((rank, size, gate.clone())));
            SERVICE.with(|s| *s.borrow_mut() = Some(Service::new(replies_rx)));
            let finished = serve(&world, rx, limit, &gate);
            // MPI is finalized when the universe drops.
            drop(universe);
            if let Some(ack) = finished {
                let _ = ack.send(());
            }
        })
        .map_err(|e| format!("cannot start the MPI communication thread: {e}"))?;
    let (rank, size, gate) = ready_rx
        .recv()
        .map_err(|_| "the MPI communication thread stopped while starting".to_string())??;
    // SAFETY: `finalize_at_exit` is a plain function that touches only a static and channels;
    // registering it has no precondition.
    if unsafe { libc::atexit(finalize_at_exit) } != 0 {
        eprintln!("mxrs kvstore: cannot register MPI's finalization at exit");
    }
    Ok(Comm {
        tx,
        gate,
        limit,
        replies,
        rank,
        size,
        next: AtomicU64::new(0),
    })
}

/// The communication thread: runs requests in ticket order until the process exits (the
/// `Finish` message, returned) or every sender is gone. Requests still held back then fail.
/// Idle, it opens the gate for callers to run the next ticket themselves, and shuts it when a
/// message comes.
fn serve(
    world: &mpi::topology::SimpleCommunicator,
    rx: mpsc::Receiver<Msg>,
    limit: Duration,
    gate: &Gate,
) -> Option<mpsc::Sender<()>> {
    let mut early: BTreeMap<u64, Request> = BTreeMap::new();
    let mut expected = 0u64;
    let mut finished = None;
    loop {
        let idle = early.is_empty() && awaiting().is_none() && !serving();
        if idle {
            gate.open(expected);
        }
        let msg = next_request(world, &rx, limit);
        expected = gate.shut(expected);
        let Some(msg) = msg else { break };
        let req = match msg {
            Msg::Run(req) => req,
            Msg::Finish(ack) => {
                finished = Some(ack);
                break;
            }
            Msg::Serve(table) => {
                with_service(|s| s.add(table));
                continue;
            }
            Msg::Unserve(id) => {
                with_service(|s| s.remove(id));
                continue;
            }
        };
        early.insert(req.ticket, req);
        while let Some(req) = early.remove(&expected) {
            expected += 1;
            match req.work {
                Work::Fetch { id, request, then } => {
                    // In flight before it is sent: the wait for the send takes replies, and
                    // this request's own may already be among them.
                    let what = req.what.clone();
                    IN_FLIGHT.with(|f| {
                        f.borrow_mut().insert(
                            id,
                            InFlight {
                                what: req.what,
                                since: Instant::now(),
                                then,
                                done: req.done,
                            },
                        )
                    });
                    send_bytes(world, 0, TAG_REQUEST, &request, &what, limit);
                }
                work => {
                    let result = execute(world, &req.what, work, limit);
                    (req.done)(result);
                }
            }
        }
    }
    let unanswered = IN_FLIGHT.with(|f| std::mem::take(&mut *f.borrow_mut()));
    let held = early.into_values().map(|req| req.done);
    for done in unanswered.into_values().map(|f| f.done).chain(held) {
        done(Err("the process is exiting".to_string()));
    }
    finished
}

/// A request sent to rank 0 whose reply has not come yet.
struct InFlight {
    what: String,
    since: Instant,
    then: Then,
    done: Done,
}

/// Takes the replies that have arrived for this thread's requests in flight, each to its
/// request's `then` and `done`; whether there were any. Past the limit without its reply, the
/// oldest request ends the job, as a collective does.
fn take_replies(world: &mpi::topology::SimpleCommunicator, limit: Duration) -> bool {
    use mpi::point_to_point::MatchedReceiveVec;
    if IN_FLIGHT.with(|f| f.borrow().is_empty()) {
        return false;
    }
    let root = world.process_at_rank(0);
    let mut took = false;
    while let Some(probed) = root.immediate_matched_probe_with_tag(TAG_REPLY) {
        let reply = probed.matched_receive_vec::<u8>().0;
        took = true;
        let asked = reply_id(&reply).and_then(|id| IN_FLIGHT.with(|f| f.borrow_mut().remove(&id)));
        match asked {
            Some(f) => (f.done)((f.then)(&reply)),
            None => eprintln!("mxrs kvstore: rank 0 answered a request this rank did not send"),
        }
    }
    let late = IN_FLIGHT.with(|f| {
        f.borrow()
            .values()
            .min_by_key(|f| f.since)
            .filter(|f| f.since.elapsed() > limit)
            .map(|f| f.what.clone())
    });
    if let Some(what) = late {
        give_up(world, &what, limit);
    }
    took
}

/// How long this thread's oldest request in flight has waited for its reply, if it has any.
fn awaiting() -> Option<Duration> {
    IN_FLIGHT.with(|f| f.borrow().values().map(|f| f.since.elapsed()).max())
}

/// Ends the job after `what` waited past `limit` for a peer.
fn give_up(world: &mpi::topology::SimpleCommunicator, what: &str, limit: Duration) -> ! {
    let line = format!(
        "mxrs kvstore: rank {}: {what} did not complete within {:.0} s: a peer rank died or \
         stalled (MXRS_KVSTORE_TIMEOUT sets the limit); ending the job\n",
        world.rank(),
        limit.as_secs_f64()
    );
    // One write, so that the launcher, tearing the job down, forwards the line whole
    // (`eprintln!` writes it in pieces, and the job once ended after the first); then a pause
    // before the abort, which lets MPICH's launcher kill the job before it has forwarded what
    // the rank wrote (the line was lost in about one run in twenty without it).
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    std::thread::sleep(Duration::from_millis(200));
    world.abort(70)
}

thread_local! {
    /// The communication thread's `dist_async` service (rank 0 serves the others' requests).
    static SERVICE: RefCell<Option<Service>> = const { RefCell::new(None) };
    /// The communication thread's `dist_async` requests awaiting rank 0's reply, by id.
    static IN_FLIGHT: RefCell<BTreeMap<u64, InFlight>> = const { RefCell::new(BTreeMap::new()) };
}

/// Runs `f` on the thread's service.
fn with_service(f: impl FnOnce(&mut Service)) {
    SERVICE.with(|s| {
        if let Some(service) = s.borrow_mut().as_mut() {
            f(service);
        }
    });
}

/// Serves the other ranks' `dist_async` requests that have arrived (rank 0, between and while
/// waiting for its own work); whether there was any. Not re-entered: a reply sent from within
/// the service waits without serving.
fn serve_peers(world: &mpi::topology::SimpleCommunicator, limit: Duration) -> bool {
    SERVICE.with(|s| match s.try_borrow_mut() {
        Ok(mut service) => service
            .as_mut()
            .is_some_and(|service| service.active() && service.poll(world, limit)),
        Err(_) => false,
    })
}

/// Whether this thread serves any `dist_async` store.
fn serving() -> bool {
    SERVICE.with(|s| {
        s.try_borrow()
            .is_ok_and(|service| service.as_ref().is_some_and(Service::active))
    })
}

/// The next request: looked for without blocking for a few microseconds first (a training
/// step's requests come in quick succession, and waking a blocked thread costs more), then
/// waited for; while the thread serves `dist_async` stores it polls instead, serving the other
/// ranks' requests, sleeping briefly between polls once idle; while its own requests await
/// their replies it polls for those, yielding between polls (sleeping briefly once a reply is
/// 200 ms late, as [`collective::Waiting`] does). `None` once every sender is gone.
fn next_request(
    world: &mpi::topology::SimpleCommunicator,
    rx: &mpsc::Receiver<Msg>,
    limit: Duration,
) -> Option<Msg> {
    let mut idle = 0u32;
    loop {
        match rx.try_recv() {
            Ok(req) => return Some(req),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        if serve_peers(world, limit) || take_replies(world, limit) {
            idle = 0;
            continue;
        }
        idle += 1;
        match (idle < 200, awaiting(), serving()) {
            (true, _, _) => std::thread::yield_now(),
            (false, Some(w), _) if w < Duration::from_millis(200) => std::thread::yield_now(),
            (false, Some(_), _) => std::thread::sleep(Duration::from_micros(50)),
            (false, None, true) => std::thread::sleep(Duration::from_micros(100)),
            (false, None, false) => return rx.recv().ok(),
        }
    }
}

/// A collective's ticket, held by its engine op: if the op is dropped without running (an
/// input failed), the ticket still joins the collective (see `dist`).
pub(super) struct Ticket {
    comm: &'static Comm,
    number: u64,
    what: String,
    /// The stand-in work if the op never runs.
    skipped: Option<Work>,
}

impl Ticket {
    /// The next ticket, for the call described by `what`; `skipped` is handed over if the op
    /// never runs.
    pub(super) fn new(comm: &'static Comm, what: String, skipped: Work) -> Ticket {
        Ticket {
            comm,
            number: comm.ticket(),
            what,
            skipped: Some(skipped),
        }
    }

    pub(super) fn submit(mut self, work: Work, done: Done) {
        self.skipped = None;
        self.comm.submit(
            self.number,
            std::mem::take(&mut self.what),
            work,
            done,
            false,
        );
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(work) = self.skipped.take() {
            let what = std::mem::take(&mut self.what);
            self.comm
                .submit(self.number, what, work, Box::new(|_| {}), false);
        }
    }
}

/// Pushes the engine op that sums each pending value over the ranks into its `reduced` array:
/// one collective for the whole bucket (one dtype). The values packed at their pushes lie in
/// `packed`, which holds them and one element more.
pub(super) fn push_sum(
    comm: &'static Comm,
    parts: &[super::Pending],
    packed: Option<&NDArray>,
) -> Result<()> {
    let Some(first) = parts.first() else {
        return Ok(());
    };
    let keys: Vec<String> = parts.iter().map(|p| p.key.to_string()).collect();
    let what = match keys.len() {
        1 => format!("the sum of key {} across ranks", keys[0]),
        n => format!("the sum of {n} keys ({}) across ranks", keys.join(", ")),
    };
    let (in_buffer, alone): (Vec<_>, Vec<_>) = parts.iter().partition(|p| p.packed);
    let packed = match (packed, in_buffer.is_empty()) {
        (_, true) => None,
        (Some(buf), false) => Some(buf),
        (None, false) => {
            return Err(invalid(
                "kvstore push",
                format!("{what}: values marked packed without a packed buffer"),
            ))
        }
    };
    let skipped = Work::SkippedSum {
        alone: alone.iter().map(|p| p.merged.size()).collect(),
        packed: in_buffer.iter().map(|p| p.merged.size()).collect(),
        dtype: first.merged.dtype(),
    };
    let ticket = Ticket::new(comm, what, skipped);
    let sends: Vec<(TensorRef, TensorRef)> = alone
        .iter()
        .map(|p| (p.merged.tensor(), p.reduced.tensor()))
        .collect();
    // The packed buffer is read (a failed copy into it stops the sum, whose stand-in then
    // tells every rank) and written (the health's slot).
    let reads: Vec<&engine::Var> = alone
        .iter()
        .map(|p| p.merged.var())
        .chain(packed.map(NDArray::var))
        .collect();
    let writes: Vec<&engine::Var> = parts
        .iter()
        .map(|p| p.reduced.var())
        .chain(packed.map(NDArray::var))
        .collect();
    let packed_work = packed.map(|buf| Packed {
        buf: buf.tensor(),
        recvs: in_buffer.iter().map(|p| p.reduced.tensor()).collect(),
    });
    let op = engine::Op::asynchronous("kvstore_allreduce", move |_, done| {
        ticket.submit(
            Work::Sum {
                alone: sends,
                packed: packed_work,
            },
            Box::new(move |result| done.complete(result.map_err(Into::into))),
        );
    })
    .on(first.reduced.ctx())
    .reads(reads)
    .writes(writes)
    // Runnable at push, it runs on the pushing thread, which then runs the collective itself
    // when the gate lets it (the caller is about to pull and wait) and otherwise hands it to
    // the communication thread: either way no worker is woken for it.
    .cheap();
    Ok(first.reduced.runtime().engine().push(op)?)
}

/// Pushes the engine op that overwrites `buf` with rank 0's.
pub(super) fn push_broadcast(comm: &'static Comm, key: &Key, buf: &NDArray) -> Result<()> {
    let skipped = Work::SkippedBroadcast {
        len: buf.size(),
        dtype: buf.dtype(),
    };
    let ticket = Ticket::new(
        comm,
        format!("the broadcast of key {key} from rank 0"),
        skipped,
    );
    let b = buf.tensor();
    let op = engine::Op::asynchronous("kvstore_broadcast", move |_, done| {
        ticket.submit(
            Work::Broadcast { buf: b },
            Box::new(move |result| done.complete(result.map_err(Into::into))),
        );
    })
    .on(buf.ctx())
    .write(buf.var())
    .cheap();
    Ok(buf.runtime().engine().push(op)?)
}
