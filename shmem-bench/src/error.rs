//! The one error type of the benchmark tool.

use std::path::PathBuf;

/// What can go wrong in a benchmark run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// Bad command line (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// The library failed inside a PE.
    #[error(transparent)]
    Shmem(#[from] shmem::Error),
    /// A file could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done (`"writing"`, `"reading"`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A PE job failed or produced no results.
    #[error("{0}")]
    Job(String),
    /// The PNG could not be drawn.
    #[error("plot {}: {message}", path.display())]
    Plot {
        /// The PNG file.
        path: PathBuf,
        /// What plotters said.
        message: String,
    },
}

impl BenchError {
    /// A usage error with `message`.
    pub fn usage(message: impl Into<String>) -> BenchError {
        BenchError::Usage(message.into())
    }

    /// Wraps an I/O error on `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Result of the benchmark tool.
pub type Result<T> = std::result::Result<T, BenchError>;
