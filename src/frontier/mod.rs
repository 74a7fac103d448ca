//! F, the frontier: the durable log of emitted URLs in first-appearance order, and its
//! consumer's cursor.
//!
//! F is a sequence of segments `f-<id>.log`, each a header and frames (see [`crate::frames`]):
//!
//! ```text
//! f-segment := magic "CRVF" u32 | version u32 | id u64 | first u64 | crc32 u32 | frame*
//!              first: the number of URLs in F before this segment
//! ```
//!
//! The manifest holds F's committed [`End`] (tail segment, its length, the URLs in F); the
//! [`cursor`] file holds the consumer's position and is replaced atomically. The cursor never
//! passes the committed end, which only grows, so the two commit points never contradict
//! each other.
//!
//! A flush appends the new URLs through an [`Appender`]; a consumer reads them through a
//! [`Reader`], a handle with its own position, and commits that position where it wants it
//! (the sieve's consumer in the cursor file).

pub(crate) mod append;
pub(crate) mod cursor;
mod prefetch;
pub(crate) mod read;

pub(crate) use append::Appender;
pub(crate) use cursor::Position;
pub(crate) use read::Reader;

use crate::error::{Corruption, Result};
use crate::format::{seal, ByteReader, PutLe, MAGIC_F, VERSION};
use crate::names;
use crate::storage::{File, Storage, StorageExt};

/// Bytes of an F segment header.
pub(crate) const HEADER_LEN: u64 = 28;
/// F's tail segment is closed when it passes this size.
pub(crate) const SEGMENT_TARGET: u64 = 64 << 20;

/// F's committed end, as the manifest records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    /// The id of the tail segment.
    pub tail: u64,
    /// The committed length of the tail segment.
    pub tail_len: u64,
    /// URLs ever appended to F.
    pub count: u64,
}

/// Encodes an F segment header.
pub(crate) fn header(id: u64, first: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN as usize);
    b.put_u32(MAGIC_F);
    b.put_u32(VERSION);
    b.put_u64(id);
    b.put_u64(first);
    seal(&mut b);
    b
}

/// Decodes and checks an F segment header of segment `id`; returns `first`.
pub(crate) fn check_header(bytes: &[u8], file: &str, id: u64) -> Result<u64> {
    let mut c = ByteReader::new(bytes, file, 0);
    c.magic(MAGIC_F)?;
    c.version()?;
    let found = c.u64()?;
    let first = c.u64()?;
    c.check_crc()?;
    if found != id {
        return Err(crate::error::Error::corrupt(
            file,
            8,
            Corruption::Mismatch {
                field: "segment id",
                expected: id,
                found,
            },
        ));
    }
    Ok(first)
}

/// Opens F segment `id` (a missing one is corruption) and checks its header; returns the
/// file and the number of URLs in F before the segment.
pub(crate) fn open_segment(storage: &dyn Storage, id: u64) -> Result<(File, u64)> {
    let file = storage.open_file(&names::f(id))?;
    let mut h = [0u8; HEADER_LEN as usize];
    let len = file.len()?;
    if len < HEADER_LEN {
        return Err(file.corrupt(
            0,
            Corruption::Truncated {
                needed: HEADER_LEN,
                available: len,
            },
        ));
    }
    file.read_exact_at(&mut h, 0)?;
    let first = check_header(&h, file.name(), id)?;
    Ok((file, first))
}

/// The ids of the F segments in the directory, sorted.
pub(crate) fn segments(storage: &dyn Storage) -> Result<Vec<u64>> {
    let mut ids: Vec<u64> = storage
        .list_files()?
        .iter()
        .filter_map(|n| names::parse_f(n))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_any_flipped_bit_is_caught() {
        let h = header(5, 77);
        assert_eq!(check_header(&h, "f", 5).unwrap(), 77);
        for bit in 0..h.len() * 8 {
            let mut c = h.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(check_header(&c, "f", 5).is_err());
        }
    }
}
