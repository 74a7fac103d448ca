//! The store: open and recovery, insert, query, merges, stats and check.

use std::any::Any;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use super::docs::{self, Docs, MAX_ID};
use super::manifest::{Manifest, SegmentRef, NAME};
use super::search::{self, Probe, MAX_K};
use super::segment::{self, key, Scratch, Segment, SegmentWriter, MAX_SEGMENT_DOCS};
use super::{Entry, TABLES};
use crate::error::{Error, Result};
use crate::options::MIN_MEMORY;
use crate::storage::prefixed::Prefixed;
use crate::storage::{DirStorage, Storage, StorageExt};
use crate::{Options, Sieve};

/// The prefix of the files of the sieve of document ids.
const IDS: &str = "ids.";

/// An error of the sieve of ids, its file named as in the store's directory.
fn in_ids(e: Error) -> Error {
    e.under_prefix(IDS)
}
/// Segments beyond which the two newest are merged whatever their sizes.
const MAX_SEGMENTS: usize = 40;
/// Bytes of a batch per document beside its id and its probes, bounding each of its phases
/// (`docs/design.md`, "Memory"): finding its repeats, 21 (the ids' signatures, 8, a hash
/// table of places, up to 12, and a flag); the lookup in the sieve of ids and the search of
/// the segments at once, 40 (the flag, the first occurrences' fingerprints and nearest
/// found, 16, their signatures, 8, and the sieve's lookup beside them, 15: whether each is
/// known, 1, the unknown ones' places sorted by signature, 4, their signatures in that
/// order, 8, and two flags); the search among the batch and the writing of its segment, 36 (the new documents' places, 4,
/// their fingerprints and nearest found, 16, and a table's entries, 16, or in between the
/// nearest documents stored before the batch with their places, 16).
const BYTES_PER_DOC: usize = 40;
/// First occurrences in a batch from which the sieve of ids is asked on a thread of its own
/// while the segments are searched.
const PARALLEL_MIN: usize = 4096;
/// Bytes per probe of a table (k ≤ 3: one probe per table, 4 ≤ k: 17), sorted as they are
/// made.
const BYTES_PER_PROBE: usize = 16;
/// Bytes per document of a batch when it is reported (`docs/design.md`, "Memory"): the
/// places and nearest found of its new documents, 12 each, the nearest documents stored
/// before the batch with their places, 16 each, and the buffer of their ids, the rest.
const REPORT_BYTES_PER_DOC: usize = BYTES_PER_DOC + BYTES_PER_PROBE;
/// A nearest document whose id was not read into the buffer of [`Store::report`].
const UNREAD: u64 = u64::MAX;
/// A nearest found: the distance in the top 4 bits, the document in the low 60 (the least
/// is the nearest, ties to the earliest document); [`NONE`] for none yet.
fn pack(d: u32, doc: u64) -> u64 {
    debug_assert!(d <= MAX_K && doc < MAX_DOCS);
    u64::from(d) << 60 | doc
}
/// No nearest found.
const NONE: u64 = u64::MAX;
/// The most documents a store holds: a document number fits the 60 bits [`pack`] keeps.
const MAX_DOCS: u64 = 1 << 60;
/// The (distance, document) [`pack`] made, or None for [`NONE`].
fn unpack(x: u64) -> Option<(u32, u64)> {
    (x != NONE).then_some(((x >> 60) as u32, x & (MAX_DOCS - 1)))
}
/// Bytes of the budget left out of the batches when merges run beside them: a merge's block
/// per input (at most [`MAX_SEGMENTS`] + 1 of them, 64 KiB each, decoded) and its writer's
/// buffer (1 MiB).
const MERGE_RESERVE: usize = 4 << 20;
/// Bytes of the sieve of ids' quarter of the budget left to the buffers it holds beside its
/// own budget (`docs/design.md`, "Memory" of the sieve): A's frame being filled and two
/// being written, and a merge's or a spill's writer.
const SIEVE_BESIDE: usize = 8 << 20;
/// Bytes of the budget left to the buffers beside a batch: the segment writer's (1 MiB), a
/// block read with its key runs and documents (208 KiB at most), the counting sorts' counts
/// (256 KiB) and D's frame being filled and last frame read (128 KiB).
const BESIDE: usize = 2 << 20;

/// The stored document nearest to another one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nearest {
    /// Its document number.
    pub doc: u64,
    /// Its id.
    pub id: Vec<u8>,
    /// The Hamming distance between the two fingerprints.
    pub distance: u32,
}

/// A stored document, as [`Store::insert`] stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its document number: documents are numbered from 0 in the order they were stored.
    pub doc: u64,
    /// Its id.
    pub id: Vec<u8>,
    /// Its fingerprint.
    pub fingerprint: u64,
    /// The stored document nearest to it when it was stored, within the `k` of that call;
    /// ties go to the earliest stored.
    pub nearest: Option<Nearest>,
}

/// A stored document as [`Store::insert_with`] reports it, borrowing its ids: its own from
/// the caller's documents, its nearest's from them or from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredRef<'a> {
    /// Its document number.
    pub doc: u64,
    /// Its id.
    pub id: &'a [u8],
    /// Its fingerprint.
    pub fingerprint: u64,
    /// The stored document nearest to it within `k`, ties to the earliest stored.
    pub nearest: Option<NearestRef<'a>>,
}

/// The stored document nearest to another one, its id borrowed ([`StoredRef`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NearestRef<'a> {
    /// Its document number.
    pub doc: u64,
    /// Its id.
    pub id: &'a [u8],
    /// The Hamming distance between the two fingerprints.
    pub distance: u32,
}

impl StoredRef<'_> {
    /// The same, its ids copied.
    pub fn to_stored(&self) -> Stored {
        Stored {
            doc: self.doc,
            id: self.id.to_vec(),
            fingerprint: self.fingerprint,
            nearest: self.nearest.map(|n| Nearest {
                doc: n.doc,
                id: n.id.to_vec(),
                distance: n.distance,
            }),
        }
    }
}

impl Stored {
    /// The same, its ids borrowed.
    pub fn as_stored_ref(&self) -> StoredRef<'_> {
        StoredRef {
            doc: self.doc,
            id: &self.id,
            fingerprint: self.fingerprint,
            nearest: self.nearest.as_ref().map(|n| NearestRef {
                doc: n.doc,
                id: &n.id,
                distance: n.distance,
            }),
        }
    }
}

/// The counts and sizes of a store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NearStats {
    /// Documents stored.
    pub docs: u64,
    /// Documents refused because their id was seen before (counted at each commit).
    pub repeats: u64,
    /// Documents whose results were reported ([`Store::set_reported`]).
    pub reported: u64,
    /// Segments.
    pub segments: u64,
    /// Bytes of the segments.
    pub segment_bytes: u64,
    /// Bytes of the log of documents and of its index.
    pub log_bytes: u64,
    /// Commits of the manifest.
    pub commits: u64,
}

/// A durable store of (fingerprint, document id) pairs that finds every stored fingerprint
/// within a Hamming distance of a query. One writer: the directory is locked while open.
pub struct Store {
    storage: Arc<dyn Storage>,
    manifest: Manifest,
    docs: Docs,
    /// The segments, oldest first (shared with a merge running beside the batches).
    segments: Vec<Arc<Segment>>,
    sieve: Sieve,
    /// The budget of a batch (the sieve of ids has its own share).
    batch_budget: usize,
    /// Whether an error left the in-memory state unknown.
    poisoned: bool,
    /// Whether the manifest in memory differs from the one on disk.
    dirty: bool,
    /// The format version of the segments written ([`segment::SEGMENT_VERSION`]; the tests
    /// write version 1 too).
    segment_version: u32,
    /// Whether merges run on a thread of their own while batches go on.
    background: bool,
    /// The merge running on the merge thread, if any.
    merging: Option<Merging>,
    /// The thread merges run on, started at the first. Before the lock: dropping the store
    /// waits for its merge before the directory is unlocked.
    merger: Option<Merger>,
    _lock: Box<dyn Any + Send + Sync>,
}

/// What a merge's thread hands back: the merged segment (not listed yet) or why it was not
/// written, or the panic that stopped it.
type MergeResult = std::thread::Result<Result<Segment>>;

/// A merge on the merge thread ([`Store::merge_if_due`]): it writes the merged segment
/// (synced, the directory too); [`Store::finish_merge`] lists it in place of its inputs.
struct Merging {
    /// The ids of the inputs, oldest first: consecutive segments of the store.
    inputs: Vec<u64>,
    /// Where its result comes.
    result: std::sync::mpsc::Receiver<MergeResult>,
    /// Its result, once it came.
    done: Option<MergeResult>,
}

impl Merging {
    /// Whether the merge has finished.
    fn finished(&mut self) -> bool {
        if self.done.is_none() {
            self.done = self.result.try_recv().ok();
        }
        self.done.is_some()
    }

    /// Waits for the merge: the merged segment, or why it was not written.
    fn join(mut self) -> Result<Segment> {
        let done = match self.done.take() {
            Some(done) => done,
            None => self.result.recv().map_err(|_| Error::Poisoned)?,
        };
        match done {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// The thread merges run on, one after the other, kept for the store's life: one thread, so
/// that its allocations stay in an arena of the allocator of its own (a thread started for
/// each merge may take the arena the thread of the sieve of ids left, and then both grow to
/// that thread's size).
struct Merger {
    jobs: Option<std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Merger {
    /// Starts the thread.
    fn start() -> std::io::Result<Merger> {
        let (jobs, queue) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let thread = std::thread::Builder::new()
            .name("crivello-merge".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })?;
        Ok(Merger {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }
}

impl Drop for Merger {
    /// Waits for the merge that runs, if any: nothing writes in the directory once it is
    /// unlocked (a merge not listed yet leaves its segment, which the next open removes).
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.storage.describe())
            .field("docs", &self.manifest.docs)
            .field("segments", &self.manifest.segments.len())
            .finish()
    }
}

impl Store {
    /// Opens the store in `dir`, creating the directory and the store if missing. The memory
    /// budget is `opts`'s: a quarter of it (at least 1 MiB) goes to the sieve of document
    /// ids, the rest to the batches of [`Store::insert`].
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        let storage = Arc::new(DirStorage::open_store(dir.as_ref())?);
        storage.opened(Store::open_with(storage.clone(), opts))
    }

    /// Opens the existing store in `dir` without ever writing to the directory, as
    /// [`crate::Sieve::open_read_only`] does: what recovery would write and any change stay in
    /// memory and are forgotten. For `crivello stats`, on a full disk or a read-only file
    /// system.
    pub fn open_read_only(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        let dir = dir.as_ref();
        if !dir.join(NAME).is_file() {
            return Err(Error::NotASieve {
                dir: dir.display().to_string(),
                reason: format!("no {NAME}: not a near-duplicate store"),
            });
        }
        Store::open_with(crate::storage::read_only_view(dir)?, opts)
    }

    /// Opens the store in `storage` (see [`Store::open`]), recovering from a crash.
    pub fn open_with(storage: Arc<dyn Storage>, opts: Options) -> Result<Store> {
        opts.validate()?;
        let lock = storage.lock_exclusive()?;
        let manifest = match Manifest::read(&*storage)? {
            Some(m) => m,
            None => create(&*storage)?,
        };
        // Files the manifest does not list: an interrupted commit or merge left them.
        let listed: HashSet<u64> = manifest.segments.iter().map(|s| s.id).collect();
        for name in storage.list_files()? {
            let orphan = name.ends_with(".tmp")
                || segment::parse_name(&name).is_some_and(|id| !listed.contains(&id));
            if orphan {
                storage.remove_file(&name)?;
            }
        }
        let docs = Docs::open(
            &*storage,
            manifest.log_len,
            manifest.index_len,
            manifest.docs,
            true,
        )?;
        let segments = manifest
            .segments
            .iter()
            .map(|s| Segment::open(&*storage, s.id, s.first, s.docs, s.bytes).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let quarter = (opts.memory / 4).max(MIN_MEMORY);
        let sieve_memory = quarter.saturating_sub(SIEVE_BESIDE).max(MIN_MEMORY);
        let reserve = if opts.background { MERGE_RESERVE } else { 0 };
        let batch_budget = (opts.memory.saturating_sub(quarter))
            .saturating_sub(reserve + BESIDE)
            .max(MIN_MEMORY);
        let background = opts.background;
        let sieve_opts = opts.clone().memory(sieve_memory).max_url_len(MAX_ID);
        let ids: Arc<dyn Storage> = Arc::new(Prefixed::new(storage.clone(), IDS));
        let sieve = Sieve::open_with(ids, sieve_opts).map_err(in_ids)?;
        let mut store = Store {
            storage,
            manifest,
            docs,
            segments,
            sieve,
            batch_budget,
            poisoned: false,
            dirty: false,
            segment_version: segment::SEGMENT_VERSION,
            background,
            merging: None,
            merger: None,
            _lock: lock,
        };
        store.catch_up_sieve()?;
        Ok(store)
    }

    /// Pushes the ids of the documents stored after the last durable push of ids to the
    /// sieve of ids (a crash came between a commit and that push), and commits.
    fn catch_up_sieve(&mut self) -> Result<()> {
        if self.manifest.in_sieve == self.manifest.docs {
            return Ok(());
        }
        for doc in self.manifest.in_sieve..self.manifest.docs {
            let rec = self.docs.record(doc)?;
            self.sieve.push(&rec.id).map_err(in_ids)?;
        }
        self.sieve.sync().map_err(in_ids)?;
        self.manifest.in_sieve = self.manifest.docs;
        self.manifest.commit_to(&*self.storage)
    }

    /// Refuses writes after an error.
    fn writable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Remembers a failure: the store refuses writes until it is reopened.
    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Checks a document id: not empty, at most [`MAX_ID`] bytes.
    pub fn validate_id(id: &[u8]) -> Result<()> {
        if id.is_empty() || id.len() > MAX_ID {
            return Err(Error::InvalidOption {
                option: "document id",
                reason: format!(
                    "an id is 1 to {MAX_ID} bytes long; this one has {}",
                    id.len()
                ),
            });
        }
        Ok(())
    }

    /// Stores the documents `(id, fingerprint)` whose ids were never stored before, in
    /// order, and returns for each document `Some` with what was stored (its nearest stored
    /// document within `k`, which may be one stored earlier in this call) or `None` when its
    /// id was seen before (earlier in the call or in the store). Durable when this returns:
    /// the documents are committed in batches that fit the budget, each before the next.
    /// `k` is at most [`MAX_K`]; every id is checked ([`Store::validate_id`]) before anything
    /// is stored. The results are the caller's memory (about 80 bytes and the ids per
    /// document): [`Store::insert_with`] reports them batch by batch, copying nothing.
    pub fn insert(&mut self, docs: &[(&[u8], u64)], k: u32) -> Result<Vec<Option<Stored>>> {
        let mut out = Vec::with_capacity(docs.len());
        self.insert_with(docs, k, |_, s| out.push(s.map(|s| s.to_stored())))?;
        Ok(out)
    }

    /// Stores the documents as [`Store::insert`] does, and reports each to `each` with its
    /// place in `docs`, in order, as soon as its batch is durable: `Some` with what was
    /// stored, `None` for an id seen before. The ids are borrowed, from `docs` or from a
    /// buffer of the batch, so that the results cost the caller nothing it does not keep.
    /// After an error, the documents reported are stored, and those not reported may be
    /// ([`Store::unreported`]).
    pub fn insert_with(
        &mut self,
        docs: &[(&[u8], u64)],
        k: u32,
        mut each: impl FnMut(usize, Option<StoredRef<'_>>),
    ) -> Result<()> {
        self.writable()?;
        check_k(k)?;
        for (id, _) in docs {
            Store::validate_id(id)?;
        }
        if self.manifest.docs.saturating_add(docs.len() as u64) >= MAX_DOCS {
            return Err(Error::InvalidOption {
                option: "documents",
                reason: format!("a store holds fewer than 2^60 documents; this one holds {} and {} more were given", self.manifest.docs, docs.len()),
            });
        }
        let mut start = 0;
        while start < docs.len() {
            let end = docs.len().min(start + self.batch_docs(k));
            let r = self.insert_batch(&docs[start..end], k, &mut |i, s| each(start + i, s));
            self.poison(r)?;
            start = end;
        }
        Ok(())
    }

    /// The most documents the next batch of [`Store::insert`] takes at distance `k`: a call
    /// of more is stored in several batches, each a search of every segment, so a caller
    /// that can gather this many documents per call gets the fewest searches per document.
    /// It is the batch's share of the budget, less the sparse indexes as they stand, over
    /// the bytes a document takes (`docs/design.md`, "Memory"), and shrinks slowly as the
    /// store grows.
    pub fn batch_docs(&self, k: u32) -> usize {
        let per_doc = BYTES_PER_DOC + BYTES_PER_PROBE * if k >= 4 { 17 } else { 1 };
        // Past about 9·10^8 documents at 64 MiB the indexes leave no share: a batch is
        // then MIN_MEMORY's worth (`docs/design.md`, "Memory").
        let budget = (self.batch_budget.saturating_sub(self.index_memory())).max(MIN_MEMORY);
        // A batch is one segment, of at most MAX_SEGMENT_DOCS documents.
        (budget / per_doc).clamp(1, MAX_SEGMENT_DOCS as usize)
    }

    /// Bytes of the sparse indexes in memory: the segments' and D's.
    fn index_memory(&self) -> usize {
        let segments: usize = self.segments.iter().map(|s| s.index_memory()).sum();
        segments + self.docs.index_memory()
    }

    /// One batch of [`Store::insert_with`]: the steps of "Near-duplicates: a batch" in
    /// `docs/design.md`.
    fn insert_batch(
        &mut self,
        docs: &[(&[u8], u64)],
        k: u32,
        each: &mut dyn FnMut(usize, Option<StoredRef<'_>>),
    ) -> Result<()> {
        // 1. Which ids are new: not earlier in the batch, not in the sieve of ids. 2. The
        // nearest earlier document of each. The sieve of ids is asked on a thread of its own
        // while the fingerprints of the batch's first occurrences are searched in the
        // segments here (the search of one whose id the sieve knows is thrown away); the
        // nearest among the batch's new documents comes after.
        let base = self.manifest.docs;
        // Each id's signature in the sieve of ids, which also hashes it in the table of the
        // ids seen in the batch: the places of the first occurrences, compared by id.
        let mut sigs: Vec<u64> = docs.iter().map(|d| self.sieve.signature_of(d.0)).collect();
        let firsts: Vec<bool> = {
            let mut seen: hashbrown::HashTable<u32> =
                hashbrown::HashTable::with_capacity(docs.len());
            (0..docs.len())
                .map(|i| {
                    let (id, sig) = (docs[i].0, sigs[i]);
                    let same = |&j: &u32| docs[j as usize].0 == id;
                    match seen.entry(sig, same, |&j| sigs[j as usize]) {
                        hashbrown::hash_table::Entry::Occupied(_) => false,
                        hashbrown::hash_table::Entry::Vacant(v) => {
                            v.insert(i as u32);
                            true
                        }
                    }
                })
                .collect()
        };
        // The first occurrences' signatures and fingerprints (the queries: every stored
        // document is earlier than `base`), in order.
        let mut place = 0;
        sigs.retain(|_| {
            place += 1;
            firsts[place - 1]
        });
        let fps: Vec<u64> = (docs.iter().enumerate())
            .filter(|&(i, _)| firsts[i])
            .map(|(_, d)| d.1)
            .collect();
        let mut found = vec![NONE; fps.len()];
        let mut search = || {
            search_segments(&self.segments, &fps, k, &mut |slot, doc, d| {
                let b = &mut found[slot as usize];
                *b = (*b).min(pack(d, doc));
            })
        };
        let known = if fps.len() < PARALLEL_MIN || self.segments.is_empty() {
            // Too little to search for a thread to pay.
            search()?;
            self.sieve.known_signatures(&sigs).map_err(in_ids)?
        } else {
            lookup_while(&mut self.sieve, &sigs, search).map_err(in_ids)?
        };
        drop((fps, sigs));
        let mut new: Vec<u32> = Vec::with_capacity(known.len());
        let mut best: Vec<u64> = Vec::with_capacity(known.len());
        // The first occurrences are the queries, in order: `cand` is the next one's.
        let mut cand = 0;
        for (i, &first) in firsts.iter().enumerate() {
            let this = cand;
            if first {
                cand += 1;
            }
            if first && !known[this] {
                new.push(i as u32);
                best.push(found[this]);
            } else {
                self.manifest.repeats += 1;
                self.dirty = true;
            }
        }
        drop((found, known, firsts));
        if new.is_empty() {
            (0..docs.len()).for_each(|i| each(i, None));
            return Ok(());
        }
        // The new documents' fingerprints; document `base + j` is the `j`-th.
        let queries: Vec<u64> = new.iter().map(|&i| docs[i as usize].1).collect();
        search_among(&queries, base, k, &mut |slot, doc, d| {
            let b = &mut best[slot as usize];
            *b = (*b).min(pack(d, doc));
        });
        // 3. D's records.
        for (j, &i) in new.iter().enumerate() {
            let nearest = unpack(best[j]).map(|(d, doc)| (doc, d));
            self.docs
                .append(docs[i as usize].1, nearest, docs[i as usize].0)?;
        }
        let early = crate::planted::active(crate::planted::Bug::ReportBeforeCommit);
        if early {
            self.report(docs, base, &new, &best, each)?;
        }
        if crate::planted::active(crate::planted::Bug::IdsBeforeCommit) {
            for &i in &new {
                self.sieve.push(docs[i as usize].0).map_err(in_ids)?;
            }
            self.sieve.sync().map_err(in_ids)?;
        }
        // 4. D durable; 5. the batch's segment durable; 6. commit.
        self.docs.sync()?;
        let n = queries.len() as u64;
        let mut sorted: Vec<Entry> = Vec::new();
        let seg = self.write_segment(base, n, |t, w| {
            // In (key, document) order.
            search::entries_by_key(t, &queries, base, &mut sorted);
            for &e in &sorted {
                w.push(t, e)?;
            }
            Ok(())
        })?;
        drop((queries, sorted));
        self.manifest.docs += n;
        self.manifest.log_len = self.docs.log_len;
        self.manifest.index_len = self.docs.index_len;
        self.manifest.segments.push(SegmentRef {
            id: seg.id,
            first: seg.first,
            docs: seg.docs,
            bytes: seg.bytes,
        });
        self.segments.push(Arc::new(seg));
        self.manifest.commit_to(&*self.storage)?;
        self.dirty = false;
        // 7. The ids to the sieve, durably (recorded in the manifest at the next commit).
        for &i in &new {
            self.sieve.push(docs[i as usize].0).map_err(in_ids)?;
        }
        self.sieve.sync().map_err(in_ids)?;
        self.manifest.in_sieve = self.manifest.docs;
        self.dirty = true;
        // 8. The results, to the caller.
        if !early {
            self.report(docs, base, &new, &best, each)?;
        }
        // 9. A merge, when due.
        self.merge_if_due()
    }

    /// Reports the documents of a batch stored from `base` (`new`: the places of the new
    /// ones in `docs`, `best`: their nearest found, packed) to `each`, in order. The ids of
    /// the nearest documents stored before the batch are read from D in document order, so
    /// that each frame of D is read once, into a buffer of what the batch's
    /// [`REPORT_BYTES_PER_DOC`] leave beside the other vectors; the ids that do not fit are
    /// read one by one as they are reported.
    fn report(
        &mut self,
        docs: &[(&[u8], u64)],
        base: u64,
        new: &[u32],
        best: &[u64],
        each: &mut dyn FnMut(usize, Option<StoredRef<'_>>),
    ) -> Result<()> {
        // (document, new document's number), then (where its id is in `ids`, number);
        // allocated to its exact length.
        let before = |b: &u64| unpack(*b).is_some_and(|(_, doc)| doc < base);
        let mut earlier: Vec<(u64, u32)> =
            Vec::with_capacity(best.iter().filter(|b| before(b)).count());
        earlier.extend(
            (best.iter().enumerate())
                .filter(|(_, b)| before(b))
                .map(|(j, &b)| (b & (MAX_DOCS - 1), j as u32)),
        );
        earlier.sort_unstable();
        let cap =
            (REPORT_BYTES_PER_DOC * docs.len()).saturating_sub(12 * new.len() + 16 * earlier.len());
        // Allocated whole (its share of the budget), so that growing it never holds more.
        let mut ids: Vec<u8> = Vec::with_capacity(if earlier.is_empty() { 0 } else { cap });
        for e in &mut earlier {
            let (doc, start) = (e.0, ids.len());
            e.0 = UNREAD;
            if start < cap {
                let id = self.docs.record(doc)?.id;
                if start + id.len() <= cap {
                    ids.extend_from_slice(&id);
                    e.0 = (start as u64) << 17 | id.len() as u64;
                }
            }
        }
        earlier.sort_unstable_by_key(|e| e.1);
        let mut at = 0;
        let mut next_new = new.iter().enumerate().peekable();
        for i in 0..docs.len() {
            let Some((j, _)) = next_new.next_if(|&(_, &p)| p as usize == i) else {
                each(i, None);
                continue;
            };
            let (id, fingerprint) = docs[i];
            let mut held = Vec::new();
            let nearest = match unpack(best[j]) {
                None => None,
                Some((distance, doc)) if doc >= base => Some(NearestRef {
                    doc,
                    id: docs[new[(doc - base) as usize] as usize].0,
                    distance,
                }),
                Some((distance, doc)) => {
                    debug_assert_eq!(earlier[at].1 as usize, j);
                    let place = earlier[at].0;
                    at += 1;
                    let id = if place == UNREAD {
                        held = self.docs.record(doc)?.id;
                        &held[..]
                    } else {
                        let start = (place >> 17) as usize;
                        &ids[start..start + (place & ((1 << 17) - 1)) as usize]
                    };
                    Some(NearestRef { doc, id, distance })
                }
            };
            let doc = base + j as u64;
            each(
                i,
                Some(StoredRef {
                    doc,
                    id,
                    fingerprint,
                    nearest,
                }),
            );
            drop(held);
        }
        Ok(())
    }

    /// Writes a new segment of `docs` documents from `first`, its tables filled by `fill`,
    /// durably (file and directory synced).
    fn write_segment(
        &mut self,
        first: u64,
        docs: u64,
        fill: impl FnMut(usize, &mut SegmentWriter) -> Result<()>,
    ) -> Result<Segment> {
        let id = self.manifest.next_id;
        self.manifest.next_id += 1;
        write_segment(&*self.storage, id, first, docs, self.segment_version, fill)
    }

    /// Every stored document within `k` of `fingerprint`, nearest first (ties: earliest
    /// stored first), as (document, distance).
    pub fn query(&mut self, fingerprint: u64, k: u32) -> Result<Vec<(u64, u32)>> {
        check_k(k)?;
        let mut found = Vec::new();
        search_segments(&self.segments, &[fingerprint], k, &mut |_, doc, d| {
            found.push((d, doc))
        })?;
        found.sort_unstable();
        found.dedup();
        Ok(found.into_iter().map(|(d, doc)| (doc, d)).collect())
    }

    /// What was stored as document `doc`.
    pub fn document(&mut self, doc: u64) -> Result<Stored> {
        let rec = self.docs.record(doc)?;
        let nearest = match rec.nearest {
            None => None,
            Some((m, distance)) => Some(Nearest {
                doc: m,
                id: self.docs.record(m)?.id,
                distance,
            }),
        };
        Ok(Stored {
            doc,
            id: rec.id,
            fingerprint: rec.fp,
            nearest,
        })
    }

    /// Whether a document of this id was stored.
    pub fn contains_id(&mut self, id: &[u8]) -> Result<bool> {
        self.sieve.known(id).map_err(in_ids)
    }

    /// The number of documents stored.
    pub fn len(&self) -> u64 {
        self.manifest.docs
    }

    /// Whether no document is stored.
    pub fn is_empty(&self) -> bool {
        self.manifest.docs == 0
    }

    /// The documents stored whose results were not reported yet: `reported .. len`. A crash
    /// after a document was stored and before its result reached its reader leaves it here,
    /// so that the next run reports it (the command line prints these lines first).
    pub fn unreported(&self) -> std::ops::Range<u64> {
        self.manifest.reported..self.manifest.docs
    }

    /// Records that the results of the documents before `upto` were reported; durable at the
    /// next commit (a batch of [`Store::insert`] or [`Store::close`]).
    pub fn set_reported(&mut self, upto: u64) {
        let upto = upto.min(self.manifest.docs);
        if upto > self.manifest.reported {
            self.manifest.reported = upto;
            self.dirty = true;
        }
    }

    /// The counts and sizes.
    pub fn stats(&self) -> NearStats {
        NearStats {
            docs: self.manifest.docs,
            repeats: self.manifest.repeats,
            reported: self.manifest.reported,
            segments: self.segments.len() as u64,
            segment_bytes: self.segments.iter().map(|s| s.bytes).sum(),
            log_bytes: self.docs.log_len + self.docs.index_len,
            commits: self.manifest.commit,
        }
    }

    /// The sieve of document ids (for its statistics).
    pub fn ids(&mut self) -> &mut Sieve {
        &mut self.sieve
    }

    /// Merges the newest segments when they hold at least half as many documents as the one
    /// before them, so that each segment holds at least twice the documents of all later
    /// ones: fewer than `log2(documents) + 1` segments, each document rewritten at most that
    /// many times. With background flushes ([`Options::background_flush`], the default) the
    /// merge runs on a thread of its own while the next batches go on, one merge at a time:
    /// a merge that finished is listed first (a commit), and one that runs is waited for
    /// only past [`MAX_SEGMENTS`] segments. Otherwise merges run here, one after the other.
    fn merge_if_due(&mut self) -> Result<()> {
        if let Some(m) = &mut self.merging {
            if !m.finished() && self.segments.len() <= MAX_SEGMENTS {
                return Ok(());
            }
            self.finish_merge()?;
        }
        while let Some(a) = self.due_merge() {
            if self.background {
                return self.start_merge(a);
            }
            self.merge(a)?;
        }
        Ok(())
    }

    /// The first of the newest segments due to be merged (the policy of
    /// [`Store::merge_if_due`]), if a merge is due.
    fn due_merge(&self) -> Option<usize> {
        let n = self.segments.len();
        if n < 2 {
            return None;
        }
        let mut a = n - 1;
        let mut acc = self.segments[a].docs;
        while a > 0 && acc * 2 >= self.segments[a - 1].docs {
            a -= 1;
            acc += self.segments[a].docs;
        }
        if a == n - 1 && n <= MAX_SEGMENTS {
            return None;
        }
        let mut a = if a == n - 1 { n - 2 } else { a };
        // A segment holds at most MAX_SEGMENT_DOCS documents: the oldest inputs stay out
        // of a merge that would pass it (none is merged when the two newest would).
        while a < n - 1 && self.segments[a..].iter().map(|s| s.docs).sum::<u64>() > MAX_SEGMENT_DOCS
        {
            a += 1;
        }
        (a < n - 1).then_some(a)
    }

    /// Merges the segments from `a` on into one, here: a commit, then the old files are
    /// removed.
    fn merge(&mut self, a: usize) -> Result<()> {
        let first = self.segments[a].first;
        let docs: u64 = self.segments[a..].iter().map(|s| s.docs).sum();
        let inputs: Vec<Arc<Segment>> = self.segments[a..].to_vec();
        let seg = self.write_segment(first, docs, |t, w| merge_table(&inputs, t, w))?;
        self.list_merged(a, inputs.len(), seg)
    }

    /// Starts merging the segments from `a` on into one on the merge thread; listed by
    /// [`Store::finish_merge`]. If the thread cannot be started, merges here.
    fn start_merge(&mut self, a: usize) -> Result<()> {
        if self.merger.is_none() {
            match Merger::start() {
                Ok(m) => self.merger = Some(m),
                Err(_) => return self.merge(a),
            }
        }
        let first = self.segments[a].first;
        let docs: u64 = self.segments[a..].iter().map(|s| s.docs).sum();
        let inputs: Vec<Arc<Segment>> = self.segments[a..].to_vec();
        let ids = inputs.iter().map(|s| s.id).collect();
        let id = self.manifest.next_id;
        let storage = self.storage.clone();
        let version = self.segment_version;
        let (send, result) = std::sync::mpsc::channel();
        let job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_segment(&*storage, id, first, docs, version, |t, w| {
                    merge_table(&inputs, t, w)
                })
            }));
            // The inputs go before the result does: once it is received, only the store
            // holds them, and removes their files.
            drop(inputs);
            let _ = send.send(r);
        });
        let jobs = self.merger.as_ref().and_then(|m| m.jobs.as_ref());
        if jobs.is_none_or(|j| j.send(job).is_err()) {
            // The thread is gone (it cannot be, but then): merge here.
            self.merger = None;
            return self.merge(a);
        }
        // Committed with the next commit; a crash before it leaves the segment unlisted, and
        // the next open removes it before the id is given again.
        self.manifest.next_id += 1;
        self.merging = Some(Merging {
            inputs: ids,
            result,
            done: None,
        });
        Ok(())
    }

    /// Waits for the merge running on the merge thread, then lists its segment in place of its
    /// inputs (a commit) and removes them. Its failure is this call's.
    fn finish_merge(&mut self) -> Result<()> {
        let Some(m) = self.merging.take() else {
            return Ok(());
        };
        let inputs = m.inputs.clone();
        let seg = m.join()?;
        // The inputs are still consecutive segments: batches only add segments after them,
        // and no other merge ran meanwhile.
        let a = self
            .segments
            .iter()
            .position(|s| s.id == inputs[0])
            .expect("the inputs of a merge stay listed until it is finished");
        debug_assert!(self.segments[a..]
            .iter()
            .map(|s| s.id)
            .take(inputs.len())
            .eq(inputs.iter().copied()));
        self.list_merged(a, inputs.len(), seg)
    }

    /// Lists `seg`, the merge of the `n` segments from `a`, in their place: a commit, then
    /// their files are removed.
    fn list_merged(&mut self, a: usize, n: usize, seg: Segment) -> Result<()> {
        let listed = SegmentRef {
            id: seg.id,
            first: seg.first,
            docs: seg.docs,
            bytes: seg.bytes,
        };
        self.manifest.segments.splice(a..a + n, [listed]);
        let inputs: Vec<Arc<Segment>> = self.segments.splice(a..a + n, [Arc::new(seg)]).collect();
        self.manifest.commit_to(&*self.storage)?;
        self.dirty = false;
        for s in inputs {
            let name = segment::name(s.id);
            drop(s);
            self.storage.remove_file(&name)?;
        }
        Ok(())
    }

    /// Commits what changed in memory (the reported documents, the ids' progress, the
    /// counters), closes the sieve of ids and releases the lock.
    pub fn close(mut self) -> Result<()> {
        self.writable()?;
        let r = self.finish_merge();
        self.poison(r)?;
        if self.dirty {
            self.manifest.commit_to(&*self.storage)?;
        }
        self.sieve.close().map_err(in_ids)
    }
}

/// Writes segment `id` of `docs` documents from `first` in format `version`, its tables
/// filled by `fill`, durably (file and directory synced).
fn write_segment(
    storage: &dyn Storage,
    id: u64,
    first: u64,
    docs: u64,
    version: u32,
    mut fill: impl FnMut(usize, &mut SegmentWriter) -> Result<()>,
) -> Result<Segment> {
    let mut w = SegmentWriter::create(storage, id, first, docs, version)?;
    for t in 0..TABLES {
        fill(t, &mut w)?;
    }
    let seg = w.finish()?;
    storage.sync_directory()?;
    Ok(seg)
}

/// Calls `on(slot, doc, distance)` for every document of `segments` within `k` of a query
/// `fps[slot]` (every stored document is earlier than every query).
fn search_segments(
    segments: &[Arc<Segment>],
    fps: &[u64],
    k: u32,
    on: &mut impl FnMut(u32, u64, u32),
) -> Result<()> {
    let mut probes: Vec<Probe> = Vec::new();
    let mut scratch = Scratch::default();
    for t in 0..TABLES {
        search::probes(t, fps, k, &mut probes);
        for seg in segments {
            for b in search::blocks(&probes, &seg.tables[t]) {
                let from = probes.partition_point(|p| p.key < seg.tables[t][b].first);
                seg.join_block(t, b, &probes[from..], k, &mut scratch, on)?;
            }
        }
    }
    Ok(())
}

/// Calls `on(slot, doc, distance)` for every pair of new documents within `k` of each other,
/// `fps[j]` the fingerprint of document `base + j`: `doc` the earlier one's document and
/// `slot` the later one's place.
fn search_among(fps: &[u64], base: u64, k: u32, on: &mut impl FnMut(u32, u64, u32)) {
    let mut probes: Vec<Probe> = Vec::new();
    let mut entries = Vec::new();
    for t in 0..TABLES {
        search::probes(t, fps, k, &mut probes);
        search::entries_by_key(t, fps, base, &mut entries);
        search::join(&probes, &entries, t, k, |slot| base + u64::from(slot), on);
    }
}

/// Looks the signatures `sigs` up in the sieve of ids on a thread of its own while `work`
/// runs on this one (both in turn on this one if the thread cannot be started); returns
/// whether each is known once both are done, or an error: `work`'s if it failed, else the
/// lookup's.
fn lookup_while(
    sieve: &mut Sieve,
    sigs: &[u64],
    work: impl FnOnce() -> Result<()>,
) -> Result<Vec<bool>> {
    // The sieve, for the thread; left here if it cannot be started.
    let sieve = std::sync::Mutex::new(Some(sieve));
    let take = || sieve.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (worked, looked) = std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("crivello-ids".into())
            .spawn_scoped(scope, || take().map(|s| s.known_signatures(sigs)));
        let worked = work();
        let looked = match other {
            Ok(thread) => match thread.join() {
                Ok(looked) => looked,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(_) => None,
        };
        (worked, looked)
    });
    let known = match looked {
        Some(known) => known,
        None => take()
            .expect("the thread did not start")
            .known_signatures(sigs),
    };
    worked?;
    known
}

/// Refuses a `k` over [`MAX_K`].
fn check_k(k: u32) -> Result<()> {
    if k > MAX_K {
        return Err(Error::InvalidOption {
            option: "k",
            reason: format!("the distance is 0 to {MAX_K} bits, not {k}"),
        });
    }
    Ok(())
}

/// Creates an empty store: D and its index, then the manifest (last, so that an
/// interrupted creation leaves files the next creation overwrites).
fn create(storage: &dyn Storage) -> Result<Manifest> {
    let foreign = storage
        .list_files()?
        .into_iter()
        .any(|n| !(n == "LOCK" || n == docs::LOG || n == docs::INDEX || n.ends_with(".tmp")));
    if foreign {
        return Err(Error::NotASieve {
            dir: storage.describe(),
            reason: format!(
                "the directory holds files but no near-duplicate store ({NAME} is missing)"
            ),
        });
    }
    docs::create(storage)?;
    storage.sync_directory()?;
    let mut m = Manifest {
        log_len: docs::HEADER,
        index_len: docs::HEADER,
        ..Manifest::default()
    };
    m.commit_to(storage)?;
    Ok(m)
}

/// Writes table `t` of `inputs` merged, in (key, document) order. The inputs hold
/// consecutive ranges of documents, in order, so that among entries of one key those of an
/// earlier input come first: the order is (key, input), and runs of entries of one input are
/// copied up to the next input's head, without comparing entry by entry across inputs.
fn merge_table(inputs: &[Arc<Segment>], t: usize, w: &mut SegmentWriter) -> Result<()> {
    struct Cursor<'a> {
        seg: &'a Segment,
        block: usize,
        entries: Vec<Entry>,
        pos: usize,
    }
    impl Cursor<'_> {
        /// The key of the next entry, reading the next block when this one is used up.
        fn head(&mut self, t: usize, buf: &mut Vec<u8>) -> Result<Option<u32>> {
            while self.pos == self.entries.len() {
                if self.block == self.seg.tables[t].len() {
                    return Ok(None);
                }
                self.seg.read_block(t, self.block, buf, &mut self.entries)?;
                self.block += 1;
                self.pos = 0;
            }
            Ok(Some(key(self.entries[self.pos].fp, t)))
        }
    }
    debug_assert!(inputs
        .windows(2)
        .all(|p| p[0].first + p[0].docs <= p[1].first));
    let mut buf = Vec::new();
    let mut cursors: Vec<Cursor<'_>> = inputs
        .iter()
        .map(|seg| Cursor {
            seg,
            block: 0,
            entries: Vec::new(),
            pos: 0,
        })
        .collect();
    let mut heads: Vec<Option<u32>> = Vec::with_capacity(cursors.len());
    for c in cursors.iter_mut() {
        heads.push(c.head(t, &mut buf)?);
    }
    loop {
        // The least (key, input) of the heads, and the next least: where its run stops.
        let mut first: Option<(u32, usize)> = None;
        let mut bound: Option<(u32, usize)> = None;
        for (i, h) in heads.iter().enumerate() {
            if let Some(k) = *h {
                if first.is_none_or(|f| (k, i) < f) {
                    bound = first;
                    first = Some((k, i));
                } else if bound.is_none_or(|b| (k, i) < b) {
                    bound = Some((k, i));
                }
            }
        }
        let Some((_, i)) = first else {
            return Ok(());
        };
        let c = &mut cursors[i];
        loop {
            while c.pos < c.entries.len() {
                let e = c.entries[c.pos];
                if bound.is_some_and(|b| (key(e.fp, t), i) > b) {
                    break;
                }
                w.push(t, e)?;
                c.pos += 1;
            }
            if c.pos < c.entries.len() {
                break;
            }
            if c.head(t, &mut buf)?.is_none() {
                break;
            }
        }
        heads[i] = c.head(t, &mut buf)?;
    }
}

/// What [`check`] found in a sound store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NearCheck {
    /// Documents verified.
    pub docs: u64,
    /// Segments verified.
    pub segments: u64,
    /// Entries verified (four per document).
    pub entries: u64,
}

/// Verifies the near-duplicate store in `dir` without changing it: the manifest, every
/// frame of D and its index, every block of every segment (each table holds each of its
/// documents once, with D's fingerprint), and the sieve of ids.
pub fn check(dir: impl AsRef<Path>) -> Result<NearCheck> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(Error::NotASieve {
            dir: dir.display().to_string(),
            reason: "no such directory".into(),
        });
    }
    check_storage(Arc::new(DirStorage::open_store_read_only(dir)?))
}

/// [`check`] of a store in `storage`.
pub fn check_storage(storage: Arc<dyn Storage>) -> Result<NearCheck> {
    let _lock = storage.lock_exclusive()?;
    let m = Manifest::read(&*storage)?.ok_or_else(|| Error::NotASieve {
        dir: storage.describe(),
        reason: format!("no {NAME}: not a near-duplicate store"),
    })?;
    let mut docs = Docs::open(&*storage, m.log_len, m.index_len, m.docs, false)?;
    docs.verify_layout()?;
    // Every record of D, in order: a mix of (document, fingerprint) summed over each
    // segment's range, to compare with its tables.
    let mut sums = vec![0u64; m.segments.len()];
    let mut seg_of = 0usize;
    for doc in 0..m.docs {
        let rec = docs.record(doc)?;
        if let Some((n, _)) = rec.nearest {
            if n >= doc {
                return Err(Error::corrupt(
                    docs::LOG,
                    0,
                    crate::error::Corruption::OutOfRange {
                        field: "nearest document",
                        found: n,
                        limit: doc,
                    },
                ));
            }
        }
        while doc >= m.segments[seg_of].first + m.segments[seg_of].docs {
            seg_of += 1;
        }
        sums[seg_of] = sums[seg_of].wrapping_add(mix(doc, rec.fp));
    }
    let mut report = NearCheck {
        docs: m.docs,
        ..NearCheck::default()
    };
    let (mut buf, mut entries) = (Vec::new(), Vec::new());
    for (s, sum) in m.segments.iter().zip(&sums) {
        let seg = Segment::open(&*storage, s.id, s.first, s.docs, s.bytes)?;
        for t in 0..TABLES {
            let mut got = 0u64;
            for b in 0..seg.tables[t].len() {
                seg.read_block(t, b, &mut buf, &mut entries)?;
                for e in &entries {
                    got = got.wrapping_add(mix(e.doc, e.fp));
                }
                report.entries += entries.len() as u64;
            }
            if got != *sum {
                return Err(Error::corrupt(
                    &segment::name(s.id),
                    0,
                    crate::error::Corruption::Mismatch {
                        field: "entries of a table against the log of documents",
                        expected: *sum,
                        found: got,
                    },
                ));
            }
        }
        report.segments += 1;
    }
    let ids: Arc<dyn Storage> = Arc::new(Prefixed::new(storage, IDS));
    let ids = crate::check_storage(ids).map_err(in_ids)?;
    if let Some(damage) = ids.damage.into_iter().next() {
        return Err(in_ids(damage));
    }
    Ok(report)
}

/// A mix of a document and its fingerprint for `check`'s sums: any change of either changes
/// the sum but with probability about 2^−64.
fn mix(doc: u64, fp: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(&fp.to_le_bytes(), doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::neardup::{brute, fingerprints};

    fn insert(store: &mut Store, fps: &[u64], range: std::ops::Range<usize>) {
        let ids: Vec<Vec<u8>> = range
            .clone()
            .map(|i| format!("d{i}").into_bytes())
            .collect();
        let docs: Vec<(&[u8], u64)> = ids
            .iter()
            .zip(&fps[range.clone()])
            .map(|(id, &fp)| (id.as_slice(), fp))
            .collect();
        let out = store.insert(&docs, 3).unwrap();
        for (i, o) in range.zip(out) {
            let got = o.expect("a new id").nearest.map(|m| (m.doc, m.distance));
            assert_eq!(
                got,
                brute(&fps[..i], fps[i], 3).first().copied(),
                "document {i}"
            );
        }
    }

    /// `insert_with` reports what `insert` returns, in order, with every nearest id right,
    /// over a call of three batches: ids of the batch, ids of documents stored before it
    /// (in an earlier call, or in an earlier batch of the same call) read into the batch's
    /// buffer while they fit and one by one past it (ids of 2,000 bytes, so that most do
    /// not fit), and repeats within the call and of an earlier call reported as `None`.
    #[test]
    fn insert_with_reports_each_document_with_its_nearest_ids() {
        let dir = tempfile::tempdir().unwrap();
        let fps = fingerprints(5, 41_000, 3);
        let mut store = Store::open(dir.path(), Options::new().memory(4 << 20)).unwrap();
        let long = |i: usize| format!("{i:0>2000}").into_bytes();
        let ids: Vec<Vec<u8>> = (0..1_000).map(long).collect();
        let docs: Vec<(&[u8], u64)> = ids
            .iter()
            .zip(&fps)
            .map(|(id, &fp)| (&id[..], fp))
            .collect();
        store.insert(&docs, 3).unwrap();
        // Copies of the first thousand one bit off under new short ids, then documents
        // near-duplicate among themselves, and repeats.
        let mut ids: Vec<Vec<u8>> = (0..1_000).map(|i| format!("c{i}").into_bytes()).collect();
        ids.extend((1_000..41_000).map(|i| format!("d{i}").into_bytes()));
        ids.push(b"c7".to_vec());
        ids.push(long(3));
        let mut fps2: Vec<u64> = fps[..1_000].iter().map(|fp| fp ^ 1).collect();
        fps2.extend(&fps[1_000..41_000]);
        fps2.extend([0, 0]);
        let docs: Vec<(&[u8], u64)> = ids
            .iter()
            .zip(&fps2)
            .map(|(id, &fp)| (&id[..], fp))
            .collect();
        // The premises: three batches, and the first one's earlier ids past its buffer.
        let batch = store.batch_docs(3);
        assert!((docs.len() - 1) / batch == 2, "{batch} documents a batch");
        assert!(
            1_000 * 2_000 > REPORT_BYTES_PER_DOC * batch,
            "the buffer would hold them all"
        );
        let mut seen = Vec::new();
        store
            .insert_with(&docs, 3, |i, s| seen.push((i, s.map(|s| s.to_stored()))))
            .unwrap();
        assert_eq!(seen.len(), docs.len());
        let all: Vec<u64> = fps[..1_000]
            .iter()
            .chain(&fps2[..41_000])
            .copied()
            .collect();
        let mut nearest_earlier = [0; 3];
        for (at, (i, s)) in seen.into_iter().enumerate() {
            assert_eq!(i, at, "in order");
            if i >= 41_000 {
                assert_eq!(s, None, "a repeat: {i}");
                continue;
            }
            let s = s.expect("a new id");
            let doc = 1_000 + i as u64;
            assert_eq!(
                (s.doc, &s.id[..], s.fingerprint),
                (doc, docs[i].0, docs[i].1)
            );
            if i < 1_000 || i % 11 == 0 {
                let want = brute(&all[..doc as usize], all[doc as usize], 3)
                    .first()
                    .copied();
                assert_eq!(
                    s.nearest.as_ref().map(|m| (m.doc, m.distance)),
                    want,
                    "document {i}"
                );
            }
            if let Some(m) = s.nearest {
                let stored = store.document(m.doc).unwrap();
                assert_eq!(m.id, stored.id, "the nearest's id, document {i}");
                // Stored before the document's batch.
                if m.doc < 1_000 + (i / batch * batch) as u64 {
                    nearest_earlier[i / batch] += 1;
                }
            }
        }
        assert!(
            nearest_earlier.iter().all(|&n| n > 0),
            "{nearest_earlier:?}"
        );
    }

    /// Merges on a thread of their own while the batches go on: every answer is a scan's,
    /// merges keep the segments few, `close` lists the merge that runs, and a store dropped
    /// while one runs opens again, the merge's unlisted segment removed.
    #[test]
    fn merges_beside_the_batches_answer_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let fps = fingerprints(11, 24_000, 3);
        let opts = Options::new().memory(4 << 20).background_flush(true);
        let mut store = Store::open(dir.path(), opts.clone()).unwrap();
        let mut started = 0;
        for from in (0..16_000).step_by(400) {
            insert(&mut store, &fps, from..from + 400);
            started += usize::from(store.merging.is_some());
        }
        assert!(started > 0, "no merge ran beside a batch");
        assert!(store.segments.len() <= 12, "{}", store.segments.len());
        for i in (0..16_000).step_by(997) {
            assert_eq!(
                store.query(fps[i], 3).unwrap(),
                brute(&fps[..16_000], fps[i], 3)
            );
        }
        store.close().unwrap();
        let mut store = Store::open(dir.path(), opts.clone()).unwrap();
        assert!(store.merging.is_none());
        insert(&mut store, &fps, 16_000..20_000);
        // A merge started, then the store dropped without a close. (Whether the merges of
        // that insert, on their thread, left one segment or more depends on their timing: a
        // batch more makes two.)
        store.finish_merge().unwrap();
        // (In order: a document's number is its place in `fps`, which `insert` checks.)
        let mut next = 20_000;
        while store.segments.len() < 2 {
            assert!(next < 24_000, "no second segment");
            insert(&mut store, &fps, next..next + 400);
            store.finish_merge().unwrap();
            next += 400;
        }
        store.start_merge(0).unwrap();
        let id = store.manifest.next_id - 1;
        drop(store);
        assert!(
            dir.path().join(segment::name(id)).exists(),
            "the merge wrote"
        );
        let mut store = Store::open(dir.path(), opts).unwrap();
        assert!(
            !dir.path().join(segment::name(id)).exists(),
            "unlisted: removed"
        );
        insert(&mut store, &fps, next..24_000);
        store.close().unwrap();
        assert_eq!(check(dir.path()).unwrap().docs, 24_000);
    }

    /// A store whose segments are of version 1 (fingerprint and document side by side), and
    /// whose manifest is of version 1, opens, answers exactly, and merges its segments into
    /// segments of version 2.
    #[test]
    fn a_store_of_version_1_segments_is_read_and_merged_into_version_2() {
        let dir = tempfile::tempdir().unwrap();
        let fps = fingerprints(7, 12_000, 3);
        let opts = Options::new().memory(4 << 20);
        let mut store = Store::open(dir.path(), opts.clone()).unwrap();
        store.segment_version = 1;
        for r in [0..4_000, 4_000..6_000, 6_000..7_000] {
            insert(&mut store, &fps, r);
        }
        assert!(store.segments.iter().all(|s| s.version == 1));
        store.close().unwrap();
        // The manifest as a build before version 2 wrote it.
        let path = dir.path().join(super::super::manifest::NAME);
        let mut m = std::fs::read(&path).unwrap();
        m[4..8].copy_from_slice(&1u32.to_le_bytes());
        let end = m.len() - 4;
        let c = crc32fast::hash(&m[..end]);
        m[end..].copy_from_slice(&c.to_le_bytes());
        std::fs::write(&path, &m).unwrap();

        let mut store = Store::open(dir.path(), opts.clone()).unwrap();
        assert!(store.segments.len() >= 2);
        assert!(store.segments.iter().all(|s| s.version == 1));
        for i in (0..7_000).step_by(331) {
            let want = brute(&fps[..7_000], fps[i], 3);
            assert_eq!(store.query(fps[i], 3).unwrap(), want, "query {i}");
        }
        for r in [7_000..9_000, 9_000..12_000] {
            insert(&mut store, &fps, r);
        }
        assert!(store.segments.iter().any(|s| s.version == 2));
        store.close().unwrap();
        let report = check(dir.path()).unwrap();
        assert_eq!(report.docs, 12_000);
        let store = Store::open(dir.path(), opts).unwrap();
        assert!(
            store.segments.iter().all(|s| s.version == 2),
            "the merges rewrote every segment of version 1"
        );
    }
}
