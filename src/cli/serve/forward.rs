//! Where the items of a stream go: to this node's committing thread, or, in a cluster, to
//! the node that owns their key.
//!
//! [`Router::submit`] splits a stream's ops by owner. This node's ops go to the committing
//! thread; another node's go to that node's forwarder, [`LANES`] tasks per peer (a key always in the same one), which sends them
//! with `PutURLs` (as url-frontier items, so that their creation instant travels with them),
//! in the order they came, and answers each op with the owner's acknowledgement: durable on
//! the owner. When the owner cannot be reached, the forwarder appends the ops to the peer's
//! hand-off log ([`super::handoff`]), syncs it and answers them as accepted: durable here.
//! From then on every op for that peer goes to the log behind them, and the forwarder
//! delivers the log, record by record in order, once the peer answers again; then it sends
//! directly again. Nothing is answered as accepted that is not durable on one node or the
//! other. Each lane numbers its known items (the number is their ID on the wire, the lane
//! in the call's [`LANE`] metadata), so that the owner applies each once however often it is
//! sent (see [`super::commit`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use super::cluster::Cluster;
use super::commit::{Job, Op, Outcome};
use super::cpb::cluster_client::ClusterClient;
use super::handoff::HandOff;
use super::log::{log, Log};
use super::moves::Moves;
use super::pb;
use super::pb::url_frontier_client::UrlFrontierClient;
use super::{meta, MAX_MESSAGE_BYTES};

/// Forwarders per peer: a key's items always take the lane its hash gives, so that they
/// reach the owner in the order they came, while the lanes' calls are in flight together.
/// Each lane has its own hand-off log (`NAME.LANE.log`).
pub const LANES: usize = 8;

/// The metadata entry of a forwarding call naming the lane that sends it and the sender's
/// store (`LANE/STORE`, the store's identity in hex): the known items of the call carry
/// their number in the lane as their ID, so that the owner applies each once.
pub const LANE: &str = "crivello-lane";

/// How many bits of an item's number count the items of one start of the node: the number
/// is `epoch << TAG_BITS | count` (`handoff/epoch` gives each start its epoch, from 1).
pub const TAG_BITS: u32 = 40;

/// The seed of a key's lane hash.
const LANE_SEED: u64 = 0x6c61_6e65;

/// Ops one forwarding call carries at most.
const OPS_PER_CALL: usize = 16 << 10;

/// Jobs waiting for one forwarder, at most: more wait (backpressure).
const QUEUED_JOBS: usize = 64;

/// How long a forwarding call may take before the owner counts as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// URLs of one forwarded `PutDiscovered` batch at most.
const URLS_PER_BATCH: usize = 1000;

/// A discovered URL stored at most this many seconds ago is forwarded in a batch, whose URLs
/// get the owner's creation instant; an older one (a hand-off, or an instant the client gave)
/// goes as an item that carries its own.
const RECENT_S: u64 = 2;

/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest wait between two attempts to deliver a hand-off log.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Ops for a forwarder, with where their outcomes go.
struct Forward {
    ops: Vec<Op>,
    reply: oneshot::Sender<Vec<Outcome>>,
}

/// The clients of the other nodes, for forwarded calls.
#[derive(Clone)]
pub struct Peers {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// One client per node (`None` for this node).
    clients: Vec<Option<UrlFrontierClient<Channel>>>,
    /// One client of the cluster's own calls per node (`None` for this node).
    cluster_clients: Vec<Option<ClusterClient<Channel>>>,
    /// `authorization: Bearer TOKEN` for every call, if the nodes share a token.
    token: Option<String>,
}

impl Peers {
    /// Clients of every other node of `cluster` (connecting when first used), over TLS with
    /// `tls`.
    pub fn new(
        cluster: Arc<Cluster>,
        token: Option<String>,
        tls: Option<ClientTlsConfig>,
    ) -> anyhow::Result<Peers> {
        let mut clients = Vec::new();
        let mut cluster_clients = Vec::new();
        for (i, node) in cluster.nodes.iter().enumerate() {
            if i == cluster.me {
                clients.push(None);
                cluster_clients.push(None);
                continue;
            }
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", node.addr))?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true);
            if let Some(tls) = &tls {
                endpoint = endpoint.tls_config(tls.clone()).map_err(|e| {
                    anyhow::anyhow!("TLS to node {} ({}): {e}", node.name, node.addr)
                })?;
            }
            let channel = endpoint.connect_lazy();
            cluster_clients.push(Some(
                ClusterClient::new(channel.clone())
                    .max_decoding_message_size(usize::MAX)
                    .max_encoding_message_size(usize::MAX),
            ));
            clients.push(Some(
                UrlFrontierClient::new(channel)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            ));
        }
        Ok(Peers {
            cluster,
            clients,
            cluster_clients,
            token,
        })
    }

    /// The client of node `i` (not this one).
    pub fn client(&self, i: usize) -> UrlFrontierClient<Channel> {
        self.clients[i].clone().expect("a client of another node")
    }

    /// The client of the cluster's own calls of node `i` (not this one).
    pub fn cluster_client(&self, i: usize) -> ClusterClient<Channel> {
        self.cluster_clients[i]
            .clone()
            .expect("a client of another node")
    }

    /// `message` as a call of this node: marked, with the shared token.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut r = Request::new(message);
        self.cluster.mark(&mut r);
        if let Some(t) = &self.token {
            if let Ok(v) = format!("Bearer {t}").parse() {
                r.metadata_mut().insert("authorization", v);
            }
        }
        r
    }

    /// The name of node `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.cluster.nodes[i].name
    }
}

/// Sends each op to its owner.
pub struct Router {
    commits: mpsc::Sender<Job>,
    cluster: Option<Arc<Cluster>>,
    /// The forwarders of node `i` at `i * LANES..(i + 1) * LANES` (`None` for this node),
    /// in a cluster.
    forwarders: Vec<Option<mpsc::Sender<Forward>>>,
    /// Each lane's hand-off log as the other tasks see it.
    waiting: Vec<Arc<LaneMarks>>,
    log: Arc<Log>,
    /// The move under way, if any: items of the keys it has not brought yet fail.
    moves: Option<Arc<Moves>>,
}

impl Router {
    /// A router of a node alone: every op to `commits`.
    pub fn alone(commits: mpsc::Sender<Job>, log: Arc<Log>) -> Router {
        Router {
            commits,
            cluster: None,
            forwarders: Vec::new(),
            waiting: Vec::new(),
            log,
            moves: None,
        }
    }

    /// A router of a node of a cluster, starting one forwarder per peer with its hand-off
    /// log in `handoff_dir` (on the current tokio runtime).
    pub fn cluster(
        commits: mpsc::Sender<Job>,
        peers: &Peers,
        handoff_dir: &std::path::Path,
        log: Arc<Log>,
    ) -> anyhow::Result<Router> {
        let cluster = peers.cluster.clone();
        let mut forwarders = Vec::new();
        let mut waiting = Vec::new();
        // Durable before any item is numbered with it: the numbers of this start are above
        // every earlier start's.
        let (store, epoch) = super::handoff::next_epoch(handoff_dir).map_err(|e| {
            anyhow::anyhow!(
                "record this start's epoch in {}: {e}",
                handoff_dir.display()
            )
        })?;
        for (i, node) in cluster.nodes.iter().enumerate() {
            for lane in 0..LANES {
                if i == cluster.me {
                    forwarders.push(None);
                    continue;
                }
                let name = format!("{}.{lane}", node.name);
                let handoff = HandOff::open(handoff_dir, &name).map_err(|e| {
                    anyhow::anyhow!(
                        "open the hand-off log {name} of node {} in {}: {e}",
                        node.name,
                        handoff_dir.display()
                    )
                })?;
                if handoff.pending() {
                    log!(
                        log,
                        Info,
                        "{} hand-off records wait for node {} (lane {lane})",
                        handoff.waiting(),
                        node.name
                    );
                }
                let (tx, rx) = mpsc::channel(QUEUED_JOBS);
                let count = Arc::new(LaneMarks::default());
                count.set(&handoff);
                waiting.push(count.clone());
                let f = Forwarder {
                    peer: i,
                    lane,
                    epoch,
                    store,
                    numbered: 0,
                    peers: peers.clone(),
                    handoff,
                    log: log.clone(),
                    waiting: count,
                };
                tokio::spawn(f.run(rx));
                forwarders.push(Some(tx));
            }
        }
        Ok(Router {
            commits,
            cluster: Some(cluster),
            forwarders,
            waiting,
            log,
            moves: None,
        })
    }

    /// Sends `ops` to their owners (`forwarded`: they come from another node, which found
    /// this node their owner: they are all committed here, after a check). The receiver
    /// gets one outcome per op, in order; `None`: nothing could be sent.
    ///
    /// `refused`: the ops are of a lane's stream, whose numbered items are refused from the
    /// first one refused on (set here when one is of a key a move has not brought yet, and
    /// read for every later one of the stream): the owner's receipt, raised by a later item,
    /// would otherwise cover the refused one. This is the one place where that is decided.
    pub async fn submit(
        &self,
        ops: Vec<Op>,
        forwarded: bool,
        mut refused: Option<&mut bool>,
    ) -> Option<oneshot::Receiver<Vec<Outcome>>> {
        let Some(cluster) = &self.cluster else {
            return self.commit(ops).await;
        };
        let mut owners: Vec<usize> = ops.iter().map(|op| cluster.owner(&op_key(op))).collect();
        // Refused (answered FAIL, owner `usize::MAX`): this node's ops of keys a move has not
        // brought yet; forwarded ops this node does not own (the lists are the same, checked
        // at the call: this cannot happen unless the assignment changed within a release);
        // and a lane's numbered ops after one refused.
        let moves = self.moves.as_ref().filter(|m| m.moving());
        let mut strangers = false;
        for (op, owner) in ops.iter().zip(owners.iter_mut()) {
            let (crawl, numbered) = match op {
                Op::Discover { crawl, .. } => (crawl, false),
                Op::Known { crawl, receipt, .. } => (crawl, receipt.is_some()),
            };
            let stranger = forwarded && *owner != cluster.me;
            strangers |= stranger;
            let refuse = stranger
                || (*owner == cluster.me && moves.is_some_and(|m| m.pending(crawl, &op_key(op))));
            match refused.as_deref_mut() {
                Some(refused) if numbered && (*refused || refuse) => {
                    *refused =
                        !crivello::planted::active(crivello::planted::Bug::LaneForgetsRefusal);
                    *owner = usize::MAX;
                }
                Some(_) if numbered => {}
                _ if refuse => *owner = usize::MAX,
                _ => {}
            }
        }
        if strangers {
            log!(
                self.log,
                Error,
                "a node forwarded items this node does not own: refused"
            );
        }
        if owners.iter().all(|&o| o == cluster.me) {
            return self.commit(ops).await;
        }
        // Split by owner and lane (this node's ops: the last part), remembering each op's
        // place.
        let n = ops.len();
        let mine = self.forwarders.len();
        let mut parts: Vec<(Vec<usize>, Vec<Op>)> =
            (0..=mine).map(|_| Default::default()).collect();
        let mut pending = Vec::new();
        for (i, (op, owner)) in ops.into_iter().zip(owners).enumerate() {
            let to = if owner == cluster.me {
                mine
            } else if owner == usize::MAX {
                pending.push(i);
                continue;
            } else {
                owner * LANES + lane(&op_key(&op))
            };
            parts[to].0.push(i);
            parts[to].1.push(op);
        }
        let mut waits = Vec::new();
        if !pending.is_empty() {
            waits.push((pending, None));
        }
        for (to, (places, ops)) in parts.into_iter().enumerate() {
            if ops.is_empty() {
                continue;
            }
            let rx = if to == mine {
                self.commit(ops).await
            } else {
                // Never a forwarded op: those this node does not own are refused above.
                let (reply, rx) = oneshot::channel();
                match &self.forwarders[to] {
                    Some(tx) => tx.send(Forward { ops, reply }).await.ok().map(|()| rx),
                    None => None,
                }
            };
            waits.push((places, rx));
        }
        let (reply, merged) = oneshot::channel();
        tokio::spawn(async move {
            let mut out = vec![Outcome::Failed; n];
            for (places, rx) in waits {
                let got = match rx {
                    Some(rx) => rx.await.unwrap_or_default(),
                    None => Vec::new(),
                };
                for (place, o) in places.into_iter().zip(got) {
                    out[place] = o;
                }
            }
            let _ = reply.send(out);
        });
        Some(merged)
    }

    /// The router, answering FAIL for this node's items of keys that `moves` has not brought
    /// yet.
    pub fn with_moves(mut self, moves: Arc<Moves>) -> Router {
        self.moves = Some(moves);
        self
    }

    /// Records waiting in this node's hand-off logs, all lanes of all nodes.
    pub fn handoff_records(&self) -> u64 {
        self.waiting.iter().map(|w| w.waiting()).sum()
    }

    /// The marks of this node's hand-off logs for node `node` (of the cluster's list), lane
    /// by lane: the seq of the last record appended and of the last delivered. None for
    /// this node, or outside a cluster.
    pub fn held_for(&self, node: usize) -> Option<Vec<(u64, u64)>> {
        let cluster = self.cluster.as_ref()?;
        // The lanes' marks are those of the other nodes, in the list's order.
        let k = match node.cmp(&cluster.me) {
            std::cmp::Ordering::Less => node,
            std::cmp::Ordering::Equal => return None,
            std::cmp::Ordering::Greater => node - 1,
        };
        let lanes = self.waiting.get(k * LANES..(k + 1) * LANES)?;
        Some(lanes.iter().map(|w| w.marks()).collect())
    }

    async fn commit(&self, ops: Vec<Op>) -> Option<oneshot::Receiver<Vec<Outcome>>> {
        let (reply, rx) = oneshot::channel();
        // The committing thread gone: nothing of it is durable.
        self.commits
            .send(Job { ops, reply })
            .await
            .ok()
            .map(|()| rx)
    }
}

/// A lane's hand-off log as the other tasks see it: the seq of its last record appended and
/// of its last delivered, set by the lane after each change.
#[derive(Default)]
pub struct LaneMarks {
    last: AtomicU64,
    sent: AtomicU64,
}

impl LaneMarks {
    fn set(&self, h: &HandOff) {
        let (last, sent) = h.marks();
        self.last.store(last, Ordering::Relaxed);
        self.sent.store(sent, Ordering::Relaxed);
    }

    /// The seq of the last record appended, and of the last delivered.
    fn marks(&self) -> (u64, u64) {
        (
            self.last.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
        )
    }

    /// Records waiting for delivery.
    fn waiting(&self) -> u64 {
        let (last, sent) = self.marks();
        last.saturating_sub(sent)
    }
}

/// The lane of a key among a peer's [`LANES`].
fn lane(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, LANE_SEED) % LANES as u64) as usize
}

/// The queue key of an op: its own, or its URL's default.
fn op_key(op: &Op) -> Vec<u8> {
    let (url, key) = match op {
        Op::Discover { url, key, .. } | Op::Known { url, key, .. } => (url, key),
    };
    match key {
        Some(k) => k.as_bytes().to_vec(),
        None => crivello::queues::key::default_key(url.as_bytes()).to_vec(),
    }
}

/// An op as the url-frontier item that carries it to its owner.
fn item_of(op: &Op) -> pb::UrlItem {
    let (crawl, url, key, stored, known) = match op {
        Op::Discover {
            crawl,
            url,
            key,
            meta,
        } => (crawl, url, key, meta, None),
        Op::Known {
            crawl,
            url,
            key,
            meta,
            refetch_ms,
            ..
        } => (crawl, url, key, meta, Some(*refetch_ms)),
    };
    let stored = meta::decode(stored);
    let info = Some(pb::UrlInfo {
        url: url.clone(),
        key: key.clone().unwrap_or_default(),
        metadata: stored.metadata,
        crawl_id: crawl.clone(),
    });
    let item = match known {
        None => pb::url_item::Item::Discovered(pb::DiscoveredUrlItem { info }),
        Some(ms) => pb::url_item::Item::Known(pb::KnownUrlItem {
            info,
            refetchable_from_date: ms.div_ceil(1000),
        }),
    };
    pb::UrlItem {
        item: Some(item),
        id: String::new(),
        creation_date: stored.created,
    }
}

/// Whether an item carries a number of its lane (its ID, `epoch << 40 | count`).
fn is_numbered(item: &pb::UrlItem) -> bool {
    item.id.parse::<u64>().is_ok_and(|n| n >> TAG_BITS >= 1)
}

/// The items of `ops`, the known ones numbered from `first` on in order (their ID).
fn numbered_items(ops: &[&Op], first: u64) -> Vec<pb::UrlItem> {
    let mut next = first;
    ops.iter()
        .map(|op| {
            let mut item = item_of(op);
            if op.is_known() {
                item.id = next.to_string();
                next += 1;
            }
            item
        })
        .collect()
}

/// What became of a forwarding call.
enum Sent {
    /// The owner answered every item.
    All(Vec<Outcome>),
    /// The owner answered the first items, then could not be reached.
    Partly(Vec<Outcome>, Status),
    /// The owner refused the call: nothing of it is durable (another list of nodes, a
    /// wrong token).
    Refused(Status),
}

/// The forwarder of one lane of one peer.
struct Forwarder {
    peer: usize,
    lane: usize,
    /// This start's epoch: the high bits of its items' numbers.
    epoch: u64,
    /// The store's identity, sent with the lane: a node of the same name on another store
    /// numbers its items apart.
    store: u64,
    /// Known items numbered so far in this start.
    numbered: u64,
    peers: Peers,
    handoff: HandOff,
    log: Arc<Log>,
    /// Its hand-off log's marks, for [`Router::handoff_records`] and [`Router::held_for`].
    waiting: Arc<LaneMarks>,
}

impl Forwarder {
    async fn run(mut self, mut rx: mpsc::Receiver<Forward>) {
        let mut backoff = Duration::from_millis(50);
        loop {
            if self.handoff.pending() {
                // Behind the log: what arrives joins it.
                let mut waiting = Vec::new();
                while let Ok(f) = rx.try_recv() {
                    waiting.push(f);
                }
                if !waiting.is_empty() {
                    self.hand_off(waiting, 0, Vec::new(), None);
                }
                if self.deliver_one().await {
                    backoff = Duration::from_millis(50);
                    continue;
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    f = rx.recv() => match f {
                        Some(f) => self.hand_off(vec![f], 0, Vec::new(), None),
                        None => return,
                    },
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut jobs = vec![first];
            let mut n = jobs[0].ops.len();
            while n < OPS_PER_CALL {
                match rx.try_recv() {
                    Ok(f) => {
                        n += f.ops.len();
                        jobs.push(f);
                    }
                    Err(_) => break,
                }
            }
            let items = {
                let ops: Vec<&Op> = jobs.iter().flat_map(|j| j.ops.iter()).collect();
                let first = self.number(&ops);
                (first, numbered_items(&ops, first))
            };
            let (first, items) = items;
            match self.send(items).await {
                Sent::All(outcomes) => answer(jobs, &outcomes),
                Sent::Partly(done, why) => {
                    log!(
                        self.log,
                        Warn,
                        "node {} cannot be reached ({}): its items go to the hand-off log",
                        self.peers.name(self.peer),
                        why.message()
                    );
                    let from = done.len();
                    self.hand_off(jobs, from, done, Some(first));
                }
                Sent::Refused(why) => {
                    log!(
                        self.log,
                        Error,
                        "node {} refused forwarded items: {}",
                        self.peers.name(self.peer),
                        why.message()
                    );
                    answer(jobs, &[]);
                }
            }
        }
    }

    /// Sends `items` to the owner, in order: runs of discovered URLs stored just now with
    /// `PutDiscovered` in batches (the owner's clock gives their creation instant, at most
    /// [`RECENT_S`] off), other runs with `PutURLs` (which carries the instant).
    async fn send(&self, items: Vec<pb::UrlItem>) -> Sent {
        let n = items.len();
        let now = now_s();
        let batchable = |i: &pb::UrlItem| batchable(i, now);
        let mut runs: Vec<(bool, Vec<pb::UrlItem>)> = Vec::new();
        for item in items {
            let b = batchable(&item);
            match runs.last_mut() {
                Some((kind, run)) if *kind == b => run.push(item),
                _ => runs.push((b, vec![item])),
            }
        }
        let mut outcomes = Vec::with_capacity(n);
        let call = async {
            for (batch, run) in runs {
                if batch {
                    self.send_batches(run, &mut outcomes).await?;
                } else {
                    let start = outcomes.len();
                    let numbered: Vec<bool> = run.iter().map(is_numbered).collect();
                    self.send_items(run, &mut outcomes).await?;
                    // A numbered item refused: nothing after it goes in this sending, so that
                    // the owner's receipt, raised by a later one, never covers it.
                    if outcomes[start..]
                        .iter()
                        .zip(&numbered)
                        .any(|(&o, &num)| num && o == Outcome::Failed)
                    {
                        break;
                    }
                }
            }
            Ok::<(), Status>(())
        };
        let result = match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(Status::deadline_exceeded("no answer in time")),
        };
        match result {
            Ok(()) => {
                outcomes.resize(n, Outcome::Failed);
                Sent::All(outcomes)
            }
            Err(s) if refused(&s) => {
                if outcomes.is_empty() {
                    Sent::Refused(s)
                } else {
                    // Refused mid-way: what was answered stands; the rest fails.
                    outcomes.resize(n, Outcome::Failed);
                    Sent::All(outcomes)
                }
            }
            Err(s) => Sent::Partly(outcomes, s),
        }
    }

    /// Sends discovered URLs with `PutDiscovered`, pushing one outcome per URL answered.
    async fn send_batches(
        &self,
        items: Vec<pb::UrlItem>,
        outcomes: &mut Vec<Outcome>,
    ) -> Result<(), Status> {
        let n = items.len();
        let mut batches = Vec::new();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            // At most URLS_PER_BATCH URLs and half the largest message.
            let mut infos: Vec<pb::UrlInfo> = Vec::new();
            let mut bytes = 0usize;
            while infos.len() < URLS_PER_BATCH && bytes < MAX_MESSAGE_BYTES / 2 {
                let Some(item) = items.next() else {
                    break;
                };
                if let Some(pb::url_item::Item::Discovered(d)) = item.item {
                    if let Some(info) = d.info {
                        bytes += prost::Message::encoded_len(&info) + 8;
                        infos.push(info);
                    }
                }
            }
            batches.push(pb::DiscoveredBatch {
                id: batches.len().to_string(),
                items: infos,
            });
        }
        let mut client = self.peers.client(self.peer);
        let request = self.peers.request(tokio_stream::iter(batches));
        let mut acks = client.put_discovered(request).await?.into_inner();
        let end = outcomes.len() + n;
        let mut k = 0usize;
        while outcomes.len() < end {
            let Some(ack) = acks.message().await? else {
                return Err(Status::unavailable("the stream ended early"));
            };
            if ack.id != k.to_string() {
                return Err(Status::internal(format!(
                    "acknowledgement {:?} where batch {k} was due",
                    ack.id
                )));
            }
            k += 1;
            use pb::ack_message::Status as S;
            outcomes.extend(ack.statuses.iter().map(|&s| match S::try_from(s) {
                Ok(S::Ok) => Outcome::New,
                Ok(S::Skipped) => Outcome::Seen,
                _ => Outcome::Failed,
            }));
        }
        outcomes.truncate(end);
        Ok(())
    }

    /// Sends items with `PutURLs`, pushing one outcome per item answered.
    async fn send_items(
        &self,
        items: Vec<pb::UrlItem>,
        outcomes: &mut Vec<Outcome>,
    ) -> Result<(), Status> {
        let known: Vec<bool> = items
            .iter()
            .map(|i| matches!(i.item, Some(pb::url_item::Item::Known(_))))
            .collect();
        let first = outcomes.len();
        // A known item keeps its number as its ID; the others (and the items of a hand-off
        // record of an earlier release, never numbered) get their place, which is not a
        // number.
        let items: Vec<pb::UrlItem> = items
            .into_iter()
            .enumerate()
            .map(|(i, mut item)| {
                if item.id.is_empty() {
                    item.id = format!("#{i}");
                }
                item
            })
            .collect();
        let ids: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
        let mut client = self.peers.client(self.peer);
        let mut request = self.peers.request(tokio_stream::iter(items));
        if let Ok(v) = format!("{}/{:016x}", self.lane, self.store).parse() {
            request.metadata_mut().insert(LANE, v);
        }
        let mut acks = client.put_ur_ls(request).await?.into_inner();
        while outcomes.len() - first < known.len() {
            let Some(ack) = acks.message().await? else {
                return Err(Status::unavailable("the stream ended early"));
            };
            let i = outcomes.len() - first;
            if ack.id != ids[i] {
                return Err(Status::internal(format!(
                    "acknowledgement {:?} where {:?} was due",
                    ack.id, ids[i]
                )));
            }
            use pb::ack_message::Status as S;
            outcomes.push(match S::try_from(ack.status) {
                Ok(S::Ok) if known[i] => Outcome::Updated,
                Ok(S::Ok) => Outcome::New,
                Ok(S::Skipped) => Outcome::Seen,
                _ => Outcome::Failed,
            });
        }
        Ok(())
    }

    /// Numbers the known items of `ops`, in order: returns the first number.
    fn number(&mut self, ops: &[&Op]) -> u64 {
        let n = ops.iter().filter(|o| o.is_known()).count() as u64;
        let first = (self.epoch << TAG_BITS) | (self.numbered + 1);
        self.numbered += n;
        assert!(
            self.numbered < 1 << TAG_BITS,
            "2^40 known items forwarded by one lane in one start"
        );
        first
    }

    /// Appends the ops of `jobs` from the `from`-th on to the hand-off log, then answers
    /// every op: the first `from` with `done`, the others as accepted (or failed if the log
    /// could not be written). `first`: the number of the jobs' first known item, if they were
    /// numbered already (sent once); None: numbered now.
    fn hand_off(
        &mut self,
        jobs: Vec<Forward>,
        from: usize,
        mut done: Vec<Outcome>,
        first: Option<u64>,
    ) {
        let ops: Vec<&Op> = jobs.iter().flat_map(|j| j.ops.iter()).collect();
        let first = match first {
            Some(first) => first + ops[..from].iter().filter(|o| o.is_known()).count() as u64,
            None => self.number(&ops[from..]),
        };
        let items = numbered_items(&ops[from..], first);
        let written = if crivello::planted::active(crivello::planted::Bug::HandoffUnlogged) {
            // The planted bug: accepted, and written nowhere.
            Ok(())
        } else {
            tokio::task::block_in_place(|| self.handoff.append(&items))
        };
        self.waiting.set(&self.handoff);
        match written {
            Ok(()) => {
                log!(
                    self.log,
                    Debug,
                    "{} items for node {} in its hand-off log",
                    items.len(),
                    self.peers.name(self.peer)
                );
                done.extend(ops[from..].iter().map(|op| match op {
                    Op::Discover { .. } => Outcome::New,
                    Op::Known { .. } => Outcome::Updated,
                }));
            }
            Err(e) => {
                log!(
                    self.log,
                    Error,
                    "the hand-off log of node {} failed: {e}",
                    self.peers.name(self.peer)
                );
            }
        }
        answer(jobs, &done);
    }

    /// Delivers the first record of the hand-off log; whether it was.
    async fn deliver_one(&mut self) -> bool {
        let record = match tokio::task::block_in_place(|| self.handoff.next()) {
            Ok(Some(r)) => r,
            Ok(None) => return true,
            Err(e) => {
                log!(
                    self.log,
                    Error,
                    "the hand-off log of node {} cannot be read: {e}",
                    self.peers.name(self.peer)
                );
                return false;
            }
        };
        let n = record.items.len();
        match self.send(record.items.clone()).await {
            Sent::All(outcomes) if outcomes.iter().all(|&o| o != Outcome::Failed) => {
                let noted = tokio::task::block_in_place(|| self.handoff.delivered(&record));
                self.waiting.set(&self.handoff);
                match noted {
                    Ok(()) => {
                        log!(
                            self.log,
                            Debug,
                            "delivered {n} hand-off items to node {}",
                            self.peers.name(self.peer)
                        );
                        if !self.handoff.pending() {
                            log!(
                                self.log,
                                Info,
                                "node {} is back: its hand-off log is delivered",
                                self.peers.name(self.peer)
                            );
                        }
                        true
                    }
                    Err(e) => {
                        log!(
                            self.log,
                            Error,
                            "the hand-off log of node {} cannot record a delivery: {e}",
                            self.peers.name(self.peer)
                        );
                        false
                    }
                }
            }
            Sent::All(_) => {
                log!(
                    self.log,
                    Warn,
                    "node {} failed hand-off items: trying again",
                    self.peers.name(self.peer)
                );
                false
            }
            Sent::Partly(_, why) | Sent::Refused(why) => {
                log!(
                    self.log,
                    Debug,
                    "node {} still cannot take its hand-off log: {}",
                    self.peers.name(self.peer),
                    why.message()
                );
                false
            }
        }
    }
}

/// Seconds since the epoch.
/// Whether `item` goes to its owner in a `PutDiscovered` batch at `now` (seconds): a
/// discovered URL stored [`RECENT_S`] ago at most, the owner's clock giving its creation
/// instant. Any creation date a client sends is taken (2^64 - 1 too).
fn batchable(item: &pb::UrlItem, now: u64) -> bool {
    matches!(item.item, Some(pb::url_item::Item::Discovered(_)))
        && item.creation_date.saturating_add(RECENT_S) >= now
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether a status is the owner refusing the call (then nothing is retried), not the owner
/// being out of reach.
fn refused(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::FailedPrecondition
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::InvalidArgument
            | Code::Unimplemented
    )
}

/// Sends each job its outcomes, out of `outcomes` in order (missing ones: failed).
fn answer(jobs: Vec<Forward>, outcomes: &[Outcome]) {
    let mut at = 0;
    for job in jobs {
        let n = job.ops.len();
        let mine: Vec<Outcome> = (at..at + n)
            .map(|i| outcomes.get(i).copied().unwrap_or(Outcome::Failed))
            .collect();
        at += n;
        let _ = job.reply.send(mine);
    }
}

/// Sends the items waiting in this node's hand-off logs for nodes lost for good (`--lost`)
/// to their keys' owners under the current list, record by record in order: each record's
/// items go through `router` as a client's would (to their owner, or to its hand-off log),
/// and the record is noted as delivered once every item of it is accepted; a record with an
/// item refused (a key a move has not brought yet) is tried again a second later. A crash
/// before the note sends the record again: its discovered URLs are known by then; its known
/// items are applied again.
pub async fn reroute(
    router: Arc<Router>,
    frontier: Arc<crivello::Frontier>,
    handoff: std::path::PathBuf,
    lost: Vec<String>,
    log: Arc<Log>,
) {
    for node in &lost {
        for lane in 0..LANES {
            let name = format!("{node}.{lane}");
            if !handoff.join(format!("{name}.log")).exists() {
                continue;
            }
            let mut h = match tokio::task::block_in_place(|| HandOff::open(&handoff, &name)) {
                Ok(h) => h,
                Err(e) => {
                    log!(log, Error, "the hand-off log {name}: {e}");
                    continue;
                }
            };
            let mut moved = 0usize;
            loop {
                let record = match tokio::task::block_in_place(|| h.next()) {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(e) => {
                        log!(log, Error, "the hand-off log {name} cannot be read: {e}");
                        break;
                    }
                };
                loop {
                    let ops: Vec<Op> = record
                        .items
                        .iter()
                        .filter_map(|item| {
                            let (info, known) = match &item.item {
                                Some(pb::url_item::Item::Discovered(d)) => (d.info.clone(), None),
                                Some(pb::url_item::Item::Known(k)) => {
                                    (k.info.clone(), Some(k.refetchable_from_date))
                                }
                                None => return None,
                            };
                            match super::service::item_slot(
                                &frontier,
                                &log,
                                info,
                                known,
                                item.creation_date,
                            ) {
                                super::service::Slot::Op(op, _) => Some(op),
                                super::service::Slot::Ready(_) => None,
                            }
                        })
                        .collect();
                    let n = ops.len();
                    let outcomes = match router.submit(ops, false, None).await {
                        Some(rx) => rx.await.unwrap_or_default(),
                        None => Vec::new(),
                    };
                    if outcomes.len() == n && outcomes.iter().all(|&o| o != Outcome::Failed) {
                        moved += n;
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if let Err(e) = tokio::task::block_in_place(|| h.delivered(&record)) {
                    log!(
                        log,
                        Error,
                        "the hand-off log {name} cannot record a delivery: {e}"
                    );
                    break;
                }
            }
            if moved > 0 {
                log!(
                    log,
                    Info,
                    "{moved} items waiting for node {node}, which is lost, went to their keys' \
                     owners"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crivello::{Frontier, Options};

    use super::super::log::Level;
    use super::*;
    use crivello::assign::Method;

    #[test]
    fn any_creation_date_is_taken_when_items_are_grouped() {
        let item = |created: u64| pb::UrlItem {
            item: Some(pb::url_item::Item::Discovered(pb::DiscoveredUrlItem {
                info: Some(pb::UrlInfo {
                    url: "http://a.test/".into(),
                    ..Default::default()
                }),
            })),
            creation_date: created,
            ..Default::default()
        };
        let now = 1_000_000;
        assert!(batchable(&item(now), now));
        assert!(batchable(&item(now - RECENT_S), now));
        assert!(!batchable(&item(now - RECENT_S - 1), now));
        // It overflowed (a panic where overflows are checked).
        assert!(batchable(&item(u64::MAX), now));
        assert!(batchable(&item(u64::MAX - 1), now));
    }

    fn known(key: &str, from: &Arc<str>, seq: u64) -> Op {
        Op::Known {
            crawl: "c".to_owned(),
            url: format!("http://{key}/page"),
            key: Some(key.to_owned()),
            meta: Vec::new(),
            refetch_ms: 0,
            receipt: Some((from.clone(), seq)),
        }
    }

    /// The outcomes of `ops` submitted as a lane's, whose stream's refusal is `refused`.
    async fn outcomes(router: &Router, ops: Vec<Op>, refused: &mut bool) -> Vec<Outcome> {
        let rx = router.submit(ops, true, Some(refused)).await.unwrap();
        rx.await.unwrap()
    }

    /// A lane's numbered item of a key a move has not brought yet is refused, and so is every
    /// numbered item of the stream after it, in the same call and in later ones, whatever
    /// their keys: the receipt a later item raises never covers the refused one.
    #[tokio::test]
    async fn a_lane_refuses_every_numbered_item_after_one_of_a_pending_key() {
        let dir = tempfile::tempdir().unwrap();
        let method = Method::Consistent { replicas: 300 };
        // Node b, after a move from the list b, c: b's keys that were c's are pending while
        // c has not sent them; those that were b's are not.
        let cluster = Arc::new(Cluster::new("b", "a=127.0.0.1:1,b=127.0.0.1:2", method).unwrap());
        let before = Cluster::new("b", "b=127.0.0.1:2,c=127.0.0.1:3", method).unwrap();
        let frontier = Arc::new(Frontier::open(dir.path(), Options::new()).unwrap());
        let handoff = dir.path().join("handoff");
        std::fs::create_dir_all(&handoff).unwrap();
        let log = Arc::new(Log::new(Level::Error));
        let moves = Moves::new(cluster.clone(), frontier, handoff.clone(), log.clone());
        moves.begin(&before.canonical, true).unwrap();
        let keys: Vec<String> = (0..1000).map(|i| format!("h{i}.example")).collect();
        let ours = |k: &&String| cluster.nodes[cluster.owner(k.as_bytes())].name == "b";
        let was = |k: &String| before.nodes[before.owner(k.as_bytes())].name.clone();
        let pending = keys.iter().filter(ours).find(|k| was(k) == "c").unwrap();
        let settled = keys.iter().filter(ours).find(|k| was(k) == "b").unwrap();

        let peers = Peers::new(cluster.clone(), None, None).unwrap();
        let (commits, mut jobs) = mpsc::channel::<Job>(8);
        let router = Router::cluster(commits, &peers, &handoff, log)
            .unwrap()
            .with_moves(moves);
        // The committing thread: every op it gets is applied.
        let applied = tokio::spawn(async move {
            let mut applied = Vec::new();
            while let Some(job) = jobs.recv().await {
                applied.extend(job.ops.iter().map(|op| match op {
                    Op::Known { receipt, .. } => receipt.as_ref().unwrap().1,
                    Op::Discover { .. } => 0,
                }));
                let _ = job.reply.send(vec![Outcome::Updated; job.ops.len()]);
            }
            applied
        });

        let from: Arc<str> = Arc::from("a/0000000000000001/0");
        let n = |count: u64| 1 << TAG_BITS | count;
        let mut refused = false;
        let ops = vec![
            known(settled, &from, n(1)),
            known(pending, &from, n(2)),
            known(settled, &from, n(3)),
        ];
        let got = outcomes(&router, ops, &mut refused).await;
        assert_eq!(got, [Outcome::Updated, Outcome::Failed, Outcome::Failed]);
        assert!(refused);
        // A later call of the same stream: its numbered items are refused, its discovered
        // ones are not.
        let discovered = Op::Discover {
            crawl: "c".to_owned(),
            url: format!("http://{settled}/new"),
            key: Some(settled.clone()),
            meta: Vec::new(),
        };
        let ops = vec![known(settled, &from, n(4)), discovered];
        let got = outcomes(&router, ops, &mut refused).await;
        assert_eq!(got, [Outcome::Failed, Outcome::Updated]);
        // Another stream (a fresh start of the lane) is not refused for this one's items.
        let mut fresh = false;
        let got = outcomes(&router, vec![known(settled, &from, n(5))], &mut fresh).await;
        assert_eq!(got, [Outcome::Updated]);
        drop(router);
        assert_eq!(applied.await.unwrap(), [n(1), 0, n(5)]);
    }
}
