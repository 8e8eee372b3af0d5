//! Static memory planning: place buffers with known sizes and lifetimes, in a fixed execution
//! order, so that no two buffers live at the same step share an address, in as little memory as
//! possible. The graph side (ndarray_ops) turns a bound graph into a [`Problem`]; here are the
//! solvers, the lower bound they are measured against, and the verifier every plan must pass.
//!
//! * [`lower_bound`]: the largest total of live bytes at any step — no plan can do better.
//! * [`verify`]: every buffer inside the arena and aligned, groups contiguous, and no two buffers
//!   that overlap in time overlap in address.
//! * Solvers ([`solve`], [`SolverKind`]): NNVM's block reuse (free list keyed by size, a match
//!   range, and the automatic search over ranges), greedy-by-size offsets (TFLite), a best-fit heap
//!   simulator, and a strong solver that tries several orders and improves the best.

pub mod mxnet;
mod solvers;

use serde::{Deserialize, Serialize};

pub use solvers::{solve, SolverKind};

/// One buffer: `size` bytes, alive from step `start` to step `end` inclusive (written at
/// `start`, last read at `end`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// Bytes.
    pub size: u64,
    /// First step it is live.
    pub start: u32,
    /// Last step it is live (at least `start`).
    pub end: u32,
    /// Required alignment of its offset (a power of two; 0 or 1 mean none).
    #[serde(default)]
    pub align: u64,
    /// A label for reports and drawings.
    #[serde(default)]
    pub name: String,
}

/// Buffers to place, and groups of buffers that must be contiguous, in the listed order (fused
/// gradient buffers for one collective op, say).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The buffers; a plan's offsets are in the same order.
    pub buffers: Vec<Buffer>,
    /// Each group's buffer indices, laid out back to back in this order.
    #[serde(default)]
    pub groups: Vec<Vec<usize>>,
}

/// Where every buffer goes in one arena.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Byte offset of each buffer.
    pub offsets: Vec<u64>,
    /// Arena size: the highest end of any buffer.
    pub arena: u64,
    /// The solver that made it.
    pub solver: String,
}

/// A plan that breaks the rules, or a problem that cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Buffer `a` and buffer `b` are live at the same step and share addresses.
    #[error("buffers {a} and {b} are both live at step {step} and overlap in [{lo}, {hi})")]
    Overlap {
        /// One buffer.
        a: usize,
        /// The other.
        b: usize,
        /// A step where both live.
        step: u32,
        /// The shared address range.
        lo: u64,
        /// Its end.
        hi: u64,
    },
    /// A buffer ends past the arena.
    #[error("buffer {buffer} ends at {end}, past the arena of {arena} bytes")]
    OutsideArena {
        /// The buffer.
        buffer: usize,
        /// Its end.
        end: u64,
        /// The arena.
        arena: u64,
    },
    /// A buffer's offset breaks its alignment.
    #[error("buffer {buffer} at offset {offset} is not aligned to {align}")]
    Misaligned {
        /// The buffer.
        buffer: usize,
        /// Its offset.
        offset: u64,
        /// Its alignment.
        align: u64,
    },
    /// A group is not laid out back to back.
    #[error("group {group}: buffer {buffer} is at {found}, expected {expected} (right after the previous member)")]
    GroupBroken {
        /// The group.
        group: usize,
        /// The misplaced member.
        buffer: usize,
        /// Its offset.
        found: u64,
        /// Where it belongs.
        expected: u64,
    },
    /// The problem itself is malformed.
    #[error("invalid problem: {0}")]
    Invalid(String),
}

impl Problem {
    /// Checks the problem: lifetimes ordered, alignments powers of two, groups valid.
    pub fn validate(&self) -> Result<(), PlanError> {
        for (i, b) in self.buffers.iter().enumerate() {
            if b.end < b.start {
                return Err(PlanError::Invalid(format!(
                    "buffer {i} ends (step {}) before it starts (step {})",
                    b.end, b.start
                )));
            }
            if b.align > 1 && !b.align.is_power_of_two() {
                return Err(PlanError::Invalid(format!(
                    "buffer {i} has alignment {}, not a power of two",
                    b.align
                )));
            }
        }
        let mut seen = vec![false; self.buffers.len()];
        for (g, members) in self.groups.iter().enumerate() {
            for &m in members {
                if m >= self.buffers.len() {
                    return Err(PlanError::Invalid(format!(
                        "group {g} names buffer {m}, but there are {}",
                        self.buffers.len()
                    )));
                }
                if std::mem::replace(&mut seen[m], true) {
                    return Err(PlanError::Invalid(format!(
                        "buffer {m} is in more than one group (or twice in group {g})"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The number of steps (one past the last `end`).
    pub fn steps(&self) -> u32 {
        self.buffers.iter().map(|b| b.end + 1).max().unwrap_or(0)
    }

    /// The sum of all sizes: what a plan without any reuse needs.
    pub fn total_bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.size).sum()
    }
}

/// A lower bound on every plan's arena: the largest total of live bytes at any step, counting
/// alignment. Every alignment is a multiple of g (the smallest one), so every offset is too, and
/// of the buffers live at one step each but the highest occupies at least its size rounded up
/// to g: the bound is the larger of the plain live total and the rounded total less g - 1.
pub fn lower_bound(p: &Problem) -> u64 {
    let g = p.buffers.iter().map(|b| b.align.max(1)).min().unwrap_or(1);
    let sizes: Vec<(u32, u32, u64)> = p.buffers.iter().map(|b| (b.start, b.end, b.size)).collect();
    live_bound(&sizes, g)
}

/// `lower_bound` over (start, end, size) triples with alignment granularity `g`.
pub(crate) fn live_bound(buffers: &[(u32, u32, u64)], g: u64) -> u64 {
    let steps = buffers.iter().map(|b| b.1 as usize + 1).max().unwrap_or(0);
    let mut plain = vec![0i128; steps + 1];
    let mut padded = vec![0i128; steps + 1];
    for &(start, end, size) in buffers {
        let rounded = size.div_ceil(g) * g;
        plain[start as usize] += i128::from(size);
        plain[end as usize + 1] -= i128::from(size);
        padded[start as usize] += i128::from(rounded);
        padded[end as usize + 1] -= i128::from(rounded);
    }
    let (mut a, mut b, mut peak) = (0i128, 0i128, 0i128);
    for (dp, dr) in plain.into_iter().zip(padded) {
        a += dp;
        b += dr;
        let at_step = if b > 0 {
            a.max(b - (i128::from(g) - 1))
        } else {
            a
        };
        peak = peak.max(at_step);
    }
    peak as u64
}

/// Checks `plan` against `p`: see [`PlanError`]. Runs in O(n log n): a sweep over steps keeps the
/// live buffers ordered by offset, and a new buffer only needs checking against its neighbours
/// there (live buffers never overlap each other, or an earlier check would have failed).
pub fn verify(p: &Problem, plan: &Plan) -> Result<(), PlanError> {
    p.validate()?;
    if plan.offsets.len() != p.buffers.len() {
        return Err(PlanError::Invalid(format!(
            "the plan places {} buffers, the problem has {}",
            plan.offsets.len(),
            p.buffers.len()
        )));
    }
    for (i, (b, &off)) in p.buffers.iter().zip(&plan.offsets).enumerate() {
        let end = off
            .checked_add(b.size)
            .ok_or_else(|| PlanError::Invalid(format!("buffer {i} overflows the address space")))?;
        if end > plan.arena {
            return Err(PlanError::OutsideArena {
                buffer: i,
                end,
                arena: plan.arena,
            });
        }
        if b.align > 1 && off % b.align != 0 {
            return Err(PlanError::Misaligned {
                buffer: i,
                offset: off,
                align: b.align,
            });
        }
    }
    for (g, members) in p.groups.iter().enumerate() {
        for w in members.windows(2) {
            let expected = plan.offsets[w[0]] + p.buffers[w[0]].size;
            if plan.offsets[w[1]] != expected {
                return Err(PlanError::GroupBroken {
                    group: g,
                    buffer: w[1],
                    found: plan.offsets[w[1]],
                    expected,
                });
            }
        }
    }
    let mut order: Vec<usize> = (0..p.buffers.len())
        .filter(|&i| p.buffers[i].size > 0)
        .collect();
    order.sort_by_key(|&i| p.buffers[i].start);
    let mut by_end: std::collections::BinaryHeap<std::cmp::Reverse<(u32, usize)>> =
        Default::default();
    let mut live: std::collections::BTreeMap<(u64, usize), u64> = Default::default();
    for &i in &order {
        let b = &p.buffers[i];
        while let Some(&std::cmp::Reverse((end, j))) = by_end.peek() {
            if end >= b.start {
                break;
            }
            by_end.pop();
            live.remove(&(plan.offsets[j], j));
        }
        let (lo, hi) = (plan.offsets[i], plan.offsets[i] + b.size);
        // Live ranges are disjoint, so the one starting last below `hi` is the only candidate.
        let clash = live.range(..(hi, 0)).next_back().filter(|(_, &e)| e > lo);
        if let Some((&(o, j), &e)) = clash {
            return Err(PlanError::Overlap {
                a: j,
                b: i,
                step: b.start,
                lo: lo.max(o),
                hi: hi.min(e),
            });
        }
        live.insert((lo, i), hi);
        by_end.push(std::cmp::Reverse((b.end, i)));
    }
    Ok(())
}
