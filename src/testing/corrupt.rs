//! The corruption harness: a store with every file kind, edits of its files (with their
//! checksums rewritten from the layout constants, so that edits reach the decoders), and the
//! outcome every edit must have.

use std::sync::{Arc, OnceLock};

use super::{emit_model, Bytes};
use crate::names::{self, FileName};
use crate::storage::sim::CrashImage;
use crate::storage::SimDisk;
use crate::{check_storage, Error, Options, Sieve};
use crate::{frames, run, segment};

/// The options of the corruption store: inline flushes, 40 slots.
pub fn corruption_opts() -> Options {
    Options::new()
        .slots(40)
        .seed(5)
        .background_flush(false)
        .frontier_low(0)
}

/// The pushes of the corruption store: 280 distinct URLs, then 100 where repeats alternate
/// with new ones, so that the last full buffer is spilled as a run and the newest A
/// generation holds new URLs.
pub fn corruption_urls() -> Vec<Vec<u8>> {
    let url = |i: u32| format!("http://h{}.example/p/{}", i % 13, (i * 7) % 97).into_bytes();
    (0..280u32)
        .map(url)
        .chain((0..100u32).map(|j| if j % 2 == 0 { url(j) } else { url(280 + j / 2) }))
        .collect()
}

/// A store with every file kind: a Z segment, F segments, a cursor inside F, a run waiting
/// for a merge (and the A generation it covers), and acknowledged URLs still in A (several
/// group commits in the newest generation). Returns the disk and the frontier URLs after
/// the cursor, as the model has them.
pub fn corruption_store() -> (SimDisk, Vec<Vec<u8>>) {
    corruption_store_closed(true)
}

/// [`corruption_store`], closed cleanly (`closed`), or left by a crash after its last sync:
/// only then may damage in the newest A generation's last group commit read as a torn tail.
pub fn corruption_store_closed(closed: bool) -> (SimDisk, Vec<Vec<u8>>) {
    let disk = SimDisk::new();
    let urls = corruption_urls();
    let mut s = Sieve::open_with(Arc::new(disk.clone()), corruption_opts()).expect("create");
    for u in &urls[..280] {
        s.push(u).expect("push");
    }
    let consumed = s.frontier_next(25).expect("pop");
    s.frontier_commit().expect("commit");
    s.sync().expect("sync");
    for (i, u) in urls[280..].iter().enumerate() {
        s.push(u).expect("push");
        if i >= 80 && i % 4 == 3 {
            s.sync().expect("sync");
        }
    }
    if closed {
        s.close().expect("close");
    } else {
        s.sync().expect("sync");
        drop(s);
    }
    let expected = emit_model(&urls)[consumed.len()..].to_vec();
    (disk, expected)
}

/// Opens the store on `disk` with [`corruption_opts`], flushes and reads everything;
/// returns the frontier after the cursor and the torn bytes counted.
pub fn corruption_outcome(disk: &SimDisk) -> Result<(Vec<Vec<u8>>, u64), Error> {
    let mut s = Sieve::open_with(Arc::new(disk.clone()), corruption_opts())?;
    s.flush()?;
    let mut out = Vec::new();
    loop {
        let b = s.frontier_next(500)?;
        if b.is_empty() {
            break;
        }
        out.extend(b);
    }
    let torn = s.stats()?.torn_bytes;
    Ok((out, torn))
}

/// The kind of a file of a sieve directory, from its name (`None`: the lock, a temp file,
/// or not a sieve's).
pub fn kind_of(name: &str) -> Option<FileKind> {
    Some(match names::parse(name)? {
        FileName::A(_) => FileKind::A,
        FileName::Z(_) => FileKind::Z,
        FileName::R(_) => FileKind::R,
        FileName::F(_) => FileKind::F,
        FileName::Cursor => FileKind::Cursor,
        FileName::Manifest => FileKind::Manifest,
        FileName::Lock
        | FileName::Temp
        | FileName::Q(_)
        | FileName::J(_)
        | FileName::Checkpoint => return None,
    })
}

/// The file kinds, each with its own decoder and fuzz target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileKind {
    /// An A generation.
    A,
    /// A Z segment.
    Z,
    /// An R run.
    R,
    /// An F segment.
    F,
    /// The cursor.
    Cursor,
    /// The manifest.
    Manifest,
}

impl FileKind {
    /// Every kind.
    pub const ALL: [FileKind; 6] = [
        FileKind::A,
        FileKind::Z,
        FileKind::R,
        FileKind::F,
        FileKind::Cursor,
        FileKind::Manifest,
    ];
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub(crate) fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Writes the crc32 of `b[from..to]` at `to`, if it fits.
pub(crate) fn seal_at(b: &mut [u8], from: usize, to: usize) {
    if to + 4 <= b.len() && from <= to {
        let c = crate::format::crc(&b[from..to]);
        b[to..to + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// Rewrites the crcs of the frames of an A file or F segment (after a `header`-byte header
/// whose crc is its last 4 bytes), as far as the frames' lengths can be followed.
pub(crate) fn seal_frames(b: &mut [u8], header: usize) {
    let len = b.len();
    seal_frames_until(b, header, len);
}

/// [`seal_frames`] of the frames that end by `limit`.
pub(crate) fn seal_frames_until(b: &mut [u8], header: usize, limit: usize) {
    seal_at(b, 0, header - 4);
    let mut at = header;
    while let Some(len) = get_u32(b, at + frames::PAYLOAD_LEN_AT) {
        let end = (at + frames::FRAME_HEADER).saturating_add(len as usize);
        if end > b.len().min(limit) {
            break;
        }
        frames::reseal_frame(&mut b[at..end]);
        at = end;
    }
}

/// Rewrites every crc of a Z segment: header, blocks up to the footer the tail names, the
/// footer and the tail.
fn seal_segment(b: &mut [u8]) {
    let header = segment::HEADER_LEN as usize;
    seal_at(b, 0, header - 4);
    let Some(tail) = b.len().checked_sub(segment::TAIL_LEN as usize) else {
        return;
    };
    seal_at(b, tail, tail + 8);
    let footer = get_u64(b, tail).map_or(tail, |f| (f as usize).min(tail));
    // A block: its header, whose last field is the payload's length, the payload, a crc.
    let mut at = header;
    while let Some(len) = get_u32(b, at + segment::BLOCK_HEADER - 4) {
        let end = at + segment::BLOCK_HEADER + len as usize;
        if end + 4 > footer {
            break;
        }
        seal_at(b, at, end);
        at = end + 4;
    }
    // The footer: block and signature counts, the index entries, a crc.
    if let Some(blocks) = get_u64(b, footer) {
        let entries = blocks.saturating_mul(segment::INDEX_ENTRY);
        let end = (footer as u64 + 16).saturating_add(entries);
        if end.saturating_add(4) <= tail as u64 {
            seal_at(b, footer, end as usize);
        }
    }
}

/// Rewrites every crc of an R run: header and blocks (a count, then the pairs).
fn seal_run(b: &mut [u8]) {
    let header = run::HEADER_LEN as usize;
    seal_at(b, 0, header - 4);
    let mut at = header;
    while let Some(count) = get_u32(b, at) {
        let end = at + 4 + (count as usize).saturating_mul(run::PAIR);
        if end + 4 > b.len() {
            break;
        }
        seal_at(b, at, end);
        at = end + 4;
    }
}

/// Rewrites every crc of a file of `kind`, so that edits get past the checksums.
pub fn reseal(kind: FileKind, b: &mut [u8]) {
    match kind {
        FileKind::A => seal_frames(b, crate::sieve::wal::HEADER_LEN as usize),
        FileKind::F => seal_frames(b, crate::frontier::HEADER_LEN as usize),
        FileKind::Z => seal_segment(b),
        FileKind::R => seal_run(b),
        FileKind::Cursor | FileKind::Manifest => {
            if let Some(end) = b.len().checked_sub(4) {
                seal_at(b, 0, end);
            }
        }
    }
}

/// Applies an edit script to `b`: 4 bytes per edit (opcode, position u16, value).
pub(crate) fn edit(b: &mut Vec<u8>, input: &mut Bytes<'_>) {
    while !input.is_empty() {
        let op = input.u8();
        let pos = usize::from(input.u16());
        let val = input.u8();
        let at = if b.is_empty() { 0 } else { pos % b.len() };
        match op % 6 {
            0 if !b.is_empty() => b[at] ^= val,
            1 if !b.is_empty() => b[at] = val,
            2 => b.truncate(pos % (b.len() + 1)),
            3 => b.insert(at.min(b.len()), val),
            4 if !b.is_empty() => drop(b.remove(at)),
            5 if b.len() >= 4 => {
                let at = at.min(b.len() - 4);
                let v: u32 = match val % 6 {
                    0 => 0,
                    1 => 1,
                    2 => u32::MAX,
                    3 => 1 << 31,
                    4 => u32::from(val),
                    _ => 0x10_0000,
                };
                b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
    }
}

/// Zeroes one aligned sector of 512 bytes of `bytes`, chosen by `rng`, as a torn or lost
/// write leaves it; the whole file if that sector was zero already (nothing damaged else).
pub fn zero_a_sector(bytes: &mut [u8], rng: &mut crate::storage::sim::Rng) {
    let start = rng.below((bytes.len() as u64).div_ceil(512)) as usize * 512;
    let end = (start + 512).min(bytes.len());
    if bytes[start..end].iter().all(|&b| b == 0) {
        bytes.iter_mut().for_each(|b| *b = 0);
    } else {
        bytes[start..end].iter_mut().for_each(|b| *b = 0);
    }
}

/// A store with one file edited by a fuzz input ([`edit_one`]).
pub(crate) struct Edited<'a> {
    /// The store, the file edited.
    pub img: SimDisk,
    /// The file.
    pub name: &'a str,
    /// Whether its checksums were rewritten after the edit.
    pub resealed: bool,
    /// Whether its bytes changed.
    pub changed: bool,
    /// Whether the edit only cut its end.
    pub truncated_only: bool,
}

/// Edits one of `candidates`, files of `disk`, as fuzz input `data` says: its first byte
/// chooses the file, its second whether `reseal` rewrites the checksums after, the rest is an
/// edit script ([`edit`]).
pub(crate) fn edit_one<'a>(
    disk: &SimDisk,
    candidates: &[&'a String],
    data: &[u8],
    reseal: impl Fn(&mut [u8]),
) -> Edited<'a> {
    let mut input = Bytes(data);
    let name = candidates[usize::from(input.u8()) % candidates.len()];
    let resealed = input.u8() % 4 != 0;
    let img = disk.crash_image(CrashImage::KillProcess);
    let original = img.content(name).expect("the file exists");
    let mut bytes = original.clone();
    edit(&mut bytes, &mut input);
    if resealed {
        reseal(&mut bytes);
    }
    let changed = bytes != original;
    let truncated_only = original.starts_with(&bytes);
    img.set_content(name, bytes);
    Edited {
        img,
        name,
        resealed,
        changed,
        truncated_only,
    }
}

fn shared_store() -> &'static (SimDisk, Vec<Vec<u8>>, Vec<String>) {
    static STORE: OnceLock<(SimDisk, Vec<Vec<u8>>, Vec<String>)> = OnceLock::new();
    STORE.get_or_init(|| {
        let (disk, expected) = corruption_store();
        let files = disk
            .files()
            .into_iter()
            .filter(|n| kind_of(n).is_some())
            .collect();
        (disk, expected, files)
    })
}

/// Fuzz targets `decode_<kind>`: a file of `kind` of a real store is edited by the input
/// (flips, overwrites, truncations, insertions, removals, interesting 32-bit values), its
/// checksums rewritten unless the input says not to, and the store is opened, flushed, read
/// to the end and checked.
///
/// Always: no panic, no hang, no allocation out of proportion; any error is a typed
/// corruption error naming a file, which `check` also reports. Unedited: the exact answer.
/// Edited without resealing: the exact answer, or a documented torn tail of the newest A.
pub fn decode(kind: FileKind, data: &[u8]) {
    let (disk, expected, files) = shared_store();
    let candidates: Vec<&String> = files.iter().filter(|f| kind_of(f) == Some(kind)).collect();
    let Edited {
        img,
        name,
        resealed,
        changed,
        truncated_only,
    } = edit_one(disk, &candidates, data, |b| reseal(kind, b));
    let report = check_storage(Arc::new(img.crash_image(CrashImage::KillProcess)));
    let outcome = corruption_outcome(&img);
    match (&outcome, &report) {
        (Err(e @ Error::Corrupt { file, .. }), Ok(report)) => {
            // A file of the store, or one a damaged manifest or cursor names.
            assert!(
                files.contains(file) || kind_of(file).is_some(),
                "the error names a file of the sieve: {file}"
            );
            assert!(
                !report.is_sound(),
                "{name}: check missed what open found: {e}"
            );
        }
        (Err(Error::Corrupt { .. }), Err(e)) => {
            assert!(e.is_corruption(), "{name}: check failed with {e}")
        }
        (Err(Error::WrongMode { .. }), _) if kind == FileKind::Manifest && resealed => {
            // A resealed manifest whose mode byte now names the other valid mode is a sound
            // manifest of another kind of store: opening it as a plain sieve refuses it by
            // its mode, as it would refuse a real frontier.
        }
        (Err(e), _) => panic!("{name}: not a corruption error: {e}"),
        (Ok(_), Err(e)) => assert!(e.is_corruption(), "{name}: check failed with {e}"),
        (Ok((out, torn)), Ok(_)) => {
            if !changed {
                assert!(out == expected, "{name} unedited: wrong output");
            } else if !resealed && out != expected {
                // Without valid checksums, only the documented torn tail of the newest A
                // may shorten the output, and only at its end, counted.
                let newest_a = files
                    .iter()
                    .filter(|f| kind_of(f) == Some(FileKind::A))
                    .max();
                assert!(
                    Some(name) == newest_a.map(String::as_str),
                    "{name}: wrong output, silently"
                );
                assert!(expected.starts_with(out), "{name}: not a prefix");
                // A cut exactly at a frame boundary looks like a crash before those frames
                // were written (the documented limitation); any other damage is counted.
                assert!(
                    *torn > 0 || truncated_only,
                    "{name}: dropped without being counted"
                );
            }
        }
    }
}
