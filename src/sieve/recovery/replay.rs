//! Step 6 of opening: the live A generations replayed through S and spilled inline as runs,
//! under the torn-tail rule (`docs/design.md`, "Push, sync, and the torn-tail rule").

use std::sync::Arc;

use crate::buffer::Slot;
use crate::error::{Corruption, Error, Result};
use crate::manifest::Manifest;
use crate::names;
use crate::run::Run;
use crate::segment::Segment;
use crate::sieve::flush::{self, Batch, FlushJob, Torn};
use crate::sieve::gate::Gate;
use crate::sieve::reaper::Reaper;
use crate::sieve::wal::{self, Replay};
use crate::sieve::Signer;
use crate::storage::{File, Storage, StorageExt};

/// The committed state recovery advances: the manifest, Z's segments, the runs.
pub(super) struct State {
    pub m: Manifest,
    pub segments: Vec<Arc<Segment>>,
    pub runs: Vec<Arc<Run>>,
}

/// The newest generation, intact and not closed by an end frame, with at most as many
/// records to flush as S holds: continued as it is, its records to flush back in S.
pub(super) struct Continued {
    pub gen: u64,
    pub file: File,
    /// The end of its valid frames.
    pub end: u64,
    /// The epoch of its last frame (-1: none).
    pub last_epoch: i64,
    /// Its records.
    pub records: u64,
    /// Its records flushed already (before S's first one).
    pub skip: u64,
    /// S: the slots of its records from `skip` on.
    pub s: Vec<Slot>,
}

/// What the replay left.
pub(super) struct Replayed {
    pub state: State,
    pub continued: Option<Continued>,
}

/// Replays generations `gens` (the live ones, in order) with buffers of `slots` slots.
pub(super) fn replay(
    storage: &Arc<dyn Storage>,
    mut state: State,
    gens: &[u64],
    slots: usize,
) -> Result<Replayed> {
    let st = &**storage;
    let last_gen = gens.last().copied();
    let (mut torn, mut torn_seen, mut dropped_after_torn) = (Torn::default(), false, false);
    let mut continued = None;
    for &g in gens {
        let last = Some(g) == last_gen;
        if torn_seen {
            // A torn generation ends the push stream: later generations may only hold
            // unsynced records, which are dropped too (never a hole). Even an empty one (a
            // crash while its header was written) must go, with a commit past it: a later
            // generation after it would make it look damaged.
            let dropped = unsynced_after_torn(st, g, last)?;
            torn.records += dropped.records;
            torn.bytes += dropped.bytes;
            dropped_after_torn = true;
            continue;
        }
        let skip = if g == state.m.a_gen {
            state.m.a_skip
        } else {
            0
        };
        let sig = Signer::of(&state.m);
        let (r, mut full, mut rest) = read_generation(st, g, last, skip, sig, slots)?;
        r.check_clean(g, state.m.clean_a)?;
        if full.len() == 1 && rest.sigs.is_empty() {
            // Exactly one S of records: as the process left it, S full and not frozen yet
            // (the next push freezes it), not a chunk the budget shrank under.
            rest = full.pop().expect("one chunk");
        }
        if last && !r.torn && !r.ended && full.is_empty() {
            // An open after a clean close writes nothing: the pushes not flushed go back
            // to S, as they were before the close.
            continued = Some(Continued {
                gen: g,
                end: r.valid_end,
                last_epoch: r.last_epoch,
                records: r.records,
                skip: rest.start,
                s: rest.sigs,
                file: r.file,
            });
            continue;
        }
        // Chunks that filled S (only when the budget shrank since they were written).
        for chunk in full {
            let next = wal::Start {
                gen: g,
                skip: chunk.start + chunk.sigs.len() as u64,
            };
            state = spill(
                storage,
                state,
                chunk.into_batch(g, &r.file, next),
                Torn::default(),
            )?;
        }
        if r.ends_the_stream(last) {
            torn_seen = true;
            torn.records += r.torn_records;
            torn.bytes += r.torn_bytes;
            wal::mark_torn_tail(g, &r)?;
        }
        state = spill(
            storage,
            state,
            rest.into_batch(
                g,
                &r.file,
                wal::Start {
                    gen: g + 1,
                    skip: 0,
                },
            ),
            torn,
        )?;
        torn = Torn::default();
    }
    if torn != Torn::default() || dropped_after_torn {
        commit_past(st, &mut state.m, torn, gens)?;
    }
    Ok(Replayed { state, continued })
}

/// Consecutive records of a generation from `start`, as slots of S.
struct Chunk {
    start: u64,
    sigs: Vec<Slot>,
}

impl Chunk {
    fn into_batch(self, gen: u64, file: &File, next: wal::Start) -> Batch {
        Batch {
            gen,
            wal: file.clone(),
            skip: self.start,
            sigs: self.sigs,
            absorbed: 0,
            next,
        }
    }
}

/// Reads generation `g` from record `skip` into buffers of `slots` slots: the full ones and
/// the last one.
fn read_generation(
    st: &dyn Storage,
    g: u64,
    last: bool,
    skip: u64,
    sig: Signer,
    slots: usize,
) -> Result<(Replay, Vec<Chunk>, Chunk)> {
    let mut full = Vec::new();
    let mut rest = Chunk {
        start: skip,
        sigs: Vec::new(),
    };
    let r = wal::replay(st, g, last, |i, url| {
        if i < skip {
            return Ok(());
        }
        let idx = rest.sigs.len() as u32;
        let sig = sig
            .sign(url)
            .map_err(|what| Error::corrupt(&names::a(g), 0, what))?;
        crate::buffer::push_slot(&mut rest.sigs, Slot { sig, idx }, slots);
        if rest.sigs.len() >= slots {
            let next = Chunk {
                start: i + 1,
                sigs: Vec::new(),
            };
            full.push(std::mem::replace(&mut rest, next));
        }
        Ok(())
    })?;
    Ok((r, full, rest))
}

/// What a generation after a torn one holds, dropped: it may hold no synced record.
fn unsynced_after_torn(st: &dyn Storage, g: u64, last: bool) -> Result<Torn> {
    let r = wal::replay(st, g, last, |_, _| Ok(()))?;
    if r.last_epoch >= 1 || r.later_epoch.is_some_and(|e| e >= 1) {
        return Err(Error::corrupt(
            &names::a(g - 1),
            0,
            Corruption::Invalid {
                field: "generation torn, then a later one",
                expected: "no synced record after a torn generation",
                found: g,
            },
        ));
    }
    Ok(Torn {
        records: r.records + r.torn_records,
        bytes: r.file.len().unwrap_or(0).saturating_sub(wal::HEADER_LEN),
    })
}

/// Commits the torn records and bytes counted and A's position past every replayed
/// generation, then removes the generations no run needs.
fn commit_past(st: &dyn Storage, m: &mut Manifest, torn: Torn, gens: &[u64]) -> Result<()> {
    m.commit += 1;
    m.torn_records += torn.records;
    m.torn_bytes += torn.bytes;
    if let Some(g) = gens.last() {
        m.a_gen = g + 1;
        m.a_skip = 0;
    }
    m.commit_to(st)?;
    for &g in gens {
        if !m.runs.iter().any(|r| r.gen == g) {
            let _ = st.remove_file(&names::a(g));
        }
    }
    Ok(())
}

/// Spills a replayed batch inline as a run (an empty batch still commits the new A
/// position). A merge is left to the next flush, so that opening never reads all of Z.
fn spill(storage: &Arc<dyn Storage>, state: State, mut batch: Batch, torn: Torn) -> Result<State> {
    // Nothing else runs yet: the sort may take both cores (the flush then finds it sorted).
    crate::buffer::sort::sort_by_sig_on_two_threads(&mut batch.sigs);
    let job = FlushJob {
        storage: storage.clone(),
        manifest: state.m,
        segments: state.segments,
        runs: state.runs,
        batch,
        merge: false,
        torn,
        gate: Arc::new(Gate::default()),
        // Inline: recovery waits for its spills, which remove nothing.
        reaper: Arc::new(Reaper::new(storage.clone(), false)),
        // A spill: no merge.
        positions_in_memory: crate::merge::REGIONS_IN_MEMORY,
    };
    let done = flush::run(job)?;
    Ok(State {
        m: done.manifest,
        segments: done.segments,
        runs: done.runs,
    })
}
