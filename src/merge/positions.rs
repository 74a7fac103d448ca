//! The new positions of a merge: for each source (a run, or the batch), the positions of
//! the signatures no input of Z holds, written to that source's region of the scratch file
//! as the merge finds them (in signature order), and read back in position order. The
//! batch's are marked in a bitmap in memory instead (one bit per record of the batch, a
//! ninety-sixth of its 12-byte slots), and so are those of each run whose bitmap fits what
//! is left of the merge's allowance: a merge of the batch and a few runs, as the last flush
//! of a run of pushes is, then creates no scratch file at all.
//!
//! The scratch file is not checksummed (it lives for one merge and is never trusted across
//! a crash); what is read back is checked instead: every position below its source's size,
//! none twice, and (by uniq) the lines printed against the sum of their check terms.

use crate::error::{Corruption, Error, Result};
use crate::storage::File;

/// Bytes of new positions buffered per source before they are written.
const SCRATCH_BUFFER: usize = 4 << 10;

/// The new positions of one source of a merge (a run, or the batch), buffered into its
/// region of the scratch file, or marked in memory.
pub(crate) struct Region {
    /// New positions.
    pub count: u64,
    /// One past the highest position written.
    end: u64,
    /// The wrapping sum of [`check_term`] over the new (signature, position) pairs: what
    /// the records emitted must add up to.
    pub sum: u64,
    kept: Kept,
}

/// Where a region's positions are kept.
enum Kept {
    /// In the scratch file from `offset` on, the last ones in `buf` until it fills.
    File {
        scratch: File,
        offset: u64,
        buf: Vec<u8>,
    },
    /// In memory: one bit per record of the source, and the first position given twice or
    /// past the records, if any, reported when the positions are read.
    Memory(Marks),
}

impl Region {
    /// An empty region starting at `offset` of the file `scratch`.
    pub(crate) fn new(scratch: File, offset: u64) -> Region {
        Region {
            count: 0,
            end: 0,
            sum: 0,
            kept: Kept::File {
                scratch,
                offset,
                buf: Vec::new(),
            },
        }
    }

    /// An empty region kept in memory, for a source whose positions are below `records`.
    pub(crate) fn in_memory(records: u64) -> Region {
        Region {
            count: 0,
            end: 0,
            sum: 0,
            kept: Kept::Memory(Marks {
                bits: vec![0; records.div_ceil(64) as usize],
                records,
                twice: None,
                past: None,
            }),
        }
    }

    /// Records that the signature `sig` at position `idx` of this region's source is new.
    pub(crate) fn add(&mut self, sig: u64, idx: u32) -> Result<()> {
        self.count += 1;
        self.end = self.end.max(u64::from(idx) + 1);
        self.sum = self.sum.wrapping_add(check_term(sig, u64::from(idx)));
        match &mut self.kept {
            Kept::Memory(m) => {
                if u64::from(idx) >= m.records {
                    // Past the source's records: a damaged run, reported with its name.
                    m.past.get_or_insert(idx);
                    return Ok(());
                }
                let (word, bit) = (idx as usize / 64, idx % 64);
                if m.bits[word] >> bit & 1 == 1 {
                    m.twice.get_or_insert(idx);
                }
                m.bits[word] |= 1 << bit;
            }
            Kept::File { buf, .. } => {
                buf.extend_from_slice(&idx.to_le_bytes());
                if buf.len() >= SCRATCH_BUFFER {
                    self.write_buffer()?;
                }
            }
        }
        Ok(())
    }

    /// Writes the positions buffered.
    fn write_buffer(&mut self) -> Result<()> {
        if let Kept::File {
            scratch,
            offset,
            buf,
        } = &mut self.kept
        {
            if !buf.is_empty() {
                let mut at = *offset + 4 * self.count - buf.len() as u64;
                if crate::planted::active(crate::planted::Bug::ScratchShifted) {
                    at += buf.len() as u64;
                }
                scratch.write_all_at(buf, at)?;
                buf.clear();
            }
        }
        Ok(())
    }

    /// Writes the positions still buffered and frees the buffer: the merge is over.
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.write_buffer()?;
        if let Kept::File { buf, .. } = &mut self.kept {
            *buf = Vec::new();
        }
        Ok(())
    }
}

/// The new positions of a region kept in memory.
struct Marks {
    /// One bit per record of the source.
    bits: Vec<u64>,
    /// The source's records.
    records: u64,
    /// The first position given twice, if any.
    twice: Option<u32>,
    /// The first position past the records, if any.
    past: Option<u32>,
}

/// A region's checksum term for the new signature `sig` at position `idx`: mixed so that
/// the sum over a region changes when lines change, and also when equal-length lines swap
/// places (a plain sum of signatures ignores order).
pub(crate) fn check_term(sig: u64, idx: u64) -> u64 {
    let mut x = sig ^ idx.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^ (x >> 33)
}

/// Positions of the scratch file read at a time.
const SCRATCH_READ: u64 = 16 << 10;

/// The new positions of one source, in increasing order.
pub(crate) enum Positions {
    /// One bit per record up to the last new one: no sort needed. Chosen when it takes no
    /// more memory than the list (at most 32 records per new position), as is usual.
    Marked(Vec<u64>),
    /// The positions, sorted: for a source with very few new records.
    Sorted(Vec<u32>),
}

impl Positions {
    /// Reads the positions of region `r` from the scratch file (or takes them from memory,
    /// for a region kept there). A position repeated can only come from a damaged run.
    pub(crate) fn read(r: &mut Region, source: &str) -> Result<Positions> {
        let duplicate = |p: u64| {
            Error::corrupt(
                source,
                0,
                Corruption::Invalid {
                    field: "record index given twice",
                    expected: "each record index once",
                    found: p,
                },
            )
        };
        let (scratch, offset) = match &mut r.kept {
            Kept::Memory(m) => {
                if let Some(p) = m.past {
                    return Err(Error::corrupt(
                        source,
                        0,
                        Corruption::OutOfRange {
                            field: "record index",
                            found: u64::from(p),
                            limit: m.records,
                        },
                    ));
                }
                if let Some(p) = m.twice {
                    return Err(duplicate(u64::from(p)));
                }
                let mut bits = std::mem::take(&mut m.bits);
                bits.truncate(r.end.div_ceil(64) as usize);
                return Ok(Positions::Marked(bits));
            }
            Kept::File {
                scratch, offset, ..
            } => (&*scratch, *offset),
        };
        let dense = r.end <= 32 * r.count;
        let mut marked = vec![
            0u64;
            if dense {
                r.end.div_ceil(64) as usize
            } else {
                0
            }
        ];
        let mut sorted = Vec::with_capacity(if dense { 0 } else { r.count as usize });
        let mut buf = vec![0u8; 4 * SCRATCH_READ.min(r.count) as usize];
        let mut done = 0u64;
        while done < r.count {
            let n = SCRATCH_READ.min(r.count - done) as usize;
            scratch.read_exact_at(&mut buf[..4 * n], offset + 4 * done)?;
            for c in buf[..4 * n].chunks_exact(4) {
                let p = u32::from_le_bytes(c.try_into().expect("4 bytes"));
                if u64::from(p) >= r.end {
                    // The scratch file is not checksummed: damaged between write and read.
                    return Err(scratch.corrupt(
                        offset + 4 * done,
                        Corruption::OutOfRange {
                            field: "new position",
                            found: u64::from(p),
                            limit: r.end,
                        },
                    ));
                }
                if dense {
                    let (word, bit) = (p as usize / 64, p % 64);
                    if marked[word] >> bit & 1 == 1 {
                        return Err(duplicate(u64::from(p)));
                    }
                    marked[word] |= 1 << bit;
                } else {
                    sorted.push(p);
                }
            }
            done += n as u64;
        }
        if dense {
            return Ok(Positions::Marked(marked));
        }
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(duplicate(u64::from(w[0])));
        }
        Ok(Positions::Sorted(sorted))
    }

    /// The positions in increasing order.
    pub(crate) fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Positions::Marked(bits) => Box::new(bits.iter().enumerate().flat_map(|(w, &word)| {
                let mut rest = word;
                std::iter::from_fn(move || {
                    (rest != 0).then(|| {
                        let bit = rest.trailing_zeros();
                        rest &= rest - 1;
                        w as u64 * 64 + u64::from(bit)
                    })
                })
            })),
            Positions::Sorted(list) => Box::new(list.iter().map(|&p| u64::from(p))),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::storage::{SimDisk, Storage};

    /// Writes `positions` as region 0 of a scratch file and reads them back.
    fn read_back(positions: &[u32]) -> Result<(bool, Vec<u64>)> {
        let end = positions
            .iter()
            .map(|&p| u64::from(p) + 1)
            .max()
            .unwrap_or(0);
        read_back_in(positions, end)
    }

    /// [`read_back`], for a source of `end` records.
    fn read_back_in(positions: &[u32], end: u64) -> Result<(bool, Vec<u64>)> {
        let disk = SimDisk::new();
        let scratch = File::new(disk.create(crate::names::SCRATCH).unwrap(), "scratch");
        let bytes: Vec<u8> = positions.iter().flat_map(|p| p.to_le_bytes()).collect();
        scratch.write_all_at(&bytes, 0).unwrap();
        let mut region = Region {
            count: positions.len() as u64,
            end,
            ..Region::new(scratch, 0)
        };
        let new = Positions::read(&mut region, "source")?;
        let marked = matches!(new, Positions::Marked(_));
        Ok((marked, new.iter().collect()))
    }

    /// The batch's region, kept in memory: positions given in any order come out in order,
    /// its check sum is the scratch region's, nothing is written to the scratch file, and a
    /// position given twice or past the records is refused.
    #[test]
    fn a_region_in_memory_gives_its_positions_in_order_and_writes_nothing() {
        let disk = SimDisk::new();
        let scratch = File::new(disk.create(crate::names::SCRATCH).unwrap(), "scratch");
        let given = [700u32, 3, 64, 63, 0, 129, 5000, 4999];
        let mut mem = Region::in_memory(5001);
        let mut file = Region::new(scratch.clone(), 0);
        for (i, &p) in given.iter().enumerate() {
            mem.add(i as u64 * 77, p).unwrap();
        }
        assert_eq!(
            scratch.len().unwrap(),
            0,
            "the region in memory wrote the scratch"
        );
        for (i, &p) in given.iter().enumerate() {
            file.add(i as u64 * 77, p).unwrap();
        }
        file.finish().unwrap();
        assert_eq!(
            (mem.count, mem.end, mem.sum),
            (file.count, file.end, file.sum)
        );
        let mut want: Vec<u64> = given.iter().map(|&p| u64::from(p)).collect();
        want.sort_unstable();
        let got: Vec<u64> = Positions::read(&mut mem, "batch").unwrap().iter().collect();
        assert_eq!(got, want);
        let from_file: Vec<u64> = Positions::read(&mut file, "batch")
            .unwrap()
            .iter()
            .collect();
        assert_eq!(from_file, want);

        let mut twice = Region::in_memory(100);
        for p in [7, 9, 7] {
            twice.add(u64::from(p), p).unwrap();
        }
        let e = Positions::read(&mut twice, "batch").err().unwrap();
        assert!(e.to_string().contains("record index given twice"), "{e}");
        let mut past = Region::in_memory(100);
        past.add(1, 100).unwrap();
        let e = Positions::read(&mut past, "r-run").err().unwrap();
        assert!(
            e.to_string().contains("record index") && e.to_string().contains("r-run"),
            "{e}"
        );
    }

    #[test]
    fn new_positions_come_out_in_order_from_the_bitmap_and_from_the_list() {
        // Dense (a bitmap): 40,000 positions among 100,000 records, in merge order.
        let dense: Vec<u32> = (0..40_000u32).map(|i| (i * 7919) % 100_000).collect();
        let (marked, got) = read_back(&dense).unwrap();
        let mut want: Vec<u64> = dense.iter().map(|&p| u64::from(p)).collect();
        want.sort_unstable();
        assert!(marked);
        assert_eq!(got, want);
        // Sparse (a sorted list): 3 positions among 4 billion records.
        let sparse = [4_000_000_000u32, 5, 70_000];
        assert_eq!(
            read_back(&sparse).unwrap(),
            (false, vec![5, 70_000, 4_000_000_000])
        );
        assert_eq!(read_back(&[]).unwrap(), (true, vec![]));
    }

    #[test]
    fn a_position_given_twice_is_corruption_either_way() {
        for positions in [vec![9u32, 3, 9, 1], vec![3_000_000_000, 2, 3_000_000_000]] {
            let e = read_back(&positions).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }

    #[test]
    fn a_position_past_the_source_is_corruption_either_way() {
        // A damaged scratch file: a bitmap of 100 records, a list among 10^6.
        for (positions, end) in [(vec![9u32, 3, 100], 100), (vec![5, 2_000_000], 1_000_000)] {
            let e = read_back_in(&positions, end).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }
}
