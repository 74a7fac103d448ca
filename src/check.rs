//! Verification of a sieve directory without changing it: every checksum of every file the
//! manifest references, the order of every Z segment, the counts, and the cursor's bounds.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Corruption, Error, Result};
use crate::frames::{FrameError, FrameReader};
use crate::frontier::{self, Position};
use crate::manifest::{CleanEnd, Manifest};
use crate::names;
use crate::run::Run;
use crate::segment::Segment;
use crate::sieve::{wal, Signer};
use crate::storage::{DirStorage, Storage, StorageExt};

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Files read.
    pub files: u64,
    /// Signatures in Z (all blocks decoded).
    pub signatures: u64,
    /// URLs in the frontier after the cursor (all frames verified).
    pub pending: u64,
    /// Records in the live A generations not covered by runs.
    pub buffered: u64,
    /// Records covered by runs waiting for a merge (all pairs decoded, their A generations
    /// read).
    pub unmerged: u64,
    /// A generations ending in a torn tail: `(file, bytes)`. After a crash this is expected
    /// (the pushes were not acknowledged); the next open drops and counts them. Damage inside
    /// the last group commit looks the same and is reported here too.
    pub torn_tails: Vec<(String, u64)>,
    /// Those of [`CheckReport::torn_tails`] that begin exactly where the last clean close
    /// left their generation: every push acknowledged is before them, and they are either a
    /// write a later session began and never acknowledged, or damage to bytes that hold no
    /// push (the mark a close leaves after its seal).
    pub torn_after_clean_end: Vec<String>,
    /// Damage found; empty when the sieve is sound.
    pub damage: Vec<Error>,
}

impl CheckReport {
    /// Whether no damage was found.
    pub fn is_sound(&self) -> bool {
        self.damage.is_empty()
    }
}

/// Whether `dir` holds a store's files without its manifest: the manifest was lost (its
/// removal, or damage of the directory), and the store is damaged rather than absent. The
/// files an interrupted creation leaves, before its manifest was ever written, do not count.
pub fn manifest_lost(dir: impl AsRef<Path>) -> bool {
    let names = std::fs::read_dir(dir.as_ref())
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    crate::sieve::manifest_lost(names)
}

/// Verifies the sieve in `dir`. Takes the lock (fails with [`Error::Locked`] while another
/// process uses the directory) and writes nothing.
pub fn check(dir: impl AsRef<Path>) -> Result<CheckReport> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(Error::NotASieve {
            dir: dir.display().to_string(),
            reason: "no such directory".into(),
        });
    }
    check_storage(Arc::new(DirStorage::open_store_read_only(dir)?))
}

/// Verifies the sieve on any storage; see [`check`].
pub fn check_storage(storage: Arc<dyn Storage>) -> Result<CheckReport> {
    let st = &*storage;
    let _lock = st.lock_exclusive()?;
    let mut r = CheckReport::default();
    let m = match Manifest::load(st) {
        Ok(Some(m)) => m,
        Ok(None) if crate::sieve::manifest_lost(st.list_files()?) => {
            return Err(Error::corrupt(
                crate::names::MANIFEST,
                0,
                crate::error::Corruption::Missing,
            ))
        }
        Ok(None) => {
            return Err(Error::NotASieve {
                dir: st.describe(),
                reason: "no MANIFEST: not a crivello sieve".into(),
            })
        }
        Err(e) => {
            r.damage.push(e);
            return Ok(r);
        }
    };
    r.files += 1;
    let cursor = match Position::load(st) {
        Ok(c) => Some(c),
        Err(e) => {
            r.damage.push(e);
            None
        }
    };
    r.files += 1;
    for meta in &m.segments {
        r.files += 1;
        match Segment::open(st, *meta).and_then(|seg| check_segment(&seg)) {
            Ok(n) => r.signatures += n,
            Err(e) => r.damage.push(e),
        }
    }
    let gens = live_generations(st, &m, &mut r)?;
    if let Err(e) = wal::check_clean_present(wal::A, m.a_gen, &gens, m.clean_a) {
        r.damage.push(e);
    }
    let last = gens.last().copied();
    check_runs(st, &m, last, &mut r);
    if m.mode == crate::Mode::Frontier {
        check_queues(st, m.clean_j, &mut r)?;
    }
    if let Some(c) = cursor {
        check_frontier(st, &m, &c, &mut r);
    }
    for g in gens {
        r.files += 1;
        let skip = if g == m.a_gen { m.a_skip } else { 0 };
        let mut n = 0u64;
        let counted = wal::replay(st, g, Some(g) == last, |i, _| {
            n += u64::from(i >= skip);
            Ok(())
        });
        match counted.and_then(|rep| rep.check_clean(g, m.clean_a).map(|()| rep)) {
            Ok(rep) => {
                r.buffered += n;
                if rep.ends_the_stream(Some(g) == last) {
                    r.torn_tails.push((names::a(g), rep.torn_bytes));
                    if rep.torn && m.clean_a.of(g) == Some(rep.valid_end) {
                        r.torn_after_clean_end.push(names::a(g));
                    }
                }
            }
            Err(e) => r.damage.push(e),
        }
    }
    if m.mode == crate::Mode::Frontier && r.is_sound() {
        replay_frontier(&storage, &mut r)?;
    }
    Ok(r)
}

/// Opens the frontier on a copy-on-write view of the directory (nothing is written): the
/// journal is replayed over the checkpoint and the Q runs as an open would, so that `check`
/// finds every inconsistency an open would (a lease of a record its queue does not hold
/// next, the end of a lease never made, ...), beyond the checksums and formats.
fn replay_frontier(storage: &Arc<dyn Storage>, r: &mut CheckReport) -> Result<()> {
    let view = Arc::new(crate::storage::overlay::Overlay::new(storage.clone()));
    let opts = crate::Options::new()
        .memory(1 << 20)
        .background_flush(false);
    match crate::Frontier::open_with(view, opts, Arc::new(crate::queues::SystemClock)) {
        Ok(f) => match f.verify_seqs() {
            Ok(()) => drop(f),
            Err(e) if e.is_corruption() => r.damage.push(e),
            Err(e) => return Err(e),
        },
        Err(e) if e.is_corruption() => r.damage.push(e),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// A frontier's files: every entry of the journal J, and every record of the Q runs it names.
fn check_queues(st: &dyn Storage, clean: CleanEnd, r: &mut CheckReport) -> Result<()> {
    use crate::queues::journal::Entry;
    let mut gens: Vec<u64> = st
        .list_files()?
        .iter()
        .filter_map(|n| match names::parse(n) {
            Some(names::FileName::J(g)) => Some(g),
            _ => None,
        })
        .collect();
    gens.sort_unstable();
    let mut runs: Vec<u64> = Vec::new();
    let mut first = 0;
    // The checkpoint, if any: the runs then, and the first generation after it.
    if let Some(f) = st.open_if_exists(names::CHECKPOINT)? {
        r.files += 1;
        match f
            .read_all()
            .and_then(|b| crate::queues::core::checkpoint_runs(&b))
        {
            Ok((from, listed)) => {
                gens.retain(|&g| g >= from);
                runs = listed;
                first = from;
            }
            Err(e) => r.damage.push(e),
        }
    }
    if let Err(e) = wal::check_clean_present(crate::queues::core::J, first, &gens, clean) {
        r.damage.push(e);
    }
    let last = gens.last().copied();
    for g in gens {
        r.files += 1;
        let mut bad = None;
        let replayed = wal::replay_of(
            crate::queues::core::J,
            st,
            g,
            Some(g) == last,
            |_, at, e| {
                match Entry::decode(e) {
                    Ok(Entry::Moved { run: Some(id), .. })
                    | Ok(Entry::Imported { run: Some(id), .. })
                    | Ok(Entry::Archived { run: id }) => runs.push(id),
                    Ok(Entry::Compacted { removed, added, .. }) => {
                        runs.retain(|id| !removed.contains(id));
                        runs.extend(added);
                    }
                    Ok(_) => {}
                    Err(what) if bad.is_none() => bad = Some((at, what)),
                    Err(_) => {}
                }
                Ok(())
            },
        );
        match replayed.and_then(|rep| rep.check_clean(g, clean).map(|()| rep)) {
            Ok(rep) => {
                if rep.ends_the_stream(Some(g) == last) {
                    r.torn_tails.push((names::j(g), rep.torn_bytes));
                    if rep.torn && clean.of(g) == Some(rep.valid_end) {
                        r.torn_after_clean_end.push(names::j(g));
                    }
                }
            }
            Err(e) => r.damage.push(e),
        }
        if let Some((at, what)) = bad {
            r.damage.push(Error::corrupt(&names::j(g), at, what));
        }
    }
    for id in runs {
        r.files += 1;
        if let Err(e) = check_run_file(st, id) {
            r.damage.push(e);
        }
    }
    Ok(())
}

/// Reads every frame of every group of Q run `id`, and checks that the groups hold every
/// record of its frames once, each its queue's.
pub(crate) fn check_run_file(st: &dyn Storage, id: u64) -> Result<()> {
    use crate::queues::qrun;
    let run = qrun::Run::open(st, id)?;
    let mut cache = None;
    let mut coverage = qrun::Coverage::new();
    for g in run.groups() {
        let g = g?;
        coverage.walk(&run, &g, &mut cache, |_, rec, offset| {
            qrun::check_record(run.file(), offset, rec, g.queue, g.crawl).map(drop)
        })?;
    }
    coverage.finish(&run)
}

/// Decodes every block of a segment and checks the order of its signatures; returns how
/// many it holds.
fn check_segment(seg: &Segment) -> Result<u64> {
    let mut prev: Option<u64> = None;
    let mut n = 0;
    for (i, sig) in seg.iter().enumerate() {
        let s = sig?;
        if let Some(p) = prev.filter(|&p| p >= s) {
            return Err(Error::corrupt(
                seg.name(),
                seg.index()[i / crate::segment::BLOCK_SIGS].offset,
                Corruption::OutOfOrder {
                    previous: p,
                    got: s,
                },
            ));
        }
        prev = Some(s);
        n += 1;
    }
    Ok(n)
}

/// The A generations from A's position on: they must be consecutive from `a_gen`, as
/// recovery requires.
fn live_generations(st: &dyn Storage, m: &Manifest, r: &mut CheckReport) -> Result<Vec<u64>> {
    let mut gens: Vec<u64> = st
        .list_files()?
        .iter()
        .filter_map(|n| names::parse_a(n))
        .filter(|&g| g >= m.a_gen)
        .collect();
    gens.sort_unstable();
    if let Some(i) = (0..gens.len()).find(|&i| gens[i] != m.a_gen + i as u64) {
        r.damage.push(Error::corrupt(
            &names::a(m.a_gen + i as u64),
            0,
            Corruption::Missing,
        ));
    }
    Ok(gens)
}

/// The runs, each against the A records it covers: those were synced before the run was
/// committed, so any damage in them is corruption, and the run must be exactly their
/// distinct signatures with the index of each one's first occurrence. `last` is the newest
/// A generation.
fn check_runs(st: &dyn Storage, m: &Manifest, last: Option<u64>, r: &mut CheckReport) {
    for meta in &m.runs {
        r.files += 1;
        r.unmerged += meta.records;
        if meta.gen > m.a_gen {
            r.damage.push(Error::corrupt(
                names::MANIFEST,
                0,
                Corruption::OutOfRange {
                    field: "run's A generation",
                    found: meta.gen,
                    limit: m.a_gen + 1,
                },
            ));
            continue;
        }
        let checked =
            Run::open(st, *meta).and_then(|run| check_run(st, m, &run, Some(meta.gen) == last));
        if let Err(e) = checked {
            r.damage.push(e);
        }
    }
}

/// Checks `run` against the records of its A generation that it covers.
fn check_run(st: &dyn Storage, m: &Manifest, run: &Run, newest: bool) -> Result<()> {
    let meta = run.meta();
    let a_name = names::a(meta.gen);
    let end = meta.skip + meta.records;
    let mut expected: Vec<(u64, u32)> = Vec::new();
    let signer = Signer::of(m);
    let rep = wal::replay(st, meta.gen, newest, |i, record| {
        if (meta.skip..end).contains(&i) {
            let sig = signer
                .sign(record)
                .map_err(|what| Error::corrupt(&a_name, 0, what))?;
            expected.push((sig, (i - meta.skip) as u32));
        }
        Ok(())
    })?;
    if rep.records < end {
        return Err(Error::corrupt(
            &a_name,
            rep.valid_end,
            Corruption::Mismatch {
                field: "records of the generation (at least as many as its run covers)",
                expected: end,
                found: rep.records,
            },
        ));
    }
    if rep.torn && meta.gen < m.a_gen {
        // Older than the generation pushes go on in: its end frame was written before a
        // later generation's first sync, so a torn end is damage.
        return Err(Error::corrupt(
            &a_name,
            rep.valid_end,
            Corruption::Invalid {
                field: "records of the generation, not closed by its end frame",
                expected: "an end frame after them, as a later generation follows",
                found: rep.records,
            },
        ));
    }
    // The first occurrence of each signature: sorted by (signature, index), keep the first.
    expected.sort_unstable();
    expected.dedup_by_key(|p| p.0);
    let mut want = expected.into_iter();
    for (k, got) in run.iter().enumerate() {
        let got = got?;
        if want.next() != Some(got) {
            return Err(Error::corrupt(
                run.name(),
                crate::run::HEADER_LEN
                    + (k / crate::run::RUN_BLOCK) as u64 * crate::run::FULL_BLOCK,
                Corruption::Invalid {
                    field: "run pair number",
                    expected: "the pair its A records give",
                    found: k as u64,
                },
            ));
        }
    }
    if want.next().is_some() {
        return Err(Error::corrupt(
            run.name(),
            0,
            Corruption::Invalid {
                field: "run pairs",
                expected: "one pair per distinct signature of the records it covers",
                found: meta.pairs,
            },
        ));
    }
    Ok(())
}

fn check_frontier(st: &dyn Storage, m: &Manifest, c: &Position, r: &mut CheckReport) {
    if let Err(e) = c.check_within(&m.frontier_end()) {
        r.damage.push(e);
        return;
    }
    let Ok(all) = frontier::segments(st) else {
        return;
    };
    let ids: Vec<u64> = all
        .into_iter()
        .filter(|&id| id >= c.segment && id <= m.f_tail)
        .collect();
    if ids.first() != Some(&c.segment) || ids.last() != Some(&m.f_tail) {
        r.damage
            .push(Error::corrupt(&names::f(c.segment), 0, Corruption::Missing));
        return;
    }
    let mut count: Option<u64> = None;
    // The cursor must name a record of F: a frame at its offset with more than `skip`
    // records (or the end of its segment with `skip` 0), and `consumed` records before it.
    let mut cursor_found = false;
    for id in ids {
        r.files += 1;
        match check_f_segment(st, m, c, id, &mut count) {
            Ok(found) => cursor_found |= found,
            Err(e) => {
                r.damage.push(e);
                return;
            }
        }
    }
    if !cursor_found {
        r.damage.push(Error::corrupt(
            names::CURSOR,
            0,
            Corruption::Invalid {
                field: "cursor's consumed count",
                expected: "the number of a record of the frontier at the cursor's position",
                found: c.consumed,
            },
        ));
    }
    let total = count.unwrap_or(0);
    if total != m.f_count {
        r.damage.push(Error::corrupt(
            names::MANIFEST,
            0,
            Corruption::Mismatch {
                field: "URLs in the frontier",
                expected: total,
                found: m.f_count,
            },
        ));
    }
    r.pending = m.f_count.saturating_sub(c.consumed);
}

/// Checks every frame of F segment `id` up to its committed end; `count` is the number of
/// URLs before it (set by the first segment's header), advanced past it. Returns whether the
/// cursor `c` names a record of this segment.
fn check_f_segment(
    st: &dyn Storage,
    m: &Manifest,
    c: &Position,
    id: u64,
    count: &mut Option<u64>,
) -> Result<bool> {
    let (f, first) = frontier::open_segment(st, id)?;
    let len = f.len()?;
    let limit = if id == m.f_tail { m.f_tail_len } else { len };
    if len < limit {
        return Err(f.corrupt(
            len,
            Corruption::Truncated {
                needed: limit,
                available: len,
            },
        ));
    }
    let mut n = *count.get_or_insert(first);
    if first != n {
        return Err(f.corrupt(
            16,
            Corruption::Mismatch {
                field: "URLs before the segment",
                expected: n,
                found: first,
            },
        ));
    }
    let reader = FrameReader::new(&f, limit, u64::MAX, id);
    let mut off = frontier::HEADER_LEN;
    let mut cursor_found = false;
    loop {
        let at_cursor = id == c.segment && off == c.offset;
        if at_cursor {
            cursor_found = n + u64::from(c.skip) == c.consumed;
        }
        match reader.frame_at(off) {
            Ok(fr) => {
                if at_cursor && c.skip >= fr.count {
                    cursor_found = false;
                }
                n += u64::from(fr.count);
                off += fr.size();
            }
            Err(FrameError::End) if off < limit => {
                // A valid frame of another segment inside this one.
                return Err(f.corrupt(
                    off,
                    Corruption::Invalid {
                        field: "frame tag",
                        expected: "the segment's id",
                        found: id,
                    },
                ));
            }
            Err(FrameError::End) => {
                if at_cursor && c.skip != 0 {
                    cursor_found = false;
                }
                break;
            }
            Err(FrameError::Io(e)) => return Err(e),
            Err(FrameError::Invalid(what)) => return Err(f.corrupt(off, what)),
        }
    }
    *count = Some(n);
    Ok(cursor_found)
}
