//! Leveled logging through [`tracing`], driven by `SHMEM_LOG_LEVEL` or
//! `RUST_LOG`.
//!
//! Every log line of the library goes through [`shmem_log!`](crate::shmem_log),
//! which emits a `tracing` event at the call site (so `RUST_LOG` directives
//! such as `shmem_bootstrap=debug` select by module). A program with a
//! subscriber of its own receives the events; without one, the library's
//! own subscriber (never installed as the global default, so the program
//! may still install one later) writes each event as one line on stderr,
//! tagged with the PE so that the interleaved output of a job can be told
//! apart:
//!
//! ```text
//! [shmem WARN PE 3] config store: rejected 10.0.0.7:51234: wrong job secret
//! ```
//!
//! `SHMEM_LOG_LEVEL` takes a level (`error`, `warn`, `info`, `debug`,
//! `trace`) or a `tracing` filter directive (`shmem_bootstrap=debug,warn`);
//! without it `RUST_LOG` is read the same way, and the default is `warn`.
//! What the library *prints* on purpose (hang reports, the `SHMEM_INFO`
//! table) is output, not logging, and goes through [`write_line`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

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

static PE: AtomicUsize = AtomicUsize::new(usize::MAX);
static DISPATCH: OnceLock<Dispatch> = OnceLock::new();

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

/// The filter for `SHMEM_LOG_LEVEL` = `shmem` and `RUST_LOG` = `rust`: the
/// first that is a level or a valid directive with a level in it, else
/// `warn`.
fn filter_from(shmem: Option<&str>, rust: Option<&str>) -> EnvFilter {
    let parse = |text: &str| -> Option<EnvFilter> {
        let text = text.trim();
        parse_level(text)?;
        // "warning" is our spelling; tracing knows "warn".
        let text = text.replace("warning", "warn");
        EnvFilter::builder().parse(text).ok()
    };
    shmem
        .and_then(parse)
        .or_else(|| rust.and_then(parse))
        .unwrap_or_else(|| EnvFilter::new("warn"))
}

/// The most verbose level the environment enables (`SHMEM_LOG_LEVEL`,
/// else `RUST_LOG`, else warn).
pub fn level() -> Level {
    let shmem = std::env::var("SHMEM_LOG_LEVEL").ok();
    let rust = std::env::var("RUST_LOG").ok();
    let f = filter_from(shmem.as_deref(), rust.as_deref());
    match f.max_level_hint() {
        Some(l) if l >= tracing::level_filters::LevelFilter::TRACE => Level::Trace,
        Some(l) if l >= tracing::level_filters::LevelFilter::DEBUG => Level::Debug,
        Some(l) if l >= tracing::level_filters::LevelFilter::INFO => Level::Info,
        Some(l) if l >= tracing::level_filters::LevelFilter::WARN => Level::Warn,
        Some(_) => Level::Error,
        None => Level::Trace,
    }
}

/// Sets the PE shown in log lines.
pub fn set_pe(pe: usize) {
    PE.store(pe, Ordering::Relaxed);
}

/// Writes `[shmem LEVEL PE n] message fields`.
struct LineFormat;

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let tag = match *event.metadata().level() {
            tracing::Level::ERROR => "ERROR",
            tracing::Level::WARN => "WARN",
            tracing::Level::INFO => "INFO",
            tracing::Level::DEBUG => "DEBUG",
            _ => "TRACE",
        };
        match PE.load(Ordering::Relaxed) {
            usize::MAX => write!(writer, "[shmem {tag} pid {}] ", std::process::id())?,
            pe => write!(writer, "[shmem {tag} PE {pe}] ")?,
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The library's default subscriber: `filter`, one line per event into
/// `writer` (each line is written with one `write`, so the lines of several
/// PEs sharing a terminal, pipe or file never interleave).
fn subscriber<W>(filter: EnvFilter, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .event_format(LineFormat)
        .finish()
}

/// Runs `f` (which emits an event) with the program's subscriber, or,
/// where the program has none, with the library's stderr subscriber
/// (built on first use from `SHMEM_LOG_LEVEL` / `RUST_LOG`).
/// [`shmem_log!`](crate::shmem_log) wraps every event in it.
#[inline]
pub fn dispatch<R>(f: impl FnOnce() -> R) -> R {
    let none = tracing::dispatcher::get_default(|d| d.is::<tracing::subscriber::NoSubscriber>());
    if !none {
        return f();
    }
    let d = DISPATCH.get_or_init(|| {
        let shmem = std::env::var("SHMEM_LOG_LEVEL").ok();
        let rust = std::env::var("RUST_LOG").ok();
        Dispatch::new(subscriber(
            filter_from(shmem.as_deref(), rust.as_deref()),
            std::io::stderr,
        ))
    });
    tracing::dispatcher::with_default(d, f)
}

/// Logs one line at `lvl` (what [`shmem_log!`](crate::shmem_log) does, for
/// callers that hold a level value rather than a name).
pub fn emit(lvl: Level, args: std::fmt::Arguments<'_>) {
    dispatch(|| match lvl {
        Level::Error => tracing::error!("{args}"),
        Level::Warn => tracing::warn!("{args}"),
        Level::Info => tracing::info!("{args}"),
        Level::Debug => tracing::debug!("{args}"),
        Level::Trace => tracing::trace!("{args}"),
    })
}

/// Writes `line` and a newline to stderr in one `write` call, so that the
/// lines of several PEs sharing a terminal, pipe or file never interleave
/// (`eprintln!` writes each formatted piece separately). For output the
/// library prints on purpose (reports, tables), not for logging.
pub fn write_line(line: &str) {
    use std::io::Write;
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    let _ = std::io::stderr().lock().write_all(&buf);
}

/// Logs at a level: `shmem_log!(Info, "routing {x}")`. A `tracing` event at
/// the call site (its module is the event's target).
#[macro_export]
macro_rules! shmem_log {
    (Error, $($arg:tt)*) => { $crate::log::dispatch(|| $crate::tracing::error!($($arg)*)) };
    (Warn, $($arg:tt)*) => { $crate::log::dispatch(|| $crate::tracing::warn!($($arg)*)) };
    (Info, $($arg:tt)*) => { $crate::log::dispatch(|| $crate::tracing::info!($($arg)*)) };
    (Debug, $($arg:tt)*) => { $crate::log::dispatch(|| $crate::tracing::debug!($($arg)*)) };
    (Trace, $($arg:tt)*) => { $crate::log::dispatch(|| $crate::tracing::trace!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn levels_parse() {
        assert_eq!(parse_level("debug"), Some(Level::Debug));
        assert_eq!(parse_level("shmem=trace,info"), Some(Level::Info));
        assert_eq!(parse_level("nonsense"), None);
    }

    #[test]
    fn shmem_log_level_wins_over_rust_log_and_warn_is_the_default() {
        use tracing::level_filters::LevelFilter;
        let max = |s: Option<&str>, r: Option<&str>| filter_from(s, r).max_level_hint();
        assert_eq!(max(Some("debug"), Some("error")), Some(LevelFilter::DEBUG));
        assert_eq!(max(None, Some("info")), Some(LevelFilter::INFO));
        assert_eq!(max(Some("warning"), None), Some(LevelFilter::WARN));
        assert_eq!(
            max(None, Some("shmem_bootstrap=trace,warn")),
            Some(LevelFilter::TRACE)
        );
        // Garbage falls through to the next source, then to warn.
        assert_eq!(max(Some("nonsense"), Some("info")), Some(LevelFilter::INFO));
        assert_eq!(max(Some("loud"), None), Some(LevelFilter::WARN));
        assert_eq!(max(None, None), Some(LevelFilter::WARN));
    }

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'w> MakeWriter<'w> for Buf {
        type Writer = Buf;
        fn make_writer(&'w self) -> Buf {
            self.clone()
        }
    }

    #[test]
    fn lines_carry_the_level_and_the_pe_and_the_filter_applies() {
        let buf = Buf::default();
        let s = subscriber(filter_from(Some("info"), None), buf.clone());
        tracing::subscriber::with_default(s, || {
            let x = 7;
            crate::shmem_log!(Warn, "routes {x} and {}", "more");
            crate::shmem_log!(Debug, "filtered out");
            emit(Level::Info, format_args!("via emit"));
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        // Other tests may have set the PE of this process.
        assert!(lines[0].starts_with("[shmem WARN "), "{text}");
        assert!(lines[0].ends_with("] routes 7 and more"), "{text}");
        assert!(lines[1].starts_with("[shmem INFO "), "{text}");
        assert!(lines[1].ends_with("] via emit"), "{text}");
    }

    #[test]
    fn without_a_subscriber_of_the_programs_the_librarys_own_is_used() {
        // No global default is ever installed by the library, so the
        // program can still install its own after the library has logged.
        crate::shmem_log!(Trace, "not shown at the default level");
        let ours = dispatch(|| {
            tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>())
        });
        assert!(ours);
        assert!(tracing::dispatcher::get_default(|d| {
            d.is::<tracing::subscriber::NoSubscriber>()
        }));
    }
}
