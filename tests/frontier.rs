//! The frontier: per-host queues, politeness and leases, durable across reopens and crashes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crivello::queues::{key::default_key, Clock, ManualClock};
use crivello::storage::SimDisk;
use crivello::{
    Completion, Discovered, Error, Frontier, Options, Policy, PolicyFields, Sieve, UrlStatus,
};

fn opts() -> Options {
    Options::new()
        .slots(64)
        .seed(3)
        .background_flush(false)
        .frontier_low(0)
        .queue_runs(3)
        .journal_bytes(4096)
        .hot_queues(2)
}

fn open(disk: &SimDisk, clock: &Arc<ManualClock>) -> Frontier {
    Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).expect("open")
}

fn push(f: &Frontier, urls: &[&str]) {
    let items: Vec<Discovered<'_>> = urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
    f.push("", &items).expect("push");
}

fn urls(leased: &[crivello::Leased]) -> Vec<String> {
    leased
        .iter()
        .map(|l| String::from_utf8(l.url.clone()).unwrap())
        .collect()
}

#[test]
fn each_host_is_served_in_first_appearance_order_one_url_at_a_time() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    push(
        &f,
        &[
            "http://a.com/1",
            "http://b.com/1",
            "http://a.com/2",
            "http://a.com/1",
            "http://c.com/1",
            "http://b.com/2",
        ],
    );
    let first = f.lease(100, None, 30_000).unwrap();
    let mut got = urls(&first);
    got.sort();
    assert_eq!(got, ["http://a.com/1", "http://b.com/1", "http://c.com/1"]);
    // One URL of a host at a time: nothing more until a done.
    assert!(f.lease(100, None, 30_000).unwrap().is_empty());
    for l in &first {
        assert!(f.done(l.token, 10).unwrap());
        assert!(
            !f.done(l.token, 10).unwrap(),
            "a second done changes nothing"
        );
    }
    let mut second = urls(&f.lease(100, None, 30_000).unwrap());
    second.sort();
    assert_eq!(second, ["http://a.com/2", "http://b.com/2"]);
    let st = f.stats().unwrap();
    assert_eq!((st.waiting, st.leased, st.done), (0, 2, 3));
    f.close().unwrap();
}

/// Every hand-out names each URL's queue key, read from its record: its own key, its URL's
/// host, or the fallback key of a URL without a host (a key that is not in the record, which
/// the hand-out finds again), from a run and from the records returned after an expiry,
/// through `lease` and `lease_batch` alike.
#[test]
fn a_hand_out_names_each_urls_key_whatever_it_is() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    push(&f, &["urn:isbn:1", "http://h.test/1", "urn:isbn:2"]);
    let own = [Discovered {
        key: Some(b"mine"),
        ..Discovered::url(b"http://o.test/1")
    }];
    f.push("", &own).unwrap();
    let keys_of = |leased: &[crivello::Leased]| {
        let mut k: Vec<(String, String)> = (leased.iter())
            .map(|l| {
                let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                (s(&l.url), s(&l.key))
            })
            .collect();
        k.sort();
        k
    };
    let expected = |fallback: &str| {
        vec![
            ("http://h.test/1".to_owned(), "h.test".to_owned()),
            ("http://o.test/1".to_owned(), "mine".to_owned()),
            ("urn:isbn:1".to_owned(), fallback.to_owned()),
        ]
    };
    let fallback = String::from_utf8(default_key(b"urn:isbn:1").to_vec()).unwrap();
    // From the runs.
    let first = f.lease(100, None, 1_000).unwrap();
    assert_eq!(keys_of(&first), expected(&fallback));
    // Expired: from the records returned, through a batch.
    clock.advance(2_000);
    let batch = f
        .lease_batch(&crivello::LeaseRequest {
            max_queues: 100,
            ttl_ms: 1_000,
            ..Default::default()
        })
        .unwrap();
    let mut again: Vec<(String, String)> = (batch.iter())
        .map(|it| {
            let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            (s(it.url), s(it.key))
        })
        .collect();
    again.sort();
    assert_eq!(again, expected(&fallback));
}

#[test]
fn push_new_says_exactly_which_urls_are_new_across_flushes_runs_merges_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    // Small buffers, a background flush and few runs: the answers come from S, the batch
    // being flushed, R runs and Z segments in turn.
    let opts = || {
        Options::new()
            .slots(999)
            .seed(5)
            .recent_cache(0)
            .frontier_low(0)
            .journal_bytes(1 << 16)
    };
    let mut seen = HashSet::new();
    let mut x = 7u64;
    let mut pushed = 0u64;
    for round in 0..4 {
        let f = Frontier::open(dir.path(), opts()).unwrap();
        for _ in 0..40 {
            let us: Vec<String> = (0..97)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // About 6,000 distinct URLs over 160 hosts, many repeated.
                    let n = (x >> 33) % 6_000;
                    format!("http://h{}.test/{}", n % 160, n)
                })
                .collect();
            let items: Vec<Discovered> = us.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            let new = f.push_new("", &items).unwrap();
            for (u, n) in us.iter().zip(new) {
                assert_eq!(n, seen.insert(u.clone()), "novelty of {u} in round {round}");
            }
            pushed += us.len() as u64;
        }
        f.flush().unwrap();
        let st = f.stats().unwrap();
        assert_eq!(
            st.waiting,
            seen.len() as u64,
            "every new URL waits in its queue"
        );
        f.close().unwrap();
    }
    assert!(
        pushed > 4 * seen.len() as u64 / 3,
        "the stream repeats URLs"
    );
}

#[test]
fn a_queue_is_served_as_soon_as_it_may_be_whatever_the_lease_calls_asked() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 0,
            per_queue: 2,
            ..Policy::default()
        },
    )
    .unwrap();
    push(&f, &["http://h/1", "http://h/2", "http://g/1"]);
    // One URL of each queue: the queues popped stay scheduled.
    let req = |per_queue| crivello::LeaseRequest {
        max_urls: 10,
        max_queues: 10,
        per_queue,
        ttl_ms: 36_000_000,
        crawl: None,
        key: None,
    };
    let mut first = urls(&f.lease_with(&req(Some(1))).unwrap());
    first.sort();
    assert_eq!(first, ["http://g/1", "http://h/1"]);
    let second = f.lease_with(&req(None)).unwrap();
    assert_eq!(urls(&second), ["http://h/2"], "the policy's room of two");
    // /1 is due again in an hour: the queue is scheduled for then. /2 is retried: it is
    // served now, not in an hour.
    let h1 = f.lease_of("", b"http://h/1").unwrap().expect("leased");
    assert!(f.refetch(h1, 5, 10_000 + 3_600_000).unwrap());
    assert!(f.lease_with(&req(None)).unwrap().is_empty());
    assert!(f.retry(second[0].token, 5).unwrap());
    assert_eq!(urls(&f.lease_with(&req(Some(1))).unwrap()), ["http://h/2"]);
    assert!(
        f.lease_with(&req(None)).unwrap().is_empty(),
        "/1 is due in an hour"
    );
    clock.advance(3_600_000);
    assert_eq!(urls(&f.lease_with(&req(None)).unwrap()), ["http://h/1"]);
}

/// Pushes 300 hosts and moves them in: their groups weigh J past its bound, and a checkpoint
/// is written.
fn write_a_checkpoint(f: &Frontier, disk: &SimDisk) {
    let others: Vec<String> = (0..300).map(|i| format!("http://o{i}.test/")).collect();
    push(f, &others.iter().map(String::as_str).collect::<Vec<_>>());
    f.flush().unwrap();
    assert!(disk.content("CHECKPOINT").is_some(), "{:?}", disk.files());
}

/// `f` reopened from the image a crash leaves (every write not synced lost) if `crash`, else
/// after a clean close.
fn reopen_after(f: Frontier, crash: bool, disk: &SimDisk, clock: &Arc<ManualClock>) -> Frontier {
    if crash {
        let img = disk.crash_image(crivello::storage::sim::CrashImage::DropAll);
        drop(f);
        Frontier::open_with(Arc::new(img), opts(), clock.clone()).expect("reopen")
    } else {
        f.close().unwrap();
        open(disk, clock)
    }
}

#[test]
fn a_burst_half_done_keeps_its_fetch_time_across_a_close_and_a_crash() {
    // The ratio rule with two URLs of a host at once: after the burst's fetches took s' in
    // all, the host waits s'/p. The first fetch of the burst ends before a crash (J's end of
    // lease is replayed) or before a checkpoint (which holds the queue's burst) and then a
    // crash or a close; the second after it: the wait counts both.
    for (checkpoint, crash) in [(false, true), (true, true), (true, false)] {
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy(
            "",
            None,
            Policy {
                delay_ms: 0,
                ratio_ppm: 500_000,
                per_queue: 2,
                ..Policy::default()
            },
        )
        .unwrap();
        push(&f, &["http://h/1", "http://h/2", "http://h/3"]);
        let leased = f.lease(10, Some(2), 3_600_000).unwrap();
        assert_eq!(urls(&leased), ["http://h/1", "http://h/2"]);
        assert!(f.done(leased[0].token, 1_000).unwrap());
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        let f = reopen_after(f, crash, &disk, &clock);
        assert!(f.done(leased[1].token, 1_500).unwrap());
        // 2.5 s of fetches at p = 0.5: 5 s from the end of the last one.
        let h = f.queues("", 0, 1000).unwrap();
        let h = h.iter().find(|q| q.key == b"h").expect("queue h");
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        assert_eq!(h.next_due_ms, Some(15_000), "{case}");
    }
}

#[test]
fn a_queue_leased_in_a_checkpoint_with_room_left_is_served_at_once_after_a_reopen() {
    // The open schedules the queues of the checkpoint's leases once their leases are in:
    // with two URLs of a host at once allowed and one leased, the other is due at once.
    for crash in [true, false] {
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy(
            "",
            None,
            Policy {
                per_queue: 2,
                ..Policy::default()
            },
        )
        .unwrap();
        push(&f, &["http://h/1", "http://h/2"]);
        let first = f.lease(10, Some(1), 3_600_000).unwrap();
        assert_eq!(urls(&first), ["http://h/1"]);
        // A checkpoint holds the lease.
        write_a_checkpoint(&f, &disk);
        let f = reopen_after(f, crash, &disk, &clock);
        let key = crivello::LeaseRequest {
            key: Some(b"h".to_vec()),
            ..crivello::LeaseRequest::default()
        };
        let all = crivello::LeaseRequest {
            max_urls: 1_000,
            max_queues: 1_000,
            ..crivello::LeaseRequest::default()
        };
        let second = f.lease_with(&all).unwrap();
        assert!(
            urls(&second).contains(&"http://h/2".to_owned()),
            "crash: {crash}: h/2 handed out with the others ({} URLs)",
            second.len()
        );
        assert!(f.lease_with(&key).unwrap().is_empty(), "crash: {crash}");
        assert!(f.done(first[0].token, 5).unwrap(), "crash: {crash}");
    }
}

#[test]
fn a_lease_may_ask_for_one_crawl_and_the_others_stay_due() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    let items = |urls: &[&'static str]| -> Vec<Discovered<'static>> {
        urls.iter().map(|u| Discovered::url(u.as_bytes())).collect()
    };
    f.push("news", &items(&["http://a/1", "http://b/1"]))
        .unwrap();
    f.push("", &items(&["http://a/1", "http://c/1"])).unwrap();
    f.flush().unwrap();
    let req = |crawl: Option<&str>| crivello::LeaseRequest {
        crawl: crawl.map(str::to_owned),
        ..crivello::LeaseRequest::default()
    };
    assert!(f.lease_with(&req(Some("sports"))).unwrap().is_empty());
    let mut news: Vec<_> = f
        .lease_with(&req(Some("news")))
        .unwrap()
        .iter()
        .map(|l| (l.crawl.clone(), String::from_utf8(l.url.clone()).unwrap()))
        .collect();
    news.sort();
    assert_eq!(
        news,
        [
            (b"news".to_vec(), "http://a/1".to_owned()),
            (b"news".to_vec(), "http://b/1".to_owned())
        ]
    );
    assert!(f.lease_with(&req(Some("news"))).unwrap().is_empty());
    // The default crawl's queues, passed over, are still due.
    let mut rest = urls(&f.lease_with(&req(Some(""))).unwrap());
    rest.sort();
    assert_eq!(rest, ["http://a/1", "http://c/1"]);
    assert!(f.lease_with(&req(None)).unwrap().is_empty());
}

#[test]
fn a_deleted_crawl_is_forgotten_and_starts_afresh_and_a_deleted_queue_takes_new_urls() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let mut f = open(&disk, &clock);
    let items = |urls: &[&'static str]| -> Vec<Discovered<'static>> {
        urls.iter().map(|u| Discovered::url(u.as_bytes())).collect()
    };
    let seeds = ["http://a/1", "http://a/2", "http://b/1"];
    f.push("news", &items(&seeds)).unwrap();
    f.push("", &items(&["http://a/1", "http://c/1"])).unwrap();
    f.block("news", b"z", 99_999).unwrap();
    let news = crivello::LeaseRequest {
        crawl: Some("news".into()),
        ..crivello::LeaseRequest::default()
    };
    let leased = f.lease_with(&news).unwrap();
    assert_eq!(leased.len(), 2);
    assert_eq!(f.crawls().unwrap(), ["DEFAULT", "news"]);
    let c = f.counts("news", None).unwrap();
    assert_eq!((c.queues, c.waiting, c.leased, c.done), (3, 1, 2, 0));
    assert_eq!(f.counts("news", Some(b"a")).unwrap().waiting, 1);
    // Three URLs held: one waiting, two leased; the block of "z" goes too.
    assert_eq!(f.delete_crawl("news").unwrap(), 3);
    assert!(
        !f.done(leased[0].token, 5).unwrap(),
        "a lease of a deleted crawl ended"
    );
    assert_eq!(f.crawls().unwrap(), ["DEFAULT"]);
    assert_eq!(f.counts("news", None).unwrap(), crivello::Counts::default());
    assert!(f.queues("news", 0, 10).unwrap().is_empty());
    assert_eq!(
        f.status("news", None, b"http://a/1").unwrap(),
        crivello::queues::UrlStatus::Unknown
    );
    // The default crawl is untouched.
    assert_eq!(f.counts("", None).unwrap().waiting, 2);
    // Across a reopen (from the journal, then from a checkpoint), the crawl stays deleted,
    // and the same URLs pushed again are a new crawl's: new, and served.
    for _ in 0..2 {
        f.close().unwrap();
        f = open(&disk, &clock);
        assert_eq!(f.crawls().unwrap(), ["DEFAULT"]);
        assert!(f.lease_with(&news).unwrap().is_empty());
    }
    f.push("news", &items(&seeds)).unwrap();
    let mut again = urls(&f.lease_with(&news).unwrap());
    again.sort();
    assert_eq!(again, ["http://a/1", "http://b/1"]);
    // A deleted queue: its URLs stay known, and a new one of its key is served.
    assert_eq!(f.delete_queue("", b"c").unwrap(), 1);
    assert_eq!(f.delete_queue("", b"nothing").unwrap(), 0);
    push(&f, &["http://c/1", "http://c/2"]);
    // DEFAULT has a queue waiting: a lease does not flush by itself.
    f.flush().unwrap();
    let req = crivello::LeaseRequest {
        crawl: Some(String::new()),
        ..crivello::LeaseRequest::default()
    };
    let mut got = urls(&f.lease_with(&req).unwrap());
    got.sort();
    assert_eq!(got, ["http://a/1", "http://c/2"]);
    assert_eq!(
        f.status("", None, b"http://c/1").unwrap(),
        crivello::queues::UrlStatus::Done
    );
    // A block of a key with no URL yet goes with its crawl, DEFAULT's too.
    f.block("", b"later", u64::MAX).unwrap();
    f.delete_crawl("").unwrap();
    push(&f, &["http://later/1"]);
    f.flush().unwrap();
    assert_eq!(urls(&f.lease_with(&req).unwrap()), ["http://later/1"]);
    f.close().unwrap();
}

/// A move's entry in J is a few bytes, but an open seats every group of its run: J is
/// weighed with 32 bytes a group, so URLs of many hosts moved in get a checkpoint although J
/// holds little, and an open after a crash from it gives every URL back.
#[test]
fn runs_of_many_groups_weigh_on_j_and_bring_a_checkpoint() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let opts = || opts().queue_runs(63).journal_bytes(8192);
    let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).expect("open");
    let hosts = |from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| format!("http://h{i}.test/a")).collect()
    };
    let j_bytes = |d: &SimDisk| -> usize {
        d.files()
            .iter()
            .filter(|n| n.starts_with("j-"))
            .map(|n| d.content(n).unwrap().len())
            .sum()
    };
    // 100 groups weigh 3,200 bytes: under the bound.
    let first = hosts(0, 100);
    push(&f, &first.iter().map(String::as_str).collect::<Vec<_>>());
    f.flush().unwrap();
    assert!(disk.content("CHECKPOINT").is_none(), "{:?}", disk.files());
    // 200 more: 9,600 bytes, past it, while J's files hold far less.
    let more = hosts(100, 300);
    push(&f, &more.iter().map(String::as_str).collect::<Vec<_>>());
    f.flush().unwrap();
    assert!(
        j_bytes(&disk) < 8192 / 2,
        "J holds {} bytes",
        j_bytes(&disk)
    );
    assert!(disk.content("CHECKPOINT").is_some(), "{:?}", disk.files());
    // An open after a crash reads it, and the queues are whole.
    let img = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    drop(f);
    let g = Frontier::open_with(Arc::new(img.clone()), opts(), clock.clone()).expect("reopen");
    let stats = g.stats().unwrap();
    assert_eq!((stats.queues, stats.waiting), (300, 300), "{stats:?}");
    let served = urls(&g.lease(1000, None, 60_000).unwrap());
    let mut all: Vec<String> = first.into_iter().chain(more).collect();
    all.sort();
    let mut got = served.clone();
    got.sort();
    assert_eq!(got, all);
}

#[test]
fn checkpoints_of_versions_4_6_7_9_10_and_11_are_read() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    let many: Vec<String> = (0..200)
        .map(|i| format!("http://h{}.test/{i}", i % 7))
        .collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    push(&f, &refs);
    f.push("news", &[Discovered::url(b"http://n/1")]).unwrap();
    f.flush().unwrap();
    // Enough leases and dones for J to pass the checkpoint's size.
    for _ in 0..10 {
        for l in f.lease(7, None, 60_000).unwrap() {
            assert!(f.done(l.token, 1).unwrap());
        }
    }
    let leased = f.lease(3, None, 60_000).unwrap();
    f.close().unwrap();
    let before = open(&disk, &clock).queues("", 0, 100).unwrap();
    // Version 4 had no next_crawl nor skips; version 6 no skips; version 7 has version 9's
    // layout (9 says that its Q runs may hold coded frames); 10 adds the archives and the
    // transfers imported; 11 the receipts; 12 codes each queue's numbers as varints.
    let c = disk.content("CHECKPOINT").expect("a checkpoint");
    assert_eq!(c[4..8], 12u32.to_le_bytes());
    let copy = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let c11 = crivello::internals::checkpoint_in_version(&c, 11).unwrap();
    assert_eq!(c11[4..8], 11u32.to_le_bytes());
    assert!(
        c11.len() > c.len(),
        "{} bytes in version 11, {} now",
        c11.len(),
        c.len()
    );
    copy.set_content("CHECKPOINT", c11);
    let f11 = open(&copy, &clock);
    assert_eq!(f11.queues("", 0, 100).unwrap(), before);
    drop(f11);
    let copy = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let c10 = crivello::internals::checkpoint_in_version(&c, 10).unwrap();
    assert_eq!(c10[4..8], 10u32.to_le_bytes());
    copy.set_content("CHECKPOINT", c10);
    let f10 = open(&copy, &clock);
    assert_eq!(f10.queues("", 0, 100).unwrap(), before);
    drop(f10);
    let copy = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let c9 = crivello::internals::checkpoint_in_version(&c, 9).unwrap();
    assert_eq!(c9[4..8], 9u32.to_le_bytes());
    copy.set_content("CHECKPOINT", c9);
    let f9 = open(&copy, &clock);
    assert_eq!(f9.queues("", 0, 100).unwrap(), before);
    drop(f9);
    let copy = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let c7 = crivello::internals::checkpoint_in_version(&c, 7).unwrap();
    assert_eq!(c7[4..8], 7u32.to_le_bytes());
    copy.set_content("CHECKPOINT", c7);
    let f7 = open(&copy, &clock);
    assert_eq!(f7.queues("", 0, 100).unwrap(), before);
    drop(f7);
    // Version 6, on a copy of the store.
    let copy = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let c6 = crivello::internals::checkpoint_in_version(&c, 6).unwrap();
    copy.set_content("CHECKPOINT", c6);
    let f6 = open(&copy, &clock);
    assert_eq!(f6.queues("", 0, 100).unwrap(), before);
    assert_eq!(f6.crawls().unwrap(), ["DEFAULT", "news"]);
    drop(f6);
    let c = crivello::internals::checkpoint_in_version(&c, 4).unwrap();
    disk.set_content("CHECKPOINT", c);
    let f = open(&disk, &clock);
    assert_eq!(f.queues("", 0, 100).unwrap(), before);
    assert_eq!(
        f.lease_of("", &leased[0].url).unwrap(),
        Some(leased[0].token)
    );
    // A new crawl still gets an id of its own.
    f.push("sports", &[Discovered::url(b"http://n/1")]).unwrap();
    assert_eq!(f.crawls().unwrap(), ["DEFAULT", "news", "sports"]);
    f.close().unwrap();
}

#[test]
fn a_urls_status_is_found_in_its_hosts_queue_when_asked_with_another_key() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    let own = Discovered {
        key: Some(b"kk"),
        ..Discovered::url(b"http://x.com/own")
    };
    f.push("", &[Discovered::url(b"http://x.com/1"), own])
        .unwrap();
    // Pushed with its host's key, asked with another: found in the host's queue.
    for key in [None, Some(&b"x.com"[..]), Some(&b"other"[..])] {
        assert_eq!(
            f.status("", key, b"http://x.com/1").unwrap(),
            UrlStatus::Waiting
        );
    }
    // Pushed with a key of its own: found with that key; asked with another, it is known
    // and in neither queue asked, which reads as done (the sieve keeps no URL's queue).
    assert_eq!(
        f.status("", Some(b"kk"), b"http://x.com/own").unwrap(),
        UrlStatus::Waiting
    );
    assert_eq!(
        f.status("", None, b"http://x.com/own").unwrap(),
        UrlStatus::Done
    );
    assert_eq!(
        f.status("", None, b"http://x.com/never").unwrap(),
        UrlStatus::Unknown
    );
}

/// Leases every due queue and ends each lease at once, up to `rounds` times or until a URL
/// of `host` is handed out; returns whether it was. `wait` lets a flush on the sieve's thread
/// end between rounds.
fn serve_until(f: &Frontier, host: &str, rounds: usize, wait: bool) -> bool {
    for _ in 0..rounds {
        let got = f.lease(100, None, 30_000).unwrap();
        let found = got.iter().any(|l| l.key == host.as_bytes());
        for l in &got {
            assert!(f.done(l.token, 1).unwrap());
        }
        if found {
            return true;
        }
        if wait {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    false
}

#[test]
fn urls_found_while_other_queues_wait_are_served_within_about_a_second() {
    // Three hosts with many URLs each: the front is never empty, so no hand-out flushes the
    // sieve for that. A new host pushed meanwhile is served once a hand-out that found fewer
    // queues due than it could serve has flushed it; the next such flush comes a second
    // (of the frontier's clock) after the one before.
    for background in [false, true] {
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(1_000));
        let o = opts().slots(4096).background_flush(background);
        let f = Frontier::open_with(Arc::new(disk.clone()), o, clock.clone()).unwrap();
        let old: Vec<String> = (0..300)
            .map(|i| format!("http://{}.com/{}", ["a", "b", "c"][i % 3], i))
            .collect();
        push(&f, &old.iter().map(String::as_str).collect::<Vec<_>>());
        f.flush().unwrap();
        assert_eq!(f.lease(100, None, 30_000).unwrap().len(), 3);
        clock.advance(31_000);
        push(&f, &["http://d.com/1"]);
        assert!(
            serve_until(&f, "d.com", 50, background),
            "background {background}: d.com not served"
        );
        // The next flush of that kind waits a second: e.com is not served before.
        push(&f, &["http://e.com/1"]);
        assert!(
            !serve_until(&f, "e.com", 10, background),
            "background {background}: e.com served within the second"
        );
        clock.advance(1_000);
        assert!(
            serve_until(&f, "e.com", 50, background),
            "background {background}: e.com not served after the second"
        );
        let st = f.stats().unwrap();
        assert!(st.waiting > 0, "the front ran dry: the test proves nothing");
        f.close().unwrap();
    }
}

#[test]
fn a_hand_out_in_parts_that_serves_fewer_queues_than_asked_flushes_for_hosts_found_since() {
    // 200 hosts due, hand-outs of up to 1,000 queues in parts of 10: every part fills, and
    // the hand-out ends having served fewer queues than it asked for, which begins the
    // flush, so a host pushed meanwhile is served by a later hand-out.
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = Frontier::open_with(Arc::new(disk.clone()), opts().slots(4096), clock.clone()).unwrap();
    let old: Vec<String> = (0..1000)
        .map(|i| format!("http://h{}.parts/{}", i % 200, i))
        .collect();
    push(&f, &old.iter().map(String::as_str).collect::<Vec<_>>());
    f.flush().unwrap();
    let all = |f: &Frontier| {
        let mut h = crivello::Handout::new(crivello::LeaseRequest {
            max_queues: 1000,
            ttl_ms: 30_000,
            ..Default::default()
        });
        let mut got = Vec::new();
        while !h.is_finished() {
            got.extend(f.lease_part(&mut h, 10).unwrap().to_leased());
        }
        got
    };
    assert_eq!(all(&f).len(), 200);
    clock.advance(31_000);
    push(&f, &["http://new.parts/1"]);
    let mut served = false;
    for _ in 0..3 {
        let got = all(&f);
        served |= got.iter().any(|l| l.key == b"new.parts");
        for l in &got {
            assert!(f.done(l.token, 1).unwrap());
        }
    }
    assert!(served, "the new host was not served");
    assert!(f.stats().unwrap().waiting > 0);
}

#[test]
fn a_lease_that_expired_and_was_handed_out_again_replays_as_it_ran() {
    // Two fetchers on one host under the ratio rule: one ends after 5 ms, the other's lease
    // expires (the burst ends there, after 0 ms), its URL is handed out again and ends after
    // 1 ms: the host waits 1 ms / 0.5. A crash then: the replay meets the second hand-out
    // of a URL whose lease it still holds, and must end the first lease as the call did.
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    let p = Policy {
        ratio_ppm: 500_000,
        per_queue: 2,
        ..Policy::default()
    };
    f.set_policy("", None, p).unwrap();
    push(&f, &["http://h/1", "http://h/2", "http://h/3"]);
    let l = f.lease(10, None, 1_000).unwrap();
    assert_eq!(urls(&l), ["http://h/1", "http://h/2"]);
    assert!(f.done(l[1].token, 5).unwrap());
    clock.advance(1_000);
    // The burst's 5 ms, over 0.5, from the expiry.
    assert!(f.lease(10, None, 1_000).unwrap().is_empty());
    clock.advance(10);
    let again = f.lease(10, None, 1_000).unwrap();
    assert_eq!(urls(&again), ["http://h/1", "http://h/3"]);
    assert!(f.done(again[0].token, 1).unwrap());
    assert!(f.done(again[1].token, 1).unwrap());
    push(&f, &["http://h/4"]);
    f.flush().unwrap();
    let before = f.queues("", 0, 10).unwrap();
    drop(f);
    let f = open(
        &disk.crash_image(crivello::storage::sim::CrashImage::KillProcess),
        &clock,
    );
    assert_eq!(f.queues("", 0, 10).unwrap(), before);
}

#[test]
fn the_delay_runs_from_the_end_of_a_fetch_and_leases_expire_back_in_their_place() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 2_000,
            ..Policy::default()
        },
    )
    .unwrap();
    push(&f, &["http://h/1", "http://h/2", "http://h/3"]);
    let l = f.lease(10, None, 5_000).unwrap();
    assert_eq!(urls(&l), ["http://h/1"]);
    clock.advance(700);
    assert!(f.done(l[0].token, 700).unwrap());
    clock.advance(1_999);
    assert!(
        f.lease(10, None, 5_000).unwrap().is_empty(),
        "within the delay"
    );
    clock.advance(1);
    let l = f.lease(10, None, 5_000).unwrap();
    assert_eq!(urls(&l), ["http://h/2"]);
    // Its lease expires: it goes back in its place, before /3, and the delay runs from the
    // deadline, as from the end of a fetch (a fetcher that died does not shorten it).
    clock.advance(5_000);
    assert!(
        f.lease(10, None, 5_000).unwrap().is_empty(),
        "within the delay after an expiry"
    );
    clock.advance(1_999);
    assert!(
        f.lease(10, None, 5_000).unwrap().is_empty(),
        "within the delay after an expiry"
    );
    clock.advance(1);
    let again = f.lease(10, None, 5_000).unwrap();
    assert_eq!(urls(&again), ["http://h/2"]);
    assert!(!f.done(l[0].token, 1).unwrap() || again[0].token == l[0].token);
    // A retry puts it back too, and the delay applies.
    assert!(f.retry(again[0].token, 10).unwrap());
    assert!(f.lease(10, None, 5_000).unwrap().is_empty());
    clock.advance(2_000);
    assert_eq!(urls(&f.lease(10, None, 5_000).unwrap()), ["http://h/2"]);
}

#[test]
fn the_delay_runs_from_the_instant_a_fetch_ended_as_its_completion_says_across_crashes() {
    // A crawler completes a URL some time after its response arrived (once the page's links
    // are pushed): the delay runs from the response, within the lease's bounds (not before
    // the hand-out, not after the call), and the instant is durable, replayed as given.
    for (checkpoint, crash) in [(false, true), (true, true), (false, false), (true, false)] {
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy(
            "",
            None,
            Policy {
                delay_ms: 1_000,
                ..Policy::default()
            },
        )
        .unwrap();
        push(
            &f,
            &["http://a/1", "http://a/2", "http://b/1", "http://b/2"],
        );
        push(&f, &["http://c/1", "http://c/2"]);
        let mut l = f.lease(10, None, 60_000).unwrap();
        l.sort_by(|x, y| x.url.cmp(&y.url));
        assert_eq!(
            urls(&l),
            ["http://a/1", "http://b/1", "http://c/1"],
            "{case}"
        );
        clock.advance(400);
        // a: ended 100 ms after the hand-out; b: "before" the hand-out, which counts as the
        // hand-out; c: "after" the call, which counts as the call.
        let ended = f
            .complete_ended(&[
                (l[0].token, 100, Completion::Done, 10_100),
                (l[1].token, 0, Completion::Retry, 5_000),
                (l[2].token, 0, Completion::Done, 99_000),
            ])
            .unwrap();
        assert_eq!(ended, [true, true, true], "{case}");
        // Ended twice: the second changes nothing.
        assert_eq!(
            f.complete_ended(&[(l[0].token, 0, Completion::Done, 10_000)])
                .unwrap(),
            [false]
        );
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        let f = reopen_after(f, crash, &disk, &clock);
        // A build that cannot read entry 20 refuses the store by its version.
        let version =
            u32::from_le_bytes(disk.content("MANIFEST").unwrap()[4..8].try_into().unwrap());
        assert!(version >= 17, "{case}: version {version}");
        let due: HashMap<Vec<u8>, Option<u64>> = f
            .queues("", 0, 1000)
            .unwrap()
            .into_iter()
            .map(|q| (q.key, q.next_due_ms))
            .collect();
        assert_eq!(due[&b"a"[..]], Some(11_100), "{case}");
        assert_eq!(due[&b"b"[..]], Some(11_000), "{case}");
        assert_eq!(due[&b"c"[..]], Some(11_400), "{case}");
        // The checkpoint's other hosts are due at once: only a, b and c are looked at.
        let ours = |f: &Frontier| -> Vec<String> {
            let l = f.lease(1000, None, 60_000).unwrap();
            urls(&l)
                .into_iter()
                .filter(|u| !u.starts_with("http://o"))
                .collect()
        };
        clock.advance(599);
        assert!(ours(&f).is_empty(), "{case}");
        clock.advance(1);
        assert_eq!(ours(&f), ["http://b/1"], "{case}");
        clock.advance(100);
        assert_eq!(ours(&f), ["http://a/2"], "{case}");
        clock.advance(299);
        assert!(ours(&f).is_empty(), "{case}");
        clock.advance(1);
        assert_eq!(ours(&f), ["http://c/2"], "{case}");
    }
}

#[test]
fn an_end_said_earlier_than_another_end_of_its_burst_counts_from_the_later() {
    // The ratio rule: after a burst's fetches took s' in all, wait s'/p from its last end. A
    // fetch said to have ended before another end of the burst (a completion, or an
    // expiry) does not move that last end back.
    let ratio = Policy {
        delay_ms: 0,
        ratio_ppm: 100_000,
        per_queue: 2,
        ..Policy::default()
    };
    for crash in [false, true] {
        let case = format!("crash: {crash}");
        // Completions out of order, in two calls and in one.
        for one_call in [false, true] {
            let disk = SimDisk::new();
            let clock = Arc::new(ManualClock::new(10_000));
            let f = open(&disk, &clock);
            f.set_policy("", None, ratio).unwrap();
            push(&f, &["http://h/1", "http://h/2", "http://h/3"]);
            let l = f.lease(10, Some(2), 60_000).unwrap();
            assert_eq!(urls(&l), ["http://h/1", "http://h/2"]);
            clock.advance(200);
            let b = (l[1].token, 100, Completion::Done, 10_200);
            let a = (l[0].token, 50, Completion::Done, 10_050);
            if one_call {
                clock.advance(100);
                assert_eq!(f.complete_ended(&[b, a]).unwrap(), [true, true]);
            } else {
                assert!(f.done(l[1].token, 100).unwrap());
                clock.advance(100);
                assert_eq!(f.complete_ended(&[a]).unwrap(), [true]);
            }
            let f = reopen_after(f, crash, &disk, &clock);
            // 150 ms of fetches at p = 0.1: 1.5 s from 10,200, the burst's last end.
            let due = f.queues("", 0, 10).unwrap()[0].next_due_ms;
            assert_eq!(due, Some(11_700), "{case}, one call: {one_call}");
        }
        // An expiry ends a fetch of the burst at its deadline.
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy("", None, ratio).unwrap();
        push(&f, &["http://h/1", "http://h/2", "http://h/3"]);
        let a = f.lease(1, Some(1), 1_000).unwrap();
        let b = f.lease(1, Some(1), 60_000).unwrap();
        assert_eq!(urls(&a), ["http://h/1"]);
        assert_eq!(urls(&b), ["http://h/2"]);
        clock.advance(2_000);
        let ended = f
            .complete_ended(&[(b[0].token, 500, Completion::Done, 10_500)])
            .unwrap();
        assert_eq!(ended, [true]);
        let f = reopen_after(f, crash, &disk, &clock);
        // A expired at 11,000; 500 ms of fetches at p = 0.1: 5 s from then.
        let due = f.queues("", 0, 10).unwrap()[0].next_due_ms;
        assert_eq!(due, Some(16_000), "{case}");
    }
}

/// The hand-outs of `f` now, but for the URLs of the hosts `write_a_checkpoint` pushes.
fn ours(f: &Frontier, ttl: u64) -> Vec<crivello::Leased> {
    let mut l = f.lease(1000, None, ttl).unwrap();
    l.retain(|l| !l.url.starts_with(b"http://o"));
    l
}

/// The next instant queue `key` is due (None: nothing of it may be served).
fn due_of(f: &Frontier, key: &[u8]) -> Option<u64> {
    let q = f.queues("", 0, 1000).unwrap();
    q.into_iter()
        .find(|q| q.key == key)
        .expect("the queue")
        .next_due_ms
}

#[test]
fn a_fetch_that_ended_frees_its_hosts_place_and_runs_its_delay_once_across_crashes() {
    // A crawler says a fetch ended when its response arrives (Completion::Fetched) and
    // completes it once the page's links are pushed: the host's delay runs from the
    // response, its next URL may be handed out then while the first's lease stays, and the
    // completion (or an expiry) runs no delay again. Durable: across a checkpoint, a crash
    // and a close (the planted bug `fetched-uncheckpointed` fails the checkpoint's cases).
    for (checkpoint, crash) in [(false, true), (true, true), (false, false), (true, false)] {
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy(
            "",
            None,
            Policy {
                delay_ms: 1_000,
                ..Policy::default()
            },
        )
        .unwrap();
        push(
            &f,
            &["http://a/1", "http://a/2", "http://a/3", "http://b/1"],
        );
        let mut l = f.lease(10, None, 5_000).unwrap();
        l.sort_by(|x, y| x.url.cmp(&y.url));
        assert_eq!(urls(&l), ["http://a/1", "http://b/1"], "{case}");
        let (a1, b1) = (l[0].token, l[1].token);
        clock.advance(200);
        // a/1's response arrived at 10,150; b/1's at the call.
        assert_eq!(
            f.complete_ended(&[
                (a1, 150, Completion::Fetched, 10_150),
                (b1, 0, Completion::Fetched, u64::MAX),
                (a1, 0, Completion::Fetched, 10_190),
            ])
            .unwrap(),
            [true, true, false],
            "{case}"
        );
        // Said again in a later call: nothing changes.
        assert_eq!(
            f.complete(&[(a1, 0, Completion::Fetched)]).unwrap(),
            [false],
            "{case}"
        );
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        let f = reopen_after(f, crash, &disk, &clock);
        let version =
            u32::from_le_bytes(disk.content("MANIFEST").unwrap()[4..8].try_into().unwrap());
        assert!(version >= 18, "{case}: version {version}");
        // Still leased, but no longer holding the host.
        assert_eq!(
            f.status("", None, b"http://a/1").unwrap(),
            crivello::UrlStatus::Leased { until_ms: 15_000 },
            "{case}"
        );
        let a = f.queues("", 0, 1000).unwrap();
        let a = a.iter().find(|q| q.key == b"a").expect("queue a");
        assert_eq!((a.leased, a.next_due_ms), (1, Some(11_150)), "{case}");
        clock.set(11_149);
        assert!(ours(&f, 5_000).is_empty(), "{case}");
        clock.set(11_150);
        let l = ours(&f, 5_000);
        assert_eq!(urls(&l), ["http://a/2"], "{case}");
        let a2 = l[0].token;
        // a/1 done after a/2 went out: no delay runs again (a/2 holds the host).
        clock.set(11_300);
        assert!(f.done(a1, 100).unwrap(), "{case}");
        assert_eq!(due_of(&f, b"a"), None, "{case}");
        // a/2's fetch ended at 11,250: a/3 is due a delay after, and a/2's done changes
        // nothing of it.
        assert_eq!(
            f.complete_ended(&[(a2, 0, Completion::Fetched, 11_250)])
                .unwrap(),
            [true],
            "{case}"
        );
        assert_eq!(due_of(&f, b"a"), Some(12_250), "{case}");
        assert!(f.done(a2, 0).unwrap(), "{case}");
        assert_eq!(due_of(&f, b"a"), Some(12_250), "{case}");
        clock.set(12_249);
        assert!(ours(&f, 60_000).is_empty(), "{case}");
        clock.set(12_250);
        assert_eq!(urls(&ours(&f, 60_000)), ["http://a/3"], "{case}");
        // b/1's lease expires at 15,000: back in its queue, due at once (its delay ran
        // from its fetch's end), not a delay after the deadline.
        clock.set(15_000);
        assert_eq!(urls(&ours(&f, 60_000)), ["http://b/1"], "{case}");
    }
}

#[test]
fn a_hand_out_that_returns_expired_leases_replays_as_it_ran() {
    // The ratio rule (p = 0.5) with two URLs of a host at once. X's fetch ends (it no longer
    // holds its place), W is handed out and done: the burst took 150 ms, Y still holds.
    // Then X and Y expire: the hand-out that serves X again returns both first, and Y's
    // expiry ends the burst (due 11,300). A lease entry has no instant: without the
    // hand-out's own (entry 22), a replay returned Y only at X's done, inside a new burst
    // with X, and the queue came back due 300 ms later than it was.
    for (checkpoint, crash) in [(false, true), (true, true), (false, false)] {
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy(
            "",
            None,
            Policy {
                delay_ms: 0,
                ratio_ppm: 500_000,
                per_queue: 2,
                ..Policy::default()
            },
        )
        .unwrap();
        push(&f, &["http://h/x", "http://h/y", "http://h/w"]);
        let l = f.lease(10, Some(2), 1_000).unwrap();
        assert_eq!(urls(&l), ["http://h/x", "http://h/y"], "{case}");
        clock.set(10_050);
        let x = l[0].token;
        assert_eq!(
            f.complete(&[(x, 50, Completion::Fetched)]).unwrap(),
            [true],
            "{case}"
        );
        clock.set(10_100);
        let w = f.lease(10, Some(2), 60_000).unwrap();
        assert_eq!(urls(&w), ["http://h/w"], "{case}");
        clock.set(10_200);
        assert!(f.done(w[0].token, 100).unwrap(), "{case}");
        clock.set(11_500);
        let again = f.lease(10, Some(1), 60_000).unwrap();
        assert_eq!(urls(&again), ["http://h/x"], "{case}");
        clock.set(11_600);
        assert!(f.done(again[0].token, 10).unwrap(), "{case}");
        // X's burst alone: 10 ms at p = 0.5 from 11,600.
        assert_eq!(due_of(&f, b"h"), Some(11_620), "{case}");
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        let f = reopen_after(f, crash, &disk, &clock);
        assert_eq!(due_of(&f, b"h"), Some(11_620), "{case}");
    }
}

#[test]
fn a_clock_set_back_neither_undoes_an_expiry_nor_makes_a_replay_differ() {
    // A lease whose fetch ended at 10,100 (its host due again then) expires at 11,000; a
    // call at 12,000 (a listing, which journals nothing) returns it to its queue. Then the
    // system's clock is set back to 10,500, before the deadline, and the URL is handed out
    // again. The frontier's time does not run back: the hand-out counts as at 12,000 (its
    // lease ends at 13,000, not at 11,500 as with the clock's own instant), and a crash, a
    // checkpoint and a crash, or a close bring back the same lease.
    for (checkpoint, crash) in [(false, true), (true, true), (false, false)] {
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        push(&f, &["http://h/1"]);
        let first = f.lease(10, None, 1_000).unwrap();
        assert_eq!(urls(&first), ["http://h/1"], "{case}");
        clock.set(10_100);
        let fetched = [(first[0].token, 0, Completion::Fetched)];
        assert_eq!(f.complete(&fetched).unwrap(), [true], "{case}");
        clock.set(12_000);
        assert_eq!(f.queues("", 0, 10).unwrap()[0].leased, 0, "{case}");
        clock.set(10_500);
        let again = f.lease(10, None, 1_000).unwrap();
        assert_eq!(urls(&again), ["http://h/1"], "{case}");
        assert_eq!(again[0].deadline_ms, 13_000, "{case}");
        assert!(!f.done(first[0].token, 1).unwrap(), "{case}");
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        let before = f.queues("", 0, 10).unwrap();
        let f = reopen_after(f, crash, &disk, &clock);
        assert_eq!(f.queues("", 0, 10).unwrap(), before, "{case}");
        assert_eq!(
            f.status("", None, b"http://h/1").unwrap(),
            UrlStatus::Leased { until_ms: 13_000 },
            "{case}"
        );
        assert!(f.done(again[0].token, 1).unwrap(), "{case}");
    }
}

#[test]
fn a_done_refused_for_an_expired_lease_stays_refused_after_a_crash_with_the_clock_behind() {
    // A lease due at 11,000; a done at 12,000 finds it expired and answers false (no other
    // call journals an instant after it). Then a crash, a checkpoint and a crash, or a
    // close, and the system's clock is back at 10,500 when the store is opened again: the
    // done's answer stands, and the URL waits, to be handed out again. Before, the
    // expiry was not journaled: the lease came back until 11,000 and its done answered
    // true.
    for (checkpoint, crash) in [(false, true), (true, true), (false, false)] {
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        push(&f, &["http://h/1"]);
        let first = f.lease(10, None, 1_000).unwrap();
        assert_eq!(first[0].deadline_ms, 11_000, "{case}");
        clock.set(12_000);
        assert!(!f.done(first[0].token, 1).unwrap(), "{case}");
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        clock.set(10_500);
        let f = reopen_after(f, crash, &disk, &clock);
        assert!(!f.done(first[0].token, 1).unwrap(), "{case}");
        assert_eq!(
            f.status("", None, b"http://h/1").unwrap(),
            UrlStatus::Waiting,
            "{case}"
        );
        // Its host is due from the deadline (the fetch's end is not known), by the clock.
        clock.set(11_000);
        // (A checkpoint's writing pushed other hosts' URLs.)
        let again = f.lease(100_000, None, 1_000).unwrap();
        assert!(urls(&again).iter().any(|u| u == "http://h/1"), "{case}");
    }
}

#[test]
fn a_policy_set_after_the_clock_was_set_back_replays_as_it_ran() {
    // A lease expires at 11,000 and a listing at 12,000 returns its URL (its host due
    // 5,000 ms after the deadline). The clock is set back to 10,500 and the delay set to 0:
    // the cut counts from the frontier's time, 12,000, and so does its entry 19, whose
    // replay returns the lease first, as the call did. With the clock's own instant the
    // entry held 10,500, and a replay kept the URL leased until 11,000.
    for (checkpoint, crash) in [(false, true), (true, true), (false, false)] {
        let case = format!("checkpoint: {checkpoint}, crash: {crash}");
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        let delay = |delay_ms| Policy {
            delay_ms,
            ..Policy::default()
        };
        f.set_policy("", None, delay(5_000)).unwrap();
        push(&f, &["http://h/1"]);
        assert_eq!(urls(&f.lease(10, None, 1_000).unwrap()), ["http://h/1"]);
        clock.set(12_000);
        assert_eq!(due_of(&f, b"h"), Some(16_000), "{case}");
        clock.set(10_500);
        f.set_policy("", None, delay(0)).unwrap();
        assert_eq!(due_of(&f, b"h"), Some(12_000), "{case}");
        assert_eq!(
            f.status("", None, b"http://h/1").unwrap(),
            UrlStatus::Waiting,
            "{case}"
        );
        if checkpoint {
            write_a_checkpoint(&f, &disk);
        }
        let before = f.queues("", 0, 10).unwrap();
        let f = reopen_after(f, crash, &disk, &clock);
        assert_eq!(f.queues("", 0, 10).unwrap(), before, "{case}");
        assert_eq!(
            f.status("", None, b"http://h/1").unwrap(),
            UrlStatus::Waiting,
            "{case}"
        );
        clock.set(12_000);
        let got = f.lease(1_000, None, 1_000).unwrap();
        assert!(got.iter().any(|l| l.url == b"http://h/1"), "{case}");
    }
}

#[test]
fn the_end_of_a_lease_whose_fetch_ended_moves_no_other_end_and_both_may_share_a_call() {
    for crash in [false, true] {
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(10_000));
        let f = open(&disk, &clock);
        f.set_policy(
            "",
            None,
            Policy {
                delay_ms: 1_000,
                ..Policy::default()
            },
        )
        .unwrap();
        push(
            &f,
            &["http://a/1", "http://a/2", "http://a/3", "http://a/4"],
        );
        let a1 = f.lease(10, None, 60_000).unwrap()[0].token;
        clock.set(10_100);
        let told = f.complete_ended(&[(a1, 0, Completion::Fetched, 10_100)]);
        assert_eq!(told.unwrap(), [true]);
        clock.set(11_100);
        let a2 = f.lease(10, None, 60_000).unwrap();
        assert_eq!(urls(&a2), ["http://a/2"]);
        clock.set(11_200);
        // a/1's end (its fetch ended at 10,100) is no end of a/2's burst: a/2's delay runs
        // from 11,150, not from the call.
        let ended = f.complete_ended(&[
            (a1, 0, Completion::Done, u64::MAX),
            (a2[0].token, 0, Completion::Done, 11_150),
        ]);
        assert_eq!(ended.unwrap(), [true, true]);
        assert_eq!(due_of(&f, b"a"), Some(12_150), "crash: {crash}");
        clock.set(12_150);
        let a3 = f.lease(10, None, 60_000).unwrap();
        assert_eq!(urls(&a3), ["http://a/3"]);
        clock.set(12_300);
        // Its fetch's end and its own end in one call; then its fetch again: nothing.
        let a3 = a3[0].token;
        let ended = f.complete_ended(&[
            (a3, 0, Completion::Fetched, 12_250),
            (a3, 0, Completion::Done, u64::MAX),
            (a3, 0, Completion::Fetched, u64::MAX),
        ]);
        assert_eq!(ended.unwrap(), [true, true, false]);
        assert_eq!(due_of(&f, b"a"), Some(13_250), "crash: {crash}");
        let f = reopen_after(f, crash, &disk, &clock);
        assert_eq!(due_of(&f, b"a"), Some(13_250), "crash: {crash}");
        assert_eq!(f.stats().unwrap().done, 3);
    }
}

#[test]
fn a_fetch_that_ended_still_counts_toward_its_queues_limit_and_ends_once() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    f.set_policy(
        "",
        Some(b"a"),
        Policy {
            delay_ms: 0,
            limit: 2,
            ..Policy::default()
        },
    )
    .unwrap();
    push(&f, &["http://a/1", "http://a/2", "http://a/3"]);
    let l = f.lease(10, None, 60_000).unwrap();
    assert_eq!(urls(&l), ["http://a/1"]);
    assert_eq!(
        f.complete(&[(l[0].token, 0, Completion::Fetched)]).unwrap(),
        [true]
    );
    let l2 = f.lease(10, None, 60_000).unwrap();
    assert_eq!(urls(&l2), ["http://a/2"]);
    assert_eq!(
        f.complete(&[(l2[0].token, 0, Completion::Fetched)])
            .unwrap(),
        [true]
    );
    // Two handed out, none done: the limit of 2 leaves no room.
    assert!(f.lease(10, None, 60_000).unwrap().is_empty());
    // Ended, then ended again in the same call: the second end changes nothing; nor does a
    // fetch said to end after its lease ended.
    assert_eq!(
        f.complete(&[
            (l[0].token, 0, Completion::Retry),
            (l[0].token, 0, Completion::Done),
            (l[0].token, 0, Completion::Fetched),
        ])
        .unwrap(),
        [true, false, false]
    );
    // a/1 back in its queue (a retry): served again, the limit counting one done (none) and
    // one leased.
    assert_eq!(urls(&f.lease(10, None, 60_000).unwrap()), ["http://a/1"]);
    assert!(f.lease(10, None, 60_000).unwrap().is_empty());
    let stats = f.stats().unwrap();
    assert_eq!(stats.leased, 2);
}

#[test]
fn a_lease_from_before_an_open_ends_no_earlier_than_the_open() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let f = open(&disk, &clock);
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 1_000,
            ..Policy::default()
        },
    )
    .unwrap();
    push(&f, &["http://a/1", "http://a/2"]);
    let l = f.lease(10, None, 60_000).unwrap();
    f.close().unwrap();
    clock.advance(5_000);
    let f = open(&disk, &clock);
    clock.advance(300);
    // Said to end at the hand-out: the frontier knows only that it was leased at the open.
    assert_eq!(
        f.complete_ended(&[(l[0].token, 0, Completion::Done, 10_000)])
            .unwrap(),
        [true]
    );
    let q = f.queues("", 0, 10).unwrap();
    assert_eq!(q[0].next_due_ms, Some(16_000));
}

#[test]
fn leases_dones_and_queues_survive_a_reopen() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    let hosts: Vec<String> = (0..20).map(|h| format!("http://h{h}.example/")).collect();
    let mut all = Vec::new();
    for i in 0..10 {
        for h in &hosts {
            all.push(format!("{h}{i}"));
        }
    }
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    push(&f, &refs);
    let leased = f.lease(5, None, 60_000).unwrap();
    assert_eq!(leased.len(), 5);
    let done: Vec<_> = f.lease(5, None, 60_000).unwrap();
    for l in &done {
        assert!(f.done(l.token, 1).unwrap());
    }
    drop(f); // no close: as a crash of the process
    let f = open(
        &disk.crash_image(crivello::storage::sim::CrashImage::KillProcess),
        &clock,
    );
    // The pushes not flushed before are in A: a flush queues them.
    f.flush().unwrap();
    let st = f.stats().unwrap();
    assert_eq!(st.leased, 5);
    assert_eq!(st.done, 5);
    assert_eq!(st.waiting, 200 - 10);
    // The leased hosts are not served again before their deadline; the others are.
    let next = f.lease(100, None, 60_000).unwrap();
    let leased_hosts: HashSet<&[u8]> = leased.iter().map(|l| default_key(&l.url)).collect();
    assert_eq!(next.len(), 15);
    for l in &next {
        assert!(!leased_hosts.contains(default_key(&l.url)));
    }
}

#[test]
fn leases_found_at_open_are_released_at_once_and_a_batch_of_completions_is_one_step() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    push(
        &f,
        &[
            "http://a.test/1",
            "http://a.test/2",
            "http://b.test/1",
            "http://c.test/1",
        ],
    );
    let first = f.lease(3, None, 60_000).unwrap();
    let mut hosts = urls(&first);
    hosts.sort();
    assert_eq!(
        hosts,
        ["http://a.test/1", "http://b.test/1", "http://c.test/1"]
    );
    drop(f); // the fetcher dies with its leases
    let disk = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let f = open(&disk, &clock);
    // Its leases hold the hosts until their deadline...
    assert!(f.lease(3, None, 60_000).unwrap().is_empty());
    // ...unless the one user of the store gives them back, in their place.
    assert_eq!(f.release_leases(Some("other")).unwrap(), 0);
    assert_eq!(f.release_leases(None).unwrap(), 3);
    assert_eq!(f.stats().unwrap().leased, 0);
    let again = f.lease(3, None, 60_000).unwrap();
    assert_eq!(urls(&again), urls(&first));
    // Three completions in one call: done, fetch again later, back in the queue; a token
    // given twice counts once, an unknown one not at all.
    let by_url = |u: &str| again.iter().find(|l| l.url == u.as_bytes()).unwrap().token;
    let t = [
        by_url("http://a.test/1"),
        by_url("http://b.test/1"),
        by_url("http://c.test/1"),
    ];
    let got = f
        .complete(&[
            (t[0], 5, crivello::Completion::Done),
            (t[1], 5, crivello::Completion::RefetchAt(60_000)),
            (t[2], 5, crivello::Completion::Retry),
            (t[0], 5, crivello::Completion::Done),
            (999_999, 5, crivello::Completion::Done),
        ])
        .unwrap();
    assert_eq!(got, [true, true, true, false, false]);
    drop(f);
    let f = open(
        &disk.crash_image(crivello::storage::sim::CrashImage::DropAll),
        &clock,
    );
    // The one to fetch again waits, with the two others.
    let st = f.stats().unwrap();
    assert_eq!((st.leased, st.done, st.waiting), (0, 1, 3));
    let mut now = urls(&f.lease(3, None, 60_000).unwrap());
    now.sort();
    assert_eq!(now, ["http://a.test/2", "http://c.test/1"]);
    clock.set(60_000);
    assert_eq!(
        urls(&f.lease(3, None, 60_000).unwrap()),
        ["http://b.test/1"]
    );
}

/// A queue held back to the end of time (a block until `u64::MAX`), or for the ratio rule's
/// longest wait (a fetch said to take `u64::MAX` ms: 100 years), still waits: the next
/// instant due says so, rather than nothing (as if nothing waited), and an unblock serves it
/// at once.
#[test]
fn a_queue_held_back_to_the_end_of_time_is_still_due_then() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    push(
        &f,
        &["http://a.test/1", "http://a.test/2", "http://b.test/1"],
    );
    f.flush().unwrap();
    f.block("", b"b.test", u64::MAX).unwrap();
    f.set_policy(
        "",
        Some(b"a.test"),
        Policy {
            ratio_ppm: 1,
            ..Policy::default()
        },
    )
    .unwrap();
    let l = f.lease(10, None, 9_000).unwrap();
    assert_eq!(urls(&l), ["http://a.test/1"]);
    assert!(f.done(l[0].token, u64::MAX).unwrap());
    assert_eq!(f.next_due_ms().unwrap(), Some(50_000 + 876_000 * 3_600_000));
    assert!(f.lease(10, None, 9_000).unwrap().is_empty());
    // a.test's queue deleted: b.test's block, to the end of time.
    f.delete_queue("", b"a.test").unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(u64::MAX - 1));
    f.block("", b"b.test", 0).unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(50_000));
    assert_eq!(
        urls(&f.lease(10, None, 9_000).unwrap()),
        ["http://b.test/1"]
    );
}

/// A policy changed while a queue waits after a fetch cuts the wait to what the new policy
/// allows (its delay from the change; the ratio rule's wait scaled by the ratios), never
/// lengthens it, and the cut holds across a reopen: a mistyped hour-long delay does not
/// strand the hosts that ended a fetch under it.
#[test]
fn a_policy_changed_during_a_wait_cuts_it_to_the_new_policy() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    let delay = |ms| Policy {
        delay_ms: ms,
        ..Policy::default()
    };
    let ratio = |ppm| Policy {
        ratio_ppm: ppm,
        ..Policy::default()
    };
    push(
        &f,
        &[
            "http://a.test/1",
            "http://a.test/2",
            "http://b.test/1",
            "http://b.test/2",
            "http://c.test/1",
            "http://c.test/2",
        ],
    );
    f.flush().unwrap();
    f.set_policy("", None, delay(3_600_000)).unwrap();
    f.set_policy("", Some(b"c.test"), ratio(1_000)).unwrap();
    let l = f.lease(10, None, 9_000).unwrap();
    assert_eq!(l.len(), 3);
    for x in &l {
        // c.test's fetch took 2 s: 2,000 s at a ratio of 0.001.
        assert!(f.done(x.token, 2_000).unwrap());
    }
    assert_eq!(f.next_due_ms().unwrap(), Some(50_000 + 2_000_000));
    // A longer default lengthens no wait begun; a shorter one cuts a.test's and b.test's.
    clock.set(60_000);
    f.set_policy("", None, delay(7_200_000)).unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(50_000 + 2_000_000));
    f.set_policy("", None, delay(1_000)).unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(61_000));
    clock.set(61_000);
    let l = f.lease(10, None, 9_000).unwrap();
    assert_eq!(urls(&l), ["http://a.test/2", "http://b.test/2"]);
    // c.test's own ratio, raised a thousandfold: the 1,989 s left become 1.989 s.
    f.set_policy("", Some(b"c.test"), ratio(1_000_000)).unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(61_000 + 1_989));
    // The cuts are in the journal: a reopen keeps them.
    drop(f);
    let f = open(&disk, &clock);
    clock.set(62_988);
    assert!(f.lease(10, None, 9_000).unwrap().is_empty());
    clock.set(62_989);
    assert_eq!(
        urls(&f.lease(10, None, 9_000).unwrap()),
        ["http://c.test/2"]
    );
}

/// A queue given some fields of a policy (`change_policy`: url-frontier's SetDelay and
/// SetCrawlLimit on a key, `policy --key K --delay D`) follows the default in the others as
/// it changes, across a crash (the journal's entries) and a close (the checkpoint); a whole
/// policy (`set_policy`) gives it every field. Before, a key's delay froze the default's
/// limit and per-queue as they were at that instant.
#[test]
fn a_queue_given_some_fields_follows_the_default_in_the_others() {
    for crash in [true, false] {
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(50_000));
        let f = open(&disk, &clock);
        let all: Vec<String> = ["a.test", "b.test", "c.test"]
            .iter()
            .flat_map(|h| (1..=6).map(move |i| format!("http://{h}/{i}")))
            .collect();
        push(&f, &all.iter().map(String::as_str).collect::<Vec<_>>());
        f.flush().unwrap();
        let delay = PolicyFields {
            delay_ms: Some(0),
            ratio_ppm: Some(0),
            ..PolicyFields::default()
        };
        f.change_policy("", Some(b"a.test"), delay).unwrap();
        let whole = Policy {
            delay_ms: 0,
            ..Policy::default()
        };
        f.set_policy("", Some(b"b.test"), whole).unwrap();
        // The default changes after: a limit of 2 URLs, 2 at once, a delay of 10 s.
        let later = PolicyFields {
            limit: Some(2),
            per_queue: Some(2),
            delay_ms: Some(10_000),
            ratio_ppm: Some(0),
        };
        f.change_policy("", None, later).unwrap();
        let f = reopen_after(f, crash, &disk, &clock);
        let a = f.policy("", Some(b"a.test")).unwrap();
        assert_eq!(
            (a.delay_ms, a.per_queue, a.limit),
            (0, 2, 2),
            "crash {crash}"
        );
        let b = f.policy("", Some(b"b.test")).unwrap();
        assert_eq!(b, whole, "crash {crash}");
        let c = f.policy("", Some(b"c.test")).unwrap();
        assert_eq!((c.delay_ms, c.per_queue, c.limit), (10_000, 2, 2));
        // a.test: two at once, no delay, two in all; b.test: one at a time, no limit;
        // c.test: two at once, then 10 s.
        let mut served = std::collections::BTreeMap::<String, usize>::new();
        for _ in 0..8 {
            for l in f.lease(10, None, 60_000).unwrap() {
                let host = String::from_utf8(l.key.clone()).unwrap();
                *served.entry(host).or_default() += 1;
                assert!(f.done(l.token, 1).unwrap());
            }
        }
        let got: Vec<(&str, usize)> = served.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            got,
            [("a.test", 2), ("b.test", 6), ("c.test", 2)],
            "crash {crash}"
        );
        // The queues list the policy in force for the queues with fields of their own.
        let q = f.queues("", 0, 10).unwrap();
        assert_eq!(q[0].policy, Some(a));
        assert_eq!(q[1].policy, Some(whole));
        assert_eq!(q[2].policy, None);
        // A field set again on a.test keeps its others as they were: its own delay, the
        // default's per-queue and limit.
        let limit = PolicyFields {
            limit: Some(5),
            ..PolicyFields::default()
        };
        f.change_policy("", Some(b"a.test"), limit).unwrap();
        let a = f.policy("", Some(b"a.test")).unwrap();
        assert_eq!((a.delay_ms, a.per_queue, a.limit), (0, 2, 5));
        // The values that stand for a field not given are refused for a queue (the default
        // takes them: it has every field).
        for bad in [
            PolicyFields {
                per_queue: Some(0),
                ..PolicyFields::default()
            },
            PolicyFields {
                limit: Some(u64::MAX),
                ..PolicyFields::default()
            },
            PolicyFields {
                delay_ms: Some(u64::MAX),
                ..PolicyFields::default()
            },
        ] {
            let e = f.change_policy("", Some(b"a.test"), bad).unwrap_err();
            assert!(matches!(e, Error::InvalidOption { .. }), "{e}");
        }
        let most = PolicyFields {
            per_queue: Some(u32::MAX),
            limit: Some(u64::MAX),
            ..PolicyFields::default()
        };
        f.change_policy("", None, most).unwrap();
        f.change_policy("", Some(b"a.test"), PolicyFields::all(Policy::default()))
            .unwrap();
        f.change_policy("", Some(b"a.test"), most).unwrap_err();
        let unbounded = PolicyFields {
            per_queue: Some(u32::MAX),
            ..PolicyFields::default()
        };
        f.change_policy("", Some(b"a.test"), unbounded).unwrap();
        assert_eq!(f.policy("", Some(b"a.test")).unwrap().per_queue, u32::MAX);
        f.close().unwrap();
    }
}

/// With flushes in the background, a hand-out whose front is empty flushes first, but not
/// again right after a flush that left it empty (every host's fetcher out, the URLs pushed
/// all for those hosts): the next such flush waits ten times as long as that one took (a
/// Scrapy crawl over five hosts merged at each call, 125 s where 40 s do). What is pushed
/// meanwhile comes by the flush in the background, or by the next flush first.
#[test]
fn an_empty_front_is_not_flushed_again_right_after_a_flush_that_left_it_empty() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(10_000));
    let o = opts().background_flush(true);
    let f = Frontier::open_with(Arc::new(disk.clone()), o, clock.clone()).unwrap();
    let hosts = |from: usize, n: usize| -> Vec<String> {
        (from..from + n)
            .map(|i| format!("http://h{}.test/{i}", i % 5))
            .collect()
    };
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    push(&f, &refs(&hosts(0, 50)));
    assert_eq!(f.lease(10, None, 3_600_000).unwrap().len(), 5);
    // More of the same hosts: the flush of the empty front leaves it empty.
    push(&f, &refs(&hosts(100, 10)));
    assert!(f.lease(10, None, 3_600_000).unwrap().is_empty());
    // A new host now: not flushed first, the wait not over (the clock stands still).
    push(&f, &["http://new.test/1"]);
    assert!(f.lease(10, None, 3_600_000).unwrap().is_empty());
    // Once it is (or the flush in the background brought it), the new host is served.
    clock.advance(60_000);
    let mut got = Vec::new();
    for _ in 0..500 {
        got = urls(&f.lease(10, None, 3_600_000).unwrap());
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(got.contains(&"http://new.test/1".to_owned()), "{got:?}");
    // Every host out again, and a flush that leaves the front empty; then the clock is set
    // back to before that wait began: the wait is by the clock as it reads (the frontier's
    // time stands still meanwhile), so it no longer holds the next flush back, and a new
    // host is served at once.
    push(&f, &refs(&hosts(200, 10)));
    assert!(f.lease(10, None, 3_600_000).unwrap().is_empty());
    push(&f, &["http://newer.test/1"]);
    clock.set(60_000);
    let got = urls(&f.lease(10, None, 3_600_000).unwrap());
    assert_eq!(got, ["http://newer.test/1"]);
    f.close().unwrap();
}

#[test]
fn the_next_instant_due_is_exact_once_leases_end_and_queues_empty() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 700,
            ..Policy::default()
        },
    )
    .unwrap();
    assert_eq!(f.next_due_ms().unwrap(), None);
    push(
        &f,
        &["http://a.test/1", "http://a.test/2", "http://b.test/1"],
    );
    f.flush().unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(50_000));
    // Paused: nothing is due (a waiter would spin on "now" while hand-outs give nothing).
    f.set_paused(true).unwrap();
    assert_eq!(f.next_due_ms().unwrap(), None);
    assert_eq!(f.next_due_ms_of("").unwrap(), None);
    assert!(f.lease(10, None, 9_000).unwrap().is_empty());
    f.set_paused(false).unwrap();
    assert_eq!(f.next_due_ms_of("").unwrap(), Some(50_000));
    let l = f.lease(10, None, 9_000).unwrap();
    assert_eq!(l.len(), 2);
    // Both queues are leased: the first lease's end is next, paused too.
    assert_eq!(f.next_due_ms().unwrap(), Some(59_000));
    f.set_paused(true).unwrap();
    assert_eq!(f.next_due_ms().unwrap(), Some(59_000));
    assert_eq!(f.next_due_ms_of("").unwrap(), Some(59_000));
    f.set_paused(false).unwrap();
    clock.advance(100);
    for x in &l {
        assert!(f.done(x.token, 50).unwrap());
    }
    // a.test's next URL after its delay; b.test is empty; the leases' ends are gone.
    assert_eq!(f.next_due_ms().unwrap(), Some(50_800));
    clock.set(50_800);
    let l = f.lease(10, None, 9_000).unwrap();
    assert_eq!(urls(&l), ["http://a.test/2"]);
    assert!(f.done(l[0].token, 50).unwrap());
    // Nothing waits and nothing is leased: nothing is due, whatever the heaps held.
    assert_eq!(f.next_due_ms().unwrap(), None);
}

#[test]
fn unsynced_pushes_are_made_durable_by_the_next_commit_before_it() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    push(&f, &["http://a.test/1"]);
    let l = f.lease(1, None, 60_000).unwrap();
    let items = [
        Discovered::url(b"http://a.test/2"),
        Discovered::url(b"http://a.test/1"),
    ];
    assert_eq!(f.push_new_unsynced("", &items).unwrap(), [true, false]);
    // Nothing durable since: power loss may lose them, and a reopen does not invent them.
    let lost = open(
        &disk.crash_image(crivello::storage::sim::CrashImage::DropAll),
        &clock,
    );
    assert_eq!(
        lost.status("", None, b"http://a.test/2").unwrap(),
        crivello::UrlStatus::Unknown
    );
    drop(lost);
    // The done's commit syncs them first.
    assert!(f.done(l[0].token, 1).unwrap());
    drop(f);
    let disk = disk.crash_image(crivello::storage::sim::CrashImage::DropAll);
    let f = open(&disk, &clock);
    assert_eq!(
        f.status("", None, b"http://a.test/2").unwrap(),
        crivello::UrlStatus::Waiting
    );
    assert_eq!(
        f.status("", None, b"http://a.test/1").unwrap(),
        crivello::UrlStatus::Done
    );
    // So does sync.
    let items = [Discovered::url(b"http://b.test/1")];
    assert_eq!(f.push_new_unsynced("b", &items).unwrap(), [true]);
    f.sync().unwrap();
    drop(f);
    let f = open(
        &disk.crash_image(crivello::storage::sim::CrashImage::DropAll),
        &clock,
    );
    assert_eq!(
        f.status("b", None, b"http://b.test/1").unwrap(),
        crivello::UrlStatus::Waiting
    );
}

#[test]
fn a_sieve_says_which_pushes_are_new_across_flushes_and_reopens() {
    let disk = SimDisk::new();
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    let url = |i: u32| format!("http://h{}.test/{}", i % 7, i);
    for i in 0..300 {
        assert!(s.push_new(url(i).as_bytes()).unwrap(), "{i}");
        if i % 50 == 49 {
            s.flush().unwrap();
        }
    }
    for i in (0..300).step_by(7) {
        assert!(!s.push_new(url(i).as_bytes()).unwrap(), "{i}");
    }
    assert!(s.push_new(b"").is_err());
    s.close().unwrap();
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for i in (0..310).step_by(3) {
        assert_eq!(s.push_new(url(i).as_bytes()).unwrap(), i >= 300, "{i}");
    }
    s.flush().unwrap();
    let mut out = Vec::new();
    loop {
        let batch = s.frontier_next(1000).unwrap();
        if batch.is_empty() {
            break;
        }
        out.extend(batch);
    }
    let want: Vec<Vec<u8>> = (0..300)
        .chain((300..310).filter(|i| i % 3 == 0))
        .map(|i| url(i).into_bytes())
        .collect();
    assert_eq!(out, want);
}

#[test]
fn a_store_is_a_plain_sieve_or_a_frontier_never_both() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sieve::open(dir.path(), Options::new()).unwrap();
    s.push(b"http://a/").unwrap();
    s.flush().unwrap();
    s.frontier_next(10).unwrap();
    s.frontier_commit().unwrap();
    s.close().unwrap();
    match Frontier::open(dir.path(), Options::new()) {
        Err(Error::WrongMode { .. }) => {}
        other => panic!("{:?}", other.err()),
    }

    // Pushed as a plain sieve, then opened as a frontier: the URLs are queued.
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sieve::open(dir.path(), Options::new()).unwrap();
    s.push(b"http://a/1").unwrap();
    s.push(b"http://b/1").unwrap();
    s.close().unwrap();
    let f = Frontier::open(dir.path(), Options::new()).unwrap();
    push(&f, &["http://a/2", "http://a/1"]);
    f.flush().unwrap();
    assert_eq!(f.stats().unwrap().waiting, 3);
    f.close().unwrap();
    let mut s = Sieve::open(dir.path(), Options::new()).unwrap();
    assert!(matches!(s.frontier_next(1), Err(Error::WrongMode { .. })));

    // A commit of nothing fixes a plain sieve too (a duplicate filter's store, which pushes
    // and never pops): a frontier refuses it instead of taking its lines for URLs.
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sieve::open(dir.path(), Options::new()).unwrap();
    assert!(s.push_new(b"a3f1c2d4e5").unwrap());
    s.frontier_commit().unwrap();
    s.close().unwrap();
    match Frontier::open(dir.path(), Options::new()) {
        Err(Error::WrongMode { .. }) => {}
        other => panic!("{:?}", other.err()),
    }
}

/// The default policy is the store's: naming a crawl with it makes no crawl. A policy or a
/// block of a key longer than a queue's key may be is refused, as a push with it is.
#[test]
fn policies_and_blocks_take_only_keys_a_push_takes() {
    let dir = tempfile::tempdir().unwrap();
    let f = Frontier::open(dir.path(), Options::new()).unwrap();
    let p = Policy {
        delay_ms: 5,
        ..f.policy("", None).unwrap()
    };
    f.set_policy("elsewhere", None, p).unwrap();
    assert_eq!(f.policy("", None).unwrap(), p);
    assert!(f.crawls().unwrap().is_empty(), "{:?}", f.crawls());
    let long = vec![b'k'; 256];
    for r in [
        f.set_policy("", Some(&long), p),
        f.block("", &long, 1),
        f.push(
            "",
            &[Discovered {
                key: Some(&long),
                ..Discovered::url(b"http://a.test/")
            }],
        ),
    ] {
        assert!(matches!(r, Err(Error::InvalidOption { .. })), "{r:?}");
    }
    f.set_policy("", Some(&long[..255]), p).unwrap();
    f.block("", &long[..255], 1).unwrap();
    f.close().unwrap();
    let f = Frontier::open(dir.path(), Options::new()).unwrap();
    assert_eq!(f.policy("", Some(&long[..255])).unwrap(), p);
    assert_eq!(f.crawls().unwrap(), vec!["DEFAULT".to_string()]);
}

/// A hand-out in parts serves what one call serves, in the same order, each queue by one
/// part only, though the queues keep room for more; each part is durable on its own.
#[test]
fn a_hand_out_in_parts_gives_what_one_call_gives() {
    let clock = Arc::new(ManualClock::new(1_000));
    let all: Vec<String> = (0..3)
        .flat_map(|p| (0..50).map(move |h| format!("http://h{h}.test/{p}")))
        .collect();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let (one, parts) = (SimDisk::new(), SimDisk::new());
    let (a, b) = (open(&one, &clock), open(&parts, &clock));
    let two = Policy {
        per_queue: 2,
        ..Policy::default()
    };
    for f in [&a, &b] {
        f.set_policy("", None, two).unwrap();
        push(f, &refs);
    }
    let req = crivello::LeaseRequest {
        max_queues: 40,
        per_queue: Some(1),
        ..Default::default()
    };
    let whole = a.lease_with(&req).unwrap();
    assert_eq!(whole.len(), 40);
    let mut h = crivello::Handout::new(req.clone());
    let mut sizes = Vec::new();
    let mut got = Vec::new();
    while !h.is_finished() {
        let part = b.lease_part(&mut h, 7).unwrap();
        sizes.push(part.len());
        got.extend(part.to_leased());
    }
    assert_eq!(sizes, [7, 7, 7, 7, 7, 5]);
    assert_eq!(urls(&got), urls(&whole));
    assert_eq!((h.queues(), h.urls()), (40, 40));
    assert!(b.lease_part(&mut h, 7).unwrap().is_empty());
    // Each part was durable: a power loss that drops all that was not synced keeps every
    // lease.
    let image = parts.crash_image(crivello::storage::sim::CrashImage::DropAll);
    drop(b);
    let b = open(&image, &clock);
    assert_eq!(b.stats().unwrap().leased, 40);
    // The next hand-out, whole or in parts, goes on alike: the second URL of the 40 queues
    // (room for two each), and the first of the 10 others.
    let whole = a.lease(100, Some(1), 30_000).unwrap();
    let mut h = crivello::Handout::new(crivello::LeaseRequest {
        per_queue: Some(1),
        ..Default::default()
    });
    let mut got = Vec::new();
    while !h.is_finished() {
        got.extend(b.lease_part(&mut h, 16).unwrap().to_leased());
    }
    assert_eq!(whole.len(), 50);
    assert_eq!(urls(&got), urls(&whole));
}

/// A hand-out in parts ends although every part meets new queues: it serves at most the
/// queues there were at its first part; the next hand-out serves the new ones.
#[test]
fn a_hand_out_in_parts_ends_while_new_hosts_keep_coming() {
    let clock = Arc::new(ManualClock::new(1_000));
    let disk = SimDisk::new();
    let f = open(&disk, &clock);
    let first: Vec<String> = (0..5).map(|h| format!("http://old{h}.test/")).collect();
    push(&f, &first.iter().map(String::as_str).collect::<Vec<_>>());
    f.flush().unwrap();
    let mut h = crivello::Handout::new(crivello::LeaseRequest::default());
    let mut got = Vec::new();
    let mut parts = 0;
    while !h.is_finished() {
        got.extend(f.lease_part(&mut h, 1).unwrap().to_leased());
        // Each part, two new hosts, flushed into their queues.
        let new = [
            format!("http://new{parts}a.test/"),
            format!("http://new{parts}b.test/"),
        ];
        push(&f, &[new[0].as_str(), new[1].as_str()]);
        f.flush().unwrap();
        parts += 1;
        assert!(parts < 100, "the hand-out does not end");
    }
    let mut hosts: Vec<String> = urls(&got);
    hosts.sort();
    assert_eq!(hosts, first);
    // The next hand-out serves the hosts pushed meanwhile.
    assert_eq!(f.lease(1_000, None, 30_000).unwrap().len(), 2 * parts);
}

/// The frontier against a model: random pushes, leases, dones, retries, refetches, expiries,
/// policies (delay, ratio, URLs at once, limit), blocks, pauses, deleted queues and crawls,
/// reopens and power losses, with a simulated clock.
mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<(u8, u8)>),
        /// Up to so many queues, so many URLs each; in parts of so many queues (0: one call).
        Lease(u8, u8, u8),
        Done(u8, u16),
        /// The fetch of a lease ended now, after so many ms (`Completion::Fetched`).
        Fetched(u8, u16),
        Retry(u8),
        Refetch(u8, u16),
        Advance(u16),
        /// The clock set back by so many ms (a system clock stepped back).
        SetBack(u16),
        Policy(u16, u16, u8, u8),
        Block(u8, u16),
        Pause(bool),
        DeleteQueue(u8),
        DeleteCrawl,
        Reopen,
        PowerLoss,
        Flush,
        /// A known update of `http://h<h>.test/<p>`: done (0) or to fetch again after so
        /// many milliseconds.
        Known(u8, u8, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => proptest::collection::vec((0u8..12, 0u8..12), 1..6).prop_map(Op::Push),
            4 => (1u8..4, 1u8..4, 0u8..3).prop_map(|(q, k, p)| Op::Lease(q, k, p)),
            3 => (any::<u8>(), 0u16..800).prop_map(|(i, t)| Op::Done(i, t)),
            2 => (any::<u8>(), 0u16..800).prop_map(|(i, t)| Op::Fetched(i, t)),
            2 => Just(Op::Flush),
            1 => any::<u8>().prop_map(Op::Retry),
            1 => (any::<u8>(), 0u16..4000).prop_map(|(i, a)| Op::Refetch(i, a)),
            2 => (0u16..3000).prop_map(Op::Advance),
            1 => (0u16..3000).prop_map(Op::SetBack),
            1 => (0u16..2000, 0u16..3, 1u8..3, 0u8..6)
                .prop_map(|(d, r, k, l)| Op::Policy(d, r, k, l)),
            1 => (0u8..12, 0u16..3000).prop_map(|(h, d)| Op::Block(h, d)),
            1 => any::<bool>().prop_map(Op::Pause),
            1 => (0u8..12).prop_map(Op::DeleteQueue),
            1 => Just(Op::DeleteCrawl),
            1 => Just(Op::Reopen),
            1 => Just(Op::PowerLoss),
            2 => (0u8..12, 0u8..12, prop_oneof![Just(0u16), 1u16..3000])
                .prop_map(|(h, p, a)| Op::Known(h, p, a)),
        ]
    }

    /// One host's queue in the model.
    #[derive(Default)]
    struct Host {
        urls: Vec<String>,
        /// The FIFO's next index.
        next: usize,
        returned: BTreeSet<usize>,
        /// (instant, order, index): the order is the frontier's seq's.
        refetch: BTreeSet<(u64, u64, usize)>,
        /// FIFO indexes a known update took out.
        skipped: BTreeSet<usize>,
        /// Leased: index -> (token, deadline, whether its fetch ended).
        leased: HashMap<usize, (u64, u64, bool)>,
        completed: u64,
        burst: u64,
        due: u64,
        blocked: u64,
    }

    impl Host {
        /// Its leases whose fetch has not ended: those that hold its places.
        fn holding(&self) -> usize {
            self.leased.values().filter(|l| !l.2).count()
        }

        /// A fetch ended at `at` (its lease already out of `leased`, or marked fetched)
        /// after `took` ms: the delay from then, and the ratio rule over the burst once the
        /// last lease holding the queue let it go.
        fn fetch_ended(&mut self, p: Policy, at: u64, took: u64) {
            self.burst += took;
            let mut wait = p.delay_ms;
            let ends = self.holding() == 0;
            if p.ratio_ppm > 0 && ends {
                wait = wait.max(self.burst * 1_000_000 / p.ratio_ppm as u64);
            }
            if ends {
                self.burst = 0;
            }
            self.due = self.due.max(at + wait);
        }

        /// The lease of index `i` ends at `at` after `took` ms: the politeness runs unless
        /// its fetch had ended before.
        fn lease_ended(&mut self, p: Policy, i: usize, at: u64, took: u64) {
            if let Some((_, _, fetched)) = self.leased.remove(&i) {
                if !fetched {
                    self.fetch_ended(p, at, took);
                }
            }
        }

        /// The next index to serve at `now`, as the frontier's order says.
        fn next_at(&self, now: u64) -> Option<usize> {
            if let Some(&i) = self.returned.first() {
                return Some(i);
            }
            if let Some(&(w, _, i)) = self.refetch.first() {
                if w <= now {
                    return Some(i);
                }
            }
            (self.next..self.urls.len()).find(|i| !self.skipped.contains(i))
        }
    }

    #[derive(Default)]
    struct Model {
        seen: HashSet<String>,
        /// Each URL's place in the order of the frontier's seqs.
        order: HashMap<String, u64>,
        orders: u64,
        hosts: BTreeMap<String, Host>,
        done: HashSet<String>,
        /// URLs of deleted queues: never served again.
        deleted: HashSet<String>,
        policy: Policy,
        paused: bool,
    }

    impl Model {
        /// Deletes a host's queue: what it holds is gone, its URLs stay known; a URL found
        /// later joins it.
        fn delete(&mut self, name: &str) -> u64 {
            let Some(h) = self.hosts.get_mut(name) else {
                return 0;
            };
            let mut gone: Vec<usize> = (h.next..h.urls.len())
                .filter(|i| !h.skipped.contains(i))
                .collect();
            gone.extend(h.returned.iter().copied());
            gone.extend(h.refetch.iter().map(|(_, _, i)| *i));
            gone.extend(h.leased.keys().copied());
            for &i in &gone {
                self.deleted.insert(h.urls[i].clone());
            }
            let urls = std::mem::take(&mut h.urls);
            *h = Host {
                next: urls.len(),
                urls,
                ..Host::default()
            };
            gone.len() as u64
        }

        /// Ends the leases whose deadline has passed, in deadline order: each fetch ended at
        /// its deadline, after 0 ms, and the politeness runs from there.
        fn expire(&mut self, now: u64) {
            let p = self.policy;
            for h in self.hosts.values_mut() {
                let mut gone: Vec<(u64, usize)> = h
                    .leased
                    .iter()
                    .filter(|(_, (_, d, _))| *d <= now)
                    .map(|(i, (_, d, _))| (*d, *i))
                    .collect();
                gone.sort_unstable();
                for (deadline, i) in gone {
                    h.returned.insert(i);
                    h.lease_ended(p, i, deadline, 0);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
        #[test]
        fn the_frontier_follows_the_model(ops in proptest::collection::vec(op(), 1..70)) {
            follow(ops, opts())?;
        }

        /// The same with flushes and compactions on threads of their own (Q runs merged when
        /// 2 wait): hand-outs, ends, known updates and moves go on while a merge runs.
        #[test]
        fn the_frontier_follows_the_model_with_background_compactions(
            ops in proptest::collection::vec(op(), 1..70)
        ) {
            follow(ops, opts().background_flush(true).queue_runs(2))?;
        }
    }

    fn follow(ops: Vec<Op>, opts: Options) -> Result<(), TestCaseError> {
        {
            let mut disk = SimDisk::new();
            let clock = Arc::new(ManualClock::new(1_000_000));
            let open = |disk: &SimDisk, clock: &Arc<ManualClock>| {
                Frontier::open_with(Arc::new(disk.clone()), opts.clone(), clock.clone())
                    .expect("open")
            };
            let mut f = open(&disk, &clock);
            let mut m = Model::default();
            let mut tokens: Vec<(u64, String)> = Vec::new();
            // The latest instant the clock gave since the open: the frontier's time does not
            // run back while it is open.
            let mut high = 0;
            for op in ops {
                high = high.max(crivello::queues::Clock::now_ms(&*clock));
                let now = f.now_ms().unwrap();
                prop_assert_eq!(now, high, "the frontier's time");
                match op {
                    Op::Push(items) => {
                        let us: Vec<String> = items
                            .iter()
                            .map(|(h, p)| format!("http://h{h}.test/{p}"))
                            .collect();
                        let refs: Vec<&str> = us.iter().map(String::as_str).collect();
                        // Half the batches say which URLs were new: exactly those the model
                        // had not seen.
                        let reported = if us.len().is_multiple_of(2) {
                            let items: Vec<Discovered> =
                                refs.iter().map(|u| Discovered::url(u.as_bytes())).collect();
                            Some(f.push_new("", &items).unwrap())
                        } else {
                            push(&f, &refs);
                            None
                        };
                        for (i, u) in us.into_iter().enumerate() {
                            let new = m.seen.insert(u.clone());
                            if let Some(r) = &reported {
                                prop_assert_eq!(r[i], new, "novelty of {}", u);
                            }
                            if new {
                                m.order.insert(u.clone(), m.orders);
                                m.orders += 1;
                                m.hosts.entry(host_of(&u)).or_default().urls.push(u);
                            }
                        }
                    }
                    Op::Lease(q, k, parts) => {
                        m.expire(now);
                        let got = if parts == 0 {
                            f.lease(q as usize, Some(k as u32), 1_500).unwrap()
                        } else {
                            // In parts: together what one call gives, no queue in two parts.
                            let mut h = crivello::Handout::new(crivello::LeaseRequest {
                                max_queues: q as usize,
                                per_queue: Some(k as u32),
                                ttl_ms: 1_500,
                                ..Default::default()
                            });
                            let mut got = Vec::new();
                            while !h.is_finished() {
                                let part = f.lease_part(&mut h, parts as usize).unwrap();
                                prop_assert!(!part.is_empty() || h.is_finished());
                                got.extend(part.to_leased());
                            }
                            prop_assert_eq!(h.urls(), got.len());
                            got
                        };
                        if m.paused {
                            prop_assert!(got.is_empty());
                        }
                        let mut per_host: HashMap<String, usize> = HashMap::new();
                        for l in &got {
                            let u = String::from_utf8(l.url.clone()).unwrap();
                            let name = String::from_utf8(l.key.clone()).unwrap();
                            prop_assert!(!m.done.contains(&u), "{} served after done", u);
                            let p = m.policy;
                            let h = m.hosts.get_mut(&name).unwrap();
                            prop_assert!(h.due <= now, "{} before due", name);
                            prop_assert!(h.blocked <= now, "{} while blocked", name);
                            let i = h.next_at(now);
                            prop_assert_eq!(i.map(|i| &h.urls[i]), Some(&u), "order in {}", name);
                            let i = i.unwrap();
                            if !h.returned.remove(&i) {
                                let r = h.refetch.iter().find(|(_, _, j)| *j == i).copied();
                                match r {
                                    Some(r) => {
                                        h.refetch.remove(&r);
                                    }
                                    None => {
                                        h.next = i + 1;
                                        h.skipped.retain(|&j| j > i);
                                    }
                                }
                            }
                            h.leased.insert(i, (l.token, now + 1_500, false));
                            prop_assert!(
                                h.holding() <= p.per_queue as usize,
                                "too many of {}",
                                name
                            );
                            if p.limit > 0 {
                                prop_assert!(h.completed + h.leased.len() as u64 <= p.limit);
                            }
                            let c = per_host.entry(name).or_default();
                            *c += 1;
                            prop_assert!(*c <= k as usize);
                            tokens.push((l.token, u));
                        }
                        prop_assert!(per_host.len() <= q as usize);
                    }
                    Op::Done(t, _) | Op::Retry(t) | Op::Refetch(t, _) | Op::Fetched(t, _) => {
                        if tokens.is_empty() {
                            continue;
                        }
                        m.expire(now);
                        // Mostly a lease in force; now and then any token, stale ones too.
                        let live: Vec<(u64, String)> = m
                            .hosts
                            .values()
                            .flat_map(|h| {
                                h.leased
                                    .iter()
                                    .map(|(i, (tk, ..))| (*tk, h.urls[*i].clone()))
                            })
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        let (token, u) = if t % 8 != 0 && !live.is_empty() {
                            live[t as usize % live.len()].clone()
                        } else {
                            tokens[t as usize % tokens.len()].clone()
                        };
                        let name = host_of(&u);
                        let took = match op {
                            Op::Done(_, took) | Op::Fetched(_, took) => took as u64,
                            _ => 7,
                        };
                        let end = |f: &Frontier| match op {
                            Op::Done(..) => f.done(token, took).unwrap(),
                            Op::Fetched(..) => {
                                f.complete(&[(token, took, Completion::Fetched)]).unwrap()[0]
                            }
                            Op::Retry(_) => f.retry(token, took).unwrap(),
                            Op::Refetch(_, after) => {
                                f.refetch(token, took, now + after as u64).unwrap()
                            }
                            _ => unreachable!(),
                        };
                        // A token of a deleted crawl, whose URL was not pushed again.
                        let at = m
                            .hosts
                            .get(&name)
                            .and_then(|h| h.urls.iter().position(|x| *x == u));
                        let Some(i) = at else {
                            prop_assert!(!end(&f), "end of lease {} of deleted {}", token, u);
                            continue;
                        };
                        let h = m.hosts.get_mut(&name).unwrap();
                        let active = h.leased.get(&i).is_some_and(|(tk, _, fetched)| {
                            *tk == token && !(*fetched && matches!(op, Op::Fetched(..)))
                        });
                        let r = end(&f);
                        prop_assert_eq!(r, active, "end of lease {} of {}", token, u);
                        if active && matches!(op, Op::Fetched(..)) {
                            h.leased.get_mut(&i).expect("leased").2 = true;
                            h.fetch_ended(m.policy, now, took);
                        } else if active {
                            h.lease_ended(m.policy, i, now, took);
                            match op {
                                Op::Done(..) => {
                                    m.done.insert(u.clone());
                                    h.completed += 1;
                                }
                                Op::Retry(_) => {
                                    h.returned.insert(i);
                                }
                                Op::Refetch(_, after) => {
                                    h.refetch.insert((now + after as u64, m.order[&u], i));
                                }
                                _ => unreachable!(),
                            }
                        }
                    }
                    Op::Known(hn, pn, after) => {
                        m.expire(now);
                        let u = format!("http://h{hn}.test/{pn}");
                        let when = if after == 0 { 0 } else { now + after as u64 };
                        let item = crivello::Known {
                            url: u.as_bytes(),
                            key: None,
                            metadata: b"known",
                            refetch_ms: when,
                        };
                        f.update("", &[item]).unwrap();
                        if m.seen.insert(u.clone()) {
                            m.order.insert(u.clone(), m.orders);
                            m.orders += 1;
                            m.hosts.entry(host_of(&u)).or_default().urls.push(u.clone());
                        }
                        let p = m.policy;
                        let h = m.hosts.get_mut(&host_of(&u)).unwrap();
                        let i = h.urls.iter().position(|x| *x == u).unwrap();
                        let r = h.refetch.iter().find(|(_, _, j)| *j == i).copied();
                        let held = if h.leased.contains_key(&i) {
                            // The fetch ended now, after 0 ms (unless it had ended).
                            h.lease_ended(p, i, now, 0);
                            true
                        } else if h.returned.remove(&i) {
                            true
                        } else if let Some(r) = r {
                            h.refetch.remove(&r);
                            true
                        } else if i >= h.next && !h.skipped.contains(&i) {
                            h.skipped.insert(i);
                            true
                        } else {
                            false
                        };
                        if when == 0 {
                            if held {
                                m.done.insert(u.clone());
                                h.completed += 1;
                            }
                        } else {
                            if !held {
                                // Done: served again, after every seq given so far, and no
                                // longer done (the crawl limit counts URLs done).
                                m.order.insert(u.clone(), m.orders);
                                m.orders += 1;
                                h.completed = h.completed.saturating_sub(1);
                            }
                            h.refetch.insert((when, m.order[&u], i));
                            m.done.remove(&u);
                            m.deleted.remove(&u);
                        }
                    }
                    Op::Advance(ms) => clock.advance(ms as u64),
                    Op::SetBack(ms) => {
                        clock.set(crivello::queues::Clock::now_ms(&*clock) - ms as u64)
                    }
                    Op::Flush => f.flush().unwrap(),
                    Op::Policy(d, r, k, l) => {
                        let p = Policy {
                            delay_ms: d as u64,
                            ratio_ppm: [0, 500_000, 250_000][r as usize],
                            per_queue: k as u32,
                            limit: l as u64,
                        };
                        f.set_policy("", None, p).unwrap();
                        // The leases expired by now end under the policy before.
                        m.expire(now);
                        // The waits begun are cut to what the new policy allows: its delay
                        // from now, the ratio rule's wait scaled by the ratios (kept whole
                        // when the old policy had none).
                        for h in m.hosts.values_mut() {
                            let left = h.due.saturating_sub(now);
                            let ratio_part = match (m.policy.ratio_ppm, p.ratio_ppm) {
                                (_, 0) => 0,
                                (0, _) => left,
                                (o, n) => left * u64::from(o) / u64::from(n),
                            };
                            h.due = h.due.min(now + p.delay_ms.max(ratio_part));
                        }
                        m.policy = p;
                    }
                    Op::Block(h, d) => {
                        let name = format!("h{h}.test");
                        let until = if d == 0 { 0 } else { now + d as u64 };
                        f.block("", name.as_bytes(), until).unwrap();
                        m.hosts.entry(name).or_default().blocked = until;
                    }
                    Op::Pause(on) => {
                        f.set_paused(on).unwrap();
                        m.paused = on;
                    }
                    Op::DeleteQueue(h) => {
                        m.expire(now);
                        let name = format!("h{h}.test");
                        let held = f.delete_queue("", name.as_bytes()).unwrap();
                        prop_assert_eq!(held, m.delete(&name), "URLs deleted with {}", name);
                    }
                    Op::DeleteCrawl => {
                        m.expire(now);
                        let held = f.delete_crawl("").unwrap();
                        let names: Vec<String> = m.hosts.keys().cloned().collect();
                        let want: u64 = names.iter().map(|n| m.delete(n)).sum();
                        prop_assert_eq!(held, want, "URLs deleted with the crawl");
                        // Its URLs are forgotten: pushed again, they are a new crawl's.
                        m = Model {
                            orders: m.orders,
                            policy: m.policy,
                            paused: m.paused,
                            ..Model::default()
                        };
                    }
                    // The clock caught up before a reopen: the frontier's time is not kept
                    // across one, and the model's stays the same. A replay after a power
                    // loss then meets every instant the calls ran at, steps back included.
                    Op::Reopen => {
                        f.close().unwrap();
                        clock.set(high);
                        f = open(&disk, &clock);
                        high = 0;
                    }
                    Op::PowerLoss => {
                        // Every call synced what it changed: nothing acknowledged is lost.
                        let image = disk.crash_image(crivello::storage::sim::CrashImage::DropAll);
                        drop(f);
                        disk = image;
                        clock.set(high);
                        f = open(&disk, &clock);
                        high = 0;
                    }
                }
            }
            let st = f.stats().unwrap();
            let completed: u64 = m.hosts.values().map(|h| h.completed).sum();
            prop_assert_eq!(st.done, completed);
            let counts = f.counts("", None).unwrap();
            prop_assert_eq!(counts.done, completed);
            prop_assert_eq!(counts.leased, st.leased);
            prop_assert_eq!(counts.waiting, st.waiting);
            // At the end, every URL pushed and not done comes out once, the URLs to fetch
            // again included.
            clock.set(high.max(crivello::queues::Clock::now_ms(&*clock)) + 10_000);
            f.set_paused(false).unwrap();
            f.set_policy("", None, Policy::default()).unwrap();
            for h in 0..12 {
                f.block("", format!("h{h}.test").as_bytes(), 0).unwrap();
            }
            f.flush().unwrap();
            let mut rest = Vec::new();
            loop {
                let got = f.lease(100, None, 60_000).unwrap();
                if got.is_empty() {
                    break;
                }
                for l in got {
                    prop_assert!(f.done(l.token, 1).unwrap());
                    rest.push(String::from_utf8(l.url).unwrap());
                }
            }
            let served: HashSet<String> = rest.iter().cloned().collect();
            prop_assert_eq!(served.len(), rest.len(), "a URL served twice in the drain");
            let want: HashSet<String> = m
                .seen
                .iter()
                .filter(|u| !m.done.contains(*u) && !m.deleted.contains(*u))
                .cloned()
                .collect();
            prop_assert_eq!(served, want);
        }
        Ok(())
    }
}

/// The options of the crash workload: tiny buffers, and Q runs compacted when 3 wait.
fn crash_opts() -> Options {
    opts().slots(8).queue_runs(3).journal_bytes(1500)
}

/// What a frontier workload saw acknowledged before it stopped.
#[derive(Default, Debug, PartialEq)]
struct Acked {
    /// URLs whose push returned Ok.
    pushed: HashSet<String>,
    /// Whether an open that chose compressed queues returned.
    compressed: bool,
    /// URLs pushed, acknowledged or not.
    tried: HashSet<String>,
    /// Leases returned: URL and deadline.
    leased: HashMap<String, u64>,
    /// URLs whose done returned Ok (true).
    done: HashSet<String>,
    /// URLs given back by a retry (acknowledged or not).
    retried: HashSet<String>,
    /// URLs of a queue whose deletion was asked (acknowledged or not).
    deleting: HashSet<String>,
    /// URLs of a queue whose deletion was acknowledged: never served again.
    deleted: HashSet<String>,
    /// URLs of a known update to done (acknowledged or not).
    knowing: HashSet<String>,
    /// Whether a hand-out served a host pushed since the sieve's last flush, and a flush
    /// that a hand-out began while other queues still served ran.
    on_demand: bool,
}

/// A workload of every frontier operation on `storage`; stops at the first error, as a
/// crashed process. The flushes in the background or not; in the background, each round
/// also pushes to a crawl of its own (`b`, hosts `b0`–`b2`) and leases from it alone: its
/// front is empty, so the hand-out flushes the sieve (the merge on the sieve's thread) and
/// moves F into a Q run on the mover's thread, waiting without the lock.
fn workload_on(
    storage: Arc<dyn crivello::storage::Storage>,
    background: bool,
    clock: &Arc<ManualClock>,
    a: &mut Acked,
) -> Result<(), Error> {
    let opts = crash_opts().background_flush(background);
    let mut f = Frontier::open_with(storage.clone(), opts.clone(), clock.clone())?;
    let batch = |lo: u32, hi: u32| -> Vec<String> {
        (lo..hi)
            .map(|i| format!("http://h{}.test/{}", i % 5, i / 5))
            .collect()
    };
    let push = |f: &Frontier, us: Vec<String>, a: &mut Acked| -> Result<(), Error> {
        a.tried.extend(us.iter().cloned());
        let items: Vec<Discovered<'_>> = us.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items)?;
        a.pushed.extend(us);
        Ok(())
    };
    // Pushes that wait for a later durable call: acknowledged once a done returns.
    let push_unsynced = |f: &Frontier, us: Vec<String>, a: &mut Acked| -> Result<_, Error> {
        a.tried.extend(us.iter().cloned());
        let items: Vec<Discovered<'_>> = us.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push_new_unsynced("", &items)?;
        Ok(us)
    };
    push(&f, batch(0, 12), a)?;
    let mut held = Vec::new();
    let mut held_b = Vec::new();
    for round in 0..8 {
        if round == 6 {
            // The leases held expire: the next hand-out returns them first, and journals
            // its instant before its leases (entry 22), a crash point too.
            clock.advance(5_000);
            let now = clock.now_ms();
            let expired = |held: &[(u64, String)]| {
                (held.iter()).any(|(_, u)| a.leased.get(u).is_some_and(|&d| d <= now))
            };
            assert!(expired(&held) || expired(&held_b), "no lease expired");
        }
        if background {
            let us: Vec<String> = (round * 3..round * 3 + 3)
                .map(|i| format!("http://b{}.test/{}", i % 3, i / 3))
                .collect();
            a.tried.extend(us.iter().cloned());
            let items: Vec<Discovered<'_>> =
                us.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("b", &items)?;
            a.pushed.extend(us);
            let req = crivello::LeaseRequest {
                max_queues: 2,
                ttl_ms: 5_000,
                crawl: Some("b".into()),
                ..crivello::LeaseRequest::default()
            };
            for l in f.lease_with(&req)? {
                let u = String::from_utf8(l.url.clone()).unwrap();
                a.leased.insert(u.clone(), l.deadline_ms);
                held_b.push((l.token, u));
            }
            if let Some((token, u)) = held_b.pop() {
                if f.done(token, 20)? {
                    a.done.insert(u);
                }
            }
        }
        for l in f.lease(3, None, 5_000)? {
            let u = String::from_utf8(l.url.clone()).unwrap();
            a.leased.insert(u.clone(), l.deadline_ms);
            held.push((l.token, u));
        }
        if let Some((token, _)) = held.first() {
            // Its fetch ended (entry 21): still leased until it ends or its deadline passes,
            // its queue free for the next URL.
            f.complete(&[(*token, 30, Completion::Fetched)])?;
        }
        clock.advance(100);
        let pending = push_unsynced(&f, batch(1000 + round * 2, 1002 + round * 2), a)?;
        if let Some((token, u)) = held.pop() {
            // Its fetch ended 60 ms ago (entry 20): crash points of that entry too.
            let ended = clock.now_ms() - 60;
            if f.complete_ended(&[(token, 50, Completion::Done, ended)])?[0] {
                a.done.insert(u);
                // The done's commit made the pushes before it durable first.
                a.pushed.extend(pending);
            }
        }
        if round == 2 {
            // A host found while the other queues still serve: a hand-out that serves fewer
            // queues than it asks for begins a flush of the sieve (on its thread, in the
            // background), and a later hand-out moves its output into the queues and serves
            // the new host. Its operations are crash points too. The queues served get room
            // first (their leases end, and their delay and the least gap between two such
            // flushes pass), so that the hand-out finds queues due and does not flush as
            // one that finds none does.
            for (token, u) in held.drain(..) {
                if f.done(token, 0)? {
                    a.done.insert(u);
                }
            }
            clock.advance(1_000);
            push(&f, vec!["http://n.test/found".to_owned()], a)?;
            let mut found = false;
            for _ in 0..20_000 {
                for l in f.lease(20, None, 5_000)? {
                    let u = String::from_utf8(l.url.clone()).unwrap();
                    found |= u.starts_with("http://n.test/");
                    a.leased.insert(u.clone(), l.deadline_ms);
                    if l.crawl == b"b" {
                        held_b.push((l.token, u));
                    } else {
                        held.push((l.token, u));
                    }
                }
                if found {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            a.on_demand = found && f.demand_flushes()? > 0;
        }
        if round == 1 {
            if let Some((token, u)) = held.pop() {
                // Back in its queue once the retry is durable: it may be served again.
                a.leased.remove(&u);
                a.retried.insert(u);
                f.retry(token, 10)?;
            }
            f.set_policy(
                "",
                None,
                Policy {
                    delay_ms: 200,
                    per_queue: 2,
                    ..Policy::default()
                },
            )?;
        }
        if round == 3 {
            // Known updates to done: a URL leased, one waiting in its queue, one never
            // pushed. Done once acknowledged: never served again.
            let mut us = vec!["http://h1.test/never-pushed".to_owned()];
            if let Some((_, u)) = held.pop() {
                us.push(u);
            }
            let waiting = a
                .pushed
                .iter()
                .filter(|u| u.starts_with("http://h") && !a.leased.contains_key(*u))
                .min()
                .cloned();
            us.extend(waiting);
            a.knowing.extend(us.iter().cloned());
            let items: Vec<crivello::Known<'_>> = us
                .iter()
                .map(|u| crivello::Known {
                    url: u.as_bytes(),
                    key: None,
                    metadata: b"",
                    refetch_ms: 0,
                })
                .collect();
            f.update("", &items)?;
            a.done.extend(us);
        }
        if round == 4 {
            // Reopened with compressed queues: the choice is committed before the open
            // returns, and the runs written from here on (and the compactions of runs of
            // both kinds) are compressed.
            f.close()?;
            f = Frontier::open_with(
                storage.clone(),
                opts.clone().compress_queues(true),
                clock.clone(),
            )?;
            a.compressed = true;
        }
        if round == 5 {
            let of_h4: Vec<String> = a
                .tried
                .iter()
                .filter(|u| u.starts_with("http://h4.test/"))
                .cloned()
                .collect();
            a.deleting.extend(of_h4.iter().cloned());
            f.delete_queue("", b"h4.test")?;
            a.deleted.extend(of_h4);
        }
        push(&f, batch(12 + round * 6, 18 + round * 6), a)?;
        // Each flush moves F into a Q run: they are compacted every 3.
        f.flush()?;
    }
    f.close()
}

#[test]
fn a_crash_at_any_operation_loses_no_acknowledged_push_lease_or_done() {
    let (total, threads) = crash_at_every_operation(false);
    // Everything on the caller's thread: each crash point crashes the run.
    assert_eq!(threads.values().sum::<usize>() as u64, total, "{threads:?}");
}

/// The moves' runs written on the mover's thread and the sieve's merges on its own, while
/// hand-outs wait without the lock: a crash at any of their operations loses nothing
/// acknowledged either.
#[test]
fn a_crash_at_any_operation_of_a_move_or_merge_in_the_background_loses_nothing_acknowledged() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    // A clean run first, on a disk that notes where the mover's thread creates its runs.
    let disk = SimDisk::new();
    let at: Arc<Mutex<Vec<u64>>> = Arc::default();
    let merges = Arc::new(AtomicU64::new(0));
    let holds: Holds = {
        let (at, merges) = (at.clone(), merges.clone());
        Arc::new(move |disk, name| {
            let thread = std::thread::current();
            if name.starts_with("q-") && thread.name() == Some("crivello-move") {
                at.lock().unwrap().push(disk.ops() + 1);
            }
            if name.starts_with("z-") && thread.name() == Some("crivello-flush") {
                merges.fetch_add(1, Ordering::SeqCst);
            }
            false
        })
    };
    let storage = HeldMerge {
        disk: disk.clone(),
        gate: Arc::new(Default::default()),
        fail: Default::default(),
        holds,
    };
    workload_on(
        Arc::new(storage),
        true,
        &Arc::new(ManualClock::new(5_000_000)),
        &mut Acked::default(),
    )
    .expect("a clean run");
    let runs = at.lock().unwrap().clone();
    assert!(runs.len() >= 4, "runs written by the mover: {runs:?}");
    let merges = merges.load(Ordering::SeqCst);
    assert!(
        merges >= 4,
        "Z segments written by the sieve's thread: {merges}"
    );
    let (_, threads) = crash_at_every_operation(true);
    // The crashes met on the threads of the moves and the merges (each writes files, syncs
    // and renames at several points of its work), and of the checkpoints' switches (a sync,
    // a rename and a sync of the directory each).
    for (thread, least) in [
        ("crivello-move", 20),
        ("crivello-flush", 20),
        ("crivello-checkpoint", 3),
    ] {
        let n = threads.get(thread).copied().unwrap_or(0);
        assert!(
            n >= least,
            "{n} crash points met first by {thread}: {threads:?}"
        );
    }
}

/// Which thread's operation met a crash (or a failure it makes) first: a disk that notes it.
#[derive(Debug, Clone)]
struct Spy {
    disk: SimDisk,
    hit: Arc<std::sync::Mutex<Option<String>>>,
    /// A file whose syncs fail (EIO) while it is named here.
    failing: Arc<std::sync::Mutex<Option<String>>>,
}

impl Spy {
    /// A disk that notes which thread meets its crash first.
    fn new(disk: &SimDisk) -> Spy {
        Spy {
            disk: disk.clone(),
            hit: Arc::default(),
            failing: Arc::default(),
        }
    }

    /// Notes the calling thread, if no thread was noted before.
    fn hit(&self) {
        let mut hit = self.hit.lock().unwrap();
        if hit.is_none() {
            let thread = std::thread::current();
            *hit = Some(thread.name().unwrap_or("unnamed").to_owned());
        }
    }

    /// `r`, noting the calling thread if it is the first error since the disk crashed.
    fn note<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        if r.is_err() && self.disk.has_crashed() {
            self.hit();
        }
        r
    }

    fn file(
        &self,
        name: &str,
        f: std::io::Result<Arc<dyn crivello::storage::StorageFile>>,
    ) -> std::io::Result<Arc<dyn crivello::storage::StorageFile>> {
        let inner = self.note(f)?;
        Ok(Arc::new(SpyFile {
            inner,
            name: name.to_owned(),
            spy: self.clone(),
        }))
    }
}

struct SpyFile {
    inner: Arc<dyn crivello::storage::StorageFile>,
    name: String,
    spy: Spy,
}

impl crivello::storage::StorageFile for SpyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.spy.note(self.inner.read_at(buf, offset))
    }
    fn mapped(&self, offset: u64, len: usize) -> Option<&[u8]> {
        self.inner.mapped(offset, len)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.spy.note(self.inner.write_all_at(buf, offset))
    }
    fn len(&self) -> std::io::Result<u64> {
        self.spy.note(self.inner.len())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.spy.note(self.inner.set_len(len))
    }
    fn sync(&self) -> std::io::Result<()> {
        if self.spy.failing.lock().unwrap().as_deref() == Some(&self.name[..]) {
            self.spy.hit();
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.spy.note(self.inner.sync())
    }
}

impl crivello::storage::Storage for Spy {
    fn create(&self, name: &str) -> std::io::Result<Arc<dyn crivello::storage::StorageFile>> {
        self.file(name, self.disk.create(name))
    }
    fn open(&self, name: &str) -> std::io::Result<Arc<dyn crivello::storage::StorageFile>> {
        self.file(name, self.disk.open(name))
    }
    fn open_immutable(
        &self,
        name: &str,
    ) -> std::io::Result<Arc<dyn crivello::storage::StorageFile>> {
        self.file(name, self.disk.open_immutable(name))
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.note(self.disk.rename(from, to))
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.note(self.disk.remove(name))
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.note(self.disk.sync_dir())
    }
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.note(self.disk.list())
    }
    fn lock(&self) -> std::io::Result<Box<dyn std::any::Any + Send + Sync>> {
        self.disk.lock()
    }
    fn describe(&self) -> String {
        self.disk.describe()
    }
}

/// The hand-outs decode a Q run's frames in place when its file serves its bytes (as a mapped
/// file does) and copy them otherwise: the same workload writes the same files either way,
/// by the same operations, and acknowledges the same calls.
#[test]
fn frames_read_in_place_or_copied_give_the_same_store() {
    let run = |mapping: bool| {
        let disk = SimDisk::new();
        disk.set_mapping(mapping);
        let clock = Arc::new(ManualClock::new(5_000_000));
        let mut a = Acked::default();
        workload_on(Arc::new(disk.clone()), false, &clock, &mut a).expect("a clean run");
        let files: Vec<_> = disk
            .files()
            .into_iter()
            .map(|f| (disk.content(&f), f))
            .collect();
        (disk.mapped_bytes(), format!("{:?}", disk.trace()), files, a)
    };
    let (in_place, trace, files, acked) = run(true);
    let (copied, trace_copied, files_copied, acked_copied) = run(false);
    assert!(in_place > 0, "no frame decoded in place");
    assert_eq!(copied, 0);
    assert!(trace == trace_copied, "the operations differ");
    assert!(files == files_copied, "the files differ");
    assert!(acked == acked_copied, "the acknowledged calls differ");
}

/// Crashes [`workload_on`] at each of its operations (the flushes in the background or not),
/// checks each kind of crash image, and returns the number of operations of a clean run and,
/// per thread, the crash points whose crash that thread's operation met first.
fn crash_at_every_operation(background: bool) -> (u64, BTreeMap<String, usize>) {
    use crivello::storage::sim::CrashImage;
    let start = 5_000_000;
    let clean = SimDisk::new();
    let mut a = Acked::default();
    let clock = Arc::new(ManualClock::new(start));
    workload_on(Arc::new(clean.clone()), background, &clock, &mut a).expect("a clean run");
    assert!(a.on_demand, "no hand-out began a flush of its own");
    let total = clean.ops();
    assert!(total > 100, "{total} operations");
    // The workload compacts Q runs and writes checkpoints: the crash points cover them.
    let trace = format!("{:?}", clean.trace());
    assert!(
        trace.contains("Rename(\"CHECKPOINT.tmp\", \"CHECKPOINT\")"),
        "no checkpoint"
    );
    assert!(trace.matches("Remove(\"q-").count() >= 2, "no compaction");
    // The runs left: written after the reopen with compressed queues, by moves and by
    // compactions of runs of both kinds.
    let layouts =
        run_layouts((clean.files().into_iter()).map(|n| (n.clone(), clean.content(&n).unwrap())));
    assert!(layouts.contains(&6), "no compressed run: {layouts:?}");
    // Q runs are read in place, as from a mapped file of a real directory.
    assert!(clean.mapped_bytes() > 0, "no frame decoded in place");
    let mut checked = 0;
    // With threads, a run may take a few operations more than the clean one did.
    let last = if background {
        total + total / 10
    } else {
        total
    };
    let mut threads = BTreeMap::<String, usize>::new();
    for k in 1..=last {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let clock = Arc::new(ManualClock::new(start));
        let mut a = Acked::default();
        let spy = Spy::new(&disk);
        let _ = workload_on(Arc::new(spy.clone()), background, &clock, &mut a);
        if !disk.has_crashed() {
            // Past the run's last operation: it ended cleanly.
            assert!(k > total / 2, "op {k}: no crash");
            continue;
        }
        let hit = spy.hit.lock().unwrap().clone();
        *threads
            .entry(hit.unwrap_or_else(|| "none".into()))
            .or_default() += 1;
        let at_crash = crivello::queues::Clock::now_ms(&*clock);
        for image in CrashImage::each_kind(k) {
            let img = disk.crash_image(image);
            // Check finds a crashed store sound (a torn tail is no damage), replay included.
            match crivello::check_storage(Arc::new(img.crash_image(CrashImage::KillProcess))) {
                Ok(report) => assert!(
                    report.is_sound(),
                    "op {k}, {image:?}: check: {:?}",
                    report.damage
                ),
                // A crash before the store's first manifest: nothing was acknowledged.
                Err(Error::NotASieve { .. }) => assert!(a.pushed.is_empty()),
                Err(e) => panic!("op {k}, {image:?}: check: {e}"),
            }
            let clock = Arc::new(ManualClock::new(at_crash));
            let f = Frontier::open_with(Arc::new(img), crash_opts(), clock.clone())
                .unwrap_or_else(|e| panic!("op {k}, {image:?}: reopen: {e}"));
            // The choice of compressed queues is kept once an open that made it returned.
            if a.compressed {
                assert!(
                    f.stats().unwrap().compressed,
                    "op {k}, {image:?}: the queues' coding was forgotten"
                );
            }
            // No acknowledged lease is handed out again before its deadline.
            f.flush().unwrap();
            for l in f.lease(100, Some(10), 60_000).unwrap() {
                let u = String::from_utf8(l.url.clone()).unwrap();
                if let Some(&deadline) = a.leased.get(&u) {
                    assert!(
                        deadline <= at_crash || a.done.contains(&u),
                        "op {k}, {image:?}: {u} served again before its deadline"
                    );
                }
                assert!(
                    !a.done.contains(&u),
                    "op {k}, {image:?}: {u} served after done"
                );
                assert!(
                    !a.deleted.contains(&u),
                    "op {k}, {image:?}: {u} served after its queue was deleted"
                );
            }
            // Then everything pushed and not done comes out once (the queues' delay passing).
            clock.advance(120_000);
            let mut served = Vec::new();
            loop {
                let got = f.lease(100, Some(10), 60_000).unwrap();
                if got.is_empty() {
                    let st = f.stats().unwrap();
                    if st.waiting == 0 && st.leased == 0 {
                        break;
                    }
                    clock.advance(1_000);
                    continue;
                }
                for l in got {
                    assert!(f.done(l.token, 1).unwrap());
                    served.push(String::from_utf8(l.url).unwrap());
                }
            }
            let set: HashSet<String> = served.iter().cloned().collect();
            assert_eq!(set.len(), served.len(), "op {k}, {image:?}: served twice");
            for u in &a.pushed {
                assert!(
                    set.contains(u)
                        || a.done.contains(u)
                        || a.leased.contains_key(u)
                        || a.retried.contains(u)
                        || a.deleting.contains(u)
                        || a.knowing.contains(u),
                    "op {k}, {image:?}: acknowledged {u} lost"
                );
            }
            for u in &set {
                assert!(
                    a.tried.contains(u) || a.knowing.contains(u),
                    "op {k}, {image:?}: {u} was never pushed"
                );
                assert!(
                    !a.done.contains(u),
                    "op {k}, {image:?}: {u} served after done"
                );
                assert!(
                    !a.deleted.contains(u),
                    "op {k}, {image:?}: {u} served after its queue was deleted"
                );
            }
            f.close().unwrap();
            checked += 1;
        }
    }
    let crashed: usize = threads.values().sum();
    eprintln!("{crashed} crash points, {checked} images checked; met first by {threads:?}");
    (total, threads)
}

#[test]
fn threads_leasing_and_completing_at_once_keep_exclusivity_and_serve_each_url_once() {
    use std::sync::Mutex;
    let dir = tempfile::tempdir().unwrap();
    let f = Arc::new(Frontier::open(dir.path(), Options::new().memory(4 << 20)).unwrap());
    let mut all = Vec::new();
    for i in 0..2_000 {
        all.push(format!("http://h{}.example/p{}", i % 50, i / 50));
    }
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    push(&f, &refs);
    f.flush().unwrap();
    // Per host: URLs leased now. Never more than one (the default policy).
    let busy: Arc<Mutex<HashSet<Vec<u8>>>> = Arc::default();
    let served: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (f, busy, served) = (f.clone(), busy.clone(), served.clone());
            std::thread::spawn(move || loop {
                let got = f.lease(7, None, 60_000).unwrap();
                if got.is_empty() {
                    if f.stats().unwrap().waiting == 0 {
                        return;
                    }
                    std::thread::yield_now();
                    continue;
                }
                for l in &got {
                    assert!(
                        busy.lock().unwrap().insert(l.key.clone()),
                        "two leases of one host"
                    );
                }
                for l in got {
                    served.lock().unwrap().push(l.url.clone());
                    busy.lock().unwrap().remove(&l.key);
                    assert!(f.done(l.token, 1).unwrap());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let served = served.lock().unwrap();
    let set: HashSet<&Vec<u8>> = served.iter().collect();
    assert_eq!(served.len(), all.len());
    assert_eq!(set.len(), all.len());
}

mod common;

/// The URLs of each page's outlinks.
type Links = HashMap<String, Vec<String>>;

/// California's page graph (`../shared/data/california.dat.xz`: a header `nodes arcs ...`,
/// a line `id URL` per node, a line `from to` per arc): the URL of each node and the URLs of
/// its outlinks, by the first node of each URL.
fn california() -> Option<(Vec<String>, Links)> {
    let lines = common::shared_lines("california.dat.xz")?;
    let header: Vec<usize> = String::from_utf8_lossy(&lines[0])
        .split_whitespace()
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    let (n, e) = (header[0], header[1]);
    let mut url = Vec::with_capacity(n);
    for line in &lines[1..=n] {
        let text = String::from_utf8_lossy(line);
        let (_, u) = text.split_once(' ').unwrap_or((&text, ""));
        url.push(u.trim().to_owned());
    }
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    let mut first_node: HashMap<String, usize> = HashMap::new();
    for (i, u) in url.iter().enumerate() {
        first_node.entry(u.clone()).or_insert(i);
    }
    for line in &lines[n + 1..] {
        let text = String::from_utf8_lossy(line);
        let mut it = text.split_whitespace().map(|x| x.parse::<usize>().unwrap());
        let (Some(a), Some(b)) = (it.next(), it.next()) else {
            continue;
        };
        if first_node[&url[a]] == a && !url[b].is_empty() {
            out.entry(url[a].clone()).or_default().push(url[b].clone());
        }
    }
    assert!(out.values().map(Vec::len).sum::<usize>() <= e);
    Some((url, out))
}

#[test]
fn a_crawl_of_californias_graph_fetches_every_page_once_politely_in_order() {
    let Some((url, out)) = california() else {
        return;
    };
    let delay = 1_000;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let f = Frontier::open_with(
        Arc::new(disk.clone()),
        Options::new().slots(512).seed(1).background_flush(false),
        clock.clone(),
    )
    .unwrap();
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: delay,
            ..Policy::default()
        },
    )
    .unwrap();
    // Seeded with every page, in the graph's order (as the BFS streams restart at each page
    // not yet seen), so that the whole graph is crawled.
    let mut pushed_order: HashMap<String, Vec<String>> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    let seeds: Vec<&str> = url
        .iter()
        .map(String::as_str)
        .filter(|u| !u.is_empty())
        .collect();
    push(&f, &seeds);
    for u in &seeds {
        if seen.insert(u.to_string()) {
            pushed_order
                .entry(host_of(u))
                .or_default()
                .push(u.to_string());
        }
    }
    let mut fetched: HashMap<String, Vec<String>> = HashMap::new();
    let mut last_end: HashMap<String, u64> = HashMap::new();
    let mut all = HashSet::new();
    let mut idle = 0;
    while idle < 100 {
        let got = f.lease(100, None, 60_000).unwrap();
        if got.is_empty() {
            idle += 1;
            clock.advance(250);
            continue;
        }
        idle = 0;
        let now = crivello::queues::Clock::now_ms(&*clock);
        for l in got {
            let u = String::from_utf8(l.url).unwrap();
            let host = host_of(&u);
            if let Some(&end) = last_end.get(&host) {
                assert!(
                    now >= end + delay,
                    "{host} fetched again {} ms after",
                    now - end
                );
            }
            assert!(all.insert(u.clone()), "{u} fetched twice");
            fetched.entry(host.clone()).or_default().push(u.clone());
            // The fetch: the page's links, pushed; then done.
            let links = out.get(&u).cloned().unwrap_or_default();
            for v in &links {
                if seen.insert(v.clone()) {
                    pushed_order.entry(host_of(v)).or_default().push(v.clone());
                }
            }
            let refs: Vec<&str> = links.iter().map(String::as_str).collect();
            if !refs.is_empty() {
                push(&f, &refs);
            }
            assert!(f.done(l.token, 0).unwrap());
            last_end.insert(host, now);
        }
        // Time passes between rounds, as fetches take it.
        clock.advance(50);
    }
    // Every page reachable from the seed, once, each host's in first-appearance order.
    assert_eq!(all, seen, "fetched and reachable differ");
    assert_eq!(fetched, pushed_order);
    eprintln!(
        "California: {} pages of {} hosts fetched",
        all.len(),
        fetched.len()
    );
}

fn host_of(u: &str) -> String {
    String::from_utf8(default_key(u.as_bytes()).to_vec()).unwrap()
}

#[test]
fn queues_only_in_compacted_runs_survive_a_reopen() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    // Three moves, each of new hosts: the third compacts them (queue_runs 3), then a fourth.
    for batch in [
        ["http://a/1", "http://a/2"],
        ["http://b/1", "http://c/1"],
        ["http://d/1", "http://a/3"],
        ["http://e/1", "http://b/2"],
    ] {
        push(&f, &batch);
        f.flush().unwrap();
    }
    f.close().unwrap();
    let f = open(&disk, &clock);
    let mut got = Vec::new();
    loop {
        let l = f.lease(100, None, 60_000).unwrap();
        if l.is_empty() {
            break;
        }
        for x in l {
            got.push(String::from_utf8(x.url).unwrap());
            assert!(f.done(x.token, 0).unwrap());
        }
    }
    got.sort();
    assert_eq!(
        got,
        [
            "http://a/1",
            "http://a/2",
            "http://a/3",
            "http://b/1",
            "http://b/2",
            "http://c/1",
            "http://d/1",
            "http://e/1"
        ]
    );
}

/// A deleted DEFAULT forgets its URLs as any crawl does, and stays deleted across reopens,
/// from the journal and from a checkpoint that no longer lists it.
#[test]
fn a_deleted_default_forgets_its_urls_across_reopens() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let open_small = || {
        // A checkpoint at almost every commit.
        Frontier::open_with(
            Arc::new(disk.clone()),
            opts().journal_bytes(64),
            clock.clone(),
        )
        .expect("open")
    };
    let f = open_small();
    let seeds = [
        Discovered::url(b"http://a/1"),
        Discovered::url(b"http://b/1"),
    ];
    assert_eq!(f.push_new("", &seeds).unwrap(), [true, true]);
    f.flush().unwrap();
    assert_eq!(f.crawls().unwrap(), ["DEFAULT"]);
    assert_eq!(f.delete_crawl("").unwrap(), 2);
    // Later commits, of another crawl: the checkpoint written after them lists no DEFAULT.
    for k in 0..4u64 {
        f.block("other", b"k", 10_000 + k).unwrap();
    }
    assert_eq!(f.crawls().unwrap(), ["other"]);
    f.close().unwrap();
    assert!(
        disk.content("CHECKPOINT").is_some(),
        "no checkpoint written"
    );
    for _ in 0..2 {
        let f = open_small();
        assert_eq!(f.crawls().unwrap(), ["other"], "DEFAULT came back");
        assert_eq!(
            f.status("", None, b"http://a/1").unwrap(),
            crivello::queues::UrlStatus::Unknown
        );
        f.close().unwrap();
    }
    let f = open_small();
    assert_eq!(
        f.push_new("", &seeds).unwrap(),
        [true, true],
        "the URLs are new again"
    );
    f.flush().unwrap();
    assert_eq!(f.counts("", None).unwrap().waiting, 2);
    f.close().unwrap();
}

/// A checkpoint larger than what its writer buffers is written in pieces: a crash at any of
/// its operations leaves the old state or the new one, whole, on every kind of crash image.
#[test]
fn a_checkpoint_written_in_pieces_survives_a_crash_at_each_of_its_operations() {
    use crivello::storage::sim::CrashImage;
    let clock = Arc::new(ManualClock::new(50_000));
    let with = |journal_bytes: u64| {
        Options::new()
            .seed(3)
            .background_flush(false)
            .frontier_low(0)
            .journal_bytes(journal_bytes)
    };
    let open_on = |disk: &SimDisk, journal_bytes: u64| {
        Frontier::open_with(Arc::new(disk.clone()), with(journal_bytes), clock.clone())
    };
    // 40,000 queues (one host each, of long names) and 500 leases: a checkpoint of several
    // MiB.
    let base = SimDisk::new();
    let f = open_on(&base, 1 << 30).expect("open");
    let many: Vec<String> = (0..40_000)
        .map(|i| {
            format!(
                "http://host-{i}.with-a-rather-long-name-to-fill-the-checkpoint.example.org/page"
            )
        })
        .collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    push(&f, &refs);
    f.flush().unwrap();
    let leased = f.lease(500, None, 600_000).unwrap();
    assert_eq!(leased.len(), 500);
    let before = f.stats().unwrap();
    f.close().unwrap();
    let blocked = |f: &Frontier| {
        f.queues("", 0, 1)
            .unwrap()
            .first()
            .is_some_and(|q| q.blocked_until_ms.is_some())
    };
    // The clean run: a commit that writes a checkpoint in pieces.
    let clean = base.crash_image(CrashImage::KillProcess);
    let from = clean.ops();
    let f = open_on(&clean, 64).expect("open");
    let first = f.queues("", 0, 1).unwrap()[0].key.clone();
    f.block("", &first, 90_000).unwrap();
    f.close().unwrap();
    let total = clean.ops() - from;
    let size = clean.content("CHECKPOINT").expect("a checkpoint").len();
    assert!(size > 3 << 20, "a checkpoint of {size} bytes");
    let writes = clean
        .trace()
        .iter()
        .filter(|op| format!("{op:?}").contains("CHECKPOINT.tmp"))
        .count();
    assert!(writes >= 4, "{writes} operations on the checkpoint");
    eprintln!("{total} crash points, {writes} operations on a checkpoint of {size} bytes");
    for k in 1..=total {
        let disk = base.crash_image(CrashImage::KillProcess);
        disk.crash_at(k);
        if let Ok(f) = open_on(&disk, 64) {
            let _ = f.block("", &first, 90_000);
            let _ = f.close();
        }
        for image in CrashImage::each_kind(k) {
            let img = disk.crash_image(image);
            let report =
                crivello::check_storage(Arc::new(img.crash_image(CrashImage::KillProcess)))
                    .unwrap_or_else(|e| panic!("op {k}, {image:?}: check: {e}"));
            assert!(report.is_sound(), "op {k}, {image:?}: {:?}", report.damage);
            let f = open_on(&img, 1 << 30).unwrap_or_else(|e| panic!("op {k}, {image:?}: {e}"));
            assert_eq!(f.stats().unwrap(), before, "op {k}, {image:?}");
            // The block is there or not; a second open agrees with the first.
            let b = blocked(&f);
            f.close().unwrap();
            let f = open_on(&img, 1 << 30).unwrap();
            assert_eq!(blocked(&f), b, "op {k}, {image:?}");
            assert_eq!(f.stats().unwrap(), before, "op {k}, {image:?}");
            f.close().unwrap();
        }
    }
}

/// An update of a leased URL under another key than the one it was pushed with (here none,
/// so its host) ends the lease in the queue that handed it out: the URL is fetched again
/// from that queue at its instant, once, and the store stays sound (it once went to the
/// other queue, which then held the record's seq while the lease did, and a hand-out found
/// one seq twice), across a reopen too.
#[test]
fn an_update_under_another_key_ends_the_lease_in_its_own_queue() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    let pushed = [
        Discovered {
            url: b"http://a.com/1",
            key: Some(b"group"),
            metadata: b"",
        },
        Discovered {
            url: b"http://a.com/2",
            key: None,
            metadata: b"",
        },
    ];
    f.push("", &pushed).unwrap();
    let leased = f.lease(10, None, 30_000).unwrap();
    assert_eq!(leased.len(), 2);
    let l = leased.iter().find(|l| l.url == b"http://a.com/1").unwrap();
    assert_eq!(l.key, b"group");
    f.update(
        "",
        &[crivello::Known {
            url: b"http://a.com/1",
            key: None,
            metadata: b"again",
            refetch_ms: 5_000,
        }],
    )
    .unwrap();
    // The lease ended: its token is no longer in force.
    assert!(!f.done(l.token, 0).unwrap());
    let other = leased.iter().find(|l| l.url == b"http://a.com/2").unwrap();
    assert!(f.done(other.token, 0).unwrap());
    clock.set(6_000);
    let again = f.lease(10, None, 30_000).unwrap();
    assert_eq!(urls(&again), ["http://a.com/1"]);
    assert_eq!(
        (&again[0].key[..], &again[0].metadata[..]),
        (&b"group"[..], &b"again"[..])
    );
    assert!(f.done(again[0].token, 0).unwrap());
    clock.set(60_000);
    assert!(f.lease(10, None, 30_000).unwrap().is_empty());
    f.close().unwrap();
    assert!(crivello::check_storage(Arc::new(disk.clone()))
        .unwrap()
        .is_sound());
    let f = open(&disk, &clock);
    assert!(f.lease(10, None, 30_000).unwrap().is_empty());
}

/// Threads that lease and complete at once share the journal's syncs (each call waits, after
/// the lock, for J to be durable with what it wrote or saw): whatever a call answered is
/// durable. A crash of every kind (the process killed, power lost with every unsynced write
/// dropped, zeroed or kept at random, torn by sector) taken while four threads run opens
/// without damage (the epochs of J's frames never make a torn write read as corruption)
/// and keeps every done and every lease answered before it.
#[test]
fn concurrent_calls_answer_only_what_is_durable() {
    concurrent_calls(false);
}

/// The same with the flushes, moves, compactions and the checkpoints' switches on threads of
/// their own.
#[test]
fn concurrent_calls_answer_only_what_is_durable_with_the_flushes_in_the_background() {
    concurrent_calls(true);
}

fn concurrent_calls(background: bool) {
    use crivello::storage::sim::CrashImage;
    use std::sync::Mutex;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let open = |disk: &SimDisk, clock: &Arc<ManualClock>| {
        let opts = opts().background_flush(background);
        Frontier::open_with(Arc::new(disk.clone()), opts, clock.clone()).expect("open")
    };
    let f = open(&disk, &clock);
    let all: Vec<String> = (0..3_000)
        .map(|i| format!("http://h{}.test/{i}", i % 60))
        .collect();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    push(&f, &refs);
    f.flush().unwrap();
    // URLs whose done was answered, and leases answered (and not yet ended).
    let done: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let leased: Mutex<HashSet<String>> = Mutex::new(HashSet::new());
    let images = std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let got = f.lease(3, None, 3_600_000).unwrap();
                if got.is_empty() {
                    return;
                }
                leased.lock().unwrap().extend(urls(&got));
                for l in got {
                    assert!(f.done(l.token, 0).unwrap());
                    let url = String::from_utf8(l.url).unwrap();
                    // The answered done goes in before the lease goes out of the set.
                    done.lock().unwrap().push(url.clone());
                    leased.lock().unwrap().remove(&url);
                }
            });
        }
        // While they run: what was answered so far, then a power loss's image.
        let mut images = Vec::new();
        for round in 0..12 {
            std::thread::sleep(std::time::Duration::from_millis(5 + 3 * round));
            let (d, l) = {
                let d = done.lock().unwrap().clone();
                let l = leased.lock().unwrap().clone();
                (d, l)
            };
            for kind in CrashImage::each_kind(round) {
                images.push((d.clone(), l.clone(), disk.crash_image(kind)));
            }
        }
        images
    });
    assert_eq!(done.lock().unwrap().len(), 3_000);
    let mut checked = 0;
    for (d, l, image) in images {
        let g = open(&image, &clock);
        for url in &d {
            assert_eq!(
                g.status("", None, url.as_bytes()).unwrap(),
                UrlStatus::Done,
                "{url}: answered done"
            );
        }
        for url in &l {
            let st = g.status("", None, url.as_bytes()).unwrap();
            assert!(
                matches!(st, UrlStatus::Leased { .. } | UrlStatus::Done),
                "{url}: answered leased, {st:?} after the power loss"
            );
        }
        checked += d.len() + l.len();
        g.close().unwrap();
    }
    assert!(checked > 0, "no answer was taken before a power loss");
    f.close().unwrap();
}

/// A checkpoint whose switch fails on its thread (the sync of its file: EIO) poisons the
/// frontier at the next call that looks, and loses nothing: the old checkpoint and J's
/// generations it replays are still there, and a reopen, after a power loss too, holds
/// every push, lease and done answered before.
#[test]
fn a_failed_switch_of_a_checkpoint_on_its_thread_poisons_and_loses_nothing() {
    use crivello::storage::sim::CrashImage;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let spy = Spy::new(&disk);
    let f = Frontier::open_with(
        Arc::new(spy.clone()),
        opts().background_flush(true),
        clock.clone(),
    )
    .expect("open");
    let all: Vec<String> = (0..2_000)
        .map(|i| format!("http://h{}.test/{i}", i % 40))
        .collect();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    push(&f, &refs[..1_000]);
    *spy.failing.lock().unwrap() = Some("CHECKPOINT.tmp".into());
    let (mut done, mut leased) = (Vec::new(), HashSet::new());
    let (mut failed, mut uncertain) = (None, None);
    'calls: for round in 0..400 {
        if round == 10 {
            push(&f, &refs[1_000..]);
        }
        let got = match f.lease(5, None, 3_600_000) {
            Ok(got) => got,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        leased.extend(urls(&got));
        for l in got {
            match f.done(l.token, 0) {
                Ok(true) => {
                    let url = String::from_utf8(l.url).unwrap();
                    leased.remove(&url);
                    done.push(url);
                }
                Ok(false) => panic!("a lease just given is not leased"),
                Err(e) => {
                    // Its entry may be durable: the failure came after it (an error
                    // answers neither way).
                    uncertain = Some(String::from_utf8(l.url).unwrap());
                    failed = Some(e);
                    break 'calls;
                }
            }
        }
    }
    let failed = failed.expect("the failed switch was never reported");
    assert!(
        matches!(
            failed,
            crivello::Error::Io { .. } | crivello::Error::Poisoned
        ),
        "{failed}"
    );
    assert_eq!(
        spy.hit.lock().unwrap().as_deref(),
        Some("crivello-checkpoint"),
        "the switch failed on another thread"
    );
    assert!(!done.is_empty(), "nothing was done before the failure");
    assert!(
        f.lease(1, None, 1_000).is_err(),
        "a poisoned frontier hands out"
    );
    drop(f);
    for image in [None, Some(CrashImage::DropAll)] {
        let d = match image {
            None => disk.clone(),
            Some(kind) => disk.crash_image(kind),
        };
        let g = open(&d, &clock);
        for url in &done {
            assert_eq!(
                g.status("", None, url.as_bytes()).unwrap(),
                UrlStatus::Done,
                "{url}: answered done ({image:?})"
            );
        }
        for url in &leased {
            let st = g.status("", None, url.as_bytes()).unwrap();
            assert!(
                matches!(st, UrlStatus::Leased { .. })
                    || (uncertain.as_ref() == Some(url) && st == UrlStatus::Done),
                "{url}: answered leased, {st:?} ({image:?})"
            );
        }
        for url in &all[..1_000] {
            let st = g.status("", None, url.as_bytes()).unwrap();
            assert!(!matches!(st, UrlStatus::Unknown), "{url}: pushed, unknown");
        }
        g.close().unwrap();
    }
}

/// Which file creations a [`HeldMerge`] holds: by default, those of new Z segments (the
/// sieve's merge).
type Holds = Arc<dyn Fn(&SimDisk, &str) -> bool + Send + Sync>;

/// A disk whose creation of a file that `holds` names (by default a new Z segment: the
/// sieve's merge) waits until it is let go, or, for a Z segment, fails.
struct HeldMerge {
    disk: SimDisk,
    /// (held, merges waiting)
    gate: Arc<(std::sync::Mutex<(bool, u32)>, std::sync::Condvar)>,
    /// Whether the creation of a Z segment fails.
    fail: Arc<std::sync::atomic::AtomicBool>,
    holds: Holds,
}

impl std::fmt::Debug for HeldMerge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldMerge")
            .field("disk", &self.disk)
            .finish()
    }
}

fn z_segments() -> Holds {
    Arc::new(|_, name| name.starts_with("z-"))
}

impl crivello::storage::Storage for HeldMerge {
    fn create(&self, name: &str) -> std::io::Result<Arc<dyn crivello::storage::StorageFile>> {
        if name.starts_with("z-") && self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("no room for a Z segment"));
        }
        if (self.holds)(&self.disk, name) {
            let (lock, cv) = &*self.gate;
            let mut g = lock.lock().unwrap();
            g.1 += 1;
            cv.notify_all();
            while g.0 {
                g = cv.wait(g).unwrap();
            }
        }
        self.disk.create(name)
    }
    fn open(&self, name: &str) -> std::io::Result<Arc<dyn crivello::storage::StorageFile>> {
        self.disk.open(name)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.disk.rename(from, to)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.disk.remove(name)
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.disk.sync_dir()
    }
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.disk.list()
    }
    fn lock(&self) -> std::io::Result<Box<dyn std::any::Any + Send + Sync>> {
        self.disk.lock()
    }
    fn describe(&self) -> String {
        self.disk.describe()
    }
}

/// Holds the creation of the first Q run that thread `thread` creates once `armed`.
fn first_q_run_of(thread: &'static str, armed: Arc<std::sync::atomic::AtomicBool>) -> Holds {
    Arc::new(move |_, name| {
        let ours = std::thread::current().name() == Some(thread);
        name.starts_with("q-") && ours && armed.swap(false, std::sync::atomic::Ordering::SeqCst)
    })
}

#[test]
fn a_hand_out_waiting_for_its_empty_fronts_flush_holds_no_other_call() {
    use crivello::storage::Storage;
    use std::sync::mpsc;
    use std::time::Duration;
    let disk = SimDisk::new();
    let gate = Arc::new((std::sync::Mutex::new((false, 0)), std::sync::Condvar::new()));
    let storage = HeldMerge {
        disk: disk.clone(),
        gate: gate.clone(),
        fail: Default::default(),
        holds: z_segments(),
    };
    let clock = Arc::new(ManualClock::new(1_000));
    let f = Arc::new(
        Frontier::open_with(
            Arc::new(storage) as Arc<dyn Storage>,
            opts().background_flush(true),
            clock.clone(),
        )
        .unwrap(),
    );
    push(
        &f,
        &[
            "http://a.example/1",
            "http://b.example/1",
            "http://a.example/2",
        ],
    );
    gate.0.lock().unwrap().0 = true;
    // The front is empty: the hand-out flushes the sieve, whose merge is held.
    let (tx, hand_out) = mpsc::channel();
    let leasing = {
        let f = f.clone();
        std::thread::spawn(move || tx.send(f.lease(10, None, 30_000)).unwrap())
    };
    {
        let (lock, cv) = &*gate;
        let mut g = lock.lock().unwrap();
        while g.1 == 0 {
            g = cv.wait(g).unwrap();
        }
    }
    // Meanwhile other calls are answered: a push, the counts, another hand-out of a crawl
    // that has no queue, a done of a URL not leased.
    let (tx, others) = mpsc::channel();
    let other = {
        let f = f.clone();
        std::thread::spawn(move || {
            push(&f, &["http://c.example/1"]);
            let stats = f.stats().unwrap();
            let none = f
                .lease_with(&crivello::LeaseRequest {
                    max_queues: 10,
                    crawl: Some("nowhere".into()),
                    ..crivello::LeaseRequest::default()
                })
                .unwrap();
            let done = f
                .complete_urls(
                    "",
                    &[(&b"http://a.example/1"[..], 0)],
                    crivello::Completion::Done,
                )
                .unwrap();
            tx.send((stats, none.len(), done)).unwrap();
        })
    };
    let (_, none, done) = others
        .recv_timeout(Duration::from_secs(20))
        .expect("the other calls are answered while the merge is held");
    assert_eq!((none, done), (0, vec![false]));
    other.join().unwrap();
    assert!(
        hand_out.try_recv().is_err(),
        "the hand-out waits for the flush"
    );
    {
        let (lock, cv) = &*gate;
        lock.lock().unwrap().0 = false;
        cv.notify_all();
    }
    let leased = hand_out.recv().unwrap().unwrap();
    leasing.join().unwrap();
    let mut got = urls(&leased);
    got.sort();
    // The hosts pushed before the hand-out began; c.example's URL, pushed during the
    // merge, may or may not be in it (a flush began after the push takes it).
    assert!(
        got == ["http://a.example/1", "http://b.example/1"]
            || got
                == [
                    "http://a.example/1",
                    "http://b.example/1",
                    "http://c.example/1"
                ],
        "{got:?}"
    );
}

#[test]
fn an_empty_fronts_hand_out_moves_all_it_flushed_before_it_serves() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = Frontier::open_with(
        Arc::new(disk.clone()),
        Options::new().seed(3).background_flush(true),
        clock.clone(),
    )
    .unwrap();
    // More new URLs than one move takes (2^18 records): the hosts h100 to h999 come after
    // the first move's records, so a hand-out after one move would find only h0 to h99.
    let mut all: Vec<String> = (0..270_000)
        .map(|i| format!("http://h{}.example/{i}", i % 100))
        .collect();
    all.extend((100..1000).map(|h| format!("http://h{h}.example/0")));
    for chunk in all.chunks(10_000) {
        let items: Vec<Discovered<'_>> = chunk
            .iter()
            .map(|u| Discovered::url(u.as_bytes()))
            .collect();
        f.push("", &items).unwrap();
    }
    let leased = f.lease(1000, Some(1), 30_000).unwrap();
    let hosts: HashSet<String> = leased
        .iter()
        .map(|l| String::from_utf8(default_key(&l.url).to_vec()).unwrap())
        .collect();
    assert_eq!(hosts.len(), 1000);
    f.close().unwrap();
}

/// While a merge of the Q runs is held, hand-outs take records from the middle of groups
/// in the runs merged and a new run moves in; once the merge commits, each queue goes on
/// from its place in the merged run (set at the commit): every URL is handed out exactly
/// once, each host's in the order pushed.
#[test]
fn hand_outs_go_on_exactly_once_across_a_merge_of_the_runs_they_read() {
    use crivello::storage::Storage;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};
    let disk = SimDisk::new();
    let gate = Arc::new((std::sync::Mutex::new((true, 0)), std::sync::Condvar::new()));
    // The merge's run is the first Q run the merge's thread creates; the gate holds it
    // alone, so that the mover's next run is written while it waits.
    let armed = Arc::new(AtomicBool::new(true));
    let holds = first_q_run_of("crivello-compact", armed.clone());
    /// Lets the merge go when the test ends, passed or failed: a frontier dropped joins its
    /// merge, which would wait for ever.
    struct Release(Arc<(std::sync::Mutex<(bool, u32)>, std::sync::Condvar)>);
    impl Drop for Release {
        fn drop(&mut self) {
            let (lock, cv) = &*self.0;
            lock.lock().unwrap_or_else(|e| e.into_inner()).0 = false;
            cv.notify_all();
        }
    }
    let storage = HeldMerge {
        disk: disk.clone(),
        gate: gate.clone(),
        fail: Default::default(),
        holds,
    };
    let clock = Arc::new(ManualClock::new(1_000));
    let f = Frontier::open_with(
        Arc::new(storage) as Arc<dyn Storage>,
        opts().background_flush(true).queue_runs(2),
        clock.clone(),
    )
    .unwrap();
    // Dropped before `f` (declared after it).
    let release = Release(gate.clone());
    let mut pushed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut push_hosts = |hosts: &[&str], from: usize| {
        let mut batch = Vec::new();
        for i in from..from + 10 {
            for h in hosts {
                let u = format!("http://{h}.example/{i}");
                pushed.entry(h.to_string()).or_default().push(u.clone());
                batch.push(u);
            }
        }
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        push(&f, &refs);
        f.flush().unwrap();
    };
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut take = |f: &Frontier, rounds: usize| {
        for _ in 0..rounds {
            let l = f.lease(100, Some(1), 60_000).unwrap();
            for x in &l {
                let u = String::from_utf8(x.url.clone()).unwrap();
                let host = u["http://".len()..u.find(".example").unwrap()].to_string();
                got.entry(host).or_default().push(u);
                assert!(f.done(x.token, 0).unwrap());
            }
            if l.is_empty() {
                return;
            }
        }
    };
    push_hosts(&["a", "b"], 0);
    push_hosts(&["a", "c"], 10);
    {
        let (lock, cv) = &*gate;
        let start = Instant::now();
        let mut g = lock.lock().unwrap();
        while g.1 == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the merge never began"
            );
            g = cv.wait_timeout(g, Duration::from_millis(50)).unwrap().0;
        }
    }
    // The merge is held: records are taken from the middle of a's and b's groups of the
    // first run, and a new run moves in, with more of a and a new host d.
    take(&f, 3);
    push_hosts(&["a", "d"], 20);
    assert_eq!(f.stats().unwrap().runs, 3, "the merge committed while held");
    take(&f, 2);
    drop(release);
    // A flush (as a hand-out) commits a merge that has ended.
    let start = Instant::now();
    while f.flush().and_then(|()| f.stats()).unwrap().runs != 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the merge never committed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    take(&f, usize::MAX);
    assert_eq!(got, pushed);
    assert_eq!(f.stats().unwrap().waiting, 0);
    f.close().unwrap();
}

/// A hand-out that finds new records in F moves them into a run written on a thread of
/// its own, and serves meanwhile from the queues as they are: with the run's writing held,
/// hand-outs, ends of leases, pushes and counts are answered. Once it is let go, every URL
/// is handed out exactly once, each host's in the order pushed.
#[test]
fn hand_outs_go_on_while_a_moves_run_is_written() {
    use crivello::storage::Storage;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let disk = SimDisk::new();
    let gate = Arc::new((std::sync::Mutex::new((true, 0)), std::sync::Condvar::new()));
    // The first Q run the mover's thread creates once armed.
    let armed = Arc::new(AtomicBool::new(false));
    let holds = first_q_run_of("crivello-move", armed.clone());
    let storage = HeldMerge {
        disk: disk.clone(),
        gate: gate.clone(),
        fail: Default::default(),
        holds,
    };
    let clock = Arc::new(ManualClock::new(1_000));
    // No checkpoint comes due in this test (one installs the move under way first).
    let f = Frontier::open_with(
        Arc::new(storage) as Arc<dyn Storage>,
        opts()
            .background_flush(true)
            .journal_bytes(64 << 20)
            .frontier_low(1 << 20),
        clock.clone(),
    )
    .unwrap();
    // A watchdog lets the run go after 40 s: a call that waited for it until then fails
    // the test below rather than hang it (and a failed test's drop, which joins the
    // mover's thread, ends).
    let fired = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (gate, fired) = (gate.clone(), fired.clone());
        std::thread::spawn(move || {
            let (lock, cv) = &*gate;
            let mut g = lock.lock().unwrap();
            let start = std::time::Instant::now();
            while g.0 {
                let left = Duration::from_secs(40).saturating_sub(start.elapsed());
                if left.is_zero() {
                    fired.store(true, Ordering::SeqCst);
                    g.0 = false;
                    cv.notify_all();
                    break;
                }
                g = cv.wait_timeout(g, left).unwrap().0;
            }
        })
    };
    let a: Vec<String> = (0..2000).map(|i| format!("http://a.example/{i}")).collect();
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    push(&f, &refs);
    f.flush().unwrap();
    armed.store(true, Ordering::SeqCst);
    // More hosts than S has slots: the sieve merges them into F in the background (the
    // frontier is low: each full S is merged with Z at once).
    let b: Vec<String> = (0..300).map(|i| format!("http://b{i}.example/0")).collect();
    let refs: Vec<&str> = b.iter().map(String::as_str).collect();
    push(&f, &refs);
    let mut got: Vec<String> = Vec::new();
    let take = |f: &Frontier, got: &mut Vec<String>| {
        let l = f.lease(1, Some(1), 60_000).unwrap();
        for x in &l {
            got.push(String::from_utf8(x.url.clone()).unwrap());
            assert!(f.done(x.token, 0).unwrap());
        }
        l.len()
    };
    // A hand-out (of a crawl with no queues, so that a.example keeps its URLs) finds F's
    // records once the sieve has merged them, and starts their move.
    let held = |gate: &Arc<(std::sync::Mutex<(bool, u32)>, std::sync::Condvar)>| {
        gate.0.lock().unwrap().1 > 0
    };
    let elsewhere = crivello::LeaseRequest {
        max_queues: 10,
        crawl: Some("nowhere".into()),
        ..crivello::LeaseRequest::default()
    };
    let start = std::time::Instant::now();
    while !held(&gate) && start.elapsed() < Duration::from_secs(20) {
        assert!(f.lease_with(&elsewhere).unwrap().is_empty());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(held(&gate), "no move began on a thread of its own");
    let runs = f.stats().unwrap().runs;
    // The run's writing is held: the frontier answers, from a.example's queue.
    for _ in 0..5 {
        assert_eq!(take(&f, &mut got), 1);
    }
    push(&f, &["http://c.example/0"]);
    let during = f.stats().unwrap();
    assert!(
        !fired.load(Ordering::SeqCst),
        "a call waited for the move's run"
    );
    assert!(got.iter().all(|u| u.starts_with("http://a.example/")));
    // The records moved are in no queue and no count until the install.
    assert_eq!(during.runs, runs);
    assert_eq!(during.waiting, 2000 - got.len() as u64);
    {
        let (lock, cv) = &*gate;
        lock.lock().unwrap().0 = false;
        cv.notify_all();
    }
    watchdog.join().unwrap();
    // A power loss once the run is written (or while it is), before any call installs it.
    std::thread::sleep(Duration::from_millis(200));
    let image = disk.crash_image(crivello::storage::sim::CrashImage::DropAll);
    let done_before_loss = got.clone();
    f.flush().unwrap();
    while take(&f, &mut got) > 0 {}
    let a_got: Vec<&String> = got.iter().filter(|u| u.contains("//a.")).collect();
    assert_eq!(
        a_got,
        a.iter().collect::<Vec<_>>(),
        "a.example's URLs in order"
    );
    let mut all: Vec<String> = a.iter().chain(&b).cloned().collect();
    all.push("http://c.example/0".into());
    all.sort();
    got.sort();
    assert_eq!(got, all, "every URL handed out once");
    assert_eq!(f.stats().unwrap().waiting, 0);
    f.close().unwrap();
    // After a reopen nothing is handed out again.
    let g = Frontier::open_with(Arc::new(disk), opts(), clock.clone()).unwrap();
    assert!(g.lease(1000, None, 60_000).unwrap().is_empty());
    g.close().unwrap();
    // The image of the power loss: F is moved again from the position J holds, and every
    // URL not done before the loss is handed out once.
    let g = Frontier::open_with(Arc::new(image), opts(), clock).unwrap();
    let mut after: Vec<String> = done_before_loss;
    while take(&g, &mut after) > 0 {}
    after.sort();
    assert_eq!(after, all, "every URL once across the power loss");
    g.close().unwrap();
}

#[test]
fn a_merge_that_fails_while_a_hand_out_waits_for_it_is_that_hand_outs_error() {
    use crivello::storage::Storage;
    let disk = SimDisk::new();
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let storage = HeldMerge {
        disk: disk.clone(),
        gate: Arc::new((std::sync::Mutex::new((false, 0)), std::sync::Condvar::new())),
        fail: fail.clone(),
        holds: z_segments(),
    };
    let clock = Arc::new(ManualClock::new(1_000));
    let f = Frontier::open_with(
        Arc::new(storage) as Arc<dyn Storage>,
        opts().background_flush(true),
        clock.clone(),
    )
    .unwrap();
    push(&f, &["http://a.example/1"]);
    // The empty front's merge fails on the flush thread: the hand-out that waited for it
    // gets its error, which names what failed, not only that the store is poisoned.
    let e = f.lease(10, None, 30_000).unwrap_err();
    assert!(!matches!(e, Error::Poisoned), "{e}");
    assert!(e.to_string().contains("no room for a Z segment"), "{e}");
    // Every later call says the store is poisoned.
    assert!(matches!(f.lease(10, None, 30_000), Err(Error::Poisoned)));
}

/// Queues whose records share frames, and queues whose records fill frames, served one
/// record a call: each hand-out starts at the queue's next record in its frame, so retries,
/// a reopen (which forgets where each queue stands) and calls that take from some queues and
/// not others must still serve every record once, each queue in order.
#[test]
fn records_taken_one_at_a_time_from_shared_frames_come_in_order_across_a_reopen() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let mut f = open(&disk, &clock);
    // Three big hosts and forty small ones, their URLs interleaved in one push.
    let mut all = Vec::new();
    for i in 0..150 {
        for h in 0..3 {
            all.push(format!("http://big{h}.example/section/page-{i:04}.html"));
        }
        if i < 40 {
            all.push(format!("http://small{i}.example/"));
            all.push(format!("http://small{i}.example/about"));
        }
    }
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    push(&f, &refs);
    let mut served: HashMap<String, Vec<String>> = HashMap::new();
    let mut calls = 0;
    loop {
        calls += 1;
        if calls == 60 {
            f.close().unwrap();
            f = open(&disk, &clock);
        }
        // A call of few URLs leaves some due queues for the next.
        let got = f
            .lease(if calls % 3 == 0 { 7 } else { 100 }, None, 30_000)
            .unwrap();
        if got.is_empty() {
            break;
        }
        for (j, l) in got.iter().enumerate() {
            if calls % 5 == 0 && j % 4 == 0 {
                // Back in its queue, in its place: served again next.
                assert!(f.retry(l.token, 5).unwrap());
                continue;
            }
            let url = String::from_utf8(l.url.clone()).unwrap();
            let host = url.split('/').nth(2).unwrap().to_string();
            served.entry(host).or_default().push(url);
            assert!(f.done(l.token, 5).unwrap());
        }
    }
    let mut want: HashMap<String, Vec<String>> = HashMap::new();
    for u in &all {
        let host = u.split('/').nth(2).unwrap().to_string();
        want.entry(host).or_default().push(u.clone());
    }
    assert_eq!(served.len(), want.len());
    for (host, urls) in &want {
        assert_eq!(&served[host], urls, "{host}");
    }
    let st = f.stats().unwrap();
    assert_eq!((st.waiting, st.leased, st.done), (0, 0, all.len() as u64));
    f.close().unwrap();
}

/// The id of the queue of `key` in crawl 0, as `docs/design.md` ("Q run") specifies it.
fn queue_id(key: &[u8]) -> u64 {
    let mut bytes = 0u32.to_le_bytes().to_vec();
    bytes.extend_from_slice(key);
    xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, 0x6372_6976_656c_6c6f)
}

/// Two hosts whose queue ids share their high 32 bits, which is what an open's walk of the
/// queues in id order goes by first: each host's URLs come back in its own queue, in order,
/// after a crash and after a close (the runs read by J's replay), from a checkpoint (which
/// says which runs hold each queue), and from that checkpoint rewritten as version 11 (the
/// runs' directories read by its load).
#[test]
fn queues_whose_ids_share_their_high_half_are_told_apart_at_an_open() {
    let host = |n: u32| format!("h{n}.test");
    let mut seen: HashMap<u32, u32> = HashMap::new();
    let (a, b) = (0u32..)
        .find_map(|n| {
            let hi = (queue_id(host(n).as_bytes()) >> 32) as u32;
            seen.insert(hi, n).map(|m| (m, n))
        })
        .unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let opts = || opts().slots(512).queue_runs(32).journal_bytes(1 << 20);
    let disk = SimDisk::new();
    let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).unwrap();
    // Three runs, each with both hosts among others.
    let mut want: HashMap<String, Vec<String>> = HashMap::new();
    for round in 0..3 {
        let part: Vec<String> = (0..300)
            .map(|i| match i % 3 {
                0 => format!("http://{}/{round}/{i}", host(a)),
                1 => format!("http://{}/{round}/{i}", host(b)),
                _ => format!("http://{}/{round}/{i}", host(1_000_000 + i)),
            })
            .collect();
        let items: Vec<Discovered<'_>> =
            part.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        f.flush().unwrap();
        for u in part {
            want.entry(u.split('/').nth(2).unwrap().to_owned())
                .or_default()
                .push(u);
        }
    }
    assert!(f.stats().unwrap().runs >= 3);
    let crashed = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    f.close().unwrap();
    assert!(disk.content("CHECKPOINT").is_none(), "J alone, replayed");
    // A close with a small bound on J writes a checkpoint.
    let checkpointed = disk.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    let f = Frontier::open_with(
        Arc::new(checkpointed.clone()),
        opts().journal_bytes(64),
        clock.clone(),
    )
    .unwrap();
    f.close().unwrap();
    let c = checkpointed.content("CHECKPOINT").expect("a checkpoint");
    let old = checkpointed.crash_image(crivello::storage::sim::CrashImage::KillProcess);
    old.set_content(
        "CHECKPOINT",
        crivello::internals::checkpoint_in_version(&c, 11).unwrap(),
    );
    for d in [crashed, disk, checkpointed, old] {
        let f = Frontier::open_with(Arc::new(d), opts(), clock.clone()).unwrap();
        let mut served: HashMap<String, Vec<String>> = HashMap::new();
        loop {
            let got = f.lease(1_000, Some(1_000), 60_000).unwrap();
            if got.is_empty() {
                break;
            }
            for l in got {
                let u = String::from_utf8(l.url.clone()).unwrap();
                let key = String::from_utf8(l.key).unwrap();
                assert_eq!(key, u.split('/').nth(2).unwrap(), "the queue of {u}");
                served.entry(key).or_default().push(u);
                assert!(f.done(l.token, 0).unwrap());
            }
        }
        assert_eq!(served[&host(a)], want[&host(a)]);
        assert_eq!(served[&host(b)], want[&host(b)]);
        assert_eq!(served, want);
        f.close().unwrap();
    }
}

/// The frame layout of the first frame of each Q run of `files` (name, bytes): a coded
/// frame's layout byte (5 front coded, 6 compressed), 0 for a plain frame. (A run's header
/// is 20 bytes, a frame's 28, and a coded payload starts with its layout.)
fn run_layouts(files: impl IntoIterator<Item = (String, Vec<u8>)>) -> Vec<u8> {
    let mut layouts = Vec::new();
    for (name, bytes) in files {
        if name.starts_with("q-") && bytes.len() > 48 {
            let coded = bytes[20..24] == *b"FRZ1";
            layouts.push(if coded { bytes[48] } else { 0 });
        }
    }
    layouts.sort_unstable();
    layouts
}

/// The choice of compressed Q runs is the store's: kept by later opens that do not make it,
/// changed by one that does, never by a read-only open; the runs written either way, and
/// their compactions together, hand out every URL once.
#[test]
fn the_choice_of_compressed_queues_is_kept_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let o = || opts().queue_runs(4);
    let compressed = |f: &Frontier| f.stats().unwrap().compressed;
    let f = Frontier::open(dir.path(), o()).unwrap();
    assert!(!compressed(&f), "a new store writes front-coded runs");
    f.close().unwrap();
    let mut all = Vec::new();
    let mut round = 0;
    let mut add = |f: &Frontier| {
        let us: Vec<String> = (0..50)
            .map(|i| format!("http://h{}.test/{round}/{i}", i % 3))
            .collect();
        push(f, &us.iter().map(String::as_str).collect::<Vec<_>>());
        f.flush().unwrap();
        all.extend(us);
        round += 1;
    };
    for (choice, expected) in [
        (Some(true), true),
        (None, true),
        (Some(false), false),
        (None, false),
        (Some(true), true),
    ] {
        let opts = match choice {
            Some(on) => o().compress_queues(on),
            None => o(),
        };
        let f = Frontier::open(dir.path(), opts).unwrap();
        assert_eq!(compressed(&f), expected, "{choice:?}");
        add(&f);
        f.close().unwrap();
        if choice == Some(false) {
            // Runs of both layouts: those written while the choice was on, and this one.
            let files = std::fs::read_dir(dir.path()).unwrap().map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap())
            });
            let layouts = run_layouts(files);
            assert!(layouts.contains(&5) && layouts.contains(&6), "{layouts:?}");
        }
        // A read-only open that chooses otherwise writes nothing, the choice included.
        let r = Frontier::open_read_only(dir.path(), o().compress_queues(!expected)).unwrap();
        assert_eq!(compressed(&r), !expected);
        drop(r);
    }
    let f = Frontier::open(dir.path(), o()).unwrap();
    assert!(compressed(&f));
    assert!(f.stats().unwrap().runs < 5, "the runs were compacted");
    f.set_policy(
        "",
        None,
        Policy {
            per_queue: 1000,
            ..Policy::default()
        },
    )
    .unwrap();
    let mut served = Vec::new();
    loop {
        let got = f.lease(10, Some(1000), 60_000).unwrap();
        if got.is_empty() {
            break;
        }
        served.extend(urls(&got));
    }
    served.sort_unstable();
    all.sort_unstable();
    assert_eq!(served, all);
    f.close().unwrap();
}

/// A caller that only reads counts (`flush_for_reading`, what the service's GetStats and
/// ListQueues call) does not merge a Z of a million signatures or more again right after a
/// merge: what was pushed since waits for the spacing (a second, or ten times the merge's
/// length), then the next read merges it. A smaller Z is merged at every read (the other
/// tests).
#[test]
fn counts_read_right_after_a_costly_merge_do_not_merge_z_again() {
    let dir = tempfile::tempdir().unwrap();
    let f = Frontier::open(dir.path(), Options::new()).unwrap();
    let n = 1_100_000u64;
    let urls: Vec<String> = (0..n)
        .map(|i| format!("http://h{}.test/{i}", i % 1000))
        .collect();
    for chunk in urls.chunks(10_000) {
        let items: Vec<Discovered<'_>> = chunk
            .iter()
            .map(|u| Discovered::url(u.as_bytes()))
            .collect();
        f.push("", &items).unwrap();
    }
    // Z then holds more than a million signatures: a merge reads and writes it whole.
    f.flush().unwrap();
    assert_eq!(f.counts("", None).unwrap().waiting, n);
    push(&f, &["http://new.test/1"]);
    f.flush_for_reading().unwrap();
    assert_eq!(
        f.counts("", None).unwrap().waiting,
        n,
        "a read right after a costly merge merged again"
    );
    let start = std::time::Instant::now();
    loop {
        f.flush_for_reading().unwrap();
        if f.counts("", None).unwrap().waiting == n + 1 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "the pushed URL never reached its queue"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    f.close().unwrap();
}

/// A panic in a callback a visit runs under the frontier's lock reaches the caller and
/// leaves the frontier usable by every thread (it was refused, as poisoned, until reopened);
/// bounds that would lease for no time or hand out nothing, an empty key and an overlong
/// crawl name are refused, naming the option.
#[test]
fn a_panicking_visit_leaves_the_frontier_usable_and_absurd_calls_are_refused() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    push(&f, &["http://a.test/1", "http://b.test/1"]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        f.urls("", None, |_| panic!("a bug of the caller's"))
            .unwrap();
    }));
    assert!(caught.is_err(), "the panic did not reach the caller");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        f.export(|_, _| true, |_| panic!("a bug of the caller's"))
            .unwrap();
    }));
    assert!(caught.is_err(), "the panic did not reach the caller");
    assert_eq!(f.stats().unwrap().waiting, 2);
    let option = |e: Error| match e {
        Error::InvalidOption { option, .. } => option,
        e => panic!("{e}"),
    };
    assert_eq!(option(f.lease(10, None, 0).unwrap_err()), "ttl_ms");
    assert_eq!(
        option(f.lease(10, Some(0), 1_000).unwrap_err()),
        "per_queue"
    );
    let empty = [Discovered {
        key: Some(b""),
        ..Discovered::url(b"http://c.test/1")
    }];
    assert_eq!(option(f.push("", &empty).unwrap_err()), "key");
    assert_eq!(option(f.block("", b"", 60_000).unwrap_err()), "key");
    let long = "c".repeat(1025);
    assert_eq!(
        option(
            f.push(&long, &[Discovered::url(b"http://c.test/1")])
                .unwrap_err()
        ),
        "crawl"
    );
    f.push(&"c".repeat(1024), &[Discovered::url(b"http://c.test/1")])
        .unwrap();
    f.flush().unwrap();
    assert_eq!(f.lease(10, None, 1_000).unwrap().len(), 3);
    f.close().unwrap();
}

/// A frontier in a directory runs on the clock it was opened with.
#[test]
fn a_frontier_in_a_directory_runs_on_the_clock_given() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = Frontier::open_with_clock(tmp.path(), opts(), clock.clone()).unwrap();
    push(&f, &["http://a.test/1"]);
    let l = f.lease(1, None, 5_000).unwrap();
    assert_eq!(l[0].deadline_ms, 6_000);
    clock.set(6_000);
    assert_eq!(urls(&f.lease(1, None, 5_000).unwrap()), ["http://a.test/1"]);
    f.close().unwrap();
}

/// A store's directory removed while a frontier has it open: a push a millisecond or more
/// after the last check of the path is not acknowledged (its sync fails, naming what
/// happened) although its files, unlinked, still take writes; the calls after it fail too,
/// saying so rather than reporting damage.
#[test]
fn a_push_into_a_removed_directory_is_not_acknowledged() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("store");
    let f = Frontier::open(&dir, Options::new()).unwrap();
    push(&f, &["http://a.test/1"]);
    f.flush().unwrap();
    assert_eq!(f.lease(10, None, 60_000).unwrap().len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
    // A sync within a millisecond of the last check of the path does not look it up again.
    std::thread::sleep(std::time::Duration::from_millis(2));
    let items = [Discovered::url(b"http://b.test/1")];
    let err = f
        .push("", &items)
        .expect_err("a push into a removed store")
        .to_string();
    assert!(err.contains("moved, removed or replaced"), "{err}");
    let later = f.flush().expect_err("a store removed").to_string();
    assert!(!later.contains("corrupt"), "{later}");
    drop(f);
    assert!(!dir.exists());
}

/// The ratio rule waits at most 100 years: a fetch said to take a year under a ratio of one
/// millionth made its queue due a million years on (past what a double holds exactly, which
/// `queues --json` printed), after a crash too.
#[test]
fn the_ratio_rules_wait_is_at_most_a_hundred_years() {
    const HUNDRED_YEARS: u64 = 876_000 * 3_600_000;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(50_000));
    let f = open(&disk, &clock);
    f.set_policy(
        "",
        None,
        Policy {
            ratio_ppm: 1,
            ..Policy::default()
        },
    )
    .unwrap();
    push(&f, &["http://a.test/1", "http://a.test/2"]);
    let l = f.lease(1, None, 9_000).unwrap();
    clock.advance(100);
    assert!(f.done(l[0].token, 365 * 86_400_000).unwrap());
    assert_eq!(f.next_due_ms().unwrap(), Some(50_100 + HUNDRED_YEARS));
    drop(f);
    let f = open(
        &disk.crash_image(crivello::storage::sim::CrashImage::DropAll),
        &clock,
    );
    assert_eq!(f.next_due_ms().unwrap(), Some(50_100 + HUNDRED_YEARS));
}

#[test]
fn the_first_lease_after_a_reopen_serves_what_was_pushed_before_it() {
    // A queue emptied by a done, then URLs pushed to it and to a new host, then a close: the
    // reopened frontier's first hand-out flushes them into their queues and serves both.
    let check = |f: Frontier, reopen: &dyn Fn() -> Frontier| {
        f.push("", &[Discovered::url(b"http://h0/first")]).unwrap();
        let l = f.lease(1, None, 60_000).unwrap();
        assert!(f.done(l[0].token, 1).unwrap());
        f.push(
            "",
            &[
                Discovered::url(b"http://h0/a"),
                Discovered::url(b"http://h1/b"),
            ],
        )
        .unwrap();
        f.close().unwrap();
        let f = reopen();
        let mut got = urls(&f.lease(10, None, 60_000).unwrap());
        got.sort();
        assert_eq!(got, ["http://h0/a", "http://h1/b"]);
        f.close().unwrap();
    };
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    check(open(&disk, &clock), &|| open(&disk, &clock));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    check(Frontier::open(&path, Options::new()).unwrap(), &|| {
        Frontier::open(&path, Options::new()).unwrap()
    });

    // Every queue with URLs waiting has its one fetcher out: after a reopen the first
    // hand-out flushes and serves the host pushed since.
    let disk = SimDisk::new();
    let f = open(&disk, &clock);
    push(&f, &["http://h0/1", "http://h0/2", "http://h1/1"]);
    assert_eq!(f.lease(10, None, 60_000).unwrap().len(), 2);
    push(&f, &["http://h2/1"]);
    f.close().unwrap();
    let f = open(&disk, &clock);
    assert_eq!(urls(&f.lease(10, None, 60_000).unwrap()), ["http://h2/1"]);
    f.close().unwrap();
}

#[test]
fn a_queue_emptied_by_a_known_update_does_not_hide_an_empty_front() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    push(&f, &["http://h0/a"]);
    f.flush().unwrap();
    let done = crivello::Known {
        url: b"http://h0/a",
        key: None,
        metadata: b"",
        refetch_ms: 0,
    };
    f.update("", &[done]).unwrap();
    push(&f, &["http://h1/b"]);
    assert_eq!(urls(&f.lease(10, None, 60_000).unwrap()), ["http://h1/b"]);
    f.close().unwrap();
}

#[test]
fn a_url_whose_own_key_is_too_long_and_metadata_too_large_are_refused_and_lose_nothing() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    push(&f, &["http://before/"]);
    // The text after :// up to the first :, /, ? or & is the key: a fragment of 332 bytes
    // makes one no call could name (url-frontier refuses such a URL too).
    let long = format!("https://example.com#{}", "section-".repeat(40));
    let refused = f.push("", &[Discovered::url(long.as_bytes())]).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::InvalidUrl(crivello::InvalidUrl::KeyTooLong { len: 332, max: 255 })
        ),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("give it a key of its own"),
        "{refused}"
    );
    assert!(f.validate(long.as_bytes(), None).is_err());
    assert!(f.validate_update(long.as_bytes(), None).is_ok());
    let known = crivello::Known {
        url: long.as_bytes(),
        key: None,
        metadata: b"",
        refetch_ms: 0,
    };
    // An update takes it (a frontier may hold such URLs, from a plain sieve's output or a
    // build before the check, whose leases must end): the URL is known, and done.
    f.update("", &[known]).unwrap();
    assert_eq!(
        f.status("", None, long.as_bytes()).unwrap(),
        UrlStatus::Done
    );
    // With a key of its own it is taken (another URL of the kind: that one is known now).
    let other = format!("https://example.com#{}", "other-".repeat(60));
    let keyed = Discovered {
        url: other.as_bytes(),
        key: Some(b"example.com"),
        metadata: b"",
    };
    f.push("", &[keyed]).unwrap();
    // A URL may carry at most 64 MiB of metadata (past 4 GiB its record's length wrapped,
    // and the store could no longer be opened).
    let big = vec![b'm'; crivello::queues::MAX_METADATA_LEN + 1];
    let heavy = Discovered {
        url: b"http://big/",
        key: None,
        metadata: &big,
    };
    let refused = f.push("", &[heavy]).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::InvalidOption {
                option: "metadata",
                ..
            }
        ),
        "{refused:?}"
    );
    let heavy_known = crivello::Known {
        url: b"http://before/",
        key: None,
        metadata: &big,
        refetch_ms: 5_000,
    };
    assert!(matches!(
        f.update("", &[heavy_known]),
        Err(Error::InvalidOption {
            option: "metadata",
            ..
        })
    ));
    let most = Discovered {
        url: b"http://most/",
        key: None,
        metadata: &big[1..],
    };
    f.push("", &[most]).unwrap();
    f.close().unwrap();
    let f = open(&disk, &clock);
    f.flush().unwrap();
    let mut got: Vec<(String, usize)> = f
        .lease(10, None, 60_000)
        .unwrap()
        .into_iter()
        .map(|l| (String::from_utf8(l.url).unwrap(), l.metadata.len()))
        .collect();
    got.sort();
    let mut want = vec![
        ("http://before/".to_owned(), 0),
        (other.clone(), 0),
        (
            "http://most/".to_owned(),
            crivello::queues::MAX_METADATA_LEN,
        ),
    ];
    want.sort();
    assert_eq!(got, want);
    f.close().unwrap();
}

#[test]
fn handles_print_their_store_for_debugging_and_a_shared_one_is_closed_through_try_unwrap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let f = Arc::new(Frontier::open(&path, Options::new()).unwrap());
    let shown = format!("{f:?}");
    assert!(
        shown.starts_with("Frontier") && shown.contains(&*path.to_string_lossy()),
        "{shown}"
    );
    // The step that calls `close(self)` on a handle shared through an `Arc`.
    Arc::try_unwrap(f).unwrap().close().unwrap();
    let s = Sieve::open(dir.path().join("s"), Options::new()).unwrap();
    let shown = format!("{s:?}");
    assert!(
        shown.starts_with("Sieve") && shown.contains("mode"),
        "{shown}"
    );
    s.close().unwrap();
}

#[test]
fn lookup_gives_the_key_and_metadata_of_a_url_wherever_it_is_held() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    let item = |url: &'static str, key: Option<&'static [u8]>, meta: &'static [u8]| Discovered {
        url: url.as_bytes(),
        key,
        metadata: meta,
    };
    f.push(
        "",
        &[
            item("http://a.test/1", None, b"m1"),
            item("http://a.test/2", None, b"m2"),
            item("http://a.test/3", None, b"m3"),
            item("http://b.test/1", Some(b"own"), b"mb"),
        ],
    )
    .unwrap();
    let look = |key: Option<&[u8]>, url: &str| f.lookup("", key, url.as_bytes()).unwrap();
    let leased = f.lease(10, None, 60_000).unwrap();
    assert_eq!(leased.len(), 2);
    // Leased: found by the URL, in any queue, with its own key.
    let h = look(None, "http://b.test/1").unwrap();
    assert_eq!(
        (h.key.as_slice(), h.metadata.as_slice()),
        (&b"own"[..], &b"mb"[..])
    );
    assert_eq!(h.status, UrlStatus::Leased { until_ms: 61_000 });
    assert_eq!(f.status("", None, b"http://b.test/1").unwrap(), h.status);
    // Waiting in the runs, the last of its queue.
    let h = look(None, "http://a.test/3").unwrap();
    assert_eq!(
        (h.key.as_slice(), h.metadata.as_slice()),
        (&b"a.test"[..], &b"m3"[..])
    );
    assert_eq!(h.status, UrlStatus::Waiting);
    // Returned by a retry, then to fetch again, then done.
    let a1 = leased.iter().find(|l| l.url == b"http://a.test/1").unwrap();
    assert!(f.retry(a1.token, 0).unwrap());
    let h = look(Some(b"a.test"), "http://a.test/1").unwrap();
    assert_eq!(
        (h.status, h.metadata.as_slice()),
        (UrlStatus::Waiting, &b"m1"[..])
    );
    let again = f.lease(10, None, 60_000).unwrap();
    let a1 = again.iter().find(|l| l.url == b"http://a.test/1").unwrap();
    assert!(f.refetch(a1.token, 0, 90_000).unwrap());
    let h = look(None, "http://a.test/1").unwrap();
    assert_eq!(
        (h.status, h.metadata.as_slice()),
        (UrlStatus::Refetch { at_ms: 90_000 }, &b"m1"[..])
    );
    let b1 = leased.iter().find(|l| l.url == b"http://b.test/1").unwrap();
    assert!(f.done(b1.token, 0).unwrap());
    let h = look(Some(b"own"), "http://b.test/1").unwrap();
    assert_eq!(
        (h.status, h.key.as_slice(), h.metadata.len()),
        (UrlStatus::Done, &b"own"[..], 0)
    );
    assert_eq!(look(None, "http://never.test/"), None);
    // `status` gives the same, and Unknown for a URL never pushed.
    for (u, want) in [
        ("http://a.test/1", UrlStatus::Refetch { at_ms: 90_000 }),
        ("http://a.test/2", UrlStatus::Waiting),
        ("http://a.test/3", UrlStatus::Waiting),
        ("http://b.test/1", UrlStatus::Done),
        ("http://never.test/", UrlStatus::Unknown),
    ] {
        assert_eq!(f.status("", None, u.as_bytes()).unwrap(), want, "{u}");
    }
    f.close().unwrap();
}

#[test]
fn an_emptied_queue_below_another_crawls_due_one_does_not_hide_an_empty_front() {
    // A hand-out for DEFAULT whose heap has another crawl's queue due first, and below it
    // DEFAULT's queue with nothing to serve: DEFAULT's front is empty, and the hand-out
    // flushes what was pushed to DEFAULT since.
    let lease_default = |f: &Frontier| {
        let req = crivello::LeaseRequest {
            max_queues: 10,
            crawl: Some(String::new()),
            ..Default::default()
        };
        urls(&f.lease_with(&req).unwrap())
    };
    // After a reopen: the replayed lease of h0's one URL.
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    f.push("other", &[Discovered::url(b"http://h9/x")]).unwrap();
    f.flush().unwrap();
    clock.set(2_000);
    push(&f, &["http://h0/1"]);
    assert_eq!(lease_default(&f), ["http://h0/1"]);
    push(&f, &["http://h1/new"]);
    f.close().unwrap();
    let f = open(&disk, &clock);
    assert_eq!(lease_default(&f), ["http://h1/new"]);
    f.close().unwrap();
    // Live: h0's one URL made done by a known update.
    let disk = SimDisk::new();
    let f = open(&disk, &clock);
    f.push("other", &[Discovered::url(b"http://h9/x")]).unwrap();
    f.flush().unwrap();
    clock.set(3_000);
    push(&f, &["http://h0/1"]);
    f.flush().unwrap();
    let done = crivello::Known {
        url: b"http://h0/1",
        key: None,
        metadata: b"",
        refetch_ms: 0,
    };
    f.update("", &[done]).unwrap();
    push(&f, &["http://h1/new"]);
    assert_eq!(lease_default(&f), ["http://h1/new"]);
    f.close().unwrap();
}

/// After an I/O error stopped the frontier, the first policy or limit of the open (which
/// commits the manifest in this build's version before its entry) answered the disk's error
/// again ("write MANIFEST.tmp: No space left on device"), trying to write on a store that
/// had stopped: it is refused as every change is, and nothing is written.
#[test]
fn a_stopped_frontier_writes_no_manifest_for_a_policy() {
    use crivello::storage::sim::FaultKind;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    push(&f, &["http://a.test/1"]);
    disk.fail_at(1, FaultKind::NoSpace, true);
    assert!(f.push("", &[Discovered::url(b"http://a.test/2")]).is_err());
    let ops = disk.ops();
    let p = Policy {
        delay_ms: 5,
        ..Policy::default()
    };
    for r in [
        f.set_policy("", Some(b"a.test"), p),
        f.set_policy("", None, p),
        f.block("", b"a.test", 9_999),
    ] {
        assert!(matches!(r, Err(Error::Poisoned)), "{r:?}");
    }
    assert_eq!(disk.ops(), ops, "nothing written once stopped");
}

/// A URL holding a newline is refused by every call that brings a URL in, and changes
/// nothing: the command line prints one URL a line. One that a store written before that
/// refusal holds (put there by `Sieve::push_line`, which takes lines the command line split)
/// is still handed out whole, and its lease ends by its token or by an update.
#[test]
fn a_url_holding_a_newline_is_refused_and_one_already_held_is_still_served() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000));
    let f = open(&disk, &clock);
    push(&f, &["http://before/"]);
    let bad = b"http://h/a\nhttp://h/b".as_slice();
    let newline = |e: Error| {
        matches!(
            e,
            Error::InvalidUrl(crivello::InvalidUrl::Newline { at: 10 })
        )
    };
    assert!(newline(f.push("", &[Discovered::url(bad)]).unwrap_err()));
    assert!(newline(
        f.push_new("", &[Discovered::url(b"http://ok/"), Discovered::url(bad)])
            .unwrap_err()
    ));
    let known = crivello::Known {
        url: bad,
        key: Some(b"h"),
        metadata: b"",
        refetch_ms: 0,
    };
    assert!(newline(f.update("", &[known]).unwrap_err()));
    assert!(newline(f.validate(bad, None).unwrap_err()));
    // An update takes one the crawl knows (below): the check without the lock lets it pass.
    f.validate_update(bad, Some(b"h")).unwrap();
    // Nor a key holding one: `crivello queues` prints one queue a line.
    let key_nl = |e: Error| matches!(&e, Error::InvalidOption { option: "key", reason } if reason.contains("newline (byte 1)"));
    let keyed = Discovered {
        url: b"http://k/",
        key: Some(b"k\nl"),
        metadata: b"",
    };
    assert!(key_nl(f.push("", &[keyed]).unwrap_err()));
    assert!(key_nl(f.validate(b"http://k/", Some(b"k\nl")).unwrap_err()));
    // An update refuses one with a URL its crawl does not know (it would push it), and takes
    // it with one it knows (an earlier build's store may hold such keys).
    f.validate_update(b"http://k/", Some(b"k\nl")).unwrap();
    let known_keyed = |url| crivello::Known {
        url,
        key: Some(b"k\nl"),
        metadata: b"",
        refetch_ms: 0,
    };
    assert!(key_nl(
        f.update("", &[known_keyed(b"http://k/")]).unwrap_err()
    ));
    f.update("", &[known_keyed(b"http://before/")]).unwrap();
    assert_eq!(
        f.status("", None, b"http://k/").unwrap(),
        UrlStatus::Unknown
    );
    assert_eq!(f.status("", None, bad).unwrap(), UrlStatus::Unknown);
    assert_eq!(
        f.status("", None, b"http://ok/").unwrap(),
        UrlStatus::Unknown
    );
    assert_eq!(
        urls(&f.lease(10, None, 60_000).unwrap()),
        ["http://before/"]
    );
    f.close().unwrap();

    // A store that holds one already.
    let disk = SimDisk::new();
    let mut sieve = crivello::Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    sieve.push_line(bad).unwrap();
    sieve.push_line(b"http://h/c").unwrap();
    sieve.close().unwrap();
    let f = open(&disk, &clock);
    let leased = f.lease(10, None, 60_000).unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].url, bad);
    assert_eq!(
        f.complete(&[(leased[0].token, 0, Completion::Done)])
            .unwrap(),
        [true]
    );
    assert_eq!(urls(&f.lease(10, None, 60_000).unwrap()), ["http://h/c"]);
    // An update ends the lease of one it holds (as url-frontier's clients end leases), alone
    // or beside a URL the crawl does not know yet; one the crawl does not know is refused.
    let other = b"http://g/d\ne".as_slice();
    f.close().unwrap();
    let mut sieve = crivello::Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    sieve.push_line(other).unwrap();
    sieve.push_line(b"http://g/f").unwrap();
    sieve.close().unwrap();
    let f = open(&disk, &clock);
    let leased = f.lease(10, None, 60_000).unwrap();
    assert_eq!(urls(&leased), ["http://g/d\ne"]);
    let done = |url| crivello::Known {
        url,
        key: Some(b"g"),
        metadata: b"",
        refetch_ms: 0,
    };
    assert!(newline(
        f.update("", &[done(b"http://g/n\never")]).unwrap_err()
    ));
    f.update("", &[done(other), done(b"http://g/new")]).unwrap();
    assert_eq!(f.status("", Some(b"g"), other).unwrap(), UrlStatus::Done);
    assert_eq!(
        f.status("", Some(b"g"), b"http://g/new").unwrap(),
        UrlStatus::Done
    );
    // And one waiting in its queue is taken out of it, done.
    f.update("", &[done(b"http://g/f")]).unwrap();
    assert!(f.lease(10, None, 60_000).unwrap().is_empty());
    f.close().unwrap();
}
