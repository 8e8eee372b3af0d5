//! Which op this thread is running, so that a blocking wait from inside an op is refused (it
//! could wait for itself) and a worker's op pushing more work keeps the pool's scheduling.
//!
//! Workers set the marker around every op they run, bulked members included, so it must cost
//! next to nothing: it is a constant-initialized thread-local `Cell` holding the engine's id and
//! a pointer to the op's name, not a copy of the name (an owned name would be cloned, that is
//! allocated, for every op run). The pointer is valid while the [`RunningScope`] that set it
//! lives: the scope borrows the name and puts the previous marker back when it ends.

use std::borrow::Cow;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;

type Name = Cow<'static, str>;

/// The engine id and the name of the op running on this thread.
type Marker = Option<(u64, NonNull<Name>)>;

// Loom's `thread_local!` takes no `const { }` initializer; loom models need its version, as
// model threads share one OS thread.
#[cfg(loom)]
loom::thread_local! {
    static RUNNING: Cell<Marker> = Cell::new(None);
}
#[cfg(not(loom))]
std::thread_local! {
    static RUNNING: Cell<Marker> = const { Cell::new(None) };
}

/// Marks the op running on this thread for as long as it lives.
pub(crate) struct RunningScope<'a> {
    prev: Marker,
    _name: PhantomData<&'a Name>,
}

impl<'a> RunningScope<'a> {
    pub(crate) fn enter(engine: u64, name: &'a Name) -> Self {
        RunningScope {
            prev: RUNNING.with(|r| r.replace(Some((engine, NonNull::from(name))))),
            _name: PhantomData,
        }
    }
}

impl Drop for RunningScope<'_> {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(self.prev));
    }
}

/// Whether this thread is running an op of engine `engine`.
pub(crate) fn running_op_of(engine: u64) -> bool {
    RUNNING.with(|r| matches!(r.get(), Some((id, _)) if id == engine))
}

/// The name of the op of engine `engine` this thread is running, if any.
pub(crate) fn running_op_name(engine: u64) -> Option<String> {
    match RUNNING.with(Cell::get) {
        // SAFETY: a marker names an op whose `RunningScope` is still alive on this thread (the
        // scope puts the previous marker back when it ends), and that scope borrows the name.
        Some((id, name)) if id == engine => Some(unsafe { name.as_ref() }.to_string()),
        _ => None,
    }
}
