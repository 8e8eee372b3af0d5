//! What the storage layer reports.

use crate::Context;

/// Errors from storage managers, device back ends, configuration and traces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The request does not fit under the context's limit even after releasing every cached block.
    #[error(
        "out of memory on {ctx}: asked for {requested} bytes ({block} after rounding) with {in_use} \
         in use, {reserved} reserved ({cached} cached) and a limit of {limit} (after releasing the \
         cache and retrying once)"
    )]
    OutOfMemory {
        /// The device.
        ctx: Context,
        /// Bytes asked for.
        requested: usize,
        /// Bytes the manager would have taken for it.
        block: usize,
        /// Bytes in live blocks.
        in_use: usize,
        /// Bytes held from the device.
        reserved: usize,
        /// Reserved bytes not in use.
        cached: usize,
        /// The limit, or "the device's capacity".
        limit: String,
    },
    /// A request no device could satisfy (larger than the address space, say).
    #[error("cannot allocate {requested} bytes on {ctx}: {reason}")]
    TooLarge {
        /// The device.
        ctx: Context,
        /// Bytes asked for.
        requested: usize,
        /// Why.
        reason: String,
    },
    /// The device (or its driver) cannot be used in this build or on this machine.
    #[error("{ctx} is not available: {reason}")]
    Unavailable {
        /// The device.
        ctx: Context,
        /// Why.
        reason: String,
    },
    /// The device refused an operation for a reason other than exhaustion.
    #[error("{ctx}: {op} failed: {reason}")]
    Device {
        /// The device.
        ctx: Context,
        /// What was attempted.
        op: String,
        /// The device's own message.
        reason: String,
    },
    /// A configuration value (environment variable or builder input) that cannot be used.
    #[error("{what}={value:?} is not valid: expected {expected}")]
    Config {
        /// The variable or setting.
        what: String,
        /// Its value.
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// A malformed allocation trace.
    #[error("trace line {line}: {reason}")]
    Trace {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}
