//! The one error type of the crate.
//!
//! Every failure is typed: corruption names the file, the offset and what was expected and
//! found; a store that hit an I/O error is *poisoned* and refuses writes until it is reopened
//! (an `fsync` that failed is never retried and trusted: the kernel may have dropped the dirty
//! pages, see Rebello et al., "Can Applications Recover from fsync Failures?", ATC'20).

use std::fmt;
use std::io;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a sieve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file's content failed a check: the data on disk is damaged, and nothing was guessed.
    #[error("{file}: corrupt at offset {offset}: {what}")]
    Corrupt {
        /// The file name inside the sieve directory.
        file: String,
        /// The byte offset of the damaged structure.
        offset: u64,
        /// What was expected and what was found.
        what: Corruption,
    },
    /// Another process (or another handle in this process) holds the directory's lock.
    #[error("{dir} is locked: another crivello process is using it")]
    Locked {
        /// The directory.
        dir: String,
    },
    /// A URL was refused; nothing was changed.
    #[error("invalid URL: {0}")]
    InvalidUrl(InvalidUrl),
    /// An option value is out of range.
    #[error("invalid {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// An earlier I/O error (fsync failure included), or a panic of a thread while it
    /// changed the store, left the in-memory state unknown: the store refuses further calls
    /// until it is reopened from what is durable.
    #[error(
        "the store stopped after an earlier I/O error (or a thread's panic while it changed \
         the store); reopen it to recover"
    )]
    Poisoned,
    /// The directory exists but holds no sieve, or a sieve of an unknown format version.
    #[error("{dir}: {reason}")]
    NotASieve {
        /// The directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// The store is used the other way: F is read into a frontier's queues where a plain
    /// sieve's reader asked for it, or the reverse. The first reader fixes the mode.
    #[error("{dir} {}", mode_message(*.mode))]
    WrongMode {
        /// The directory.
        dir: String,
        /// How the store is used.
        mode: crate::Mode,
    },
    /// An I/O operation failed.
    #[error("{op} {file}: {source}")]
    Io {
        /// The operation (`"read"`, `"write"`, `"fsync"`, ...).
        op: &'static str,
        /// The file it was applied to.
        file: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Builds a [`Error::Corrupt`].
    pub(crate) fn corrupt(file: &str, offset: u64, what: Corruption) -> Error {
        Error::Corrupt {
            file: file.to_owned(),
            offset,
            what,
        }
    }

    /// The same error, but that damage of `file` said to be at offset 0 (by a check that
    /// knew the file and not the place) is at `offset`.
    pub(crate) fn placed_in(self, file: &str, offset: u64) -> Error {
        match self {
            Error::Corrupt {
                file: f,
                offset: 0,
                what,
            } if f == file => Error::Corrupt {
                file: f,
                offset,
                what,
            },
            e => e,
        }
    }

    /// The same error, its file named as seen from a directory where the store's files
    /// carry `prefix` (the sieve of ids inside a near-duplicate store).
    pub(crate) fn under_prefix(self, prefix: &str) -> Error {
        match self {
            Error::Corrupt { file, offset, what } if !file.starts_with(prefix) => Error::Corrupt {
                file: format!("{prefix}{file}"),
                offset,
                what,
            },
            Error::Io { op, file, source } if !file.is_empty() && !file.starts_with(prefix) => {
                Error::Io {
                    op,
                    file: format!("{prefix}{file}"),
                    source,
                }
            }
            e => e,
        }
    }

    /// Builds a [`Error::Io`].
    pub(crate) fn io(op: &'static str, file: &str, source: io::Error) -> Error {
        Error::Io {
            op,
            file: file.to_owned(),
            source,
        }
    }

    /// Whether the file system refused to store more: no space left on the device, a quota
    /// exceeded, or a read-only file system. [`crate::Sieve::open_read_only`] and
    /// [`crate::Frontier::open_read_only`] still read such a store.
    pub fn is_write_refused(&self) -> bool {
        const ENOSPC: i32 = 28;
        const EROFS: i32 = 30;
        const EDQUOT: i32 = 122;
        match self {
            Error::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(ENOSPC) | Some(EROFS) | Some(EDQUOT)
            ),
            _ => false,
        }
    }

    /// Whether this error reports damaged data (as opposed to a failed operation).
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt { .. })
    }
}

fn mode_message(mode: crate::Mode) -> &'static str {
    match mode {
        crate::Mode::Frontier => {
            "is used as a frontier (lease/done): its URLs go to per-host queues and cannot be \
             popped as a plain sieve's"
        }
        _ => {
            "is used as a plain sieve (pop): its URLs go through the cursor and cannot be \
             leased from a frontier's queues"
        }
    }
}

/// What a corrupt structure looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// A stored crc32 does not match the data.
    Checksum {
        /// The checksum stored in the file.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A file does not start (or end) with its magic number.
    Magic {
        /// The expected magic.
        expected: u32,
        /// What was read.
        found: u32,
    },
    /// The format version is not the one this build reads.
    Version {
        /// The version this build reads.
        expected: u32,
        /// The version read.
        found: u32,
    },
    /// The file ends before a structure it must hold.
    Truncated {
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// Signatures that must be strictly increasing are not.
    OutOfOrder {
        /// The previous signature.
        previous: u64,
        /// The signature that follows it.
        got: u64,
    },
    /// A referenced file is missing.
    Missing,
    /// A field differs from what the file's name, the manifest or the rest of the store
    /// says it must be.
    Mismatch {
        /// The field's name.
        field: &'static str,
        /// The value it must have.
        expected: u64,
        /// The value found.
        found: u64,
    },
    /// A field is at or past its limit.
    OutOfRange {
        /// The field's name.
        field: &'static str,
        /// The value found.
        found: u64,
        /// The value must be below this.
        limit: u64,
    },
    /// A field holds a value that a well-formed file never has.
    Invalid {
        /// The field's name.
        field: &'static str,
        /// What a well-formed file holds there.
        expected: &'static str,
        /// The value found.
        found: u64,
    },
    /// A valid record of a later group commit follows a damaged one, so the damage is not a
    /// torn tail: synced data was changed.
    DamagedBeforeValid {
        /// Offset of the later valid record.
        next_valid: u64,
    },
    /// A log is damaged or cut before the end its last clean close recorded, so the damage
    /// is not a torn tail: synced data was changed.
    DamagedBeforeCleanEnd {
        /// The end recorded at the clean close (0: the log's later generation was recorded,
        /// so this one had to be whole).
        clean_end: u64,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::Checksum { stored, computed } => {
                write!(
                    f,
                    "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            Corruption::Magic { expected, found } => {
                write!(
                    f,
                    "bad magic: expected {expected:#010x}, found {found:#010x}"
                )
            }
            Corruption::Version { expected, found } => {
                write!(
                    f,
                    "format version {found}, this build reads version {expected}"
                )
            }
            Corruption::Truncated { needed, available } => {
                write!(f, "truncated: needs {needed} bytes, {available} available")
            }
            Corruption::OutOfOrder { previous, got } => {
                write!(
                    f,
                    "signatures out of order: {previous:#018x} then {got:#018x}"
                )
            }
            Corruption::Missing => write!(f, "missing: the store needs this file"),
            Corruption::Mismatch {
                field,
                expected,
                found,
            } => write!(f, "{field}: expected {expected}, found {found}"),
            Corruption::OutOfRange {
                field,
                found,
                limit,
            } => write!(
                f,
                "{field}: {found}, out of range (it must be below {limit})"
            ),
            Corruption::Invalid {
                field,
                expected,
                found,
            } => write!(f, "{field}: expected {expected}, found {found}"),
            Corruption::DamagedBeforeValid { next_valid } => write!(
                f,
                "damaged record followed by a valid later commit at offset {next_valid} \
                 (synced data was changed, not a torn write)"
            ),
            Corruption::DamagedBeforeCleanEnd { clean_end: 0 } => write!(
                f,
                "damaged or incomplete, though a later generation was closed cleanly \
                 (synced data was changed, not a torn write)"
            ),
            Corruption::DamagedBeforeCleanEnd { clean_end } => write!(
                f,
                "damaged or cut before offset {clean_end}, where the last clean close ended \
                 it (synced data was changed, not a torn write)"
            ),
        }
    }
}

/// Why a URL was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidUrl {
    /// The URL is empty.
    Empty,
    /// The URL is longer than the configured maximum.
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// Pushed to a frontier without a key, the URL's own key (the text after `://` up to the
    /// first `:`, `/`, `?` or `&`, [`crate::queues::key::default_key`]) is longer than a key
    /// may be: url-frontier's services refuse such a URL too.
    KeyTooLong {
        /// The length of its own key, in bytes.
        len: usize,
        /// The longest key, [`crate::queues::key::MAX_KEY_LEN`].
        max: usize,
    },
    /// The URL holds a newline (`\n`), which no URL may hold (RFC 3986 and the WHATWG URL
    /// standard take none as part of a URL). The command line prints one URL per line, so
    /// a URL holding one would come out of `pop` or `lease` as two lines.
    Newline {
        /// The offset of its first newline.
        at: usize,
    },
}

impl fmt::Display for InvalidUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidUrl::Empty => write!(f, "empty"),
            InvalidUrl::TooLong { len, max } => {
                write!(f, "{len} bytes, longer than the maximum of {max}")
            }
            InvalidUrl::KeyTooLong { len, max } => write!(
                f,
                "its queue's key (the text after :// up to the first :, /, ? or &) is {len} \
                 bytes, longer than the maximum of {max}: give it a key of its own"
            ),
            InvalidUrl::Newline { at } => write!(
                f,
                "it holds a newline (byte {at}), which no URL holds: one URL is one line of \
                 the command line's output"
            ),
        }
    }
}
