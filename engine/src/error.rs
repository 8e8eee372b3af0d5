//! What the engine reports to its callers.

use std::fmt;
use std::sync::Arc;

/// The error type an op's closure returns; anything that implements `Error` converts into it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What an op's closure returns.
pub type OpResult = Result<(), BoxError>;

/// The first failure behind a poisoned var: which op failed and why. Ops skipped because of it
/// pass on this same record, so every var it reaches reports the root cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpFailure {
    /// The name the failing op was pushed with.
    pub op: String,
    /// The error it returned, or the panic message.
    pub message: String,
    /// Whether the op panicked (rather than returning an error).
    pub panicked: bool,
}

impl fmt::Display for OpFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.panicked { "panicked" } else { "failed" };
        write!(f, "op '{}' {}: {}", self.op, how, self.message)
    }
}

/// A failure as the vars it reaches hold it: one record shared by the failing op's writes and
/// by every var downstream that a skipped op passed it on to, as MXNet shares one exception
/// record among them. Reporting it once (at the first wait that reaches it, or at
/// `wait_for_all`) clears it for every var at once: later waits on them succeed, and ops pushed
/// after the report that read them run. Ops pushed before the report still see it, so that what
/// runs does not depend on timing: the report takes effect at its place in push order.
pub(crate) struct Failure {
    pub(crate) root: Arc<OpFailure>,
    /// The sequence number of the wait that reported it (`u64::MAX`: not reported).
    reported_at: crate::sync::AtomicU64,
}

/// What a poisoned var holds.
pub(crate) type Poison = Arc<Failure>;

impl Failure {
    pub(crate) fn new(root: OpFailure) -> Poison {
        Arc::new(Failure {
            root: Arc::new(root),
            reported_at: crate::sync::AtomicU64::new(u64::MAX),
        })
    }

    /// Whether it stops the op pushed with sequence number `seq`: not reported, or reported by
    /// a wait pushed after that op.
    pub(crate) fn stops(&self, seq: u64) -> bool {
        seq < self.reported_at.load(crate::sync::Ordering::Acquire)
    }

    /// Whether no wait has reported it yet.
    pub(crate) fn is_live(&self) -> bool {
        self.stops(u64::MAX - 1)
    }

    /// Marks it reported by the wait pushed with sequence number `seq`; true for the one caller
    /// that reports it.
    pub(crate) fn report(&self, seq: u64) -> bool {
        let unreported = u64::MAX;
        let (ok, fail) = (
            crate::sync::Ordering::AcqRel,
            crate::sync::Ordering::Acquire,
        );
        self.reported_at
            .compare_exchange(unreported, seq, ok, fail)
            .is_ok()
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (live: {})", self.root, self.is_live())
    }
}

/// Errors returned by engine calls.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// An op (this one, or one before it on a var it touched) failed; its result is missing.
    #[error("{0}")]
    OpFailed(Arc<OpFailure>),
    /// An op named a var that `delete_var` had already been called on.
    #[error("op '{op}' uses var #{var}, which was deleted (delete_var) before this push")]
    DeadVar {
        /// The op that was refused.
        op: String,
        /// The dead var's id.
        var: u64,
    },
    /// A var created by one engine was handed to another.
    #[error(
        "op '{op}' uses var #{var}, which belongs to engine #{owner}, not to this engine #{engine}"
    )]
    ForeignVar {
        /// The op that was refused.
        op: String,
        /// The var's id.
        var: u64,
        /// The engine that created it.
        owner: u64,
        /// The engine it was pushed to.
        engine: u64,
    },
    /// A blocking wait was called from inside an op (or delete function) of this engine; it would
    /// wait for itself.
    #[error("{call} called from inside op '{op}', which would wait for itself")]
    WaitInsideOp {
        /// `wait_for_var` or `wait_for_all`.
        call: &'static str,
        /// The op that was running.
        op: String,
    },
    /// An environment variable holds a value the engine cannot use.
    #[error("environment variable {var}={value:?} is not valid: expected {expected}")]
    Config {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// An op's declaration is not valid for this engine or this call.
    #[error("op '{op}' cannot be pushed: {reason}")]
    InvalidOp {
        /// The op that was refused.
        op: String,
        /// Why.
        reason: String,
    },
}

impl EngineError {
    /// The root failure, for errors that stand for a failed op.
    pub fn failure(&self) -> Option<&OpFailure> {
        match self {
            EngineError::OpFailed(f) => Some(f),
            _ => None,
        }
    }
}

/// Turns a panic payload into the message a user reads.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}
