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

/// One device's plan of the internal entries there.
pub(super) struct DevicePlan {
    dev: Context,
    problem: Problem,
    plan: Plan,
    buffer_of: Vec<Option<usize>>,
    report: MemoryReport,
}

/// Plans each device's internal entries (those not `external`; entries on other devices are
/// external to a device's problem; `kept` entries live to the end of a pass). `long_lived` gives
/// each device's bytes of arrays the bind allocates for good, which its block holds too.
pub(super) fn plan(
    full: &FullGraph,
    external: &[bool],
    kept: &[usize],
    long_lived: &[(Context, u64)],
    planning: MemoryPlanning,
) -> Result<Vec<DevicePlan>> {
    let (inf, n) = (&full.inferred, external.len());
    let mut devices: Vec<Context> = full.devices.clone();
    devices.sort();
    devices.dedup();
    let solver = match planning {
        MemoryPlanning::Arena(kind) => kind,
        MemoryPlanning::NoReuse => SolverKind::GreedyBySize,
    };
    let mut plans = Vec::with_capacity(devices.len());
    for dev in devices {
        let here = |e: usize| full.entry_device[e] == dev;
        let ext = (0..n).map(|e| external[e] || !here(e)).collect();
        let desc = GraphDesc::of(
            inf,
            ext,
            kept.iter().copied().filter(|&e| here(e)).collect(),
        );
        let gp = graph_problem(&desc)?;
        let plan = solve(&gp.problem, solver);
        verify(&gp.problem, &plan)
            .map_err(|e| invalid("bind", format!("the memory plan for {dev} is invalid: {e}")))?;
        let no_reuse_bytes = (0..n)
            .filter(|&e| !external[e] && here(e))
            .map(|e| desc.entry_bytes[e])
            .sum();
        let report = MemoryReport {
            no_reuse_bytes,
            planned_bytes: plan.arena,
            lower_bound_bytes: lower_bound(&gp.problem),
            allocated_bytes: match planning {
                MemoryPlanning::Arena(_) => plan.arena,
                MemoryPlanning::NoReuse => no_reuse_bytes,
            },
            long_lived_bytes: long_lived
                .iter()
                .find(|(c, _)| *c == dev)
                .map_or(0, |&(_, b)| b),
            entries: gp.entries,
            inplace: gp.inplace,
        };
        plans.push(DevicePlan {
            dev,
            problem: gp.problem,
            plan,
            buffer_of: gp.buffer_of,
            report,
        });
    }
    Ok(plans)
}

fn align(bytes: u64) -> u64 {
    bytes.div_ceil(64) * 64
}

/// One block per device, MindSpore's layout: the planned arena grows up from the bottom, and
/// the arrays a bind allocates for good (weights, auxiliary states, gradients) are taken from
/// the top down, so a device's executor costs one allocation from its pool. Without reuse,
/// every array is a block of its own instead.
pub(super) struct Blocks {
    /// Per device: the block and the top cursor (bytes from the start).
    blocks: Vec<(Context, NDArray, u64)>,
}

impl Blocks {
    /// Allocates each device's block: its arena plus its long-lived bytes.
    pub(super) fn new(
        rt: &Arc<Runtime>,
        plans: &[DevicePlan],
        planning: MemoryPlanning,
    ) -> Result<Blocks> {
        let mut blocks = vec![];
        if let MemoryPlanning::Arena(_) = planning {
            for p in plans {
                let total = align(p.plan.arena) + p.report.long_lived_bytes;
                let block = rt
                    .empty(&[total.max(1) as usize], DType::U8, p.dev)
                    .map_err(|e| invalid("bind", format!("memory for {}: {e}", p.dev)))?;
                blocks.push((p.dev, block, total));
            }
        }
        Ok(Blocks { blocks })
    }

    /// The bytes an array of `shape` and `dtype` takes from the top of a block.
    pub(super) fn bytes_of(shape: &[usize], dtype: DType) -> u64 {
        align((shape.iter().product::<usize>() * dtype.size()) as u64)
    }

    /// An array filled with `value`: from the top of `dev`'s block, or a block of its own.
    pub(super) fn long_lived(
        &mut self,
        rt: &Arc<Runtime>,
        shape: &[usize],
        dtype: DType,
        dev: Context,
        value: f64,
    ) -> Result<NDArray> {
        let Some((_, block, top)) = self.blocks.iter_mut().find(|(c, _, _)| *c == dev) else {
            return rt.full(shape, value, dtype, dev);
        };
        *top -= Blocks::bytes_of(shape, dtype);
        let a = block.region(*top as usize, shape, dtype)?;
        a.fill(value)?;
        Ok(a)
    }
}

/// Every entry's array, the arenas, and the memory figures per device.
pub(super) struct Allocated {
    pub(super) entries: Vec<NDArray>,
    pub(super) arenas: Vec<Arena>,
    pub(super) reports: Vec<(Context, MemoryReport)>,
}

/// Gives every entry its array: `bound` ones as they are, the rest from their device's arena
/// (or blocks of their own without reuse).
pub(super) fn allocate(
    rt: &Arc<Runtime>,
    full: &FullGraph,
    bound: Vec<Option<NDArray>>,
    plans: Vec<DevicePlan>,
    blocks: &Blocks,
) -> Result<Allocated> {
    let inf = &full.inferred;
    let mut entries = bound;
    let mut out = Allocated {
        entries: vec![],
        arenas: vec![],
        reports: vec![],
    };
    for p in plans {
        let block = blocks.blocks.iter().find(|(c, _, _)| *c == p.dev);
        let arena = match block {
            Some((_, block, _)) => Some(Arena::new(
                block,
                &p.problem,
                &p.plan,
                inf.graph.nodes.len(),
            )?),
            None => None,
        };
        for (e, slot) in entries.iter_mut().enumerate() {
            if slot.is_some() || full.entry_device[e] != p.dev {
                continue;
            }
            let (shape, dtype) = (&inf.shapes[e], inf.dtypes[e]);
            *slot = Some(match (&arena, p.buffer_of[e]) {
                (Some(arena), Some(b)) => arena.entry(b, shape, dtype)?,
                _ => rt.empty(shape, dtype, p.dev)?,
            });
        }
        out.reports.push((p.dev, p.report));
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
    /// The arena of `plan` for `problem` (steps are node indices) at the start of `block`.
    fn new(block: &NDArray, problem: &Problem, plan: &Plan, nodes: usize) -> Result<Arena> {
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
            buffers,
            starts_at,
            segments,
            occupant: Mutex::new(vec![usize::MAX; cuts.len().saturating_sub(1)]),
        })
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
