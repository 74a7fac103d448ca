//! The dedup engine of `crivello uniq` (`crivello::uniq`): its output against a reference
//! with every kind of input and many flushes, long lines, inputs that change while they are
//! read, and I/O errors of its scratch storage at every operation.

use std::collections::HashSet;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crivello::storage::sim::FaultKind;
use crivello::storage::SimDisk;
use crivello::uniq::{Error, Input, SharedBuffer, Uniq};
use crivello::Options;
use proptest::prelude::*;

/// What `LC_ALL=C awk '!seen[$0]++'` prints for these inputs in order.
fn reference(inputs: &[&[u8]]) -> Vec<u8> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for input in inputs {
        let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
        if input.is_empty() || input.ends_with(b"\n") {
            lines.pop();
        }
        for line in lines {
            if seen.insert(line) {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
    }
    out
}

/// How an input is handed to the engine.
#[derive(Debug, Clone, Copy)]
enum How {
    /// By its path.
    Path,
    /// As an open regular file (as standard input redirected from a file).
    File,
    /// As a reader that is not a file (as a pipe): spooled.
    Reader,
}

/// A dedup whose output can be read back.
fn engine(disk: &SimDisk, opts: Options) -> (Uniq, Arc<Mutex<Vec<u8>>>) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let uniq = Uniq::new(
        Arc::new(disk.clone()),
        opts,
        Box::new(SharedBuffer(out.clone())),
    )
    .unwrap();
    (uniq, out)
}

fn input(dir: &Path, i: usize, bytes: &[u8], how: How) -> Input {
    let path = dir.join(format!("input-{i}"));
    std::fs::write(&path, bytes).unwrap();
    match how {
        How::Path => Input::path(&path),
        How::File => Input::file(format!("file {i}"), std::fs::File::open(&path).unwrap()),
        How::Reader => Input::reader(format!("reader {i}"), std::io::Cursor::new(bytes.to_vec())),
    }
}

/// Runs the engine over `inputs`; returns its output, or its error and the output so far.
fn dedup(inputs: &[(Vec<u8>, How)], opts: Options, disk: &SimDisk) -> (Result<(), Error>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (mut uniq, out) = engine(disk, opts);
    let mut result = Ok(());
    for (i, (bytes, how)) in inputs.iter().enumerate() {
        result = uniq.read(input(dir.path(), i, bytes, *how));
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = uniq.finish().map(|_| ());
    }
    let printed = out.lock().unwrap().clone();
    (result, printed)
}

/// Small options: `slots` lines per buffer, and at most 8 runs before a merge.
fn small(slots: usize, background: bool) -> Options {
    Options::new()
        .memory(1 << 20)
        .slots(slots)
        .background_flush(background)
        .seed(7)
}

fn line_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::sample::select(vec![
            b"http://a/".to_vec(),
            b"http://b/x".to_vec(),
            Vec::new(),
            b"crlf\r".to_vec(),
            b"nul\0byte".to_vec(),
            b"\xff\xfe not utf-8".to_vec(),
        ]),
        2 => prop::collection::vec(prop::sample::select(b"ab/:.\r\0".to_vec()), 0..6),
    ]
}

fn input_strategy() -> impl Strategy<Value = (Vec<u8>, How)> {
    (
        prop::collection::vec(line_strategy(), 0..60),
        any::<bool>(),
        prop::sample::select(vec![How::Path, How::File, How::Reader]),
    )
        .prop_map(|(lines, last_newline, how)| {
            let mut bytes = lines.join(&b'\n');
            if last_newline && !lines.is_empty() {
                bytes.push(b'\n');
            }
            (bytes, how)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every input kind, files with and without a last "\n", empty lines and files, and
    /// buffers of 1 to 40 lines (so spills, merges and the run limit all happen), with whole
    /// or short reads of the scratch storage: the output is awk's.
    #[test]
    fn the_output_is_awks_whatever_the_inputs_and_the_flushes(
        inputs in prop::collection::vec(input_strategy(), 1..5),
        slots in 1usize..40,
        background in any::<bool>(),
        short_reads in any::<bool>(),
    ) {
        let want = reference(&inputs.iter().map(|(b, _)| &b[..]).collect::<Vec<_>>());
        let disk = SimDisk::new();
        disk.set_short_reads(short_reads);
        let (result, got) = dedup(&inputs, small(slots, background), &disk);
        prop_assert!(result.is_ok(), "{:?}", result);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn the_counts_say_what_was_read_and_printed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut uniq, out) = engine(&SimDisk::new(), small(3, true));
    let bytes = b"a\nb\na\nc\n\nb\nd";
    uniq.read(input(dir.path(), 0, bytes, How::Path)).unwrap();
    assert_eq!(uniq.stats().lines, 7);
    let stats = uniq.finish().unwrap();
    assert_eq!((stats.lines, stats.bytes, stats.printed), (7, 12, 5));
    assert!(stats.flushes >= 3 && stats.merges >= 1, "{stats:?}");
    assert_eq!(*out.lock().unwrap(), b"a\nb\nc\n\nd\n");
}

#[test]
fn lines_longer_than_the_buffers_are_read_and_printed_whole() {
    let long_a = vec![b'a'; 3 << 20];
    let long_b = vec![b'b'; (1 << 20) + 1];
    for how in [How::Path, How::Reader] {
        let mut bytes = Vec::new();
        for line in [&long_a[..], b"x", &long_b, &long_a, b"x"] {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(&long_b);
        bytes.extend_from_slice(b"tail");
        let want = reference(&[&bytes]);
        let opts = small(2, true).max_url_len(8 << 20);
        let (result, got) = dedup(&[(bytes, how)], opts, &SimDisk::new());
        result.unwrap();
        assert!(got == want, "{how:?}: the long lines differ");
    }
}

/// A reader that gives at most a few hundred bytes a read, as a pipe may.
struct Trickle {
    bytes: Vec<u8>,
    at: usize,
    step: usize,
}

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.step = (self.step * 7 + 13) % 509 + 1;
        let n = buf.len().min(self.step).min(self.bytes.len() - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Lines longer than a read, from a reader of short reads: each line's search for its end
/// goes on from where the read before left it (it started again from the line's start,
/// which made a long line from a pipe cost the square of its length), and ends where the
/// line does, at every place a read may end.
#[test]
fn long_lines_from_short_reads_are_read_whole() {
    let mut bytes = Vec::new();
    for (i, len) in [70_000usize, 1, 0, 65_536, 200_000, 3, 70_000, 131_071]
        .iter()
        .enumerate()
    {
        bytes.extend(std::iter::repeat_n(b'a' + (i % 3) as u8, *len));
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(b"tail");
    let want = reference(&[&bytes]);
    let (mut uniq, out) = engine(&SimDisk::new(), small(3, true).max_url_len(1 << 20));
    let trickle = Trickle {
        bytes,
        at: 0,
        step: 0,
    };
    uniq.read(Input::reader("trickle", trickle)).unwrap();
    let stats = uniq.finish().unwrap();
    assert_eq!(stats.lines, 9);
    assert!(*out.lock().unwrap() == want, "the lines differ");
}

#[test]
fn a_line_over_the_maximum_is_refused_with_its_input_and_number() {
    for (bytes, line) in [
        (&b"short\n0123456789A\nok\n"[..], 2),
        (b"0123456789\nshort\n0123456789AB", 3),
        (b"0123456789\n", 0),
    ] {
        for how in [How::Path, How::File, How::Reader] {
            let opts = small(4, true).max_url_len(10);
            let (result, _) = dedup(&[(bytes.to_vec(), how)], opts, &SimDisk::new());
            match (result, line) {
                (Ok(()), 0) => {}
                (Err(Error::LineTooLong { line: l, max, .. }), _) if l == line => {
                    assert_eq!(max, 10)
                }
                (r, _) => panic!("{how:?} {bytes:?}: {r:?}"),
            }
        }
    }
}

#[test]
fn an_open_file_is_read_from_its_current_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in");
    std::fs::write(&path, b"skipped\na\nb\na\n").unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    file.seek(SeekFrom::Start(8)).unwrap();
    let (mut uniq, out) = engine(&SimDisk::new(), small(2, false));
    uniq.read(Input::file("stdin", file)).unwrap();
    uniq.finish().unwrap();
    assert_eq!(*out.lock().unwrap(), b"a\nb\n");
}

/// Reads `first` from a file, changes the file with `change` before anything is printed,
/// and returns what finishing says.
fn changed_under(how: How, change: impl FnOnce(&Path)) -> Result<(), Error> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in");
    std::fs::write(&path, b"one\ntwo\nthree\none\n").unwrap();
    let (mut uniq, _) = engine(&SimDisk::new(), small(1000, true));
    let input = match how {
        How::Path => Input::path(&path),
        How::File => Input::file("in", std::fs::File::open(&path).unwrap()),
        How::Reader => unreachable!("a spooled input cannot change"),
    };
    uniq.read(input)?;
    change(&path);
    uniq.finish().map(|_| ())
}

/// A change made to an input file, by name.
type Change = (&'static str, Box<dyn FnOnce(&Path)>);

/// Writes `bytes` over the start of the file at `path`.
fn overwrite(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn an_input_changed_before_its_lines_are_printed_is_an_error() {
    for how in [How::Path, How::File] {
        // Unchanged: fine.
        changed_under(how, |_| {}).unwrap();
        let changes: [Change; 3] = [
            (
                "same length, other bytes",
                Box::new(|p| overwrite(p, b"uno\n")),
            ),
            // The same lines, in another order: a check of the lines alone would pass.
            (
                "two lines of one length swapped",
                Box::new(|p| overwrite(p, b"two\none\n")),
            ),
            (
                "truncated",
                Box::new(|p| {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(p)
                        .unwrap()
                        .set_len(6)
                        .unwrap()
                }),
            ),
        ];
        for (what, change) in changes {
            let r = changed_under(how, change);
            assert!(
                matches!(r, Err(Error::InputChanged { .. })),
                "{how:?}, {what}: {r:?}"
            );
        }
    }
    // Replaced by another file under the same path.
    let r = changed_under(How::Path, |p| {
        let other = p.with_extension("new");
        std::fs::write(&other, b"one\ntwo\nthree\none\n").unwrap();
        std::fs::rename(&other, p).unwrap();
    });
    assert!(matches!(r, Err(Error::InputChanged { .. })), "{r:?}");
}

#[test]
fn an_input_changed_in_a_batch_of_several_is_named() {
    // Three inputs in one batch; the one that changes is named, whichever it is.
    for (changed, how) in [
        (0, How::Path),
        (1, How::File),
        (2, How::Path),
        (1, How::Path),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<_> = ["a", "b", "c"].iter().map(|n| dir.path().join(n)).collect();
        for (i, p) in paths.iter().enumerate() {
            std::fs::write(p, format!("one{i}\ntwo{i}\none{i}\n")).unwrap();
        }
        let (mut uniq, _) = engine(&SimDisk::new(), small(1000, true));
        for p in &paths {
            let name = format!("{}", p.display());
            let input = match how {
                How::File => Input::file(name, std::fs::File::open(p).unwrap()),
                _ => Input::path(p),
            };
            uniq.read(input).unwrap();
        }
        // Other bytes at the start and one more line: the size changes, so the change is
        // seen whatever the resolution of the file's change time.
        overwrite(&paths[changed], format!("uno{changed}\n").as_bytes());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&paths[changed])
            .unwrap()
            .write_all(b"more\n")
            .unwrap();
        match uniq.finish() {
            Err(Error::InputChanged { file }) => {
                assert_eq!(file, format!("{}", paths[changed].display()))
            }
            other => panic!("{changed} {how:?}: {other:?}"),
        }
    }
}

#[test]
fn an_io_error_of_the_scratch_storage_at_any_operation_is_an_error_and_the_output_a_prefix() {
    let inputs: Vec<(Vec<u8>, How)> = (0..3)
        .map(|i| {
            let lines: Vec<String> = (0..40)
                .map(|j| format!("u{}", (i * 17 + j * 5) % 53))
                .collect();
            let how = [How::Path, How::Reader, How::File][i];
            (lines.join("\n").into_bytes(), how)
        })
        .collect();
    let want = reference(&inputs.iter().map(|(b, _)| &b[..]).collect::<Vec<_>>());
    // Count the operations of a clean run.
    let disk = SimDisk::new();
    let (result, got) = dedup(&inputs, small(7, false), &disk);
    result.unwrap();
    assert_eq!(got, want);
    let ops = disk.ops();
    assert!(ops > 20, "too few operations to test: {ops}");
    for k in 1..=ops {
        for kind in [FaultKind::Eio, FaultKind::NoSpace, FaultKind::ShortWrite] {
            let disk = SimDisk::new();
            disk.fail_at(k, kind, true);
            let (result, got) = dedup(&inputs, small(7, k % 2 == 0), &disk);
            // Only the removal of a file no longer needed may fail unnoticed.
            assert!(
                result.is_err() || got == want,
                "fault at operation {k} ({kind:?}): wrong output without an error"
            );
            assert!(
                want.starts_with(&got),
                "fault at operation {k} ({kind:?}): the output is not a prefix"
            );
        }
    }
}
