//! Crash consistency on the simulated disk: every crash point of canonical workloads is
//! enumerated, and at each one several disk images (process kill, power loss dropping every
//! unsynced write, data kept but directory entries lost, random tears) are reopened and
//! checked against the model. Recovery itself is crashed at each of its operations.
//!
//! Flushes run inline here, so that the sequence of I/O operations is deterministic.

mod common;

use std::sync::Arc;

use common::emit_model;
use crivello::storage::sim::{CrashImage, FaultKind};
use crivello::storage::SimDisk;
use crivello::{Error, Options, Sieve};

#[derive(Debug, Clone)]
enum Step {
    Push(&'static str),
    Sync,
    Flush,
    /// Read up to n frontier URLs and commit the cursor.
    Pop(usize),
    Close,
}
use Step::*;

/// Merges happen only when due or on `flush`, so that buffers are also spilled as runs.
fn opts(slots: usize) -> Options {
    Options::new()
        .slots(slots)
        .seed(11)
        .background_flush(false)
        .frontier_low(0)
}

/// What the workload observed before the crash.
#[derive(Debug, Default, Clone)]
struct Observed {
    pushed: Vec<Vec<u8>>,
    acked: usize,
    consumed: Vec<Vec<u8>>,
    /// URLs read by a pop whose cursor commit failed: it may or may not have taken effect.
    in_doubt: Vec<Vec<u8>>,
    /// URLs in F after the last flush that returned Ok: committed, so F never goes below.
    emitted: u64,
}

/// Applies one step other than `Close`, recording what was acknowledged and consumed.
fn apply(sieve: &mut Sieve, step: &Step, o: &mut Observed) -> crivello::Result<()> {
    match step {
        Push(u) => sieve
            .push(u.as_bytes())
            .map(|_| o.pushed.push(u.as_bytes().to_vec())),
        Sync => sieve.sync().map(|_| o.acked = o.pushed.len()),
        Flush => {
            sieve.flush()?;
            o.acked = o.pushed.len();
            o.emitted = sieve.stats()?.emitted;
            Ok(())
        }
        Pop(n) => {
            o.in_doubt = sieve.frontier_next(*n)?;
            sieve
                .frontier_commit()
                .map(|_| o.consumed.append(&mut o.in_doubt))
        }
        Close => unreachable!("Close reopens the sieve: handled by run"),
    }
}

/// Runs `steps` until the first error; returns what was observed.
fn run(disk: &SimDisk, slots: usize, steps: &[Step]) -> Observed {
    let mut o = Observed::default();
    let Ok(mut sieve) = Sieve::open_with(Arc::new(disk.clone()), opts(slots)) else {
        return o;
    };
    for step in steps {
        if let Close = step {
            if sieve.close().is_err() {
                return o;
            }
            o.acked = o.pushed.len();
            sieve = match Sieve::open_with(Arc::new(disk.clone()), opts(slots)) {
                Ok(s) => s,
                Err(_) => return o,
            };
        } else if apply(&mut sieve, step, &mut o).is_err() {
            return o;
        }
    }
    o
}

/// Reopens `disk` and checks the invariants against what was observed; returns Err with a
/// description on violation.
fn verify(disk: &SimDisk, slots: usize, o: &Observed) -> Result<(), String> {
    // Work on a copy: the image stays as the crash left it.
    let disk = disk.crash_image(CrashImage::KillProcess);
    let mut sieve = Sieve::open_with(Arc::new(disk.clone()), opts(slots))
        .map_err(|e| format!("reopen failed: {e}"))?;
    let emitted = sieve.stats().map_err(|e| format!("stats: {e}"))?.emitted;
    if emitted < o.emitted {
        return Err(format!(
            "committed F went back: {emitted} URLs, {} after the last flush",
            o.emitted
        ));
    }
    sieve
        .flush()
        .map_err(|e| format!("flush after reopen failed: {e}"))?;
    let mut rest = Vec::new();
    loop {
        let b = sieve
            .frontier_next(1000)
            .map_err(|e| format!("read failed: {e}"))?;
        if b.is_empty() {
            break;
        }
        rest.extend(b);
    }
    sieve
        .frontier_commit()
        .map_err(|e| format!("commit failed: {e}"))?;
    // Committed reads are never re-emitted; acknowledged pushes are never lost; what was
    // lost is a suffix of the push stream.
    let mut f = o.consumed.clone();
    let mut g = o.consumed.clone();
    g.extend(o.in_doubt.iter().cloned());
    f.extend(rest.iter().cloned());
    g.extend(rest);
    let ok = (o.acked..=o.pushed.len()).any(|k| {
        let m = emit_model(&o.pushed[..k]);
        m == f || m == g
    });
    if !ok {
        return Err(format!(
            "F = {:?} is not the model of a prefix of {:?} from {} (consumed {})",
            f.iter()
                .map(|u| String::from_utf8_lossy(u).into_owned())
                .collect::<Vec<_>>(),
            o.pushed
                .iter()
                .map(|u| String::from_utf8_lossy(u).into_owned())
                .collect::<Vec<_>>(),
            o.acked,
            o.consumed.len()
        ));
    }
    sieve.close().map_err(|e| format!("close failed: {e}"))?;
    Ok(())
}

fn images() -> Vec<CrashImage> {
    let mut v = vec![
        CrashImage::KillProcess,
        CrashImage::DropAll,
        CrashImage::KeepDataDropDir,
    ];
    // `CRIVELLO_RANDOM_IMAGES` raises the number of random tears per point (the long tier).
    let random: u64 = std::env::var("CRIVELLO_RANDOM_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    v.extend((1..=random).map(CrashImage::Random));
    v
}

/// Enumerates every crash point of a workload; returns the number of (point, image) runs.
fn enumerate(name: &str, slots: usize, steps: &[Step]) -> usize {
    let clean = SimDisk::new();
    let o = run(&clean, slots, steps);
    assert_eq!(
        o.pushed.len(),
        steps.iter().filter(|s| matches!(s, Push(_))).count(),
        "{name}: clean run failed"
    );
    verify(&clean, slots, &o).unwrap_or_else(|e| panic!("{name}: clean run: {e}"));
    let total = clean.ops();
    let mut runs = 0;
    for k in 1..=total {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let o = run(&disk, slots, steps);
        assert!(disk.has_crashed(), "{name}: no crash at op {k} of {total}");
        for image in images() {
            let img = disk.crash_image(image);
            if let Err(e) = verify(&img, slots, &o) {
                panic!(
                    "{name}: crash at op {k}/{total} ({:?}), image {image:?}: {e}",
                    disk.trace().last()
                );
            }
            runs += 1;
            // Recovery that itself crashes at each of its operations, then recovers.
            if matches!(
                image,
                CrashImage::KillProcess | CrashImage::DropAll | CrashImage::Random(1)
            ) {
                let probe = img.crash_image(CrashImage::KillProcess);
                let before = probe.ops();
                drop(Sieve::open_with(Arc::new(probe.clone()), opts(slots)));
                let recovery_ops = probe.ops() - before;
                for j in 1..=recovery_ops {
                    let again = img.crash_image(CrashImage::KillProcess);
                    again.crash_at(j);
                    let _ = Sieve::open_with(Arc::new(again.clone()), opts(slots));
                    for second in [
                        CrashImage::KillProcess,
                        CrashImage::DropAll,
                        CrashImage::Random(j),
                    ] {
                        let img2 = again.crash_image(second);
                        if let Err(e) = verify(&img2, slots, &o) {
                            panic!("{name}: crash at op {k}/{total} ({image:?}), recovery crash at {j} ({second:?}): {e}");
                        }
                        runs += 1;
                    }
                }
            }
        }
    }
    eprintln!("{name}: {total} crash points, {runs} crash images verified");
    runs
}

#[test]
fn a_crash_at_every_operation_of_the_first_flush_loses_nothing_acknowledged() {
    enumerate(
        "first flush",
        100,
        &[
            Push("http://a/"),
            Push("http://b/"),
            Push("http://a/"),
            Sync,
            Push("http://c/"),
            Flush,
        ],
    );
}

#[test]
fn a_crash_at_every_operation_of_a_merge_into_an_existing_z_is_safe() {
    enumerate(
        "merge into Z",
        100,
        &[
            Push("http://a/"),
            Push("http://b/"),
            Flush,
            Push("http://c/"),
            Push("http://a/"),
            Push("http://d/"),
            Sync,
            Flush,
        ],
    );
}

#[test]
fn an_all_duplicate_batch_and_duplicates_inside_a_batch_are_safe() {
    enumerate(
        "duplicates",
        100,
        &[
            Push("http://a/"),
            Push("http://a/"),
            Push("http://b/"),
            Flush,
            Push("http://b/"),
            Push("http://a/"),
            Sync,
            Flush,
        ],
    );
}

#[test]
fn back_to_back_automatic_flushes_with_pops_are_safe() {
    enumerate(
        "back to back",
        2,
        &[
            Push("http://a/"),
            Push("http://b/"),
            Push("http://c/"),
            Push("http://a/"),
            Pop(2),
            Push("http://d/"),
            Sync,
            Push("http://e/"),
            Pop(1),
            Push("http://b/"),
            Push("http://f/"),
            Flush,
            Pop(10),
        ],
    );
}

#[test]
fn reopen_then_flush_and_group_commit_are_safe() {
    enumerate(
        "reopen then flush",
        100,
        &[
            Push("http://a/"),
            Push("http://b/"),
            Sync,
            Push("http://c/"),
            Close,
            Push("http://d/"),
            Push("http://a/"),
            Flush,
            Pop(3),
        ],
    );
}

#[test]
fn spills_then_a_merge_of_the_runs_are_safe() {
    // One slot per buffer: every push is a flush, a merge while the runs are smaller than Z
    // and a spill otherwise; reopening replays into runs; the final flush merges them all.
    let steps: Vec<Step> = [
        "http://a/",
        "http://b/",
        "http://c/",
        "http://d/",
        "http://a/",
        "http://e/",
        "http://b/",
        "http://f/",
    ]
    .into_iter()
    .map(Push)
    .chain([
        Sync,
        Push("http://g/"),
        Push("http://c/"),
        Close,
        Push("http://h/"),
        Flush,
        Pop(4),
    ])
    .collect();
    enumerate("spills and merge", 1, &steps);
}

#[test]
fn an_io_error_at_any_operation_poisons_and_loses_nothing_acknowledged() {
    let steps = [
        Push("http://a/"),
        Push("http://b/"),
        Sync,
        Push("http://c/"),
        Flush,
        Push("http://a/"),
        Push("http://d/"),
        Sync,
        Flush,
    ];
    let clean = SimDisk::new();
    run(&clean, 2, &steps);
    let total = clean.ops();
    let mut runs = 0usize;
    for k in 1..=total {
        for kind in [FaultKind::Eio, FaultKind::NoSpace, FaultKind::ShortWrite] {
            for sticky in [false, true] {
                let disk = SimDisk::new();
                disk.fail_at(k, kind, sticky);
                let mut o = Observed::default();
                // A fault while creating the sieve must leave a disk that opens correctly too.
                if let Ok(mut sieve) = Sieve::open_with(Arc::new(disk.clone()), opts(2)) {
                    let mut failed = false;
                    for step in &steps {
                        let r = apply(&mut sieve, step, &mut o);
                        if failed {
                            assert!(
                                matches!(r, Err(Error::Poisoned)),
                                "op {k}: a write after an error was accepted"
                            );
                        } else if r.is_err() {
                            failed = true;
                        }
                    }
                }
                // Power loss after the error, then reopen on a healthy disk.
                for image in [
                    CrashImage::KillProcess,
                    CrashImage::DropAll,
                    CrashImage::Random(k),
                ] {
                    let img = disk.crash_image(image);
                    if let Err(e) = verify(&img, 2, &o) {
                        panic!("fault {kind:?} sticky {sticky} at op {k}/{total}, image {image:?}: {e}");
                    }
                    runs += 1;
                }
            }
        }
    }
    eprintln!("I/O errors: {total} operations, {runs} faulted runs verified");
}

#[test]
fn continuing_a_sealed_empty_generation_after_reopen_is_safe() {
    enumerate(
        "continue sealed generation",
        100,
        &[
            Push("http://a/"),
            Flush,
            Close,
            Push("http://b/"),
            Sync,
            Push("http://a/"),
            Push("http://c/"),
            Sync,
            Close,
            Flush,
            Pop(2),
        ],
    );
}
