//! The fuzz targets: random workloads with crashes against the model, and the canary.

use std::sync::Arc;

use super::corrupt::{decode, FileKind};
use super::frontier::{decode_frontier, frontier_ops, FrontierFile};
use super::{apply, run, verify, Bytes, Observed, Step};
use crate::storage::sim::{CrashImage, Rng};
use crate::storage::SimDisk;
use crate::{Options, Sieve};

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

/// Fuzz target `fingerprint`: the fingerprint and the normalised text computed with the
/// processor's AVX-512 loops equal the portable ones. Each byte below 0x80 is that ASCII
/// character (controls included), each other byte one of a few characters of several bytes,
/// letters and digits of other scripts among them, so that runs of ASCII start and end
/// everywhere. Without AVX-512 both sides are the portable loops.
pub fn fingerprint(data: &[u8]) {
    const PIECES: [&str; 16] = [
        "é", "日", "İ", "😀", "ß", "—", "\u{a0}", "ǅ", "ⅷ", "١", "Σ", "ﬁ", "\u{301}", "Ⓐ", "Ä",
        "\u{2028}",
    ];
    let mut text = String::new();
    for &b in data {
        if b < 0x80 {
            text.push(char::from(b));
        } else {
            text.push_str(PIECES[usize::from(b & 15)]);
        }
    }
    let mut wide = crate::neardup::Fingerprinter::new();
    let mut portable = crate::neardup::Fingerprinter::portable();
    let (a, b) = (wide.fingerprint(&text), portable.fingerprint(&text));
    assert_eq!(wide.normalised(), portable.normalised(), "{text:?}");
    assert_eq!(a, b, "{text:?}");
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
        "decode_j" => |d| decode_frontier(FrontierFile::J, d),
        "decode_checkpoint" => |d| decode_frontier(FrontierFile::Checkpoint, d),
        "decode_q" => |d| decode_frontier(FrontierFile::Q, d),
        "decode_q_compressed" => super::frontier::decode_q_compressed,
        "ops" => ops,
        "frontier_ops" => frontier_ops,
        "crash_schedule" => crash_schedule,
        "fingerprint" => fingerprint,
        "canary" => canary,
        _ => return None,
    })
}

/// A seeded random input for a target, for smoke runs without a fuzzer.
pub fn random_input(rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let len = rng.below(max_len as u64 + 1) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}
