//! Reading F ahead: threads that read, check and decode the next frames of a segment while
//! the reader's owner uses the current one.
//!
//! Decoding a coded frame (zstd) costs about as much as everything else a consumer of F does
//! with its URLs (`pop` writes them out), so it runs on other cores: the reader walks the
//! frame headers itself (28 bytes each) and hands frame `i` to worker `i mod W`, which reads
//! and decodes the whole frame and sends it back on its own channel. Taking the results from
//! the workers in the same rotation gives them back in file order, with no reordering and no
//! shared state but the channels. At most [`AHEAD`] frames per worker are handed out.
//!
//! A worker reads a frame exactly as the reader would ([`FrameReader::frame_with`], the same
//! file, limit and tag), so its result, a frame or an error, is the one the reader would
//! have met itself. The walk of the headers stops at anything unexpected (the segment's end,
//! a header it cannot use): the reader then reads that frame itself and meets what is there.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::format::{MAGIC_CODED, MAGIC_FRAME};
use crate::frames::{Frame, FrameError, FrameReader, FRAME_HEADER, PAYLOAD_LEN_AT};
use crate::storage::File;

/// Frames handed to each worker ahead of the reader.
const AHEAD: usize = 2;

/// A frame to read: (file, its limit, its tag, the frame's offset, a buffer to read into).
type Job = (File, u64, u64, u64, Vec<u8>);
/// A frame read, or why not.
type Done = std::result::Result<Frame, FrameError>;

struct Worker {
    jobs: Option<SyncSender<Job>>,
    results: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

/// The read-ahead of one reader of F.
pub(crate) struct Prefetch {
    workers: Vec<Worker>,
    /// The segment and its file and limit that the frames handed out belong to.
    segment: Option<(u64, File, u64)>,
    /// The offset of the next frame to hand out, if the walk goes on.
    next: Option<u64>,
    /// The offsets of the frames handed out and not taken back, in order.
    pending: VecDeque<u64>,
    /// Frames handed out, and taken back, since the workers started.
    sent: usize,
    taken: usize,
    /// Buffers of frames the reader is done with, for the next jobs.
    spares: Vec<Vec<u8>>,
    /// Where the walk stopped on a read error, and the error: the reader gets it when it
    /// reaches that frame, as it would have met it itself.
    failed: Option<(u64, crate::error::Error)>,
}

impl Prefetch {
    /// A read-ahead with `workers` threads, or `None` if there are fewer than 2 cores to
    /// share or a thread cannot be started (the reader then reads every frame itself).
    pub(crate) fn start(workers: usize) -> Option<Prefetch> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores < 2 || workers == 0 {
            return None;
        }
        let mut all = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (jobs, job_rx) = mpsc::sync_channel::<Job>(AHEAD);
            let (done_tx, results) = mpsc::sync_channel::<Done>(AHEAD);
            let thread = std::thread::Builder::new()
                .name("crivello-f-read".into())
                .spawn(move || {
                    for (file, limit, tag, offset, spare) in job_rx {
                        let r =
                            FrameReader::new(&file, limit, u64::MAX, tag).frame_with(offset, spare);
                        if done_tx.send(r).is_err() {
                            break;
                        }
                    }
                })
                .ok()?;
            all.push(Worker {
                jobs: Some(jobs),
                results,
                thread: Some(thread),
            });
        }
        Some(Prefetch {
            workers: all,
            segment: None,
            next: None,
            pending: VecDeque::new(),
            sent: 0,
            taken: 0,
            spares: Vec::new(),
            failed: None,
        })
    }

    /// Gives back the buffer of a frame the reader is done with.
    pub(crate) fn give_back(&mut self, buf: Vec<u8>) {
        if self.spares.len() < self.workers.len() * (AHEAD + 1) {
            self.spares.push(buf);
        }
    }

    /// The frame at `offset` of segment `segment` (in `file`, whose frames end at `limit`):
    /// from the workers if it is the next one they read, after restarting them there
    /// otherwise. `None` when the read-ahead cannot give it (the reader reads it itself).
    pub(crate) fn frame(
        &mut self,
        segment: u64,
        file: &File,
        limit: u64,
        offset: u64,
    ) -> Option<Done> {
        let same = matches!(&self.segment, Some((s, _, l)) if *s == segment && *l == limit);
        if !(same && self.pending.front() == Some(&offset)) {
            if let Some(e) = self.failed_at(same, offset) {
                return Some(e);
            }
            self.restart(segment, file, limit, offset);
        }
        self.fill();
        if let Some(e) = self.failed_at(true, offset) {
            return Some(e);
        }
        if self.pending.front() != Some(&offset) {
            return None;
        }
        self.pending.pop_front();
        let w = self.taken % self.workers.len();
        self.taken += 1;
        let r = self.workers[w].results.recv().ok();
        self.fill();
        r
    }

    /// The error of the walk's read of the header at `offset`, if the reader is there.
    fn failed_at(&mut self, same: bool, offset: u64) -> Option<Done> {
        let there = matches!(&self.failed, Some((at, _)) if *at == offset);
        if !(same && there && self.pending.is_empty()) {
            return None;
        }
        let (_, e) = self.failed.take()?;
        Some(Err(FrameError::Io(e)))
    }

    /// Drops what was handed out and walks from `offset` of `segment`.
    fn restart(&mut self, segment: u64, file: &File, limit: u64, offset: u64) {
        while self.pending.pop_front().is_some() {
            let w = self.taken % self.workers.len();
            self.taken += 1;
            if let Ok(Ok(f)) = self.workers[w].results.recv() {
                self.give_back(f.payload);
            }
        }
        self.segment = Some((segment, file.clone(), limit));
        self.next = Some(offset);
        self.failed = None;
    }

    /// Hands out frames until every worker has [`AHEAD`] or the walk stops.
    fn fill(&mut self) {
        let Some((tag, file, limit)) = self.segment.clone() else {
            return;
        };
        while self.pending.len() < self.workers.len() * AHEAD {
            let Some(at) = self.next else {
                return;
            };
            let len = match frame_len(&file, limit, at) {
                Ok(Some(len)) => len,
                Ok(None) => {
                    self.next = None;
                    return;
                }
                Err(e) => {
                    self.failed = Some((at, e));
                    self.next = None;
                    return;
                }
            };
            let w = self.sent % self.workers.len();
            let spare = self.spares.pop().unwrap_or_default();
            let Some(jobs) = &self.workers[w].jobs else {
                self.next = None;
                return;
            };
            if jobs.send((file.clone(), limit, tag, at, spare)).is_err() {
                self.next = None;
                return;
            }
            self.sent += 1;
            self.pending.push_back(at);
            self.next = Some(at + len);
        }
    }
}

/// The length of the frame whose header is at `at` of `file`, if it looks like a frame that
/// ends within `limit` (the worker checks it all).
fn frame_len(file: &File, limit: u64, at: u64) -> crate::error::Result<Option<u64>> {
    if at + FRAME_HEADER as u64 > limit {
        return Ok(None);
    }
    let mut h = [0u8; FRAME_HEADER];
    file.read_exact_at(&mut h, at)?;
    let magic = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    let payload = u32::from_le_bytes(
        h[PAYLOAD_LEN_AT..PAYLOAD_LEN_AT + 4]
            .try_into()
            .expect("4 bytes"),
    );
    let len = FRAME_HEADER as u64 + u64::from(payload);
    Ok(((magic == MAGIC_FRAME || magic == MAGIC_CODED) && at + len <= limit).then_some(len))
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        for w in &mut self.workers {
            w.jobs = None;
        }
        for w in &mut self.workers {
            // Take what is in flight, so that no worker waits on a full channel.
            while w.results.recv().is_ok() {}
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}
