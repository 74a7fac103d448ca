//! The real backend: a directory of the operating system's file system.

use std::any::Any;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
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

/// A file opened with [`Storage::open_immutable`]: mapped into memory, so that a read is a
/// copy, not a system call. Reads past the mapping (a file that was empty, or a mapping
/// refused) go to the file; every change is refused.
///
/// The pages a read touches count in the process's resident memory although the kernel may
/// drop them at will (they are the page cache's): every [`MAPPED_READS`] reads the mapping
/// gives them back, so that a file's share stays below `2 * MAPPED_READS` pages (each read
/// touches one page, two if it spans a boundary: the mapping is advised random, with no read
/// ahead).
struct MappedFile {
    file: File,
    map: Option<memmap2::Mmap>,
    /// Reads through the mapping since its pages were last given back.
    reads: AtomicU32,
}

/// Reads of a mapped file after which its pages are given back (see [`MappedFile`]).
const MAPPED_READS: u32 = 8192;

impl StorageFile for MappedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(map) = &self.map {
            if let Ok(start) = usize::try_from(offset) {
                if start < map.len() {
                    let n = buf.len().min(map.len() - start);
                    buf[..n].copy_from_slice(&map[start..start + n]);
                    if self.reads.fetch_add(1, Ordering::Relaxed) + 1 >= MAPPED_READS {
                        self.reads.store(0, Ordering::Relaxed);
                        // SAFETY: a shared, read-only mapping of a file: giving its pages
                        // back only drops this process's references to them, and the next
                        // read finds the file's bytes again (from the page cache or the
                        // disk). No reference into the mapping outlives this call. A
                        // failure leaves the pages mapped, which costs memory only.
                        let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
                    }
                    return Ok(n);
                }
            }
        }
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(read_only_error())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
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
    fn open_immutable(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let file = File::open(self.dir.join(name))?;
        let map = if file.metadata()?.len() > 0 {
            // SAFETY: the mapping is read-only and private to this file handle. The caller
            // opens only files that nobody writes or truncates while they are open (Q runs:
            // written whole and synced before they are opened; removed, never rewritten);
            // removing a mapped file keeps its pages until the mapping goes. A file cut
            // short by another program while mapped would end the process (SIGBUS): the
            // store's files are the store's alone (docs/design.md, disk assumptions). A
            // mapping refused (no address space left) falls back to reads.
            let map = unsafe { memmap2::Mmap::map(&file) }.ok();
            if let Some(map) = &map {
                // Reads are of one frame here and there: no read ahead around them. A hint.
                let _ = map.advise(memmap2::Advice::Random);
            }
            map
        } else {
            None
        };
        Ok(Arc::new(MappedFile {
            file,
            map,
            reads: AtomicU32::new(0),
        }))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file opened immutable reads what an ordinary open reads, at every offset and length,
    /// past its end too, before and after its pages are given back; it refuses every change.
    #[test]
    fn a_mapped_file_reads_as_the_file_does() {
        let dir = tempfile::tempdir().unwrap();
        let st = DirStorage::open(dir.path()).unwrap();
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(dir.path().join("q"), &bytes).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let mapped = st.open_immutable("q").unwrap();
        let plain = st.open("q").unwrap();
        assert_eq!(mapped.len().unwrap(), bytes.len() as u64);
        let mut reads = 0u32;
        for offset in (0..bytes.len() as u64 + 300).step_by(5) {
            for len in [0usize, 1, 100, 4096, 9000] {
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                let n = mapped.read_at(&mut a, offset).unwrap();
                assert_eq!(
                    n,
                    plain.read_at(&mut b, offset).unwrap(),
                    "at {offset}+{len}"
                );
                assert_eq!(a[..n], b[..n]);
                reads += 1;
            }
        }
        assert!(
            reads > 2 * MAPPED_READS,
            "the pages were given back on the way"
        );
        assert_eq!(mapped.read_all().unwrap(), bytes);
        let mut short = [0u8; 10];
        let e = mapped
            .read_exact_at(&mut short, bytes.len() as u64 - 5)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(mapped.write_all_at(b"x", 0).is_err());
        assert!(mapped.set_len(0).is_err());
        assert_eq!(std::fs::read(dir.path().join("q")).unwrap(), bytes);
        let empty = st.open_immutable("empty").unwrap();
        assert_eq!(empty.read_at(&mut short, 0).unwrap(), 0);
        assert_eq!(
            st.open_immutable("missing").err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
    }
}
