//! The thread that codes every other frame of a writer of compressed frames, while the caller
//! fills and codes the next one: compressing is most of the work of writing F, and a flush
//! otherwise does it on one core.
//!
//! The thread only codes: the caller writes every frame, in order, so the file's contents and
//! offsets are those of a writer without it (see [`super::FrameWriter::code_ahead`]).

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::coded::Encoder;
use super::FRAME_HEADER;

/// A frame's records for the thread (the plain layout after [`FRAME_HEADER`] bytes of room),
/// and the buffer to code them into.
struct Job {
    raw: Vec<u8>,
    out: Vec<u8>,
}

/// What the thread made of a job: both buffers back, and whether `out` holds the coded frame
/// (it is smaller than the plain one).
pub(super) struct Coded {
    pub raw: Vec<u8>,
    pub out: Vec<u8>,
    pub smaller: bool,
}

/// The coding thread of a writer, and the frame it holds (at most one).
pub(super) struct Ahead {
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<io::Result<Coded>>,
    /// The records of the frame at the thread, and its plain size; None: none is.
    pending: Option<(u32, usize)>,
    /// Buffers back from the thread, for the next job.
    spare: Option<(Vec<u8>, Vec<u8>)>,
    thread: Option<JoinHandle<()>>,
}

impl Ahead {
    /// Starts the thread with `encoder`; None if it cannot be started.
    pub(super) fn start(mut encoder: Encoder) -> Option<Ahead> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("crivello-code".into())
            .spawn(move || {
                for Job { raw, mut out } in inbox {
                    let coded = encoder
                        .encode(&raw[FRAME_HEADER..], &mut out, FRAME_HEADER)
                        .map(|()| Coded {
                            smaller: out.len() < raw.len(),
                            raw,
                            out,
                        });
                    if outbox.send(coded).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Ahead {
            jobs: Some(jobs),
            done,
            pending: None,
            spare: None,
            thread: Some(thread),
        })
    }

    /// Whether a frame is at the thread.
    pub(super) fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The plain size of the frame at the thread (0: none).
    pub(super) fn pending_len(&self) -> usize {
        self.pending.map_or(0, |(_, len)| len)
    }

    /// Hands the frame `raw` of `count` records to the thread (none may be there); returns a
    /// buffer for the next frame's records (emptied).
    pub(super) fn send(&mut self, raw: Vec<u8>, count: u32) -> io::Result<Vec<u8>> {
        debug_assert!(self.pending.is_none());
        let (mut next, out) = self
            .spare
            .take()
            .unwrap_or_else(|| (Vec::with_capacity(raw.capacity()), Vec::new()));
        let len = raw.len();
        let jobs = self.jobs.as_ref().expect("the sender lives until drop");
        jobs.send(Job { raw, out })
            .map_err(|_| io::Error::other("the coding thread stopped"))?;
        self.pending = Some((count, len));
        next.clear();
        Ok(next)
    }

    /// Waits for the frame at the thread: its records' count and the coded result. The
    /// buffers are the caller's until it gives them back ([`Ahead::give_back`]).
    pub(super) fn receive(&mut self) -> io::Result<Option<(u32, Coded)>> {
        let Some((count, _)) = self.pending.take() else {
            return Ok(None);
        };
        match self.done.recv() {
            Ok(coded) => Ok(Some((count, coded?))),
            // The thread is gone without an answer: it panicked.
            Err(_) => Err(io::Error::other("the coding thread stopped")),
        }
    }

    /// Keeps a job's buffers for the next one.
    pub(super) fn give_back(&mut self, mut raw: Vec<u8>, mut out: Vec<u8>) {
        raw.clear();
        out.clear();
        self.spare = Some((raw, out));
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
