//! Real `kill -9` of a crawling process: a child (this test binary, re-executed) pushes URLs
//! into a frontier on the real file system, leases them for a short while, ends some as done
//! and gives some back, and reports on stdout each acknowledgement after the call returned
//! Ok. The parent kills it with SIGKILL at a random instant, reopens the directory, and
//! checks: the reopen succeeds; no URL acknowledged done is handed out again; no URL whose
//! acknowledged lease has not expired is handed out. At the end every URL acknowledged pushed
//! and not done comes out, once.
//!
//! `CRIVELLO_KILL_CYCLES` sets the number of cycles (default 40).

#![cfg(unix)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crivello::queues::{Clock, SystemClock};
use crivello::storage::sim::Rng;
use crivello::{Discovered, Frontier, Options};

const ENV_DIR: &str = "CRIVELLO_FKILL_DIR";
const ENV_CYCLE: &str = "CRIVELLO_FKILL_CYCLE";
/// A lease's length in the child.
const TTL: u64 = 300;

fn opts() -> Options {
    Options::new()
        .slots(256)
        .seed(5)
        .frame_bytes(4096)
        .queue_runs(3)
        .journal_bytes(16 << 10)
}

fn url(i: u64) -> String {
    format!("http://h{}.kill.test/{i}", i % 37)
}

/// The child's crawl: rounds of a push of 20 new URLs, a lease (of more queues than there
/// are hosts), and the end of each lease
/// (done, or now and then a retry), printing `@@ T a b` before and `@@ P a b` after pushing
/// URLs a..b, `@@ L url deadline` for each lease, `@@ D url` after a done, `@@ r url` before
/// and `@@ R url` after a retry.
fn child(dir: &Path, cycle: u64, out: &mut impl Write) {
    let f = Frontier::open(dir, opts()).expect("open");
    let mut rng = Rng::new(cycle + 1);
    let mut next = cycle * 1_000_000;
    for _ in 0..10_000 {
        let (a, b) = (next, next + 20);
        next = b;
        writeln!(out, "@@ T {a} {b}").unwrap();
        out.flush().unwrap();
        let us: Vec<String> = (a..b).map(url).collect();
        let items: Vec<Discovered<'_>> = us.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).expect("push");
        writeln!(out, "@@ P {a} {b}").unwrap();
        // More queues asked for than there are hosts: each hand-out serves fewer than it
        // asks, so it begins a flush of the sieve on the sieve's thread while the pushes
        // since the last one wait in S (at most one a second): kills land in those too.
        let leased = f.lease(40, None, TTL).expect("lease");
        for l in &leased {
            writeln!(
                out,
                "@@ L {} {}",
                String::from_utf8_lossy(&l.url),
                l.deadline_ms
            )
            .unwrap();
        }
        out.flush().unwrap();
        for l in leased {
            if rng.below(4) == 0 {
                // Said before: a retry may be durable without its acknowledgement.
                writeln!(out, "@@ r {}", String::from_utf8_lossy(&l.url)).unwrap();
                out.flush().unwrap();
                f.retry(l.token, 1).expect("retry");
                writeln!(out, "@@ R {}", String::from_utf8_lossy(&l.url)).unwrap();
            } else if f.done(l.token, 1).expect("done") {
                writeln!(out, "@@ D {}", String::from_utf8_lossy(&l.url)).unwrap();
            }
            out.flush().unwrap();
        }
    }
    f.close().expect("close");
}

/// What the children acknowledged.
#[derive(Default)]
struct Acked {
    tried: HashSet<String>,
    pushed: HashSet<String>,
    done: HashSet<String>,
    /// The latest acknowledged lease of each URL, and its deadline.
    leased: HashMap<String, u64>,
}

/// Reopens after a kill: nothing done or still leased is handed out. The URLs this check
/// leases are given back at once.
fn verify(dir: &Path, a: &Acked) -> Result<(), String> {
    let f = Frontier::open(dir, opts()).map_err(|e| format!("reopen: {e}"))?;
    let now = SystemClock.now_ms();
    let got = f
        .lease(10_000, Some(1_000), 3_600_000)
        .map_err(|e| format!("lease: {e}"))?;
    for l in &got {
        let u = String::from_utf8_lossy(&l.url).into_owned();
        if a.done.contains(&u) {
            return Err(format!("{u} handed out after its done was acknowledged"));
        }
        if let Some(&deadline) = a.leased.get(&u) {
            if deadline > now + 50 {
                return Err(format!(
                    "{u} handed out {} ms before its deadline",
                    deadline - now
                ));
            }
        }
        if !a.tried.contains(&u) {
            return Err(format!("{u} was never pushed"));
        }
        f.retry(l.token, 0).map_err(|e| e.to_string())?;
    }
    f.close().map_err(|e| e.to_string())
}

#[test]
fn kill_9_of_a_crawling_process_loses_no_acknowledged_lease_done_or_push() {
    if let Ok(dir) = std::env::var(ENV_DIR) {
        let cycle = std::env::var(ENV_CYCLE).unwrap().parse().unwrap();
        child(Path::new(&dir), cycle, &mut std::io::stdout().lock());
        return;
    }
    let cycles: u64 = std::env::var("CRIVELLO_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("frontier");
    let exe = std::env::current_exe().unwrap();
    let errors = tmp.path().join("child-stderr.txt");
    let mut rng = Rng::new(2026);
    let mut a = Acked::default();
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "kill_9_of_a_crawling_process_loses_no_acknowledged_lease_done_or_push",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_DIR, &dir)
            .env(ENV_CYCLE, cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&errors).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Some((_, report)) = line.rsplit_once("@@ ") else {
                    continue;
                };
                if tx.send(report.to_string()).is_err() {
                    break;
                }
            }
        });
        std::thread::sleep(Duration::from_micros(2_000 + rng.below(80_000)));
        let _ = child.kill();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        use std::os::unix::process::ExitStatusExt;
        if status.signal() != Some(9) && status.code() != Some(0) {
            panic!(
                "cycle {cycle}: the child failed ({status}):\n{}",
                std::fs::read_to_string(&errors).unwrap_or_default()
            );
        }
        for l in rx.try_iter() {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "T" | "P" => {
                    let (x, y): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
                    for i in x..y {
                        a.tried.insert(url(i));
                        if f[0] == "P" {
                            a.pushed.insert(url(i));
                        }
                    }
                }
                "L" => {
                    a.leased.insert(f[1].to_owned(), f[2].parse().unwrap());
                }
                "D" => {
                    a.done.insert(f[1].to_owned());
                    a.leased.remove(f[1]);
                }
                "r" | "R" => {
                    // Back in its queue once the retry is durable, acknowledged or not.
                    a.leased.remove(f[1]);
                }
                _ => {}
            }
        }
        verify(&dir, &a).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
    }
    // Every URL acknowledged pushed and not done comes out, once.
    std::thread::sleep(Duration::from_millis(TTL + 50));
    let f = Frontier::open(&dir, opts()).unwrap();
    let mut served = HashSet::new();
    loop {
        let got = f.lease(10_000, Some(1_000), 3_600_000).unwrap();
        if got.is_empty() {
            break;
        }
        for l in got {
            let u = String::from_utf8_lossy(&l.url).into_owned();
            assert!(served.insert(u.clone()), "{u} served twice");
            assert!(!a.done.contains(&u), "{u} served after done");
            assert!(f.done(l.token, 0).unwrap());
        }
    }
    for u in &a.pushed {
        assert!(
            served.contains(u) || a.done.contains(u) || a.leased.contains_key(u),
            "{u} lost"
        );
    }
    eprintln!(
        "frontier kill -9: {cycles} cycles, {} URLs pushed, {} done before, {} served at the end",
        a.pushed.len(),
        a.done.len(),
        served.len()
    );
}
