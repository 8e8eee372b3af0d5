//! An op's attributes as a typed struct, declared once beside the op's kernels.
//!
//! `op_params!` declares a struct with one field per attribute the op reads, each of a type
//! that reads MXNet's text form and writes it back ([`AttrValue`]). What is not in the struct's
//! declaration comes from the op's signature, the table the checks, `docs/ops.md` and the Python
//! functions are written from: an attribute left out of a map takes the signature's default
//! (MXNet's own), one without a default is required, and its meaning is the signature's doc.
//! So an op's defaults are written in one place, and a kernel reads typed fields instead of
//! looking up strings with a default of its own.
//!
//! * [`Params::get`] parses a map once: the struct is kept beside the map ([`Attrs::parsed`]),
//!   which every run of the node shares, and later runs share it.
//! * [`Params::to_attrs`] writes the fields that differ from their defaults, as MXNet's JSON
//!   holds a node's attributes, so that reading what it wrote gives the same struct back.
//! * A test checks every struct against its signature: each field is one of the op's
//!   attributes, and each default parses as the field's type.

use std::sync::Arc;

use super::signature::signature;
use super::{invalid, Attrs, Result};
use crate::DType;

pub use super::batch_norm::BatchNormParams;
pub use super::conv::{ConvolutionParams, CudnnTune, DeconvolutionParams, Layout};
pub use super::creation::ArangeParams;
pub use super::fully_connected::FullyConnectedParams;
pub use super::gather::{
    BroadcastAxisParams, BroadcastLikeParams, BroadcastToParams, PadMode, PadParams, RepeatParams,
    ReverseParams, SampleType, SliceLikeParams, SwapAxisParams, TileParams, UpSamplingParams,
};
pub use super::lanes::{BlockParams, PickMode, PickParams, SequenceMaskParams, SequenceParams};
pub use super::leaky_relu::{LeakyReLUParams, LeakyType};
pub use super::linalg::DotParams;
pub use super::loss::{MakeLossParams, RegressionParams};
pub use super::math::{CastParams, HardSigmoidParams};
pub use super::nn::{ClipParams, OneHotParams, TransposeParams};
pub use super::norm::{
    GroupNormParams, InstanceNormParams, L2Mode, L2NormalizationParams, LayerNormParams,
    SoftmaxActivationParams, SoftmaxMode,
};
pub use super::pooling::{PoolType, PoolingConvention, PoolingParams};
pub use super::reduce::{ArgExtremeParams, NormParams, ReduceParams};
pub use super::rnn::{Mode as RnnMode, RNNParams};
pub use super::roi::{ROIAlignParams, ROIPoolingParams};
pub use super::shape::{
    ConcatParams, EmbeddingParams, ExpandDimsParams, ReshapeParams, SliceAxisParams,
    SliceChannelParams, SliceParams, SqueezeParams, TakeMode, TakeParams,
};
pub use super::softmax::{Normalization, SoftmaxOutputParams, SoftmaxParams};
pub use super::sort::{ArgsortParams, RetTyp, SortParams, TopkParams};
pub use super::stack::StackParams;
pub use super::stochastic::{DropoutMode, DropoutParams, NormalParams, UniformParams};
pub use super::unary::{ActType, ActivationParams};
pub use super::update::{AdamParams, MomentumParams, UpdateParams};
pub use super::vision::{
    AdaptiveAvgPooling2DParams, BilinearResize2DParams, CropParams, ResizeMode,
};

/// A value an attribute holds: read from MXNet's text form, written back in it.
pub trait AttrValue: Sized {
    /// The value `text` holds, or what it should have been (`"a boolean"`), for the message
    /// `attribute {key}={text} is not {what}`.
    fn read(text: &str) -> std::result::Result<Self, String>;

    /// The text MXNet writes for it.
    fn write(&self) -> String;

    /// What an `Option` of it should have been, given what it should have been: `None or a
    /// number`; an enum lists `None` among its words.
    fn or_none(what: String) -> String {
        format!("None or {what}")
    }
}

/// The typed attributes of one op (see the module's doc).
pub trait Params: Clone + Send + Sync + 'static {
    /// The op whose signature gives the defaults (a backward op's node carries its forward
    /// node's attributes, so the forward op).
    const OP: &'static str;

    /// The other ops of the family that read the struct (`mean`, `max`, ... beside `sum`): the
    /// conformance test holds their signatures to the same fields and defaults.
    const ALSO: &'static [&'static str];

    /// Each field's attribute name, and a reader of its text through the field's type that
    /// writes what it read (the signature conformance test runs the defaults through it).
    const FIELDS: &'static [Field];

    /// Parses `attrs` for op `op` (named in errors).
    fn read(op: &str, attrs: &Attrs) -> Result<Self>;

    /// The attributes that differ from the defaults, in MXNet's text form.
    fn to_attrs(&self) -> Attrs;

    /// [`Params::read`], once per map: later calls share what the first one made.
    fn get(op: &str, attrs: &Attrs) -> Result<Arc<Self>> {
        attrs.parsed(op, Self::read)
    }
}

/// One field of a [`Params`] struct.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// The attribute's name.
    pub name: &'static str,
    /// Reads a text through the field's type and writes the value back.
    pub reparse: Reparse,
}

/// Reads a text through a type and writes the value back; `Err`: what it should have been.
pub type Reparse = fn(&str) -> std::result::Result<String, String>;

/// The value of attribute `key` of `op` in `attrs`, or the default `OP`'s signature gives it.
pub fn field<T: AttrValue>(op: &str, sig_op: &str, attrs: &Attrs, key: &str) -> Result<T> {
    let text = match attrs.get(key) {
        Some(text) => text,
        None => default_of(sig_op, key)
            .ok_or_else(|| invalid(op, format!("attribute {key} is required")))?,
    };
    read_as(op, key, text)
}

/// `attrs` with `key` set to `value`'s text, unless that is the signature's default.
pub fn put<T: AttrValue>(attrs: Attrs, sig_op: &str, key: &str, value: &T) -> Attrs {
    let text = value.write();
    let default = default_of(sig_op, key).and_then(|d| T::read(d).ok());
    match default.is_some_and(|d| d.write() == text) {
        true => attrs,
        false => attrs.with(key, text),
    }
}

fn default_of(op: &str, key: &str) -> Option<&'static str> {
    signature(op)?.attr(key)?.value_when_absent()
}

/// Declares an op's typed attributes: `op_params! { /// doc  pub struct Name for "Op" { field:
/// Type, ... } }`, or `for "Op", "Other", ...` for a family of ops whose signatures share the
/// fields and their defaults. Each field is the attribute of the same name; see the module's doc.
macro_rules! op_params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident for $op:literal $(, $also:literal)* {
            $($field:ident : $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        $vis struct $name {
            $(
                #[doc = concat!("Attribute `", stringify!($field), "` (its meaning and default: ",
                    $op, "'s signature).")]
                pub $field: $ty,
            )*
        }

        impl $crate::ops::params::Params for $name {
            const OP: &'static str = $op;
            const ALSO: &'static [&'static str] = &[$($also),*];
            const FIELDS: &'static [$crate::ops::params::Field] = &[$(
                $crate::ops::params::Field {
                    name: stringify!($field),
                    reparse: |text| {
                        <$ty as $crate::ops::params::AttrValue>::read(text)
                            .map(|v| $crate::ops::params::AttrValue::write(&v))
                    },
                },
            )*];

            fn read(op: &str, attrs: &$crate::ops::Attrs) -> $crate::error::Result<Self> {
                Ok($name {
                    $($field: $crate::ops::params::field(op, $op, attrs, stringify!($field))?,)*
                })
            }

            fn to_attrs(&self) -> $crate::ops::Attrs {
                let attrs = $crate::ops::Attrs::new();
                $(let attrs = $crate::ops::params::put(attrs, $op, stringify!($field), &self.$field);)*
                attrs
            }
        }
    };
}
pub(crate) use op_params;

/// Declares an enum an attribute names one of: `attr_enum! { /// doc  pub enum Name { Variant =
/// "word", ... } }`. A word the enum does not list is refused naming the ones it does.
macro_rules! attr_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// The word MXNet names it by.
            $vis fn word(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                }
            }
        }

        impl $crate::ops::params::AttrValue for $name {
            fn read(text: &str) -> std::result::Result<Self, String> {
                match text.trim().trim_matches(['\'', '"']) {
                    $($word => Ok($name::$variant),)*
                    _ => Err($crate::ops::params::one_of(&mut [$($word),*])),
                }
            }

            fn write(&self) -> String {
                self.word().to_string()
            }

            // "one of a, b, None", as the signature's check words it.
            fn or_none(what: String) -> String {
                format!("{what}, None")
            }
        }
    };
}
pub(crate) use attr_enum;

/// What a word should have been: `one of ...`, the words sorted as the signature lists them.
pub fn one_of(words: &mut [&str]) -> String {
    words.sort_unstable();
    format!("one of {}", words.join(", "))
}

impl AttrValue for bool {
    fn read(text: &str) -> std::result::Result<bool, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err("a boolean".into()),
        }
    }

    fn write(&self) -> String {
        // As Python's `str` writes them, which is what MXNet's JSON holds.
        match self {
            true => "True".into(),
            false => "False".into(),
        }
    }
}

/// A whole number from `lo` to `hi`, given the text's number (`None`: not a number): `3`, or
/// `3.0` as a float-formatting writer leaves it, but never `2.5`, NaN or a number past the
/// range, which a cast would silently truncate or saturate into a shape or a list's length.
pub(crate) fn whole_in(number: Option<f64>, lo: i64, hi: i64) -> std::result::Result<i64, String> {
    // The bounds used are 32-bit, so they and every whole number between them are exact.
    match number {
        Some(n) if n.fract() == 0.0 && (lo as f64..=hi as f64).contains(&n) => Ok(n as i64),
        _ => Err(format!("a whole number from {lo} to {hi}")),
    }
}

fn whole(text: &str, lo: i64, hi: i64) -> std::result::Result<i64, String> {
    whole_in(text.trim().parse().ok(), lo, hi)
}

/// `text`, the value of attribute `key` of `op`, read as a `T`; the error names all three.
pub(crate) fn read_as<T: AttrValue>(op: &str, key: &str, text: &str) -> Result<T> {
    T::read(text).map_err(|what| invalid(op, format!("attribute {key}={text:?} is not {what}")))
}

/// An `int` (an axis, an offset), as MXNet holds it: 32 bits.
impl AttrValue for i64 {
    fn read(text: &str) -> std::result::Result<i64, String> {
        whole(text, i32::MIN.into(), i32::MAX.into())
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

/// A count or a size (MXNet's `uint32_t` and non-negative `int`s).
impl AttrValue for usize {
    fn read(text: &str) -> std::result::Result<usize, String> {
        whole(text, 0, u32::MAX.into()).map(|n| n as usize)
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

/// A count that must be at least 1 and at most `MAX`: a number of filters, groups or layers
/// (MXNet's `uint32_t`, the default bound), or a size MXNet keeps in an `int` ([`PositiveInt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Positive<const MAX: u32 = { u32::MAX }>(pub usize);

/// A size MXNet keeps in a C `int` (`num_hidden`, a block size), at least 1.
pub type PositiveInt = Positive<{ i32::MAX as u32 }>;

impl<const MAX: u32> AttrValue for Positive<MAX> {
    fn read(text: &str) -> std::result::Result<Positive<MAX>, String> {
        whole(text, 1, MAX.into()).map(|n| Positive(n as usize))
    }

    fn write(&self) -> String {
        self.0.to_string()
    }
}

/// A `double`.
impl AttrValue for f64 {
    fn read(text: &str) -> std::result::Result<f64, String> {
        text.trim().parse().map_err(|_| "a number".into())
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

/// A `float` (a slope, an epsilon, a rate), which MXNet computes with at float precision even
/// for float64 arrays.
impl AttrValue for f32 {
    fn read(text: &str) -> std::result::Result<f32, String> {
        f64::read(text).map(|v| v as f32)
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

/// Free text.
impl AttrValue for String {
    fn read(text: &str) -> std::result::Result<String, String> {
        Ok(text.to_string())
    }

    fn write(&self) -> String {
        self.clone()
    }
}

/// An element type by MXNet's name (`float32`, `int64`, ...).
impl AttrValue for DType {
    fn read(text: &str) -> std::result::Result<DType, String> {
        DType::parse(text.trim().trim_matches(['\'', '"'])).ok_or_else(|| "a known dtype".into())
    }

    fn write(&self) -> String {
        self.name().to_string()
    }
}

/// `None`, or a value.
impl<T: AttrValue> AttrValue for Option<T> {
    fn read(text: &str) -> std::result::Result<Option<T>, String> {
        match text.trim().eq_ignore_ascii_case("none") {
            true => Ok(None),
            false => T::read(text).map(Some).map_err(T::or_none),
        }
    }

    fn write(&self) -> String {
        match self {
            None => "None".into(),
            Some(v) => v.write(),
        }
    }
}

/// The entries of a tuple written `(1, 2)`, `[1, 2]`, `(1,)`, `1` or `()`.
fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.trim()
        .trim_start_matches(['(', '['])
        .trim_end_matches([')', ']'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// A tuple written as Python writes one (`(3,)` for one entry).
fn tuple(items: impl ExactSizeIterator<Item = String>) -> String {
    let one = items.len() == 1;
    let body: Vec<String> = items.collect();
    format!("({}{})", body.join(", "), if one { "," } else { "" })
}

/// A tuple of integers (MXNet's `Shape`); `None` reads as empty, as MXNet leaves it unknown.
impl AttrValue for Vec<i64> {
    fn read(text: &str) -> std::result::Result<Vec<i64>, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(Vec::new());
        }
        entries(text)
            .map(|s| {
                s.parse::<i64>()
                    .map_err(|_| "a tuple of integers".to_string())
            })
            .collect()
    }

    fn write(&self) -> String {
        tuple(self.iter().map(i64::to_string))
    }
}

/// A tuple whose entries are integers or `None` (`slice`'s bounds).
impl AttrValue for Vec<Option<i64>> {
    fn read(text: &str) -> std::result::Result<Vec<Option<i64>>, String> {
        entries(text)
            .map(|s| match s.eq_ignore_ascii_case("none") {
                true => Ok(None),
                false => s
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| "a tuple of integers or None".to_string()),
            })
            .collect()
    }

    fn write(&self) -> String {
        tuple(
            self.iter()
                .map(|v| v.map_or("None".into(), |v| v.to_string())),
        )
    }
}

/// Checks that every entry of `v` lies from `lo` to 2^31 - 1, as MXNet's `int` holds it: the
/// ops multiply and add such entries into shapes, and a huge one is refused instead of wrapping
/// that arithmetic. The error says which entry: `has 9..., outside 0 to 2147483647`.
pub(crate) fn int32s(v: &[i64], lo: i64) -> std::result::Result<(), String> {
    let max = i64::from(i32::MAX);
    match v.iter().find(|x| !(lo..=max).contains(*x)) {
        Some(bad) => Err(format!("has {bad}, outside {lo} to {max}")),
        None => Ok(()),
    }
}

/// A 2-D window's size, stride, padding or dilation: `(3, 3)`, or one value for both axes, each
/// from 0 to 2^31 - 1 as MXNet's `int` holds it; empty (MXNet's default `[]`) leaves it to the op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window(pub Option<(usize, usize)>);

impl Window {
    /// The window, or `default` when it was left empty.
    pub fn or(self, default: (usize, usize)) -> (usize, usize) {
        self.0.unwrap_or(default)
    }

    /// The window; an empty one is refused as attribute `key` of `op` being required.
    pub fn required(self, op: &str, key: &str) -> Result<(usize, usize)> {
        self.0
            .ok_or_else(|| invalid(op, format!("attribute {key} is required")))
    }
}

impl AttrValue for Window {
    fn read(text: &str) -> std::result::Result<Window, String> {
        let v = Vec::<i64>::read(text)?;
        int32s(&v, 0).map_err(|e| format!("a 2-D window: it {e}"))?;
        match v[..] {
            [] => Ok(Window(None)),
            [a] => Ok(Window(Some((a as usize, a as usize)))),
            [a, b] => Ok(Window(Some((a as usize, b as usize)))),
            _ => Err("a 2-D window (one or two values)".into()),
        }
    }

    fn write(&self) -> String {
        match self.0 {
            None => "()".into(),
            Some((a, b)) => format!("({a}, {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every params struct, by its fields.
    fn all() -> Vec<(&'static str, &'static [&'static str], &'static [Field])> {
        fn of<P: Params>() -> (&'static str, &'static [&'static str], &'static [Field]) {
            (P::OP, P::ALSO, P::FIELDS)
        }
        vec![
            of::<ActivationParams>(),
            of::<AdamParams>(),
            of::<BilinearResize2DParams>(),
            of::<CastParams>(),
            of::<CropParams>(),
            of::<MomentumParams>(),
            of::<NormalParams>(),
            of::<StackParams>(),
            of::<TransposeParams>(),
            of::<UniformParams>(),
            of::<UpdateParams>(),
            of::<BroadcastAxisParams>(),
            of::<BroadcastLikeParams>(),
            of::<BroadcastToParams>(),
            of::<PadParams>(),
            of::<RepeatParams>(),
            of::<ReverseParams>(),
            of::<SliceLikeParams>(),
            of::<SwapAxisParams>(),
            of::<TileParams>(),
            of::<UpSamplingParams>(),
            of::<MakeLossParams>(),
            of::<RegressionParams>(),
            of::<ArangeParams>(),
            of::<ClipParams>(),
            of::<HardSigmoidParams>(),
            of::<OneHotParams>(),
            of::<ConcatParams>(),
            of::<EmbeddingParams>(),
            of::<ExpandDimsParams>(),
            of::<ReshapeParams>(),
            of::<SliceAxisParams>(),
            of::<SliceChannelParams>(),
            of::<SliceParams>(),
            of::<SqueezeParams>(),
            of::<TakeParams>(),
            of::<BlockParams>(),
            of::<PickParams>(),
            of::<SequenceMaskParams>(),
            of::<SequenceParams>(),
            of::<ArgsortParams>(),
            of::<SortParams>(),
            of::<TopkParams>(),
            of::<ArgExtremeParams>(),
            of::<NormParams>(),
            of::<ReduceParams>(),
            of::<AdaptiveAvgPooling2DParams>(),
            of::<BatchNormParams>(),
            of::<ConvolutionParams>(),
            of::<DeconvolutionParams>(),
            of::<DotParams>(),
            of::<DropoutParams>(),
            of::<FullyConnectedParams>(),
            of::<GroupNormParams>(),
            of::<InstanceNormParams>(),
            of::<L2NormalizationParams>(),
            of::<LayerNormParams>(),
            of::<LeakyReLUParams>(),
            of::<PoolingParams>(),
            of::<RNNParams>(),
            of::<ROIAlignParams>(),
            of::<ROIPoolingParams>(),
            of::<SoftmaxActivationParams>(),
            of::<SoftmaxOutputParams>(),
            of::<SoftmaxParams>(),
        ]
    }

    #[test]
    fn every_field_is_an_attribute_of_its_ops_and_its_default_parses_as_its_type() {
        for (op, also, fields) in all() {
            let sig = signature(op).unwrap_or_else(|| panic!("{op} has no signature"));
            for f in fields {
                let spec = sig
                    .attr(f.name)
                    .unwrap_or_else(|| panic!("{op} has no attribute {}", f.name));
                // The family's other ops take the attribute with the same default.
                for other in also {
                    let theirs = signature(other)
                        .and_then(|s| s.attr(f.name))
                        .unwrap_or_else(|| panic!("{other} has no attribute {}", f.name));
                    assert_eq!(theirs.default, spec.default, "{other}.{} vs {op}", f.name);
                }
                let Some(default) = spec.default else {
                    continue;
                };
                let written = (f.reparse)(default)
                    .unwrap_or_else(|e| panic!("{op}.{}={default:?} is not {e}", f.name));
                assert_eq!(
                    (f.reparse)(&written).as_ref(),
                    Ok(&written),
                    "{op}.{}",
                    f.name
                );
            }
        }
    }

    #[test]
    fn values_read_as_mxnet_writes_them_and_are_written_back_the_same() {
        let cases: &[(&str, Reparse, &str)] = &[
            ("True", |t| bool::read(t).map(|v| v.write()), "True"),
            ("0", |t| bool::read(t).map(|v| v.write()), "False"),
            ("3.0", |t| i64::read(t).map(|v| v.write()), "3"),
            (
                "(3, 3)",
                |t| Vec::<i64>::read(t).map(|v| v.write()),
                "(3, 3)",
            ),
            ("[2]", |t| Vec::<i64>::read(t).map(|v| v.write()), "(2,)"),
            (
                "None",
                |t| Option::<i64>::read(t).map(|v| v.write()),
                "None",
            ),
            (
                "(None, 2)",
                |t| Vec::<Option<i64>>::read(t).map(|v| v.write()),
                "(None, 2)",
            ),
            ("2", |t| Window::read(t).map(|v| v.write()), "(2, 2)"),
            ("0.1", |t| f32::read(t).map(|v| v.write()), "0.1"),
        ];
        for (text, reparse, want) in cases {
            assert_eq!(reparse(text).as_deref(), Ok(*want), "{text}");
        }
        let refused = [
            (i64::read("2.5").err(), "a whole number from -2147483648"),
            (
                <Positive>::read("0").err(),
                "a whole number from 1 to 4294967295",
            ),
            (Window::read("(1, 2, 3)").err(), "a 2-D window"),
            (Window::read("(1, x)").err(), "a tuple of integers"),
            (bool::read("maybe").err(), "a boolean"),
        ];
        for (e, what) in refused {
            assert!(e.as_ref().is_some_and(|e| e.contains(what)), "{e:?}");
        }
    }

    #[test]
    fn a_struct_reads_defaults_refuses_bad_values_and_writes_what_it_read() {
        let attrs = Attrs::new().with("kernel", "(3, 3)").with("num_filter", 8);
        let p = ConvolutionParams::read("Convolution", &attrs).unwrap();
        assert_eq!(p.kernel, Window(Some((3, 3))));
        assert_eq!((p.num_group, p.no_bias), (Positive(1), false));
        // Only what differs from the defaults is written, and it reads back the same.
        let written = p.to_attrs();
        assert_eq!(
            written.iter().collect::<Vec<_>>(),
            [("kernel", "(3, 3)"), ("num_filter", "8")]
        );
        assert_eq!(ConvolutionParams::read("Convolution", &written).unwrap(), p);
        // Deconvolution's default differs, and is written when it is not taken.
        let d = DeconvolutionParams::read("Deconvolution", &attrs).unwrap();
        assert!(d.no_bias);
        let with_bias = DeconvolutionParams {
            no_bias: false,
            ..d
        };
        assert_eq!(with_bias.to_attrs().get("no_bias"), Some("False"));
        for (attrs, want) in [
            (
                Attrs::new().with("num_filter", 8),
                "attribute kernel is required",
            ),
            (
                attrs.clone().with("num_filter", "-1"),
                "num_filter=\"-1\" is not a whole number from 1",
            ),
            (
                attrs.clone().with("layout", "NCHWX"),
                "is not one of NCDHW, NCHW, NCW, NDHWC, NHWC, NWC, None",
            ),
        ] {
            let e = ConvolutionParams::read("_backward_Convolution", &attrs).unwrap_err();
            let e = e.to_string();
            assert!(
                e.contains(want) && e.contains("_backward_Convolution"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_struct_survives_a_graph_written_to_json_and_read_back() {
        use crate::Symbol;
        let p = PoolingParams::read(
            "Pooling",
            &Attrs::new()
                .with("kernel", "(3, 3)")
                .with("stride", "(2, 2)")
                .with("pool_type", "avg")
                .with("count_include_pad", "False"),
        )
        .unwrap();
        let x = Symbol::var("x");
        let pool = Symbol::op("Pooling", "pool", &[&x], p.to_attrs()).unwrap();
        let back = Symbol::from_json(&pool.to_json()).unwrap();
        let node = back.outputs()[0].node.clone();
        assert_eq!(PoolingParams::read("Pooling", &node.attrs).unwrap(), p);
    }
}
