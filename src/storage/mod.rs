//! The one seam for file I/O.
//!
//! Every byte the sieve reads or writes goes through [`Storage`] (a directory) and
//! [`StorageFile`] (a file in it). [`DirStorage`] is the real backend; [`SimDisk`] is an
//! in-memory disk that remembers what was synced and can crash, tear writes, fail fsyncs and
//! flip bits, so that tests can enumerate every crash point (the approach of SQLite's crash
//! VFS, RocksDB's `FaultInjectionTestFS` and redb's `StorageBackend`).
//!
//! The durability rules the engine follows live in `durable.rs`.

pub(crate) mod durable;
mod file;
pub(crate) mod overlay;
pub(crate) mod prefixed;
mod real;
pub mod sim;

use std::any::Any;
use std::fmt;
use std::io;
use std::sync::Arc;

pub(crate) use file::{File, StorageExt};
pub use real::{lock_file_id, DirStorage};
pub use sim::SimDisk;

/// A flat directory of files: the sieve directory.
///
/// Names are plain file names (no separators). Mutating operations are the crash points of
/// the simulated disk.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `name` (truncating it if it exists), opened for reading and writing.
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Opens the existing file `name` for reading and writing.
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Opens the existing file `name`, which is complete and which nobody changes while it
    /// is open (a Q run: written whole and synced before it is opened, removed but never
    /// rewritten), for reading. A backend may map it into memory; the default opens it as
    /// [`Storage::open`] does.
    fn open_immutable(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.open(name)
    }
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Lists the file names in the directory, sorted.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Takes the directory's exclusive lock; it is held until the returned guard is dropped.
    /// Fails with [`io::ErrorKind::WouldBlock`] when somebody else holds it.
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>>;
    /// A human-readable name of the directory, for messages.
    fn describe(&self) -> String;
}

/// An open file of a [`Storage`].
#[expect(
    clippy::len_without_is_empty,
    reason = "a file of the storage is never asked whether it is empty"
)]
pub trait StorageFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// The file's current length.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data and size durable (`fsync`).
    fn sync(&self) -> io::Result<()>;
    /// Asks the system to start writing `len` bytes at `offset` to the device, without
    /// waiting and without any durability promise, so that a later [`StorageFile::sync`] has
    /// less to wait for. A hint: the default does nothing.
    fn start_writeback(&self, _offset: u64, _len: u64) {}
    /// Reads as [`StorageFile::read_at`] does, for a scan that reads each byte once and in
    /// large pieces: a file opened with [`Storage::open_immutable`] reads these from the file
    /// rather than through its mapping, whose pages a scan would fault in one by one and have
    /// to give back. The default is `read_at`.
    fn read_at_scanning(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }

    /// The `len` bytes at `offset` in place, where the file is mapped into memory and holds
    /// them all: a reader may use them without copying. None: read them with
    /// [`StorageFile::read_at`] (the default). The bytes must not change while borrowed: only
    /// files that are no longer written may answer.
    fn mapped(&self, _offset: u64, _len: usize) -> Option<&[u8]> {
        None
    }

    /// Fills `buf` from `offset`; fails with [`io::ErrorKind::UnexpectedEof`] if the file
    /// is shorter.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads the whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len()?).map_err(io::Error::other)?;
        let mut buf = vec![0; len];
        self.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// A storage whose `sync` and `sync_dir` do nothing: for throwaway stores that need no
/// durability, such as the temporary sieve of `crivello uniq`. After a crash such a store may
/// be in any state; never use it for data that must survive one.
#[derive(Debug)]
pub struct Unsynced<S>(pub S);

struct UnsyncedFile(Arc<dyn StorageFile>);

impl StorageFile for UnsyncedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn mapped(&self, offset: u64, len: usize) -> Option<&[u8]> {
        self.0.mapped(offset, len)
    }
    fn read_at_scanning(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at_scanning(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: Storage> Storage for Unsynced<S> {
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(UnsyncedFile(self.0.create(name)?)))
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(UnsyncedFile(self.0.open(name)?)))
    }
    fn open_immutable(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.0.open_immutable(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.0.lock()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// A view of the store in `dir` that reads its files and never writes to it: every change
/// stays in memory and is forgotten with the view (see [`overlay`]). The directory is opened
/// read-only, so the view works on a full disk and on a read-only file system. It takes no
/// lock: a reader never keeps a writer out (`crivello stats` of a running server's store),
/// and a reader of a store another process writes may find its files changing under it
/// (the command line's `stats` reads again then).
pub(crate) fn read_only_view(dir: &std::path::Path) -> crate::Result<Arc<dyn Storage>> {
    let base: Arc<dyn Storage> = Arc::new(DirStorage::open_store_read_only(dir)?);
    Ok(Arc::new(overlay::Overlay::new(base)))
}
