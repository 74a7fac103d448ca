//! A, the write-ahead log of pushed URLs: one file per generation.
//!
//! ```text
//! a-file := magic "CRVA" u32 | version u32 | generation u64 | crc32 u32 | frame*
//! ```
//!
//! A generation holds the records of one buffer of S. Its file is created with a synced
//! header (and a synced directory entry) before any record is written, so a damaged header
//! can only be a crash during creation of the newest generation. Its frames are tagged with
//! the generation, and once S is handed to a flush the generation is closed by an end frame.
//!
//! A new generation may take the file of a superseded one instead of a new file: the system
//! keeps that file's cached pages and blocks, where a new file gets pages freed by earlier
//! removals (which a virtual machine may have returned to its host, to be faulted in again)
//! and new blocks. Past the new frames lie the old generation's, which its tag ends, and
//! every write ends with a tail mark, so that the rest of an old frame cut by the new ones
//! is never read.

use crate::error::{Corruption, Result};
use crate::format::{seal, ByteReader, PutLe, MAGIC_A, VERSION};
use crate::frames::{FrameError, FrameReader, FrameWriter, FRAME_HEADER};
use crate::manifest::CleanEnd;
use crate::names;
use crate::options::Options;
use crate::storage::{durable, File, Storage, StorageExt};

/// Bytes of an A header.
pub(crate) const HEADER_LEN: u64 = 20;

/// A kind of log of generations with A's layout: A itself, and the frontier's journal J.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kind {
    /// The magic of its files.
    pub magic: u32,
    /// The name of generation `gen`.
    pub name: fn(u64) -> String,
}

/// A, the write-ahead log of pushed URLs.
pub(crate) const A: Kind = Kind {
    magic: MAGIC_A,
    name: names::a,
};

fn header(kind: Kind, gen: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN as usize);
    b.put_u32(kind.magic);
    b.put_u32(VERSION);
    b.put_u64(gen);
    seal(&mut b);
    b
}

/// Where A's live records start: record `skip` of generation `gen` (the manifest's `a_gen`
/// and `a_skip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    pub gen: u64,
    pub skip: u64,
}

/// Continues writing generation `gen` after its valid prefix `end` of `records` records, in
/// the epoch after `last_epoch`.
pub(crate) fn reuse(file: File, gen: u64, end: u64, records: u64, last_epoch: i64) -> FrameWriter {
    FrameWriter::new(
        file,
        end,
        records,
        gen,
        // Epochs stop at their largest value, as the writer's do.
        (last_epoch + 1).min(i64::from(u32::MAX)) as u32,
    )
    .with_tail_marks()
}

/// Creates generation `gen` with a durable header and directory entry: in the file of the
/// superseded generation `spare` if given (see the module's documentation), else in a new
/// file.
pub(crate) fn create(storage: &dyn Storage, gen: u64, spare: Option<u64>) -> Result<FrameWriter> {
    create_of(A, storage, gen, spare)
}

/// [`create`] for a log of any kind.
pub(crate) fn create_of(
    kind: Kind,
    storage: &dyn Storage,
    gen: u64,
    spare: Option<u64>,
) -> Result<FrameWriter> {
    let name = (kind.name)(gen);
    let header = header(kind, gen);
    match spare {
        Some(old) => durable::reuse_synced(storage, &(kind.name)(old), &name, &header)?,
        None => durable::create_synced(storage, &name, &header)?,
    }
    let file = storage.open_file(&name)?;
    Ok(FrameWriter::new(file, HEADER_LEN, 0, gen, 0).with_tail_marks())
}

/// The writer of a generation as the options want it: its frame size, and its frames written
/// by a thread of their own with background flushes.
pub(crate) fn configure(mut w: FrameWriter, opts: &Options) -> FrameWriter {
    w.set_frame_target(opts.frame_bytes);
    if opts.background {
        w.write_behind()
    } else {
        w
    }
}

/// Writes a tail mark over the torn tail that `r`, a replay of generation `gen`, found, and
/// syncs it: the generation then ends where its valid prefix does, as if the torn write had
/// not begun, and a later replay (`check`'s) finds it whole. Recovery does this before it
/// commits past the generation.
pub(crate) fn mark_torn_tail(gen: u64, r: &Replay) -> Result<()> {
    if !r.torn || r.valid_end < HEADER_LEN {
        return Ok(());
    }
    let mark = crate::frames::tail_mark(r.last_epoch.max(0) as u32, gen);
    r.file.write_all_at(&mark, r.valid_end)?;
    r.file.sync()
}

/// Passes the records of generation `gen` (its `file`) at the increasing `positions`
/// (relative to record `skip`) to `each`, in order: a merge emits the new URLs so. A
/// position past the generation's end is corruption (its records were synced before the
/// run or the batch that names them was flushed). The whole generation is checked, its
/// header and every frame to its end (its end frame, a tail mark, or the file's end), not
/// only those holding the positions: the merge that reads it removes it, and damage must
/// not go with it unreported.
pub(crate) fn records_at(
    file: &File,
    gen: u64,
    skip: u64,
    positions: impl Iterator<Item = u64>,
    mut each: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let len = file.len()?;
    check_header(A, file, len, gen)?;
    let reader = FrameReader::new(file, len, u64::MAX, gen).with_tail_marks();
    let mut offset = HEADER_LEN;
    let mut record: u64 = 0;
    let mut next = positions.map(|p| skip + p).peekable();
    let mut spare = Vec::new();
    loop {
        let frame = match reader.frame_with(offset, std::mem::take(&mut spare)) {
            Ok(f) if f.end.is_none() => f,
            Err(FrameError::Io(e)) => return Err(e),
            Err(FrameError::Invalid(what)) => return Err(file.corrupt(offset, what)),
            // The end of the generation (its file, a tail mark or its end frame).
            Ok(_) | Err(FrameError::End) if next.peek().is_none() => return Ok(()),
            // ... with positions left.
            Ok(_) | Err(FrameError::End) => {
                return Err(file.corrupt(
                    offset,
                    Corruption::Truncated {
                        needed: 1,
                        available: 0,
                    },
                ))
            }
        };
        offset += frame.size();
        let end = record + u64::from(frame.count);
        if next.peek().is_some_and(|&p| p < end) {
            for url in frame.records() {
                if next.peek() == Some(&record) {
                    each(url)?;
                    next.next();
                }
                record += 1;
            }
        }
        record = end;
        spare = frame.payload;
    }
}

/// What replaying a generation found.
pub(crate) struct Replay {
    /// The file.
    pub file: File,
    /// Records in the valid prefix.
    pub records: u64,
    /// Whether the file ended in a torn tail (or a torn header).
    pub torn: bool,
    /// Whether the end frame closes the generation.
    pub ended: bool,
    /// Bytes dropped as a torn tail.
    pub torn_bytes: u64,
    /// Records of valid frames dropped with the torn tail.
    pub torn_records: u64,
    /// The highest epoch of a valid frame after the damage (if any).
    pub later_epoch: Option<u32>,
    /// The epoch of the last valid frame of the prefix (-1: none).
    pub last_epoch: i64,
    /// The end of the valid prefix.
    pub valid_end: u64,
}

impl Replay {
    /// Whether the push stream ends in this generation: it is torn, or, not being the newest
    /// (`last` false), it lacks its end frame. The end frame of a frozen generation is
    /// written before the fsync that the next generation's first sync waits for, so a later
    /// synced record proves it durable. (A generation spilled by a recovery has no end frame;
    /// it is never replayed again, being below the next `a_gen`.)
    pub(crate) fn ends_the_stream(&self, last: bool) -> bool {
        self.torn || (!last && !self.ended)
    }

    /// Checks this replay of generation `gen` against where the last clean close left the
    /// log (`docs/design.md`, "The clean end"): that close synced and sealed every byte
    /// before `clean.end` of generation `clean.gen`, so a cut or damage before it is
    /// corruption, not a torn tail, and a generation before it must be whole, closed by its
    /// end frame.
    pub(crate) fn check_clean(&self, gen: u64, clean: CleanEnd) -> Result<()> {
        if clean.end == 0 {
            return Ok(());
        }
        if let Some(end) = clean.of(gen) {
            if self.valid_end < end {
                let what = if self.torn {
                    Corruption::DamagedBeforeCleanEnd { clean_end: end }
                } else {
                    Corruption::Truncated {
                        needed: end,
                        available: self.valid_end,
                    }
                };
                return Err(self.file.corrupt(self.valid_end, what));
            }
        } else if gen < clean.gen && self.ends_the_stream(false) {
            return Err(self.file.corrupt(
                self.valid_end,
                Corruption::DamagedBeforeCleanEnd { clean_end: 0 },
            ));
        }
        Ok(())
    }
}

/// Checks that generation `clean.gen`, recorded by the last clean close, is among the live
/// generations `gens` when it is not before the first of them, `first`.
pub(crate) fn check_clean_present(
    kind: Kind,
    first: u64,
    gens: &[u64],
    clean: CleanEnd,
) -> Result<()> {
    if clean.end > 0 && clean.gen >= first && !gens.contains(&clean.gen) {
        return Err(crate::Error::corrupt(
            &(kind.name)(clean.gen),
            0,
            Corruption::Missing,
        ));
    }
    Ok(())
}

/// Reads generation `gen`, calling `each(index, url)` for every record of the valid prefix.
///
/// A damaged frame ends the valid prefix. It is a torn tail (dropped and counted) unless a
/// valid frame at least two epochs later follows it, which proves it had been synced: then
/// it is corruption. `last` says whether this is the newest generation (only its header may
/// be torn). (Over 80 lines: one loop over the frames, each of its exits a case of the
/// torn-tail rule of `docs/design.md`.)
pub(crate) fn replay(
    storage: &dyn Storage,
    gen: u64,
    last: bool,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<Replay> {
    replay_of(A, storage, gen, last, |n, _, record| each(n, record))
}

/// [`replay`] for a log of any kind.
pub(crate) fn replay_of(
    kind: Kind,
    storage: &dyn Storage,
    gen: u64,
    last: bool,
    mut each: impl FnMut(u64, u64, &[u8]) -> Result<()>,
) -> Result<Replay> {
    let file = storage.open_file(&(kind.name)(gen))?;
    let len = file.len()?;
    if let Err(e) = check_header(kind, &file, len, gen) {
        // A crash while the newest generation was being created; it holds nothing.
        if last && e.is_corruption() && len <= HEADER_LEN + FRAME_HEADER as u64 {
            return Ok(Replay {
                file,
                records: 0,
                torn: true,
                ended: false,
                torn_bytes: len,
                torn_records: 0,
                later_epoch: None,
                last_epoch: -1,
                valid_end: 0,
            });
        }
        return Err(e);
    }
    let reader = FrameReader::new(&file, len, u64::MAX, gen).with_tail_marks();
    let mut offset = HEADER_LEN;
    let mut records = 0u64;
    let mut last_epoch: i64 = -1;
    let mut spare = Vec::new();
    let clean = |file, records, valid_end, ended, last_epoch| Replay {
        file,
        records,
        valid_end,
        torn: false,
        ended,
        torn_bytes: 0,
        torn_records: 0,
        later_epoch: None,
        last_epoch,
    };
    loop {
        let frame = match reader.frame_with(offset, std::mem::take(&mut spare)) {
            Ok(frame) => frame,
            Err(FrameError::End) => return Ok(clean(file, records, offset, false, last_epoch)),
            Err(FrameError::Io(e)) => return Err(e),
            Err(FrameError::Invalid(_)) => {
                let (torn_records, later_epoch) = after_damage(&reader, offset, last_epoch)?;
                return Ok(Replay {
                    file,
                    records,
                    torn: true,
                    ended: false,
                    torn_bytes: len - offset,
                    torn_records,
                    later_epoch,
                    last_epoch,
                    valid_end: offset,
                });
            }
        };
        let epoch = i64::from(frame.epoch);
        if epoch < last_epoch || epoch > last_epoch.max(0) + 1 {
            return Err(file.corrupt(
                offset,
                Corruption::Invalid {
                    field: "frame epoch",
                    expected: "the previous frame's epoch or the next one",
                    found: u64::from(frame.epoch),
                },
            ));
        }
        last_epoch = epoch;
        if let Some(total) = frame.end {
            if total != records {
                return Err(file.corrupt(
                    offset,
                    Corruption::Mismatch {
                        field: "records before the end frame",
                        expected: records,
                        found: total,
                    },
                ));
            }
            let end = offset + frame.size();
            return Ok(clean(file, records, end, true, last_epoch));
        }
        for url in frame.records() {
            each(records, offset, url)?;
            records += 1;
        }
        offset += frame.size();
        spare = frame.payload;
    }
}

/// Checks the header of generation `gen`, whose file is `len` bytes long.
fn check_header(kind: Kind, file: &File, len: u64, gen: u64) -> Result<()> {
    if len < HEADER_LEN {
        return Err(file.corrupt(
            0,
            Corruption::Truncated {
                needed: HEADER_LEN,
                available: len,
            },
        ));
    }
    let mut h = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut h, 0)?;
    let mut c = ByteReader::new(&h, file.name(), 0);
    c.magic(kind.magic)?;
    c.version()?;
    let found = c.u64()?;
    c.check_crc()?;
    if found != gen {
        return Err(file.corrupt(
            8,
            Corruption::Mismatch {
                field: "generation",
                expected: gen,
                found,
            },
        ));
    }
    Ok(())
}

/// Torn tail or corruption? Looks for valid frames after the damage at `offset`: one at
/// least two epochs after the last valid frame's (`last_epoch`) proves the damage was synced,
/// which is corruption. Returns the records of the valid frames found after the damage and
/// the highest epoch among them.
fn after_damage(
    reader: &FrameReader<'_>,
    offset: u64,
    last_epoch: i64,
) -> Result<(u64, Option<u32>)> {
    let mut later_epoch = None;
    let mut torn_records = 0u64;
    let mut at = offset;
    while let Some((off, epoch)) = reader.find_valid_after(at)? {
        if i64::from(epoch) >= last_epoch + 2 {
            return Err(reader
                .file()
                .corrupt(offset, Corruption::DamagedBeforeValid { next_valid: off }));
        }
        later_epoch = later_epoch.max(Some(epoch));
        if let Ok(f) = reader.frame_at(off) {
            torn_records += u64::from(f.count);
        }
        at = off;
    }
    Ok((torn_records, later_epoch))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    fn urls(storage: &dyn Storage, gen: u64, last: bool) -> Result<(Vec<Vec<u8>>, Replay)> {
        let mut out = Vec::new();
        let r = replay(storage, gen, last, |_, u| {
            out.push(u.to_vec());
            Ok(())
        })?;
        Ok((out, r))
    }

    /// A disk holding generation 1, of 50 records synced one by one, closed by its end frame.
    fn closed_old_generation() -> SimDisk {
        let disk = SimDisk::new();
        let mut old = create(&disk, 1, None).unwrap();
        for i in 0..50u32 {
            old.append(format!("http://old/{i:04}").as_bytes()).unwrap();
            old.sync().unwrap();
        }
        old.finish().unwrap();
        old.sync().unwrap();
        disk
    }

    #[test]
    fn a_generation_in_a_reused_file_ending_inside_an_old_frame_is_whole_and_not_torn() {
        let disk = closed_old_generation();
        let old_len = disk.open(&names::a(1)).unwrap().len().unwrap();
        let mut new = create(&disk, 4, Some(1)).unwrap();
        // Other lengths than the old records': every new write ends inside an old frame.
        let mut want = Vec::new();
        for i in 0..7u32 {
            let url = format!("http://new/{}", "x".repeat(i as usize * 3 + 1)).into_bytes();
            new.append(&url).unwrap();
            want.push(url);
            if i % 2 == 1 {
                new.sync().unwrap();
                let (got, r) = urls(&disk, 4, true).unwrap();
                assert_eq!(got, want);
                assert!(!r.torn && r.torn_bytes == 0 && !r.ended, "after record {i}");
                assert_eq!(r.valid_end, new.end());
            }
        }
        // A clean close: the seal, then its mark.
        new.seal().unwrap();
        let (got, r) = urls(&disk, 4, true).unwrap();
        assert_eq!(got, want);
        assert!(!r.torn && r.torn_bytes == 0 && !r.ended);
        assert_eq!(r.valid_end, new.end());
        assert!(
            new.end() + crate::frames::MARK_LEN < old_len,
            "the old frames go on after"
        );
        // The mark is what ends it: a reader that does not know marks sees damage there.
        let file = disk.open_file(&names::a(4)).unwrap();
        let plain = FrameReader::new(&file, old_len, u64::MAX, 4);
        assert!(matches!(
            plain.frame_at(new.end()),
            Err(FrameError::Invalid(_))
        ));
        // Continued after the mark, as an open does: the mark is overwritten.
        let (end, records, epoch) = (r.valid_end, r.records, r.last_epoch);
        let mut again = reuse(file, 4, end, records, epoch);
        again.append(b"http://after/reopen").unwrap();
        again.sync().unwrap();
        want.push(b"http://after/reopen".to_vec());
        let (got, r) = urls(&disk, 4, true).unwrap();
        assert_eq!(got, want);
        assert!(!r.torn && r.torn_bytes == 0);
    }

    #[test]
    fn a_generation_in_a_reused_file_ends_where_the_old_frames_begin() {
        let disk = closed_old_generation();
        let mut new = create(&disk, 4, Some(1)).unwrap();
        assert_eq!(disk.files(), [names::a(4)]);
        // Same lengths: the new frames fall exactly on the old ones.
        for i in 0..3u32 {
            new.append(format!("http://new/{i:04}").as_bytes()).unwrap();
            new.sync().unwrap();
        }
        let want: Vec<Vec<u8>> = (0..3u32)
            .map(|i| format!("http://new/{i:04}").into_bytes())
            .collect();
        let (got, r) = urls(&disk, 4, true).unwrap();
        assert_eq!(got, want);
        assert!(!r.torn && !r.ended);
        // Not the newest and not closed (`ends_the_stream`): the same records.
        let (got, r) = urls(&disk, 4, false).unwrap();
        assert_eq!(got, want);
        assert!(!r.torn && !r.ended && r.ends_the_stream(false));
        new.finish().unwrap();
        let (got, r) = urls(&disk, 4, false).unwrap();
        assert_eq!(got, want);
        assert!(!r.torn && r.ended && !r.ends_the_stream(false));
    }

    #[test]
    fn an_end_frame_that_does_not_count_the_records_before_it_is_corruption() {
        let disk = SimDisk::new();
        let mut w = create(&disk, 2, None).unwrap();
        // A frame per record, all of one epoch.
        w.set_frame_target(1);
        let mut frames = Vec::new();
        for i in 0..3u32 {
            frames.push(w.end());
            w.append(format!("http://x/{i}").as_bytes()).unwrap();
        }
        w.finish().unwrap();
        w.sync().unwrap();
        assert_eq!(urls(&disk, 2, false).unwrap().0.len(), 3);
        // The middle frame cut out, the rest whole: two records, and an end frame of three.
        let mut bytes = disk.content(&names::a(2)).unwrap();
        bytes.drain(frames[1] as usize..frames[2] as usize);
        disk.set_content(&names::a(2), bytes);
        let err = urls(&disk, 2, false).err().expect("corruption");
        assert!(err.is_corruption(), "{err}");
    }
}
