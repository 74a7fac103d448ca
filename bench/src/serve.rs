//! `crivello-bench serve`: `crivello serve` measured as a client sees it, over loopback,
//! beside the in-process frontier doing the same work in the same run.
//!
//! URLs `http://h<host>.example/<i>` over `--hosts` hosts. Three phases against a fresh
//! server (every ack durable):
//! 1. PutDiscovered: `--clients` concurrent streams, batches of `--batch` URLs;
//! 2. PutURLs: `--clients` concurrent streams of discovered items, one URL per message;
//! 3. GetURLs of every queue (delay 0, one URL per queue in transit), each round's URLs then
//!    acknowledged done on one PutURLs stream, until every URL was handed out.
//!
//! Then the round trip of StormCrawler's calls: 10,000 more URLs over 1,000 hosts, then 100
//! times GetURLs of 10 queues (its default) and a PutURLs stream marking them done; the
//! median and 99th percentile of each call, from the request to the end of its answer.
//!
//! The in-process run does the same work through the library: `push_new` in batches of
//! `--batch` from `--clients` threads, then `lease_with` and `update` per round.

use crate::peers::take_peak_rss;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::record::Result;

/// The generated url-frontier client.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("urlfrontier");
}

use pb::url_frontier_client::UrlFrontierClient;

/// The arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The `crivello` binary (built with the `serve` feature).
    #[arg(long, default_value = "../target/release/crivello")]
    pub bin: PathBuf,
    /// URLs of each put phase (e.g. 1000000, 1e6 or 10^6).
    #[arg(long, value_parser = crate::parse_count, default_value = "1e6")]
    pub urls: u64,
    /// Hosts they are spread over.
    #[arg(long, value_parser = crate::parse_count, default_value = "1e5")]
    pub hosts: u64,
    /// Concurrent clients (streams, or threads in process).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// URLs per PutDiscovered batch (and per push_new call in process).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// The server's memory budget.
    #[arg(long, default_value = "64M")]
    pub memory: String,
    /// The directory to create the stores under (default: the system's temporary one).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Both frontiers write their Q runs compressed (`serve --compress-queues`,
    /// `Options::compress_queues`).
    #[arg(long)]
    pub compress_queues: bool,
}

fn url(i: u64, hosts: u64) -> String {
    let h = xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()) % hosts;
    format!("http://h{h}.example/{i}")
}

/// A URL as url-frontier's `URLInfo` of the default crawl.
pub fn info(u: String) -> pb::UrlInfo {
    pb::UrlInfo {
        url: u,
        key: String::new(),
        metadata: Default::default(),
        crawl_id: String::new(),
    }
}

/// The server's peak RSS in each phase, in KiB.
#[derive(Debug, Default)]
struct Peaks {
    discovered: u64,
    put: u64,
    /// The first GetURLs, which also moves every new URL into the queues.
    first_get: u64,
    get: u64,
    done: u64,
}

/// Runs the benchmark and prints its figures.
pub fn run(a: &ServeArgs) -> Result<()> {
    let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(parent)?;
    let mut child = Command::new(&a.bin)
        .arg("serve")
        .arg(tmp.path().join("served"))
        .args(["--addr", "127.0.0.1:0", "--quiet", "--memory", &a.memory])
        .args(a.compress_queues.then_some("--compress-queues"))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start {}: {e}", a.bin.display()))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let addr = line
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected first line {line:?}"))?
        .trim()
        .to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut peaks = Peaks::default();
    let served = rt.block_on(remote(a, format!("http://{addr}"), child.id(), &mut peaks));
    let small = match &served {
        Ok(_) => rt.block_on(small_calls(format!("http://{addr}"))),
        Err(_) => Ok(Default::default()),
    };
    let rss = take_peak_rss(Some(child.id()));
    // SAFETY: `kill` with the child's own pid and SIGTERM has no memory-safety requirements.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait()?;
    let served = served?;
    if !status.success() {
        return Err(format!("crivello serve exited with {status}").into());
    }
    let local = in_process(a, &tmp.path().join("local"))?;
    let n = a.urls as f64;
    println!(
        "crivello serve over loopback vs the in-process frontier: {} URLs per phase, {} hosts, {} clients, batches of {}{}",
        a.urls,
        a.hosts,
        a.clients,
        a.batch,
        if a.compress_queues {
            ", Q runs compressed"
        } else {
            ""
        }
    );
    println!("  phase                        served (URLs/s)  in process (URLs/s)  ratio");
    for (name, s, l, count) in [
        ("PutDiscovered / push_new", served[0], local[0], n),
        ("PutURLs (1 URL per message)", served[1], local[1], n),
        ("GetURLs / lease", served[2], local[2], 2.0 * n),
        ("PutURLs known done / update", served[3], local[3], 2.0 * n),
    ] {
        let (rs, rl) = (count / s.as_secs_f64(), count / l.as_secs_f64());
        println!("  {name:<28} {rs:>15.0}  {rl:>19.0}  {:>5.2}", rs / rl);
    }
    let mib = |k: u64| k as f64 / 1024.0;
    let overall = [
        peaks.discovered,
        peaks.put,
        peaks.first_get,
        peaks.get,
        peaks.done,
        rss,
    ];
    println!(
        "  server peak RSS: {:.1} MiB (PutDiscovered {:.1}, PutURLs {:.1}, first GetURLs {:.1}, other GetURLs {:.1}, done {:.1})",
        mib(overall.into_iter().max().unwrap_or(0)),
        mib(peaks.discovered),
        mib(peaks.put),
        mib(peaks.first_get),
        mib(peaks.get),
        mib(peaks.done)
    );
    let small = small?;
    println!(
        "  StormCrawler's calls, round trip (median, 99th percentile): GetURLs of 10 queues {:.2} ms, {:.2} ms; PutURLs of their 10 done {:.2} ms, {:.2} ms",
        small.get.0, small.get.1, small.done.0, small.done.1
    );
    Ok(())
}

/// The URLs handed out, as known items that say they are done.
pub fn done_items(round: Vec<pb::UrlInfo>) -> Vec<pb::UrlItem> {
    round
        .into_iter()
        .map(|u| pb::UrlItem {
            id: String::new(),
            creation_date: 0,
            item: Some(pb::url_item::Item::Known(pb::KnownUrlItem {
                info: Some(u),
                refetchable_from_date: 0,
            })),
        })
        .collect()
}

/// Round trips of small calls, in milliseconds: (median, 99th percentile).
#[derive(Debug, Default)]
struct SmallCalls {
    get: (f64, f64),
    done: (f64, f64),
}

/// The median and the 99th percentile of `ms`.
fn median_p99(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// StormCrawler's calls one at a time: GetURLs of 10 queues of 10 URLs, then their URLs done
/// on a PutURLs stream of their own, 100 times, after 10,000 URLs over 1,000 hosts are put.
async fn small_calls(endpoint: String) -> Result<SmallCalls> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint)?
        .connect()
        .await?;
    let mut client = UrlFrontierClient::new(channel);
    let items: Vec<pb::UrlItem> = (0..10_000u64)
        .map(|i| pb::UrlItem {
            id: String::new(),
            creation_date: 0,
            item: Some(pb::url_item::Item::Discovered(pb::DiscoveredUrlItem {
                info: Some(info(format!("http://s{}.example/{i}", i % 1000))),
            })),
        })
        .collect();
    let mut acks = client
        .put_ur_ls(tokio_stream::iter(items))
        .await?
        .into_inner();
    while acks.message().await?.is_some() {}
    let (mut get, mut done) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        let start = Instant::now();
        let mut s = client
            .get_ur_ls(pb::GetParams {
                max_urls_per_queue: 10,
                max_queues: 10,
                key: String::new(),
                delay_requestable: 600,
                item: None,
            })
            .await?
            .into_inner();
        let mut round = Vec::new();
        while let Some(u) = s.message().await? {
            round.push(u);
        }
        get.push(start.elapsed().as_secs_f64() * 1e3);
        if round.is_empty() {
            return Err("StormCrawler's GetURLs found nothing to hand out".into());
        }
        let start = Instant::now();
        let items = done_items(round);
        let mut acks = client
            .put_ur_ls(tokio_stream::iter(items))
            .await?
            .into_inner();
        while acks.message().await?.is_some() {}
        done.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(SmallCalls {
        get: median_p99(get),
        done: median_p99(done),
    })
}

/// The four phases against the server; their durations.
async fn remote(
    a: &ServeArgs,
    endpoint: String,
    pid: u32,
    peaks: &mut Peaks,
) -> Result<[Duration; 4]> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint)?
        .connect()
        .await?;
    let client = UrlFrontierClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let (n, hosts, clients, batch) = (a.urls, a.hosts, a.clients.max(1) as u64, a.batch.max(1));

    // 1. PutDiscovered.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mine: Vec<u64> = (0..n).filter(|i| i % clients == c).collect();
            let batches: Vec<pb::DiscoveredBatch> = mine
                .chunks(batch)
                .enumerate()
                .map(|(k, ch)| pb::DiscoveredBatch {
                    id: k.to_string(),
                    items: ch.iter().map(|&i| info(url(i, hosts))).collect(),
                })
                .collect();
            let want = mine.len();
            let mut acks = client
                .put_discovered(tokio_stream::iter(batches))
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let mut ok = 0;
            while let Some(ack) = acks.message().await.map_err(|e| e.to_string())? {
                ok += ack.statuses.iter().filter(|&&s| s == 0).count();
            }
            if ok != want {
                return Err(format!("{ok} of {want} discovered URLs acked OK"));
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    let discovered = start.elapsed();
    peaks.discovered = take_peak_rss(Some(pid));

    // 2. PutURLs, one URL per message.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            let items: Vec<pb::UrlItem> = (n..2 * n)
                .filter(|i| i % clients == c)
                .map(|i| pb::UrlItem {
                    id: String::new(),
                    creation_date: 0,
                    item: Some(pb::url_item::Item::Discovered(pb::DiscoveredUrlItem {
                        info: Some(info(url(i, hosts))),
                    })),
                })
                .collect();
            let want = items.len();
            let mut acks = client
                .put_ur_ls(tokio_stream::iter(items))
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let mut ok = 0;
            while let Some(ack) = acks.message().await.map_err(|e| e.to_string())? {
                ok += usize::from(ack.status == 0);
            }
            if ok != want {
                return Err(format!("{ok} of {want} items acked OK"));
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    let put = start.elapsed();
    peaks.put = take_peak_rss(Some(pid));

    // 3. GetURLs of every queue, then the round's URLs done.
    let mut client = client.clone();
    client
        .set_delay(pb::QueueDelayParams {
            key: String::new(),
            delay_requestable: 0,
            crawl_id: String::new(),
            local: false,
        })
        .await?;
    let (mut get, mut done, mut handed) = (Duration::ZERO, Duration::ZERO, 0u64);
    loop {
        let start = Instant::now();
        let mut s = client
            .get_ur_ls(pb::GetParams {
                max_urls_per_queue: 0,
                max_queues: 0,
                key: String::new(),
                delay_requestable: 600,
                item: None,
            })
            .await?
            .into_inner();
        let mut round = Vec::new();
        while let Some(u) = s.message().await? {
            round.push(u);
        }
        get += start.elapsed();
        let peak = take_peak_rss(Some(pid));
        if handed == 0 {
            peaks.first_get = peak;
        } else {
            peaks.get = peaks.get.max(peak);
        }
        if round.is_empty() {
            break;
        }
        handed += round.len() as u64;
        let start = Instant::now();
        let items = done_items(round);
        let mut acks = client
            .put_ur_ls(tokio_stream::iter(items))
            .await?
            .into_inner();
        while let Some(ack) = acks.message().await? {
            if ack.status != 0 {
                return Err(format!("a done update acked {}", ack.status).into());
            }
        }
        done += start.elapsed();
        peaks.done = peaks.done.max(take_peak_rss(Some(pid)));
    }
    if handed != 2 * n {
        return Err(format!("{handed} URLs handed out of {}", 2 * n).into());
    }
    Ok([discovered, put, get, done])
}

/// The same work through the library, in process.
fn in_process(a: &ServeArgs, dir: &std::path::Path) -> Result<[Duration; 4]> {
    use crivello::{Discovered, Frontier, Known, LeaseRequest, Options, Policy};
    let memory = crivello_memory(&a.memory)?;
    let f = Arc::new(Frontier::open(
        dir,
        Options::new()
            .memory(memory)
            .compress_queues(a.compress_queues),
    )?);
    f.set_policy("", None, Policy::default())?;
    let (n, hosts, clients, batch) = (a.urls, a.hosts, a.clients.max(1) as u64, a.batch.max(1));
    let phase = |from: u64, per: usize| -> Result<Duration> {
        let start = Instant::now();
        let threads: Vec<_> = (0..clients)
            .map(|c| {
                let f = f.clone();
                std::thread::spawn(move || -> crivello::Result<()> {
                    let mine: Vec<String> = (from..from + n)
                        .filter(|i| i % clients == c)
                        .map(|i| url(i, hosts))
                        .collect();
                    for ch in mine.chunks(per) {
                        let items: Vec<Discovered<'_>> =
                            ch.iter().map(|u| Discovered::url(u.as_bytes())).collect();
                        f.push_new("", &items)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            t.join().map_err(|_| "a pushing thread panicked")??;
        }
        Ok(start.elapsed())
    };
    let discovered = phase(0, batch)?;
    // In process, the natural call is a batch either way.
    let put = phase(n, batch)?;
    let (mut get, mut done) = (Duration::ZERO, Duration::ZERO);
    loop {
        let start = Instant::now();
        let round = f.lease_with(&LeaseRequest {
            ttl_ms: 600_000,
            ..LeaseRequest::default()
        })?;
        get += start.elapsed();
        if round.is_empty() {
            break;
        }
        let start = Instant::now();
        let items: Vec<Known<'_>> = round
            .iter()
            .map(|l| Known {
                url: &l.url,
                key: None,
                metadata: &l.metadata,
                refetch_ms: 0,
            })
            .collect();
        f.update("", &items)?;
        done += start.elapsed();
    }
    Ok([discovered, put, get, done])
}

/// A memory size as `crivello --memory` reads it (K, M, G: powers of 1024).
fn crivello_memory(s: &str) -> Result<usize> {
    let s = s.trim().to_ascii_uppercase();
    let (num, mul) = match s.strip_suffix('G') {
        Some(n) => (n, 1 << 30),
        None => match s.strip_suffix('M') {
            Some(n) => (n, 1 << 20),
            None => match s.strip_suffix('K') {
                Some(n) => (n, 1 << 10),
                None => (s.as_str(), 1),
            },
        },
    };
    Ok(num
        .parse::<usize>()
        .map_err(|e| format!("--memory {s}: {e}"))?
        * mul)
}
