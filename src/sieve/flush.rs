//! The flush of a batch of S: a spill (the batch becomes a sorted run on disk) or a merge
//! (every waiting run and the batch are merged with Z in one sequential pass).
//!
//! A spill:
//! 1. syncs the batch's A generation (pushes in it become acknowledged);
//! 2. sorts the batch by signature, keeping each signature once with its first position;
//! 3. writes the pairs as an R run (fsync) and fsyncs the directory;
//! 4. commits the manifest, which lists the run: **the switch**. A stays.
//!
//! A merge does steps 1 and 2, then:
//! 3. merges Z's segments, the runs and the batch in signature order into one new Z
//!    segment (fsync); a signature no input of Z holds is new, and its first occurrence is the
//!    one of the earliest run: its position goes to the scratch file `merge.tmp`;
//! 4. appends the new URLs to F, run after run, in A's order (fsync); fsyncs the directory;
//! 5. commits the manifest (no runs, the new segment): **the switch**;
//! 6. removes the merged A generations, the runs, the superseded segments and the scratch.
//!
//! A crash before the switch leaves the old manifest: recovery cuts F back, removes the new
//! files and replays A from the old position. A crash after it leaves only files to remove.

use std::sync::Arc;

#[cfg(all(loom, test))]
use loom::sync::{Condvar, Mutex};
#[cfg(not(all(loom, test)))]
use std::sync::{Condvar, Mutex};

use super::merger::{Head, Input, Merger};
use super::reaper::{self, Reaper};
use crate::error::{Error, Result};
use crate::frontier::{self, SEGMENT_TARGET};
use crate::log::{FrameError, LogReader, LogWriter};
use crate::manifest::Manifest;
use crate::run::{Run, RunMeta, Slot};
use crate::segment::{Segment, SegmentWriter};
use crate::storage::{Storage, StorageFile};

use super::wal;

/// Opens when the flushed A generation is durable: `sync` waits on it.
#[derive(Default)]
pub struct Gate {
    state: Mutex<Option<bool>>,
    cv: Condvar,
}

impl Gate {
    /// Records the outcome of the generation's sync.
    pub fn open(&self, ok: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some(ok);
        }
        self.cv.notify_all();
    }

    /// Waits for the outcome.
    pub fn wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.is_none() {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.unwrap_or(false)
    }
}

/// A frozen buffer of S: records `skip..skip + sigs.len()` of A generation `gen`.
pub struct Batch {
    pub gen: u64,
    pub wal: Arc<dyn StorageFile>,
    pub skip: u64,
    pub sigs: Vec<Slot>,
    /// Pushes dropped by the cache of recent signatures before the freeze (counted only).
    pub absorbed: u64,
    /// A's first record not covered by a run nor merged, once this batch is flushed.
    pub next: (u64, u64),
}

/// A flush to run.
pub struct FlushJob {
    pub storage: Arc<dyn Storage>,
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
    pub runs: Vec<Arc<Run>>,
    pub batch: Batch,
    /// Merge with Z (true) or spill the batch as a run (false).
    pub merge: bool,
    /// Torn records and bytes found by recovery, added to the manifest's counters.
    pub torn: (u64, u64),
    pub gate: Arc<Gate>,
    /// Removes the files the flush supersedes.
    pub reaper: Arc<Reaper>,
}

/// What a flush committed.
pub struct FlushDone {
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
    pub runs: Vec<Arc<Run>>,
    /// The batch's buffer, emptied: the next buffer of S, whose pages are already the
    /// process's (a new one would fault them in again at every flush).
    pub spare: Vec<Slot>,
}

/// Closes the gate with "failed" if the flush ends before opening it.
struct GateGuard(Arc<Gate>);

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.0.open(false);
    }
}

/// The scratch file of a merge: the new positions of each run.
pub const SCRATCH: &str = "merge.tmp";
const SCRATCH_BUFFER: usize = 4 << 10;

/// Runs a flush job to its commit.
pub fn run(job: FlushJob) -> Result<FlushDone> {
    let guard = GateGuard(job.gate.clone());
    let b = job.batch;
    let wal_name = wal::file_name(b.gen);
    b.wal.sync().map_err(|e| Error::io("fsync", &wal_name, e))?;
    guard.0.open(true);
    let storage = &*job.storage;
    let mut m = job.manifest.clone();
    let records = b.sigs.len() as u64;

    // Sorted in place by signature, each signature once with the position of its first
    // occurrence in the batch.
    let mut pairs = b.sigs;
    crate::run::sort_slots(&mut pairs);

    let mut segments = job.segments.clone();
    let mut runs = job.runs.clone();
    if job.merge {
        let wal = BatchWal {
            gen: b.gen,
            wal: b.wal.clone(),
            skip: b.skip,
        };
        let seg = merge(storage, &mut m, &segments, &runs, wal, &pairs)?;
        segments = seg.into_iter().collect();
        runs.clear();
    } else if !pairs.is_empty() {
        let meta = RunMeta {
            id: m.next_id,
            gen: b.gen,
            skip: b.skip,
            records,
            pairs: pairs.len() as u64,
        };
        m.next_id += 1;
        crate::run::write(storage, meta, &pairs)?;
        runs.push(Arc::new(Run::open(storage, meta)?));
        storage
            .sync_dir()
            .map_err(|e| Error::io("fsync", "directory", e))?;
    }

    let first_gen = job.runs.first().map_or(b.gen, |r| r.meta().gen.min(b.gen));
    if job.merge && crate::planted::active(crate::planted::Bug::EarlyADiscard) {
        reaper::remove_generations(storage, first_gen..b.next.0);
    }
    m.commit += 1;
    m.a_gen = b.next.0;
    m.a_skip = b.next.1;
    m.pushed += records + b.absorbed;
    m.flushes += u64::from(records > 0);
    m.merges += u64::from(job.merge);
    m.torn_records += job.torn.0;
    m.torn_bytes += job.torn.1;
    m.segments = segments.iter().map(|s| s.meta()).collect();
    m.runs = runs.iter().map(|r| r.meta()).collect();
    m.commit_to(storage)?;

    // After the switch: what is superseded goes (a crash here leaves orphans that the next
    // open removes), with the last handles of the batch's generation and of what was merged.
    if job.merge {
        job.reaper.remove_generations(first_gen..m.a_gen);
        for r in &job.runs {
            job.reaper.remove(r.name());
        }
        for s in &job.segments {
            if !segments.iter().any(|n| n.meta().id == s.meta().id) {
                job.reaper.remove(s.name());
            }
        }
        // Now: the next merge creates it again.
        let _ = storage.remove(SCRATCH);
    }
    job.reaper.release((b.wal, job.runs, job.segments));
    pairs.clear();
    Ok(FlushDone {
        manifest: m,
        segments,
        runs,
        spare: pairs,
    })
}

/// The new positions of one source of a merge (a run, or the batch), buffered into its
/// region of the scratch file.
pub(crate) struct Region {
    offset: u64,
    /// New positions.
    pub count: u64,
    /// One past the highest position written.
    end: u64,
    /// The wrapping sum of [`check_term`] over the new (signature, position) pairs: what
    /// the records emitted must add up to.
    pub sum: u64,
    buf: Vec<u8>,
}

impl Region {
    /// Records that the signature `sig` at position `idx` of this region's source is new.
    fn add(&mut self, scratch: &dyn StorageFile, sig: u64, idx: u32) -> Result<()> {
        self.buf.extend_from_slice(&idx.to_le_bytes());
        self.count += 1;
        self.end = self.end.max(u64::from(idx) + 1);
        self.sum = self.sum.wrapping_add(check_term(sig, u64::from(idx)));
        if self.buf.len() >= SCRATCH_BUFFER {
            let at = self.offset + 4 * self.count - self.buf.len() as u64;
            scratch
                .write_all_at(&self.buf, at)
                .map_err(|e| Error::io("write", SCRATCH, e))?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// The rule of deferred merges (DRUM's): a batch is merged with Z, rather than spilled as a
/// run, once the records waiting in the runs and the batch (`unmerged`) reach the
/// signatures in Z (`distinct`), so that reading and rewriting Z costs a bounded amount per
/// push, or once one more run would reach `max_runs`, so that a merge's buffers stay in the
/// budget.
pub(crate) fn merge_due(unmerged: u64, distinct: u64, runs: usize, max_runs: usize) -> bool {
    unmerged >= distinct || runs + 1 >= max_runs
}

/// A region's checksum term for the new signature `sig` at position `idx`: mixed so that
/// the sum over a region changes when lines change, and also when equal-length lines swap
/// places (a plain sum of signatures ignores order).
pub(crate) fn check_term(sig: u64, idx: u64) -> u64 {
    let mut x = sig ^ idx.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^ (x >> 33)
}

/// The new segment of a merge, created at its first signature (a merge whose output is
/// empty creates no file and takes no id).
struct MergeOut<'a> {
    storage: &'a dyn Storage,
    id: u64,
    next_id: &'a mut u64,
    /// The most signatures the merge can write.
    max_sigs: u64,
    writer: Option<SegmentWriter>,
}

impl MergeOut<'_> {
    fn push(&mut self, sig: u64) -> Result<()> {
        let w = match &mut self.writer {
            Some(w) => w,
            None => {
                *self.next_id += 1;
                self.writer
                    .insert(SegmentWriter::create(self.storage, self.id, self.max_sigs)?)
            }
        };
        w.push(sig)
    }
}

/// What a merge of signatures produced: the new Z segment (none when Z stays empty), and
/// the new positions of every source in the scratch file.
pub(crate) struct Merged {
    pub segment: Option<Arc<Segment>>,
    pub scratch: Arc<dyn StorageFile>,
    /// One region per run, in push order, then one for the batch.
    pub regions: Vec<Region>,
}

/// Joins Z's signatures (`next_z`, increasing) with the new side's (`next_new`, increasing,
/// each with its earliest source): every signature goes to `out`, and one that Z lacks is new,
/// its position added to its source's region.
fn join(
    mut next_z: impl FnMut() -> Result<Option<u64>>,
    mut next_new: impl FnMut() -> Result<Option<Head>>,
    out: &mut MergeOut<'_>,
    regions: &mut [Region],
    scratch: &dyn StorageFile,
) -> Result<()> {
    let mut head = next_z()?;
    while let Some(p) = next_new()? {
        while let Some(s) = head.filter(|&s| s < p.sig) {
            out.push(s)?;
            head = next_z()?;
        }
        out.push(p.sig)?;
        if head == Some(p.sig) {
            head = next_z()?;
        } else {
            regions[p.src].add(scratch, p.sig, p.idx)?;
        }
    }
    while let Some(s) = head {
        out.push(s)?;
        head = next_z()?;
    }
    Ok(())
}

/// Merges Z's `segments` with the `runs` (in push order) and the sorted `batch` (after
/// them) into one new segment, numbered from `next_id`. A signature no segment holds is new,
/// and its first occurrence is the one of the earliest source: its position goes to that
/// source's region of the scratch file [`SCRATCH`].
pub(crate) fn merge_signatures(
    storage: &dyn Storage,
    next_id: &mut u64,
    segments: &[Arc<Segment>],
    runs: &[Arc<Run>],
    batch: &[Slot],
) -> Result<Merged> {
    let scratch = storage
        .create(SCRATCH)
        .map_err(|e| Error::io("create", SCRATCH, e))?;
    let mut regions = Vec::with_capacity(runs.len() + 1);
    let mut offset = 0u64;
    let sizes = runs.iter().map(|r| r.meta().pairs);
    for pairs in sizes.chain(std::iter::once(batch.len() as u64)) {
        regions.push(Region {
            offset,
            count: 0,
            end: 0,
            sum: 0,
            buf: Vec::new(),
        });
        offset += 4 * pairs;
    }

    let max_sigs = segments.iter().map(|s| s.meta().sigs).sum::<u64>()
        + runs.iter().map(|r| r.meta().pairs).sum::<u64>()
        + batch.len() as u64;
    let mut out = MergeOut {
        storage,
        id: *next_id,
        next_id,
        max_sigs,
        writer: None,
    };
    if segments.len() <= 1 && runs.is_empty() {
        // The usual case, Z in one segment and no run waiting: each side read straight.
        let mut z = segments.first().map(|s| s.iter());
        let next_z = || z.as_mut().and_then(Iterator::next).transpose();
        let mut batch = batch.iter();
        let next_new = || {
            let p = batch.next();
            Ok(p.map(|p| Head {
                sig: p.sig,
                src: 0,
                idx: p.idx,
            }))
        };
        join(next_z, next_new, &mut out, &mut regions, &*scratch)?;
    } else {
        // Each side merged by its own tournament. The new side's sources are the runs in push
        // order, then the batch, so a signature they share comes from the earliest. Z holds
        // most of the signatures, and each of them costs one comparison in the join.
        let mut z = Merger::new(segments.iter().map(|s| Input::Z(s.iter())).collect())?;
        let fresh = runs.iter().map(|r| Input::Run(r.iter()));
        let fresh = fresh.chain(std::iter::once(Input::Batch(batch.iter())));
        let mut fresh = Merger::new(fresh.collect())?;
        let next_z = || z.next().map(|h| h.map(|h| h.sig));
        join(next_z, || fresh.next(), &mut out, &mut regions, &*scratch)?;
    }
    for r in &mut regions {
        if !r.buf.is_empty() {
            scratch
                .write_all_at(&r.buf, r.offset + 4 * r.count - r.buf.len() as u64)
                .map_err(|e| Error::io("write", SCRATCH, e))?;
            r.buf = Vec::new();
        }
    }
    let segment = match out.writer {
        Some(w) => Some(Arc::new(w.finish()?)),
        None => None,
    };
    Ok(Merged {
        segment,
        scratch,
        regions,
    })
}

/// The batch's A generation: where its records are read from when they are emitted.
struct BatchWal {
    gen: u64,
    wal: Arc<dyn StorageFile>,
    skip: u64,
}

/// Merges Z's `segments` with the `runs` (in push order) and the `batch` (after them) into
/// one new segment, and appends the URLs no input of Z holds to F in push order. Returns the
/// new segment (none when Z stays empty).
fn merge(
    storage: &dyn Storage,
    m: &mut Manifest,
    segments: &[Arc<Segment>],
    runs: &[Arc<Run>],
    b: BatchWal,
    batch: &[Slot],
) -> Result<Option<Arc<Segment>>> {
    let merged = merge_signatures(storage, &mut m.next_id, segments, runs, batch)?;

    // Emit the new URLs in the order of their first appearance: source by source, and in
    // each by position.
    let mut f = FrontierAppender::open(storage, m)?;
    for (i, r) in merged.regions.iter().enumerate() {
        if r.count == 0 {
            continue;
        }
        match runs.get(i) {
            Some(run) => {
                let new = Positions::read(&*merged.scratch, r, run.name())?;
                let meta = run.meta();
                let name = wal::file_name(meta.gen);
                let file = storage.open(&name).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        Error::corrupt(&name, 0, crate::error::Corruption::Missing)
                    }
                    _ => Error::io("open", &name, e),
                })?;
                f.emit(storage, m, (&*file, &name, meta.gen), meta.skip, new.iter())?;
            }
            None => {
                let name = wal::file_name(b.gen);
                let new = Positions::read(&*merged.scratch, r, &name)?;
                f.emit(storage, m, (&*b.wal, &name, b.gen), b.skip, new.iter())?;
            }
        }
    }
    f.finish(storage, m)?;
    storage
        .sync_dir()
        .map_err(|e| Error::io("fsync", "directory", e))?;
    Ok(merged.segment)
}

/// Positions of the scratch file read at a time.
const SCRATCH_READ: u64 = 16 << 10;

/// The new positions of one source, in increasing order.
pub(crate) enum Positions {
    /// One bit per record up to the last new one: no sort needed. Chosen when it takes no
    /// more memory than the list (at most 32 records per new position), as is usual.
    Marked(Vec<u64>),
    /// The positions, sorted: for a source with very few new records.
    Sorted(Vec<u32>),
}

impl Positions {
    /// Reads the positions of region `r` of the scratch file. A position repeated can only
    /// come from a damaged run.
    pub(crate) fn read(scratch: &dyn StorageFile, r: &Region, source: &str) -> Result<Positions> {
        let duplicate = |p: u64| {
            Error::corrupt(
                source,
                0,
                crate::error::Corruption::Field {
                    field: "run record index, given twice",
                    found: p,
                },
            )
        };
        let dense = r.end <= 32 * r.count;
        let mut marked = vec![
            0u64;
            if dense {
                r.end.div_ceil(64) as usize
            } else {
                0
            }
        ];
        let mut sorted = Vec::with_capacity(if dense { 0 } else { r.count as usize });
        let mut buf = vec![0u8; 4 * SCRATCH_READ.min(r.count) as usize];
        let mut done = 0u64;
        while done < r.count {
            let n = SCRATCH_READ.min(r.count - done) as usize;
            scratch
                .read_exact_at(&mut buf[..4 * n], r.offset + 4 * done)
                .map_err(|e| Error::io("read", SCRATCH, e))?;
            for c in buf[..4 * n].chunks_exact(4) {
                let p = u32::from_le_bytes(c.try_into().expect("4 bytes"));
                if u64::from(p) >= r.end {
                    // The scratch file is not checksummed: damaged between write and read.
                    return Err(Error::corrupt(
                        SCRATCH,
                        r.offset + 4 * done,
                        crate::error::Corruption::Field {
                            field: "new position past the source's records",
                            found: u64::from(p),
                        },
                    ));
                }
                if dense {
                    let (word, bit) = (p as usize / 64, p % 64);
                    if marked[word] >> bit & 1 == 1 {
                        return Err(duplicate(u64::from(p)));
                    }
                    marked[word] |= 1 << bit;
                } else {
                    sorted.push(p);
                }
            }
            done += n as u64;
        }
        if dense {
            return Ok(Positions::Marked(marked));
        }
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(duplicate(u64::from(w[0])));
        }
        Ok(Positions::Sorted(sorted))
    }

    /// The positions in increasing order.
    pub(crate) fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Positions::Marked(bits) => Box::new(bits.iter().enumerate().flat_map(|(w, &word)| {
                let mut rest = word;
                std::iter::from_fn(move || {
                    (rest != 0).then(|| {
                        let bit = rest.trailing_zeros();
                        rest &= rest - 1;
                        w as u64 * 64 + u64::from(bit)
                    })
                })
            })),
            Positions::Sorted(list) => Box::new(list.iter().map(|&p| u64::from(p))),
        }
    }
}

/// Appends new URLs to F's tail segment, rolling over to a new segment past
/// [`SEGMENT_TARGET`] bytes.
struct FrontierAppender {
    out: LogWriter,
    tail: u64,
    emitted: u64,
}

impl FrontierAppender {
    fn open(storage: &dyn Storage, m: &mut Manifest) -> Result<FrontierAppender> {
        if m.f_tail_len >= SEGMENT_TARGET {
            let (out, tail) = Self::create(storage, m, m.f_count)?;
            return Ok(FrontierAppender {
                out,
                tail,
                emitted: 0,
            });
        }
        let name = frontier::file_name(m.f_tail);
        let file = storage
            .open(&name)
            .map_err(|e| Error::io("open", &name, e))?;
        let mut start = m.f_tail_len;
        if crate::planted::active(crate::planted::Bug::KeepFTail) {
            start = file.len().map_err(|e| Error::io("stat", &name, e))?;
        }
        Ok(FrontierAppender {
            out: LogWriter::new(file, name, (start, 0), m.f_tail, m.flushes as u32),
            tail: m.f_tail,
            emitted: 0,
        })
    }

    /// Creates a new F segment whose first URL is number `first`.
    fn create(storage: &dyn Storage, m: &mut Manifest, first: u64) -> Result<(LogWriter, u64)> {
        let id = m.next_id;
        m.next_id += 1;
        let name = frontier::file_name(id);
        let f = storage
            .create(&name)
            .map_err(|e| Error::io("create", &name, e))?;
        f.write_all_at(&frontier::header(id, first), 0)
            .map_err(|e| Error::io("write", &name, e))?;
        Ok((
            LogWriter::new(f, name, (frontier::HEADER_LEN, 0), id, m.flushes as u32),
            id,
        ))
    }

    /// Appends the records of A generation `gen` (its file `wal`, named `wal_name`) at the
    /// increasing `positions` (relative to `skip`).
    fn emit(
        &mut self,
        storage: &dyn Storage,
        m: &mut Manifest,
        (wal, wal_name, gen): (&dyn StorageFile, &str, u64),
        skip: u64,
        positions: impl Iterator<Item = u64>,
    ) -> Result<()> {
        let len = wal.len().map_err(|e| Error::io("stat", wal_name, e))?;
        let reader = LogReader::new(wal, len, u64::MAX, gen).with_tail_marks();
        let mut offset = wal::HEADER_LEN;
        let mut record: u64 = 0;
        let mut next = positions.map(|p| skip + p).peekable();
        let mut spare = Vec::new();
        while next.peek().is_some() {
            let frame = match reader.frame_with(offset, std::mem::take(&mut spare)) {
                Ok(f) if f.end.is_none() => f,
                Err(FrameError::Io(e)) => return Err(Error::io("read", wal_name, e)),
                Err(FrameError::Invalid(what)) => {
                    return Err(Error::corrupt(wal_name, offset, what))
                }
                // The end of the generation (its file or its end frame) with positions left.
                Ok(_) | Err(FrameError::End) => {
                    return Err(Error::corrupt(
                        wal_name,
                        offset,
                        crate::error::Corruption::Truncated {
                            needed: 1,
                            available: 0,
                        },
                    ))
                }
            };
            offset += frame.size();
            let end = record + frame.count as u64;
            if next.peek().is_some_and(|&p| p < end) {
                for url in frame.records() {
                    if next.peek() == Some(&record) {
                        self.out.append(url)?;
                        self.emitted += 1;
                        next.next();
                        if self.out.end() >= SEGMENT_TARGET {
                            self.out.sync()?;
                            let (out, tail) = Self::create(storage, m, m.f_count + self.emitted)?;
                            self.out = out;
                            self.tail = tail;
                        }
                    }
                    record += 1;
                }
            }
            record = end;
            spare = frame.payload;
        }
        Ok(())
    }

    /// Syncs F and records its new end in the manifest.
    fn finish(mut self, _storage: &dyn Storage, m: &mut Manifest) -> Result<()> {
        self.out.sync()?;
        m.f_tail = self.tail;
        m.f_tail_len = self.out.end();
        m.f_count += self.emitted;
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    /// Writes `positions` as region 0 of a scratch file and reads them back.
    fn read_back(positions: &[u32]) -> Result<(bool, Vec<u64>)> {
        let end = positions
            .iter()
            .map(|&p| u64::from(p) + 1)
            .max()
            .unwrap_or(0);
        read_back_in(positions, end)
    }

    /// [`read_back`], for a source of `end` records.
    fn read_back_in(positions: &[u32], end: u64) -> Result<(bool, Vec<u64>)> {
        let disk = SimDisk::new();
        let scratch = disk.create(SCRATCH).unwrap();
        let bytes: Vec<u8> = positions.iter().flat_map(|p| p.to_le_bytes()).collect();
        scratch.write_all_at(&bytes, 0).unwrap();
        let region = Region {
            offset: 0,
            count: positions.len() as u64,
            end,
            sum: 0,
            buf: Vec::new(),
        };
        let new = Positions::read(&*scratch, &region, &wal::file_name(3))?;
        let marked = matches!(new, Positions::Marked(_));
        Ok((marked, new.iter().collect()))
    }

    #[test]
    fn new_positions_come_out_in_order_from_the_bitmap_and_from_the_list() {
        // Dense (a bitmap): 40,000 positions among 100,000 records, in merge order.
        let dense: Vec<u32> = (0..40_000u32).map(|i| (i * 7919) % 100_000).collect();
        let (marked, got) = read_back(&dense).unwrap();
        let mut want: Vec<u64> = dense.iter().map(|&p| u64::from(p)).collect();
        want.sort_unstable();
        assert!(marked);
        assert_eq!(got, want);
        // Sparse (a sorted list): 3 positions among 4 billion records.
        let sparse = [4_000_000_000u32, 5, 70_000];
        assert_eq!(
            read_back(&sparse).unwrap(),
            (false, vec![5, 70_000, 4_000_000_000])
        );
        assert_eq!(read_back(&[]).unwrap(), (true, vec![]));
    }

    #[test]
    fn a_position_given_twice_is_corruption_either_way() {
        for positions in [vec![9u32, 3, 9, 1], vec![3_000_000_000, 2, 3_000_000_000]] {
            let e = read_back(&positions).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }

    #[test]
    fn a_position_past_the_source_is_corruption_either_way() {
        // A damaged scratch file: a bitmap of 100 records, a list among 10^6.
        for (positions, end) in [(vec![9u32, 3, 100], 100), (vec![5, 2_000_000], 1_000_000)] {
            let e = read_back_in(&positions, end).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }

    /// Signatures drawn from a small set (so that sources share many), spread over the whole
    /// range, `u64::MAX` among them.
    fn sig(x: u8) -> u64 {
        if x == 0 {
            u64::MAX
        } else {
            u64::from(x).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        }
    }

    proptest::proptest! {
        /// The merge against a reference: every signature of every input once, in order, and
        /// each one no Z segment holds as new at its earliest source's position. Z has 0 to 3
        /// segments (several go through the Z side's tournament), 0 to 5 runs wait.
        #[test]
        fn a_merge_writes_every_signature_once_and_finds_each_new_one_at_its_first_source(
            zs in proptest::collection::vec(proptest::collection::btree_set(0u8..48, 0..30), 0..4),
            news in proptest::collection::vec(proptest::collection::vec(0u8..48, 0..40), 1..7),
        ) {
            let disk = SimDisk::new();
            let mut segments = Vec::new();
            for (i, z) in zs.iter().enumerate() {
                let mut sigs: Vec<u64> = z.iter().map(|&x| sig(x)).collect();
                sigs.sort_unstable();
                let id = 100 + i as u64;
                let mut w = SegmentWriter::create(&disk, id, sigs.len() as u64).unwrap();
                for &s in &sigs {
                    w.push(s).unwrap();
                }
                segments.push(Arc::new(w.finish().unwrap()));
            }
            // Each new source's pairs: sorted, the first position of each signature kept.
            let sources: Vec<Vec<Slot>> = news
                .iter()
                .map(|v| {
                    let mut slots: Vec<Slot> = v
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| Slot { sig: sig(x), idx: i as u32 })
                        .collect();
                    crate::run::sort_slots(&mut slots);
                    slots
                })
                .collect();
            let (batch, waiting) = sources.split_last().unwrap();
            let mut runs = Vec::new();
            for (i, pairs) in waiting.iter().enumerate() {
                let meta = RunMeta {
                    id: 200 + i as u64,
                    gen: i as u64,
                    skip: 0,
                    records: news[i].len() as u64,
                    pairs: pairs.len() as u64,
                };
                crate::run::write(&disk, meta, pairs).unwrap();
                runs.push(Arc::new(Run::open(&disk, meta).unwrap()));
            }

            let mut next_id = 1000;
            let merged = merge_signatures(&disk, &mut next_id, &segments, &runs, batch).unwrap();

            let mut all: Vec<u64> = zs.iter().flatten().map(|&x| sig(x)).collect();
            all.extend(sources.iter().flatten().map(|p| p.sig));
            all.sort_unstable();
            all.dedup();
            let written: Vec<u64> = match &merged.segment {
                Some(z) => z.iter().map(|s| s.unwrap()).collect(),
                None => Vec::new(),
            };
            proptest::prop_assert_eq!(written, all);
            let in_z: std::collections::HashSet<u64> =
                zs.iter().flatten().map(|&x| sig(x)).collect();
            let mut first = std::collections::HashSet::new();
            for (i, pairs) in sources.iter().enumerate() {
                let mut want: Vec<u64> = pairs
                    .iter()
                    .filter(|p| { let s = p.sig; !in_z.contains(&s) && first.insert(s) })
                    .map(|p| u64::from(p.idx))
                    .collect();
                want.sort_unstable();
                let r = &merged.regions[i];
                let got: Vec<u64> = Positions::read(&*merged.scratch, r, "source")
                    .unwrap()
                    .iter()
                    .collect();
                proptest::prop_assert_eq!(got, want, "source {}", i);
            }
        }
    }
}

/// The handoff between the pushing thread and the flush thread, model-checked with loom:
/// `RUSTFLAGS="--cfg loom" cargo test --release --no-default-features --lib loom`.
///
/// The flush thread makes the frozen generation durable, then opens the gate; the pushing
/// thread's `sync` waits on the gate and acknowledges only if it opened with success; a
/// flush that fails or panics before opening it leaves it failed (the guard), which poisons
/// the sieve; the result is applied only after the join. Loom explores every interleaving.
#[cfg(all(loom, test))]
mod loom_model {
    use super::{Gate, GateGuard};
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// One freeze: the flush thread syncs (or fails to), opens the gate, and returns its
    /// outcome; the pushing thread syncs while it runs, then joins.
    fn handoff(sync_ok: bool, panic_before_gate: bool) {
        loom::model(move || {
            // The gate is shared through std's Arc, as in the sieve; its Mutex and Condvar are
            // loom's.
            let gate = std::sync::Arc::new(Gate::default());
            let durable = Arc::new(AtomicBool::new(false));
            let (g, d) = (gate.clone(), durable.clone());
            let flusher = thread::spawn(move || {
                let guard = GateGuard(g.clone());
                if panic_before_gate {
                    // Dropping the guard without opening: as a panic or an early `?` does.
                    drop(guard);
                    return Err("flush failed before the gate");
                }
                if !sync_ok {
                    drop(guard);
                    return Err("fsync failed");
                }
                d.store(true, Ordering::Release);
                guard.0.open(true);
                drop(guard); // opening again with "failed" changes nothing
                Ok(())
            });
            // The pushing thread: `sync` waits for the gate.
            let acked = gate.wait();
            if acked {
                // Acknowledged: the generation is durable, and stays acknowledged.
                assert!(durable.load(Ordering::Acquire));
            }
            let outcome = flusher.join().expect("the flush thread ended");
            // The sieve is poisoned exactly when the flush failed; an acknowledgement is
            // given only by a flush that made the generation durable.
            assert_eq!(outcome.is_ok(), sync_ok && !panic_before_gate);
            if acked {
                assert!(outcome.is_ok());
            }
            // A later wait (another `sync`) sees the same answer.
            assert_eq!(gate.wait(), acked);
        });
    }

    #[test]
    fn loom_a_successful_flush_acknowledges_after_the_generation_is_durable() {
        handoff(true, false);
    }

    #[test]
    fn loom_a_failed_fsync_never_acknowledges() {
        handoff(false, false);
    }

    #[test]
    fn loom_a_flush_that_dies_before_the_gate_never_acknowledges_nor_hangs() {
        handoff(true, true);
    }
}
