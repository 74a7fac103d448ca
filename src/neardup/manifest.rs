//! The near-duplicate store's commit point, `NEARDUP`: replaced atomically at every commit.

use crate::error::{Corruption, Error, Result};
use crate::format::{crc, ByteReader, PutLe};
use crate::storage::{durable, Storage, StorageExt};

/// The manifest's name.
pub const NAME: &str = "NEARDUP";
/// Its magic.
const MAGIC: u32 = u32::from_le_bytes(*b"CRVX");
/// Every counter is below this; anything else is corruption.
const LIMIT: u64 = 1 << 62;
/// The manifest's version: 2 since segments of version 2 (its layout is version 1's, which
/// is read too), so that a build that reads only version 1 segments refuses the store by its
/// version.
const VERSION: u32 = 2;

/// A segment as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentRef {
    pub id: u64,
    pub first: u64,
    pub docs: u64,
    pub bytes: u64,
}

/// The manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// Commit number.
    pub commit: u64,
    /// The next unused segment id.
    pub next_id: u64,
    /// Documents stored (records of D).
    pub docs: u64,
    /// Committed lengths of D and its index.
    pub log_len: u64,
    pub index_len: u64,
    /// Documents whose ids are durable in the sieve of ids: those after it are pushed to it
    /// again at open.
    pub in_sieve: u64,
    /// Documents whose lines were reported (printed and flushed by the command line).
    pub reported: u64,
    /// Documents refused because their id was seen before (a counter for `stats`).
    pub repeats: u64,
    /// The segments, in document order: together they hold documents `0 .. docs`.
    pub segments: Vec<SegmentRef>,
}

impl Manifest {
    /// The bytes of the manifest.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(96 + 32 * self.segments.len());
        b.put_u32(MAGIC);
        b.put_u32(VERSION);
        for v in [
            self.commit,
            self.next_id,
            self.docs,
            self.log_len,
            self.index_len,
            self.in_sieve,
            self.reported,
            self.repeats,
        ] {
            b.put_u64(v);
        }
        b.put_u32(self.segments.len() as u32);
        for s in &self.segments {
            b.put_u64(s.id);
            b.put_u64(s.first);
            b.put_u64(s.docs);
            b.put_u64(s.bytes);
        }
        let c = crc(&b);
        b.put_u32(c);
        b
    }

    /// Parses and checks a manifest.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Manifest> {
        let mut r = ByteReader::new(bytes, NAME, 0);
        r.magic(MAGIC)?;
        r.version_between(1, VERSION)?;
        let mut v = [0u64; 8];
        for x in v.iter_mut() {
            *x = r.u64_below("counter", LIMIT)?;
        }
        let [commit, next_id, docs, log_len, index_len, in_sieve, reported, repeats] = v;
        let n = r.u32()? as usize;
        if n > r.remaining() / 32 {
            return Err(Error::corrupt(
                NAME,
                r.offset() - 4,
                Corruption::OutOfRange {
                    field: "segments",
                    found: n as u64,
                    limit: (r.remaining() / 32) as u64 + 1,
                },
            ));
        }
        let mut segments = Vec::with_capacity(n);
        let mut next_doc = 0;
        for _ in 0..n {
            let at = r.offset();
            let s = SegmentRef {
                id: r.u64_below("segment id", next_id)?,
                first: r.u64()?,
                docs: r.u64_below("documents", LIMIT)?,
                bytes: r.u64_below("bytes", LIMIT)?,
            };
            if s.first != next_doc || s.docs == 0 {
                return Err(Error::corrupt(
                    NAME,
                    at,
                    Corruption::Mismatch {
                        field: "first document of a segment",
                        expected: next_doc,
                        found: s.first,
                    },
                ));
            }
            next_doc += s.docs;
            segments.push(s);
        }
        r.check_crc()?;
        r.end()?;
        if next_doc != docs || in_sieve > docs || reported > docs {
            return Err(Error::corrupt(
                NAME,
                16,
                Corruption::Mismatch {
                    field: "documents",
                    expected: next_doc,
                    found: docs,
                },
            ));
        }
        Ok(Manifest {
            commit,
            next_id,
            docs,
            log_len,
            index_len,
            in_sieve,
            reported,
            repeats,
            segments,
        })
    }

    /// Reads the manifest of `storage`, if there is one.
    pub(crate) fn read(storage: &dyn Storage) -> Result<Option<Manifest>> {
        match storage.open_if_exists(NAME)? {
            None => Ok(None),
            Some(f) => Manifest::decode(&f.read_all()?).map(Some),
        }
    }

    /// Commits the manifest: an atomic replace, durable when this returns.
    pub(crate) fn commit_to(&mut self, storage: &dyn Storage) -> Result<()> {
        self.commit += 1;
        durable::replace(storage, NAME, &self.encode())
    }
}
