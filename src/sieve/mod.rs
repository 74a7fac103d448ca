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

mod consume;
pub(crate) mod flush;
mod freeze;
mod gate;
pub(crate) mod reaper;
pub(crate) mod recovery;
mod stats;
pub(crate) mod wal;

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use crate::buffer::recent::Recent;
use crate::buffer::{self, SigIndex, Slot};
use crate::error::{Error, InvalidUrl, Result};
use crate::frames::FrameWriter;
use crate::frontier::{self, Position};
use crate::manifest::{CleanEnd, Manifest, Mode};
use crate::options::{Options, SyncPolicy};
use crate::run::Run;
use crate::segment::Segment;
use crate::signature::signature;
use crate::storage::{DirStorage, Storage};

use freeze::InFlight;
pub(crate) use recovery::{manifest_lost, no_manifest};
pub use stats::Stats;

/// How the signature of an A record is computed: a plain sieve's records are URLs, a
/// frontier's are the records of `src/record.rs`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Signer {
    seed: u64,
    records: bool,
}

impl Signer {
    /// The signer of the store `m` describes.
    pub(crate) fn of(m: &Manifest) -> Signer {
        Signer {
            seed: m.seed,
            records: m.mode == Mode::Frontier,
        }
    }

    /// The signature of an A record.
    pub(crate) fn sign(&self, record: &[u8]) -> std::result::Result<u64, crate::Corruption> {
        if self.records {
            crate::record::signature_of(record, self.seed)
        } else {
            Ok(signature(record, self.seed))
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
    wal: FrameWriter,
    s: Vec<Slot>,
    /// The buffer the last flush handed back, emptied: the next S.
    next_s: Vec<Slot>,
    /// Signatures of recent pushes: a push found there is a repeat and is dropped at once.
    recent: Recent,
    /// The exact index of S's signatures, kept from the first [`Sieve::known_signature`]
    /// until S is next frozen (S then fills one slot in [`buffer::INDEXED_SHARE`], so that
    /// both fit S's budget).
    s_index: Option<SigIndex>,
    /// Pushes dropped by `recent` since the last freeze (counted by the next flush).
    absorbed: u64,
    /// The last push, in A's buffer but not yet looked up in `recent`: its signature and
    /// length (see `decide`).
    undecided: Option<(u64, usize)>,
    since_sync: u64,
    inflight: Option<InFlight>,
    /// Flush jobs started, and those whose outcome was applied (see [`Sieve::flush_step`]).
    jobs_started: u64,
    jobs_applied: u64,
    /// Runs spilled by the pushing thread while a merge was under way, in push order; they
    /// are committed when it ends (until then, orphans that recovery removes: their A
    /// generations are after the manifest's A position, so recovery replays them).
    spilled_beside_merge: Vec<Arc<Run>>,
    /// When the last flush applied ended, where it ran.
    last_flush_end: Option<std::time::Instant>,
    /// When the last merge applied began and ended, where it ran.
    last_merge: Option<(std::time::Instant, std::time::Instant)>,
    poisoned: bool,
    /// The consumer's durable position in F.
    cursor: Position,
    /// The consumer's reader of F, at or after the cursor.
    reader: frontier::Reader,
    /// Removes superseded files; dropped (its work done) before the lock is released.
    reaper: Arc<reaper::Reaper>,
    // Declared last: the lock is released after everything else is dropped.
    _lock: Box<dyn Any + Send + Sync>,
}

/// The store it holds and its mode; nothing else is read.
impl std::fmt::Debug for Sieve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sieve")
            .field("store", &self.storage.describe())
            .field("mode", &self.manifest.mode)
            .finish_non_exhaustive()
    }
}

impl Sieve {
    /// Opens the sieve in directory `dir`, creating the directory and the sieve if needed,
    /// and recovers from any crash. Takes the directory's exclusive lock.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Sieve> {
        let storage = Arc::new(DirStorage::open_store_as(dir.as_ref(), !opts.existing)?);
        storage.opened(Sieve::open_with(storage.clone(), opts))
    }

    /// Opens the existing sieve in `dir` without ever writing to the directory: for
    /// commands that only read (`stats`), on a full disk, on a read-only file system. What
    /// an open would write (the recovery of pushes not flushed, after a crash) and any change
    /// made through the sieve stay in memory, within the budget, and are forgotten at
    /// [`Sieve::close`]. Takes the directory's lock, as [`Sieve::open`] does.
    pub fn open_read_only(dir: impl AsRef<Path>, opts: Options) -> Result<Sieve> {
        let dir = dir.as_ref();
        if !dir.join(crate::names::MANIFEST).is_file() {
            return Err(no_manifest(dir, "no MANIFEST: not a crivello sieve"));
        }
        Sieve::open_with(crate::storage::read_only_view(dir)?, opts)
    }

    /// How the store in `dir` is used, from its manifest alone: nothing is recovered,
    /// locked or written (a command that must not fix the mode asks first). A manifest that
    /// does not decode is damage, as for an open.
    pub fn mode_of(dir: impl AsRef<Path>) -> Result<Mode> {
        let dir = dir.as_ref();
        if !dir.join(crate::names::MANIFEST).is_file() {
            return Err(no_manifest(dir, "no MANIFEST: not a crivello sieve"));
        }
        let storage = crate::storage::read_only_view(dir)?;
        match crate::manifest::Manifest::load(&*storage)? {
            Some(m) => Ok(m.mode),
            None => Err(no_manifest(dir, "no MANIFEST: not a crivello sieve")),
        }
    }

    /// [`Sieve::open_read_only`] on any [`Storage`]: nothing is ever written to `storage`
    /// (it is read through a copy-on-write view in memory).
    pub fn open_read_only_with(storage: Arc<dyn Storage>, opts: Options) -> Result<Sieve> {
        let view = Arc::new(crate::storage::overlay::Overlay::new(storage));
        Sieve::open_with(view, opts)
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

    /// Checks a URL against the options, as a push does: not empty, not longer than
    /// [`Options::max_url_len`], no newline ([`InvalidUrl::Newline`]).
    pub fn validate(&self, url: &[u8]) -> Result<()> {
        validate_url(url, self.opts.max_url_len)?;
        refuse_newline(url)
    }

    /// The longest URL a push takes.
    pub(crate) fn max_url_len(&self) -> usize {
        self.opts.max_url_len
    }

    /// [`Sieve::push`] of a line split at its newlines (the command line's input), which
    /// therefore holds none: the newline check is skipped. For the command line.
    #[doc(hidden)]
    pub fn push_line(&mut self, url: &[u8]) -> Result<()> {
        self.writable()?;
        validate_url(url, self.opts.max_url_len)?;
        let sig = signature(url, self.manifest.seed);
        self.push_parts(self.bare_head(), url, sig)
    }

    /// Pushes one URL. It is acknowledged (durable) once a later [`Sieve::sync`],
    /// [`Sieve::flush`] or [`Sieve::close`] returns Ok. An invalid URL is refused and changes
    /// nothing.
    pub fn push(&mut self, url: &[u8]) -> Result<()> {
        self.writable()?;
        self.validate(url)?;
        let sig = signature(url, self.manifest.seed);
        self.push_parts(self.bare_head(), url, sig)
    }

    /// Pushes `url` unless it was pushed before, and says whether it was new: exactly, at
    /// the cost of a lookup (a block of each Z segment and R run for a new URL, and a third
    /// of S's slots while lookups are made: the rest of S's budget holds S's index).
    /// Acknowledged as [`Sieve::push`] is. An invalid URL is refused and changes nothing.
    pub fn push_new(&mut self, url: &[u8]) -> Result<bool> {
        self.writable()?;
        self.validate(url)?;
        let sig = signature(url, self.manifest.seed);
        self.push_parts_if_new(self.bare_head(), url, sig)
    }

    /// What goes before a bare URL: in a frontier, a bare URL is the record of the default
    /// crawl with nothing else.
    fn bare_head(&self) -> &'static [u8] {
        match self.manifest.mode {
            Mode::Frontier => &[0],
            Mode::Unset | Mode::Sieve => &[],
        }
    }

    /// Pushes the record `head` then `rest`, of signature `sig`.
    pub(crate) fn push_parts(&mut self, head: &[u8], rest: &[u8], sig: u64) -> Result<()> {
        // The cache of recent signatures decides this push at the next call, when its slot
        // has come from memory: meanwhile the caller makes the next URL.
        self.recent.prefetch(sig);
        let r = self.decide();
        self.poison(r)?;
        if self.s.len() >= self.s_limit() {
            let r = self.freeze(false);
            self.poison(r)?;
        }
        self.wal.append_tentative_parts(head, rest);
        self.undecided = Some((sig, head.len() + rest.len()));
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
        crate::buffer::push_slot(&mut self.s, Slot { sig, idx }, self.slots);
        if let Some(index) = &mut self.s_index {
            index.insert(sig);
        }
        self.wal.frame_if_full()
    }

    /// Pushes a batch of URLs. All are validated first: if one is invalid, none is pushed.
    pub fn push_batch<U: AsRef<[u8]>>(&mut self, urls: &[U]) -> Result<()> {
        self.writable()?;
        for u in urls {
            self.validate(u.as_ref())?;
        }
        // Checked above: no newline is looked for again.
        for u in urls {
            self.push_line(u.as_ref())?;
        }
        Ok(())
    }

    /// Group commit: makes every earlier push durable.
    pub fn sync(&mut self) -> Result<()> {
        self.writable()?;
        let r = self.decide();
        self.poison(r)?;
        if self.inflight.as_ref().is_some_and(InFlight::is_deferred) {
            let r = self.finish_inflight();
            self.poison(r)?;
        }
        if let Some(f) = &self.inflight {
            if !f.wait_durable() {
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

    /// One step of a flush that does not wait for the flush thread: what [`Sieve::flush`]
    /// does, for a caller that waits for the thread elsewhere, without the lock it holds
    /// this sieve under. Returns true once every URL pushed before the first step is merged
    /// (and its outcome applied); false while a job is under way on the flush thread: the
    /// caller calls again once it may have ended (for example after
    /// [`Sieve::flush_thread_busy`] turns false). `ticket` starts None, and keeps the job that
    /// the steps started: pushes made after the first step do not make the flush longer.
    pub(crate) fn flush_step(&mut self, ticket: &mut Option<u64>) -> Result<bool> {
        self.writable()?;
        let r = self.decide();
        self.poison(r)?;
        self.poll_inflight()?;
        if let Some(t) = *ticket {
            if self.jobs_applied >= t {
                return Ok(true);
            }
        }
        if self.inflight.as_ref().is_some_and(|f| !f.is_deferred()) {
            return Ok(false);
        }
        if ticket.is_none() {
            // A deferred job (the crash suites' merges) runs here, as `flush` runs it.
            let r = self.finish_inflight();
            self.poison(r)?;
            if !self.s.is_empty() || !self.runs.is_empty() {
                let r = self.freeze(true);
                self.poison(r)?;
                *ticket = Some(self.jobs_started);
                if self.inflight.as_ref().is_some_and(|f| !f.is_deferred()) {
                    return Ok(false);
                }
            }
        }
        let r = self.finish_inflight();
        self.poison(r)?;
        let r = self.commit_absorbed();
        self.poison(r)?;
        Ok(true)
    }

    /// When the last flush whose outcome was applied ended, where it ran.
    pub(crate) fn last_flush_end(&self) -> Option<std::time::Instant> {
        self.last_flush_end
    }

    /// The signatures Z holds: what a merge reads and writes again whole.
    pub(crate) fn z_signatures(&self) -> u64 {
        self.manifest.segments.iter().map(|s| s.sigs).sum()
    }

    /// When the last merge whose outcome was applied began and ended, where it ran.
    pub(crate) fn last_merge(&self) -> Option<(std::time::Instant, std::time::Instant)> {
        self.last_merge
    }

    /// Whether URLs pushed are not merged yet: in S, in spilled runs, or a push that the
    /// cache of recent signatures has not decided.
    pub(crate) fn holds_unflushed(&self) -> bool {
        !self.s.is_empty() || !self.runs.is_empty() || self.undecided.is_some()
    }

    /// Whether a job runs on the flush thread and has not ended (its outcome not yet
    /// applied: the next call that polls it does).
    pub(crate) fn flush_thread_busy(&self) -> bool {
        self.inflight
            .as_ref()
            .is_some_and(|f| !f.is_deferred() && !f.is_finished())
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

    /// Whether `url` was ever pushed (and not lost as an unacknowledged torn tail). Reads at
    /// most one block of each Z segment, and a binary search of blocks in each run.
    pub fn contains(&mut self, url: &[u8]) -> Result<bool> {
        let sig = signature(url, self.manifest.seed);
        self.contains_signature(sig)
    }

    /// Whether `url` was ever pushed, as [`Sieve::push_new`] finds it: through S's index
    /// rather than a scan of S (for callers that look up many URLs between pushes).
    pub(crate) fn known(&mut self, url: &[u8]) -> Result<bool> {
        let sig = signature(url, self.manifest.seed);
        self.known_signature(sig)
    }

    /// The most slots S fills before it is frozen: fewer while its index is kept.
    fn s_limit(&self) -> usize {
        match self.s_index {
            Some(_) => (self.slots / buffer::INDEXED_SHARE).max(1),
            None => self.slots,
        }
    }

    /// Whether a record of signature `sig` was ever pushed (and not lost as an
    /// unacknowledged torn tail), exactly: the cache of recent signatures, then S through its
    /// index (made at the first call, and kept), then the batch a flush is writing (waited
    /// for), the Z segments and the R runs (a block of each at most).
    pub(crate) fn known_signature(&mut self, sig: u64) -> Result<bool> {
        let r = self.decide();
        self.poison(r)?;
        if self.recent.contains(sig) {
            return Ok(true);
        }
        if self.s_index.is_none() {
            let mut index = SigIndex::default();
            index.extend(self.s.iter().map(|p| p.sig));
            self.s_index = Some(index);
        }
        if self.s_index.as_ref().is_some_and(|i| i.contains(&sig)) {
            return Ok(true);
        }
        let r = self.finish_inflight();
        self.poison(r)?;
        self.stored(sig)
    }

    /// The signature of `url` in this sieve (its seed's), as [`Sieve::known_signatures`]
    /// takes it.
    pub(crate) fn signature_of(&self, url: &[u8]) -> u64 {
        signature(url, self.manifest.seed)
    }

    /// Whether each of `urls` was ever pushed, as [`Sieve::known`] finds it, for many at
    /// once: the signatures not in the cache of recent ones nor in S are sorted, and each
    /// block of a Z segment or R run is read once for all of them.
    #[cfg(test)]
    pub(crate) fn known_many(&mut self, urls: &[&[u8]]) -> Result<Vec<bool>> {
        let seed = self.manifest.seed;
        let sigs: Vec<u64> = urls.iter().map(|u| signature(u, seed)).collect();
        self.known_signatures(&sigs)
    }

    /// [`Sieve::known_signature`] of each of `sigs`, reading each block once.
    pub(crate) fn known_signatures(&mut self, sigs: &[u64]) -> Result<Vec<bool>> {
        let r = self.decide();
        self.poison(r)?;
        if self.s_index.is_none() {
            let mut index = SigIndex::default();
            index.extend(self.s.iter().map(|p| p.sig));
            self.s_index = Some(index);
        }
        let index = self.s_index.as_ref().expect("made above");
        let mut known: Vec<bool> = sigs
            .iter()
            .map(|&s| self.recent.contains(s) || index.contains(&s))
            .collect();
        // The others' places, sorted by signature, and their signatures in that order (13
        // bytes each with `found`), looked up in Z and in the runs.
        let mut rest: Vec<u32> = (0..sigs.len())
            .filter(|&i| !known[i])
            .map(|i| i as u32)
            .collect();
        if rest.is_empty() {
            return Ok(known);
        }
        rest.sort_unstable_by_key(|&i| sigs[i as usize]);
        let r = self.finish_inflight();
        self.poison(r)?;
        let sorted: Vec<u64> = rest.iter().map(|&i| sigs[i as usize]).collect();
        let mut found = vec![false; sorted.len()];
        for seg in &self.segments {
            seg.contains_sorted(&sorted, &mut found)?;
        }
        for run in &self.runs {
            run.contains_sorted(&sorted, &mut found)?;
        }
        for (&i, f) in rest.iter().zip(found) {
            known[i as usize] = f;
        }
        Ok(known)
    }

    /// Pushes the record `head` then `rest`, of signature `sig`, unless a record of that
    /// signature was pushed before ([`Sieve::known_signature`]); returns whether it was new.
    /// A repeat is counted as a push that changed nothing.
    pub(crate) fn push_parts_if_new(&mut self, head: &[u8], rest: &[u8], sig: u64) -> Result<bool> {
        if self.known_signature(sig)? {
            self.absorbed += 1;
            return Ok(false);
        }
        self.push_parts(head, rest, sig)?;
        Ok(true)
    }

    /// Counts a push that [`Sieve::known_signatures`] found known and that changes nothing,
    /// as [`Sieve::push_parts_if_new`] counts one.
    pub(crate) fn count_repeat(&mut self) {
        self.absorbed += 1;
    }

    /// Whether a record of signature `sig` was ever pushed.
    pub(crate) fn contains_signature(&mut self, sig: u64) -> Result<bool> {
        let r = self.decide().and_then(|()| self.finish_inflight());
        self.poison(r)?;
        if self.s.iter().any(|p| p.sig == sig) {
            return Ok(true);
        }
        self.stored(sig)
    }

    /// Whether a Z segment or an R run holds `sig`.
    fn stored(&self, sig: u64) -> Result<bool> {
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

    /// How the store is used: a plain sieve, a frontier, or not fixed yet.
    pub fn mode(&self) -> Mode {
        self.manifest.mode
    }

    /// Whether the store's frontier writes its Q runs compressed, as the manifest records
    /// ([`Options::compress_queues`]).
    pub(crate) fn compress_queues(&self) -> bool {
        self.manifest.compress_queues
    }

    /// The storage.
    pub(crate) fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Removes file `name`, superseded and never named again, off the caller's thread when
    /// the flushes run in the background (best effort: an open removes what is left).
    pub(crate) fn remove_superseded(&self, name: &str) {
        self.reaper.remove(name);
    }

    /// The signature seed of this sieve.
    pub fn seed(&self) -> u64 {
        self.manifest.seed
    }

    /// Waits for any flush, syncs, and closes. Buffered pushes stay in A and are flushed at the
    /// next open.
    pub fn close(self) -> Result<()> {
        self.close_with_journal(None)
    }

    /// [`Sieve::close`], recording in the same commit where the frontier's journal J, sealed
    /// by the caller, ends.
    pub(crate) fn close_with_journal(mut self, journal: Option<CleanEnd>) -> Result<()> {
        self.sync()?;
        let r = self.finish_inflight().and_then(|()| self.commit_absorbed());
        self.poison(r)?;
        let r = self.seal_clean(journal);
        self.poison(r)
    }

    /// Seals A's generation and records where it (and J, if given) ends in the manifest, so
    /// that damage before those ends reads as corruption, never as a torn tail
    /// (`docs/design.md`, "The clean end"). A store opened after a clean close and left
    /// untouched writes nothing.
    fn seal_clean(&mut self, journal: Option<CleanEnd>) -> Result<()> {
        if self.manifest.clean_a.of(self.gen) != Some(self.wal.end()) {
            self.wal.seal()?;
        }
        let mut m = self.manifest.clone();
        if !crate::planted::active(crate::planted::Bug::NoCleanEnd) {
            m.clean_a = CleanEnd {
                gen: self.gen,
                end: self.wal.end(),
            };
            if let Some(j) = journal {
                m.clean_j = j;
            }
        }
        if m != self.manifest {
            m.commit += 1;
            m.commit_to(&*self.storage)?;
            self.manifest = m;
        }
        Ok(())
    }

    /// Where the last clean close left the frontier's journal.
    pub(crate) fn clean_journal(&self) -> CleanEnd {
        self.manifest.clean_j
    }
}

impl Drop for Sieve {
    fn drop(&mut self) {
        // Never leave a flush writing after the lock is released.
        if let Some(f) = self.inflight.take() {
            f.join();
        }
    }
}

/// Refuses a URL that holds a newline: one URL is one line of the command line's output.
/// Every call that brings a URL in refuses it (pushes, a frontier's updates); a store
/// written before they did may hold such URLs, which a cluster's move of their queue still
/// takes, and [`Sieve::pop`] still gives.
pub(crate) fn refuse_newline(url: &[u8]) -> Result<()> {
    match memchr::memchr(b'\n', url) {
        Some(at) => Err(Error::InvalidUrl(InvalidUrl::Newline { at })),
        None => Ok(()),
    }
}

/// Refuses an empty URL, or one longer than `max_url_len` bytes.
pub(crate) fn validate_url(url: &[u8], max_url_len: usize) -> Result<()> {
    if url.is_empty() {
        return Err(Error::InvalidUrl(InvalidUrl::Empty));
    }
    if url.len() > max_url_len {
        return Err(Error::InvalidUrl(InvalidUrl::TooLong {
            len: url.len(),
            max: max_url_len,
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::storage::sim::SimDisk;

    /// The batched lookup answers as the lookup of one URL does, and as a model does, with
    /// the answers coming from S, the batch being flushed, R runs and Z segments in turn.
    #[test]
    fn known_many_equals_known_and_the_model() {
        let disk = SimDisk::new();
        let opts = Options::new().slots(999).seed(3).recent_cache(0);
        let mut sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).unwrap();
        let url = |n: u64| format!("http://h{}.test/{n}", n % 97).into_bytes();
        let mut model = HashSet::new();
        let mut x = 11u64;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % 40_000
        };
        let mut runs_seen = false;
        for round in 0..60 {
            for _ in 0..700 {
                let n = next();
                sieve.push(&url(n)).unwrap();
                model.insert(n);
            }
            if round % 17 == 16 {
                sieve.flush().unwrap();
            }
            if round == 40 {
                sieve.close().unwrap();
                sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).unwrap();
            }
            runs_seen |= !sieve.runs.is_empty();
            let asked: Vec<u64> = (0..500).map(|_| next()).collect();
            let urls: Vec<Vec<u8>> = asked.iter().map(|&n| url(n)).collect();
            let refs: Vec<&[u8]> = urls.iter().map(Vec::as_slice).collect();
            let many = sieve.known_many(&refs).unwrap();
            for ((n, u), m) in asked.iter().zip(&urls).zip(many) {
                assert_eq!(m, model.contains(n), "{n} in round {round}");
                assert_eq!(m, sieve.known(u).unwrap(), "{n} in round {round}");
            }
        }
        assert!(runs_seen, "some lookups were answered by R runs");
        assert!(!sieve.segments.is_empty());
        sieve.close().unwrap();
    }

    /// A store whose manifest is of version 5 (no clean end recorded) opens, keeps its
    /// pushes, and its next clean close writes a version 9 manifest with the clean end.
    #[test]
    fn a_version_5_manifest_opens_and_is_written_back_in_this_builds_version() {
        let disk = SimDisk::new();
        let opts = || Options::new().slots(16).seed(3).background_flush(false);
        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
        for i in 0..40 {
            s.push(format!("http://v5.example/{i}").as_bytes()).unwrap();
        }
        s.close().unwrap();
        // Rewrite the manifest as version 5 wrote it: no clean ends.
        let mut m = Manifest::decode(&disk.content(crate::names::MANIFEST).unwrap(), "M").unwrap();
        m.clean_a = CleanEnd::default();
        m.clean_j = CleanEnd::default();
        let v14 = m.encode();
        let at = 8 + 13 * 8 + 4;
        // Without the clean ends and the queue coding after them.
        let mut v5 = v14[..at].to_vec();
        v5.extend_from_slice(&v14[at + 32 + 4..v14.len() - 4]);
        v5[4..8].copy_from_slice(&5u32.to_le_bytes());
        crate::format::seal(&mut v5);
        disk.set_content(crate::names::MANIFEST, v5.clone());
        assert_eq!(Manifest::decode(&v5, "M").unwrap(), m);
        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
        assert_eq!(s.stats().unwrap().pushed, 40);
        s.flush().unwrap();
        assert_eq!(s.frontier_next(100).unwrap().len(), 40);
        s.close().unwrap();
        let bytes = disk.content(crate::names::MANIFEST).unwrap();
        assert_eq!(
            u32::from_le_bytes(bytes[4..8].try_into().unwrap()),
            crate::format::MANIFEST_VERSION
        );
        let m = Manifest::decode(&bytes, "M").unwrap();
        assert!(m.clean_a.end > 0, "{m:?}");
    }

    /// The magics of the frames of F segment `id`, in order.
    fn f_magics(disk: &SimDisk, id: u64) -> Vec<[u8; 4]> {
        let bytes = disk.content(&crate::names::f(id)).unwrap();
        let mut at = crate::frontier::HEADER_LEN as usize;
        let mut out = Vec::new();
        while at + crate::frames::FRAME_HEADER <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
            out.push(bytes[at..at + 4].try_into().unwrap());
            at += crate::frames::FRAME_HEADER + len;
        }
        out
    }

    /// A store of version 8 (plain frames in F, a version 8 manifest), as the build before
    /// coded frames left it, opens: its URLs are read from the plain frames, new ones go to
    /// coded frames after them in the same segment, and the manifest is written as version 9.
    #[test]
    fn a_version_8_store_with_plain_frames_opens_and_goes_on_with_coded_ones() {
        let disk = SimDisk::new();
        let opts = || Options::new().slots(64).seed(5).background_flush(false);
        let url = |i: u32| format!("http://v8.example/path/{i}");
        crate::frames::coded::PLAIN_WRITES.with(|p| p.set(true));
        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
        for i in 0..100 {
            s.push(url(i).as_bytes()).unwrap();
        }
        s.flush().unwrap();
        let first: Vec<Vec<u8>> = s.frontier_next(30).unwrap();
        s.frontier_commit().unwrap();
        s.close().unwrap();
        crate::frames::coded::PLAIN_WRITES.with(|p| p.set(false));
        let m = Manifest::decode(&disk.content(crate::names::MANIFEST).unwrap(), "M").unwrap();
        disk.set_content(crate::names::MANIFEST, m.encode_as(8));
        let plain = f_magics(&disk, m.f_tail);
        assert!(
            !plain.is_empty() && plain.iter().all(|m| m == b"FRM1"),
            "{plain:?}"
        );

        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
        for i in 0..200 {
            s.push(url(i).as_bytes()).unwrap();
        }
        s.flush().unwrap();
        let rest: Vec<Vec<u8>> = s.frontier_next(1000).unwrap();
        s.close().unwrap();
        let all: Vec<Vec<u8>> = first.into_iter().chain(rest).collect();
        let expected: Vec<Vec<u8>> = (0..200).map(|i| url(i).into_bytes()).collect();
        assert!(
            all == expected,
            "{} URLs read, not the 200 pushed in order",
            all.len()
        );
        let magics = f_magics(&disk, m.f_tail);
        assert_eq!(&magics[..plain.len()], &plain[..]);
        assert!(magics[plain.len()..].contains(b"FRZ1"), "{magics:?}");
        let bytes = disk.content(crate::names::MANIFEST).unwrap();
        assert_eq!(
            u32::from_le_bytes(bytes[4..8].try_into().unwrap()),
            crate::format::MANIFEST_VERSION
        );
        // And the check of the upgraded store passes.
        let report = crate::check::check_storage(Arc::new(disk.clone())).unwrap();
        assert!(report.is_sound(), "{report:?}");
    }

    /// A read bounded by 0 bytes still passes one URL, as its documentation says: a
    /// caller's loop "until it returns 0" would otherwise stop with URLs unread.
    #[test]
    fn a_read_of_zero_bytes_passes_one_url() {
        let disk = SimDisk::new();
        let mut s = Sieve::open_with(Arc::new(disk), Options::new().slots(64)).unwrap();
        for u in [&b"http://a/"[..], b"http://b/", b"http://c/"] {
            s.push(u).unwrap();
        }
        s.flush().unwrap();
        let mut got = Vec::new();
        let n = s.frontier_read(5, 0, |u| {
            got.push(u.to_vec());
            Ok(())
        });
        assert_eq!((n.unwrap(), got), (1, vec![b"http://a/".to_vec()]));
        let mut text = Vec::new();
        let n = s.frontier_read_lines(5, 0, |t, _| {
            text.extend_from_slice(t);
            Ok(())
        });
        assert!(
            n.unwrap() >= 1 && text.starts_with(b"http://b/\n"),
            "{text:?}"
        );
    }

    /// `frontier_read_lines` gives the URLs that `frontier_next` gives, as lines, across
    /// frames of lines, front-coded frames (a URL with a newline) and plain frames, from any
    /// position; a chunk its callback refuses is not consumed.
    #[test]
    fn frontier_read_lines_gives_every_url_once_in_order_from_any_position() {
        let disk = SimDisk::new();
        let opts = || {
            Options::new()
                .slots(1 << 16)
                .seed(11)
                .background_flush(false)
        };
        let url = |i: u32| format!("http://h{}.example/some/path/{i}", i % 97).into_bytes();
        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
        // Plain frames first, as an older build wrote them.
        crate::frames::coded::PLAIN_WRITES.with(|p| p.set(true));
        for i in 0..20_000 {
            s.push(&url(i)).unwrap();
        }
        s.flush().unwrap();
        crate::frames::coded::PLAIN_WRITES.with(|p| p.set(false));
        for i in 20_000..60_000 {
            s.push(&url(i)).unwrap();
        }
        s.flush().unwrap();
        for i in 60_000..70_000 {
            s.push(&url(i)).unwrap();
        }
        // Refused by a push; as an earlier build took it: its frame is front coded, and the
        // lines stop before it.
        assert!(s.push(b"http://with/a\nnewline").is_err());
        s.push_line(b"http://with/a\nnewline").unwrap();
        s.flush().unwrap();
        let expected: Vec<Vec<u8>> = (0..70_000).map(url).collect();
        let all: Vec<u8> = expected
            .iter()
            .flat_map(|u| [&u[..], b"\n"].concat())
            .collect();
        let mut got = Vec::new();
        let (mut urls, mut step, mut refused) = (0usize, 1usize, 0);
        loop {
            let mut fail = step % 5 == 0 && refused < 3;
            let n = s.frontier_read_lines(step * 37 % 3001 + 1, 4096 * step, |text, k| {
                assert!(text.iter().filter(|&&b| b == b'\n').count() >= k);
                if fail {
                    fail = false;
                    refused += 1;
                    return Err(crate::Error::Poisoned);
                }
                got.extend_from_slice(text);
                urls += k;
                Ok(())
            });
            step += 1;
            match n {
                Ok(0) => panic!("the URL with a newline was passed over"),
                Ok(_) => {}
                Err(crate::Error::Poisoned) => {}
                Err(crate::Error::InvalidUrl(crate::InvalidUrl::Newline { at: 13 })) => break,
                Err(e) => panic!("{e}"),
            }
            if step % 7 == 0 {
                s.frontier_commit().unwrap();
            }
        }
        assert_eq!(urls, expected.len());
        assert!(
            got == all,
            "{} bytes of lines, not the {} expected",
            got.len(),
            all.len()
        );
        assert_eq!(refused, 3);
        // The URL is still there, whole, for `frontier_next`.
        assert_eq!(
            s.frontier_next(2).unwrap(),
            [b"http://with/a\nnewline".to_vec()]
        );
        // The same from a fresh handle at the committed cursor.
        s.frontier_rewind();
        let mut again = Vec::new();
        while s
            .frontier_read_lines(1000, usize::MAX, |text, _| {
                again.extend_from_slice(text);
                Ok(())
            })
            .unwrap_or(0)
            > 0
        {}
        assert!(all.ends_with(&again));
        s.close().unwrap();
    }

    /// A flipped byte inside a coded frame of F is reported by `frontier_read_lines`, whose
    /// frames the read-ahead threads decode, as corruption naming the segment: no URL of the
    /// damaged frame is handed out, and the read position stays before it.
    #[test]
    fn a_damaged_coded_frame_read_ahead_is_corruption_never_output() {
        let disk = SimDisk::new();
        let opts = Options::new()
            .slots(1 << 16)
            .seed(13)
            .background_flush(false);
        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts).unwrap();
        for i in 0..40_000u32 {
            s.push(format!("http://d{}.example/x/{i}", i % 31).as_bytes())
                .unwrap();
        }
        s.flush().unwrap();
        let name = crate::names::f(s.manifest.f_tail);
        let mut bytes = disk.content(&name).unwrap();
        let magics = f_magics(&disk, s.manifest.f_tail);
        assert!(
            magics.len() >= 2 && magics.iter().all(|m| m == b"FRZ1"),
            "{magics:?}"
        );
        // A byte in the middle of the second frame's payload.
        let first = crate::frontier::HEADER_LEN as usize;
        let len0 = u32::from_le_bytes(bytes[first + 16..first + 20].try_into().unwrap()) as usize;
        let second = first + crate::frames::FRAME_HEADER + len0;
        bytes[second + crate::frames::FRAME_HEADER + 40] ^= 0x10;
        disk.set_content(&name, bytes);
        let mut got = 0usize;
        let e = loop {
            match s.frontier_read_lines(usize::MAX, usize::MAX, |_, k| {
                got += k;
                Ok(())
            }) {
                Ok(0) => panic!("the damage was not seen"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert!(e.is_corruption() && e.to_string().contains(&name), "{e}");
        let in_first = s.read_position().consumed as usize;
        assert_eq!(got, in_first);
        assert!(got > 0 && got < 40_000, "{got}");
    }
}
