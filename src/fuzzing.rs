//! Test harnesses shared by the fuzz targets (`fuzz/`), the corpus replay test and the crash
//! and corruption suites: the reference model, a workload runner that records what was
//! acknowledged, the checker of a reopened store, and one entry point per fuzz target.
//!
//! Every entry point takes arbitrary bytes and panics exactly when a guarantee is broken
//! (except [`canary`], which panics on purpose, to show that the fuzzing setup finds a
//! failure). Not part of the stable API.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use crate::storage::sim::{CrashImage, Rng};
use crate::storage::SimDisk;
use crate::{check_storage, Error, Options, Sieve};

/// The reference sieve: each distinct URL once, in first-appearance order.
pub fn emit_model<U: AsRef<[u8]>>(urls: &[U]) -> Vec<Vec<u8>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for u in urls {
        if seen.insert(u.as_ref()) {
            out.push(u.as_ref().to_vec());
        }
    }
    out
}

/// One step of a workload.
#[derive(Debug, Clone)]
pub enum Step {
    /// `push(url)`.
    Push(Vec<u8>),
    /// `sync()`.
    Sync,
    /// `flush()`.
    Flush,
    /// Read up to n frontier URLs and commit the cursor.
    Pop(usize),
    /// `close()`, then reopen.
    Close,
}

/// What a workload observed before it stopped (at its end, or at its first error).
#[derive(Debug, Default, Clone)]
pub struct Observed {
    /// Every push that returned Ok, in order.
    pub pushed: Vec<Vec<u8>>,
    /// How many of `pushed` are acknowledged (a later sync, flush or close returned Ok).
    pub acked: usize,
    /// URLs read from the frontier and committed.
    pub consumed: Vec<Vec<u8>>,
    /// URLs read by a pop whose cursor commit failed: it may or may not have taken effect.
    pub in_doubt: Vec<Vec<u8>>,
    /// URLs in F after the last flush that returned Ok: committed, so F never goes below.
    pub emitted: u64,
}

/// Applies one step other than [`Step::Close`], recording what was acknowledged and
/// consumed.
pub fn apply(sieve: &mut Sieve, step: &Step, o: &mut Observed) -> crate::Result<()> {
    match step {
        Step::Push(u) => sieve.push(u).map(|_| o.pushed.push(u.clone())),
        Step::Sync => sieve.sync().map(|_| o.acked = o.pushed.len()),
        Step::Flush => {
            sieve.flush()?;
            o.acked = o.pushed.len();
            o.emitted = sieve.stats()?.emitted;
            Ok(())
        }
        Step::Pop(n) => {
            o.in_doubt = sieve.frontier_next(*n)?;
            sieve
                .frontier_commit()
                .map(|_| o.consumed.append(&mut o.in_doubt))
        }
        Step::Close => unreachable!("Close reopens the sieve: handled by run"),
    }
}

/// Opens a sieve on `disk` and runs `steps` until the first error; returns what was
/// observed.
pub fn run(disk: &SimDisk, opts: &Options, steps: &[Step]) -> Observed {
    let mut o = Observed::default();
    let Ok(mut sieve) = Sieve::open_with(Arc::new(disk.clone()), opts.clone()) else {
        return o;
    };
    for step in steps {
        if let Step::Close = step {
            if sieve.close().is_err() {
                return o;
            }
            o.acked = o.pushed.len();
            sieve = match Sieve::open_with(Arc::new(disk.clone()), opts.clone()) {
                Ok(s) => s,
                Err(_) => return o,
            };
        } else if apply(&mut sieve, step, &mut o).is_err() {
            return o;
        }
    }
    o
}

/// What survived a crash, as found by [`verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Survivor {
    /// The surviving pushes are the first `pushes` of [`Observed::pushed`].
    pub pushes: usize,
    /// Whether the URLs in doubt ([`Observed::in_doubt`]) were committed as consumed.
    pub in_doubt_consumed: bool,
}

fn lossy(urls: &[Vec<u8>]) -> Vec<String> {
    urls.iter()
        .map(|u| String::from_utf8_lossy(u).into_owned())
        .collect()
}

/// Reopens a copy of `disk` and checks the invariants against what was observed: reopening
/// succeeds, and `check` finds the recovered store sound; committed F did not go back; after a flush, the frontier read so far plus the
/// rest is the model of a prefix of the pushes that holds every acknowledged one. Returns
/// which prefix survived, or a description of the violation.
pub fn verify(disk: &SimDisk, opts: &Options, o: &Observed) -> Result<Survivor, String> {
    // Work on a copy: the image stays as the crash left it. Recovery runs, then power is
    // lost at once: what recovery committed must open again.
    let disk = disk.crash_image(CrashImage::KillProcess);
    let recovered = Sieve::open_with(Arc::new(disk.clone()), opts.clone())
        .map_err(|e| format!("reopen failed: {e}"))?;
    let disk = disk.crash_image(CrashImage::DropAll);
    drop(recovered);
    // What recovery left is sound: a torn tail it dropped is not reported as damage.
    match check_storage(Arc::new(disk.crash_image(CrashImage::KillProcess))) {
        Ok(report) if report.is_sound() => {}
        Ok(report) => return Err(format!("check after recovery: {report:?}")),
        Err(e) => return Err(format!("check after recovery failed: {e}")),
    }
    let mut sieve = Sieve::open_with(Arc::new(disk), opts.clone())
        .map_err(|e| format!("reopen after a power loss right after recovery failed: {e}"))?;
    let emitted = sieve.stats().map_err(|e| format!("stats: {e}"))?.emitted;
    if emitted < o.emitted {
        return Err(format!(
            "committed F went back: {emitted} URLs, {} after the last flush",
            o.emitted
        ));
    }
    sieve
        .flush()
        .map_err(|e| format!("flush after reopen failed: {e}"))?;
    let mut rest = Vec::new();
    loop {
        let b = sieve
            .frontier_next(1000)
            .map_err(|e| format!("read failed: {e}"))?;
        if b.is_empty() {
            break;
        }
        rest.extend(b);
    }
    sieve
        .frontier_commit()
        .map_err(|e| format!("commit failed: {e}"))?;
    sieve.close().map_err(|e| format!("close failed: {e}"))?;
    // Committed reads are never re-emitted; acknowledged pushes are never lost; what was
    // lost is a suffix of the push stream.
    let mut f = o.consumed.clone();
    f.extend(rest.iter().cloned());
    let mut g = o.consumed.clone();
    g.extend(o.in_doubt.iter().cloned());
    g.extend(rest);
    for k in (o.acked..=o.pushed.len()).rev() {
        let m = emit_model(&o.pushed[..k]);
        if m == g {
            return Ok(Survivor {
                pushes: k,
                in_doubt_consumed: true,
            });
        }
        if m == f {
            return Ok(Survivor {
                pushes: k,
                in_doubt_consumed: false,
            });
        }
    }
    Err(format!(
        "F = {:?} is not the model of a prefix of {:?} from {} (consumed {})",
        lossy(&f),
        lossy(&o.pushed),
        o.acked,
        o.consumed.len()
    ))
}

/// Reads fuzz input bytes, with zeros past the end.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The options of the fuzzed workloads: inline flushes (deterministic I/O), few slots,
/// merges run at once or deferred (spills beside a merge under way).
fn fuzz_opts(b: u8) -> Options {
    Options::new()
        .slots(1 + usize::from(b & 3))
        .seed(u64::from((b >> 4) & 7))
        .background_flush(false)
        .defer_merges(b & 0x80 != 0)
        .frontier_low(u64::from((b >> 2) & 3))
}

/// A small URL alphabet, so that duplicates are frequent; a few long URLs span frames.
fn fuzz_url(b: u8) -> Vec<u8> {
    let i = b % 24;
    if i == 23 {
        let mut u = b"http://long.example/".to_vec();
        u.resize(3000, b'x');
        u
    } else {
        format!("http://h{}.example/{}", i % 5, i).into_bytes()
    }
}

/// Decodes one step (no `Close`, which [`ops`] handles itself).
fn fuzz_step(b: u8) -> Step {
    match b % 8 {
        0..=3 => Step::Push(fuzz_url(b >> 3)),
        4 => Step::Sync,
        5 => Step::Flush,
        _ => Step::Pop(1 + usize::from(b >> 6)),
    }
}

fn fuzz_image(b: u8, seed: u64) -> CrashImage {
    match b % 8 {
        0 => CrashImage::KillProcess,
        1 => CrashImage::DropAll,
        2 => CrashImage::KeepDataDropDir,
        3 => CrashImage::ZeroedData,
        _ => CrashImage::Random(seed),
    }
}

/// Fuzz target `ops`: random operations against the model, with crashes (each disk image
/// kind) and reopens in between. After each crash the store is checked against the model;
/// the workload then goes on from what survived.
pub fn ops(data: &[u8]) {
    let mut input = Bytes(data);
    let opts = fuzz_opts(input.u8());
    let mut disk = SimDisk::new();
    let mut sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).expect("create");
    let mut o = Observed::default();
    let mut steps = 0;
    while !input.is_empty() && steps < 200 {
        steps += 1;
        let b = input.u8();
        if b % 16 != 15 {
            let step = fuzz_step(b);
            apply(&mut sieve, &step, &mut o).unwrap_or_else(|e| panic!("{step:?}: {e}"));
            continue;
        }
        if b & 0x10 == 0 {
            sieve.close().expect("close");
            o.acked = o.pushed.len();
        } else {
            // A crash: the sieve is dropped without closing, the disk keeps an image.
            let image = fuzz_image(b >> 5, u64::from(input.u16()));
            let img = disk.crash_image(image);
            drop(sieve);
            disk = img;
            let s = verify(&disk, &opts, &o).unwrap_or_else(|e| panic!("{image:?}: {e}"));
            o.pushed.truncate(s.pushes);
            o.acked = s.pushes;
            if s.in_doubt_consumed {
                o.consumed.append(&mut o.in_doubt);
            }
            o.in_doubt.clear();
        }
        sieve = Sieve::open_with(Arc::new(disk.clone()), opts.clone()).expect("reopen");
        o.emitted = sieve.stats().expect("stats").emitted;
    }
    sieve.close().expect("close");
    o.acked = o.pushed.len();
    verify(&disk, &opts, &o).unwrap_or_else(|e| panic!("at the end: {e}"));
}

/// Fuzz target `crash_schedule`: a workload chosen by the input is crashed at an operation
/// chosen by the input, the disk image kind too; then recovery itself is crashed at one of
/// its operations. Both states must check against the model.
pub fn crash_schedule(data: &[u8]) {
    let mut input = Bytes(data);
    let opts = fuzz_opts(input.u8());
    let k = u64::from(input.u16());
    let image = input.u8();
    let j = u64::from(input.u8());
    let seed = u64::from(input.u16());
    let mut steps = Vec::new();
    while !input.is_empty() && steps.len() < 64 {
        let b = input.u8();
        steps.push(if b % 16 == 15 {
            Step::Close
        } else {
            fuzz_step(b)
        });
    }
    let clean = SimDisk::new();
    run(&clean, &opts, &steps);
    let disk = SimDisk::new();
    disk.crash_at(1 + k % clean.ops().max(1));
    let o = run(&disk, &opts, &steps);
    let image_byte = image;
    let image = fuzz_image(image_byte, seed);
    let img = disk.crash_image(image);
    let trace = disk.trace();
    let last_ops = &trace[trace.len().saturating_sub(8)..];
    verify(&img, &opts, &o)
        .unwrap_or_else(|e| panic!("crash at op {k} ({image:?}) after {last_ops:?}: {e}"));
    if j > 0 {
        let again = img.crash_image(CrashImage::KillProcess);
        let before = again.ops() as usize;
        again.crash_at(j);
        drop(Sieve::open_with(Arc::new(again.clone()), opts.clone()));
        let image2 = fuzz_image(image_byte >> 2, seed + 1);
        let img2 = again.crash_image(image2);
        verify(&img2, &opts, &o).unwrap_or_else(|e| {
            let recovery = &again.trace()[before..];
            panic!(
                "crash at op {k} ({image:?}) after {last_ops:?}, then recovery crash at its \
                 op {j} ({image2:?}) after {recovery:?}: {e}"
            )
        });
    }
}

/// Fuzz target `canary`: fails on purpose on inputs that start with `W!`, so that a
/// fuzzing run that finds nothing is known to be able to find something.
pub fn canary(data: &[u8]) {
    if data.starts_with(b"W!") {
        panic!("canary: the fuzzer found the planted failure");
    }
}

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
    s.close().expect("close");
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

/// The kind of a file of a sieve directory, from its name.
pub fn kind_of(name: &str) -> FileKind {
    match name.as_bytes().first() {
        Some(b'a') => FileKind::A,
        Some(b'z') => FileKind::Z,
        Some(b'r') => FileKind::R,
        Some(b'f') => FileKind::F,
        Some(b'C') => FileKind::Cursor,
        _ => FileKind::Manifest,
    }
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

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Writes the crc32 of `b[from..to]` at `to`, if it fits.
fn seal_at(b: &mut [u8], from: usize, to: usize) {
    if to + 4 <= b.len() && from <= to {
        let c = crate::format::crc(&b[from..to]);
        b[to..to + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// Rewrites the crcs of the frames of an A file or F segment (after a `header`-byte header
/// whose crc is its last 4 bytes), as far as the frames' lengths can be followed.
fn seal_frames(b: &mut [u8], header: usize) {
    seal_at(b, 0, header - 4);
    let mut at = header;
    while let Some(len) = get_u32(b, at + 16) {
        let end = at + crate::log::FRAME_HEADER + len as usize;
        if end > b.len() {
            break;
        }
        crate::log::reseal_frame(&mut b[at..end]);
        at = end;
    }
}

/// Rewrites every crc of a Z segment: header, blocks up to the footer the tail names, the
/// footer and the tail.
fn seal_segment(b: &mut [u8]) {
    seal_at(b, 0, 16);
    let Some(tail) = b.len().checked_sub(16) else {
        return;
    };
    seal_at(b, tail, tail + 8);
    let footer = get_u64(b, tail).map_or(tail, |f| (f as usize).min(tail));
    let mut at = 20;
    while let Some(len) = get_u32(b, at + 16) {
        let end = at + 20 + len as usize;
        if end + 4 > footer {
            break;
        }
        seal_at(b, at, end);
        at = end + 4;
    }
    if let Some(blocks) = get_u64(b, footer) {
        let end = (footer as u64 + 16).saturating_add(blocks.saturating_mul(20));
        if end.saturating_add(4) <= tail as u64 {
            seal_at(b, footer, end as usize);
        }
    }
}

/// Rewrites every crc of an R run: header and blocks.
fn seal_run(b: &mut [u8]) {
    seal_at(b, 0, 48);
    let mut at = 52;
    while let Some(count) = get_u32(b, at) {
        let end = at + 4 + (count as usize).saturating_mul(12);
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
        FileKind::A => seal_frames(b, 20),
        FileKind::F => seal_frames(b, 28),
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
fn edit(b: &mut Vec<u8>, input: &mut Bytes<'_>) {
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

fn shared_store() -> &'static (SimDisk, Vec<Vec<u8>>, Vec<String>) {
    static STORE: OnceLock<(SimDisk, Vec<Vec<u8>>, Vec<String>)> = OnceLock::new();
    STORE.get_or_init(|| {
        let (disk, expected) = corruption_store();
        let files = disk.files().into_iter().filter(|n| n != "LOCK").collect();
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
    let mut input = Bytes(data);
    let candidates: Vec<&String> = files.iter().filter(|f| kind_of(f) == kind).collect();
    let name = candidates[usize::from(input.u8()) % candidates.len()];
    let resealed = input.u8() % 4 != 0;
    let img = disk.crash_image(CrashImage::KillProcess);
    let original = img.content(name).expect("the file exists");
    let mut bytes = original.clone();
    edit(&mut bytes, &mut input);
    if resealed {
        reseal(kind, &mut bytes);
    }
    let changed = bytes != original;
    let truncated_only = original.starts_with(&bytes);
    img.set_content(name, bytes);
    let report = check_storage(Arc::new(img.crash_image(CrashImage::KillProcess)));
    let outcome = corruption_outcome(&img);
    match (&outcome, &report) {
        (Err(e @ Error::Corrupt { file, .. }), Ok(report)) => {
            // A file of the store, or one a damaged manifest or cursor names.
            assert!(
                files.contains(file)
                    || ["a-", "z-", "r-", "f-"].iter().any(|p| file.starts_with(p)),
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
        (Err(e), _) => panic!("{name}: not a corruption error: {e}"),
        (Ok(_), Err(e)) => assert!(e.is_corruption(), "{name}: check failed with {e}"),
        (Ok((out, torn)), Ok(_)) => {
            if !changed {
                assert!(out == expected, "{name} unedited: wrong output");
            } else if !resealed && out != expected {
                // Without valid checksums, only the documented torn tail of the newest A
                // may shorten the output, and only at its end, counted.
                let newest_a = files.iter().filter(|f| f.starts_with("a-")).max();
                assert!(Some(name) == newest_a, "{name}: wrong output, silently");
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

/// Runs a fuzz target by name on one input (the corpus replay and the fuzz binaries).
pub fn target(name: &str) -> Option<fn(&[u8])> {
    Some(match name {
        "decode_a" => |d| decode(FileKind::A, d),
        "decode_z" => |d| decode(FileKind::Z, d),
        "decode_r" => |d| decode(FileKind::R, d),
        "decode_f" => |d| decode(FileKind::F, d),
        "decode_cursor" => |d| decode(FileKind::Cursor, d),
        "decode_manifest" => |d| decode(FileKind::Manifest, d),
        "ops" => ops,
        "crash_schedule" => crash_schedule,
        "canary" => canary,
        _ => return None,
    })
}

/// A seeded random input for a target, for smoke runs without a fuzzer.
pub fn random_input(rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let len = rng.below(max_len as u64 + 1) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}
