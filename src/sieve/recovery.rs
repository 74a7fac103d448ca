//! Opening a sieve: creation, and recovery after a crash.
//!
//! 1. take the lock; read the manifest (none: create the sieve);
//! 2. read the cursor and check it against F's committed end;
//! 3. remove what the manifest does not reference: temp files, Z segments and R runs not
//!    listed, A generations before the first one a run or the replay needs, F segments past
//!    the tail or before the cursor;
//! 4. open Z's segments (header, footer and sparse index are checked) and the runs (header
//!    and length);
//! 5. cut F's tail segment back to its committed length;
//! 6. replay the live A generations in order through S, spilling a run inline whenever S
//!    fills and at the end of each generation; a torn tail is dropped and counted;
//!    corruption of synced data is an error;
//! 7. create the next A generation.
//!
//! Every step is idempotent, so a crash during recovery is recovered by the next open.

use std::sync::Arc;

use crate::error::{Corruption, Error, Result};
use crate::frontier::{self, Position};
use crate::manifest::{self, Manifest};
use crate::options::Options;
use crate::run::{self, Run, Slot};
use crate::segment::Segment;
use crate::storage::{durable, Storage};

use super::flush::{self, Batch, FlushJob, Gate};
use super::reaper::Reaper;
use super::{wal, Sieve};

/// Parses an F segment name.
pub fn parse_f_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("f-")?.strip_suffix(".log")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

fn parse_z_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("z-")?.strip_suffix(".seg")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// Whether a file name is one crivello creates.
pub fn is_ours(name: &str) -> bool {
    name == crate::storage::LOCK_FILE
        || name == manifest::FILE
        || name == frontier::CURSOR_FILE
        || name.ends_with(".tmp")
        || wal::parse_name(name).is_some()
        || parse_f_name(name).is_some()
        || parse_z_name(name).is_some()
        || run::parse_name(name).is_some()
}

pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

fn list(storage: &dyn Storage) -> Result<Vec<String>> {
    storage
        .list()
        .map_err(|e| Error::io("list", &storage.describe(), e))
}

/// Creates a new sieve: F's first segment and the cursor, then the manifest (the commit).
fn create(storage: &dyn Storage, opts: &Options) -> Result<Manifest> {
    let names = list(storage)?;
    for n in &names {
        if !is_ours(n) {
            return Err(Error::NotASieve {
                dir: storage.describe(),
                reason: format!("the directory holds {n:?}, which is not a crivello file; use an empty or new directory"),
            });
        }
        let interrupted_creation =
            n.ends_with(".tmp") || n == frontier::CURSOR_FILE || parse_f_name(n) == Some(0);
        if n != crate::storage::LOCK_FILE && !interrupted_creation {
            return Err(Error::corrupt(manifest::FILE, 0, Corruption::Missing));
        }
    }
    let f0 = frontier::file_name(0);
    durable::create_synced(storage, &f0, &frontier::header(0, 0))
        .map_err(|e| Error::io("create", &f0, e))?;
    Position {
        segment: 0,
        offset: frontier::HEADER_LEN,
        skip: 0,
        consumed: 0,
    }
    .commit_to(storage)?;
    let m = Manifest {
        seed: opts.seed.unwrap_or_else(random_seed),
        commit: 0,
        next_id: 1,
        a_gen: 0,
        a_skip: 0,
        f_tail: 0,
        f_tail_len: frontier::HEADER_LEN,
        f_count: 0,
        pushed: 0,
        flushes: 0,
        torn_records: 0,
        torn_bytes: 0,
        merges: 0,
        segments: Vec::new(),
        runs: Vec::new(),
    };
    m.commit_to(storage)?;
    Ok(m)
}

/// Opens or creates the sieve on `storage`.
pub fn open(storage: Arc<dyn Storage>, opts: Options) -> Result<Sieve> {
    let slots = opts.validate()?;
    let lock = storage.lock().map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            Error::Locked {
                dir: storage.describe(),
            }
        } else {
            Error::io("lock", &storage.describe(), e)
        }
    })?;
    let st = &*storage;
    let mut m = match Manifest::load(st)? {
        Some(m) => m,
        None => create(st, &opts)?,
    };

    // The consumer's cursor never passes F's committed end.
    let cursor = Position::load(st)?;
    let cursor_bad = cursor.consumed > m.f_count
        || cursor.segment > m.f_tail
        || (cursor.segment == m.f_tail && cursor.offset > m.f_tail_len)
        || cursor.offset < frontier::HEADER_LEN;
    if cursor_bad {
        return Err(Error::corrupt(
            frontier::CURSOR_FILE,
            0,
            Corruption::Field {
                field: "cursor past the frontier's committed end",
                found: cursor.consumed,
            },
        ));
    }

    // Remove what the manifest does not reference. A generations from the first one a run
    // covers are kept: a merge reads the new URLs from them.
    let first_kept = m.runs.first().map_or(m.a_gen, |r| r.gen.min(m.a_gen));
    let mut gens = Vec::new();
    for n in list(st)? {
        let orphan = if n.ends_with(".tmp") {
            true
        } else if let Some(id) = parse_z_name(&n) {
            !m.segments.iter().any(|s| s.id == id)
        } else if let Some(id) = run::parse_name(&n) {
            !m.runs.iter().any(|r| r.id == id)
        } else if let Some(g) = wal::parse_name(&n) {
            if g >= m.a_gen {
                gens.push(g);
            }
            g < first_kept
        } else if let Some(id) = parse_f_name(&n) {
            id > m.f_tail || id < cursor.segment
        } else {
            false
        };
        if orphan {
            st.remove(&n).map_err(|e| Error::io("remove", &n, e))?;
        }
    }
    gens.sort_unstable();
    for (i, &g) in gens.iter().enumerate() {
        if g != m.a_gen + i as u64 {
            return Err(Error::corrupt(
                &wal::file_name(m.a_gen + i as u64),
                0,
                Corruption::Missing,
            ));
        }
    }

    let mut segments = Vec::with_capacity(m.segments.len());
    for meta in &m.segments {
        segments.push(Arc::new(Segment::open(st, *meta)?));
    }
    let mut runs = Vec::with_capacity(m.runs.len());
    for meta in &m.runs {
        if meta.gen > m.a_gen {
            return Err(Error::corrupt(
                manifest::FILE,
                0,
                Corruption::Field {
                    field: "run generation after A's position",
                    found: meta.gen,
                },
            ));
        }
        let name = wal::file_name(meta.gen);
        if st.open(&name).is_err() {
            return Err(Error::corrupt(&name, 0, Corruption::Missing));
        }
        runs.push(Arc::new(Run::open(st, *meta)?));
    }

    // F: every segment from the cursor's to the tail exists; the tail is cut to its
    // committed length.
    let tail_name = frontier::file_name(m.f_tail);
    let tail = st.open(&tail_name).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::corrupt(&tail_name, 0, Corruption::Missing),
        _ => Error::io("open", &tail_name, e),
    })?;
    let len = tail.len().map_err(|e| Error::io("stat", &tail_name, e))?;
    if len < m.f_tail_len {
        return Err(Error::corrupt(
            &tail_name,
            len,
            Corruption::Truncated {
                needed: m.f_tail_len,
                available: len,
            },
        ));
    }
    let mut h = vec![0u8; frontier::HEADER_LEN as usize];
    tail.read_exact_at(&mut h, 0)
        .map_err(|e| Error::io("read", &tail_name, e))?;
    frontier::check_header(&h, &tail_name, m.f_tail)?;
    if len > m.f_tail_len && !crate::planted::active(crate::planted::Bug::KeepFTail) {
        tail.set_len(m.f_tail_len)
            .map_err(|e| Error::io("truncate", &tail_name, e))?;
        tail.sync().map_err(|e| Error::io("fsync", &tail_name, e))?;
    }
    if cursor.segment != m.f_tail {
        let name = frontier::file_name(cursor.segment);
        if st.open(&name).is_err() {
            return Err(Error::corrupt(&name, 0, Corruption::Missing));
        }
    }

    // Replay A.
    let storage_arc = storage.clone();
    let mut s: Vec<Slot> = Vec::new();
    let mut torn_seen = false;
    let mut torn = (0u64, 0u64);
    let mut dropped_after_torn = false;
    let last_gen = gens.last().copied();
    let mut reuse = None;
    for &g in &gens {
        let skip = if g == m.a_gen { m.a_skip } else { 0 };
        let mut start = skip;
        if torn_seen {
            // A torn generation ends the push stream: later generations may only hold
            // unsynced records, which are dropped too (never a hole).
            let r = wal::replay(st, g, Some(g) == last_gen, |_, _| Ok(()))?;
            if r.last_epoch >= 1 || r.later_epoch.is_some_and(|e| e >= 1) {
                return Err(Error::corrupt(
                    &wal::file_name(g - 1),
                    0,
                    Corruption::Field {
                        field: "torn generation followed by synced records",
                        found: g,
                    },
                ));
            }
            torn.0 += r.records + r.torn_records;
            torn.1 += r.file.len().unwrap_or(0).saturating_sub(wal::HEADER_LEN);
            // Even an empty one (a crash while its header was written) must go, with a
            // commit past it: a later generation after it would make it look damaged.
            dropped_after_torn = true;
            continue;
        }
        let seed = m.seed;
        let mut pending: Vec<(u64, Vec<Slot>)> = Vec::new();
        let r = wal::replay(st, g, Some(g) == last_gen, |i, url| {
            if i < skip {
                return Ok(());
            }
            let idx = s.len() as u32;
            let sig = super::signature(url, seed);
            crate::run::push_slot(&mut s, Slot { sig, idx }, slots);
            if s.len() >= slots {
                pending.push((start, std::mem::take(&mut s)));
                start = i + 1;
            }
            Ok(())
        })?;
        // The newest generation, intact and with nothing to flush, is simply continued: an
        // open after a clean close commits nothing.
        if Some(g) == last_gen && !r.torn && !r.ended && pending.is_empty() && s.is_empty() {
            reuse = Some((r.file.clone(), g, r.valid_end, r.last_epoch, r.records));
            continue;
        }
        // Chunks that filled S (only when the budget shrank since they were written).
        for (chunk_start, sigs) in pending {
            let end = chunk_start + sigs.len() as u64;
            (m, segments, runs) = recovery_spill(
                &storage_arc,
                (m, segments, runs),
                g,
                &r.file,
                chunk_start,
                sigs,
                (g, end),
                (0, 0),
            )?;
        }
        if r.ends_the_stream(Some(g) == last_gen) {
            torn_seen = true;
            torn.0 += r.torn_records;
            torn.1 += r.torn_bytes;
            wal::mark_torn_tail(g, &r)?;
        }
        let sigs = std::mem::take(&mut s);
        (m, segments, runs) = recovery_spill(
            &storage_arc,
            (m, segments, runs),
            g,
            &r.file,
            start,
            sigs,
            (g + 1, 0),
            torn,
        )?;
        torn = (0, 0);
    }
    if torn != (0, 0) || dropped_after_torn {
        m.commit += 1;
        m.torn_records += torn.0;
        m.torn_bytes += torn.1;
        if let Some(g) = last_gen {
            m.a_gen = g + 1;
            m.a_skip = 0;
        }
        m.commit_to(st)?;
        for &g in &gens {
            if !m.runs.iter().any(|r| r.gen == g) {
                let _ = st.remove(&wal::file_name(g));
            }
        }
    }

    let (gen, wal, gen_skip) = match reuse {
        Some((file, g, end, last_epoch, records)) => {
            (g, wal::reuse(file, g, (end, records), last_epoch), records)
        }
        None => {
            let gen = m.a_gen.max(last_gen.map_or(0, |g| g + 1));
            (gen, wal::create(st, gen, None)?, 0)
        }
    };
    let wal = wal::configure(wal, &opts);
    let reaper = Arc::new(Reaper::new(storage.clone(), opts.background));
    Ok(Sieve {
        storage,
        slots,
        manifest: m,
        segments,
        runs,
        max_runs: crate::options::max_runs(opts.memory),
        gen,
        gen_skip,
        wal,
        s: Vec::new(),
        next_s: Vec::new(),
        recent: crate::recent::Recent::new(opts.recent_entries()),
        absorbed: 0,
        undecided: None,
        since_sync: 0,
        inflight: None,
        pending: Vec::new(),
        poisoned: false,
        cursor,
        read: cursor,
        read_file: None,
        read_frame: None,
        read_spare: Vec::new(),
        reaper,
        opts,
        _lock: lock,
    })
}

/// The committed state recovery advances: manifest, Z's segments, runs.
type State = (Manifest, Vec<Arc<Segment>>, Vec<Arc<Run>>);

/// Spills a replayed batch inline as a run (an empty batch still commits the new A
/// position). A merge is left to the next flush, so that opening never reads all of Z.
#[allow(clippy::too_many_arguments)]
fn recovery_spill(
    storage: &Arc<dyn Storage>,
    (m, segments, runs): State,
    gen: u64,
    file: &Arc<dyn crate::storage::StorageFile>,
    skip: u64,
    sigs: Vec<Slot>,
    next: (u64, u64),
    torn: (u64, u64),
) -> Result<State> {
    // Nothing else runs yet: the sort may take both cores (the flush then finds it sorted).
    let mut sigs = sigs;
    crate::sort::sort_by_sig_on_two_threads(&mut sigs);
    let job = FlushJob {
        storage: storage.clone(),
        manifest: m,
        segments,
        runs,
        batch: Batch {
            gen,
            wal: file.clone(),
            skip,
            sigs,
            absorbed: 0,
            next,
        },
        merge: false,
        torn,
        gate: Arc::new(Gate::default()),
        // Inline: recovery waits for its spills, which remove nothing.
        reaper: Arc::new(Reaper::new(storage.clone(), false)),
    };
    let done = flush::run(job)?;
    Ok((done.manifest, done.segments, done.runs))
}
