//! `crivello-bench frontier`: the frontier's push, lease and done throughput on a real
//! directory, every call durable (each push batch, lease batch and done batch is one fsync'd
//! journal commit).
//!
//! URLs `http://h<host>.example/<i>` over `--hosts` hosts (the host of URL `i` is a seeded
//! hash of `i`), or the seeded synthetic crawl stream (`--stream SEED`: Zipf hosts, about 80 %
//! repeats), or the lines of a file (`--input FILE`, e.g. a real BFS stream), pushed in
//! batches, flushed into their queues, then leased in batches of up to `--batch` queues (one
//! URL of each: the default policy's one fetcher per host, delay 0) and completed as done in
//! one call per batch, until nothing is left. The push time counts the calls alone, not the
//! making of their URLs.

use std::path::PathBuf;
use std::time::Instant;

use crivello::{Completion, Discovered, Frontier, LeaseRequest, Options, Policy};

use crate::peers::take_peak_rss;
use crate::record::Result;

/// The arguments of `frontier`.
#[derive(Debug, clap::Args)]
pub struct FrontierArgs {
    /// URLs to push (e.g. 1000000, 1e6 or 10^6).
    #[arg(long, value_parser = crate::parse_count, default_value = "1e6")]
    pub urls: u64,
    /// Hosts they are spread over.
    #[arg(long, value_parser = crate::parse_count, default_value = "1e5")]
    pub hosts: u64,
    /// Queues per lease call, and URLs per push and per done call.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// The directory to create the frontier under (default: the system's temporary one).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Push with `push_new`, which says of each URL whether it was new (every one is: the
    /// run checks it), instead of `push`.
    #[arg(long)]
    pub push_new: bool,
    /// Instead of leasing: leave the frontier as a crash leaves it (a child process builds it
    /// and exits without closing it), then time its open and its first hand-out.
    #[arg(long)]
    pub reopen: bool,
    /// Builds the frontier in this directory and exits without closing it (what `--reopen`
    /// runs in a child process).
    #[arg(long, hide = true)]
    pub crash_in: Option<PathBuf>,
    /// Instead of crivello: the in-memory frontier a crawler's author writes by hand (a hash
    /// set of the URLs seen, a `VecDeque` per host, a `BinaryHeap` of the hosts' due
    /// instants), on the same URLs in the same batches. Nothing durable; memory unbounded.
    #[arg(long)]
    pub in_memory: bool,
    /// Threads that lease and complete at once, sharing the frontier (each in batches of
    /// `--batch` queues).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Instead of crivello: url-frontier's storage scheme on an LSM store (fjall): existence
    /// keys and scheduling keys, leases in memory; each push and done batch synced.
    #[arg(long, conflicts_with = "in_memory")]
    pub lsm: bool,
    /// With `--lsm`: the write batches are not synced (as url-frontier's service runs).
    #[arg(long, requires = "lsm")]
    pub unsynced: bool,
    /// With `--lsm`: the pushes only, no lease + done (its hand-outs of the synthetic
    /// stream's 2·10^6 URLs at 10^7 pushes would take a quarter of an hour).
    #[arg(long, requires = "lsm")]
    pub push_only: bool,
    /// Instead of pushing everything then leasing: a crawler's loop, each round a push of
    /// `--batch` new URLs, a lease of up to `--batch` queues and the done of what it gave,
    /// then the rest drained; prints the longest call of each kind (moves and compactions
    /// come inside the calls).
    #[arg(long, conflicts_with_all = ["in_memory", "lsm", "reopen"])]
    pub interleaved: bool,
    /// Lease and complete as a Rust crawler can: `lease_batch` (the URLs of a call in one
    /// buffer) and `complete` by lease token, instead of `lease` (a `Leased` value per URL)
    /// and `complete_urls` (each lease found again by its URL), what the command line and
    /// the service do.
    #[arg(long, conflicts_with_all = ["in_memory", "lsm", "reopen"])]
    pub tokens: bool,
    /// Write the Q runs compressed (`Options::compress_queues`, `--compress-queues`).
    #[arg(long, conflicts_with_all = ["in_memory", "lsm"])]
    pub compress_queues: bool,
    /// With `--reopen`: the building process also leases and completes this many URLs (in
    /// calls of `--batch` queues) before it exits, so that the journal the open replays holds
    /// hand-outs and ends of leases, not only moves.
    #[arg(long, default_value_t = 0, requires = "reopen")]
    pub served: u64,
    /// Pushes `--urls` URLs of the synthetic crawl stream of this seed (`gen`'s: Zipf hosts,
    /// about 80 % repeats) instead of `--hosts` hosts.
    #[arg(long, conflicts_with_all = ["input", "reopen", "interleaved"])]
    pub stream: Option<u64>,
    /// Pushes the lines of this file instead (every line, `--urls` ignored; a name ending in
    /// `.xz` is read through `xz -dc`), e.g. a BFS stream of a real web graph.
    #[arg(long, conflicts_with_all = ["reopen", "interleaved"])]
    pub input: Option<PathBuf>,
    /// Also appends the run's figures to this file as one JSON line (`frontier-table` reads
    /// them).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The URLs a run pushes, batch by batch.
pub(crate) struct Urls {
    from: Origin,
    name: String,
    pushes: u64,
}

/// Where the URLs come from.
enum Origin {
    /// `http://h<host>.example/<i>` for `i` below `n`.
    Hosts { next: u64, n: u64, hosts: u64 },
    /// The synthetic crawl stream.
    Stream(crate::stream::Feed),
    /// A file's lines, read whole, and how many of them are distinct.
    Lines {
        text: Vec<u8>,
        at: usize,
        distinct: u64,
    },
}

impl Urls {
    /// The URLs `a` asks for.
    pub(crate) fn of(a: &FrontierArgs) -> Result<Urls> {
        if let Some(path) = &a.input {
            return Urls::of_file(path);
        }
        if let Some(seed) = a.stream {
            return Ok(Urls {
                from: Origin::Stream(crate::stream::Feed::new(seed, a.urls)),
                name: format!("synthetic seed {seed}, {} pushes", power_of_ten(a.urls)),
                pushes: a.urls,
            });
        }
        Ok(Urls {
            from: Origin::Hosts {
                next: 0,
                n: a.urls,
                hosts: a.hosts.max(1),
            },
            name: format!("uniform over {} hosts", a.hosts.max(1)),
            pushes: a.urls,
        })
    }

    /// Every line of the file at `path` (`.xz`: read through `xz -dc`).
    pub(crate) fn of_file(path: &std::path::Path) -> Result<Urls> {
        let text = if path.extension().is_some_and(|e| e == "xz") {
            let out = std::process::Command::new("xz")
                .arg("-dc")
                .arg(path)
                .output()?;
            if !out.status.success() {
                return Err(format!("xz -dc {}: {}", path.display(), out.status).into());
            }
            out.stdout
        } else {
            std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?
        };
        let (mut pushes, mut seen) = (0u64, std::collections::HashSet::new());
        for line in crate::stream::lines(&text) {
            if line.is_empty() || std::str::from_utf8(line).is_err() {
                return Err(format!(
                    "{}: line {} is empty or not UTF-8",
                    path.display(),
                    pushes + 1
                )
                .into());
            }
            seen.insert(line);
            pushes += 1;
        }
        let distinct = seen.len() as u64;
        drop(seen);
        let name = path.file_name().map_or_else(String::new, |n| {
            let n = n.to_string_lossy();
            n.split('.').next().unwrap_or(&n).to_owned()
        });
        Ok(Urls {
            from: Origin::Lines {
                text,
                at: 0,
                distinct,
            },
            name,
            pushes,
        })
    }

    /// Fills `out` (cleared first) with the next `batch` URLs at most; false when none is
    /// left.
    pub(crate) fn fill(&mut self, out: &mut Vec<String>, batch: usize) -> bool {
        out.clear();
        match &mut self.from {
            Origin::Hosts { next, n, hosts } => {
                while out.len() < batch && *next < *n {
                    out.push(url_of(*next, *hosts));
                    *next += 1;
                }
            }
            Origin::Stream(feed) => {
                while out.len() < batch {
                    let url = feed.next_url();
                    if url.is_empty() {
                        break;
                    }
                    out.push(String::from_utf8_lossy(url).into_owned());
                }
            }
            Origin::Lines { text, at, .. } => {
                while out.len() < batch && *at < text.len() {
                    let rest = &text[*at..];
                    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                    out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
                    *at += (end + 1).min(rest.len());
                }
            }
        }
        !out.is_empty()
    }

    /// URLs pushed in all.
    pub(crate) fn pushes(&self) -> u64 {
        self.pushes
    }

    /// The distinct URLs among them (of a stream: once all are pushed).
    pub(crate) fn distinct(&self) -> u64 {
        match &self.from {
            Origin::Hosts { n, .. } => *n,
            Origin::Stream(feed) => feed.stream().map_or(0, |s| s.new_urls()),
            Origin::Lines { distinct, .. } => *distinct,
        }
    }

    /// What they are, for the report.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// `n` as `10^k` when it is a power of ten, else its digits.
fn power_of_ten(n: u64) -> String {
    let mut k = 0;
    let mut m = n;
    while m >= 10 && m.is_multiple_of(10) {
        m /= 10;
        k += 1;
    }
    if m == 1 && k > 0 {
        format!("10^{k}")
    } else {
        n.to_string()
    }
}

/// The host of `url` as url-frontier and crivello key it: after `://`, up to `:`, `/`, `?`
/// or `&`.
pub(crate) fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find([':', '/', '?', '&']).unwrap_or(rest.len());
    &rest[..end]
}

/// One run's figures, as `--json` writes them.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub(crate) struct Figures {
    /// `crivello`, `in-memory` or `lsm`.
    pub peer: String,
    /// The URLs' source.
    pub source: String,
    pub pushes: u64,
    pub distinct: u64,
    pub queues: u64,
    pub batch: usize,
    pub threads: usize,
    /// Seconds in the push calls.
    pub push_s: f64,
    /// Seconds of the flush into the queues (crivello; 0 for the others, whose push is their
    /// queues').
    pub flush_s: f64,
    /// Seconds of lease + done.
    pub lease_done_s: f64,
    /// Lease calls that gave URLs.
    pub calls: u64,
    pub peak_rss_kib: u64,
}

impl Figures {
    /// Appends them to `--json`'s file, if given.
    pub(crate) fn save(&self, a: &FrontierArgs) -> Result<()> {
        let Some(path) = &a.json else {
            return Ok(());
        };
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{}", serde_json::to_string(self)?)?;
        Ok(())
    }
}

/// A frontier pushed and flushed into its queues, and the figures of both steps.
struct Built {
    f: Frontier,
    pushed: std::time::Duration,
    flushed: std::time::Duration,
    push_peak: u64,
    flush_peak: u64,
}

/// Pushes the URLs into a new frontier at `dir` and flushes them into their queues.
fn build(a: &FrontierArgs, source: &mut Urls, dir: &std::path::Path) -> Result<Built> {
    let f = Frontier::open(dir, Options::new().compress_queues(a.compress_queues))?;
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 0,
            ..Policy::default()
        },
    )?;
    let batch = a.batch.max(1);

    let mut pushed = std::time::Duration::ZERO;
    let mut urls: Vec<String> = Vec::with_capacity(batch);
    while source.fill(&mut urls, batch) {
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        let start = Instant::now();
        if a.push_new {
            let new = f.push_new("", &items)?;
            if a.input.is_none() && a.stream.is_none() && new.iter().any(|n| !n) {
                return Err("a URL never pushed before was reported known".into());
            }
        } else {
            f.push("", &items)?;
        }
        pushed += start.elapsed();
    }
    let push_peak = take_peak_rss(None);
    let start = Instant::now();
    f.flush()?;
    let flushed = start.elapsed();
    let flush_peak = take_peak_rss(None);
    Ok(Built {
        f,
        pushed,
        flushed,
        push_peak,
        flush_peak,
    })
}

/// Runs the frontier benchmark and prints its figures.
pub fn run(a: &FrontierArgs) -> Result<()> {
    if let Some(dir) = &a.crash_in {
        let built = build(a, &mut Urls::of(a)?, dir)?;
        let mut served = 0;
        while served < a.served {
            let want = (a.served - served).min(a.batch.max(1) as u64) as usize;
            let leased = built.f.lease(want, None, 60_000)?;
            if leased.is_empty() {
                break;
            }
            let done: Vec<(&[u8], u64)> = leased.iter().map(|l| (&l.url[..], 0)).collect();
            built.f.complete_urls("", &done, Completion::Done)?;
            served += leased.len() as u64;
        }
        // No destructor runs: the files are left as a crash of the process leaves them.
        std::process::exit(0);
    }
    if a.in_memory {
        return in_memory(a);
    }
    if a.lsm {
        return crate::frontier_lsm::run(a);
    }
    let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(parent)?;
    if a.reopen {
        return reopen(a, &tmp.path().join("frontier"));
    }
    if a.interleaved {
        return interleaved(a, &tmp.path().join("frontier"));
    }
    let mut source = Urls::of(a)?;
    take_peak_rss(None);
    let Built {
        f,
        pushed,
        flushed,
        push_peak,
        flush_peak,
    } = build(a, &mut source, &tmp.path().join("frontier"))?;
    let batch = a.batch.max(1);
    let first = f.stats()?;
    let (queues, runs_at_first) = (first.queues, first.runs);

    let mark = std::env::var_os("CRIVELLO_BENCH_MARK").is_some();
    if mark {
        // For a profiler that records only the hand-outs: the moment they begin.
        eprintln!("lease + done begins");
    }
    let start = Instant::now();
    let cpu = cpu_seconds();
    let (mut served, mut calls) = (0u64, 0u64);
    // The longest lease call and the longest done call of any thread.
    let longest = std::sync::Mutex::new((std::time::Duration::ZERO, std::time::Duration::ZERO));
    let drain = |f: &Frontier| -> std::result::Result<(u64, u64), String> {
        let (mut served, mut calls) = (0u64, 0u64);
        let (mut lease_max, mut done_max) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        loop {
            let t = Instant::now();
            let (n, ended) = if a.tokens {
                let req = LeaseRequest {
                    max_queues: batch,
                    ttl_ms: 60_000,
                    ..LeaseRequest::default()
                };
                let leased = f.lease_batch(&req).map_err(|e| e.to_string())?;
                lease_max = lease_max.max(t.elapsed());
                let done: Vec<(u64, u64, Completion)> = leased
                    .iter()
                    .map(|l| (l.token, 0, Completion::Done))
                    .collect();
                let t = Instant::now();
                let ended = f.complete(&done).map_err(|e| e.to_string())?;
                done_max = done_max.max(t.elapsed());
                (leased.len(), ended)
            } else {
                let leased = f.lease(batch, None, 60_000).map_err(|e| e.to_string())?;
                lease_max = lease_max.max(t.elapsed());
                let done: Vec<(&[u8], u64)> = leased.iter().map(|l| (&l.url[..], 0)).collect();
                let t = Instant::now();
                let ended = f
                    .complete_urls("", &done, Completion::Done)
                    .map_err(|e| e.to_string())?;
                done_max = done_max.max(t.elapsed());
                (leased.len(), ended)
            };
            if n == 0 {
                let mut l = longest
                    .lock()
                    .map_err(|_| "a thread panicked".to_string())?;
                *l = (l.0.max(lease_max), l.1.max(done_max));
                return Ok((served, calls));
            }
            if ended.iter().any(|e| !e) {
                return Err("a URL just leased was not leased at its done".into());
            }
            if mark && served / 100_000 != (served + n as u64) / 100_000 {
                eprintln!(
                    "{:.3} s {} URLs {} calls",
                    start.elapsed().as_secs_f64(),
                    served + n as u64,
                    calls + 1
                );
            }
            served += n as u64;
            calls += 1;
        }
    };
    let outcomes: Vec<std::result::Result<(u64, u64), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads.max(1))
            .map(|_| s.spawn(|| drain(&f)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    for o in outcomes {
        let (s, c) = o?;
        served += s;
        calls += c;
    }
    let drained = start.elapsed();
    let cpu = cpu_seconds().since(cpu);
    let lease_peak = take_peak_rss(None);
    let stats = f.stats()?;
    f.close()?;
    let distinct = source.distinct();
    if served != distinct || stats.done != distinct {
        return Err(format!(
            "{distinct} distinct URLs pushed, {served} served, {} done",
            stats.done
        )
        .into());
    }
    let rate = |n: u64, d: std::time::Duration| n as f64 / d.as_secs_f64();
    let pushes = source.pushes();
    println!(
        "frontier: {pushes} URLs ({}; {distinct} distinct) over {queues} queues, batches of {batch}, {} thread(s) leasing",
        source.name(),
        a.threads.max(1)
    );
    println!(
        "  {} {:>8.3} s  {:>12.0} URLs/s",
        if a.push_new {
            "push_new (durable)      "
        } else {
            "push (durable batches)  "
        },
        pushed.as_secs_f64(),
        rate(pushes, pushed)
    );
    println!(
        "  flush into queues        {:>8.3} s  {:>12.0} URLs/s  (push + flush {:.0} URLs/s)",
        flushed.as_secs_f64(),
        rate(pushes, flushed),
        rate(pushes, pushed + flushed)
    );
    println!(
        "  lease + done             {:>8.3} s  {:>12.0} URLs/s  ({calls} lease calls, {calls} done calls; {runs_at_first} Q runs at the first, {} at the end)",
        drained.as_secs_f64(),
        rate(served, drained),
        stats.runs
    );
    println!(
        "  lease + done, processor  {:>8.3} s user, {:.3} s system (the process's, every thread)",
        cpu.user, cpu.system
    );
    let (lease_max, done_max) = *longest.lock().map_err(|_| "a thread panicked")?;
    println!(
        "  longest call             {:>8.3} s lease, {:.3} s done",
        lease_max.as_secs_f64(),
        done_max.as_secs_f64()
    );
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "  peak RSS                 {:>8.1} MiB  (push {:.1}, flush {:.1}, lease + done {:.1})",
        mib(push_peak.max(flush_peak).max(lease_peak)),
        mib(push_peak),
        mib(flush_peak),
        mib(lease_peak)
    );
    Figures {
        peer: "crivello".into(),
        source: source.name().into(),
        pushes,
        distinct,
        queues,
        batch,
        threads: a.threads.max(1),
        push_s: pushed.as_secs_f64(),
        flush_s: flushed.as_secs_f64(),
        lease_done_s: drained.as_secs_f64(),
        calls,
        peak_rss_kib: push_peak.max(flush_peak).max(lease_peak),
    }
    .save(a)
}

/// `--reopen`: a child process builds the frontier and exits without closing it; then its
/// open (the replay of the journal since the last checkpoint) and first hand-out are timed.
fn reopen(a: &FrontierArgs, dir: &std::path::Path) -> Result<()> {
    let mut child = std::process::Command::new(std::env::current_exe()?);
    child.args([
        "frontier",
        "--urls",
        &a.urls.to_string(),
        "--hosts",
        &a.hosts.to_string(),
        "--batch",
        &a.batch.to_string(),
    ]);
    if a.push_new {
        child.arg("--push-new");
    }
    child.args(["--reopen", "--served", &a.served.to_string()]);
    let start = Instant::now();
    let status = child.arg("--crash-in").arg(dir).status()?;
    if !status.success() {
        return Err(format!("the building process exited with {status}").into());
    }
    let built = start.elapsed();
    // What the open reads: the checkpoint, and the journal's generations after it.
    let (mut checkpoint, mut journal) = (0u64, 0u64);
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let len = e.metadata()?.len();
        if name == "CHECKPOINT" {
            checkpoint = len;
        } else if name.starts_with("j-") {
            journal += len;
        }
    }
    take_peak_rss(None);
    let start = Instant::now();
    let f = Frontier::open(dir, Options::new())?;
    let opened = start.elapsed();
    let open_peak = take_peak_rss(None);
    let stats = f.stats()?;
    let start = Instant::now();
    let leased = f.lease(a.batch.max(1), None, 60_000)?;
    let first = start.elapsed();
    if stats.waiting != a.urls.saturating_sub(a.served) || leased.is_empty() {
        return Err(format!(
            "{} URLs pushed, {} waiting after the reopen, {} handed out",
            a.urls,
            stats.waiting,
            leased.len()
        )
        .into());
    }
    let rss = take_peak_rss(None);
    f.close()?;
    println!(
        "frontier reopened after a crash: {} URLs waiting in {} queues (built in {:.1} s)",
        stats.waiting,
        stats.queues,
        built.as_secs_f64()
    );
    println!(
        "  read at the open           checkpoint {:.1} MB, journal {:.1} MB ({} URLs served before the crash)",
        checkpoint as f64 / 1e6,
        journal as f64 / 1e6,
        a.served
    );
    println!("  open                     {:>8.3} s", opened.as_secs_f64());
    println!(
        "  first lease of {:<6}    {:>8.3} s",
        a.batch.max(1),
        first.as_secs_f64()
    );
    println!(
        "  peak RSS                 {:>8.1} MiB  (open {:.1}, first lease {:.1})",
        open_peak.max(rss) as f64 / 1024.0,
        open_peak as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    Ok(())
}

/// `--interleaved`: rounds of push, lease and done, as a crawler calls them; with
/// `--threads N`, N crawlers at once on one frontier, each pushing its share of the URLs
/// (every N-th) and leasing what is due, whoever pushed it.
fn interleaved(a: &FrontierArgs, dir: &std::path::Path) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    let f = Frontier::open(dir, Options::new().compress_queues(a.compress_queues))?;
    f.set_policy(
        "",
        None,
        Policy {
            delay_ms: 0,
            ..Policy::default()
        },
    )?;
    let batch = a.batch.max(1);
    let hosts = a.hosts.max(1);
    let threads = a.threads.max(1) as u64;
    let served = AtomicU64::new(0);
    let rounds = AtomicU64::new(0);
    let start = Instant::now();
    // One crawler's loop: its longest push, lease and done calls.
    let crawler = |t: u64| -> std::result::Result<([Duration; 3], Vec<Duration>), String> {
        let mut max = [Duration::ZERO; 3];
        let mut leases: Vec<Duration> = Vec::new();
        let mut i = t;
        let mut urls: Vec<String> = Vec::with_capacity(batch);
        loop {
            urls.clear();
            while urls.len() < batch && i < a.urls {
                urls.push(url_of(i, hosts));
                i += threads;
            }
            if !urls.is_empty() {
                let items: Vec<Discovered<'_>> =
                    urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
                let t = Instant::now();
                f.push("", &items).map_err(|e| e.to_string())?;
                max[0] = max[0].max(t.elapsed());
            }
            let t = Instant::now();
            let leased = f.lease(batch, None, 60_000).map_err(|e| e.to_string())?;
            max[1] = max[1].max(t.elapsed());
            leases.push(t.elapsed());
            if leased.is_empty() && i >= a.urls {
                return Ok((max, leases));
            }
            let done: Vec<(&[u8], u64)> = leased.iter().map(|l| (&l.url[..], 0)).collect();
            let t = Instant::now();
            let ended = f
                .complete_urls("", &done, Completion::Done)
                .map_err(|e| e.to_string())?;
            max[2] = max[2].max(t.elapsed());
            if ended.iter().any(|e| !e) {
                return Err("a URL just leased was not leased at its done".into());
            }
            served.fetch_add(leased.len() as u64, Ordering::Relaxed);
            rounds.fetch_add(1, Ordering::Relaxed);
        }
    };
    type Calls = std::result::Result<([Duration; 3], Vec<Duration>), String>;
    let maxima: Vec<Calls> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let crawler = &crawler;
                s.spawn(move || crawler(t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a crawler panicked".into()))
            })
            .collect()
    });
    let mut max = [Duration::ZERO; 3];
    let mut leases: Vec<Duration> = Vec::new();
    for m in maxima {
        let (m, l) = m?;
        for (k, d) in m.into_iter().enumerate() {
            max[k] = max[k].max(d);
        }
        leases.extend(l);
    }
    leases.sort_unstable();
    let nth = |q: f64| {
        leases
            .get(((leases.len() as f64 * q) as usize).min(leases.len().saturating_sub(1)))
            .map_or(0.0, Duration::as_secs_f64)
    };
    let slow = |over: f64| leases.iter().filter(|d| d.as_secs_f64() > over).count();
    let lease_spread = format!(
        "median {:.4} s, 99th {:.3} s, 99.9th {:.3} s; {} over 0.05 s, {} over 0.1 s",
        nth(0.5),
        nth(0.99),
        nth(0.999),
        slow(0.05),
        slow(0.1)
    );
    let (push_max, lease_max, done_max) = (max[0], max[1], max[2]);
    // What the last crawlers' empty leases left: pushed by one after another's last lease.
    loop {
        let leased = f.lease(batch, None, 60_000)?;
        if leased.is_empty() {
            break;
        }
        let done: Vec<(&[u8], u64)> = leased.iter().map(|l| (&l.url[..], 0)).collect();
        f.complete_urls("", &done, Completion::Done)?;
        served.fetch_add(leased.len() as u64, Ordering::Relaxed);
    }
    let (served, rounds) = (served.into_inner(), rounds.into_inner());
    let took = start.elapsed();
    let peak = take_peak_rss(None);
    let stats = f.stats()?;
    f.close()?;
    if served != a.urls || stats.done != a.urls {
        return Err(format!(
            "{} URLs pushed, {served} served, {} done",
            a.urls, stats.done
        )
        .into());
    }
    println!(
        "frontier, interleaved: {} URLs over {hosts} hosts, rounds of {batch} (push, lease, done), \
         {threads} crawler thread(s)",
        a.urls
    );
    println!(
        "  all                      {:>8.3} s  {:>12.0} URLs/s  ({rounds} rounds)",
        took.as_secs_f64(),
        a.urls as f64 / took.as_secs_f64()
    );
    println!(
        "  longest call             {:.3} s push, {:.3} s lease, {:.3} s done",
        push_max.as_secs_f64(),
        lease_max.as_secs_f64(),
        done_max.as_secs_f64()
    );
    println!("  lease calls              {lease_spread}");
    println!(
        "  peak RSS                 {:>8.1} MiB",
        peak as f64 / 1024.0
    );
    Ok(())
}

/// The URL of number `i` of `hosts` hosts, as [`build`] makes it.
pub(crate) fn url_of(i: u64, hosts: u64) -> String {
    let h = xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()) % hosts;
    format!("http://h{h}.example/{i}")
}

/// A host of the in-memory frontier: its URLs waiting, and whether it is in the heap or has a
/// URL out.
#[derive(Default)]
struct Host {
    urls: std::collections::VecDeque<String>,
    scheduled: bool,
    out: bool,
}

/// `--in-memory`: the hand-written frontier, one URL of a host out at a time, delay 0.
fn in_memory(a: &FrontierArgs) -> Result<()> {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap, HashSet};
    let batch = a.batch.max(1);
    let mut source = Urls::of(a)?;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    let mut seen: HashSet<String> = HashSet::new();
    let mut queues: HashMap<String, Host> = HashMap::new();
    let mut heap: BinaryHeap<Reverse<(u64, String)>> = BinaryHeap::new();
    take_peak_rss(None);

    let mut pushed = std::time::Duration::ZERO;
    let mut urls: Vec<String> = Vec::with_capacity(batch);
    while source.fill(&mut urls, batch) {
        let start = Instant::now();
        for u in &urls {
            if !seen.insert(u.clone()) {
                continue;
            }
            let host = host_of(u).to_owned();
            let q = queues.entry(host.clone()).or_default();
            q.urls.push_back(u.clone());
            if !q.scheduled && !q.out {
                q.scheduled = true;
                heap.push(Reverse((0, host)));
            }
        }
        pushed += start.elapsed();
    }
    let push_peak = take_peak_rss(None);

    let mark = std::env::var_os("CRIVELLO_BENCH_MARK").is_some();
    if mark {
        eprintln!("lease + done begins");
    }
    let start = Instant::now();
    let cpu = cpu_seconds();
    let (mut served, mut calls) = (0u64, 0u64);
    let mut out: HashMap<String, String> = HashMap::new();
    loop {
        // Lease: the due hosts, earliest first, one URL of each.
        let t = now();
        let mut leased: Vec<String> = Vec::with_capacity(batch);
        while leased.len() < batch {
            match heap.peek() {
                Some(Reverse((due, _))) if *due <= t => {}
                _ => break,
            }
            let Reverse((_, host)) = heap.pop().expect("peeked");
            let q = queues.get_mut(&host).expect("a host of the heap");
            q.scheduled = false;
            if let Some(u) = q.urls.pop_front() {
                q.out = true;
                out.insert(u.clone(), host);
                leased.push(u);
            }
        }
        if leased.is_empty() {
            break;
        }
        // Done: each host is due again now (delay 0) if it has more.
        let t = now();
        for u in &leased {
            let host = out
                .remove(u)
                .ok_or("a URL just leased was not leased at its done")?;
            let q = queues.get_mut(&host).expect("its host");
            q.out = false;
            if !q.urls.is_empty() && !q.scheduled {
                q.scheduled = true;
                heap.push(Reverse((t, host)));
            }
        }
        if mark && served / 100_000 != (served + leased.len() as u64) / 100_000 {
            eprintln!(
                "{:.3} s {} URLs {} calls",
                start.elapsed().as_secs_f64(),
                served + leased.len() as u64,
                calls + 1
            );
        }
        served += leased.len() as u64;
        calls += 1;
    }
    let drained = start.elapsed();
    let cpu = cpu_seconds().since(cpu);
    let lease_peak = take_peak_rss(None);
    let distinct = source.distinct();
    if served != distinct || seen.len() as u64 != distinct {
        return Err(format!(
            "{distinct} distinct URLs pushed, {} seen, {served} served",
            seen.len()
        )
        .into());
    }
    let rate = |n: u64, d: std::time::Duration| n as f64 / d.as_secs_f64();
    let pushes = source.pushes();
    println!(
        "in-memory frontier: {pushes} URLs ({}; {distinct} distinct) over {} hosts, batches of {batch}",
        source.name(),
        queues.len()
    );
    println!(
        "  push                     {:>8.3} s  {:>12.0} URLs/s",
        pushed.as_secs_f64(),
        rate(pushes, pushed)
    );
    println!(
        "  lease + done             {:>8.3} s  {:>12.0} URLs/s  ({calls} lease calls, {calls} done calls)",
        drained.as_secs_f64(),
        rate(served, drained)
    );
    println!(
        "  lease + done, processor  {:>8.3} s user, {:.3} s system (the process's, every thread)",
        cpu.user, cpu.system
    );
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "  peak RSS                 {:>8.1} MiB  (push {:.1}, lease + done {:.1})",
        mib(push_peak.max(lease_peak)),
        mib(push_peak),
        mib(lease_peak)
    );
    Figures {
        peer: "in-memory".into(),
        source: source.name().into(),
        pushes,
        distinct,
        queues: queues.len() as u64,
        batch,
        threads: 1,
        push_s: pushed.as_secs_f64(),
        flush_s: 0.0,
        lease_done_s: drained.as_secs_f64(),
        calls,
        peak_rss_kib: push_peak.max(lease_peak),
    }
    .save(a)
}

/// Processor time of the process so far, in seconds.
#[derive(Clone, Copy)]
struct Cpu {
    user: f64,
    system: f64,
}

impl Cpu {
    /// The time between `before` and this.
    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user: self.user - before.user,
            system: self.system - before.system,
        }
    }
}

/// The process's processor time (`getrusage`): on a machine whose speed drifts from one run
/// to the next, beside the wall time.
fn cpu_seconds() -> Cpu {
    // SAFETY: `getrusage` fills the zeroed struct it is given and keeps no pointer to it.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Cpu {
        user: s(u.ru_utime),
        system: s(u.ru_stime),
    }
}
