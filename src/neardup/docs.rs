//! D, the log of stored documents (`docs.log`), and its index of frames (`docs.idx`).
//!
//! Document `n` is the `n`-th record of D: its fingerprint, the nearest stored document
//! found when it was stored (within the k of that call) and its id. Records are written in
//! frames (the frames of A and F, tag 0) of at most [`FRAME_TARGET`] bytes; each frame gets
//! an entry in the index, so that a document is found by one binary search in memory and one
//! frame read. Both files are appended, and their committed lengths are in the manifest:
//! anything past them is cut at open.

use crate::error::{Corruption, Error, Result};
use crate::format::{crc, ByteReader, PutLe};
use crate::frames::{frame_header, Frame, FrameError, FrameReader, FRAME_HEADER};
use crate::storage::{File, Storage, StorageExt};

use super::segment::{version, VERSION};

/// The name of D.
pub(crate) const LOG: &str = "docs.log";
/// The name of D's index.
pub(crate) const INDEX: &str = "docs.idx";
/// Magic of D.
const MAGIC_LOG: u32 = u32::from_le_bytes(*b"CRVD");
/// Magic of D's index.
const MAGIC_INDEX: u32 = u32::from_le_bytes(*b"CRVI");
/// Bytes of either file's header.
pub(crate) const HEADER: u64 = 12;
/// Bytes of an index entry.
const INDEX_ENTRY: u64 = 24;
/// Payload bytes at which a frame is written.
const FRAME_TARGET: usize = 64 << 10;
/// The largest payload a frame of D may have: a full frame plus one record of the longest id.
pub(crate) const MAX_PAYLOAD: u64 = (FRAME_TARGET + MAX_ID + 32) as u64;
/// The longest document id, in bytes.
pub const MAX_ID: usize = 64 << 10;

/// A record of D.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DocRecord {
    /// The fingerprint.
    pub fp: u64,
    /// The nearest stored document when it was stored, and its distance.
    pub nearest: Option<(u64, u32)>,
    /// The id.
    pub id: Vec<u8>,
}

/// Parses a record of D.
pub(crate) fn parse_record(rec: &[u8], name: &str, at: u64) -> Result<DocRecord> {
    if rec.len() < 18 {
        return Err(Error::corrupt(
            name,
            at,
            Corruption::Truncated {
                needed: 18,
                available: rec.len() as u64,
            },
        ));
    }
    let fp = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
    let m = u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes"));
    let d = rec[16] as u32;
    let nearest = match (m, d) {
        (u64::MAX, 255) => None,
        (m, d) if m != u64::MAX && d <= 64 => Some((m, d)),
        _ => {
            return Err(Error::corrupt(
                name,
                at,
                Corruption::Invalid {
                    field: "nearest document",
                    expected: "a document and a distance up to 64, or none",
                    found: d as u64,
                },
            ))
        }
    };
    Ok(DocRecord {
        fp,
        nearest,
        id: rec[17..].to_vec(),
    })
}

/// A file header of `magic`.
fn header(magic: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER as usize);
    h.put_u32(magic);
    h.put_u32(VERSION);
    let c = crc(&h);
    h.put_u32(c);
    h
}

/// Creates both files, empty, synced (the caller fsyncs the directory).
pub(crate) fn create(storage: &dyn Storage) -> Result<()> {
    for (name, magic) in [(LOG, MAGIC_LOG), (INDEX, MAGIC_INDEX)] {
        let f = storage.create_file(name)?;
        f.write_all_at(&header(magic), 0)?;
        f.sync()?;
    }
    Ok(())
}

/// A frame of D in the index: its first document, offset and record count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameInfo {
    pub first: u64,
    pub offset: u64,
    pub count: u32,
}

/// D and its index, open for appending and reading.
pub(crate) struct Docs {
    log: File,
    index: File,
    /// Committed or written lengths.
    pub log_len: u64,
    pub index_len: u64,
    /// The frames, in order.
    frames: Vec<FrameInfo>,
    /// Documents in the log (written or buffered).
    pub docs: u64,
    /// The frame being filled: its payload and record count.
    payload: Vec<u8>,
    count: u32,
    /// The last frame read, for lookups in document order.
    cached: Option<(usize, Frame)>,
}

impl Docs {
    /// Bytes of its sparse index in memory.
    pub(crate) fn index_memory(&self) -> usize {
        self.frames.capacity() * std::mem::size_of::<FrameInfo>()
    }

    /// Opens D and its index at the committed lengths (cutting anything past them when
    /// `cut`; `check` does not) and
    /// reads the index into memory; `docs` documents must be in it.
    pub(crate) fn open(
        storage: &dyn Storage,
        log_len: u64,
        index_len: u64,
        docs: u64,
        cut: bool,
    ) -> Result<Docs> {
        let log = open_cut(storage, LOG, MAGIC_LOG, log_len, cut)?;
        let index = open_cut(storage, INDEX, MAGIC_INDEX, index_len, cut)?;
        if !(index_len - HEADER).is_multiple_of(INDEX_ENTRY) {
            return Err(Error::corrupt(
                INDEX,
                index_len,
                Corruption::Invalid {
                    field: "committed length",
                    expected: "a whole number of entries",
                    found: index_len,
                },
            ));
        }
        let mut bytes = vec![0u8; (index_len - HEADER) as usize];
        index.read_exact_at(&mut bytes, HEADER)?;
        let mut frames = Vec::with_capacity(bytes.len() / INDEX_ENTRY as usize);
        let (mut next_doc, mut next_off) = (0u64, HEADER);
        for (i, e) in bytes.chunks_exact(INDEX_ENTRY as usize).enumerate() {
            let at = HEADER + i as u64 * INDEX_ENTRY;
            let mut r = ByteReader::new(e, INDEX, at);
            let f = FrameInfo {
                first: r.u64()?,
                offset: r.u64()?,
                count: r.u32()?,
            };
            r.check_crc()?;
            if f.first != next_doc || f.offset < next_off || f.offset >= log_len || f.count == 0 {
                return Err(Error::corrupt(
                    INDEX,
                    at,
                    Corruption::Invalid {
                        field: "frame entry",
                        expected: "frames in order, each after the last, inside the log",
                        found: f.offset,
                    },
                ));
            }
            next_doc = f.first + f.count as u64;
            next_off = f.offset + FRAME_HEADER as u64;
            frames.push(f);
        }
        if next_doc != docs {
            return Err(Error::corrupt(
                INDEX,
                index_len,
                Corruption::Mismatch {
                    field: "documents in the index",
                    expected: docs,
                    found: next_doc,
                },
            ));
        }
        Ok(Docs {
            log,
            index,
            log_len,
            index_len,
            frames,
            docs,
            payload: Vec::new(),
            count: 0,
            cached: None,
        })
    }

    /// Buffers the record of the next document.
    pub(crate) fn append(&mut self, fp: u64, nearest: Option<(u64, u32)>, id: &[u8]) -> Result<()> {
        let (m, d) = nearest.map_or((u64::MAX, 255u8), |(m, d)| (m, d as u8));
        self.payload.put_u32(17 + id.len() as u32);
        self.payload.put_u64(fp);
        self.payload.put_u64(m);
        self.payload.push(d);
        self.payload.extend_from_slice(id);
        self.count += 1;
        self.docs += 1;
        if self.payload.len() >= FRAME_TARGET {
            self.write_frame()?;
        }
        Ok(())
    }

    /// Writes the buffered records as a frame, and its index entry.
    fn write_frame(&mut self) -> Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        let mut frame = vec![0u8; FRAME_HEADER];
        frame_header(
            &mut frame,
            (0, 0),
            (self.payload.len() as u32, self.count),
            &self.payload,
        );
        frame.extend_from_slice(&self.payload);
        self.log.write_all_at(&frame, self.log_len)?;
        let info = FrameInfo {
            first: self.docs - self.count as u64,
            offset: self.log_len,
            count: self.count,
        };
        let mut e = Vec::with_capacity(INDEX_ENTRY as usize);
        e.put_u64(info.first);
        e.put_u64(info.offset);
        e.put_u32(info.count);
        let c = crc(&e);
        e.put_u32(c);
        self.index.write_all_at(&e, self.index_len)?;
        self.log_len += frame.len() as u64;
        self.index_len += INDEX_ENTRY;
        self.frames.push(info);
        self.payload.clear();
        self.count = 0;
        Ok(())
    }

    /// Writes what is buffered and fsyncs both files.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.write_frame()?;
        self.log.sync()?;
        self.index.sync()
    }

    /// The record of document `doc` (written, not buffered).
    pub(crate) fn record(&mut self, doc: u64) -> Result<DocRecord> {
        let i = self
            .frames
            .partition_point(|f| f.first + f.count as u64 <= doc);
        let info = *self.frames.get(i).ok_or_else(|| {
            Error::corrupt(
                INDEX,
                self.index_len,
                Corruption::OutOfRange {
                    field: "document",
                    found: doc,
                    limit: self.docs,
                },
            )
        })?;
        if self.cached.as_ref().map(|c| c.0) != Some(i) {
            let reader = FrameReader::new(&self.log, self.log_len, MAX_PAYLOAD, 0);
            let frame = match reader.frame_at(info.offset) {
                Ok(f) => f,
                Err(FrameError::Io(e)) => return Err(e),
                Err(FrameError::End) => {
                    return Err(self.log.corrupt(info.offset, Corruption::Missing))
                }
                Err(FrameError::Invalid(c)) => return Err(self.log.corrupt(info.offset, c)),
            };
            if frame.count != info.count || frame.end.is_some() {
                return Err(self.log.corrupt(
                    info.offset,
                    Corruption::Mismatch {
                        field: "records in the frame",
                        expected: info.count as u64,
                        found: frame.count as u64,
                    },
                ));
            }
            self.cached = Some((i, frame));
        }
        let (_, frame) = self.cached.as_ref().expect("cached above");
        let rec = frame
            .records()
            .nth((doc - info.first) as usize)
            .expect("the frame holds its count of records");
        parse_record(rec, LOG, info.offset)
    }

    /// Checks that the frames of the index follow one another to the committed end of D
    /// (for `check`; the records themselves are read by [`Docs::record`]).
    pub(crate) fn verify_layout(&self) -> Result<()> {
        let reader = FrameReader::new(&self.log, self.log_len, MAX_PAYLOAD, 0);
        let mut next = HEADER;
        for f in &self.frames {
            if f.offset != next {
                return Err(self.log.corrupt(
                    f.offset,
                    Corruption::Mismatch {
                        field: "frame offset",
                        expected: next,
                        found: f.offset,
                    },
                ));
            }
            next += match reader.frame_at(f.offset) {
                Ok(frame) => frame.size(),
                Err(FrameError::Io(e)) => return Err(e),
                Err(FrameError::End) => {
                    return Err(self.log.corrupt(f.offset, Corruption::Missing))
                }
                Err(FrameError::Invalid(c)) => return Err(self.log.corrupt(f.offset, c)),
            };
        }
        if next != self.log_len {
            return Err(self.log.corrupt(
                next,
                Corruption::Mismatch {
                    field: "committed length",
                    expected: next,
                    found: self.log_len,
                },
            ));
        }
        Ok(())
    }
}

/// Opens `name`, checks its header, and cuts it to `len` (synced) if it is longer and `cut`.
fn open_cut(storage: &dyn Storage, name: &str, magic: u32, len: u64, cut: bool) -> Result<File> {
    let f = storage.open_file(name)?;
    let actual = f.len()?;
    if actual < len || len < HEADER {
        return Err(f.corrupt(
            actual.min(len),
            Corruption::Truncated {
                needed: len.max(HEADER),
                available: actual,
            },
        ));
    }
    let mut h = [0u8; HEADER as usize];
    f.read_exact_at(&mut h, 0)?;
    let mut r = ByteReader::new(&h, name, 0);
    r.magic(magic)?;
    version(&mut r)?;
    r.check_crc()?;
    if actual > len && cut {
        f.set_len(len)?;
        f.sync()?;
    }
    Ok(f)
}
