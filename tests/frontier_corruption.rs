//! Bit flips, truncations and zeroed sectors of every file kind of the frontier (J, its
//! checkpoint, the Q runs): the outcome is a corruption error naming the file, which `check`
//! reports too, or the fully correct state — never a panic, never a queue silently changed.
//!
//! The one exception is that of A, documented in `docs/design.md` ("Torn tails"): damage in
//! the last frames of the newest J generation cannot be told from a torn write; they are
//! dropped (and `check` lists the torn tail), and the state is one the store was in before
//! (a cut exactly at a frame boundary looks like a crash before those frames were written).

use std::collections::BTreeMap;
use std::sync::Arc;

use crivello::queues::ManualClock;
use crivello::storage::sim::{CrashImage, Rng};
use crivello::storage::SimDisk;
use crivello::{check_storage, Discovered, Error, Frontier, Options, Policy};

const FLIPS_PER_KIND: usize = 500;
const TRUNCATIONS_PER_KIND: usize = 100;
/// Sectors (512 bytes, aligned) overwritten with zeros, as a torn or lost write leaves them.
const ZEROED_SECTORS_PER_KIND: usize = 100;

/// Small buffers, Q runs compacted when 3 wait, and a checkpoint every 2 KiB of J.
fn opts() -> Options {
    Options::new()
        .slots(16)
        .seed(5)
        .background_flush(false)
        .frontier_low(0)
        .queue_runs(3)
        .journal_bytes(2048)
}

const T0: u64 = 1_000_000;

fn open(disk: &SimDisk, at: u64) -> Result<Frontier, Error> {
    Frontier::open_with(
        Arc::new(disk.clone()),
        opts(),
        Arc::new(ManualClock::new(at)),
    )
}

/// What a frontier holds, as a crawler sees it: URLs done, then every URL still to serve,
/// queue by queue in the order served.
type State = (u64, BTreeMap<Vec<u8>, Vec<Vec<u8>>>);

/// Opens the store an hour after the workload (every lease expired) and serves everything.
fn outcome(disk: &SimDisk) -> Result<State, Error> {
    let clock = Arc::new(ManualClock::new(T0 + 3_600_000));
    let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone())?;
    let done = f.stats()?.done;
    let mut queues: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    loop {
        let got = f.lease(usize::MAX, None, 1_000)?;
        if got.is_empty() {
            break;
        }
        for l in got {
            assert!(f.done(l.token, 0)?, "a lease just handed out ends");
            queues.entry(l.key).or_default().push(l.url);
        }
        clock.advance(1);
    }
    Ok((done, queues))
}

/// A crawl that leaves Q runs, J generations and a checkpoint; returns its disk, the state
/// it ends in, and every state it was in after a change.
fn store() -> (SimDisk, State, Vec<State>) {
    let disk = SimDisk::new();
    let f = open(&disk, T0).expect("create");
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 0,
            ..Policy::default()
        },
    )
    .unwrap();
    let mut last = None;
    let mut history = vec![disk.crash_image(CrashImage::KillProcess)];
    for round in 0..12u32 {
        let urls: Vec<String> = (0..30u32)
            .map(|i| format!("http://h{}.test/{round}/{i}", (i * 7 + round) % 9))
            .collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        history.push(disk.crash_image(CrashImage::KillProcess));
        f.flush().unwrap();
        history.push(disk.crash_image(CrashImage::KillProcess));
        let leased = f.lease(4, None, 60_000).unwrap();
        history.push(disk.crash_image(CrashImage::KillProcess));
        for (k, l) in leased.iter().enumerate() {
            match k % 4 {
                0 | 1 => assert!(f.done(l.token, 3).unwrap()),
                2 => assert!(f.retry(l.token, 3).unwrap()),
                _ => last = Some(l.token),
            }
            history.push(disk.crash_image(CrashImage::KillProcess));
        }
    }
    let stats = f.stats().unwrap();
    assert!(
        stats.done > 0 && stats.leased > 0 && stats.runs > 0,
        "{stats:?}"
    );
    // The last change: a done of a lease still in force.
    assert!(f.done(last.expect("a lease kept"), 3).unwrap());
    f.close().unwrap();
    let files = disk.files();
    for kind in ["j-", "q-", "CHECKPOINT"] {
        assert!(
            files.iter().any(|f| f.starts_with(kind)),
            "no {kind} file in {files:?}"
        );
    }
    let end = outcome(&disk.crash_image(CrashImage::KillProcess)).expect("clean");
    let history: Vec<State> = history
        .iter()
        .map(|img| outcome(img).expect("clean before"))
        .collect();
    assert!(Some(&end) != history.last(), "the last change shows");
    (disk, end, history)
}

#[test]
fn every_flip_and_truncation_of_the_frontiers_files_is_caught_or_harmless() {
    let (disk, expected, history) = store();
    let files = disk.files();
    let newest_j = files
        .iter()
        .filter(|f| f.starts_with("j-"))
        .max()
        .cloned()
        .unwrap();
    let mut rng = Rng::new(7);
    let mut tally = BTreeMap::<(&str, &str, &str), usize>::new();
    for kind in ["j-", "q-", "CHECKPOINT"] {
        let candidates: Vec<&String> = files.iter().filter(|f| f.starts_with(kind)).collect();
        for trial in 0..FLIPS_PER_KIND + TRUNCATIONS_PER_KIND + ZEROED_SECTORS_PER_KIND {
            let name = candidates[rng.below(candidates.len() as u64) as usize];
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
                let start = rng.below(len.div_ceil(512)) as usize * 512;
                let end = (start + 512).min(c.len());
                if c[start..end].iter().all(|&b| b == 0) {
                    c.iter_mut().for_each(|b| *b = 0);
                } else {
                    c[start..end].iter_mut().for_each(|b| *b = 0);
                }
                img.set_content(name, c);
                "zero"
            };
            let report = check_storage(Arc::new(img.crash_image(CrashImage::KillProcess))).unwrap();
            let verdict = match outcome(&img) {
                Err(Error::Corrupt { file, .. }) => {
                    assert!(files.contains(&file), "the error names a real file: {file}");
                    assert!(
                        !report.is_sound(),
                        "{what} of {name}: check missed what open found"
                    );
                    "corrupt"
                }
                Err(e) => panic!("{what} of {name}: not a corruption error: {e}"),
                Ok(s) if s == expected => "harmless",
                Ok(s) => {
                    assert!(
                        name == &newest_j && history.contains(&s),
                        "{what} of {name}: a wrong state, silently"
                    );
                    if what == "truncate" {
                        "cut of J's tail"
                    } else {
                        assert!(
                            !report.torn_tails.is_empty() || !report.is_sound(),
                            "{what} of {name}: check did not list the torn tail"
                        );
                        "torn tail"
                    }
                }
            };
            *tally.entry((kind, verdict, what)).or_default() += 1;
        }
    }
    eprintln!("{tally:?}");
    for kind in ["j-", "q-", "CHECKPOINT"] {
        assert!(
            tally
                .iter()
                .any(|((k, v, _), n)| *k == kind && *v == "corrupt" && *n > 0),
            "no damage of {kind} was caught: {tally:?}"
        );
    }
}
