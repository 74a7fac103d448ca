//! The consumer's durable position in F:
//!
//! ```text
//! cursor := magic "CRVC" u32 | version u32 | segment u64 | offset u64 | skip u32
//!           | consumed u64 | crc32 u32
//!           the next URL to read is record `skip` of the frame at `offset` of `segment`
//! ```
//!
//! Replaced atomically (`CURSOR.tmp`, fsync, rename, fsync directory).

use super::{End, HEADER_LEN};
use crate::error::{Corruption, Error, Result};
use crate::format::{seal, ByteReader, PutLe, MAGIC_C, VERSION};
use crate::names::CURSOR;
use crate::storage::{durable, Storage, StorageExt};

/// A position in F.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Position {
    /// The F segment.
    pub segment: u64,
    /// The offset of the frame holding the next URL (or the segment's end).
    pub offset: u64,
    /// Records of that frame already consumed.
    pub skip: u32,
    /// URLs consumed in all.
    pub consumed: u64,
}

impl Position {
    /// The start of F: before the first URL of segment 0.
    pub(crate) fn start() -> Position {
        Position {
            segment: 0,
            offset: HEADER_LEN,
            skip: 0,
            consumed: 0,
        }
    }

    /// Encodes the cursor file.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(44);
        b.put_u32(MAGIC_C);
        b.put_u32(VERSION);
        b.put_u64(self.segment);
        b.put_u64(self.offset);
        b.put_u32(self.skip);
        b.put_u64(self.consumed);
        seal(&mut b);
        b
    }

    /// Decodes and checks a cursor file.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Position> {
        let mut c = ByteReader::new(bytes, CURSOR, 0);
        c.magic(MAGIC_C)?;
        c.version()?;
        let segment = c.u64()?;
        let offset = c.u64()?;
        let skip = c.u32()?;
        let consumed = c.u64()?;
        c.check_crc()?;
        c.end()?;
        Ok(Position {
            segment,
            offset,
            skip,
            consumed,
        })
    }

    /// Reads the cursor; a missing cursor is corruption.
    pub(crate) fn load(storage: &dyn Storage) -> Result<Position> {
        Position::decode(&storage.open_file(CURSOR)?.read_all()?)
    }

    /// Makes this position durable (atomic replace).
    pub(crate) fn commit_to(&self, storage: &dyn Storage) -> Result<()> {
        durable::replace(storage, CURSOR, &self.encode())
    }

    /// Checks that the position lies within F's committed `end` and after a segment's
    /// header; otherwise the cursor file is corrupt.
    pub(crate) fn check_within(&self, end: &End) -> Result<()> {
        let past = |field, expected: u64, found: u64| {
            Err(Error::corrupt(
                CURSOR,
                0,
                Corruption::OutOfRange {
                    field,
                    found,
                    limit: expected.saturating_add(1),
                },
            ))
        };
        if self.consumed > end.count {
            return past(
                "consumed, past the URLs in the frontier",
                end.count,
                self.consumed,
            );
        }
        if self.segment > end.tail {
            return past("segment, past the frontier's tail", end.tail, self.segment);
        }
        if self.segment == end.tail && self.offset > end.tail_len {
            return past(
                "offset, past the tail's committed length",
                end.tail_len,
                self.offset,
            );
        }
        if self.offset < HEADER_LEN {
            return Err(Error::corrupt(
                CURSOR,
                0,
                Corruption::Invalid {
                    field: "offset",
                    expected: "at least the segment header's length",
                    found: self.offset,
                },
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_any_flipped_bit_is_caught() {
        let p = Position {
            segment: 3,
            offset: 1234,
            skip: 7,
            consumed: 99,
        };
        let b = p.encode();
        assert_eq!(Position::decode(&b).unwrap(), p);
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Position::decode(&c).unwrap_err().is_corruption());
        }
    }

    #[test]
    fn a_cursor_outside_the_committed_frontier_is_corruption() {
        let end = End {
            tail: 4,
            tail_len: 500,
            count: 90,
        };
        let ok = Position {
            segment: 4,
            offset: 500,
            skip: 0,
            consumed: 90,
        };
        ok.check_within(&end).unwrap();
        for bad in [
            Position { consumed: 91, ..ok },
            Position { segment: 5, ..ok },
            Position { offset: 501, ..ok },
            Position {
                offset: HEADER_LEN - 1,
                segment: 2,
                ..ok
            },
        ] {
            assert!(
                bad.check_within(&end).unwrap_err().is_corruption(),
                "{bad:?}"
            );
        }
    }
}
