//! The queues' ids to their places, and their keys end to end.
//!
//! Both take a few bytes per queue where a map of ids and a boxed key per queue took tens:
//! the index holds 4-byte places (the id is the queue's own), and the keys lie in one
//! buffer, each found by an 8-byte offset and length instead of a 16-byte box pointing to an
//! allocation of its own.

use hashbrown::HashTable;

/// A queue's key in [`Keys`]: its offset (40 bits) and length (24 bits); a key of
/// [`LONG`] bytes or more has that length instead, and its own, 8 bytes, before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeyAt(u64);

/// The length that says a key is long: its length is written before it. (A default key is
/// a URL's host, which a URL of up to `max_url_len` bytes may make this long.)
const LONG: u64 = (1 << 24) - 1;

impl KeyAt {
    /// Its offset and its length field (the key's length, or [`LONG`]).
    pub(super) fn parts(self) -> (u64, u64) {
        (self.0 >> 24, self.0 & LONG)
    }

    /// The `KeyAt` of [`KeyAt::parts`] `(offset, len)`.
    pub(super) fn from_parts(offset: u64, len: u64) -> KeyAt {
        KeyAt(offset << 24 | len & LONG)
    }
}

/// Every queue's key, end to end. Queues are never removed (a deleted one keeps its place),
/// so neither are their keys.
#[derive(Default)]
pub(super) struct Keys {
    bytes: Vec<u8>,
}

impl Keys {
    /// Makes room for keys of `more` bytes at once (a key of [`LONG`] bytes or more takes
    /// 8 bytes more, found room for as it is added).
    pub(super) fn reserve(&mut self, more: usize) {
        self.bytes.reserve_exact(more);
    }

    /// Appends `key`; returns where it is.
    pub(super) fn add(&mut self, key: &[u8]) -> KeyAt {
        let at = self.bytes.len() as u64;
        assert!(at < 1 << 40, "more than 2^40 bytes of keys");
        let long = key.len() as u64 >= LONG;
        let need = key.len() + if long { 8 } else { 0 };
        if self.bytes.capacity() - self.bytes.len() < need {
            // Grows by a quarter, not twice, once large: keys are never freed.
            let more = (self.bytes.len() / 4).max(need).max(4096);
            self.bytes.reserve_exact(more);
        }
        if long {
            self.bytes
                .extend_from_slice(&(key.len() as u64).to_le_bytes());
        }
        self.bytes.extend_from_slice(key);
        KeyAt(at << 24 | (key.len() as u64).min(LONG))
    }

    /// The key at `k`.
    pub(super) fn get(&self, k: KeyAt) -> &[u8] {
        let at = (k.0 >> 24) as usize;
        match k.0 & LONG {
            LONG => {
                let len = u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"));
                &self.bytes[at + 8..at + 8 + len as usize]
            }
            len => &self.bytes[at..at + len as usize],
        }
    }

    /// Bytes held, room included.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

/// Finds a queue's place in `Core::queues` by its id.
///
/// Queue ids are hashes of keys that anyone can compute (a crawler's input chooses the
/// keys), so the table hashes them again under a seed of its own, drawn at random per
/// process: no input can aim at its buckets.
pub(super) struct QueueIndex {
    table: HashTable<u32>,
    seed: u64,
}

impl Default for QueueIndex {
    fn default() -> QueueIndex {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
        QueueIndex {
            table: HashTable::new(),
            seed,
        }
    }
}

impl QueueIndex {
    fn hash(&self, id: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(&id.to_le_bytes(), self.seed)
    }

    /// The place of queue `id`, whose ids are `ids(place)`.
    pub(super) fn get(&self, id: u64, ids: impl Fn(u32) -> u64) -> Option<u32> {
        self.table.find(self.hash(id), |&i| ids(i) == id).copied()
    }

    /// Records that queue `id`, not in the index, is at `place`.
    pub(super) fn insert(&mut self, id: u64, place: u32, ids: impl Fn(u32) -> u64) {
        let seed = self.seed;
        let hash = move |id: u64| xxhash_rust::xxh3::xxh3_64_with_seed(&id.to_le_bytes(), seed);
        self.table.insert_unique(hash(id), place, |&i| hash(ids(i)));
    }

    /// Inserts places `from..to`, of queues none of which it holds yet, whose ids are
    /// `ids(place)`, in the order of the table's buckets their ids fall in. Inserted in the
    /// order of their places they land on the table at random, a cache miss or two each (at
    /// 10^6 queues a tenth of an open); in the buckets' order the table is written from its
    /// start to its end. Takes 8 bytes a place for the time of the call.
    pub(super) fn insert_places(&mut self, from: u32, to: u32, ids: impl Fn(u32) -> u64) {
        self.reserve(to.saturating_sub(from) as usize, &ids);
        // The table's buckets are a power of two, 8/7 of its capacity (or one more than a
        // capacity under 7): a guess that is wrong costs the order, not the inserts.
        let cap = self.table.capacity();
        let buckets = if cap < 7 { cap + 1 } else { cap / 7 * 8 };
        let mask = (buckets.next_power_of_two() as u64 - 1) & u64::from(u32::MAX);
        let mut order: Vec<u64> = (from..to)
            .map(|p| (self.hash(ids(p)) & mask) << 32 | u64::from(p))
            .collect();
        order.sort_unstable();
        for x in order {
            let p = x as u32;
            self.insert(ids(p), p, &ids);
        }
    }

    /// Makes room for `more` queues.
    pub(super) fn reserve(&mut self, more: usize, ids: impl Fn(u32) -> u64) {
        let seed = self.seed;
        let hash = move |id: u64| xxhash_rust::xxh3::xxh3_64_with_seed(&id.to_le_bytes(), seed);
        self.table.reserve(more, |&i| hash(ids(i)));
    }

    /// Bytes held: buckets of 4 bytes and a control byte each.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.table.capacity() * 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_back_as_they_were_added() {
        let mut k = Keys::default();
        let keys: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| {
                format!("host-{i}.example")
                    .into_bytes()
                    .repeat((i % 3) as usize)
            })
            .collect();
        let at: Vec<KeyAt> = keys.iter().map(|key| k.add(key)).collect();
        for (key, a) in keys.iter().zip(&at) {
            assert_eq!(k.get(*a), &key[..]);
        }
        let total: usize = keys.iter().map(Vec::len).sum();
        assert!(k.capacity() < total + total / 4 + 4096, "{}", k.capacity());
        // Keys as long as a URL may make a host: their length is written before them.
        let long: Vec<Vec<u8>> = [LONG as usize - 1, LONG as usize, LONG as usize + 5]
            .iter()
            .map(|&n| (0..n).map(|i| b'a' + (i % 26) as u8).collect())
            .collect();
        let at: Vec<KeyAt> = long.iter().map(|key| k.add(key)).collect();
        let short = k.add(b"after");
        for (key, a) in long.iter().zip(&at) {
            assert_eq!(k.get(*a), &key[..]);
        }
        assert_eq!(k.get(short), b"after");
        let empty = k.add(b"");
        assert_eq!(k.get(empty), b"");
    }

    #[test]
    fn the_index_finds_every_queue_and_no_other() {
        let ids: Vec<u64> = (0..20_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let mut index = QueueIndex::default();
        for (place, &id) in ids.iter().enumerate() {
            index.insert(id, place as u32, |i| ids[i as usize]);
        }
        for (place, &id) in ids.iter().enumerate() {
            assert_eq!(index.get(id, |i| ids[i as usize]), Some(place as u32));
            assert_eq!(index.get(id ^ 1, |i| ids[i as usize]), None);
        }
        assert!(index.bytes() < 20_000 * 5 * 2 + 1024);
    }

    #[test]
    fn places_inserted_together_are_found_as_those_inserted_one_by_one() {
        let ids: Vec<u64> = (0..30_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a)
            .collect();
        for (one_by_one, together) in [(0, 30_000), (1_000, 30_000), (29_999, 30_000), (0, 5)] {
            let ids = &ids[..together];
            let mut index = QueueIndex::default();
            for (place, &id) in ids[..one_by_one].iter().enumerate() {
                index.insert(id, place as u32, |i| ids[i as usize]);
            }
            index.insert_places(one_by_one as u32, together as u32, |i| ids[i as usize]);
            for (place, &id) in ids.iter().enumerate() {
                assert_eq!(index.get(id, |i| ids[i as usize]), Some(place as u32));
                assert_eq!(index.get(id ^ 1, |i| ids[i as usize]), None);
            }
            assert_eq!(index.table.len(), together);
        }
    }
}
