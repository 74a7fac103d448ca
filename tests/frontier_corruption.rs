//! Bit flips, truncations and zeroed sectors of every file kind of the frontier (J, its
//! checkpoint, the Q runs): the outcome is a corruption error naming the file, which `check`
//! reports too, or the fully correct state — never a panic, never a queue silently changed.
//!
//! The one exception is that of A, documented in `docs/design.md` ("Torn tails"): damage in
//! the last frames of the newest J generation cannot be told from a torn write; they are
//! dropped (and `check` lists the torn tail), and the state is one the store was in before
//! (a cut exactly at a frame boundary looks like a crash before those frames were written).
//! The store and the judgement are the ones the fuzz targets `decode_j`, `decode_checkpoint`
//! and `decode_q` use (`crivello::internals`).

use std::collections::BTreeMap;

use std::sync::Arc;

use crivello::internals::{
    compressed_frontier_store, frontier_corruption_opts, frontier_outcome, frontier_outcome_in,
    frontier_store, judge_frontier_edit, reseal_frontier, FrontierFile, Verdict,
};
use crivello::queues::ManualClock;
use crivello::storage::sim::{CrashImage, Rng};
use crivello::storage::DirStorage;
use crivello::storage::SimDisk;
use crivello::{check_storage, Error, Frontier};

const FLIPS_PER_KIND: usize = 500;
const TRUNCATIONS_PER_KIND: usize = 100;
/// Sectors (512 bytes, aligned) overwritten with zeros, as a torn or lost write leaves them.
const ZEROED_SECTORS_PER_KIND: usize = 100;

/// An image of `disk` with file `name` damaged as trial `trial` of a suite says: a bit
/// flipped, a truncation, or a sector of 512 bytes zeroed (the whole file, if that sector
/// was zero already); and which of the three.
fn damaged(disk: &SimDisk, name: &str, trial: usize, rng: &mut Rng) -> (SimDisk, &'static str) {
    let img = disk.crash_image(CrashImage::KillProcess);
    let mut c = img.content(name).unwrap();
    let len = c.len() as u64;
    let what = if trial < FLIPS_PER_KIND {
        img.flip_bit(name, rng.below(len * 8));
        "flip"
    } else if trial < FLIPS_PER_KIND + TRUNCATIONS_PER_KIND {
        c.truncate(rng.below(len) as usize);
        img.set_content(name, c);
        "truncate"
    } else {
        crivello::internals::zero_a_sector(&mut c, rng);
        img.set_content(name, c);
        "zero"
    };
    (img, what)
}

#[test]
fn every_flip_and_truncation_of_the_frontiers_files_is_caught_or_harmless() {
    let (disk, _, _) = frontier_store();
    let files = disk.files();
    let mut rng = Rng::new(7);
    let mut tally = BTreeMap::<(FrontierFile, Verdict, &str), usize>::new();
    for kind in FrontierFile::ALL {
        let candidates: Vec<&String> = files
            .iter()
            .filter(|f| FrontierFile::of(f) == Some(kind))
            .collect();
        for trial in 0..FLIPS_PER_KIND + TRUNCATIONS_PER_KIND + ZEROED_SECTORS_PER_KIND {
            let name = candidates[rng.below(candidates.len() as u64) as usize];
            let (img, what) = damaged(&disk, name, trial, &mut rng);
            let verdict = judge_frontier_edit(&img, name, what == "truncate", false);
            *tally.entry((kind, verdict, what)).or_default() += 1;
        }
    }
    eprintln!("{tally:?}");
    // The store was closed cleanly: the manifest records where J ends, so no damage of J
    // reads as a cut or a torn tail.
    assert!(
        !tally
            .keys()
            .any(|(_, v, _)| matches!(v, Verdict::CutTail | Verdict::TornTail)),
        "after a clean close, damage of J read as a cut or torn tail: {tally:?}"
    );
    for kind in FrontierFile::ALL {
        assert!(
            tally
                .iter()
                .any(|((k, v, _), n)| *k == kind && *v == Verdict::Caught && *n > 0),
            "no damage of {kind:?} was caught: {tally:?}"
        );
    }
}

/// The same crawl with its Q runs compressed (frame layout 6): the same state, and every flip,
/// truncation and zeroed sector of its runs is caught or harmless, as front-coded runs' are.
#[test]
fn damage_of_a_compressed_q_run_is_caught_or_harmless() {
    let disk = compressed_frontier_store();
    let (_, expected, _) = frontier_store();
    assert_eq!(
        frontier_outcome(&disk.crash_image(CrashImage::KillProcess)).unwrap(),
        expected
    );
    let runs: Vec<String> = disk
        .files()
        .into_iter()
        .filter(|f| FrontierFile::of(f) == Some(FrontierFile::Q))
        .collect();
    // Every run's first frame is compressed: magic FRZ1, layout 6.
    for name in &runs {
        let c = disk.content(name).unwrap();
        assert_eq!((&c[20..24], c[48]), (&b"FRZ1"[..], 6), "{name}");
    }
    let mut rng = Rng::new(11);
    let mut tally = BTreeMap::<(Verdict, &str), usize>::new();
    for trial in 0..FLIPS_PER_KIND + TRUNCATIONS_PER_KIND + ZEROED_SECTORS_PER_KIND {
        let name = &runs[rng.below(runs.len() as u64) as usize];
        let (img, what) = damaged(&disk, name, trial, &mut rng);
        let verdict = judge_frontier_edit(&img, name, what == "truncate", false);
        *tally.entry((verdict, what)).or_default() += 1;
    }
    eprintln!("{tally:?}");
    for what in ["flip", "truncate", "zero"] {
        assert!(
            tally.get(&(Verdict::Caught, what)).is_some_and(|&n| n > 0),
            "no {what} of a compressed run caught: {tally:?}"
        );
    }
}

/// On a real directory the Q runs are read through a memory mapping: a flip, a cut or a zeroed
/// sector of a run there is caught as on the simulated disk (a corruption error naming the run)
/// or harmless, never a panic, a crash of the process or a wrong state.
#[test]
fn damage_of_a_mapped_q_run_is_caught_or_harmless() {
    let (disk, expected, _) = frontier_store();
    let img = disk.crash_image(CrashImage::KillProcess);
    let files: Vec<String> = img.files().into_iter().filter(|f| f != "LOCK").collect();
    let runs: Vec<&String> = files
        .iter()
        .filter(|f| FrontierFile::of(f) == Some(FrontierFile::Q))
        .collect();
    assert!(!runs.is_empty(), "the store has Q runs: {files:?}");
    let mut rng = Rng::new(11);
    let mut tally = BTreeMap::<(Verdict, &str), usize>::new();
    for trial in 0..150 {
        let dir = tempfile::tempdir().unwrap();
        for f in &files {
            std::fs::write(dir.path().join(f), img.content(f).unwrap()).unwrap();
        }
        let name = runs[rng.below(runs.len() as u64) as usize];
        let mut c = img.content(name).unwrap();
        let len = c.len() as u64;
        let what = match trial % 3 {
            0 => {
                let bit = rng.below(len * 8);
                c[(bit / 8) as usize] ^= 1 << (bit % 8);
                "flip"
            }
            1 => {
                c.truncate(rng.below(len) as usize);
                "truncate"
            }
            _ => {
                let start = rng.below(len.div_ceil(512)) as usize * 512;
                let end = (start + 512).min(c.len());
                c[start..end].iter_mut().for_each(|b| *b = 0);
                "zero"
            }
        };
        std::fs::write(dir.path().join(name), &c).unwrap();
        let storage = Arc::new(DirStorage::open(dir.path()).unwrap());
        let verdict = match frontier_outcome_in(storage) {
            Err(Error::Corrupt { file, .. }) => {
                assert_eq!(&file, name, "the error names the damaged run");
                Verdict::Caught
            }
            Err(e) => panic!("{name} ({what}): not a corruption error: {e}"),
            Ok(state) => {
                assert!(
                    state == expected,
                    "{name} ({what}): a wrong state, silently"
                );
                Verdict::Harmless
            }
        };
        *tally.entry((verdict, what)).or_default() += 1;
    }
    eprintln!("{tally:?}");
    for what in ["flip", "truncate", "zero"] {
        assert!(
            tally.get(&(Verdict::Caught, what)).is_some_and(|&n| n > 0),
            "no {what} of a mapped run was caught: {tally:?}"
        );
    }
}

/// A file of the frontier removed (an operator's `rm`, a lost directory entry): the open and
/// `check` name it as missing, never a state with its contents silently gone. Before, a store
/// whose `CHECKPOINT` was removed opened as an empty frontier (J's first generation left,
/// holding nothing) and `check` said ok; the next open removed the Q runs as unreferenced.
#[test]
fn a_removed_file_of_the_frontier_is_named_missing() {
    let (disk, _, _) = checkpoint_of_store();
    let expected = frontier_outcome(&disk.crash_image(CrashImage::KillProcess)).unwrap();
    let files = disk.files();
    let mut seen = BTreeMap::<FrontierFile, usize>::new();
    for name in &files {
        let Some(kind) = FrontierFile::of(name) else {
            continue;
        };
        let img = disk.crash_image(CrashImage::KillProcess);
        img.delete(name);
        match frontier_outcome(&img) {
            Err(Error::Corrupt { file, .. }) if file == *name => {
                assert!(!sound(&img), "{name} removed: check said sound");
                *seen.entry(kind).or_default() += 1;
            }
            // A file nothing refers to any more (a run a compaction replaced, whose removal
            // the crash came before): its loss changes nothing.
            Ok(state) if state == expected => {}
            other => panic!(
                "{name} removed: {:?}",
                other.map(|(done, q)| (done, q.len()))
            ),
        }
    }
    for kind in FrontierFile::ALL {
        assert!(
            seen.get(&kind).is_some_and(|&n| n > 0),
            "no {kind:?} in {files:?}"
        );
    }
}

/// A frontier that never wrote a checkpoint nor closed, whose only journal generation is
/// removed: its Q runs are named as unreferenced no more, J is missing. Before, the open made
/// an empty J and removed the runs.
#[test]
fn a_frontier_without_its_journal_or_checkpoint_is_refused() {
    let disk = SimDisk::new();
    let f = Frontier::open_with(
        Arc::new(disk.clone()),
        frontier_corruption_opts().journal_bytes(1 << 30),
        Arc::new(ManualClock::new(crivello::internals::T0)),
    )
    .unwrap();
    f.push("", &[crivello::Discovered::url(b"http://a.test/1")])
        .unwrap();
    f.flush().unwrap();
    assert_eq!(f.lease(10, None, 60_000).unwrap().len(), 1);
    let img = disk.crash_image(CrashImage::KillProcess);
    drop(f);
    let files = img.files();
    assert!(files
        .iter()
        .any(|n| FrontierFile::of(n) == Some(FrontierFile::Q)));
    assert!(!files
        .iter()
        .any(|n| FrontierFile::of(n) == Some(FrontierFile::Checkpoint)));
    for n in files
        .iter()
        .filter(|n| FrontierFile::of(n) == Some(FrontierFile::J))
    {
        img.delete(n);
    }
    assert!(!sound(&img), "check said sound");
    match frontier_outcome(&img) {
        Err(Error::Corrupt { file, .. }) if file.starts_with("j-") => {}
        other => panic!("{:?}", other.map(|(done, q)| (done, q.len()))),
    }
}

/// The frontier store of the fuzz targets, its checkpoint's name and bytes.
fn checkpoint_of_store() -> (SimDisk, String, Vec<u8>) {
    let (crawled, _, _) = frontier_store();
    // When the crawl's checkpoints fell depends on their bound: one more is written of its
    // end state, with nothing in J after it (a copy of the store opened with a bound of one
    // byte, an entry committed, the store closed).
    let disk = crawled.crash_image(CrashImage::KillProcess);
    let f = Frontier::open_with(
        Arc::new(disk.clone()),
        frontier_corruption_opts().journal_bytes(1),
        Arc::new(ManualClock::new(crivello::internals::T0)),
    )
    .expect("open");
    f.set_paused(false).expect("resume");
    f.close().expect("close");
    let img = disk.crash_image(CrashImage::KillProcess);
    let name = img
        .files()
        .into_iter()
        .find(|f| FrontierFile::of(f) == Some(FrontierFile::Checkpoint))
        .expect("a checkpoint");
    let original = img.content(&name).unwrap();
    (disk, name, original)
}

/// The store of [`frontier_store`] after its clean close, opened again at an instant of its
/// own (returned), on a copy of its disk that a later crash image continues.
fn store_opened_after_its_close() -> (SimDisk, u64, Frontier) {
    let (disk, _, _) = frontier_store();
    let img = disk.crash_image(CrashImage::KillProcess);
    let now = crivello::internals::T0 + 7_000;
    let f = Frontier::open_with(
        Arc::new(img.clone()),
        frontier_corruption_opts(),
        Arc::new(ManualClock::new(now)),
    )
    .expect("open");
    (img, now, f)
}

/// A crash image of `img` whose file `name` (of `kind`, its bytes `original`) has the u64 at
/// `at` set to `value`, the checksums made right again.
fn with_u64(
    img: &SimDisk,
    name: &str,
    kind: FrontierFile,
    original: &[u8],
    at: usize,
    value: u64,
) -> SimDisk {
    let mut c = original.to_vec();
    c[at..at + 8].copy_from_slice(&value.to_le_bytes());
    reseal_frontier(kind, &mut c);
    let edited = img.crash_image(CrashImage::KillProcess);
    edited.set_content(name, c);
    edited
}

/// Whether `check` finds the store `img` sound.
fn sound(img: &SimDisk) -> bool {
    check_storage(Arc::new(img.crash_image(CrashImage::KillProcess))).is_ok_and(|r| r.is_sound())
}

/// Asserts that `check` reports `edited` unsound and that its open refuses file `name` as
/// damaged, saying that `field` is out of its range; never a panic.
fn assert_out_of_range(edited: SimDisk, name: &str, field: &str) {
    assert!(!sound(&edited), "{name}: {field}: check said sound");
    match frontier_outcome_in(Arc::new(edited)) {
        Err(Error::Corrupt { file, what, .. }) => {
            assert_eq!(file, name);
            let what = what.to_string();
            assert!(
                what.contains(field) && what.contains("must be below"),
                "{what}"
            );
        }
        other => panic!("{name}: {field}: {other:?}"),
    }
}

/// A lease of the checkpoint whose seq is rewritten, the checksum made right again: to the
/// seq of a record still waiting in a Q run, one record would be both leased and in its
/// queue, and the store would hand it out twice. `check` cross-checks the checkpoint's
/// leased, returned and refetch seqs against the runs and reports it; serving either gives
/// a state as well formed as the edit left it or stops at the clash with a corruption
/// error, never a panic. (The fuzzer found such an edit where one hand-out took the seq
/// twice, from a run and from the returned records: a debug assertion failed then; the
/// hand-out now stops with a corruption error. Its input is in `fuzz/regressions`.)
#[test]
fn a_resealed_checkpoint_lease_on_a_waiting_record_is_caught_by_check() {
    let (disk, name, original) = checkpoint_of_store();
    let u = |at: usize| u64::from_le_bytes(original[at..at + 8].try_into().unwrap());
    // A lease is (seq, token, deadline, record); the store leases for 60 s from T0 plus 10 ms
    // a round (12 rounds).
    let first = crivello::internals::T0 + 60_000;
    let deadlines: Vec<u64> = (0..=12).map(|round| first + 10 * round).collect();
    let leases: Vec<usize> = (12..original.len() - 24)
        .filter(|&at| deadlines.contains(&u(at + 16)) && u(at) < 1000 && u(at + 8) < 1000)
        .collect();
    assert!(leases.len() >= 2, "leases found at {leases:?}");
    let seqs: Vec<u64> = leases.iter().map(|&at| u(at)).collect();
    let mut tally = BTreeMap::<(Verdict, bool), usize>::new();
    for &at in &leases {
        for to in 0..400u64 {
            if seqs.contains(&to) {
                continue;
            }
            let edited = with_u64(&disk, &name, FrontierFile::Checkpoint, &original, at, to);
            // `check` first: the judge's open serves the edited store, and so changes it.
            let sound = sound(&edited);
            let verdict = judge_frontier_edit(&edited, &name, false, true);
            *tally.entry((verdict, sound)).or_default() += 1;
        }
    }
    eprintln!("{tally:?}");
    let unsound: usize = tally.iter().filter(|((_, s), _)| !s).map(|(_, n)| n).sum();
    let total: usize = tally.values().sum();
    // Most seqs below 400 are of records still waiting in the runs.
    assert!(
        unsound * 2 > total,
        "check found {unsound} of {total} clashes: {tally:?}"
    );
}

/// The checkpoint's counters (`next_seq`, `next_run`, `next_token`: the three u64 after
/// the magic, the version and `j_gen`) edited to 2^62 or past it, the checksum made
/// right again: the open refuses the checkpoint by name, saying which field is out of range
/// (a counter that large would overflow the next `+ 1`), and never panics; `check` reports
/// the store as damaged too.
#[test]
fn a_resealed_checkpoint_counter_at_the_limit_is_refused() {
    let (disk, name, original) = checkpoint_of_store();
    for (at, field) in [(16, "next seq"), (24, "next run"), (32, "next token")] {
        for value in [1u64 << 62, u64::MAX] {
            let edited = with_u64(&disk, &name, FrontierFile::Checkpoint, &original, at, value);
            assert_out_of_range(edited, &name, field);
        }
    }
}

/// The checkpoint's `next_seq` lowered below the seqs of records waiting in the Q runs, the
/// checksum made right again: every record of a run was numbered below the frontier's next
/// seq, so a record at or past it is damage. A hand-out that reaches such a record stops with
/// a corruption error naming its run (it would otherwise serve a seq the frontier then gives
/// to a new record), and `check` reports the same store as unsound. No edit panics, and
/// every edit an open and its hand-outs accept, `check` accepts too.
#[test]
fn a_lowered_next_seq_below_the_records_of_a_run_is_caught_by_hand_outs_and_check() {
    let (disk, name, original) = checkpoint_of_store();
    let next_seq = u64::from_le_bytes(original[16..24].try_into().unwrap());
    let mut named_run = 0;
    for lowered in next_seq.saturating_sub(120)..next_seq {
        let edited = with_u64(
            &disk,
            &name,
            FrontierFile::Checkpoint,
            &original,
            16,
            lowered,
        );
        let sound = sound(&edited);
        match frontier_outcome_in(Arc::new(edited)) {
            Ok(_) => assert!(sound, "next seq {lowered}: served, check must agree"),
            Err(Error::Corrupt { file, what, .. }) => {
                assert!(
                    !sound,
                    "next seq {lowered}: {file} refused, check said sound"
                );
                if FrontierFile::of(&file) == Some(FrontierFile::Q) {
                    assert!(what.to_string().contains("seq of a record"), "{what}");
                    named_run += 1;
                }
            }
            Err(e) => panic!("next seq {lowered}: {e}"),
        }
    }
    assert!(
        named_run > 0,
        "no lowered next seq reached a record of a run"
    );
}

/// A lease entry of J (`2 | seq u64 | token u64 | deadline u64 | record`) whose seq or token
/// is edited to 2^62 or past it, the checksums made right again: the open refuses the
/// generation by name, saying which field is out of range (a hand-out adds one to both), and
/// never panics; `check` reports the same. The leases are taken after the store's clean close,
/// then the process is killed, so that the open replays their entries.
#[test]
fn a_resealed_journal_seq_or_token_at_the_limit_is_refused() {
    let (img, now, f) = store_opened_after_its_close();
    let leased = f.lease(4, None, 60_000).expect("lease");
    assert!(leased.len() >= 2, "{} leased", leased.len());
    drop(f);
    let img = img.crash_image(CrashImage::KillProcess);
    let deadline = now + 60_000;
    let mut refused = 0;
    for name in img.files() {
        if FrontierFile::of(&name) != Some(FrontierFile::J) {
            continue;
        }
        let original = img.content(&name).unwrap();
        let u = |at: usize| u64::from_le_bytes(original[at..at + 8].try_into().unwrap());
        let leases: Vec<usize> = (0..original.len().saturating_sub(25))
            .filter(|&at| original[at] == 2 && u(at + 17) == deadline)
            .filter(|&at| u(at + 1) < 1000 && u(at + 9) < 1000)
            .collect();
        for &at in &leases {
            for (field, place) in [("seq of a lease", at + 1), ("token of a lease", at + 9)] {
                for value in [1u64 << 62, u64::MAX] {
                    let edited = with_u64(&img, &name, FrontierFile::J, &original, place, value);
                    assert_out_of_range(edited, &name, field);
                    refused += 1;
                }
            }
        }
    }
    assert_eq!(
        refused,
        leased.len() * 4,
        "an edit per lease, field and value"
    );
}

/// An entry of J that its checksum covers but that contradicts the state (a done of a
/// record never leased, resealed) is damage at the frame that holds it: the open and `check`
/// name that frame's offset, where they said offset 0 (the replay knew the file, not the
/// place).
#[test]
fn a_resealed_journal_entry_that_contradicts_the_state_is_named_at_its_frame() {
    let (img, now, f) = store_opened_after_its_close();
    let leased = f.lease(4, None, 60_000).expect("lease");
    assert!(f.done(leased[0].token, 0).expect("done"));
    drop(f);
    let img = img.crash_image(CrashImage::KillProcess);
    let mut edits = 0;
    for name in img.files() {
        if FrontierFile::of(&name) != Some(FrontierFile::J) {
            continue;
        }
        let original = img.content(&name).unwrap();
        let u = |at: usize| u64::from_le_bytes(original[at..at + 8].try_into().unwrap());
        // Entry 3, done: seq, at (the clock's instant), took 0.
        let dones: Vec<usize> = (0..original.len().saturating_sub(25))
            .filter(|&at| original[at] == 3 && u(at + 9) == now && u(at + 17) == 0)
            .filter(|&at| u(at + 1) < 1000)
            .collect();
        for &at in &dones {
            let edited = with_u64(&img, &name, FrontierFile::J, &original, at + 1, 999);
            let frame = match frontier_outcome_in(Arc::new(edited.clone())) {
                Err(Error::Corrupt { file, offset, what }) => {
                    assert_eq!(file, name);
                    assert!(what.to_string().contains("end of a lease"), "{what}");
                    offset
                }
                other => panic!("{name}: {other:?}"),
            };
            // The offset is a frame's start, at or before the entry.
            let frame_at = usize::try_from(frame).unwrap();
            assert!(frame > 0 && frame_at < at, "frame {frame}, entry at {at}");
            assert_eq!(&original[frame_at..frame_at + 4], b"FRM1");
            let report =
                check_storage(Arc::new(edited.crash_image(CrashImage::KillProcess))).unwrap();
            assert!(
                report
                    .damage
                    .iter()
                    .any(|e| matches!(e, Error::Corrupt { file, offset, .. } if *file == name && *offset == frame)),
                "{:?}",
                report.damage
            );
            edits += 1;
        }
    }
    assert_eq!(edits, 1, "the one done was found and edited");
}
