//! Q runs: immutable files of queued records, grouped by queue, each group in the order the
//! records entered the frontier.
//!
//! ```text
//! q-run     := header | frame* | directory* | index | tail
//! header    := magic "CRVQ" u32 | version u32 | id u64 | crc32 u32                (20 bytes)
//! frame     := a frame of `src/frames/` tagged with the run's id, whose records are
//!              seq u64 | record (`src/record.rs`), all of one queue, seq increasing
//! directory := count u32 | count x (queue u64 | crawl u32 | first_seq u64 | offset u64
//!              | records u32)
//!              | crc32 u32                          (at most DIR_BLOCK entries, queue increasing)
//! index     := blocks u64 | blocks x (first_queue u64 | offset u64 | count u32) | crc32 u32
//! tail      := index_offset u64 | crc32 u32 (of index_offset) | magic "QEND" u32   (16 bytes)
//! ```
//!
//! A queue's group is the frames from its directory entry's `offset` holding its `records`
//! records. The groups follow each other in the order of their queue ids, which are hashes of
//! the queues' keys: the records of a range of ids are one stretch of every run, which is
//! what a move of keys to another node reads. The index (the first queue of each directory
//! block) stays in memory; a lookup reads one directory block.

use std::sync::Arc;

use crate::error::{Corruption, Error, Result};
use crate::format::{crc, seal, ByteReader, PutLe, MAGIC_Q, MAGIC_QEND, VERSION};
use crate::frames::{Frame, FrameError, FrameReader, FrameWriter};
use crate::names;
use crate::storage::{File, Storage, StorageExt};

/// Bytes of the header.
pub(crate) const HEADER_LEN: u64 = 20;
/// Bytes of the tail.
pub(crate) const TAIL_LEN: u64 = 16;
/// Entries per directory block.
const DIR_BLOCK: usize = 128;
/// Bytes of a directory entry.
pub(crate) const DIR_ENTRY: usize = 32;
/// Bytes of the largest directory block.
const DIR_BLOCK_MAX: usize = 4 + DIR_BLOCK * DIR_ENTRY + 4;
/// Bytes of an index entry.
pub(crate) const INDEX_ENTRY: u64 = 20;
/// A frame is written once its records reach this size.
const FRAME_TARGET: usize = 2 << 10;

/// A run's frames are written in pieces of this many bytes: one write per frame of 2 KiB
/// made the flush of 10^7 URLs into 10^5 queues take 5.3-5.8 s instead of 4.3-4.4 s.
const GATHER_BYTES: usize = 256 << 10;

/// One queue's group in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    /// The queue's id.
    pub queue: u64,
    /// The queue's crawl.
    pub crawl: u32,
    /// The seq of its first record.
    pub first_seq: u64,
    /// The offset of its first frame.
    pub offset: u64,
    /// Its records.
    pub records: u32,
}

/// An entry of the in-memory index: the first queue of a directory block.
#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    first: u64,
    offset: u64,
    count: u32,
}

/// Writes a run from records given in (queue, seq) order.
pub(crate) struct RunWriter {
    out: FrameWriter,
    id: u64,
    groups: Vec<Group>,
    last: Option<(u64, u64)>,
    buf: Vec<u8>,
}

impl RunWriter {
    /// Creates run `id`.
    pub(crate) fn create(storage: &dyn Storage, id: u64) -> Result<RunWriter> {
        let file = storage.create_file(&names::q(id))?;
        let mut h = Vec::with_capacity(HEADER_LEN as usize);
        h.put_u32(MAGIC_Q);
        h.put_u32(VERSION);
        h.put_u64(id);
        seal(&mut h);
        file.write_all_at(&h, 0)?;
        let mut out = FrameWriter::new(file, HEADER_LEN, 0, id, 0).coded_front(true);
        out.set_frame_target(FRAME_TARGET);
        let out = out.gathered(GATHER_BYTES);
        Ok(RunWriter {
            out,
            id,
            groups: Vec::new(),
            last: None,
            buf: Vec::new(),
        })
    }

    /// Appends the record `record` of queue `queue`, numbered `seq`; (queue, seq) must
    /// increase.
    pub(crate) fn push(&mut self, queue: u64, crawl: u32, seq: u64, record: &[u8]) -> Result<()> {
        if let Some((q, s)) = self.last {
            if (queue, seq) <= (q, s) {
                return Err(self.out.file().corrupt(
                    self.out.end(),
                    Corruption::Invalid {
                        field: "queue of a run's record",
                        expected: "queues and seqs in increasing order",
                        found: queue,
                    },
                ));
            }
        }
        if self.last.map(|(q, _)| q) != Some(queue) {
            // A frame holds one queue.
            self.out.write_frame()?;
            self.groups.push(Group {
                queue,
                crawl,
                first_seq: seq,
                offset: self.out.end(),
                records: 0,
            });
        }
        self.last = Some((queue, seq));
        self.buf.clear();
        self.buf.put_u64(seq);
        self.out.append_tentative_parts(&self.buf, record);
        self.out.frame_if_full()?;
        let g = self.groups.last_mut().expect("a group");
        g.records += 1;
        Ok(())
    }

    /// Writes the directory, the index and the tail, and makes the file durable (its
    /// directory entry is not synced here); returns the run, open.
    pub(crate) fn finish(mut self) -> Result<Run> {
        self.out.write_frame()?;
        self.out.drain_gathered()?;
        let file = self.out.file().clone();
        let mut at = self.out.end();
        let mut bytes = Vec::with_capacity(64 << 10);
        let mut index = Vec::with_capacity(self.groups.len().div_ceil(DIR_BLOCK));
        for block in self.groups.chunks(DIR_BLOCK) {
            let start = bytes.len();
            index.push(IndexEntry {
                first: block[0].queue,
                offset: at + start as u64,
                count: block.len() as u32,
            });
            bytes.put_u32(block.len() as u32);
            for g in block {
                bytes.put_u64(g.queue);
                bytes.put_u32(g.crawl);
                bytes.put_u64(g.first_seq);
                bytes.put_u64(g.offset);
                bytes.put_u32(g.records);
            }
            let c = crc(&bytes[start..]);
            bytes.put_u32(c);
            if bytes.len() >= 1 << 20 {
                file.write_all_at(&bytes, at)?;
                at += bytes.len() as u64;
                bytes.clear();
            }
        }
        let index_offset = at + bytes.len() as u64;
        let start = bytes.len();
        bytes.put_u64(index.len() as u64);
        for e in &index {
            bytes.put_u64(e.first);
            bytes.put_u64(e.offset);
            bytes.put_u32(e.count);
        }
        let c = crc(&bytes[start..]);
        bytes.put_u32(c);
        let tail = bytes.len();
        bytes.put_u64(index_offset);
        let c = crc(&bytes[tail..]);
        bytes.put_u32(c);
        bytes.put_u32(MAGIC_QEND);
        file.write_all_at(&bytes, at)?;
        file.sync()?;
        Ok(Run {
            file,
            id: self.id,
            frames_end: index.first().map_or(index_offset, |e| e.offset),
            index: Arc::new(index),
        })
    }
}

/// An open run.
#[derive(Clone)]
pub(crate) struct Run {
    file: File,
    id: u64,
    /// Where the frames end (the first directory block).
    frames_end: u64,
    index: Arc<Vec<IndexEntry>>,
}

impl Run {
    /// Opens run `id` and checks its header, tail and index.
    pub(crate) fn open(storage: &dyn Storage, id: u64) -> Result<Run> {
        let file = storage.open_immutable_file(&names::q(id))?;
        let len = file.len()?;
        if len < HEADER_LEN + TAIL_LEN + 12 {
            return Err(file.corrupt(
                0,
                Corruption::Truncated {
                    needed: HEADER_LEN + TAIL_LEN + 12,
                    available: len,
                },
            ));
        }
        let mut h = [0u8; HEADER_LEN as usize];
        file.read_exact_at(&mut h, 0)?;
        let mut c = ByteReader::new(&h, file.name(), 0);
        c.magic(MAGIC_Q)?;
        c.version()?;
        let found = c.u64()?;
        c.check_crc()?;
        if found != id {
            return Err(file.corrupt(
                8,
                Corruption::Mismatch {
                    field: "run id",
                    expected: id,
                    found,
                },
            ));
        }
        let mut t = [0u8; TAIL_LEN as usize];
        file.read_exact_at(&mut t, len - TAIL_LEN)?;
        let mut c = ByteReader::new(&t, file.name(), len - TAIL_LEN);
        let index_offset = c.u64()?;
        c.check_crc()?;
        c.magic(MAGIC_QEND)?;
        if index_offset < HEADER_LEN || index_offset + 12 > len - TAIL_LEN {
            return Err(file.corrupt(
                len - TAIL_LEN,
                Corruption::Invalid {
                    field: "index offset",
                    expected: "between the header and the tail",
                    found: index_offset,
                },
            ));
        }
        let mut bytes = vec![0u8; (len - TAIL_LEN - index_offset) as usize];
        file.read_exact_at(&mut bytes, index_offset)?;
        let mut c = ByteReader::new(&bytes, file.name(), index_offset);
        let blocks = c.u64()?;
        if blocks
            .checked_mul(INDEX_ENTRY)
            .and_then(|b| b.checked_add(12))
            != Some(bytes.len() as u64)
        {
            return Err(file.corrupt(
                index_offset,
                Corruption::Invalid {
                    field: "directory blocks",
                    expected: "the count the index's length holds",
                    found: blocks,
                },
            ));
        }
        let mut index = Vec::with_capacity(blocks as usize);
        let mut prev: Option<(u64, u64)> = None;
        for _ in 0..blocks {
            let at = c.offset();
            let e = IndexEntry {
                first: c.u64()?,
                offset: c.u64()?,
                count: c.u32()?,
            };
            let bad = e.count == 0
                || e.count as usize > DIR_BLOCK
                || e.offset < HEADER_LEN
                || e.offset >= index_offset
                || prev.is_some_and(|(q, o)| e.first <= q || e.offset <= o);
            if bad {
                return Err(file.corrupt(
                    at,
                    Corruption::Invalid {
                        field: "index entry's directory block",
                        expected: "increasing queues and offsets, 1 to 128 entries",
                        found: e.offset,
                    },
                ));
            }
            prev = Some((e.first, e.offset));
            index.push(e);
        }
        c.check_crc()?;
        // Each directory block ends before the next one (the last one before the index).
        for (k, e) in index.iter().enumerate() {
            let next = index.get(k + 1).map_or(index_offset, |n| n.offset);
            let end = e.offset + 8 + u64::from(e.count) * DIR_ENTRY as u64;
            if end > next {
                return Err(file.corrupt(
                    e.offset,
                    Corruption::OutOfRange {
                        field: "end of a directory block",
                        found: end,
                        limit: next + 1,
                    },
                ));
            }
        }
        Ok(Run {
            file,
            id,
            frames_end: index.first().map_or(index_offset, |e| e.offset),
            index: Arc::new(index),
        })
    }

    /// The run read by a scan of its groups in queue order ([`File::scanning`]): what a
    /// compaction reads, each byte once, which through the mapping would fault in every
    /// page and give the pages back again and again.
    pub(crate) fn scanning(&self) -> Run {
        Run {
            file: self.file.scanning(),
            ..self.clone()
        }
    }

    /// The run's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Reads directory block `i` into `bytes` (at least [`DIR_BLOCK_MAX`] long), checks its
    /// checksum and its count, and returns its entries' bytes.
    fn read_block<'b>(&self, i: usize, bytes: &'b mut [u8]) -> Result<&'b [u8]> {
        let e = self.index[i];
        let size = 4 + e.count as usize * DIR_ENTRY + 4;
        let bytes = bytes.get_mut(..size).ok_or_else(|| {
            self.file.corrupt(
                e.offset,
                Corruption::OutOfRange {
                    field: "directory block entries",
                    found: u64::from(e.count),
                    limit: DIR_BLOCK as u64,
                },
            )
        })?;
        self.file.read_exact_at(bytes, e.offset)?;
        let body = size - 4;
        let stored = u32::from_le_bytes(bytes[body..].try_into().expect("4 bytes"));
        let computed = crc(&bytes[..body]);
        if stored != computed {
            return Err(self
                .file
                .corrupt(e.offset, Corruption::Checksum { stored, computed }));
        }
        let count = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        if count != e.count {
            return Err(self.file.corrupt(
                e.offset,
                Corruption::Mismatch {
                    field: "directory block entries, against the index",
                    expected: u64::from(e.count),
                    found: u64::from(count),
                },
            ));
        }
        Ok(&bytes[4..body])
    }

    /// Entry `k` of directory block `i` (its entries' bytes `entries`), checked: the block's
    /// first queue is the index's, queues increase, a group has records among the frames.
    fn dir_entry(&self, i: usize, entries: &[u8], k: usize) -> Result<Group> {
        let e = self.index[i];
        let at = e.offset + 4 + (k * DIR_ENTRY) as u64;
        let mut c = ByteReader::new(&entries[k * DIR_ENTRY..][..DIR_ENTRY], self.file.name(), at);
        let g = Group {
            queue: c.u64()?,
            crawl: c.u32()?,
            first_seq: c.u64()?,
            offset: c.u64()?,
            records: c.u32()?,
        };
        let queue_at = |k: usize| {
            u64::from_le_bytes(entries[k * DIR_ENTRY..][..8].try_into().expect("8 bytes"))
        };
        let first_ok = k > 0 || g.queue == e.first;
        let order_ok = k == 0 || queue_at(k - 1) < g.queue;
        if !first_ok
            || !order_ok
            || g.records == 0
            || g.offset < HEADER_LEN
            || g.offset >= self.frames_end
        {
            return Err(self.file.corrupt(
                at,
                Corruption::Invalid {
                    field: "directory entry",
                    expected: "increasing queues, groups of records among the frames",
                    found: g.queue,
                },
            ));
        }
        Ok(g)
    }

    /// Reads directory block `i`, every entry checked.
    fn directory_block(&self, i: usize) -> Result<Vec<Group>> {
        let mut buf = [0u8; DIR_BLOCK_MAX];
        let entries = self.read_block(i, &mut buf)?;
        (0..entries.len() / DIR_ENTRY)
            .map(|k| self.dir_entry(i, entries, k))
            .collect()
    }

    /// The group of `queue`, if the run holds one. Reads one directory block (on the
    /// stack) and checks the entry found and its order against its neighbours: a lookup at
    /// each queue's first hand-out from a run costs no more than that.
    pub(crate) fn group(&self, queue: u64) -> Result<Option<Group>> {
        let i = match self.index.partition_point(|e| e.first <= queue) {
            0 => return Ok(None),
            i => i - 1,
        };
        let mut buf = [0u8; DIR_BLOCK_MAX];
        let entries = self.read_block(i, &mut buf)?;
        let n = entries.len() / DIR_ENTRY;
        let queue_at = |k: usize| {
            u64::from_le_bytes(entries[k * DIR_ENTRY..][..8].try_into().expect("8 bytes"))
        };
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match queue_at(mid).cmp(&queue) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let g = self.dir_entry(i, entries, mid)?;
                    if mid + 1 < n {
                        // Its successor's order too: a block out of order is damage, not
                        // a queue that is missing.
                        self.dir_entry(i, entries, mid + 1)?;
                    }
                    return Ok(Some(g));
                }
            }
        }
        Ok(None)
    }

    /// Every group, in queue order.
    pub(crate) fn groups(&self) -> impl Iterator<Item = Result<Group>> + '_ {
        (0..self.index.len()).flat_map(move |i| match self.directory_block(i) {
            Ok(groups) => groups.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })
    }

    /// Reads the frame at `offset` (a frame of a group).
    pub(crate) fn frame(&self, offset: u64) -> Result<Frame> {
        self.frame_with(offset, Vec::new())
    }

    /// [`Run::frame`] into `spare`, the payload of an earlier frame given back.
    pub(crate) fn frame_with(&self, offset: u64, spare: Vec<u8>) -> Result<Frame> {
        if offset < HEADER_LEN || offset >= self.frames_end {
            return Err(self.file.corrupt(
                offset,
                Corruption::OutOfRange {
                    field: "offset of a group's frame",
                    found: offset,
                    limit: self.frames_end,
                },
            ));
        }
        let reader = FrameReader::new(&self.file, self.frames_end, u64::MAX, self.id);
        match reader.frame_with(offset, spare) {
            Ok(f) if f.end.is_none() && f.count > 0 => Ok(f),
            Ok(_) | Err(FrameError::End) => Err(self.file.corrupt(
                offset,
                Corruption::Invalid {
                    field: "frame of a group",
                    expected: "a frame of records of this run",
                    found: offset,
                },
            )),
            Err(FrameError::Io(Error::Io { source, .. }))
                if source.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                Err(self.file.corrupt(
                    offset,
                    Corruption::Invalid {
                        field: "frame of a group",
                        expected: "a frame within the run's frames",
                        found: offset,
                    },
                ))
            }
            Err(FrameError::Io(e)) => Err(e),
            Err(FrameError::Invalid(what)) => Err(self.file.corrupt(offset, what)),
        }
    }

    /// Calls `f` with each record of group `g` in order: its seq, the record, and the offset
    /// of its frame; `f` returns false to stop. When every record was visited, the frames
    /// must hold exactly the group's count (damage otherwise).
    pub(crate) fn walk_group(
        &self,
        g: &Group,
        mut f: impl FnMut(u64, &[u8], u64) -> Result<bool>,
    ) -> Result<()> {
        let (mut offset, mut got) = (g.offset, 0u32);
        while got < g.records {
            let frame = self.frame(offset)?;
            for r in frame.records() {
                let (seq, rec) = split(&self.file, offset, r)?;
                if !f(seq, rec, offset)? {
                    return Ok(());
                }
            }
            got = got.saturating_add(frame.count);
            offset += frame.size();
        }
        if got != g.records {
            return Err(self.file.corrupt(
                g.offset,
                Corruption::Mismatch {
                    field: "records of a group",
                    expected: u64::from(g.records),
                    found: u64::from(got),
                },
            ));
        }
        Ok(())
    }

    /// The file, for errors.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

/// Splits a record of a run's frame into its seq and the record.
pub(crate) fn split<'a>(file: &File, offset: u64, bytes: &'a [u8]) -> Result<(u64, &'a [u8])> {
    if bytes.len() < 9 {
        return Err(file.corrupt(
            offset,
            Corruption::Truncated {
                needed: 9,
                available: bytes.len() as u64,
            },
        ));
    }
    let (seq, record) = bytes.split_at(8);
    Ok((u64::from_le_bytes(seq.try_into().expect("8 bytes")), record))
}

/// Checks that `record`, of the group of queue `queue` (crawl `crawl`) in the frame at
/// `offset`, decodes and is of that queue: a record under another queue's directory entry
/// is damage.
pub(crate) fn check_record(
    file: &File,
    offset: u64,
    record: &[u8],
    queue: u64,
    crawl: u32,
) -> Result<()> {
    let r = crate::record::decode(record).map_err(|what| file.corrupt(offset, what))?;
    let key = r.key.unwrap_or_else(|| super::key::default_key(r.url));
    let found = super::key::queue_id(r.crawl, key);
    if r.crawl != crawl {
        return Err(file.corrupt(
            offset,
            Corruption::Mismatch {
                field: "crawl of a record",
                expected: crawl.into(),
                found: r.crawl.into(),
            },
        ));
    }
    if found != queue {
        return Err(file.corrupt(
            offset,
            Corruption::Mismatch {
                field: "queue of a record",
                expected: queue,
                found,
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    /// Writes a run of `queues` queues with `per` records each; returns it and the records.
    fn sample(disk: &SimDisk, queues: u64, per: u64) -> (Run, Vec<(u64, u64, Vec<u8>)>) {
        let mut all = Vec::new();
        for q in 0..queues {
            for i in 0..per {
                let queue = q.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let seq = i * queues + q;
                let record = format!("\0http://h{q}/{i}/{}", "x".repeat((i % 50) as usize));
                all.push((queue, seq, record.into_bytes()));
            }
        }
        all.sort();
        let mut w = RunWriter::create(disk, 9).unwrap();
        for (q, s, r) in &all {
            w.push(*q, (*q % 3) as u32, *s, r).unwrap();
        }
        (w.finish().unwrap(), all)
    }

    fn read_group(run: &Run, g: &Group) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        run.walk_group(g, |seq, rec, _| {
            out.push((seq, rec.to_vec()));
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn a_run_round_trips_and_finds_every_group() {
        let disk = SimDisk::new();
        for (queues, per) in [(1, 1), (3, 700), (1000, 3), (300, 1)] {
            let (run, all) = sample(&disk, queues, per);
            let reopened = Run::open(&disk, 9).unwrap();
            let groups: Vec<Group> = reopened.groups().collect::<Result<_>>().unwrap();
            assert_eq!(groups.len() as u64, queues);
            let mut got = Vec::new();
            for g in &groups {
                assert_eq!(run.group(g.queue).unwrap(), Some(*g));
                for (seq, rec) in read_group(&reopened, g) {
                    got.push((g.queue, seq, rec));
                }
                assert_eq!(reopened.group(g.queue ^ 2).unwrap(), None);
            }
            assert_eq!(got, all);
        }
    }

    #[test]
    fn records_out_of_order_are_refused() {
        let disk = SimDisk::new();
        let mut w = RunWriter::create(&disk, 1).unwrap();
        w.push(5, 0, 10, b"\0a").unwrap();
        assert!(w.push(5, 0, 10, b"\0b").is_err());
        assert!(w.push(4, 0, 11, b"\0b").is_err());
    }

    #[test]
    fn any_flipped_bit_of_a_run_is_caught() {
        let disk = SimDisk::new();
        let (_, all) = sample(&disk, 200, 2);
        let good = disk.content(&names::q(9)).unwrap();
        for bit in (0..good.len() * 8).step_by(7) {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            disk.set_content(&names::q(9), bad);
            let read = Run::open(&disk, 9).and_then(|run| {
                let mut n = 0;
                for g in run.groups() {
                    let g = g?;
                    run.walk_group(&g, |_, _, _| Ok(true))?;
                    n += u64::from(g.records);
                }
                Ok(n)
            });
            match read {
                Err(e) => assert!(e.is_corruption(), "bit {bit}: {e}"),
                // A flip in the padding-free format changes something checked, or nothing
                // that is read (a frame's unused header bits are covered by its crc too).
                Ok(n) => panic!("bit {bit}: read {n} records of {}", all.len()),
            }
        }
    }
}
