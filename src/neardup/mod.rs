//! Near-duplicate pages: SimHash fingerprints (the lecture notes §2.6) in a durable store
//! that finds every stored fingerprint within a Hamming distance of a query.

pub mod fingerprint;

pub use fingerprint::{distance, fingerprint, Fingerprinter};
