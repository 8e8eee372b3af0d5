//! Device contexts: which device a buffer lives on and which workers run an op.

use std::fmt;
use std::str::FromStr;

/// The kind of device a [`Context`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceType {
    /// Ordinary host memory.
    Cpu,
    /// Page-locked host memory (fast host<->GPU copies).
    CpuPinned,
    /// Host memory another process can map.
    CpuShared,
    /// Memory on a CUDA device.
    Gpu,
}

impl DeviceType {
    /// The name used in the textual form, e.g. `cpu_pinned` in `cpu_pinned(0)`.
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::CpuPinned => "cpu_pinned",
            DeviceType::CpuShared => "cpu_shared",
            DeviceType::Gpu => "gpu",
        }
    }

    /// Every device type, in a fixed order.
    pub const ALL: [DeviceType; 4] = [
        DeviceType::Cpu,
        DeviceType::CpuPinned,
        DeviceType::CpuShared,
        DeviceType::Gpu,
    ];
}

/// A device: its type and index. Printed and parsed as `cpu(0)`, `gpu(1)`, `cpu_pinned(0)`, ...
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Context {
    /// What kind of device.
    pub dev_type: DeviceType,
    /// Which one of that kind.
    pub dev_id: u32,
}

impl Context {
    /// `cpu(id)`.
    pub const fn cpu(dev_id: u32) -> Self {
        Context {
            dev_type: DeviceType::Cpu,
            dev_id,
        }
    }
    /// `cpu_pinned(id)`.
    pub const fn cpu_pinned(dev_id: u32) -> Self {
        Context {
            dev_type: DeviceType::CpuPinned,
            dev_id,
        }
    }
    /// `cpu_shared(id)`.
    pub const fn cpu_shared(dev_id: u32) -> Self {
        Context {
            dev_type: DeviceType::CpuShared,
            dev_id,
        }
    }
    /// `gpu(id)`.
    pub const fn gpu(dev_id: u32) -> Self {
        Context {
            dev_type: DeviceType::Gpu,
            dev_id,
        }
    }
    /// True for every host-memory context (ops on it run on CPU workers).
    pub fn is_cpu(&self) -> bool {
        self.dev_type != DeviceType::Gpu
    }
}

impl Default for Context {
    fn default() -> Self {
        Context::cpu(0)
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.dev_type.name(), self.dev_id)
    }
}

/// A string that is not a context such as `cpu(0)` or `gpu(1)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse context {input:?}: {reason} (expected one of cpu(N), cpu_pinned(N), cpu_shared(N), gpu(N))")]
pub struct ParseContextError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for Context {
    type Err = ParseContextError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| ParseContextError {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        let t = s.trim();
        let open = t.find('(').ok_or_else(|| err("missing '('"))?;
        let inner = t[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| err("missing closing ')'"))?;
        let kind = t[..open].trim();
        let dev_type = DeviceType::ALL
            .into_iter()
            .find(|d| d.name() == kind)
            .ok_or_else(|| err(&format!("unknown device type {kind:?}")))?;
        let dev_id = inner.trim().parse::<u32>().map_err(|e| {
            err(&format!(
                "device id {inner:?} is not a non-negative integer: {e}"
            ))
        })?;
        Ok(Context { dev_type, dev_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        for dev_type in DeviceType::ALL {
            for dev_id in [0, 1, 7, 4095] {
                let c = Context { dev_type, dev_id };
                let s = c.to_string();
                assert_eq!(s.parse::<Context>().unwrap(), c, "{s}");
            }
        }
        assert_eq!(Context::gpu(1).to_string(), "gpu(1)");
        assert_eq!(" cpu( 3 ) ".parse::<Context>().unwrap(), Context::cpu(3));
    }

    #[test]
    fn bad_strings_are_clear_errors() {
        for bad in [
            "", "cpu", "cpu(", "cpu(x)", "tpu(0)", "gpu(-1)", "cpu(0", "gpu()",
        ] {
            let e = bad.parse::<Context>().unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains("expected one of"), "{e}");
        }
    }
}
