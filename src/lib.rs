//! # crivello — a durable Mercator sieve
//!
//! A *sieve* takes every URL a crawler discovers and emits each distinct URL exactly once,
//! in the order of its first appearance, with RAM bounded by a budget however large the
//! crawl grows (Heydon & Najork, "Mercator: A scalable, extensible Web crawler", 1999;
//! Boldi, Marino, Santini, Vigna, "BUbiNG: Massive crawling for the masses", 2018). crivello
//! keeps that promise across `kill -9`, power loss and corrupted files:
//!
//! 1. **exactly once**: every distinct acknowledged URL reaches the frontier once (up to
//!    64-bit signature collisions, see `docs/design.md`);
//! 2. **order**: the frontier is in first-appearance order, across flushes and crashes;
//! 3. **durability**: a push is acknowledged when a later `sync`, `flush` or `close`
//!    returns Ok; unacknowledged pushes may be lost only as a suffix;
//! 4. **crash at any instant** leaves a state that reopening restores;
//! 5. **corruption never passes silently**: every record, block, footer and manifest is
//!    checksummed, and damage is a typed [`Error::Corrupt`] naming file and offset;
//! 6. **constant memory**: the budget sizes the buffers; the disk holds what grows;
//! 7. **one writer**: an exclusive lock on the directory.
//!
//! ```
//! # fn main() -> crivello::Result<()> {
//! use crivello::{Options, Sieve};
//! let dir = tempfile::tempdir().unwrap();
//! let mut sieve = Sieve::open(dir.path(), Options::new().memory(16 << 20))?;
//! sieve.push(b"http://example.com/")?;
//! sieve.push(b"http://example.com/about")?;
//! sieve.push(b"http://example.com/")?;
//! sieve.flush()?;
//! let mut out = Vec::new();
//! loop {
//!     let batch = sieve.frontier_next(1000)?;
//!     if batch.is_empty() { break }
//!     out.extend(batch);
//! }
//! sieve.frontier_commit()?;
//! assert_eq!(out.len(), 2);
//! # Ok(()) }
//! ```

//!
//! # The public API
//!
//! - [`Sieve`] with its [`Options`] and [`Stats`]: open, push, sync, flush, read the
//!   frontier and commit the cursor, close;
//! - [`check`] and [`check_storage`], which verify a store without changing it
//!   ([`CheckReport`]);
//! - [`Error`], [`Corruption`] and [`InvalidUrl`]: what can go wrong;
//! - [`signature`]: the hash that stands for a URL;
//! - [`storage`]: the one seam for file I/O, with the real directory ([`storage::DirStorage`])
//!   and the simulated, crashing disk ([`storage::SimDisk`]);
//! - [`Frontier`]: per-host queues over the sieve, with politeness and leases that survive
//!   crashes ([`queues`]);
//! - [`uniq`]: each distinct line of a stream once, in bounded memory.
//!
//! The way of a URL through the modules (push → A → S → a run or a merge with Z → F → the
//! cursor) is drawn at the top of `docs/design.md`.

#![deny(missing_docs, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

// The modules in layers, from the bottom: a module imports only from the layers above it
// here, never from its own or a later one. (Each group is a layer: rustfmt sorts within it.)

// Errors, file names, signatures, hints.
mod error;
mod hint;
mod lines;
mod names;
#[doc(hidden)]
pub mod planted;
mod signature;

// Records of a frontier store: a URL with its crawl, key and metadata.
mod record;

// Bytes on disk: the storage seam and the little-endian formats.
mod format;
pub mod storage;

// Frames: A's and F's records.
mod frames;

// Options (a frame's default size among them).
mod options;

// S in memory; Z's segments.
mod buffer;
mod segment;

// R's runs (of S's slots).
mod run;

// F; the merge of Z, the runs and a batch.
mod frontier;
mod merge;

// The manifest, which commits Z, R and F's end.
mod manifest;

// The sieve.
mod sieve;

// The frontier: per-host queues over the sieve.
pub mod queues;

// Over the sieve's files: check; and uniq, the sieve without A and F.
mod check;
pub mod uniq;

// Near-duplicate pages: SimHash fingerprints in a store of their own.
pub mod neardup;

// Frontier nodes sharing the keys: balanced, contravariant assignment (notes §3).
pub mod assign;

// Harnesses of the tests and fuzz targets.
mod testing;

pub use check::{check, check_storage, manifest_lost, CheckReport};
pub use error::{Corruption, Error, InvalidUrl, Result};
pub use manifest::Mode;
pub use names::MANIFEST as MANIFEST_FILE;
pub use options::{parse_size, Options, SyncPolicy};
pub use queues::{
    Completion, Counts, Discovered, Frontier, FrontierStats, Handout, HeldPlace, HeldUrl, Known,
    LeaseRequest, Leased, LeasedBatch, LeasedRef, LogBytes, MovedUrl, Policy, PolicyFields,
    QueueExport, QueueInfo, UrlStatus,
};
pub use sieve::{Sieve, Stats};
pub use signature::signature;

/// What the fuzz targets, the benchmarks, the tests and the command line need of the inside,
/// and nothing a user should rely on: it changes without notice.
#[doc(hidden)]
pub mod internals {
    pub use crate::buffer::{sort_slots, Slot};
    pub use crate::lines::Finder;
    pub use crate::testing::corpus;
    pub use crate::testing::corrupt::{
        corruption_opts, corruption_outcome, corruption_store, corruption_store_closed,
        corruption_urls, decode, kind_of, reseal, zero_a_sector, FileKind,
    };
    pub use crate::testing::frontier::{
        checkpoint_in_version, compressed_frontier_store, decode_frontier, decode_q_compressed,
        frontier_corruption_opts, frontier_ops, frontier_outcome, frontier_outcome_in,
        frontier_store, frontier_store_images, judge_frontier_edit, reseal_frontier, FrontierFile,
        FrontierState, Verdict, T0,
    };
    pub use crate::testing::fuzz::{canary, crash_schedule, ops, random_input, target};
    pub use crate::testing::neardup;
    pub use crate::testing::{apply, emit_model, run, verify, Observed, Step, Survivor};
}
