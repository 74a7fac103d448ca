//! hashset: an in-memory `HashSet<u64>` of xxh3 signatures; exact, with memory growing with
//! the number of distinct URLs: the speed reference.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use xxhash_rust::xxh3::xxh3_64;

use super::PeerArgs;
use crate::record::{hex, Record, Result};
use crate::stream::digest_step;

/// A hasher that passes a signature through: xxh3 output is already well mixed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Runs the hash set on the stream. New URLs are counted and digested, not stored.
pub fn run(args: &PeerArgs) -> Result<Record> {
    let mut seen: HashSet<u64, BuildHasherDefault<Identity>> = HashSet::default();
    let mut feed = args.feed()?;
    let (mut emitted, mut digest) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..args.pushes {
        let buf = feed.next_url();
        if seen.insert(xxh3_64(buf)) {
            emitted += 1;
            digest = digest_step(digest, buf);
        }
        super::progress("hashset", i, args.pushes, start);
    }
    let mut r = args.record("hashset", &feed, start, emitted);
    r.digest = hex(digest);
    r.notes.push(format!(
        "in RAM only, no durability; {} signatures, capacity {}",
        seen.len(),
        seen.capacity()
    ));
    Ok(r)
}
