//! The inputs of `uniq`, and where their lines are read again to be printed.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{Error, Result};

/// An input to read: a file by its path, a regular file already open, or any reader.
pub struct Input {
    pub(super) name: String,
    pub(super) kind: Kind,
}

pub(super) enum Kind {
    Path(PathBuf),
    Handle(File),
    Stream(Box<dyn Read + Send>),
}

impl Input {
    /// The file at `path`, opened when it is read. A regular file is read again by its
    /// path to print its lines; anything else (a named pipe, a device) is spooled.
    pub fn path(path: impl AsRef<Path>) -> Input {
        let path = path.as_ref();
        Input {
            name: path.display().to_string(),
            kind: Kind::Path(path.to_owned()),
        }
    }

    /// An open file named `name` in messages, read from its current offset. A regular file
    /// is read again through the handle; anything else is spooled.
    pub fn file(name: impl Into<String>, file: File) -> Input {
        Input {
            name: name.into(),
            kind: Kind::Handle(file),
        }
    }

    /// Any reader, named `name` in messages: its bytes are spooled to the storage as they
    /// are read.
    pub fn reader(name: impl Into<String>, reader: impl Read + Send + 'static) -> Input {
        Input {
            name: name.into(),
            kind: Kind::Stream(Box::new(reader)),
        }
    }
}

/// Where the lines of an input are read again.
pub(super) enum Origin {
    /// A regular file, opened again by its path; its device and inode must not change.
    Path { path: PathBuf, dev: u64, ino: u64 },
    /// A regular file kept open.
    Handle(File),
    /// The spool file that copies a stream, in the storage.
    Spool(crate::storage::File),
}

/// What the metadata of a regular file said once it was read to its end: its size and the
/// time of its last change (which every write sets, and no one can set back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: meta.len(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// An input read so far, as its batches see it.
pub(super) struct Source {
    pub(super) name: String,
    pub(super) origin: Origin,
    /// A regular file's stamp, once it was read to its end.
    pub(super) stamp: std::sync::OnceLock<Stamp>,
}

impl Source {
    pub(super) fn changed(&self) -> Error {
        Error::InputChanged {
            file: self.name.clone(),
        }
    }

    /// The stamp of the file first read, now: `Ok(None)` for a spool, `Err` when its path
    /// names another file or its metadata cannot be read.
    pub(super) fn stamp_now(&self) -> std::result::Result<Option<Stamp>, ()> {
        let meta = match &self.origin {
            Origin::Path { path, dev, ino } => match std::fs::metadata(path) {
                Ok(m) if m.dev() == *dev && m.ino() == *ino => m,
                _ => return Err(()),
            },
            Origin::Handle(file) => file.metadata().map_err(|_| ())?,
            Origin::Spool(_) => return Ok(None),
        };
        Ok(Some(Stamp::of(&meta)))
    }

    /// Records the stamp of a regular file read to its end (of the file first read: a path
    /// that names another file now gets none, and [`Source::differs`] sees the change).
    pub(super) fn seal(&self) {
        if let Ok(Some(stamp)) = self.stamp_now() {
            let _ = self.stamp.set(stamp);
        }
    }

    /// Whether the file is seen to have changed since it was read: another file at its path,
    /// or another size or a later change time than its stamp. A spool never changes.
    pub(super) fn differs(&self) -> bool {
        match self.stamp_now() {
            Err(()) => true,
            Ok(None) => false,
            Ok(Some(now)) => self.stamp.get().is_some_and(|s| now != *s),
        }
    }

    /// Opens the input to read its lines again.
    pub(super) fn reopen(&self) -> Result<Reread<'_>> {
        match &self.origin {
            Origin::Path { path, dev, ino } => {
                let file = File::open(path).map_err(|e| Error::input("open", &self.name, e))?;
                let meta = file
                    .metadata()
                    .map_err(|e| Error::input("stat", &self.name, e))?;
                if meta.dev() != *dev || meta.ino() != *ino {
                    return Err(self.changed());
                }
                Ok(Reread::Owned(file))
            }
            Origin::Handle(file) => Ok(Reread::File(file)),
            Origin::Spool(file) => Ok(Reread::Spool(file)),
        }
    }
}

pub(super) enum Reread<'a> {
    Owned(File),
    File(&'a File),
    Spool(&'a crate::storage::File),
}

impl Reread<'_> {
    pub(super) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self {
            Reread::Owned(f) => f.read_at(buf, offset),
            Reread::File(f) => f.read_at(buf, offset),
            Reread::Spool(f) => f.raw().read_at(buf, offset),
        }
    }
}

/// A stretch of an input holding consecutive lines of a batch: bytes `start..end`, which
/// hold `lines` lines (each ends with "\n" but the input's last one may not).
pub(super) struct Piece {
    pub(super) source: Arc<Source>,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) lines: u64,
}
