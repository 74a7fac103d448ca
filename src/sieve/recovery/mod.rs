//! Opening a sieve: creation, and recovery after a crash, in the steps of `docs/design.md`
//! ("Open and recovery"):
//!
//! 1. take the lock; read the manifest (none: [`create`] the sieve);
//! 2. read the cursor and check it against F's committed end;
//! 3. remove what the manifest does not reference: temp files, Z segments and R runs not
//!    listed, A generations before the first one a run or the replay needs, F segments past
//!    the tail or before the cursor;
//! 4. open Z's segments (header, footer and sparse index are checked) and the runs (header
//!    and length);
//! 5. cut F's tail segment back to its committed length;
//! 6. replay the live A generations in order through S ([`replay`]), spilling a run
//!    whenever S fills past its slots and at the end of each generation but the newest
//!    intact one not closed by an end frame, whose records (at most as many as S's slots)
//!    go back into S; a torn tail is dropped and counted; corruption of synced data is an
//!    error;
//! 7. continue the newest A generation (its pushes not flushed back in S), or create the
//!    next one.
//!
//! Every step is idempotent, so a crash during recovery is recovered by the next open.

mod create;
mod replay;

pub(crate) use create::{manifest_lost, no_manifest};

use std::sync::Arc;

use super::reaper::Reaper;
use super::{wal, Sieve};
use crate::buffer::recent::Recent;
use crate::error::{Corruption, Error, Result};
use crate::frontier::{self, Position};
use crate::manifest::Manifest;
use crate::names::{self, FileName};
use crate::options::Options;
use crate::run::Run;
use crate::segment::Segment;
use crate::storage::{Storage, StorageExt};

/// Opens or creates the sieve on `storage`.
pub(crate) fn open(storage: Arc<dyn Storage>, opts: Options) -> Result<Sieve> {
    let slots = opts.validate()?;
    let st = &*storage;
    // 1. (A directory of other files, with no sieve in it, is refused before the lock
    // file is made in it.)
    let gone = || Error::NotASieve {
        dir: st.describe(),
        reason: "no MANIFEST: no store is there (removed while this waited for it?)".into(),
    };
    if !st.list_files()?.iter().any(|n| n == crate::names::MANIFEST) {
        create::refuse_foreign(st)?;
        if opts.existing {
            return Err(gone());
        }
    }
    let lock = st.lock_exclusive()?;
    let m = match Manifest::load(st)? {
        Some(m) => m,
        None if opts.existing => return Err(gone()),
        None => create::create(st, &opts)?,
    };
    // 2.
    let cursor = Position::load(st)?;
    cursor.check_within(&m.frontier_end())?;
    // 3.
    let gens = remove_orphans(st, &m, &cursor)?;
    wal::check_clean_present(wal::A, m.a_gen, &gens, m.clean_a)?;
    // 4.
    let segments = m
        .segments
        .iter()
        .map(|meta| Segment::open(st, *meta).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    let runs = open_runs(st, &m)?;
    // 5.
    cut_frontier_tail(st, &m, &cursor)?;
    // 6.
    let state = replay::State { m, segments, runs };
    let replayed = replay::replay(&storage, state, &gens, slots)?;
    // 7.
    let (gen, wal, gen_skip, s) = match replayed.continued {
        Some(c) => {
            if replayed.state.m.clean_a.of(c.gen) != Some(c.end) {
                // A crash left it: its valid frames may sit unsynced in the system's cache,
                // and a frame of the next epoch must never reach the disk without them (a
                // power loss would then show synced-looking data after a hole).
                c.file.sync()?;
            }
            let w = wal::reuse(c.file, c.gen, c.end, c.records, c.last_epoch).assume_synced();
            (c.gen, w, c.skip, c.s)
        }
        None => {
            let m = &replayed.state.m;
            let gen = m.a_gen.max(gens.last().map_or(0, |g| g + 1));
            (gen, wal::create(st, gen, None)?, 0, Vec::new())
        }
    };
    let replay::State { m, segments, runs } = replayed.state;
    Ok(Sieve {
        slots,
        manifest: m,
        segments,
        runs,
        max_runs: crate::options::max_runs(opts.memory),
        gen,
        gen_skip,
        wal: wal::configure(wal, &opts),
        s,
        next_s: Vec::new(),
        recent: Recent::new(opts.recent_entries()),
        s_index: None,
        absorbed: 0,
        undecided: None,
        since_sync: 0,
        inflight: None,
        jobs_started: 0,
        jobs_applied: 0,
        spilled_beside_merge: Vec::new(),
        last_flush_end: None,
        last_merge: None,
        poisoned: false,
        cursor,
        reader: frontier::Reader::new(cursor),
        reaper: Arc::new(Reaper::new(storage.clone(), opts.background)),
        storage,
        opts,
        _lock: lock,
    })
}

/// Step 3: removes what the manifest does not reference. A generations from the first one a
/// run covers are kept: a merge reads the new URLs from them. Returns the live generations,
/// from `a_gen` on, which must follow each other.
fn remove_orphans(st: &dyn Storage, m: &Manifest, cursor: &Position) -> Result<Vec<u64>> {
    let first_kept = m.runs.first().map_or(m.a_gen, |r| r.gen.min(m.a_gen));
    let mut gens = Vec::new();
    for n in st.list_files()? {
        let orphan = match names::parse(&n) {
            Some(FileName::Temp) => true,
            Some(FileName::Z(id)) => !m.segments.iter().any(|s| s.id == id),
            Some(FileName::R(id)) => !m.runs.iter().any(|r| r.id == id),
            Some(FileName::A(g)) => {
                if g >= m.a_gen {
                    gens.push(g);
                }
                g < first_kept
            }
            Some(FileName::F(id)) => id > m.f_tail || id < cursor.segment,
            _ => false,
        };
        if orphan {
            st.remove_file(&n)?;
        }
    }
    gens.sort_unstable();
    for (i, &g) in gens.iter().enumerate() {
        let want = m.a_gen + i as u64;
        if g != want {
            return Err(Error::corrupt(&names::a(want), 0, Corruption::Missing));
        }
    }
    Ok(gens)
}

/// Step 4 for the runs: each one's header and length, and its A generation, which must
/// exist and not be after `a_gen`.
fn open_runs(st: &dyn Storage, m: &Manifest) -> Result<Vec<Arc<Run>>> {
    let mut runs = Vec::with_capacity(m.runs.len());
    for meta in &m.runs {
        if meta.gen > m.a_gen {
            return Err(Error::corrupt(
                names::MANIFEST,
                0,
                Corruption::OutOfRange {
                    field: "run's A generation",
                    found: meta.gen,
                    limit: m.a_gen + 1,
                },
            ));
        }
        st.open_file(&names::a(meta.gen))?;
        runs.push(Arc::new(Run::open(st, *meta)?));
    }
    Ok(runs)
}

/// Step 5: every F segment from the cursor's to the tail exists; the tail is cut to its
/// committed length.
fn cut_frontier_tail(st: &dyn Storage, m: &Manifest, cursor: &Position) -> Result<()> {
    let (tail, _) = frontier::open_segment(st, m.f_tail)?;
    let len = tail.len()?;
    if len < m.f_tail_len {
        return Err(tail.corrupt(
            len,
            Corruption::Truncated {
                needed: m.f_tail_len,
                available: len,
            },
        ));
    }
    if len > m.f_tail_len && !crate::planted::active(crate::planted::Bug::KeepFTail) {
        tail.set_len(m.f_tail_len)?;
        tail.sync()?;
    }
    if cursor.segment != m.f_tail {
        st.open_file(&names::f(cursor.segment))?;
    }
    Ok(())
}
