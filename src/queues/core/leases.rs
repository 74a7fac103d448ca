//! The live leases, found by seq, by token and by URL.
//!
//! The leases lie side by side in one vector; three hash tables of 4-byte positions in it
//! find one by its record's seq, its token, or its URL (crawl and signature). Three maps
//! each holding its own copy of the key and the lease took 3.5 times the room: at 10^5 live
//! leases, handed out and ended without pause, a hash table settles at 2.6 times as many
//! buckets as entries (the ends leave tombstones, and a table over half full grows instead
//! of cleaning them up), so a bucket's size counts more than the entry's.

use hashbrown::HashTable;

/// A URL handed out.
pub(super) struct Lease {
    /// The seq of its record.
    pub(super) seq: u64,
    pub(super) token: u64,
    pub(super) deadline: u64,
    /// When it was handed out, or later: the instant of the call that handed it out, or of
    /// the open that found it leased (not kept on disk). A fetch said to end before it ends
    /// then.
    pub(super) given: u64,
    /// Its URL's signature under its crawl's seed.
    pub(super) sig: u64,
    /// Its queue's index in `Core::queues`.
    pub(super) queue: u32,
    pub(super) crawl: u32,
    /// Whether its fetch ended (`End::Fetched`): it no longer holds a place in its queue.
    pub(super) fetched: bool,
    pub(super) record: Box<[u8]>,
}

/// The tables hold fewer than this many buckets per lease, or are shrunk.
const SHRINK_FACTOR: usize = 4;
/// Below this many, nothing is shrunk.
const SHRINK_MIN: usize = 1024;

/// One multiply (the store's seqs and tokens are counters; nobody chooses them).
fn mix(x: u64) -> u64 {
    x.wrapping_mul(0xf135_7aea_2e62_a9c5)
}

fn seq_hash(l: &Lease) -> u64 {
    mix(l.seq)
}

fn token_hash(l: &Lease) -> u64 {
    mix(l.token)
}

fn url_hash_of(crawl: u32, sig: u64) -> u64 {
    // The signature is a hash already; the crawl tells apart the same URL in two crawls.
    sig ^ mix(u64::from(crawl) + 1)
}

fn url_hash(l: &Lease) -> u64 {
    url_hash_of(l.crawl, l.sig)
}

/// The live leases.
#[derive(Default)]
pub(super) struct Leases {
    all: Vec<Lease>,
    by_seq: HashTable<u32>,
    by_token: HashTable<u32>,
    by_url: HashTable<u32>,
}

impl Leases {
    /// How many there are.
    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    fn position(&self, seq: u64) -> Option<usize> {
        let all = &self.all;
        self.by_seq
            .find(mix(seq), |&i| all[i as usize].seq == seq)
            .map(|&i| i as usize)
    }

    /// The lease of record `seq`.
    pub(super) fn get(&self, seq: u64) -> Option<&Lease> {
        self.position(seq).map(|i| &self.all[i])
    }

    /// Whether record `seq` is leased.
    pub(super) fn contains(&self, seq: u64) -> bool {
        self.position(seq).is_some()
    }

    /// The lease of token `token`.
    pub(super) fn of_token(&self, token: u64) -> Option<&Lease> {
        let all = &self.all;
        self.by_token
            .find(mix(token), |&i| all[i as usize].token == token)
            .map(|&i| &all[i as usize])
    }

    /// The lease of the URL of signature `sig` in crawl `crawl`.
    pub(super) fn of_url(&self, crawl: u32, sig: u64) -> Option<&Lease> {
        let all = &self.all;
        self.by_url
            .find(url_hash_of(crawl, sig), |&i| {
                let l = &all[i as usize];
                l.sig == sig && l.crawl == crawl
            })
            .map(|&i| &all[i as usize])
    }

    /// Every lease, in no particular order.
    pub(super) fn iter(&self) -> impl ExactSizeIterator<Item = &Lease> {
        self.all.iter()
    }

    /// Adds `lease`, whose record is not leased. A lease of the same URL (which only a
    /// damaged store holds) is no longer found by URL.
    pub(super) fn insert(&mut self, lease: Lease) {
        debug_assert!(!self.contains(lease.seq));
        let at = u32::try_from(self.all.len()).expect("fewer than 2^32 leases");
        let (seq, token, url) = (mix(lease.seq), mix(lease.token), url_hash(&lease));
        let (crawl, sig) = (lease.crawl, lease.sig);
        self.all.push(lease);
        let all = &self.all;
        self.by_seq
            .insert_unique(seq, at, |&i| seq_hash(&all[i as usize]));
        self.by_token
            .insert_unique(token, at, |&i| token_hash(&all[i as usize]));
        match self.by_url.entry(
            url,
            |&i| {
                let l = &all[i as usize];
                l.sig == sig && l.crawl == crawl
            },
            |&i| url_hash(&all[i as usize]),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = at,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(at);
            }
        }
    }

    /// Notes that the fetch of the lease of record `seq` ended. False when `seq` is not
    /// leased, or its fetch had ended already.
    pub(super) fn set_fetched(&mut self, seq: u64) -> bool {
        match self.position(seq) {
            Some(at) if !self.all[at].fetched => {
                self.all[at].fetched = true;
                true
            }
            _ => false,
        }
    }

    /// Gives the lease of record `seq` a new token and deadline, its fetch not begun (its
    /// record handed out again after it expired, as a replay finds it). False when `seq` is not leased.
    pub(super) fn renew(&mut self, seq: u64, token: u64, deadline: u64, given: u64) -> bool {
        let Some(at) = self.position(seq) else {
            return false;
        };
        let old = self.all[at].token;
        self.remove_index(Table::Token, mix(old), at);
        self.all[at].token = token;
        self.all[at].deadline = deadline;
        self.all[at].given = given;
        self.all[at].fetched = false;
        let all = &self.all;
        self.by_token
            .insert_unique(mix(token), at as u32, |&i| token_hash(&all[i as usize]));
        true
    }

    /// Ends the lease of record `seq`, and returns it.
    pub(super) fn remove(&mut self, seq: u64) -> Option<Lease> {
        let at = self.position(seq)?;
        let l = &self.all[at];
        let (token, url) = (mix(l.token), url_hash(l));
        self.remove_index(Table::Seq, mix(seq), at);
        self.remove_index(Table::Token, token, at);
        self.remove_index(Table::Url, url, at);
        let last = self.all.len() - 1;
        if at != last {
            // The last lease moves into the hole: its entries follow it.
            let l = &self.all[last];
            let (seq, token, url) = (mix(l.seq), mix(l.token), url_hash(l));
            for (table, hash) in [(Table::Seq, seq), (Table::Token, token), (Table::Url, url)] {
                if let Some(i) = self.table(table).find_mut(hash, |&i| i as usize == last) {
                    *i = at as u32;
                }
            }
        }
        let lease = self.all.swap_remove(at);
        self.shrink();
        Some(lease)
    }

    fn table(&mut self, t: Table) -> &mut HashTable<u32> {
        match t {
            Table::Seq => &mut self.by_seq,
            Table::Token => &mut self.by_token,
            Table::Url => &mut self.by_url,
        }
    }

    /// Takes position `at`'s entry, of hash `hash`, out of table `t` (if it has one: an URL
    /// entry may have gone to a later lease of the same URL).
    fn remove_index(&mut self, t: Table, hash: u64, at: usize) {
        if let Ok(e) = self.table(t).find_entry(hash, |&i| i as usize == at) {
            e.remove();
        }
    }

    /// Gives back room once the leases are far fewer than the room for them.
    fn shrink(&mut self) {
        let n = self.all.len();
        let all = &self.all;
        let big = |cap: usize| cap > SHRINK_MIN && cap > SHRINK_FACTOR * n;
        if big(self.by_seq.capacity()) {
            self.by_seq
                .shrink_to(2 * n, |&i| seq_hash(&all[i as usize]));
        }
        if big(self.by_token.capacity()) {
            self.by_token
                .shrink_to(2 * n, |&i| token_hash(&all[i as usize]));
        }
        if big(self.by_url.capacity()) {
            self.by_url
                .shrink_to(2 * n, |&i| url_hash(&all[i as usize]));
        }
        if big(self.all.capacity()) {
            self.all.shrink_to(2 * n);
        }
    }
}

/// One of the tables of [`Leases`].
#[derive(Clone, Copy)]
enum Table {
    Seq,
    Token,
    Url,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lease(seq: u64, token: u64, crawl: u32, sig: u64) -> Lease {
        Lease {
            seq,
            token,
            deadline: seq * 10,
            given: seq,
            sig,
            queue: (seq % 7) as u32,
            crawl,
            fetched: false,
            record: seq.to_le_bytes().into(),
        }
    }

    /// Random inserts, renewals and removals against three plain maps: every lookup agrees
    /// after each step, and the room shrinks once most leases ended.
    #[test]
    fn the_leases_are_found_as_three_maps_find_them() {
        let mut t = Leases::default();
        let mut model: HashMap<u64, (u64, u32, u64)> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut token = 0;
        for step in 0..60_000u64 {
            let r = next();
            let seq = r % 5_000;
            match r >> 60 {
                0..=7 if !model.contains_key(&seq) => {
                    token += 1;
                    let (crawl, sig) = ((seq % 3) as u32, mix(seq) >> 3);
                    t.insert(lease(seq, token, crawl, sig));
                    model.insert(seq, (token, crawl, sig));
                }
                8..=9 if model.contains_key(&seq) => {
                    token += 1;
                    assert!(t.renew(seq, token, step, step));
                    model.get_mut(&seq).expect("present").0 = token;
                    assert_eq!(t.get(seq).map(|l| l.deadline), Some(step));
                }
                _ => {
                    let l = t.remove(seq);
                    assert_eq!(l.map(|l| l.seq), model.remove(&seq).map(|_| seq));
                }
            }
            if step % 997 == 0 {
                assert_eq!(t.len(), model.len());
                for s in 0..5_000 {
                    match model.get(&s) {
                        Some(&(token, crawl, sig)) => {
                            let l = t.get(s).expect("leased");
                            assert_eq!(
                                (l.seq, l.token, &l.record[..]),
                                (s, token, &s.to_le_bytes()[..])
                            );
                            assert_eq!(t.of_token(token).map(|l| l.seq), Some(s));
                            assert_eq!(t.of_url(crawl, sig).map(|l| l.seq), Some(s));
                            assert_eq!(t.of_url(crawl + 1, sig).map(|l| l.seq), None);
                        }
                        None => assert!(!t.contains(s)),
                    }
                }
            }
        }
        for s in 0..5_000 {
            t.remove(s);
        }
        assert_eq!(t.len(), 0);
        assert!(t.by_seq.capacity() <= SHRINK_MIN && t.all.capacity() <= SHRINK_MIN);
        assert!(!t.renew(1, 1, 1, 1));
    }
}
