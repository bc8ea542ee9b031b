//! Minimal leveled logging to stderr, driven by `SHMEM_LOG_LEVEL` or `RUST_LOG`.
//!
//! A dependency-free logger keeps the core lean; lines carry the PE so that
//! interleaved output of a job can be told apart.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// Failures.
    Error = 1,
    /// Suspicious but survivable events (default).
    Warn = 2,
    /// Start-up decisions such as routing.
    Info = 3,
    /// Protocol steps.
    Debug = 4,
    /// Everything.
    Trace = 5,
}

static LEVEL: AtomicU8 = AtomicU8::new(0);
static PE: AtomicUsize = AtomicUsize::new(usize::MAX);

fn parse_level(text: &str) -> Option<Level> {
    // RUST_LOG may be "crate=debug,info": take the last bare level.
    text.split(',')
        .filter_map(|part| {
            let lvl = part.rsplit('=').next().unwrap_or(part);
            match lvl.trim().to_ascii_lowercase().as_str() {
                "error" => Some(Level::Error),
                "warn" | "warning" => Some(Level::Warn),
                "info" => Some(Level::Info),
                "debug" => Some(Level::Debug),
                "trace" => Some(Level::Trace),
                _ => None,
            }
        })
        .next_back()
}

/// The active level (read from the environment on first use).
pub fn level() -> Level {
    let cur = LEVEL.load(Ordering::Relaxed);
    if cur != 0 {
        // SAFETY: only valid discriminants (1..=5) are ever stored.
        return unsafe { std::mem::transmute::<u8, Level>(cur) };
    }
    let lvl = std::env::var("SHMEM_LOG_LEVEL")
        .ok()
        .and_then(|t| parse_level(&t))
        .or_else(|| std::env::var("RUST_LOG").ok().and_then(|t| parse_level(&t)))
        .unwrap_or(Level::Warn);
    LEVEL.store(lvl as u8, Ordering::Relaxed);
    lvl
}

/// Sets the PE shown in log lines.
pub fn set_pe(pe: usize) {
    PE.store(pe, Ordering::Relaxed);
}

/// Writes one line if `lvl` is enabled.
pub fn emit(lvl: Level, args: std::fmt::Arguments<'_>) {
    if lvl > level() {
        return;
    }
    let pe = PE.load(Ordering::Relaxed);
    let tag = match lvl {
        Level::Error => "ERROR",
        Level::Warn => "WARN",
        Level::Info => "INFO",
        Level::Debug => "DEBUG",
        Level::Trace => "TRACE",
    };
    if pe == usize::MAX {
        write_line(&format!("[shmem {tag} pid {}] {args}", std::process::id()));
    } else {
        write_line(&format!("[shmem {tag} PE {pe}] {args}"));
    }
}

/// Writes `line` and a newline to stderr in one `write` call, so that the
/// lines of several PEs sharing a terminal, pipe or file never interleave
/// (`eprintln!` writes each formatted piece separately).
pub fn write_line(line: &str) {
    use std::io::Write;
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    let _ = std::io::stderr().lock().write_all(&buf);
}

/// Logs at a level: `shmem_log!(Info, "routing {x}")`.
#[macro_export]
macro_rules! shmem_log {
    ($lvl:ident, $($arg:tt)*) => {
        $crate::log::emit($crate::log::Level::$lvl, format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(parse_level("debug"), Some(Level::Debug));
        assert_eq!(parse_level("shmem=trace,info"), Some(Level::Info));
        assert_eq!(parse_level("nonsense"), None);
    }
}
