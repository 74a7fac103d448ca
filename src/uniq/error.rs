//! The errors of `uniq`: its inputs' and its output's, apart from the scratch store's.

use std::io;

/// What can go wrong in a [`super::Uniq`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input changed while it was being read: the lines read again to be printed are not
    /// the lines read first.
    #[error("{file} changed while it was being read")]
    InputChanged {
        /// The input's name.
        file: String,
    },
    /// A line of an input is longer than the maximum.
    #[error("{file}: line {line}: longer than the maximum of {max} bytes")]
    LineTooLong {
        /// The input's name.
        file: String,
        /// The line's 1-based number in its input.
        line: u64,
        /// The maximum, in bytes without the "\n".
        max: usize,
    },
    /// An input could not be opened or read.
    #[error("{op} {file}: {source}")]
    Input {
        /// The operation (`"open"`, `"read"`, `"stat"`, ...).
        op: &'static str,
        /// The input's name.
        file: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The output could not be written.
    #[error("write <output>: {0}")]
    Output(#[source] io::Error),
    /// The scratch store (runs, segments, spool files) failed.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// An earlier error stopped the dedup: it cannot go on.
    #[error("the dedup stopped at an earlier error")]
    Stopped,
}

/// A `Result` whose error is a `uniq` [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of operation `op` on input `file`.
    pub(crate) fn input(op: &'static str, file: &str, source: io::Error) -> Error {
        Error::Input {
            op,
            file: file.to_owned(),
            source,
        }
    }
}
