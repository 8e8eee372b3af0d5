//! Op attributes: MXNet's string map, each value parsed once into the types the ops read, with
//! errors that name the op, the attribute and the value; and an op's typed parameters (`Conv`,
//! `Rnn`, ...) parsed once per map and kept beside it.

use std::any::{Any, TypeId};

use super::params::{read_as, whole_in};
use super::*;

/// An op's attributes as strings (MXNet's JSON form), with typed getters that name the op and the
/// key in their errors. Cloning shares the map (kernels keep a copy without allocating).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs(Arc<Map>);

/// The values, and the typed parameters parsed from them so far.
#[derive(Default)]
struct Map {
    values: BTreeMap<String, Value>,
    /// What [`Attrs::parsed`] made, by type and op name: a map is shared by every run of its
    /// node, so a kernel's parameters are parsed on its first run only.
    parsed: Mutex<Vec<Parsed>>,
}

struct Parsed {
    ty: TypeId,
    op: String,
    value: Arc<dyn Any + Send + Sync>,
}

impl Clone for Map {
    /// The values; what was parsed from them is parsed again by the copy (which may change).
    fn clone(&self) -> Map {
        Map {
            values: self.values.clone(),
            parsed: Mutex::default(),
        }
    }
}

impl PartialEq for Map {
    fn eq(&self, other: &Map) -> bool {
        self.values == other.values
    }
}

impl Eq for Map {}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.values, f)
    }
}

/// One attribute: its text, and its number once a kernel has asked for one. Kernels read their
/// attributes every time they run, and a map is shared by every run of its node (or, for
/// `x + 1.0` in a loop, by every op of the loop), so a number is parsed once per map.
#[derive(Clone)]
pub(crate) struct Value {
    pub(super) text: String,
    pub(super) number: OnceLock<Option<f64>>,
}

impl Value {
    pub(super) fn new(text: String) -> Value {
        Value {
            text,
            number: OnceLock::new(),
        }
    }

    pub(super) fn number(&self) -> Option<f64> {
        *self.number.get_or_init(|| self.text.trim().parse().ok())
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.text == other.text
    }
}

impl Eq for Value {}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl Attrs {
    /// No attributes (one shared empty map: making one costs no allocation).
    pub fn new() -> Self {
        static EMPTY: OnceLock<Attrs> = OnceLock::new();
        EMPTY
            .get_or_init(|| Attrs(Arc::new(Map::default())))
            .clone()
    }

    /// Adds one.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        let map = Arc::make_mut(&mut self.0);
        map.values
            .insert(key.to_string(), Value::new(value.to_string()));
        map.parsed.get_mut().clear();
        self
    }

    /// `parse(op, self)`, made once per map, op and type: later calls (every run of the node
    /// after its first) share what the first made. A failed parse is not kept.
    pub(crate) fn parsed<T: Send + Sync + 'static>(
        &self,
        op: &str,
        parse: impl FnOnce(&str, &Attrs) -> Result<T>,
    ) -> Result<Arc<T>> {
        let ty = TypeId::of::<T>();
        let found = |list: &[Parsed]| {
            list.iter()
                .find(|p| p.ty == ty && p.op == op)
                .and_then(|p| p.value.clone().downcast::<T>().ok())
        };
        if let Some(v) = found(&self.0.parsed.lock()) {
            return Ok(v);
        }
        // Parsed without the lock held: a parse may read other parameters of the same map.
        let v = Arc::new(parse(op, self)?);
        let mut list = self.0.parsed.lock();
        if let Some(first) = found(&list) {
            return Ok(first);
        }
        list.push(Parsed {
            ty,
            op: op.to_string(),
            value: v.clone(),
        });
        Ok(v)
    }

    /// The raw string.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.values.get(key).map(|v| v.text.as_str())
    }

    /// Every attribute, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .values
            .iter()
            .map(|(k, v)| (k.as_str(), v.text.as_str()))
    }

    /// A float attribute.
    pub fn f64(&self, op: &str, key: &str, default: Option<f64>) -> Result<f64> {
        match self.0.values.get(key) {
            Some(v) => v.number().ok_or_else(|| {
                invalid(op, format!("attribute {key}={:?} is not a number", v.text))
            }),
            None => default.ok_or_else(|| invalid(op, format!("attribute {key} is required"))),
        }
    }

    /// A whole-number attribute (an axis length, a count) within `range`: `3`, or `3.0` as a
    /// float-formatting writer leaves it, but never `2.5`, NaN or a number past the range, which
    /// a cast would silently truncate or saturate into a shape or a list's length.
    pub fn int(
        &self,
        op: &str,
        key: &str,
        default: Option<i64>,
        range: RangeInclusive<i64>,
    ) -> Result<i64> {
        let Some(v) = self.0.values.get(key) else {
            return default.ok_or_else(|| invalid(op, format!("attribute {key} is required")));
        };
        whole_in(v.number(), *range.start(), *range.end())
            .map_err(|what| invalid(op, format!("attribute {key}={:?} is not {what}", v.text)))
    }

    /// [`Attrs::int`] for a count or a length, which can be no less than `range`'s start and is
    /// used as a `usize`.
    pub fn count(
        &self,
        op: &str,
        key: &str,
        default: Option<usize>,
        range: RangeInclusive<u32>,
    ) -> Result<usize> {
        let range = i64::from(*range.start())..=i64::from(*range.end());
        let default = default.map(|d| d as i64);
        Ok(self.int(op, key, default, range)? as usize)
    }

    /// A float attribute that MXNet holds as a C `float` (a clip bound, a slope, an optimizer's
    /// rate): rounded to float precision, as MXNet computes with it (0.1 is 0.1f, even for
    /// float64 arrays).
    pub fn float(&self, op: &str, key: &str, default: Option<f64>) -> Result<f64> {
        Ok(f64::from(self.f64(op, key, default)? as f32))
    }

    /// A boolean attribute (`true`/`false`/`1`/`0`, any case).
    pub fn bool(&self, op: &str, key: &str, default: bool) -> Result<bool> {
        self.get(key).map_or(Ok(default), |t| read_as(op, key, t))
    }

    /// The dtype named by `dtype` (MXNet's names: `float32`, `int64`, ...); float32 when
    /// absent, as MXNet's ops default.
    pub fn dtype(&self, op: &str) -> Result<DType> {
        match self.get("dtype") {
            None => Ok(DType::F32),
            Some(name) => {
                DType::parse(name).ok_or_else(|| invalid(op, format!("dtype {name:?} is unknown")))
            }
        }
    }

    /// An integer tuple such as `(0, 2)`, `[1]`, `1` or `()`; `None` when absent or `None`.
    pub fn ints(&self, op: &str, key: &str) -> Result<Option<Vec<i64>>> {
        match self.get(key) {
            Some(t) if !t.trim().eq_ignore_ascii_case("none") => read_as(op, key, t).map(Some),
            _ => Ok(None),
        }
    }

    /// A tuple whose entries are integers or `None` (`slice`'s `begin`, `end`, `step`): empty
    /// when absent.
    pub fn opt_ints(&self, op: &str, key: &str) -> Result<Vec<Option<i64>>> {
        self.get(key)
            .map_or(Ok(Vec::new()), |t| read_as(op, key, t))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::Attrs;

    #[test]
    fn parameters_are_parsed_once_per_map_and_op_and_again_after_a_change() {
        static PARSES: AtomicUsize = AtomicUsize::new(0);
        let parse = |op: &str, a: &Attrs| {
            PARSES.fetch_add(1, Ordering::Relaxed);
            a.f64(op, "x", None)
        };
        let a = Attrs::new().with("x", 2.5);
        assert_eq!(*a.parsed("op", parse).unwrap(), 2.5);
        let shared = a.clone();
        assert_eq!(*shared.parsed("op", parse).unwrap(), 2.5);
        assert_eq!(
            PARSES.load(Ordering::Relaxed),
            1,
            "a clone shares what was parsed"
        );
        // Another op reading the same map parses for itself (its errors name it).
        assert_eq!(*a.parsed("other", parse).unwrap(), 2.5);
        assert_eq!(PARSES.load(Ordering::Relaxed), 2);
        // A changed map parses again, and the map it was changed from keeps its own.
        let changed = a.clone().with("x", 4.0);
        assert_eq!(*changed.parsed("op", parse).unwrap(), 4.0);
        assert_eq!(*a.parsed("op", parse).unwrap(), 2.5);
        assert_eq!(PARSES.load(Ordering::Relaxed), 3);
        // A failure is not kept: it is reported every time.
        let bad = Attrs::new().with("x", "two");
        for _ in 0..2 {
            let e = bad.parsed("op", parse).unwrap_err().to_string();
            assert!(e.contains("attribute x=\"two\" is not a number"), "{e}");
        }
        assert_eq!(PARSES.load(Ordering::Relaxed), 5);
        // Changing a map no clone shares drops what was parsed from it.
        let mut own = Attrs::new().with("x", 1.0);
        assert_eq!(*own.parsed("op", parse).unwrap(), 1.0);
        own = own.with("x", 3.0);
        assert_eq!(*own.parsed("op", parse).unwrap(), 3.0);
    }
}
