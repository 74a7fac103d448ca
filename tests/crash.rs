//! Crash consistency on the simulated disk: every crash point of canonical workloads is
//! enumerated, and at each one several disk images (process kill, power loss dropping every
//! unsynced write, data kept but directory entries lost, random tears) are reopened and
//! checked against the model. Recovery itself is crashed at each of its operations. Every
//! write, sync and directory operation, and every read, also fails in turn (EIO, ENOSPC,
//! short writes; once or for good), and every read is made short.
//!
//! Flushes run inline here, so that the sequence of I/O operations is deterministic.

use std::sync::Arc;

use crivello::internals::{apply, run, verify, Observed, Step};
use crivello::storage::sim::{CrashImage, FaultKind};
use crivello::storage::SimDisk;
use crivello::{Error, Options, Sieve};
use Step::*;

/// Merges happen only when due or on `flush`, so that buffers are also spilled as runs.
fn opts(slots: usize) -> Options {
    Options::new()
        .slots(slots)
        .seed(11)
        .background_flush(false)
        .frontier_low(0)
}

/// A push of a literal URL.
fn push(url: &str) -> Step {
    Push(url.as_bytes().to_vec())
}

fn images() -> Vec<CrashImage> {
    let mut v = vec![
        CrashImage::KillProcess,
        CrashImage::DropAll,
        CrashImage::KeepDataDropDir,
        CrashImage::ZeroedData,
    ];
    // `CRIVELLO_RANDOM_IMAGES` raises the number of random tears per point (the long tier).
    let random: u64 = std::env::var("CRIVELLO_RANDOM_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    v.extend((1..=random).map(CrashImage::Random));
    v
}

/// How many A generations a run created in the file of a superseded one.
fn reused_generations(disk: &SimDisk) -> usize {
    disk.trace()
        .iter()
        .filter(|op| matches!(op, crivello::storage::sim::Op::Rename(from, to) if from.starts_with("a-") && to.starts_with("a-")))
        .count()
}

/// Enumerates every crash point of a workload; returns the number of (point, image) runs.
fn enumerate(name: &str, slots: usize, steps: &[Step]) -> usize {
    enumerate_with(name, &opts(slots), steps)
}

/// [`enumerate`] with any options.
fn enumerate_with(name: &str, opts: &Options, steps: &[Step]) -> usize {
    let clean = SimDisk::new();
    let o = run(&clean, opts, steps);
    assert_eq!(
        o.pushed.len(),
        steps.iter().filter(|s| matches!(s, Push(_))).count(),
        "{name}: clean run failed"
    );
    verify(&clean, opts, &o).unwrap_or_else(|e| panic!("{name}: clean run: {e}"));
    let total = clean.ops();
    let mut runs = 0;
    for k in 1..=total {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let o = run(&disk, opts, steps);
        assert!(disk.has_crashed(), "{name}: no crash at op {k} of {total}");
        for image in images() {
            let img = disk.crash_image(image);
            if let Err(e) = verify(&img, opts, &o) {
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
                drop(Sieve::open_with(Arc::new(probe.clone()), opts.clone()));
                let recovery_ops = probe.ops() - before;
                for j in 1..=recovery_ops {
                    let again = img.crash_image(CrashImage::KillProcess);
                    again.crash_at(j);
                    let _ = Sieve::open_with(Arc::new(again.clone()), opts.clone());
                    for second in [
                        CrashImage::KillProcess,
                        CrashImage::DropAll,
                        CrashImage::Random(j),
                    ] {
                        let img2 = again.crash_image(second);
                        if let Err(e) = verify(&img2, opts, &o) {
                            panic!("{name}: crash at op {k}/{total} ({image:?}), recovery crash at {j} ({second:?}): {e}");
                        }
                        runs += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "{name}: {total} crash points, {runs} crash images verified, {} generations in reused files",
        reused_generations(&clean)
    );
    runs
}

#[test]
fn a_crash_at_every_operation_of_the_first_flush_loses_nothing_acknowledged() {
    enumerate(
        "first flush",
        100,
        &[
            push("http://a/"),
            push("http://b/"),
            push("http://a/"),
            Sync,
            push("http://c/"),
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
            push("http://a/"),
            push("http://b/"),
            Flush,
            push("http://c/"),
            push("http://a/"),
            push("http://d/"),
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
            push("http://a/"),
            push("http://a/"),
            push("http://b/"),
            Flush,
            push("http://b/"),
            push("http://a/"),
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
            push("http://a/"),
            push("http://b/"),
            push("http://c/"),
            push("http://a/"),
            Pop(2),
            push("http://d/"),
            Sync,
            push("http://e/"),
            PopLines(1),
            push("http://b/"),
            push("http://f/"),
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
            push("http://a/"),
            push("http://b/"),
            Sync,
            push("http://c/"),
            Close,
            push("http://d/"),
            push("http://a/"),
            Flush,
            Pop(3),
        ],
    );
}

/// Eight pushes with two repeats: with one or two slots, several buffers fill.
const EIGHT_PUSHES: [&str; 8] = [
    "http://a/",
    "http://b/",
    "http://c/",
    "http://d/",
    "http://a/",
    "http://e/",
    "http://b/",
    "http://f/",
];

/// [`EIGHT_PUSHES`], then `rest`.
fn eight_pushes_then(rest: impl IntoIterator<Item = Step>) -> Vec<Step> {
    EIGHT_PUSHES.into_iter().map(push).chain(rest).collect()
}

/// Eight pushes, a sync, two more, a close, one more, a flush and pops: spills, recovery
/// into runs, and a final flush that merges them all.
fn spills_and_merge_steps() -> Vec<Step> {
    eight_pushes_then([
        Sync,
        push("http://g/"),
        push("http://c/"),
        Close,
        push("http://h/"),
        Flush,
        Pop(4),
    ])
}

#[test]
fn spills_then_a_merge_of_the_runs_are_safe() {
    // One slot per buffer: every push is a flush, a merge while the runs are smaller than Z
    // and a spill otherwise; reopening replays into runs; the final flush merges them all.
    let steps = spills_and_merge_steps();
    enumerate("spills and merge", 1, &steps);
}

/// Whether a run created a merge's scratch file (the runs' new positions written to disk).
fn wrote_scratch(disk: &SimDisk) -> bool {
    disk.trace()
        .iter()
        .any(|op| matches!(op, crivello::storage::sim::Op::Create(name) if name == "merge.tmp"))
}

#[test]
fn a_merge_whose_runs_positions_go_to_the_scratch_file_is_safe() {
    // As above, with no room in memory for the runs' new positions: every merge of runs
    // writes them to `merge.tmp` and reads them back, so a crash at each of those operations,
    // and a scratch file left behind by one, are reopened.
    let opts = opts(2).merge_positions_in_memory(0);
    let steps = spills_and_merge_steps();
    let clean = SimDisk::new();
    run(&clean, &opts, &steps);
    assert!(wrote_scratch(&clean), "no merge wrote the scratch file");
    enumerate_with("positions in the scratch file", &opts, &steps);
}

#[test]
fn generations_written_over_superseded_ones_are_safe() {
    // Three slots per buffer and a sync after every push: each generation holds three
    // frames of rising epochs and its end frame. After the first merges new generations
    // take the files of superseded ones, and with URLs of one length their frames fall
    // exactly on the old ones: a reader must stop at the first old frame, or it would replay
    // an old URL as a new one. Then URLs longer and shorter than the old ones, and a reopen.
    let mut steps = Vec::new();
    for c in 'a'..='r' {
        steps.extend([push(&format!("http://{c}/")), Sync]);
    }
    steps.extend([
        push("http://a/"),
        push("http://long-one/"),
        Sync,
        push("http://s/"),
        Close,
        push("http://t/"),
        push("http://u/"),
        Pop(5),
        push("http://v/"),
        Flush,
        Pop(30),
    ]);
    let clean = SimDisk::new();
    run(&clean, &opts(3), &steps);
    assert!(
        reused_generations(&clean) >= 3,
        "the workload must write generations over superseded ones: {:?}",
        clean.trace()
    );
    enumerate("reused generations", 3, &steps);
}

#[test]
fn repeats_dropped_by_the_cache_of_recent_signatures_are_safe() {
    // A cache of 8 signatures drops most repeats at push; a flush with only dropped repeats
    // since the last one and a close count them in the manifest alone.
    let steps = eight_pushes_then([
        Sync,
        push("http://a/"),
        push("http://c/"),
        Flush,
        push("http://a/"),
        push("http://b/"),
        Flush,
        push("http://g/"),
        push("http://g/"),
        Close,
        push("http://h/"),
        push("http://d/"),
        Pop(10),
        Flush,
        Pop(10),
    ]);
    enumerate_with("recent cache", &opts(2).recent_cache(64), &steps);
}

#[test]
fn power_loss_at_every_operation_with_background_flushes_is_safe() {
    // The default configuration: flushes on their own thread, and A's frames (one record
    // each here) written by a thread of their own while the pushing thread fills the next
    // generation. The I/O order varies from run to run, so each crash point is the k-th
    // operation of whatever order that run took: a later generation's frames may reach the
    // disk before the end frame and fsync of the generation a flush is closing, and a power
    // loss may keep the first and drop the second. Recovery must then end the push stream
    // at the generation without its end frame (a suffix lost, never a hole).
    let opts = Options::new()
        .slots(4)
        .seed(11)
        .frame_bytes(1)
        .frontier_low(0);
    let mut steps = Vec::new();
    for i in 0..24 {
        steps.push(Push(format!("http://h{}/p{}", i % 5, i % 11).into_bytes()));
        if i % 5 == 4 {
            steps.push(Sync);
        }
        if i % 9 == 8 {
            steps.push(Pop(3));
        }
    }
    steps.push(Flush);
    let clean = SimDisk::new();
    let o = run(&clean, &opts, &steps);
    verify(&clean, &opts, &o).unwrap();
    let total = clean.ops();
    let mut runs = 0usize;
    for k in 1..=total + total / 4 {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let o = run(&disk, &opts, &steps);
        if !disk.has_crashed() {
            continue;
        }
        let mut images = vec![CrashImage::DropAll, CrashImage::ZeroedData];
        images.extend((1..=16).map(|s| CrashImage::Random(k * 32 + s)));
        for image in images {
            let img = disk.crash_image(image);
            if let Err(e) = verify(&img, &opts, &o) {
                panic!("background: crash at op {k}/{total}, image {image:?}: {e}");
            }
            runs += 1;
        }
    }
    eprintln!("background flushes: about {total} crash points, {runs} crash images verified");
}

/// The workload of the I/O fault tests: spills, merges, a reopen and pops.
fn fault_steps() -> Vec<Step> {
    vec![
        push("http://a/"),
        push("http://b/"),
        Sync,
        push("http://c/"),
        Flush,
        push("http://a/"),
        push("http://d/"),
        Sync,
        Pop(2),
        push("http://e/"),
        push("http://a/"),
        Flush,
        Close,
        push("http://f/"),
        PopLines(10),
        Flush,
    ]
}

#[test]
fn an_io_error_at_any_operation_poisons_and_loses_nothing_acknowledged() {
    write_faults("I/O errors", &opts(2), &fault_steps());
}

#[test]
fn an_io_error_with_positions_in_the_scratch_file_loses_nothing_acknowledged() {
    let opts = opts(2).merge_positions_in_memory(0);
    let clean = SimDisk::new();
    run(&clean, &opts, &fault_steps());
    assert!(wrote_scratch(&clean), "no merge wrote the scratch file");
    write_faults(
        "I/O errors, positions in the scratch file",
        &opts,
        &fault_steps(),
    );
}

#[test]
fn an_io_error_with_the_cache_of_recent_signatures_loses_nothing_acknowledged() {
    // The cache drops the repeats of a, so their records are taken back from A.
    write_faults(
        "I/O errors, recent cache",
        &opts(2).recent_cache(64),
        &fault_steps(),
    );
}

/// Fails each mutating operation of `steps` in turn (EIO, ENOSPC, a short write; once or for
/// good): every later write of that sieve is refused as poisoned, and the disk, after a
/// power loss, reopens to a store that keeps every acknowledged push.
fn write_faults(name: &str, opts: &Options, steps: &[Step]) {
    let clean = SimDisk::new();
    run(&clean, opts, steps);
    let total = clean.ops();
    let mut runs = 0usize;
    for k in 1..=total {
        for kind in [FaultKind::Eio, FaultKind::NoSpace, FaultKind::ShortWrite] {
            for sticky in [false, true] {
                let disk = SimDisk::new();
                disk.fail_at(k, kind, sticky);
                let o = run_on_after_error(&disk, opts, steps, k);
                // Power loss after the error, then reopen on a healthy disk.
                for image in [
                    CrashImage::KillProcess,
                    CrashImage::DropAll,
                    CrashImage::Random(k),
                ] {
                    let img = disk.crash_image(image);
                    if let Err(e) = verify(&img, opts, &o) {
                        panic!("{name}: fault {kind:?} sticky {sticky} at op {k}/{total}, image {image:?}: {e}");
                    }
                    runs += 1;
                }
            }
        }
    }
    eprintln!("{name}: {total} operations, {runs} faulted runs verified");
}

/// Runs `steps` on `disk` and goes on after the first error: every later step that writes
/// must be refused as poisoned (`Close` ends the run: a poisoned sieve is not reopened).
fn run_on_after_error(disk: &SimDisk, opts: &Options, steps: &[Step], k: u64) -> Observed {
    let mut o = Observed::default();
    // A fault while creating the sieve must leave a disk that opens correctly too.
    let Ok(mut sieve) = Sieve::open_with(Arc::new(disk.clone()), opts.clone()) else {
        return o;
    };
    let mut failed = false;
    for step in steps {
        let r = match step {
            Close if failed => return o,
            Close => match sieve.close() {
                Ok(()) => {
                    o.acked = o.pushed.len();
                    match Sieve::open_with(Arc::new(disk.clone()), opts.clone()) {
                        Ok(s) => {
                            sieve = s;
                            continue;
                        }
                        Err(_) => return o,
                    }
                }
                Err(_) => return o,
            },
            // A pop only reads and commits its cursor: after an error it may be refused
            // or fail either way; it must not be accepted.
            step => apply(&mut sieve, step, &mut o),
        };
        if failed {
            assert!(
                matches!(r, Err(Error::Poisoned)),
                "op {k}: {step:?} after an error was accepted: {r:?}"
            );
        } else if r.is_err() {
            failed = true;
        }
    }
    o
}

#[test]
fn a_read_error_at_any_read_loses_nothing_acknowledged() {
    // Reads of A by a merge's emission, of runs and Z by a merge, of F by pops, and every
    // read of an open after a close: each fails in turn, once or for good. The workload stops
    // at its first error, and the disk after a power loss reopens to a sound store that
    // keeps every acknowledged push and never gives back a committed read.
    for (name, opts) in [
        ("read errors", opts(2)),
        ("read errors, recent cache", opts(2).recent_cache(64)),
        (
            "read errors, positions in the scratch file",
            opts(2).merge_positions_in_memory(0),
        ),
    ] {
        let steps = fault_steps();
        let clean = SimDisk::new();
        let want = run(&clean, &opts, &steps);
        if name.ends_with("scratch file") {
            assert!(
                wrote_scratch(&clean),
                "{name}: no merge wrote the scratch file"
            );
        }
        let total = clean.reads();
        assert!(total > 20, "{name}: only {total} reads");
        let mut runs = 0usize;
        for k in 1..=total {
            for sticky in [false, true] {
                let disk = SimDisk::new();
                disk.fail_read_at(k, sticky);
                let o = run(&disk, &opts, &steps);
                // Every failed read is reported: the run stops short of the clean one.
                let seen = |o: &Observed| (o.pushed.len(), o.consumed.len(), o.acked, o.emitted);
                assert!(
                    seen(&o) != seen(&want),
                    "{name}: read {k}/{total} failed (sticky {sticky}) and nothing reported it"
                );
                for image in [CrashImage::KillProcess, CrashImage::DropAll] {
                    let img = disk.crash_image(image);
                    if let Err(e) = verify(&img, &opts, &o) {
                        panic!("{name}: read {k}/{total} fails (sticky {sticky}), image {image:?}: {e}");
                    }
                    runs += 1;
                }
            }
        }
        eprintln!("{name}: {total} reads, each failure reported, {runs} faulted runs verified");
    }
}

#[test]
fn short_reads_give_the_same_results() {
    // Every read returns at most half of what it asks for: what the workload sees and what
    // it leaves on disk are the same as with whole reads.
    let steps = fault_steps();
    let clean = SimDisk::new();
    let want = run(&clean, &opts(2), &steps);
    let disk = SimDisk::new();
    disk.set_short_reads(true);
    let got = run(&disk, &opts(2), &steps);
    assert_eq!(got.pushed, want.pushed);
    assert_eq!(got.consumed, want.consumed);
    assert_eq!((got.acked, got.emitted), (want.acked, want.emitted));
    assert!(disk.reads() > clean.reads(), "no read was short");
    assert_eq!(disk.files(), clean.files());
    for f in clean.files() {
        assert!(disk.content(&f) == clean.content(&f), "{f} differs");
    }
    verify(&disk, &opts(2), &got).unwrap();
}

#[test]
fn continuing_a_sealed_empty_generation_after_reopen_is_safe() {
    enumerate(
        "continue sealed generation",
        100,
        &[
            push("http://a/"),
            Flush,
            Close,
            push("http://b/"),
            Sync,
            push("http://a/"),
            push("http://c/"),
            Sync,
            Close,
            Flush,
            Pop(2),
        ],
    );
}

#[test]
fn spills_beside_a_merge_under_way_are_safe() {
    // Merges are deferred until waited for, as if the flush thread were slow: the buffers that
    // fill meanwhile are spilled by the pushing thread and committed when the merge ends; a
    // crash before that leaves orphan runs and A generations that recovery replays.
    let steps = eight_pushes_then([
        Sync,
        push("http://g/"),
        push("http://h/"),
        push("http://c/"),
        push("http://i/"),
        push("http://j/"),
        Pop(2),
        Close,
        push("http://k/"),
        Flush,
        PopLines(10),
    ]);
    enumerate_with(
        "spills beside a merge",
        &opts(2).frontier_low(2).defer_merges(true),
        &steps,
    );
}
