//! `dist_async`: rank 0 holds every key's weight and applies each push as it arrives, as
//! MXNet's `dist_async` servers do; the other ranks send their gradients to it and fetch the
//! weights from it, without waiting for each other.
//!
//! The protocol is point to point over MPI, run by each process's communication thread (see
//! `dist`): a worker's push is one message to rank 0 (a header and the gradient's bytes), a pull
//! one request answered by one reply. Rank 0's thread looks for requests whenever it waits or
//! idles and serves them in arrival order; MPI keeps the messages of one sender in order, so a
//! worker's pull is answered after its earlier pushes have been applied (their update ops were
//! pushed on rank 0's engine before the pull's read of the weight).
//!
//! A worker does not wait for one reply before sending its next request: a step's pulls go out
//! together and their replies come back in whatever order rank 0's reads finish, each naming the
//! request it answers (its id), so a step pays about one round trip, not one per key.
//!
//! **Staleness**: every key has a version, the number of updates applied to it. A pull reply
//! carries it; the worker's next push of the key carries the version its gradient was computed
//! from (the push op is ordered after the pull that wrote the weight, before the next one), and
//! rank 0 records `version now - version read` (the updates the gradient did not see). Replies carry the store-wide tally, so every rank can report it.
//!
//! A worker's `barrier` first sends a `Sync` request: its answer means rank 0 has taken every
//! earlier push of that worker, so after the barrier a pull sees them all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;

use super::dist::{self, Comm, Work};
use super::{same_array, Key, Staleness, Updater};
use crate::error::{invalid, Result};
use crate::ops::TensorRef;
use crate::{NDArray, Runtime};

/// The tag of a request to rank 0, and of its reply.
pub(super) const TAG_REQUEST: i32 = 0x6d78;
pub(super) const TAG_REPLY: i32 = 0x6d79;

/// The priority of a reply's read of the weight: another rank waits for it, so it goes before
/// rank 0's own compute among the ops ready to run.
const ANSWER_PRIORITY: i32 = i32::MAX / 2;

/// A request's kinds (the header's first word).
const PUSH: u64 = 0;
const PULL: u64 = 1;
const SYNC: u64 = 2;

/// Request header: kind, store, key index, version read, the request's id (for its reply).
/// Reply header: status (0 ok, else the payload is the error's text), the id of the request it
/// answers, version, then the store's staleness tally.
const REQUEST_WORDS: usize = 5;
const REPLY_WORDS: usize = 6;

/// Ids of this process's requests that expect a reply (unique within the process).
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(0);

/// A request of `kind` about key `idx` of store `store`, under a fresh id, whose reply goes to
/// `then`.
fn fetch(kind: u64, store: u32, idx: u32, then: dist::Then) -> Work {
    let id = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
    let request = words(&[kind, u64::from(store), u64::from(idx), 0, id]);
    Work::Fetch { id, request, then }
}

/// The id of the request a reply answers, or `None` if it is too short to say.
pub(super) fn reply_id(reply: &[u8]) -> Option<u64> {
    split(reply, 2).map(|(head, _)| head[1])
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The `n` header words at the start of `bytes`, and what follows; `None` if too short.
fn split(bytes: &[u8], n: usize) -> Option<(Vec<u64>, &[u8])> {
    let head = bytes.get(..n * 8)?;
    let ws = head
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    Some((ws, &bytes[n * 8..]))
}

/// A reply rank 0's communication thread sends.
pub(super) struct Reply {
    pub(super) to: usize,
    pub(super) bytes: Vec<u8>,
}

fn error_reply(to: usize, id: u64, text: &str) -> Reply {
    let mut bytes = words(&[1, id, 0, 0, 0, 0]);
    bytes.extend_from_slice(text.as_bytes());
    Reply { to, bytes }
}

/// One key as the table knows it.
struct Served {
    key: Key,
    stored: NDArray,
    /// Rank 0: the updates applied. Other ranks: the version of the last pull's reply.
    version: u64,
    /// Rank 0: the version its own last pull read.
    read: u64,
    /// Rank 0: why the last update from another rank failed, told to the next puller.
    failed: Option<String>,
}

/// A `dist_async` store's keys, shared between the store and (on rank 0) the communication
/// thread that serves the other ranks.
pub(super) struct Table {
    pub(super) id: u32,
    rt: Arc<Runtime>,
    /// The store's updater (rank 0 runs it for every rank's pushes).
    updater: Arc<Mutex<Option<Box<dyn Updater>>>>,
    /// The store's identity for the updater's re-entry check.
    store_id: u64,
    keys: Mutex<Vec<Served>>,
    tally: Mutex<Staleness>,
    replies: mpsc::Sender<Reply>,
}

/// Stores are numbered in creation order: every rank creates the same stores in the same order.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

impl Table {
    pub(super) fn new(
        comm: &'static Comm,
        rt: &Arc<Runtime>,
        updater: Arc<Mutex<Option<Box<dyn Updater>>>>,
        store_id: u64,
    ) -> Arc<Table> {
        let table = Arc::new(Table {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rt: rt.clone(),
            updater,
            store_id,
            keys: Mutex::new(Vec::new()),
            tally: Mutex::new(Staleness::default()),
            replies: comm.replies(),
        });
        if comm.rank() == 0 {
            comm.serve(table.clone());
        }
        table
    }

    /// Adds `key` (index = the order of inits, the same on every rank).
    pub(super) fn add(&self, key: Key, stored: NDArray) -> u32 {
        let mut keys = self.keys.lock();
        keys.push(Served {
            key,
            stored,
            version: 0,
            read: 0,
            failed: None,
        });
        (keys.len() - 1) as u32
    }

    pub(super) fn tally(&self) -> Staleness {
        *self.tally.lock()
    }

    /// Rank 0: applies `grad` to key `idx`, read at `version_read`, with `updater` (or replaces
    /// the weight without one), and records its staleness.
    pub(super) fn apply(
        &self,
        updater: &mut Option<Box<dyn Updater>>,
        idx: u32,
        grad: &NDArray,
        version_read: Option<u64>,
        priority: i32,
    ) -> Result<()> {
        let (key, stored) = {
            let mut keys = self.keys.lock();
            let s = &mut keys[idx as usize];
            let stale = s.version.saturating_sub(version_read.unwrap_or(s.read));
            s.version += 1;
            self.tally.lock().record(stale);
            (s.key.clone(), s.stored.clone())
        };
        super::run_update(self.store_id, updater, &key, grad, &stored, priority)
    }

    /// Rank 0: notes that its own pull of key `idx` read the current version.
    pub(super) fn read_locally(&self, idx: u32) {
        let mut keys = self.keys.lock();
        let s = &mut keys[idx as usize];
        s.read = s.version;
    }

    /// Rank 0: a request from rank `from`, the header's words after the store's number.
    pub(super) fn handle(&self, from: usize, [kind, idx, version, id]: [u64; 4], payload: &[u8]) {
        if kind == SYNC {
            // About the store, not a key: it may have none yet.
            let t = self.tally();
            self.send(Reply {
                to: from,
                bytes: words(&[0, id, 0, t.updates, t.total, t.max]),
            });
            return;
        }
        let entry = {
            let keys = self.keys.lock();
            keys.get(idx as usize)
                .map(|s| (s.key.clone(), s.stored.clone()))
        };
        let Some((key, stored)) = entry else {
            let text = format!(
                "rank {from} named key number {idx} of dist_async store {}, which rank 0 has \
                 not initialized",
                self.id
            );
            match kind {
                PUSH => eprintln!("mxrs kvstore: {text}"),
                _ => self.send(error_reply(from, id, &text)),
            }
            return;
        };
        match kind {
            PUSH => {
                if let Err(e) = self.apply_remote(from, idx as u32, version, &stored, payload) {
                    let text = format!("the update of key {key} pushed by rank {from} failed: {e}");
                    eprintln!("mxrs kvstore: {text}");
                    self.keys.lock()[idx as usize].failed = Some(text);
                }
            }
            PULL => self.answer(from, id, idx as u32, &key, &stored),
            _ => {
                let text = format!("rank {from} sent a request of unknown kind {kind}");
                self.send(error_reply(from, id, &text));
            }
        }
    }

    fn apply_remote(
        &self,
        from: usize,
        idx: u32,
        version: u64,
        stored: &NDArray,
        payload: &[u8],
    ) -> Result<()> {
        let grad = self
            .rt
            .from_bytes(payload, stored.shape(), stored.dtype(), stored.ctx())
            .map_err(|e| invalid("kvstore push", format!("from rank {from}: {e}")))?;
        let mut updater = self.updater.lock();
        self.apply(&mut updater, idx, &grad, Some(version), 0)
    }

    /// Answers rank `from`'s pull of key `idx` (request `id`): an op reading the weight after
    /// every update pushed so far sends it with its version (or, if it never runs, the weight's
    /// failure).
    fn answer(&self, from: usize, id: u64, idx: u32, key: &Key, stored: &NDArray) {
        let (version, failed) = {
            let mut keys = self.keys.lock();
            let s = &mut keys[idx as usize];
            (s.version, s.failed.take())
        };
        if let Some(text) = failed {
            return self.send(error_reply(from, id, &text));
        }
        let t = self.tally();
        let mut reply = Answer {
            to: from,
            id,
            replies: self.replies.clone(),
            head: words(&[0, id, version, t.updates, t.total, t.max]),
            what: format!("key {key} on rank 0"),
            sent: false,
        };
        let src = stored.tensor();
        let op = engine::Op::asynchronous("kvstore_async_answer", move |_, done| {
            // SAFETY: the op reads the weight's var, so nothing writes the memory meanwhile.
            let data = unsafe { bytes(&src) };
            reply.send(data);
            done.complete(Ok(()));
        })
        .on(stored.ctx())
        .read(stored.var())
        .priority(ANSWER_PRIORITY);
        if let Err(e) = self.rt.engine().push(op) {
            eprintln!("mxrs kvstore: cannot answer rank {from}'s pull of key {key}: {e}");
        }
    }

    fn send(&self, reply: Reply) {
        // The receiver lives as long as the communication thread, which outlives every request.
        let _ = self.replies.send(reply);
    }

    /// Another rank: takes a pull's reply into `buf`, noting the key's version and the tally.
    fn take_reply(
        &self,
        idx: u32,
        reply: &[u8],
        buf: &TensorRef,
    ) -> std::result::Result<(), String> {
        let (head, payload) = take_head(reply)?;
        if payload.len() != buf.buf.bytes {
            return Err(format!(
                "rank 0 sent {} bytes for a weight of {} bytes",
                payload.len(),
                buf.buf.bytes
            ));
        }
        // SAFETY: the pull's op writes `buf`'s var and is running (waiting for this reply).
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), buf.buf.ptr, payload.len()) };
        self.keys.lock()[idx as usize].version = head[2];
        self.note_tally(&head);
        Ok(())
    }

    fn note_tally(&self, head: &[u64]) {
        *self.tally.lock() = Staleness {
            updates: head[3],
            total: head[4],
            max: head[5],
        };
    }
}

/// A reply header's words and payload, or the error rank 0 sent.
fn take_head(reply: &[u8]) -> std::result::Result<(Vec<u64>, &[u8]), String> {
    let (head, payload) =
        split(reply, REPLY_WORDS).ok_or_else(|| "rank 0 sent a truncated reply".to_string())?;
    match head[0] {
        0 => Ok((head, payload)),
        _ => Err(String::from_utf8_lossy(payload).into_owned()),
    }
}

/// A pull's answer on its way: sent once with the weight, or, if its op is dropped without
/// running (the weight's last update failed), with that failure, so the puller never waits in
/// vain.
struct Answer {
    to: usize,
    id: u64,
    replies: mpsc::Sender<Reply>,
    head: Vec<u8>,
    what: String,
    sent: bool,
}

impl Answer {
    fn send(&mut self, data: &[u8]) {
        let mut bytes = std::mem::take(&mut self.head);
        bytes.extend_from_slice(data);
        let _ = self.replies.send(Reply { to: self.to, bytes });
        self.sent = true;
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.sent {
            let text = format!("{}: the weight's last update failed", self.what);
            let _ = self.replies.send(error_reply(self.to, self.id, &text));
        }
    }
}

/// A tensor's bytes.
///
/// # Safety
/// The caller holds read access to the memory (an engine op reading its var).
unsafe fn bytes(t: &TensorRef) -> &[u8] {
    // SAFETY: per the caller's contract; `bytes` is within the block.
    unsafe { std::slice::from_raw_parts(t.buf.ptr, t.buf.bytes) }
}

/// Another rank: pushes the op that sends `merged` to rank 0 as key `idx`'s gradient. It also
/// reads `stored`, so it runs after the pull that wrote the weight the gradient came from and
/// before the next pull.
pub(super) fn push_send(
    comm: &'static Comm,
    table: &Arc<Table>,
    idx: u32,
    key: &Key,
    merged: &NDArray,
    stored: &NDArray,
    priority: i32,
) -> Result<()> {
    let ticket = dist::Ticket::new(comm, format!("the push of key {key} to rank 0"), Work::Skip);
    let (src, tab) = (merged.tensor(), table.clone());
    let op = engine::Op::asynchronous("kvstore_async_push", move |_, done| {
        let version = tab.keys.lock()[idx as usize].version;
        let mut msg = words(&[PUSH, u64::from(tab.id), u64::from(idx), version, 0]);
        // SAFETY: the op reads the gradient's var.
        msg.extend_from_slice(unsafe { bytes(&src) });
        ticket.submit(
            Work::Send { bytes: msg },
            Box::new(move |result| done.complete(result.map_err(Into::into))),
        );
    })
    .on(merged.ctx())
    .read(merged.var())
    .priority(priority);
    let op = match same_array(merged, stored) {
        true => op,
        false => op.read(stored.var()),
    };
    Ok(merged.runtime().engine().push(op)?)
}

/// Another rank: pushes the op that fetches key `idx`'s weight from rank 0 into `stored`.
pub(super) fn push_fetch(
    comm: &'static Comm,
    table: &Arc<Table>,
    idx: u32,
    key: &Key,
    stored: &NDArray,
    priority: i32,
) -> Result<()> {
    let ticket = dist::Ticket::new(
        comm,
        format!("the pull of key {key} from rank 0"),
        Work::Skip,
    );
    let (dst, tab) = (stored.tensor(), table.clone());
    let op = engine::Op::asynchronous("kvstore_async_pull", move |_, done| {
        let store = tab.id;
        let then: dist::Then = Box::new(move |reply| tab.take_reply(idx, reply, &dst));
        ticket.submit(
            fetch(PULL, store, idx, then),
            Box::new(move |result| done.complete(result.map_err(Into::into))),
        );
    })
    .on(stored.ctx())
    .write(stored.var())
    .priority(priority)
    // It only hands its request to the communication thread.
    .cheap();
    Ok(stored.runtime().engine().push(op)?)
}

/// Another rank: waits until rank 0 has taken every push this rank sent before (a `barrier`'s
/// first half), noting the tally rank 0 answers with.
pub(super) fn sync(comm: &'static Comm, table: &Arc<Table>) -> Result<()> {
    let tab = table.clone();
    let then: dist::Then = Box::new(move |reply| {
        let (head, _) = take_head(reply)?;
        tab.note_tally(&head);
        Ok(())
    });
    comm.run(
        "the barrier's exchange with rank 0".to_string(),
        fetch(SYNC, table.id, 0, then),
    )
}

/// What rank 0's communication thread serves: the tables of its `dist_async` stores, and the
/// replies their ops have ready.
pub(super) struct Service {
    tables: HashMap<u32, Arc<Table>>,
    replies: mpsc::Receiver<Reply>,
}

impl Service {
    pub(super) fn new(replies: mpsc::Receiver<Reply>) -> Service {
        Service {
            tables: HashMap::new(),
            replies,
        }
    }

    pub(super) fn add(&mut self, table: Arc<Table>) {
        self.tables.insert(table.id, table);
    }

    pub(super) fn remove(&mut self, id: u32) {
        self.tables.remove(&id);
    }

    /// Whether there is anything to serve (else no one sends requests here).
    pub(super) fn active(&self) -> bool {
        !self.tables.is_empty()
    }

    /// Sends the ready replies and serves the requests that have arrived; whether it did
    /// anything.
    pub(super) fn poll(
        &mut self,
        world: &mpi::topology::SimpleCommunicator,
        limit: std::time::Duration,
    ) -> bool {
        use mpi::point_to_point::MatchedReceiveVec;
        use mpi::traits::*;
        let mut busy = false;
        loop {
            let mut sent = false;
            while let Ok(r) = self.replies.try_recv() {
                dist::send_bytes(world, r.to, TAG_REPLY, &r.bytes, "a reply to a pull", limit);
                sent = true;
            }
            let Some(probed) = world
                .any_process()
                .immediate_matched_probe_with_tag(TAG_REQUEST)
            else {
                return busy || sent;
            };
            busy = true;
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            let from = status.source_rank() as usize;
            let Some((head, payload)) = split(&bytes, REQUEST_WORDS) else {
                eprintln!("mxrs kvstore: rank {from} sent a truncated request; ignored");
                continue;
            };
            match self.tables.get(&(head[1] as u32)) {
                Some(t) => t.handle(from, [head[0], head[2], head[3], head[4]], payload),
                None if head[0] == PUSH => eprintln!(
                    "mxrs kvstore: rank {from} pushed to dist_async store {}, which rank 0 no \
                     longer holds; dropped",
                    head[1]
                ),
                None => {
                    let text = format!(
                        "dist_async store {} is not held by rank 0 (it dropped the store before \
                         rank {from} was done with it)",
                        head[1]
                    );
                    let r = error_reply(from, head[4], &text);
                    dist::send_bytes(world, r.to, TAG_REPLY, &r.bytes, "an error reply", limit);
                }
            }
        }
    }
}
