//! The real backend: a directory of the operating system's file system.

use std::any::Any;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use fs2::FileExt as _;

use super::{Storage, StorageFile};

/// A real directory. Created (with its parents) if missing.
#[derive(Debug, Clone)]
pub struct DirStorage {
    dir: PathBuf,
    /// Opened with [`DirStorage::open_read_only`]: files are opened for reading only, and
    /// every change fails as on a read-only file system.
    read_only: bool,
    /// The device and inode of the lock file of the last lock this storage took, once it
    /// took one: before a file is created or renamed, and after a file is synced, the lock
    /// file at the directory's path must be that one (a directory moved away, removed, or
    /// replaced by another store, while a command ran is not written into, and what is
    /// written to its open files is not acknowledged; after a sync, checked again once
    /// [`PATH_RECHECK_US`] have passed since the last check).
    locked: Arc<Mutex<Option<(u64, u64)>>>,
    /// When the last lookup of the lock file at the path that found it to be the one locked
    /// began, in microseconds of [`micros`] (0: none since the lock was taken).
    path_checked: Arc<AtomicU64>,
    /// How long after such a lookup a sync skips its own, in microseconds:
    /// [`PATH_RECHECK_US`] for a store's files, 0 (every sync looks the path up) for the
    /// files a [`DirStorage::open_within`] keeps beside them.
    recheck_us: u64,
    /// The directory whose lock file `locked` names: this one, or (a storage made by
    /// [`DirStorage::open_within`]) the store that holds it.
    lock_dir: Option<PathBuf>,
}

impl DirStorage {
    /// Opens the directory `dir`, creating it if it does not exist.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<DirStorage> {
        let dir = dir.as_ref().to_path_buf();
        if dir.as_os_str().is_empty() {
            // (The system says "no such file" of "", after the creation of it "succeeded".)
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an empty path names no directory",
            ));
        }
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
            // The system's error (ENOTDIR), so that its number reaches a caller (Python's
            // OSError.errno).
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(DirStorage {
            dir,
            read_only: false,
            locked: Arc::default(),
            path_checked: Arc::default(),
            recheck_us: PATH_RECHECK_US,
            lock_dir: None,
        })
    }

    /// Opens the directory `dir` inside the store `store`, which this process has locked
    /// (its lock file is there), creating `dir` if it does not exist (not `store`): files
    /// kept beside a store's own under its lock. As for the store's files, before a file is
    /// created or renamed and after a file is synced, the lock file at `store` must still be
    /// the one found now, so that nothing is acknowledged as written into a store moved
    /// away, removed or replaced meanwhile; unlike the store's files, at every sync (these
    /// are synced seldom). Not to be locked itself.
    pub fn open_within(dir: impl AsRef<Path>, store: impl AsRef<Path>) -> io::Result<DirStorage> {
        let store = store.as_ref();
        let lock = lock_file_id(store)?;
        DirStorage::open_within_lock(dir, store, lock)
    }

    /// [`DirStorage::open_within`], checked against the lock file `lock` (its device and
    /// inode, as [`lock_file_id`] gave them when the store was locked) rather than the one
    /// found now.
    pub fn open_within_lock(
        dir: impl AsRef<Path>,
        store: impl AsRef<Path>,
        lock: (u64, u64),
    ) -> io::Result<DirStorage> {
        let (dir, store) = (dir.as_ref().to_path_buf(), store.as_ref().to_path_buf());
        let storage = DirStorage {
            dir,
            read_only: false,
            locked: Arc::new(Mutex::new(Some(lock))),
            path_checked: Arc::default(),
            recheck_us: 0,
            lock_dir: Some(store),
        };
        storage.still_here()?;
        if !storage.dir.exists() {
            // Not `create_dir_all`: a store removed meanwhile is not made again.
            fs::create_dir(&storage.dir).map_err(|e| storage.gone_or(e))?;
            storage.still_here()?;
            File::open(storage.lock_dir())?.sync_all()?;
        } else if !storage.dir.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(storage)
    }

    /// The directory whose lock file is checked.
    fn lock_dir(&self) -> &Path {
        self.lock_dir.as_deref().unwrap_or(&self.dir)
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
            locked: Arc::default(),
            path_checked: Arc::default(),
            recheck_us: PATH_RECHECK_US,
            lock_dir: None,
        })
    }

    /// [`DirStorage::open_read_only`] for a store: an error names the directory.
    pub(crate) fn open_store_read_only(dir: &Path) -> crate::Result<DirStorage> {
        DirStorage::open_read_only(dir)
            .map_err(|e| crate::Error::io("open directory", &dir.display().to_string(), e))
    }

    fn refuse_change(&self) -> io::Result<()> {
        if self.read_only {
            return Err(read_only_error());
        }
        self.still_here()
    }

    /// Whether the directory at this storage's path is still the one it locked (nothing is
    /// checked before the lock is taken).
    fn still_here(&self) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let held = *self.locked.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = held else {
            return Ok(());
        };
        let began = micros();
        let now = match fs::metadata(self.lock_dir().join(crate::names::LOCK)) {
            Ok(m) => Some((m.dev(), m.ino())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            // Not known (an I/O error of its own): that error, not a guess.
            Err(e) => return Err(e),
        };
        if now == Some(held) {
            // The path held the lock at an instant after `began`: a lookup that began later
            // and ended sooner is not undone by this one.
            self.path_checked.fetch_max(began, Ordering::Relaxed);
            return Ok(());
        }
        Err(io::Error::other(Moved(format!(
            "the directory {} was moved, removed or replaced by another while in use: \
             nothing more is written there (the store is where it was moved to, as last \
             committed)",
            self.lock_dir().display()
        ))))
    }

    /// After a sync: [`DirStorage::still_here`], unless a lookup that found the lock at the
    /// path began less than `recheck_us` ago. A path looked up at every sync of a store's
    /// files took an eighth of the time of a frontier's hand-outs and completions, each of
    /// which syncs its journal.
    fn still_here_after_sync(&self) -> io::Result<()> {
        let last = self.path_checked.load(Ordering::Relaxed);
        if last != 0 && micros().saturating_sub(last) < self.recheck_us {
            return Ok(());
        }
        self.still_here()
    }

    /// The error of an open that failed: that of a directory moved away, removed or replaced
    /// since it was locked when it was (a file missing there is not the store's damage),
    /// else `e`.
    fn gone_or(&self, e: io::Error) -> io::Error {
        match e.kind() {
            io::ErrorKind::NotFound => self.still_here().err().unwrap_or(e),
            _ => e,
        }
    }

    /// The result of an open of a store through this storage, once it returned: an error
    /// naming the directory if the directory at its path is no longer the one the open
    /// locked (moved away, removed or replaced by another while the open read it: what it
    /// read may be two stores' files, and a damage it reported is not the store's), else
    /// `r`. A store opened meanwhile is dropped (it writes nothing there any more).
    pub(crate) fn opened<T>(&self, r: crate::Result<T>) -> crate::Result<T> {
        match self.still_here() {
            Ok(()) => r,
            // The lock file could not be looked up (an I/O error of its own): a failed open
            // keeps its own error, one that succeeded cannot be trusted.
            Err(e) if r.is_err() && !is_moved(&e) => r,
            Err(e) => Err(crate::Error::io(
                "open directory",
                &self.dir.display().to_string(),
                e,
            )),
        }
    }

    /// [`DirStorage::open_store`], or (`create` false) of a directory that must exist.
    pub(crate) fn open_store_as(dir: &Path, create: bool) -> crate::Result<DirStorage> {
        if create {
            return DirStorage::open_store(dir);
        }
        if !dir.is_dir() {
            return Err(crate::Error::NotASieve {
                dir: dir.display().to_string(),
                reason: "no such directory".into(),
            });
        }
        // Never made here: a directory removed from now on makes the lock fail.
        Ok(DirStorage {
            dir: dir.to_path_buf(),
            read_only: false,
            locked: Arc::default(),
            path_checked: Arc::default(),
            recheck_us: PATH_RECHECK_US,
            lock_dir: None,
        })
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

/// How long after a check of a locked storage's path a sync checks it again, in
/// microseconds: a sync within a millisecond of the last check may be acknowledged into a
/// directory moved away (where it is durable) or removed (with the store's every file).
const PATH_RECHECK_US: u64 = 1_000;

/// Microseconds since the first call in this process, at least 1.
fn micros() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_micros())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// The error of a directory moved away, removed or replaced while in use (its message).
#[derive(Debug)]
struct Moved(String);

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Moved {}

/// Whether `e` says that a directory was moved away, removed or replaced while in use.
fn is_moved(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Moved>())
}

/// The device and inode of the lock file of the store in `store`: what a
/// [`DirStorage::open_within_lock`] checks against.
pub fn lock_file_id(store: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(store.join(crate::names::LOCK))?;
    Ok((m.dev(), m.ino()))
}

/// The error of a change refused by a read-only [`DirStorage`]: that of a read-only file
/// system (`EROFS`).
fn read_only_error() -> io::Error {
    io::Error::from_raw_os_error(libc::EROFS)
}

/// A file of a writable [`DirStorage`], with that storage: a sync succeeds only while the
/// directory at the storage's path is still the one it locked, so that a write into a
/// directory removed (or moved away) while in use is not acknowledged as durable there.
struct RealFile(File, DirStorage);

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
struct MappedFile {
    file: File,
    map: Option<Arc<Mapping>>,
}

/// A file's read-only mapping, with the pages reads touched since they were last given back.
///
/// Those pages count in the process's resident memory although the kernel may drop them at
/// will (they are the page cache's). A read faults in the pages of its bytes (the mapping is
/// advised random: no read ahead), but the kernel maps more with each fault: the cached pages
/// around it (Linux's fault-around, 64 KiB), or the whole folio of the page cache that holds
/// it (recent Linux keeps a file written in large writes in folios of up to 2 MiB, and maps a
/// folio whole). Both stay within the aligned block of [`GRANULE`] bytes of address space
/// around the fault, so the count is by such blocks: a read that touches a block not touched
/// before counts the whole block. Once the mappings of the process have counted
/// [`MAPPED_BYTES`], the pages are given back ([`give_back`]; at most once every
/// [`MIN_READS`] reads, the reads of blocks not counted going to the file meanwhile), so the
/// process holds at most about that much of them, whatever the number and size of the
/// files. (Counted by page, a
/// hand-out of 10^5 queues held 42 MiB of them where the count said 16.)
struct Mapping {
    map: memmap2::Mmap,
    /// The block of address space the mapping starts in.
    first_block: usize,
    /// One bit per block of [`GRANULE`] bytes of address space: touched since the pages were
    /// last given back.
    touched: Box<[AtomicU64]>,
    /// The blocks touched before that: given back again the next time, for the pages a read
    /// brought in after its block's were given back (a read of another thread, or bytes
    /// decoded in place after the block was counted).
    previous: Box<[AtomicU64]>,
}

/// The blocks the count goes by: [`GRANULE`], or where pages are larger than 4 KiB, what one
/// page of page-table entries maps (the largest folio the kernel may map at a fault).
fn granule() -> usize {
    let page = page_size() as usize;
    GRANULE.max(page / 8 * page)
}

/// The most Linux maps at one fault of a file mapping with pages of 4 KiB: a folio of the
/// page cache of the largest size it keeps them in (a PMD's, 2 MiB); fault-around alone maps
/// 64 KiB.
const GRANULE: usize = 2 << 20;

/// The bytes of mapped pages the process may hold before every mapping gives them back.
const MAPPED_BYTES: u64 = 16 << 20;

/// The mappings of the process, to give their pages back.
static MAPPINGS: Mutex<Vec<Weak<Mapping>>> = Mutex::new(Vec::new());

/// Bytes counted since the pages were last given back, over every mapping.
static TOUCHED: AtomicU64 = AtomicU64::new(0);

/// How many times the pages were given back.
static GIVEN_BACK: AtomicU64 = AtomicU64::new(0);

/// Reads of the mappings since the pages were last given back.
static READS: AtomicU64 = AtomicU64::new(0);

/// The fewest reads between two givings back. Reads that hop over more blocks than the bound
/// holds, a few reads each (a hand-out of the last big queues of a crawl, each in a frame of
/// its own, here and there in the runs), would give the pages back at nearly every call,
/// and fault them in again at the next: once the bound is reached sooner than this, a read
/// of a block not counted goes to the file instead (a copy from the page cache, no page
/// mapped), until this many reads have passed. (A read the mapping refuses in place and then
/// copies counts twice, and two threads may give back one after the other: the count only
/// spaces the givings back, it bounds nothing.)
const MIN_READS: u64 = 1024;

/// The size of a page.
fn page_size() -> u64 {
    static SIZE: OnceLock<u64> = OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system; no memory of this process.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
    })
}

impl Mapping {
    /// Maps `file` (not empty), advised random, and registers the mapping; None when the
    /// system refuses it (no address space left: the file is then read with system calls).
    fn new(file: &File) -> Option<Arc<Mapping>> {
        // SAFETY: the mapping is read-only and shared. The caller opens only files that
        // nobody writes or truncates while they are open (Q runs: written whole and synced
        // before they are opened; removed, never rewritten); removing a mapped file keeps its
        // pages until the mapping goes. A file cut short by another program while mapped
        // would end the process (SIGBUS): the store's files are the store's alone
        // (docs/design.md, disk assumptions).
        let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
        // Reads are of one frame here and there: no read ahead around them. A hint.
        let _ = map.advise(memmap2::Advice::Random);
        let g = granule();
        let start = map.as_ptr() as usize;
        let first_block = start / g;
        let blocks = (start + map.len() - 1) / g - first_block + 1;
        let m = Arc::new(Mapping {
            map,
            first_block,
            touched: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            previous: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        });
        let mut all = MAPPINGS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&m));
        Some(m)
    }

    /// Notes that a read touches `start..start + len` (not empty, within the mapping); gives
    /// every mapping's pages back when the process holds [`MAPPED_BYTES`] of them and
    /// [`MIN_READS`] reads have passed since the last time. False: the bound is reached
    /// sooner, and the read must go to the file, not to the mapping.
    fn touch(&self, start: usize, len: usize) -> bool {
        let g = granule();
        let at = self.map.as_ptr() as usize + start;
        let (first, last) = (
            at / g - self.first_block,
            (at + len - 1) / g - self.first_block,
        );
        let page = page_size() as usize;
        let base = self.map.as_ptr() as usize;
        let end = base + self.map.len().div_ceil(page) * page;
        READS.fetch_add(1, Ordering::Relaxed);
        for b in first..=last {
            let bit = 1u64 << (b % 64);
            let word = &self.touched[b / 64];
            if word.load(Ordering::Relaxed) & bit == 0 {
                // The block's part in the mapping (a small file's whole mapping, at most).
                let from = ((self.first_block + b) * g).max(base);
                let to = ((self.first_block + b + 1) * g).min(end);
                let n = (to - from) as u64;
                // The pages go back before this read's block counts: given back first, the
                // block would fill again at once, untouched as far as the count knows.
                if TOUCHED.load(Ordering::Relaxed) + n >= MAPPED_BYTES {
                    if READS.load(Ordering::Relaxed) < MIN_READS {
                        return false;
                    }
                    give_back();
                }
                if word.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                    TOUCHED.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        true
    }
}

/// Gives back the pages of every mapping of the process: those of the blocks reads touched
/// since the last time and the time before, block by block, rather than each mapping whole,
/// which costs the system a walk of all its length (a hand-out over a frontier's runs of
/// hundreds of MiB gave back every few dozen reads, 55 % of its time). Pages a read brought in
/// after its block's were given back (another thread's read meanwhile, or bytes decoded in
/// place later) go the next time; every [`SWEEP`]th time every mapping gives back all its
/// pages, for whatever a read held longer.
fn give_back() {
    let all = MAPPINGS.lock().unwrap_or_else(PoisonError::into_inner);
    TOUCHED.store(0, Ordering::Relaxed);
    READS.store(0, Ordering::Relaxed);
    let sweep = GIVEN_BACK.fetch_add(1, Ordering::Relaxed) % SWEEP == SWEEP - 1;
    let g = granule();
    for m in all.iter().filter_map(Weak::upgrade) {
        if sweep {
            // The blocks touched this time are given back again the next time, as below.
            for (w, p) in m.touched.iter().zip(m.previous.iter()) {
                p.store(w.swap(0, Ordering::Relaxed), Ordering::Relaxed);
            }
            // SAFETY: as below, for the whole mapping.
            let _ = unsafe { m.map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
            continue;
        }
        // (The system rounds a range's end up to its page.)
        let (base, end) = (
            m.map.as_ptr() as usize,
            m.map.as_ptr() as usize + m.map.len(),
        );
        for (k, (w, p)) in m.touched.iter().zip(m.previous.iter()).enumerate() {
            let now = w.swap(0, Ordering::Relaxed);
            let mut bits = now | p.swap(now, Ordering::Relaxed);
            while bits != 0 {
                let b = k * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let from = ((m.first_block + b) * g).max(base);
                let to = ((m.first_block + b + 1) * g).min(end);
                // SAFETY: a shared, read-only mapping of a file: giving its pages back only
                // drops this process's references to them, and the next read finds the
                // file's bytes again (from the page cache or the disk); a read copying from
                // it meanwhile, or a frame decoded from its bytes in place
                // (`StorageFile::mapped`), gets the same bytes. The range lies within the
                // mapping. A failure leaves the pages mapped, which costs memory only.
                let _ = unsafe {
                    m.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        from - base,
                        to - from,
                    )
                };
            }
        }
    }
}

/// Every this many times the pages are given back, every mapping gives back all of its own.
const SWEEP: u64 = 64;

impl StorageFile for MappedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(m) = &self.map {
            if let Ok(start) = usize::try_from(offset) {
                if start < m.map.len() {
                    let n = buf.len().min(m.map.len() - start);
                    if n == 0 {
                        return Ok(0);
                    }
                    if m.touch(start, n) {
                        buf[..n].copy_from_slice(&m.map[start..start + n]);
                        return Ok(n);
                    }
                }
            }
        }
        self.file.read_at(buf, offset)
    }
    fn read_at_scanning(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn mapped(&self, offset: u64, len: usize) -> Option<&[u8]> {
        // A mapped file is one no longer written (a Q run, opened read-only).
        let m = self.map.as_ref()?;
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        if end > m.map.len() || len == 0 || !m.touch(start, len) {
            return None;
        }
        Some(&m.map[start..end])
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
        self.0.sync_all()?;
        self.1.still_here_after_sync()
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
        Ok(Arc::new(RealFile(f, self.clone())))
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        if self.read_only {
            let f = File::open(self.dir.join(name)).map_err(|e| self.gone_or(e))?;
            return Ok(Arc::new(ReadOnlyFile(f)));
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(name))
            .map_err(|e| self.gone_or(e))?;
        Ok(Arc::new(RealFile(f, self.clone())))
    }
    fn open_immutable(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let file = File::open(self.dir.join(name)).map_err(|e| self.gone_or(e))?;
        let len = file.metadata()?.len();
        let map = if len > 0 { Mapping::new(&file) } else { None };
        Ok(Arc::new(MappedFile { file, map }))
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
        debug_assert!(
            self.lock_dir.is_none(),
            "a storage within a store is not locked"
        );
        let path = self.dir.join(crate::names::LOCK);
        // A directory (or another kind of file) in its place: no writer could open it, and a
        // reader does not call the store sound for what every writer refuses. Looked at
        // before it is opened: opening a FIFO to read would wait for a writer.
        match fs::metadata(&path) {
            Ok(m) if m.is_dir() => {
                const EISDIR: i32 = 21;
                return Err(io::Error::from_raw_os_error(EISDIR));
            }
            Ok(m) if !m.is_file() => return Err(io::Error::other("not a regular file")),
            _ => {}
        }
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
            Ok(()) => {
                use std::os::unix::fs::MetadataExt;
                let m = f.metadata()?;
                // The lock taken last: a storage locked again after a close (its lock file
                // made anew meanwhile) checks against the new one.
                *self.locked.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((m.dev(), m.ino()));
                self.path_checked.store(0, Ordering::Relaxed);
                Ok(Box::new(f))
            }
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

    /// The tests of mappings share the process's count of mapped bytes and reads: one at a
    /// time, each from counts set back to zero, so that each sees only its own.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        let guard = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        give_back();
        guard
    }

    /// A file opened immutable reads what an ordinary open reads, at every offset and length,
    /// past its end too, and lends the bytes it holds in place; it refuses every change.
    #[test]
    fn a_mapped_file_reads_as_the_file_does() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let st = DirStorage::open(dir.path()).unwrap();
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(dir.path().join("q"), &bytes).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let mapped = st.open_immutable("q").unwrap();
        let plain = st.open("q").unwrap();
        assert_eq!(mapped.len().unwrap(), bytes.len() as u64);
        for offset in (0..bytes.len() as u64 + 300).step_by(97) {
            for len in [0usize, 1, 100, 4096, 9000] {
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                let n = mapped.read_at(&mut a, offset).unwrap();
                assert_eq!(
                    n,
                    plain.read_at(&mut b, offset).unwrap(),
                    "at {offset}+{len}"
                );
                assert_eq!(a[..n], b[..n]);
                // In place: the same bytes, where the file holds them all.
                let end = offset as usize + len;
                let whole = len > 0 && end <= bytes.len();
                assert_eq!(
                    mapped.mapped(offset, len),
                    whole.then(|| &bytes[offset as usize..end]),
                    "in place at {offset}+{len}"
                );
                assert_eq!(plain.mapped(offset, len), None);
            }
        }
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

    /// Reads that touch more than [`MAPPED_BYTES`] of pages make the mappings give them back,
    /// and every read after that still finds the file's bytes.
    #[test]
    fn mapped_pages_are_given_back_and_read_again() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let st = DirStorage::open(dir.path()).unwrap();
        let page = page_size();
        let len = MAPPED_BYTES + 8 * granule() as u64;
        let bytes: Vec<u8> = (0..len).map(|i| (i / page * 31 + i % 7) as u8).collect();
        std::fs::write(dir.path().join("big"), &bytes).unwrap();
        let mapped = st.open_immutable("big").unwrap();
        let before = GIVEN_BACK.load(Ordering::Relaxed);
        for round in 0..2 {
            for p in 0..len / page - 1 {
                let mut b = [0u8; 3];
                let at = p * page + page - 1 - round;
                mapped.read_exact_at(&mut b[..2], at).unwrap();
                assert_eq!(b[..2], bytes[at as usize..at as usize + 2], "at {at}");
            }
        }
        assert!(GIVEN_BACK.load(Ordering::Relaxed) > before);
        assert!(TOUCHED.load(Ordering::Relaxed) < MAPPED_BYTES);
    }

    /// The resident bytes of the mapping that starts at `addr`, from `/proc/self/smaps`.
    fn resident(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        assert!(lines.next().is_some(), "no mapping at {head}");
        let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
        let kib: u64 = rss.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }

    /// Writes a file of `len` bytes (cached by the system), maps it, reads one byte at each
    /// of `offsets` and checks it, and gives the most bytes the mapping held resident after
    /// a read (looked at after every `every`-th read: a look reads `/proc/self/smaps`).
    fn most_resident_over_reads(len: u64, offsets: impl Iterator<Item = u64>, every: usize) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("cached"), &bytes).unwrap();
        let file = File::open(dir.path().join("cached")).unwrap();
        let m = Mapping::new(&file).unwrap();
        let addr = m.map.as_ptr() as usize;
        let mapped = MappedFile { file, map: Some(m) };
        let mut most = 0;
        for (k, at) in offsets.enumerate() {
            let mut b = [0u8; 1];
            mapped.read_exact_at(&mut b, at).unwrap();
            assert_eq!(b[0], bytes[at as usize], "at {at}");
            if k % every == every - 1 {
                most = most.max(resident(addr));
            }
        }
        most
    }

    /// Reads one byte of each 64 KiB of a file in the page cache: each read faults in a page,
    /// and the kernel maps the cached pages around it, or the folio that holds it. The
    /// mapping's resident bytes stay within the bound all the same (counted by page, they
    /// reached the whole file, 48 MiB).
    #[test]
    fn the_pages_mapped_around_a_read_count_against_the_bound() {
        let _serial = serial();
        let len = 3 * MAPPED_BYTES;
        let most = most_resident_over_reads(len, (0..len).step_by(64 << 10), 1);
        assert!(
            most <= MAPPED_BYTES + granule() as u64,
            "{most} bytes resident, over {MAPPED_BYTES}"
        );
    }

    /// Reads here and there over a file six times the bound (a hand-out over a frontier's
    /// runs): the pages are given back block by block, those of the blocks touched, and the
    /// mapping's resident bytes stay within the bound all the same (a block touched and not
    /// given back would pile up past it).
    #[test]
    fn pages_read_here_and_there_are_given_back_by_their_blocks() {
        let _serial = serial();
        let len = 6 * MAPPED_BYTES;
        let before = GIVEN_BACK.load(Ordering::Relaxed);
        let mut x = 7u64;
        let here_and_there = std::iter::repeat_with(move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 11) % (len - 1)
        });
        let reads = 5 * MIN_READS as usize;
        let most = most_resident_over_reads(len, here_and_there.take(reads), 16);
        assert!(GIVEN_BACK.load(Ordering::Relaxed) >= before + 4);
        assert!(
            most <= MAPPED_BYTES + granule() as u64,
            "{most} bytes resident, over {MAPPED_BYTES}"
        );
    }

    /// Reads that hop over more blocks than the bound holds, one read in each at a time (a
    /// hand-out of the last big queues of a crawl): the pages are given back once every
    /// [`MIN_READS`] reads at most, not at nearly every read; the reads past the bound go to
    /// the file, find its bytes, and map nothing more.
    #[test]
    fn reads_hopping_over_many_blocks_give_the_pages_back_once_in_many_reads() {
        let _serial = serial();
        let blocks = 6 * MAPPED_BYTES / granule() as u64;
        let len = blocks * granule() as u64;
        let before = GIVEN_BACK.load(Ordering::Relaxed);
        let reads = 4096u64;
        let hops = (0..reads).map(|k| (k % blocks) * granule() as u64 + k % 4096);
        let most = most_resident_over_reads(len, hops, 16);
        let given_back = GIVEN_BACK.load(Ordering::Relaxed) - before;
        assert!(
            given_back <= reads / MIN_READS + 1,
            "given back {given_back} times in {reads} reads"
        );
        assert!(
            given_back >= reads / MIN_READS - 1,
            "given back {given_back} times"
        );
        assert!(
            most <= MAPPED_BYTES + granule() as u64,
            "{most} bytes resident, over {MAPPED_BYTES}"
        );
    }

    /// `err` says the directory was moved, removed or replaced.
    fn assert_gone(err: &io::Error) {
        assert!(
            err.to_string().contains("moved, removed or replaced"),
            "{err}"
        );
    }

    /// Waits until a sync checks the path again.
    fn after_recheck() {
        std::thread::sleep(std::time::Duration::from_micros(2 * PATH_RECHECK_US));
    }

    /// An open whose directory was replaced by another store's while it read reports that,
    /// whatever the open made of the two stores' files (a damage, or a store it took for
    /// sound); an open whose directory stayed gives its own result.
    #[test]
    fn an_open_whose_directory_was_replaced_meanwhile_says_so() {
        let t = tempfile::tempdir().unwrap();
        let (dir, other, old) = (
            t.path().join("store"),
            t.path().join("other"),
            t.path().join("old"),
        );
        let st = DirStorage::open(&dir).unwrap();
        let lock = st.lock().unwrap();
        let damage = || -> crate::Result<u32> {
            Err(crate::Error::corrupt(
                "MANIFEST",
                0,
                crate::error::Corruption::Checksum {
                    stored: 1,
                    computed: 2,
                },
            ))
        };
        assert_eq!(st.opened(Ok(7)).unwrap(), 7);
        assert!(matches!(
            st.opened(damage()),
            Err(crate::Error::Corrupt { .. })
        ));
        let o = DirStorage::open(&other).unwrap();
        let _other_lock = o.lock().unwrap();
        fs::rename(&dir, &old).unwrap();
        fs::rename(&other, &dir).unwrap();
        for r in [st.opened(Ok(7)), st.opened(damage())] {
            let e = r.unwrap_err();
            assert!(matches!(e, crate::Error::Io { .. }), "{e}");
            assert!(e.to_string().contains("moved, removed or replaced"), "{e}");
            assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
        }
        drop(lock);
    }

    /// A directory moved away while a file of it is open: a sync within a millisecond of the
    /// last lookup of the path may be acknowledged (the write is durable where the directory
    /// went); a sync after that fails, naming what happened, as does a create, at once.
    #[test]
    fn a_sync_into_a_moved_directory_fails_once_the_path_is_checked_again() {
        let t = tempfile::tempdir().unwrap();
        let (dir, moved) = (t.path().join("store"), t.path().join("moved"));
        let st = DirStorage::open(&dir).unwrap();
        let lock = st.lock().unwrap();
        let f = st.create("a").unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync().unwrap();
        fs::rename(&dir, &moved).unwrap();
        let err = st
            .create("b")
            .map(|_| ())
            .expect_err("a create, moved away");
        assert_gone(&err);
        f.write_all_at(b"y", 1).unwrap();
        after_recheck();
        let err = f.sync().expect_err("a sync, moved away");
        assert_gone(&err);
        assert_eq!(fs::read(moved.join("a")).unwrap(), b"xy");
        // Checked at every sync from then on: it stays refused.
        let err = f.sync().expect_err("the next sync, moved away");
        assert_gone(&err);
        drop(lock);
    }

    /// A storage checks its files' syncs and its creates against the lock it took last: one
    /// locked again after its lock file was made anew (a cleaner removed it between two
    /// opens) goes on writing, while one whose directory was removed refuses to.
    #[test]
    fn the_directory_is_checked_against_the_lock_taken_last() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("store");
        let st = DirStorage::open(&dir).unwrap();
        let lock = st.lock().unwrap();
        let f = st.create("a").unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync().unwrap();
        drop(lock);
        // (Held open, the old lock file's inode cannot be given to the new one.)
        let old = File::open(dir.join(crate::names::LOCK)).unwrap();
        fs::remove_file(dir.join(crate::names::LOCK)).unwrap();
        let lock = st.lock().unwrap();
        drop(old);
        let f = st.create("b").unwrap();
        f.write_all_at(b"y", 0).unwrap();
        f.sync().unwrap();
        fs::remove_dir_all(&dir).unwrap();
        f.write_all_at(b"z", 1).unwrap();
        after_recheck();
        let err = f.sync().expect_err("a sync into a removed directory");
        assert_gone(&err);
        let err = st
            .open("a")
            .map(|_| ())
            .expect_err("a file of a removed directory");
        assert_gone(&err);
        drop(lock);
    }
}
