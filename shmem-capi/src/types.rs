//! Element types C has and Rust lacks: `long double` (arithmetic done by
//! `csrc/longdouble.c`, compiled by the C compiler) and `float _Complex` /
//! `double _Complex` (pairs of floats), with what reductions need of them.

use std::cmp::Ordering;
use std::ffi::c_int;

use shmem::collectives::{ReduceOp, Reducible};
use shmem::{Element, Error, Result};

extern "C" {
    fn shmemrs_longdouble_combine(op: c_int, acc: *mut LongDouble, x: *const LongDouble, n: usize);
    fn shmemrs_longdouble_cmp(a: *const LongDouble, b: *const LongDouble) -> c_int;
    fn shmemrs_longdouble_identity(op: c_int, out: *mut LongDouble);
}

/// C's `long double` as bytes (16 bytes, 16-byte aligned, as on x86_64 and
/// aarch64 Linux); only the C helper interprets them.
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct LongDouble(pub(crate) [u8; 16]);

// SAFETY: plain bytes: every bit pattern is a valid value, no pointers.
unsafe impl Element for LongDouble {}

fn op_code(op: ReduceOp) -> Result<c_int> {
    Ok(match op {
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
        ReduceOp::Sum => 5,
        ReduceOp::Prod => 6,
        ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => {
            return Err(Error::invalid(
                "op",
                format!("`{}` reduction needs an integer type", op.name()),
            ))
        }
    })
}

impl PartialEq for LongDouble {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for LongDouble {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        // SAFETY: both point to valid 16-byte long doubles.
        match unsafe { shmemrs_longdouble_cmp(self, other) } {
            -1 => Some(Ordering::Less),
            0 => Some(Ordering::Equal),
            1 => Some(Ordering::Greater),
            _ => None,
        }
    }
}

impl Reducible for LongDouble {
    const BITWISE: bool = false;
    fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) -> Result<()> {
        let code = op_code(op)?;
        let n = acc.len().min(other.len());
        // SAFETY: both slices hold at least `n` long doubles.
        unsafe { shmemrs_longdouble_combine(code, acc.as_mut_ptr(), other.as_ptr(), n) };
        Ok(())
    }
    fn identity(op: ReduceOp) -> Self {
        let mut out = LongDouble([0; 16]);
        // An invalid (bitwise) operator is refused by `combine`; 0 here.
        let code = op_code(op).unwrap_or(5);
        // SAFETY: `out` is a valid, aligned long double slot.
        unsafe { shmemrs_longdouble_identity(code, &mut out) };
        out
    }
}

macro_rules! complex {
    ($name:ident, $f:ty) => {
        /// C's complex type of this float: real and imaginary parts.
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub(crate) struct $name(pub(crate) [$f; 2]);

        // SAFETY: two floats: every bit pattern is valid, no pointers.
        unsafe impl Element for $name {}

        /// Complex numbers are not ordered: only equal values compare.
        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                (self == other).then_some(Ordering::Equal)
            }
        }

        impl Reducible for $name {
            const BITWISE: bool = false;
            fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) -> Result<()> {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::Sum => pairs.for_each(|(a, b)| {
                        a.0[0] += b.0[0];
                        a.0[1] += b.0[1];
                    }),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| {
                        let (x, y) = (a.0[0], a.0[1]);
                        let (u, v) = (b.0[0], b.0[1]);
                        a.0 = [x * u - y * v, x * v + y * u];
                    }),
                    _ => {
                        return Err(Error::invalid(
                            "op",
                            format!(
                                "`{}` reduction is not defined on complex numbers",
                                op.name()
                            ),
                        ))
                    }
                }
                Ok(())
            }
            fn identity(op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Prod => $name([1.0, 0.0]),
                    _ => $name([0.0, 0.0]),
                }
            }
        }
    };
}
complex!(ComplexF, f32);
complex!(ComplexD, f64);

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn shmemrs_longdouble_to_double(a: *const LongDouble) -> f64;
    }

    fn ld(v: f64) -> LongDouble {
        // 1.0 and friends through the C side: identity(prod) is 1, sums build others.
        let one = LongDouble::identity(ReduceOp::Prod);
        let mut acc = [LongDouble::identity(ReduceOp::Sum)];
        for _ in 0..v as usize {
            LongDouble::combine(ReduceOp::Sum, &mut acc, &[one]).unwrap();
        }
        acc[0]
    }

    fn val(x: &LongDouble) -> f64 {
        // SAFETY: a valid long double.
        unsafe { shmemrs_longdouble_to_double(x) }
    }

    #[test]
    fn long_double_operators() {
        let (two, three) = (ld(2.0), ld(3.0));
        let mut a = [two, three];
        LongDouble::combine(ReduceOp::Prod, &mut a, &[three, three]).unwrap();
        assert_eq!((val(&a[0]), val(&a[1])), (6.0, 9.0));
        LongDouble::combine(ReduceOp::Min, &mut a, &[three, three]).unwrap();
        assert_eq!((val(&a[0]), val(&a[1])), (3.0, 3.0));
        LongDouble::combine(ReduceOp::Max, &mut a, &[two, ld(5.0)]).unwrap();
        assert_eq!((val(&a[0]), val(&a[1])), (3.0, 5.0));
        assert!(two < three && two == ld(2.0));
        assert!(LongDouble::combine(ReduceOp::And, &mut a, &[two, two]).is_err());
        assert!(val(&LongDouble::identity(ReduceOp::Min)).is_infinite());
    }

    #[test]
    fn complex_operators() {
        let mut a = [ComplexD([1.0, 2.0])];
        ComplexD::combine(ReduceOp::Prod, &mut a, &[ComplexD([3.0, -1.0])]).unwrap();
        assert_eq!(a[0], ComplexD([5.0, 5.0]));
        ComplexD::combine(ReduceOp::Sum, &mut a, &[ComplexD([-5.0, 1.0])]).unwrap();
        assert_eq!(a[0], ComplexD([0.0, 6.0]));
        assert!(ComplexF::combine(
            ReduceOp::Max,
            &mut [ComplexF([0.0; 2])],
            &[ComplexF([1.0; 2])]
        )
        .is_err());
        assert_eq!(ComplexF::identity(ReduceOp::Prod), ComplexF([1.0, 0.0]));
    }
}
