//! Assigning keys (queue keys: hosts) to agents (frontier nodes), balanced and contravariant:
//! the three functions of the lecture notes §3, each with "the next agent" of §3.4, over
//! agent names. Adding an agent moves keys only to it (about 1/(N+1) of them) and nothing
//! between the others; removing one moves only its keys. `hash mod N`, which moves nearly
//! everything when N changes, is here for comparison ([`Method::Modulo`]).
//!
//! Every function is fixed by this module's constants and the agents' names: any process
//! computes the same owners (tests pin values, so a change is a visible format change).
//!
//! - [`Method::Consistent`] (§3.3): each agent has `C` replicas on a circle of 2^64 points, at
//!   positions drawn by a generator seeded by its name; a key's owner is the agent of the first
//!   replica clockwise from the key's hash (ties between replicas at one point: the smaller
//!   name). Lookup: a binary search among `C·N` replicas. Next agent: continue clockwise to a
//!   replica of another agent.
//! - [`Method::Rendezvous`] (§3.2, min hashing): the owner is the agent minimising
//!   `h(key, agent)` (ties: the smaller name). Lookup: N hashes. Next agent: the next value.
//! - [`Method::Permutation`] (§3.1): a universe of [`UNIVERSE`] slots, each agent in the slot
//!   its name hashes to (two names in one slot are refused); a Fisher–Yates shuffle of the
//!   universe, driven by a generator seeded by the key, run lazily until a slot holding an
//!   agent comes up. Lookup: about `UNIVERSE/(N+1)` steps. Next agent: continue the shuffle.

use std::cell::RefCell;
use std::fmt;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The default number of replicas per agent of consistent hashing (the notes' C).
pub const DEFAULT_REPLICAS: u32 = 300;
/// The number of slots of the permutation method's universe.
pub const UNIVERSE: u32 = 4096;
/// The seed of a key's hash.
const KEY_SEED: u64 = 0x6372_6976_656c_6c6f; // "crivello"

/// An assignment function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Consistent hashing with `replicas` replicas per agent (§3.3).
    Consistent {
        /// Replicas per agent (the notes' C; at least 1).
        replicas: u32,
    },
    /// Min hashing, or rendezvous hashing (§3.2).
    Rendezvous,
    /// Random permutations of a fixed universe (§3.1).
    Permutation,
    /// `hash(key) mod N`: balanced, not contravariant. For comparison.
    Modulo,
}

impl Method {
    /// The method's name, as `crivello serve --assign` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Method::Consistent { .. } => "consistent",
            Method::Rendezvous => "rendezvous",
            Method::Permutation => "permutation",
            Method::Modulo => "modulo",
        }
    }

    /// Whether removing an agent moves only its keys, and adding one moves keys only to it
    /// (every method but [`Method::Modulo`]).
    pub fn contravariant(&self) -> bool {
        !matches!(self, Method::Modulo)
    }
}

/// Why a set of agents was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignError {
    /// No agent.
    Empty,
    /// A name given twice.
    Duplicate(String),
    /// An empty name.
    EmptyName,
    /// Consistent hashing with no replica.
    NoReplicas,
    /// Two names in one slot of the permutation method's universe.
    SameSlot(String, String),
    /// More agents than the permutation method's universe holds.
    TooMany(usize),
}

impl fmt::Display for AssignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssignError::Empty => write!(f, "no agent to assign keys to"),
            AssignError::Duplicate(n) => write!(f, "agent {n:?} is named twice"),
            AssignError::EmptyName => write!(f, "an agent's name is empty"),
            AssignError::NoReplicas => write!(f, "consistent hashing needs at least 1 replica"),
            AssignError::SameSlot(a, b) => write!(
                f,
                "agents {a:?} and {b:?} fall in the same slot of the permutation method's \
                 universe of {UNIVERSE}: rename one of them"
            ),
            AssignError::TooMany(n) => {
                write!(
                    f,
                    "{n} agents: the permutation method takes at most {UNIVERSE}"
                )
            }
        }
    }
}

impl std::error::Error for AssignError {}

/// The keys' owners among a set of named agents.
#[derive(Debug, Clone)]
pub struct Assignment {
    method: Method,
    names: Vec<String>,
    /// Each agent's name hash.
    hashes: Vec<u64>,
    /// Consistent hashing: the replicas, sorted by (position, agent's name).
    ring: Vec<(u64, u32)>,
    /// Permutation: the agent in each slot of the universe (`u32::MAX`: none).
    slots: Vec<u32>,
}

impl Assignment {
    /// The assignment of `method` over the agents `names` (in any order: the owners depend on
    /// the set of names only).
    pub fn new<S: AsRef<str>>(method: Method, names: &[S]) -> Result<Assignment, AssignError> {
        let mut names: Vec<String> = names.iter().map(|n| n.as_ref().to_owned()).collect();
        if names.is_empty() {
            return Err(AssignError::Empty);
        }
        if names.iter().any(String::is_empty) {
            return Err(AssignError::EmptyName);
        }
        // Sorted: an agent's index is its rank among the names, and ties go to the smaller.
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(AssignError::Duplicate(w[0].clone()));
        }
        let hashes: Vec<u64> = names.iter().map(|n| xxh3_64(n.as_bytes())).collect();
        let mut a = Assignment {
            method,
            names,
            hashes,
            ring: Vec::new(),
            slots: Vec::new(),
        };
        match method {
            Method::Consistent { replicas } => {
                if replicas == 0 {
                    return Err(AssignError::NoReplicas);
                }
                for (i, &h) in a.hashes.iter().enumerate() {
                    let mut g = SplitMix(h);
                    for _ in 0..replicas {
                        a.ring.push((g.next(), i as u32));
                    }
                }
                // Agents are indexed in name order: (position, index) orders ties by name.
                a.ring.sort_unstable();
            }
            Method::Permutation => {
                if a.names.len() > UNIVERSE as usize {
                    return Err(AssignError::TooMany(a.names.len()));
                }
                a.slots = vec![u32::MAX; UNIVERSE as usize];
                for (i, &h) in a.hashes.iter().enumerate() {
                    let slot = (h % u64::from(UNIVERSE)) as usize;
                    if a.slots[slot] != u32::MAX {
                        let other = a.names[a.slots[slot] as usize].clone();
                        return Err(AssignError::SameSlot(other, a.names[i].clone()));
                    }
                    a.slots[slot] = i as u32;
                }
            }
            Method::Rendezvous | Method::Modulo => {}
        }
        Ok(a)
    }

    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The agents' names, sorted: an agent's index is its place here.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The index (in [`Assignment::names`]) of the agent that owns `key`.
    pub fn owner(&self, key: &[u8]) -> usize {
        let k = key_hash(key);
        match self.method {
            Method::Consistent { .. } => {
                let at = self.ring.partition_point(|&(p, _)| p < k);
                self.ring[at % self.ring.len()].1 as usize
            }
            Method::Rendezvous => {
                let mut best = (u64::MAX, usize::MAX);
                for (i, &h) in self.hashes.iter().enumerate() {
                    let v = mix(k ^ h);
                    // Strictly smaller only: among equal values the first, the smaller name.
                    if (v, i) < best {
                        best = (v, i);
                    }
                }
                best.1
            }
            Method::Permutation => self.shuffle(k, |_| true).unwrap_or(0),
            Method::Modulo => (k % self.names.len() as u64) as usize,
        }
    }

    /// The agents in `key`'s order of preference: the owner first, then the agent that
    /// would own it were the owner gone (§3.4), and so on; every agent once.
    pub fn preference(&self, key: &[u8]) -> Vec<usize> {
        let k = key_hash(key);
        let n = self.names.len();
        match self.method {
            Method::Consistent { .. } => {
                let mut seen = vec![false; n];
                let mut out = Vec::with_capacity(n);
                let start = self.ring.partition_point(|&(p, _)| p < k);
                for j in 0..self.ring.len() {
                    let agent = self.ring[(start + j) % self.ring.len()].1 as usize;
                    if !seen[agent] {
                        seen[agent] = true;
                        out.push(agent);
                        if out.len() == n {
                            break;
                        }
                    }
                }
                out
            }
            Method::Rendezvous => {
                let mut order: Vec<(u64, usize)> = self
                    .hashes
                    .iter()
                    .enumerate()
                    .map(|(i, &h)| (mix(k ^ h), i))
                    .collect();
                order.sort_unstable();
                order.into_iter().map(|(_, i)| i).collect()
            }
            Method::Permutation => {
                let mut out = Vec::with_capacity(n);
                self.shuffle(k, |agent| {
                    out.push(agent);
                    out.len() == n
                });
                out
            }
            Method::Modulo => {
                // The next agents of hash mod N: the key rehashed over the others.
                let first = (k % n as u64) as usize;
                let mut rest: Vec<usize> = (0..n).filter(|&i| i != first).collect();
                let mut out = vec![first];
                let mut g = SplitMix(k);
                while !rest.is_empty() {
                    let j = (g.next() % rest.len() as u64) as usize;
                    out.push(rest.remove(j));
                }
                out
            }
        }
    }

    /// The first agent in `key`'s order of preference for which `live` holds (§3.4: the
    /// owner while the owner is down), or `None` if none does.
    pub fn owner_among(&self, key: &[u8], live: impl Fn(usize) -> bool) -> Option<usize> {
        if self.method == Method::Permutation {
            return self.shuffle(key_hash(key), live);
        }
        self.preference(key).into_iter().find(|&i| live(i))
    }

    /// Runs the lazy Fisher–Yates shuffle of the universe seeded by `k`, and returns the
    /// first agent (in the order it comes up) for which `stop` holds.
    fn shuffle(&self, k: u64, mut stop: impl FnMut(usize) -> bool) -> Option<usize> {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            s.begin();
            let mut g = SplitMix(k);
            let u = UNIVERSE;
            for i in 0..u {
                // Swap position i with a uniform one of i..u: position i is then final.
                let j = i + below(g.next(), u - i);
                let at_j = s.get(j);
                let at_i = s.get(i);
                s.set(j, at_i);
                let agent = self.slots[at_j as usize];
                if agent != u32::MAX && stop(agent as usize) {
                    return Some(agent as usize);
                }
            }
            None
        })
    }
}

thread_local! {
    /// The shuffle's sparse state, reused from one lookup to the next.
    static SCRATCH: RefCell<Shuffle> = RefCell::new(Shuffle::new());
}

/// The positions of the universe a lazy shuffle has changed: a value per position and the
/// lookup that wrote it, so that starting a lookup costs nothing.
struct Shuffle {
    value: Vec<u32>,
    stamp: Vec<u32>,
    now: u32,
}

impl Shuffle {
    fn new() -> Shuffle {
        Shuffle {
            value: vec![0; UNIVERSE as usize],
            stamp: vec![0; UNIVERSE as usize],
            now: 0,
        }
    }

    fn begin(&mut self) {
        self.now = self.now.wrapping_add(1);
        if self.now == 0 {
            self.stamp.fill(0);
            self.now = 1;
        }
    }

    fn get(&self, p: u32) -> u32 {
        if self.stamp[p as usize] == self.now {
            self.value[p as usize]
        } else {
            p
        }
    }

    fn set(&mut self, p: u32, v: u32) {
        self.stamp[p as usize] = self.now;
        self.value[p as usize] = v;
    }
}

/// The hash of a key.
fn key_hash(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, KEY_SEED)
}

/// A 64-bit finaliser (MurmurHash3's): `h(key, agent) = mix(key_hash ^ agent_hash)`.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// `x` mapped to `0..n` by a multiply-high.
fn below(x: u64, n: u32) -> u32 {
    ((u128::from(x) * u128::from(n)) >> 64) as u32
}

/// SplitMix64, the generator seeded by an agent's name (replicas) or a key (shuffles).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn methods() -> [Method; 3] {
        [
            Method::Consistent { replicas: 300 },
            Method::Rendezvous,
            Method::Permutation,
        ]
    }

    /// `n` agent names, `node-i` for increasing `i`, skipping a name whose slot of the
    /// permutation method's universe an earlier one took.
    fn names(n: usize) -> Vec<String> {
        let mut taken = std::collections::HashSet::new();
        (0..)
            .map(|i| format!("node-{i}"))
            .filter(|name| taken.insert(xxh3_64(name.as_bytes()) % u64::from(UNIVERSE)))
            .take(n)
            .collect()
    }

    fn keys(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("host{i}.example.org").into_bytes())
            .collect()
    }

    #[test]
    fn adding_an_agent_moves_keys_only_to_it_and_removing_one_only_its_own() {
        let keys = keys(20_000);
        for method in methods() {
            for n in [1, 2, 3, 5, 8] {
                let before = Assignment::new(method, &names(n)).unwrap();
                let after = Assignment::new(method, &names(n + 1)).unwrap();
                let added = &names(n + 1)[n];
                let new = after.names().iter().position(|x| x == added).unwrap();
                let mut moved = 0;
                for k in &keys {
                    let (a, b) = (
                        &before.names()[before.owner(k)],
                        &after.names()[after.owner(k)],
                    );
                    if a != b {
                        assert_eq!(
                            after.owner(k),
                            new,
                            "{method:?} {n}: moved between old agents"
                        );
                        moved += 1;
                    }
                }
                let share = moved as f64 / keys.len() as f64;
                let ideal = 1.0 / (n + 1) as f64;
                assert!(
                    (share / ideal - 1.0).abs() < 0.25,
                    "{method:?} {n}: {share} vs {ideal}"
                );
            }
        }
    }

    #[test]
    fn the_next_agent_is_the_owner_once_the_owner_is_gone() {
        let keys = keys(3000);
        for method in methods() {
            let all = Assignment::new(method, &names(6)).unwrap();
            for k in &keys {
                let pref = all.preference(k);
                assert_eq!(pref.len(), 6);
                assert_eq!(pref[0], all.owner(k));
                let mut sorted = pref.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..6).collect::<Vec<_>>());
                // Without its owner, the key goes to the second agent of its preference.
                let owner = all.names()[pref[0]].clone();
                let rest: Vec<String> = names(6).into_iter().filter(|x| *x != owner).collect();
                let without = Assignment::new(method, &rest).unwrap();
                assert_eq!(
                    without.names()[without.owner(k)],
                    all.names()[pref[1]],
                    "{method:?}"
                );
                assert_eq!(all.owner_among(k, |i| i != pref[0]), Some(pref[1]));
                assert_eq!(all.owner_among(k, |_| false), None);
            }
        }
    }

    #[test]
    fn the_order_of_the_names_does_not_matter_and_bad_sets_are_refused() {
        let mut shuffled = names(7);
        shuffled.reverse();
        for method in methods() {
            let a = Assignment::new(method, &names(7)).unwrap();
            let b = Assignment::new(method, &shuffled).unwrap();
            for k in keys(500) {
                assert_eq!(a.owner(&k), b.owner(&k));
            }
        }
        let none: [&str; 0] = [];
        assert_eq!(
            Assignment::new(Method::Rendezvous, &none).unwrap_err(),
            AssignError::Empty
        );
        assert_eq!(
            Assignment::new(Method::Rendezvous, &["a", "b", "a"]).unwrap_err(),
            AssignError::Duplicate("a".into())
        );
        assert_eq!(
            Assignment::new(Method::Consistent { replicas: 0 }, &["a"]).unwrap_err(),
            AssignError::NoReplicas
        );
        assert_eq!(
            Assignment::new(Method::Rendezvous, &[""]).unwrap_err(),
            AssignError::EmptyName
        );
        // Two names in one slot: found by search, refused with both names.
        let slot = |n: &str| xxh3_64(n.as_bytes()) % u64::from(UNIVERSE);
        let first = "node-0";
        let twin = (1..)
            .map(|i| format!("node-{i}"))
            .find(|n| slot(n) == slot(first))
            .unwrap();
        let e = Assignment::new(Method::Permutation, &[first, twin.as_str()]).unwrap_err();
        assert!(e.to_string().contains("rename one"), "{e}");
    }

    proptest::proptest! {
        /// Any names, any keys: a key never moves between two agents present before and
        /// after an agent joins, and the next agent is the owner without the first.
        #[test]
        fn contravariant_for_any_names_and_keys(
            names in proptest::collection::hash_set("[a-z0-9.-]{1,12}", 1..10),
            extra in "[A-Z]{1,6}",
            keys in proptest::collection::vec(proptest::collection::vec(0u8..=255, 0..40), 1..60),
            replicas in 1u32..400,
        ) {
            let old: Vec<String> = names.into_iter().collect();
            let mut new = old.clone();
            new.push(extra.clone());
            for method in [Method::Consistent { replicas }, Method::Rendezvous, Method::Permutation] {
                let (Ok(a), Ok(b)) = (Assignment::new(method, &old), Assignment::new(method, &new))
                else {
                    // Two names in one slot of the permutation's universe: refused.
                    continue;
                };
                for k in &keys {
                    let (x, y) = (&a.names()[a.owner(k)], &b.names()[b.owner(k)]);
                    proptest::prop_assert!(x == y || *y == extra, "{method:?}: {x} -> {y}");
                    let pref = b.preference(k);
                    let second = b.owner_among(k, |i| i != pref[0]);
                    proptest::prop_assert_eq!(second, pref.get(1).copied());
                }
            }
        }
    }

    /// The owners of `host-0` .. `host-23` among alpha, beta, gamma and delta, as initials.
    fn initials(method: Method) -> String {
        let a = Assignment::new(method, &["alpha", "beta", "gamma", "delta"]).unwrap();
        (0..24)
            .map(|i| a.names()[a.owner(format!("host-{i}").as_bytes())].as_bytes()[0] as char)
            .collect()
    }

    #[test]
    fn owners_are_pinned_across_releases() {
        // Changing a constant, a hash or a generator changes these: that is a change of every
        // cluster's layout, to be made knowingly.
        for (method, want) in [
            (Method::Consistent { replicas: 300 }, PINNED[0]),
            (Method::Rendezvous, PINNED[1]),
            (Method::Permutation, PINNED[2]),
            (Method::Modulo, PINNED[3]),
        ] {
            assert_eq!(initials(method), want, "{method:?}");
        }
    }

    const PINNED: [&str; 4] = [
        "ddgbddbdagabagbdgagbggda",
        "agdbadbdaggbdgabbgabdgdg",
        "gabbagddbaagbdabgbbaadab",
        "bgbaagbbdbaabgbadgbdgdgb",
    ];
}
