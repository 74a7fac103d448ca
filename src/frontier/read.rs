//! Reading F: a handle with its own position, which moves as URLs are read and which its
//! owner commits where it wants (the sieve's consumer in the cursor file; a component that
//! takes F's output may commit it with its own state, in one atomic step).

use super::{open_segment, segments, End, Position, HEADER_LEN};
use crate::error::{Corruption, Error, Result};
use crate::frames::{Frame, FrameError, FrameReader};
use crate::names;
use crate::storage::{File, Storage};

/// A reader of F from a position.
pub(crate) struct Reader {
    at: Position,
    /// The open segment.
    file: Option<(u64, File)>,
    /// The frame at the position, partly read: (segment, offset, frame).
    frame: Option<(u64, u64, Frame)>,
    /// The payload buffer of the last frame finished, for the next one.
    spare: Vec<u8>,
}

impl Reader {
    /// A reader from `at`.
    pub(crate) fn new(at: Position) -> Reader {
        Reader {
            at,
            file: None,
            frame: None,
            spare: Vec::new(),
        }
    }

    /// The position after the last URL read.
    pub(crate) fn position(&self) -> Position {
        self.at
    }

    /// Moves back (or forward) to `to`, a position of F.
    pub(crate) fn seek(&mut self, to: Position) {
        self.at = to;
        self.frame = None;
    }

    /// Passes URLs after the position, up to F's committed `end`, to `each`, until `max_urls`
    /// URLs or `max_bytes` bytes of URLs were passed (at least one URL, if any is available),
    /// and moves the position past them. Returns how many were passed. If `each` fails, the
    /// position stays after the last URL it accepted.
    pub(crate) fn read(
        &mut self,
        storage: &dyn Storage,
        end: &End,
        max_urls: usize,
        max_bytes: usize,
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<usize> {
        let (mut urls, mut bytes) = (0usize, 0usize);
        while urls < max_urls && bytes < max_bytes && self.at.consumed < end.count {
            let frame = match self.frame.take() {
                Some((seg, off, f)) if seg == self.at.segment && off == self.at.offset => f,
                _ => match self.load_frame(storage, end)? {
                    Some(f) => f,
                    None => continue, // moved to the next segment
                },
            };
            let skip = self.at.skip as usize;
            if skip >= frame.count as usize {
                return Err(Error::corrupt(
                    names::CURSOR,
                    0,
                    Corruption::OutOfRange {
                        field: "records of the frame already consumed",
                        found: skip as u64,
                        limit: u64::from(frame.count),
                    },
                ));
            }
            let mut taken = 0usize;
            let mut result = Ok(());
            for url in frame.records().skip(skip) {
                if urls >= max_urls || (bytes >= max_bytes && urls > 0) {
                    break;
                }
                if let Err(e) = each(url) {
                    result = Err(e);
                    break;
                }
                taken += 1;
                urls += 1;
                bytes += url.len();
            }
            self.at.consumed += taken as u64;
            if skip + taken == frame.count as usize {
                self.at.offset += frame.size();
                self.at.skip = 0;
                self.spare = frame.payload;
            } else {
                self.at.skip += taken as u32;
                self.frame = Some((self.at.segment, self.at.offset, frame));
            }
            result?;
        }
        Ok(urls)
    }

    /// Reads the frame at the position; `None` if the position moved to the next segment
    /// instead.
    fn load_frame(&mut self, storage: &dyn Storage, end: &End) -> Result<Option<Frame>> {
        let seg = self.at.segment;
        let file = match &self.file {
            Some((id, f)) if *id == seg => f.clone(),
            _ => {
                let (f, _) = open_segment(storage, seg)?;
                self.file = Some((seg, f.clone()));
                f
            }
        };
        let limit = if seg == end.tail {
            end.tail_len
        } else {
            file.len()?
        };
        if self.at.offset >= limit {
            // This segment is consumed: move to the next one.
            let next = segments(storage)?
                .into_iter()
                .find(|&id| id > seg)
                .ok_or_else(|| file.corrupt(limit, Corruption::Missing))?;
            let (nf, first) = open_segment(storage, next)?;
            if first != self.at.consumed {
                return Err(nf.corrupt(
                    16,
                    Corruption::Mismatch {
                        field: "URLs before the segment",
                        expected: self.at.consumed,
                        found: first,
                    },
                ));
            }
            self.at = Position {
                segment: next,
                offset: HEADER_LEN,
                skip: 0,
                consumed: first,
            };
            self.file = Some((next, nf));
            return Ok(None);
        }
        let reader = FrameReader::new(&file, limit, u64::MAX, seg);
        match reader.frame_with(self.at.offset, std::mem::take(&mut self.spare)) {
            Ok(f) => Ok(Some(f)),
            Err(FrameError::Io(e)) => Err(e),
            Err(FrameError::End) => Err(file.corrupt(
                self.at.offset,
                Corruption::Truncated {
                    needed: 1,
                    available: 0,
                },
            )),
            Err(FrameError::Invalid(what)) => Err(file.corrupt(self.at.offset, what)),
        }
    }
}
