//! Moving queues between frontiers: an export carries everything a queue holds, an import
//! sets it whole in one durable commit, once per transfer, and a URL seen before the move is
//! known after it.

use std::collections::HashSet;
use std::sync::Arc;

use crivello::queues::ManualClock;
use crivello::storage::SimDisk;
use crivello::{Discovered, Error, Frontier, Known, Options, Policy, QueueExport};

const START: u64 = 5_000_000;

fn opts(seed: u64) -> Options {
    Options::new()
        .slots(16)
        .seed(seed)
        .background_flush(false)
        .frontier_low(0)
        .queue_runs(3)
        .journal_bytes(2048)
}

fn open(disk: &SimDisk, seed: u64, clock: &Arc<ManualClock>) -> Result<Frontier, Error> {
    Frontier::open_with(Arc::new(disk.clone()), opts(seed), clock.clone())
}

fn url(host: u32, i: u32) -> String {
    format!("http://h{host}.test/{i}")
}

fn push(f: &Frontier, crawl: &str, urls: &[String]) {
    let items: Vec<Discovered<'_>> = urls
        .iter()
        .map(|u| Discovered {
            metadata: u.as_bytes(),
            ..Discovered::url(u.as_bytes())
        })
        .collect();
    f.push(crawl, &items).expect("push");
}

/// The queues of the odd hosts: the ones that move.
fn odd(_crawl: &str, key: &[u8]) -> bool {
    key.starts_with(b"h") && (key[1] - b'0') % 2 == 1
}

fn export(f: &Frontier, select: fn(&str, &[u8]) -> bool) -> Vec<QueueExport> {
    let mut out = Vec::new();
    let n = f
        .export(select, |q| {
            out.push(q);
            Ok(())
        })
        .expect("export");
    assert_eq!(n as usize, out.len());
    out.sort_by(|a, b| (&a.crawl, &a.key).cmp(&(&b.crawl, &b.key)));
    out
}

/// A source frontier whose queues hold URLs in every state: done (some only in archives
/// after compactions), leased, returned, to fetch again, waiting, skipped by a known update;
/// with a policy and a block of their own, in two crawls.
fn source(disk: &SimDisk, clock: &Arc<ManualClock>) -> Frontier {
    let f = open(disk, 3, clock).expect("open the source");
    for round in 0..6 {
        let urls: Vec<String> = (0..6)
            .flat_map(|h| (0..4).map(move |i| url(h, round * 4 + i)))
            .collect();
        push(&f, "", &urls);
        push(&f, "other", &urls[..8]);
        f.flush().unwrap();
        // Two hand-outs per queue each round: one done, one back or to fetch again.
        for l in f.lease(100, Some(1), 60_000).unwrap() {
            f.done(l.token, 5).unwrap();
        }
        clock.advance(10);
    }
    assert!(f.stats().unwrap().runs < 6, "the runs were compacted");
    let mut held = f.lease(100, Some(1), 60_000).unwrap();
    held.sort_by(|a, b| a.url.cmp(&b.url));
    for (k, l) in held.iter().enumerate() {
        match k % 3 {
            0 => assert!(f.retry(l.token, 3).unwrap()),
            1 => assert!(f.refetch(l.token, 3, START + 3_600_000).unwrap()),
            _ => {} // still leased
        }
    }
    f.set_policy(
        "",
        Some(b"h1.test"),
        Policy {
            delay_ms: 250,
            per_queue: 2,
            ..Policy::default()
        },
    )
    .unwrap();
    f.block("", b"h3.test", START + 120_000).unwrap();
    // A queue in the middle of a burst: two URLs leased at once, one done (the ratio rule
    // counts the burst's fetch time).
    f.set_policy(
        "",
        Some(b"h7.test"),
        Policy {
            ratio_ppm: 500_000,
            per_queue: 2,
            ..Policy::default()
        },
    )
    .unwrap();
    push(&f, "", &(0..3).map(|i| url(7, i)).collect::<Vec<_>>());
    f.flush().unwrap();
    let burst = f
        .lease_with(&crivello::LeaseRequest {
            max_urls: 10,
            max_queues: 1,
            per_queue: Some(2),
            ttl_ms: 60_000,
            crawl: None,
            key: Some(b"h7.test".to_vec()),
        })
        .unwrap();
    assert_eq!(burst.len(), 2);
    assert!(f.done(burst[0].token, 7).unwrap());
    // A waiting URL known to be done: skipped in its queue.
    let skipped = url(5, 23);
    f.update(
        "",
        &[Known {
            url: skipped.as_bytes(),
            key: None,
            metadata: b"",
            refetch_ms: 0,
        }],
    )
    .unwrap();
    f
}

#[test]
fn queues_move_with_every_state_and_their_urls_stay_known() {
    let clock = Arc::new(ManualClock::new(START));
    let sdisk = SimDisk::new();
    let s = source(&sdisk, &clock);
    let moving = export(&s, odd);
    // The same queues found by their keys (and a key with no queue, left out).
    let mut keys: Vec<(&str, &[u8])> = moving.iter().map(|q| (&q.crawl[..], &q.key[..])).collect();
    keys.push(("", b"nowhere.test"));
    let mut by_key = Vec::new();
    assert_eq!(
        s.export_queues(&keys, |q| {
            by_key.push(q);
            Ok(())
        })
        .unwrap(),
        5
    );
    assert_eq!(by_key, moving);
    // 4 odd hosts in DEFAULT (h7 in a burst), and h1 in "other" (the first 8 URLs of a
    // round: hosts 0, 1).
    assert_eq!(
        moving.len(),
        5,
        "{:?}",
        moving.iter().map(|q| &q.key).collect::<Vec<_>>()
    );
    let of = |crawl: &str, key: &str| {
        moving
            .iter()
            .find(|q| q.crawl == crawl && q.key == key.as_bytes())
            .unwrap()
    };
    let h1 = of("DEFAULT", "h1.test");
    assert_eq!(h1.policy.and_then(|p| p.delay_ms), Some(250));
    assert_eq!(of("DEFAULT", "h3.test").blocked_until_ms, START + 120_000);
    assert_eq!(of("DEFAULT", "h7.test").burst_ms, 7);
    let h5 = of("DEFAULT", "h5.test");
    assert!(h5.done.iter().any(|u| u.url == url(5, 23).as_bytes()));
    assert!(!h5.waiting.iter().any(|u| u.url == url(5, 23).as_bytes()));
    for q in &moving {
        let all: Vec<&[u8]> = (q.done.iter())
            .chain(q.leased.iter().map(|(u, _)| u))
            .chain(&q.returned)
            .chain(q.refetch.iter().map(|(_, u)| u))
            .chain(&q.waiting)
            .map(|u| &u.url[..])
            .collect();
        let set: HashSet<&[u8]> = all.iter().copied().collect();
        assert_eq!(set.len(), all.len(), "{}: a URL in two states", q.crawl);
        // Every URL ever pushed to the queue is in it, done ones from archived runs too.
        let host = q.key[1] - b'0';
        let pushed = if host == 7 { 3 } else { 24 };
        assert_eq!(all.len(), pushed, "{} {:?}", q.crawl, q.key);
        for u in &all {
            assert!(u.starts_with(format!("http://h{host}.test/").as_bytes()));
        }
        assert_eq!(
            q.completed as usize,
            q.done.len() + q.refetch.len()
                - usize::from(q.key == b"h5.test" && q.crawl == "DEFAULT")
        );
        assert!(q.waiting.windows(2).all(|w| {
            let n = |u: &crivello::MovedUrl| {
                String::from_utf8_lossy(&u.url)
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
            };
            n(&w[0]) < n(&w[1])
        }));
        for u in q.done.iter().chain(&q.waiting) {
            assert_eq!(u.metadata, u.url, "metadata kept");
        }
    }
    assert!(moving.iter().any(|q| !q.leased.is_empty()));
    assert!(moving.iter().any(|q| !q.returned.is_empty()));
    assert!(moving.iter().any(|q| !q.refetch.is_empty()));

    // The target: another seed, and stale state of a moving queue (a URL it will learn is
    // waiting, which it had done).
    let tdisk = SimDisk::new();
    let t = open(&tdisk, 11, &clock).unwrap();
    let stale = h1.waiting[0].url.clone();
    t.push("", &[Discovered::url(&stale)]).unwrap();
    t.flush().unwrap();
    let l = t.lease(10, None, 1_000).unwrap();
    assert!(t.done(l[0].token, 1).unwrap());
    // First the first two queues, then all of them: the first two are received once.
    assert_eq!(t.import(b"s->t 1", &moving[..2]).unwrap(), 2);
    assert!(t.imported(b"s->t 1").unwrap());
    assert!(!t.imported(b"s->t 2").unwrap());
    assert_eq!(t.import(b"s->t 1", &moving).unwrap(), 3);
    // An older build refuses the store by its version: the manifest says 10 (or later: 18,
    // this build's) once J holds an import.
    assert_eq!(
        tdisk.content("MANIFEST").unwrap()[4..8],
        18u32.to_le_bytes(),
        "the manifest's version"
    );
    assert_eq!(
        export(&t, odd),
        moving,
        "the import holds what was exported"
    );
    // Sent again (its sender did not learn the outcome): nothing changes.
    assert_eq!(t.import(b"s->t 1", &moving).unwrap(), 0);
    assert_eq!(export(&t, odd), moving);
    // The source lets the queues go: it exports them no more, and its URLs stay known.
    let keys: Vec<(&str, &[u8])> = moving.iter().map(|q| (&q.crawl[..], &q.key[..])).collect();
    s.release(&keys).unwrap();
    assert!(export(&s, odd).is_empty());
    let again = Discovered::url(moving[0].waiting[0].url.as_slice());
    assert_eq!(s.push_new(&moving[0].crawl, &[again]).unwrap(), [false]);
    assert!(export(&s, odd).is_empty());
    assert!(!export(&s, |_, _| true).is_empty(), "the even hosts stay");
    s.close().unwrap();
    let s = open(&sdisk, 3, &clock).unwrap();
    assert!(export(&s, odd).is_empty(), "released after a reopen");
    t.close().unwrap();
    let t = open(&tdisk, 11, &clock).unwrap();
    assert_eq!(export(&t, odd), moving, "after a reopen");
    assert!(t.imported(b"s->t 1").unwrap());

    // Every URL of the moved queues is known to its crawl.
    for q in &moving {
        let items: Vec<Vec<u8>> = (q.done.iter())
            .chain(q.leased.iter().map(|(u, _)| u))
            .chain(&q.returned)
            .chain(q.refetch.iter().map(|(_, u)| u))
            .chain(&q.waiting)
            .map(|u| u.url.clone())
            .collect();
        let d: Vec<Discovered<'_>> = items.iter().map(|u| Discovered::url(u)).collect();
        let new = t.push_new(&q.crawl, &d).unwrap();
        assert!(new.iter().all(|n| !n), "{}: a moved URL is new", q.crawl);
    }
    // Served as they would have been at the source: nothing leased before its deadline,
    // nothing done, nothing twice, the returned ones and the waiting ones in order.
    t.flush().unwrap();
    let leased: std::collections::HashMap<(Vec<u8>, Vec<u8>), u64> = moving
        .iter()
        .flat_map(|q| {
            let c = q.crawl.as_bytes().to_vec();
            q.leased
                .iter()
                .map(move |(u, d)| ((c.clone(), u.url.clone()), *d))
        })
        .collect();
    let done: HashSet<(Vec<u8>, Vec<u8>)> = moving
        .iter()
        .flat_map(|q| {
            let c = q.crawl.as_bytes().to_vec();
            q.done.iter().map(move |u| (c.clone(), u.url.clone()))
        })
        .collect();
    let mut served: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for _ in 0..400 {
        for l in t.lease(100, Some(1), 60_000).unwrap() {
            let at = (l.crawl.clone(), l.url.clone());
            assert!(!done.contains(&at), "a done URL served");
            if let Some(&deadline) = leased.get(&at) {
                assert!(
                    clock_now(&clock) >= deadline,
                    "{} served at {} before its deadline {deadline}",
                    String::from_utf8_lossy(&l.url),
                    clock_now(&clock)
                );
            }
            assert!(t.done(l.token, 1).unwrap());
            served.push(at);
        }
        clock.advance(1_000);
        if clock_now(&clock) > START + 3_000_000 {
            break;
        }
    }
    // The leases expired meanwhile: their URLs came back. The refetches are not due yet.
    let want: usize = moving
        .iter()
        .map(|q| q.leased.len() + q.returned.len() + q.waiting.len())
        .sum();
    let set: HashSet<&(Vec<u8>, Vec<u8>)> = served.iter().collect();
    assert_eq!(set.len(), served.len(), "served twice");
    assert_eq!(served.len(), want);
    t.close().unwrap();
    s.close().unwrap();
}

fn clock_now(clock: &Arc<ManualClock>) -> u64 {
    crivello::queues::Clock::now_ms(&**clock)
}

#[test]
fn an_import_refuses_a_url_twice_in_a_queue_and_invalid_input_changing_nothing() {
    let clock = Arc::new(ManualClock::new(START));
    let disk = SimDisk::new();
    let t = open(&disk, 1, &clock).unwrap();
    let u = crivello::MovedUrl {
        url: b"http://a.test/1".to_vec(),
        metadata: Vec::new(),
    };
    let twice = QueueExport {
        crawl: "c".into(),
        key: b"a.test".to_vec(),
        done: vec![u.clone()],
        waiting: vec![u.clone()],
        ..QueueExport::default()
    };
    let e = t.import(b"x", &[twice]).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    let bad_policy = QueueExport {
        crawl: "c".into(),
        key: b"a.test".to_vec(),
        policy: Some(crivello::PolicyFields {
            per_queue: Some(0),
            ..Default::default()
        }),
        ..QueueExport::default()
    };
    assert!(t.import(b"x", &[bad_policy]).is_err());
    let bad_url = QueueExport {
        crawl: "c".into(),
        key: b"a.test".to_vec(),
        waiting: vec![crivello::MovedUrl {
            url: Vec::new(),
            metadata: Vec::new(),
        }],
        ..QueueExport::default()
    };
    assert!(t.import(b"x", &[bad_url]).is_err());
    let q = QueueExport {
        crawl: "c".into(),
        key: b"a.test".to_vec(),
        waiting: vec![u.clone()],
        ..QueueExport::default()
    };
    let e = t.import(b"x", &[q.clone(), q.clone()]).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    assert!(!t.imported(b"x").unwrap());
    assert_eq!(t.stats().unwrap().waiting, 0);
    // A queue served after its import is not replaced when its sender sends it again.
    assert_eq!(t.import(b"x", std::slice::from_ref(&q)).unwrap(), 1);
    let l = t.lease(1, None, 1_000).unwrap();
    assert!(t.done(l[0].token, 1).unwrap());
    assert_eq!(t.import(b"x", std::slice::from_ref(&q)).unwrap(), 0);
    assert!(t.lease(1, None, 1_000).unwrap().is_empty());
    // Its receipts forgotten, the same queue is a new one: the transfer replaces it.
    assert!(t.end_transfer(b"x").unwrap());
    assert!(!t.end_transfer(b"x").unwrap());
    assert!(!t.imported(b"x").unwrap());
    assert_eq!(t.import(b"x", &[q]).unwrap(), 1);
    assert_eq!(t.lease(1, None, 1_000).unwrap().len(), 1);
    t.close().unwrap();
}

/// The target's part of a move: some state of its own (a URL of a moving queue done), then
/// the import, then a close.
fn target_workload(
    disk: &SimDisk,
    clock: &Arc<ManualClock>,
    moving: &[QueueExport],
    acked: &mut bool,
) -> Result<(), Error> {
    let t = open(disk, 11, clock)?;
    let stale = moving[0].waiting[0].url.clone();
    t.push("", &[Discovered::url(&stale)])?;
    t.flush()?;
    for l in t.lease(10, None, 1_000)? {
        t.done(l.token, 1)?;
    }
    *acked = t.import(b"s->t 1", moving)? == moving.len() as u64;
    t.close()
}

#[test]
fn a_crash_at_any_operation_of_an_import_leaves_all_of_it_or_none_and_it_is_sent_again() {
    use crivello::storage::sim::CrashImage;
    let clock = Arc::new(ManualClock::new(START));
    let s = source(&SimDisk::new(), &clock);
    let moving = export(&s, odd);
    s.close().unwrap();
    let at = clock_now(&clock);
    let clean = SimDisk::new();
    let mut acked = false;
    target_workload(&clean, &Arc::new(ManualClock::new(at)), &moving, &mut acked).unwrap();
    assert!(acked);
    let total = clean.ops();
    let mut checked = 0;
    for k in 1..=total {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let mut acked = false;
        let _ = target_workload(&disk, &Arc::new(ManualClock::new(at)), &moving, &mut acked);
        for image in CrashImage::each_kind(k) {
            let img = disk.crash_image(image);
            match crivello::check_storage(Arc::new(img.crash_image(CrashImage::KillProcess))) {
                Ok(report) => assert!(report.is_sound(), "op {k}, {image:?}: {:?}", report.damage),
                Err(Error::NotASieve { .. }) => {
                    assert!(!acked);
                    continue;
                }
                Err(e) => panic!("op {k}, {image:?}: check: {e}"),
            }
            let t = open(&img, 11, &Arc::new(ManualClock::new(at)))
                .unwrap_or_else(|e| panic!("op {k}, {image:?}: reopen: {e}"));
            let done = t.imported(b"s->t 1").unwrap();
            assert!(
                done || !acked,
                "op {k}, {image:?}: an acknowledged import lost"
            );
            if done {
                assert_eq!(
                    export(&t, odd),
                    moving,
                    "op {k}, {image:?}: part of an import"
                );
            } else {
                // Nothing of it, whatever the sieve learnt: the sender sends it again.
                let before = export(&t, odd);
                let held: usize = before
                    .iter()
                    .map(|q| {
                        q.done.len()
                            + q.leased.len()
                            + q.returned.len()
                            + q.refetch.len()
                            + q.waiting.len()
                    })
                    .sum();
                // At most the target's own URL.
                assert!(held <= 1, "op {k}, {image:?}: part of an import");
                assert_eq!(t.import(b"s->t 1", &moving).unwrap(), moving.len() as u64);
            }
            assert_eq!(export(&t, odd), moving, "op {k}, {image:?}");
            // Every moved URL known, and the waiting ones served once each.
            for q in &moving {
                let d: Vec<Discovered<'_>> =
                    q.waiting.iter().map(|u| Discovered::url(&u.url)).collect();
                assert!(t.push_new(&q.crawl, &d).unwrap().iter().all(|n| !n));
            }
            t.flush().unwrap();
            let mut served = HashSet::new();
            let clock = Arc::new(ManualClock::new(at));
            let t2 = {
                t.close().unwrap();
                open(&img, 11, &clock).unwrap()
            };
            for _ in 0..300 {
                for l in t2.lease(100, Some(1), 10_000_000).unwrap() {
                    assert!(t2.done(l.token, 1).unwrap());
                    assert!(served.insert((l.crawl, l.url)), "op {k}, {image:?}: twice");
                }
                clock.advance(1_000);
            }
            let want: usize = moving
                .iter()
                .map(|q| q.leased.len() + q.returned.len() + q.waiting.len())
                .sum();
            assert_eq!(served.len(), want, "op {k}, {image:?}");
            t2.close().unwrap();
            checked += 1;
        }
    }
    eprintln!("{total} crash points, {checked} images checked");
}

#[test]
fn hand_outs_take_only_the_queues_whose_key_passes_the_filter() {
    let clock = Arc::new(ManualClock::new(START));
    let disk = SimDisk::new();
    let f = open(&disk, 1, &clock).unwrap();
    push(&f, "", &[url(1, 0), url(2, 0), url(3, 0)]);
    f.serve_only(Some(Arc::new(|key: &[u8]| key != b"h2.test")))
        .unwrap();
    let mut got: Vec<Vec<u8>> = f
        .lease(10, None, 1_000)
        .unwrap()
        .into_iter()
        .map(|l| l.url)
        .collect();
    got.sort();
    assert_eq!(got, [url(1, 0).into_bytes(), url(3, 0).into_bytes()]);
    // Asked by its key, the queue is not handed out either.
    let one = crivello::LeaseRequest {
        key: Some(b"h2.test".to_vec()),
        ..crivello::LeaseRequest::default()
    };
    assert!(f.lease_with(&one).unwrap().is_empty());
    f.serve_only(None).unwrap();
    let got = f.lease(10, None, 1_000).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].url, url(2, 0).into_bytes());
    f.close().unwrap();
}

/// The source's part of a move after the import: releasing the queues that moved.
fn release_workload(disk: &SimDisk, clock: &Arc<ManualClock>) -> Result<(), Error> {
    let s = source(disk, clock);
    let moving = export(&s, odd);
    let keys: Vec<(&str, &[u8])> = moving.iter().map(|q| (&q.crawl[..], &q.key[..])).collect();
    s.release(&keys)?;
    s.close()
}

#[test]
fn a_crash_at_any_operation_of_a_release_leaves_each_queue_whole_or_released() {
    use crivello::storage::sim::CrashImage;
    let clean = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START));
    release_workload(&clean, &clock).unwrap();
    let total = clean.ops();
    // The state before the release, from a run that stops there.
    let before_disk = SimDisk::new();
    let s = source(&before_disk, &Arc::new(ManualClock::new(START)));
    // The crash points of the release: after those of building the source.
    let built = before_disk.ops();
    let before = export(&s, odd);
    let others = export(&s, |c, k| !odd(c, k));
    s.close().unwrap();
    let mut checked = 0;
    for k in built + 1..=total {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let _ = release_workload(&disk, &Arc::new(ManualClock::new(START)));
        for image in CrashImage::each_kind(k) {
            let img = disk.crash_image(image);
            let s = open(&img, 3, &Arc::new(ManualClock::new(START)))
                .unwrap_or_else(|e| panic!("op {k}, {image:?}: reopen: {e}"));
            // Each moving queue is whole or released; the others are untouched.
            let after = export(&s, odd);
            for q in &after {
                assert!(before.contains(q), "op {k}, {image:?}: {:?} changed", q.key);
            }
            assert_eq!(export(&s, |c, k| !odd(c, k)), others, "op {k}, {image:?}");
            s.close().unwrap();
            checked += 1;
        }
    }
    assert!(checked > 10);
    eprintln!("{} crash points, {checked} images checked", total - built);
}

#[test]
fn many_imports_are_compacted_like_the_movers_runs() {
    let clock = Arc::new(ManualClock::new(START));
    let disk = SimDisk::new();
    let t = open(&disk, 1, &clock).unwrap();
    let mut all = Vec::new();
    for i in 0..10u32 {
        let q = QueueExport {
            crawl: "DEFAULT".into(),
            key: format!("h{i}.test").into_bytes(),
            done: vec![crivello::MovedUrl {
                url: url(i, 0).into_bytes(),
                metadata: Vec::new(),
            }],
            waiting: (1..4)
                .map(|k| crivello::MovedUrl {
                    url: url(i, k).into_bytes(),
                    metadata: Vec::new(),
                })
                .collect(),
            ..QueueExport::default()
        };
        assert_eq!(t.import(b"many", std::slice::from_ref(&q)).unwrap(), 1);
        all.push(q);
    }
    // Each import wrote a run; they were compacted as the mover's are (at 3).
    assert!(t.stats().unwrap().runs < 3, "{:?}", t.stats().unwrap());
    assert_eq!(export(&t, |_, _| true), all);
    t.close().unwrap();
    let t = open(&disk, 1, &clock).unwrap();
    assert_eq!(export(&t, |_, _| true), all);
    t.close().unwrap();
}

/// A queue whose key is a URL's own key over 255 bytes (made by a known update of a URL never
/// pushed, which pushes refuse, or brought from a plain sieve's output) moves like any: the
/// import refused its key before, and a cluster's move retried it for good.
#[test]
fn a_queue_of_a_urls_own_key_over_255_bytes_moves() {
    let clock = Arc::new(ManualClock::new(1_000));
    let (sd, td) = (SimDisk::new(), SimDisk::new());
    let s = open(&sd, 3, &clock).expect("open the source");
    let long = format!("https://e.test#{}", "section-".repeat(40));
    let again = Known {
        url: long.as_bytes(),
        key: None,
        metadata: b"m",
        refetch_ms: 90_000,
    };
    s.update("", &[again]).unwrap();
    let moving = export(&s, |_, key| key.len() > 255);
    assert_eq!(moving.len(), 1);
    let t = open(&td, 3, &clock).expect("open the target");
    assert_eq!(t.import(b"s->t", &moving).unwrap(), 1);
    assert_eq!(
        t.status("", None, long.as_bytes()).unwrap(),
        crivello::UrlStatus::Refetch { at_ms: 90_000 }
    );
    // An empty key, or one longer than any URL, is still refused.
    let mut bad = moving[0].clone();
    bad.key = Vec::new();
    assert!(t.import(b"s->t 2", &[bad]).is_err());
}
