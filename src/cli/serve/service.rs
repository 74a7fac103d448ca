//! url-frontier's `URLFrontier` service over a [`Frontier`]: each call mapped onto the
//! library's API. Pushes and known updates go through the group-commit thread
//! ([`super::commit`]); other calls run on the blocking pool, since the library's calls
//! may wait for the disk.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crivello::{Frontier, Handout, HeldPlace, HeldUrl, LeaseRequest, PolicyFields, UrlStatus};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::cluster::Forwarded;
use super::codes;
use super::commit::{Op, Outcome};
use super::forward::{Peers, Router, LANE, LANES, TAG_BITS};
use super::log::{log, Level, Log};
use super::meta;
use super::moves::Moves;
use super::parts;
use super::pb;
use super::pb::url_frontier_server::UrlFrontier;

/// How long a URL handed out stays in transit when `delay_requestable` is 0 (url-frontier's
/// reference service's default).
const DEFAULT_IN_TRANSIT_S: u64 = 30;

/// Queues listed by `ListQueues` when its `size` is 0.
const DEFAULT_QUEUES_PAGE: usize = 100;

/// Items a stream gathers into one job at most (more are read once it is sent).
const ITEMS_PER_JOB: usize = 4096;

/// Bytes of one job at most.
const BYTES_PER_JOB: usize = 4 << 20;

/// Jobs of one stream sent and not acknowledged yet, at most; meanwhile the stream's next job
/// gathers what arrives. Several, so that a stream keeps the committing thread busy while
/// its earlier jobs wait for their fsync, or for another node (a forwarded job's round trip
/// is longer: with 2, forwarding ran at a third of the direct rate, with 16 (and 8 lanes) at
/// more than half). Their bytes stay within the service's in-flight budget.
const JOBS_PER_STREAM: usize = 16;

/// Jobs of a stream whose acknowledgements its client has not taken yet, at most: a client
/// that does not read them stops its own stream, no other.
const ACK_JOBS_PER_STREAM: usize = 2;

/// URLs one walk of `ListURLs` passes (holding the frontier), matches or not, before its
/// page is sent.
const LIST_PAGE: usize = 10_000;

/// URLs a ListURLs answers when its `size` is 0 (the published API's default).
const LIST_DEFAULT: usize = 100;

/// URLs one walk of `CountURLs` with a filter passes (holding the frontier) before it lets
/// go.
const COUNT_PAGE: usize = 100_000;

/// A stream of responses.
type Answer<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The service.
#[derive(Clone)]
pub struct Service {
    frontier: Arc<Frontier>,
    router: Arc<Router>,
    /// The other nodes, in a cluster.
    peers: Option<Peers>,
    /// The moves of queues between nodes, in a cluster.
    moves: Option<Arc<Moves>>,
    log: Arc<Log>,
    /// Bytes of items read from streams and not yet acknowledged, across all streams.
    in_flight: Arc<Semaphore>,
    /// The same, for streams forwarded by other nodes: a budget of their own, so that two
    /// nodes whose clients' streams fill theirs, each waiting for the other, still take each
    /// other's forwarded items.
    in_flight_forwarded: Arc<Semaphore>,
    in_flight_bytes: usize,
    /// The nodes' addresses, as `ListNodes` gives them (this one alone outside a cluster).
    nodes: Vec<String>,
    /// True once the server stops: streams read no more items, acknowledge those read, and
    /// end.
    stopping: watch::Receiver<bool>,
}

impl Service {
    /// The service over `frontier`, sending items through `router`, with at most
    /// `in_flight_bytes` of items held across streams; `peers`: the other nodes of a
    /// cluster; `nodes`: every node's address.
    pub fn new(
        frontier: Arc<Frontier>,
        router: Arc<Router>,
        peers: Option<(Peers, Arc<Moves>)>,
        log: Arc<Log>,
        nodes: Vec<String>,
        in_flight_bytes: usize,
        stopping: watch::Receiver<bool>,
    ) -> Service {
        let (peers, moves) = match peers {
            Some((p, m)) => (Some(p), Some(m)),
            None => (None, None),
        };
        Service {
            frontier,
            router,
            peers,
            moves,
            log,
            in_flight: Arc::new(Semaphore::new(in_flight_bytes)),
            in_flight_forwarded: Arc::new(Semaphore::new(in_flight_bytes)),
            in_flight_bytes,
            nodes,
            stopping,
        }
    }

    /// Runs a library call on the blocking pool.
    async fn call<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Frontier) -> crivello::Result<T> + Send + 'static,
    ) -> Result<T, Status> {
        let frontier = self.frontier.clone();
        let log = self.log.clone();
        match tokio::task::spawn_blocking(move || f(&frontier)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(status_of(&log, what, &e)),
            Err(e) => {
                log!(log, Error, "{what}: {e}");
                Err(Status::internal(format!("{what}: internal error")))
            }
        }
    }

    /// Reads a stream of `In` messages into jobs for the committing thread and answers each
    /// message with an `Out` once its items are durable. `split` turns a message into its
    /// acknowledgement's shape and its items (an op, or an outcome known at once).
    /// `receipts`: the stream is a lane of another node (`NODE/LANE`), whose known items carry
    /// their number there as their ID.
    fn pipeline<In, Out>(
        &self,
        mut inbound: Streaming<In>,
        forwarded: bool,
        receipts: Option<Arc<str>>,
        split: fn(&Frontier, &Log, In) -> (Unit, Vec<Slot>),
        answer: fn(Unit, &[Outcome]) -> Out,
    ) -> Acks<Out>
    where
        In: Send + 'static,
        Out: Send + 'static,
    {
        let (acks, acks_rx) = mpsc::channel(ACK_JOBS_PER_STREAM);
        let (pending, mut pending_rx) = mpsc::channel::<Pending>(JOBS_PER_STREAM);
        let router = self.router.clone();
        let log = self.log.clone();
        let frontier = self.frontier.clone();
        let sem = if forwarded {
            self.in_flight_forwarded.clone()
        } else {
            self.in_flight.clone()
        };
        let cap = self.in_flight_bytes;
        let mut stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut ended = false;
            // A lane's numbered item refused: its later ones are refused too (`refuse_after`,
            // `Router::submit`). `refused`: one of a batch taken before; `read_refused`: one
            // read since (invalid), which refuses the items read after it but not those of
            // its batch read before it.
            let mut refused = false;
            let mut read_refused = false;
            // The status a stream that failed ends with, after the acknowledgements of what
            // it sent before.
            let mut failed = None;
            // Jobs of this stream sent and not yet acknowledged: while they are, the next
            // one gathers what the client sends.
            let jobs = Arc::new(Semaphore::new(JOBS_PER_STREAM));
            let mut batch = Batch::default();
            loop {
                if ended && batch.units.is_empty() {
                    break;
                }
                let full = batch.items >= ITEMS_PER_JOB || batch.bytes >= BYTES_PER_JOB;
                tokio::select! {
                    biased;
                    () = async {
                        let _ = stopping.wait_for(|s| *s).await;
                    }, if !ended => {
                        log!(log, Debug, "a stream ends: the server stops");
                        ended = true;
                        // What the client sends from here is not read: it must learn so,
                        // and send it again to the server when it is back (an OK end of the
                        // stream would say that everything was taken).
                        failed = Some(Status::unavailable(
                            "the server is stopping: items after the last acknowledgement \
                             were not read; send them again once it is back",
                        ));
                    }
                    m = inbound.message(), if !ended && !full => match m {
                        Ok(Some(m)) => {
                            let (unit, mut slots) = split(&frontier, &log, m);
                            if let Some(from) = &receipts {
                                numbered(&unit, &mut slots, from);
                                refuse_after(
                                    &unit,
                                    &mut slots,
                                    refused,
                                    &mut read_refused,
                                );
                            }
                            batch.add((unit, slots));
                        }
                        Ok(None) => ended = true,
                        Err(s) => {
                            log!(log, Warn, "a stream failed: {}", s.message());
                            failed = Some(codes::map_status(s));
                            ended = true;
                        }
                    },
                    slot = jobs.clone().acquire_owned(), if !batch.units.is_empty() => {
                        let Ok(slot) = slot else {
                            break;
                        };
                        let bytes = u32::try_from(batch.bytes.clamp(1, cap)).unwrap_or(u32::MAX);
                        let Ok(permit) = sem.clone().acquire_many_owned(bytes).await else {
                            break;
                        };
                        let (units, slots, ops) = std::mem::take(&mut batch).into_parts();
                        let outcomes = if ops.is_empty() {
                            // Nothing to commit: answered at once.
                            None
                        } else {
                            let lane = receipts.is_some().then_some(&mut refused);
                            let outcomes = router.submit(ops, forwarded, lane).await;
                            refused |= read_refused;
                            outcomes
                        };
                        let p = Pending {
                            units,
                            slots,
                            outcomes,
                            failure: None,
                            _permits: Some((permit, slot)),
                        };
                        if pending.send(p).await.is_err() {
                            break;
                        }
                    }
                }
            }
            if let Some(s) = failed {
                let _ = pending.send(Pending::failure(s)).await;
            }
        });
        tokio::spawn(async move {
            while let Some(p) = pending_rx.recv().await {
                if let Some(s) = p.failure {
                    let _ = acks.send(vec![Err(s)]).await;
                    return;
                }
                let done = match p.outcomes {
                    Some(rx) => rx.await.unwrap_or_default(),
                    None => Vec::new(),
                };
                let mut done = done.into_iter();
                let mut at = 0;
                let mut answers = Vec::with_capacity(p.units.len());
                for (unit, n) in p.units {
                    let outcomes: Vec<Outcome> = p.slots[at..at + n]
                        .iter()
                        .map(|s| match s {
                            SlotState::Ready(o) => *o,
                            SlotState::Op => done.next().unwrap_or(Outcome::Failed),
                        })
                        .collect();
                    at += n;
                    answers.push(Ok(answer(unit, &outcomes)));
                }
                // A job's acknowledgements at once: the response encodes them together.
                if acks.send(answers).await.is_err() {
                    // The client went away.
                    return;
                }
            }
        });
        Acks {
            rx: acks_rx,
            ready: Vec::new().into_iter(),
        }
    }
}

/// The acknowledgements of a stream: each job's come together, and are handed to the
/// response one after the other without waiting, so that they are encoded and written
/// together (one at a time, each woke the response's task and went out in a write of its
/// own).
pub struct Acks<T> {
    rx: mpsc::Receiver<Vec<Result<T, Status>>>,
    ready: std::vec::IntoIter<Result<T, Status>>,
}

impl<T: Unpin> Stream for Acks<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        // Nothing of it is pinned: a receiver and a vector's iterator move freely.
        let this = self.get_mut();
        loop {
            if let Some(a) = this.ready.next() {
                return Poll::Ready(Some(a));
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(batch)) => this.ready = batch.into_iter(),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The acknowledgement a message gets: of one item (`PutURLs`) or of a batch
/// (`PutDiscovered`).
pub struct Unit {
    id: String,
}

/// An item of a message: to commit, or refused at once.
pub enum Slot {
    /// To commit.
    Op(Op, usize),
    /// Refused (or otherwise settled) without the frontier.
    Ready(Outcome),
}

enum SlotState {
    Op,
    Ready(Outcome),
}

/// Messages gathered into one job.
#[derive(Default)]
struct Batch {
    units: Vec<(Unit, usize)>,
    slots: Vec<SlotState>,
    ops: Vec<Op>,
    items: usize,
    bytes: usize,
}

impl Batch {
    fn add(&mut self, (unit, slots): (Unit, Vec<Slot>)) {
        self.units.push((unit, slots.len()));
        for s in slots {
            self.items += 1;
            match s {
                Slot::Op(op, bytes) => {
                    self.bytes += bytes;
                    self.ops.push(op);
                    self.slots.push(SlotState::Op);
                }
                Slot::Ready(o) => self.slots.push(SlotState::Ready(o)),
            }
        }
    }

    fn into_parts(self) -> (Vec<(Unit, usize)>, Vec<SlotState>, Vec<Op>) {
        (self.units, self.slots, self.ops)
    }
}

/// A job sent, waiting for its outcomes.
struct Pending {
    units: Vec<(Unit, usize)>,
    slots: Vec<SlotState>,
    outcomes: Option<oneshot::Receiver<Vec<Outcome>>>,
    /// The status the stream ends with, after what was sent before.
    failure: Option<Status>,
    /// Its bytes among those of every stream, and its place among the stream's jobs.
    _permits: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl Pending {
    fn failure(s: Status) -> Pending {
        Pending {
            units: Vec::new(),
            slots: Vec::new(),
            outcomes: None,
            failure: Some(s),
            _permits: None,
        }
    }
}

/// The status an outcome is acknowledged with.
fn ack_status(o: Outcome) -> pb::ack_message::Status {
    use pb::ack_message::Status as S;
    match o {
        Outcome::New | Outcome::Updated => S::Ok,
        // url-frontier: SKIPPED, "the URL should not be resent, e.g. there is something
        // inherently wrong with it"; FAIL, "the input could be resent".
        Outcome::Seen | Outcome::Refused => S::Skipped,
        Outcome::Failed => S::Fail,
    }
}

/// Seconds since the epoch.
fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `""` as None.
fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// The crawl a message names (`""` is `DEFAULT`), as answers echo it.
fn crawl_name(s: &str) -> String {
    if s.is_empty() {
        "DEFAULT".to_owned()
    } else {
        s.to_owned()
    }
}

/// Why an item is refused, if it is: what a push of it (`known`: an update) would answer.
/// (An update of a URL holding a newline passes, and is refused at its commit when its
/// crawl does not know the URL.)
fn refusal(frontier: &Frontier, url: &str, key: Option<&str>, known: bool) -> Option<String> {
    let (url, key) = (url.as_bytes(), key.map(str::as_bytes));
    match known {
        false => frontier.validate(url, key),
        true => frontier.validate_update(url, key),
    }
    .err()
    .map(|e| e.to_string())
}

/// The gRPC status of a library error.
pub(super) fn status_of(log: &Log, what: &str, e: &crivello::Error) -> Status {
    use crivello::Error as E;
    match e {
        E::InvalidUrl(_) | E::InvalidOption { .. } => {
            log!(log, Warn, "{what}: {e}");
            Status::invalid_argument(format!("{what}: {e}"))
        }
        _ => {
            log!(log, Error, "{what}: {e}");
            Status::internal(format!("{what}: {e}"))
        }
    }
}

/// The most bytes an item's URL, key, crawl and metadata may take, encoded: handed out with
/// the rest of a `URLInfo`, it fits the 4 MiB (4,194,304 bytes) a gRPC client receives by
/// default.
pub const MAX_ITEM: usize = 4_000_000;

/// A discovered or known URL item as the op to commit, or its refusal.
pub fn item_slot(
    frontier: &Frontier,
    log: &Log,
    info: Option<pb::UrlInfo>,
    known: Option<u64>,
    created: u64,
) -> Slot {
    let Some(info) = info else {
        log!(log, Warn, "refused an item without a URL");
        return Slot::Ready(Outcome::Refused);
    };
    let key = non_empty(&info.key).map(str::to_owned);
    if info.crawl_id.len() > crivello::queues::MAX_CRAWL_LEN {
        log!(
            log,
            Warn,
            "refused {:?}: its crawl's name takes {} bytes, over {}",
            truncated(&info.url),
            info.crawl_id.len(),
            crivello::queues::MAX_CRAWL_LEN
        );
        return Slot::Ready(Outcome::Refused);
    }
    if let Some(why) = refusal(frontier, &info.url, key.as_deref(), known.is_some()) {
        log!(log, Warn, "refused {:?}: {why}", truncated(&info.url));
        return Slot::Ready(Outcome::Refused);
    }
    let size = prost::Message::encoded_len(&info);
    if size > MAX_ITEM {
        // Handed out, it would not reach a client of the default message limit (4 MiB in
        // gRPC's libraries, StormCrawler's included), and its hand-out would end the stream
        // that carries it, every time.
        log!(
            log,
            Warn,
            "refused {:?}: its URL, key and metadata take {size} bytes, over {MAX_ITEM}",
            truncated(&info.url)
        );
        return Slot::Ready(Outcome::Refused);
    }
    let created = if created == 0 { now_s() } else { created };
    let meta = meta::encode(info.metadata, created);
    let bytes = info.url.len() + key.as_ref().map_or(0, String::len) + meta.len() + 64;
    let (crawl, url) = (info.crawl_id, info.url);
    let op = match known {
        None => Op::Discover {
            crawl,
            url,
            key,
            meta,
        },
        Some(refetch_s) => Op::Known {
            crawl,
            url,
            key,
            meta,
            refetch_ms: refetch_s.saturating_mul(1000),
            receipt: None,
        },
    };
    Slot::Op(op, bytes)
}

/// A `PutURLs` item: acknowledged by its ID, or by its URL when it has none.
fn split_item(frontier: &Frontier, log: &Log, item: pb::UrlItem) -> (Unit, Vec<Slot>) {
    let (info, known) = match item.item {
        Some(pb::url_item::Item::Discovered(d)) => (d.info, None),
        Some(pb::url_item::Item::Known(k)) => (k.info, Some(k.refetchable_from_date)),
        None => (None, None),
    };
    let id = if item.id.is_empty() {
        info.as_ref().map(|i| i.url.clone()).unwrap_or_default()
    } else {
        item.id
    };
    let slot = item_slot(frontier, log, info, known, item.creation_date);
    (Unit { id }, vec![slot])
}

/// A `PutDiscovered` batch: one acknowledgement, one status per URL.
fn split_batch(frontier: &Frontier, log: &Log, b: pb::DiscoveredBatch) -> (Unit, Vec<Slot>) {
    let slots = b
        .items
        .into_iter()
        .map(|info| item_slot(frontier, log, Some(info), None, 0))
        .collect();
    (Unit { id: b.id }, slots)
}

/// The first 100 characters of a URL, for the log.
fn truncated(url: &str) -> &str {
    match url.char_indices().nth(100) {
        Some((i, _)) => &url[..i],
        None => url,
    }
}

/// `HeldUrl` as url-frontier's known item.
fn known_item(crawl: &str, h: HeldUrl) -> pb::UrlItem {
    let stored = meta::decode(&h.metadata);
    let refetch = match h.status {
        UrlStatus::Refetch { at_ms } => at_ms.div_ceil(1000),
        // Due since it was stored (the reference answers the instant it is scheduled at);
        // 1 for a URL pushed through the library or the command line, whose storing
        // instant is not known (0 would say done).
        _ => stored.created.max(1),
    };
    pb::UrlItem {
        id: String::new(),
        creation_date: stored.created,
        item: Some(pb::url_item::Item::Known(pb::KnownUrlItem {
            info: Some(pb::UrlInfo {
                url: String::from_utf8_lossy(&h.url).into_owned(),
                key: String::from_utf8_lossy(&h.key).into_owned(),
                metadata: stored.metadata,
                crawl_id: crawl.to_owned(),
            }),
            refetchable_from_date: refetch,
        })),
    }
}

/// `url` as an error message names it: its first 200 bytes (at a character's boundary) and
/// its length, when longer. A status's message travels in a header, which clients refuse
/// past 16 KiB (a long URL's NOT_FOUND read as RESOURCE_EXHAUSTED).
fn clipped(url: &str) -> String {
    const SHOWN: usize = 200;
    if url.len() <= SHOWN {
        return url.to_owned();
    }
    let mut end = SHOWN;
    while !url.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &url[..end], url.len())
}

/// Whether `url` passes a `ListURLs` or `CountURLs` filter.
fn matches(url: &[u8], filter: &Option<String>, ignore_case: bool) -> bool {
    let Some(f) = filter.as_deref().filter(|f| !f.is_empty()) else {
        return true;
    };
    let url = String::from_utf8_lossy(url);
    if ignore_case {
        url.to_lowercase().contains(&f.to_lowercase())
    } else {
        url.contains(f)
    }
}

/// How long a call forwarded to another node may take.
const NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Calls `$method` with `$msg` on node `$i` of `$peers`: its answer, or a status naming the
/// node.
macro_rules! on_node {
    ($peers:expr, $i:expr, $method:ident, $msg:expr) => {{
        let (peers, i): (&Peers, usize) = ($peers, $i);
        let mut client = peers.client(i);
        match tokio::time::timeout(NODE_TIMEOUT, client.$method(peers.request($msg))).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(from_node(peers, i, s)),
            Err(_) => Err(from_node(
                peers,
                i,
                Status::deadline_exceeded("no answer in time"),
            )),
        }
    }};
}

/// Calls `$method` with `$msg` on every other node of `$peers`; the answers, or a status
/// naming the nodes not reached (the call reached the others: `$what` may be repeated).
macro_rules! on_others {
    ($peers:expr, $what:expr, $method:ident, $msg:expr) => {{
        let peers: &Peers = $peers;
        let mut answers = Vec::new();
        let mut missed = Vec::new();
        for i in 0..peers.cluster.nodes.len() {
            if i == peers.cluster.me {
                continue;
            }
            match on_node!(peers, i, $method, $msg.clone()) {
                Ok(a) => answers.push(a),
                Err(s) => missed.push(s.message().to_owned()),
            }
        }
        if missed.is_empty() {
            Ok(answers)
        } else {
            Err(Status::unavailable(format!(
                "{}: not every node was reached ({}); the others were: repeat the call once \
                 the nodes are up",
                $what,
                missed.join("; ")
            )))
        }
    }};
}

/// A status of node `i`, naming it.
fn from_node(peers: &Peers, i: usize, s: Status) -> Status {
    let node = &peers.cluster.nodes[i];
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown => {
            Status::unavailable(format!(
                "node {} ({}) cannot be reached: {}",
                node.name,
                node.addr,
                s.message()
            ))
        }
        code => Status::new(code, format!("node {}: {}", node.name, s.message())),
    }
}

/// The count of `GetStats` that says how many records wait in the nodes' hand-off logs (in
/// a cluster).
const HANDOFF_RECORDS: &str = "handoff_records";

/// The count of `GetStats` that is 1 while a move of queues between nodes is under way on
/// the node (in a cluster).
const MOVING: &str = "moving";

/// The count of `GetStats` that is 1 from a node's start until the other nodes' hand-off
/// logs for it are delivered, while it hands out nothing (in a cluster).
const CATCHING_UP: &str = "catching_up";

impl Service {
    /// Refuses a delete while a node's hand-off log holds records: delivered after it, they
    /// would bring back what it deleted.
    async fn no_handoff_waiting(&self, what: &str, peers: &Peers) -> Result<(), Status> {
        let mut waiting = Vec::new();
        let mut moving = Vec::new();
        let here = self.router.handoff_records();
        if here > 0 {
            waiting.push(format!("{here} on node {}", peers.cluster.this().name));
        }
        if self.moves.as_ref().is_some_and(|m| m.moving()) {
            moving.push(peers.cluster.this().name.clone());
        }
        for i in 0..peers.cluster.nodes.len() {
            if i == peers.cluster.me || !waiting.is_empty() {
                continue;
            }
            let msg = pb::QueueWithinCrawlParams {
                key: String::new(),
                crawl_id: String::new(),
                local: true,
            };
            let s = on_node!(peers, i, get_stats, msg)?;
            let n = s.counts.get(HANDOFF_RECORDS).copied().unwrap_or(0);
            if n > 0 {
                waiting.push(format!("{n} on node {}", peers.name(i)));
            }
            if s.counts.get(MOVING).copied().unwrap_or(0) > 0 {
                moving.push(peers.name(i).to_owned());
            }
        }
        if !moving.is_empty() {
            return Err(Status::unavailable(format!(
                "{what}: queues are moving between the nodes (on {}); a queue imported after the \
                 delete would bring back what it deleted: repeat the call once the move is \
                 finished",
                moving.join(", ")
            )));
        }
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(Status::unavailable(format!(
                "{what}: hand-off records wait for delivery ({}); delivered after the delete \
                 they would bring back what it deleted: repeat the call once the nodes they \
                 are for are up and have taken them",
                waiting.join(", ")
            )))
        }
    }
}

/// The sender `NODE/LANE` of a call forwarded by one of another node's lanes, if it says its
/// lane.
fn lane_of<T>(r: &Request<T>) -> Option<Arc<str>> {
    let Forwarded(node) = r.extensions().get::<Forwarded>()?;
    let (lane, store) = r.metadata().get(LANE)?.to_str().ok()?.split_once('/')?;
    let lane: usize = lane.parse().ok()?;
    let store = u64::from_str_radix(store, 16).ok()?;
    (lane < LANES).then(|| Arc::from(format!("{node}/{store:016x}/{lane}")))
}

/// Gives a known item of a lane's stream its receipt: its ID is its number at the sender,
/// `epoch << 40 | count` with an epoch from 1 (an ID that is not such a number: none).
fn numbered(unit: &Unit, slots: &mut [Slot], from: &Arc<str>) {
    if let [Slot::Op(Op::Known { receipt, .. }, _)] = slots {
        if let Ok(seq) = unit.id.parse::<u64>() {
            if seq >> TAG_BITS >= 1 {
                *receipt = Some((from.clone(), seq));
            }
        }
    }
}

/// In a lane's stream, once a numbered item is refused, every later numbered item of the
/// stream is refused too: the owner's receipt, raised by a later item, would otherwise cover
/// the refused one, and the sender's next sending of it would be answered as received. Here,
/// as the stream is read: an item refused at once (invalid) sets `read_refused`, and the
/// numbered items read after it, or after one refused in a batch taken before (`refused`),
/// are refused. The items of keys a move has not brought yet are refused by
/// [`Router::submit`] as it takes their batch, in order with the items of the batch read
/// before: it then sets the stream's `refused`, which takes `read_refused` in too.
fn refuse_after(unit: &Unit, slots: &mut [Slot], refused: bool, read_refused: &mut bool) {
    match &*slots {
        [Slot::Op(
            Op::Known {
                receipt: Some(_), ..
            },
            _,
        )] if refused || *read_refused => slots[0] = Slot::Ready(Outcome::Failed),
        [Slot::Ready(Outcome::Failed | Outcome::Refused)] => {
            *read_refused |= unit.id.parse::<u64>().is_ok_and(|n| n >> TAG_BITS >= 1);
        }
        _ => {}
    }
}

/// Whether a call came from another node.
fn forwarded<T>(r: &Request<T>) -> bool {
    r.extensions().get::<Forwarded>().is_some()
}

/// Who opened a stream, for the log.
fn opener<T>(r: &Request<T>) -> String {
    match r.extensions().get::<Forwarded>() {
        Some(Forwarded(node)) => format!("node {node}"),
        None => "a client".to_owned(),
    }
}

impl Service {
    /// The other nodes a call reaches: those of a cluster, unless `local`.
    fn spread(&self, local: bool) -> Option<&Peers> {
        if local {
            None
        } else {
            self.peers.as_ref()
        }
    }

    /// The node that owns `key` if it is another one and the call is to reach it; an error
    /// when this node owns it and a move has not brought it yet.
    fn elsewhere(&self, local: bool, key: &[u8]) -> Result<Option<(&Peers, usize)>, Status> {
        if let Some(moves) = &self.moves {
            let mine = self
                .peers
                .as_ref()
                .is_some_and(|p| p.cluster.owner(key) == p.cluster.me);
            if mine && !key.is_empty() && moves.pending_key(key) {
                return Err(Status::unavailable(format!(
                    "the queue {} is moving to this node: repeat the call once the move is \
                     finished",
                    String::from_utf8_lossy(key)
                )));
            }
        }
        let Some(peers) = self.spread(local) else {
            return Ok(None);
        };
        let owner = peers.cluster.owner(key);
        Ok((owner != peers.cluster.me).then_some((peers, owner)))
    }

    /// The keys of this node's queues of `crawl` that `ListQueues` lists.
    async fn local_queues(
        &self,
        crawl: String,
        include_inactive: bool,
    ) -> Result<Vec<String>, Status> {
        let all = self
            .call("ListQueues", move |f| {
                // What was acknowledged is in its queue first (on a large store, what was
                // acknowledged since the last merge may take a second or so).
                f.flush_for_reading()?;
                // Blocks end by the frontier's time, which stands still while a clock set
                // back catches up.
                Ok((f.queues(&crawl, 0, usize::MAX)?, f.now_ms()?))
            })
            .await?;
        let (all, now_ms) = all;
        Ok(all
            .into_iter()
            .filter(|q| {
                include_inactive
                    || (q.waiting + q.leased > 0 && q.blocked_until_ms.is_none_or(|b| b <= now_ms))
            })
            .map(|q| String::from_utf8_lossy(&q.key).into_owned())
            .collect())
    }

    /// This node's statistics of `crawl` (of the queue `key`, if any).
    async fn local_stats(&self, crawl: String, key: Option<String>) -> Result<pb::Stats, Status> {
        let name = crawl_name(&crawl);
        let c = self
            .call("GetStats", move |f| {
                f.flush_for_reading()?;
                f.counts(&crawl, key.as_deref().map(str::as_bytes))
            })
            .await?;
        let mut counts = HashMap::from([
            ("completed".to_owned(), c.done),
            ("active_queues".to_owned(), c.queues_active),
        ]);
        if self.peers.is_some() {
            counts.insert(HANDOFF_RECORDS.to_owned(), self.router.handoff_records());
        }
        if let Some(moves) = &self.moves {
            counts.insert(MOVING.to_owned(), u64::from(moves.moving()));
            counts.insert(CATCHING_UP.to_owned(), u64::from(!moves.caught_up()));
        }
        Ok(pb::Stats {
            size: c.waiting + c.leased,
            in_process: u32::try_from(c.leased).unwrap_or(u32::MAX),
            counts,
            number_of_queues: c.queues,
            crawl_id: name,
        })
    }

    /// Sends this node's URLs of `p` that pass its filter to `tx`, skipping the first
    /// `*skip` and sending at most `*left`; false if the stream is to end (an error was sent,
    /// or the client went away).
    ///
    /// The walk goes in pages, each under the frontier's lock for a moment only. A page
    /// resumes just after the URL where the one before stopped (`Frontier::urls_from`),
    /// even inside one long queue, so that the walk's cost is the URLs listed (not the
    /// square of their number), and a URL leased or completed in a place already passed
    /// shifts nothing.
    async fn local_urls(
        &self,
        p: &pb::ListUrlParams,
        tx: &mpsc::Sender<Result<pb::UrlItem, Status>>,
        skip: &mut usize,
        left: &mut usize,
    ) -> bool {
        let crawl = crawl_name(&p.crawl_id);
        let ignore_case = p.ignore_case.unwrap_or(false);
        // Where the next page starts: just after the last URL the pages before walked.
        let mut cursor: Cursor = None;
        loop {
            if *left == 0 {
                return true;
            }
            let (f, c, k, filter) = (
                self.frontier.clone(),
                crawl.clone(),
                non_empty(&p.key).map(str::to_owned),
                p.filter.clone(),
            );
            let want = LIST_PAGE.min(*left);
            let (from, to_skip) = (cursor.take(), *skip);
            let first = from.is_none();
            let page = tokio::task::spawn_blocking(move || {
                if first {
                    // What was pushed before the call is listed.
                    f.flush()?;
                }
                let walk = Walk {
                    crawl: &c,
                    key: k.as_deref(),
                    filter: &filter,
                    ignore_case,
                };
                list_page(&f, &walk, from, to_skip, want)
            })
            .await;
            let (page, skip_left, at, ended) = match page {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => {
                    let _ = tx.send(Err(status_of(&self.log, "ListURLs", &e))).await;
                    return false;
                }
                Err(e) => {
                    log!(self.log, Error, "ListURLs: {e}");
                    let _ = tx
                        .send(Err(Status::internal("ListURLs: internal error")))
                        .await;
                    return false;
                }
            };
            *skip = skip_left;
            *left -= page.len();
            cursor = at;
            for h in page {
                if tx.send(Ok(known_item(&crawl, h))).await.is_err() {
                    return false;
                }
            }
            if ended {
                // The walk saw every match of this node: those skipped are off the count.
                return true;
            }
        }
    }
}
/// What a ListURLs walks: a crawl, or one key's queue of it, and the filter of its URLs.
struct Walk<'a> {
    crawl: &'a str,
    key: Option<&'a str>,
    filter: &'a Option<String>,
    ignore_case: bool,
}

/// Where a page of a ListURLs walk starts: just after the place where the page before
/// stopped (`None`: at the first URL).
type Cursor = Option<HeldPlace>;

/// One page of a ListURLs walk (under the frontier's lock): from `from` on, passing over
/// `to_skip` more matches, at most `want` URLs, walking at most [`LIST_PAGE`] URLs. Returns
/// them, the matches still to skip, where the next page starts, and whether the walk
/// reached the end.
fn list_page(
    f: &Frontier,
    walk: &Walk<'_>,
    from: Cursor,
    to_skip: usize,
    want: usize,
) -> crivello::Result<(Vec<HeldUrl>, usize, Cursor, bool)> {
    let mut page = Vec::new();
    let (_, to_skip, at, ended) =
        walk_page(f, walk, (from, LIST_PAGE), to_skip, want, |h| page.push(h))?;
    Ok((page, to_skip, at, ended))
}

/// [`list_page`], walking at most `most` URLs (matches or not) and giving each URL of the
/// page to `take`; returns how many it took.
fn walk_page(
    f: &Frontier,
    walk: &Walk<'_>,
    (from, most): (Cursor, usize),
    mut to_skip: usize,
    want: usize,
    mut take: impl FnMut(HeldUrl),
) -> crivello::Result<(usize, usize, Cursor, bool)> {
    let (mut taken_here, mut walked, mut ended) = (0usize, 0usize, true);
    let at = f.urls_from(
        walk.crawl,
        walk.key.map(str::as_bytes),
        from.as_ref(),
        |h| {
            walked += 1;
            let go_on = if !matches(&h.url, walk.filter, walk.ignore_case) {
                true
            } else if to_skip > 0 {
                to_skip -= 1;
                true
            } else {
                take(h);
                taken_here += 1;
                taken_here < want
            };
            // The page ends at `want` URLs taken, or `most` walked.
            ended = go_on && walked < most;
            ended
        },
    )?;
    Ok((taken_here, to_skip, at, ended))
}

/// Matches of `walk` this node holds (after one flush): without a filter, the queues'
/// counts; with one, counted in pages of `page` URLs ([`COUNT_PAGE`]), each under the
/// frontier's lock for a moment.
fn count_urls(f: &Frontier, walk: &Walk<'_>, page: usize) -> crivello::Result<u64> {
    f.flush()?;
    if walk.filter.as_deref().is_none_or(str::is_empty) {
        let c = f.counts(walk.crawl, walk.key.map(str::as_bytes))?;
        return Ok(c.waiting + c.leased);
    }
    let (mut n, mut cursor) = (0u64, None);
    loop {
        let (taken, _, next, ended) = walk_page(f, walk, (cursor, page), 0, usize::MAX, drop)?;
        n += taken as u64;
        if ended {
            return Ok(n);
        }
        cursor = next;
    }
}

#[tonic::async_trait]
impl UrlFrontier for Service {
    async fn list_nodes(&self, _: Request<pb::Empty>) -> Result<Response<pb::StringList>, Status> {
        Ok(Response::new(pb::StringList {
            values: self.nodes.clone(),
        }))
    }

    async fn list_crawls(&self, r: Request<pb::Local>) -> Result<Response<pb::StringList>, Status> {
        let local = r.into_inner().local;
        let mut values = self.call("ListCrawls", |f| f.crawls()).await?;
        if let Some(peers) = self.spread(local) {
            let others = on_others!(peers, "ListCrawls", list_crawls, pb::Local { local: true })?;
            values.extend(others.into_iter().flat_map(|l| l.values));
            values.sort();
            values.dedup();
        }
        Ok(Response::new(pb::StringList { values }))
    }

    async fn delete_crawl(
        &self,
        r: Request<pb::DeleteCrawlMessage>,
    ) -> Result<Response<pb::Long>, Status> {
        let p = r.into_inner();
        if let Some(peers) = self.spread(p.local) {
            self.no_handoff_waiting("DeleteCrawl", peers).await?;
        }
        let crawl = p.value.clone();
        log!(self.log, Info, "deleting crawl {:?}", crawl_name(&crawl));
        let mut value = self
            .call("DeleteCrawl", move |f| f.delete_crawl(&crawl))
            .await?;
        if let Some(peers) = self.spread(p.local) {
            let msg = pb::DeleteCrawlMessage {
                value: p.value,
                local: true,
            };
            let others = on_others!(peers, "DeleteCrawl", delete_crawl, msg)?;
            value += others.iter().map(|l| l.value).sum::<u64>();
        }
        Ok(Response::new(pb::Long { value }))
    }

    async fn list_queues(
        &self,
        r: Request<pb::Pagination>,
    ) -> Result<Response<pb::QueueList>, Status> {
        let p = r.into_inner();
        let mut listed = self
            .local_queues(p.crawl_id.clone(), p.include_inactive)
            .await?;
        if let Some(peers) = self.spread(p.local) {
            // Every node's list, in node order; the page is cut from all of them.
            let msg = pb::Pagination {
                start: 0,
                size: u32::MAX,
                include_inactive: p.include_inactive,
                crawl_id: p.crawl_id.clone(),
                local: true,
            };
            let mut all = Vec::new();
            for i in 0..peers.cluster.nodes.len() {
                if i == peers.cluster.me {
                    all.append(&mut listed);
                } else {
                    all.extend(on_node!(peers, i, list_queues, msg.clone())?.values);
                }
            }
            listed = all;
        }
        let total = listed.len() as u64;
        let size = if p.size == 0 {
            DEFAULT_QUEUES_PAGE
        } else {
            p.size as usize
        };
        let values: Vec<String> = listed
            .into_iter()
            .skip(p.start as usize)
            .take(size)
            .collect();
        Ok(Response::new(pb::QueueList {
            size: values.len() as u32,
            values,
            total,
            start: p.start,
            crawl_id: crawl_name(&p.crawl_id),
        }))
    }

    type GetURLsStream = Pin<Box<parts::Parts>>;

    async fn get_ur_ls(
        &self,
        r: Request<pb::GetParams>,
    ) -> Result<Response<Self::GetURLsStream>, Status> {
        // A node hands out URLs of its own queues only: a host is fetched through its owner.
        let p = r.into_inner();
        if self.moves.as_ref().is_some_and(|m| !m.caught_up()) {
            // Just started: the items other nodes kept for this one while it was down come
            // first (`Moves::catch_up`).
            log!(
                self.log,
                Debug,
                "GetURLs: nothing handed out until the other nodes' hand-off logs for this \
                 node are delivered"
            );
            return Ok(Response::new(Box::pin(parts::Parts::empty())));
        }
        let crawl = match p.item {
            Some(pb::get_params::Item::CrawlId(c)) => Some(c),
            Some(pb::get_params::Item::AnyCrawlId(_)) | None => None,
        };
        let in_transit_s = if p.delay_requestable == 0 {
            DEFAULT_IN_TRANSIT_S
        } else {
            u64::from(p.delay_requestable)
        };
        let req = LeaseRequest {
            max_urls: usize::MAX,
            max_queues: if p.max_queues == 0 {
                usize::MAX
            } else {
                p.max_queues as usize
            },
            per_queue: (p.max_urls_per_queue > 0).then_some(p.max_urls_per_queue),
            ttl_ms: in_transit_s * 1000,
            crawl,
            key: non_empty(&p.key).map(|k| k.as_bytes().to_vec()),
        };
        let (handout, first) = self
            .call("GetURLs", move |f| {
                let mut handout = Handout::new(req);
                let first = f.lease_part(&mut handout, parts::FIRST_PART_QUEUES)?;
                Ok((handout, first))
            })
            .await?;
        let urls = parts::stream(
            self.frontier.clone(),
            handout,
            first,
            self.stopping.clone(),
            self.log.clone(),
        );
        Ok(Response::new(Box::pin(urls)))
    }

    type PutURLsStream = Acks<pb::AckMessage>;

    async fn put_ur_ls(
        &self,
        r: Request<Streaming<pb::UrlItem>>,
    ) -> Result<Response<Self::PutURLsStream>, Status> {
        log!(self.log, Debug, "PutURLs: {} opens a stream", opener(&r));
        let from_node = forwarded(&r);
        let receipts = lane_of(&r);
        let stream = self.pipeline(
            r.into_inner(),
            from_node,
            receipts,
            split_item,
            |unit, o| pb::AckMessage {
                id: unit.id,
                status: ack_status(o.first().copied().unwrap_or(Outcome::Failed)) as i32,
            },
        );
        Ok(Response::new(stream))
    }

    async fn get_stats(
        &self,
        r: Request<pb::QueueWithinCrawlParams>,
    ) -> Result<Response<pb::Stats>, Status> {
        let p = r.into_inner();
        if let Some((peers, i)) = self.elsewhere(p.local, p.key.as_bytes())? {
            if !p.key.is_empty() {
                let msg = pb::QueueWithinCrawlParams { local: true, ..p };
                return Ok(Response::new(on_node!(peers, i, get_stats, msg)?));
            }
        }
        let key = non_empty(&p.key).map(str::to_owned);
        let mut stats = self.local_stats(p.crawl_id.clone(), key).await?;
        if let Some(peers) = self.spread(p.local).filter(|_| p.key.is_empty()) {
            let msg = pb::QueueWithinCrawlParams {
                local: true,
                ..p.clone()
            };
            for s in on_others!(peers, "GetStats", get_stats, msg)? {
                stats.size += s.size;
                stats.in_process = stats.in_process.saturating_add(s.in_process);
                stats.number_of_queues += s.number_of_queues;
                for (k, v) in s.counts {
                    *stats.counts.entry(k).or_insert(0) += v;
                }
            }
        }
        Ok(Response::new(stats))
    }

    async fn delete_queue(
        &self,
        r: Request<pb::QueueWithinCrawlParams>,
    ) -> Result<Response<pb::Long>, Status> {
        let p = r.into_inner();
        if p.key.is_empty() {
            return Err(Status::invalid_argument("DeleteQueue: the key is empty"));
        }
        if let Some(peers) = self.spread(p.local) {
            self.no_handoff_waiting("DeleteQueue", peers).await?;
        }
        if let Some((peers, i)) = self.elsewhere(p.local, p.key.as_bytes())? {
            let msg = pb::QueueWithinCrawlParams { local: true, ..p };
            return Ok(Response::new(on_node!(peers, i, delete_queue, msg)?));
        }
        let value = self
            .call("DeleteQueue", move |f| {
                f.delete_queue(&p.crawl_id, p.key.as_bytes())
            })
            .await?;
        Ok(Response::new(pb::Long { value }))
    }

    async fn block_queue_until(
        &self,
        r: Request<pb::BlockQueueParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        let p = r.into_inner();
        if p.key.is_empty() {
            return Err(Status::invalid_argument(
                "BlockQueueUntil: the key is empty",
            ));
        }
        if let Some((peers, i)) = self.elsewhere(p.local, p.key.as_bytes())? {
            let msg = pb::BlockQueueParams { local: true, ..p };
            return Ok(Response::new(on_node!(peers, i, block_queue_until, msg)?));
        }
        let until_ms = p.time.saturating_mul(1000);
        self.call("BlockQueueUntil", move |f| {
            f.block(&p.crawl_id, p.key.as_bytes(), until_ms)
        })
        .await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn set_active(&self, r: Request<pb::Active>) -> Result<Response<pb::Empty>, Status> {
        let p = r.into_inner();
        let on = p.state;
        log!(
            self.log,
            Info,
            "hand-outs {}",
            if on { "resumed" } else { "paused" }
        );
        self.call("SetActive", move |f| f.set_paused(!on)).await?;
        if let Some(peers) = self.spread(p.local) {
            let msg = pb::Active {
                state: on,
                local: true,
            };
            on_others!(peers, "SetActive", set_active, msg)?;
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn get_active(&self, r: Request<pb::Local>) -> Result<Response<pb::Boolean>, Status> {
        let local = r.into_inner().local;
        let s = self.call("GetActive", |f| f.stats()).await?;
        let mut state = !s.paused;
        // In a cluster: active only if every node is (the published API's `local` false).
        if let Some(peers) = self.spread(local) {
            let msg = pb::Local { local: true };
            let others = on_others!(peers, "GetActive", get_active, msg)?;
            state &= others.iter().all(|b| b.state);
        }
        Ok(Response::new(pb::Boolean { state }))
    }

    async fn set_delay(
        &self,
        r: Request<pb::QueueDelayParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        let p = r.into_inner();
        if !p.key.is_empty() {
            if let Some((peers, i)) = self.elsewhere(p.local, p.key.as_bytes())? {
                let msg = pb::QueueDelayParams { local: true, ..p };
                return Ok(Response::new(on_node!(peers, i, set_delay, msg)?));
            }
        }
        let delay_ms = u64::from(p.delay_requestable) * 1000;
        let q = p.clone();
        self.call("SetDelay", move |f| {
            // The queue's delay (its ratio rule off), or the default's: its other fields
            // stay as they are, or follow the default's.
            let key = non_empty(&q.key).map(str::as_bytes);
            let fields = PolicyFields {
                delay_ms: Some(delay_ms),
                ratio_ppm: Some(0),
                ..Default::default()
            };
            f.change_policy(&q.crawl_id, key, fields)
        })
        .await?;
        if let Some(peers) = self.spread(p.local).filter(|_| p.key.is_empty()) {
            let msg = pb::QueueDelayParams { local: true, ..p };
            on_others!(peers, "SetDelay", set_delay, msg)?;
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn set_log_level(
        &self,
        r: Request<pb::LogLevelParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        use pb::log_level_params::Level as L;
        let p = r.into_inner();
        let level = match L::try_from(p.level) {
            Ok(L::Trace) => Level::Trace,
            Ok(L::Debug) => Level::Debug,
            Ok(L::Info) => Level::Info,
            Ok(L::Warn) => Level::Warn,
            Ok(L::Error) => Level::Error,
            Err(_) => return Err(Status::invalid_argument("SetLogLevel: unknown level")),
        };
        self.log.set_level(level);
        log!(self.log, Info, "log level set to {level:?}");
        if let Some(peers) = self.spread(p.local) {
            let msg = pb::LogLevelParams { local: true, ..p };
            on_others!(peers, "SetLogLevel", set_log_level, msg)?;
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn set_crawl_limit(
        &self,
        r: Request<pb::CrawlLimitParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        let p = r.into_inner();
        if !p.key.is_empty() {
            if let Some((peers, i)) = self.elsewhere(p.local, p.key.as_bytes())? {
                let msg = pb::CrawlLimitParams { local: true, ..p };
                return Ok(Response::new(on_node!(peers, i, set_crawl_limit, msg)?));
            }
        }
        let limit = u64::from(p.limit);
        let q = p.clone();
        self.call("SetCrawlLimit", move |f| {
            let key = non_empty(&q.key).map(str::as_bytes);
            let fields = PolicyFields {
                limit: Some(limit),
                ..Default::default()
            };
            f.change_policy(&q.crawl_id, key, fields)
        })
        .await?;
        if let Some(peers) = self.spread(p.local).filter(|_| p.key.is_empty()) {
            let msg = pb::CrawlLimitParams { local: true, ..p };
            on_others!(peers, "SetCrawlLimit", set_crawl_limit, msg)?;
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn get_url_status(
        &self,
        r: Request<pb::UrlStatusRequest>,
    ) -> Result<Response<pb::UrlItem>, Status> {
        let local = forwarded(&r);
        let p = r.into_inner();
        if p.url.is_empty() {
            return Err(Status::invalid_argument("GetURLStatus: the URL is empty"));
        }
        // A key no push would take is refused as the other calls refuse it, not answered
        // "not known". (A URL is not judged by this server's limit: one pushed under a
        // larger limit is still found.)
        if p.key.len() > crivello::queues::key::MAX_KEY_LEN {
            return Err(Status::invalid_argument(format!(
                "GetURLStatus: invalid key: longer than {} bytes",
                crivello::queues::key::MAX_KEY_LEN
            )));
        }
        let owner_key = match non_empty(&p.key) {
            Some(k) => k.as_bytes().to_vec(),
            None => crivello::queues::key::default_key(p.url.as_bytes()).to_vec(),
        };
        if let Some((peers, i)) = self.elsewhere(local, &owner_key)? {
            return Ok(Response::new(on_node!(peers, i, get_url_status, p)?));
        }
        let crawl = crawl_name(&p.crawl_id);
        let (url, key) = (p.url.clone(), non_empty(&p.key).map(str::to_owned));
        let c = crawl.clone();
        let found = self
            .call("GetURLStatus", move |f| {
                let key = key.as_deref().map(str::as_bytes);
                // One walk of the queue at most, which stops at the URL.
                let Some(h) = f.lookup(&c, key, url.as_bytes())? else {
                    return Ok(None);
                };
                let host = crivello::queues::key::default_key(url.as_bytes());
                let asked = key.unwrap_or(host);
                match h.status {
                    // Leased from a queue of a key of its own, asked without it: answered as
                    // the queue asked holds it, due again at the lease's end if not acked.
                    UrlStatus::Leased { until_ms } if h.key != asked && h.key != host => {
                        Ok(Some(HeldUrl {
                            key: asked.to_vec(),
                            url: h.url,
                            metadata: Vec::new(),
                            status: UrlStatus::Refetch { at_ms: until_ms },
                        }))
                    }
                    _ => Ok(Some(h)),
                }
            })
            .await?;
        match found {
            None => Err(Status::not_found(format!(
                "{} is not known",
                clipped(&p.url)
            ))),
            Some(h) if h.status == UrlStatus::Done => {
                let mut item = known_item(&crawl, h);
                if let Some(pb::url_item::Item::Known(k)) = &mut item.item {
                    k.refetchable_from_date = 0;
                }
                Ok(Response::new(item))
            }
            Some(h) => Ok(Response::new(known_item(&crawl, h))),
        }
    }

    type ListURLsStream = Answer<pb::UrlItem>;

    async fn list_ur_ls(
        &self,
        r: Request<pb::ListUrlParams>,
    ) -> Result<Response<Self::ListURLsStream>, Status> {
        let asked_by_node = forwarded(&r);
        let p = r.into_inner();
        // The nodes to walk, in order: the key's owner alone, or every node.
        let nodes: Vec<usize> = match self.spread(p.local) {
            None => vec![usize::MAX],
            Some(peers) if !p.key.is_empty() => vec![peers.cluster.owner(p.key.as_bytes())],
            Some(peers) => (0..peers.cluster.nodes.len()).collect(),
        };
        let (tx, rx) = mpsc::channel(LIST_PAGE);
        let me = self.peers.as_ref().map_or(usize::MAX, |p| p.cluster.me);
        let this = self.clone();
        tokio::spawn(async move {
            let mut skip = p.start as usize;
            // 0: 100, as url-frontier's reference service answers; a node asks another for
            // as many as it needs, and an older build asked for all with 0.
            let mut left = match p.size {
                0 if asked_by_node => usize::MAX,
                0 => LIST_DEFAULT,
                n => n as usize,
            };
            for i in nodes {
                if left == 0 {
                    return;
                }
                if i == usize::MAX || i == me {
                    if !this.local_urls(&p, &tx, &mut skip, &mut left).await {
                        return;
                    }
                    continue;
                }
                let Some(peers) = this.peers.as_ref() else {
                    return;
                };
                // The node's matches up to the window's end; the window is cut here.
                let msg = pb::ListUrlParams {
                    start: 0,
                    size: u32::try_from(skip.saturating_add(left)).unwrap_or(u32::MAX),
                    local: true,
                    ..p.clone()
                };
                let mut client = peers.client(i);
                let mut items = match client.list_ur_ls(peers.request(msg)).await {
                    Ok(s) => s.into_inner(),
                    Err(s) => {
                        let _ = tx.send(Err(from_node(peers, i, s))).await;
                        return;
                    }
                };
                loop {
                    match items.message().await {
                        Ok(Some(item)) => {
                            if skip > 0 {
                                skip -= 1;
                                continue;
                            }
                            if tx.send(Ok(item)).await.is_err() {
                                return;
                            }
                            left -= 1;
                            if left == 0 {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            let _ = tx.send(Err(from_node(peers, i, s))).await;
                            return;
                        }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn count_ur_ls(
        &self,
        r: Request<pb::CountUrlParams>,
    ) -> Result<Response<pb::Long>, Status> {
        let p = r.into_inner();
        let local = p.local.unwrap_or(false);
        if !p.key.is_empty() {
            if let Some((peers, i)) = self.elsewhere(local, p.key.as_bytes())? {
                let msg = pb::CountUrlParams {
                    local: Some(true),
                    ..p
                };
                return Ok(Response::new(on_node!(peers, i, count_ur_ls, msg)?));
            }
        }
        let ignore_case = p.ignore_case.unwrap_or(false);
        let q = p.clone();
        let mut value = self
            .call("CountURLs", move |f| {
                let walk = Walk {
                    crawl: &q.crawl_id,
                    key: non_empty(&q.key),
                    filter: &q.filter,
                    ignore_case,
                };
                count_urls(f, &walk, COUNT_PAGE)
            })
            .await?;
        if let Some(peers) = self.spread(local).filter(|_| p.key.is_empty()) {
            let msg = pb::CountUrlParams {
                local: Some(true),
                ..p
            };
            value += on_others!(peers, "CountURLs", count_ur_ls, msg)?
                .iter()
                .map(|l| l.value)
                .sum::<u64>();
        }
        Ok(Response::new(pb::Long { value }))
    }

    type PutDiscoveredStream = Acks<pb::BatchAck>;

    async fn put_discovered(
        &self,
        r: Request<Streaming<pb::DiscoveredBatch>>,
    ) -> Result<Response<Self::PutDiscoveredStream>, Status> {
        log!(
            self.log,
            Debug,
            "PutDiscovered: {} opens a stream",
            opener(&r)
        );
        let from_node = forwarded(&r);
        let stream = self.pipeline(r.into_inner(), from_node, None, split_batch, |unit, o| {
            pb::BatchAck {
                id: unit.id,
                statuses: o.iter().map(|&o| ack_status(o) as i32).collect(),
            }
        });
        Ok(Response::new(stream))
    }

    async fn purge_ur_ls(
        &self,
        r: Request<pb::PurgeUrlParams>,
    ) -> Result<Response<pb::Long>, Status> {
        let local = forwarded(&r);
        let p = r.into_inner();
        if !p.key.is_empty() {
            if let Some((peers, i)) = self.elsewhere(local, p.key.as_bytes())? {
                return Ok(Response::new(on_node!(peers, i, purge_ur_ls, p)?));
            }
        }
        let before = now_s().saturating_sub(u64::from(p.days) * 86_400);
        let q = p.clone();
        let mut value = self
            .call("PurgeURLs", move |f| {
                // Each page of the walk completes what it picks in the same step: a URL a
                // fetcher schedules again meanwhile is judged by its new version.
                f.purge(
                    &q.crawl_id,
                    non_empty(&q.key).map(str::as_bytes),
                    LIST_PAGE,
                    |h| {
                        // A URL whose storing instant is not known (pushed through the library
                        // or the command line) is older than 0 days only: it was stored by now.
                        // Seconds are whole: with 0 days, a URL stored in the call's own
                        // second is purged too.
                        match meta::decode(&h.metadata).created {
                            0 => q.days == 0,
                            created => created <= before,
                        }
                    },
                )
            })
            .await?;
        if let Some(peers) = self.spread(local).filter(|_| p.key.is_empty()) {
            value += on_others!(peers, "PurgeURLs", purge_ur_ls, p)?
                .iter()
                .map(|l| l.value)
                .sum::<u64>();
        }
        Ok(Response::new(pb::Long { value }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ListURLs walk in pages resumes at the queue where the page before stopped: what
    /// changes meanwhile in a queue already passed (a URL completed, a URL put) shifts
    /// nothing, and every URL of the queues after it is listed once; the walk's window
    /// (`start`) and its filter count as before.
    #[test]
    fn a_list_walk_in_pages_resumes_at_its_queue() {
        let dir = tempfile::tempdir().unwrap();
        let f = Frontier::open(dir.path(), crivello::Options::new().memory(8 << 20)).unwrap();
        let hosts: Vec<String> = (0..6).map(|h| format!("h{h}.t")).collect();
        let url = |h: &str, j: usize| format!("http://{h}/{j}");
        let urls: Vec<String> = (hosts.iter())
            .flat_map(|h| (0..9).map(move |j| url(h, j)))
            .collect();
        let items: Vec<crivello::Discovered<'_>> = (urls.iter())
            .map(|u| crivello::Discovered::url(u.as_bytes()))
            .collect();
        f.push("", &items).unwrap();
        // A listing flushes before its first page.
        f.flush().unwrap();
        let none = None;
        let walk = Walk {
            crawl: "",
            key: None,
            filter: &none,
            ignore_case: false,
        };
        let texts = |page: &[HeldUrl]| -> Vec<String> {
            (page.iter())
                .map(|h| String::from_utf8(h.url.clone()).unwrap())
                .collect()
        };
        // Pages of 4 after skipping 3: the page boundaries fall within queues.
        let (mut all, mut cursor, mut skip) = (Vec::new(), None, 3);
        let mut round = 0;
        loop {
            let (page, left, next, ended) = list_page(&f, &walk, cursor, skip, 4).unwrap();
            all.extend(texts(&page));
            (cursor, skip) = (next, left);
            if ended {
                break;
            }
            round += 1;
            if round == 2 {
                // 11 matches taken: queue h0 passed, the walk in h1. A URL of h0 completed
                // shifts nothing (a walk from the first queue would list one URL twice); one
                // of h3, not reached yet, is not listed.
                for done in [url("h0.t", 1), url("h3.t", 4)] {
                    let item = crivello::Known {
                        url: done.as_bytes(),
                        key: None,
                        metadata: b"",
                        refetch_ms: 0,
                    };
                    f.update("", &[item]).unwrap();
                }
            }
        }
        assert_eq!(skip, 0);
        let expected: Vec<String> = (urls[3..].iter())
            .filter(|u| **u != url("h3.t", 4))
            .cloned()
            .collect();
        assert_eq!(all, expected);
        // A filter counts its matches only, and a skip past them all is left over.
        let seven = Some("/7".to_owned());
        let walk = Walk {
            filter: &seven,
            ..walk
        };
        let (page, left, _, ended) = list_page(&f, &walk, None, 2, 100).unwrap();
        let sevens: Vec<String> = hosts[2..].iter().map(|h| url(h, 7)).collect();
        assert_eq!((texts(&page), left, ended), (sevens.clone(), 0, true));
        let (page, left, _, ended) = list_page(&f, &walk, None, 10, 100).unwrap();
        assert_eq!((page.len(), left, ended), (0, 4, true));
        // A page ends after so many URLs walked, matches or not: a rare filter (or a skip
        // far ahead) holds the frontier a page at a time, and the pages resume in place.
        let (mut got, mut cursor, mut pages, mut skip) = (Vec::new(), None, 0, 2);
        loop {
            let at = (cursor, 5);
            let (_, left, next, ended) =
                walk_page(&f, &walk, at, skip, 100, |h| got.push(h.url)).unwrap();
            pages += 1;
            if ended {
                break;
            }
            (cursor, skip) = (next, left);
        }
        let sevens: Vec<Vec<u8>> = sevens.into_iter().map(String::into_bytes).collect();
        assert_eq!(got, sevens);
        assert!(pages > urls.len() / 5, "{pages} pages");
        // Counted in pages of 4 or at once, the same; without a filter, from the queues'
        // counts, which agree with a walk of every URL.
        let held = urls.len() as u64 - 2;
        let every = Some(String::new());
        for page in [4, 5, 1000] {
            assert_eq!(count_urls(&f, &walk, page).unwrap(), hosts.len() as u64);
            let all = Walk {
                filter: &none,
                ..walk
            };
            assert_eq!(count_urls(&f, &all, page).unwrap(), held, "pages of {page}");
            let (walked, _, _, _) =
                walk_page(&f, &all, (None, usize::MAX), 0, usize::MAX, drop).unwrap();
            assert_eq!(walked as u64, held);
            let empty = Walk {
                filter: &every,
                ..walk
            };
            assert_eq!(count_urls(&f, &empty, page).unwrap(), held);
        }
        // Leased, returned (a retry), to fetch again: the counts agree with a walk, for the
        // crawl, for one key, for an unknown key and an unknown crawl.
        let leased = f.lease(3, Some(2), 60_000).unwrap();
        assert!(leased.len() >= 3);
        let ended = f
            .complete(&[
                (leased[0].token, 0, crivello::Completion::Retry),
                (
                    leased[1].token,
                    0,
                    crivello::Completion::RefetchAt(u64::MAX / 2),
                ),
            ])
            .unwrap();
        assert_eq!(ended, [true, true]);
        let all = Walk {
            filter: &none,
            ..walk
        };
        let with_seven = Walk {
            filter: &every,
            ..walk
        };
        for (crawl, key) in [
            ("", None),
            ("", Some("h2.t")),
            ("", Some("nowhere")),
            ("x", None),
        ] {
            for w in [&all, &with_seven] {
                let w = Walk { crawl, key, ..*w };
                let at = (None, usize::MAX);
                let (walked, _, _, _) = walk_page(&f, &w, at, 0, usize::MAX, drop).unwrap();
                assert_eq!(
                    count_urls(&f, &w, 4).unwrap(),
                    walked as u64,
                    "{crawl} {key:?}"
                );
            }
        }
    }

    fn numbered(n: u64) -> (Unit, Vec<Slot>) {
        let from: Arc<str> = Arc::from("a/0000000000000001/0");
        let op = Op::Known {
            crawl: "c".to_owned(),
            url: format!("http://h.example/{n}"),
            key: None,
            meta: Vec::new(),
            refetch_ms: 0,
            receipt: Some((from, n)),
        };
        (Unit { id: n.to_string() }, vec![Slot::Op(op, 0)])
    }

    fn refused(slots: &[Slot]) -> bool {
        matches!(slots, [Slot::Ready(Outcome::Failed | Outcome::Refused)])
    }

    /// An invalid numbered item refuses the numbered items read after it, not those read
    /// before it (still to be taken with their batch); a refusal of a batch taken before
    /// refuses every numbered item read after it; other items are left alone.
    #[test]
    fn a_lane_refuses_what_it_reads_after_a_refused_item_only() {
        let n = |c: u64| 1 << TAG_BITS | c;
        let mut read_refused = false;
        let (unit, mut before) = numbered(n(1));
        refuse_after(&unit, &mut before, false, &mut read_refused);
        assert!(!refused(&before) && !read_refused);
        let (unit, mut invalid) = (
            Unit {
                id: n(2).to_string(),
            },
            vec![Slot::Ready(Outcome::Refused)],
        );
        refuse_after(&unit, &mut invalid, false, &mut read_refused);
        assert!(read_refused);
        let (unit, mut after) = numbered(n(3));
        refuse_after(&unit, &mut after, false, &mut read_refused);
        assert!(refused(&after));
        // An invalid item that is not numbered (a client's ID) refuses nothing after it.
        let mut read_refused = false;
        let (unit, mut invalid) = (
            Unit { id: "x".to_owned() },
            vec![Slot::Ready(Outcome::Failed)],
        );
        refuse_after(&unit, &mut invalid, false, &mut read_refused);
        assert!(!read_refused);
        // A batch refused before: every numbered item read since is refused.
        let (unit, mut later) = numbered(n(4));
        refuse_after(&unit, &mut later, true, &mut read_refused);
        assert!(refused(&later));
    }
}
