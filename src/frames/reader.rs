//! The reader of frames: each frame checked (magic, checksum, lengths, record structure)
//! before anything in it is used.

use super::{coded, Frame, END_PAYLOAD, FRAME_HEADER, MARK_PAYLOAD};
use crate::error::{Corruption, Error, Result};
use crate::format::{MAGIC_CODED, MAGIC_FRAME};
use crate::storage::File;

/// Bytes a frame's first read asks for: its header and the start of its payload.
const FIRST_READ: usize = 2048;

/// Why a frame could not be read.
pub(crate) enum FrameError {
    /// Nothing more: the offset is the end of the file, or a valid frame with another tag
    /// (of the file's earlier contents) or a tail mark starts there.
    End,
    /// The bytes at the offset are not a valid frame.
    Invalid(Corruption),
    /// The storage failed.
    Io(Error),
}

/// Reads frames of a log file.
pub(crate) struct FrameReader<'a> {
    file: &'a File,
    len: u64,
    max_payload: u64,
    tag: u64,
    marks: bool,
}

impl<'a> FrameReader<'a> {
    /// A reader of the frames tagged `tag` in `file`, whose length is `len`; frames with a
    /// payload larger than `max_payload` are invalid.
    pub(crate) fn new(file: &'a File, len: u64, max_payload: u64, tag: u64) -> FrameReader<'a> {
        FrameReader {
            file,
            len,
            max_payload,
            tag,
            marks: false,
        }
    }

    /// Stops at a valid tail mark of the log's tag as at the end of the file (without this,
    /// a mark is an invalid frame).
    pub(crate) fn with_tail_marks(mut self) -> FrameReader<'a> {
        self.marks = true;
        self
    }

    /// The file read.
    pub(crate) fn file(&self) -> &'a File {
        self.file
    }

    /// Reads the frame at `offset`.
    pub(crate) fn frame_at(&self, offset: u64) -> std::result::Result<Frame, FrameError> {
        self.frame_with(offset, Vec::new())
    }

    /// Reads the frame at `offset` into `spare`, the payload of an earlier frame given back:
    /// a scan of a log reuses one buffer instead of allocating (and faulting in) one per
    /// frame. (One function over 80 lines: its checks are in the order that decides what a
    /// reader may conclude, the end, a torn write or damage, and read best in one piece.)
    pub(crate) fn frame_with(
        &self,
        offset: u64,
        spare: Vec<u8>,
    ) -> std::result::Result<Frame, FrameError> {
        self.frame_window(offset, spare, (0, u32::MAX))
    }

    /// [`FrameReader::frame_with`], whose payload holds at least the frame's records `from`
    /// to `to` (exclusive): all of them but in a frame front coded alone, decoded only in
    /// that window (see [`coded::decode_window_in_place`]). Its `count` is still the frame's,
    /// and its `first` the index of the first record its payload holds.
    pub(crate) fn frame_window(
        &self,
        offset: u64,
        spare: Vec<u8>,
        (from, to): (u32, u32),
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
        // The header and the start of the payload in one read: most frames of the queues'
        // runs, read one per hand-out, fit whole. A mapped file's bytes are used in place.
        let first_len = (FIRST_READ as u64).min(avail) as usize;
        let read;
        let first: &[u8] = match self.file.mapped(offset, first_len) {
            Some(bytes) => bytes,
            None => {
                let mut buf = [0u8; FIRST_READ];
                self.file
                    .read_exact_at(&mut buf[..first_len], offset)
                    .map_err(FrameError::Io)?;
                read = buf;
                &read[..first_len]
            }
        };
        let h: [u8; FRAME_HEADER] = first[..FRAME_HEADER].try_into().expect("the header");
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let tag = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        let (magic, epoch, payload_len, count, stored) =
            (word(0), word(4), word(16), word(20), word(24));
        if h == [0u8; FRAME_HEADER] && crate::planted::active(crate::planted::Bug::ZeroRecord) {
            return Err(FrameError::End);
        }
        if magic != MAGIC_FRAME && magic != MAGIC_CODED {
            return Err(FrameError::Invalid(Corruption::Magic {
                expected: MAGIC_FRAME,
                found: magic,
            }));
        }
        let payload_len = payload_len as u64;
        if payload_len > self.max_payload {
            return Err(FrameError::Invalid(Corruption::OutOfRange {
                field: "frame payload length",
                found: payload_len,
                limit: self.max_payload.saturating_add(1),
            }));
        }
        if payload_len > avail - FRAME_HEADER as u64 {
            return Err(FrameError::Invalid(Corruption::Truncated {
                needed: FRAME_HEADER as u64 + payload_len,
                available: avail,
            }));
        }
        let mut payload = spare;
        let frame = |payload, end, layout, first, compressed| Frame {
            offset,
            epoch,
            count,
            payload,
            disk_len: payload_len,
            end,
            layout,
            first,
            compressed,
        };
        let in_first = FRAME_HEADER + payload_len as usize <= first_len;
        if in_first && magic == MAGIC_CODED && count > 0 {
            // A coded frame the first read holds whole (a Q run's, read by a hand-out) is
            // decoded from that read, into the spare buffer: its bytes are not copied first.
            // (The checks are the general path's, in its order, for a count above 0.)
            let coded_bytes = &first[FRAME_HEADER..FRAME_HEADER + payload_len as usize];
            check_crc(&h, coded_bytes, stored)?;
            if tag != self.tag {
                return Err(FrameError::End);
            }
            let (layout, first_record) =
                coded::decode_window_into(coded_bytes, count, (from, to), &mut payload)
                    .map_err(FrameError::Invalid)?;
            let compressed = coded::is_compressed(coded_bytes);
            return Ok(frame(payload, None, layout, first_record, compressed));
        }
        // Only the bytes the spare buffer lacks are zeroed first: the read fills them all.
        if payload.len() > payload_len as usize {
            payload.truncate(payload_len as usize);
        } else {
            payload.resize(payload_len as usize, 0);
        }
        let have = (first_len - FRAME_HEADER).min(payload.len());
        payload[..have].copy_from_slice(&first[FRAME_HEADER..FRAME_HEADER + have]);
        if have < payload.len() {
            self.file
                .read_exact_at(&mut payload[have..], offset + (FRAME_HEADER + have) as u64)
                .map_err(FrameError::Io)?;
        }
        check_crc(&h, &payload, stored)?;
        if tag != self.tag || (self.marks && count == 0 && payload.len() == MARK_PAYLOAD) {
            return Err(FrameError::End);
        }
        if count == 0 && payload.len() == END_PAYLOAD {
            let records = u64::from_le_bytes(payload[..].try_into().expect("8 bytes"));
            return Ok(frame(
                payload,
                Some(records),
                coded::Layout::Plain,
                0,
                false,
            ));
        }
        // A valid checksum over a malformed payload is not a torn write: check the structure.
        let (mut layout, mut first_record) = (coded::Layout::Plain, 0);
        let compressed = magic == MAGIC_CODED && coded::is_compressed(&payload);
        if magic == MAGIC_CODED {
            if count == 0 {
                return Err(FrameError::Invalid(Corruption::Invalid {
                    field: "record count of a coded frame",
                    expected: "at least 1",
                    found: 0,
                }));
            }
            (layout, first_record) = coded::decode_window_in_place(&mut payload, count, (from, to))
                .map_err(FrameError::Invalid)?;
        }
        if magic != MAGIC_CODED {
            // (A coded frame's decoder checked the records it decoded.)
            check_records(&payload, count).map_err(FrameError::Invalid)?;
        }
        Ok(frame(payload, None, layout, first_record, compressed))
    }

    /// Looks for a valid frame of this log's tag starting anywhere after `from`; returns its
    /// offset and epoch. Used only on a damaged log, to tell a torn tail from corruption.
    pub(crate) fn find_valid_after(&self, from: u64) -> Result<Option<(u64, u32)>> {
        const CHUNK: u64 = 1 << 16;
        let (plain, coded) = (MAGIC_FRAME.to_le_bytes(), MAGIC_CODED.to_le_bytes());
        let mut off = from + 1;
        while off + FRAME_HEADER as u64 <= self.len {
            let n = CHUNK.min(self.len - off) as usize;
            let mut buf = vec![0u8; n];
            self.file.read_exact_at(&mut buf, off)?;
            for i in 0..n.saturating_sub(3) {
                if buf[i..i + 4] == plain || buf[i..i + 4] == coded {
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

/// Checks the crc `stored` of a frame's header `h` and payload `payload`.
fn check_crc(
    h: &[u8; FRAME_HEADER],
    payload: &[u8],
    stored: u32,
) -> std::result::Result<(), FrameError> {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&h[0..24]);
    hasher.update(payload);
    let computed = hasher.finalize();
    if computed != stored {
        return Err(FrameError::Invalid(Corruption::Checksum {
            stored,
            computed,
        }));
    }
    Ok(())
}

/// Checks that `payload` is exactly `count` records, each a length of at least 1 and that many
/// bytes.
fn check_records(payload: &[u8], count: u32) -> std::result::Result<(), Corruption> {
    let mut pos = 0usize;
    let mut n = 0u32;
    while pos < payload.len() {
        if pos + 4 > payload.len() {
            return Err(Corruption::Invalid {
                field: "bytes left for a record's length",
                expected: "none, or at least 4",
                found: (payload.len() - pos) as u64,
            });
        }
        let len = u32::from_le_bytes(payload[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        if len == 0 || pos + 4 + len > payload.len() {
            return Err(Corruption::Invalid {
                field: "record length",
                expected: "1 to the bytes left in the frame",
                found: len as u64,
            });
        }
        pos += 4 + len;
        n += 1;
    }
    if n != count {
        return Err(Corruption::Mismatch {
            field: "frame record count",
            expected: u64::from(n),
            found: u64::from(count),
        });
    }
    Ok(())
}
