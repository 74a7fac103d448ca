//! `crivello-bench frontier --lsm`: url-frontier's storage scheme on an LSM store (fjall), the
//! way its RocksDB service keeps a frontier, on the same URLs in the same batches as
//! [`crate::frontier`].
//!
//! Two keyspaces, as the reference service's two column families:
//! - `exists`: `crawl_queue_url` → the URL's scheduling key, empty once it is completed;
//! - `queues`: `crawl_queue_<10-digit epoch seconds>_url` → the URL's info (its URL and key),
//!   so that a prefix scan of `crawl_queue_` lists a queue's URLs by date, then URL.
//!
//! `_` in the crawl and the queue is escaped as `%5F`. A discovered URL is one `get` of its
//! existence key and, if absent, the two inserts; a hand-out (GetURLs) rotates over the queues
//! in insertion order and, in each queue with fewer URLs in flight than one and URLs waiting,
//! takes the first URL of a prefix scan that is due and not held; the leases are kept in
//! memory (the reference's `QueueMetadata`), not on disk; a done URL (a known item, never to
//! be fetched again) is a `get` of its existence key, the removal of its scheduling key and
//! the existence key set empty. Each push batch and each done batch is one write batch; with
//! `--unsynced` they are not synced (as the reference service runs), else each is synced
//! before the call returns, as crivello's calls are. The per-queue counts are kept in memory,
//! as the reference's are.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};

use crate::frontier::{host_of, Figures, FrontierArgs, Urls};
use crate::peers::{dir_size, take_peak_rss};
use crate::record::Result;

/// The crawl every URL is pushed to.
const CRAWL: &str = "DEFAULT";

/// A queue's state in memory: its name's key prefix, its URLs waiting and those in flight.
struct Queue {
    /// `crawl_queue_`, escaped.
    prefix: Vec<u8>,
    waiting: u64,
    /// URL → the instant (ms) its lease ends.
    in_flight: Vec<(Vec<u8>, u64)>,
}

/// Escapes `_` as url-frontier does in its keys.
fn escape(s: &str) -> String {
    s.replace('_', "%5F")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the LSM frontier and prints its figures.
pub fn run(a: &FrontierArgs) -> Result<()> {
    let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(parent)?;
    let db_dir = tmp.path().join("db");
    let db = Database::builder(&db_dir).cache_size(64 << 20).open()?;
    let exists = db.keyspace("exists", KeyspaceCreateOptions::default)?;
    let queues_ks = db.keyspace("queues", KeyspaceCreateOptions::default)?;
    let durability = if a.unsynced {
        None
    } else {
        Some(PersistMode::SyncAll)
    };
    let batch = a.batch.max(1);
    let mut source = Urls::of(a)?;
    let mut queues: Vec<Queue> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut rotation: VecDeque<usize> = VecDeque::new();
    take_peak_rss(None);

    // Discovered URLs, in batches: existence check, then both keys in one write batch.
    let mut pushed = std::time::Duration::ZERO;
    let mut urls: Vec<String> = Vec::with_capacity(batch);
    while source.fill(&mut urls, batch) {
        let start = Instant::now();
        let date = format!("{:010}", now_ms() / 1000);
        let mut w = db.batch().durability(durability);
        let mut fresh: HashSet<&str> = HashSet::new();
        for u in &urls {
            let host = host_of(u);
            let prefix = format!("{CRAWL}_{}_", escape(host));
            let ekey = format!("{prefix}{u}");
            if fresh.contains(u.as_str()) || exists.get(ekey.as_bytes())?.is_some() {
                continue;
            }
            fresh.insert(u);
            let skey = format!("{prefix}{date}_{u}");
            let info = format!("{u}\t{host}");
            w.insert(&exists, ekey.into_bytes(), skey.clone().into_bytes());
            w.insert(&queues_ks, skey.into_bytes(), info.into_bytes());
            let q = *by_name.entry(host.to_owned()).or_insert_with(|| {
                queues.push(Queue {
                    prefix: prefix.clone().into_bytes(),
                    waiting: 0,
                    in_flight: Vec::new(),
                });
                rotation.push_back(queues.len() - 1);
                queues.len() - 1
            });
            queues[q].waiting += 1;
        }
        w.commit()?;
        pushed += start.elapsed();
    }
    let push_peak = take_peak_rss(None);

    // GetURLs of `batch` queues, one URL each, then their done items, until all are done.
    let start = Instant::now();
    let (mut served, mut calls) = (0u64, 0u64);
    loop {
        if a.push_only {
            break;
        }
        let t = now_ms();
        let now_s = format!("{:010}", t / 1000);
        let mut leased: Vec<(usize, Vec<u8>)> = Vec::with_capacity(batch);
        for _ in 0..rotation.len() {
            if leased.len() >= batch {
                break;
            }
            let q = rotation.pop_front().expect("a queue");
            rotation.push_back(q);
            let queue = &mut queues[q];
            queue.in_flight.retain(|(_, until)| *until > t);
            if queue.waiting == 0 || !queue.in_flight.is_empty() {
                continue;
            }
            for kv in queues_ks.prefix(&queue.prefix) {
                let key = kv.key()?;
                let rest = &key[queue.prefix.len()..];
                let (date, url) = (&rest[..10], &rest[11..]);
                if date > now_s.as_bytes() {
                    break;
                }
                if queue.in_flight.iter().any(|(u, _)| u[..] == *url) {
                    continue;
                }
                queue.in_flight.push((url.to_vec(), t + 60_000));
                leased.push((q, url.to_vec()));
                break;
            }
        }
        if leased.is_empty() {
            break;
        }
        let mut w = db.batch().durability(durability);
        for (q, url) in &leased {
            let queue = &mut queues[*q];
            let mut ekey = queue.prefix.clone();
            ekey.extend_from_slice(url);
            let skey = exists
                .get(&ekey)?
                .ok_or("a URL leased has no existence key")?;
            if skey.is_empty() {
                return Err("a URL leased was already done".into());
            }
            w.remove(&queues_ks, skey.to_vec());
            w.insert(&exists, ekey, Vec::<u8>::new());
            let before = queue.in_flight.len();
            queue.in_flight.retain(|(u, _)| u != url);
            if queue.in_flight.len() == before {
                return Err("a URL just leased was not in flight at its done".into());
            }
            queue.waiting -= 1;
        }
        w.commit()?;
        served += leased.len() as u64;
        calls += 1;
    }
    let drained = start.elapsed();
    let lease_peak = take_peak_rss(None);
    db.persist(PersistMode::SyncAll)?;
    let disk = dir_size(&db_dir);
    let distinct = source.distinct();
    let waiting: u64 = queues.iter().map(|q| q.waiting).sum();
    if served + waiting != distinct || (served != distinct && !a.push_only) {
        return Err(
            format!("{distinct} distinct URLs pushed, {served} served, {waiting} waiting").into(),
        );
    }
    let pushes = source.pushes();
    let rate = |n: u64, d: std::time::Duration| n as f64 / d.as_secs_f64();
    println!(
        "LSM frontier (url-frontier's scheme on fjall, {}): {pushes} URLs ({}; {distinct} distinct) over {} queues, batches of {batch}",
        if a.unsynced {
            "batches not synced"
        } else {
            "every batch synced"
        },
        source.name(),
        queues.len()
    );
    println!(
        "  push into queues         {:>8.3} s  {:>12.0} URLs/s",
        pushed.as_secs_f64(),
        rate(pushes, pushed)
    );
    if a.push_only {
        println!("  lease + done             not run (--push-only)");
    } else {
        println!(
            "  lease + done             {:>8.3} s  {:>12.0} URLs/s  ({calls} lease calls, {calls} done calls)",
            drained.as_secs_f64(),
            rate(served, drained)
        );
    }
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "  peak RSS                 {:>8.1} MiB  (push {:.1}, lease + done {:.1}); on disk at the end {:.1} MiB",
        mib(push_peak.max(lease_peak)),
        mib(push_peak),
        mib(lease_peak),
        disk as f64 / (1 << 20) as f64
    );
    Figures {
        peer: "lsm".into(),
        source: source.name().into(),
        pushes,
        distinct,
        queues: queues.len() as u64,
        batch,
        threads: 1,
        push_s: pushed.as_secs_f64(),
        flush_s: 0.0,
        lease_done_s: if a.push_only {
            0.0
        } else {
            drained.as_secs_f64()
        },
        calls,
        peak_rss_kib: push_peak.max(lease_peak),
    }
    .save(a)
}
