//! A segment `n-<id>.seg`: the (fingerprint, document) entries of a range of documents, four
//! times, once per *table*, each table sorted by one 16-bit block of the fingerprint (its
//! *key*) and then by document. Layout in `docs/design.md` ("Near-duplicates: files").
//!
//! A block of version 2 keeps its keys as runs, the other 48 bits of each fingerprint, and
//! its documents apart, each part with its checksum: a search reads the keys and fingerprints
//! alone (6 bytes an entry and 4 a key run, instead of 16), and a block's documents only
//! when a fingerprint in it is within the distance searched. Version 1 (fingerprint and
//! document side by side) is still read.

use super::search::{self, Probe};
use super::{Entry, TABLES};
use crate::error::{Corruption, Error, Result};
use crate::format::{crc, ByteReader, PutLe};
use crate::storage::{File, Storage, StorageExt};

/// Magic of a segment file.
pub(crate) const MAGIC_SEG: u32 = u32::from_le_bytes(*b"CRVN");
/// Magic at a segment's very end.
const MAGIC_END: u32 = u32::from_le_bytes(*b"NEND");
/// Format version of D and its index.
pub(crate) const VERSION: u32 = 1;
/// Format version of the segments written (version 1 is read too).
pub(crate) const SEGMENT_VERSION: u32 = 2;
/// The most documents a segment of version 2 holds: its documents are kept as 32-bit
/// offsets from its first.
pub(crate) const MAX_SEGMENT_DOCS: u64 = u32::MAX as u64;
/// Bytes of the header.
const HEADER: u64 = 36;
/// Bytes of an entry of version 1: fingerprint and document.
const ENTRY: usize = 16;
/// Bytes of a key run of version 2: key u16, entries u16.
const RUN: usize = 4;
/// Bytes of a fingerprint less its key, version 2.
pub(crate) const REST: usize = 6;
/// Bytes of a document's offset from the segment's first, version 2.
const DOC: usize = 4;
/// Entries per block (the last of a table may hold fewer).
pub(crate) const BLOCK: usize = 4096;
/// Bytes of the tail.
const TAIL: u64 = 16;
/// Bytes of a block's index entry in the footer, version 1 (version 2 adds the key runs).
const INDEX_ENTRY: usize = 20;
/// The writer's buffer.
const WRITE_BUFFER: usize = 1 << 20;

/// The key of `fp` in table `t`: its bits `16 t .. 16 t + 16`.
pub(crate) fn key(fp: u64, t: usize) -> u32 {
    (fp >> (16 * t)) as u32 & 0xFFFF
}

/// `fp` less its key in table `t`: its other 48 bits, in order.
pub(crate) fn rest(fp: u64, t: usize) -> u64 {
    let low = (1u64 << (16 * t)) - 1;
    (fp & low) | ((fp >> 16) & !low)
}

/// Entry `i`'s fingerprint less its key, from `rests`, the fingerprints of a block of
/// version 2 followed by its checksum: the 4 bytes after them let every entry be read as
/// one 8-byte load.
#[inline(always)]
pub(crate) fn rest_at(rests: &[u8], i: usize) -> u64 {
    let at = i * REST;
    u64::from_le_bytes(rests[at..at + 8].try_into().expect("8 bytes")) & ((1 << 48) - 1)
}

/// The fingerprint whose key in table `t` is `key` and whose other bits are `rest`.
pub(crate) fn unrest(rest: u64, key: u32, t: usize) -> u64 {
    let low = (1u64 << (16 * t)) - 1;
    (rest & low) | (u64::from(key) << (16 * t)) | ((rest & !low) << 16)
}

/// Appends, for each entry of `block`, the first `width` bytes of `field(entry)` in little
/// endian, into room made once for them all.
fn put_each(buf: &mut Vec<u8>, block: &[Entry], width: usize, field: impl Fn(&Entry) -> u64) {
    let at = buf.len();
    buf.resize(at + block.len() * width, 0);
    for (e, out) in block.iter().zip(buf[at..].chunks_exact_mut(width)) {
        out.copy_from_slice(&field(e).to_le_bytes()[..width]);
    }
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
    /// Runs of one key in it (version 2; 0 in version 1).
    pub runs: u32,
}

impl BlockInfo {
    /// Bytes of the block's head in a segment of `version`: in version 2 its count, its key
    /// runs, its fingerprints less their keys and their checksum; in version 1 all of it.
    fn head_bytes(&self, version: u32) -> u64 {
        let count = u64::from(self.count);
        match version {
            1 => 8 + count * ENTRY as u64,
            _ => 12 + u64::from(self.runs) * RUN as u64 + count * REST as u64,
        }
    }

    /// Bytes of the block on disk in a segment of `version`.
    fn bytes(&self, version: u32) -> u64 {
        match version {
            1 => self.head_bytes(1),
            _ => self.head_bytes(version) + 4 + u64::from(self.count) * DOC as u64,
        }
    }
}

/// What a search reads of a block: kept between blocks so that their room is reused.
#[derive(Default)]
pub(crate) struct Scratch {
    buf: Vec<u8>,
    entries: Vec<Entry>,
    runs: Vec<(u32, u32)>,
    docs_buf: Vec<u8>,
    docs: Vec<u64>,
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
    /// Its format version (1 or 2).
    pub version: u32,
    /// The blocks of each table.
    pub tables: [Vec<BlockInfo>; TABLES],
}

impl Segment {
    /// Bytes of its sparse index in memory.
    pub(crate) fn index_memory(&self) -> usize {
        let blocks: usize = self.tables.iter().map(Vec::capacity).sum();
        blocks * std::mem::size_of::<BlockInfo>()
    }

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
        let version = r.version_between(1, SEGMENT_VERSION)?;
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
        if version >= 2 && docs > MAX_SEGMENT_DOCS {
            // The header's `docs` (at byte 24), which is the manifest's.
            return Err(corrupt(
                24,
                Corruption::OutOfRange {
                    field: "documents of a segment",
                    found: docs,
                    limit: MAX_SEGMENT_DOCS + 1,
                },
            ));
        }
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
        let tables = parse_footer(&f, &name, footer_at, docs, version)?;
        Ok(Segment {
            file,
            id,
            first,
            docs,
            bytes,
            version,
            tables,
        })
    }

    /// Reads block `b` of table `t` into `out` (cleared first), through `buf`: its checksums,
    /// its count, its order and its documents are checked.
    pub(crate) fn read_block(
        &self,
        t: usize,
        b: usize,
        buf: &mut Vec<u8>,
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        let info = self.tables[t][b];
        buf.resize(info.bytes(self.version) as usize, 0);
        self.file.read_exact_at(buf, info.offset)?;
        if self.version == 1 {
            return self.decode_v1(t, &info, buf, out);
        }
        let head = info.head_bytes(self.version) as usize;
        let (h, d) = buf.split_at(head);
        let (mut runs, mut docs) = (Vec::new(), Vec::new());
        let rests = self.decode_head(&info, h, &mut runs)?;
        self.decode_docs(&info, info.offset + head as u64, d, &runs, &mut docs)?;
        out.clear();
        out.reserve(docs.len());
        let mut i = 0;
        for &(key, n) in &runs {
            for _ in 0..n {
                let fp = unrest(rest_at(rests, i), key, t);
                out.push(Entry { fp, doc: docs[i] });
                i += 1;
            }
        }
        Ok(())
    }

    /// Calls `on(slot, doc, distance)` for every pair of a probe (in key order, none before
    /// the block's first key) and an entry of block `b` of table `t` with the same key, the
    /// entry's document earlier than the probe's, within distance `k`. Of a block of version
    /// 2 only the keys and fingerprints are read, and its documents once one is within `k`.
    pub(crate) fn join_block(
        &self,
        t: usize,
        b: usize,
        probes: &[Probe],
        k: u32,
        s: &mut Scratch,
        on: &mut impl FnMut(u32, u64, u32),
    ) -> Result<()> {
        if self.version == 1 {
            self.read_block(t, b, &mut s.buf, &mut s.entries)?;
            search::join(probes, &s.entries, t, k, |_| u64::MAX, on);
            return Ok(());
        }
        let info = self.tables[t][b];
        let head = info.head_bytes(self.version);
        s.buf.resize(head as usize, 0);
        self.file.read_exact_at(&mut s.buf, info.offset)?;
        let rests = self.decode_head(&info, &s.buf, &mut s.runs)?;
        // The documents are read at the first entry within `k`, and each pair is given to
        // `on` as it is found: nothing is gathered, whatever the number of pairs.
        let (runs, docs_buf, docs) = (&s.runs, &mut s.docs_buf, &mut s.docs);
        let mut read: Option<Result<()>> = None;
        search::join_runs(probes, t, runs, rests, k, &mut |slot, at, d| {
            let ok = read.get_or_insert_with(|| {
                docs_buf.resize((info.bytes(self.version) - head) as usize, 0);
                self.file.read_exact_at(docs_buf, info.offset + head)?;
                self.decode_docs(&info, info.offset + head, docs_buf, runs, docs)
            });
            if ok.is_ok() {
                on(slot, docs[at as usize], d);
            }
        });
        read.unwrap_or(Ok(()))
    }

    /// Decodes the head of a block of version 2 (`head`, at its offset): its key runs into
    /// `runs` as (key, entries), cleared first; the checksum, the count, the runs (keys
    /// increasing from the index's first to its last, each of one entry or more, adding up
    /// to the count) are checked. Returns the fingerprints less their keys, 6 bytes each
    /// ([`rest_at`]), followed by the checksum.
    fn decode_head<'a>(
        &self,
        info: &BlockInfo,
        head: &'a [u8],
        runs: &mut Vec<(u32, u32)>,
    ) -> Result<&'a [u8]> {
        let name = self.file.name();
        let mut r = ByteReader::new(head, name, info.offset);
        let at = r.offset();
        let count = r.u32()?;
        let nruns = r.u32()?;
        let body = r.take(info.runs as usize * RUN + info.count as usize * REST)?;
        r.check_crc()?;
        for (field, expected, found, at) in [
            ("entries in the block", info.count, count, at),
            ("key runs in the block", info.runs, nruns, at + 4),
        ] {
            if found != expected {
                return Err(Error::corrupt(
                    name,
                    at,
                    Corruption::Mismatch {
                        field,
                        expected: u64::from(expected),
                        found: u64::from(found),
                    },
                ));
            }
        }
        let run_bytes = &body[..info.runs as usize * RUN];
        runs.clear();
        let mut total = 0u64;
        let mut prev: Option<u32> = None;
        for (i, run) in run_bytes.chunks_exact(RUN).enumerate() {
            let key = u32::from(u16::from_le_bytes([run[0], run[1]]));
            let n = u32::from(u16::from_le_bytes([run[2], run[3]]));
            let bad = n == 0
                || prev.is_some_and(|p| p >= key)
                || (i == 0 && key != info.first)
                || (i + 1 == info.runs as usize && key != info.last);
            if bad {
                return Err(Error::corrupt(
                    name,
                    info.offset + 8 + (i * RUN) as u64,
                    Corruption::Invalid {
                        field: "key run",
                        expected: "runs of one entry or more, keys increasing from the \
                                   index's first to its last",
                        found: u64::from(key),
                    },
                ));
            }
            prev = Some(key);
            total += u64::from(n);
            runs.push((key, n));
        }
        if total != u64::from(count) {
            return Err(Error::corrupt(
                name,
                info.offset + 8,
                Corruption::Mismatch {
                    field: "entries of the key runs",
                    expected: u64::from(count),
                    found: total,
                },
            ));
        }
        Ok(&head[8 + run_bytes.len()..])
    }

    /// Decodes the documents of a block of version 2 (`bytes`, at offset `at`) into `docs`
    /// (cleared first): the checksum, each document within the segment's range and the
    /// documents increasing within each of the key `runs` are checked.
    fn decode_docs(
        &self,
        info: &BlockInfo,
        at: u64,
        bytes: &[u8],
        runs: &[(u32, u32)],
        docs: &mut Vec<u64>,
    ) -> Result<()> {
        let name = self.file.name();
        let mut r = ByteReader::new(bytes, name, at);
        let body = r.take(info.count as usize * DOC)?;
        r.check_crc()?;
        docs.clear();
        docs.reserve(info.count as usize);
        let mut offsets = body
            .chunks_exact(DOC)
            .map(|d| u64::from(u32::from_le_bytes([d[0], d[1], d[2], d[3]])));
        // As in version 1: the checks folded into `ok`, the entry at fault found by a walk.
        let mut ok = true;
        for &(_, n) in runs {
            let mut prev = None;
            for off in offsets.by_ref().take(n as usize) {
                ok &= off < self.docs;
                ok &= prev.is_none_or(|p| off > p);
                prev = Some(off);
                docs.push(self.first + off);
            }
        }
        if ok {
            return Ok(());
        }
        let mut i = 0;
        for &(_, n) in runs {
            for j in 0..n as usize {
                let doc = docs[i + j];
                let at = at + ((i + j) * DOC) as u64;
                if doc >= self.first + self.docs {
                    return Err(Error::corrupt(
                        name,
                        at,
                        Corruption::OutOfRange {
                            field: "document of an entry",
                            found: doc,
                            limit: self.first + self.docs,
                        },
                    ));
                }
                if j > 0 && docs[i + j - 1] >= doc {
                    return Err(Error::corrupt(
                        name,
                        at,
                        Corruption::Invalid {
                            field: "entry order",
                            expected: "entries in increasing (key, document) order",
                            found: doc,
                        },
                    ));
                }
            }
            i += n as usize;
        }
        Ok(())
    }

    /// Decodes a block of version 1 (`buf`, all of it) into `out` (cleared first).
    fn decode_v1(
        &self,
        t: usize,
        info: &BlockInfo,
        buf: &[u8],
        out: &mut Vec<Entry>,
    ) -> Result<()> {
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
            self.check_entries(t, info, body)
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
fn parse_footer(
    f: &[u8],
    name: &str,
    base: u64,
    docs: u64,
    version: u32,
) -> Result<[Vec<BlockInfo>; TABLES]> {
    let mut r = ByteReader::new(f, name, base);
    let mut tables: [Vec<BlockInfo>; TABLES] = Default::default();
    let mut offset = HEADER;
    let index_entry = if version == 1 {
        INDEX_ENTRY
    } else {
        INDEX_ENTRY + 4
    };
    for table in tables.iter_mut() {
        let blocks = r.u32()? as usize;
        if blocks > f.len() / index_entry {
            return Err(Error::corrupt(
                name,
                r.offset() - 4,
                Corruption::OutOfRange {
                    field: "blocks of a table",
                    found: blocks as u64,
                    limit: (f.len() / index_entry) as u64 + 1,
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
                runs: if version == 1 { 0 } else { r.u32()? },
            };
            let bad = b.offset != offset
                || b.count == 0
                || b.count as usize > BLOCK
                || b.first > b.last
                || b.last > 0xFFFF
                || b.first < last_key
                || (version >= 2
                    && (b.runs == 0 || b.runs > b.count || b.runs > b.last - b.first + 1));
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
            offset += b.bytes(version);
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
    id: u64,
    buf: Vec<u8>,
    /// Offset of the end of `buf` in the file.
    end: u64,
    tables: [Vec<BlockInfo>; TABLES],
    block: Vec<Entry>,
    table: usize,
    written: u64,
    first: u64,
    docs: u64,
    version: u32,
}

impl SegmentWriter {
    /// Creates segment `id` of `docs` documents from `first`, of format `version`:
    /// [`SEGMENT_VERSION`] (`docs` at most [`MAX_SEGMENT_DOCS`]), or 1 for the tests of stores
    /// written before it.
    pub(crate) fn create(
        storage: &dyn Storage,
        id: u64,
        first: u64,
        docs: u64,
        version: u32,
    ) -> Result<SegmentWriter> {
        debug_assert!((1..=SEGMENT_VERSION).contains(&version));
        if version >= 2 && docs > MAX_SEGMENT_DOCS {
            return Err(Error::InvalidOption {
                option: "documents of a segment",
                reason: format!("{docs}: a segment holds at most {MAX_SEGMENT_DOCS}"),
            });
        }
        let file = storage.create_file(&name(id))?;
        let mut buf = Vec::with_capacity(WRITE_BUFFER + BLOCK * ENTRY + 8);
        buf.put_u32(MAGIC_SEG);
        buf.put_u32(version);
        buf.put_u64(id);
        buf.put_u64(first);
        buf.put_u64(docs);
        let c = crc(&buf);
        buf.put_u32(c);
        Ok(SegmentWriter {
            file,
            id,
            buf,
            end: 0,
            tables: Default::default(),
            block: Vec::with_capacity(BLOCK),
            table: 0,
            written: 0,
            first,
            docs,
            version,
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
        let n = self.block.len();
        self.buf.put_u32(n as u32);
        let mut runs = 0u32;
        if self.version == 1 {
            for e in &self.block {
                self.buf.put_u64(e.fp);
                self.buf.put_u64(e.doc);
            }
            let c = crc(&self.buf[start..]);
            self.buf.put_u32(c);
        } else {
            let runs_at = self.buf.len();
            self.buf.put_u32(0);
            let mut i = 0;
            while i < n {
                let k = key(self.block[i].fp, t);
                let j = i + self.block[i..].partition_point(|e| key(e.fp, t) == k);
                // A block holds at most BLOCK (4,096) entries: both fit 16 bits.
                self.buf.extend_from_slice(&(k as u16).to_le_bytes());
                self.buf.extend_from_slice(&((j - i) as u16).to_le_bytes());
                runs += 1;
                i = j;
            }
            self.buf[runs_at..runs_at + 4].copy_from_slice(&runs.to_le_bytes());
            put_each(&mut self.buf, &self.block, REST, |e| rest(e.fp, t));
            let c = crc(&self.buf[start..]);
            self.buf.put_u32(c);
            let docs_at = self.buf.len();
            let (first, docs) = (self.first, self.docs);
            put_each(&mut self.buf, &self.block, DOC, |e| {
                debug_assert!(e.doc >= first && e.doc - first < docs);
                e.doc - first
            });
            let c = crc(&self.buf[docs_at..]);
            self.buf.put_u32(c);
        }
        self.tables[t].push(BlockInfo {
            first: key(self.block[0].fp, t),
            last: key(self.block[n - 1].fp, t),
            offset,
            count: n as u32,
            runs,
        });
        self.written += n as u64;
        self.block.clear();
        if self.buf.len() >= WRITE_BUFFER {
            self.file.write_all_at(&self.buf, self.end)?;
            self.end += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the footer and the tail and fsyncs the file; returns the segment written (its
    /// directory entry is the caller's to sync).
    pub(crate) fn finish(mut self) -> Result<Segment> {
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
                if self.version >= 2 {
                    self.buf.put_u32(b.runs);
                }
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
        Ok(Segment {
            file: self.file,
            id: self.id,
            first: self.first,
            docs: self.docs,
            bytes,
            version: self.version,
            tables: self.tables,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::DirStorage;

    /// A segment of version `version` whose table `t` holds `entries` (documents from 10)
    /// in (key, document) order, written and opened.
    fn segment(storage: &DirStorage, version: u32, entries: &[Entry]) -> Segment {
        let docs = entries.len() as u64;
        let mut w = SegmentWriter::create(storage, 1, 10, docs, version).unwrap();
        for t in 0..TABLES {
            let mut table = entries.to_vec();
            table.sort_by_key(|e| (key(e.fp, t), e.doc));
            for e in table {
                w.push(t, e).unwrap();
            }
        }
        let bytes = w.finish().unwrap().bytes;
        Segment::open(storage, 1, 10, docs, bytes).unwrap()
    }

    const STEP: u64 = 0x0001_0001_0001_0001;

    /// Document `10 + i` has the fingerprint `i * STEP`: one key per entry in every table.
    fn spread(docs: u64) -> Vec<Entry> {
        (0..docs)
            .map(|i| Entry {
                fp: i * STEP,
                doc: 10 + i,
            })
            .collect()
    }

    fn fault(s: &Segment) -> String {
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        s.read_block(0, 0, &mut buf, &mut out)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn fingerprints_lose_their_key_and_get_it_back_in_every_table() {
        for fp in [0, u64::MAX, 0x0123_4567_89ab_cdef, 1 << 63, 0xFFFF] {
            for t in 0..TABLES {
                assert!(rest(fp, t) < 1 << 48);
                assert_eq!(
                    unrest(rest(fp, t), key(fp, t), t),
                    fp,
                    "{fp:x} in table {t}"
                );
            }
        }
    }

    /// Writes the checksum of `part`'s bytes before its last four into them.
    fn reseal(part: &mut [u8]) {
        let end = part.len() - 4;
        let c = crc(&part[..end]);
        part[end..].copy_from_slice(&c.to_le_bytes());
    }

    /// Rewrites entry `i` of block 0 of table 0 of a version 1 segment as `fp`, `doc`, with
    /// a valid checksum.
    fn rewrite_v1(s: &Segment, i: usize, fp: u64, doc: u64) {
        let info = s.tables[0][0];
        let mut b = vec![0u8; info.bytes(1) as usize];
        s.file.read_exact_at(&mut b, info.offset).unwrap();
        let at = 4 + i * ENTRY;
        b[at..at + 8].copy_from_slice(&fp.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&doc.to_le_bytes());
        reseal(&mut b);
        s.file.write_all_at(&b, info.offset).unwrap();
    }

    #[test]
    fn a_block_of_version_1_whose_checksum_holds_is_still_checked_entry_by_entry() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::open(dir.path()).unwrap();
        let s = segment(&storage, 1, &spread(100));
        assert_eq!(s.version, 1);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        s.read_block(2, 0, &mut buf, &mut out).unwrap();
        assert_eq!(out.len(), 100);
        assert_eq!(
            out[7],
            Entry {
                fp: 7 * STEP,
                doc: 17
            }
        );

        // A document outside the segment's range, in order.
        rewrite_v1(&s, 99, 99 * STEP, 110);
        let e = fault(&s);
        assert!(e.contains("document of an entry"), "{e}");
        // Out of (key, document) order: entry 5 takes entry 4's key and document.
        rewrite_v1(&s, 99, 99 * STEP, 109);
        rewrite_v1(&s, 5, 4 * STEP, 14);
        let e = fault(&s);
        assert!(e.contains("entry order"), "{e}");
        // Same key, document not increasing.
        rewrite_v1(&s, 5, 4 * STEP, 13);
        assert!(fault(&s).contains("entry order"));
        // In order, but the first key is not the index's.
        rewrite_v1(&s, 5, 5 * STEP, 15);
        rewrite_v1(&s, 0, 1, 10);
        assert!(fault(&s).contains("entry order"));
        // Mended, the block reads again.
        rewrite_v1(&s, 0, 0, 10);
        s.read_block(0, 0, &mut buf, &mut out).unwrap();
        assert_eq!(out.len(), 100);
    }

    /// Changes block 0 of table 0 of a version 2 segment by `f` (its head, its documents),
    /// then writes both checksums again.
    fn rewrite_v2(s: &Segment, f: impl FnOnce(&mut [u8], &mut [u8])) {
        let info = s.tables[0][0];
        let mut b = vec![0u8; info.bytes(2) as usize];
        s.file.read_exact_at(&mut b, info.offset).unwrap();
        let (head, docs) = b.split_at_mut(info.head_bytes(2) as usize);
        f(head, docs);
        reseal(head);
        reseal(docs);
        s.file.write_all_at(&b, info.offset).unwrap();
    }

    #[test]
    fn a_block_of_version_2_keeps_key_runs_and_checks_them_and_its_documents() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::open(dir.path()).unwrap();
        // Two documents a key in table 0 (they differ in the top bit), 50 keys.
        let entries: Vec<Entry> = (0..100u64)
            .map(|i| Entry {
                fp: ((i / 2) * STEP) ^ ((i % 2) << 63),
                doc: 10 + i,
            })
            .collect();
        let s = segment(&storage, 2, &entries);
        assert_eq!(s.version, 2);
        assert_eq!(s.tables[0][0].runs, 50);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for t in 0..TABLES {
            s.read_block(t, 0, &mut buf, &mut out).unwrap();
            let mut want = entries.clone();
            want.sort_by_key(|e| (key(e.fp, t), e.doc));
            assert_eq!(out, want, "table {t}");
        }
        // A search reads the documents of the entries within its distance only.
        let probes = [
            // Its own key is 2, one bit from the key probed (as at k ≥ 4), and one bit
            // (16) of the rest differs too.
            Probe {
                key: 3,
                fp: (3 * STEP) ^ 1 ^ (1 << 16),
                slot: 0,
            },
            Probe {
                key: 7,
                fp: 7 * STEP,
                slot: 1,
            },
        ];
        let mut found = Vec::new();
        let mut scratch = Scratch::default();
        s.join_block(0, 0, &probes, 3, &mut scratch, &mut |slot, doc, d| {
            found.push((slot, doc, d))
        })
        .unwrap();
        // Probe 0 is 2 bits from document 16 and 3 from 17 (the top bit too); probe 1 is
        // 0 bits from document 24 and 1 from 25, its key's.
        assert_eq!(found, vec![(0, 16, 2), (0, 17, 3), (1, 24, 0), (1, 25, 1)]);

        let runs = 8;
        let rests = runs + 50 * RUN;
        // A document outside the segment's range.
        rewrite_v2(&s, |_, docs| {
            docs[4..8].copy_from_slice(&100u32.to_le_bytes())
        });
        let e = fault(&s);
        assert!(e.contains("document of an entry"), "{e}");
        // A search with nothing within k does not read the documents; one with an entry
        // within k reads them, fails, and gives its caller nothing of the block.
        let far = [Probe {
            key: 3,
            fp: (3 * STEP) ^ (0xFF << 32),
            slot: 0,
        }];
        let mut called = false;
        s.join_block(0, 0, &far, 3, &mut scratch, &mut |_, _, _| called = true)
            .unwrap();
        let e = s
            .join_block(0, 0, &probes, 3, &mut scratch, &mut |_, _, _| called = true)
            .unwrap_err();
        assert!(e.to_string().contains("document of an entry"), "{e}");
        assert!(!called);
        // The two documents of a key in decreasing order.
        rewrite_v2(&s, |_, docs| {
            docs[0..4].copy_from_slice(&1u32.to_le_bytes());
            docs[4..8].copy_from_slice(&0u32.to_le_bytes());
        });
        let e = fault(&s);
        assert!(e.contains("entry order"), "{e}");
        rewrite_v2(&s, |_, docs| {
            docs[0..4].copy_from_slice(&0u32.to_le_bytes());
            docs[4..8].copy_from_slice(&1u32.to_le_bytes());
        });
        s.read_block(0, 0, &mut buf, &mut out).unwrap();
        // Key runs out of order, empty, or not adding up to the block's entries.
        rewrite_v2(&s, |head, _| {
            head[runs + 4..runs + 6].copy_from_slice(&0u16.to_le_bytes())
        });
        assert!(fault(&s).contains("key run"));
        rewrite_v2(&s, |head, _| {
            head[runs + 4..runs + 6].copy_from_slice(&1u16.to_le_bytes());
            head[runs + 2..runs + 4].copy_from_slice(&0u16.to_le_bytes());
        });
        assert!(fault(&s).contains("key run"));
        rewrite_v2(&s, |head, _| {
            head[runs + 2..runs + 4].copy_from_slice(&3u16.to_le_bytes())
        });
        let e = fault(&s);
        assert!(e.contains("entries of the key runs"), "{e}");
        rewrite_v2(&s, |head, _| {
            head[runs + 2..runs + 4].copy_from_slice(&2u16.to_le_bytes())
        });
        s.read_block(0, 0, &mut buf, &mut out).unwrap();
        // The last run's key past the index's last key (a search, which trusts the index,
        // would pass over it).
        let last = runs + 49 * RUN;
        rewrite_v2(&s, |head, _| {
            head[last..last + 2].copy_from_slice(&50u16.to_le_bytes())
        });
        assert!(fault(&s).contains("key run"));
        rewrite_v2(&s, |head, _| {
            head[last..last + 2].copy_from_slice(&49u16.to_le_bytes())
        });
        // The block's own count and runs against the index's.
        rewrite_v2(&s, |head, _| {
            head[4..8].copy_from_slice(&49u32.to_le_bytes())
        });
        let e = fault(&s);
        assert!(e.contains("key runs in the block"), "{e}");
        rewrite_v2(&s, |head, _| {
            head[4..8].copy_from_slice(&50u32.to_le_bytes());
            head[0..4].copy_from_slice(&99u32.to_le_bytes());
        });
        let e = fault(&s);
        assert!(e.contains("entries in the block"), "{e}");
        rewrite_v2(&s, |head, _| {
            head[0..4].copy_from_slice(&100u32.to_le_bytes())
        });
        s.read_block(0, 0, &mut buf, &mut out).unwrap();
        // A flip in a fingerprint's rest without its checksum.
        let info = s.tables[0][0];
        let mut b = [0u8; 1];
        s.file
            .read_exact_at(&mut b, info.offset + rests as u64)
            .unwrap();
        s.file
            .write_all_at(&[b[0] ^ 1], info.offset + rests as u64)
            .unwrap();
        let e = fault(&s);
        assert!(e.contains("checksum"), "{e}");
        assert!(s
            .join_block(0, 0, &probes, 3, &mut scratch, &mut |_, _, _| {})
            .is_err());
    }

    #[test]
    fn a_footer_of_version_2_whose_runs_are_wrong_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let storage = DirStorage::open(dir.path()).unwrap();
        // Two blocks a table, each of 4,096 entries of one key each, every other key: a
        // block spans twice as many keys as it has entries.
        let entries: Vec<Entry> = spread(2 * BLOCK as u64)
            .into_iter()
            .map(|e| Entry {
                fp: e.fp * 2,
                doc: e.doc,
            })
            .collect();
        let s = segment(&storage, 2, &entries);
        let bytes = s.bytes;
        assert_eq!(s.tables[0].len(), 2);
        assert_eq!((s.tables[0][0].count, s.tables[0][0].runs), (4096, 4096));
        let file = s.file.clone();
        drop(s);
        let mut tail = [0u8; 8];
        file.read_exact_at(&mut tail, bytes - TAIL).unwrap();
        let footer = u64::from_le_bytes(tail);
        let mut f = vec![0u8; (bytes - TAIL - footer) as usize];
        file.read_exact_at(&mut f, footer).unwrap();
        // Table 0's entries: after its count of blocks, 24 bytes each (first key, last key,
        // offset, count, runs).
        let (b0, b1) = (4usize, 4 + 24);
        let u32_at = |g: &[u8], i: usize| u32::from_le_bytes(g[i..i + 4].try_into().unwrap());
        let write = |g: &mut Vec<u8>| {
            reseal(g);
            file.write_all_at(g, footer).unwrap();
        };
        // Block 0 given one run more than its entries, block 1 one fewer and its offset 4
        // bytes on: the blocks still follow one another up to the footer, and only the
        // bounds of the runs refuse it (its keys span 8,191). Then block 0's last key
        // lowered to 4,094: its 4,096 runs are more than the keys it spans.
        for (runs0, last0) in [(4097u32, None), (4096, Some(4094u32)), (4096, None)] {
            let mut g = f.clone();
            g[b0 + 20..b0 + 24].copy_from_slice(&runs0.to_le_bytes());
            if let Some(l) = last0 {
                g[b0 + 4..b0 + 8].copy_from_slice(&l.to_le_bytes());
            }
            let shift = 4 * (i64::from(runs0) - 4096);
            let off = u64::from_le_bytes(g[b1 + 8..b1 + 16].try_into().unwrap());
            g[b1 + 8..b1 + 16].copy_from_slice(&((off as i64 + shift) as u64).to_le_bytes());
            let runs1 = (i64::from(u32_at(&g, b1 + 20)) - shift / 4) as u32;
            g[b1 + 20..b1 + 24].copy_from_slice(&runs1.to_le_bytes());
            write(&mut g);
            let opened = Segment::open(&storage, 1, 10, 2 * BLOCK as u64, bytes);
            if (runs0, last0) == (4096, None) {
                assert!(opened.is_ok());
            } else {
                let e = opened.err().expect("refused").to_string();
                assert!(e.contains("block index entry"), "runs {runs0}: {e}");
            }
        }
    }
}
