//! F, the frontier: the durable log of emitted URLs, and its consumer cursor.
//!
//! F is a sequence of log segments `f-<id>.log` (see [`crate::log`] for frames):
//!
//! ```text
//! f-segment := magic "CRVF" u32 | version u32 | id u64 | first u64 | crc32 u32 | frame*
//!              first: the number of URLs in F before this segment
//! cursor    := magic "CRVC" u32 | version u32 | segment u64 | offset u64 | skip u32
//!              | consumed u64 | crc32 u32
//!              the next URL to read is record `skip` of the frame at `offset` of `segment`
//! ```
//!
//! The manifest holds F's committed end (tail segment and length); the cursor file holds
//! the consumer's position and is replaced atomically. The cursor never passes the committed
//! end, which only grows, so the two commit points never contradict each other.

use crate::error::{Corruption, Error, Result};
use crate::format::{seal, Cursor as ByteCursor, PutLe, MAGIC_C, MAGIC_F, VERSION};
use crate::storage::{durable, Storage};

/// Bytes of an F segment header.
pub const HEADER_LEN: u64 = 28;
/// The cursor's file name.
pub const CURSOR_FILE: &str = "CURSOR";
/// F's tail segment is closed when it passes this size at the start of a flush.
pub const SEGMENT_TARGET: u64 = 64 << 20;

/// The name of F segment `id`.
pub fn file_name(id: u64) -> String {
    format!("f-{id:016x}.log")
}

/// Encodes an F segment header.
pub fn header(id: u64, first: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN as usize);
    b.put_u32(MAGIC_F);
    b.put_u32(VERSION);
    b.put_u64(id);
    b.put_u64(first);
    seal(&mut b);
    b
}

/// Decodes and checks an F segment header; returns `first`.
pub fn check_header(bytes: &[u8], file: &str, id: u64) -> Result<u64> {
    let mut c = ByteCursor::new(bytes, file, 0);
    c.magic(MAGIC_F)?;
    c.version()?;
    let found = c.u64()?;
    let first = c.u64()?;
    c.check_crc()?;
    if found != id {
        return Err(Error::corrupt(
            file,
            8,
            Corruption::Field {
                field: "segment id",
                found,
            },
        ));
    }
    Ok(first)
}

/// The consumer's durable position in F.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
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
    /// Encodes the cursor file.
    pub fn encode(&self) -> Vec<u8> {
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
    pub fn decode(bytes: &[u8]) -> Result<Position> {
        let mut c = ByteCursor::new(bytes, CURSOR_FILE, 0);
        c.magic(MAGIC_C)?;
        c.version()?;
        let segment = c.u64()?;
        let offset = c.u64()?;
        let skip = c.u32()?;
        let consumed = c.u64()?;
        c.check_crc()?;
        if c.remaining() != 0 {
            return Err(Error::corrupt(
                CURSOR_FILE,
                c.offset(),
                Corruption::Field {
                    field: "trailing bytes",
                    found: c.remaining() as u64,
                },
            ));
        }
        Ok(Position {
            segment,
            offset,
            skip,
            consumed,
        })
    }

    /// Reads the cursor; a missing cursor is corruption.
    pub fn load(storage: &dyn Storage) -> Result<Position> {
        let f = match storage.open(CURSOR_FILE) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::corrupt(CURSOR_FILE, 0, Corruption::Missing))
            }
            Err(e) => return Err(Error::io("open", CURSOR_FILE, e)),
        };
        let bytes = f
            .read_all()
            .map_err(|e| Error::io("read", CURSOR_FILE, e))?;
        Position::decode(&bytes)
    }

    /// Makes this position durable (atomic replace).
    pub fn commit_to(&self, storage: &dyn Storage) -> Result<()> {
        durable::replace(storage, CURSOR_FILE, &self.encode())
            .map_err(|e| Error::io("commit", CURSOR_FILE, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_and_header_round_trip_and_catch_every_flipped_bit() {
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
        let h = header(5, 77);
        assert_eq!(check_header(&h, "f", 5).unwrap(), 77);
        for bit in 0..h.len() * 8 {
            let mut c = h.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(check_header(&c, "f", 5).is_err());
        }
    }
}
