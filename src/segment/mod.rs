//! Z segments: immutable files of strictly increasing signatures.
//!
//! ```text
//! segment := header | block* | footer | tail
//! header  := magic "CRVZ" u32 | version u32 | id u64 | crc32 u32                      (20 bytes)
//! block   := count u32 | k u32 | first u64 | payload_len u32 | payload | crc32 u32
//!            payload: count-1 Rice-coded gaps (see [`rice`]), whole little-endian u64 words
//! footer  := blocks u64 | sigs u64 | blocks x (first u64 | offset u64 | count u32) | crc32 u32
//! tail    := footer_offset u64 | crc32 u32 (of footer_offset) | magic "ZEND" u32     (16 bytes)
//! ```
//!
//! The footer is the sparse index: the first signature and offset of every block, kept in
//! memory, so that a lookup reads at most one block per segment. A block holds at most
//! [`BLOCK_SIGS`] signatures.

pub(crate) mod rice;
mod writer;

pub(crate) use writer::SegmentWriter;

use crate::error::{Corruption, Error, Result};
use crate::format::{crc, ByteReader, MAGIC_Z, MAGIC_ZEND};
use crate::names;
use crate::storage::{File, Storage, StorageExt};

use rice::BitReader;

/// Signatures per block.
pub const BLOCK_SIGS: usize = 2048;
/// Bytes of the header.
pub const HEADER_LEN: u64 = 20;
pub(crate) const BLOCK_HEADER: usize = 20;
pub(crate) const TAIL_LEN: u64 = 16;
pub(crate) const INDEX_ENTRY: u64 = 20;
/// Index entries read at a time when a segment is opened (64 KiB of footer).
const FOOTER_CHUNK: u64 = 3276;

/// One entry of the sparse index: 20 bytes in memory as in the footer.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
pub struct IndexEntry {
    /// The first signature of the block.
    pub first: u64,
    /// The block's offset in the file.
    pub offset: u64,
    /// The block's number of signatures.
    pub count: u32,
}

const _: () = assert!(std::mem::size_of::<IndexEntry>() == INDEX_ENTRY as usize);

/// What the manifest records of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentMeta {
    /// The segment's id (its file is `z-<id>.seg`).
    pub id: u64,
    /// Number of signatures.
    pub sigs: u64,
    /// Size of the file in bytes.
    pub bytes: u64,
}

/// An open segment: the file and its sparse index.
pub struct Segment {
    file: File,
    meta: SegmentMeta,
    index: Vec<IndexEntry>,
}

impl Segment {
    /// Opens a segment and checks its header, footer and tail against `meta`.
    pub fn open(storage: &dyn Storage, meta: SegmentMeta) -> Result<Segment> {
        Segment::open_reading(storage, meta, FOOTER_CHUNK)
    }

    /// [`Segment::open`], reading the footer `chunk` index entries at a time.
    fn open_reading(storage: &dyn Storage, meta: SegmentMeta, chunk: u64) -> Result<Segment> {
        let file = storage.open_exact(&names::z(meta.id), meta.bytes)?;
        let len = meta.bytes;
        if len < HEADER_LEN + TAIL_LEN + 20 {
            return Err(file.corrupt(
                0,
                Corruption::Truncated {
                    needed: HEADER_LEN + TAIL_LEN + 20,
                    available: len,
                },
            ));
        }
        check_header(&file, meta.id)?;
        let footer_offset = read_tail(&file, len)?;
        // The footer is read a chunk at a time, so that opening never holds it whole.
        let footer_len = len - TAIL_LEN - footer_offset;
        let mut head = [0u8; 16];
        file.read_exact_at(&mut head, footer_offset)?;
        let mut c = ByteReader::new(&head, file.name(), footer_offset);
        let blocks = c.u64()?;
        let sigs = c.u64()?;
        if blocks
            .checked_mul(INDEX_ENTRY)
            .and_then(|b| b.checked_add(20))
            != Some(footer_len)
        {
            return Err(file.corrupt(
                footer_offset,
                Corruption::Invalid {
                    field: "block count",
                    expected: "the count the footer's length holds",
                    found: blocks,
                },
            ));
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&head);
        let index = read_index(&file, footer_offset, blocks, chunk, &mut hasher)?;
        let at = footer_offset + 16 + blocks * INDEX_ENTRY;
        let mut stored = [0u8; 4];
        file.read_exact_at(&mut stored, at)?;
        let (stored, computed) = (u32::from_le_bytes(stored), hasher.finalize());
        if stored != computed {
            return Err(file.corrupt(at, Corruption::Checksum { stored, computed }));
        }
        let total: u64 = index.iter().map(|e| u64::from(e.count)).sum();
        for (field, expected) in [
            ("signatures in the manifest's entry", meta.sigs),
            ("signatures in the blocks", total),
        ] {
            if sigs != expected {
                return Err(file.corrupt(
                    footer_offset + 8,
                    Corruption::Mismatch {
                        field,
                        expected,
                        found: sigs,
                    },
                ));
            }
        }
        Ok(Segment { file, meta, index })
    }

    /// The segment's manifest entry.
    pub fn meta(&self) -> SegmentMeta {
        self.meta
    }

    /// The file name.
    pub fn name(&self) -> &str {
        self.file.name()
    }

    /// The sparse index.
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// The index of the block that may hold `sig`, if any.
    pub fn block_for(&self, sig: u64) -> Option<usize> {
        match self.index.partition_point(|e| e.first <= sig) {
            0 => None,
            i => Some(i - 1),
        }
    }

    /// Reads, checks and decodes block `i` into `out` (cleared first).
    pub fn read_block(&self, i: usize, out: &mut Vec<u64>) -> Result<()> {
        let e = self.index[i];
        let end = self
            .index
            .get(i + 1)
            .map_or_else(|| self.footer_offset(), |n| n.offset);
        let mut bytes = vec![0u8; (end - e.offset) as usize];
        self.file.read_exact_at(&mut bytes, e.offset)?;
        decode_block(&bytes, self.name(), e, out)
    }

    fn footer_offset(&self) -> u64 {
        self.meta.bytes - TAIL_LEN - (self.index.len() as u64 * INDEX_ENTRY + 20)
    }

    /// Whether the segment holds `sig`; reads at most one block.
    pub fn contains(&self, sig: u64) -> Result<bool> {
        let Some(b) = self.block_for(sig) else {
            return Ok(false);
        };
        if self.index[b].first == sig {
            return Ok(true);
        }
        let mut block = Vec::with_capacity(BLOCK_SIGS);
        self.read_block(b, &mut block)?;
        Ok(block.binary_search(&sig).is_ok())
    }

    /// Marks in `found` each of `sigs` (sorted, ascending) that the segment holds; reads
    /// each block at most once, however many of `sigs` fall in it.
    pub fn contains_sorted(&self, sigs: &[u64], found: &mut [bool]) -> Result<()> {
        debug_assert!(sigs.is_sorted() && sigs.len() == found.len());
        let mut block = Vec::with_capacity(BLOCK_SIGS);
        let mut i = 0;
        while i < sigs.len() {
            let Some(b) = self.block_for(sigs[i]) else {
                i += 1;
                continue;
            };
            // The signatures that fall in block `b`: below the next block's first.
            let end = match self.index.get(b + 1) {
                Some(next) => i + sigs[i..].partition_point(|&s| s < next.first),
                None => sigs.len(),
            };
            if end - i == 1 && self.index[b].first == sigs[i] {
                found[i] = true;
                i = end;
                continue;
            }
            self.read_block(b, &mut block)?;
            let mut at = 0;
            // Dense (16 places apart or fewer): galloping from the last place found;
            // otherwise a binary search of the rest.
            let dense = (end - i) * 16 >= block.len();
            for (s, f) in sigs[i..end].iter().zip(&mut found[i..end]) {
                at = if dense {
                    seek(&block, at, *s, |&x| x)
                } else {
                    at + block[at..].partition_point(|&x| x < *s)
                };
                *f |= block.get(at) == Some(s);
            }
            i = end;
        }
        Ok(())
    }

    /// Iterates every signature in order, block by block.
    pub fn iter(&self) -> SegmentIter<'_> {
        SegmentIter {
            seg: self,
            block: 0,
            buf: Vec::with_capacity(BLOCK_SIGS),
            pos: 0,
        }
    }
}

/// The first place at or after `from` in `block` (sorted by `key`) whose key is not below
/// `s`: by galloping (1, 2, 4, … places past `from`), then a binary search within the last
/// step. When the keys searched for are dense in the block (a few places apart), as for a
/// large batch against a small run, this takes a few comparisons where a binary search of
/// the rest of the block takes its logarithm, each a dependent load.
#[inline]
pub(crate) fn seek<T>(block: &[T], from: usize, s: u64, key: impl Fn(&T) -> u64) -> usize {
    if block.get(from).is_none_or(|x| key(x) >= s) {
        return from;
    }
    // The key at `lo` is below `s`.
    let (mut lo, mut step) = (from, 1);
    while let Some(x) = block.get(lo + step) {
        if key(x) >= s {
            return lo + 1 + block[lo + 1..lo + step].partition_point(|x| key(x) < s);
        }
        lo += step;
        step *= 2;
    }
    lo + 1 + block[lo + 1..].partition_point(|x| key(x) < s)
}

/// Checks the header of segment `id`.
fn check_header(file: &File, id: u64) -> Result<()> {
    let mut header = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut header, 0)?;
    let mut c = ByteReader::new(&header, file.name(), 0);
    c.magic(MAGIC_Z)?;
    c.version()?;
    let found = c.u64()?;
    c.check_crc()?;
    if found != id {
        return Err(file.corrupt(
            8,
            Corruption::Mismatch {
                field: "segment id",
                expected: id,
                found,
            },
        ));
    }
    Ok(())
}

/// Reads the tail of a segment of `len` bytes; returns the footer's offset.
fn read_tail(file: &File, len: u64) -> Result<u64> {
    let mut tail = [0u8; TAIL_LEN as usize];
    file.read_exact_at(&mut tail, len - TAIL_LEN)?;
    let mut c = ByteReader::new(&tail, file.name(), len - TAIL_LEN);
    let footer_offset = c.u64()?;
    c.check_crc()?;
    c.magic(MAGIC_ZEND)?;
    if footer_offset < HEADER_LEN || footer_offset + 20 > len - TAIL_LEN {
        return Err(file.corrupt(
            len - TAIL_LEN,
            Corruption::Invalid {
                field: "footer offset",
                expected: "between the header and the tail, with room for the footer",
                found: footer_offset,
            },
        ));
    }
    Ok(footer_offset)
}

/// Reads the `blocks` entries of the sparse index after the footer's head, `chunk` at a
/// time, into the footer's `hasher`; each entry is checked against the one before.
fn read_index(
    file: &File,
    footer_offset: u64,
    blocks: u64,
    chunk: u64,
    hasher: &mut crc32fast::Hasher,
) -> Result<Vec<IndexEntry>> {
    let mut index = Vec::with_capacity(blocks as usize);
    let mut prev: Option<(u64, u64)> = None;
    let mut bytes = vec![0u8; (blocks.min(chunk) * INDEX_ENTRY) as usize];
    let mut at = footer_offset + 16;
    while (index.len() as u64) < blocks {
        let n = (blocks - index.len() as u64).min(chunk);
        let bytes = &mut bytes[..(n * INDEX_ENTRY) as usize];
        file.read_exact_at(bytes, at)?;
        hasher.update(bytes);
        let mut c = ByteReader::new(bytes, file.name(), at);
        for _ in 0..n {
            let at = c.offset();
            let first = c.u64()?;
            let offset = c.u64()?;
            let count = c.u32()?;
            let bad_order = prev.is_some_and(|(pf, po)| first <= pf || offset <= po);
            if count == 0
                || count as usize > BLOCK_SIGS
                || offset < HEADER_LEN
                || offset >= footer_offset
                || bad_order
            {
                return Err(file.corrupt(
                    at,
                    Corruption::Invalid {
                        field: "index entry's block offset",
                        expected: "increasing offsets and first signatures, 1 to 2048 \
                                   signatures per block, blocks between header and footer",
                        found: offset,
                    },
                ));
            }
            prev = Some((first, offset));
            index.push(IndexEntry {
                first,
                offset,
                count,
            });
        }
        at += n * INDEX_ENTRY;
    }
    Ok(index)
}

/// Decodes a block (`bytes` is the whole block, described by index entry `e`).
fn decode_block(bytes: &[u8], name: &str, e: IndexEntry, out: &mut Vec<u64>) -> Result<()> {
    out.clear();
    let corrupt = |what| Error::corrupt(name, e.offset, what);
    if bytes.len() < BLOCK_HEADER + 4 {
        return Err(corrupt(Corruption::Truncated {
            needed: BLOCK_HEADER as u64 + 4,
            available: bytes.len() as u64,
        }));
    }
    let body = &bytes[..bytes.len() - 4];
    let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
    let computed = crc(body);
    if stored != computed {
        return Err(corrupt(Corruption::Checksum { stored, computed }));
    }
    let mut c = ByteReader::new(body, name, e.offset);
    let count = c.u32()?;
    let k = c.u32()?;
    let first = c.u64()?;
    let payload_len = c.u32()? as usize;
    for (field, expected, found) in [
        (
            "block count, against the index",
            u64::from(e.count),
            u64::from(count),
        ),
        ("block's first signature, against the index", e.first, first),
        (
            "block payload length",
            c.remaining() as u64,
            payload_len as u64,
        ),
    ] {
        if found != expected {
            return Err(corrupt(Corruption::Mismatch {
                field,
                expected,
                found,
            }));
        }
    }
    if k > 63 {
        return Err(corrupt(Corruption::OutOfRange {
            field: "Rice parameter",
            found: u64::from(k),
            limit: 64,
        }));
    }
    if !payload_len.is_multiple_of(8) {
        return Err(corrupt(Corruption::Invalid {
            field: "block payload length",
            expected: "whole 64-bit words",
            found: payload_len as u64,
        }));
    }
    let payload = c.take(payload_len)?;
    let mut r = BitReader::new(payload);
    out.push(first);
    let mut prev = first;
    for _ in 1..count {
        let next = r
            .read_rice(k)
            .and_then(|gap| prev.checked_add(gap)?.checked_add(1))
            .ok_or_else(|| {
                corrupt(Corruption::Invalid {
                    field: "Rice code after signature",
                    expected: "a gap that fits the payload and 64 bits",
                    found: prev,
                })
            })?;
        out.push(next);
        prev = next;
    }
    Ok(())
}

/// Iterator over a segment's signatures; yields `Err` once on a damaged block.
pub struct SegmentIter<'a> {
    seg: &'a Segment,
    block: usize,
    buf: Vec<u64>,
    pos: usize,
}

impl Iterator for SegmentIter<'_> {
    type Item = Result<u64>;
    fn next(&mut self) -> Option<Result<u64>> {
        while self.pos == self.buf.len() {
            if self.block == self.seg.index.len() {
                return None;
            }
            if let Err(e) = self.seg.read_block(self.block, &mut self.buf) {
                self.block = self.seg.index.len();
                self.buf.clear();
                self.pos = 0;
                return Some(Err(e));
            }
            self.block += 1;
            self.pos = 0;
        }
        self.pos += 1;
        Some(Ok(self.buf[self.pos - 1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    fn sigs(n: u64, seed: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (0..n)
            .map(|i| xxhash_rust::xxh3::xxh3_64_with_seed(&i.to_le_bytes(), seed))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn a_segment_round_trips_and_answers_lookups() {
        let disk = SimDisk::new();
        for n in [1u64, 2, 2047, 2048, 2049, 10_000] {
            let v = sigs(n, n);
            let mut w = SegmentWriter::create(&disk, n, n).unwrap();
            for &s in &v {
                w.push(s).unwrap();
            }
            let meta = w.finish().unwrap().meta();
            let seg = Segment::open(&disk, meta).unwrap();
            let back: Vec<u64> = seg.iter().map(|r| r.unwrap()).collect();
            assert_eq!(back, v);
            for &s in v.iter().step_by(97) {
                assert!(seg.contains(s).unwrap());
                assert!(!seg.contains(s ^ 1).unwrap() || v.binary_search(&(s ^ 1)).is_ok());
            }
        }
    }

    #[test]
    fn seek_finds_what_a_binary_search_finds() {
        for len in [0usize, 1, 2, 3, 7, 8, 9, 100] {
            // Keys 10, 20, …: each key, its neighbours and both ends searched from every place.
            let block: Vec<(u64, u32)> = (1..=len as u64).map(|i| (10 * i, i as u32)).collect();
            for from in 0..=len {
                for s in 0..=10 * len as u64 + 11 {
                    let want = from + block[from..].partition_point(|p| p.0 < s);
                    assert_eq!(seek(&block, from, s, |p| p.0), want, "{len} {from} {s}");
                }
            }
        }
    }

    #[test]
    fn sorted_lookups_equal_single_ones_dense_and_sparse() {
        let disk = SimDisk::new();
        let v = sigs(5 * BLOCK_SIGS as u64 + 9, 11);
        let mut w = SegmentWriter::create(&disk, 1, 0).unwrap();
        for &s in &v {
            w.push(s).unwrap();
        }
        let seg = Segment::open(&disk, w.finish().unwrap().meta()).unwrap();
        // Every stored signature and its successor (dense: galloping), then one in 500
        // (sparse: a binary search), then a few.
        for step in [1, 500, 4000] {
            let mut batch: Vec<u64> = v
                .iter()
                .step_by(step)
                .flat_map(|&s| [s, s.wrapping_add(1)])
                .collect();
            batch.extend([0, u64::MAX]);
            batch.sort_unstable();
            batch.dedup();
            let mut found = vec![false; batch.len()];
            seg.contains_sorted(&batch, &mut found).unwrap();
            for (s, f) in batch.iter().zip(found) {
                assert_eq!(f, v.binary_search(s).is_ok(), "step {step}, {s:#x}");
            }
        }
    }

    fn entries(seg: &Segment) -> Vec<(u64, u64, u32)> {
        seg.index()
            .iter()
            .map(|e| (e.first, e.offset, e.count))
            .collect()
    }

    #[test]
    fn the_footer_streams_through_a_small_buffer_and_is_read_in_chunks() {
        // 9 blocks: a footer of 200 bytes, written through a buffer drained every 64 bytes
        // and read 1, 2, 4 and all entries at a time.
        let v = sigs(8 * BLOCK_SIGS as u64 + 5, 3);
        let big = SimDisk::new();
        let small = SimDisk::new();
        let mut one = SegmentWriter::create(&big, 1, 0).unwrap();
        let mut two = SegmentWriter::create_draining_at(&small, 1, 0, 64).unwrap();
        for &s in &v {
            one.push(s).unwrap();
            two.push(s).unwrap();
        }
        let (one, two) = (one.finish().unwrap(), two.finish().unwrap());
        let bytes = |disk: &SimDisk| {
            let f = disk.open(&names::z(1)).unwrap();
            let mut b = vec![0u8; f.len().unwrap() as usize];
            f.read_exact_at(&mut b, 0).unwrap();
            b
        };
        assert_eq!(bytes(&big), bytes(&small));
        assert_eq!(one.meta(), two.meta());
        assert_eq!(one.index().len(), 9);
        for chunk in [1, 2, 4, FOOTER_CHUNK] {
            let read = Segment::open_reading(&small, two.meta(), chunk).unwrap();
            assert_eq!(entries(&read), entries(&two), "chunk {chunk}");
        }
        // A flipped bit in the first signature of the last block fails the footer's
        // checksum, whatever the chunk.
        let f = small.open(&names::z(1)).unwrap();
        let at = f.len().unwrap() - TAIL_LEN - 4 - INDEX_ENTRY;
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 1], at).unwrap();
        for chunk in [1, 2, FOOTER_CHUNK] {
            let err = Segment::open_reading(&small, two.meta(), chunk)
                .err()
                .unwrap();
            assert!(
                matches!(
                    err,
                    Error::Corrupt {
                        what: Corruption::Checksum { .. },
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn the_writer_refuses_signatures_out_of_order() {
        let disk = SimDisk::new();
        let mut w = SegmentWriter::create(&disk, 1, 0).unwrap();
        w.push(10).unwrap();
        let err = w.push(10).unwrap_err();
        assert!(matches!(
            err,
            Error::Corrupt {
                what: Corruption::OutOfOrder {
                    previous: 10,
                    got: 10
                },
                ..
            }
        ));
    }

    #[test]
    fn rice_blocks_are_near_the_information_bound() {
        let disk = SimDisk::new();
        let v = sigs(200_000, 7);
        let mut w = SegmentWriter::create(&disk, 1, 0).unwrap();
        for &s in &v {
            w.push(s).unwrap();
        }
        let meta = w.finish().unwrap().meta();
        let n = v.len() as f64;
        let bound = (2f64.powi(64) / n).log2() + std::f64::consts::LOG2_E;
        let bits = meta.bytes as f64 * 8.0 / n;
        assert!(
            bits < bound * 1.05,
            "{bits:.2} bits per signature, bound {bound:.2}"
        );
    }
}
