//! The collectives themselves, run on whichever thread holds MPI (the communication thread,
//! or a caller in place): each a nonblocking MPI call polled until done, serving `dist_async`
//! peers between tests, or the job's end past the timeout.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::traits::*;

use super::super::dist_async::TAG_REQUEST;
use super::{give_up, serve_peers, take_replies, Work};
use crate::DType;

thread_local! {
    /// The communication thread's buffer for packed buckets' sums, kept from one bucket to the
    /// next, in `u64`s so that it suits every dtype. Allocated (and zeroed) for every bucket, a
    /// round of 64 keys of 16 KB took 545-562 µs on two ranks of one host; kept, 502-538.
    static SUMS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// A wait for a peer: spins a little, then yields the core to any thread that needs it, after
/// 200 ms (a peer is late) sleeps briefly between tests; past the limit, ends the job. Rank 0
/// serves the other ranks' `dist_async` requests between tests.
pub(super) struct Waiting {
    start: Instant,
    spins: u32,
}

impl Waiting {
    pub(super) fn new() -> Waiting {
        Waiting {
            start: Instant::now(),
            spins: 0,
        }
    }

    pub(super) fn pause(
        &mut self,
        world: &mpi::topology::SimpleCommunicator,
        what: &str,
        limit: Duration,
    ) {
        // A reply taken here frees rank 0, which may be waiting to finish sending it.
        if serve_peers(world, limit) || take_replies(world, limit) {
            return;
        }
        self.spins += 1;
        if self.spins < 64 {
            std::hint::spin_loop();
        } else if self.start.elapsed() < Duration::from_millis(200) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        if self.start.elapsed() > limit {
            give_up(world, what, limit);
        }
    }
}

/// Waits for `req` to complete, testing it (which also drives MPI's progress: a sum over shared
/// memory moves only while its processes poll).
fn finish<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    world: &mpi::topology::SimpleCommunicator,
    mut req: mpi::request::Request<'a, D, S>,
    what: &str,
    limit: Duration,
) {
    let mut waiting = Waiting::new();
    loop {
        match req.test() {
            Ok(_) => return,
            Err(pending) => req = pending,
        }
        waiting.pause(world, what, limit);
    }
}

/// Sends `bytes` to rank `to` under `tag` and waits until they are sent.
pub(in crate::kvstore) fn send_bytes(
    world: &mpi::topology::SimpleCommunicator,
    to: usize,
    tag: i32,
    bytes: &[u8],
    what: &str,
    limit: Duration,
) {
    let dest = world.process_at_rank(to as i32);
    mpi::request::scope(|scope| {
        let req = dest.immediate_send_with_tag(scope, bytes, tag);
        finish(world, req, what, limit);
    });
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

/// Sums each `alone` part's send buffer over the ranks into its receive buffer, one allreduce
/// each, and `packed` (its values, then a slot for the health) in one allreduce whose sums are
/// copied out to its receive buffers in order; returns how many ranks were healthy. With nothing
/// packed, the health goes in a one-integer allreduce of its own, started before the parts' so
/// that its latency hides under theirs. Every rank's bucket holds the same parts in the same
/// order, so every rank makes the same collectives.
fn sum_parts<T>(
    world: &mpi::topology::SimpleCommunicator,
    alone: Vec<(&mut [T], &mut [T])>,
    packed: Option<(&mut [T], Vec<&mut [T]>)>,
    ok: bool,
    what: &str,
    limit: Duration,
) -> usize
where
    T: mpi::datatype::Equivalence + Copy + Default + num_traits::NumCast,
{
    let sum_alone = || {
        for (send, recv) in alone {
            sum_into(world, &send[..], &mut recv[..], what, limit);
        }
    };
    let Some((values, recvs)) = packed else {
        return healthy_ranks(world, ok, what, limit, sum_alone) as usize;
    };
    sum_alone();
    let total = values.len() - 1;
    values[total] = T::from(u8::from(ok)).unwrap_or_default();
    SUMS.with_borrow_mut(|out| {
        let words = std::mem::size_of_val(values).div_ceil(size_of::<u64>());
        if out.len() < words {
            out.resize(words, 0);
        }
        // SAFETY: the buffer holds at least `total + 1` elements of `T` (sized above), is
        // aligned for it (a `u64`'s alignment is a multiple of every dtype's), and `T` is one of
        // the dtypes' plain number types (the callers go through `with_dtype!`), for which every
        // bit pattern is a value.
        let sums =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<T>(), total + 1) };
        sum_into(world, &values[..], &mut sums[..], what, limit);
        let mut at = 0;
        for recv in recvs {
            recv.copy_from_slice(&sums[at..at + recv.len()]);
            at += recv.len();
        }
        num_traits::cast::<T, usize>(sums[total]).unwrap_or(0)
    })
}

/// One health flag per rank, summed: how many ranks contributed; `beside` makes the call's own
/// collectives while the flags' is under way. (After a bucket's lone sums, its microsecond or
/// so came on top of theirs: 64 keys of 64 KiB a round took 1269-1272 µs, beside them
/// 1236-1256.)
fn healthy_ranks(
    world: &mpi::topology::SimpleCommunicator,
    ok: bool,
    what: &str,
    limit: Duration,
    beside: impl FnOnce(),
) -> i32 {
    let (flag, mut total) = (i32::from(ok), 0i32);
    mpi::request::scope(|scope| {
        let health =
            world.immediate_all_reduce_into(scope, &flag, &mut total, SystemOperation::sum());
        beside();
        finish(world, health, what, limit);
    });
    total
}

/// `buf` = rank 0's `buf`.
fn broadcast_into<T: mpi::datatype::Equivalence>(
    world: &mpi::topology::SimpleCommunicator,
    buf: &mut [T],
    what: &str,
    limit: Duration,
) {
    let root = world.process_at_rank(0);
    mpi::request::scope(|scope| {
        let req = root.immediate_broadcast_into(scope, buf);
        finish(world, req, what, limit);
    });
}

/// `recv` = the sum over the ranks of `send`: a nonblocking allreduce, polled until done or
/// the timeout ends the job ([`finish`]).
fn sum_into<S, R>(
    world: &mpi::topology::SimpleCommunicator,
    send: &S,
    recv: &mut R,
    what: &str,
    limit: Duration,
) where
    S: mpi::datatype::Buffer + ?Sized,
    R: mpi::datatype::BufferMut + ?Sized,
{
    mpi::request::scope(|scope| {
        let req = world.immediate_all_reduce_into(scope, send, recv, SystemOperation::sum());
        finish(world, req, what, limit);
    });
}

pub(super) fn execute(
    world: &mpi::topology::SimpleCommunicator,
    what: &str,
    work: Work,
    limit: Duration,
) -> std::result::Result<(), String> {
    let size = world.size() as usize;
    match work {
        Work::Sum { alone, packed } => {
            let dtype = alone
                .first()
                .map(|p| p.0.dtype)
                .or(packed.as_ref().map(|p| p.buf.dtype))
                .unwrap_or(DType::F32);
            let healthy = crate::with_dtype!(dtype, T => {
                // SAFETY: the sum's engine op reads every `send`, writes every `recv` and the
                // packed buffer, and is running.
                let alone: Vec<(&mut [T], &mut [T])> = alone
                    .iter()
                    .map(|(s, r)| unsafe { (s.slice_mut::<T>(), r.slice_mut::<T>()) })
                    .collect();
                // SAFETY: as above.
                let packed = packed.as_ref().map(|p| unsafe {
                    (p.buf.slice_mut::<T>(), p.recvs.iter().map(|r| r.slice_mut::<T>()).collect())
                });
                sum_parts(world, alone, packed, true, what, limit)
            });
            sum_result(what, healthy, size, "")
        }
        Work::SkippedSum {
            alone,
            packed,
            dtype,
        } => {
            let healthy = crate::with_dtype!(dtype, T => {
                let zeros = |n: usize| vec![T::default(); n];
                let mut alone: Vec<(Vec<T>, Vec<T>)> =
                    alone.iter().map(|&n| (zeros(n), zeros(n))).collect();
                let alone = alone.iter_mut().map(|(s, r)| (&mut s[..], &mut r[..])).collect();
                // The packed sums go nowhere: this rank has no arrays to give them.
                let mut values = zeros(packed.iter().sum::<usize>() + 1);
                let packed = (!packed.is_empty()).then(|| (&mut values[..], Vec::new()));
                sum_parts(world, alone, packed, false, what, limit)
            });
            sum_result(what, healthy, size, ", this rank's among them")
        }
        Work::Broadcast { buf } => {
            crate::with_dtype!(buf.dtype, T => {
                // SAFETY: the broadcast's engine op writes `buf` and is running.
                broadcast_into(world, unsafe { buf.slice_mut::<T>() }, what, limit);
            });
            let healthy = healthy_ranks(world, true, what, limit, || {}) as usize;
            match healthy == size {
                true => Ok(()),
                false => Err(format!(
                    "{what}: {} of {size} ranks failed to take part",
                    size - healthy
                )),
            }
        }
        Work::SkippedBroadcast { len, dtype } => {
            crate::with_dtype!(dtype, T => {
                broadcast_into(world, &mut vec![T::default(); len][..], what, limit);
            });
            healthy_ranks(world, false, what, limit, || {});
            Err(format!(
                "{what}: this rank's op failed before it could take part"
            ))
        }
        Work::Agree { key, elements } => {
            // Every rank's element count, and a hash of its key, side by side.
            let mine = [key_hash(&key), elements];
            let mut all = vec![0u64; 2 * size];
            mpi::request::scope(|scope| {
                let req = world.immediate_all_gather_into(scope, &mine[..], &mut all[..]);
                finish(world, req, what, limit);
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
            finish(world, req, what, limit);
            Ok(())
        }
        Work::Measure {
            len,
            buffers,
            iters,
            seconds,
        } => {
            let send = vec![vec![1f32; len]; buffers.max(1)];
            let mut recv = vec![vec![0f32; len]; buffers.max(1)];
            world.barrier();
            let start = Instant::now();
            for i in 0..iters {
                let b = i % send.len();
                world.all_reduce_into(&send[b][..], &mut recv[b][..], SystemOperation::sum());
            }
            *seconds.lock() = start.elapsed().as_secs_f64() / iters.max(1) as f64;
            Ok(())
        }
        Work::Send { bytes } => {
            send_bytes(world, 0, TAG_REQUEST, &bytes, what, limit);
            Ok(())
        }
        // Sent by `serve`, which takes the reply when it comes.
        Work::Fetch { .. } => Err(format!("{what}: a request run as a collective")),
        Work::Skip => Ok(()),
    }
}

/// A stable hash of a key's text (FNV-1a), the same on every rank.
fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
