//! An in-memory, deterministic, fault-injecting disk.
//!
//! [`SimDisk`] keeps, for every file, its *live* content (what reads see, the page cache) and
//! its *durable* content (what survives a power cut), and for the directory the live and the
//! durable names. A file's `sync` makes its data durable; `sync_dir` makes the names durable.
//! Everything else is pending, and a crash image decides its fate:
//!
//! | [`CrashImage`] | file data | directory entries |
//! |---|---|---|
//! | `KillProcess` | live (the page cache survives) | live |
//! | `DropAll` | durable only | durable only |
//! | `KeepDataDropDir` | live | durable only |
//! | `Random(seed)` | each pending write dropped, kept, or torn per 512-byte sector (torn sectors zero or garbage) | a random prefix of the pending operations |
//!
//! Faults: [`SimDisk::crash_at`] stops the disk before the k-th mutating operation (every
//! later operation fails, as if the process had died); [`SimDisk::fail_at`] makes the k-th
//! mutating operation fail with EIO, ENOSPC or a short write, once or from then on; a failed
//! `sync` forgets the file's dirty pages, as Linux does (the next sync "succeeds" without
//! them). All randomness comes from a seed.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// The sector size used to tear writes.
pub const SECTOR: usize = 512;

/// What a crash leaves on the disk; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashImage {
    /// The process died; the operating system kept everything it was given.
    KillProcess,
    /// Power loss dropping every unsynced write and directory operation.
    DropAll,
    /// Unsynced data survived but unsynced directory operations did not.
    KeepDataDropDir,
    /// Power loss on a file system that journals metadata but not data: every directory
    /// operation and every file size survived, but the bytes of unsynced writes read as zeros.
    ZeroedData,
    /// Power loss with a random fate for every pending write and directory operation.
    Random(u64),
}

impl CrashImage {
    /// One image of each kind, the random one drawn from `seed`: what a crash test checks at
    /// each crash point.
    pub fn each_kind(seed: u64) -> [CrashImage; 5] {
        [
            CrashImage::KillProcess,
            CrashImage::DropAll,
            CrashImage::KeepDataDropDir,
            CrashImage::ZeroedData,
            CrashImage::Random(seed),
        ]
    }
}

/// The kind of an injected I/O error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`.
    Eio,
    /// `ENOSPC`.
    NoSpace,
    /// A write that stores only its first half, then fails with EIO (other operations: EIO).
    ShortWrite,
}

/// One mutating operation, as recorded in the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `create(name)`.
    Create(String),
    /// `write(name, offset, len)`.
    Write(String, u64, usize),
    /// `set_len(name, len)`.
    SetLen(String, u64),
    /// `sync(name)`.
    Sync(String),
    /// `sync_dir()`.
    SyncDir,
    /// `rename(from, to)`.
    Rename(String, String),
    /// `remove(name)`.
    Remove(String),
}

#[derive(Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Clone)]
enum DirOp {
    Link(String, usize),
    Rename(String, String),
    Unlink(String),
}

#[derive(Clone, Default)]
struct State {
    inodes: Vec<Inode>,
    live: BTreeMap<String, usize>,
    durable: BTreeMap<String, usize>,
    pending_dir: Vec<DirOp>,
    ops: u64,
    crash_at: Option<u64>,
    crashed: bool,
    fail_at: Option<(u64, FaultKind, bool)>,
    failing: Option<FaultKind>,
    /// Reads so far (counted apart from the mutating operations, whose numbering the crash
    /// points use).
    reads: u64,
    /// The read that fails with EIO, and whether every later read fails too.
    read_fail_at: Option<(u64, bool)>,
    reads_failing: bool,
    /// Every read returns at most half the bytes asked for (at least one), as `pread` may.
    short_reads: bool,
    /// Files opened with `open_immutable` do not serve their bytes in place.
    no_mapping: bool,
    /// Files this user may not open (EACCES), by name.
    unreadable: std::collections::BTreeSet<String>,
    /// Bytes served in place so far.
    mapped_bytes: u64,
    sync_fail_seed: u64,
    trace: Vec<Op>,
    locked: bool,
}

/// The simulated disk. Cloning gives another handle on the same disk.
#[derive(Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimDisk")
    }
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated crash: the disk is gone")
}

fn fault_error(kind: FaultKind) -> io::Error {
    match kind {
        FaultKind::NoSpace => io::Error::from_raw_os_error(28),
        FaultKind::Eio | FaultKind::ShortWrite => io::Error::from_raw_os_error(5),
    }
}

/// A small deterministic generator (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_B00C)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A uniform value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

fn apply_write(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let off = offset as usize;
    if buf.len() < off + data.len() {
        buf.resize(off + data.len(), 0);
    }
    buf[off..off + data.len()].copy_from_slice(data);
}

impl State {
    /// Counts a mutating operation: the crash and fault points.
    fn step(&mut self, op: Op) -> io::Result<()> {
        if self.crashed {
            return Err(crashed_error());
        }
        self.ops += 1;
        if self.crash_at == Some(self.ops) {
            self.crashed = true;
            return Err(crashed_error());
        }
        if let Some(kind) = self.failing {
            return Err(fault_error(kind));
        }
        if let Some((k, kind, sticky)) = self.fail_at {
            if k == self.ops {
                if sticky {
                    self.failing = Some(kind);
                }
                // A short write is handled by the caller; report it through the error kind.
                if kind == FaultKind::ShortWrite {
                    if let Op::Write(..) = op {
                        self.trace.push(op);
                        return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
                    }
                }
                return Err(fault_error(kind));
            }
        }
        self.trace.push(op);
        Ok(())
    }

    fn check_alive(&self) -> io::Result<()> {
        if self.crashed {
            Err(crashed_error())
        } else {
            Ok(())
        }
    }

    /// The disk a crash of kind `image` leaves. (Over 80 lines: the fate of names, then of
    /// every pending write, for each kind, as the table of the module's documentation.)
    fn image(&self, image: CrashImage) -> State {
        let mut rng = Rng::new(match image {
            CrashImage::Random(seed) => seed,
            _ => 0,
        });
        let names = match image {
            CrashImage::KillProcess | CrashImage::ZeroedData => self.live.clone(),
            CrashImage::DropAll | CrashImage::KeepDataDropDir => self.durable.clone(),
            CrashImage::Random(_) => {
                let mut names = self.durable.clone();
                let keep = rng.below(self.pending_dir.len() as u64 + 1) as usize;
                for op in &self.pending_dir[..keep] {
                    match op {
                        DirOp::Link(name, ino) => {
                            names.insert(name.clone(), *ino);
                        }
                        DirOp::Rename(from, to) => {
                            if let Some(ino) = names.remove(from) {
                                names.insert(to.clone(), ino);
                            }
                        }
                        DirOp::Unlink(name) => {
                            names.remove(name);
                        }
                    }
                }
                names
            }
        };
        let mut out = State::default();
        let mut map = BTreeMap::new();
        for (name, &ino) in &names {
            let new_ino = *map.entry(ino).or_insert_with(|| {
                let node = &self.inodes[ino];
                let content = match image {
                    CrashImage::KillProcess | CrashImage::KeepDataDropDir => node.live.clone(),
                    CrashImage::DropAll => node.durable.clone(),
                    CrashImage::ZeroedData => {
                        let mut c = node.live.clone();
                        for p in &node.pending {
                            if let Pending::Write { offset, data } = p {
                                let start = (*offset as usize).min(c.len());
                                let end = (start + data.len()).min(c.len());
                                c[start..end].iter_mut().for_each(|b| *b = 0);
                            }
                        }
                        c
                    }
                    CrashImage::Random(_) => {
                        let mut c = node.durable.clone();
                        for p in &node.pending {
                            match p {
                                Pending::SetLen(len) => {
                                    if rng.below(2) == 0 {
                                        c.resize(*len as usize, 0);
                                    }
                                }
                                Pending::Write { offset, data } => match rng.below(3) {
                                    0 => {}
                                    1 => apply_write(&mut c, *offset, data),
                                    _ => {
                                        let garbage = rng.below(2) == 0;
                                        let end = *offset as usize + data.len();
                                        if c.len() < end && rng.below(2) == 0 {
                                            // The size became durable before the data.
                                            c.resize(end, 0);
                                        }
                                        let mut s = *offset as usize;
                                        while s < end {
                                            let e = ((s / SECTOR + 1) * SECTOR).min(end);
                                            match rng.below(3) {
                                                0 => {}
                                                1 => {
                                                    if c.len() < e {
                                                        c.resize(e, 0);
                                                    }
                                                    let from = s - *offset as usize;
                                                    c[s..e].copy_from_slice(
                                                        &data[from..from + (e - s)],
                                                    );
                                                }
                                                _ if garbage && e <= c.len() => {
                                                    for b in &mut c[s..e] {
                                                        *b = rng.next_u64() as u8;
                                                    }
                                                }
                                                _ => {}
                                            }
                                            s = e;
                                        }
                                    }
                                },
                            }
                        }
                        c
                    }
                };
                out.inodes.push(Inode {
                    live: content.clone(),
                    durable: content,
                    pending: vec![],
                });
                out.inodes.len() - 1
            });
            out.live.insert(name.clone(), new_ino);
        }
        out.durable = out.live.clone();
        out
    }
}

impl SimDisk {
    /// A new, empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock only happens in a failing test; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens `name`; `immutable`: as [`Storage::open_immutable`], its bytes served in place
    /// unless [`SimDisk::set_mapping`] turned that off.
    fn open_as(&self, name: &str, immutable: bool) -> io::Result<Arc<dyn StorageFile>> {
        let s = self.lock_state();
        s.check_alive()?;
        let ino = *s
            .live
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if s.unreadable.contains(name) {
            return Err(io::ErrorKind::PermissionDenied.into());
        }
        let mapped =
            (immutable && !s.no_mapping).then(|| s.inodes[ino].live.clone().into_boxed_slice());
        drop(s);
        Ok(Arc::new(SimFile {
            disk: self.clone(),
            ino,
            name: name.to_owned(),
            mapped,
        }))
    }

    /// Makes file `name` one this user may not open (`on`), as a file of another owner
    /// and mode 000 is: its opens fail with EACCES. It may still be renamed and removed.
    pub fn set_unreadable(&self, name: &str, on: bool) {
        let mut s = self.lock_state();
        match on {
            true => s.unreadable.insert(name.to_owned()),
            false => s.unreadable.remove(name),
        };
    }

    /// Crash before the `k`-th mutating operation from now on (1 = the next one).
    pub fn crash_at(&self, k: u64) {
        let mut s = self.lock_state();
        s.crash_at = Some(s.ops + k);
    }

    /// Make the `k`-th mutating operation from now on fail with `kind`; if `sticky`, every
    /// later operation fails too.
    pub fn fail_at(&self, k: u64, kind: FaultKind, sticky: bool) {
        let mut s = self.lock_state();
        s.fail_at = Some((s.ops + k, kind, sticky));
    }

    /// Make the `k`-th read from now on (1 = the next one) fail with EIO; if `sticky`, every
    /// later read fails too. Reads are counted apart from the mutating operations.
    pub fn fail_read_at(&self, k: u64, sticky: bool) {
        let mut s = self.lock_state();
        s.read_fail_at = Some((s.reads + k, sticky));
    }

    /// The number of reads so far.
    pub fn reads(&self) -> u64 {
        self.lock_state().reads
    }

    /// With `on`, every read returns at most half the bytes asked for (at least one): short
    /// reads that a caller must continue, which `pread` may give on a real disk.
    pub fn set_short_reads(&self, on: bool) {
        self.lock_state().short_reads = on;
    }

    /// With `on` (the default), a file opened with [`Storage::open_immutable`] serves its
    /// bytes in place ([`StorageFile::mapped`]), as a mapped file of the real directory does:
    /// a copy of its content taken at the open, which such a file never changes. While a
    /// read fault is armed, with short reads, and after a crash it serves none, so that the
    /// reader's `read_at` meets them. Bytes served in place are not counted in
    /// [`SimDisk::reads`]: a sweep of read faults over every read of a clean run should turn
    /// this off.
    pub fn set_mapping(&self, on: bool) {
        self.lock_state().no_mapping = !on;
    }

    /// The bytes files served in place so far ([`SimDisk::set_mapping`]).
    pub fn mapped_bytes(&self) -> u64 {
        self.lock_state().mapped_bytes
    }

    /// Seeds the choice of which dirty pages a failed fsync keeps.
    pub fn set_sync_fail_seed(&self, seed: u64) {
        self.lock_state().sync_fail_seed = seed;
    }

    /// Whether the disk has crashed.
    pub fn has_crashed(&self) -> bool {
        self.lock_state().crashed
    }

    /// The number of mutating operations so far.
    pub fn ops(&self) -> u64 {
        self.lock_state().ops
    }

    /// The mutating operations so far, in order.
    pub fn trace(&self) -> Vec<Op> {
        self.lock_state().trace.clone()
    }

    /// The disk as a crash would leave it: a new, healthy disk.
    pub fn crash_image(&self, image: CrashImage) -> SimDisk {
        let s = self.lock_state();
        SimDisk {
            state: Arc::new(Mutex::new(s.image(image))),
        }
    }

    /// The names of the files, sorted.
    pub fn files(&self) -> Vec<String> {
        self.lock_state().live.keys().cloned().collect()
    }

    /// The live content of `name`.
    pub fn content(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.lock_state();
        s.live.get(name).map(|&i| s.inodes[i].live.clone())
    }

    /// Replaces the content of `name` at rest (live and durable): for corruption tests.
    pub fn set_content(&self, name: &str, data: Vec<u8>) {
        let mut s = self.lock_state();
        if let Some(&i) = s.live.get(name) {
            s.inodes[i] = Inode {
                live: data.clone(),
                durable: data,
                pending: vec![],
            };
        }
    }

    /// Flips bit `bit` of `name` at rest.
    pub fn flip_bit(&self, name: &str, bit: u64) {
        if let Some(mut c) = self.content(name) {
            let byte = (bit / 8) as usize;
            if byte < c.len() {
                c[byte] ^= 1 << (bit % 8);
                self.set_content(name, c);
            }
        }
    }

    /// Removes `name` at rest.
    pub fn delete(&self, name: &str) {
        let mut s = self.lock_state();
        s.live.remove(name);
        s.durable.remove(name);
    }
}

struct SimFile {
    disk: SimDisk,
    ino: usize,
    name: String,
    /// The content at the open of a file opened with `open_immutable`, served in place.
    mapped: Option<Box<[u8]>>,
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut s = self.disk.lock_state();
        s.check_alive()?;
        s.reads += 1;
        if let Some((k, sticky)) = s.read_fail_at {
            if k == s.reads {
                s.reads_failing |= sticky;
                return Err(fault_error(FaultKind::Eio));
            }
        }
        if s.reads_failing {
            return Err(fault_error(FaultKind::Eio));
        }
        let data = &s.inodes[self.ino].live;
        let off = offset.min(data.len() as u64) as usize;
        let mut n = buf.len().min(data.len() - off);
        if s.short_reads && n > 1 {
            n /= 2;
        }
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn mapped(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let map = self.mapped.as_deref()?;
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        if end > map.len() || len == 0 {
            return None;
        }
        let mut s = self.disk.lock_state();
        if s.read_fail_at.is_some() || s.reads_failing || s.short_reads || s.crashed {
            return None;
        }
        s.mapped_bytes += len as u64;
        Some(&map[start..end])
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.disk.lock_state();
        match s.step(Op::Write(self.name.clone(), offset, buf.len())) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WriteZero => {
                let half = &buf[..buf.len() / 2];
                let node = &mut s.inodes[self.ino];
                apply_write(&mut node.live, offset, half);
                node.pending.push(Pending::Write {
                    offset,
                    data: half.to_vec(),
                });
                return Err(io::Error::from_raw_os_error(5));
            }
            Err(e) => return Err(e),
        }
        let node = &mut s.inodes[self.ino];
        apply_write(&mut node.live, offset, buf);
        node.pending.push(Pending::Write {
            offset,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.disk.lock_state();
        s.check_alive()?;
        Ok(s.inodes[self.ino].live.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.disk.lock_state();
        s.step(Op::SetLen(self.name.clone(), len))?;
        let node = &mut s.inodes[self.ino];
        node.live.resize(len as usize, 0);
        node.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.disk.lock_state();
        if let Err(e) = s.step(Op::Sync(self.name.clone())) {
            if !s.crashed {
                // Like Linux: the dirty pages are marked clean whether or not they reached
                // the disk; some did, some did not. The live content stays as written.
                let mut rng = Rng::new(s.sync_fail_seed ^ s.ops);
                let node = &mut s.inodes[self.ino];
                for p in std::mem::take(&mut node.pending) {
                    if rng.below(2) == 0 {
                        match p {
                            Pending::Write { offset, data } => {
                                apply_write(&mut node.durable, offset, &data)
                            }
                            Pending::SetLen(len) => node.durable.resize(len as usize, 0),
                        }
                    }
                }
            }
            return Err(e);
        }
        // Only the dirty pages reach the disk: pages forgotten by a failed sync stay as they
        // were on disk, though the live content (the page cache) still shows the new bytes.
        let node = &mut s.inodes[self.ino];
        for p in std::mem::take(&mut node.pending) {
            match p {
                Pending::Write { offset, data } => apply_write(&mut node.durable, offset, &data),
                Pending::SetLen(len) => node.durable.resize(len as usize, 0),
            }
        }
        Ok(())
    }
}

impl Storage for SimDisk {
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let mut s = self.lock_state();
        s.step(Op::Create(name.to_owned()))?;
        let ino = if let Some(&ino) = s.live.get(name) {
            let node = &mut s.inodes[ino];
            node.live.clear();
            node.pending.push(Pending::SetLen(0));
            ino
        } else {
            s.inodes.push(Inode::default());
            let ino = s.inodes.len() - 1;
            s.live.insert(name.to_owned(), ino);
            s.pending_dir.push(DirOp::Link(name.to_owned(), ino));
            ino
        };
        drop(s);
        Ok(Arc::new(SimFile {
            disk: self.clone(),
            ino,
            name: name.to_owned(),
            mapped: None,
        }))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.open_as(name, false)
    }

    fn open_immutable(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.open_as(name, true)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut s = self.lock_state();
        if !s.live.contains_key(from) {
            s.check_alive()?;
            return Err(io::ErrorKind::NotFound.into());
        }
        s.step(Op::Rename(from.to_owned(), to.to_owned()))?;
        let ino = s.live.remove(from).expect("checked above");
        s.live.insert(to.to_owned(), ino);
        s.pending_dir
            .push(DirOp::Rename(from.to_owned(), to.to_owned()));
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut s = self.lock_state();
        if !s.live.contains_key(name) {
            s.check_alive()?;
            return Err(io::ErrorKind::NotFound.into());
        }
        s.step(Op::Remove(name.to_owned()))?;
        s.live.remove(name);
        s.pending_dir.push(DirOp::Unlink(name.to_owned()));
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.lock_state();
        s.step(Op::SyncDir)?;
        s.durable = s.live.clone();
        s.pending_dir.clear();
        Ok(())
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let s = self.lock_state();
        s.check_alive()?;
        Ok(s.live.keys().cloned().collect())
    }

    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        let mut s = self.lock_state();
        s.check_alive()?;
        if s.locked {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        s.locked = true;
        Ok(Box::new(SimLock(self.clone())))
    }

    fn describe(&self) -> String {
        "simulated disk".to_owned()
    }
}

struct SimLock(SimDisk);

impl Drop for SimLock {
    fn drop(&mut self) {
        self.0.lock_state().locked = false;
    }
}
