//! The executor's planned memory: per device, a plan of the entries there, one arena block from
//! the storage pool, one region (with a var of its own) per planned buffer, and the engine
//! dependencies that make reuse safe.
//!
//! Two buffers may share addresses when the plan's order never has them live at once, but the
//! threaded engine does not run ops in that order: a node writing buffer B may start while an
//! earlier node, unordered with it in the graph, still reads buffer A at the same addresses. So
//! whenever a node first writes a buffer, its op also *writes* the vars of the buffers that last
//! occupied those addresses; a write waits for every earlier read and write of a var, so the node
//! waits for the previous occupants' writers and readers, and nothing more.
//!
//! "Last occupied" is tracked as pushes happen, not precomputed, because passes repeat in any
//! order (forward twice, forward without backward): the arena is cut into elementary segments at
//! every buffer boundary, and each segment remembers the buffer whose writer was pushed there last.
//! One previous occupant per segment is enough: its own writer already waited for the occupant
//! before it.

use std::sync::Arc;

use engine::Var;
use parking_lot::Mutex;
use storage::plan::{lower_bound, solve, verify, Plan, Problem, SolverKind};
use storage::Context;

use super::bind::FullGraph;
use super::{MemoryPlanning, MemoryReport};
use crate::error::{invalid, Result};
use crate::plan::{graph_problem, GraphDesc};
use crate::{DType, NDArray, Runtime};

/// Every entry's array, the arenas, and the memory figures per device.
pub(super) struct Allocated {
    pub(super) entries: Vec<NDArray>,
    pub(super) arenas: Vec<Arena>,
    pub(super) reports: Vec<(Context, MemoryReport)>,
}

/// Plans and allocates the entries not `bound`, one device at a time (entries elsewhere are
/// external to a device's problem; `kept` entries live to the end of a pass).
pub(super) fn allocate(
    rt: &Arc<Runtime>,
    full: &FullGraph,
    bound: &[Option<NDArray>],
    kept: &[usize],
    planning: MemoryPlanning,
) -> Result<Allocated> {
    let (inf, n) = (&full.inferred, bound.len());
    let mut devices: Vec<Context> = full.devices.clone();
    devices.sort_by_key(|c| c.to_string());
    devices.dedup();
    let solver = match planning {
        MemoryPlanning::Arena(kind) => kind,
        MemoryPlanning::NoReuse => SolverKind::GreedyBySize,
    };
    let mut entries: Vec<Option<NDArray>> = bound.to_vec();
    let mut out = Allocated {
        entries: vec![],
        arenas: vec![],
        reports: vec![],
    };
    for dev in devices {
        let here = |e: usize| full.entry_device[e] == dev;
        let external = (0..n).map(|e| bound[e].is_some() || !here(e)).collect();
        let desc = GraphDesc::of(
            inf,
            external,
            kept.iter().copied().filter(|&e| here(e)).collect(),
        );
        let gp = graph_problem(&desc)?;
        let mine: Vec<usize> = (0..n).filter(|&e| bound[e].is_none() && here(e)).collect();
        let no_reuse_bytes = mine.iter().map(|&e| desc.entry_bytes[e]).sum();
        let plan = solve(&gp.problem, solver);
        verify(&gp.problem, &plan)
            .map_err(|e| invalid("bind", format!("the memory plan for {dev} is invalid: {e}")))?;
        let arena = match planning {
            MemoryPlanning::Arena(_) => Some(
                Arena::new(rt, dev, &gp.problem, &plan, inf.graph.nodes.len())
                    .map_err(|e| invalid("bind", format!("memory for {dev}: {e}")))?,
            ),
            MemoryPlanning::NoReuse => None,
        };
        for &e in &mine {
            let (shape, dtype) = (&inf.shapes[e], inf.dtypes[e]);
            entries[e] = Some(match (&arena, gp.buffer_of[e]) {
                (Some(arena), Some(b)) => arena.entry(b, shape, dtype)?,
                _ => rt.empty(shape, dtype, dev)?,
            });
        }
        out.reports.push((
            dev,
            MemoryReport {
                no_reuse_bytes,
                planned_bytes: plan.arena,
                lower_bound_bytes: lower_bound(&gp.problem),
                allocated_bytes: arena.as_ref().map_or(no_reuse_bytes, Arena::bytes),
                entries: gp.entries,
                inplace: gp.inplace,
            },
        ));
        out.arenas.extend(arena);
    }
    out.entries = entries
        .into_iter()
        .enumerate()
        .map(|(e, a)| a.ok_or_else(|| invalid("bind", format!("entry {e} got no array"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(out)
}

/// A bound graph's internal buffers placed in one arena.
pub(crate) struct Arena {
    bytes: u64,
    /// One byte region per planned buffer.
    buffers: Vec<NDArray>,
    /// Per node, the buffers it writes first.
    starts_at: Vec<Vec<usize>>,
    /// Per buffer, the elementary segments it covers.
    segments: Vec<std::ops::Range<usize>>,
    /// Per segment, the buffer whose writer was pushed there last (`usize::MAX`: none yet).
    occupant: Mutex<Vec<usize>>,
}

impl Arena {
    /// Allocates the arena of `plan` for `problem` (steps are node indices) on `ctx`.
    pub(crate) fn new(
        rt: &Arc<Runtime>,
        ctx: Context,
        problem: &Problem,
        plan: &Plan,
        nodes: usize,
    ) -> Result<Arena> {
        let block = rt.empty(&[plan.arena.max(1) as usize], DType::U8, ctx)?;
        let mut cuts: Vec<u64> = problem
            .buffers
            .iter()
            .zip(&plan.offsets)
            .flat_map(|(b, &off)| [off, off + b.size])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let seg = |x: u64| cuts.partition_point(|&c| c < x);
        let mut buffers = Vec::with_capacity(problem.buffers.len());
        let mut segments = Vec::with_capacity(problem.buffers.len());
        let mut starts_at = vec![vec![]; nodes];
        for (i, (b, &off)) in problem.buffers.iter().zip(&plan.offsets).enumerate() {
            buffers.push(block.region(off as usize, &[b.size as usize], DType::U8)?);
            segments.push(seg(off)..seg(off + b.size));
            if let Some(s) = starts_at.get_mut(b.start as usize) {
                s.push(i);
            }
        }
        Ok(Arena {
            bytes: plan.arena,
            buffers,
            starts_at,
            segments,
            occupant: Mutex::new(vec![usize::MAX; cuts.len().saturating_sub(1)]),
        })
    }

    /// Bytes of the arena block.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Buffer `b` read as `shape` and `dtype`.
    pub(crate) fn entry(&self, b: usize, shape: &[usize], dtype: DType) -> Result<NDArray> {
        self.buffers[b].retyped(shape, dtype)
    }

    /// Holds the occupancy for one pass: call [`Pass::reuse_deps`] for each node in push order.
    pub(crate) fn pass(&self) -> Pass<'_> {
        Pass {
            arena: self,
            occupant: self.occupant.lock(),
        }
    }
}

/// One pass's pushes over an arena (holding its occupancy, so passes pushed from several
/// threads do not interleave their bookkeeping).
pub(crate) struct Pass<'a> {
    arena: &'a Arena,
    occupant: parking_lot::MutexGuard<'a, Vec<usize>>,
}

impl Pass<'_> {
    /// The vars node `node` must also write before its first write of its buffers: the previous
    /// occupants of their addresses. Records the node's buffers as the new occupants.
    pub(crate) fn reuse_deps(&mut self, node: usize) -> Vec<Var> {
        let a = self.arena;
        let mut deps: Vec<usize> = vec![];
        for &b in a.starts_at.get(node).map_or(&[][..], |v| v) {
            for s in a.segments[b].clone() {
                let prev = std::mem::replace(&mut self.occupant[s], b);
                if prev != usize::MAX && prev != b && !deps.contains(&prev) {
                    deps.push(prev);
                }
            }
        }
        deps.iter().map(|&b| a.buffers[b].var().clone()).collect()
    }
}
