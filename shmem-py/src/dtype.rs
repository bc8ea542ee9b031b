//! Element types as Python sees them (numpy / torch dtype names and buffer
//! format characters) and dispatch from a runtime dtype to a Rust type.

/// An element type the bindings understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dtype {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl Dtype {
    /// Size in bytes.
    pub(crate) fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::I8 | Dtype::U8 => 1,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    /// numpy's name for it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "bool",
            Dtype::I8 => "int8",
            Dtype::U8 => "uint8",
            Dtype::I16 => "int16",
            Dtype::U16 => "uint16",
            Dtype::I32 => "int32",
            Dtype::U32 => "uint32",
            Dtype::I64 => "int64",
            Dtype::U64 => "uint64",
            Dtype::F16 => "float16",
            Dtype::BF16 => "bfloat16",
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
        }
    }

    /// From a numpy or torch dtype name (`"int32"`, `"torch.float32"`, `"float"`).
    pub(crate) fn from_name(name: &str) -> Option<Dtype> {
        let n = name.trim();
        let n = n.strip_prefix("torch.").unwrap_or(n);
        Some(match n {
            "bool" => Dtype::Bool,
            "int8" => Dtype::I8,
            "uint8" => Dtype::U8,
            "int16" | "short" => Dtype::I16,
            "uint16" => Dtype::U16,
            "int32" | "int" => Dtype::I32,
            "uint32" => Dtype::U32,
            "int64" | "long" => Dtype::I64,
            "uint64" => Dtype::U64,
            "float16" | "half" => Dtype::F16,
            "bfloat16" => Dtype::BF16,
            "float32" | "float" => Dtype::F32,
            "float64" | "double" => Dtype::F64,
            _ => return None,
        })
    }

    /// From a buffer-protocol format string (`"f"`, `"<i8"`, `"=q"`), for
    /// native or little-endian byte order (this library runs on little-endian
    /// Linux).
    pub(crate) fn from_format(format: &str) -> Option<Dtype> {
        let f = format.strip_prefix(['@', '=', '<']).unwrap_or(format);
        Some(match f {
            "?" => Dtype::Bool,
            "b" => Dtype::I8,
            "B" | "c" => Dtype::U8,
            "h" => Dtype::I16,
            "H" => Dtype::U16,
            "i" => Dtype::I32,
            "I" => Dtype::U32,
            "l" | "q" | "n" => Dtype::I64,
            "L" | "Q" | "N" => Dtype::U64,
            "e" => Dtype::F16,
            "f" => Dtype::F32,
            "d" => Dtype::F64,
            _ => return None,
        })
    }
}

/// Runs `$body` with `$T` bound to the Rust type of a numeric dtype
/// (integers and f32/f64); `$other` for the rest.
macro_rules! with_numeric {
    ($dt:expr, $T:ident => $body:expr, $other:expr) => {
        match $dt {
            $crate::dtype::Dtype::I8 => {
                type $T = i8;
                $body
            }
            $crate::dtype::Dtype::U8 => {
                type $T = u8;
                $body
            }
            $crate::dtype::Dtype::I16 => {
                type $T = i16;
                $body
            }
            $crate::dtype::Dtype::U16 => {
                type $T = u16;
                $body
            }
            $crate::dtype::Dtype::I32 => {
                type $T = i32;
                $body
            }
            $crate::dtype::Dtype::U32 => {
                type $T = u32;
                $body
            }
            $crate::dtype::Dtype::I64 => {
                type $T = i64;
                $body
            }
            $crate::dtype::Dtype::U64 => {
                type $T = u64;
                $body
            }
            $crate::dtype::Dtype::F32 => {
                type $T = f32;
                $body
            }
            $crate::dtype::Dtype::F64 => {
                type $T = f64;
                $body
            }
            _ => $other,
        }
    };
}

/// Runs `$body` with `$T` bound to an unsigned integer of `$size` bytes
/// (for collectives that only copy elements); `$other` for other sizes.
macro_rules! with_width {
    ($size:expr, $T:ident => $body:expr, $other:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            16 => {
                type $T = u128;
                $body
            }
            _ => $other,
        }
    };
}

/// Runs `$body` with `$T` bound to a type that `wait_until`/`test` watch
/// (16-, 32- and 64-bit integers); `$other` for the rest.
macro_rules! with_wait {
    ($dt:expr, $T:ident => $body:expr, $other:expr) => {
        match $dt {
            $crate::dtype::Dtype::I16 => {
                type $T = i16;
                $body
            }
            $crate::dtype::Dtype::U16 => {
                type $T = u16;
                $body
            }
            $crate::dtype::Dtype::I32 => {
                type $T = i32;
                $body
            }
            $crate::dtype::Dtype::U32 => {
                type $T = u32;
                $body
            }
            $crate::dtype::Dtype::I64 => {
                type $T = i64;
                $body
            }
            $crate::dtype::Dtype::U64 => {
                type $T = u64;
                $body
            }
            _ => $other,
        }
    };
}

pub(crate) use {with_numeric, with_wait, with_width};

/// A number extracted from a Python object (ints and floats by value).
pub(crate) trait PyNum: Sized {
    fn extract_num(v: &pyo3::Bound<'_, pyo3::PyAny>) -> pyo3::PyResult<Self>;
}

macro_rules! py_num {
    ($($t:ty),*) => { $(
        impl PyNum for $t {
            fn extract_num(v: &pyo3::Bound<'_, pyo3::PyAny>) -> pyo3::PyResult<Self> {
                pyo3::types::PyAnyMethods::extract::<$t>(v)
            }
        }
    )* };
}
py_num!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

/// Element types of torch dtype objects seen so far, by object address
/// (torch dtypes are immortal singletons): the hot path skips `str()`.
static TORCH_DTYPES: std::sync::Mutex<Vec<(usize, Option<Dtype>, usize)>> =
    std::sync::Mutex::new(Vec::new());

/// The element type of a torch dtype object (None for types this package
/// does not compute with, like complex) and its size in bytes.
pub(crate) fn torch_dtype(
    dt: &pyo3::Bound<'_, pyo3::PyAny>,
) -> pyo3::PyResult<(Option<Dtype>, usize)> {
    use pyo3::types::PyAnyMethods;
    let key = dt.as_ptr() as usize;
    {
        let cache = TORCH_DTYPES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, d, size)) = cache.iter().find(|(k, _, _)| *k == key) {
            return Ok((*d, *size));
        }
    }
    let name: String = dt.str()?.extract()?;
    let size: usize = dt.getattr("itemsize")?.extract()?;
    // Keep the dtype alive for good, so its address is never reused.
    std::mem::forget(dt.clone().unbind());
    let d = Dtype::from_name(&name);
    TORCH_DTYPES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((key, d, size));
    Ok((d, size))
}
