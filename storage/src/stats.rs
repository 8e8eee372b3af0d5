//! What a manager reports about the memory it holds.

use serde::Serialize;

/// Counters of one manager. "In use" counts the bytes of live blocks (after rounding);
/// "requested" the bytes callers asked for; "reserved" the bytes held from the device, in use or
/// cached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Bytes in live blocks.
    pub in_use: usize,
    /// Highest `in_use` since creation or `reset_peak`.
    pub peak_in_use: usize,
    /// Bytes callers asked for, over live blocks.
    pub requested: usize,
    /// Highest `requested` since creation or `reset_peak`.
    pub peak_requested: usize,
    /// Bytes held from the device.
    pub reserved: usize,
    /// Highest `reserved` since creation or `reset_peak`.
    pub peak_reserved: usize,
    /// Successful allocations.
    pub allocs: u64,
    /// Blocks given back (pooled or direct).
    pub frees: u64,
    /// Allocations served from the cache, without the device.
    pub cache_hits: u64,
    /// Allocations made from the device.
    pub device_allocs: u64,
    /// Blocks returned to the device.
    pub device_frees: u64,
    /// Largest single request.
    pub largest_request: usize,
    /// Times the cache was released to retry a request that did not fit.
    pub oom_retries: u64,
    /// Requests refused as out of memory.
    pub ooms: u64,
    /// The byte limit, if one is set.
    pub limit: Option<usize>,
}

impl Stats {
    /// Reserved bytes not in use (cached blocks and unused parts of regions).
    pub fn cached(&self) -> usize {
        self.reserved - self.in_use
    }

    /// Peak reserved over peak requested: 1.0 means no memory was wasted at the peak.
    pub fn fragmentation(&self) -> f64 {
        if self.peak_requested == 0 {
            1.0
        } else {
            self.peak_reserved as f64 / self.peak_requested as f64
        }
    }

    pub(crate) fn on_alloc(&mut self, requested: usize, block: usize, hit: bool) {
        self.allocs += 1;
        self.cache_hits += u64::from(hit);
        self.in_use += block;
        self.requested += requested;
        self.largest_request = self.largest_request.max(requested);
        self.peak_in_use = self.peak_in_use.max(self.in_use);
        self.peak_requested = self.peak_requested.max(self.requested);
    }

    pub(crate) fn on_free(&mut self, requested: usize, block: usize) {
        self.frees += 1;
        self.in_use -= block;
        self.requested -= requested;
    }

    pub(crate) fn on_reserve(&mut self, bytes: usize) {
        self.device_allocs += 1;
        self.reserved += bytes;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }

    pub(crate) fn on_unreserve(&mut self, bytes: usize) {
        self.device_frees += 1;
        self.reserved -= bytes;
    }

    pub(crate) fn reset_peak(&mut self) {
        self.peak_in_use = self.in_use;
        self.peak_requested = self.requested;
        self.peak_reserved = self.reserved;
    }

    /// A table in the spirit of PyTorch's `memory_summary()`.
    pub fn summary(&self, title: &str) -> String {
        let line = "=".repeat(67);
        let mut s = format!("|{line}|\n| {title:<65} |\n|{line}|\n");
        s += &format!(
            "| {:<22}| {:>12} | {:>12} | {:>12} |\n",
            "metric", "current", "peak", ""
        );
        s += &format!("|{}|\n", "-".repeat(67));
        let row = |name: &str, cur: usize, peak: Option<usize>| {
            format!(
                "| {:<22}| {:>12} | {:>12} | {:>12} |\n",
                name,
                human(cur),
                peak.map(human).unwrap_or_default(),
                ""
            )
        };
        s += &row("in use", self.in_use, Some(self.peak_in_use));
        s += &row("requested", self.requested, Some(self.peak_requested));
        s += &row("reserved", self.reserved, Some(self.peak_reserved));
        s += &row("cached", self.cached(), None);
        s += &row("largest request", self.largest_request, None);
        s += &format!("|{}|\n", "-".repeat(67));
        let count =
            |name: &str, n: u64| format!("| {:<22}| {:>12} | {:>12} | {:>12} |\n", name, n, "", "");
        s += &count("allocations", self.allocs);
        s += &count("frees", self.frees);
        s += &count("cache hits", self.cache_hits);
        s += &count("device allocations", self.device_allocs);
        s += &count("device frees", self.device_frees);
        s += &count("oom retries", self.oom_retries);
        s += &count("ooms", self.ooms);
        let limit = self.limit.map(human).unwrap_or_else(|| "none".into());
        s += &format!(
            "| {:<22}| {:>12} | {:>12} | {:>12} |\n",
            "limit", limit, "", ""
        );
        s += &format!("|{line}|\n");
        s
    }
}

/// Bytes in binary units, e.g. `1.50 MiB`.
pub fn human(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Parses a byte count: `4096`, `64K`, `1.5G`, `512MiB` (binary units).
pub fn parse_bytes(s: &str) -> Option<usize> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0 && v <= usize::MAX as f64).then_some(v as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_and_print() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64K"), Some(65536));
        assert_eq!(parse_bytes("1.5G"), Some(3 << 29));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(12), "12 B");
    }
}
