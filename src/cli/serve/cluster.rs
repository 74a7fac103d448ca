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

use super::super::explained;

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
}

impl Cluster {
    /// The cluster of `--peers LIST` seen from `--node NAME`, assigning keys by `method`.
    pub fn new(me: &str, peers: &str, method: Method) -> Result<Cluster> {
        let nodes = parse_peers(peers)?;
        let Some(_) = nodes.iter().find(|n| n.name == me) else {
            return Err(explained(
                format!("--node {me}: not among the --peers ({peers})"),
                "give every node the same --peers list, its own entry included",
            ));
        };
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let assignment = Assignment::new(method, &names)
            .map_err(|e| explained(format!("--peers {peers}: {e}"), "rename the nodes"))?;
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
        })
    }

    /// This node.
    pub fn this(&self) -> &Node {
        &self.nodes[self.me]
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
    /// `Ok(None)` for a client's call, an error for a node of another list.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Option<String>, Status> {
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
        if !self.nodes.iter().any(|n| n.name == from) {
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

/// Checks, before serving, that starting with this list (none: a node alone) loses nothing:
/// no hand-off log of a node that is not in the list may hold records (they would never be
/// delivered), and when the list changed, no queue with URLs waiting or in transit may
/// belong to another node under the new list (moving queues between nodes is not built:
/// they would never be served). Then records the list.
pub fn check_start(
    dir: &std::path::Path,
    cluster: Option<&Cluster>,
    frontier: &crivello::Frontier,
) -> Result<()> {
    let handoff = dir.join("handoff");
    let now = cluster.map_or_else(|| "alone".to_owned(), |c| c.canonical.clone());
    let before = match std::fs::read_to_string(handoff.join(MEMBERS_FILE)) {
        Ok(t) => Some(t.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(anyhow::anyhow!(
                "read {}: {e}",
                handoff.join(MEMBERS_FILE).display()
            ))
        }
    };
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
            let changed = before.as_deref() != Some(now.as_str());
            if listed(node) && !changed {
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
    if before.as_deref() != Some(now.as_str()) {
        if let Some(c) = cluster {
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
                        "this store holds {n} queues with URLs waiting or in transit whose keys \
                         the list \"{now}\" gives to other nodes (e.g. {}); it served them \
                         with the list \"{}\"",
                        stranded.join(", "),
                        before.as_deref().unwrap_or("alone")
                    ),
                    "moving queues between nodes is not built yet: restart with the previous \
                     list, or let these queues drain first",
                ));
            }
        }
        std::fs::create_dir_all(&handoff)?;
        let tmp = handoff.join(format!("{MEMBERS_FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, format!("{now}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, handoff.join(MEMBERS_FILE))?;
        std::fs::File::open(&handoff)?.sync_all()?;
    }
    Ok(())
}

/// A call forwarded by another node of the cluster (a request extension): the node's name.
#[derive(Debug, Clone)]
pub struct Forwarded(pub String);

/// Checks each call: one marked by another node passes if that node has this node's list,
/// and gets a [`Forwarded`] extension; outside a cluster, a marked call is refused.
#[derive(Clone)]
pub struct Check(pub Option<Arc<Cluster>>);

impl Interceptor for Check {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        match &self.0 {
            Some(c) => {
                if let Some(from) = c.caller(request.metadata())? {
                    request.extensions_mut().insert(Forwarded(from));
                }
            }
            None => {
                if let Some(from) = request.metadata().get(FROM) {
                    return Err(Status::failed_precondition(format!(
                        "node {} forwarded a call to a node that runs alone (no --peers):                          restart every node with one --peers list",
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
            return Err(explained(
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
            return Err(explained(
                format!("--peers: {name:?} is not a node name"),
                "name nodes with letters, digits, '-', '_' and '.' (not first)",
            ));
        }
        let parsed: SocketAddr = addr.parse().map_err(|_| {
            explained(
                format!("--peers: {addr:?} (node {name}) is not an address"),
                "give HOST:PORT with a numeric host, e.g. 127.0.0.1:7071",
            )
        })?;
        if !names.insert(name.to_owned()) {
            return Err(explained(
                format!("--peers: two nodes are named {name}"),
                "give each node its own name",
            ));
        }
        if !addrs.insert(parsed) {
            return Err(explained(
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
        let e = b.caller(r.metadata()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains(&a.canonical), "{}", e.message());
        assert!(e.message().contains(&b.canonical), "{}", e.message());
        let a2 = Cluster::new("a", "a=127.0.0.1:1,b=127.0.0.1:2", consistent()).unwrap();
        let mut r = Request::new(());
        a2.mark(&mut r);
        assert_eq!(a.caller(r.metadata()).unwrap().as_deref(), Some("a"));
        assert_eq!(a.caller(&MetadataMap::new()).unwrap(), None);
        // Same names, another method: refused too.
        let r2 = Cluster::new("b", "a=127.0.0.1:1,b=127.0.0.1:2", Method::Rendezvous).unwrap();
        let mut r = Request::new(());
        a.mark(&mut r);
        assert!(r2.caller(r.metadata()).is_err());
    }
}
