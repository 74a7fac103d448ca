//! Signatures: the 64-bit hash that stands for a URL (or a line of `uniq`) everywhere but in
//! A and F.
//!
//! xxh3-64 with a seed chosen at random when a store is created and kept in its manifest:
//! stable across Rust releases and machines (never `std`'s `DefaultHasher`), and different
//! from one store to the next, so that no input is bad for every store.

/// The signature of `url` under `seed`.
pub fn signature(url: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(url, seed)
}

/// A seed for a new store: from the clock, the process id and the standard library's
/// per-process random state.
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}
