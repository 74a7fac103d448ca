//! The thread that writes a writer's frames while the caller fills the next one.

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::storage::File;

/// Frames a [`super::FrameWriter::write_behind`] writer may have handed to its thread and not yet
/// seen written: the caller fills the next while the thread writes these.
pub(crate) const BEHIND: usize = 2;

/// A frame for the writing thread: its bytes, its offset, and the writeback hint after it.
struct Job {
    frame: Vec<u8>,
    at: u64,
    hint: Option<(u64, u64)>,
}

/// The thread of a [`super::FrameWriter::write_behind`] writer, and the frames it holds.
pub(super) struct Behind {
    jobs: Option<mpsc::Sender<Job>>,
    /// Each frame's buffer back from the thread, with the outcome of its write.
    done: mpsc::Receiver<(Vec<u8>, io::Result<()>)>,
    /// Frames handed over whose outcome has not been received.
    queued: usize,
    thread: Option<JoinHandle<()>>,
}

impl Behind {
    /// Starts the thread that writes to `file`; None if it cannot be started.
    pub(super) fn start(file: File) -> Option<Behind> {
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
                        file.raw().write_all_at(&job.frame, job.at)
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
    /// (After an error the writer makes no more calls: see `FrameWriter::guard`.)
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
    pub(super) fn spare(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.receive(self.queued >= BEHIND)
    }

    pub(super) fn send(
        &mut self,
        frame: Vec<u8>,
        at: u64,
        hint: Option<(u64, u64)>,
    ) -> io::Result<()> {
        let jobs = self.jobs.as_ref().expect("the sender lives until drop");
        jobs.send(Job { frame, at, hint })
            .map_err(|_| io::Error::other("the log's writing thread stopped"))?;
        self.queued += 1;
        Ok(())
    }

    /// Waits until every frame handed over is written.
    pub(super) fn drain(&mut self) -> io::Result<()> {
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
