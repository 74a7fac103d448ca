//! `crivello serve DIR`: the url-frontier service (gRPC, url-frontier 2.6) over the durable
//! frontier in DIR.
//!
//! The service is a thin layer over the library's [`crivello::Frontier`] (`service`): pushes
//! and known updates of every stream go through one group-commit thread (`commit`), so that
//! an acknowledgement is sent only once its item is durable and one fsync serves many
//! streams. On SIGTERM or SIGINT the server stops accepting calls, streams read no more
//! items and acknowledge those read, and the frontier is synced and closed; the exit code is
//! then 0.

mod auth;
mod cluster;
mod codes;
mod commit;
mod forward;
mod handoff;
pub(crate) mod log;
mod meta;
mod moves;
mod parts;
mod service;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::assign::Method;
use tokio::sync::watch;

use self::log::{log, Level, Log};
use super::{explained, open_frontier_with, Common, QueueCodingArg};

/// The code generated from `proto/urlfrontier.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("urlfrontier");
}

/// The code generated from `proto/crivello_cluster.proto`: the calls between the nodes of a
/// cluster.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod cpb {
    tonic::include_proto!("crivello.cluster");
}

/// The largest message accepted (a bigger one is refused with RESOURCE_EXHAUSTED before it
/// is read), and the largest sent.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Bytes of items read from streams and not yet acknowledged, across all streams: what
/// clients send beyond it waits (backpressure).
const IN_FLIGHT_BYTES: usize = 32 << 20;

/// HTTP/2's flow-control window of each stream the server receives: bytes a client may send
/// on one stream beyond what the server has read.
const STREAM_WINDOW: u32 = 256 << 10;

/// HTTP/2's flow-control window of each connection the server receives: bytes a client may
/// send on all its streams beyond what the server has read. Half of it is what the small
/// frames held unread may cost before HTTP/2 closes the connection.
const CONNECTION_WINDOW: u32 = 32 << 20;

/// How long a stop waits for calls in flight before it closes the frontier anyway.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// The arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The frontier's directory (created if missing).
    pub dir: PathBuf,
    /// The address to listen on; port 0 picks a free port (the address is printed).
    /// Default: 127.0.0.1:7071, or in a cluster this node's entry of --peers.
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<String>,
    /// In a cluster: this node's name, one of the --peers.
    #[arg(long, value_name = "NAME", requires = "peers")]
    pub node: Option<String>,
    /// In a cluster: every node, this one included, as NAME=HOST:PORT[,NAME=HOST:PORT...];
    /// every node gets the same list. Each node owns the queue keys the assignment gives it.
    #[arg(long, value_name = "LIST", requires = "node")]
    pub peers: Option<String>,
    /// In a cluster: nodes gone for good (their store lost), named at the restart of every
    /// other node. A move no longer waits for them (the queues they held are lost; their keys
    /// start empty at their new owners), a move under way may drop them from its list, and
    /// the items waiting for them in this node's hand-off logs go to their keys' owners.
    #[arg(long, value_name = "NAMES", requires = "peers", value_delimiter = ',')]
    pub lost: Vec<String>,
    /// In a cluster: how keys are assigned to nodes (consistent hashing, rendezvous or min
    /// hashing, random permutations).
    #[arg(
        long,
        value_name = "METHOD",
        value_enum,
        default_value = "consistent",
        requires = "peers"
    )]
    pub assign: AssignMethod,
    /// In a cluster, with consistent hashing: replicas of each node on the circle.
    #[arg(long, value_name = "C", default_value_t = crivello::assign::DEFAULT_REPLICAS,
          value_parser = clap::value_parser!(u32).range(1..=100_000), allow_negative_numbers = true, requires = "peers")]
    pub replicas: u32,
    /// What the log on stderr says: trace, debug, info, warn or error (--quiet: error).
    #[arg(long, value_name = "LEVEL", value_enum, default_value = "info")]
    pub log_level: Level,
    /// The number of URLs of a queue in transit at once, for every queue that did not set
    /// its own (kept in the store; a new store has 1: never two fetchers on one host).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub per_queue: Option<u32>,
    /// A file holding a shared token: every call must then carry the metadata
    /// `authorization: Bearer TOKEN`, or is refused with UNAUTHENTICATED.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// TLS: the server's certificate chain (PEM); with --tls-key, calls are encrypted.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS: the server's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TLS in a cluster: the certificates (PEM) a node trusts the other nodes' by. Nodes then
    /// call each other over TLS, each checking the other's certificate against the host of
    /// its --peers entry. Required with --peers and --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// How the frontier writes its queues.
    #[command(flatten)]
    pub coding: QueueCodingArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

impl ServeArgs {
    /// The options the frontier is opened with.
    fn frontier_options(&self) -> crivello::Options {
        self.coding
            .apply(crivello::Options::new().memory(self.common.memory))
    }
}

/// Keeps glibc's allocator from holding memory the server freed (`docs/design.md`, Memory).
///
/// By default glibc gives each thread that allocates its own arena (up to eight per core), and
/// raises its threshold for serving a block by its own mapping each time such a block is
/// freed, up to 32 MiB: the service's large buffers that come and go (a mover's batch, a
/// call's items, the tables that grow) then stay in arenas that are never given back. Two
/// arenas and a fixed threshold of 256 KiB keep the resident memory near what is allocated.
fn bound_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets the allocator's parameters; it is called before the
    // server starts its threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

/// The assignment functions `--assign` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AssignMethod {
    /// Consistent hashing, C replicas per node (the lecture notes §3.3).
    Consistent,
    /// Rendezvous or min hashing (§3.2).
    Rendezvous,
    /// Random permutations (§3.1).
    Permutation,
}

/// Runs `serve` until SIGTERM or SIGINT.
pub fn run(args: ServeArgs) -> Result<()> {
    bound_malloc();
    let level = if args.common.quiet {
        Level::Error
    } else {
        args.log_level
    };
    let log = Arc::new(Log::new(level));
    let cluster = match (&args.node, &args.peers) {
        (Some(node), Some(peers)) => {
            let method = match args.assign {
                AssignMethod::Consistent => Method::Consistent {
                    replicas: args.replicas,
                },
                AssignMethod::Rendezvous => Method::Rendezvous,
                AssignMethod::Permutation => Method::Permutation,
            };
            let listed = cluster::parse_peers(peers)?.iter().any(|n| &n.name == node);
            cluster::check_name(&args.dir, node)?;
            if !listed {
                let leaving = cluster::Cluster::leaving(node, peers, method)?;
                if cluster::served_as(&args.dir, node)? {
                    return leave(&args, leaving, log);
                }
                if cluster::left_under(&args.dir, &leaving.canonical)? {
                    // Again, in case a crash came between its two steps; under the store's
                    // lock, as every change of it.
                    let frontier = open_store(&args)?;
                    cluster::check_name(&args.dir, node)?;
                    if !cluster::left_under(&args.dir, &leaving.canonical)? {
                        return Err(explained(
                            format!("{}: its node list changed meanwhile", args.dir.display()),
                            "start it again",
                        ));
                    }
                    cluster::left(&args.dir, &leaving.canonical)?;
                    close(Arc::new(frontier))?;
                    log!(
                        log,
                        Info,
                        "node {node} left the cluster of this list before: it holds nothing"
                    );
                    return Ok(());
                }
            }
            Some(Arc::new(cluster::Cluster::new(node, peers, method)?))
        }
        _ => None,
    };
    let peer_tls = peer_tls(&args, cluster.is_some())?;
    let addr_text = match (&args.addr, &cluster) {
        (Some(a), _) => a.clone(),
        (None, Some(c)) => c.this().addr.clone(),
        (None, None) => "127.0.0.1:7071".to_owned(),
    };
    let addr: SocketAddr = addr_text.parse().map_err(|_| {
        super::usage(
            format!("--addr {addr_text}: not an address"),
            "give HOST:PORT with a numeric host, e.g. 127.0.0.1:7071",
        )
    })?;
    let token = match &args.token_file {
        Some(path) => Some(read_token(path)?),
        None => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let read = |p: &PathBuf, what: &str| {
                std::fs::read(p).with_context(|| format!("read the TLS {what} {}", p.display()))
            };
            Some(tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(read(cert, "certificate")?, read(key, "key")?),
            ))
        }
        _ => None,
    };
    if !addr.ip().is_loopback() && token.is_none() {
        eprintln!(
            "crivello: warning: serving {addr}, not a loopback address, without --token-file: \
             anyone who reaches it can read and change the frontier"
        );
    }
    // A store to be made here: the address is tried first, so that one in use fails the
    // start with nothing made on disk. Let go at once, so that a client (or a peer node)
    // that connects during the open is refused, as before any server, rather than left
    // waiting. (An existing store is opened first, as its own checks come first.)
    cluster::check_lost(cluster.as_deref(), &args.lost)?;
    if !args.dir.exists() {
        drop(std::net::TcpListener::bind(addr).with_context(|| format!("listen on {addr}"))?);
    }
    let frontier = Arc::new(open_store(&args)?);
    if let Some(c) = &cluster {
        // Under the lock, before anything changes: named again, then recorded at its first
        // start as a node.
        cluster::check_name(&args.dir, &c.this().name)?;
        cluster::record_name(&args.dir, &c.this().name)?;
    }
    if let Some(k) = args.per_queue {
        let now = frontier.policy("", None)?;
        if now.per_queue != k {
            let fields = crivello::PolicyFields {
                per_queue: Some(k),
                ..Default::default()
            };
            frontier.change_policy("", None, fields)?;
        }
    }
    let start = cluster::check_start(&args.dir, cluster.as_deref(), &frontier, &args.lost)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("crivello-serve")
        .build()
        .context("start the service's threads")?;
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("listen on {addr}"))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let committer = commit::Committer::start(frontier.clone(), log.clone())?;
    let (stop, stopping) = watch::channel(false);
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (router, peers, nodes) = match &cluster {
            None => (
                forward::Router::alone(committer.sender(), log.clone()),
                None,
                vec![local.to_string()],
            ),
            Some(c) => {
                // A node hands out its own keys only, also those of queues it still holds
                // while they move to their new owner.
                let owner = c.clone();
                frontier.serve_only(Some(Arc::new(move |key: &[u8]| {
                    owner.owner(key) == owner.me
                })))?;
                let peers = forward::Peers::new(c.clone(), token.clone(), peer_tls.clone())?;
                let moves = moves::Moves::new(
                    c.clone(),
                    frontier.clone(),
                    args.dir.join("handoff"),
                    log.clone(),
                );
                moves.set_peers(peers.clone());
                moves.set_lost(&args.lost);
                if !args.lost.is_empty() {
                    log!(
                        log,
                        Warn,
                        "nodes lost for good (--lost): {}; the keys they held start empty at \
                         their owners under this list (their URLs and their state are lost \
                         with their stores)",
                        args.lost.join(", ")
                    );
                }
                match &start {
                    cluster::Start::Moving(previous) => {
                        tokio::task::block_in_place(|| moves.join(previous, true))?;
                    }
                    // Before serving: a new node holds nothing of its keys until a move
                    // under way brings them. Until a node of its list answers, it asks again
                    // every second.
                    cluster::Start::Fresh => {
                        moves.set_fresh();
                        let learnt = moves.learn(&peers).await;
                        if learnt == moves::Learnt::Nothing {
                            log!(
                                log,
                                Warn,
                                "no other node answered yet: if a move is under way, start this \
                                 node after the nodes that were in the cluster"
                            );
                        }
                        if learnt != moves::Learnt::Known {
                            let (moves, peers) = (moves.clone(), peers.clone());
                            tokio::spawn(async move {
                                loop {
                                    tokio::time::sleep(Duration::from_secs(1)).await;
                                    if moves.joined()
                                        || moves.learn(&peers).await == moves::Learnt::Known
                                    {
                                        return;
                                    }
                                }
                            });
                        }
                    }
                    cluster::Start::Same => {}
                }
                let router = forward::Router::cluster(
                    committer.sender(),
                    &peers,
                    &args.dir.join("handoff"),
                    log.clone(),
                )?
                .with_moves(moves.clone());
                log!(
                    log,
                    Info,
                    "node {} of {} nodes ({})",
                    c.this().name,
                    c.nodes.len(),
                    c.canonical
                );
                tokio::spawn(probe(peers.clone(), log.clone()));
                let nodes = c.nodes.iter().map(|n| n.addr.clone()).collect();
                (router, Some((peers, moves)), nodes)
            }
        };
        let router = Arc::new(router);
        if let Some((p, m)) = &peers {
            // Hand-outs wait until the others' hand-off logs for this node are delivered.
            tokio::spawn(m.clone().catch_up(p.clone()));
        }
        if !args.lost.is_empty() {
            tokio::spawn(forward::reroute(
                router.clone(),
                frontier.clone(),
                args.dir.join("handoff"),
                args.lost.clone(),
                log.clone(),
            ));
        }
        let cluster_calls = peers.as_ref().map(|(_, m)| {
            tonic::service::interceptor::InterceptedService::new(
                tonic::service::interceptor::InterceptedService::new(
                    cpb::cluster_server::ClusterServer::new(moves::ClusterService(
                        m.clone(),
                        router.clone(),
                    ))
                    .max_decoding_message_size(usize::MAX),
                    cluster::Check(cluster.clone(), true),
                ),
                auth::Bearer::new(token.clone()),
            )
        });
        let svc = service::Service::new(
            frontier.clone(),
            router,
            peers,
            log.clone(),
            nodes,
            IN_FLIGHT_BYTES,
            stopping.clone(),
        );
        let server = pb::url_frontier_server::UrlFrontierServer::new(svc)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let mut stopped = stopping.clone();
        // HTTP/2 closes a connection (GOAWAY, ENHANCE_YOUR_CALM) once the small DATA frames
        // it holds unread cost more than half its connection window (each frame under 256
        // bytes counts 256 less its length). A stream's items are such frames, and a stream
        // whose jobs are all under way, or whose client does not read its acknowledgements,
        // stops reading for a while: with the default windows (1 MiB each), the frames of
        // one stream's window cost twice that, and a fast client's stream lost its
        // connection with every other call on it. A stream's window of 256 KiB holds frames
        // of 3.3 MB of cost at most for the smallest items (19 bytes), 530 KB for items of
        // 85 bytes; a connection's window of 32 MiB gives 16 MiB: five streams of the
        // smallest items stopped at once, thirty of the common ones. (A smaller stream window
        // would slow a distant client's, or another node's, stream: one window a round
        // trip.)
        let mut builder = tonic::transport::Server::builder()
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW);
        if let Some(tls) = tls {
            builder = builder
                .tls_config(tls)
                .context("the TLS certificate and key (PEM files)")?;
        }
        let server = tonic::service::interceptor::InterceptedService::new(
            tonic::service::interceptor::InterceptedService::new(
                server,
                cluster::Check(cluster.clone(), false),
            ),
            auth::Bearer::new(token),
        );
        // Each connection without Nagle's delay: the last frames of an answer (a stream's
        // end, its trailers) would otherwise wait for the client's delayed ack (40 ms on Linux),
        // which made every GetURLs of a few hundred URLs take 44 ms.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let serving = builder
            .layer(codes::StatusLayer)
            .add_service(server)
            .add_optional_service(cluster_calls)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stopped.wait_for(|s| *s).await;
            });
        log!(log, Info, "serving {} on {local}", args.dir.display());
        // A closed stdout (a caller that read the line and went) must not stop the server.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "listening on {local}").and_then(|()| out.flush());
        let signals = signals(log.clone(), stop);
        tokio::pin!(serving);
        tokio::select! {
            r = &mut serving => return r.context("serve"),
            r = signals => r?,
        }
        // Stopping: calls in flight end (streams acknowledge what they read).
        match tokio::time::timeout(STOP_GRACE, serving).await {
            Ok(r) => r.context("serve"),
            Err(_) => {
                log!(
                    log,
                    Warn,
                    "calls still in flight after {STOP_GRACE:?}: closing anyway"
                );
                Ok(())
            }
        }
    });
    // Tasks still running (a stream's reader) end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(5));
    committer.join();
    served?;
    close(frontier)?;
    log!(log, Info, "stopped: the frontier is synced and closed");
    Ok(())
}

/// How a node of a cluster calls the others: over TLS, trusting `--tls-ca`, when it serves
/// with `--tls-cert`; in plain text otherwise.
fn peer_tls(
    args: &ServeArgs,
    in_cluster: bool,
) -> Result<Option<tonic::transport::ClientTlsConfig>> {
    match (&args.tls_ca, args.tls_cert.is_some() && in_cluster) {
        (Some(_), false) => Err(explained(
            "--tls-ca without --peers and --tls-cert",
            "--tls-ca names the certificates the nodes of a cluster trust each other by: give \
             it with --peers, --tls-cert and --tls-key",
        )),
        (None, true) => Err(explained(
            "--tls-cert with --peers and no --tls-ca",
            "the nodes call each other over TLS: give --tls-ca, the certificate (PEM) of the \
             authority that signed their certificates",
        )),
        (None, false) => Ok(None),
        (Some(ca), true) => {
            let pem = std::fs::read(ca)
                .with_context(|| format!("read the TLS certificates {}", ca.display()))?;
            Ok(Some(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(pem)),
            ))
        }
    }
}

/// Opens the store to serve: a store that `pop` reads as a plain sieve is refused with advice
/// for `serve`, not for the command line's `lease` and `done`.
fn open_store(args: &ServeArgs) -> Result<crivello::Frontier> {
    let frontier =
        open_frontier_with(&args.dir, args.frontier_options()).map_err(|e| match e
            .downcast_ref::<crivello::Error>()
        {
            Some(crivello::Error::WrongMode {
                mode: crivello::Mode::Sieve,
                ..
            }) => e.context(super::Explained {
                what: format!("cannot serve {}", args.dir.display()),
                todo: "serve another directory (`serve` makes a new one), or go on reading \
                           this one with `crivello pop`"
                    .into(),
            }),
            _ => e,
        })?;
    // Its lock file, which the hand-off files are checked against from now on.
    handoff::serving(&args.dir)
        .with_context(|| format!("note the lock of {}", args.dir.display()))?;
    Ok(frontier)
}

/// A node that leaves the cluster (started with a list that does not name it, on a store
/// that served as that node): sends each of its queues to its owner under the list, tells
/// every node that it is done, and stops; it serves nothing.
fn leave(args: &ServeArgs, cluster: cluster::Cluster, log: Arc<Log>) -> Result<()> {
    let handoff = args.dir.join("handoff");
    let token = match &args.token_file {
        Some(path) => Some(read_token(path)?),
        None => None,
    };
    // Under the store's lock: the hand-off logs are opened (and a torn tail cut) only by
    // the process that holds it.
    let frontier = Arc::new(open_store(args)?);
    let previous = cluster::leaving_start(&args.dir)?;
    cluster::check_name(&args.dir, &cluster.this().name)?;
    let cluster = Arc::new(cluster);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("crivello-serve")
        .build()
        .context("start the service's threads")?;
    log!(
        log,
        Info,
        "node {} leaves the cluster: its queues move to the nodes of {}",
        cluster.this().name,
        cluster.canonical
    );
    runtime.block_on(async {
        let peers = forward::Peers::new(cluster.clone(), token, peer_tls(args, true)?)?;
        let moves = moves::Moves::new(
            cluster.clone(),
            frontier.clone(),
            handoff.clone(),
            log.clone(),
        );
        let recorded = previous.1;
        let m = tokio::task::block_in_place(|| moves.begin(&previous.0, recorded))?;
        moves.send_all(&m, &peers).await.context(
            "this node's queues were refused: it leaves the cluster with nothing moved from now \
             on, and its store is kept as it is",
        )?;
        anyhow::Ok(())
    })?;
    runtime.shutdown_timeout(Duration::from_secs(5));
    cluster::left(&args.dir, &cluster.canonical)?;
    close(frontier)?;
    log!(
        log,
        Info,
        "every queue moved: node {} holds nothing and can be removed",
        cluster.this().name
    );
    Ok(())
}

/// Closes the frontier once every task that used it has ended.
fn close(frontier: Arc<crivello::Frontier>) -> Result<()> {
    let frontier = Arc::try_unwrap(frontier).map_err(|_| {
        explained(
            "the frontier is still in use at shutdown",
            "what was acknowledged is durable; reopening recovers the rest",
        )
    })?;
    frontier.close()?;
    Ok(())
}

/// Asks every other node for its list of nodes once at start, so that a node started with
/// another list is reported at once (the call is refused naming both lists), and logs the
/// nodes out of reach (their keys' items go to their hand-off logs meanwhile).
async fn probe(peers: forward::Peers, log: Arc<Log>) {
    for i in 0..peers.cluster.nodes.len() {
        if i == peers.cluster.me {
            continue;
        }
        let node = &peers.cluster.nodes[i];
        let mut client = peers.client(i);
        match client.list_nodes(peers.request(pb::Empty {})).await {
            Ok(_) => log!(log, Info, "node {} ({}) answers", node.name, node.addr),
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                log!(
                    log,
                    Error,
                    "node {} refuses this node: {}",
                    node.name,
                    s.message()
                )
            }
            // Another token: it refuses the items too, which then FAIL (not a hand-off).
            Err(s) if s.code() == tonic::Code::Unauthenticated => log!(
                log,
                Error,
                "node {} ({}) refuses this node's token: {}; items of its keys FAIL until \
                 every node has the same --token-file",
                node.name,
                node.addr,
                s.message()
            ),
            Err(s) => log!(
                log,
                Warn,
                "node {} ({}) cannot be reached yet: {}; items of its keys go to its hand-off \
                 log until it can",
                node.name,
                node.addr,
                s.message()
            ),
        }
    }
}

/// Reads the shared token of `--token-file`: its content without surrounding white space;
/// an empty one is refused.
fn read_token(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(explained(
            format!("{}: not a token", path.display()),
            "put one token (printable, no spaces) in the file",
        ));
    }
    Ok(token.to_owned())
}

/// Waits for SIGTERM or SIGINT, then tells the server to stop.
async fn signals(log: Arc<Log>, stop: watch::Sender<bool>) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("wait for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("wait for SIGINT")?;
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    log!(log, Info, "{name}: stopping");
    let _ = stop.send(true);
    Ok(())
}
