//! Moving queues when a cluster's list of nodes changes.
//!
//! Every node is restarted with the new list. A node whose previous list differs records the
//! move (`handoff/move`, the previous list) before the new list, and then:
//!
//! - **sends** each queue it holds whose key the new list gives to another node: the queue
//!   is exported whole ([`crivello::Frontier::export`]: its URLs in every state, its policy,
//!   block and counts) in batches, imported by the new owner through the cluster's own call
//!   `Import` (durable there, each queue received once per transfer), and only then released
//!   here ([`crivello::Frontier::release`]). After the last batch it tells every other node
//!   that it is done (an import of no queue, under the transfer's `done` name).
//! - **waits**: a key this node owns now and another node owned before is *pending* until that
//!   node is done. Items of a pending key are answered FAIL (not acknowledged: the client or
//!   the forwarding node sends them again), per-key calls UNAVAILABLE, and nothing of it is
//!   served (this node holds nothing of it until the import).
//!
//! When this node has sent everything and every node of the previous list is done, the move
//! is finished: the transfers' receipts are forgotten and `handoff/move` removed. A crash at
//! any point repeats what was not durable: a batch imported but not released is sent again,
//! and its queues, received before, are left as they are by the owner; a node that finished
//! answers a repeated `done` with OK.
//!
//! A new node (a store that never served in a cluster) asks the others at start whether a
//! move is under way (`Moving`), and learns the previous list from the first that says so
//! (or from the first `Import` it gets). A node that refuses the question because it runs
//! with another list is one of the cluster's nodes not restarted yet: a move will come, and
//! until this node learns it every key it owns is pending (it would take items that the
//! move's imports then replace).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crivello::{Frontier, MovedUrl, Policy, PolicyFields, QueueExport};
use tonic::{Request, Response, Status};

use super::cluster::{
    settled, write_durably, Cluster, Forwarded, Previous, MOVE_FILE, MOVE_TO_FILE,
};
use super::cpb;
use super::forward::{Peers, Router};
use super::log::{log, Log};

/// Queues exported at once at most.
const QUEUES_PER_CALL: usize = 1024;

/// Bytes of URLs sent in one `Import` call at most (a batch bigger than that is split; one
/// queue is never split).
const BYTES_PER_CALL: usize = 64 << 20;

/// The longest wait between two attempts to send.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a node that starts waits for another that does not answer `Held` before it
/// hands out without it ([`Moves::catch_up`]).
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// How often a node that starts asks again the nodes whose hand-off logs hold records for it.
const CATCH_UP_EVERY: Duration = Duration::from_millis(100);

/// How long one `Held` call may take.
const CATCH_UP_CALL: Duration = Duration::from_secs(2);

/// How long a node that starts waits at most for the records another node's hand-off logs
/// held for it (a record it refuses is never delivered).
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

/// How often a node that waits for other nodes' hand-off logs says so.
const CATCH_UP_TELL: Duration = Duration::from_secs(10);

/// A move under way.
pub struct Move {
    /// The list before it.
    previous: Previous,
    /// Its id: a hash of the two lists.
    id: String,
    /// The nodes of the previous list (but this one) not done yet.
    waiting: Mutex<HashSet<String>>,
    /// This node has sent every queue it had to.
    sent: AtomicBool,
    /// The queues (crawl, key) received: their keys are not pending any more.
    received: Mutex<HashSet<(String, Vec<u8>)>>,
    /// The keys of the queues received, of any crawl.
    received_keys: Mutex<HashSet<Vec<u8>>>,
}

impl Move {
    /// The name of node `node`'s transfer in this move.
    fn transfer(&self, node: &str) -> String {
        format!("{node} {}", self.id)
    }

    /// The name that records that node `node` sent everything.
    fn done_name(&self, node: &str) -> String {
        format!("{node} {} done", self.id)
    }
}

/// This node's part in moves: the one under way, if any.
pub struct Moves {
    cluster: Arc<Cluster>,
    frontier: Arc<Frontier>,
    dir: PathBuf,
    log: Arc<Log>,
    current: RwLock<Option<Arc<Move>>>,
    /// Held through [`Moves::begin`], so that two starts of a move never interleave (the
    /// scan of the queues runs outside `current`'s lock, which every item's check reads).
    beginning: Mutex<()>,
    /// The other nodes' clients, to send with once a move is joined.
    peers: std::sync::OnceLock<Peers>,
    /// A new node that met a node of another list: a move will come, and every key this
    /// node owns is pending until it is known.
    unsettled: AtomicBool,
    /// A node new to the cluster: it takes the default policy and the pause of the first
    /// node not new itself that answers `Moving`, or that sends it queues.
    fresh: AtomicBool,
    /// False for a node new to the cluster until it knows whether a move is under way (it
    /// then answers `Moving` as a new node: it knows nothing to tell).
    learnt: AtomicBool,
    /// Nodes gone for good (`--lost`): a move does not wait for them.
    lost: Mutex<Vec<String>>,
    /// False from this node's start until every other node has delivered what its hand-off
    /// logs held for this node when first asked, or was given up on ([`Moves::catch_up`]):
    /// meanwhile it hands out nothing.
    caught_up: AtomicBool,
}

/// What a new node learnt from the others ([`Moves::learn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learnt {
    /// A move under way, joined; or a node of this list answered that none is, and none
    /// runs with another list.
    Known,
    /// A node runs with another list: a move will come. Every key this node owns is pending
    /// meanwhile.
    Unsettled,
    /// No node answered.
    Nothing,
}

impl Moves {
    /// No move under way (yet).
    pub fn new(
        cluster: Arc<Cluster>,
        frontier: Arc<Frontier>,
        dir: PathBuf,
        log: Arc<Log>,
    ) -> Arc<Moves> {
        Arc::new(Moves {
            cluster,
            frontier,
            dir,
            log,
            current: RwLock::new(None),
            beginning: Mutex::new(()),
            peers: std::sync::OnceLock::new(),
            unsettled: AtomicBool::new(false),
            fresh: AtomicBool::new(false),
            learnt: AtomicBool::new(true),
            lost: Mutex::new(Vec::new()),
            caught_up: AtomicBool::new(false),
        })
    }

    /// Whether this node may hand out URLs: every other node has delivered what its
    /// hand-off logs held for this node when first asked, or was given up on
    /// ([`CATCH_UP_WAIT`], [`CATCH_UP_LIMIT`]).
    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// Run once at the start: asks every other node (but those lost for good) what its
    /// hand-off logs hold for this node (`Held`: each lane's last record and last delivered),
    /// again every [`CATCH_UP_EVERY`], until each has delivered the records its logs held at
    /// its first answer, then lets this node hand out. The items the others acknowledged for
    /// this node while it was down (a completion, a date to fetch again) are applied before
    /// any of its URLs is handed out: a URL whose lease ran out meanwhile and whose
    /// completion waited in another node's log is not handed out again, and an update made
    /// once this node hands out is not replaced by an older one delivered late (one put on
    /// this node while it waits may be: only hand-outs wait). Records appended after that
    /// first answer are not waited for (a steady flow of items would never let the count
    /// reach zero). A node that does not answer within [`CATCH_UP_WAIT`] of the start (down)
    /// is not waited for, nor is one whose records are not all delivered within
    /// [`CATCH_UP_LIMIT`] (a record this node refuses): what they hold for this node arrives
    /// later. Each case is logged.
    pub async fn catch_up(self: Arc<Self>, peers: Peers) {
        let started = std::time::Instant::now();
        let lost = self.lost.lock().expect("not poisoned").clone();
        let me = peers.cluster.me;
        // Each node asked, with the last record of each of its lanes to wait for, once known.
        let mut left: Vec<(usize, Option<Vec<u64>>)> = (0..peers.cluster.nodes.len())
            .filter(|&i| i != me && !lost.contains(&peers.cluster.nodes[i].name))
            .map(|i| (i, None))
            .collect();
        let mut skipped = Vec::new();
        let mut told = std::time::Instant::now();
        while !left.is_empty() {
            let mut next = Vec::new();
            for (i, target) in left {
                let mut client = peers.cluster_client(i);
                let call = client.held(peers.request(cpb::HeldRequest {}));
                let r = tokio::time::timeout(CATCH_UP_CALL, call).await;
                match &r {
                    Ok(Ok(r)) => {
                        let r = r.get_ref();
                        let target = target.unwrap_or_else(|| {
                            let held: u64 = r
                                .last
                                .iter()
                                .zip(&r.sent)
                                .map(|(l, s)| l.saturating_sub(*s))
                                .sum();
                            if held > 0 {
                                log!(
                                    self.log,
                                    Info,
                                    "{held} records of node {}'s hand-off logs wait for this \
                                     node: it hands out nothing until they are delivered",
                                    peers.name(i)
                                );
                            }
                            r.last.clone()
                        });
                        let delivered = r.sent.len() == target.len()
                            && r.sent.iter().zip(&target).all(|(s, t)| s >= t);
                        if delivered {
                            continue;
                        }
                        if started.elapsed() >= CATCH_UP_LIMIT {
                            log!(
                                self.log,
                                Warn,
                                "node {} has not delivered what its hand-off logs held for \
                                 this node within {CATCH_UP_LIMIT:?}: handing out without it \
                                 (a URL completed through it may be handed out again)",
                                peers.name(i)
                            );
                            skipped.push(peers.name(i).to_owned());
                            continue;
                        }
                        next.push((i, Some(target)));
                    }
                    Err(_) | Ok(Err(_))
                        if started.elapsed() >= CATCH_UP_WAIT && target.is_none() =>
                    {
                        let why = match &r {
                            Ok(Err(s)) => format!("refused the call Held ({:?})", s.code()),
                            _ => "did not answer".to_owned(),
                        };
                        log!(
                            self.log,
                            Warn,
                            "node {} {why} within {CATCH_UP_WAIT:?} of the start: this node \
                             hands out without the items its hand-off logs may hold for it, \
                             which arrive once it delivers them (a URL completed through it \
                             meanwhile may be handed out again)",
                            peers.name(i)
                        );
                        skipped.push(peers.name(i).to_owned());
                    }
                    Err(_) | Ok(Err(_)) if started.elapsed() >= CATCH_UP_LIMIT => {
                        log!(
                            self.log,
                            Warn,
                            "node {} stopped answering before it delivered what its hand-off \
                             logs held for this node: handing out without it",
                            peers.name(i)
                        );
                        skipped.push(peers.name(i).to_owned());
                    }
                    _ => next.push((i, target)),
                }
            }
            left = next;
            if !left.is_empty() {
                if told.elapsed() >= CATCH_UP_TELL {
                    told = std::time::Instant::now();
                    let names: Vec<&str> = left.iter().map(|(i, _)| peers.name(*i)).collect();
                    log!(
                        self.log,
                        Info,
                        "hand-outs still wait for the hand-off logs of node(s) {}",
                        names.join(", ")
                    );
                }
                tokio::time::sleep(CATCH_UP_EVERY).await;
            }
        }
        self.caught_up.store(true, Ordering::Release);
        if skipped.is_empty() {
            log!(
                self.log,
                Info,
                "the other nodes delivered what their hand-off logs held for this node: handing out"
            );
        } else {
            log!(
                self.log,
                Warn,
                "handing out without waiting any more for node(s) {}",
                skipped.join(", ")
            );
        }
    }

    /// Nodes gone for good: a move does not wait for them.
    pub fn set_lost(&self, lost: &[String]) {
        *self.lost.lock().expect("not poisoned") = lost.to_vec();
    }

    /// Marks this node as new to the cluster (its store never served in it).
    pub fn set_fresh(&self) {
        self.fresh.store(true, Ordering::Release);
        self.learnt.store(false, Ordering::Release);
    }

    /// The clients a move sends with.
    pub fn set_peers(&self, peers: Peers) {
        let _ = self.peers.set(peers);
    }

    /// Starts the move from `previous` as [`Moves::begin`] does, and its sending.
    pub fn join(self: &Arc<Self>, previous: &str, recorded: bool) -> anyhow::Result<()> {
        let (_, started) = self.start(previous, recorded)?;
        if started {
            if let Some(peers) = self.peers.get() {
                tokio::spawn(self.clone().send(peers.clone()));
            }
        }
        Ok(())
    }

    /// The move under way, if any.
    fn current(&self) -> Option<Arc<Move>> {
        self.current.read().expect("not poisoned").clone()
    }

    /// Whether a move is under way (or, for a new node, will come).
    pub fn moving(&self) -> bool {
        self.current.read().expect("not poisoned").is_some()
            || self.unsettled.load(Ordering::Acquire)
    }

    /// Whether the move under way is known (joined).
    pub fn joined(&self) -> bool {
        self.current.read().expect("not poisoned").is_some()
    }

    /// The previous list of the move under way, in canonical form.
    pub fn previous(&self) -> Option<String> {
        self.current().map(|m| m.previous.canonical.clone())
    }

    /// Whether the queue of key `key` in `crawl` (owned by this node) waits for the node
    /// that owned it before: that node is not done, and has not sent it yet.
    pub fn pending(&self, crawl: &str, key: &[u8]) -> bool {
        let Some(m) = self.current() else {
            return self.unsettled.load(Ordering::Acquire);
        };
        let old = m.previous.owner(key);
        if old == self.cluster.this().name || !m.waiting.lock().expect("not poisoned").contains(old)
        {
            return false;
        }
        let crawl = if crawl.is_empty() { "DEFAULT" } else { crawl };
        let received = m
            .received
            .lock()
            .expect("not poisoned")
            .contains(&(crawl.to_owned(), key.to_vec()));
        !received
    }

    /// Whether key `key` (owned by this node) waits for the node that owned it before, for
    /// every crawl (a call on a key whatever its crawl).
    pub fn pending_key(&self, key: &[u8]) -> bool {
        let Some(m) = self.current() else {
            return self.unsettled.load(Ordering::Acquire);
        };
        let old = m.previous.owner(key);
        old != self.cluster.this().name
            && m.waiting.lock().expect("not poisoned").contains(old)
            && !m.received_keys.lock().expect("not poisoned").contains(key)
    }

    /// Starts the move from `previous` (recorded in `handoff/move` unless `recorded`):
    /// which nodes are done already comes from the frontier's receipts.
    pub fn begin(&self, previous: &str, recorded: bool) -> anyhow::Result<Arc<Move>> {
        Ok(self.start(previous, recorded)?.0)
    }

    /// [`Moves::begin`], and whether this call started the move (false: it was under way).
    /// While it reads the frontier's receipts, every key this node owns is pending (the
    /// move's own rule is not known yet); a failure leaves that as it was.
    fn start(&self, previous: &str, recorded: bool) -> anyhow::Result<(Arc<Move>, bool)> {
        let _beginning = self.beginning.lock().expect("not poisoned");
        if let Some(m) = &self.current() {
            if m.previous.canonical == previous {
                return Ok((m.clone(), false));
            }
            anyhow::bail!(
                "a move from the list \"{}\" is under way, not one from \"{previous}\"",
                m.previous.canonical
            );
        }
        let was = {
            let _current = self.current.write().expect("not poisoned");
            self.unsettled.swap(true, Ordering::AcqRel)
        };
        let started = self.prepare(previous, recorded);
        if started.is_err() {
            self.unsettled.store(was, Ordering::Release);
        }
        Ok((started?, true))
    }

    /// The part of [`Moves::start`] after its checks: records the move if it is not, reads
    /// the receipts, and installs the move.
    fn prepare(&self, previous: &str, recorded: bool) -> anyhow::Result<Arc<Move>> {
        let parsed = Previous::parse(previous)?;
        if !recorded {
            // A new node joining: it knows the move from now on.
            write_durably(&self.dir.join(MOVE_FILE), &format!("{previous}\n"))?;
            settled(&self.dir)?;
        }
        // A move whose list lost nodes keeps the id of the list it was for (`move-to`).
        let target = match std::fs::read_to_string(self.dir.join(MOVE_TO_FILE)) {
            Ok(t) => t.trim().to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.cluster.canonical.clone(),
            Err(e) => anyhow::bail!("read {}: {e}", self.dir.join(MOVE_TO_FILE).display()),
        };
        let id = format!(
            "{:016x}",
            xxhash_rust::xxh3::xxh3_64(format!("{previous} -> {target}").as_bytes())
        );
        let me = &self.cluster.this().name;
        let mut m = Move {
            previous: parsed,
            id,
            waiting: Mutex::new(HashSet::new()),
            sent: AtomicBool::new(false),
            received: Mutex::new(HashSet::new()),
            received_keys: Mutex::new(HashSet::new()),
        };
        let mut waiting = HashSet::new();
        let lost = self.lost.lock().expect("not poisoned").clone();
        for name in m.previous.assignment.names() {
            if lost.contains(name) {
                log!(
                    self.log,
                    Warn,
                    "node {name} is lost (--lost): the move does not wait for it, and the keys \
                     it held start empty at their owners"
                );
                continue;
            }
            if name != me && !self.frontier.imported(m.done_name(name).as_bytes())? {
                waiting.insert(name.clone());
            }
        }
        // The queues received before a restart, from the frontier's receipts.
        let (mut received, mut received_keys) = (HashSet::new(), HashSet::new());
        if !waiting.is_empty() {
            for crawl in self.frontier.crawls()? {
                for q in self.frontier.queues(&crawl, 0, usize::MAX)? {
                    let old = m.previous.owner(&q.key).to_owned();
                    if waiting.contains(&old)
                        && self
                            .frontier
                            .received(m.transfer(&old).as_bytes(), &crawl, &q.key)?
                    {
                        received_keys.insert(q.key.clone());
                        received.insert((crawl.clone(), q.key));
                    }
                }
            }
        }
        m.waiting = Mutex::new(waiting);
        m.received = Mutex::new(received);
        m.received_keys = Mutex::new(received_keys);
        log!(
            self.log,
            Info,
            "moving queues: from the list \"{previous}\" to \"{}\"",
            self.cluster.canonical
        );
        let m = Arc::new(m);
        let mut current = self.current.write().expect("not poisoned");
        *current = Some(m.clone());
        // The move that was to come is known from now on (its keys pending as it says).
        self.unsettled.store(false, Ordering::Release);
        self.learnt.store(true, Ordering::Release);
        Ok(m)
    }

    /// Ends the move once this node has sent everything and every node before it is done.
    fn finish_if_done(&self) -> anyhow::Result<()> {
        let Some(m) = self.current() else {
            return Ok(());
        };
        if !m.sent.load(Ordering::SeqCst) || !m.waiting.lock().expect("not poisoned").is_empty() {
            return Ok(());
        }
        // The move's record goes first: a crash after it leaves receipts behind (a later move
        // between the same two lists would leave the queues they name as they are), where the
        // other order could leave a node waiting for good for notices sent before.
        match super::cluster::remove_handoff_file(&self.dir.join(MOVE_FILE)) {
            // Another call finished it meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r?,
        }
        std::fs::File::open(&self.dir)?.sync_all()?;
        // After `move`: a crash between the two never leaves `move` without its target.
        let _ = super::cluster::remove_handoff_file(&self.dir.join(MOVE_TO_FILE));
        *self.current.write().expect("not poisoned") = None;
        // The receipts are forgotten: a later move between the same lists (a node that
        // joins, leaves and joins again) starts afresh.
        let me = self.cluster.this().name.clone();
        let names = (m.previous.assignment.names().iter())
            .chain(self.cluster.nodes.iter().map(|n| &n.name));
        for name in names {
            if *name != me {
                self.frontier.end_transfer(m.transfer(name).as_bytes())?;
                self.frontier.end_transfer(m.done_name(name).as_bytes())?;
            }
        }
        log!(self.log, Info, "the move is finished");
        Ok(())
    }

    /// Sends every queue this node holds that another node owns now, then tells every
    /// other node that it is done; repeats what fails until it succeeds.
    pub async fn send(self: Arc<Self>, peers: Peers) {
        let Some(m) = self.current() else {
            return;
        };
        tokio::spawn(self.clone().report_waiting(m.clone()));
        if let Err(e) = self.send_all(&m, &peers).await {
            log!(self.log, Error, "moving queues: {e:#}");
            return;
        }
        m.sent.store(true, Ordering::SeqCst);
        let moves = self.clone();
        let r = tokio::task::spawn_blocking(move || moves.finish_if_done()).await;
        if let Ok(Err(e)) = r {
            log!(self.log, Error, "ending the move: {e}");
        }
    }

    /// Logs, 10 s after move `m` began and then every minute while it lasts, the nodes of the
    /// previous list it still waits for: a node that never comes (one that a list typed
    /// wrong named, and that never ran) holds it for good, and only `--lost` ends it.
    async fn report_waiting(self: Arc<Self>, m: Arc<Move>) {
        let mut pause = Duration::from_secs(10);
        loop {
            tokio::time::sleep(pause).await;
            pause = Duration::from_secs(60);
            if !self.current().is_some_and(|c| Arc::ptr_eq(&c, &m)) {
                return;
            }
            let mut names: Vec<String> = m
                .waiting
                .lock()
                .expect("not poisoned")
                .iter()
                .cloned()
                .collect();
            if names.is_empty() {
                continue;
            }
            names.sort();
            log!(
                self.log,
                Warn,
                "the move from the list \"{}\" waits for node(s) {} to send their queues (a \
                 node that is up and sending needs nothing; one that is down: start it with the \
                 list \"{}\"; only if it is gone for good or never ran: restart every node \
                 with that list and --lost {}, which gives up what it holds)",
                m.previous.canonical,
                names.join(", "),
                self.cluster.canonical,
                names.join(",")
            );
        }
    }

    /// Sends every queue another node owns and tells every node, repeating what fails until
    /// it succeeds; an error only when a node refuses this node's queues for good (they were
    /// given up for lost).
    pub async fn send_all(&self, m: &Arc<Move>, peers: &Peers) -> anyhow::Result<()> {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.send_once(m, peers).await {
                Ok(()) => return Ok(()),
                Err(e) if e.downcast_ref::<Refused>().is_some() => return Err(e),
                Err(e) => {
                    log!(self.log, Warn, "moving queues: {e}; trying again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    async fn send_once(&self, m: &Arc<Move>, peers: &Peers) -> anyhow::Result<()> {
        let c = &self.cluster;
        let frontier = self.frontier.clone();
        let (default_policy, paused) = tokio::task::spawn_blocking(move || {
            Ok::<_, crivello::Error>((frontier.policy("", None)?, frontier.stats()?.paused))
        })
        .await??;
        let request = |queues: Vec<cpb::Queue>, done: bool| cpb::ImportRequest {
            transfer: m.transfer(&c.this().name),
            queues,
            previous: m.previous.canonical.clone(),
            done,
            default_delay_ms: default_policy.delay_ms,
            default_ratio_ppm: default_policy.ratio_ppm,
            default_per_queue: default_policy.per_queue,
            default_limit: default_policy.limit,
            paused,
        };
        // The queues to send, by owner.
        let frontier = self.frontier.clone();
        let cluster = c.clone();
        let previous = Previous::parse(&m.previous.canonical)?;
        let (keys, strays) = tokio::task::spawn_blocking(move || -> crivello::Result<_> {
            let mut keys: Vec<Vec<(String, Vec<u8>)>> = vec![Vec::new(); cluster.nodes.len()];
            // Every queue not released (a deleted queue's URLs too: they stay known where it
            // goes), picked by key without reading any.
            let mut strays = 0u64;
            frontier.export(
                |crawl, key| {
                    let owner = cluster.owner(key);
                    if owner != cluster.me {
                        // Only what this node owned: a queue it held of another node's key
                        // (a policy set here with `local`) would replace the owner's.
                        if previous.owner(key) == cluster.this().name {
                            keys[owner].push((crawl.to_owned(), key.to_vec()));
                        } else {
                            strays += 1;
                        }
                    }
                    false
                },
                |_| Ok(()),
            )?;
            Ok((keys, strays))
        })
        .await??;
        if strays > 0 {
            log!(
                self.log,
                Warn,
                "{strays} queues of keys this node did not own before stay here (they hold at \
                 most a policy or a block set with local = true, or done URLs)"
            );
        }
        let mut sent = 0u64;
        for (owner, keys) in keys.into_iter().enumerate() {
            for chunk in keys.chunks(QUEUES_PER_CALL) {
                let wanted = chunk.to_vec();
                let frontier = self.frontier.clone();
                let queues = tokio::task::spawn_blocking(move || -> crivello::Result<_> {
                    let mut out = Vec::new();
                    let wanted: Vec<(&str, &[u8])> =
                        wanted.iter().map(|(c, k)| (&c[..], &k[..])).collect();
                    frontier.export_queues(&wanted, |q| {
                        out.push(q);
                        Ok(())
                    })?;
                    Ok(out)
                })
                .await??;
                // Released before (a batch sent before a restart) if none; cut by bytes.
                for queues in by_bytes(queues) {
                    let n = queues.len();
                    let request = request(queues.iter().map(queue_of).collect(), false);
                    let mut client = peers.cluster_client(owner);
                    client
                        .import(peers.request(request))
                        .await
                        .map_err(|s| refusal(peers.name(owner), &s))?;
                    // Durable on the owner: let them go here.
                    let frontier = self.frontier.clone();
                    tokio::task::spawn_blocking(move || {
                        let keys: Vec<(&str, &[u8])> =
                            queues.iter().map(|q| (&q.crawl[..], &q.key[..])).collect();
                        frontier.release(&keys)
                    })
                    .await??;
                    sent += n as u64;
                    log!(
                        self.log,
                        Info,
                        "moved {n} queues to node {}",
                        peers.name(owner)
                    );
                }
            }
        }
        for i in 0..c.nodes.len() {
            if i == c.me {
                continue;
            }
            let request = request(Vec::new(), true);
            peers
                .cluster_client(i)
                .import(peers.request(request))
                .await
                .map_err(|s| refusal(peers.name(i), &s))?;
        }
        log!(
            self.log,
            Info,
            "sent every queue of the move ({sent} in this run) and told every node"
        );
        Ok(())
    }

    /// Asks the other nodes whether a move is under way (for a node new to the cluster),
    /// and joins the first one found. A node that refuses the question for its list
    /// (FAILED_PRECONDITION: it runs with another list, or alone) makes this node
    /// [`Learnt::Unsettled`] until a later question finds the move or no such node.
    pub async fn learn(self: &Arc<Self>, peers: &Peers) -> Learnt {
        // A node that knows where it stands said that no move is under way.
        let mut informed = false;
        // Nodes that answered, all of them new to the cluster too.
        let mut new_ones = 0usize;
        let mut other_list = None;
        for i in 0..self.cluster.nodes.len() {
            if i == self.cluster.me {
                continue;
            }
            let mut client = peers.cluster_client(i);
            let asked = tokio::time::timeout(
                Duration::from_secs(3),
                client.moving(peers.request(cpb::MovingRequest {})),
            )
            .await;
            match asked {
                Ok(Ok(reply)) => {
                    let reply = reply.into_inner();
                    if reply.new_node {
                        // It knows no more than this node.
                        new_ones += 1;
                        continue;
                    }
                    if self.fresh.load(Ordering::Acquire) && reply.default_per_queue > 0 {
                        let theirs = Policy {
                            delay_ms: reply.default_delay_ms,
                            ratio_ppm: reply.default_ratio_ppm,
                            per_queue: reply.default_per_queue,
                            limit: reply.default_limit,
                        };
                        let adopt = self.adopter(&self.cluster.nodes[i].name, theirs, reply.paused);
                        let frontier = self.frontier.clone();
                        match tokio::task::spawn_blocking(move || adopt(&frontier, true)).await {
                            Ok(Ok(())) => self.fresh.store(false, Ordering::Release),
                            Ok(Err(e)) => log!(self.log, Error, "taking the defaults: {e}"),
                            Err(e) => log!(self.log, Error, "taking the defaults: {e}"),
                        }
                    }
                    let previous = reply.previous;
                    if !previous.is_empty() {
                        return match tokio::task::block_in_place(|| self.join(&previous, false)) {
                            Ok(()) => Learnt::Known,
                            Err(e) => {
                                log!(self.log, Error, "joining the move: {e:#}");
                                Learnt::Nothing
                            }
                        };
                    }
                    informed = true;
                }
                Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition => {
                    other_list = Some((i, s.message().to_owned()));
                }
                _ => {}
            }
        }
        if let Some((i, why)) = other_list {
            if self.set_unsettled() {
                log!(
                    self.log,
                    Warn,
                    "node {} runs with another list ({why}): a move will come when the nodes \
                     restart with this list; until then the keys of this node are pending \
                     (their items FAIL)",
                    self.cluster.nodes[i].name
                );
            }
            return Learnt::Unsettled;
        }
        // Every other node new too: a new cluster, in which no move can be under way.
        let all_new = new_ones + 1 == self.cluster.nodes.len();
        if informed || all_new {
            if let Err(e) = settled(&self.dir) {
                log!(
                    self.log,
                    Error,
                    "recording that no move is under way: {e:#}"
                );
                return Learnt::Nothing;
            }
            // No node has defaults to give if none gave them yet.
            self.fresh.store(false, Ordering::Release);
            self.learnt.store(true, Ordering::Release);
            if self.unsettled.swap(false, Ordering::AcqRel) {
                log!(
                    self.log,
                    Info,
                    "no move under way: this node serves its keys"
                );
            }
            return Learnt::Known;
        }
        Learnt::Nothing
    }

    /// Marks the keys of this node pending until a move is known, unless one is joined
    /// already (under the lock of the move, so that a move joined meanwhile wins). Whether
    /// this changed it.
    fn set_unsettled(&self) -> bool {
        let current = self.current.write().expect("not poisoned");
        current.is_none() && !self.unsettled.swap(true, Ordering::AcqRel)
    }

    /// What a node new to the cluster takes from node `from`, whose default policy is
    /// `theirs` and which is `paused` or not: the default policy if this node is new
    /// (`fresh`) or its own was never set (a new node restarted before it took it), and the
    /// pause if this node is new. Runs on the frontier (blocking).
    fn adopter(
        &self,
        from: &str,
        theirs: Policy,
        paused: bool,
    ) -> impl FnOnce(&Frontier, bool) -> crivello::Result<()> + Send + 'static {
        let (log, from) = (self.log.clone(), from.to_owned());
        move |frontier: &Frontier, fresh: bool| {
            let ours = frontier.policy("", None)?;
            if theirs.per_queue > 0 && theirs != ours && (fresh || ours == Policy::default()) {
                frontier.set_policy("", None, theirs)?;
                log!(
                    log,
                    Info,
                    "took the default policy of node {from}: {theirs:?}"
                );
            }
            if fresh && paused && !frontier.stats()?.paused {
                frontier.set_paused(true)?;
                log!(log, Info, "paused, as node {from} is");
            }
            Ok(())
        }
    }

    /// Imports queues another node sends (`Import`), or records that it is done.
    async fn import(self: &Arc<Self>, from: &str, r: cpb::ImportRequest) -> Result<u64, Status> {
        if self
            .lost
            .lock()
            .expect("not poisoned")
            .iter()
            .any(|n| n == from)
        {
            return Err(Status::aborted(format!(
                "node {from} was named lost (--lost) when this node started: {OUT_OF_DATE}"
            )));
        }
        let m = match self.current() {
            Some(m) if m.previous.canonical == r.previous => m,
            Some(m) => {
                return Err(Status::failed_precondition(format!(
                    "node {from} moves from the list \"{}\", this node from \"{}\"",
                    r.previous, m.previous.canonical
                )))
            }
            // A node new to the cluster that has not learnt yet whether a move is under way
            // (or that met a node of another list): it did not know of the move, and joins
            // it, its first done notice included (answered without joining, it would wait
            // for that node for ever once it joins).
            None if self.fresh.load(Ordering::Acquire)
                || self.unsettled.load(Ordering::Acquire)
                || !self.learnt.load(Ordering::Acquire) =>
            {
                tokio::task::block_in_place(|| self.join(&r.previous, false))
                    .map_err(|e| Status::failed_precondition(format!("{e:#}")))?;
                self.current()
                    .ok_or_else(|| Status::internal("the move ended at once"))?
            }
            // A done repeated after this node finished the move.
            None if r.done && r.queues.is_empty() => return Ok(0),
            // Every node of a move starts it before it serves, and ends it only once every
            // node not lost told it that it was done: queues of a move it is not in can only
            // come from a node it did not wait for, whose queues were given up for lost.
            None => {
                return Err(Status::aborted(format!(
                    "node {from} sends queues of the move from the list \"{}\", which is over \
                     on this node or never ran here: {OUT_OF_DATE}",
                    r.previous
                )))
            }
        };

        let known = m.previous.assignment.names().iter().any(|n| n == from)
            || self.cluster.nodes.iter().any(|n| n.name == from);
        if !known {
            return Err(Status::failed_precondition(format!(
                "node {from} is in neither the list of the move nor the one before it"
            )));
        }
        let queues: Vec<QueueExport> = r.queues.into_iter().map(export_of).collect();
        for q in &queues {
            if self.cluster.owner(&q.key) != self.cluster.me || m.previous.owner(&q.key) != from {
                return Err(Status::failed_precondition(format!(
                    "node {from} sent the queue {}, which this node does not own now or node \
                     {from} did not own before",
                    String::from_utf8_lossy(&q.key)
                )));
            }
        }
        let names: Vec<(String, Vec<u8>)> = queues
            .iter()
            .map(|q| (q.crawl.clone(), q.key.clone()))
            .collect();
        let theirs = Policy {
            delay_ms: r.default_delay_ms,
            ratio_ppm: r.default_ratio_ppm,
            per_queue: r.default_per_queue,
            limit: r.default_limit,
        };
        let fresh = self.fresh.load(Ordering::Acquire);
        let adopt = self.adopter(from, theirs, r.paused);
        let frontier = self.frontier.clone();
        let transfer = m.transfer(from);
        let done = r.done.then(|| m.done_name(from));
        let n = tokio::task::spawn_blocking(move || -> crivello::Result<u64> {
            adopt(&frontier, fresh)?;
            let n = frontier.import(transfer.as_bytes(), &queues)?;
            if let Some(done) = done {
                frontier.import(done.as_bytes(), &[])?;
            }
            Ok(n)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("import: {e}")))?;
        self.fresh.store(false, Ordering::Release);
        {
            let mut received = m.received.lock().expect("not poisoned");
            let mut keys = m.received_keys.lock().expect("not poisoned");
            for (crawl, key) in names {
                let crawl = if crawl.is_empty() {
                    "DEFAULT".to_owned()
                } else {
                    crawl
                };
                keys.insert(key.clone());
                received.insert((crawl, key));
            }
        }
        if r.done {
            m.waiting.lock().expect("not poisoned").remove(from);
            log!(self.log, Info, "node {from} sent every queue of the move");
            tokio::task::block_in_place(|| self.finish_if_done())
                .map_err(|e| Status::internal(format!("ending the move: {e:#}")))?;
        } else if n > 0 {
            log!(self.log, Info, "imported {n} queues from node {from}");
        }
        Ok(n)
    }
}

/// What a node that refuses queues of a move for good says of them.
const OUT_OF_DATE: &str = "its queues are out of date (a node named lost with --lost whose \
     store came back?) and are not taken; remove that node's directory";

/// A node refused this node's queues for good: they were given up for lost.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The error of an `Import` that node `name` answered with `s`: [`Refused`] when it refuses
/// the queues for good (ABORTED), which ends the sending.
fn refusal(name: &str, s: &Status) -> anyhow::Error {
    let text = format!("node {name}: {}", s.message());
    if s.code() == tonic::Code::Aborted {
        anyhow::Error::new(Refused(text))
    } else {
        anyhow::anyhow!(text)
    }
}

/// Cuts exported queues into calls of at most [`BYTES_PER_CALL`] bytes of URLs (one queue
/// each at least).
fn by_bytes(queues: Vec<QueueExport>) -> Vec<Vec<QueueExport>> {
    let size = |q: &QueueExport| -> usize {
        let urls = (q.done.iter())
            .chain(q.leased.iter().map(|(u, _)| u))
            .chain(&q.returned)
            .chain(q.refetch.iter().map(|(_, u)| u))
            .chain(&q.waiting);
        urls.map(|u| u.url.len() + u.metadata.len() + 16)
            .sum::<usize>()
            + q.key.len()
            + 64
    };
    let mut out: Vec<Vec<QueueExport>> = Vec::new();
    let mut bytes = 0;
    for q in queues {
        let n = size(&q);
        match out.last_mut() {
            Some(last) if bytes + n <= BYTES_PER_CALL => {
                bytes += n;
                last.push(q);
            }
            _ => {
                bytes = n;
                out.push(vec![q]);
            }
        }
    }
    out
}

/// The cluster's own calls: the moves, and the router whose hand-off logs `Held` counts.
pub struct ClusterService(pub Arc<Moves>, pub Arc<Router>);

#[tonic::async_trait]
impl cpb::cluster_server::Cluster for ClusterService {
    async fn import(
        &self,
        request: Request<cpb::ImportRequest>,
    ) -> Result<Response<cpb::ImportReply>, Status> {
        let Some(Forwarded(from)) = request.extensions().get::<Forwarded>().cloned() else {
            return Err(Status::permission_denied(
                "Import is a call between the nodes of a cluster",
            ));
        };
        let imported = self.0.clone().import(&from, request.into_inner()).await?;
        Ok(Response::new(cpb::ImportReply { imported }))
    }

    async fn held(
        &self,
        request: Request<cpb::HeldRequest>,
    ) -> Result<Response<cpb::HeldReply>, Status> {
        let Some(Forwarded(from)) = request.extensions().get::<Forwarded>().cloned() else {
            return Err(Status::permission_denied(
                "Held is a call between the nodes of a cluster",
            ));
        };
        let nodes = &self.0.cluster.nodes;
        let marks = nodes
            .iter()
            .position(|n| n.name == from)
            .and_then(|i| self.1.held_for(i))
            .unwrap_or_default();
        Ok(Response::new(cpb::HeldReply {
            last: marks.iter().map(|m| m.0).collect(),
            sent: marks.iter().map(|m| m.1).collect(),
        }))
    }

    async fn moving(
        &self,
        _request: Request<cpb::MovingRequest>,
    ) -> Result<Response<cpb::MovingReply>, Status> {
        let frontier = self.0.frontier.clone();
        let (p, paused) = tokio::task::spawn_blocking(move || {
            Ok::<_, crivello::Error>((frontier.policy("", None)?, frontier.stats()?.paused))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("Moving: {e}")))?;
        Ok(Response::new(cpb::MovingReply {
            previous: self.0.previous().unwrap_or_default(),
            default_delay_ms: p.delay_ms,
            default_ratio_ppm: p.ratio_ppm,
            default_per_queue: p.per_queue,
            default_limit: p.limit,
            paused,
            new_node: !self.0.learnt.load(Ordering::Acquire),
        }))
    }
}

fn url_of(u: &MovedUrl, at_ms: u64) -> cpb::Url {
    cpb::Url {
        url: u.url.clone(),
        metadata: u.metadata.clone(),
        at_ms,
    }
}

fn moved_of(u: cpb::Url) -> MovedUrl {
    MovedUrl {
        url: u.url,
        metadata: u.metadata,
    }
}

/// A queue as `Import` carries it.
fn queue_of(q: &QueueExport) -> cpb::Queue {
    // A field the queue's own policy was not given: its type's largest value.
    let p = q.policy.unwrap_or_default();
    cpb::Queue {
        crawl: q.crawl.clone(),
        key: q.key.clone(),
        has_policy: q.policy.is_some(),
        delay_ms: p.delay_ms.unwrap_or(u64::MAX),
        ratio_ppm: p.ratio_ppm.unwrap_or(u32::MAX),
        per_queue: p.per_queue.unwrap_or(0),
        limit: p.limit.unwrap_or(u64::MAX),
        blocked_until_ms: q.blocked_until_ms,
        completed: q.completed,
        burst_ms: q.burst_ms,
        due_ms: q.due_ms,
        done: q.done.iter().map(|u| url_of(u, 0)).collect(),
        leased: q.leased.iter().map(|(u, d)| url_of(u, *d)).collect(),
        returned: q.returned.iter().map(|u| url_of(u, 0)).collect(),
        refetch: q.refetch.iter().map(|(w, u)| url_of(u, *w)).collect(),
        waiting: q.waiting.iter().map(|u| url_of(u, 0)).collect(),
    }
}

/// A queue `Import` carried.
fn export_of(q: cpb::Queue) -> QueueExport {
    QueueExport {
        crawl: q.crawl,
        key: q.key,
        policy: q.has_policy.then_some(PolicyFields {
            delay_ms: (q.delay_ms != u64::MAX).then_some(q.delay_ms),
            ratio_ppm: (q.ratio_ppm != u32::MAX).then_some(q.ratio_ppm),
            per_queue: (q.per_queue != 0).then_some(q.per_queue),
            limit: (q.limit != u64::MAX).then_some(q.limit),
        }),
        blocked_until_ms: q.blocked_until_ms,
        completed: q.completed,
        burst_ms: q.burst_ms,
        due_ms: q.due_ms,
        done: q.done.into_iter().map(moved_of).collect(),
        leased: q
            .leased
            .into_iter()
            .map(|u| (u.at_ms, u))
            .map(|(d, u)| (moved_of(u), d))
            .collect(),
        returned: q.returned.into_iter().map(moved_of).collect(),
        refetch: q
            .refetch
            .into_iter()
            .map(|u| (u.at_ms, moved_of(u)))
            .collect(),
        waiting: q.waiting.into_iter().map(moved_of).collect(),
    }
}
