//! R runs: the sorted signatures of one spilled batch of S, waiting to be merged with Z.
//!
//! ```text
//! run    := header | block*
//! header := magic "CRVR" u32 | version u32 | id u64 | gen u64 | skip u64 | records u64
//!         | pairs u64 | crc32 u32                                               (52 bytes)
//! block  := count u32 | count x (sig u64 | index u32) | crc32 u32
//! ```
//!
//! A run covers records `skip..skip + records` of A generation `gen`. Each pair is a
//! signature of the batch and the index (relative to `skip`) of its first occurrence in the
//! batch; signatures are strictly increasing through the whole file. Every block holds
//! [`RUN_BLOCK`] pairs except the last, so block `i` starts at a computed offset and a lookup
//! is a binary search over blocks, without an index in memory.

use crate::buffer::Slot;
use crate::error::{Corruption, Result};
use crate::format::{crc, seal, ByteReader, PutLe, MAGIC_R, VERSION};
use crate::names;
use crate::segment::seek;
use crate::storage::{File, Storage, StorageExt};

/// Pairs per block.
pub const RUN_BLOCK: usize = 1024;
/// Bytes of the header.
pub const HEADER_LEN: u64 = 52;
/// Bytes of a pair: a signature and an index.
pub(crate) const PAIR: usize = 12;
pub(crate) const FULL_BLOCK: u64 = (8 + PAIR * RUN_BLOCK) as u64;
const WRITE_BUFFER: usize = 1 << 20;

/// What the manifest records of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunMeta {
    /// The run's id (its file is `r-<id>.run`).
    pub id: u64,
    /// The A generation the run's records are in.
    pub gen: u64,
    /// The first record of the generation the run covers.
    pub skip: u64,
    /// Records of the generation the run covers (pushes, duplicates included).
    pub records: u64,
    /// Distinct signatures in the run.
    pub pairs: u64,
}

impl RunMeta {
    /// The length of the run's file.
    pub fn bytes(&self) -> u64 {
        let full = self.pairs / RUN_BLOCK as u64;
        let rest = self.pairs % RUN_BLOCK as u64;
        // Saturating: a damaged manifest may claim any count; the length check then fails.
        let last = if rest > 0 { 8 + rest * PAIR as u64 } else { 0 };
        HEADER_LEN
            .saturating_add(full.saturating_mul(FULL_BLOCK))
            .saturating_add(last)
    }

    fn blocks(&self) -> u64 {
        self.pairs.div_ceil(RUN_BLOCK as u64)
    }
}

fn header(meta: &RunMeta) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN as usize);
    b.put_u32(MAGIC_R);
    b.put_u32(VERSION);
    for v in [meta.id, meta.gen, meta.skip, meta.records, meta.pairs] {
        b.put_u64(v);
    }
    seal(&mut b);
    b
}

/// Writes the run `meta` from `pairs` (strictly increasing signatures) and fsyncs it.
pub fn write(storage: &dyn Storage, meta: RunMeta, pairs: &[Slot]) -> Result<()> {
    debug_assert_eq!(pairs.len() as u64, meta.pairs);
    let file = storage.create_file(&names::r(meta.id))?;
    let mut buf = header(&meta);
    let mut written = 0u64;
    for block in pairs.chunks(RUN_BLOCK) {
        let start = buf.len();
        buf.put_u32(block.len() as u32);
        for p in block {
            buf.put_u64(p.sig);
            buf.put_u32(p.idx);
        }
        let c = crc(&buf[start..]);
        buf.put_u32(c);
        if buf.len() >= WRITE_BUFFER {
            file.write_all_at(&buf, written)?;
            written += buf.len() as u64;
            buf.clear();
        }
    }
    if !buf.is_empty() {
        file.write_all_at(&buf, written)?;
    }
    file.sync()
}

/// An open run.
pub struct Run {
    file: File,
    meta: RunMeta,
}

impl Run {
    /// Opens a run and checks its header and length against `meta`.
    pub fn open(storage: &dyn Storage, meta: RunMeta) -> Result<Run> {
        let file = storage.open_exact(&names::r(meta.id), meta.bytes())?;
        let name = file.name();
        let mut h = vec![0u8; HEADER_LEN as usize];
        file.read_exact_at(&mut h, 0)?;
        let mut c = ByteReader::new(&h, name, 0);
        c.magic(MAGIC_R)?;
        c.version()?;
        let mut fields = [0u64; 5];
        for f in &mut fields {
            *f = c.u64()?;
        }
        // The header's own checksum first: a damaged field is damage of the header (at the
        // checksum's offset), not a disagreement with the manifest.
        c.check_crc()?;
        for (k, (field, want)) in [
            ("run id", meta.id),
            ("run generation", meta.gen),
            ("run skip", meta.skip),
            ("run records", meta.records),
            ("run pairs", meta.pairs),
        ]
        .into_iter()
        .enumerate()
        {
            if fields[k] != want {
                return Err(file.corrupt(
                    8 + 8 * k as u64,
                    Corruption::Mismatch {
                        field,
                        expected: want,
                        found: fields[k],
                    },
                ));
            }
        }
        Ok(Run { file, meta })
    }

    /// The run's manifest entry.
    pub fn meta(&self) -> RunMeta {
        self.meta
    }

    /// The file name.
    pub fn name(&self) -> &str {
        self.file.name()
    }

    /// Reads, checks and decodes block `i` into `out` (cleared first).
    pub fn read_block(&self, i: u64, out: &mut Vec<(u64, u32)>) -> Result<()> {
        out.clear();
        let offset = HEADER_LEN + i * FULL_BLOCK;
        let count =
            if i + 1 == self.meta.blocks() && !self.meta.pairs.is_multiple_of(RUN_BLOCK as u64) {
                (self.meta.pairs % RUN_BLOCK as u64) as usize
            } else {
                RUN_BLOCK
            };
        let mut bytes = vec![0u8; 8 + count * PAIR];
        self.file.read_exact_at(&mut bytes, offset)?;
        let body = bytes.len() - 4;
        let stored = u32::from_le_bytes(bytes[body..].try_into().expect("4 bytes"));
        let computed = crc(&bytes[..body]);
        if stored != computed {
            return Err(self
                .file
                .corrupt(offset, Corruption::Checksum { stored, computed }));
        }
        let mut c = ByteReader::new(&bytes[..body], self.name(), offset);
        let found = c.u32()?;
        if found as usize != count {
            return Err(self.file.corrupt(
                offset,
                Corruption::Mismatch {
                    field: "run block count",
                    expected: count as u64,
                    found: found as u64,
                },
            ));
        }
        for _ in 0..count {
            let sig = c.u64()?;
            let idx = c.u32()?;
            out.push((sig, idx));
        }
        let mut prev: Option<u64> = None;
        for (k, &(sig, idx)) in out.iter().enumerate() {
            if prev.is_some_and(|p| sig <= p) {
                return Err(self.file.corrupt(
                    offset + 4 + (k * PAIR) as u64,
                    Corruption::OutOfOrder {
                        previous: prev.unwrap_or(0),
                        got: sig,
                    },
                ));
            }
            if u64::from(idx) >= self.meta.records {
                return Err(self.file.corrupt(
                    offset + 12 + (k * PAIR) as u64,
                    Corruption::OutOfRange {
                        field: "run record index",
                        found: u64::from(idx),
                        limit: self.meta.records,
                    },
                ));
            }
            prev = Some(sig);
        }
        Ok(())
    }

    /// Whether the run holds `sig`: a binary search over blocks.
    pub fn contains(&self, sig: u64) -> Result<bool> {
        let (mut lo, mut hi) = (0u64, self.meta.blocks());
        let mut block = Vec::with_capacity(RUN_BLOCK);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            self.read_block(mid, &mut block)?;
            let (first, last) = (block[0].0, block[block.len() - 1].0);
            if sig < first {
                hi = mid;
            } else if sig > last {
                lo = mid + 1;
            } else {
                return Ok(block.binary_search_by_key(&sig, |p| p.0).is_ok());
            }
        }
        Ok(false)
    }

    /// Marks in `found` each of `sigs` (sorted, ascending) that the run holds: a binary
    /// search of blocks for each when they are few, one pass over the run's blocks when a
    /// pass reads fewer blocks than the searches would.
    pub fn contains_sorted(&self, sigs: &[u64], found: &mut [bool]) -> Result<()> {
        debug_assert!(sigs.is_sorted() && sigs.len() == found.len());
        let blocks = self.meta.blocks();
        let per_search = u64::from(64 - blocks.leading_zeros());
        if (sigs.len() as u64).saturating_mul(per_search) < blocks {
            for (s, f) in sigs.iter().zip(found.iter_mut()) {
                *f |= self.contains(*s)?;
            }
            return Ok(());
        }
        let mut block = Vec::with_capacity(RUN_BLOCK);
        let mut i = 0;
        for b in 0..blocks {
            if i == sigs.len() {
                break;
            }
            self.read_block(b, &mut block)?;
            let Some(&(last, _)) = block.last() else {
                continue;
            };
            // The run is read block by block only when the signatures are many beside its
            // blocks: galloping from the last place found.
            let mut at = 0;
            while i < sigs.len() && sigs[i] <= last {
                at = seek(&block, at, sigs[i], |p| p.0);
                found[i] |= block.get(at).is_some_and(|p| p.0 == sigs[i]);
                i += 1;
            }
        }
        Ok(())
    }

    /// Iterates the pairs in order; yields `Err` once on a damaged block, and checks that
    /// signatures increase across blocks.
    pub fn iter(&self) -> RunIter<'_> {
        RunIter {
            run: self,
            block: 0,
            buf: Vec::with_capacity(RUN_BLOCK),
            pos: 0,
            last: None,
            failed: false,
        }
    }
}

/// Iterator over a run's pairs.
pub struct RunIter<'a> {
    run: &'a Run,
    block: u64,
    buf: Vec<(u64, u32)>,
    pos: usize,
    last: Option<u64>,
    failed: bool,
}

impl Iterator for RunIter<'_> {
    type Item = Result<(u64, u32)>;
    fn next(&mut self) -> Option<Result<(u64, u32)>> {
        if self.failed {
            return None;
        }
        if self.pos == self.buf.len() {
            if self.block == self.run.meta.blocks() {
                return None;
            }
            if let Err(e) = self.run.read_block(self.block, &mut self.buf) {
                self.failed = true;
                return Some(Err(e));
            }
            let first = self.buf[0].0;
            if let Some(prev) = self.last.filter(|&p| first <= p) {
                self.failed = true;
                return Some(Err(self.run.file.corrupt(
                    HEADER_LEN + self.block * FULL_BLOCK,
                    Corruption::OutOfOrder {
                        previous: prev,
                        got: first,
                    },
                )));
            }
            self.block += 1;
            self.pos = 0;
        }
        let p = self.buf[self.pos];
        self.pos += 1;
        self.last = Some(p.0);
        Some(Ok(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimDisk;
    use crate::{Corruption, Error};

    fn slots(pairs: &[(u64, u32)]) -> Vec<Slot> {
        pairs.iter().map(|&(sig, idx)| Slot { sig, idx }).collect()
    }

    fn sample(n: usize) -> Vec<(u64, u32)> {
        (0..n as u64)
            .map(|i| (i * 0x9e37_79b9 + 5, (i * 7 % n as u64) as u32))
            .collect()
    }

    /// A flip in a run's header is reported where it is found: the magic and the version
    /// at theirs, any other byte by the header's checksum (at offset 48); an intact header
    /// that disagrees with the manifest at the field that does. (A field's mismatch read
    /// the checksum at the next field: a flip of byte 8 was reported at offset 16, the
    /// "stored" checksum there being the generation.)
    #[test]
    fn a_flip_in_a_runs_header_is_reported_where_it_is() {
        let pairs = sample(10);
        let meta = RunMeta {
            id: 3,
            gen: 4,
            skip: 2,
            records: 13,
            pairs: 10,
        };
        for byte in 0..HEADER_LEN {
            let disk = SimDisk::new();
            write(&disk, meta, &slots(&pairs)).unwrap();
            disk.flip_bit(&names::r(meta.id), byte * 8 + 3);
            let e = Run::open(&disk, meta).map(|_| ()).unwrap_err();
            let Error::Corrupt { offset, what, .. } = &e else {
                panic!("byte {byte}: {e}");
            };
            match byte {
                0..4 => assert_eq!(*offset, 0, "byte {byte}: {e}"),
                4..8 => assert_eq!(*offset, 4, "byte {byte}: {e}"),
                _ => {
                    assert_eq!(*offset, 48, "byte {byte}: {e}");
                    assert!(
                        matches!(what, Corruption::Checksum { .. }),
                        "byte {byte}: {e}"
                    );
                }
            }
        }
        let disk = SimDisk::new();
        write(&disk, meta, &slots(&pairs)).unwrap();
        let other = RunMeta { skip: 5, ..meta };
        let e = Run::open(&disk, other).map(|_| ()).unwrap_err();
        let Error::Corrupt { offset, what, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!(*offset, 24, "{e}");
        assert!(
            matches!(
                what,
                Corruption::Mismatch {
                    field: "run skip",
                    expected: 5,
                    found: 2
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn runs_round_trip_and_answer_lookups() {
        let disk = SimDisk::new();
        for n in [0usize, 1, RUN_BLOCK - 1, RUN_BLOCK, 3 * RUN_BLOCK + 17] {
            let pairs = sample(n);
            let meta = RunMeta {
                id: n as u64 + 1,
                gen: 4,
                skip: 2,
                records: n as u64 + 3,
                pairs: n as u64,
            };
            write(&disk, meta, &slots(&pairs)).unwrap();
            let run = Run::open(&disk, meta).unwrap();
            let back: Vec<_> = run.iter().collect::<Result<_>>().unwrap();
            assert_eq!(back, pairs);
            for &(s, _) in pairs.iter().step_by(97) {
                assert!(run.contains(s).unwrap());
                assert!(!run.contains(s + 1).unwrap());
            }
            assert!(!run.contains(0).unwrap() || pairs.first().is_some_and(|p| p.0 == 0));
            // Sorted lookups, each signature and the one after it: as single ones.
            let mut batch: Vec<u64> = pairs.iter().flat_map(|p| [p.0, p.0 + 1]).collect();
            batch.extend([0, u64::MAX]);
            batch.sort_unstable();
            batch.dedup();
            for every in [1, 3, 200] {
                let some: Vec<u64> = batch.iter().copied().step_by(every).collect();
                let mut found = vec![false; some.len()];
                run.contains_sorted(&some, &mut found).unwrap();
                for (&s, f) in some.iter().zip(found) {
                    assert_eq!(f, run.contains(s).unwrap(), "{n} pairs, {s}");
                }
            }
        }
    }

    #[test]
    fn any_flipped_bit_of_a_run_is_caught() {
        let disk = SimDisk::new();
        let pairs = sample(RUN_BLOCK + 10);
        let meta = RunMeta {
            id: 1,
            gen: 0,
            skip: 0,
            records: pairs.len() as u64,
            pairs: pairs.len() as u64,
        };
        write(&disk, meta, &slots(&pairs)).unwrap();
        let good = disk.content(&names::r(1)).unwrap();
        for bit in (0..good.len() * 8).step_by(13) {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            disk.set_content(&names::r(1), bad);
            let r = Run::open(&disk, meta).and_then(|r| r.iter().collect::<Result<Vec<_>>>());
            assert!(r.unwrap_err().is_corruption(), "bit {bit}");
        }
    }
}
