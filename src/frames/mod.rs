//! Frames: checksummed, group-committed records, the layout shared by A (the write-ahead
//! log of pushed URLs) and F (the frontier of emitted URLs).
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
//!
//! A *coded* frame (magic `FRZ1`, [`coded`]) has the same header; its payload holds its
//! records compressed or front coded, and the reader hands them on as a plain frame's.
//!
//! This module holds the frame's codec; [`writer`] appends frames (with [`behind`], the
//! thread that writes them while the caller goes on), [`reader`] reads them back.

mod ahead;
mod behind;
pub(crate) mod coded;
pub(crate) mod reader;
pub(crate) mod writer;

pub(crate) use reader::{FrameError, FrameReader};
pub(crate) use writer::FrameWriter;

use crate::format::{MAGIC_CODED, MAGIC_FRAME};

/// Bytes of a frame header.
pub(crate) const FRAME_HEADER: usize = 28;
/// The offset of `payload_len` in a frame header.
pub(crate) const PAYLOAD_LEN_AT: usize = 16;
/// Bytes of an end frame's payload: the number of records in the log before it.
pub(crate) const END_PAYLOAD: usize = 8;
/// Bytes of a tail mark's payload (zero).
pub(crate) const MARK_PAYLOAD: usize = 4;
/// Bytes of a tail mark, which follows the last frame of a marked log.
pub(crate) const MARK_LEN: u64 = (FRAME_HEADER + MARK_PAYLOAD) as u64;
/// A frame is written once its payload reaches this size.
pub(crate) const FRAME_TARGET: usize = 1 << 20;
/// Bytes written between two writeback hints ([`crate::storage::StorageFile::start_writeback`]): the system
/// starts writing them to the device while appends go on, and the next sync finds little
/// left to write (as RocksDB's `bytes_per_sync`).
pub(crate) const WRITEBACK_EVERY: u64 = 8 << 20;

/// A tail mark of `tag` in `epoch`, alone.
pub(crate) fn tail_mark(epoch: u32, tag: u64) -> Vec<u8> {
    let mut mark = Vec::with_capacity(MARK_LEN as usize);
    push_mark(&mut mark, (epoch, tag));
    mark
}

/// Appends a tail mark to `buf`.
pub(crate) fn push_mark(buf: &mut Vec<u8>, (epoch, tag): (u32, u64)) {
    let at = buf.len();
    buf.resize(at + MARK_LEN as usize, 0);
    let (head, payload) = buf[at..].split_at_mut(FRAME_HEADER);
    frame_header(head, (epoch, tag), (MARK_PAYLOAD as u32, 0), payload);
}

/// Fills the header `head` of a frame of `payload`.
pub(crate) fn frame_header(
    head: &mut [u8],
    (epoch, tag): (u32, u64),
    (len, count): (u32, u32),
    payload: &[u8],
) {
    frame_header_with(head, MAGIC_FRAME, (epoch, tag), (len, count), payload);
}

/// Fills the header `head` of a frame of `payload` with the magic `magic` (a plain or a
/// coded frame).
pub(crate) fn frame_header_with(
    head: &mut [u8],
    magic: u32,
    (epoch, tag): (u32, u64),
    (len, count): (u32, u32),
    payload: &[u8],
) {
    debug_assert!(magic == MAGIC_FRAME || magic == MAGIC_CODED);
    head[0..4].copy_from_slice(&magic.to_le_bytes());
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
pub(crate) struct Frame {
    /// Offset of the frame header in the file.
    pub offset: u64,
    /// The frame's epoch.
    pub epoch: u32,
    /// The number of records.
    pub count: u32,
    /// The payload, in the plain layout (a coded frame's records decoded).
    pub payload: Vec<u8>,
    /// Bytes of the payload on disk (less than `payload`'s for a coded frame).
    pub disk_len: u64,
    /// For the end frame: the number of records in the log before it.
    pub end: Option<u64>,
    /// How `payload` holds the records.
    pub layout: coded::Layout,
    /// The index of the first record `payload` holds: 0 but in a frame read in a window
    /// ([`FrameReader::frame_window`]).
    pub first: u32,
    /// Whether zstd decompressed it (coded layouts 1, 2 and 6): reading it again costs
    /// several times what a front-coded frame's read does.
    pub compressed: bool,
}

impl Frame {
    /// The records of the frame its payload holds, in order (none in a seal or the end
    /// frame).
    pub fn records(&self) -> Records<'_> {
        Records {
            payload: if self.end.is_some() {
                &[]
            } else {
                &self.payload
            },
            pos: 0,
            lines: self.layout == coded::Layout::Lines,
            newlines: crate::lines::Finder::default(),
        }
    }

    /// The records of the frame from its record `i` on, of those its payload holds (none if
    /// `i` is before the first).
    pub fn records_from(&self, i: u32) -> std::iter::Skip<Records<'_>> {
        debug_assert!(
            i >= self.first,
            "record {i} before the window at {}",
            self.first
        );
        let skip = match i.checked_sub(self.first) {
            Some(n) => n as usize,
            None => usize::MAX,
        };
        self.records().skip(skip)
    }

    /// Bytes of the frame, header included.
    pub fn size(&self) -> u64 {
        FRAME_HEADER as u64 + self.disk_len
    }
}

/// Iterator over the records of a frame.
pub(crate) struct Records<'a> {
    payload: &'a [u8],
    pos: usize,
    lines: bool,
    /// Finds the ends of the lines, in the lines layout.
    newlines: crate::lines::Finder,
}

impl<'a> Records<'a> {
    /// The records of `payload`, in the plain layout (each a 4-byte length and its bytes).
    pub(crate) fn plain(payload: &'a [u8]) -> Records<'a> {
        Records {
            payload,
            pos: 0,
            lines: false,
            newlines: crate::lines::Finder::default(),
        }
    }

    /// Bytes of the payload passed over so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.payload.get(self.pos..)?;
        if self.lines {
            let start = self.pos;
            let end = self
                .newlines
                .find(self.payload, start, self.payload.len())?;
            self.pos = end + 1;
            return Some(&self.payload[start..end]);
        }
        if rest.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes(rest[..4].try_into().ok()?) as usize;
        self.pos += 4 + len;
        rest.get(4..4 + len)
    }

    fn nth(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.lines && n > 0 {
            // The lines passed over are counted in their blocks' masks, not found one by one.
            let rest = self.payload.get(self.pos..)?;
            self.pos += crate::lines::nth_start(rest, n);
        } else {
            for _ in 0..n {
                self.next()?;
            }
        }
        self.next()
    }
}

/// Rewrites the header of the frame at the start of `frame` (its lengths as they are) for a
/// valid crc: for fuzz harnesses.
pub(crate) fn reseal_frame(frame: &mut [u8]) {
    let epoch = u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes"));
    let tag = u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(frame[16..20].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(frame[20..24].try_into().expect("4 bytes"));
    // A coded frame stays coded: its decoder is what an edit under a valid checksum reaches.
    let magic = match u32::from_le_bytes(frame[0..4].try_into().expect("4 bytes")) {
        MAGIC_CODED => MAGIC_CODED,
        _ => MAGIC_FRAME,
    };
    let (head, payload) = frame.split_at_mut(FRAME_HEADER);
    frame_header_with(head, magic, (epoch, tag), (len, count), payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_of_a_frame_of_lines_from_any_one_on_are_its_lines() {
        // Lines of 1 to 150 bytes, so that some end at and around the edges of 64 bytes.
        let lines: Vec<Vec<u8>> = (0..300u32)
            .map(|i| vec![b'a' + (i % 26) as u8; 1 + (i as usize * 37) % 150])
            .collect();
        let mut payload = Vec::new();
        for l in &lines {
            payload.extend_from_slice(l);
            payload.push(b'\n');
        }
        let frame = Frame {
            offset: 0,
            epoch: 0,
            count: lines.len() as u32,
            disk_len: payload.len() as u64,
            payload,
            end: None,
            layout: coded::Layout::Lines,
            first: 0,
            compressed: false,
        };
        for from in 0..=lines.len() + 2 {
            let got: Vec<&[u8]> = frame.records().skip(from).collect();
            let want: Vec<&[u8]> = lines.iter().skip(from).map(|l| &l[..]).collect();
            assert_eq!(got, want, "from {from}");
            let mut r = frame.records();
            assert_eq!(r.nth(from), lines.get(from).map(|l| &l[..]));
            assert_eq!(r.next(), lines.get(from + 1).map(|l| &l[..]));
        }
    }
}
