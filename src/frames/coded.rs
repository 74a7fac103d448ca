//! Coded frames: the records of a frame as lines or front coded, then compressed with zstd,
//! or front coded alone, so that F holds about a third of the URL bytes (measured in
//! `docs/performance.md`, "Fewer bytes per URL").
//!
//! ```text
//! coded payload := layout u8 | raw_len u32 | inner_len u32 | body
//! layout 1, lines:      body := zstd frame of inner;  inner := count x ( record | '\n' )
//!                                                          (no record holds a '\n')
//! layout 2, front:      body := zstd frame of inner;  inner := count x front
//! layout 3, front only: body := inner := count x front
//! layout 4, head front: body := inner := count x ( head 8 bytes | front of the rest )
//! layout 5, seq front:  body := inner := count x ( step varint64 | front of the rest )
//! layout 6, seq front, compressed: body := zstd frame of inner;  inner := layout 5's
//! front := shared varint | rest_len varint | rest
//!   step:     the record's first 8 bytes, a u64 LE (a Q run's seq), as the zigzag of its
//!             difference to the previous record's (wrapping; to 0 for the first), a LEB128
//!             varint of at most 10 bytes in its shortest form
//!   shared:   bytes the record (its rest, in layout 4) shares with the frame's previous one
//!             (0 for the first), at most that one's length; shared + rest_len >= 1
//!   raw_len:  bytes of the records in the plain layout (count x (len u32 | bytes)), at most
//!             MAX_RAW; inner_len: bytes of the inner stream (lines: raw_len - 3 x count)
//! varint: LEB128, at most 5 bytes (a u32)
//! ```
//!
//! F takes layout 1 (layout 2 for a frame with a record that holds a newline): measured on
//! the synthetic stream, zstd over the lines compresses better than over the front-coded
//! records (zstd finds the shared prefixes itself) and decodes to what `pop` prints with no
//! second pass. A frontier's F did take layout 3 (its mover reads it once), until the bytes
//! it held while it waited for its mover were measured against the time zstd costs. The Q
//! runs, whose frames are read again at each hand-out and whose records start with their
//! seq, take layout 5 (layout 4 before version 12): decoding zstd at each hand-out cost more
//! than the bytes it saved. Readers read every layout in every file.
//!
//! A coded frame has the magic `FRZ1` and otherwise the header of a plain frame: its payload
//! length is the coded payload's, its count the records', and its crc covers the bytes on
//! disk. Each frame is coded on its own (the first record is the reference of the second,
//! and so on), so a reader starts at any frame. The reader checks every length before it
//! uses it and hands the records on in the plain layout (or as lines), so nothing above the
//! frame reader knows whether a frame was coded.
//!
//! The buffers and the zstd contexts are kept: one encoder per writer, one decoder per
//! thread; coding a frame allocates nothing once they have grown to a frame's size.

use std::cell::RefCell;

use crate::error::Corruption;

/// The zstd level: 1, the fastest of the levels that compress well (measured against lz4,
/// zstd 3 and front coding alone in `docs/performance.md`).
const LEVEL: i32 = 1;

/// Bytes before the zstd frame in a coded payload.
pub(crate) const CODED_HEAD: usize = 9;

/// The layout byte of lines.
const LINES: u8 = 1;
/// The layout byte of front-coded records.
const FRONT: u8 = 2;
/// The layout byte of front-coded records not compressed further.
const FRONT_ONLY: u8 = 3;
/// The layout byte of records of an 8-byte head (a Q run's seq) then the rest front coded
/// against the previous record's rest, not compressed further.
const HEAD_FRONT: u8 = 4;
/// The head of [`HEAD_FRONT`] and [`SEQ_FRONT`].
const HEAD: usize = 8;
/// The layout byte of records of an 8-byte head coded as the step from the previous
/// record's, then the rest front coded against the previous record's rest.
const SEQ_FRONT: u8 = 5;
/// The layout byte of [`SEQ_FRONT`]'s records, then compressed with zstd.
const SEQ_FRONT_ZSTD: u8 = 6;

/// What front coding alone does with the first 8 bytes of each record (when every record is
/// longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// Nothing: they are front coded with the rest (layout 3).
    None,
    /// They are kept as they are (layout 4).
    Kept,
    /// They are a u64 coded as its step from the previous record's (layout 5).
    Seq,
}

/// The largest plain layout a coded frame may decode to: a frame is written once its
/// records pass 1 MiB, so it holds at most that and one record (a URL of at most 1 GiB).
pub(crate) const MAX_RAW: usize = (1 << 30) + (4 << 20);

#[cfg(test)]
thread_local! {
    /// Tests: writers of this thread write plain frames, as a build before coded frames did.
    pub(crate) static PLAIN_WRITES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether writers of this thread code their frames (always, but in tests that write a store
/// as an older build did).
pub(crate) fn coding() -> bool {
    #[cfg(test)]
    if PLAIN_WRITES.with(std::cell::Cell::get) {
        return false;
    }
    true
}

/// Encodes frames (one per writer of coded frames).
pub(crate) struct Encoder {
    /// The zstd context; `None` for front coding alone.
    zstd: Option<zstd::bulk::Compressor<'static>>,
    front: Vec<u8>,
    /// What front coding alone does with an 8-byte head ([`Encoder::front_only`]).
    head: Head,
}

impl Encoder {
    /// A new encoder: lines or front coding, then zstd.
    pub(crate) fn new() -> std::io::Result<Encoder> {
        Ok(Encoder {
            zstd: Some(zstd::bulk::Compressor::new(LEVEL)?),
            front: Vec::new(),
            head: Head::None,
        })
    }

    /// A new encoder of front coding alone (layout 3): decoding it costs about what reading
    /// a plain frame does, for frames that are read again and again (a Q run's frame is read
    /// at each hand-out of its queue).
    /// With a `head`, when every record has more than 8 bytes, they are front coded after
    /// their first 8 (layouts 4 and 5: a Q run's records start with their seq, which differs
    /// from one to the next).
    pub(crate) fn front_only(head: Head) -> Encoder {
        Encoder {
            zstd: None,
            front: Vec::new(),
            head,
        }
    }

    /// A new encoder of records of an 8-byte seq coded as steps, then front coded, then
    /// compressed (layout 6; layout 1 or 2 for a frame with a record of 8 bytes or fewer): for a
    /// Q run whose frames are read fewer times than they are kept.
    pub(crate) fn seq_front_compressed() -> std::io::Result<Encoder> {
        Ok(Encoder {
            zstd: Some(zstd::bulk::Compressor::new(LEVEL)?),
            front: Vec::new(),
            head: Head::Seq,
        })
    }

    /// Codes the records `raw` (the plain layout) into `out` after `keep` bytes (room for a
    /// frame's header): `out` then holds those and the coded payload.
    pub(crate) fn encode(
        &mut self,
        raw: &[u8],
        out: &mut Vec<u8>,
        keep: usize,
    ) -> std::io::Result<()> {
        let Some(zstd) = &mut self.zstd else {
            // Records that all have a head and more are front coded after it.
            let head = if self.head != Head::None && records(raw).all(|r| r.len() > HEAD) {
                self.head
            } else {
                Head::None
            };
            out.clear();
            out.resize(keep, 0);
            out.push(match head {
                Head::None => FRONT_ONLY,
                Head::Kept => HEAD_FRONT,
                Head::Seq => SEQ_FRONT,
            });
            out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            let at = out.len();
            out.extend_from_slice(&[0; 4]);
            front_code_into(raw, out, head);
            let inner = (out.len() - at - 4) as u32;
            out[at..at + 4].copy_from_slice(&inner.to_le_bytes());
            return Ok(());
        };
        let layout = if self.head == Head::Seq && records(raw).all(|r| r.len() > HEAD) {
            self.front.clear();
            front_code_into(raw, &mut self.front, Head::Seq);
            SEQ_FRONT_ZSTD
        } else if lines(raw, &mut self.front) {
            LINES
        } else {
            front_code(raw, &mut self.front);
            FRONT
        };
        out.clear();
        out.resize(keep, 0);
        out.push(layout);
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.front.len() as u32).to_le_bytes());
        let at = out.len();
        out.resize(at + zstd::zstd_safe::compress_bound(self.front.len()), 0);
        let n = zstd.compress_to_buffer(&self.front, &mut out[at..])?;
        out.truncate(at + n);
        Ok(())
    }
}

/// Writes the plain records `raw` into `out` (cleared first) as lines; false if a record
/// holds a newline.
fn lines(raw: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    out.reserve(raw.len());
    let (mut pos, mut records) = (0, 0usize);
    while pos + 4 <= raw.len() {
        let len = u32::from_le_bytes(raw[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        out.extend_from_slice(&raw[pos + 4..pos + 4 + len]);
        out.push(b'\n');
        pos += 4 + len;
        records += 1;
    }
    // No record holds a newline when the lines hold one per record: counted over the whole
    // frame at once, not searched for in each record.
    crate::lines::count(out).0 == records
}

/// Front codes the plain records `raw` into `out` (cleared first).
fn front_code(raw: &[u8], out: &mut Vec<u8>) {
    out.clear();
    front_code_into(raw, out, Head::None);
}

/// The records of the plain layout `raw`.
fn records(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(raw.get(pos..pos + 4)?.try_into().ok()?) as usize;
        let rec = raw.get(pos + 4..pos + 4 + len)?;
        pos += 4 + len;
        Some(rec)
    })
}

/// Front codes the plain records `raw` after what `out` holds: each record's first 8 bytes
/// as `head` says (every record is longer), then its rest against the previous rest.
fn front_code_into(raw: &[u8], out: &mut Vec<u8>, head: Head) {
    out.reserve(raw.len());
    let mut prev: &[u8] = &[];
    let mut prev_seq = 0u64;
    for rec in records(raw) {
        let (h, rest) = rec.split_at(if head == Head::None { 0 } else { HEAD });
        match head {
            Head::None => {}
            Head::Kept => out.extend_from_slice(h),
            Head::Seq => {
                let seq = u64::from_le_bytes(h.try_into().expect("8 bytes"));
                let step = seq.wrapping_sub(prev_seq) as i64;
                crate::record::put_varint(out, ((step << 1) ^ (step >> 63)) as u64);
                prev_seq = seq;
            }
        }
        let shared = common_prefix(prev, rest);
        put_varint(out, shared as u32);
        put_varint(out, (rest.len() - shared) as u32);
        out.extend_from_slice(&rest[shared..]);
        prev = rest;
    }
}

/// The length of the longest common prefix of `a` and `b`, compared 8 bytes at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"))
            ^ u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != 0 {
            return i + (x.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint of at most 5 bytes at `*pos` of `b`.
fn get_varint(b: &[u8], pos: &mut usize) -> Option<u32> {
    let mut v = 0u64;
    for i in 0..5 {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return u32::try_from(v).ok();
        }
    }
    None
}

/// The decoder of this thread: its zstd context and its buffer of front-coded bytes.
struct Decoder {
    zstd: zstd::bulk::Decompressor<'static>,
    front: Vec<u8>,
}

thread_local! {
    static DECODER: RefCell<Option<Decoder>> = const { RefCell::new(None) };
}

/// How the records of a decoded frame are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `len u32 | bytes` each.
    Plain,
    /// Each followed by a newline (no record holds one).
    Lines,
}

/// Decodes the coded payload in `payload` (a frame of `count` records) and leaves the
/// records in its place, in the layout returned, with the index of the first record it holds;
/// the buffers swap with the thread's, so a reader that gives its buffer back for the next
/// frame allocates nothing. Of a frame front coded (layouts 2 to 6), whose records are
/// decoded one after the other, only records `from` to `to` (exclusive) are left when they
/// are not all: a hand-out that takes a queue's next records from a frame of many decodes
/// no further, and keeps nothing of the records before them but what the next one shares
/// (the returned index is then `from`). Every record up to `to` is checked as in a whole
/// decode; what follows is not decoded (the crc covered it; a compressed frame is
/// decompressed whole, and its length checked). Lines are decoded whole (index 0).
pub(crate) fn decode_window_in_place(
    payload: &mut Vec<u8>,
    count: u32,
    (from, to): (u32, u32),
) -> Result<(Layout, u32), Corruption> {
    PLAIN.with(|cell| {
        let mut plain = cell.take();
        let r = decode_window_into(payload, count, (from, to), &mut plain);
        if r.is_ok() {
            std::mem::swap(payload, &mut plain);
        }
        cell.replace(plain);
        r
    })
}

/// Whether the coded payload `coded` is decompressed by zstd (layouts 1, 2 and 6), judged by
/// its layout byte alone (the decoder checks the rest).
pub(crate) fn is_compressed(coded: &[u8]) -> bool {
    matches!(coded.first(), Some(&(LINES | FRONT | SEQ_FRONT_ZSTD)))
}

/// [`decode_window_in_place`], from `coded` into `out`.
pub(crate) fn decode_window_into(
    coded: &[u8],
    count: u32,
    (from, to): (u32, u32),
    out: &mut Vec<u8>,
) -> Result<(Layout, u32), Corruption> {
    let to = to.min(count);
    decode_window(coded, count, (from.min(to), to), out)
}

thread_local! {
    static PLAIN: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn invalid(field: &'static str, expected: &'static str, found: u64) -> Corruption {
    Corruption::Invalid {
        field,
        expected,
        found,
    }
}

/// Decodes the coded payload `coded` of a frame of `count` records into `out` (cleared
/// first); returns the layout of `out`. Any inconsistency is corruption: the crc matched, so
/// the bytes are as written, and a writer never writes them.
#[cfg(test)]
pub(crate) fn decode(coded: &[u8], count: u32, out: &mut Vec<u8>) -> Result<Layout, Corruption> {
    decode_window(coded, count, (0, count), out).map(|(layout, _)| layout)
}

/// [`decode`], of records `from` to `to` (`from <= to <= count`) of a frame front coded;
/// returns the layout and the index of the first record in `out` (`from`, or 0 for a
/// frame decoded whole).
fn decode_window(
    coded: &[u8],
    count: u32,
    (from, to): (u32, u32),
    out: &mut Vec<u8>,
) -> Result<(Layout, u32), Corruption> {
    if coded.len() < CODED_HEAD {
        return Err(Corruption::Truncated {
            needed: CODED_HEAD as u64,
            available: coded.len() as u64,
        });
    }
    let layout = coded[0];
    let raw_len = u32::from_le_bytes(coded[1..5].try_into().expect("4 bytes")) as usize;
    let inner_len = u32::from_le_bytes(coded[5..9].try_into().expect("4 bytes")) as usize;
    if raw_len > MAX_RAW {
        return Err(Corruption::OutOfRange {
            field: "plain length of a coded frame",
            found: raw_len as u64,
            limit: MAX_RAW as u64 + 1,
        });
    }
    let count = count as usize;
    // Each record is at least 4 + 1 bytes plain. As lines, it is 3 bytes shorter; front coded,
    // never more than 2 bytes longer.
    let fits = match layout {
        LINES => raw_len.checked_sub(3 * count) == Some(inner_len),
        FRONT => inner_len <= raw_len + 2 * count,
        FRONT_ONLY | HEAD_FRONT => {
            inner_len <= raw_len + 2 * count && inner_len == coded.len() - CODED_HEAD
        }
        // A step takes up to 10 bytes where the head took 8.
        SEQ_FRONT => inner_len <= raw_len + 4 * count && inner_len == coded.len() - CODED_HEAD,
        SEQ_FRONT_ZSTD => inner_len <= raw_len + 4 * count,
        _ => {
            return Err(invalid(
                "layout of a coded frame",
                "1 (lines), 2 (front coded), 3 (front coded alone), 4 (an 8-byte head, then \
                 front coded), 5 (an 8-byte head coded as a step, then front coded) or 6 (5, \
                 then compressed)",
                u64::from(layout),
            ))
        }
    };
    if !fits || raw_len < 5 * count {
        return Err(invalid(
            "inner length of a coded frame",
            "the plain length less 3 bytes per record (lines), at most 2 more per record (front \
             coded; 4 with seq steps)",
            inner_len as u64,
        ));
    }
    if let Some(head) = match layout {
        FRONT_ONLY => Some(Head::None),
        HEAD_FRONT => Some(Head::Kept),
        SEQ_FRONT => Some(Head::Seq),
        _ => None,
    } {
        let front = &coded[CODED_HEAD..];
        if to < count as u32 || from > 0 {
            front_decode_window(front, (from, to), raw_len, out, head)?;
            return Ok((Layout::Plain, from));
        }
        front_decode(front, count as u32, raw_len, out, head)?;
        return Ok((Layout::Plain, 0));
    }
    let zstd_error = |_| {
        invalid(
            "zstd frame of a coded frame",
            "a zstd frame of the inner length",
            inner_len as u64,
        )
    };
    DECODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let zstd = zstd::bulk::Decompressor::new()
                .map_err(|_| invalid("zstd context", "one could be made", 0))?;
            *slot = Some(Decoder {
                zstd,
                front: Vec::new(),
            });
        }
        let d = slot.as_mut().expect("made above");
        // Decompressed into the vector's capacity from its start: no zeroing first.
        let into = if layout == LINES {
            &mut *out
        } else {
            &mut d.front
        };
        into.clear();
        into.reserve(inner_len);
        let n = d
            .zstd
            .decompress_to_buffer(&coded[CODED_HEAD..], into)
            .map_err(zstd_error)?;
        if n != inner_len {
            return Err(Corruption::Mismatch {
                field: "inner length of a coded frame",
                expected: inner_len as u64,
                found: n as u64,
            });
        }
        if layout == LINES {
            check_lines(out, count)?;
            return Ok((Layout::Lines, 0));
        }
        let head = if layout == SEQ_FRONT_ZSTD {
            Head::Seq
        } else {
            Head::None
        };
        if to < count as u32 || from > 0 {
            front_decode_window(&d.front, (from, to), raw_len, out, head)?;
            return Ok((Layout::Plain, from));
        }
        front_decode(&d.front, count as u32, raw_len, out, head)?;
        Ok((Layout::Plain, 0))
    })
}

/// Checks that `lines` is exactly `count` records of at least one byte, each ended by a
/// newline.
pub(crate) fn check_lines(lines: &[u8], count: usize) -> Result<(), Corruption> {
    let (n, empty) = crate::lines::count(lines);
    if empty {
        return Err(invalid("length of a line record", "at least 1", 0));
    }
    if lines.last().is_some_and(|&b| b != b'\n') || n != count {
        return Err(Corruption::Mismatch {
            field: "line records of a coded frame",
            expected: count as u64,
            found: n as u64,
        });
    }
    Ok(())
}

/// Decodes `count` front-coded records of `front` into `out`, in the plain layout of
/// exactly `raw_len` bytes.
fn front_decode(
    front: &[u8],
    count: u32,
    raw_len: usize,
    out: &mut Vec<u8>,
    head: Head,
) -> Result<(), Corruption> {
    let (pos, w) = front_decode_window(front, (0, count), raw_len, out, head)?;
    if pos != front.len() || w != raw_len {
        return Err(Corruption::Mismatch {
            field: "bytes of a coded frame's records",
            expected: raw_len as u64,
            found: w as u64,
        });
    }
    Ok(())
}

/// Decodes front-coded records `from` to `to` (exclusive) of `front` into `out`, in the
/// plain layout, checking every record up to `to` (each within `raw_len` bytes); returns
/// the bytes of `front` read and of the plain layout of records 0 to `to`.
fn front_decode_window(
    front: &[u8],
    window: (u32, u32),
    raw_len: usize,
    out: &mut Vec<u8>,
    head: Head,
) -> Result<(usize, usize), Corruption> {
    // One loop per layout, without a branch on it per record.
    match head {
        Head::None => front_decode_as::<0>(front, window, raw_len, out),
        Head::Kept => front_decode_as::<1>(front, window, raw_len, out),
        Head::Seq => front_decode_as::<2>(front, window, raw_len, out),
    }
}

/// [`front_decode_window`] with the head `MODE`: 0 none, 1 kept, 2 coded as steps.
fn front_decode_as<const MODE: u8>(
    front: &[u8],
    (from, count): (u32, u32),
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(usize, usize), Corruption> {
    let (kept, head) = match MODE {
        0 => (false, 0),
        1 => (true, HEAD),
        _ => (false, HEAD),
    };
    let mut seq = 0u64;
    out.clear();
    // Reserved, not filled: a damaged length could name a gigabyte. Each record is appended
    // within the room reserved (its length was checked against `raw_len`).
    out.reserve(raw_len);
    // Where the next record goes in the plain layout of all the records.
    let mut w = 0usize;
    // The previous record's rest (after its head): where it is in `out`, and its length.
    // Before record `from`, `out` holds only that rest, from its start.
    let (mut pos, mut prev_at, mut prev_len) = (0usize, 0usize, 0usize);
    for i in 0..count {
        let h = pos;
        if kept {
            pos += head;
        } else if head > 0 {
            let step = match front.get(pos) {
                // Most steps take one byte.
                Some(&b) if b < 0x80 => {
                    pos += 1;
                    Some(u64::from(b))
                }
                _ => crate::record::varint_at(front, &mut pos),
            };
            let step = step.ok_or_else(|| {
                invalid(
                    "step of a coded record's seq",
                    "a varint of at most 10 bytes in its shortest form, within the frame",
                    pos as u64,
                )
            })?;
            seq = seq.wrapping_add(((step >> 1) as i64 ^ -((step & 1) as i64)) as u64);
        }
        let (Some(shared), Some(rest)) = (
            front.get(..pos).and_then(|_| get_varint(front, &mut pos)),
            get_varint(front, &mut pos),
        ) else {
            return Err(invalid(
                "varint of a coded record",
                "at most 5 bytes, within the frame",
                pos as u64,
            ));
        };
        let (shared, rest) = (shared as usize, rest as usize);
        if shared > prev_len {
            return Err(invalid(
                "shared prefix of a coded record",
                "at most the previous record's length",
                shared as u64,
            ));
        }
        let len = head + shared + rest;
        if shared + rest == 0 || rest > front.len() - pos || w + 4 + len > raw_len {
            return Err(invalid(
                "length of a coded record",
                "1 to the bytes left in the frame",
                len as u64,
            ));
        }
        if i < from {
            // Before the window: only the rest, for the next record's shared prefix.
            out.truncate(shared);
        } else if i == from && from > 0 {
            // The window's first record: its shared prefix, the start of `out`, moves after
            // its length and head.
            out.truncate(shared);
            out.extend_from_slice(&[0; 4 + HEAD][..4 + head]);
            out.copy_within(..shared, 4 + head);
            out[..4].copy_from_slice(&(len as u32).to_le_bytes());
            if kept {
                out[4..4 + head].copy_from_slice(&front[h..h + head]);
            } else if head > 0 {
                out[4..4 + head].copy_from_slice(&seq.to_le_bytes());
            }
            prev_at = 4 + head;
        } else {
            // Appended piece by piece: nothing is zeroed first.
            out.extend_from_slice(&(len as u32).to_le_bytes());
            if kept {
                out.extend_from_slice(&front[h..h + head]);
            } else if head > 0 {
                out.extend_from_slice(&seq.to_le_bytes());
            }
            let at = out.len();
            out.extend_from_within(prev_at..prev_at + shared);
            prev_at = at;
        }
        out.extend_from_slice(&front[pos..pos + rest]);
        pos += rest;
        w += 4 + len;
        prev_len = shared + rest;
    }
    if from >= count {
        // An empty window: nothing of the records before it is left.
        out.clear();
    }
    Ok((pos, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(records: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for r in records {
            v.extend_from_slice(&(r.len() as u32).to_le_bytes());
            v.extend_from_slice(r);
        }
        v
    }

    /// The plain layout of records decoded in `layout`.
    fn to_plain(bytes: &[u8], layout: Layout) -> Vec<u8> {
        match layout {
            Layout::Plain => bytes.to_vec(),
            Layout::Lines => {
                let lines: Vec<&[u8]> = bytes[..bytes.len() - 1].split(|&b| b == b'\n').collect();
                plain(&lines)
            }
        }
    }

    fn roundtrip(records: &[&[u8]]) -> (Vec<u8>, Layout) {
        let raw = plain(records);
        let mut back = Vec::new();
        // Front coding alone, first.
        let mut front = Vec::new();
        Encoder::front_only(Head::Kept)
            .encode(&raw, &mut front, 0)
            .unwrap();
        let all_long = records.iter().all(|r| r.len() > HEAD);
        assert_eq!(front[0], if all_long { HEAD_FRONT } else { FRONT_ONLY });
        let layout = decode(&front, records.len() as u32, &mut back).unwrap();
        assert_eq!((layout, &back), (Layout::Plain, &raw));
        let mut coded = Vec::new();
        Encoder::new().unwrap().encode(&raw, &mut coded, 0).unwrap();
        let layout = decode(&coded, records.len() as u32, &mut back).unwrap();
        assert_eq!(to_plain(&back, layout), raw);
        (coded, layout)
    }

    #[test]
    fn records_sharing_prefixes_come_back_byte_for_byte() {
        let long = vec![b'x'; 100_000];
        assert_eq!(roundtrip(&[b"a"]).1, Layout::Lines);
        // A record with a newline: the frame is front coded.
        let (_, layout) = roundtrip(&[b"http://a/1", b"line\nbreak", b"\n", b"http://a/2"]);
        assert_eq!(layout, Layout::Plain);
        roundtrip(&[
            b"http://a.example/x",
            b"http://a.example/y",
            b"http://a.example/y/z",
            b"h",
            b"http://b",
        ]);
        roundtrip(&[&long, &long[..5000], &long, b"y"]);
        let same: Vec<&[u8]> = vec![b"http://same.example/"; 1000];
        let (coded, _) = roundtrip(&same);
        assert!(
            coded.len() < 200,
            "{} bytes for 1000 equal records",
            coded.len()
        );
    }

    #[test]
    fn urls_of_one_site_take_a_fraction_of_their_bytes() {
        let urls: Vec<String> = (0..5000)
            .map(|i| format!("http://www.example.org/catalog/item/{i}/details.html"))
            .collect();
        let records: Vec<&[u8]> = urls.iter().map(|u| u.as_bytes()).collect();
        let (coded, _) = roundtrip(&records);
        let raw: usize = urls.iter().map(String::len).sum();
        assert!(
            coded.len() * 10 < raw,
            "{} coded bytes for {raw}",
            coded.len()
        );
    }

    #[test]
    fn every_inconsistent_length_is_corruption() {
        let cases = [
            (&[&b"http://a/1"[..], b"http://a/2"], false),
            (&[b"http://a/1", b"a\nb"], false),
            (&[b"http://a/1", b"http://a/2"], true),
        ];
        for (records, front_only) in cases {
            let raw = plain(records);
            let mut coded = Vec::new();
            let mut encoder = if front_only {
                Encoder::front_only(Head::Kept)
            } else {
                Encoder::new().unwrap()
            };
            encoder.encode(&raw, &mut coded, 0).unwrap();
            let mut out = Vec::new();
            decode(&coded, 2, &mut out).unwrap();
            // Wrong count, either way.
            assert!(decode(&coded, 1, &mut out).is_err());
            assert!(decode(&coded, 3, &mut out).is_err());
            // Each length field off by one, and the zstd frame cut.
            for (at, delta) in [(1usize, 1i64), (1, -1), (5, 1), (5, -1)] {
                let mut c = coded.clone();
                let v = u32::from_le_bytes(c[at..at + 4].try_into().unwrap()) as i64 + delta;
                c[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
                assert!(decode(&c, 2, &mut out).is_err(), "field at {at} {delta:+}");
            }
            assert!(decode(&coded[..coded.len() - 1], 2, &mut out).is_err());
            assert!(decode(&coded[..4], 2, &mut out).is_err());
            // Another layout byte.
            for layout in [0u8, 1, 2, 3, 4, 255] {
                let mut c = coded.clone();
                if c[0] == layout {
                    continue;
                }
                c[0] = layout;
                assert!(decode(&c, 2, &mut out).is_err());
            }
            // A plain length beyond the limit is refused before anything is allocated.
            let mut c = coded.clone();
            c[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(matches!(
                decode(&c, 2, &mut out),
                Err(Corruption::OutOfRange { .. })
            ));
        }
    }

    #[test]
    fn records_of_a_queue_are_front_coded_after_their_seq() {
        let recs: Vec<Vec<u8>> = (0..500u64)
            .map(|i| {
                let mut r = (i * 7 + 10).to_le_bytes().to_vec();
                r.extend_from_slice(format!("http://q.example/dir/page-{i}.html").as_bytes());
                r
            })
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        let raw = plain(&refs);
        let mut coded = Vec::new();
        Encoder::front_only(Head::Kept)
            .encode(&raw, &mut coded, 0)
            .unwrap();
        assert_eq!(coded[0], HEAD_FRONT);
        assert!(
            coded.len() * 2 < raw.len(),
            "{} of {}",
            coded.len(),
            raw.len()
        );
        let mut back = Vec::new();
        assert_eq!(decode(&coded, 500, &mut back).unwrap(), Layout::Plain);
        assert_eq!(back, raw);
        // A record no longer than the head: no head.
        let (coded, _) = roundtrip(&[&recs[0], b"12345678", &recs[1]]);
        assert!(!coded.is_empty());
        // A shared prefix longer than the previous rest is corruption.
        let mut c = Vec::new();
        Encoder::front_only(Head::Kept)
            .encode(&plain(&refs[..2]), &mut c, 0)
            .unwrap();
        let second = CODED_HEAD + HEAD + 2 + (refs[0].len() - HEAD) + HEAD;
        c[second] = (refs[0].len() - HEAD + 1) as u8;
        assert!(decode(&c, 2, &mut back).is_err());
    }

    /// Layout 5: seqs up and down (a frame of many queues' records), wrapping around 2^64,
    /// come back exactly, in fewer bytes than layout 4's; a step cut, longer than 10 bytes
    /// or not in its shortest form is corruption, and no edit of a coded frame panics.
    #[test]
    fn seqs_coded_as_steps_come_back_and_bad_steps_are_corruption() {
        let seqs = [
            5u64,
            9,
            3,
            u64::MAX,
            0,
            1 << 40,
            (1 << 40) + 1,
            17,
            17 << 20,
        ];
        let recs: Vec<Vec<u8>> = seqs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut r = s.to_le_bytes().to_vec();
                r.extend_from_slice(format!("http://h{}.example/p{i}", i % 3).as_bytes());
                r
            })
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        let raw = plain(&refs);
        let (mut steps, mut kept, mut back) = (Vec::new(), Vec::new(), Vec::new());
        Encoder::front_only(Head::Seq)
            .encode(&raw, &mut steps, 0)
            .unwrap();
        Encoder::front_only(Head::Kept)
            .encode(&raw, &mut kept, 0)
            .unwrap();
        assert_eq!(steps[0], SEQ_FRONT);
        assert!(
            steps.len() < kept.len(),
            "{} >= {}",
            steps.len(),
            kept.len()
        );
        let n = refs.len() as u32;
        assert_eq!(decode(&steps, n, &mut back).unwrap(), Layout::Plain);
        assert_eq!(back, raw);
        // Records `from` to `to` alone, as a hand-out decodes them, in every layout of a
        // head; a shared prefix too long anywhere up to `to` is corruption in every window.
        let mut none = Vec::new();
        Encoder::front_only(Head::None)
            .encode(&raw, &mut none, 0)
            .unwrap();
        for coded in [&steps, &kept, &none] {
            for from in 0..=n {
                for to in from..=n {
                    let (layout, first) = decode_window(coded, n, (from, to), &mut back).unwrap();
                    assert_eq!((layout, first), (Layout::Plain, from));
                    let want = plain(&refs[from as usize..to as usize]);
                    assert_eq!(back, want, "records {from} to {to}, layout {}", coded[0]);
                }
            }
        }
        let second = CODED_HEAD + 1 + 2 + (refs[0].len() - HEAD) + 1;
        let mut bad = steps.clone();
        assert_eq!(
            bad[second], 8,
            "the second record shares \"http://h\" with the first"
        );
        bad[second] = (refs[0].len() - HEAD + 1) as u8;
        for from in 0..=n {
            for to in 2.max(from)..=n {
                assert!(decode_window(&bad, n, (from, to), &mut back).is_err());
            }
        }
        // The first step (5, zigzag 10) as a 2-byte varint, and as 11 bytes.
        let first = CODED_HEAD;
        assert_eq!(steps[first], 10);
        let mut long = steps.clone();
        long.splice(first..first + 1, [0x8a, 0x00]);
        let inner = (long.len() - CODED_HEAD) as u32;
        long[5..9].copy_from_slice(&inner.to_le_bytes());
        assert!(decode(&long, n, &mut back).is_err());
        let mut endless = steps.clone();
        endless.splice(first..first + 1, [0x80; 11]);
        let inner = (endless.len() - CODED_HEAD) as u32;
        endless[5..9].copy_from_slice(&inner.to_le_bytes());
        assert!(decode(&endless, n, &mut back).is_err());
        // Cut anywhere.
        for cut in 0..steps.len() {
            let mut c = steps[..cut].to_vec();
            if c.len() >= CODED_HEAD {
                let inner = (c.len() - CODED_HEAD) as u32;
                c[5..9].copy_from_slice(&inner.to_le_bytes());
            }
            assert!(decode(&c, n, &mut back).is_err(), "cut at {cut}");
        }
        // Any byte changed: corruption, or other records, never a panic.
        for at in 0..steps.len() {
            for bit in 0..8 {
                let mut c = steps.clone();
                c[at] ^= 1 << bit;
                if let Ok(Layout::Plain) = decode(&c, n, &mut back) {
                    assert_ne!(back, raw, "byte {at} bit {bit} changed nothing");
                }
            }
        }
    }

    /// Layout 6: layout 5's records compressed. They come back whole and in every window,
    /// as layout 5's do, in fewer bytes; every length off, a cut, a zstd frame of more or
    /// fewer bytes than stated and a bad record inside a valid zstd frame are corruption,
    /// and no edit panics.
    #[test]
    fn seq_steps_compressed_come_back_and_bad_frames_are_corruption() {
        let recs: Vec<Vec<u8>> = (0..300u64)
            .map(|i| {
                let mut r = (1000 + i * 3 - (i % 7)).to_le_bytes().to_vec();
                let host = i / 40;
                r.extend_from_slice(
                    format!("\x01http://h{host}.example/section/{}/item-{i}.html", i % 5)
                        .as_bytes(),
                );
                r
            })
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        let raw = plain(&refs);
        let n = refs.len() as u32;
        let (mut packed, mut steps, mut back) = (Vec::new(), Vec::new(), Vec::new());
        let mut encoder = Encoder::seq_front_compressed().unwrap();
        encoder.encode(&raw, &mut packed, 0).unwrap();
        Encoder::front_only(Head::Seq)
            .encode(&raw, &mut steps, 0)
            .unwrap();
        assert_eq!(packed[0], SEQ_FRONT_ZSTD);
        assert!(
            packed.len() * 2 < steps.len(),
            "{} compressed against {} front coded",
            packed.len(),
            steps.len()
        );
        assert_eq!(decode(&packed, n, &mut back).unwrap(), Layout::Plain);
        assert_eq!(back, raw);
        for from in (0..=n).step_by(7) {
            for to in (from..=n).step_by(11).chain([n]) {
                let (layout, first) = decode_window(&packed, n, (from, to), &mut back).unwrap();
                assert_eq!((layout, first), (Layout::Plain, from));
                assert_eq!(
                    back,
                    plain(&refs[from as usize..to as usize]),
                    "{from} to {to}"
                );
            }
        }
        // The encoder is used again, for a frame with a record of 8 bytes or fewer: lines.
        let short = plain(&[b"12345678", b"http://a/"]);
        encoder.encode(&short, &mut packed, 0).unwrap();
        assert_eq!(packed[0], LINES);
        let layout = decode(&packed, 2, &mut back).unwrap();
        assert_eq!(to_plain(&back, layout), short);
        encoder.encode(&raw, &mut packed, 0).unwrap();
        assert_eq!(packed[0], SEQ_FRONT_ZSTD);
        // Wrong counts, each length off by one, cuts.
        assert!(decode(&packed, n - 1, &mut back).is_err());
        assert!(decode(&packed, n + 1, &mut back).is_err());
        for (at, delta) in [(1usize, 1i64), (1, -1), (5, 1), (5, -1)] {
            let mut c = packed.clone();
            let v = u32::from_le_bytes(c[at..at + 4].try_into().unwrap()) as i64 + delta;
            c[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
            assert!(decode(&c, n, &mut back).is_err(), "field at {at} {delta:+}");
        }
        for cut in 0..packed.len() {
            assert!(
                decode(&packed[..cut], n, &mut back).is_err(),
                "cut at {cut}"
            );
        }
        // A zstd frame that holds more than the inner length stated, or less: the stated
        // length taken down (and the plain length with it, to pass the first checks) or up.
        let inner = u32::from_le_bytes(packed[5..9].try_into().unwrap());
        for stated in [inner - 1, inner / 2, inner + 1, inner + 1000] {
            let mut c = packed.clone();
            c[5..9].copy_from_slice(&stated.to_le_bytes());
            assert!(
                decode(&c, n, &mut back).is_err(),
                "inner stated as {stated}"
            );
            assert!(decode_window(&c, n, (3, 9), &mut back).is_err());
        }
        // A valid zstd frame around a record whose shared prefix is longer than the record
        // before it: found by the front decoder, whole and in a window that reaches it.
        // (The first step, 2,000 zigzagged, takes 2 bytes; the second, 2 zigzagged, one.)
        let second = 2 + 1 + 1 + (refs[0].len() - HEAD) + 1;
        let mut bad = steps[CODED_HEAD..].to_vec();
        assert_eq!(
            usize::from(bad[second]),
            "\x01http://h0.example/section/".len(),
            "the second record's shared prefix"
        );
        bad[second] = (refs[0].len() - HEAD + 1) as u8;
        let mut c = packed[..CODED_HEAD].to_vec();
        c.extend_from_slice(&zstd::bulk::compress(&bad, LEVEL).unwrap());
        assert!(decode(&c, n, &mut back).is_err());
        assert!(decode_window(&c, n, (0, 2), &mut back).is_err());
        // Any bit changed: corruption or other records, never a panic. (A few bits of a zstd
        // frame are never read, a flip of which changes nothing: the frame's crc finds those.)
        let (mut caught, mut same) = (0, 0);
        for at in 0..packed.len() {
            for bit in 0..8 {
                let mut c = packed.clone();
                c[at] ^= 1 << bit;
                match decode(&c, n, &mut back) {
                    Ok(_) if back == raw => same += 1,
                    Ok(_) => {}
                    Err(_) => caught += 1,
                }
            }
        }
        assert!(same * 20 < packed.len() * 8, "{same} flips changed nothing");
        assert!(
            caught * 2 > packed.len() * 8,
            "{caught} flips caught, {same} changed nothing"
        );
    }

    #[test]
    fn lines_must_be_whole_and_not_empty() {
        assert!(check_lines(b"a\nb\n", 2).is_ok());
        assert!(check_lines(b"a\nb", 2).is_err());
        assert!(check_lines(b"a\n\nb\n", 3).is_err());
        assert!(check_lines(b"\nb\n", 2).is_err());
        assert!(check_lines(b"a\nb\n", 3).is_err());
    }

    #[test]
    fn a_shared_prefix_longer_than_the_previous_record_is_corruption() {
        // Front-coded by hand: "ab", then shared 3 of it.
        let front = [0u8, 2, b'a', b'b', 3, 1, b'c'];
        let mut out = Vec::new();
        assert!(front_decode(&front, 2, 6 + 8, &mut out, Head::None).is_err());
        let front = [0u8, 2, b'a', b'b', 2, 1, b'c'];
        front_decode(&front, 2, 6 + 7, &mut out, Head::None).unwrap();
        assert_eq!(out, plain(&[b"ab", b"abc"]));
        // A zero-length record.
        let front = [0u8, 0];
        assert!(front_decode(&front, 1, 4, &mut out, Head::None).is_err());
        // An overlong varint.
        let front = [0x80u8, 0x80, 0x80, 0x80, 0x80, 0x01, 1, b'a'];
        assert!(front_decode(&front, 1, 5, &mut out, Head::None).is_err());
    }

    #[test]
    fn varints_round_trip_at_their_edges() {
        for v in [0u32, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut pos = 0;
            assert_eq!(get_varint(&b, &mut pos), Some(v));
            assert_eq!(pos, b.len());
        }
    }
}
