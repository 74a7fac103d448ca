//! `crivello serve --node NAME --peers NAME=HOST:PORT,...`: the nodes of a cluster, which of
//! them owns each queue key, and how nodes recognise each other's calls.
//!
//! Every node is given the same list. A key's owner is fixed by the assignment function over
//! the nodes' names ([`crivello::assign`]); the key alone decides, so one host's queues of
//! every crawl live on one node. A node that forwards a call to another marks it with two
//! metadata entries: [`FROM`], its name, and [`MEMBERS`], its list of nodes in canonical form.
//! A node refuses a marked call whose list differs from its own, with a message naming both
//! lists: nodes started with different lists would disagree on owners.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Result;
use crivello::assign::{Assignment, Method};
use tonic::metadata::MetadataMap;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::super::{explained, usage};

/// The metadata entry naming the node a forwarded call comes from.
pub const FROM: &str = "crivello-node";

/// The metadata entry holding the calling node's list of nodes, in canonical form.
pub const MEMBERS: &str = "crivello-members";

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// The address it serves, `HOST:PORT`.
    pub addr: String,
}

/// The cluster as this node sees it.
#[derive(Debug)]
pub struct Cluster {
    /// The nodes, in the order of [`Assignment::names`] (sorted by name).
    pub nodes: Vec<Node>,
    /// This node's index in `nodes`.
    pub me: usize,
    /// Who owns which key.
    pub assignment: Assignment,
    /// The list in canonical form: `METHOD NAME=ADDR,NAME=ADDR...`, sorted by name.
    pub canonical: String,
    /// A node leaving the cluster (not in the list): it sends its queues to their owners
    /// and stops (`me` is then `usize::MAX`).
    pub leaving: Option<Node>,
}

impl Cluster {
    /// The cluster of `--peers LIST` seen from `--node NAME`, assigning keys by `method`.
    pub fn new(me: &str, peers: &str, method: Method) -> Result<Cluster> {
        let nodes = parse_peers(peers)?;
        let Some(_) = nodes.iter().find(|n| n.name == me) else {
            return Err(usage(
                format!("--node {me}: not among the --peers ({peers})"),
                "give every node the same --peers list, its own entry included",
            ));
        };
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let assignment = Assignment::new(method, &names)
            .map_err(|e| usage(format!("--peers {peers}: {e}"), "rename the nodes"))?;
        // Reordered as the assignment indexes them.
        let nodes: Vec<Node> = assignment
            .names()
            .iter()
            .map(|name| nodes.iter().find(|n| &n.name == name).cloned())
            .collect::<Option<_>>()
            .expect("the assignment's names are the nodes'");
        let me = nodes.iter().position(|n| n.name == me).unwrap_or(0);
        let method_text = match method {
            Method::Consistent { replicas } => format!("consistent/{replicas}"),
            m => m.name().to_owned(),
        };
        let list: Vec<String> = nodes
            .iter()
            .map(|n| format!("{}={}", n.name, n.addr))
            .collect();
        let canonical = format!("{method_text} {}", list.join(","));
        Ok(Cluster {
            nodes,
            me,
            assignment,
            canonical,
            leaving: None,
        })
    }

    /// The cluster of `--peers LIST` seen from node `me`, which is not in it: a node that
    /// leaves, and owns no key.
    pub fn leaving(me: &str, peers: &str, method: Method) -> Result<Cluster> {
        let first = parse_peers(peers)?
            .first()
            .map(|n| n.name.clone())
            .unwrap_or_default();
        let mut c = Cluster::new(&first, peers, method)?;
        c.me = usize::MAX;
        c.leaving = Some(Node {
            name: me.to_owned(),
            addr: String::new(),
        });
        Ok(c)
    }

    /// This node.
    pub fn this(&self) -> &Node {
        match &self.leaving {
            Some(n) => n,
            None => &self.nodes[self.me],
        }
    }

    /// The index of the node that owns `key` (a queue key).
    pub fn owner(&self, key: &[u8]) -> usize {
        self.assignment.owner(key)
    }

    /// Marks a call this node makes to another: its name and its list.
    pub fn mark<T>(&self, request: &mut Request<T>) {
        let m = request.metadata_mut();
        if let Ok(v) = self.this().name.parse() {
            m.insert(FROM, v);
        }
        if let Ok(v) = self.canonical.parse() {
            m.insert(MEMBERS, v);
        }
    }

    /// Checks a call: `Ok(Some(name))` for a call forwarded by node `name` of the same list,
    /// `Ok(None)` for a client's call, an error for a node of another list (or, unless
    /// `outsiders`, for a node not in the list: a node that leaves may only send its queues).
    pub fn caller(
        &self,
        metadata: &MetadataMap,
        outsiders: bool,
    ) -> Result<Option<String>, Status> {
        let Some(from) = metadata.get(FROM) else {
            return Ok(None);
        };
        let from = from.to_str().unwrap_or("?").to_owned();
        let theirs = metadata
            .get(MEMBERS)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if theirs != self.canonical {
            return Err(Status::failed_precondition(format!(
                "node {from} was started with another list of nodes: it has \"{theirs}\", node \
                 {} has \"{}\"; restart the nodes with one --peers list (and one --assign and \
                 --replicas)",
                self.this().name,
                self.canonical
            )));
        }
        if !outsiders && !self.nodes.iter().any(|n| n.name == from) {
            return Err(Status::failed_precondition(format!(
                "a call claims to come from node {from}, which is not in the list \"{}\"",
                self.canonical
            )));
        }
        Ok(Some(from))
    }
}

/// The file, in `DIR/handoff/`, that holds the list of nodes the store last served with.
const MEMBERS_FILE: &str = "members";

/// The file, in `DIR/handoff/`, that marks a node new to the cluster that has not learnt yet
/// whether a move is under way: its starts ask the other nodes again.
const FRESH_FILE: &str = "new";

/// Removes the mark of a node new to the cluster (in `DIR/handoff/`, `handoff`): it knows
/// where it stands.
pub fn settled(handoff: &std::path::Path) -> Result<()> {
    match remove_handoff_file(&handoff.join(FRESH_FILE)) {
        Ok(()) => {
            std::fs::File::open(handoff)?.sync_all()?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The file, in `DIR/handoff/`, that names the node whose store this is: written at its
/// first start as a node, so that a store started under another node's name (which would
/// serve, or send away, what the other node's store holds) is refused.
const NODE_FILE: &str = "node";

/// Refuses to start the store in `dir` as node `name` when it is another node's store.
pub fn check_name(dir: &std::path::Path, name: &str) -> Result<()> {
    match read_trimmed(&dir.join("handoff").join(NODE_FILE))? {
        Some(own) if own != name => Err(explained(
            format!(
                "{} is the store of node {own}, not of node {name}",
                dir.display()
            ),
            format!("start it with --node {own}, or give node {name} its own directory"),
        )),
        _ => Ok(()),
    }
}

/// Records that the store in `dir` is node `name`'s, once (the caller holds its lock and has
/// called [`check_name`]).
pub fn record_name(dir: &std::path::Path, name: &str) -> Result<()> {
    let path = dir.join("handoff").join(NODE_FILE);
    if read_trimmed(&path)?.is_none() {
        write_durably(&path, &format!("{name}\n"))?;
    }
    Ok(())
}

/// The file, in `DIR/handoff/`, that holds the list of nodes before the move under way, if
/// one is (`super::moves`).
pub const MOVE_FILE: &str = "move";

/// The file, in `DIR/handoff/`, that holds the list a move under way was for, when nodes lost
/// for good were dropped from it (`--lost`): the move keeps that list's id.
pub const MOVE_TO_FILE: &str = "move-to";

/// A list of nodes in canonical form, parsed: its assignment and its nodes' names.
pub struct Previous {
    /// The list, in canonical form.
    pub canonical: String,
    /// Who owned which key under it.
    pub assignment: Assignment,
}

impl Previous {
    /// Parses a list in canonical form (`METHOD NAME=ADDR,...`, as [`Cluster::canonical`]).
    pub fn parse(canonical: &str) -> Result<Previous> {
        let bad = || {
            explained(
                format!("{canonical:?} is not a list of nodes in canonical form"),
                "the file was not written by crivello serve: restore it or remove the store",
            )
        };
        let (method, list) = canonical.split_once(' ').ok_or_else(bad)?;
        let method = match method.split_once('/') {
            Some(("consistent", c)) => Method::Consistent {
                replicas: c.parse().map_err(|_| bad())?,
            },
            None if method == "rendezvous" => Method::Rendezvous,
            None if method == "permutation" => Method::Permutation,
            _ => return Err(bad()),
        };
        // (A list the store holds that does not parse is damage, not a usage error.)
        let nodes = parse_peers(list).map_err(|_| bad())?;
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let assignment = Assignment::new(method, &names).map_err(|_| bad())?;
        Ok(Previous {
            canonical: canonical.to_owned(),
            assignment,
        })
    }

    /// The name of the node that owned `key`.
    pub fn owner(&self, key: &[u8]) -> &str {
        &self.assignment.names()[self.assignment.owner(key)]
    }
}

/// Whether the store in `dir` last served as node `name` of a cluster.
pub fn served_as(dir: &std::path::Path, name: &str) -> Result<bool> {
    let Some(list) = read_trimmed(&dir.join("handoff").join(MEMBERS_FILE))? else {
        return Ok(false);
    };
    if list == "alone" {
        return Ok(false);
    }
    let p = Previous::parse(&list)?;
    Ok(p.assignment.names().iter().any(|n| n == name))
}

/// Checks the start of a node that leaves ([`Cluster::leaving`]): no hand-off log may hold
/// records (they are for nodes of the list it served with: restart it with that list until
/// they are delivered). Returns the list it served with, and whether its move was recorded
/// before.
pub fn leaving_start(dir: &std::path::Path) -> Result<(String, bool)> {
    let handoff = dir.join("handoff");
    if let Ok(entries) = std::fs::read_dir(&handoff) {
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = file.strip_suffix(".log") else {
                continue;
            };
            let log = super::handoff::HandOff::open(&handoff, stem)
                .map_err(|e| anyhow::anyhow!("open the hand-off log {file}: {e}"))?;
            if log.pending() {
                return Err(explained(
                    format!(
                        "the hand-off log {} holds {} records",
                        handoff.join(&file).display(),
                        log.waiting()
                    ),
                    "restart the node with the list it served with until they are delivered, \
                     then let it leave",
                ));
            }
        }
    }
    let before = read_trimmed(&handoff.join(MEMBERS_FILE))?.unwrap_or_default();
    match read_trimmed(&handoff.join(MOVE_FILE))? {
        Some(previous) => Ok((previous, true)),
        None => Ok((before, false)),
    }
}

/// Whether the store in `dir` left the cluster of the list `canonical` (it sent everything
/// when it was started with that list, which does not name it). Only [`left`] writes a list
/// that does not name the node, once everything is sent: a crash after that write, before
/// the move's record is removed, has left too (the caller ends [`left`] again).
pub fn left_under(dir: &std::path::Path, canonical: &str) -> Result<bool> {
    let handoff = dir.join("handoff");
    Ok(read_trimmed(&handoff.join(MEMBERS_FILE))?.as_deref() == Some(canonical))
}

/// Records that a node that left sent everything: no move under way, and the list it left.
pub fn left(dir: &std::path::Path, list: &str) -> Result<()> {
    let handoff = dir.join("handoff");
    write_durably(&handoff.join(MEMBERS_FILE), &format!("{list}\n"))?;
    match remove_handoff_file(&handoff.join(MOVE_FILE)) {
        Ok(()) => std::fs::File::open(&handoff)?.sync_all()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// How a node starts, as [`check_start`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// With the list it served with last (or alone, as before).
    Same,
    /// In a cluster, with a store that never served in one: a move may be under way that
    /// the other nodes know of.
    Fresh,
    /// With a new list: the queues move from the owners of the previous list, in canonical
    /// form, to those of the new one (`super::moves`).
    Moving(String),
}

/// The list `list` (canonical form) without the nodes named in `lost`.
fn without(list: &str, lost: &[String]) -> String {
    let Some((method, nodes)) = list.split_once(' ') else {
        return list.to_owned();
    };
    let kept: Vec<&str> = nodes
        .split(',')
        .filter(|entry| {
            let name = entry.split_once('=').map_or(*entry, |(n, _)| n);
            !lost.iter().any(|l| l == name)
        })
        .collect();
    format!("{method} {}", kept.join(","))
}

/// Writes `text` as `path`, atomically and durably (temporary file, sync, rename, sync of
/// the directory).
pub fn write_durably(path: &std::path::Path, text: &str) -> Result<()> {
    let dir = path.parent().expect("a file in a directory");
    let store = dir.parent().unwrap_or(std::path::Path::new("."));
    // Into the store this process serves only (a store moved away, removed or replaced
    // meanwhile gets nothing, and is not made again).
    super::handoff::check_served(store)?;
    if !dir.is_dir() {
        std::fs::create_dir(dir)?;
        std::fs::File::open(store)?.sync_all()?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    super::handoff::check_served(store)?;
    Ok(())
}

/// Removes the hand-off file `path` (`DIR/handoff/NAME`) of the store this process serves,
/// as `std::fs::remove_file` does, after [`super::handoff::check_served`].
pub fn remove_handoff_file(path: &std::path::Path) -> std::io::Result<()> {
    let store = path
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap_or(std::path::Path::new("."));
    super::handoff::check_served(store)?;
    std::fs::remove_file(path)
}

/// Reads a small file of `DIR/handoff/`, trimmed; `None` if it does not exist.
fn read_trimmed(path: &std::path::Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("read {}: {e}", path.display())),
    }
}

/// Refuses a `--lost` that names a node of the list (a node lost for good leaves it): a
/// check of the arguments alone, made before the store is opened.
pub fn check_lost(cluster: Option<&Cluster>, lost: &[String]) -> Result<()> {
    if let Some(c) = cluster {
        if let Some(l) = lost.iter().find(|l| c.nodes.iter().any(|n| &n.name == *l)) {
            return Err(explained(
                format!("--lost {l}: node {l} is in the list \"{}\"", c.canonical),
                "a node lost for good leaves the list: restart every node with a list without \
                 it, and with --lost naming it",
            ));
        }
    }
    Ok(())
}

/// Checks, before serving, that starting with this list (none: a node alone) loses nothing:
/// no hand-off log of a node that is not in the list may hold records (they would never be
/// delivered), none may hold records when the list changed, and a list may not change while
/// a move is under way. When a cluster's list changed, records the move (the previous list,
/// in `handoff/move`) before the new list: the queues whose owner changed then move
/// (`super::moves`). A node that ran alone may not join a cluster with queues that another
/// node would own. Then records the list.
pub fn check_start(
    dir: &std::path::Path,
    cluster: Option<&Cluster>,
    frontier: &crivello::Frontier,
    lost: &[String],
) -> Result<Start> {
    let handoff = dir.join("handoff");
    let now = cluster.map_or_else(|| "alone".to_owned(), |c| c.canonical.clone());
    check_lost(cluster, lost)?;
    let before = read_trimmed(&handoff.join(MEMBERS_FILE))?;
    let moving = read_trimmed(&handoff.join(MOVE_FILE))?;
    if moving.is_none() && read_trimmed(&handoff.join(MOVE_TO_FILE))?.is_some() {
        // A crash came between the two removals of a finished move's records: its target
        // is no later move's.
        remove_handoff_file(&handoff.join(MOVE_TO_FILE))?;
        std::fs::File::open(&handoff)?.sync_all()?;
    }
    if let Some(previous) = &moving {
        if before.as_deref() == Some(previous.as_str()) {
            // A crash came between the two records of a move's start: nothing of the move
            // happened (a node sends only once its list is recorded). With the previous
            // list the node goes on as before; with another, that move starts.
            if now == *previous || cluster.is_none() {
                remove_handoff_file(&handoff.join(MOVE_FILE))?;
                std::fs::File::open(&handoff)?.sync_all()?;
                return check_start(dir, cluster, frontier, lost);
            }
            write_durably(&handoff.join(MEMBERS_FILE), &format!("{now}\n"))?;
            return Ok(Start::Moving(previous.clone()));
        }
        if let Some(b) = before
            .as_deref()
            .filter(|b| without(b, lost) == now && !lost.is_empty())
        {
            if let Some(c) = cluster.filter(|c| !c.assignment.method().contravariant()) {
                return Err(explained(
                    format!(
                        "--lost {}: the move from the list \"{previous}\" to \"{b}\" is not \
                         finished, and with --assign {} the list without the nodes lost gives \
                         keys of the others to other nodes too",
                        lost.join(","),
                        c.assignment.method().name()
                    ),
                    "restart every node with the list of the move until it is finished, then \
                     with the list without the nodes lost and --lost naming them",
                ));
            }
            // The move's list without the nodes lost: the move goes on, to this list, under
            // the id of the list it was for.
            if read_trimmed(&handoff.join(MOVE_TO_FILE))?.is_none() {
                write_durably(&handoff.join(MOVE_TO_FILE), &format!("{b}\n"))?;
            }
            write_durably(&handoff.join(MEMBERS_FILE), &format!("{now}\n"))?;
            return Ok(Start::Moving(previous.clone()));
        }
        if before.as_deref() != Some(now.as_str()) {
            return Err(explained(
                format!(
                    "the move from the list \"{previous}\" to \"{}\" is not finished, and \
                     this start has the list \"{now}\"",
                    before.as_deref().unwrap_or("?")
                ),
                "restart every node with the list of the move until it is finished (GetStats \
                 counts \"moving\" until then)",
            ));
        }
        return Ok(Start::Moving(previous.clone()));
    }
    // The list it served with, but for nodes lost for good: with a contravariant method,
    // only their keys change owners (a method that moves others' keys too makes it a move).
    let shrunk = !lost.is_empty()
        && cluster.is_some_and(|c| c.assignment.method().contravariant())
        && before
            .as_deref()
            .is_some_and(|b| b != now && without(b, lost) == now);
    let listed = |name: &str| {
        cluster.is_some_and(|c| c.nodes.iter().any(|n| n.name == name) && c.this().name != name)
    };
    if let Ok(entries) = std::fs::read_dir(&handoff) {
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = file.strip_suffix(".log") else {
                continue;
            };
            let Some((node, _lane)) = stem.rsplit_once('.') else {
                continue;
            };
            // Without the lost nodes, the others keep their keys: their records stay theirs.
            let changed = before.as_deref() != Some(now.as_str()) && !shrunk;
            if (listed(node) && !changed) || lost.iter().any(|l| l == node) {
                // A lost node's items go to their keys' owners once this node serves.
                continue;
            }
            let log = super::handoff::HandOff::open(&handoff, stem)
                .map_err(|e| anyhow::anyhow!("open the hand-off log {file}: {e}"))?;
            if log.pending() && listed(node) {
                // The new list may give some of its items' keys to another node.
                return Err(explained(
                    format!(
                        "the hand-off log {} holds {} records for node {node}, and the node \
                         list changed (it was \"{}\", it is \"{now}\")",
                        handoff.join(&file).display(),
                        log.waiting(),
                        before.as_deref().unwrap_or("alone")
                    ),
                    "restart with the previous list until every hand-off log is delivered",
                ));
            }
            if log.pending() {
                return Err(explained(
                    format!(
                        "the hand-off log {} holds {} records for node {node}, which the \
                         node list ({now}) does not name",
                        handoff.join(&file).display(),
                        log.waiting()
                    ),
                    format!(
                        "restart with the previous list ({}) until node {node} has taken them",
                        before.as_deref().unwrap_or("unknown")
                    ),
                ));
            }
        }
    }
    if (before.as_deref() == Some(now.as_str()) || shrunk)
        && cluster.is_some()
        && handoff.join(FRESH_FILE).exists()
    {
        // New to the cluster, and it did not learn whether a move is under way (the list
        // without the nodes lost for good: it still has that to learn).
        if shrunk {
            write_durably(&handoff.join(MEMBERS_FILE), &format!("{now}\n"))?;
        }
        return Ok(Start::Fresh);
    }
    if shrunk {
        // The list it served with, but for nodes lost for good: nothing of theirs can move
        // from them, and nothing moves between the others (their keys stay theirs).
        write_durably(&handoff.join(MEMBERS_FILE), &format!("{now}\n"))?;
        return Ok(Start::Same);
    }
    let mut start = Start::Same;
    if before.as_deref() != Some(now.as_str()) {
        if let Some(c) = cluster {
            match before.as_deref() {
                // A store that never served in a cluster (new, or run alone).
                None | Some("alone") => {
                    // What was acknowledged is in its queue first.
                    frontier.flush()?;
                    let mut stranded = Vec::new();
                    for crawl in frontier.crawls()? {
                        for q in frontier.queues(&crawl, 0, usize::MAX)? {
                            if q.waiting + q.leased > 0 && c.owner(&q.key) != c.me {
                                stranded.push(String::from_utf8_lossy(&q.key).into_owned());
                            }
                        }
                    }
                    if !stranded.is_empty() {
                        let n = stranded.len();
                        stranded.truncate(3);
                        return Err(explained(
                            format!(
                                "this store holds {n} queues with URLs waiting or in transit \
                                 whose keys the list \"{now}\" gives to other nodes (e.g. {}); \
                                 it served them alone",
                                stranded.join(", "),
                            ),
                            "a node that served alone cannot join a cluster with them: serve \
                             it alone until they drain, or start the cluster on new stores",
                        ));
                    }
                    // Until the node knows whether a move is under way (`Moves`), a restart
                    // asks again: the mark is written before the list.
                    write_durably(&handoff.join(FRESH_FILE), "new\n")?;
                    start = Start::Fresh;
                }
                Some(previous) => {
                    // The move is recorded before the list: a crash between the two starts
                    // the move again.
                    Previous::parse(previous)?;
                    write_durably(&handoff.join(MOVE_FILE), &format!("{previous}\n"))?;
                    // It served with the previous list: new to this one, it is not.
                    settled(&handoff)?;
                    start = Start::Moving(previous.to_owned());
                }
            }
        }
        write_durably(&handoff.join(MEMBERS_FILE), &format!("{now}\n"))?;
    }
    Ok(start)
}

/// A call forwarded by another node of the cluster (a request extension): the node's name.
#[derive(Debug, Clone)]
pub struct Forwarded(pub String);

/// Checks each call: one marked by another node passes if that node has this node's list
/// (and is in it, unless the flag lets nodes that leave in), and gets a [`Forwarded`]
/// extension; outside a cluster, a marked call is refused.
#[derive(Clone)]
pub struct Check(pub Option<Arc<Cluster>>, pub bool);

impl Interceptor for Check {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        match &self.0 {
            Some(c) => {
                if let Some(from) = c.caller(request.metadata(), self.1)? {
                    request.extensions_mut().insert(Forwarded(from));
                }
            }
            None => {
                if let Some(from) = request.metadata().get(FROM) {
                    return Err(Status::failed_precondition(format!(
                        "node {} forwarded a call to a node that runs alone (no --peers): restart every node \
                         with one --peers list",
                        from.to_str().unwrap_or("?")
                    )));
                }
            }
        }
        Ok(request)
    }
}

/// Parses `NAME=HOST:PORT[,NAME=HOST:PORT...]`: names non-empty and distinct, addresses
/// valid and distinct.
pub fn parse_peers(text: &str) -> Result<Vec<Node>> {
    let hint = "give NAME=HOST:PORT[,NAME=HOST:PORT...], e.g. a=127.0.0.1:7071,b=127.0.0.1:7072";
    let mut nodes = Vec::new();
    let (mut names, mut addrs) = (HashSet::new(), HashSet::new());
    for entry in text.split(',') {
        let entry = entry.trim();
        let Some((name, addr)) = entry.split_once('=') else {
            return Err(usage(
                format!("--peers: {entry:?} is not NAME=HOST:PORT"),
                hint,
            ));
        };
        let (name, addr) = (name.trim(), addr.trim());
        if name.is_empty()
            || name.starts_with('.')
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(usage(
                format!("--peers: {name:?} is not a node name"),
                "name nodes with letters, digits, '-', '_' and '.' (not first)",
            ));
        }
        let parsed: SocketAddr = addr.parse().map_err(|_| {
            usage(
                format!("--peers: {addr:?} (node {name}) is not an address"),
                "give HOST:PORT with a numeric host, e.g. 127.0.0.1:7071",
            )
        })?;
        if !names.insert(name.to_owned()) {
            return Err(usage(
                format!("--peers: two nodes are named {name}"),
                "give each node its own name",
            ));
        }
        if !addrs.insert(parsed) {
            return Err(usage(
                format!("--peers: two nodes have the address {parsed}"),
                "give each node its own HOST:PORT",
            ));
        }
        nodes.push(Node {
            name: name.to_owned(),
            addr: parsed.to_string(),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consistent() -> Method {
        Method::Consistent { replicas: 300 }
    }

    #[test]
    fn a_list_is_parsed_and_its_canonical_form_is_sorted() {
        let c = Cluster::new(
            "b",
            "c=127.0.0.1:3, a=127.0.0.1:1,b=127.0.0.1:2",
            consistent(),
        )
        .unwrap();
        assert_eq!(c.this().addr, "127.0.0.1:2");
        assert_eq!(
            c.canonical,
            "consistent/300 a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3"
        );
        let same = Cluster::new(
            "a",
            "a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3",
            consistent(),
        )
        .unwrap();
        assert_eq!(same.canonical, c.canonical);
        for key in [&b"example.com"[..], b"a.org", b"x"] {
            assert_eq!(c.owner(key), same.owner(key));
        }
    }

    #[test]
    fn bad_lists_are_refused_with_what_is_wrong() {
        let m = consistent();
        let cases = [
            ("a", "b=127.0.0.1:1", "not among the --peers"),
            ("a", "a=127.0.0.1:1,a=127.0.0.1:2", "two nodes are named a"),
            (
                "a",
                "a=127.0.0.1:1,b=127.0.0.1:1",
                "two nodes have the address",
            ),
            ("a", "a=localhost:1", "not an address"),
            ("a", "a127.0.0.1:1", "not NAME=HOST:PORT"),
            ("a", "a=127.0.0.1:1,=127.0.0.1:2", "not a node name"),
            ("a", "a=127.0.0.1:1,", "not NAME=HOST:PORT"),
        ];
        for (me, peers, why) in cases {
            let e = format!("{:#}", Cluster::new(me, peers, m).unwrap_err());
            assert!(e.contains(why), "{peers}: {e}");
        }
    }

    #[test]
    fn a_call_from_a_node_of_another_list_is_refused_naming_both_lists() {
        let a = Cluster::new("a", "a=127.0.0.1:1,b=127.0.0.1:2", consistent()).unwrap();
        let b = Cluster::new(
            "b",
            "a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3",
            consistent(),
        )
        .unwrap();
        let mut r = Request::new(());
        a.mark(&mut r);
        let e = b.caller(r.metadata(), false).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains(&a.canonical), "{}", e.message());
        assert!(e.message().contains(&b.canonical), "{}", e.message());
        let a2 = Cluster::new("a", "a=127.0.0.1:1,b=127.0.0.1:2", consistent()).unwrap();
        let mut r = Request::new(());
        a2.mark(&mut r);
        assert_eq!(a.caller(r.metadata(), false).unwrap().as_deref(), Some("a"));
        assert_eq!(a.caller(&MetadataMap::new(), false).unwrap(), None);
        // Same names, another method: refused too.
        let r2 = Cluster::new("b", "a=127.0.0.1:1,b=127.0.0.1:2", Method::Rendezvous).unwrap();
        let mut r = Request::new(());
        a.mark(&mut r);
        assert!(r2.caller(r.metadata(), false).is_err());
    }

    #[test]
    fn a_list_without_the_lost_nodes_keeps_the_others_in_order() {
        let list = "consistent/300 a=h:1,b=h:2,c=h:3";
        assert_eq!(
            without(list, &["b".to_owned()]),
            "consistent/300 a=h:1,c=h:3"
        );
        assert_eq!(without(list, &[]), list);
        assert_eq!(without(list, &["bb".to_owned()]), list);
        assert_eq!(without("alone", &["b".to_owned()]), "alone");
    }

    /// Node a of the list `peers`, by consistent hashing.
    fn node_a(peers: &str) -> Cluster {
        Cluster::new("a", peers, consistent()).unwrap()
    }

    /// A node's directory whose hand-off directory holds `files` (name, text).
    fn started(files: &[(&str, &str)]) -> (tempfile::TempDir, crivello::Frontier) {
        // The node's store, with its hand-off files in it, as `serve` keeps them.
        let dir = tempfile::tempdir().unwrap();
        let frontier = crivello::Frontier::open(dir.path(), crivello::Options::new()).unwrap();
        let handoff = dir.path().join("handoff");
        std::fs::create_dir_all(&handoff).unwrap();
        for (name, text) in files {
            std::fs::write(handoff.join(name), format!("{text}\n")).unwrap();
        }
        (dir, frontier)
    }

    fn read(dir: &tempfile::TempDir, name: &str) -> Option<String> {
        read_trimmed(&dir.path().join("handoff").join(name)).unwrap()
    }

    #[test]
    fn a_node_that_crashed_in_the_middle_of_leaving_has_left() {
        let leaving = Cluster::leaving("c", "a=127.0.0.1:1,b=127.0.0.1:2", consistent()).unwrap();
        let old = "consistent/300 a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3";
        // Sending: the move recorded, the list it served with still naming it.
        let (dir, _f) = started(&[(MEMBERS_FILE, old), (MOVE_FILE, old)]);
        assert!(served_as(dir.path(), "c").unwrap());
        assert!(!left_under(dir.path(), &leaving.canonical).unwrap());
        // A crash inside `left`: the new list written, the move's record not yet removed.
        let (dir, _f) = started(&[(MEMBERS_FILE, &leaving.canonical), (MOVE_FILE, old)]);
        assert!(!served_as(dir.path(), "c").unwrap());
        assert!(left_under(dir.path(), &leaving.canonical).unwrap());
        left(dir.path(), &leaving.canonical).unwrap();
        assert_eq!(read(&dir, MOVE_FILE), None);
        assert!(left_under(dir.path(), &leaving.canonical).unwrap());
        // Another list is not the one it left.
        let other = Cluster::leaving("c", "a=127.0.0.1:1", consistent()).unwrap();
        assert!(!left_under(dir.path(), &other.canonical).unwrap());
    }

    #[test]
    fn the_target_a_finished_move_left_behind_is_removed_at_start() {
        let c = node_a("a=127.0.0.1:1,b=127.0.0.1:2");
        let old = "consistent/300 a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3";
        let (dir, frontier) = started(&[(MEMBERS_FILE, &c.canonical), (MOVE_TO_FILE, old)]);
        let start = check_start(dir.path(), Some(&c), &frontier, &[]).unwrap();
        assert_eq!(start, Start::Same);
        assert_eq!(read(&dir, MOVE_TO_FILE), None);
        // A move that begins later is not taken for the one that was retargeted.
        let next = node_a("a=127.0.0.1:1,b=127.0.0.1:2,d=127.0.0.1:4");
        let start = check_start(dir.path(), Some(&next), &frontier, &[]).unwrap();
        assert_eq!(start, Start::Moving(c.canonical.clone()));
        assert_eq!(read(&dir, MOVE_TO_FILE), None);
        assert_eq!(read(&dir, MOVE_FILE), Some(c.canonical.clone()));
    }

    #[test]
    fn a_new_node_whose_list_lost_a_node_is_still_new() {
        let old = node_a("a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3");
        let c = node_a("a=127.0.0.1:1,b=127.0.0.1:2");
        let (dir, frontier) = started(&[(MEMBERS_FILE, &old.canonical), (FRESH_FILE, "new")]);
        let lost = ["c".to_owned()];
        let start = check_start(dir.path(), Some(&c), &frontier, &lost).unwrap();
        assert_eq!(start, Start::Fresh);
        assert_eq!(read(&dir, MEMBERS_FILE), Some(c.canonical.clone()));
        assert_eq!(read(&dir, FRESH_FILE).as_deref(), Some("new"));
        // Not new: the list without the lost node is the same start, even with records
        // waiting for a node of the list (it keeps its keys).
        let (dir, frontier) = started(&[(MEMBERS_FILE, &old.canonical)]);
        let mut log =
            super::super::handoff::HandOff::open(&dir.path().join("handoff"), "b.0").unwrap();
        log.append(&[super::super::pb::UrlItem::default()]).unwrap();
        drop(log);
        let start = check_start(dir.path(), Some(&c), &frontier, &lost).unwrap();
        assert_eq!(start, Start::Same);
        assert_eq!(read(&dir, MEMBERS_FILE), Some(c.canonical.clone()));
        // Another list: refused while they wait.
        let other = node_a("a=127.0.0.1:1,b=127.0.0.1:2,d=127.0.0.1:4");
        let e = check_start(dir.path(), Some(&other), &frontier, &[]).unwrap_err();
        assert!(
            format!("{e:#}").contains("holds 1 records for node b"),
            "{e:#}"
        );
    }

    #[test]
    fn a_move_under_way_to_a_list_that_lost_a_node_goes_on_to_the_list_without_it() {
        let lost = ["c".to_owned()];
        let old = node_a("a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3");
        let c = node_a("a=127.0.0.1:1,b=127.0.0.1:2");
        let (dir, frontier) = started(&[
            (MEMBERS_FILE, &old.canonical),
            (MOVE_FILE, "consistent/300 a=127.0.0.1:1,d=127.0.0.1:4"),
        ]);
        let start = check_start(dir.path(), Some(&c), &frontier, &lost).unwrap();
        assert_eq!(
            start,
            Start::Moving("consistent/300 a=127.0.0.1:1,d=127.0.0.1:4".to_owned())
        );
        assert_eq!(read(&dir, MOVE_TO_FILE), Some(old.canonical.clone()));
    }
}
