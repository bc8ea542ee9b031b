//! Reduction operators ([`ReduceOp`], [`ScanKind`]) and the element types
//! they apply to ([`Reducible`], [`BitwiseReducible`]): the vocabulary the
//! reduction algorithms (`reduce`, `direct`) share.

use shmem_core::{Element, Error, Result};

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Bitwise and (integers only).
    And,
    /// Bitwise or (integers only).
    Or,
    /// Bitwise exclusive or (integers only).
    Xor,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 7] = [
        ReduceOp::And,
        ReduceOp::Or,
        ReduceOp::Xor,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Sum,
        ReduceOp::Prod,
    ];

    /// Lower-case name, as in `shmem_int_sum_reduce`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::And => "and",
            ReduceOp::Or => "or",
            ReduceOp::Xor => "xor",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
        }
    }

    /// Whether the operator is bitwise (and, or, xor).
    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::And | ReduceOp::Or | ReduceOp::Xor)
    }
}

/// A numeric element that reductions accept: min, max, sum and prod for
/// every integer and float type; and, or and xor for integers
/// ([`BitwiseReducible`]).
pub trait Reducible: Element + PartialOrd {
    /// Whether and/or/xor apply.
    const BITWISE: bool;
    /// `acc[i] = acc[i] op other[i]`; bitwise operators on floats are an
    /// error.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bitwise `op` on a float type.
    fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) -> Result<()>;
    /// `out[i] = a[i] op b[i]`: one pass where a copy and a combine took
    /// two (reductions that read their operands in peers' memory).
    ///
    /// # Errors
    /// As [`Reducible::combine`].
    fn combine_into(op: ReduceOp, out: &mut [Self], a: &[Self], b: &[Self]) -> Result<()> {
        out.copy_from_slice(a);
        Self::combine(op, out, b)
    }
    /// `acc[i] = other[i] op acc[i]`: [`Reducible::combine`] with the
    /// operands in the other order (results stay bit-identical to a
    /// left-to-right fold even where an operator is not, e.g. the sign of
    /// a zero from a float `min`).
    ///
    /// # Errors
    /// As [`Reducible::combine`].
    fn combine_rev(op: ReduceOp, acc: &mut [Self], other: &[Self]) -> Result<()> {
        let mut t = other.to_vec();
        Self::combine(op, &mut t, acc)?;
        acc.copy_from_slice(&t);
        Ok(())
    }
    /// The value `x` with `identity op x == x` (what PE 0 gets from an
    /// exclusive scan).
    fn identity(op: ReduceOp) -> Self;
}

/// An integer element: bitwise reductions apply too.
pub trait BitwiseReducible: Reducible {}

pub(crate) fn bitwise_on_float(op: ReduceOp) -> Error {
    Error::invalid(
        "op",
        format!(
            "`{}` reduction needs an integer type, not a float",
            op.name()
        ),
    )
}

macro_rules! int_reducible {
    ($($t:ty),*) => { $(
        impl Reducible for $t {
            const BITWISE: bool = true;
            fn combine(op: ReduceOp, acc: &mut [$t], other: &[$t]) -> Result<()> {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::And => pairs.for_each(|(a, b)| *a &= *b),
                    ReduceOp::Or => pairs.for_each(|(a, b)| *a |= *b),
                    ReduceOp::Xor => pairs.for_each(|(a, b)| *a ^= *b),
                    ReduceOp::Min => pairs.for_each(|(a, b)| *a = (*a).min(*b)),
                    ReduceOp::Max => pairs.for_each(|(a, b)| *a = (*a).max(*b)),
                    ReduceOp::Sum => pairs.for_each(|(a, b)| *a = a.wrapping_add(*b)),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| *a = a.wrapping_mul(*b)),
                }
                Ok(())
            }
            fn combine_into(op: ReduceOp, out: &mut [$t], a: &[$t], b: &[$t]) -> Result<()> {
                let it = out.iter_mut().zip(a.iter().zip(b));
                match op {
                    ReduceOp::And => it.for_each(|(o, (a, b))| *o = *a & *b),
                    ReduceOp::Or => it.for_each(|(o, (a, b))| *o = *a | *b),
                    ReduceOp::Xor => it.for_each(|(o, (a, b))| *o = *a ^ *b),
                    ReduceOp::Min => it.for_each(|(o, (a, b))| *o = (*a).min(*b)),
                    ReduceOp::Max => it.for_each(|(o, (a, b))| *o = (*a).max(*b)),
                    ReduceOp::Sum => it.for_each(|(o, (a, b))| *o = a.wrapping_add(*b)),
                    ReduceOp::Prod => it.for_each(|(o, (a, b))| *o = a.wrapping_mul(*b)),
                }
                Ok(())
            }
            fn combine_rev(op: ReduceOp, acc: &mut [$t], other: &[$t]) -> Result<()> {
                // Integer operators are commutative: the order changes nothing.
                Self::combine(op, acc, other)
            }
            fn identity(op: ReduceOp) -> $t {
                match op {
                    ReduceOp::And | ReduceOp::Min => <$t>::MAX,
                    ReduceOp::Max => <$t>::MIN,
                    ReduceOp::Or | ReduceOp::Xor | ReduceOp::Sum => 0,
                    ReduceOp::Prod => 1,
                }
            }
        }
        impl BitwiseReducible for $t {}
    )* };
}
int_reducible!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! float_reducible {
    ($($t:ty),*) => { $(
        impl Reducible for $t {
            const BITWISE: bool = false;
            fn combine(op: ReduceOp, acc: &mut [$t], other: &[$t]) -> Result<()> {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::Min => pairs.for_each(|(a, b)| *a = a.min(*b)),
                    ReduceOp::Max => pairs.for_each(|(a, b)| *a = a.max(*b)),
                    ReduceOp::Sum => pairs.for_each(|(a, b)| *a += *b),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| *a *= *b),
                    ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => return Err(bitwise_on_float(op)),
                }
                Ok(())
            }
            fn combine_into(op: ReduceOp, out: &mut [$t], a: &[$t], b: &[$t]) -> Result<()> {
                let it = out.iter_mut().zip(a.iter().zip(b));
                match op {
                    ReduceOp::Min => it.for_each(|(o, (a, b))| *o = a.min(*b)),
                    ReduceOp::Max => it.for_each(|(o, (a, b))| *o = a.max(*b)),
                    ReduceOp::Sum => it.for_each(|(o, (a, b))| *o = *a + *b),
                    ReduceOp::Prod => it.for_each(|(o, (a, b))| *o = *a * *b),
                    ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => return Err(bitwise_on_float(op)),
                }
                Ok(())
            }
            // `b + a`, not `a += b`: with two NaN operands the result's
            // payload is the first one's on x86.
            #[allow(clippy::assign_op_pattern)]
            fn combine_rev(op: ReduceOp, acc: &mut [$t], other: &[$t]) -> Result<()> {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::Min => pairs.for_each(|(a, b)| *a = b.min(*a)),
                    ReduceOp::Max => pairs.for_each(|(a, b)| *a = b.max(*a)),
                    ReduceOp::Sum => pairs.for_each(|(a, b)| *a = *b + *a),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| *a = *b * *a),
                    ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => return Err(bitwise_on_float(op)),
                }
                Ok(())
            }
            fn identity(op: ReduceOp) -> $t {
                match op {
                    ReduceOp::Min => <$t>::INFINITY,
                    ReduceOp::Max => <$t>::NEG_INFINITY,
                    ReduceOp::Prod => 1.0,
                    _ => 0.0,
                }
            }
        }
    )* };
}
float_reducible!(f32, f64);

/// Whether a scan includes the PE's own contribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// PE i gets `x_0 op ... op x_i`.
    Inclusive,
    /// PE i gets `x_0 op ... op x_(i-1)`; PE 0 gets the operator's identity.
    Exclusive,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `combine_into` and `combine_rev` give exactly what a left-to-right
    /// `combine` gives, for every operator (bit patterns, so signed zeros
    /// and NaNs count).
    #[test]
    fn one_pass_combines_match_the_left_fold() {
        let a = [1.5f64, -0.0, 0.0, f64::NAN, 3.0, -7.25, f64::INFINITY, 2.0];
        let b = [0.25f64, 0.0, -0.0, 1.0, f64::NAN, 7.25, -1.0, -0.0];
        for op in [ReduceOp::Min, ReduceOp::Max, ReduceOp::Sum, ReduceOp::Prod] {
            let mut want = a;
            f64::combine(op, &mut want, &b).unwrap();
            let mut into = [9.0f64; 8];
            f64::combine_into(op, &mut into, &a, &b).unwrap();
            let mut rev = b;
            f64::combine_rev(op, &mut rev, &a).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&into), bits(&want), "{op:?} into");
            assert_eq!(bits(&rev), bits(&want), "{op:?} rev");
        }
        let (a, b) = ([3u32, 0, u32::MAX, 12], [5u32, 7, 2, 12]);
        for op in ReduceOp::ALL {
            let mut want = a;
            u32::combine(op, &mut want, &b).unwrap();
            let mut into = [0u32; 4];
            u32::combine_into(op, &mut into, &a, &b).unwrap();
            let mut rev = b;
            u32::combine_rev(op, &mut rev, &a).unwrap();
            assert_eq!((into, rev), (want, want), "{op:?}");
        }
        let mut out = [0.0f32; 1];
        assert!(f32::combine_into(ReduceOp::Xor, &mut out, &[1.0], &[2.0]).is_err());
        assert!(f32::combine_rev(ReduceOp::And, &mut out, &[1.0]).is_err());
    }
}
