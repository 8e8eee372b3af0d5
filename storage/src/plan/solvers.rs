//! The solvers. Each works on *units*: a buffer, or a contiguous group laid out as one block.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Plan, Problem};

/// Which solver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolverKind {
    /// NNVM's block reuse with this match range (0 turns reuse off).
    NnvmBlocks(u64),
    /// NNVM's block reuse, the best of match ranges 1, 2, 4, ..., 32 (MXNet's automatic search).
    NnvmAuto,
    /// Offsets by decreasing size, each in the best gap among the buffers it overlaps in time.
    GreedyBySize,
    /// A heap allocator replayed in step order: best fit among free ranges, coalescing.
    BestFitHeap,
    /// Several orders and heuristics, then local improvement, within a time budget; keeps the best.
    Strong(Duration),
}

impl SolverKind {
    /// The name used in reports.
    pub fn name(self) -> String {
        match self {
            SolverKind::NnvmBlocks(r) => format!("nnvm_blocks(match_range={r})"),
            SolverKind::NnvmAuto => "nnvm_auto".into(),
            SolverKind::GreedyBySize => "greedy_by_size".into(),
            SolverKind::BestFitHeap => "best_fit_heap".into(),
            SolverKind::Strong(_) => "strong".into(),
        }
    }
}

#[derive(Clone, Debug)]
struct Unit {
    size: u64,
    start: u32,
    end: u32,
    align: u64,
    /// Members and their offsets inside the unit.
    members: Vec<(usize, u64)>,
}

fn align_up(x: u64, a: u64) -> u64 {
    if a <= 1 {
        x
    } else {
        x.div_ceil(a) * a
    }
}

fn units(p: &Problem) -> Vec<Unit> {
    let mut grouped = vec![false; p.buffers.len()];
    let mut out = Vec::new();
    for g in &p.groups {
        if g.is_empty() {
            continue;
        }
        let mut rel = 0;
        let mut members = Vec::new();
        for &m in g {
            grouped[m] = true;
            members.push((m, rel));
            rel += p.buffers[m].size;
        }
        out.push(Unit {
            size: rel,
            start: g.iter().map(|&m| p.buffers[m].start).min().unwrap_or(0),
            end: g.iter().map(|&m| p.buffers[m].end).max().unwrap_or(0),
            align: g.iter().map(|&m| p.buffers[m].align).max().unwrap_or(1),
            members,
        });
    }
    for (i, b) in p.buffers.iter().enumerate() {
        if !grouped[i] {
            out.push(Unit {
                size: b.size,
                start: b.start,
                end: b.end,
                align: b.align.max(1),
                members: vec![(i, 0)],
            });
        }
    }
    out
}

fn expand(p: &Problem, us: &[Unit], unit_offsets: &[u64], solver: String) -> Plan {
    let mut offsets = vec![0; p.buffers.len()];
    let mut arena = 0;
    for (u, &off) in us.iter().zip(unit_offsets) {
        for &(m, rel) in &u.members {
            offsets[m] = off + rel;
        }
        arena = arena.max(off + u.size);
    }
    Plan {
        offsets,
        arena,
        solver,
    }
}

/// Solves `p` with `kind`.
pub fn solve(p: &Problem, kind: SolverKind) -> Plan {
    let us = units(p);
    let offsets = match kind {
        SolverKind::NnvmBlocks(r) => nnvm_blocks(&us, r),
        SolverKind::NnvmAuto => best_nnvm(&us).1,
        SolverKind::GreedyBySize => greedy(
            &us,
            &order_by(&us, |u| (u.size, u64::from(u.end - u.start))),
        ),
        SolverKind::BestFitHeap => best_fit_heap(&us),
        SolverKind::Strong(budget) => strong(&us, budget),
    };
    expand(p, &us, &offsets, kind.name())
}

fn arena_of(us: &[Unit], offsets: &[u64]) -> u64 {
    us.iter()
        .zip(offsets)
        .map(|(u, o)| o + u.size)
        .max()
        .unwrap_or(0)
}

fn best_nnvm(us: &[Unit]) -> (u64, Vec<u64>) {
    [1u64, 2, 4, 8, 16, 32]
        .iter()
        .map(|&r| {
            let o = nnvm_blocks(us, r);
            (arena_of(us, &o), o)
        })
        .min_by_key(|(a, _)| *a)
        .expect("several ranges tried")
}

/// NNVM's `PlanMemory` storage allocator: in step order, each new unit takes a free block from
/// `[size / range, size * range]` — the smallest at least as large, else the largest smaller
/// one, grown — or a new block; a unit's block is freed after its last step. Blocks are then laid
/// out one after another.
fn nnvm_blocks(us: &[Unit], range: u64) -> Vec<u64> {
    let steps = us.iter().map(|u| u.end as usize + 1).max().unwrap_or(0);
    let mut starting: Vec<Vec<usize>> = vec![Vec::new(); steps];
    let mut ending: Vec<Vec<usize>> = vec![Vec::new(); steps];
    for (i, u) in us.iter().enumerate() {
        starting[u.start as usize].push(i);
        ending[u.end as usize].push(i);
    }
    let mut block_size: Vec<u64> = Vec::new();
    let mut block_align: Vec<u64> = Vec::new();
    let mut block_of = vec![0usize; us.len()];
    let mut free: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let take = |free: &mut BTreeMap<u64, Vec<usize>>, size: u64| -> Option<usize> {
        let v = free.get_mut(&size)?;
        let b = v.pop();
        if v.is_empty() {
            free.remove(&size);
        }
        b
    };
    for t in 0..steps {
        for &i in &starting[t] {
            let size = us[i].size;
            // A match range of 0 turns reuse off.
            let found = size.checked_div(range).and_then(|lo| {
                let hi = size.saturating_mul(range);
                let bigger = free.range(size..=hi).next().map(|(&s, _)| s);
                let smaller = free.range(lo..size).next_back().map(|(&s, _)| s);
                bigger.or(smaller).and_then(|s| take(&mut free, s))
            });
            let b = found.unwrap_or_else(|| {
                block_size.push(0);
                block_align.push(1);
                block_size.len() - 1
            });
            block_size[b] = block_size[b].max(size);
            block_align[b] = block_align[b].max(us[i].align);
            block_of[i] = b;
        }
        for &i in &ending[t] {
            let b = block_of[i];
            free.entry(block_size[b]).or_default().push(b);
        }
    }
    let mut base = vec![0u64; block_size.len()];
    let mut at = 0;
    for b in 0..block_size.len() {
        at = align_up(at, block_align[b]);
        base[b] = at;
        at += block_size[b];
    }
    block_of.iter().map(|&b| base[b]).collect()
}

/// Unit indices sorted by `key`, largest first (ties: earlier start, then index).
fn order_by<K: Ord>(us: &[Unit], key: impl Fn(&Unit) -> K) -> Vec<usize> {
    let mut order: Vec<usize> = (0..us.len()).collect();
    order.sort_by(|&a, &b| {
        key(&us[b])
            .cmp(&key(&us[a]))
            .then(us[a].start.cmp(&us[b].start))
            .then(a.cmp(&b))
    });
    order
}

fn overlaps(a: &Unit, b: &Unit) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// The lowest offset in the best (smallest sufficient) gap among `taken` ranges, or above them.
fn best_gap(taken: &mut [(u64, u64)], size: u64, align: u64) -> u64 {
    taken.sort_unstable();
    let (mut best, mut best_len) = (None, u64::MAX);
    let mut cursor = 0u64;
    for &(lo, hi) in taken.iter() {
        let start = align_up(cursor, align);
        if lo > start && lo - start >= size && lo - start < best_len {
            best = Some(start);
            best_len = lo - start;
        }
        cursor = cursor.max(hi);
    }
    best.unwrap_or_else(|| align_up(cursor, align))
}

/// Placed units, found by time: a unit of short lifetime (at most `span` steps) sits in the bucket
/// of its start step, so the ones meeting `[s, e]` started in `[s - span, e]`; the few long-lived
/// units (above the 95th percentile of lifetimes) are checked one by one. Chain-like graphs then
/// place in near-linear time instead of comparing every pair of units.
struct TimeIndex {
    span: u32,
    width: u32,
    buckets: Vec<Vec<usize>>,
    long: Vec<usize>,
}

impl TimeIndex {
    fn new(us: &[Unit]) -> TimeIndex {
        let mut spans: Vec<u32> = us.iter().map(|u| u.end - u.start).collect();
        spans.sort_unstable();
        let span = spans.get(spans.len() * 95 / 100).copied().unwrap_or(0);
        let steps = us.iter().map(|u| u.end + 1).max().unwrap_or(1);
        let width = span.max(1);
        TimeIndex {
            span,
            width,
            buckets: vec![Vec::new(); (steps / width + 1) as usize],
            long: Vec::new(),
        }
    }

    fn insert(&mut self, us: &[Unit], i: usize) {
        if us[i].end - us[i].start > self.span {
            self.long.push(i);
        } else {
            self.buckets[(us[i].start / self.width) as usize].push(i);
        }
    }

    /// Calls `f` with every inserted unit that overlaps unit `i` in time.
    fn meeting(&self, us: &[Unit], i: usize, mut f: impl FnMut(usize)) {
        let u = &us[i];
        let lo = (u.start.saturating_sub(self.span) / self.width) as usize;
        let hi = ((u.end / self.width) as usize).min(self.buckets.len() - 1);
        for bucket in &self.buckets[lo..=hi] {
            for &j in bucket {
                if overlaps(u, &us[j]) {
                    f(j);
                }
            }
        }
        for &j in &self.long {
            if overlaps(u, &us[j]) {
                f(j);
            }
        }
    }
}

/// Places units in `order`, each at the best gap among already placed units it meets in time.
fn greedy(us: &[Unit], order: &[usize]) -> Vec<u64> {
    let mut offsets = vec![0u64; us.len()];
    let mut placed = TimeIndex::new(us);
    let mut taken: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        taken.clear();
        placed.meeting(us, i, |j| {
            if us[j].size > 0 {
                taken.push((offsets[j], offsets[j] + us[j].size));
            }
        });
        offsets[i] = if us[i].size == 0 {
            0
        } else {
            best_gap(&mut taken, us[i].size, us[i].align)
        };
        placed.insert(us, i);
    }
    offsets
}

/// Replays the steps with a heap allocator: free ranges coalesce; a new unit takes the best fit,
/// else grows the top.
fn best_fit_heap(us: &[Unit]) -> Vec<u64> {
    let steps = us.iter().map(|u| u.end as usize + 1).max().unwrap_or(0);
    let mut starting: Vec<Vec<usize>> = vec![Vec::new(); steps];
    let mut ending: Vec<Vec<usize>> = vec![Vec::new(); steps];
    for (i, u) in us.iter().enumerate() {
        starting[u.start as usize].push(i);
        ending[u.end as usize].push(i);
    }
    let mut offsets = vec![0u64; us.len()];
    let mut free: BTreeMap<u64, u64> = BTreeMap::new(); // start -> end
    let mut top = 0u64;
    for t in 0..steps {
        let mut new = starting[t].clone();
        new.sort_by_key(|&i| std::cmp::Reverse(us[i].size));
        for i in new {
            let (size, align) = (us[i].size, us[i].align);
            if size == 0 {
                continue;
            }
            let fit = free
                .iter()
                .filter_map(|(&lo, &hi)| {
                    let s = align_up(lo, align);
                    (s + size <= hi).then_some((hi - lo, lo, s))
                })
                .min();
            let off = match fit {
                Some((_, lo, s)) => {
                    let hi = free.remove(&lo).expect("range exists");
                    if s > lo {
                        free.insert(lo, s);
                    }
                    if s + size < hi {
                        free.insert(s + size, hi);
                    }
                    s
                }
                None => {
                    // Grow from the top, absorbing a free range that reaches it.
                    let base = match free.iter().next_back() {
                        Some((&lo, &hi)) if hi == top && align_up(lo, align) < top => {
                            free.remove(&lo);
                            let s = align_up(lo, align);
                            if s > lo {
                                free.insert(lo, s);
                            }
                            s
                        }
                        _ => align_up(top, align),
                    };
                    if base > top {
                        free.insert(top, base);
                    }
                    top = top.max(base + size);
                    base
                }
            };
            offsets[i] = off;
        }
        for &i in &ending[t] {
            let (mut lo, mut hi) = (offsets[i], offsets[i] + us[i].size);
            if hi == lo {
                continue;
            }
            if let Some((&plo, &phi)) = free.range(..lo).next_back() {
                if phi == lo {
                    free.remove(&plo);
                    lo = plo;
                }
            }
            if let Some(&nhi) = free.get(&hi) {
                free.remove(&hi);
                hi = nhi;
            }
            free.insert(lo, hi);
        }
    }
    offsets
}

/// The lower bound over units (see [`super::lower_bound`]).
fn unit_lower_bound(us: &[Unit]) -> u64 {
    let g = us.iter().map(|u| u.align.max(1)).min().unwrap_or(1);
    let triples: Vec<(u32, u32, u64)> = us.iter().map(|u| (u.start, u.end, u.size)).collect();
    super::live_bound(&triples, g)
}

/// A small deterministic generator for the improvement phase.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// How many pairs of units meet in time (each pair once): about what one greedy placement costs.
fn meeting_pairs(us: &[Unit]) -> u64 {
    let mut starts: Vec<u32> = us.iter().map(|u| u.start).collect();
    let mut ends: Vec<u32> = us.iter().map(|u| u.end).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    // The k-th unit to start meets every earlier-started unit that has not ended before it.
    starts
        .iter()
        .enumerate()
        .map(|(k, &s)| (k - ends.partition_point(|&e| e < s).min(k)) as u64)
        .sum()
}

/// Tries greedy placement under several orders, the heap simulator and NNVM's search; then,
/// until the budget is spent (or 400 rounds pass), perturbs the best order — moving a unit that
/// touches the top of the arena earlier — and keeps any improvement. Stops as soon as a plan
/// comes within 0.001% of the lower bound. Greedy placement costs about one step per pair of units that meet in
/// time; where that would not fit the budget (the long-lived activations of very large training
/// graphs), the near-linear heap simulator and NNVM's search go first and greedy runs only while
/// its estimated cost still fits, so the strong solver is never worse than greedy-by-size within
/// its budget, and never much slower than the budget.
fn strong(us: &[Unit], budget: Duration) -> Vec<u64> {
    let t0 = Instant::now();
    // Within 0.001% of the lower bound no search pays for itself (ResNet-50's training graph at
    // batch 1: 32 bytes above the bound after 5 ms, at it after 100 ms).
    let bound = unit_lower_bound(us);
    let bound = bound + bound / 100_000;
    let greedy_cost = Duration::from_nanos(meeting_pairs(us).saturating_mul(8));
    let greedy_fits = || t0.elapsed() + greedy_cost <= budget;
    let dur = |u: &Unit| u64::from(u.end - u.start + 1);
    let orders: Vec<Vec<usize>> = vec![
        order_by(us, |u| (u.size, dur(u))),
        order_by(us, |u| (u.size.saturating_mul(dur(u)), u.size)),
        order_by(us, |u| (dur(u), u.size)),
        order_by(us, |u| (std::cmp::Reverse(u.start), u.size)),
        order_by(us, |u| (u.end, u.size)),
    ];
    let mut best: Option<(u64, Vec<u64>)> = None;
    let mut best_order: Option<Vec<usize>> = None;
    let mut consider = |cand: Vec<u64>, order: Option<&Vec<usize>>| {
        let a = arena_of(us, &cand);
        if best.as_ref().is_none_or(|(b, _)| a < *b) {
            best = Some((a, cand));
            if let Some(o) = order {
                best_order = Some(o.clone());
            }
        }
        a <= bound
    };
    let cheap_first = !greedy_fits();
    if cheap_first && (consider(best_fit_heap(us), None) || consider(best_nnvm(us).1, None)) {
        return best.map(|b| b.1).unwrap_or_default();
    }
    for o in &orders {
        if (!cheap_first || greedy_fits()) && consider(greedy(us, o), Some(o)) {
            return best.map(|b| b.1).unwrap_or_default();
        }
    }
    if !cheap_first && (consider(best_fit_heap(us), None) || consider(best_nnvm(us).1, None)) {
        return best.map(|b| b.1).unwrap_or_default();
    }
    let (mut best_arena, mut best) = best.unwrap_or_default();
    let Some(mut best_order) = best_order else {
        return best;
    };
    let mut rng = Xorshift(0x2545_F491_4F6C_DD1D);
    let mut rounds = 0;
    // Small problems are cheap to search much longer.
    let max_rounds = if us.len() <= 64 { 20_000 } else { 400 };
    let mut greedy_best = greedy(us, &best_order);
    while best_arena > bound
        && t0.elapsed() + greedy_cost < budget
        && rounds < max_rounds
        && us.len() > 1
    {
        rounds += 1;
        let mut order = best_order.clone();
        // Units touching the top of the best greedy plan are what to move earlier.
        let top = arena_of(us, &greedy_best);
        let tops: Vec<usize> = (0..order.len())
            .filter(|&k| greedy_best[order[k]] + us[order[k]].size == top)
            .collect();
        let k = if tops.is_empty() {
            rng.below(order.len())
        } else {
            tops[rng.below(tops.len())]
        };
        let to = rng.below(k + 1);
        let unit = order.remove(k);
        order.insert(to, unit);
        let cand = greedy(us, &order);
        let a = arena_of(us, &cand);
        if a <= best_arena {
            if a < best_arena {
                best = cand.clone();
                best_arena = a;
            }
            best_order = order;
            greedy_best = cand;
        }
    }
    best
}
