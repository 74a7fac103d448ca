//! Little-endian encoding helpers, magic numbers and format versions shared by every file.
//!
//! Every file starts with a 4-byte magic and a `u32` format version; every integer is
//! little-endian; every header, frame, block and footer carries a crc32 (IEEE, `crc32fast`).

use crate::error::{Corruption, Error, Result};

/// The format version of the files written by this build, but the manifest and the Q runs
/// (see `docs/design.md`, "Format versions").
pub const VERSION: u32 = 4;
/// The format version of the manifest written by this build; versions 4, 5 and 8 to 13 are
/// read too (9: F's frames may be coded; 10: a frontier's journal may hold archives and
/// imports, and its A and F records the import flag; 11: its journal may hold receipts; 12:
/// its Q runs may hold many queues per frame; 13: their frames may be compressed; all have
/// version 8's layout; 14 adds the queue coding field; 15: the journal may hold policies
/// with their instant, in version 14's layout; 16: a queue's own policy in the journal and
/// the checkpoint may leave fields to the default's, in version 14's layout; 17: the journal
/// may hold ends of fetches that ended before their entry, entry 20, in version 14's layout;
/// 18: its journal may hold ends of fetches before their leases end, entry 21, and its
/// checkpoint the leases they ended, as checkpoint version 13, in version 14's layout).
pub const MANIFEST_VERSION: u32 = 18;

/// Magic of A (write-ahead log) files: `CRVA`.
pub const MAGIC_A: u32 = u32::from_le_bytes(*b"CRVA");
/// Magic of F (frontier) segment files: `CRVF`.
pub const MAGIC_F: u32 = u32::from_le_bytes(*b"CRVF");
/// Magic of Z (signature) segment files: `CRVZ`.
pub const MAGIC_Z: u32 = u32::from_le_bytes(*b"CRVZ");
/// Magic of R (unmerged run) files: `CRVR`.
pub const MAGIC_R: u32 = u32::from_le_bytes(*b"CRVR");
/// Magic of the manifest: `CRVM`.
pub const MAGIC_M: u32 = u32::from_le_bytes(*b"CRVM");
/// Magic of the cursor: `CRVC`.
pub const MAGIC_C: u32 = u32::from_le_bytes(*b"CRVC");
/// Magic of a log frame: `FRM1`.
pub const MAGIC_FRAME: u32 = u32::from_le_bytes(*b"FRM1");
/// Magic of a coded frame (`src/frames/coded.rs`).
pub const MAGIC_CODED: u32 = u32::from_le_bytes(*b"FRZ1");
/// Magic of Q (queue run) files: `CRVQ`.
pub const MAGIC_Q: u32 = u32::from_le_bytes(*b"CRVQ");
/// Magic of a Q run's tail: `QEND`.
pub const MAGIC_QEND: u32 = u32::from_le_bytes(*b"QEND");
/// Magic of J (the frontier's journal) files: `CRVJ`.
pub const MAGIC_J: u32 = u32::from_le_bytes(*b"CRVJ");
/// Magic of the frontier's checkpoint: `CRVK`.
pub const MAGIC_K: u32 = u32::from_le_bytes(*b"CRVK");
/// Magic of a Z footer's tail: `ZEND`.
pub const MAGIC_ZEND: u32 = u32::from_le_bytes(*b"ZEND");

/// The crc32 of `bytes`.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Appends little-endian integers to a byte vector.
pub trait PutLe {
    /// Appends a `u32`.
    fn put_u32(&mut self, v: u32);
    /// Appends a `u64`.
    fn put_u64(&mut self, v: u64);
}

impl PutLe for Vec<u8> {
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
}

/// A bounds-checked little-endian reader over a byte slice that reports corruption with the
/// file name and absolute offset.
pub struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    file: &'a str,
    base: u64,
}

impl<'a> ByteReader<'a> {
    /// A reader over `bytes`, which start at offset `base` of `file`.
    pub fn new(bytes: &'a [u8], file: &'a str, base: u64) -> ByteReader<'a> {
        ByteReader {
            bytes,
            pos: 0,
            file,
            base,
        }
    }
    /// The current absolute offset.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    /// Takes `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(Error::corrupt(
                self.file,
                self.offset(),
                Corruption::Truncated {
                    needed: n as u64,
                    available: self.remaining() as u64,
                },
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// Reads a `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Reads a `u64` that must be below `bound` (an id below the next unused one).
    pub fn u64_below(&mut self, field: &'static str, bound: u64) -> Result<u64> {
        let at = self.offset();
        let v = self.u64()?;
        if v >= bound {
            return Err(Error::corrupt(
                self.file,
                at,
                Corruption::OutOfRange {
                    field,
                    found: v,
                    limit: bound,
                },
            ));
        }
        Ok(v)
    }
    /// Reads a LEB128 varint in its shortest form.
    pub fn varint(&mut self, field: &'static str) -> Result<u64> {
        let at = self.offset();
        crate::record::varint_at(self.bytes, &mut self.pos).ok_or_else(|| {
            Error::corrupt(
                self.file,
                at,
                Corruption::Invalid {
                    field,
                    expected: "a varint in its shortest form",
                    found: self.remaining() as u64,
                },
            )
        })
    }
    /// Fails unless every byte was read: trailing bytes are corruption.
    pub fn end(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(Error::corrupt(
                self.file,
                self.offset(),
                Corruption::Invalid {
                    field: "bytes after the checksum",
                    expected: "none",
                    found: self.remaining() as u64,
                },
            ));
        }
        Ok(())
    }

    /// Checks a magic number.
    pub fn magic(&mut self, expected: u32) -> Result<()> {
        let at = self.offset();
        let found = self.u32()?;
        if found != expected {
            return Err(Error::corrupt(
                self.file,
                at,
                Corruption::Magic { expected, found },
            ));
        }
        Ok(())
    }
    /// Reads a format version that must be in `oldest..=newest`; returns it.
    pub fn version_between(&mut self, oldest: u32, newest: u32) -> Result<u32> {
        let at = self.offset();
        let found = self.u32()?;
        if !(oldest..=newest).contains(&found) {
            return Err(Error::corrupt(
                self.file,
                at,
                Corruption::Version {
                    expected: newest,
                    found,
                },
            ));
        }
        Ok(found)
    }

    /// Checks the format version.
    pub fn version(&mut self) -> Result<()> {
        let at = self.offset();
        let found = self.u32()?;
        if found != VERSION {
            return Err(Error::corrupt(
                self.file,
                at,
                Corruption::Version {
                    expected: VERSION,
                    found,
                },
            ));
        }
        Ok(())
    }
    /// Reads a stored crc32 and checks it against the crc of all bytes before it.
    pub fn check_crc(&mut self) -> Result<()> {
        let computed = crc(&self.bytes[..self.pos]);
        let at = self.offset();
        let stored = self.u32()?;
        if stored != computed {
            return Err(Error::corrupt(
                self.file,
                at,
                Corruption::Checksum { stored, computed },
            ));
        }
        Ok(())
    }
}

/// Appends the crc32 of everything in `buf` to it.
pub fn seal(buf: &mut Vec<u8>) {
    let c = crc(buf);
    buf.put_u32(c);
}
