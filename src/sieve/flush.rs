//! The flush: the Mercator merge of a batch of S with Z, in two phases.
//!
//! 1. sync the batch's A generation (pushes in it become acknowledged);
//! 2. sort the batch by (signature, position) and keep the first occurrence of each signature;
//! 3. drop the signatures already in Z, reading only the blocks the batch falls in;
//! 4. write the new signatures as a new Z segment (fsync), and merge segments of one tier;
//! 5. append the new URLs to F in A's order (fsync); fsync the directory if files were created;
//! 6. commit the manifest (temp file, fsync, rename, fsync directory): **the switch**;
//! 7. remove the flushed A generation and the superseded Z segments.
//!
//! A crash before step 6 leaves the old manifest: recovery cuts F back, removes the new files
//! and redoes the flush from A. A crash after it leaves only files to remove.

use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};
use crate::frontier::{self, SEGMENT_TARGET};
use crate::log::{FrameError, LogReader, LogWriter};
use crate::manifest::Manifest;
use crate::segment::{Segment, SegmentMeta, SegmentWriter};
use crate::storage::{Storage, StorageFile};

use super::wal;

/// Segments of one tier merged together (the size ratio between tiers).
pub const TIER_FANOUT: usize = 4;

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

/// A batch to flush: records `skip..skip + sigs.len()` of A generation `gen`.
pub struct FlushJob {
    pub storage: Arc<dyn Storage>,
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
    pub gen: u64,
    pub wal: Arc<dyn StorageFile>,
    pub skip: u64,
    pub sigs: Vec<u64>,
    /// A's first live record once this batch is flushed.
    pub next: (u64, u64),
    /// Torn records and bytes found by recovery, added to the manifest's counters.
    pub torn: (u64, u64),
    pub gate: Arc<Gate>,
    /// Planted-bug switches are not compiled in; slots per buffer size the tiers.
    pub tier_base: u64,
}

/// What a flush committed.
pub struct FlushDone {
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
}

/// Closes the gate with "failed" if the flush ends before opening it.
struct GateGuard(Arc<Gate>);

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.0.open(false);
    }
}

/// Runs a flush job to its commit.
pub fn run(job: FlushJob) -> Result<FlushDone> {
    let guard = GateGuard(job.gate.clone());
    let wal_name = wal::file_name(job.gen);
    job.wal
        .sync()
        .map_err(|e| Error::io("fsync", &wal_name, e))?;
    guard.0.open(true);
    let storage = &*job.storage;
    let mut m = job.manifest.clone();
    let pushed = job.sigs.len() as u64;

    // Sort by (signature, position): the first of each run of equal signatures is the first
    // occurrence in the push stream.
    let mut pairs: Vec<(u64, u32)> = job
        .sigs
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, i as u32))
        .collect();
    drop(job.sigs);
    pairs.sort_unstable();
    pairs.dedup_by_key(|p| p.0);

    // Keep the signatures no segment of Z holds.
    for seg in &job.segments {
        filter_known(seg, &mut pairs)?;
    }

    let mut created = false;
    let mut segments = job.segments.clone();
    let mut superseded: Vec<SegmentMeta> = Vec::new();
    if !pairs.is_empty() {
        let id = m.next_id;
        m.next_id += 1;
        let mut w = SegmentWriter::create(storage, id)?;
        for &(s, _) in &pairs {
            w.push(s)?;
        }
        let meta = w.finish()?;
        segments.push(Arc::new(Segment::open(storage, meta)?));
        created = true;
        compact(
            storage,
            &mut m,
            &mut segments,
            &mut superseded,
            job.tier_base,
        )?;
    }

    // Emit the new URLs in the order of their first appearance.
    let mut positions: Vec<u32> = pairs.iter().map(|p| p.1).collect();
    drop(pairs);
    positions.sort_unstable();
    if !positions.is_empty() {
        created |= emit(storage, &mut m, &*job.wal, &wal_name, job.skip, &positions)?;
    }
    if created {
        storage
            .sync_dir()
            .map_err(|e| Error::io("fsync", "directory", e))?;
    }

    m.commit += 1;
    m.a_gen = job.next.0;
    m.a_skip = job.next.1;
    m.pushed += pushed;
    m.flushes += u64::from(pushed > 0);
    m.torn_records += job.torn.0;
    m.torn_bytes += job.torn.1;
    m.segments = segments.iter().map(|s| s.meta()).collect();
    m.commit_to(storage)?;

    // After the switch: what is superseded goes (a crash here leaves orphans that the next
    // open removes).
    if job.next.0 > job.gen {
        let _ = storage.remove(&wal_name);
    }
    for s in superseded {
        let _ = storage.remove(&crate::segment::file_name(s.id));
    }
    Ok(FlushDone {
        manifest: m,
        segments,
    })
}

/// Removes from `pairs` (sorted by signature) the signatures `seg` holds, reading only the
/// blocks some signature of `pairs` falls in.
fn filter_known(seg: &Segment, pairs: &mut Vec<(u64, u32)>) -> Result<()> {
    let mut block: Vec<u64> = Vec::new();
    let mut current: Option<usize> = None;
    let mut pos = 0usize;
    let mut keep = 0usize;
    for i in 0..pairs.len() {
        let sig = pairs[i].0;
        let known = match seg.block_for(sig) {
            None => false,
            Some(b) => {
                if current != Some(b) {
                    seg.read_block(b, &mut block)?;
                    current = Some(b);
                    pos = 0;
                }
                while pos < block.len() && block[pos] < sig {
                    pos += 1;
                }
                pos < block.len() && block[pos] == sig
            }
        };
        if !known {
            pairs[keep] = pairs[i];
            keep += 1;
        }
    }
    pairs.truncate(keep);
    Ok(())
}

/// The tier of a segment: `floor(log_FANOUT(sigs / base))`.
fn tier(sigs: u64, base: u64) -> u32 {
    let mut t = 0;
    let mut cap = base.max(1) * TIER_FANOUT as u64;
    while sigs >= cap {
        t += 1;
        cap = cap.saturating_mul(TIER_FANOUT as u64);
    }
    t
}

/// Size-tiered compaction: while some tier holds `TIER_FANOUT` segments, merge them.
fn compact(
    storage: &dyn Storage,
    m: &mut Manifest,
    segments: &mut Vec<Arc<Segment>>,
    superseded: &mut Vec<SegmentMeta>,
    base: u64,
) -> Result<()> {
    loop {
        let mut by_tier: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
        for (i, s) in segments.iter().enumerate() {
            by_tier
                .entry(tier(s.meta().sigs, base))
                .or_default()
                .push(i);
        }
        let Some((_, group)) = by_tier.into_iter().find(|(_, g)| g.len() >= TIER_FANOUT) else {
            return Ok(());
        };
        let inputs: Vec<Arc<Segment>> = group.iter().map(|&i| segments[i].clone()).collect();
        let id = m.next_id;
        m.next_id += 1;
        let mut w = SegmentWriter::create(storage, id)?;
        let mut iters: Vec<_> = inputs.iter().map(|s| s.iter().peekable()).collect();
        loop {
            let mut best: Option<(usize, u64)> = None;
            for (i, it) in iters.iter_mut().enumerate() {
                match it.peek() {
                    None => {}
                    Some(Err(_)) => {
                        return Err(it.next().expect("peeked").expect_err("peeked an error"))
                    }
                    Some(Ok(v)) if best.is_none_or(|(_, b)| *v < b) => best = Some((i, *v)),
                    Some(Ok(_)) => {}
                }
            }
            let Some((i, v)) = best else { break };
            iters[i].next();
            // Segments of Z are disjoint; skip a repeat rather than write it twice.
            for it in iters.iter_mut() {
                while let Some(Ok(x)) = it.peek() {
                    if *x == v {
                        it.next();
                    } else {
                        break;
                    }
                }
            }
            w.push(v)?;
        }
        let meta = w.finish()?;
        let merged = Arc::new(Segment::open(storage, meta)?);
        let mut next = Vec::with_capacity(segments.len() + 1 - group.len());
        for (i, s) in segments.iter().enumerate() {
            if group.contains(&i) {
                superseded.push(s.meta());
            } else {
                next.push(s.clone());
            }
        }
        // The merged segment takes the place of the oldest of its inputs.
        next.insert(group[0].min(next.len()), merged);
        *segments = next;
    }
}

/// Appends to F the records of `wal` at the sorted `positions` (relative to `skip`); returns
/// whether a new F segment was created.
fn emit(
    storage: &dyn Storage,
    m: &mut Manifest,
    wal: &dyn StorageFile,
    wal_name: &str,
    skip: u64,
    positions: &[u32],
) -> Result<bool> {
    let mut created = false;
    let (mut tail, mut tail_len) = (m.f_tail, m.f_tail_len);
    let file = if tail_len >= SEGMENT_TARGET {
        tail = m.next_id;
        m.next_id += 1;
        let name = frontier::file_name(tail);
        let f = storage
            .create(&name)
            .map_err(|e| Error::io("create", &name, e))?;
        f.write_all_at(&frontier::header(tail, m.f_count), 0)
            .map_err(|e| Error::io("write", &name, e))?;
        tail_len = frontier::HEADER_LEN;
        created = true;
        f
    } else {
        let name = frontier::file_name(tail);
        storage
            .open(&name)
            .map_err(|e| Error::io("open", &name, e))?
    };
    let name = frontier::file_name(tail);
    let mut out = LogWriter::new(file, name, tail_len, m.flushes as u32);
    let len = wal.len().map_err(|e| Error::io("stat", wal_name, e))?;
    let reader = LogReader::new(wal, len, u64::MAX);
    let mut offset = wal::HEADER_LEN;
    let mut record: u64 = 0;
    let mut next = positions.iter().map(|&p| skip + p as u64).peekable();
    while next.peek().is_some() {
        let frame = match reader.frame_at(offset) {
            Ok(f) => f,
            Err(FrameError::Io(e)) => return Err(Error::io("read", wal_name, e)),
            Err(FrameError::End) => {
                return Err(Error::corrupt(
                    wal_name,
                    offset,
                    crate::error::Corruption::Truncated {
                        needed: 1,
                        available: 0,
                    },
                ))
            }
            Err(FrameError::Invalid(what)) => return Err(Error::corrupt(wal_name, offset, what)),
        };
        offset += (crate::log::FRAME_HEADER + frame.payload.len()) as u64;
        let end = record + frame.count as u64;
        if next.peek().is_some_and(|&p| p < end) {
            for url in frame.records() {
                if next.peek() == Some(&record) {
                    out.append(url)?;
                    next.next();
                }
                record += 1;
            }
        }
        record = end;
    }
    out.sync()?;
    m.f_tail = tail;
    m.f_tail_len = out.end();
    m.f_count += positions.len() as u64;
    Ok(created)
}
