//! url-frontier's `URLFrontier` service over a [`Frontier`]: each call mapped onto the
//! library's API. Pushes and known updates go through the group-commit thread
//! ([`super::commit`]); other calls run on the blocking pool, since the library's calls
//! may wait for the disk.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crivello::{Frontier, HeldUrl, LeaseRequest, Policy, UrlStatus};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::codes;
use super::commit::{Job, Op, Outcome};
use super::log::{log, Level, Log};
use super::meta;
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

/// Jobs of one stream sent and not acknowledged yet, at most: one committing, one waiting
/// its turn; meanwhile the stream's next job gathers what arrives.
const JOBS_PER_STREAM: usize = 2;

/// Acknowledgements of a stream not yet taken by its client, at most: a client that does
/// not read them stops its own stream, no other.
const ACKS_PER_STREAM: usize = 4096;

/// URLs one walk of `ListURLs` collects (holding the frontier) before it is sent.
const LIST_PAGE: usize = 10_000;

/// A stream of responses.
type Answer<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The service.
pub struct Service {
    frontier: Arc<Frontier>,
    commits: mpsc::Sender<Job>,
    log: Arc<Log>,
    /// Bytes of items read from streams and not yet acknowledged, across all streams.
    in_flight: Arc<Semaphore>,
    in_flight_bytes: usize,
    /// This node, as `ListNodes` gives it.
    node: String,
    /// True once the server stops: streams read no more items, acknowledge those read, and
    /// end.
    stopping: watch::Receiver<bool>,
}

impl Service {
    /// The service over `frontier`, committing through `commits`, with at most
    /// `in_flight_bytes` of items held across streams.
    pub fn new(
        frontier: Arc<Frontier>,
        commits: mpsc::Sender<Job>,
        log: Arc<Log>,
        node: String,
        in_flight_bytes: usize,
        stopping: watch::Receiver<bool>,
    ) -> Service {
        Service {
            frontier,
            commits,
            log,
            in_flight: Arc::new(Semaphore::new(in_flight_bytes)),
            in_flight_bytes,
            node,
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
    fn pipeline<In, Out>(
        &self,
        mut inbound: Streaming<In>,
        split: fn(&Frontier, &Log, In) -> (Unit, Vec<Slot>),
        answer: fn(Unit, &[Outcome]) -> Out,
    ) -> ReceiverStream<Result<Out, Status>>
    where
        In: Send + 'static,
        Out: Send + 'static,
    {
        let (acks, acks_rx) = mpsc::channel(ACKS_PER_STREAM);
        let (pending, mut pending_rx) = mpsc::channel::<Pending>(JOBS_PER_STREAM);
        let commits = self.commits.clone();
        let log = self.log.clone();
        let frontier = self.frontier.clone();
        let sem = self.in_flight.clone();
        let cap = self.in_flight_bytes;
        let mut stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut ended = false;
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
                    }
                    m = inbound.message(), if !ended && !full => match m {
                        Ok(Some(m)) => batch.add(split(&frontier, &log, m)),
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
                        let (reply, outcomes) = oneshot::channel();
                        let (units, slots, ops) = std::mem::take(&mut batch).into_parts();
                        let outcomes = if ops.is_empty() {
                            // Nothing to commit: answered at once.
                            None
                        } else {
                            match commits.send(Job { ops, reply }).await {
                                Ok(()) => Some(outcomes),
                                // The committing thread is gone: nothing of it is durable.
                                Err(_) => None,
                            }
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
                    let _ = acks.send(Err(s)).await;
                    return;
                }
                let done = match p.outcomes {
                    Some(rx) => rx.await.unwrap_or_default(),
                    None => Vec::new(),
                };
                let mut done = done.into_iter();
                let mut at = 0;
                for (unit, n) in p.units {
                    let outcomes: Vec<Outcome> = p.slots[at..at + n]
                        .iter()
                        .map(|s| match s {
                            SlotState::Ready(o) => *o,
                            SlotState::Op => done.next().unwrap_or(Outcome::Failed),
                        })
                        .collect();
                    at += n;
                    if acks.send(Ok(answer(unit, &outcomes))).await.is_err() {
                        // The client went away.
                        return;
                    }
                }
            }
        });
        ReceiverStream::new(acks_rx)
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
        Outcome::Seen => S::Skipped,
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

/// Why an item is refused, if it is: what a push of it would answer.
fn refusal(frontier: &Frontier, url: &str, key: Option<&str>) -> Option<String> {
    frontier
        .validate(url.as_bytes(), key.map(str::as_bytes))
        .err()
        .map(|e| e.to_string())
}

/// The gRPC status of a library error.
fn status_of(log: &Log, what: &str, e: &crivello::Error) -> Status {
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

/// A discovered or known URL item as the op to commit, or its refusal.
fn item_slot(
    frontier: &Frontier,
    log: &Log,
    info: Option<pb::UrlInfo>,
    known: Option<u64>,
    created: u64,
) -> Slot {
    let Some(info) = info else {
        log!(log, Warn, "refused an item without a URL");
        return Slot::Ready(Outcome::Failed);
    };
    let key = non_empty(&info.key).map(str::to_owned);
    if let Some(why) = refusal(frontier, &info.url, key.as_deref()) {
        log!(log, Warn, "refused {:?}: {why}", truncated(&info.url));
        return Slot::Ready(Outcome::Failed);
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
        // Due since it was stored (the reference answers the instant it is scheduled at).
        _ => stored.created,
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

#[tonic::async_trait]
impl UrlFrontier for Service {
    async fn list_nodes(&self, _: Request<pb::Empty>) -> Result<Response<pb::StringList>, Status> {
        Ok(Response::new(pb::StringList {
            values: vec![self.node.clone()],
        }))
    }

    async fn list_crawls(&self, _: Request<pb::Local>) -> Result<Response<pb::StringList>, Status> {
        let values = self.call("ListCrawls", |f| f.crawls()).await?;
        Ok(Response::new(pb::StringList { values }))
    }

    async fn delete_crawl(
        &self,
        r: Request<pb::DeleteCrawlMessage>,
    ) -> Result<Response<pb::Long>, Status> {
        let crawl = r.into_inner().value;
        log!(self.log, Info, "deleting crawl {:?}", crawl_name(&crawl));
        let value = self
            .call("DeleteCrawl", move |f| f.delete_crawl(&crawl))
            .await?;
        Ok(Response::new(pb::Long { value }))
    }

    async fn list_queues(
        &self,
        r: Request<pb::Pagination>,
    ) -> Result<Response<pb::QueueList>, Status> {
        let p = r.into_inner();
        let crawl = p.crawl_id.clone();
        let all = self
            .call("ListQueues", move |f| {
                // What was acknowledged is in its queue first.
                f.flush()?;
                f.queues(&crawl, 0, usize::MAX)
            })
            .await?;
        let now_ms = now_s().saturating_mul(1000);
        let listed: Vec<String> = all
            .into_iter()
            .filter(|q| {
                p.include_inactive
                    || (q.waiting + q.leased > 0 && q.blocked_until_ms.is_none_or(|b| b <= now_ms))
            })
            .map(|q| String::from_utf8_lossy(&q.key).into_owned())
            .collect();
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

    type GetURLsStream = Answer<pb::UrlInfo>;

    async fn get_ur_ls(
        &self,
        r: Request<pb::GetParams>,
    ) -> Result<Response<Self::GetURLsStream>, Status> {
        let p = r.into_inner();
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
        let leased = self.call("GetURLs", move |f| f.lease_with(&req)).await?;
        log!(self.log, Trace, "GetURLs: {} URLs handed out", leased.len());
        let infos = leased.into_iter().map(|l| {
            Ok(pb::UrlInfo {
                url: String::from_utf8_lossy(&l.url).into_owned(),
                key: String::from_utf8_lossy(&l.key).into_owned(),
                metadata: meta::decode(&l.metadata).metadata,
                crawl_id: String::from_utf8_lossy(&l.crawl).into_owned(),
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(infos))))
    }

    type PutURLsStream = ReceiverStream<Result<pb::AckMessage, Status>>;

    async fn put_ur_ls(
        &self,
        r: Request<Streaming<pb::UrlItem>>,
    ) -> Result<Response<Self::PutURLsStream>, Status> {
        log!(self.log, Debug, "PutURLs: a stream opens");
        let stream = self.pipeline(r.into_inner(), split_item, |unit, o| pb::AckMessage {
            id: unit.id,
            status: ack_status(o.first().copied().unwrap_or(Outcome::Failed)) as i32,
        });
        Ok(Response::new(stream))
    }

    async fn get_stats(
        &self,
        r: Request<pb::QueueWithinCrawlParams>,
    ) -> Result<Response<pb::Stats>, Status> {
        let p = r.into_inner();
        let crawl = p.crawl_id.clone();
        let key = non_empty(&p.key).map(str::to_owned);
        let c = self
            .call("GetStats", move |f| {
                f.flush()?;
                f.counts(&crawl, key.as_deref().map(str::as_bytes))
            })
            .await?;
        let counts = HashMap::from([
            ("completed".to_owned(), c.done),
            ("active_queues".to_owned(), c.queues_waiting),
        ]);
        Ok(Response::new(pb::Stats {
            size: c.waiting + c.leased,
            in_process: u32::try_from(c.leased).unwrap_or(u32::MAX),
            counts,
            number_of_queues: c.queues,
            crawl_id: crawl_name(&p.crawl_id),
        }))
    }

    async fn delete_queue(
        &self,
        r: Request<pb::QueueWithinCrawlParams>,
    ) -> Result<Response<pb::Long>, Status> {
        let p = r.into_inner();
        if p.key.is_empty() {
            return Err(Status::invalid_argument("DeleteQueue: the key is empty"));
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
        let until_ms = p.time.saturating_mul(1000);
        self.call("BlockQueueUntil", move |f| {
            f.block(&p.crawl_id, p.key.as_bytes(), until_ms)
        })
        .await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn set_active(&self, r: Request<pb::Active>) -> Result<Response<pb::Empty>, Status> {
        let on = r.into_inner().state;
        log!(
            self.log,
            Info,
            "hand-outs {}",
            if on { "resumed" } else { "paused" }
        );
        self.call("SetActive", move |f| f.set_paused(!on)).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn get_active(&self, _: Request<pb::Local>) -> Result<Response<pb::Boolean>, Status> {
        let s = self.call("GetActive", |f| f.stats()).await?;
        Ok(Response::new(pb::Boolean { state: !s.paused }))
    }

    async fn set_delay(
        &self,
        r: Request<pb::QueueDelayParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        let p = r.into_inner();
        let delay_ms = u64::from(p.delay_requestable) * 1000;
        self.call("SetDelay", move |f| {
            let key = non_empty(&p.key).map(str::as_bytes);
            let now = f.policy(&p.crawl_id, key)?;
            f.set_policy(&p.crawl_id, key, Policy { delay_ms, ..now })
        })
        .await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn set_log_level(
        &self,
        r: Request<pb::LogLevelParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        use pb::log_level_params::Level as L;
        let level = match L::try_from(r.into_inner().level) {
            Ok(L::Trace) => Level::Trace,
            Ok(L::Debug) => Level::Debug,
            Ok(L::Info) => Level::Info,
            Ok(L::Warn) => Level::Warn,
            Ok(L::Error) => Level::Error,
            Err(_) => return Err(Status::invalid_argument("SetLogLevel: unknown level")),
        };
        self.log.set_level(level);
        log!(self.log, Info, "log level set to {level:?}");
        Ok(Response::new(pb::Empty {}))
    }

    async fn set_crawl_limit(
        &self,
        r: Request<pb::CrawlLimitParams>,
    ) -> Result<Response<pb::Empty>, Status> {
        let p = r.into_inner();
        let limit = u64::from(p.limit);
        self.call("SetCrawlLimit", move |f| {
            let key = non_empty(&p.key).map(str::as_bytes);
            let now = f.policy(&p.crawl_id, key)?;
            f.set_policy(&p.crawl_id, key, Policy { limit, ..now })
        })
        .await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn get_url_status(
        &self,
        r: Request<pb::UrlStatusRequest>,
    ) -> Result<Response<pb::UrlItem>, Status> {
        let p = r.into_inner();
        if p.url.is_empty() {
            return Err(Status::invalid_argument("GetURLStatus: the URL is empty"));
        }
        let crawl = crawl_name(&p.crawl_id);
        let (url, key) = (p.url.clone(), non_empty(&p.key).map(str::to_owned));
        let c = crawl.clone();
        let found = self
            .call("GetURLStatus", move |f| {
                let key = key.as_deref().map(str::as_bytes);
                let status = f.status(&c, key, url.as_bytes())?;
                let key = key.map_or_else(
                    || crivello::queues::key::default_key(url.as_bytes()).to_vec(),
                    <[u8]>::to_vec,
                );
                match status {
                    UrlStatus::Unknown => Ok(None),
                    UrlStatus::Done => Ok(Some(HeldUrl {
                        key,
                        url: url.into_bytes(),
                        metadata: Vec::new(),
                        status,
                    })),
                    _ => {
                        let mut held = None;
                        f.urls(&c, Some(&key), |h| {
                            if h.url == url.as_bytes() {
                                held = Some(h);
                                false
                            } else {
                                true
                            }
                        })?;
                        Ok(held)
                    }
                }
            })
            .await?;
        match found {
            None => Err(Status::not_found(format!("{} is not known", p.url))),
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
        let p = r.into_inner();
        let crawl = crawl_name(&p.crawl_id);
        let (tx, rx) = mpsc::channel(LIST_PAGE);
        let frontier = self.frontier.clone();
        let log = self.log.clone();
        let ignore_case = p.ignore_case.unwrap_or(false);
        let wanted = if p.size == 0 {
            usize::MAX
        } else {
            p.size as usize
        };
        // Pages of the walk, each under the frontier's lock for a moment only.
        tokio::spawn(async move {
            let (mut skip, mut sent) = (p.start as usize, 0usize);
            loop {
                let (f, c, k, filter) = (
                    frontier.clone(),
                    crawl.clone(),
                    non_empty(&p.key).map(str::to_owned),
                    p.filter.clone(),
                );
                let want = LIST_PAGE.min(wanted - sent);
                let page = tokio::task::spawn_blocking(move || {
                    let mut page = Vec::new();
                    let mut seen = 0usize;
                    f.urls(&c, k.as_deref().map(str::as_bytes), |h| {
                        if !matches(&h.url, &filter, ignore_case) {
                            return true;
                        }
                        seen += 1;
                        if seen > skip {
                            page.push(h);
                        }
                        page.len() < want
                    })
                    .map(|()| page)
                })
                .await;
                let page = match page {
                    Ok(Ok(page)) => page,
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(status_of(&log, "ListURLs", &e))).await;
                        return;
                    }
                    Err(e) => {
                        log!(log, Error, "ListURLs: {e}");
                        let _ = tx
                            .send(Err(Status::internal("ListURLs: internal error")))
                            .await;
                        return;
                    }
                };
                let last = page.len() < want;
                skip += page.len();
                sent += page.len();
                for h in page {
                    if tx.send(Ok(known_item(&crawl, h))).await.is_err() {
                        return;
                    }
                }
                if last || sent >= wanted {
                    return;
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
        let ignore_case = p.ignore_case.unwrap_or(false);
        let value = self
            .call("CountURLs", move |f| {
                let mut n = 0u64;
                f.urls(&p.crawl_id, non_empty(&p.key).map(str::as_bytes), |h| {
                    if matches(&h.url, &p.filter, ignore_case) {
                        n += 1;
                    }
                    true
                })?;
                Ok(n)
            })
            .await?;
        Ok(Response::new(pb::Long { value }))
    }

    type PutDiscoveredStream = ReceiverStream<Result<pb::BatchAck, Status>>;

    async fn put_discovered(
        &self,
        r: Request<Streaming<pb::DiscoveredBatch>>,
    ) -> Result<Response<Self::PutDiscoveredStream>, Status> {
        log!(self.log, Debug, "PutDiscovered: a stream opens");
        let stream = self.pipeline(r.into_inner(), split_batch, |unit, o| pb::BatchAck {
            id: unit.id,
            statuses: o.iter().map(|&o| ack_status(o) as i32).collect(),
        });
        Ok(Response::new(stream))
    }

    async fn purge_ur_ls(
        &self,
        r: Request<pb::PurgeUrlParams>,
    ) -> Result<Response<pb::Long>, Status> {
        let p = r.into_inner();
        let before = now_s().saturating_sub(u64::from(p.days) * 86_400);
        let value = self
            .call("PurgeURLs", move |f| {
                let mut old: Vec<HeldUrl> = Vec::new();
                f.urls(&p.crawl_id, non_empty(&p.key).map(str::as_bytes), |h| {
                    if meta::decode(&h.metadata).created < before {
                        old.push(h);
                    }
                    true
                })?;
                let items: Vec<crivello::Known<'_>> = old
                    .iter()
                    .map(|h| crivello::Known {
                        url: &h.url,
                        key: Some(&h.key),
                        metadata: &h.metadata,
                        refetch_ms: 0,
                    })
                    .collect();
                for chunk in items.chunks(ITEMS_PER_JOB) {
                    f.update(&p.crawl_id, chunk)?;
                }
                Ok(items.len() as u64)
            })
            .await?;
        Ok(Response::new(pb::Long { value }))
    }
}
