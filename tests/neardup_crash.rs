//! The near-duplicate store on the simulated disk: a crash at every I/O operation of a
//! workload, with each disk image, then a re-run of the same input as `crivello neardup`
//! makes it (the lines of documents stored but not reported first, then the input again):
//! no line skipped, every line identical to a clean run's, no document stored twice, every
//! line reported before the crash of a document the crash left stored. Then bit flips and truncations of every file kind are detected.

use std::sync::Arc;

use crivello::neardup::{check_storage, Store, Stored};
use crivello::storage::sim::CrashImage;
use crivello::storage::{SimDisk, Storage};
use crivello::Options;

fn opts() -> Options {
    opts_with(false)
}

/// The options of the tests; `background`: merges (and the sieve's flushes) on threads of
/// their own.
fn opts_with(background: bool) -> Options {
    Options::new()
        .memory(2 << 20)
        .slots(8)
        .seed(5)
        .background_flush(background)
}

/// The input: ids with repeats, fingerprints with near neighbours; in calls of a few.
fn input() -> Vec<Vec<(Vec<u8>, u64)>> {
    let mut docs = Vec::new();
    let mut fp = 0x1234_5678_9abc_def0u64;
    for i in 0..26u64 {
        fp = fp.rotate_left(7) ^ (i * 0x9e37_79b9_7f4a_7c15);
        let id = format!("doc-{}", i % 19).into_bytes();
        // Every third document is a near-duplicate of the one before it.
        let f = if i % 3 == 2 {
            docs.last().map_or(fp, |(_, f): &(Vec<u8>, u64)| f ^ 0b101)
        } else {
            fp
        };
        docs.push((id, f));
    }
    docs.chunks(4).map(<[_]>::to_vec).collect()
}

/// Runs the command line's loop on `disk`: reports the unreported documents, then inserts
/// the input; returns the lines it reported (before any error).
fn run(disk: &SimDisk, input: &[Vec<(Vec<u8>, u64)>]) -> Vec<Stored> {
    run_with(disk, input, false)
}

/// [`run`], merges on a thread of their own when `background`.
fn run_with(disk: &SimDisk, input: &[Vec<(Vec<u8>, u64)>], background: bool) -> Vec<Stored> {
    let mut lines = Vec::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let Ok(mut store) = Store::open_with(storage, opts_with(background)) else {
        return lines;
    };
    let pending = store.unreported();
    for doc in pending.clone() {
        match store.document(doc) {
            Ok(s) => lines.push(s),
            Err(_) => return lines,
        }
    }
    store.set_reported(pending.end);
    for call in input {
        // As the command line prints them: each batch's lines as `insert_with` reports
        // them, those of a call that then fails included.
        let docs: Vec<(&[u8], u64)> = call.iter().map(|(id, f)| (id.as_slice(), *f)).collect();
        let mut last = None;
        let r = store.insert_with(&docs, 3, |_, s| {
            if let Some(s) = s {
                last = Some(s.doc);
                lines.push(s.to_stored());
            }
        });
        if r.is_err() {
            return lines;
        }
        if let Some(last) = last {
            store.set_reported(last + 1);
        }
    }
    let _ = store.close();
    lines
}

#[test]
fn a_crash_at_every_operation_skips_no_line_and_stores_nothing_twice() {
    crash_at_every_operation(false);
}

#[test]
fn a_crash_at_every_operation_with_merges_beside_the_batches_is_safe() {
    // Merges on a thread of their own while the next batches go on: the I/O order varies
    // from run to run, so each crash point is the k-th operation of whatever order that run
    // took (a merge's writes among a batch's, its commit after a later batch's).
    crash_at_every_operation(true);
}

/// A crash at every I/O operation of the input, each disk image, then a re-run: no line
/// skipped, every line identical to a clean run's, nothing stored twice, `check` clean.
fn crash_at_every_operation(background: bool) {
    let input = input();
    let clean = SimDisk::new();
    let expected = run_with(&clean, &input, background);
    assert_eq!(expected.len(), 19);
    assert!(expected.iter().any(|s| s.nearest.is_some()));
    let total = clean.ops();
    let mut runs = 0;
    // With merges beside the batches a run may take more operations than the clean one.
    let last = if background { total + total / 4 } else { total };
    for k in 1..=last {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let first = run_with(&disk, &input, background);
        if background && !disk.has_crashed() {
            continue;
        }
        assert!(disk.has_crashed(), "no crash at op {k} of {total}");
        for image in CrashImage::each_kind(k) {
            // Every line reported before the crash is of a document the image holds, as
            // reported: a line is printed only once its document is durable.
            let after: Arc<dyn Storage> = Arc::new(disk.crash_image(image));
            let mut store = Store::open_with(after, opts_with(background)).unwrap();
            for s in &first {
                let got = store.document(s.doc).ok();
                assert_eq!(
                    got.as_ref(),
                    Some(s),
                    "op {k}, {image:?}: a reported document lost"
                );
            }
            drop(store);
            let img = disk.crash_image(image);
            let second = run_with(&img, &input, background);
            let mut seen = vec![false; expected.len()];
            for s in first.iter().chain(&second) {
                let want = &expected[s.doc as usize];
                assert_eq!(
                    s, want,
                    "op {k}, {image:?}: a line differs from the clean run's"
                );
                seen[s.doc as usize] = true;
            }
            assert!(
                seen.iter().all(|&b| b),
                "op {k}, {image:?}: a line was skipped"
            );
            // Nothing stored twice: the store holds exactly the clean run's documents.
            let storage: Arc<dyn Storage> = Arc::new(img.clone());
            let store = Store::open_with(storage, opts_with(background)).unwrap();
            assert_eq!(store.len(), expected.len() as u64, "op {k}, {image:?}");
            store.close().unwrap();
            check_storage(Arc::new(img.clone()))
                .unwrap_or_else(|e| panic!("op {k}, {image:?}: check: {e}"));
            runs += 1;
        }
    }
    assert!(runs > 100, "{runs}");
}

#[test]
fn damage_to_every_file_kind_is_detected() {
    let clean = SimDisk::new();
    let lines = run(&clean, &input());
    assert_eq!(lines.len(), 19);
    check_storage(Arc::new(clean.clone())).unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for name in clean.files() {
        if name == "LOCK" || name.starts_with("ids.") {
            continue; // the sieve's own files have their own corruption suite
        }
        let kind = name.split(['-', '.']).next().unwrap().to_owned();
        kinds.insert(kind);
        let len = clean.content(&name).unwrap().len() as u64;
        // Every byte flipped in turn (one bit of it), and truncations.
        for byte in 0..len {
            let img = clean.crash_image(CrashImage::KillProcess);
            img.flip_bit(&name, byte * 8 + byte % 8);
            let found = check_storage(Arc::new(img.clone()));
            assert!(
                found.as_ref().is_err_and(|e| e.is_corruption()),
                "{name}: a flip at byte {byte} of {len} passed check: {found:?}"
            );
            let opened = Store::open_with(Arc::new(img), opts()).and_then(|mut s| {
                let n = s.len();
                for d in 0..n {
                    s.document(d)?;
                }
                for f in [0u64, u64::MAX, 0x1234_5678_9abc_def0] {
                    s.query(f, 7)?;
                }
                Ok(())
            });
            // Opening may pass a flip in a part it does not read (a frame of D is read when
            // a document is), but never returns wrong data silently: check caught it above.
            if let Err(e) = opened {
                assert!(e.is_corruption(), "{name}: byte {byte}: {e}");
            }
        }
        for cut in [len - 1, len / 2, 1] {
            let img = clean.crash_image(CrashImage::KillProcess);
            let mut data = clean.content(&name).unwrap();
            data.truncate(cut as usize);
            img.set_content(&name, data);
            let found = check_storage(Arc::new(img));
            assert!(
                found.as_ref().is_err_and(|e| e.is_corruption()),
                "{name}: cut to {cut} of {len} passed check: {found:?}"
            );
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["NEARDUP", "docs", "n"],
        "every file kind of the store was damaged"
    );
}
