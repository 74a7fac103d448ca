//! Files that know their name: every failure of an operation on them is an [`Error`] that
//! names the file, by construction.
//!
//! The engine never calls [`Storage`] and [`StorageFile`] directly: it goes through
//! [`StorageExt`] and [`File`], so that an I/O error always says which operation failed on
//! which file, and a file the manifest references but the directory lacks is always
//! [`Corruption::Missing`], decided in one place ([`StorageExt::open_file`]).

use std::io;
use std::sync::Arc;

use super::{Storage, StorageFile};
use crate::error::{Corruption, Error, Result};

/// An open file of a [`Storage`] with its name.
#[derive(Clone)]
pub(crate) struct File {
    inner: Arc<dyn StorageFile>,
    name: Arc<str>,
}

impl File {
    /// Wraps `inner`, which is the file `name`.
    pub(crate) fn new(inner: Arc<dyn StorageFile>, name: &str) -> File {
        File {
            inner,
            name: name.into(),
        }
    }

    /// The file's name in the directory.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The underlying file, for code that reports its own errors.
    pub(crate) fn raw(&self) -> &dyn StorageFile {
        &*self.inner
    }

    /// An I/O error of operation `op` on this file.
    pub(crate) fn io_error(&self, op: &'static str, e: io::Error) -> Error {
        Error::io(op, &self.name, e)
    }

    /// A corruption error at `offset` of this file.
    pub(crate) fn corrupt(&self, offset: u64, what: Corruption) -> Error {
        Error::corrupt(&self.name, offset, what)
    }

    /// Fills `buf` from `offset`.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner
            .read_exact_at(buf, offset)
            .map_err(|e| self.io_error("read", e))
    }

    /// Reads the whole file.
    pub(crate) fn read_all(&self) -> Result<Vec<u8>> {
        self.inner.read_all().map_err(|e| self.io_error("read", e))
    }

    /// Writes all of `buf` at `offset`.
    pub(crate) fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner
            .write_all_at(buf, offset)
            .map_err(|e| self.io_error("write", e))
    }

    /// The file's length.
    pub(crate) fn len(&self) -> Result<u64> {
        self.inner.len().map_err(|e| self.io_error("stat", e))
    }

    /// Truncates or extends the file to `len` bytes.
    pub(crate) fn set_len(&self, len: u64) -> Result<()> {
        self.inner
            .set_len(len)
            .map_err(|e| self.io_error("truncate", e))
    }

    /// Makes the file's data durable (`fsync`). Never retried after a failure: the caller
    /// poisons the store.
    pub(crate) fn sync(&self) -> Result<()> {
        self.inner.sync().map_err(|e| self.io_error("fsync", e))
    }

    /// Asks the system to start writing a range to the device (a hint).
    pub(crate) fn start_writeback(&self, offset: u64, len: u64) {
        self.inner.start_writeback(offset, len);
    }
}

/// The operations of a [`Storage`] as the engine uses them: each error names its file.
pub(crate) trait StorageExt {
    /// Creates (or truncates) `name`.
    fn create_file(&self, name: &str) -> Result<File>;
    /// Opens `name`, which must exist: a missing file is [`Corruption::Missing`].
    fn open_file(&self, name: &str) -> Result<File>;
    /// Opens the immutable file `name`, which the manifest says is `bytes` long: a missing
    /// file or another length is corruption.
    fn open_exact(&self, name: &str, bytes: u64) -> Result<File>;
    /// Opens `name` if it exists.
    fn open_if_exists(&self, name: &str) -> Result<Option<File>>;
    /// Opens the immutable file `name` ([`Storage::open_immutable`]), which must exist: a
    /// missing file is [`Corruption::Missing`].
    fn open_immutable_file(&self, name: &str) -> Result<File>;
    /// Lists the directory, sorted.
    fn list_files(&self) -> Result<Vec<String>>;
    /// Makes the directory's entries durable.
    fn sync_directory(&self) -> Result<()>;
    /// Removes `name`.
    fn remove_file(&self, name: &str) -> Result<()>;
    /// Takes the directory's exclusive lock, held until the guard is dropped:
    /// [`Error::Locked`] when somebody else holds it.
    fn lock_exclusive(&self) -> Result<Box<dyn std::any::Any + Send + Sync>>;
}

impl<S: Storage + ?Sized> StorageExt for S {
    fn create_file(&self, name: &str) -> Result<File> {
        let f = self
            .create(name)
            .map_err(|e| Error::io("create", name, e))?;
        Ok(File::new(f, name))
    }

    fn open_file(&self, name: &str) -> Result<File> {
        self.open_if_exists(name)?
            .ok_or_else(|| Error::corrupt(name, 0, Corruption::Missing))
    }

    fn open_exact(&self, name: &str, bytes: u64) -> Result<File> {
        let file = self.open_file(name)?;
        let len = file.len()?;
        if len != bytes {
            return Err(file.corrupt(
                len.min(bytes),
                Corruption::Truncated {
                    needed: bytes,
                    available: len,
                },
            ));
        }
        Ok(file)
    }

    fn open_if_exists(&self, name: &str) -> Result<Option<File>> {
        match self.open(name) {
            Ok(f) => Ok(Some(File::new(f, name))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("open", name, e)),
        }
    }

    fn open_immutable_file(&self, name: &str) -> Result<File> {
        match self.open_immutable(name) {
            Ok(f) => Ok(File::new(f, name)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(Error::corrupt(name, 0, Corruption::Missing))
            }
            Err(e) => Err(Error::io("open", name, e)),
        }
    }

    fn list_files(&self) -> Result<Vec<String>> {
        self.list()
            .map_err(|e| Error::io("list", &self.describe(), e))
    }

    fn sync_directory(&self) -> Result<()> {
        self.sync_dir()
            .map_err(|e| Error::io("fsync", &self.describe(), e))
    }

    fn remove_file(&self, name: &str) -> Result<()> {
        self.remove(name).map_err(|e| Error::io("remove", name, e))
    }

    fn lock_exclusive(&self) -> Result<Box<dyn std::any::Any + Send + Sync>> {
        self.lock().map_err(|e| {
            if e.kind() == io::ErrorKind::WouldBlock {
                Error::Locked {
                    dir: self.describe(),
                }
            } else {
                Error::io("lock", &self.describe(), e)
            }
        })
    }
}
