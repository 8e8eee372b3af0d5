//! What the array layer reports.

use engine::EngineError;
use storage::StorageError;

/// Errors from array calls: a bad call is reported at the call; a failing kernel at wait.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NdError {
    /// Shapes that do not fit the op.
    #[error("{op}: {arg} has shape {found:?}, expected {expected}")]
    Shape {
        /// The op.
        op: String,
        /// Which argument.
        arg: String,
        /// Its shape.
        found: Vec<usize>,
        /// What the op needs.
        expected: String,
    },
    /// Element types that do not fit the op.
    #[error("{op}: {arg} has dtype {found}, expected {expected}")]
    DType {
        /// The op.
        op: String,
        /// Which argument.
        arg: String,
        /// Its dtype.
        found: String,
        /// What the op needs.
        expected: String,
    },
    /// Arrays on different devices, or of different runtimes, in one op.
    #[error("{op}: {arg} is on {found}, but the op runs on {expected}")]
    Context {
        /// The op.
        op: String,
        /// Which argument.
        arg: String,
        /// Where it is.
        found: String,
        /// Where the op runs.
        expected: String,
    },
    /// Anything else wrong with a call: arity, attributes, indices.
    #[error("{op}: {reason}")]
    Invalid {
        /// The op.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// No op of that name is registered.
    #[error("unknown op {0:?}")]
    UnknownOp(String),
    /// From the engine: a kernel failed (reported at wait) or a var was misused.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// From storage: out of memory, device unavailable.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// An op's output could not be allocated (out of memory, too large).
    #[error(transparent)]
    OutputMemory(Box<OutputMemoryError>),
}

/// An op's output that could not be allocated, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op}: output {output} ({shape:?}, {dtype}) cannot be allocated: {source}")]
pub struct OutputMemoryError {
    /// The op whose output it is.
    pub op: String,
    /// Which output.
    pub output: usize,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its element type's name.
    pub dtype: String,
    /// What storage said.
    pub source: StorageError,
}

/// Shorthand.
pub type Result<T, E = NdError> = std::result::Result<T, E>;

pub(crate) fn invalid(op: &str, reason: impl Into<String>) -> NdError {
    NdError::Invalid {
        op: op.to_string(),
        reason: reason.into(),
    }
}

/// An argument of the wrong shape: what `op` was given as `arg`, and what it expected.
pub(crate) fn shape_error(
    op: impl Into<String>,
    arg: impl Into<String>,
    found: impl AsRef<[usize]>,
    expected: impl Into<String>,
) -> NdError {
    NdError::Shape {
        op: op.into(),
        arg: arg.into(),
        found: found.as_ref().to_vec(),
        expected: expected.into(),
    }
}

/// The first few of `names`, quoted, for an error that lists what was expected: `'a', 'b'
/// and 3 more`.
pub(crate) fn some_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    const SHOWN: usize = 8;
    let names: Vec<&str> = names.into_iter().collect();
    let shown: Vec<String> = names.iter().take(SHOWN).map(|v| format!("'{v}'")).collect();
    match names.len() > shown.len() {
        true => format!(
            "{} and {} more",
            shown.join(", "),
            names.len() - shown.len()
        ),
        false => shown.join(", "),
    }
}
