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
