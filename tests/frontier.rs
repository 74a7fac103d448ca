//! The frontier: per-host queues, politeness and leases, durable across reopens and crashes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crivello::queues::{key::default_key, ManualClock};
use crivello::storage::SimDisk;
use crivello::{Discovered, Error, Frontier, Options, Policy, Sieve};

fn opts() -> Options {
    Options::new()
        .slots(64)
        .seed(3)
        .background_flush(false)
        .frontier_low(0)
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
            per_queue: 1,
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
    // Its lease expires: it goes back in its place, before /3.
    clock.advance(5_000);
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
}

/// The frontier against a model: random pushes, leases, dones, retries, expiries, policies,
/// pauses and reopens, with a simulated clock.
mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<(u8, u8)>),
        Lease(u8, u8),
        Done(u8),
        Retry(u8),
        Advance(u16),
        Delay(u16, u8),
        Pause(bool),
        Reopen,
        PowerLoss,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => proptest::collection::vec((0u8..5, 0u8..12), 1..6).prop_map(Op::Push),
            4 => (1u8..6, 1u8..4).prop_map(|(q, k)| Op::Lease(q, k)),
            3 => any::<u8>().prop_map(Op::Done),
            1 => any::<u8>().prop_map(Op::Retry),
            2 => (0u16..3000).prop_map(Op::Advance),
            1 => (0u16..2000, 1u8..3).prop_map(|(d, k)| Op::Delay(d, k)),
            1 => any::<bool>().prop_map(Op::Pause),
            1 => Just(Op::Reopen),
            1 => Just(Op::PowerLoss),
        ]
    }

    /// The model: per host, URLs in first-appearance order, each waiting, leased or done.
    #[derive(Default)]
    struct Model {
        seen: HashSet<String>,
        queues: BTreeMap<String, Vec<String>>,
        leased: HashMap<String, (u64, u64)>,
        done: HashSet<String>,
        due: HashMap<String, u64>,
        policy: Policy,
        paused: bool,
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn the_frontier_follows_the_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut disk = SimDisk::new();
            let clock = Arc::new(ManualClock::new(1_000_000));
            let mut f = open(&disk, &clock);
            let mut m = Model { policy: Policy::default(), ..Model::default() };
            let mut tokens: Vec<(u64, String)> = Vec::new();
            for op in ops {
                let now = clock.now_ms_for_test();
                match op {
                    Op::Push(items) => {
                        let us: Vec<String> = items
                            .iter()
                            .map(|(h, p)| format!("http://h{h}.test/{p}"))
                            .collect();
                        let refs: Vec<&str> = us.iter().map(String::as_str).collect();
                        push(&f, &refs);
                        for u in us {
                            if m.seen.insert(u.clone()) {
                                let host = String::from_utf8(default_key(u.as_bytes()).to_vec()).unwrap();
                                m.queues.entry(host).or_default().push(u);
                            }
                        }
                    }
                    Op::Lease(q, k) => {
                        // Expired leases go back to the front of their queue.
                        let expired: Vec<String> = m.leased.iter()
                            .filter(|(_, (_, d))| *d <= now).map(|(u, _)| u.clone()).collect();
                        for u in expired {
                            m.leased.remove(&u);
                        }
                        let got = f.lease(q as usize, Some(k as u32), 1_500).unwrap();
                        if m.paused {
                            prop_assert!(got.is_empty());
                        }
                        let mut per_host: HashMap<String, usize> = HashMap::new();
                        for l in &got {
                            let u = String::from_utf8(l.url.clone()).unwrap();
                            let host = String::from_utf8(l.key.clone()).unwrap();
                            prop_assert!(!m.done.contains(&u), "{} served after done", u);
                            prop_assert!(!m.leased.contains_key(&u), "{} served while leased", u);
                            prop_assert!(m.due.get(&host).is_none_or(|&d| d <= now), "{} before due", host);
                            // First-appearance order among what is neither done nor leased.
                            let next = m.queues[&host].iter()
                                .find(|x| !m.done.contains(*x) && !m.leased.contains_key(*x));
                            prop_assert_eq!(next, Some(&u));
                            let c = per_host.entry(host.clone()).or_default();
                            *c += 1;
                            prop_assert!(*c <= k as usize);
                            m.leased.insert(u.clone(), (l.token, now + 1_500));
                            let in_lease = m.leased.keys()
                                .filter(|x| default_key(x.as_bytes()) == host.as_bytes()).count();
                            prop_assert!(in_lease <= m.policy.per_queue as usize);
                            tokens.push((l.token, u));
                        }
                        prop_assert!(per_host.len() <= q as usize);
                    }
                    Op::Done(i) | Op::Retry(i) => {
                        if tokens.is_empty() { continue; }
                        let (token, u) = tokens[i as usize % tokens.len()].clone();
                        let retry = matches!(op, Op::Retry(_));
                        let active = m.leased.get(&u).is_some_and(|(t, d)| *t == token && *d > now);
                        let r = if retry { f.retry(token, 5).unwrap() } else { f.done(token, 5).unwrap() };
                        prop_assert_eq!(r, active, "done/retry of {} ({})", u, token);
                        if active {
                            m.leased.remove(&u);
                            if !retry { m.done.insert(u.clone()); }
                            let host = String::from_utf8(default_key(u.as_bytes()).to_vec()).unwrap();
                            let d = m.due.entry(host).or_default();
                            *d = (*d).max(now + m.policy.delay_ms);
                        }
                    }
                    Op::Advance(ms) => clock.advance(ms as u64),
                    Op::Delay(d, k) => {
                        let p = Policy { delay_ms: d as u64, per_queue: k as u32 };
                        f.set_policy("", None, p).unwrap();
                        m.policy = p;
                    }
                    Op::Pause(on) => {
                        f.set_paused(on).unwrap();
                        m.paused = on;
                    }
                    Op::Reopen => {
                        f.close().unwrap();
                        f = open(&disk, &clock);
                    }
                    Op::PowerLoss => {
                        // Every call synced what it changed: nothing acknowledged is lost.
                        let image = disk.crash_image(crivello::storage::sim::CrashImage::DropAll);
                        drop(f);
                        disk = image;
                        f = open(&disk, &clock);
                    }
                }
            }
            let st = f.stats().unwrap();
            prop_assert_eq!(st.done as usize, m.done.len());
            // At the end, every URL pushed and not done is served, once, when its lease
            // expired or not.
            clock.advance(10_000);
            f.set_paused(false).unwrap();
            f.set_policy("", None, Policy { delay_ms: 0, per_queue: 1 }).unwrap();
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
            let want: HashSet<String> = m.seen.difference(&m.done).cloned().collect();
            prop_assert_eq!(served, want);
        }
    }

    trait NowForTest {
        fn now_ms_for_test(&self) -> u64;
    }
    impl NowForTest for ManualClock {
        fn now_ms_for_test(&self) -> u64 {
            crivello::queues::Clock::now_ms(self)
        }
    }
}

/// What a frontier workload saw acknowledged before it stopped.
#[derive(Default, Debug)]
struct Acked {
    /// URLs whose push returned Ok.
    pushed: HashSet<String>,
    /// URLs pushed, acknowledged or not.
    tried: HashSet<String>,
    /// Leases returned: URL and deadline.
    leased: HashMap<String, u64>,
    /// URLs whose done returned Ok (true).
    done: HashSet<String>,
    /// URLs given back by a retry (acknowledged or not).
    retried: HashSet<String>,
}

/// A workload of every frontier operation; stops at the first error, as a crashed process.
fn workload(disk: &SimDisk, clock: &Arc<ManualClock>, a: &mut Acked) -> Result<(), Error> {
    let f = Frontier::open_with(Arc::new(disk.clone()), opts().slots(8), clock.clone())?;
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
    push(&f, batch(0, 12), a)?;
    let mut held = Vec::new();
    for round in 0..4 {
        for l in f.lease(3, None, 5_000)? {
            let u = String::from_utf8(l.url.clone()).unwrap();
            a.leased.insert(u.clone(), l.deadline_ms);
            held.push((l.token, u));
        }
        clock.advance(100);
        if let Some((token, u)) = held.pop() {
            if f.done(token, 50)? {
                a.done.insert(u);
            }
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
                },
            )?;
        }
        push(&f, batch(12 + round * 6, 18 + round * 6), a)?;
    }
    f.close()
}

#[test]
fn a_crash_at_any_operation_loses_no_acknowledged_push_lease_or_done() {
    use crivello::storage::sim::CrashImage;
    let start = 5_000_000;
    let clean = SimDisk::new();
    let mut a = Acked::default();
    workload(&clean, &Arc::new(ManualClock::new(start)), &mut a).expect("a clean run");
    let total = clean.ops();
    assert!(total > 100, "{total} operations");
    let mut checked = 0;
    for k in 1..=total {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let clock = Arc::new(ManualClock::new(start));
        let mut a = Acked::default();
        let _ = workload(&disk, &clock, &mut a);
        let at_crash = crivello::queues::Clock::now_ms(&*clock);
        for image in [
            CrashImage::KillProcess,
            CrashImage::DropAll,
            CrashImage::KeepDataDropDir,
            CrashImage::ZeroedData,
            CrashImage::Random(k),
        ] {
            let img = disk.crash_image(image);
            let clock = Arc::new(ManualClock::new(at_crash));
            let f = Frontier::open_with(Arc::new(img), opts().slots(8), clock.clone())
                .unwrap_or_else(|e| panic!("op {k}, {image:?}: reopen: {e}"));
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
                        || a.retried.contains(u),
                    "op {k}, {image:?}: acknowledged {u} lost"
                );
            }
            for u in &set {
                assert!(
                    a.tried.contains(u),
                    "op {k}, {image:?}: {u} was never pushed"
                );
                assert!(
                    !a.done.contains(u),
                    "op {k}, {image:?}: {u} served after done"
                );
            }
            f.close().unwrap();
            checked += 1;
        }
    }
    eprintln!("{total} crash points, {checked} images checked");
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
