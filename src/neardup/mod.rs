//! Near-duplicate pages: SimHash fingerprints (the lecture notes §2.6) in a durable store
//! that finds every stored fingerprint within a Hamming distance of a query, exactly.
//!
//! - [`fingerprint()`] turns a text into its 64-bit fingerprint ([`Fingerprinter`] reuses
//!   its buffer);
//! - [`Store`] keeps (fingerprint, document id) pairs durably: [`Store::insert`] stores a
//!   batch of documents whose ids are new and tells, for each, the stored document nearest
//!   to it within `k` bits; [`Store::query`] lists every stored document within `k`.
//!
//! ```
//! # fn main() -> crivello::Result<()> {
//! use crivello::neardup::{fingerprint, Store};
//! use crivello::Options;
//! let dir = tempfile::tempdir().unwrap();
//! let mut store = Store::open(dir.path(), Options::new().memory(16 << 20))?;
//! let a = fingerprint("The quick brown fox jumps over the lazy dog, again and again.").unwrap();
//! let b = fingerprint("The quick brown fox jumps over the lazy dog, again and again!").unwrap();
//! let out = store.insert(&[(&b"page-1"[..], a), (&b"page-2"[..], b), (&b"page-1"[..], b)], 3)?;
//! assert!(out[0].as_ref().unwrap().nearest.is_none());
//! assert_eq!(out[1].as_ref().unwrap().nearest.as_ref().unwrap().id, b"page-1");
//! assert!(out[2].is_none()); // an id seen before
//! store.close()?;
//! # Ok(()) }
//! ```
//!
//! The files, the commit steps and recovery are in `docs/design.md` ("Near-duplicates").

mod docs;
pub mod fingerprint;
pub(crate) mod manifest;
mod search;
mod segment;
mod store;

pub use docs::MAX_ID;
pub use fingerprint::{distance, fingerprint, Fingerprinter, MAX_TEXT, SHINGLE};
pub use manifest::NAME as MANIFEST_FILE;

/// Whether `dir` holds a near-duplicate store's files without the [`MANIFEST_FILE`] that
/// marks it: the store is damaged (its marker removed), not absent. An interrupted creation
/// leaves the log of documents and its index before the marker: a segment of fingerprints,
/// written once documents were stored, says the store was made.
pub fn marker_lost(dir: impl AsRef<std::path::Path>) -> bool {
    let dir = dir.as_ref();
    if dir.join(MANIFEST_FILE).exists() {
        return false;
    }
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.filter_map(|e| e.ok()?.file_name().into_string().ok())
            .any(|n| n.starts_with("n-") && n.ends_with(".seg"))
    })
}
pub use search::MAX_K;
pub use store::{
    check, check_storage, NearCheck, NearStats, Nearest, NearestRef, Store, Stored, StoredRef,
};

/// The tables of a store: one per 16-bit block of the fingerprint.
pub(crate) const TABLES: usize = 4;

/// An entry of a table: a fingerprint and its document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub fp: u64,
    pub doc: u64,
}
