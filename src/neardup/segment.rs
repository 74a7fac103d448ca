//! A segment `n-<id>.seg`: the (fingerprint, document) entries of a range of documents, four
//! times, once per *table*, each table sorted by one 16-bit block of the fingerprint (its
//! *key*) and then by document. Layout in `docs/design.md` ("Near-duplicates: files").

use super::{Entry, TABLES};
use crate::error::{Corruption, Error, Result};
use crate::format::{crc, ByteReader, PutLe};
use crate::storage::{File, Storage, StorageExt};

/// Magic of a segment file.
pub(crate) const MAGIC_SEG: u32 = u32::from_le_bytes(*b"CRVN");
/// Magic at a segment's very end.
const MAGIC_END: u32 = u32::from_le_bytes(*b"NEND");
/// Format version of the near-duplicate store's files.
pub(crate) const VERSION: u32 = 1;
/// Bytes of the header.
const HEADER: u64 = 36;
/// Bytes of an entry.
const ENTRY: usize = 16;
/// Entries per block (the last of a table may hold fewer).
pub(crate) const BLOCK: usize = 4096;
/// Bytes of the tail.
const TAIL: u64 = 16;
/// Bytes of a block's index entry in the footer.
const INDEX_ENTRY: usize = 20;
/// The writer's buffer.
const WRITE_BUFFER: usize = 1 << 20;

/// The key of `fp` in table `t`: its bits `16 t .. 16 t + 16`.
pub(crate) fn key(fp: u64, t: usize) -> u32 {
    (fp >> (16 * t)) as u32 & 0xFFFF
}

/// The name of segment `id`.
pub(crate) fn name(id: u64) -> String {
    format!("n-{id:016x}.seg")
}

/// The id of a segment file's name.
pub(crate) fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("n-")?.strip_suffix(".seg")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// Where a block is and what keys it holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockInfo {
    /// The key of its first entry.
    pub first: u32,
    /// The key of its last entry.
    pub last: u32,
    /// Offset of the block in the file.
    pub offset: u64,
    /// Entries in it.
    pub count: u32,
}

impl BlockInfo {
    /// Bytes of the block on disk.
    fn bytes(&self) -> u64 {
        8 + self.count as u64 * ENTRY as u64
    }
}

/// An open segment: its file and its sparse index (one [`BlockInfo`] per block).
pub(crate) struct Segment {
    /// The file.
    pub file: File,
    /// Its id.
    pub id: u64,
    /// The first document it holds.
    pub first: u64,
    /// The number of documents (each once per table).
    pub docs: u64,
    /// The file's length.
    pub bytes: u64,
    /// The blocks of each table.
    pub tables: [Vec<BlockInfo>; TABLES],
}

impl Segment {
    /// Opens segment `id`, which the manifest says holds `docs` documents from `first` in
    /// `bytes` bytes: header, tail and footer are checked.
    pub(crate) fn open(
        storage: &dyn Storage,
        id: u64,
        first: u64,
        docs: u64,
        bytes: u64,
    ) -> Result<Segment> {
        let name = name(id);
        let file = storage.open_exact(&name, bytes)?;
        let corrupt = |offset: u64, what: Corruption| Error::corrupt(&name, offset, what);
        if bytes < HEADER + TAIL {
            return Err(corrupt(
                0,
                Corruption::Truncated {
                    needed: HEADER + TAIL,
                    available: bytes,
                },
            ));
        }
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0)?;
        let mut r = ByteReader::new(&h, &name, 0);
        r.magic(MAGIC_SEG)?;
        version(&mut r)?;
        for (field, expected) in [
            ("segment id", id),
            ("first document", first),
            ("documents", docs),
        ] {
            let at = r.offset();
            let found = r.u64()?;
            if found != expected {
                return Err(corrupt(
                    at,
                    Corruption::Mismatch {
                        field,
                        expected,
                        found,
                    },
                ));
            }
        }
        r.check_crc()?;
        let mut t = [0u8; TAIL as usize];
        file.read_exact_at(&mut t, bytes - TAIL)?;
        let mut r = ByteReader::new(&t, &name, bytes - TAIL);
        let footer_at = r.u64()?;
        r.check_crc()?;
        r.magic(MAGIC_END)?;
        if footer_at < HEADER || footer_at > bytes - TAIL {
            return Err(corrupt(
                bytes - TAIL,
                Corruption::OutOfRange {
                    field: "footer offset",
                    found: footer_at,
                    limit: bytes - TAIL + 1,
                },
            ));
        }
        let mut f = vec![0u8; (bytes - TAIL - footer_at) as usize];
        file.read_exact_at(&mut f, footer_at)?;
        let tables = parse_footer(&f, &name, footer_at, docs)?;
        Ok(Segment {
            file,
            id,
            first,
            docs,
            bytes,
            tables,
        })
    }

    /// Reads block `b` of table `t` into `out` (cleared first), through `buf`: its checksum,
    /// its count, its order and its documents are checked.
    pub(crate) fn read_block(
        &self,
        t: usize,
        b: usize,
        buf: &mut Vec<u8>,
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        let info = self.tables[t][b];
        buf.resize(info.bytes() as usize, 0);
        self.file.read_exact_at(buf, info.offset)?;
        let name = self.file.name();
        let mut r = ByteReader::new(buf, name, info.offset);
        let at = r.offset();
        let count = r.u32()?;
        let _ = r.take(count.min(info.count) as usize * ENTRY)?;
        r.check_crc()?;
        if count != info.count {
            return Err(Error::corrupt(
                name,
                at,
                Corruption::Mismatch {
                    field: "entries in the block",
                    expected: info.count as u64,
                    found: count as u64,
                },
            ));
        }
        let body = &buf[4..4 + count as usize * ENTRY];
        out.clear();
        out.reserve(count as usize);
        // One pass without a branch per entry: every check is folded into `ok`, and only a
        // block that fails one is walked again to say where and what.
        let mut ok = true;
        let mut prev = (0u32, 0u64);
        for (i, e) in body.chunks_exact(ENTRY).enumerate() {
            let fp = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
            let doc = u64::from_le_bytes(e[8..].try_into().expect("8 bytes"));
            let k = key(fp, t);
            ok &= doc.wrapping_sub(self.first) < self.docs;
            ok &= i == 0 || k > prev.0 || (k == prev.0 && doc > prev.1);
            prev = (k, doc);
            out.push(Entry { fp, doc });
        }
        if let (Some(f), Some(l)) = (out.first(), out.last()) {
            ok &= key(f.fp, t) == info.first && key(l.fp, t) == info.last;
        }
        if ok {
            Ok(())
        } else {
            self.check_entries(t, &info, body)
        }
    }

    /// Checks the entries of a block (`body`, after its count) one by one: the first whose
    /// document is out of the segment's range, or out of (key, document) order, or whose key
    /// is not the index's first or last, is an error that names it.
    fn check_entries(&self, t: usize, info: &BlockInfo, body: &[u8]) -> Result<()> {
        let name = self.file.name();
        let count = body.len() / ENTRY;
        let end = self.first + self.docs;
        let mut prev: Option<(u32, u64)> = None;
        for (i, e) in body.chunks_exact(ENTRY).enumerate() {
            let fp = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
            let doc = u64::from_le_bytes(e[8..].try_into().expect("8 bytes"));
            let at = info.offset + 4 + (i * ENTRY) as u64;
            if doc < self.first || doc >= end {
                return Err(Error::corrupt(
                    name,
                    at,
                    Corruption::OutOfRange {
                        field: "document of an entry",
                        found: doc,
                        limit: end,
                    },
                ));
            }
            let k = (key(fp, t), doc);
            let first_or_last =
                (i == 0 && k.0 != info.first) || (i + 1 == count && k.0 != info.last);
            if prev.is_some_and(|p| p >= k) || first_or_last {
                return Err(Error::corrupt(
                    name,
                    at,
                    Corruption::Invalid {
                        field: "entry order",
                        expected:
                            "entries in increasing (key, document) order within the block's keys",
                        found: doc,
                    },
                ));
            }
            prev = Some(k);
        }
        Ok(())
    }
}

/// Reads the format version (only [`VERSION`] is known).
pub(crate) fn version(r: &mut ByteReader<'_>) -> Result<()> {
    r.version_between(VERSION, VERSION).map(|_| ())
}

/// Parses and checks a footer: every table's blocks follow one another from the header on,
/// their keys do not decrease, and each table holds `docs` entries.
fn parse_footer(f: &[u8], name: &str, base: u64, docs: u64) -> Result<[Vec<BlockInfo>; TABLES]> {
    let mut r = ByteReader::new(f, name, base);
    let mut tables: [Vec<BlockInfo>; TABLES] = Default::default();
    let mut offset = HEADER;
    for table in tables.iter_mut() {
        let blocks = r.u32()? as usize;
        if blocks > f.len() / INDEX_ENTRY {
            return Err(Error::corrupt(
                name,
                r.offset() - 4,
                Corruption::OutOfRange {
                    field: "blocks of a table",
                    found: blocks as u64,
                    limit: (f.len() / INDEX_ENTRY) as u64 + 1,
                },
            ));
        }
        let mut entries = 0u64;
        let mut last_key = 0;
        for _ in 0..blocks {
            let at = r.offset();
            let b = BlockInfo {
                first: r.u32()?,
                last: r.u32()?,
                offset: r.u64()?,
                count: r.u32()?,
            };
            let bad = b.offset != offset
                || b.count == 0
                || b.count as usize > BLOCK
                || b.first > b.last
                || b.last > 0xFFFF
                || b.first < last_key;
            if bad {
                return Err(Error::corrupt(
                    name,
                    at,
                    Corruption::Invalid {
                        field: "block index entry",
                        expected: "blocks that follow one another with keys in order",
                        found: b.offset,
                    },
                ));
            }
            offset += b.bytes();
            entries += b.count as u64;
            last_key = b.last;
            table.push(b);
        }
        if entries != docs {
            return Err(Error::corrupt(
                name,
                r.offset(),
                Corruption::Mismatch {
                    field: "entries of a table",
                    expected: docs,
                    found: entries,
                },
            ));
        }
    }
    r.check_crc()?;
    r.end()?;
    if offset != base {
        return Err(Error::corrupt(
            name,
            base,
            Corruption::Mismatch {
                field: "footer offset",
                expected: offset,
                found: base,
            },
        ));
    }
    Ok(tables)
}

/// Writes a segment, table by table, each in (key, document) order.
pub(crate) struct SegmentWriter {
    file: File,
    buf: Vec<u8>,
    /// Offset of the end of `buf` in the file.
    end: u64,
    tables: [Vec<BlockInfo>; TABLES],
    block: Vec<Entry>,
    table: usize,
    written: u64,
    docs: u64,
}

impl SegmentWriter {
    /// Creates segment `id` of `docs` documents from `first`.
    pub(crate) fn create(
        storage: &dyn Storage,
        id: u64,
        first: u64,
        docs: u64,
    ) -> Result<SegmentWriter> {
        let file = storage.create_file(&name(id))?;
        let mut buf = Vec::with_capacity(WRITE_BUFFER + BLOCK * ENTRY + 8);
        buf.put_u32(MAGIC_SEG);
        buf.put_u32(VERSION);
        buf.put_u64(id);
        buf.put_u64(first);
        buf.put_u64(docs);
        let c = crc(&buf);
        buf.put_u32(c);
        Ok(SegmentWriter {
            file,
            buf,
            end: 0,
            tables: Default::default(),
            block: Vec::with_capacity(BLOCK),
            table: 0,
            written: 0,
            docs,
        })
    }

    /// Appends the next entry of table `t` (tables in order, entries in order).
    pub(crate) fn push(&mut self, t: usize, e: Entry) -> Result<()> {
        debug_assert!(t >= self.table);
        if t != self.table {
            self.end_table()?;
            self.table = t;
        }
        self.block.push(e);
        if self.block.len() == BLOCK {
            self.write_block()?;
        }
        Ok(())
    }

    fn end_table(&mut self) -> Result<()> {
        if !self.block.is_empty() {
            self.write_block()?;
        }
        Ok(())
    }

    fn write_block(&mut self) -> Result<()> {
        let t = self.table;
        let start = self.buf.len();
        let offset = self.end + start as u64;
        self.buf.put_u32(self.block.len() as u32);
        for e in &self.block {
            self.buf.put_u64(e.fp);
            self.buf.put_u64(e.doc);
        }
        let c = crc(&self.buf[start..]);
        self.buf.put_u32(c);
        self.tables[t].push(BlockInfo {
            first: key(self.block[0].fp, t),
            last: key(self.block[self.block.len() - 1].fp, t),
            offset,
            count: self.block.len() as u32,
        });
        self.written += self.block.len() as u64;
        self.block.clear();
        if self.buf.len() >= WRITE_BUFFER {
            self.file.write_all_at(&self.buf, self.end)?;
            self.end += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the footer and the tail and fsyncs the file; returns the file, its length and
    /// the blocks of each table.
    pub(crate) fn finish(mut self) -> Result<(File, u64, [Vec<BlockInfo>; TABLES])> {
        self.end_table()?;
        debug_assert_eq!(self.written, self.docs * TABLES as u64);
        let footer_at = self.end + self.buf.len() as u64;
        let start = self.buf.len();
        for table in &self.tables {
            self.buf.put_u32(table.len() as u32);
            for b in table {
                self.buf.put_u32(b.first);
                self.buf.put_u32(b.last);
                self.buf.put_u64(b.offset);
                self.buf.put_u32(b.count);
            }
        }
        let c = crc(&self.buf[start..]);
        self.buf.put_u32(c);
        let tail = self.buf.len();
        self.buf.put_u64(footer_at);
        let c = crc(&self.buf[tail..]);
        self.buf.put_u32(c);
        self.buf.put_u32(MAGIC_END);
        self.file.write_all_at(&self.buf, self.end)?;
        let bytes = self.end + self.buf.len() as u64;
        self.file.sync()?;
        Ok((self.file, bytes, self.tables))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::DirStorage;

    /// A segment of `docs` documents from 10, fingerprint `i * 0x0001_0001_0001_0001` for
    /// document `10 + i`, written and opened.
    fn segment(storage: &DirStorage, docs: u64) -> Segment {
        let mut w = SegmentWriter::create(storage, 1, 10, docs).unwrap();
        for t in 0..TABLES {
            for i in 0..docs {
                let e = Entry {
                    fp: i * 0x0001_0001_0001_0001,
                    doc: 10 + i,
                };
                w.push(t, e).unwrap();
            }
        }
        let (_, bytes, _) = w.finish().unwrap();
        Segment::open(storage, 1, 10, docs, bytes).unwrap()
    }

    /// Rewrites entry `i` of block 0 of table 0 as `fp`, `doc`, with a valid checksum.
    fn rewrite(s: &Segment, i: usize, fp: u64, doc: u64) {
        let info = s.tables[0][0];
        let mut b = vec![0u8; info.bytes() as usize];
        s.file.read_exact_at(&mut b, info.offset).unwrap();
        let at = 4 + i * ENTRY;
        b[at..at + 8].copy_from_slice(&fp.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&doc.to_le_bytes());
        let end = b.len() - 4;
        let c = crc(&b[..end]);
        b[end..].copy_from_slice(&c.to_le_bytes());
        s.file.write_all_at(&b, info.offset).unwrap();
    }

    fn fault(s: &Segment) -> String {
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        s.read_block(0, 0, &mut buf, &mut out)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_block_whose_checksum_holds_is_still_checked_entry_by_entry() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::open(dir.path()).unwrap();
        let s = segment(&storage, 100);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        s.read_block(2, 0, &mut buf, &mut out).unwrap();
        assert_eq!(out.len(), 100);
        assert_eq!(
            out[7],
            Entry {
                fp: 7 * 0x0001_0001_0001_0001,
                doc: 17
            }
        );

        let step = 0x0001_0001_0001_0001u64;
        // A document outside the segment's range, in order.
        rewrite(&s, 99, 99 * step, 110);
        let e = fault(&s);
        assert!(e.contains("document of an entry"), "{e}");
        // Out of (key, document) order: entry 5 takes entry 4's key and document.
        rewrite(&s, 99, 99 * step, 109);
        rewrite(&s, 5, 4 * step, 14);
        let e = fault(&s);
        assert!(e.contains("entry order"), "{e}");
        // Same key, document not increasing.
        rewrite(&s, 5, 4 * step, 13);
        assert!(fault(&s).contains("entry order"));
        // In order, but the first key is not the index's.
        rewrite(&s, 5, 5 * step, 15);
        rewrite(&s, 0, 1, 10);
        assert!(fault(&s).contains("entry order"));
        // Mended, the block reads again.
        rewrite(&s, 0, 0, 10);
        s.read_block(0, 0, &mut buf, &mut out).unwrap();
        assert_eq!(out.len(), 100);
    }
}
