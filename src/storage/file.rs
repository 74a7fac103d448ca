//! Files that know their name: every failure of an operation on them is an [`Error`] that
//! names the file, by construction.
//!
//! The engine never calls [`Storage`] and [`StorageFile`] directly: it goes through
//! [`StorageExt`] and [`File`], so that an I/O error always says which operation failed on
//! which file, and a file the manifest references but the directory lacks is always
//! [`Corruption::Missing`], decided in one place ([`StorageExt::open_file`]).

use std::io;
use std::sync::{Arc, Mutex};

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

    /// A view of the file for a scan that reads it from start to end in small pieces, in
    /// one or two streams at once (a Q run's frames, and its directory blocks at its end):
    /// it reads [`SCAN_CHUNK`] bytes at a time with [`StorageFile::read_at_scanning`] into
    /// two windows, and serves the pieces from them.
    pub(crate) fn scanning(&self) -> File {
        File {
            inner: Arc::new(Scanning {
                inner: self.inner.clone(),
                windows: Mutex::new(Default::default()),
            }),
            name: self.name.clone(),
        }
    }

    /// The `len` bytes at `offset` in place, where the file is mapped and holds them
    /// ([`StorageFile::mapped`]).
    pub(crate) fn mapped(&self, offset: u64, len: usize) -> Option<&[u8]> {
        self.inner.mapped(offset, len)
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
                // Named by its lock file, which is what failed (a directory in its place, a
                // file this user may not open for writing).
                let file = std::path::Path::new(&self.describe()).join(crate::names::LOCK);
                Error::io("lock", &file.display().to_string(), e)
            }
        })
    }
}

/// Bytes a [`File::scanning`] view reads at once.
const SCAN_CHUNK: usize = 64 << 10;

/// The file of [`File::scanning`].
struct Scanning {
    inner: Arc<dyn StorageFile>,
    /// The two windows, the one read from last first.
    windows: Mutex<[Window; 2]>,
}

/// Bytes of a file from `start`.
#[derive(Default)]
struct Window {
    start: u64,
    bytes: Vec<u8>,
}

impl Window {
    /// Copies what it holds of `offset..` into `buf`; None when it does not hold `offset`.
    fn copy(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        let at = usize::try_from(offset.checked_sub(self.start)?).ok()?;
        let held = self.bytes.get(at..).filter(|b| !b.is_empty())?;
        let n = held.len().min(buf.len());
        buf[..n].copy_from_slice(&held[..n]);
        Some(n)
    }
}

impl StorageFile for Scanning {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut w = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = w[0].copy(buf, offset) {
            return Ok(n);
        }
        if let Some(n) = w[1].copy(buf, offset) {
            w.swap(0, 1);
            return Ok(n);
        }
        if buf.len() >= SCAN_CHUNK {
            return self.inner.read_at_scanning(buf, offset);
        }
        // The window this read continues is refilled (a stream that ran past its end), else
        // the one read from less recently: a frame that runs past the frames' window does not
        // evict the window of the directory blocks.
        let continues = |win: &Window| win.start + win.bytes.len() as u64 == offset;
        if continues(&w[1]) || !continues(&w[0]) {
            w.swap(0, 1);
        }
        let win = &mut w[0];
        win.start = offset;
        win.bytes.resize(SCAN_CHUNK, 0);
        let mut got = 0;
        while got < SCAN_CHUNK {
            match self
                .inner
                .read_at_scanning(&mut win.bytes[got..], offset + got as u64)
            {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    win.bytes.clear();
                    return Err(e);
                }
            }
        }
        win.bytes.truncate(got);
        Ok(win.copy(buf, offset).unwrap_or(0))
    }
    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a scanning view of a file is read-only",
        ))
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a scanning view of a file is read-only",
        ))
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes `i as u8` at each offset `i`, read through a scanning view in every pattern a
    /// scan makes (forward in small pieces, in two interleaved streams, pieces across a
    /// window's end, large pieces, past the end): the bytes are the file's.
    #[test]
    fn a_scanning_view_reads_what_the_file_holds() {
        for short in [false, true] {
            scan(short);
        }
    }

    fn scan(short: bool) {
        use crate::storage::{SimDisk, Storage};
        let disk = SimDisk::new();
        disk.set_short_reads(short);
        let len = 3 * SCAN_CHUNK + 1234;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let f = disk.create("x").expect("create");
        f.write_all_at(&data, 0).expect("write");
        let file = File::new(f, "x").scanning();
        let check = |offset: usize, n: usize| {
            let mut buf = vec![0u8; n];
            file.read_exact_at(&mut buf, offset as u64).expect("read");
            assert_eq!(buf, &data[offset..offset + n], "{offset} {n}");
        };
        let (mut a, mut b) = (0, 2 * SCAN_CHUNK + 17);
        let reads = disk.reads();
        while a + 97 < len && b + 300 < len {
            check(a, 97);
            check(b, 300);
            a += 97;
            b += 300;
        }
        if !short {
            // Each stream keeps its window: one read of the file per window's worth of each
            // (a stream whose piece ran past its window refills that one, not the other's).
            let windows = (a / SCAN_CHUNK + 1) + ((b - 2 * SCAN_CHUNK) / SCAN_CHUNK + 1);
            assert!(
                disk.reads() - reads <= windows as u64 + 1,
                "{}",
                disk.reads() - reads
            );
        }
        check(SCAN_CHUNK - 5, 10);
        check(0, len);
        check(len - 1, 1);
        let mut buf = [0u8; 8];
        assert!(file.read_exact_at(&mut buf, len as u64 - 4).is_err());
        assert_eq!(file.raw().read_at(&mut buf, len as u64).expect("read"), 0);
    }
}
