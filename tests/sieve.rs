//! The sieve against its reference model: exactly once, first-appearance order, durability
//! across clean reopen and process crash, `contains`, the lock, invalid URLs, and the real
//! BFS streams at budgets small enough to force hundreds of flushes.

mod common;

use std::sync::Arc;

use common::{emit_model, shared_lines, ukwa_fixture};
use crivello::storage::sim::CrashImage;
use crivello::storage::SimDisk;
use crivello::{Error, InvalidUrl, Options, Sieve};
use proptest::prelude::*;

fn drain(sieve: &mut Sieve) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let batch = sieve.frontier_next(1000).unwrap();
        if batch.is_empty() {
            return out;
        }
        out.extend(batch);
    }
}

fn run_stream(stream: &[Vec<u8>], opts: Options) -> (Vec<Vec<u8>>, crivello::Stats) {
    let disk = SimDisk::new();
    let mut sieve = Sieve::open_with(Arc::new(disk), opts).unwrap();
    for u in stream {
        sieve.push(u).unwrap();
    }
    sieve.flush().unwrap();
    let out = drain(&mut sieve);
    sieve.frontier_commit().unwrap();
    let stats = sieve.stats().unwrap();
    (out, stats)
}

#[test]
fn the_ukwa_stream_gives_its_expected_file_at_every_budget() {
    let (stream, expected) = ukwa_fixture();
    assert_eq!(
        emit_model(&stream),
        expected,
        "the fixture itself is consistent"
    );
    for slots in [97usize, 1000, 20_000, 1 << 20] {
        for background in [false, true] {
            for lazy in [false, true] {
                let mut opts = Options::new()
                    .slots(slots)
                    .seed(7)
                    .background_flush(background)
                    .frame_bytes(4096);
                if lazy {
                    opts = opts.frontier_low(0);
                }
                let (out, stats) = run_stream(&stream, opts);
                assert!(
                    out == expected,
                    "slots {slots}, background {background}, lazy {lazy}: output differs"
                );
                assert_eq!(stats.distinct, expected.len() as u64);
                assert_eq!(stats.pushed, stream.len() as u64);
                assert_eq!(
                    (stats.runs, stats.unmerged),
                    (0, 0),
                    "flush merges every run"
                );
                if slots == 97 {
                    assert!(stats.flushes > 1000, "{} flushes", stats.flushes);
                    if lazy {
                        // Most buffers are spilled; merges are spaced as Z grows.
                        assert!(
                            stats.merges * 10 < stats.flushes,
                            "{} merges of {} flushes",
                            stats.merges,
                            stats.flushes
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_shared_bfs_stream_gives_its_expected_file() {
    for name in [
        "hollins",
        "california",
        "ukwa-1996-hosts",
        "ukwa-1996-hosts.bfs-all",
    ] {
        let (s, e) = if name.ends_with("all") {
            (
                "ukwa-1996-hosts.bfs-all-stream.txt.xz".to_string(),
                "ukwa-1996-hosts.bfs-all-expected.txt.xz".to_string(),
            )
        } else {
            (
                format!("{name}.bfs-stream.txt.xz"),
                format!("{name}.bfs-expected.txt.xz"),
            )
        };
        let (Some(stream), Some(expected)) = (shared_lines(&s), shared_lines(&e)) else {
            continue;
        };
        for slots in [64usize, 500, 1 << 16] {
            let (out, stats) = run_stream(
                &stream,
                Options::new()
                    .slots(slots)
                    .seed(1)
                    .frontier_low(if slots == 500 { 0 } else { slots as u64 }),
            );
            assert!(out == expected, "{name} with {slots} slots: output differs");
            if slots == 64 {
                assert!(
                    stats.flushes >= 300,
                    "{name}: only {} flushes",
                    stats.flushes
                );
            }
        }
    }
}

#[test]
fn a_real_directory_keeps_everything_across_a_clean_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (stream, expected) = ukwa_fixture();
    let half = stream.len() / 2;
    let mut sieve = Sieve::open(dir.path(), Options::new().slots(5000)).unwrap();
    for u in &stream[..half] {
        sieve.push(u).unwrap();
    }
    let first = sieve.frontier_next(100).unwrap();
    sieve.frontier_commit().unwrap();
    sieve.close().unwrap();

    let mut sieve = Sieve::open(dir.path(), Options::new().slots(3000)).unwrap();
    for u in &stream[half..] {
        sieve.push(u).unwrap();
    }
    sieve.flush().unwrap();
    let mut out = first;
    out.extend(drain(&mut sieve));
    assert!(out == expected);
    assert!(sieve.contains(&stream[0]).unwrap());
    assert!(!sieve.contains(b"http://never.pushed.example/").unwrap());
    sieve.close().unwrap();
}

/// The merge rule of `docs/design.md`: a consumer that keeps the frontier drained gets a merge
/// per buffer; without one, buffers are spilled as runs until they hold as many pushes as Z
/// holds signatures, and never more runs than the limit; `flush` merges them all.
#[test]
fn merges_follow_the_frontier_and_the_run_rules() {
    let url = |i: u32| format!("http://h{}.example/{i}", i % 17).into_bytes();
    let base = Options::new().slots(10).seed(4).background_flush(false);

    // A draining consumer: every flush is a merge, and each URL is readable right after.
    let mut sieve = Sieve::open_with(Arc::new(SimDisk::new()), base.clone()).unwrap();
    let mut read = Vec::new();
    for i in 0..500 {
        sieve.push(&url(i)).unwrap();
        read.extend(sieve.frontier_next(100).unwrap());
    }
    let st = sieve.stats().unwrap();
    assert_eq!(st.merges, st.flushes, "every flush merged");
    assert_eq!((st.runs, st.unmerged), (0, 0));
    assert_eq!(
        read.len(),
        490,
        "all but the buffer in S reached the frontier"
    );

    // No consumer, the frontier rule off: spills, at most max_runs - 1 runs (8 at 1 MiB).
    let lazy = base.memory(1 << 20).frontier_low(0);
    let mut sieve = Sieve::open_with(Arc::new(SimDisk::new()), lazy).unwrap();
    let mut most_runs = 0;
    for i in 0..5000 {
        sieve.push(&url(i)).unwrap();
        let st = sieve.stats().unwrap();
        most_runs = most_runs.max(st.runs);
        // A spill is kept only while the runs hold fewer pushes than Z's signatures.
        assert!(st.runs == 0 || st.unmerged < st.distinct, "{st:?}");
    }
    let st = sieve.stats().unwrap();
    assert!(
        most_runs >= 2,
        "buffers were spilled ({most_runs} runs at most)"
    );
    assert!(most_runs < 8, "the run limit holds ({most_runs} runs)");
    assert!(
        st.merges * 4 < st.flushes,
        "{} merges of {} flushes",
        st.merges,
        st.flushes
    );
    assert!(
        st.emitted < 4990,
        "spilled URLs are not in the frontier before a merge"
    );
    assert!(
        sieve.contains(&url(4985)).unwrap(),
        "contains sees the runs"
    );
    sieve.flush().unwrap();
    let st = sieve.stats().unwrap();
    assert_eq!((st.runs, st.unmerged, st.emitted), (0, 0, 5000));
}

#[test]
fn a_second_opener_gets_the_locked_error() {
    let dir = tempfile::tempdir().unwrap();
    let sieve = Sieve::open(dir.path(), Options::new()).unwrap();
    match Sieve::open(dir.path(), Options::new()) {
        Err(Error::Locked { dir: d }) => assert!(d.contains(&*dir.path().to_string_lossy())),
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second open succeeded"),
    }
    drop(sieve);
    Sieve::open(dir.path(), Options::new())
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn invalid_urls_are_refused_with_the_reason_and_change_nothing() {
    let disk = SimDisk::new();
    let mut sieve = Sieve::open_with(
        Arc::new(disk.clone()),
        Options::new().max_url_len(10).background_flush(false),
    )
    .unwrap();
    sieve.push(b"http://a/").unwrap();
    let ops = disk.ops();
    assert!(matches!(
        sieve.push(b""),
        Err(Error::InvalidUrl(InvalidUrl::Empty))
    ));
    match sieve.push(b"http://toolong/") {
        Err(Error::InvalidUrl(InvalidUrl::TooLong { len: 15, max: 10 })) => {}
        other => panic!("{other:?}"),
    }
    assert!(sieve.push_batch(&[b"http://b/".as_slice(), b""]).is_err());
    // A newline, wherever it is: one URL is one line of `pop`'s output.
    for url in [b"http://c/\n".as_slice(), b"\nhttp:/", b"http:\n//d/"] {
        let at = url.iter().position(|&b| b == b'\n').unwrap();
        match sieve.push(url) {
            Err(Error::InvalidUrl(InvalidUrl::Newline { at: a })) if a == at => {}
            other => panic!("{url:?}: {other:?}"),
        }
        assert!(matches!(
            sieve.push_new(url),
            Err(Error::InvalidUrl(InvalidUrl::Newline { .. }))
        ));
    }
    assert!(sieve
        .push_batch(&[b"http://b/".as_slice(), b"a\rb\nc"])
        .is_err());
    assert_eq!(disk.ops(), ops, "a refused URL wrote nothing");
    sieve.flush().unwrap();
    assert_eq!(drain(&mut sieve), vec![b"http://a/".to_vec()]);
    let st = sieve.stats().unwrap();
    assert_eq!(st.pushed, 1);
    let msg = Error::InvalidUrl(InvalidUrl::TooLong { len: 15, max: 10 }).to_string();
    assert!(msg.contains("15 bytes") && msg.contains("10"), "{msg}");
    let msg = Error::InvalidUrl(InvalidUrl::Newline { at: 7 }).to_string();
    assert!(msg.contains("newline (byte 7)"), "{msg}");
    // A carriage return, a tab or a NUL byte is taken: only a newline would split a line.
    for url in [b"http://e/\r".as_slice(), b"http://e/\t", b"http://e/\0"] {
        sieve.push(url).unwrap();
    }
    sieve.flush().unwrap();
    assert_eq!(drain(&mut sieve).len(), 3);
}

#[test]
fn invalid_options_are_refused() {
    let disk = Arc::new(SimDisk::new());
    for opts in [
        Options::new().memory(1000),
        Options::new().max_url_len(0),
        Options::new().slots(0),
        Options::new().sync(crivello::SyncPolicy::EveryPushes(0)),
    ] {
        assert!(matches!(
            Sieve::open_with(disk.clone(), opts),
            Err(Error::InvalidOption { .. })
        ));
    }
}

#[test]
fn a_directory_holding_other_files_is_not_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    assert!(matches!(
        Sieve::open(dir.path(), Options::new()),
        Err(Error::NotASieve { .. })
    ));
    assert_eq!(
        std::fs::read(dir.path().join("notes.txt")).unwrap(),
        b"mine"
    );
    // Left as it was: not even a lock file was made in it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.txt"]);
}

#[derive(Debug, Clone)]
enum Op {
    Push(u8),
    Sync,
    Flush,
    Read(u8),
    Commit,
    Contains(u8),
    Reopen,
    Kill,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => any::<u8>().prop_map(Op::Push),
        2 => Just(Op::Sync),
        1 => Just(Op::Flush),
        2 => (1u8..20).prop_map(Op::Read),
        1 => Just(Op::Commit),
        2 => any::<u8>().prop_map(Op::Contains),
        1 => Just(Op::Reopen),
        1 => Just(Op::Kill),
    ]
}

/// No cache of recent signatures (every repeat reaches the flush), or one of 1 to 16 entries
/// (many repeats are dropped at push, and many are not).
fn recent_cache() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), Just(8), Just(32), Just(128)]
}

fn url(i: u8) -> Vec<u8> {
    // 64 distinct URLs, so that repeats are frequent.
    format!("http://host{}.example/page/{}", i % 7, i % 64).into_bytes()
}

/// Runs a sequence of operations against the sieve and the model.
fn check_against_model(
    ops: &[Op],
    slots: usize,
    background: bool,
    lazy: bool,
    defer: bool,
    recent: usize,
) {
    let mut disk = SimDisk::new();
    let mut opts = Options::new()
        .slots(slots)
        .seed(3)
        .background_flush(background)
        .defer_merges(defer)
        .recent_cache(recent);
    if background {
        // Frames of a few records: A's thread writes most of them.
        opts = opts.frame_bytes(64);
    }
    if lazy {
        opts = opts.frontier_low(0);
    }
    let mut sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).unwrap();
    let mut urls: Vec<Vec<u8>> = Vec::new(); // pushed, in order
    let mut acked = 0usize;
    let mut committed: Vec<Vec<u8>> = Vec::new(); // read and durably committed
    let mut read: Vec<Vec<u8>> = Vec::new(); // read, not yet committed
    let mut killed = false;
    for op in ops {
        match op {
            Op::Push(i) => {
                sieve.push(&url(*i)).unwrap();
                urls.push(url(*i));
            }
            Op::Sync => {
                sieve.sync().unwrap();
                acked = urls.len();
            }
            Op::Flush => {
                sieve.flush().unwrap();
                acked = urls.len();
                assert_eq!(
                    sieve.frontier_unread() as usize + committed.len() + read.len(),
                    emit_model(&urls).len()
                );
            }
            Op::Read(n) => {
                let got = sieve.frontier_next(*n as usize).unwrap();
                let model = emit_model(&urls);
                let start = committed.len() + read.len();
                assert!(got.len() <= *n as usize);
                assert_eq!(got[..], model[start..start + got.len()], "frontier order");
                read.extend(got);
            }
            Op::Commit => {
                sieve.frontier_commit().unwrap();
                committed.append(&mut read);
            }
            Op::Contains(i) => {
                assert_eq!(sieve.contains(&url(*i)).unwrap(), urls.contains(&url(*i)));
            }
            Op::Reopen => {
                sieve.close().unwrap();
                acked = urls.len();
                read.clear();
                sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).unwrap();
            }
            Op::Kill => {
                killed = true;
                drop(sieve);
                disk = disk.crash_image(CrashImage::KillProcess);
                sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).unwrap();
                read.clear();
                // Some unacknowledged suffix may be lost: find which prefix survived.
                sieve.flush().unwrap();
                let rest = drain(&mut sieve);
                sieve.frontier_rewind();
                let mut f = committed.clone();
                f.extend(rest);
                let k = (acked..=urls.len())
                    .rev()
                    .find(|&k| emit_model(&urls[..k]) == f)
                    .unwrap_or_else(|| {
                        panic!(
                            "F is not the model of any prefix between {acked} and {}",
                            urls.len()
                        )
                    });
                urls.truncate(k);
                acked = k;
            }
        }
    }
    sieve.flush().unwrap();
    let mut f = committed;
    f.extend(read);
    f.extend(drain(&mut sieve));
    assert_eq!(f, emit_model(&urls));
    if !killed {
        // Every push counted, repeats dropped by the cache of recent signatures included,
        // across clean reopens.
        assert_eq!(sieve.stats().unwrap().pushed, urls.len() as u64);
    }
    sieve.close().unwrap();
}

proptest! {
    // 200 cases each; `PROPTEST_CASES` raises it (the long tier).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_sieve_matches_the_model_inline(ops in proptest::collection::vec(op(), 1..200), slots in 1usize..40, lazy: bool, recent in recent_cache()) {
        check_against_model(&ops, slots, false, lazy, false, recent);
    }

    /// Merges deferred until waited for: full buffers are spilled beside the merge under way
    /// and committed when it ends, deterministically.
    #[test]
    fn the_sieve_matches_the_model_with_spills_beside_merges(ops in proptest::collection::vec(op(), 1..200), slots in 1usize..40, lazy: bool, recent in recent_cache()) {
        check_against_model(&ops, slots, false, lazy, true, recent);
    }

    #[test]
    fn the_sieve_matches_the_model_with_background_flushes(ops in proptest::collection::vec(op(), 1..200), slots in 1usize..40, lazy: bool, recent in recent_cache()) {
        check_against_model(&ops, slots, true, lazy, false, recent);
    }
}

#[test]
fn the_frontier_rolls_over_segments_and_deletes_consumed_ones() {
    let disk = SimDisk::new();
    let opts = Options::new().memory(16 << 20).seed(9);
    let mut sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).unwrap();
    // F's frames are compressed: 64 bytes of noise per URL keep its segments large.
    let url = |i: u64| {
        let mut u = format!("http://host{}.example.org/{i:012}/", i % 1000).into_bytes();
        let mut x = i;
        for _ in 0..8 {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            u.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        // A URL holds no newline.
        for b in u.iter_mut().filter(|b| **b == b'\n') {
            *b = b'n';
        }
        u
    };
    let n = 1_100_000u64; // about 75 MB of frontier once coded: two F segments
    for i in 0..n {
        sieve.push(&url(i)).unwrap();
        if i % 3 == 0 {
            sieve.push(&url(i / 2)).unwrap();
        }
    }
    sieve.flush().unwrap();
    let f_segments = |d: &SimDisk| d.files().iter().filter(|f| f.starts_with("f-")).count();
    assert!(f_segments(&disk) >= 2, "{:?}", disk.files());
    let mut next = 0u64;
    while next < n / 2 {
        for u in sieve.frontier_next(10_000).unwrap() {
            assert_eq!(u, url(next));
            next += 1;
        }
        sieve.frontier_commit().unwrap();
    }
    sieve.close().unwrap();
    let mut sieve = Sieve::open_with(Arc::new(disk.clone()), opts).unwrap();
    loop {
        let batch = sieve.frontier_next(10_000).unwrap();
        if batch.is_empty() {
            break;
        }
        for u in batch {
            assert_eq!(u, url(next));
            next += 1;
        }
        sieve.frontier_commit().unwrap();
    }
    assert_eq!(next, n);
    assert_eq!(
        f_segments(&disk),
        1,
        "consumed segments are deleted: {:?}",
        disk.files()
    );
    let st = sieve.stats().unwrap();
    assert_eq!(
        (st.emitted, st.consumed, st.pending, st.distinct),
        (n, n, 0, n)
    );
}

/// What a directory holds, by kind of file.
fn kinds(dir: &std::path::Path) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let kind = match name.split_once('-') {
            Some((k, _)) if k.len() == 1 => k.to_string(),
            _ => name,
        };
        *out.entry(kind).or_insert(0) += 1;
    }
    out
}

#[test]
fn merges_remove_what_they_supersede() {
    for background in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = || {
            Options::new()
                .slots(40)
                .seed(2)
                .frontier_low(0)
                .background_flush(background)
        };
        let mut sieve = Sieve::open(dir.path(), opts()).unwrap();
        // Many spills and merges: 2,000 pushes of 700 URLs through 40 slots.
        for i in 0..2000u64 {
            sieve
                .push(format!("http://h{}/{}", i % 7, i * 31 % 700).as_bytes())
                .unwrap();
            if i % 500 == 499 {
                sieve.flush().unwrap();
            }
        }
        sieve.flush().unwrap();
        let stats = sieve.stats().unwrap();
        assert!(stats.merges >= 4, "{stats:?}");
        sieve.close().unwrap();
        // One A generation (the current one), one Z segment, no runs, no scratch file.
        let k = kinds(dir.path());
        assert_eq!(k.get("a"), Some(&1), "background {background}: {k:?}");
        assert_eq!(k.get("z"), Some(&1), "background {background}: {k:?}");
        assert_eq!(k.get("r"), None, "background {background}: {k:?}");
        assert_eq!(k.get("merge.tmp"), None, "background {background}: {k:?}");
        let mut sieve = Sieve::open(dir.path(), opts()).unwrap();
        assert_eq!(drain(&mut sieve).len(), 700);
        sieve.close().unwrap();
    }
}

#[test]
fn a_cache_of_recent_signatures_is_checked_against_the_budget_with_slots_too() {
    let r = Sieve::open_with(
        Arc::new(SimDisk::new()),
        Options::new().slots(10).recent_cache(usize::MAX),
    );
    assert!(
        matches!(
            r,
            Err(Error::InvalidOption {
                option: "recent_cache",
                ..
            })
        ),
        "{:?}",
        r.err()
    );
}

#[test]
fn stats_and_contains_see_every_push_at_once() {
    // With the cache of recent signatures, a push is decided at the next call: `stats` and
    // `contains` must decide it first, whether it turns out a repeat or new.
    for background in [false, true] {
        let disk = SimDisk::new();
        let opts = Options::new()
            .slots(8)
            .recent_cache(64)
            .seed(5)
            .background_flush(background);
        let mut sieve = Sieve::open_with(Arc::new(disk), opts).unwrap();
        for i in 0..200u64 {
            let url = format!("http://h/{}", i * 7 % 23);
            sieve.push(url.as_bytes()).unwrap();
            let st = sieve.stats().unwrap();
            assert_eq!(st.pushed, i + 1, "background {background}, push {i}");
            assert!(st.buffered <= i + 1);
            assert!(sieve.contains(url.as_bytes()).unwrap(), "push {i}");
        }
        sieve.flush().unwrap();
        assert_eq!(drain(&mut sieve).len(), 23);
    }
}
