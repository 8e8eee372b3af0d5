//! Arithmetic on `&NDArray` (`&a + &b`, `&a * 2.0`, ...) and the in-place and named forms.
//! Operators return `Result`, because a shape mismatch is an error at the call, never a panic.

use std::ops::{Add, Div, Mul, Sub};

use crate::imperative::invoke;
use crate::ops::names::op_name;
use crate::ops::Attrs;
use crate::{NDArray, Result};

fn one(name: &str, inputs: &[&NDArray], attrs: &Attrs) -> Result<NDArray> {
    Ok(invoke(name, inputs, attrs, None)?.remove(0))
}

fn scalar(name: &str, a: &NDArray, s: f64) -> Result<NDArray> {
    one(name, &[a], &scalar_attrs(s))
}

/// `scalar=s` as attributes. Loops apply the same scalar again and again (`x = &x + 1.0`), so
/// the last one made on this thread is kept: building the map costs four allocations and a float
/// formatting, a tenth of a tiny op.
fn scalar_attrs(s: f64) -> Attrs {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(u64, Attrs)>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((bits, attrs)) if *bits == s.to_bits() => attrs.clone(),
            _ => {
                let attrs = Attrs::new().with("scalar", s);
                *last = Some((s.to_bits(), attrs.clone()));
                attrs
            }
        }
    })
}

macro_rules! binop {
    ($trait:ident, $method:ident, $op:expr, $scalar:expr) => {
        impl $trait<&NDArray> for &NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: &NDArray) -> Result<NDArray> {
                one($op, &[self, rhs], &Attrs::new())
            }
        }
        impl $trait<f64> for &NDArray {
            type Output = Result<NDArray>;
            fn $method(self, rhs: f64) -> Result<NDArray> {
                scalar($scalar, self, rhs)
            }
        }
    };
}

binop!(Add, add, "broadcast_add", "_plus_scalar");
binop!(Sub, sub, "broadcast_sub", "_minus_scalar");
binop!(Mul, mul, "broadcast_mul", "_mul_scalar");
binop!(Div, div, "broadcast_div", "_div_scalar");

impl NDArray {
    /// Runs op `name` with this array as the only input.
    pub fn apply(&self, name: &str, attrs: &Attrs) -> Result<NDArray> {
        one(name, &[self], attrs)
    }

    /// `self += rhs` (broadcasting `rhs`), in this array's own memory.
    pub fn add_inplace(&self, rhs: &NDArray) -> Result<()> {
        invoke(
            op_name!("broadcast_add"),
            &[self, rhs],
            &Attrs::new(),
            Some(&[self]),
        )
        .map(drop)
    }

    /// `self -= rhs`.
    pub fn sub_inplace(&self, rhs: &NDArray) -> Result<()> {
        invoke(
            op_name!("broadcast_sub"),
            &[self, rhs],
            &Attrs::new(),
            Some(&[self]),
        )
        .map(drop)
    }

    /// `self *= rhs`.
    pub fn mul_inplace(&self, rhs: &NDArray) -> Result<()> {
        invoke(
            op_name!("broadcast_mul"),
            &[self, rhs],
            &Attrs::new(),
            Some(&[self]),
        )
        .map(drop)
    }

    /// `self /= rhs`.
    pub fn div_inplace(&self, rhs: &NDArray) -> Result<()> {
        invoke(
            op_name!("broadcast_div"),
            &[self, rhs],
            &Attrs::new(),
            Some(&[self]),
        )
        .map(drop)
    }

    /// `self += s`.
    pub fn add_scalar_inplace(&self, s: f64) -> Result<()> {
        invoke(
            op_name!("_plus_scalar"),
            &[self],
            &scalar_attrs(s),
            Some(&[self]),
        )
        .map(drop)
    }

    /// `self *= s`.
    pub fn mul_scalar_inplace(&self, s: f64) -> Result<()> {
        invoke(
            op_name!("_mul_scalar"),
            &[self],
            &scalar_attrs(s),
            Some(&[self]),
        )
        .map(drop)
    }

    /// Matrix product (see the `dot` op).
    pub fn dot(&self, rhs: &NDArray) -> Result<NDArray> {
        one("dot", &[self, rhs], &Attrs::new())
    }

    /// Sum over `axes` (all when empty).
    pub fn sum(&self, axes: &[i64], keepdims: bool) -> Result<NDArray> {
        self.reduce("sum", axes, keepdims)
    }

    /// Mean over `axes` (all when empty).
    pub fn mean(&self, axes: &[i64], keepdims: bool) -> Result<NDArray> {
        self.reduce("mean", axes, keepdims)
    }

    fn reduce(&self, op: &str, axes: &[i64], keepdims: bool) -> Result<NDArray> {
        let list = axes
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut attrs = Attrs::new().with("keepdims", keepdims);
        if !axes.is_empty() {
            attrs = attrs.with("axis", format!("({list})"));
        }
        self.apply(op, &attrs)
    }
}
