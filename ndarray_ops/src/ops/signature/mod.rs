//! Op signatures: an op's input names and its attributes, each with a type, a default and a
//! description. For the ops MXNet 1.9.1 also has they are MXNet's own (generated into
//! `mxnet.rs`, so that a model file or a script written for MXNet passes the same arguments);
//! for ops only this runtime has they are declared in `OURS`; the descriptions are in
//! `docs.rs`. Backward ops have none: their nodes carry their forward node's attributes.
//!
//! A call or a graph node is checked against its op's signature once (`check_names` before
//! inference, `check_values` after it): an attribute the op does not take, a required one
//! left out and a value that does not parse as its type are refused with the op, the attribute
//! and what it takes. The op reference (`docs/ops.md`) and the Python functions are written from
//! the same table.

mod docs;
mod mxnet;

use std::fmt;

use super::{invalid, Attrs, OpDef, Result};

/// An attribute's type, as MXNet declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    /// A whole number (an axis, a size).
    Int,
    /// A whole number no less than zero (a count).
    Count,
    /// A real number.
    Float,
    /// `true`/`false` (`1`/`0`).
    Bool,
    /// A tuple of whole numbers such as `(3, 3)`.
    Shape,
    /// A tuple of whole numbers or `None`s such as `(None, 2)` (MXNet declares these as shapes).
    Indices,
    /// Free text.
    Str,
    /// One of these words.
    Choice(&'static [&'static str]),
}

impl fmt::Display for AttrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrType::Int => f.write_str("int"),
            AttrType::Count => f.write_str("int ≥ 0"),
            AttrType::Float => f.write_str("float"),
            AttrType::Bool => f.write_str("bool"),
            AttrType::Shape => f.write_str("shape"),
            AttrType::Indices => f.write_str("tuple of int or None"),
            AttrType::Str => f.write_str("string"),
            AttrType::Choice(words) => write!(f, "{{{}}}", words.join(", ")),
        }
    }
}

/// One attribute of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub ty: AttrType,
    /// Whether `None` is also a value (no axis, no bound).
    pub or_none: bool,
    /// Its value when left out, as MXNet writes it; `None`: it is required.
    pub default: Option<&'static str>,
}

/// An op's inputs and attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Names of the inputs, in order (a variadic op names one, which repeats).
    pub inputs: &'static [&'static str],
    /// Whether the op takes any number of inputs (Concat, add_n).
    pub variadic: bool,
    /// Its attributes.
    pub attrs: &'static [AttrSpec],
}

impl AttrSpec {
    /// The value taken when the attribute is left out; `None`: it is required. A variadic op's
    /// `num_args` is the one exception to MXNet's table: a graph has it, but an imperative call
    /// need not say it (the inputs count themselves).
    pub fn value_when_absent(&self) -> Option<&'static str> {
        match self.name {
            "num_args" => self.default.or(Some("None")),
            _ => self.default,
        }
    }
}

impl Signature {
    /// The attribute called `name`.
    pub fn attr(&self, name: &str) -> Option<&'static AttrSpec> {
        self.attrs.iter().find(|a| a.name == name)
    }
}

pub(super) const fn attr(
    name: &'static str,
    ty: AttrType,
    or_none: bool,
    default: Option<&'static str>,
) -> AttrSpec {
    AttrSpec {
        name,
        ty,
        or_none,
        default,
    }
}

pub(super) const fn sig(
    inputs: &'static [&'static str],
    variadic: bool,
    attrs: &'static [AttrSpec],
) -> Signature {
    Signature {
        inputs,
        variadic,
        attrs,
    }
}

/// The ops only this runtime has that a user may call, sorted.
const OURS: &[(&str, Signature)] = &[
    ("_assign", sig(&["lhs", "rhs"], false, &[])),
    ("_cast_like", sig(&["data", "like"], false, &[])),
    ("_sum_to_like", sig(&["data", "like"], false, &[])),
    ("softrelu", sig(&["data"], false, &[])),
];

/// Attributes that take more than MXNet's declared type says: (op, attribute, the type taken).
/// `slice`'s bounds are tuples of optional integers in MXNet too, though declared as shapes; the
/// GPU convolution sizes its im2col chunks from `workspace` in MiB, fractions included.
const WIDER: &[(&str, &str, AttrType)] = &[
    ("slice", "begin", AttrType::Indices),
    ("slice", "end", AttrType::Indices),
    ("slice", "step", AttrType::Indices),
    ("Convolution", "workspace", AttrType::Float),
    ("Deconvolution", "workspace", AttrType::Float),
];

/// The type attribute `spec` of op `op` takes.
pub(crate) fn taken(op: &str, spec: &AttrSpec) -> AttrType {
    WIDER
        .iter()
        .find(|(o, a, _)| *o == op && *a == spec.name)
        .map_or(spec.ty, |w| w.2)
}

/// The signature of the op registered as `op` (its canonical name); `None` for backward ops.
pub fn signature(op: &str) -> Option<&'static Signature> {
    [mxnet::MXNET, OURS].into_iter().find_map(|table| {
        table
            .binary_search_by(|(name, _)| (*name).cmp(op))
            .ok()
            .map(|i| &table[i].1)
    })
}

/// Inputs that a node takes only when its attributes ask for them: (op, input, whether it is
/// taken given the node's attributes).
type Optional = (&'static str, &'static str, fn(&str, &Attrs) -> Result<bool>);

const OPTIONAL_INPUTS: &[Optional] = &[
    ("FullyConnected", "bias", |op, a| {
        Ok(!a.bool(op, "no_bias", false)?)
    }),
    ("Convolution", "bias", |op, a| {
        Ok(!a.bool(op, "no_bias", false)?)
    }),
    ("Deconvolution", "bias", |op, a| {
        Ok(!a.bool(op, "no_bias", true)?)
    }),
    ("LeakyReLU", "gamma", |_, a| {
        Ok(a.get("act_type") == Some("prelu"))
    }),
    (
        "RNN",
        "state_cell",
        |_, a| Ok(a.get("mode") == Some("lstm")),
    ),
    ("RNN", "sequence_length", |op, a| {
        a.bool(op, "use_sequence_length", false)
    }),
    ("SequenceLast", "sequence_length", |op, a| {
        a.bool(op, "use_sequence_length", false)
    }),
    ("SequenceMask", "sequence_length", |op, a| {
        a.bool(op, "use_sequence_length", false)
    }),
    ("SequenceReverse", "sequence_length", |op, a| {
        a.bool(op, "use_sequence_length", false)
    }),
    ("softmax", "length", |op, a| a.bool(op, "use_length", false)),
];

/// The inputs a node of `op` (its canonical name) with `attrs` takes, in order, by name: the
/// signature's, less those its attributes leave out (a bias with `no_bias`, an LSTM's cell
/// state for other cells). A variadic op gives its one name. The symbolic API names the
/// variables it makes for inputs not given after these (`fc1_weight`).
pub fn input_names(op: &str, attrs: &Attrs) -> Result<Vec<&'static str>> {
    let Some(sig) = signature(op) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(sig.inputs.len());
    for &input in sig.inputs {
        let rule = OPTIONAL_INPUTS
            .iter()
            .find(|(o, i, _)| *o == op && *i == input);
        if let Some((_, _, taken)) = rule {
            if !taken(op, attrs)? {
                continue;
            }
        }
        out.push(input);
    }
    Ok(out)
}

/// What attribute `attr` of op `op` means.
pub fn doc(op: &str, attr: &str) -> &'static str {
    docs::doc(op, attr)
}

/// The graph attributes MXNet also keeps under their plain names beside `__name__` (NNVM's
/// hidden keys): a node may carry them whatever its op.
pub const HIDDEN_KEYS: [&str; 5] = [
    "ctx_group",
    "lr_mult",
    "wd_mult",
    "force_mirroring",
    "mirror_stage",
];

/// Refuses an attribute the op does not take, naming the ones it does: a misspelt attribute
/// would otherwise be ignored, and the op would compute something else than asked. Attributes
/// starting with `__` are the graph's own (context groups, training mode, dtype pins), the
/// [`HIDDEN_KEYS`] are those under their plain names, and `num_args` is how variadic ops count
/// their inputs; all of them pass. Backward ops are not checked (their attributes are their
/// forward node's).
pub(crate) fn check_names(def: &OpDef, attrs: &Attrs) -> Result<()> {
    let op = def.name;
    let Some(sig) = signature(op) else {
        return Ok(());
    };
    match attrs.iter().map(|(k, _)| k).find(|k| {
        !k.starts_with("__")
            && *k != "num_args"
            && !HIDDEN_KEYS.contains(k)
            && sig.attr(k).is_none()
    }) {
        None => Ok(()),
        Some(key) => {
            let takes: Vec<&str> = sig.attrs.iter().map(|a| a.name).collect();
            Err(invalid(
                op,
                format!(
                    "unknown attribute {key:?} ({op} takes {})",
                    match takes.is_empty() {
                        true => "none".to_string(),
                        false => takes.join(", "),
                    }
                ),
            ))
        }
    }
}

/// Refuses a value that does not parse as its attribute's type, and a required attribute left
/// out, even where the op's code does not read it. Run after the op's own inference, whose
/// messages about the attributes it reads say more (a count's bounds, say).
pub(crate) fn check_values(def: &OpDef, attrs: &Attrs) -> Result<()> {
    let op = def.name;
    let Some(sig) = signature(op) else {
        return Ok(());
    };
    for spec in sig.attrs {
        match attrs.get(spec.name) {
            Some(_) => check_value(op, attrs, spec)?,
            None if spec.value_when_absent().is_none() => {
                return Err(invalid(
                    op,
                    format!("attribute {} is required ({})", spec.name, spec.ty),
                ))
            }
            None => {}
        }
    }
    Ok(())
}

/// Whether the value of `spec` in `attrs` parses as its type, with the getters the kernels read
/// it with (so that what passes here is what they accept).
fn check_value(op: &str, attrs: &Attrs, spec: &AttrSpec) -> Result<()> {
    let key = spec.name;
    let text = attrs.get(key).unwrap_or_default();
    if spec.or_none && text.trim() == "None" {
        return Ok(());
    }
    let wide = i64::from(i32::MIN)..=i64::from(i32::MAX);
    match taken(op, spec) {
        AttrType::Int => attrs.int(op, key, None, wide).map(drop),
        AttrType::Count => attrs.int(op, key, None, 0..=*wide.end()).map(drop),
        AttrType::Float => attrs.f64(op, key, None).map(drop),
        AttrType::Bool => attrs.bool(op, key, false).map(drop),
        AttrType::Shape => attrs.ints(op, key).map(drop),
        AttrType::Indices => attrs.opt_ints(op, key).map(drop),
        AttrType::Str => Ok(()),
        AttrType::Choice(words) => match words.contains(&text.trim().trim_matches('\'')) {
            true => Ok(()),
            false => Err(invalid(
                op,
                format!(
                    "attribute {key}={text:?} is not one of {}{}",
                    words.join(", "),
                    if spec.or_none { ", None" } else { "" }
                ),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(def: &OpDef, attrs: &Attrs) -> Result<()> {
        check_names(def, attrs)?;
        check_values(def, attrs)
    }

    #[test]
    fn tables_are_sorted_and_name_registered_ops() {
        for table in [mxnet::MXNET, OURS] {
            assert!(table.windows(2).all(|w| w[0].0 < w[1].0));
            for (name, _) in table {
                let def = crate::ops::lookup(name).unwrap();
                assert_eq!(def.name, *name, "{name} is an alias, not the op's name");
            }
        }
    }

    #[test]
    fn every_callable_op_has_a_signature_and_every_attribute_a_doc() {
        for name in crate::ops::op_names() {
            let def = crate::ops::lookup(name).unwrap();
            if def.name.starts_with("_backward")
                || def.name == "_broadcast_backward"
                || crate::ops::fused::is_fused(def.name)
            {
                continue;
            }
            let sig =
                signature(def.name).unwrap_or_else(|| panic!("{} has no signature", def.name));
            for a in sig.attrs {
                assert!(!doc(def.name, a.name).is_empty(), "{}.{}", def.name, a.name);
            }
        }
    }

    #[test]
    fn inputs_follow_the_attributes() {
        let names = |op: &str, attrs: Attrs| input_names(op, &attrs).unwrap();
        assert_eq!(
            names("FullyConnected", Attrs::new()),
            ["data", "weight", "bias"]
        );
        let no_bias = Attrs::new().with("no_bias", "True");
        assert_eq!(names("FullyConnected", no_bias), ["data", "weight"]);
        assert_eq!(names("Deconvolution", Attrs::new()), ["data", "weight"]);
        let lstm = Attrs::new().with("mode", "lstm");
        assert_eq!(
            names("RNN", lstm),
            ["data", "parameters", "state", "state_cell"]
        );
        assert_eq!(
            names("RNN", Attrs::new().with("mode", "gru")),
            ["data", "parameters", "state"]
        );
        assert_eq!(names("Concat", Attrs::new()), ["data"]);
        // Each rule names an input its op has.
        for (op, input, _) in OPTIONAL_INPUTS {
            assert!(
                signature(op).unwrap().inputs.contains(input),
                "{op}.{input}"
            );
        }
    }

    #[test]
    fn values_are_checked_against_their_type() {
        let conv = crate::ops::lookup("Convolution").unwrap();
        let ok = Attrs::new().with("kernel", "(3, 3)").with("num_filter", 8);
        check(conv, &ok).unwrap();
        let bad = [
            (
                ok.clone().with("kernal", "(3,3)"),
                "unknown attribute \"kernal\"",
            ),
            (ok.clone().with("num_filter", "-1"), "num_filter=\"-1\""),
            (ok.clone().with("no_bias", "maybe"), "not a boolean"),
            (ok.clone().with("stride", "(1, x)"), "tuple of integers"),
            (ok.clone().with("layout", "NCHWX"), "not one of NCDHW"),
            (
                Attrs::new().with("kernel", "(3, 3)"),
                "num_filter is required (int ≥ 0)",
            ),
        ];
        for (attrs, want) in bad {
            let e = check(conv, &attrs).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("Convolution"), "{e}");
        }
        // `None` where the type allows it; graph attributes pass.
        check(
            conv,
            &ok.clone().with("layout", "None").with("__ctx_group__", "a"),
        )
        .unwrap();
        let e = check(conv, &ok.with("num_group", "None")).unwrap_err();
        assert!(e.to_string().contains("num_group"), "{e}");
    }
}
