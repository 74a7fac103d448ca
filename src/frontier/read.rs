//! Reading F: a handle with its own position, which moves as URLs are read and which its
//! owner commits where it wants (the sieve's consumer in the cursor file; a component that
//! takes F's output may commit it with its own state, in one atomic step).

use super::prefetch::Prefetch;
use super::{open_segment, segments, End, Position, HEADER_LEN};
use crate::error::{Corruption, Error, InvalidUrl, Result};
use crate::frames::coded::Layout;
use crate::frames::{Frame, FrameError, FrameReader};
use crate::names;
use crate::storage::{File, Storage};

/// A reader of F from a position.
pub(crate) struct Reader {
    at: Position,
    /// The open segment.
    file: Option<(u64, File)>,
    /// The frame at the position, partly read: (segment, offset, frame, and in a frame of
    /// lines the byte of the next record, if known).
    frame: Option<(u64, u64, Frame, Option<usize>)>,
    /// The buffer of [`Reader::read_lines`] for frames not of lines.
    lines: Vec<u8>,
    /// The payload buffer of the last frame finished, for the next one.
    spare: Vec<u8>,
    /// The threads that read ahead, once a frame was read (`None` on one core).
    prefetch: Option<Option<Prefetch>>,
}

/// Threads that read and decode F's frames ahead of a reader.
const PREFETCH_WORKERS: usize = 2;

impl Reader {
    /// A reader from `at`.
    pub(crate) fn new(at: Position) -> Reader {
        Reader {
            at,
            file: None,
            frame: None,
            lines: Vec::new(),
            spare: Vec::new(),
            prefetch: None,
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
            let Some((frame, skip, _)) = self.current(storage, end, false)? else {
                continue; // moved to the next segment
            };
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
            self.advance(frame, skip, taken, None);
            result?;
        }
        Ok(urls)
    }

    /// [`Reader::read`] that passes the URLs as text, in chunks of whole lines each ended by
    /// a newline, with the number of URLs of each chunk: a coded frame of lines is passed as
    /// it was decoded, without copying each URL. If `each` fails, the position stays after
    /// the last chunk it accepted.
    pub(crate) fn read_lines(
        &mut self,
        storage: &dyn Storage,
        end: &End,
        max_urls: usize,
        max_bytes: usize,
        mut each: impl FnMut(&[u8], usize) -> Result<()>,
    ) -> Result<usize> {
        let (mut urls, mut bytes) = (0usize, 0usize);
        while urls < max_urls && bytes < max_bytes && self.at.consumed < end.count {
            let Some((frame, skip, hint)) = self.current(storage, end, true)? else {
                continue;
            };
            let left = frame.count as usize - skip;
            let mut taken = 0usize;
            let result;
            let (mut after, mut before) = (None, None);
            if frame.layout == Layout::Lines {
                let text = &frame.payload[..];
                let start = hint.unwrap_or_else(|| crate::lines::nth_start(text, skip));
                before = Some(start);
                let mut pos = start;
                // The decoder checked that the frame is exactly `count` lines, each ended by
                // a newline: when the rest of it passes neither bound, it is taken whole
                // without looking for its lines (what the loop below would take too).
                if urls.saturating_add(left) <= max_urls
                    && bytes.saturating_add(text.len() - start) < max_bytes
                {
                    taken = left;
                    urls += left;
                    bytes += text.len() - start - left;
                    pos = text.len();
                }
                let mut newlines = crate::lines::Finder::default();
                while taken < left && urls < max_urls && !(bytes >= max_bytes && urls > 0) {
                    let n = newlines.find(text, pos, text.len()).unwrap_or(text.len()) - pos;
                    pos += n + 1;
                    taken += 1;
                    urls += 1;
                    bytes += n;
                }
                result = each(&text[start..pos], taken);
                after = Some(pos);
            } else {
                let mut text = std::mem::take(&mut self.lines);
                text.clear();
                let mut newline = None;
                for url in frame.records().skip(skip) {
                    if urls >= max_urls || (bytes >= max_bytes && urls > 0) {
                        break;
                    }
                    // A URL holding a newline (pushed before pushes refused them) would be
                    // two lines: the call ends before it, and fails at it.
                    if let Some(at) = memchr::memchr(b'\n', url) {
                        newline = Some(at);
                        break;
                    }
                    text.extend_from_slice(url);
                    text.push(b'\n');
                    taken += 1;
                    urls += 1;
                    bytes += url.len();
                }
                result = match newline {
                    // Met first in the call: it fails there. After URLs the call passed (in
                    // this frame or those before), it ends with them.
                    Some(at) if urls == 0 => Err(Error::InvalidUrl(InvalidUrl::Newline { at })),
                    Some(_) if taken == 0 => Ok(()),
                    _ => each(&text, taken),
                };
                self.lines = text;
                if newline.is_some() && result.is_ok() {
                    self.advance(frame, skip, taken, after);
                    return Ok(urls);
                }
            }
            if result.is_err() {
                urls -= taken;
                taken = 0;
                after = before;
            }
            self.advance(frame, skip, taken, after);
            result?;
        }
        Ok(urls)
    }

    /// The frame at the position, the number of its records already read, and the byte of
    /// the next one in a frame of lines if known; `None` if the position moved to the next
    /// segment instead. `ahead`: frames are read ahead by threads (see
    /// `src/frontier/prefetch.rs`), for a caller that reads F in bulk.
    fn current(
        &mut self,
        storage: &dyn Storage,
        end: &End,
        ahead: bool,
    ) -> Result<Option<(Frame, usize, Option<usize>)>> {
        let (frame, hint) = match self.frame.take() {
            Some((seg, off, f, hint)) if seg == self.at.segment && off == self.at.offset => {
                (f, hint)
            }
            _ => match self.load_frame(storage, end, ahead)? {
                Some(f) => (f, None),
                None => return Ok(None),
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
        let hint = if skip == 0 { Some(0) } else { hint };
        Ok(Some((frame, skip, hint)))
    }

    /// Moves the position past `taken` more records of `frame`, of which `skip` were read
    /// before; `after`: the byte after them, in a frame of lines, if known.
    fn advance(&mut self, frame: Frame, skip: usize, taken: usize, after: Option<usize>) {
        self.at.consumed += taken as u64;
        if skip + taken == frame.count as usize {
            self.at.offset += frame.size();
            self.at.skip = 0;
            match &mut self.prefetch {
                Some(Some(p)) => p.give_back(frame.payload),
                _ => self.spare = frame.payload,
            }
        } else {
            self.at.skip += taken as u32;
            self.frame = Some((self.at.segment, self.at.offset, frame, after));
        }
    }

    /// Reads the frame at the position; `None` if the position moved to the next segment
    /// instead.
    fn load_frame(
        &mut self,
        storage: &dyn Storage,
        end: &End,
        ahead: bool,
    ) -> Result<Option<Frame>> {
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
        let prefetched = if ahead {
            self.prefetch
                .get_or_insert_with(|| Prefetch::start(PREFETCH_WORKERS))
                .as_mut()
                .and_then(|p| p.frame(seg, &file, limit, self.at.offset))
        } else {
            None
        };
        let read = match prefetched {
            Some(r) => r,
            None => FrameReader::new(&file, limit, u64::MAX, seg)
                .frame_with(self.at.offset, std::mem::take(&mut self.spare)),
        };
        match read {
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
