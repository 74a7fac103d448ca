//! Bit flips, truncations and zeroed sectors of every file kind (A, Z segment, R run, F segment, cursor,
//! manifest):
//! the outcome is a typed corruption error naming the file, or the fully correct answer —
//! never a panic, never a wrong or silently shortened output — and `check` reports each.
//!
//! The one exception is documented in `docs/design.md` ("Torn tails"): in a store that
//! crashed, damage inside the last group commit of the newest A generation cannot be told
//! from a torn write; it is dropped as a torn tail, counted in `Stats::torn_bytes`, and
//! listed by `check`. In a store closed cleanly there is no exception: the manifest records
//! where the close left A ("The clean end"), and damage before it is corruption.

use std::sync::Arc;

use crivello::internals::{
    corruption_outcome as outcome, corruption_store_closed, kind_of, FileKind,
};
use crivello::storage::sim::{CrashImage, Rng};
use crivello::{check_storage, Error};

const FLIPS_PER_KIND: usize = 2000;
const TRUNCATIONS_PER_KIND: usize = 200;
/// Sectors (512 bytes, aligned) overwritten with zeros, as a torn or lost write leaves them.
const ZEROED_SECTORS_PER_KIND: usize = 200;

/// The byte ranges of the frames of an A file (after its 20-byte header; frame headers are
/// 28 bytes, the payload length at 16).
fn frames_of(file: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 20;
    while at + 28 <= file.len() {
        let len = u32::from_le_bytes(file[at + 16..at + 20].try_into().unwrap()) as usize;
        let end = at + 28 + len;
        if end > file.len() {
            break;
        }
        out.push((at, end));
        at = end;
    }
    out
}

#[test]
fn every_flip_and_truncation_is_caught_or_harmless() {
    flips_and_truncations(true);
}

#[test]
fn after_a_crash_only_the_last_group_commit_may_read_as_a_torn_tail() {
    flips_and_truncations(false);
}

/// Damages every file kind of the corruption store, closed cleanly (`closed`) or left by a
/// crash after its last sync, and judges each outcome.
fn flips_and_truncations(closed: bool) {
    let (disk, expected) = corruption_store_closed(closed);
    let (clean, _) = outcome(&disk.crash_image(CrashImage::KillProcess)).unwrap();
    assert!(clean == expected, "the clean store is correct");
    let files: Vec<String> = disk.files().into_iter().filter(|n| n != "LOCK").collect();
    for kind in FileKind::ALL {
        assert!(
            files.iter().any(|f| kind_of(f) == Some(kind)),
            "no {kind:?} file in {files:?}"
        );
    }
    let newest_a = files
        .iter()
        .filter(|f| f.starts_with("a-"))
        .max()
        .cloned()
        .unwrap();
    let mut rng = Rng::new(42);
    let mut tally = std::collections::BTreeMap::<(FileKind, &str), usize>::new();
    for kind in FileKind::ALL {
        let candidates: Vec<&String> = files.iter().filter(|f| kind_of(f) == Some(kind)).collect();
        for trial in 0..FLIPS_PER_KIND + TRUNCATIONS_PER_KIND + ZEROED_SECTORS_PER_KIND {
            let name = candidates[rng.below(candidates.len() as u64) as usize];
            let img = disk.crash_image(CrashImage::KillProcess);
            let len = img.content(name).unwrap().len() as u64;
            let what = if trial < FLIPS_PER_KIND {
                img.flip_bit(name, rng.below(len * 8));
                "flip"
            } else if trial < FLIPS_PER_KIND + TRUNCATIONS_PER_KIND {
                let mut c = img.content(name).unwrap();
                c.truncate(rng.below(len) as usize);
                img.set_content(name, c);
                "truncate"
            } else if kind == FileKind::A && trial % 2 == 0 {
                // One whole frame (a lost write): zero it, header and payload.
                let mut c = img.content(name).unwrap();
                let frames = frames_of(&c);
                if frames.is_empty() {
                    c.iter_mut().for_each(|b| *b = 0);
                } else {
                    let (start, end) = frames[rng.below(frames.len() as u64) as usize];
                    c[start..end].iter_mut().for_each(|b| *b = 0);
                }
                img.set_content(name, c);
                "zero"
            } else {
                let mut c = img.content(name).unwrap();
                crivello::internals::zero_a_sector(&mut c, &mut rng);
                img.set_content(name, c);
                "zero"
            };
            let report = check_storage(Arc::new(img.crash_image(CrashImage::KillProcess))).unwrap();
            let verdict = match outcome(&img) {
                Err(Error::Corrupt { file, .. }) => {
                    assert!(
                        files.contains(&file) || file.ends_with(".log"),
                        "the error names a real file: {file}"
                    );
                    assert!(
                        !report.is_sound(),
                        "{what} of {name}: check missed what open found"
                    );
                    "corrupt"
                }
                Err(e) => panic!("{what} of {name}: not a corruption error: {e}"),
                // Damage that `check` reports must not pass the flush that reads (and then
                // removes) the file: a run's A generation damaged where no new URL is read
                // did, before every generation a merge takes was read whole.
                Ok((out, _)) if out == expected && !report.is_sound() => panic!(
                    "{what} of {name}: check found {:?}, the flush passed it silently",
                    report.damage
                ),
                Ok((out, _)) if out == expected => "harmless",
                Ok((out, torn)) => {
                    // Only the documented torn-tail case may shorten the output, and only
                    // at its end, counted, and listed by check; never after a clean close.
                    assert!(
                        !closed,
                        "{what} of {name}: after a clean close, damage read as a torn tail \
                         ({torn} bytes dropped)"
                    );
                    assert!(
                        name == &newest_a,
                        "{what} of {name}: wrong output, silently"
                    );
                    assert!(expected.starts_with(&out), "{what} of {name}: not a prefix");
                    if what == "truncate" && torn == 0 {
                        // A cut exactly at a frame boundary looks like a crash before those
                        // frames were written: the documented limitation.
                        "clean truncation of A's tail"
                    } else {
                        assert!(torn > 0, "{what} of {name}: dropped without being counted");
                        assert!(
                            !report.torn_tails.is_empty() || !report.is_sound(),
                            "check did not list it"
                        );
                        "torn tail"
                    }
                }
            };
            *tally.entry((kind, verdict)).or_default() += 1;
        }
    }
    eprintln!("closed {closed}: {tally:?}");
}

/// A resealed manifest whose mode names the other mode is refused, by its mode or as damage
/// `check` reports, and one whose queue coding is neither 0 nor 1 is corruption naming the
/// field. (The fuzz regressions of
/// `decode_manifest` reach bytes by position, which moves when the layout grows: this test
/// reaches both fields at their offsets, whatever the file's length.)
#[test]
fn a_resealed_manifest_of_another_mode_or_coding_is_refused_by_name() {
    use crivello::internals::{corruption_store, reseal};
    let (disk, _) = corruption_store();
    // magic, version, 13 counters: the mode; then 4 clean ends: the queue coding.
    let (mode, coding) = (8 + 13 * 8, 8 + 13 * 8 + 4 + 32);
    let original = disk.content("MANIFEST").unwrap();
    assert_eq!(
        original[mode..mode + 4],
        1u32.to_le_bytes(),
        "a plain sieve"
    );
    assert_eq!(
        original[coding..coding + 4],
        0u32.to_le_bytes(),
        "front coded"
    );
    for (at, value) in [(mode, 2u8), (coding, 2), (coding, 1)] {
        let img = disk.crash_image(CrashImage::KillProcess);
        let mut m = original.clone();
        m[at] = value;
        reseal(FileKind::Manifest, &mut m);
        img.set_content("MANIFEST", m);
        let sound = || check_storage(Arc::new(img.clone())).is_ok_and(|r| r.is_sound());
        match (at, value, outcome(&img)) {
            // Read as a frontier's, the store's bare URLs in A are not records: damage, which
            // `check` reports; or refused by its mode.
            (_, _, Err(Error::WrongMode { .. })) if at == mode => {}
            (_, _, Err(e @ Error::Corrupt { .. })) if at == mode => {
                assert!(!sound(), "check missed what open found: {e}");
            }
            (_, 2, Err(e @ Error::Corrupt { .. })) if at == coding => {
                assert!(e.to_string().contains("queue coding"), "{e}");
                assert!(!sound(), "check missed it");
            }
            // A plain sieve that says its queues are compressed has none: nothing changes.
            (_, 1, Ok(_)) if at == coding => {}
            (at, value, other) => panic!("byte {at} set to {value}: {other:?}"),
        }
    }
}
