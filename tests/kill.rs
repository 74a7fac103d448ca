//! Real `kill -9`: a child process (this test binary, re-executed) pushes a seeded stream into a
//! sieve on the real file system with group commits, flushes and pops, and reports on stdout
//! each acknowledgement after the call returned Ok. The parent kills it with SIGKILL at a random
//! instant, reopens the directory, and checks: the reopen succeeds, and `check` then finds the
//! store sound; every acknowledged push is
//! there; what was lost is a suffix of unacknowledged pushes; the frontier is exactly the
//! distinct URLs in first-appearance order; the committed frontier and the cursor never go
//! back. While a child holds the directory, a second opener is refused with `Locked`.
//!
//! `CRIVELLO_KILL_CYCLES` sets the number of cycles (default 200; the long tier runs 10^4).

#![cfg(unix)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crivello::storage::sim::Rng;
use crivello::{Error, Options, Sieve};

const ENV_DIR: &str = "CRIVELLO_KILL_DIR";
const ENV_START: &str = "CRIVELLO_KILL_START";
const ENV_SEED: &str = "CRIVELLO_KILL_SEED";
const SLOTS: usize = 1500;
/// A child stops pushing here if it was not killed before (then it closes cleanly).
const PUSHES_PER_CHILD: u64 = 400_000;

/// The key of push `i` of the stream: about half of the pushes repeat an earlier key.
fn key(i: u64) -> u64 {
    let mut r = Rng::new(i ^ 0x5eed_0000_0000);
    r.next_u64() % (i / 2 + 16)
}

fn url(key: u64) -> Vec<u8> {
    format!("http://host{}.example/dir/{key}.html", key % 251).into_bytes()
}

fn opts(lazy: bool) -> Options {
    // A small cache of recent signatures: some repeats are dropped at push, some are not.
    // Frames of 4 KiB: A's thread writes most of them, and a kill finds some not yet written.
    let o = Options::new()
        .slots(SLOTS)
        .seed(17)
        .recent_cache(1 << 10)
        .frame_bytes(4096);
    if lazy {
        o.frontier_low(0)
    } else {
        o
    }
}

/// The child's workload: push from `start` with random group commits, flushes and pops,
/// printing `@@ S n` (pushes before n acknowledged), `@@ F n emitted`, `@@ C consumed` after
/// each call returned Ok. Returns at `limit` pushes, after a clean close.
fn workload(dir: &Path, start: u64, seed: u64, limit: u64, out: &mut impl Write) {
    let mut rng = Rng::new(seed);
    let mut sieve = Sieve::open(dir, opts(seed.is_multiple_of(2))).expect("open");
    writeln!(out, "@@ O").unwrap();
    out.flush().unwrap();
    let mut next_sync = start + 1 + rng.below(300);
    let mut consumed = sieve.stats().expect("stats").consumed;
    for i in start..start + limit {
        sieve.push(&url(key(i))).expect("push");
        if i + 1 == next_sync {
            match rng.below(20) {
                0 => {
                    sieve.flush().expect("flush");
                    let emitted = sieve.stats().expect("stats").emitted;
                    writeln!(out, "@@ F {} {emitted}", i + 1).unwrap();
                }
                1..=3 => {
                    sieve.sync().expect("sync");
                    writeln!(out, "@@ S {}", i + 1).unwrap();
                    let n = sieve
                        .frontier_read(1 + rng.below(200) as usize, usize::MAX, |_| Ok(()))
                        .expect("read");
                    sieve.frontier_commit().expect("commit");
                    consumed += n as u64;
                    writeln!(out, "@@ C {consumed}").unwrap();
                }
                _ => {
                    sieve.sync().expect("sync");
                    writeln!(out, "@@ S {}", i + 1).unwrap();
                }
            }
            out.flush().unwrap();
            next_sync = i + 1 + 1 + rng.below(300);
        }
    }
    sieve.close().expect("close");
    writeln!(out, "@@ S {}", start + limit).unwrap();
    out.flush().unwrap();
}

/// The reference: the keys of the distinct URLs in first-appearance order, and the stream
/// index of each one's first appearance.
#[derive(Default)]
struct Model {
    seen: HashSet<u64>,
    emitted: Vec<u64>,
    first_at: Vec<u64>,
    generated: u64,
}

impl Model {
    /// Extends the model until it holds more than `n` distinct URLs.
    fn extend_past(&mut self, n: usize) {
        while self.emitted.len() <= n {
            let k = key(self.generated);
            if self.seen.insert(k) {
                self.emitted.push(k);
                self.first_at.push(self.generated);
            }
            self.generated += 1;
        }
    }
}

/// What the parent learnt of the store so far.
struct State {
    /// Pushes known to be in the store (the stream prefix it holds).
    pushes: u64,
    /// Frontier URLs committed as consumed.
    consumed: u64,
    /// URLs known to be in F (committed).
    emitted: u64,
}

/// Whether the directory shows an interrupted flush: a temp file, or more Z segments or runs
/// than a committed state leaves.
fn interrupted_flush(dir: &Path) -> bool {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.iter().any(|n| n.ends_with(".tmp"))
        || names.iter().filter(|n| n.starts_with("z-")).count() > 1
}

/// Reopens the directory after a kill and checks it; returns the new state.
fn verify(dir: &Path, st: &State, acked: u64, model: &mut Model) -> Result<State, String> {
    // What recovery leaves is sound: a torn tail it dropped is not reported as damage.
    let recovered =
        Sieve::open(dir, opts(false)).map_err(|e| format!("reopen after kill -9: {e}"))?;
    drop(recovered);
    let report = crivello::check(dir).map_err(|e| format!("check after recovery: {e}"))?;
    if !report.is_sound() {
        return Err(format!("check after recovery: {report:?}"));
    }
    let mut sieve = Sieve::open(dir, opts(false)).map_err(|e| format!("second reopen: {e}"))?;
    let s = sieve.stats().map_err(|e| e.to_string())?;
    if s.emitted < st.emitted {
        return Err(format!("F went back: {} < {}", s.emitted, st.emitted));
    }
    if s.consumed < st.consumed {
        return Err(format!(
            "the cursor went back: {} < {}",
            s.consumed, st.consumed
        ));
    }
    sieve.flush().map_err(|e| format!("flush: {e}"))?;
    let consumed = s.consumed;
    let mut rest: Vec<Vec<u8>> = Vec::new();
    loop {
        let n = sieve
            .frontier_read(10_000, usize::MAX, |u| {
                rest.push(u.to_vec());
                Ok(())
            })
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
    }
    let total = consumed as usize + rest.len();
    model.extend_past(total);
    for (j, u) in rest.iter().enumerate() {
        let want = url(model.emitted[consumed as usize + j]);
        if *u != want {
            return Err(format!(
                "frontier URL {} is {:?}, the model says {:?}",
                consumed as usize + j,
                String::from_utf8_lossy(u),
                String::from_utf8_lossy(&want)
            ));
        }
    }
    // The store holds a prefix of the stream with exactly `total` distinct URLs: its length
    // is between the first appearance of URL total-1 (exclusive) and of URL total.
    let low = if total == 0 {
        0
    } else {
        model.first_at[total - 1] + 1
    };
    let high = model.first_at[total];
    if high < acked {
        return Err(format!(
            "acknowledged pushes lost: the store holds at most {high} pushes, {acked} were acknowledged"
        ));
    }
    sieve.frontier_commit().map_err(|e| e.to_string())?;
    sieve.close().map_err(|e| e.to_string())?;
    Ok(State {
        pushes: low.max(acked),
        consumed: total as u64,
        emitted: total as u64,
    })
}

#[test]
fn kill_9_at_random_instants_loses_nothing_acknowledged() {
    if let Ok(dir) = std::env::var(ENV_DIR) {
        // The child: run the workload until killed.
        let start = std::env::var(ENV_START).unwrap().parse().unwrap();
        let seed = std::env::var(ENV_SEED).unwrap().parse().unwrap();
        workload(
            Path::new(&dir),
            start,
            seed,
            PUSHES_PER_CHILD,
            &mut std::io::stdout().lock(),
        );
        return;
    }
    let cycles: u64 = std::env::var("CRIVELLO_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sieve");
    let exe = std::env::current_exe().unwrap();
    let errors = tmp.path().join("child-stderr.txt");
    let mut rng = Rng::new(2026);
    let mut model = Model::default();
    let mut st = State {
        pushes: 0,
        consumed: 0,
        emitted: 0,
    };
    let (mut inside_flush, mut refused, mut acked_total, mut finished) = (0, 0, 0u64, 0);
    let began = Instant::now();
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "kill_9_at_random_instants_loses_nothing_acknowledged",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_DIR, &dir)
            .env(ENV_START, st.pushes.to_string())
            .env(ENV_SEED, (cycle * 7919 + 1).to_string())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&errors).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness may print on the same line: keep what follows the marker.
                let Some((_, report)) = line.rsplit_once("@@ ") else {
                    continue;
                };
                if tx.send(report.to_string()).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        if cycle % 10 == 0 {
            // Wait until the child holds the lock, then try a second open.
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(l) if l == "O" => {
                        lines.push(l);
                        match Sieve::open(&dir, opts(false)) {
                            Err(Error::Locked { .. }) => refused += 1,
                            Err(e) => panic!("cycle {cycle}: second opener: {e}"),
                            Ok(_) => panic!("cycle {cycle}: a second opener got the lock"),
                        }
                        break;
                    }
                    Ok(l) => lines.push(l),
                    Err(_) => {}
                }
            }
        }
        std::thread::sleep(Duration::from_micros(1000 + rng.below(60_000)));
        let _ = child.kill();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(0), _) => finished += 1,
            (None, Some(9)) => {}
            _ => panic!(
                "cycle {cycle}: the child failed ({status}):\n{}",
                std::fs::read_to_string(&errors).unwrap_or_default()
            ),
        }
        let mut acked = st.pushes;
        let mut reported_consumed = st.consumed;
        let mut reported_emitted = st.emitted;
        for l in &lines {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "S" => acked = acked.max(f[1].parse().unwrap()),
                "F" => {
                    acked = acked.max(f[1].parse().unwrap());
                    reported_emitted = reported_emitted.max(f[2].parse().unwrap());
                }
                "C" => reported_consumed = reported_consumed.max(f[1].parse().unwrap()),
                _ => {}
            }
        }
        if interrupted_flush(&dir) {
            inside_flush += 1;
        }
        acked_total += acked - st.pushes;
        let seen = State {
            pushes: st.pushes,
            consumed: reported_consumed,
            emitted: reported_emitted,
        };
        st =
            verify(&dir, &seen, acked, &mut model).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
    }
    eprintln!(
        "kill -9: {cycles} cycles in {:.1} s, {inside_flush} with a flush interrupted on disk, \
         {finished} children finished before the kill, {refused} second openers refused, \
         {acked_total} acknowledged pushes, {} distinct URLs",
        began.elapsed().as_secs_f64(),
        st.emitted
    );
    assert!(refused >= cycles / 10);
    assert!(inside_flush > 0, "no kill landed inside a flush");
}
