//! The thread that codes frames of a writer of compressed frames while the caller goes on
//! filling (and, when the thread has all it can take, coding) the next ones: compressing is
//! most of the work of writing F, and a flush otherwise does it on one core.
//!
//! The thread only codes: the caller writes every frame, in order, so the file's contents and
//! offsets are those of a writer without it (see [`super::FrameWriter::code_ahead`]). The
//! frames not yet written wait in a queue in their order: those handed to the thread (at
//! most [`AT_THREAD`]) and those the caller coded itself meanwhile; the queue holds at most
//! [`QUEUED`] frames.

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::coded::Encoder;
use super::FRAME_HEADER;
use crate::format::{MAGIC_CODED, MAGIC_FRAME};

/// Frames at the thread at once: two, so that it has the next one when it ends one, while
/// the caller merges and reads the records of a third (a flush spends about as long on that
/// as on coding).
pub(super) const AT_THREAD: usize = 2;
/// Frames waiting to be written at once, those at the thread included.
pub(super) const QUEUED: usize = 3;
/// Buffers kept for reuse and held by the frames waiting, at most.
const BUFFERS: usize = 2 * QUEUED + 2;

/// A frame's records for the thread (the plain layout after [`FRAME_HEADER`] bytes of room),
/// and the buffer to code them into.
struct Job {
    raw: Vec<u8>,
    out: Vec<u8>,
}

/// What the thread made of a job: both buffers back, and whether `out` holds the coded frame
/// (it is smaller than the plain one).
struct Coded {
    raw: Vec<u8>,
    out: Vec<u8>,
    smaller: bool,
}

/// A frame waiting to be written.
enum Slot {
    /// At the thread: its records, its plain size, and what the thread made of it once
    /// received.
    Thread {
        count: u32,
        len: usize,
        coded: Option<Coded>,
    },
    /// Coded by the caller (or left plain): the frame, its magic and its records.
    Ready {
        frame: Vec<u8>,
        magic: u32,
        count: u32,
    },
}

/// A frame to write, in order: its bytes (after [`FRAME_HEADER`] bytes of room for the
/// header), its magic, its records, and a buffer to give back with it.
pub(super) struct Next {
    pub frame: Vec<u8>,
    pub magic: u32,
    pub count: u32,
    pub other: Vec<u8>,
}

/// The coding thread of a writer, and the frames not yet written.
pub(super) struct Ahead {
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<io::Result<Coded>>,
    queue: VecDeque<Slot>,
    /// Frames at the thread whose answer was not received.
    at_thread: usize,
    /// Buffers given back, for the next frames.
    spare: Vec<Vec<u8>>,
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
            queue: VecDeque::with_capacity(QUEUED),
            at_thread: 0,
            spare: Vec::new(),
            thread: Some(thread),
        })
    }

    /// Whether a frame waits to be written.
    pub(super) fn is_pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether the thread takes another frame now.
    pub(super) fn has_room(&self) -> bool {
        self.at_thread < AT_THREAD && self.queue.len() < QUEUED
    }

    /// Whether the queue is full: the caller writes its head before it queues another.
    pub(super) fn is_full(&self) -> bool {
        self.queue.len() >= QUEUED
    }

    /// The bytes of the frames waiting (plain sizes for those at the thread).
    pub(super) fn pending_len(&self) -> usize {
        self.queue
            .iter()
            .map(|s| match s {
                Slot::Thread { len, .. } => *len,
                Slot::Ready { frame, .. } => frame.len(),
            })
            .sum()
    }

    /// A buffer for a frame (emptied).
    pub(super) fn buffer(&mut self, capacity: usize) -> Vec<u8> {
        self.spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Hands the frame `raw` of `count` records to the thread ([`Ahead::has_room`] must
    /// hold); returns a buffer for the next frame's records (emptied).
    pub(super) fn send(&mut self, raw: Vec<u8>, count: u32) -> io::Result<Vec<u8>> {
        debug_assert!(self.has_room());
        let out = self.buffer(0);
        let next = self.buffer(raw.capacity());
        let len = raw.len();
        let jobs = self.jobs.as_ref().expect("the sender lives until drop");
        jobs.send(Job { raw, out })
            .map_err(|_| io::Error::other("the coding thread stopped"))?;
        self.queue.push_back(Slot::Thread {
            count,
            len,
            coded: None,
        });
        self.at_thread += 1;
        Ok(next)
    }

    /// Queues `frame` of `count` records, coded by the caller (`magic` says how), behind the
    /// frames waiting ([`Ahead::is_full`] must not hold).
    pub(super) fn push_ready(&mut self, frame: Vec<u8>, magic: u32, count: u32) {
        debug_assert!(!self.is_full());
        self.queue.push_back(Slot::Ready {
            frame,
            magic,
            count,
        });
    }

    /// The first frame waiting, once it is coded (with `wait`, waiting for the thread;
    /// without, None if the thread has not coded it yet). Its buffers are the caller's until
    /// it gives them back ([`Ahead::give_back`]).
    pub(super) fn next(&mut self, wait: bool) -> io::Result<Option<Next>> {
        loop {
            match self.queue.front_mut() {
                None => return Ok(None),
                Some(Slot::Ready { .. }) => {
                    let Some(Slot::Ready {
                        frame,
                        magic,
                        count,
                    }) = self.queue.pop_front()
                    else {
                        unreachable!("the front was ready")
                    };
                    return Ok(Some(Next {
                        frame,
                        magic,
                        count,
                        other: Vec::new(),
                    }));
                }
                Some(Slot::Thread { coded: Some(_), .. }) => {
                    let Some(Slot::Thread {
                        count,
                        coded: Some(c),
                        ..
                    }) = self.queue.pop_front()
                    else {
                        unreachable!("the front was coded")
                    };
                    let (frame, other, magic) = if c.smaller {
                        (c.out, c.raw, MAGIC_CODED)
                    } else {
                        (c.raw, c.out, MAGIC_FRAME)
                    };
                    return Ok(Some(Next {
                        frame,
                        magic,
                        count,
                        other,
                    }));
                }
                Some(Slot::Thread { coded, .. }) => {
                    // The thread answers in the order of its jobs, and every job before
                    // this one was answered: the answer is this frame's.
                    let answer = if wait {
                        self.done.recv().ok()
                    } else {
                        match self.done.try_recv() {
                            Ok(answer) => Some(answer),
                            Err(mpsc::TryRecvError::Empty) => return Ok(None),
                            Err(mpsc::TryRecvError::Disconnected) => None,
                        }
                    };
                    // The thread is gone without an answer: it panicked.
                    let answer =
                        answer.ok_or_else(|| io::Error::other("the coding thread stopped"))?;
                    *coded = Some(answer?);
                    self.at_thread -= 1;
                }
            }
        }
    }

    /// Keeps a written frame's buffers for the next frames: with those of the frames
    /// waiting (two each), at most [`BUFFERS`].
    pub(super) fn give_back(&mut self, frame: Vec<u8>, other: Vec<u8>) {
        for mut b in [frame, other] {
            if b.capacity() > 0 && self.spare.len() + 2 * self.queue.len() < BUFFERS {
                b.clear();
                self.spare.push(b);
            }
        }
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
