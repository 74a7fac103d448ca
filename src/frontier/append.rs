//! Appending new URLs to F: to the tail segment after its committed end, rolling over to a
//! new segment past [`SEGMENT_TARGET`] bytes. Nothing appended counts until the manifest
//! commits the new [`End`] that [`Appender::finish`] returns.

use super::{header, End, HEADER_LEN, SEGMENT_TARGET};
use crate::error::Result;
use crate::frames::FrameWriter;
use crate::names;
use crate::storage::{Storage, StorageExt};

/// Appends URLs to F.
pub(crate) struct Appender {
    out: FrameWriter,
    /// The segment `out` writes.
    tail: u64,
    /// URLs in F before this appender's first.
    before: u64,
    emitted: u64,
    /// The epoch of the frames written (the flush's number).
    epoch: u32,
}

impl Appender {
    /// An appender after F's committed `end`; new segments take their ids from `next_id`.
    /// Frames are written in `epoch`, coded: lines or front-coded records, compressed with
    /// zstd (a plain sieve's F and a frontier's alike: a frontier's F waits for its mover,
    /// which reads it part by part as hand-outs need queues, so it may hold many URLs).
    pub(crate) fn open(
        storage: &dyn Storage,
        end: End,
        next_id: &mut u64,
        epoch: u32,
    ) -> Result<Appender> {
        if end.tail_len >= SEGMENT_TARGET {
            let (out, tail) = Self::create(storage, next_id, end.count, epoch)?;
            return Ok(Appender {
                out,
                tail,
                before: end.count,
                emitted: 0,
                epoch,
            });
        }
        let file = storage.open_file(&names::f(end.tail))?;
        let mut start = end.tail_len;
        if crate::planted::active(crate::planted::Bug::KeepFTail) {
            start = file.len()?;
        }
        Ok(Appender {
            out: code(FrameWriter::new(file, start, 0, end.tail, epoch)),
            tail: end.tail,
            before: end.count,
            emitted: 0,
            epoch,
        })
    }

    /// Creates F segment `next_id`, whose first URL is number `first`.
    fn create(
        storage: &dyn Storage,
        next_id: &mut u64,
        first: u64,
        epoch: u32,
    ) -> Result<(FrameWriter, u64)> {
        let id = *next_id;
        *next_id += 1;
        let f = storage.create_file(&names::f(id))?;
        f.write_all_at(&header(id, first), 0)?;
        Ok((code(FrameWriter::new(f, HEADER_LEN, 0, id, epoch)), id))
    }

    /// Appends `url`; past [`SEGMENT_TARGET`] bytes the segment is synced and the next one
    /// created, with an id from `next_id`.
    pub(crate) fn append(
        &mut self,
        storage: &dyn Storage,
        next_id: &mut u64,
        url: &[u8],
    ) -> Result<()> {
        self.out.append(url)?;
        self.emitted += 1;
        // The frames the coding thread has not given back yet are written first, so that
        // where a segment ends depends on the frames made, not on when the thread ended
        // each: the disk operations stay in one order.
        if self.out.written_end_bound() >= SEGMENT_TARGET {
            self.out.write_waiting()?;
        }
        if self.out.written_end() >= SEGMENT_TARGET {
            self.out.sync()?;
            let first = self.before + self.emitted;
            let (out, tail) = Self::create(storage, next_id, first, self.epoch)?;
            self.out = out;
            self.tail = tail;
        }
        Ok(())
    }

    /// Syncs what was appended; returns F's new end, for the manifest to commit.
    pub(crate) fn finish(mut self) -> Result<End> {
        self.out.sync()?;
        Ok(End {
            tail: self.tail,
            tail_len: self.out.end(),
            count: self.before + self.emitted,
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: F's appenders of this thread front code alone (layout 3), as a frontier's F was
    /// written before it was compressed.
    pub(crate) static FRONT_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `w` writing coded frames, compressed.
fn code(w: FrameWriter) -> FrameWriter {
    #[cfg(test)]
    if FRONT_ONLY.with(std::cell::Cell::get) {
        return w.coded_front(crate::frames::coded::Head::None);
    }
    // Compressing is most of a flush's work on F: a second thread does half of it.
    w.coded().code_ahead()
}
