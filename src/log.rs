//! Checksummed, group-committed record logs: the layout shared by A (the write-ahead log of
//! pushed URLs) and F (the frontier of emitted URLs).
//!
//! A log file is a header followed by *frames*. A frame holds the records appended since the
//! previous frame, and is written with one positional write:
//!
//! ```text
//! frame := magic "FRM1" u32 | epoch u32 | tag u64 | payload_len u32 | count u32 | crc32 u32 | payload
//! payload := count x ( len u32 | len bytes )          (len >= 1)
//!          | empty                                    (count 0: a seal)
//!          | records u64                              (count 0, payload_len 8: the end)
//!          | 0u32                                     (count 0, payload_len 4: a tail mark)
//! crc32 covers the first 24 header bytes and the payload
//! ```
//!
//! The *epoch* counts the syncs of the file: a frame of epoch `e + 1` is written only after
//! the sync that ended epoch `e` returned. So when a damaged frame is followed by a valid
//! frame two epochs later, the damaged one had been synced: that is corruption, not a torn
//! write (see `docs/design.md`, "Torn tails").
//!
//! The *tag* names the file's contents (an A generation, an F segment id). A file may be
//! reused for new contents (A generations are), so past the new frames lie the old ones: a
//! valid frame with another tag ends the log like the end of the file. The *end frame*
//! closes a log that will get no more records, with the number of records before it.
//!
//! A reused file also holds, past the new frames, the rest of an old frame, which reads as
//! damage. So a writer of such files (A) writes, in the same write as each frame, a *tail
//! mark* after it, which the next write overwrites: a reader of marked logs stops at a valid
//! mark of its tag as at the end of the file, and only a write the crash tore reads as damage.

use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Corruption, Error, Result};
use crate::format::{PutLe, MAGIC_FRAME};
use crate::storage::StorageFile;

/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 28;
/// Bytes of an end frame's payload: the number of records in the log before it.
const END_PAYLOAD: usize = 8;
/// Bytes of a tail mark's payload (zero).
const MARK_PAYLOAD: usize = 4;
/// Bytes of a tail mark, which follows the last frame of a marked log.
pub const MARK_LEN: u64 = (FRAME_HEADER + MARK_PAYLOAD) as u64;
/// A frame is written once its payload reaches this size.
pub const FRAME_TARGET: usize = 1 << 20;
/// Bytes written between two writeback hints ([`StorageFile::start_writeback`]): the system
/// starts writing them to the device while appends go on, and the next sync finds little
/// left to write (as RocksDB's `bytes_per_sync`).
pub const WRITEBACK_EVERY: u64 = 8 << 20;

/// Appends records to a log file in frames.
pub struct LogWriter {
    file: Arc<dyn StorageFile>,
    name: String,
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
    /// The thread that writes the frames, if any (see [`LogWriter::write_behind`]).
    behind: Option<Behind>,
    /// Whether a write or sync failed: the writer then refuses to write.
    broken: bool,
}

impl LogWriter {
    /// A writer of frames tagged `tag`, appending at `end` of `file` (after `records`
    /// records), starting in `epoch`.
    pub fn new(
        file: Arc<dyn StorageFile>,
        name: String,
        (end, records): (u64, u64),
        tag: u64,
        epoch: u32,
    ) -> LogWriter {
        let mut buf = Vec::with_capacity(FRAME_HEADER + 4096);
        buf.resize(FRAME_HEADER, 0);
        LogWriter {
            file,
            name,
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
        }
    }

    /// Runs `op` unless an earlier write or sync failed, and remembers if it fails: after a
    /// failure, what the file holds past its last sync is unknown, and nothing may follow it.
    fn guard(&mut self, op: impl FnOnce(&mut LogWriter) -> Result<()>) -> Result<()> {
        if self.broken {
            let e = io::Error::other("an earlier write or sync of this log failed");
            return Err(Error::io("write", &self.name, e));
        }
        let r = op(self);
        self.broken |= r.is_err();
        r
    }

    /// Hands the writes of data frames to a thread of their own, which writes them in
    /// order while the caller goes on appending (if a thread can be started; else they stay
    /// on the caller's). At most [`BEHIND`] frames wait for it. Every other write, and every
    /// sync, first waits for those frames to be written, so the file's contents at any sync,
    /// seal, end frame or drop are those of a writer without a thread; a failed write is
    /// reported by the next call that writes, and nothing is written after it.
    pub fn write_behind(mut self) -> LogWriter {
        self.behind = Behind::start(self.file.clone());
        self
    }

    /// Ends every write with a tail mark (see the module's documentation).
    pub fn with_tail_marks(mut self) -> LogWriter {
        self.mark = true;
        self
    }

    /// Sets the payload size at which a frame is written (tests use tiny frames).
    pub fn set_frame_target(&mut self, target: usize) {
        self.target = target.max(1);
    }

    /// The file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file.
    pub fn file(&self) -> &Arc<dyn StorageFile> {
        &self.file
    }

    /// Appends one record (`record` is not empty); writes a frame when the buffer is full.
    pub fn append(&mut self, record: &[u8]) -> Result<()> {
        self.append_tentative(record);
        self.frame_if_full()
    }

    /// Appends one record (`record` is not empty) to the buffer and writes nothing, even when
    /// the buffer is full: the caller then keeps it ([`LogWriter::frame_if_full`]) or takes
    /// it back ([`LogWriter::retract`]).
    pub fn append_tentative(&mut self, record: &[u8]) {
        debug_assert!(!record.is_empty());
        self.buf.put_u32(record.len() as u32);
        self.buf.extend_from_slice(record);
        self.count += 1;
        self.records += 1;
    }

    /// Takes back the last record appended, of `len` bytes, which no frame holds yet.
    pub fn retract(&mut self, len: usize) {
        debug_assert!(self.count > 0 && self.buf.len() >= FRAME_HEADER + 4 + len);
        self.buf.truncate(self.buf.len() - 4 - len);
        self.count -= 1;
        self.records -= 1;
    }

    /// Writes a frame if the buffer is full.
    pub fn frame_if_full(&mut self) -> Result<()> {
        if self.buf.len() - FRAME_HEADER >= self.target {
            self.write_frame()?;
        }
        Ok(())
    }

    /// Bytes buffered and not yet written.
    pub fn buffered(&self) -> usize {
        self.buf.len() - FRAME_HEADER
    }

    /// The end offset of the file once the buffer is written.
    pub fn end(&self) -> u64 {
        self.end
            + if self.count > 0 {
                self.buf.len() as u64
            } else {
                0
            }
    }

    /// Writes the buffered records as one frame (not synced).
    pub fn write_frame(&mut self) -> Result<()> {
        self.guard(LogWriter::frame)
    }

    fn frame(&mut self) -> Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        // With a thread, a buffer for the next frame once one of those it holds is written.
        let spare = match &mut self.behind {
            Some(behind) => Some(
                behind
                    .spare()
                    .map_err(|e| Error::io("write", &self.name, e))?
                    .unwrap_or_else(|| Vec::with_capacity(self.buf.capacity())),
            ),
            None => None,
        };
        let payload_len = (self.buf.len() - FRAME_HEADER) as u32;
        let (epoch, tag, count) = (self.epoch, self.tag, self.count);
        let (head, payload) = self.buf.split_at_mut(FRAME_HEADER);
        frame_header(head, (epoch, tag), (payload_len, count), payload);
        let frame_len = self.buf.len();
        if self.mark {
            push_mark(&mut self.buf, (epoch, tag));
        }
        let (at, end) = (self.end, self.end + frame_len as u64);
        let hint = (end - self.clean >= WRITEBACK_EVERY).then_some((self.clean, end - self.clean));
        match (&mut self.behind, spare) {
            (Some(behind), Some(spare)) => {
                let frame = std::mem::replace(&mut self.buf, spare);
                behind
                    .send(frame, at, hint)
                    .map_err(|e| Error::io("write", &self.name, e))?;
            }
            _ => {
                let written = self
                    .file
                    .write_all_at(&self.buf, at)
                    .map_err(|e| Error::io("write", &self.name, e));
                written?;
                if let Some((offset, len)) = hint {
                    self.file.start_writeback(offset, len);
                }
            }
        }
        self.end = end;
        if hint.is_some() {
            self.clean = end;
        }
        self.buf.clear();
        self.buf.resize(FRAME_HEADER, 0);
        if self.buf.capacity() > 2 * self.target + 2 * FRAME_HEADER {
            self.buf.shrink_to(self.target + FRAME_HEADER);
        }
        self.count = 0;
        Ok(())
    }

    /// Syncs, then writes and syncs an empty frame of the next epoch. A valid frame two epochs
    /// after any damaged one proves the damage is corruption, not a torn write, so after a
    /// seal no data frame is ambiguous (see `docs/design.md`, "Torn tails").
    pub fn seal(&mut self) -> Result<()> {
        self.sync()?;
        self.guard(|w| {
            w.write_empty(&[])?;
            w.file.sync().map_err(|e| Error::io("fsync", &w.name, e))?;
            w.epoch = w.epoch.saturating_add(1);
            Ok(())
        })
    }

    /// Writes the buffered records, then the end frame (not synced): the log gets no more
    /// records.
    pub fn finish(&mut self) -> Result<()> {
        self.write_frame()?;
        let records = self.records.to_le_bytes();
        self.guard(|w| w.write_empty(&records))
    }

    /// Waits until the thread, if any, has written every frame handed to it.
    fn drain(&mut self) -> Result<()> {
        match &mut self.behind {
            Some(behind) => behind
                .drain()
                .map_err(|e| Error::io("write", &self.name, e)),
            None => Ok(()),
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
        self.file
            .write_all_at(&frame, self.end)
            .map_err(|e| Error::io("write", &self.name, e))?;
        self.end += frame_len;
        Ok(())
    }

    /// Writes the buffered records and makes the file durable; ends the epoch.
    pub fn sync(&mut self) -> Result<()> {
        self.guard(LogWriter::sync_all)
    }

    fn sync_all(&mut self) -> Result<()> {
        let wrote = self.count > 0;
        self.frame()?;
        self.drain()?;
        let mut synced = self.file.sync();
        if synced.is_err() && crate::planted::active(crate::planted::Bug::RetryFsync) {
            synced = self.file.sync();
        }
        synced.map_err(|e| Error::io("fsync", &self.name, e))?;
        self.clean = self.end;
        if wrote {
            self.epoch = self.epoch.saturating_add(1);
        }
        Ok(())
    }
}

/// Frames a [`LogWriter::write_behind`] writer may have handed to its thread and not yet
/// seen written: the caller fills the next while the thread writes these.
pub const BEHIND: usize = 2;

/// A frame for the writing thread: its bytes, its offset, and the writeback hint after it.
struct Job {
    frame: Vec<u8>,
    at: u64,
    hint: Option<(u64, u64)>,
}

/// The thread of a [`LogWriter::write_behind`] writer, and the frames it holds.
struct Behind {
    jobs: Option<mpsc::Sender<Job>>,
    /// Each frame's buffer back from the thread, with the outcome of its write.
    done: mpsc::Receiver<(Vec<u8>, io::Result<()>)>,
    /// Frames handed over whose outcome has not been received.
    queued: usize,
    thread: Option<JoinHandle<()>>,
}

impl Behind {
    /// Starts the thread that writes to `file`; None if it cannot be started.
    fn start(file: Arc<dyn StorageFile>) -> Option<Behind> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("crivello-log".into())
            .spawn(move || {
                let mut failed = false;
                for job in inbox {
                    // After a failure nothing more is written: no frame lies past a hole.
                    let written = if failed {
                        Err(io::Error::other("an earlier write failed"))
                    } else {
                        file.write_all_at(&job.frame, job.at)
                    };
                    match (&written, job.hint) {
                        (Ok(()), Some((offset, len))) => file.start_writeback(offset, len),
                        (Ok(()), None) => {}
                        (Err(_), _) => failed = true,
                    }
                    if outbox.send((job.frame, written)).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Behind {
            jobs: Some(jobs),
            done,
            queued: 0,
            thread: Some(thread),
        })
    }

    /// Takes in one outcome, waiting for it if `wait`; returns the frame's buffer, emptied.
    /// (After an error the writer makes no more calls: see `LogWriter::guard`.)
    fn receive(&mut self, wait: bool) -> io::Result<Option<Vec<u8>>> {
        if self.queued == 0 {
            return Ok(None);
        }
        let got = if wait {
            self.done.recv().ok()
        } else {
            self.done.try_recv().ok()
        };
        let Some((mut frame, written)) = got else {
            if wait {
                // The thread is gone without an answer: it panicked.
                return Err(io::Error::other("the log's writing thread stopped"));
            }
            return Ok(None);
        };
        self.queued -= 1;
        written?;
        frame.clear();
        Ok(Some(frame))
    }

    /// A buffer for the next frame, once fewer than [`BEHIND`] frames wait: one the thread
    /// has written, if one is back (so a writer has at most `BEHIND + 1` buffers).
    fn spare(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.receive(self.queued >= BEHIND)
    }

    fn send(&mut self, frame: Vec<u8>, at: u64, hint: Option<(u64, u64)>) -> io::Result<()> {
        let jobs = self.jobs.as_ref().expect("the sender lives until drop");
        jobs.send(Job { frame, at, hint })
            .map_err(|_| io::Error::other("the log's writing thread stopped"))?;
        self.queued += 1;
        Ok(())
    }

    /// Waits until every frame handed over is written.
    fn drain(&mut self) -> io::Result<()> {
        while self.queued > 0 {
            self.receive(true)?;
        }
        Ok(())
    }
}

impl Drop for Behind {
    fn drop(&mut self) {
        // The frames handed over are written before the writer is gone (and before the
        // directory's lock is released).
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A tail mark of `tag` in `epoch`, alone.
pub fn tail_mark(epoch: u32, tag: u64) -> Vec<u8> {
    let mut mark = Vec::with_capacity(MARK_LEN as usize);
    push_mark(&mut mark, (epoch, tag));
    mark
}

/// Appends a tail mark to `buf`.
fn push_mark(buf: &mut Vec<u8>, (epoch, tag): (u32, u64)) {
    let at = buf.len();
    buf.resize(at + MARK_LEN as usize, 0);
    let (head, payload) = buf[at..].split_at_mut(FRAME_HEADER);
    frame_header(head, (epoch, tag), (MARK_PAYLOAD as u32, 0), payload);
}

/// Fills the header `head` of a frame of `payload`.
fn frame_header(
    head: &mut [u8],
    (epoch, tag): (u32, u64),
    (len, count): (u32, u32),
    payload: &[u8],
) {
    head[0..4].copy_from_slice(&MAGIC_FRAME.to_le_bytes());
    head[4..8].copy_from_slice(&epoch.to_le_bytes());
    head[8..16].copy_from_slice(&tag.to_le_bytes());
    head[16..20].copy_from_slice(&len.to_le_bytes());
    head[20..24].copy_from_slice(&count.to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&head[0..24]);
    h.update(payload);
    let c = h.finalize();
    head[24..28].copy_from_slice(&c.to_le_bytes());
}

/// One frame read back.
pub struct Frame {
    /// Offset of the frame header in the file.
    pub offset: u64,
    /// The frame's epoch.
    pub epoch: u32,
    /// The number of records.
    pub count: u32,
    /// The payload.
    pub payload: Vec<u8>,
    /// For the end frame: the number of records in the log before it.
    pub end: Option<u64>,
}

impl Frame {
    /// The records of the frame, in order (none in a seal or the end frame).
    pub fn records(&self) -> Records<'_> {
        Records {
            payload: if self.end.is_some() {
                &[]
            } else {
                &self.payload
            },
            pos: 0,
        }
    }

    /// Bytes of the frame, header included.
    pub fn size(&self) -> u64 {
        (FRAME_HEADER + self.payload.len()) as u64
    }
}

/// Iterator over the records of a frame.
pub struct Records<'a> {
    payload: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.pos + 4 > self.payload.len() {
            return None;
        }
        let len = u32::from_le_bytes(self.payload[self.pos..self.pos + 4].try_into().ok()?);
        let start = self.pos + 4;
        let end = start + len as usize;
        self.pos = end;
        Some(&self.payload[start..end])
    }
}

/// Why a frame could not be read.
pub enum FrameError {
    /// Nothing more: the offset is the end of the file, or a valid frame with another tag
    /// (of the file's earlier contents) or a tail mark starts there.
    End,
    /// The bytes at the offset are not a valid frame.
    Invalid(Corruption),
    /// The storage failed.
    Io(std::io::Error),
}

/// Reads frames of a log file.
pub struct LogReader<'a> {
    file: &'a dyn StorageFile,
    len: u64,
    max_payload: u64,
    tag: u64,
    marks: bool,
}

impl<'a> LogReader<'a> {
    /// A reader of the frames tagged `tag` in `file`, whose length is `len`; frames with a
    /// payload larger than `max_payload` are invalid.
    pub fn new(file: &'a dyn StorageFile, len: u64, max_payload: u64, tag: u64) -> LogReader<'a> {
        LogReader {
            file,
            len,
            max_payload,
            tag,
            marks: false,
        }
    }

    /// Stops at a valid tail mark of the log's tag as at the end of the file (without this,
    /// a mark is an invalid frame).
    pub fn with_tail_marks(mut self) -> LogReader<'a> {
        self.marks = true;
        self
    }

    /// Reads the frame at `offset`.
    pub fn frame_at(&self, offset: u64) -> std::result::Result<Frame, FrameError> {
        self.frame_with(offset, Vec::new())
    }

    /// Reads the frame at `offset` into `spare`, the payload of an earlier frame given back:
    /// a scan of a log reuses one buffer instead of allocating (and faulting in) one per
    /// frame.
    pub fn frame_with(
        &self,
        offset: u64,
        spare: Vec<u8>,
    ) -> std::result::Result<Frame, FrameError> {
        if offset >= self.len {
            return Err(FrameError::End);
        }
        let avail = self.len - offset;
        if avail < FRAME_HEADER as u64 {
            return Err(FrameError::Invalid(Corruption::Truncated {
                needed: FRAME_HEADER as u64,
                available: avail,
            }));
        }
        let mut h = [0u8; FRAME_HEADER];
        self.file
            .read_exact_at(&mut h, offset)
            .map_err(FrameError::Io)?;
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let tag = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        let (magic, epoch, payload_len, count, stored) =
            (word(0), word(4), word(16), word(20), word(24));
        if h == [0u8; FRAME_HEADER] && crate::planted::active(crate::planted::Bug::ZeroRecord) {
            return Err(FrameError::End);
        }
        if magic != MAGIC_FRAME {
            return Err(FrameError::Invalid(Corruption::Magic {
                expected: MAGIC_FRAME,
                found: magic,
            }));
        }
        let payload_len = payload_len as u64;
        if payload_len > self.max_payload {
            return Err(FrameError::Invalid(Corruption::Field {
                field: "frame payload length",
                found: payload_len,
            }));
        }
        if payload_len > avail - FRAME_HEADER as u64 {
            return Err(FrameError::Invalid(Corruption::Truncated {
                needed: FRAME_HEADER as u64 + payload_len,
                available: avail,
            }));
        }
        // Only the bytes the spare buffer lacks are zeroed first: the read fills them all.
        let mut payload = spare;
        if payload.len() > payload_len as usize {
            payload.truncate(payload_len as usize);
        } else {
            payload.resize(payload_len as usize, 0);
        }
        self.file
            .read_exact_at(&mut payload, offset + FRAME_HEADER as u64)
            .map_err(FrameError::Io)?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&h[0..24]);
        hasher.update(&payload);
        let computed = hasher.finalize();
        if computed != stored {
            return Err(FrameError::Invalid(Corruption::Checksum {
                stored,
                computed,
            }));
        }
        if tag != self.tag || (self.marks && count == 0 && payload.len() == MARK_PAYLOAD) {
            return Err(FrameError::End);
        }
        if count == 0 && payload.len() == END_PAYLOAD {
            let records = u64::from_le_bytes(payload[..].try_into().expect("8 bytes"));
            return Ok(Frame {
                offset,
                epoch,
                count,
                payload,
                end: Some(records),
            });
        }
        // A valid checksum over a malformed payload is not a torn write: check the structure.
        let mut pos = 0usize;
        let mut n = 0u32;
        while pos < payload.len() {
            if pos + 4 > payload.len() {
                return Err(FrameError::Invalid(Corruption::Field {
                    field: "record length",
                    found: pos as u64,
                }));
            }
            let len =
                u32::from_le_bytes(payload[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            if len == 0 || pos + 4 + len > payload.len() {
                return Err(FrameError::Invalid(Corruption::Field {
                    field: "record length",
                    found: len as u64,
                }));
            }
            pos += 4 + len;
            n += 1;
        }
        if n != count {
            return Err(FrameError::Invalid(Corruption::Field {
                field: "frame count",
                found: count as u64,
            }));
        }
        Ok(Frame {
            offset,
            epoch,
            count,
            payload,
            end: None,
        })
    }

    /// Looks for a valid frame of this log's tag starting anywhere after `from`; returns its
    /// offset and epoch. Used only on a damaged log, to tell a torn tail from corruption.
    pub fn find_valid_after(
        &self,
        from: u64,
    ) -> std::result::Result<Option<(u64, u32)>, std::io::Error> {
        const CHUNK: u64 = 1 << 16;
        let magic = MAGIC_FRAME.to_le_bytes();
        let mut off = from + 1;
        while off + FRAME_HEADER as u64 <= self.len {
            let n = CHUNK.min(self.len - off) as usize;
            let mut buf = vec![0u8; n];
            self.file.read_exact_at(&mut buf, off)?;
            for i in 0..n.saturating_sub(3) {
                if buf[i..i + 4] == magic {
                    match self.frame_at(off + i as u64) {
                        Ok(f) => return Ok(Some((f.offset, f.epoch))),
                        Err(FrameError::Io(e)) => return Err(e),
                        Err(_) => {}
                    }
                }
            }
            off += n.saturating_sub(3).max(1) as u64;
        }
        Ok(None)
    }
}

/// Builds a frame tagged `tag` in memory (for tests and fuzz harnesses that need valid
/// checksums).
pub fn encode_frame(epoch: u32, tag: u64, records: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0u8; FRAME_HEADER];
    for r in records {
        out.put_u32(r.len() as u32);
        out.extend_from_slice(r);
    }
    let (head, payload) = out.split_at_mut(FRAME_HEADER);
    let len = payload.len() as u32;
    frame_header(head, (epoch, tag), (len, records.len() as u32), payload);
    out
}

/// Rewrites the header of the frame at the start of `frame` (its lengths as they are) for a
/// valid crc: for fuzz harnesses.
pub fn reseal_frame(frame: &mut [u8]) {
    let epoch = u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes"));
    let tag = u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(frame[16..20].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(frame[20..24].try_into().expect("4 bytes"));
    let (head, payload) = frame.split_at_mut(FRAME_HEADER);
    frame_header(head, (epoch, tag), (len, count), payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim::FaultKind;
    use crate::storage::{SimDisk, Storage};
    use std::sync::Mutex;

    /// A file that records the writeback hints it gets.
    struct Hinted {
        inner: Arc<dyn StorageFile>,
        hints: Arc<Mutex<Vec<(u64, u64)>>>,
    }

    impl StorageFile for Hinted {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            self.inner.read_at(buf, offset)
        }
        fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
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

    #[test]
    fn an_epoch_at_its_largest_value_stays_there_and_reads_back() {
        let disk = SimDisk::new();
        let file = disk.create("log").unwrap();
        let mut w = LogWriter::new(file.clone(), "log".into(), (0, 0), 7, u32::MAX - 1);
        for i in 0..4u8 {
            w.append(&[b'a' + i]).unwrap();
            w.sync().unwrap();
        }
        w.seal().unwrap();
        let reader = LogReader::new(&*file, w.end(), 1 << 20, 7);
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
        let hints = Arc::new(Mutex::new(Vec::new()));
        let file = Arc::new(Hinted {
            inner: disk.create("log").unwrap(),
            hints: hints.clone(),
        });
        let start = 100;
        let mut w = LogWriter::new(file, "log".into(), (start, 0), 7, 0);
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
    fn exercise(w: &mut LogWriter) -> Result<()> {
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
            let hints = Arc::new(Mutex::new(Vec::new()));
            let file = Arc::new(Hinted {
                inner: disk.create("log").unwrap(),
                hints: hints.clone(),
            });
            let w = LogWriter::new(file, "log".into(), (0, 0), 9, 0).with_tail_marks();
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

    #[test]
    fn a_failed_write_behind_is_reported_and_nothing_is_written_after_it() {
        let ops = {
            let disk = SimDisk::new();
            let w = LogWriter::new(disk.create("log").unwrap(), "log".into(), (0, 0), 9, 0);
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
                    let w = LogWriter::new(file, "log".into(), (0, 0), 9, 0).with_tail_marks();
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
