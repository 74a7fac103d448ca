//! The durable Mercator sieve.
//!
//! Pushed URLs are appended to A (the write-ahead log) and their signatures to S (a buffer
//! in RAM). When S is full it is frozen and flushed on a background thread while pushes
//! continue into a second buffer and a new A generation: the flush sorts the batch, drops
//! what Z (every signature ever seen) already holds, writes the new signatures as a Z
//! segment, appends the new URLs to F (the frontier) in the order of their first appearance,
//! and commits the manifest. See `docs/design.md` for the file formats and the crash
//! analysis of every step, and Heydon & Najork, "Mercator: A scalable, extensible Web
//! crawler" (1999) for the original sieve.

pub(crate) mod flush;
mod merger;
pub(crate) mod reaper;
pub(crate) mod recovery;
pub(crate) mod wal;

use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Error, InvalidUrl, Result};
use crate::frontier::{self, Position};
use crate::log::{FrameError, LogReader, LogWriter};
use crate::manifest::Manifest;
use crate::options::{Options, SyncPolicy};
use crate::run::{Run, Slot};
use crate::segment::Segment;
use crate::storage::{DirStorage, Storage, StorageFile};

use flush::{Batch, FlushDone, FlushJob, Gate};

/// The signature of a URL: xxh3-64 with the sieve's seed.
pub fn signature(url: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(url, seed)
}

/// Counts and sizes of a sieve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// URLs pushed, duplicates included (flushed, being flushed, and buffered). After a
    /// crash, the repeats that the cache of recent signatures dropped since the last flush
    /// are not counted.
    pub pushed: u64,
    /// URLs pushed since the last flush (buffered in S or being flushed).
    pub buffered: u64,
    /// Distinct URLs seen and merged (signatures in Z).
    pub distinct: u64,
    /// URLs ever appended to the frontier F.
    pub emitted: u64,
    /// URLs consumed from the frontier (durable cursor).
    pub consumed: u64,
    /// URLs in the frontier not yet consumed.
    pub pending: u64,
    /// Pushes spilled as runs and waiting for a merge with Z (in A, not yet in F).
    pub unmerged: u64,
    /// Runs waiting for a merge.
    pub runs: u64,
    /// Flushes committed (spills and merges).
    pub flushes: u64,
    /// Merges with Z committed.
    pub merges: u64,
    /// Z segments.
    pub segments: u64,
    /// Records of A dropped as torn tails by recoveries.
    pub torn_records: u64,
    /// Bytes of A dropped as torn tails by recoveries, from the damage to the end of the
    /// file (in a file reused from a superseded generation, an upper bound).
    pub torn_bytes: u64,
    /// Bytes on disk of A files (superseded ones the reaper has not yet removed, and its
    /// spares, included).
    pub bytes_a: u64,
    /// Bytes of Z: its current segments (not the superseded ones awaiting removal).
    pub bytes_z: u64,
    /// Bytes on disk of R runs.
    pub bytes_r: u64,
    /// Bytes on disk of F segments.
    pub bytes_f: u64,
    /// Bytes of the manifest and the cursor.
    pub bytes_meta: u64,
    /// The memory budget in bytes.
    pub memory_budget: u64,
    /// Slots per buffer of S.
    pub slots: u64,
    /// The signature seed.
    pub seed: u64,
}

struct InFlight {
    job: Job,
    gate: Arc<Gate>,
    pushes: u64,
    merge: bool,
    /// The A generation of the job's batch (number, file): synced before any later one.
    wal: (u64, Arc<dyn StorageFile>),
}

/// A flush job under way: on the flush thread, or deferred (see `Options::defer_merges`).
enum Job {
    Thread(JoinHandle<Result<FlushDone>>),
    Deferred(Box<FlushJob>),
}

impl InFlight {
    fn is_finished(&self) -> bool {
        match &self.job {
            Job::Thread(h) => h.is_finished(),
            Job::Deferred(_) => false,
        }
    }
}

/// A durable Mercator sieve over a directory.
///
/// ```
/// # fn main() -> crivello::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let mut sieve = crivello::Sieve::open(dir.path(), crivello::Options::new())?;
/// for url in ["http://a/", "http://b/", "http://a/"] {
///     sieve.push(url.as_bytes())?;
/// }
/// sieve.flush()?; // new URLs become readable in the frontier, durably
/// let urls = sieve.frontier_next(10)?;
/// assert_eq!(urls, [b"http://a/".to_vec(), b"http://b/".to_vec()]);
/// sieve.frontier_commit()?; // the consumer's cursor advances durably
/// sieve.close()?;
/// # Ok(()) }
/// ```
pub struct Sieve {
    storage: Arc<dyn Storage>,
    opts: Options,
    slots: usize,
    manifest: Manifest,
    segments: Vec<Arc<Segment>>,
    runs: Vec<Arc<Run>>,
    max_runs: usize,
    gen: u64,
    /// Records of the current generation before S's first one (already flushed).
    gen_skip: u64,
    wal: LogWriter,
    s: Vec<Slot>,
    /// The buffer the last flush handed back, emptied: the next S.
    next_s: Vec<Slot>,
    /// Signatures of recent pushes: a push found there is a repeat and is dropped at once.
    recent: crate::recent::Recent,
    /// Pushes dropped by `recent` since the last freeze (counted by the next flush).
    absorbed: u64,
    /// The last push, in A's buffer but not yet looked up in `recent`: its signature and
    /// length (see `decide`).
    undecided: Option<(u64, usize)>,
    since_sync: u64,
    inflight: Option<InFlight>,
    /// Runs spilled by the pushing thread while a merge was under way, in push order; they
    /// are committed when it ends (until then, orphans that recovery removes: their A
    /// generations are after the manifest's A position, so recovery replays them).
    pending: Vec<Arc<Run>>,
    poisoned: bool,
    cursor: Position,
    read: Position,
    read_file: Option<(u64, Arc<dyn StorageFile>)>,
    read_frame: Option<(u64, u64, crate::log::Frame)>,
    /// The payload buffer of the last frame the reader finished, for the next one.
    read_spare: Vec<u8>,
    /// Removes superseded files; dropped (its work done) before the lock is released.
    reaper: Arc<reaper::Reaper>,
    // Declared last: the lock is released after everything else is dropped.
    _lock: Box<dyn Any + Send + Sync>,
}

impl Sieve {
    /// Opens the sieve in directory `dir`, creating the directory and the sieve if needed,
    /// and recovers from any crash. Takes the directory's exclusive lock.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Sieve> {
        let dir = dir.as_ref();
        let storage = DirStorage::open(dir)
            .map_err(|e| Error::io("open directory", &dir.display().to_string(), e))?;
        Sieve::open_with(Arc::new(storage), opts)
    }

    /// Opens (or creates) the sieve on any [`Storage`], such as the simulated disk.
    pub fn open_with(storage: Arc<dyn Storage>, opts: Options) -> Result<Sieve> {
        recovery::open(storage, opts)
    }

    fn writable(&self) -> Result<()> {
        if self.poisoned {
            Err(Error::Poisoned)
        } else {
            Ok(())
        }
    }

    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Checks a URL against the options.
    pub fn validate(&self, url: &[u8]) -> Result<()> {
        if url.is_empty() {
            return Err(Error::InvalidUrl(InvalidUrl::Empty));
        }
        if url.len() > self.opts.max_url_len {
            return Err(Error::InvalidUrl(InvalidUrl::TooLong {
                len: url.len(),
                max: self.opts.max_url_len,
            }));
        }
        Ok(())
    }

    /// Pushes one URL. It is acknowledged (durable) once a later [`Sieve::sync`],
    /// [`Sieve::flush`] or [`Sieve::close`] returns Ok. An invalid URL is refused and changes
    /// nothing.
    pub fn push(&mut self, url: &[u8]) -> Result<()> {
        self.writable()?;
        self.validate(url)?;
        let sig = signature(url, self.manifest.seed);
        // The cache of recent signatures decides this push at the next call, when its slot
        // has come from memory: meanwhile the caller makes the next URL.
        self.recent.prefetch(sig);
        let r = self.decide();
        self.poison(r)?;
        if self.s.len() >= self.slots {
            let r = self.freeze(false);
            self.poison(r)?;
        }
        self.wal.append_tentative(url);
        self.undecided = Some((sig, url.len()));
        self.since_sync += 1;
        if let SyncPolicy::EveryPushes(n) = self.opts.sync {
            if self.since_sync >= n {
                self.sync()?;
            }
        }
        Ok(())
    }

    /// Decides the last push, logged in A's buffer and not yet looked up in the cache of
    /// recent signatures. Found there, it is a repeat of an earlier push, which is logged
    /// before it: its record is taken back (this push is durable whenever that one is).
    /// Otherwise its record stays and its signature takes a slot of S. Every method that
    /// writes A or reads S decides first.
    /// Nothing is decided once the sieve is poisoned: nothing more may be written.
    fn decide(&mut self) -> Result<()> {
        if self.poisoned {
            return Ok(());
        }
        let Some((sig, len)) = self.undecided.take() else {
            return Ok(());
        };
        if self.recent.seen(sig) {
            self.wal.retract(len);
            self.absorbed += 1;
            return Ok(());
        }
        let idx = self.s.len() as u32;
        crate::run::push_slot(&mut self.s, Slot { sig, idx }, self.slots);
        self.wal.frame_if_full()
    }

    /// Pushes a batch of URLs. All are validated first: if one is invalid, none is pushed.
    pub fn push_batch<U: AsRef<[u8]>>(&mut self, urls: &[U]) -> Result<()> {
        self.writable()?;
        for u in urls {
            self.validate(u.as_ref())?;
        }
        for u in urls {
            self.push(u.as_ref())?;
        }
        Ok(())
    }

    /// Group commit: makes every earlier push durable.
    pub fn sync(&mut self) -> Result<()> {
        self.writable()?;
        let r = self.decide();
        self.poison(r)?;
        if self
            .inflight
            .as_ref()
            .is_some_and(|f| matches!(f.job, Job::Deferred(_)))
        {
            let r = self.finish_inflight();
            self.poison(r)?;
        }
        if let Some(f) = &self.inflight {
            if !f.gate.wait() {
                self.poisoned = true;
                // The flush thread's error tells what failed.
                let r = self.finish_inflight();
                return Err(r.err().unwrap_or(Error::Poisoned));
            }
        }
        let r = self.wal.sync();
        self.poison(r)?;
        self.since_sync = 0;
        Ok(())
    }

    /// Flushes now: every URL pushed so far, buffered or spilled, is merged with Z and, if
    /// new, appended to the frontier. Returns when the merge is committed (durable);
    /// acknowledges every push.
    pub fn flush(&mut self) -> Result<()> {
        self.writable()?;
        let r = self.decide();
        self.poison(r)?;
        self.sort_while_waiting();
        let r = self.finish_inflight();
        self.poison(r)?;
        if !self.s.is_empty() || !self.runs.is_empty() {
            let r = self.freeze(true).and_then(|_| self.finish_inflight());
            self.poison(r)?;
        }
        let r = self.commit_absorbed();
        self.poison(r)?;
        self.since_sync = 0;
        Ok(())
    }

    /// Counts the pushes the cache of recent signatures dropped since the last freeze in the
    /// manifest, when no flush will: a flush with nothing else to do, and `close`. Only with
    /// no flush under way (its manifest would overwrite this one).
    fn commit_absorbed(&mut self) -> Result<()> {
        if self.absorbed == 0 {
            return Ok(());
        }
        debug_assert!(self.inflight.is_none());
        let mut m = self.manifest.clone();
        m.commit += 1;
        m.pushed += self.absorbed;
        m.commit_to(&*self.storage)?;
        self.manifest = m;
        self.absorbed = 0;
        Ok(())
    }

    /// Whether the flush thread is running.
    pub fn is_flushing(&mut self) -> bool {
        let _ = self.poll_inflight();
        self.inflight.is_some()
    }

    /// Applies a finished background flush, without waiting for one still running.
    fn poll_inflight(&mut self) -> Result<()> {
        if self.inflight.as_ref().is_some_and(|f| f.is_finished()) {
            let r = self.finish_inflight();
            return self.poison(r);
        }
        Ok(())
    }

    /// Waits for the background flush, if any, and applies its outcome.
    fn finish_inflight(&mut self) -> Result<()> {
        let Some(f) = self.inflight.take() else {
            return Ok(());
        };
        let done = match f.job {
            Job::Thread(handle) => match handle.join() {
                Ok(r) => r,
                Err(_) => Err(Error::Io {
                    op: "flush",
                    file: "(flush thread)".into(),
                    source: std::io::Error::other("the flush thread panicked"),
                }),
            },
            Job::Deferred(job) => flush::run(*job),
        };
        // The last handle of the batch's generation, removed if merged: closing it frees
        // its pages, which is the reaper's work.
        self.reaper.release(f.wal);
        match done {
            Ok(done) => {
                self.apply(done);
                self.commit_pending()
            }
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    fn apply(&mut self, done: FlushDone) {
        self.manifest = done.manifest;
        // A flush of an empty S hands back an empty buffer: the spare kept stays.
        if done.spare.capacity() >= self.next_s.capacity() {
            self.next_s = done.spare;
        }
        let segments = std::mem::replace(&mut self.segments, done.segments);
        let runs = std::mem::replace(&mut self.runs, done.runs);
        self.reaper.release((segments, runs));
    }

    /// Commits the runs spilled while a merge was under way: appended to the runs, A's
    /// position after the last one.
    fn commit_pending(&mut self) -> Result<()> {
        let Some(last) = self.pending.last() else {
            return Ok(());
        };
        let mut m = self.manifest.clone();
        m.commit += 1;
        m.a_gen = last.meta().gen + 1;
        m.a_skip = 0;
        for run in &self.pending {
            let meta = run.meta();
            m.pushed += meta.records;
            m.flushes += 1;
            m.next_id = m.next_id.max(meta.id + 1);
            m.runs.push(meta);
        }
        if let Err(e) = m.commit_to(&*self.storage) {
            self.poisoned = true;
            return Err(e);
        }
        self.manifest = m;
        self.runs.append(&mut self.pending);
        Ok(())
    }

    /// Whether a merge is under way (not finished) that a full buffer should not wait for:
    /// the buffer is spilled by the pushing thread instead, while the runs stay under their
    /// limit.
    fn spill_beside_merge(&self) -> bool {
        self.inflight
            .as_ref()
            .is_some_and(|f| f.merge && !f.is_finished())
            && self.runs.len() + self.pending.len() + 2 < self.max_runs
    }

    /// Spills S as a run on this thread, beside a merge under way: the frame is written and
    /// the generation synced, S is sorted in place into the run's pairs and written, and the
    /// next generation opened. The run is committed when the merge ends.
    fn spill_pending(&mut self) -> Result<()> {
        // The merge's batch generation first (its thread may not have synced it yet): a
        // later generation never becomes durable before an earlier one.
        if let Some(f) = &self.inflight {
            let (gen, file) = &f.wal;
            file.sync()
                .map_err(|e| Error::io("fsync", &wal::file_name(*gen), e))?;
        }
        self.wal.finish()?;
        self.wal.sync()?;
        let records = self.s.len() as u64;
        crate::run::sort_slots(&mut self.s);
        let last_id = self.pending.last().map(|r| r.meta().id + 1);
        let meta = crate::run::RunMeta {
            id: last_id.unwrap_or(0).max(self.manifest.next_id),
            gen: self.gen,
            skip: self.gen_skip,
            records,
            pairs: self.s.len() as u64,
        };
        crate::run::write(&*self.storage, meta, &self.s)?;
        self.pending
            .push(Arc::new(Run::open(&*self.storage, meta)?));
        self.s.clear();
        self.next_generation()
    }

    /// Opens the next A generation, after the current one is finished.
    fn next_generation(&mut self) -> Result<()> {
        self.gen += 1;
        self.gen_skip = 0;
        let wal = wal::create(&*self.storage, self.gen, self.reaper.take_spare())?;
        self.wal = wal::configure(wal, &self.opts);
        Ok(())
    }

    /// When the flush thread is still busy, the pushing thread is about to wait for it:
    /// meanwhile it sorts S by signature in place, so that the next flush's sort finds it in
    /// order (a linear pass) and the caller waits less. The order of S means nothing else.
    fn sort_while_waiting(&mut self) {
        let busy = self
            .inflight
            .as_ref()
            .is_some_and(|f| matches!(f.job, Job::Thread(_)) && !f.is_finished());
        if busy && self.s.len() > 1 {
            crate::sort::sort_by_sig(&mut self.s);
        }
    }

    /// Whether the next flush should merge with Z rather than spill a run: when the pushes
    /// waiting in runs and in S reach the number of signatures in Z (so that reading and
    /// rewriting Z costs a bounded amount per push), when the runs reach their limit, or when
    /// the frontier runs low.
    fn merge_due(&self) -> bool {
        let m = &self.manifest;
        let unmerged = m.runs.iter().map(|r| r.records).sum::<u64>() + self.s.len() as u64;
        let distinct: u64 = m.segments.iter().map(|s| s.sigs).sum();
        let low = self.opts.frontier_low.unwrap_or(self.slots as u64);
        flush::merge_due(unmerged, distinct, self.runs.len(), self.max_runs)
            || m.f_count.saturating_sub(self.read.consumed) < low
    }

    /// The buffer for the next S: the one the last flush handed back, or a new one (which
    /// grows as it fills: see [`crate::run::push_slot`]).
    fn take_next_s(&mut self) -> Vec<Slot> {
        std::mem::take(&mut self.next_s)
    }

    /// Freezes S and the current A generation into a flush job (a merge if `merge` or if one
    /// is due, else a spill), opens the next generation, and runs the job (in the background
    /// if so configured). With S empty, only a merge of the runs is run.
    fn freeze(&mut self, merge: bool) -> Result<()> {
        debug_assert!(self.undecided.is_none(), "a push not yet decided");
        if !merge && !self.s.is_empty() && self.spill_beside_merge() {
            return self.spill_pending();
        }
        self.sort_while_waiting();
        self.finish_inflight()?;
        let merge = merge || self.merge_due();
        let gate = Arc::new(Gate::default());
        let absorbed = std::mem::take(&mut self.absorbed);
        let pushes = self.s.len() as u64 + absorbed;
        let batch = if self.s.is_empty() {
            Batch {
                gen: self.gen,
                wal: self.wal.file().clone(),
                skip: self.gen_skip,
                sigs: Vec::new(),
                absorbed,
                next: (self.manifest.a_gen, self.manifest.a_skip),
            }
        } else {
            self.wal.finish()?;
            let next_s = self.take_next_s();
            let batch = Batch {
                gen: self.gen,
                wal: self.wal.file().clone(),
                skip: self.gen_skip,
                sigs: std::mem::replace(&mut self.s, next_s),
                absorbed,
                next: (self.gen + 1, 0),
            };
            self.next_generation()?;
            batch
        };
        let batch_wal = (batch.gen, batch.wal.clone());
        let job = FlushJob {
            storage: self.storage.clone(),
            manifest: self.manifest.clone(),
            segments: self.segments.clone(),
            runs: self.runs.clone(),
            batch,
            merge,
            torn: (0, 0),
            gate: gate.clone(),
            reaper: self.reaper.clone(),
        };
        if self.opts.background {
            let handle = std::thread::Builder::new()
                .name("crivello-flush".into())
                .spawn(move || flush::run(job))
                .map_err(|e| Error::io("spawn", "flush thread", e))?;
            self.inflight = Some(InFlight {
                job: Job::Thread(handle),
                gate,
                pushes,
                merge,
                wal: batch_wal,
            });
            Ok(())
        } else if self.opts.defer_merges && merge {
            self.inflight = Some(InFlight {
                job: Job::Deferred(Box::new(job)),
                gate,
                pushes,
                merge,
                wal: batch_wal,
            });
            Ok(())
        } else {
            let done = flush::run(job)?;
            self.apply(done);
            Ok(())
        }
    }

    /// Whether `url` was ever pushed (and not lost as an unacknowledged torn tail). Reads at
    /// most one block of each Z segment, and a binary search of blocks in each run.
    pub fn contains(&mut self, url: &[u8]) -> Result<bool> {
        let r = self.decide().and_then(|()| self.finish_inflight());
        self.poison(r)?;
        let sig = signature(url, self.manifest.seed);
        if self.s.iter().any(|p| p.sig == sig) {
            return Ok(true);
        }
        for seg in &self.segments {
            if seg.contains(sig)? {
                return Ok(true);
            }
        }
        for run in &self.runs {
            if run.contains(sig)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Reads up to `max` URLs of the frontier after the read position, and advances the read
    /// position (not the durable cursor: see [`Sieve::frontier_commit`]). Returns fewer, or
    /// none, when the frontier holds fewer; a flush makes more available.
    pub fn frontier_next(&mut self, max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.frontier_read(max, usize::MAX, |url| {
            out.push(url.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    /// Passes frontier URLs after the read position to `each`, until `max_urls` URLs or
    /// `max_bytes` bytes of URLs were passed (at least one URL, if any is available), and
    /// advances the read position past them. Returns how many were passed. If `each` fails,
    /// the read position stays after the last URL it accepted.
    pub fn frontier_read(
        &mut self,
        max_urls: usize,
        max_bytes: usize,
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<usize> {
        self.poll_inflight()?;
        let (mut urls, mut bytes) = (0usize, 0usize);
        while urls < max_urls && bytes < max_bytes && self.read.consumed < self.manifest.f_count {
            let frame = match self.read_frame.take() {
                Some((seg, off, f)) if seg == self.read.segment && off == self.read.offset => f,
                _ => match self.load_frame()? {
                    Some(f) => f,
                    None => continue, // moved to the next segment
                },
            };
            let skip = self.read.skip as usize;
            if skip >= frame.count as usize {
                return Err(Error::corrupt(
                    frontier::CURSOR_FILE,
                    0,
                    crate::error::Corruption::Field {
                        field: "cursor skip",
                        found: skip as u64,
                    },
                ));
            }
            let mut taken = 0usize;
            let mut result = Ok(());
            for url in frame.records().skip(skip) {
                if urls >= max_urls || (bytes >= max_bytes && urls > 0) {
                    break;
                }
                if let Err(e) = each(url) {
                    result = Err(e);
                    break;
                }
                taken += 1;
                urls += 1;
                bytes += url.len();
            }
            self.read.consumed += taken as u64;
            if skip + taken == frame.count as usize {
                self.read.offset += frame.size();
                self.read.skip = 0;
                self.read_spare = frame.payload;
            } else {
                self.read.skip += taken as u32;
                self.read_frame = Some((self.read.segment, self.read.offset, frame));
            }
            result?;
        }
        Ok(urls)
    }

    /// Reads the frame at the read position; `None` if the position moved to the next F
    /// segment instead.
    fn load_frame(&mut self) -> Result<Option<crate::log::Frame>> {
        let seg = self.read.segment;
        let name = frontier::file_name(seg);
        let file = match &self.read_file {
            Some((id, f)) if *id == seg => f.clone(),
            _ => {
                let f = self.storage.open(&name).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        Error::corrupt(&name, 0, crate::error::Corruption::Missing)
                    }
                    _ => Error::io("open", &name, e),
                })?;
                self.read_file = Some((seg, f.clone()));
                f
            }
        };
        let limit = if seg == self.manifest.f_tail {
            self.manifest.f_tail_len
        } else {
            file.len().map_err(|e| Error::io("stat", &name, e))?
        };
        if self.read.offset >= limit {
            // This segment is consumed: move to the next one.
            let next = next_f_segment(&*self.storage, seg)?
                .ok_or_else(|| Error::corrupt(&name, limit, crate::error::Corruption::Missing))?;
            let nname = frontier::file_name(next);
            let nf = self
                .storage
                .open(&nname)
                .map_err(|e| Error::io("open", &nname, e))?;
            let mut h = vec![0u8; frontier::HEADER_LEN as usize];
            nf.read_exact_at(&mut h, 0)
                .map_err(|e| Error::io("read", &nname, e))?;
            let first = frontier::check_header(&h, &nname, next)?;
            if first != self.read.consumed {
                return Err(Error::corrupt(
                    &nname,
                    16,
                    crate::error::Corruption::Field {
                        field: "first record",
                        found: first,
                    },
                ));
            }
            self.read = Position {
                segment: next,
                offset: frontier::HEADER_LEN,
                skip: 0,
                consumed: first,
            };
            self.read_file = Some((next, nf));
            return Ok(None);
        }
        let reader = LogReader::new(&*file, limit, u64::MAX, self.read.segment);
        match reader.frame_with(self.read.offset, std::mem::take(&mut self.read_spare)) {
            Ok(f) => Ok(Some(f)),
            Err(FrameError::Io(e)) => Err(Error::io("read", &name, e)),
            Err(FrameError::End) => Err(Error::corrupt(
                &name,
                self.read.offset,
                crate::error::Corruption::Truncated {
                    needed: 1,
                    available: 0,
                },
            )),
            Err(FrameError::Invalid(what)) => Err(Error::corrupt(&name, self.read.offset, what)),
        }
    }

    /// Makes the read position durable: the URLs read so far will not be returned again,
    /// even after a crash. Frontier segments fully consumed are deleted.
    pub fn frontier_commit(&mut self) -> Result<()> {
        self.writable()?;
        if self.read == self.cursor {
            return Ok(());
        }
        let r = self.read.commit_to(&*self.storage);
        self.poison(r)?;
        let old = self.cursor.segment;
        self.cursor = self.read;
        if self.cursor.segment != old {
            if let Ok(names) = self.storage.list() {
                for n in names {
                    if let Some(id) = recovery::parse_f_name(&n) {
                        if id < self.cursor.segment {
                            self.reaper.remove(&n);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Forgets reads not committed: the read position goes back to the durable cursor.
    pub fn frontier_rewind(&mut self) {
        self.read = self.cursor;
        self.read_frame = None;
    }

    /// URLs in the frontier after the read position.
    pub fn frontier_pending(&mut self) -> u64 {
        let _ = self.poll_inflight();
        self.manifest.f_count - self.read.consumed
    }

    /// Counts and sizes.
    pub fn stats(&mut self) -> Result<Stats> {
        let r = self.decide();
        self.poison(r)?;
        let _ = self.poll_inflight();
        let inflight = self.inflight.as_ref().map_or(0, |f| f.pushes);
        let spilled: u64 = self.pending.iter().map(|r| r.meta().records).sum();
        let m = &self.manifest;
        let mut st = Stats {
            pushed: m.pushed + inflight + spilled + self.s.len() as u64 + self.absorbed,
            buffered: inflight + self.s.len() as u64 + self.absorbed,
            distinct: m.segments.iter().map(|s| s.sigs).sum(),
            unmerged: m.runs.iter().map(|r| r.records).sum::<u64>() + spilled,
            runs: (m.runs.len() + self.pending.len()) as u64,
            merges: m.merges,
            emitted: m.f_count,
            consumed: self.cursor.consumed,
            pending: m.f_count - self.cursor.consumed,
            flushes: m.flushes,
            segments: m.segments.len() as u64,
            torn_records: m.torn_records,
            torn_bytes: m.torn_bytes,
            memory_budget: self.opts.memory as u64,
            slots: self.slots as u64,
            seed: m.seed,
            bytes_z: m.segments.iter().map(|s| s.bytes).sum(),
            ..Stats::default()
        };
        if self.opts.slots.is_some() {
            st.memory_budget = (self.slots * crate::options::BYTES_PER_SLOT) as u64;
        }
        for name in self
            .storage
            .list()
            .map_err(|e| Error::io("list", "directory", e))?
        {
            let Ok(f) = self.storage.open(&name) else {
                continue;
            };
            let len = f.len().unwrap_or(0);
            match name.as_bytes().first() {
                Some(b'a') if name.ends_with(".log") => st.bytes_a += len,
                Some(b'z') => {}
                Some(b'r') if name.ends_with(".run") => st.bytes_r += len,
                Some(b'f') => st.bytes_f += len,
                _ if name == crate::manifest::FILE || name == frontier::CURSOR_FILE => {
                    st.bytes_meta += len
                }
                _ => {}
            }
        }
        Ok(st)
    }

    /// The signature seed of this sieve.
    pub fn seed(&self) -> u64 {
        self.manifest.seed
    }

    /// Waits for any flush, syncs, and closes. Buffered pushes stay in A and are flushed at the
    /// next open.
    pub fn close(mut self) -> Result<()> {
        self.sync()?;
        let r = self.finish_inflight().and_then(|()| self.commit_absorbed());
        self.poison(r)?;
        let r = self.wal.seal();
        self.poison(r)
    }
}

impl Drop for Sieve {
    fn drop(&mut self) {
        // Never leave a flush writing after the lock is released.
        if let Some(InFlight {
            job: Job::Thread(handle),
            ..
        }) = self.inflight.take()
        {
            let _ = handle.join();
        }
    }
}

/// The next F segment after `id`, if any.
fn next_f_segment(storage: &dyn Storage, id: u64) -> Result<Option<u64>> {
    let names = storage
        .list()
        .map_err(|e| Error::io("list", "directory", e))?;
    Ok(names
        .iter()
        .filter_map(|n| recovery::parse_f_name(n))
        .filter(|&x| x > id)
        .min())
}
