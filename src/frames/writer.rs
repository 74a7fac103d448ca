//! The writer of frames: records appended in a buffer, written as one frame when it is full,
//! synced by group commit.

use super::ahead::{Ahead, Next};
use super::behind::Behind;
use super::coded::Encoder;
use super::{
    frame_header, frame_header_with, push_mark, FRAME_HEADER, FRAME_TARGET, WRITEBACK_EVERY,
};

use crate::error::Result;
use crate::format::{PutLe, MAGIC_CODED, MAGIC_FRAME};
use crate::storage::File;

/// Appends records to a log file in frames.
pub(crate) struct FrameWriter {
    file: File,
    end: u64,
    buf: Vec<u8>,
    count: u32,
    epoch: u32,
    tag: u64,
    /// Records in frames written, or buffered.
    records: u64,
    target: usize,
    /// The end of the bytes already synced or hinted for writeback.
    clean: u64,
    /// Whether every write ends with a tail mark.
    mark: bool,
    /// The thread that writes the frames, if any (see [`FrameWriter::write_behind`]).
    behind: Option<Behind>,
    /// Whether a write or sync failed: the writer then refuses to write.
    broken: bool,
    /// The end at the last sync (or at the open of a log a clean close synced): a sync with
    /// nothing written since needs no fsync.
    synced_end: Option<u64>,
    /// The encoder of coded frames, and its buffer (see [`FrameWriter::coded`]).
    coder: Option<(Encoder, Vec<u8>)>,
    /// Frames written but not yet handed to the file, and where they go (see
    /// [`FrameWriter::gathered`]).
    gathered: Vec<u8>,
    gathered_at: u64,
    /// Bytes gathered before they are written; 0: each frame is written on its own.
    gather: usize,
    /// The thread that codes frames, if any (see [`FrameWriter::code_ahead`]).
    ahead: Option<Ahead>,
    /// Whether others sync the file too (see [`FrameWriter::synced_by_others`]).
    others: bool,
    /// Whether a frame was written in the current epoch.
    frames_in_epoch: bool,
}

impl FrameWriter {
    /// A writer of frames tagged `tag`, appending at `end` of `file` (after `records`
    /// records), starting in `epoch`.
    pub(crate) fn new(file: File, end: u64, records: u64, tag: u64, epoch: u32) -> FrameWriter {
        let mut buf = Vec::with_capacity(FRAME_HEADER + 4096);
        buf.resize(FRAME_HEADER, 0);
        FrameWriter {
            file,
            end,
            buf,
            count: 0,
            epoch,
            tag,
            records,
            target: FRAME_TARGET,
            clean: end,
            mark: false,
            behind: None,
            broken: false,
            synced_end: None,
            coder: None,
            gathered: Vec::new(),
            gathered_at: end,
            gather: 0,
            ahead: None,
            others: false,
            frames_in_epoch: false,
        }
    }

    /// Others sync the file too (through another handle, outside this writer: the
    /// journal's group commit), so frames may be written and synced by someone else before
    /// this writer syncs. The owner moves the writer to the next epoch
    /// ([`FrameWriter::next_epoch_if_written`]) once a sync that covered every frame of the
    /// current epoch has returned, and a sync of the writer's own moves it there when frames
    /// were written in this epoch, whether buffered or already written: a frame of epoch
    /// `e + 1` is still written only after a sync that covered every frame of epoch `e`.
    pub(crate) fn synced_by_others(mut self) -> FrameWriter {
        self.others = true;
        self
    }

    /// Moves to the next epoch if a frame was written in this one: for the owner of a writer
    /// [`FrameWriter::synced_by_others`], once every frame written is durable.
    pub(crate) fn next_epoch_if_written(&mut self) {
        if self.frames_in_epoch {
            self.next_epoch();
        }
    }

    /// The epoch of the frames written next.
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> u32 {
        self.epoch
    }

    fn next_epoch(&mut self) {
        self.epoch = self.epoch.saturating_add(1);
        self.frames_in_epoch = false;
    }

    /// Gathers the data frames into writes of `bytes` (a Q run's frames are a few KiB, and
    /// one write each cost more than the bytes). Every other write, every sync and
    /// [`FrameWriter::drain_gathered`] first write what is gathered, so the file's contents
    /// at any of them are those of a writer without gathering; a writer dropped without one
    /// of them leaves the gathered frames unwritten (for a file read only once finished).
    /// Not with [`FrameWriter::write_behind`] or [`FrameWriter::with_tail_marks`]; the
    /// frame target is set first (the buffer is sized by it).
    pub(crate) fn gathered(mut self, bytes: usize) -> FrameWriter {
        assert!(
            self.behind.is_none() && !self.mark,
            "gathering is for a writer without a thread or tail marks"
        );
        self.gather = bytes;
        self.gathered = Vec::with_capacity(bytes + self.target + 2 * FRAME_HEADER);
        self
    }

    /// Writes the frames gathered, if any.
    pub(crate) fn drain_gathered(&mut self) -> Result<()> {
        self.guard(FrameWriter::drain)
    }

    fn write_gathered(&mut self) -> Result<()> {
        if !self.gathered.is_empty() {
            self.file.write_all_at(&self.gathered, self.gathered_at)?;
            self.gathered.clear();
        }
        Ok(())
    }

    /// Writes data frames coded (`src/frames/coded.rs`): front coded and compressed. Seals,
    /// end frames and tail marks stay plain. If no zstd context can be made, frames stay
    /// plain (readers read both).
    pub(crate) fn coded(mut self) -> FrameWriter {
        if super::coded::coding() {
            self.coder = Encoder::new().ok().map(|e| (e, Vec::new()));
        }
        self
    }

    /// Codes data frames on a thread of its own while the caller fills the next ones (if a
    /// thread and a second zstd context can be had; else the caller codes them all); the
    /// caller codes a frame itself only when the thread already has two. The caller writes
    /// each frame, in order, after the one before: the file's contents and offsets are those
    /// of a writer without the thread. At most three frames wait to be written; every other
    /// write and every sync first writes them. For a writer of
    /// compressed frames ([`FrameWriter::coded`]), without [`FrameWriter::write_behind`] or
    /// [`FrameWriter::gathered`].
    pub(crate) fn code_ahead(mut self) -> FrameWriter {
        assert!(
            self.behind.is_none() && self.gather == 0,
            "a writer that codes ahead writes its frames itself"
        );
        if self.coder.is_some() {
            self.ahead = Encoder::new().ok().and_then(Ahead::start);
        }
        self
    }

    /// Writes data frames front coded, not compressed further (layouts 3 to 5 of
    /// `src/frames/coded.rs`; with a `head`, after each record's 8-byte head): for frames read
    /// again and again or once, where decoding zstd would cost more than the bytes it saves.
    pub(crate) fn coded_front(mut self, head: super::coded::Head) -> FrameWriter {
        if super::coded::coding() {
            self.coder = Some((Encoder::front_only(head), Vec::new()));
        }
        self
    }

    /// Writes data frames of records that start with an 8-byte seq coded as steps, front
    /// coded and then compressed (layout 6 of `src/frames/coded.rs`): a Q run's frames, where
    /// the bytes on disk count for more than the time of decoding them.
    pub(crate) fn coded_seq_compressed(mut self) -> std::io::Result<FrameWriter> {
        if super::coded::coding() {
            self.coder = Some((Encoder::seq_front_compressed()?, Vec::new()));
        }
        Ok(self)
    }

    /// Marks the file's contents as durable already (a clean close synced them): a sync
    /// before anything is written is then no fsync.
    pub(crate) fn assume_synced(mut self) -> FrameWriter {
        self.synced_end = Some(self.end);
        self
    }

    /// Runs `op` unless an earlier write or sync failed, and remembers if it fails: after a
    /// failure, what the file holds past its last sync is unknown, and nothing may follow it.
    fn guard(&mut self, op: impl FnOnce(&mut FrameWriter) -> Result<()>) -> Result<()> {
        if self.broken {
            let e = std::io::Error::other("an earlier write or sync of this log failed");
            return Err(self.file.io_error("write", e));
        }
        let r = op(self);
        self.broken |= r.is_err();
        r
    }

    /// Hands the writes of data frames to a thread of their own, which writes them in
    /// order while the caller goes on appending (if a thread can be started; else they stay
    /// on the caller's). At most [`super::behind::BEHIND`] frames wait for it. Every other write, and every
    /// sync, first waits for those frames to be written, so the file's contents at any sync,
    /// seal, end frame or drop are those of a writer without a thread; a failed write is
    /// reported by the next call that writes, and nothing is written after it.
    pub(crate) fn write_behind(mut self) -> FrameWriter {
        assert!(self.gather == 0, "a gathering writer has no thread");
        self.behind = Behind::start(self.file.clone());
        self
    }

    /// Ends every write with a tail mark (see the module's documentation).
    pub(crate) fn with_tail_marks(mut self) -> FrameWriter {
        assert!(self.gather == 0, "a gathering writer writes no tail marks");
        self.mark = true;
        self
    }

    /// Sets the payload size at which a frame is written (tests use tiny frames).
    pub(crate) fn set_frame_target(&mut self, target: usize) {
        self.target = target.max(1);
    }

    /// The file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Appends one record (`record` is not empty); writes a frame when the buffer is full.
    pub(crate) fn append(&mut self, record: &[u8]) -> Result<()> {
        self.append_tentative(record);
        self.frame_if_full()
    }

    /// Appends one record (`record` is not empty) to the buffer and writes nothing, even when
    /// the buffer is full: the caller then keeps it ([`FrameWriter::frame_if_full`]) or takes
    /// it back ([`FrameWriter::retract`]).
    pub(crate) fn append_tentative(&mut self, record: &[u8]) {
        self.append_tentative_parts(&[], record);
    }

    /// [`FrameWriter::append_tentative`] of the record `head` then `rest`.
    pub(crate) fn append_tentative_parts(&mut self, head: &[u8], rest: &[u8]) {
        debug_assert!(head.len() + rest.len() > 0);
        self.buf.put_u32((head.len() + rest.len()) as u32);
        self.buf.extend_from_slice(head);
        self.buf.extend_from_slice(rest);
        self.count += 1;
        self.records += 1;
    }

    /// Takes back the last record appended, of `len` bytes, which no frame holds yet.
    pub(crate) fn retract(&mut self, len: usize) {
        debug_assert!(self.count > 0 && self.buf.len() >= FRAME_HEADER + 4 + len);
        self.buf.truncate(self.buf.len() - 4 - len);
        self.count -= 1;
        self.records -= 1;
    }

    /// Writes a frame if the buffer is full.
    pub(crate) fn frame_if_full(&mut self) -> Result<()> {
        if self.buf.len() - FRAME_HEADER >= self.target {
            self.write_frame()?;
        }
        Ok(())
    }

    /// The records buffered for the next frame.
    pub(crate) fn buffered(&self) -> u32 {
        self.count
    }

    /// The end of the frames written so far, gathered ones included (the buffered records
    /// not counted).
    pub(crate) fn written_end(&self) -> u64 {
        self.end
    }

    /// The end offset of the file once the buffer is written (for a writer of coded frames,
    /// whose frames shrink as they are written, exact only when nothing is buffered and no
    /// frame is at the coding thread).
    pub(crate) fn end(&self) -> u64 {
        self.end
            + self.ahead.as_ref().map_or(0, |a| a.pending_len() as u64)
            + if self.count > 0 {
                self.buf.len() as u64
            } else {
                0
            }
    }

    /// Bytes of the frames written, and an upper bound of those of the frames waiting for the
    /// coding thread (their plain sizes for those at the thread): what
    /// [`FrameWriter::written_end`] may reach once they are written, without the records
    /// buffered.
    pub(crate) fn written_end_bound(&self) -> u64 {
        self.end + self.ahead.as_ref().map_or(0, |a| a.pending_len() as u64)
    }

    /// Writes the frames waiting for the coding thread, once coded (not synced): then
    /// [`FrameWriter::written_end`] is the bytes of every frame made so far, whichever
    /// thread coded each and whenever it ended.
    pub(crate) fn write_waiting(&mut self) -> Result<()> {
        self.guard(FrameWriter::settle)
    }

    /// Writes the buffered records as one frame (not synced).
    pub(crate) fn write_frame(&mut self) -> Result<()> {
        self.guard(FrameWriter::frame)
    }

    fn frame(&mut self) -> Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        if self.ahead.is_some() {
            return self.frame_ahead();
        }
        // With a thread, a buffer for the next frame once one of those it holds is written.
        let spare = match &mut self.behind {
            Some(behind) => Some(
                behind
                    .spare()
                    .map_err(|e| self.file.io_error("write", e))?
                    .unwrap_or_else(|| Vec::with_capacity(self.buf.capacity())),
            ),
            None => None,
        };
        let magic = self.code_here()?;
        let mut frame = std::mem::take(&mut self.buf);
        let (at, end, hint) = self.place(&mut frame, magic, self.count);
        self.buf = frame;
        match (&mut self.behind, spare) {
            (Some(behind), Some(spare)) => {
                let frame = std::mem::replace(&mut self.buf, spare);
                behind
                    .send(frame, at, hint)
                    .map_err(|e| self.file.io_error("write", e))?;
            }
            _ if self.gather > 0 => {
                if self.gathered.is_empty() {
                    self.gathered_at = at;
                }
                self.gathered.extend_from_slice(&self.buf);
                if self.gathered.len() >= self.gather || hint.is_some() {
                    self.write_gathered()?;
                }
                if let Some((offset, len)) = hint {
                    self.file.start_writeback(offset, len);
                }
            }
            _ => {
                self.file.write_all_at(&self.buf, at)?;
                if let Some((offset, len)) = hint {
                    self.file.start_writeback(offset, len);
                }
            }
        }
        self.placed(end, hint);
        self.next_buffer();
        Ok(())
    }

    /// Fills in the header of `frame` of `count` records (its payload after
    /// [`FRAME_HEADER`] bytes of room for the header) and appends a tail mark if the writer
    /// writes them. Returns where the frame goes, where it ends, and the range to hint for
    /// writeback once it is written, if one is due.
    fn place(&self, frame: &mut Vec<u8>, magic: u32, count: u32) -> (u64, u64, Option<(u64, u64)>) {
        let payload_len = (frame.len() - FRAME_HEADER) as u32;
        let (epoch, tag) = (self.epoch, self.tag);
        let (head, payload) = frame.split_at_mut(FRAME_HEADER);
        frame_header_with(head, magic, (epoch, tag), (payload_len, count), payload);
        let frame_len = frame.len();
        if self.mark {
            push_mark(frame, (epoch, tag));
        }
        let (at, end) = (self.end, self.end + frame_len as u64);
        let hint = (end - self.clean >= WRITEBACK_EVERY).then_some((self.clean, end - self.clean));
        (at, end, hint)
    }

    /// Notes a frame placed by [`FrameWriter::place`] as written up to `end`, with its
    /// writeback `hint` asked.
    fn placed(&mut self, end: u64, hint: Option<(u64, u64)>) {
        self.end = end;
        self.frames_in_epoch = true;
        if hint.is_some() {
            self.clean = end;
        }
    }

    /// Codes the buffered frame on this thread, if this writer codes its frames and the frame
    /// is codable (a frame past what a reader decodes, a record of more than 1 GiB, stays
    /// plain). The coded frame replaces the plain one in the buffer if it is smaller (a frame
    /// of one short record is not), and the plain buffer becomes the next one's output.
    /// Returns the frame's magic.
    fn code_here(&mut self) -> Result<u32> {
        let codable = self.codable();
        if let (Some((encoder, out)), true) = (&mut self.coder, codable) {
            encoder
                .encode(&self.buf[FRAME_HEADER..], out, FRAME_HEADER)
                .map_err(|e| self.file.io_error("write", e))?;
            if out.len() < self.buf.len() {
                std::mem::swap(&mut self.buf, out);
                return Ok(MAGIC_CODED);
            }
        }
        Ok(MAGIC_FRAME)
    }

    /// Whether the buffered frame may be coded: not past what a reader decodes.
    fn codable(&self) -> bool {
        self.buf.len() - FRAME_HEADER <= super::coded::MAX_RAW
    }

    /// Empties the buffer for the next frame's records (giving back room a large record
    /// took).
    fn next_buffer(&mut self) {
        self.buf.clear();
        self.buf.resize(FRAME_HEADER, 0);
        if self.buf.capacity() > 2 * self.target + 2 * FRAME_HEADER {
            self.buf.shrink_to(self.target + FRAME_HEADER);
        }
        self.count = 0;
    }

    /// [`FrameWriter::frame`] with a coding thread: the frames the thread has coded are
    /// written; the frame goes to the thread if it has room; else it is coded here while the
    /// thread codes those before, and queued behind them (or written, if none waits).
    fn frame_ahead(&mut self) -> Result<()> {
        self.settle_ahead(false)?;
        let codable = self.codable();
        let ahead = self.ahead.as_mut().expect("a coding thread");
        if codable && ahead.has_room() {
            let raw = std::mem::take(&mut self.buf);
            self.buf = ahead
                .send(raw, self.count)
                .map_err(|e| self.file.io_error("write", e))?;
            self.buf.resize(FRAME_HEADER, 0);
            self.count = 0;
            return Ok(());
        }
        let magic = self.code_here()?;
        while self.ahead.as_ref().is_some_and(Ahead::is_full) {
            self.settle_one()?;
        }
        let ahead = self.ahead.as_mut().expect("a coding thread");
        if ahead.is_pending() {
            let next = ahead.buffer(self.buf.capacity());
            let frame = std::mem::replace(&mut self.buf, next);
            ahead.push_ready(frame, magic, self.count);
        } else {
            let mut frame = std::mem::take(&mut self.buf);
            let written = self.write_direct(&mut frame, magic, self.count);
            self.buf = frame;
            written?;
        }
        self.next_buffer();
        Ok(())
    }

    /// Writes every frame waiting, waiting for the thread to code them.
    fn settle(&mut self) -> Result<()> {
        self.settle_ahead(true)
    }

    /// Writes the frames waiting at the head of the queue that are coded; with `wait`, all
    /// of them, waiting for the thread.
    fn settle_ahead(&mut self, wait: bool) -> Result<()> {
        while self.write_next(wait)? {}
        Ok(())
    }

    /// Writes the first frame waiting, waiting for the thread to code it.
    fn settle_one(&mut self) -> Result<()> {
        self.write_next(true).map(|_| ())
    }

    /// Writes the first frame waiting, if it is coded (with `wait`, once it is); returns
    /// whether one was written.
    fn write_next(&mut self, wait: bool) -> Result<bool> {
        let Some(ahead) = &mut self.ahead else {
            return Ok(false);
        };
        let next = ahead
            .next(wait)
            .map_err(|e| self.file.io_error("write", e))?;
        let Some(Next {
            mut frame,
            magic,
            count,
            other,
        }) = next
        else {
            return Ok(false);
        };
        let written = self.write_direct(&mut frame, magic, count);
        if let Some(ahead) = &mut self.ahead {
            ahead.give_back(frame, other);
        }
        written.map(|()| true)
    }

    /// Writes the frame `frame` of `count` records (its payload after [`FRAME_HEADER`]
    /// bytes of room for the header) at the end, with a tail mark if the writer writes them.
    fn write_direct(&mut self, frame: &mut Vec<u8>, magic: u32, count: u32) -> Result<()> {
        let (at, end, hint) = self.place(frame, magic, count);
        self.file.write_all_at(frame, at)?;
        if let Some((offset, len)) = hint {
            self.file.start_writeback(offset, len);
        }
        self.placed(end, hint);
        Ok(())
    }

    /// Syncs, then writes and syncs an empty frame of the next epoch. A valid frame two epochs
    /// after any damaged one proves the damage is corruption, not a torn write, so after a
    /// seal no data frame is ambiguous (see `docs/design.md`, "Torn tails").
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.seal_with(&mut |f: &File| f.sync())
    }

    /// [`FrameWriter::seal`] with `sync` making the file durable (see
    /// [`FrameWriter::sync_with`]).
    pub(crate) fn seal_with(&mut self, sync: &mut dyn FnMut(&File) -> Result<()>) -> Result<()> {
        self.sync_with(sync)?;
        self.guard(|w| {
            w.write_empty(&[])?;
            sync(&w.file)?;
            w.next_epoch();
            Ok(())
        })
    }

    /// Writes the buffered records, then the end frame (not synced): the log gets no more
    /// records.
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.write_frame()?;
        let records = self.records.to_le_bytes();
        self.guard(|w| w.write_empty(&records))
    }

    /// Waits until the thread, if any, has written every frame handed to it, and writes
    /// the frames gathered.
    fn drain(&mut self) -> Result<()> {
        self.settle()?;
        match &mut self.behind {
            Some(behind) => behind.drain().map_err(|e| self.file.io_error("write", e)),
            None => self.write_gathered(),
        }
    }

    /// Writes a frame of no records with `payload`: a seal (empty) or the end.
    fn write_empty(&mut self, payload: &[u8]) -> Result<()> {
        self.drain()?;
        let mut frame = vec![0u8; FRAME_HEADER + payload.len()];
        let (head, body) = frame.split_at_mut(FRAME_HEADER);
        body.copy_from_slice(payload);
        frame_header(
            head,
            (self.epoch, self.tag),
            (payload.len() as u32, 0),
            body,
        );
        let frame_len = frame.len() as u64;
        if self.mark {
            push_mark(&mut frame, (self.epoch, self.tag));
        }
        self.file.write_all_at(&frame, self.end)?;
        self.end += frame_len;
        self.frames_in_epoch = true;
        Ok(())
    }

    /// Writes the buffered records and makes the file durable; ends the epoch.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.guard(|w| w.sync_all(&mut |f: &File| f.sync()))
    }

    /// [`FrameWriter::sync`] with `sync` making the file durable (the journal's group commit
    /// serialises it with the syncs of other threads).
    pub(crate) fn sync_with(&mut self, sync: &mut dyn FnMut(&File) -> Result<()>) -> Result<()> {
        self.guard(|w| w.sync_all(sync))
    }

    fn sync_all(&mut self, sync: &mut dyn FnMut(&File) -> Result<()>) -> Result<()> {
        // Frames to write (buffered, or at the coding thread), or, for a writer whose file
        // others sync too, frames written in this epoch: after this sync, the next frames are
        // of the next epoch.
        let wrote = self.count > 0
            || self.ahead.as_ref().is_some_and(Ahead::is_pending)
            || (self.others && self.frames_in_epoch);
        if !wrote && self.synced_end == Some(self.end) {
            return Ok(());
        }
        self.frame()?;
        self.drain()?;
        let mut synced = sync(&self.file);
        if synced.is_err() && crate::planted::active(crate::planted::Bug::RetryFsync) {
            synced = sync(&self.file);
        }
        synced?;
        self.clean = self.end;
        self.synced_end = Some(self.end);
        if wrote {
            self.next_epoch();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::FrameReader;
    use crate::storage::sim::FaultKind;
    use crate::storage::{SimDisk, Storage, StorageFile};
    use std::sync::{Arc, Mutex};

    /// A file that records the writeback hints it gets and counts the writes.
    struct Watched {
        inner: Arc<dyn StorageFile>,
        hints: Arc<Mutex<Vec<(u64, u64)>>>,
        writes: Arc<Mutex<usize>>,
    }

    impl Watched {
        fn new(inner: Arc<dyn StorageFile>) -> Watched {
            Watched {
                inner,
                hints: Arc::default(),
                writes: Arc::default(),
            }
        }
    }

    impl StorageFile for Watched {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            self.inner.read_at(buf, offset)
        }
        fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            *self.writes.lock().unwrap() += 1;
            self.inner.write_all_at(buf, offset)
        }
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.inner.set_len(len)
        }
        fn sync(&self) -> std::io::Result<()> {
            self.inner.sync()
        }
        fn start_writeback(&self, offset: u64, len: u64) {
            self.hints.lock().unwrap().push((offset, len));
        }
    }

    /// A coded writer writes a frame coded when that is smaller, plain otherwise (one short
    /// record), with or without its thread; both read back.
    #[test]
    fn a_coded_writer_codes_a_frame_only_when_that_makes_it_smaller() {
        for behind in [false, true] {
            let disk = SimDisk::new();
            let file = File::new(disk.create("log").unwrap(), "log");
            let mut w = FrameWriter::new(file.clone(), 0, 0, 7, 0).coded();
            if behind {
                w = w.write_behind();
            }
            w.append(b"http://x/").unwrap();
            w.sync().unwrap();
            let many: Vec<String> = (0..2000)
                .map(|i| format!("http://x.example/a/{i}"))
                .collect();
            for u in &many {
                w.append(u.as_bytes()).unwrap();
            }
            w.sync().unwrap();
            let bytes = disk.content("log").unwrap();
            let reader = FrameReader::new(&file, w.end(), 1 << 20, 7);
            let (mut offset, mut magics, mut records) = (0, Vec::new(), Vec::new());
            while let Ok(f) = reader.frame_at(offset) {
                magics.push(bytes[offset as usize..offset as usize + 4].to_vec());
                offset += f.size();
                records.extend(f.records().map(<[u8]>::to_vec));
            }
            assert_eq!(offset, w.end());
            assert_eq!(magics, [b"FRM1".to_vec(), b"FRZ1".to_vec()]);
            let raw: usize = many.iter().map(|u| u.len() + 4).sum();
            assert!(w.end() < raw as u64 / 4, "{} bytes for {raw}", w.end());
            assert_eq!(records[0], b"http://x/");
            assert!(records[1..]
                .iter()
                .map(|r| r.as_slice())
                .eq(many.iter().map(|u| u.as_bytes())));
        }
    }

    /// A gathering writer leaves the same bytes as a plain one at every sync, seal, end and
    /// drain, in far fewer writes; before a drain, the frames gathered are not in the file.
    #[test]
    fn a_gathering_writer_writes_what_a_plain_one_does_in_fewer_writes() {
        let run = |gather: usize| {
            let disk = SimDisk::new();
            let watched = Watched::new(disk.create("log").unwrap());
            let writes = watched.writes.clone();
            let file = File::new(Arc::new(watched), "log");
            let mut w =
                FrameWriter::new(file, 0, 0, 7, 0).coded_front(crate::frames::coded::Head::Kept);
            w.set_frame_target(100);
            if gather > 0 {
                w = w.gathered(gather);
            }
            let mut images = Vec::new();
            for round in 0..6u32 {
                for i in 0..300u32 {
                    let rec = format!("http://h{}.example/{round}/{i}", i % 7);
                    w.append_tentative_parts(&u64::from(i).to_le_bytes(), rec.as_bytes());
                    w.frame_if_full().unwrap();
                    if i % 50 == 0 {
                        w.write_frame().unwrap();
                    }
                }
                match round % 3 {
                    0 => w.sync().unwrap(),
                    1 => w.seal().unwrap(),
                    _ => {
                        w.write_frame().unwrap();
                        w.drain_gathered().unwrap();
                    }
                }
                images.push(disk.content("log").unwrap());
            }
            w.finish().unwrap();
            images.push(disk.content("log").unwrap());
            let n = *writes.lock().unwrap();
            (images, n, w.end())
        };
        let (plain, plain_writes, plain_end) = run(0);
        let (gathered, gathered_writes, gathered_end) = run(4096);
        assert_eq!(plain_end, gathered_end);
        assert!(
            plain == gathered,
            "the files differ at a sync, seal or drain"
        );
        assert!(
            gathered_writes * 10 < plain_writes,
            "{gathered_writes} writes gathered, {plain_writes} plain"
        );
        // Between drains, the frames wait in the writer.
        let disk = SimDisk::new();
        let file = File::new(disk.create("log").unwrap(), "log");
        let mut w = FrameWriter::new(file, 0, 0, 7, 0).gathered(1 << 20);
        for i in 0..100u32 {
            w.append(format!("http://x/{i}").as_bytes()).unwrap();
            w.write_frame().unwrap();
        }
        assert!(disk.content("log").unwrap().is_empty());
        w.drain_gathered().unwrap();
        assert_eq!(disk.content("log").unwrap().len() as u64, w.end());
    }

    #[test]
    fn an_epoch_at_its_largest_value_stays_there_and_reads_back() {
        let disk = SimDisk::new();
        let file = File::new(disk.create("log").unwrap(), "log");
        let mut w = FrameWriter::new(file.clone(), 0, 0, 7, u32::MAX - 1);
        for i in 0..4u8 {
            w.append(&[b'a' + i]).unwrap();
            w.sync().unwrap();
        }
        w.seal().unwrap();
        let reader = FrameReader::new(&file, w.end(), 1 << 20, 7);
        let (mut offset, mut epochs, mut records) = (0, Vec::new(), Vec::new());
        while let Ok(f) = reader.frame_at(offset) {
            offset += f.size();
            epochs.push(f.epoch);
            records.extend(f.records().map(<[u8]>::to_vec));
        }
        assert_eq!(offset, w.end());
        assert_eq!(records, [b"a", b"b", b"c", b"d"].map(|r| r.to_vec()));
        let top = u32::MAX;
        assert_eq!(epochs, [top - 1, top, top, top, top]);
    }

    #[test]
    fn writeback_hints_cover_the_unsynced_bytes_once_in_order() {
        let disk = SimDisk::new();
        let file = Arc::new(Watched::new(disk.create("log").unwrap()));
        let hints = file.hints.clone();
        let start = 100;
        let mut w = FrameWriter::new(File::new(file, "log"), start, 0, 7, 0);
        let record = vec![b'u'; 1000];
        let mut synced_at = None;
        for i in 0..40_000 {
            w.append(&record).unwrap();
            if i == 25_000 {
                w.sync().unwrap();
                synced_at = Some(w.end());
            }
        }
        w.sync().unwrap();
        let hints = hints.lock().unwrap().clone();
        let synced_at = synced_at.unwrap();
        // About 40 MB written: several hints, each of at least WRITEBACK_EVERY bytes, back
        // to back from the start, except that a sync makes everything before it clean.
        assert!(hints.len() >= 3, "{hints:?}");
        let mut clean = start;
        for &(offset, len) in &hints {
            if offset != clean {
                assert_eq!(offset, synced_at, "{hints:?}");
                assert!(clean < synced_at);
            }
            assert!(len >= WRITEBACK_EVERY, "{hints:?}");
            clean = offset + len;
            assert!(clean <= w.end());
        }
        assert!(hints.iter().any(|&(o, _)| o == synced_at), "{hints:?}");
    }

    /// Appends 300 records of varied lengths to `w` in frames of about 64 bytes, syncing
    /// every 37 records, sealing once, and finishing: the calls a sieve makes of A.
    fn exercise(w: &mut FrameWriter) -> Result<()> {
        w.set_frame_target(64);
        for i in 0..300u32 {
            let url = format!("http://h{}/{}", i % 7, "p".repeat((i % 23) as usize + 1));
            w.append(url.as_bytes())?;
            if i % 37 == 36 {
                w.sync()?;
            }
            if i == 150 {
                w.seal()?;
            }
        }
        w.finish()?;
        w.sync()
    }

    #[test]
    fn a_writer_with_a_thread_writes_the_bytes_and_hints_of_one_without() {
        let mut got = Vec::new();
        for behind in [false, true] {
            let disk = SimDisk::new();
            let file = Arc::new(Watched::new(disk.create("log").unwrap()));
            let hints = file.hints.clone();
            let w = FrameWriter::new(File::new(file, "log"), 0, 0, 9, 0).with_tail_marks();
            let mut w = if behind { w.write_behind() } else { w };
            assert_eq!(w.behind.is_some(), behind);
            exercise(&mut w).unwrap();
            let end = w.end();
            drop(w);
            let hints = hints.lock().unwrap().clone();
            got.push((disk.content("log").unwrap(), end, hints, disk.trace()));
        }
        assert_eq!(got[0], got[1]);
        assert!(got[0].0.len() > 10_000, "many frames: {}", got[0].0.len());
    }

    /// A writer of compressed frames (`coded`) that codes ahead makes the same writes, in the
    /// same order, at the same offsets, with the same hints and syncs, as one that does not;
    /// and a write or sync that fails is reported, with nothing written after it.
    #[test]
    fn a_writer_that_codes_ahead_writes_what_one_without_does() {
        let exercise = |w: &mut FrameWriter| -> Result<()> {
            w.set_frame_target(2048);
            for i in 0..3_000u32 {
                let url = format!(
                    "http://h{}.example/{}/{i}",
                    i % 7,
                    "p".repeat((i % 23) as usize)
                );
                w.append(url.as_bytes())?;
                if i % 701 == 700 {
                    w.sync()?;
                }
                if i == 1500 {
                    w.seal()?;
                }
                if i == 2000 {
                    // A record larger than the frame target: a frame on its own.
                    w.append(&vec![b'x'; 5000])?;
                }
            }
            w.finish()?;
            w.sync()
        };
        let writer = |file: File, ahead: bool| {
            let w = FrameWriter::new(file, 0, 0, 9, 0).coded();
            if ahead {
                w.code_ahead()
            } else {
                w
            }
        };
        let mut got = Vec::new();
        for ahead in [false, true] {
            let disk = SimDisk::new();
            let file = Arc::new(Watched::new(disk.create("log").unwrap()));
            let hints = file.hints.clone();
            let mut w = writer(File::new(file, "log"), ahead);
            assert_eq!(w.ahead.is_some(), ahead);
            exercise(&mut w).unwrap();
            let end = w.end();
            drop(w);
            let hints = hints.lock().unwrap().clone();
            got.push((disk.content("log").unwrap(), end, hints, disk.trace()));
        }
        assert!(got[0] == got[1], "the writes differ");
        let content = &got[0].0;
        assert!(content.len() > 1_000, "{} bytes", content.len());
        // The frames are coded, and read back whole.
        let disk = SimDisk::new();
        disk.create("copy")
            .unwrap()
            .write_all_at(content, 0)
            .unwrap();
        let copy = File::new(disk.open("copy").unwrap(), "copy");
        let reader = FrameReader::new(&copy, content.len() as u64, u64::MAX, 9);
        let (mut offset, mut records, mut coded) = (0, 0, 0);
        while let Ok(f) = reader.frame_at(offset) {
            coded += usize::from(content[offset as usize..][..4] == MAGIC_CODED.to_le_bytes());
            records += f.records().count();
            offset += f.size();
        }
        assert_eq!(offset, content.len() as u64);
        assert!(coded > 3, "{coded} coded frames");
        assert_eq!(records, 3_001);
        let ops = {
            let disk = SimDisk::new();
            exercise(&mut writer(
                File::new(disk.create("log").unwrap(), "log"),
                false,
            ))
            .unwrap();
            disk.ops()
        };
        for kind in [FaultKind::Eio, FaultKind::ShortWrite] {
            for k in 1..ops {
                let mut contents = Vec::new();
                for ahead in [false, true] {
                    let disk = SimDisk::new();
                    let file = disk.create("log").unwrap();
                    disk.fail_at(k, kind, false);
                    let mut w = writer(File::new(file, "log"), ahead);
                    let err = exercise(&mut w).expect_err("the failure is reported");
                    assert!(err.to_string().contains("log"), "{err}");
                    assert!(w.append(&[b'x'; 5000]).is_err(), "op {k}, {kind:?}");
                    assert!(w.sync().is_err() && w.seal().is_err() && w.finish().is_err());
                    drop(w);
                    contents.push(disk.content("log").unwrap());
                }
                assert!(contents[0] == contents[1], "op {k}, {kind:?}");
            }
        }
    }

    #[test]
    fn a_failed_write_behind_is_reported_and_nothing_is_written_after_it() {
        let ops = {
            let disk = SimDisk::new();
            let w = FrameWriter::new(File::new(disk.create("log").unwrap(), "log"), 0, 0, 9, 0);
            exercise(&mut w.with_tail_marks()).unwrap();
            disk.ops()
        };
        for kind in [FaultKind::Eio, FaultKind::ShortWrite] {
            for k in 1..ops {
                let mut contents = Vec::new();
                for behind in [false, true] {
                    let disk = SimDisk::new();
                    let file = disk.create("log").unwrap();
                    disk.fail_at(k, kind, false);
                    let w = FrameWriter::new(File::new(file, "log"), 0, 0, 9, 0).with_tail_marks();
                    let mut w = if behind { w.write_behind() } else { w };
                    let err = exercise(&mut w).expect_err("the failure is reported");
                    assert!(err.to_string().contains("log"), "{err}");
                    // Every later call that writes fails too, and writes nothing.
                    assert!(w.append(&[b'x'; 100]).is_err(), "op {k}, {kind:?}");
                    assert!(w.sync().is_err() && w.seal().is_err() && w.finish().is_err());
                    drop(w);
                    contents.push(disk.content("log").unwrap());
                }
                // The thread wrote what a writer without one does up to the failed call:
                // nothing after the failed write.
                assert!(contents[0] == contents[1], "op {k}, {kind:?}");
            }
        }
    }
}
