//! The real backend: a directory of the operating system's file system.

use std::any::Any;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fs2::FileExt as _;

use super::{Storage, StorageFile};

/// A real directory. Created (with its parents) if missing.
#[derive(Debug, Clone)]
pub struct DirStorage {
    dir: PathBuf,
    /// Opened with [`DirStorage::open_read_only`]: files are opened for reading only, and
    /// every change fails as on a read-only file system.
    read_only: bool,
}

impl DirStorage {
    /// Opens the directory `dir`, creating it if it does not exist.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<DirStorage> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.exists() {
            fs::create_dir_all(&dir)?;
            if let Some(parent) = dir.parent() {
                // Make the new directory's own entry durable.
                let parent = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
                File::open(parent)?.sync_all()?;
            }
        } else if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a directory",
            ));
        }
        Ok(DirStorage {
            dir,
            read_only: false,
        })
    }

    /// Opens the existing directory `dir` for reading only: its files are opened read-only
    /// (so this works on a read-only file system and writes nothing), and every change
    /// (creating, renaming, removing a file, a write, a truncation) fails with the error of a
    /// read-only file system.
    pub fn open_read_only(dir: impl AsRef<Path>) -> io::Result<DirStorage> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"));
        }
        Ok(DirStorage {
            dir,
            read_only: true,
        })
    }

    /// [`DirStorage::open_read_only`] for a store: an error names the directory.
    pub(crate) fn open_store_read_only(dir: &Path) -> crate::Result<DirStorage> {
        DirStorage::open_read_only(dir)
            .map_err(|e| crate::Error::io("open directory", &dir.display().to_string(), e))
    }

    fn refuse_change(&self) -> io::Result<()> {
        if self.read_only {
            Err(read_only_error())
        } else {
            Ok(())
        }
    }

    /// [`DirStorage::open`] for a store: an error names the directory.
    pub(crate) fn open_store(dir: &Path) -> crate::Result<DirStorage> {
        DirStorage::open(dir)
            .map_err(|e| crate::Error::io("open directory", &dir.display().to_string(), e))
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// The error of a change refused by a read-only [`DirStorage`]: that of a read-only file
/// system (`EROFS`).
fn read_only_error() -> io::Error {
    io::Error::from_raw_os_error(libc::EROFS)
}

struct RealFile(File);

/// A file of a read-only [`DirStorage`]: opened for reading, every change refused.
struct ReadOnlyFile(File);

impl StorageFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(read_only_error())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(read_only_error())
    }
    fn sync(&self) -> io::Result<()> {
        Err(read_only_error())
    }
}

impl StorageFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    #[cfg(target_os = "linux")]
    fn start_writeback(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is owned by `self.0` and open for as long as this call
        // lasts; sync_file_range reads no memory of this process. Its result is ignored: it
        // is a hint, and `sync` reports any error that matters.
        unsafe {
            libc::sync_file_range(self.0.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
}

impl Storage for DirStorage {
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.refuse_change()?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(RealFile(f)))
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        if self.read_only {
            let f = File::open(self.dir.join(name))?;
            return Ok(Arc::new(ReadOnlyFile(f)));
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(RealFile(f)))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.refuse_change()?;
        fs::rename(self.dir.join(from), self.dir.join(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.refuse_change()?;
        fs::remove_file(self.dir.join(name))
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.refuse_change()?;
        File::open(&self.dir)?.sync_all()
    }
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        let path = self.dir.join(crate::names::LOCK);
        let f = if self.read_only {
            // flock needs no write access. A store without its lock file has had no opener
            // (every opener creates it): there is no one to exclude.
            match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Box::new(())),
                Err(e) => return Err(e),
            }
        } else {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?
        };
        match f.try_lock_exclusive() {
            Ok(()) => Ok(Box::new(f)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(11) => {
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => Err(e),
        }
    }
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}
