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

#![deny(missing_docs)]

mod check;
pub mod error;
pub mod format;
pub mod frontier;
#[doc(hidden)]
pub mod fuzzing;
pub mod log;
pub mod manifest;
pub mod options;
#[doc(hidden)]
pub mod planted;
mod recent;
pub mod run;
pub mod segment;
mod sieve;
mod sort;
pub mod storage;
pub mod uniq;

pub use check::{check, check_storage, CheckReport};
pub use error::{Corruption, Error, InvalidUrl, Result};
pub use options::{Options, SyncPolicy};
pub use sieve::{signature, Sieve, Stats};

/// Asks the processor to bring `item` into its caches: a hint, with no effect on the
/// program's results.
#[inline]
pub(crate) fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it reads nothing into the program and never faults,
    // and SSE, which provides it, is part of every x86_64 processor.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(item).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}
