//! The tape: what autograd records as arrays are made, kept with the arrays (as MXNet's NDArray
//! carries its autograd entry). Each thread has a mode (recording or not, training or not); while
//! it records, an op whose input is recorded joins the graph ([`record_op`]), and a recorded array
//! refuses in-place writes ([`check_write`]). Differentiating the graph is `autograd`'s, above.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::NDArray;
use crate::error::{invalid, Result};
use crate::ops::{lookup, Attrs, GradReq, Node, NodeEntry, IS_TRAIN};
use crate::symbol::Symbol;

thread_local! {
    /// Whether this thread records, and whether its ops run in training mode.
    static MODE: Cell<Mode> = const { Cell::new(Mode { recording: false, training: false }) };
}

/// A thread's autograd state: MXNet keeps the two flags apart, so that `train_mode()` without
/// recording runs Dropout and BatchNorm as in training, and `record(train_mode=False)` records
/// inference behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mode {
    pub(crate) recording: bool,
    pub(crate) training: bool,
}

/// Whether this thread is recording.
#[inline]
pub fn is_recording() -> bool {
    MODE.with(Cell::get).recording
}

/// Whether this thread's ops run in training mode.
pub fn is_training() -> bool {
    MODE.with(Cell::get).training
}

/// Turns recording on or off for this thread until changed again, returning the previous
/// setting (MXNet's `set_recording`; bindings pair the calls as scopes).
pub fn set_recording(on: bool) -> bool {
    MODE.with(|m| {
        let was = m.get();
        m.set(Mode {
            recording: on,
            ..was
        });
        was.recording
    })
}

/// Turns training mode on or off for this thread until changed again, returning the previous
/// setting (MXNet's `set_training`).
pub fn set_training(on: bool) -> bool {
    MODE.with(|m| {
        let was = m.get();
        m.set(Mode {
            training: on,
            ..was
        });
        was.training
    })
}

pub(crate) fn scoped<R>(mode: Mode, f: impl FnOnce() -> R) -> R {
    struct Restore(Mode);
    impl Drop for Restore {
        fn drop(&mut self) {
            MODE.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(MODE.with(|m| m.replace(mode)));
    f()
}

/// What a recorded array is in the graph: output `index` of a recorded op, or a leaf.
pub(crate) struct Entry {
    pub(crate) source: Source,
    pub(crate) index: usize,
}

pub(crate) enum Source {
    Leaf(Arc<Leaf>),
    Op(Arc<Record>),
}

/// An array with a gradient attached, or an unrecorded array a recorded op read (a constant).
pub(crate) struct Leaf {
    pub(crate) node: Arc<Node>,
    pub(crate) value: NDArray,
    pub(crate) grad: Option<(NDArray, GradReq)>,
}

/// One recorded op: its node, what it read and what it made (arrays without entries, so that
/// nothing refers back to itself).
pub(crate) struct Record {
    pub(crate) node: Arc<Node>,
    pub(crate) inputs: Vec<Arc<Entry>>,
    pub(crate) outputs: Vec<NDArray>,
}

impl Drop for Record {
    /// Releases a chain of records one link at a time: a recorded loop of a million ops would
    /// otherwise drop recursively and overflow the stack (its nodes' chain unwinds the same way:
    /// see `Node`'s drop).
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.inputs);
        while let Some(entry) = stack.pop() {
            let Ok(entry) = Arc::try_unwrap(entry) else {
                continue;
            };
            if let Source::Op(record) = entry.source {
                if let Ok(mut record) = Arc::try_unwrap(record) {
                    stack.append(&mut record.inputs);
                }
            }
        }
    }
}

impl Entry {
    pub(crate) fn node(&self) -> &Arc<Node> {
        match &self.source {
            Source::Leaf(leaf) => &leaf.node,
            Source::Op(record) => &record.node,
        }
    }

    pub(crate) fn node_entry(&self) -> NodeEntry {
        NodeEntry {
            node: self.node().clone(),
            index: self.index,
            version: 0,
        }
    }
}

/// A name no other recorded node has (the gradient pass finds variables by name, and names
/// head gradients after their nodes).
fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

pub(crate) fn leaf(value: &NDArray, grad: Option<(NDArray, GradReq)>) -> Arc<Entry> {
    let prefix = match grad {
        Some(_) => "autograd_var",
        None => "autograd_const",
    };
    let node = Symbol::var(&unique_name(prefix)).outputs()[0].node.clone();
    Arc::new(Entry {
        source: Source::Leaf(Arc::new(Leaf {
            node,
            value: value.detach(),
            grad,
        })),
        index: 0,
    })
}

/// The training mode, when this thread records; `Err` with the training mode when it does not.
#[inline]
pub(crate) fn mode() -> std::result::Result<bool, bool> {
    let m = MODE.with(Cell::get);
    match m.recording {
        true => Ok(m.training),
        false => Err(m.training),
    }
}

/// Refuses an in-place write of `dst` by `op` while recording, when `dst` is recorded.
#[inline]
pub(crate) fn check_write(op: &str, dst: &NDArray) -> Result<()> {
    match is_recording() && dst.entry().is_some() {
        true => Err(invalid(
            op,
            "writes in place into an array autograd recorded (or one with a gradient attached) \
             while recording; the graph holds its value, so write the result into a new array",
        )),
        false => Ok(()),
    }
}

/// The attributes an op runs with in `train` mode (recording or not): training behaviour unless
/// the caller chose one.
pub(crate) fn recorded_attrs(attrs: &Attrs, train: bool) -> Attrs {
    match (train, attrs.get(IS_TRAIN)) {
        (true, None) => attrs.clone().with(IS_TRAIN, true),
        _ => attrs.clone(),
    }
}

/// Records op `name` (run with `attrs`) as having read `inputs` and made `outputs`, when one of
/// the inputs is recorded; returns the outputs, recorded or not.
pub(crate) fn record_op(
    name: &str,
    attrs: Attrs,
    inputs: &[&NDArray],
    mut outputs: Vec<NDArray>,
) -> Result<Vec<NDArray>> {
    if inputs.iter().all(|a| a.entry().is_none()) {
        return Ok(outputs);
    }
    let def = lookup(name)?;
    let entries: Vec<Arc<Entry>> = inputs
        .iter()
        .map(|a| a.entry().cloned().unwrap_or_else(|| leaf(a, None)))
        .collect();
    let node = Node::new(
        def,
        &unique_name(def.name),
        attrs,
        entries.iter().map(|e| e.node_entry()).collect(),
    )?;
    if node.num_outputs() != outputs.len() {
        return Err(invalid(
            def.name,
            format!(
                "made {} outputs; its node has {} (cannot record it)",
                outputs.len(),
                node.num_outputs()
            ),
        ));
    }
    let record = Arc::new(Record {
        node,
        inputs: entries,
        outputs: outputs.iter().map(NDArray::detach).collect(),
    });
    for (index, out) in outputs.iter_mut().enumerate() {
        let source = Source::Op(record.clone());
        out.set_entry(Some(Arc::new(Entry { source, index })));
    }
    Ok(outputs)
}

/// Records a view (`Reshape`, `slice_axis`, a copy) of `input` as op `name` with the attributes
/// `attrs` makes, when recording and `input` is recorded; otherwise returns the view outside
/// the graph (and makes no attributes: views are taken on hot paths).
pub(crate) fn record_view(
    name: &str,
    attrs: impl FnOnce() -> Attrs,
    input: &NDArray,
    view: NDArray,
) -> Result<NDArray> {
    if !is_recording() || input.entry().is_none() {
        return Ok(view);
    }
    Ok(record_op(name, attrs(), &[input], vec![view])?.remove(0))
}
