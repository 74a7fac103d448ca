//! `crivello-bench cluster`: `crivello serve` nodes in a cluster on loopback, as clients see
//! them, in one run:
//!
//! 1. Forwarding cost: two nodes `a` and `b`. PutDiscovered of `--urls` URLs whose hosts `b`
//!    owns, sent to `b` directly, then as many other URLs of `b`'s hosts sent through `a`,
//!    which forwards them; then the direct run again (the machine's drift shows as the
//!    difference of the two direct runs). Every ack is OK: durable on `b`.
//! 2. Aggregate rates with 1, 2 and 4 nodes: `--clients` PutDiscovered streams spread over
//!    the nodes (each URL sent to a node chosen by the client, not by its owner, so that a
//!    share (N-1)/N is forwarded), then GetURLs of every node, each round acknowledged done
//!    to the node that handed it out, until every URL was handed out. On a machine with few
//!    cores this measures the overhead of more nodes, not their scaling.
//! 3. Moves: for each N of `--moves`, N nodes take `--urls` URLs; then every node is
//!    restarted with a list of N + 1 and the new node started: the queues whose owner changed
//!    move. Printed: the queues and URL bytes whose owner changed (against the ideal 1/(N+1)
//!    and hash mod N), the bytes the nodes' stores took in while moving, how long the move
//!    took, and that every URL is still there once.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crivello::assign::{Assignment, Method, DEFAULT_REPLICAS};

use crate::record::Result;
use crate::serve::pb;
use crate::serve::pb::url_frontier_client::UrlFrontierClient;

/// The arguments of `cluster`.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The `crivello` binary (built with the `serve` feature).
    #[arg(long, default_value = "../target/release/crivello")]
    pub bin: PathBuf,
    /// URLs of each phase (e.g. 200000, 2e5).
    #[arg(long, value_parser = crate::parse_count, default_value = "2e5")]
    pub urls: u64,
    /// Hosts they are spread over.
    #[arg(long, value_parser = crate::parse_count, default_value = "1e4")]
    pub hosts: u64,
    /// Concurrent client streams.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// URLs per PutDiscovered batch.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Node counts of the aggregate phase.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub nodes: Vec<usize>,
    /// Node counts N of the move phase (one node joins N).
    #[arg(long, value_delimiter = ',', default_value = "3,7,15")]
    pub moves: Vec<usize>,
    /// The directory to create the stores under (default: the system's temporary one).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Running nodes, stopped (SIGTERM, then waited for) when dropped.
struct Nodes {
    children: Vec<Child>,
    addrs: Vec<String>,
    names: Vec<String>,
}

/// `n` free loopback addresses.
fn free_addrs(n: usize) -> Result<Vec<String>> {
    let socks: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()?;
    Ok(socks
        .iter()
        .map(|s| s.local_addr().map(|a| format!("127.0.0.1:{}", a.port())))
        .collect::<std::io::Result<_>>()?)
}

impl Nodes {
    /// Starts `n` nodes `n0..` under `root`.
    fn start(bin: &Path, root: &Path, n: usize) -> Result<Nodes> {
        let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        Nodes::start_list(bin, root, &names, &free_addrs(n)?)
    }

    /// Starts the nodes `names` at `addrs` under `root` (their stores `root/NAME`).
    fn start_list(bin: &Path, root: &Path, names: &[String], addrs: &[String]) -> Result<Nodes> {
        let (names, addrs) = (names.to_vec(), addrs.to_vec());
        let peers: Vec<String> = names
            .iter()
            .zip(&addrs)
            .map(|(m, a)| format!("{m}={a}"))
            .collect();
        let mut nodes = Nodes {
            children: Vec::new(),
            addrs: addrs.clone(),
            names: names.clone(),
        };
        for name in &names {
            let mut child = Command::new(bin)
                .arg("serve")
                .arg(root.join(name))
                .args(["--quiet", "--node", name, "--peers", &peers.join(",")])
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("start {}: {e}", bin.display()))?;
            let mut line = String::new();
            BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
            nodes.children.push(child);
            if !line.starts_with("listening on ") {
                return Err(format!("unexpected first line {line:?}").into());
            }
        }
        Ok(nodes)
    }

    async fn clients(&self) -> Result<Vec<UrlFrontierClient<tonic::transport::Channel>>> {
        let mut out = Vec::new();
        for a in &self.addrs {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{a}"))?
                .connect()
                .await?;
            out.push(
                UrlFrontierClient::new(channel)
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(64 << 20),
            );
        }
        Ok(out)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            // SAFETY: `kill` with the child's own pid and SIGTERM has no memory-safety
            // requirements.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// CPU seconds (user + system) process `pid` used so far.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no memory-safety requirements.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

impl Nodes {
    /// CPU seconds each node used so far.
    fn cpu(&self) -> Vec<f64> {
        self.children.iter().map(|c| cpu_s(c.id())).collect()
    }
}

fn host_of(i: u64, hosts: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()) % hosts
}

fn url_of(i: u64, hosts: u64) -> String {
    format!("http://h{}.example/{i}", host_of(i, hosts))
}

/// PutDiscovered of `urls` over `clients` streams, stream `c` to `targets[c % len]`;
/// returns the time taken, checking that every URL was acked OK.
async fn put_all(
    targets: &[UrlFrontierClient<tonic::transport::Channel>],
    urls: Vec<String>,
    clients: usize,
    batch: usize,
) -> Result<Duration> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    let clients = clients.max(1);
    let mut parts: Vec<Vec<String>> = vec![Vec::new(); clients];
    for (i, u) in urls.into_iter().enumerate() {
        parts[i % clients].push(u);
    }
    for (c, mine) in parts.into_iter().enumerate() {
        let mut client = targets[c % targets.len()].clone();
        tasks.push(tokio::spawn(async move {
            let want = mine.len();
            let batches: Vec<pb::DiscoveredBatch> = mine
                .chunks(batch.max(1))
                .enumerate()
                .map(|(k, ch)| pb::DiscoveredBatch {
                    id: k.to_string(),
                    items: ch.iter().map(|u| crate::serve::info(u.clone())).collect(),
                })
                .collect();
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
    Ok(start.elapsed())
}

/// GetURLs of every node until `want` URLs were handed out, each round done to its node;
/// the time taken.
async fn drain(
    nodes: &mut [UrlFrontierClient<tonic::transport::Channel>],
    want: u64,
) -> Result<Duration> {
    let start = Instant::now();
    let mut handed = 0u64;
    for c in nodes.iter_mut() {
        c.set_delay(pb::QueueDelayParams {
            key: String::new(),
            delay_requestable: 0,
            crawl_id: String::new(),
            local: true,
        })
        .await?;
    }
    loop {
        let mut any = false;
        for c in nodes.iter_mut() {
            let mut s = c
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
            if round.is_empty() {
                continue;
            }
            any = true;
            handed += round.len() as u64;
            let items = crate::serve::done_items(round);
            let mut acks = c.put_ur_ls(tokio_stream::iter(items)).await?.into_inner();
            while let Some(ack) = acks.message().await? {
                if ack.status != 0 {
                    return Err(format!("a done update acked {}", ack.status).into());
                }
            }
        }
        if !any {
            break;
        }
    }
    if handed != want {
        return Err(format!("{handed} URLs handed out of {want}").into());
    }
    Ok(start.elapsed())
}

/// Runs `cluster`.
pub fn run(a: &ClusterArgs) -> Result<()> {
    let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let n = a.urls;

    // 1. Forwarding cost.
    let tmp = tempfile::tempdir_in(&parent)?;
    let nodes = Nodes::start(&a.bin, tmp.path(), 2)?;
    let assignment = Assignment::new(
        Method::Consistent {
            replicas: DEFAULT_REPLICAS,
        },
        &nodes.names,
    )?;
    let b = assignment
        .names()
        .iter()
        .position(|m| m == "n1")
        .ok_or("no node n1")?;
    // URLs of b's hosts, three disjoint runs of n.
    let mut owned = (0u64..)
        .filter(|&i| assignment.owner(format!("h{}.example", host_of(i, a.hosts)).as_bytes()) == b)
        .map(|i| url_of(i, a.hosts));
    let mut take = || (&mut owned).take(n as usize).collect::<Vec<String>>();
    let (first, through, second) = (take(), take(), take());
    let mut cpu = vec![nodes.cpu()];
    let (direct1, forwarded, direct2) = rt.block_on(async {
        let clients = nodes.clients().await?;
        let d1 = put_all(&clients[1..2], first, a.clients, a.batch).await?;
        cpu.push(nodes.cpu());
        let f = put_all(&clients[0..1], through, a.clients, a.batch).await?;
        cpu.push(nodes.cpu());
        let d2 = put_all(&clients[1..2], second, a.clients, a.batch).await?;
        cpu.push(nodes.cpu());
        Ok::<_, crate::record::Error>((d1, f, d2))
    })?;
    // CPU µs per URL of each node in each run.
    let per_url = |k: usize, node: usize| (cpu[k + 1][node] - cpu[k][node]) * 1e6 / n as f64;
    drop(nodes);
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "crivello serve, two nodes on loopback: PutDiscovered of {n} URLs of node n1's hosts \
         ({} hosts in all), {} clients, batches of {}",
        a.hosts, a.clients, a.batch
    );
    println!(
        "  run                           URLs/s  ratio  CPU µs/URL: n0 (forwards)  n1 (owner)"
    );
    let mean = (rate(direct1) + rate(direct2)) / 2.0;
    for (k, (name, d)) in [
        ("to the owner directly", direct1),
        ("through the other node", forwarded),
        ("to the owner directly again", direct2),
    ]
    .into_iter()
    .enumerate()
    {
        println!(
            "  {name:<28} {:>8.0}  {:>5.2}  {:>24.2}  {:>10.2}",
            rate(d),
            rate(d) / mean,
            per_url(k, 0),
            per_url(k, 1)
        );
    }

    // 2. Aggregate rates.
    println!(
        "\nAggregate: {n} URLs over {} hosts, {} PutDiscovered streams spread over the nodes, \
         then GetURLs of every node with each round done",
        a.hosts, a.clients
    );
    println!("  nodes  PutDiscovered (URLs/s)  GetURLs + done (URLs/s)");
    for &count in &a.nodes {
        let tmp = tempfile::tempdir_in(&parent)?;
        let nodes = Nodes::start(&a.bin, tmp.path(), count.max(1))?;
        let urls: Vec<String> = (0..n).map(|i| url_of(i, a.hosts)).collect();
        let (put, get) = rt.block_on(async {
            let mut clients = nodes.clients().await?;
            let put = put_all(&clients, urls, a.clients, a.batch).await?;
            let get = drain(&mut clients, n).await?;
            Ok::<_, crate::record::Error>((put, get))
        })?;
        println!("  {count:>5}  {:>22.0}  {:>23.0}", rate(put), rate(get));
        drop(nodes);
    }

    // 3. Moves.
    if !a.moves.is_empty() {
        moves(a, &rt, &parent)?;
    }
    Ok(())
}

/// The bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => n += bytes_under(&e.path()),
                Ok(m) => n += m.len(),
                Err(_) => {}
            }
        }
    }
    n
}

/// 3. Moves: one node joins N, for each N of `--moves`.
fn moves(a: &ClusterArgs, rt: &tokio::runtime::Runtime, parent: &Path) -> Result<()> {
    let n = a.urls;
    println!(
        "\nMoves: {n} URLs over {} hosts on N nodes; every node restarted with N + 1 (consistent \
         hashing, C = {DEFAULT_REPLICAS}), the new node started; the move runs until every node \
         reports it finished",
        a.hosts
    );
    println!(
        "   N  queues moved  ideal 1/(N+1)  URL bytes moved  hash mod N  new node's store  \
         move (s)  MB/s of URLs"
    );
    let urls: Vec<String> = (0..n).map(|i| url_of(i, a.hosts)).collect();
    for &count in &a.moves {
        let tmp = tempfile::tempdir_in(parent)?;
        let names: Vec<String> = (0..=count).map(|i| format!("n{i}")).collect();
        let addrs = free_addrs(count + 1)?;
        // What changes owner, from the assignments.
        let before = Assignment::new(
            Method::Consistent {
                replicas: DEFAULT_REPLICAS,
            },
            &names[..count],
        )?;
        let after = Assignment::new(
            Method::Consistent {
                replicas: DEFAULT_REPLICAS,
            },
            &names,
        )?;
        let modulo_before = Assignment::new(Method::Modulo, &names[..count])?;
        let modulo_after = Assignment::new(Method::Modulo, &names)?;
        let (mut bytes, mut moved_bytes, mut modulo_bytes) = (0u64, 0u64, 0u64);
        let mut hosts_moved = std::collections::HashSet::new();
        for u in &urls {
            let host = u.split('/').nth(2).unwrap_or_default();
            let len = u.len() as u64;
            bytes += len;
            if before.names()[before.owner(host.as_bytes())]
                != after.names()[after.owner(host.as_bytes())]
            {
                moved_bytes += len;
                hosts_moved.insert(host.to_owned());
            }
            if modulo_before.names()[modulo_before.owner(host.as_bytes())]
                != modulo_after.names()[modulo_after.owner(host.as_bytes())]
            {
                modulo_bytes += len;
            }
        }
        let nodes = Nodes::start_list(&a.bin, tmp.path(), &names[..count], &addrs[..count])?;
        rt.block_on(async {
            let clients = nodes.clients().await?;
            put_all(&clients, urls.clone(), a.clients, a.batch).await?;
            Ok::<_, crate::record::Error>(())
        })?;
        drop(nodes);
        let start = Instant::now();
        let nodes = Nodes::start_list(&a.bin, tmp.path(), &names, &addrs)?;
        let total = rt.block_on(async {
            let mut clients = nodes.clients().await?;
            loop {
                let mut moving = 0;
                for c in clients.iter_mut() {
                    let s = c
                        .get_stats(pb::QueueWithinCrawlParams {
                            key: String::new(),
                            crawl_id: String::new(),
                            local: true,
                        })
                        .await?
                        .into_inner();
                    moving += s.counts.get("moving").copied().unwrap_or(0);
                }
                if moving == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let s = clients[0]
                .count_ur_ls(pb::CountUrlParams {
                    key: String::new(),
                    crawl_id: String::new(),
                    local: Some(false),
                    filter: None,
                    ignore_case: None,
                })
                .await?
                .into_inner();
            Ok::<_, crate::record::Error>(s.value)
        })?;
        let took = start.elapsed();
        let new_store = bytes_under(&tmp.path().join(&names[count]));
        drop(nodes);
        if total != n {
            return Err(format!("{total} URLs after the move, not {n}").into());
        }
        let hosts: std::collections::HashSet<&str> = urls
            .iter()
            .map(|u| u.split('/').nth(2).unwrap_or_default())
            .collect();
        println!(
            "  {count:>2}  {:>11.2} %  {:>12.2} %  {:>14.2} %  {:>9.2} %  {:>13.1} MB  {:>8.2}  {:>12.1}",
            100.0 * hosts_moved.len() as f64 / hosts.len() as f64,
            100.0 / (count + 1) as f64,
            100.0 * moved_bytes as f64 / bytes as f64,
            100.0 * modulo_bytes as f64 / bytes as f64,
            new_store as f64 / 1e6,
            took.as_secs_f64(),
            moved_bytes as f64 / 1e6 / took.as_secs_f64()
        );
    }
    Ok(())
}
