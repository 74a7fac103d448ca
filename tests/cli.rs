//! The command-line contract, tested through the built binary: every subcommand, every exit
//! code, the error messages, `uniq` against `LC_ALL=C awk '!seen[$0]++'`, and
//! `push`/`flush`/`pop` against the expected output of the real BFS streams in
//! `../shared/data` (skipped with a message when that data is missing). `uniq` is checked
//! against a hash-set dedup, itself checked against awk; without awk or xz those checks are
//! skipped with a message, or fail when `CRIVELLO_REQUIRE_TOOLS` is set (as `.ci/run` does).

#![cfg(feature = "cli")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_crivello");
/// The shared data: BFS streams and their expected sieve output.
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/");
/// The shared BFS streams, by prefix.
const STREAMS: [&str; 4] = [
    "hollins",
    "california",
    "ukwa-1996-hosts",
    "ukwa-1996-hosts.bfs-all",
];

/// Runs the binary with `args`, feeding `stdin`.
fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crivello");
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    // A command that fails early closes its stdin: ignore the write error.
    let writer = std::thread::spawn(move || drop(pipe.write_all(&input)));
    let out = child.wait_with_output().expect("wait for crivello");
    writer.join().unwrap();
    out
}

/// Runs the binary and requires exit code 0; returns stdout.
fn ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = run(args, stdin);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs the binary, requires exit code `code` and one error line on stderr; returns it.
fn fails(code: i32, args: &[&str], stdin: &[u8]) -> String {
    let out = run(args, stdin);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.starts_with("crivello: ") && err.lines().count() == 1,
        "{args:?}: {err:?}"
    );
    err
}

/// Whether a missing `awk` or `xz` fails the tests instead of skipping their checks
/// (`.ci/run` sets it, after installing both).
fn tools_required() -> bool {
    std::env::var_os("CRIVELLO_REQUIRE_TOOLS").is_some()
}

/// A check that needs a missing tool: skipped with a message, or a failure when tools are
/// required.
fn missing_tool(what: &str) {
    assert!(
        !tools_required(),
        "{what}, and CRIVELLO_REQUIRE_TOOLS is set"
    );
    eprintln!("skipped: {what}");
}

/// Each distinct line of `files` once, in first-appearance order, each ended by "\n" (a
/// file's last line may lack it): what `LC_ALL=C awk '!seen[$0]++' files...` prints,
/// computed here with a hash set. Checked against awk itself when awk is installed.
fn dedup(files: &[&Path]) -> Vec<u8> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).unwrap();
        let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        if bytes.is_empty() {
            continue;
        }
        for line in body.split(|&b| b == b'\n') {
            if seen.insert(line.to_vec()) {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
    }
    match Command::new("awk")
        .env("LC_ALL", "C")
        .arg("!seen[$0]++")
        .args(files)
        .output()
    {
        Ok(awk) if awk.status.success() => {
            assert!(awk.stdout == out, "the reference dedup differs from awk");
        }
        other => missing_tool(&format!("awk is not available ({other:?})")),
    }
    out
}

/// The decompressed shared file `name`, or `None` (with a message) when it or xz is missing.
fn shared(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(DATA).join(name);
    if !path.exists() {
        eprintln!("skipped: {} is missing", path.display());
        return None;
    }
    match Command::new("xz").arg("-dc").arg(&path).output() {
        Ok(out) if out.status.success() => Some(out.stdout),
        other => {
            missing_tool(&format!(
                "cannot decompress {} with xz ({other:?})",
                path.display()
            ));
            None
        }
    }
}

/// A shared BFS stream and its expected sieve output.
fn stream(prefix: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    Some((
        shared(&format!("{prefix}-stream.txt.xz"))?,
        shared(&format!("{prefix}-expected.txt.xz"))?,
    ))
}

/// The stream file prefix: `hollins` becomes `hollins.bfs`.
fn bfs(name: &str) -> String {
    if name.ends_with(".bfs-all") {
        name.to_owned()
    } else {
        format!("{name}.bfs")
    }
}

/// Requires `text` to contain every needle.
fn contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} missing from {text:?}");
    }
}

/// A fresh temporary directory.
fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// The path as a `&str` argument.
fn arg(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temporary path")
}

/// A deterministic pseudo-random generator (xorshift64*).
struct Rng(u64);

impl Rng {
    /// The next pseudo-random number.
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Input that is hard to get byte-exact: empty lines, CRLF, invalid UTF-8, NUL bytes,
/// 1.5 MiB lines, many duplicates, and a last line without "\n".
fn adversarial() -> Vec<u8> {
    let mut rng = Rng(0x5eed_c0ff_ee00_0001);
    let long: Vec<u8> = (0..3 << 19).map(|i| b'a' + (i % 26) as u8).collect();
    let mut v = Vec::new();
    for i in 0..300_000u64 {
        if i % 50_000 == 7 {
            v.extend_from_slice(&long);
            if i % 100_000 == 7 {
                v.push(b'!');
            }
            v.push(b'\n');
            continue;
        }
        match rng.next() % 100 {
            0 => v.extend_from_slice(b""),
            1 => v.extend_from_slice(b"crlf\r"),
            2 => v.extend_from_slice(b"crlf"),
            3 => v.extend_from_slice(&[0xff, 0xfe, b'x', (i % 7) as u8 + 0x80]),
            4 => v.extend_from_slice(&[b'n', 0, b'u', 0, (i % 5) as u8]),
            6 => v.extend_from_slice(b"\r"),
            _ => v.extend_from_slice(
                format!(
                    "http://h{}.example/p/{}",
                    rng.next() % 13,
                    rng.next() % 5_000
                )
                .as_bytes(),
            ),
        }
        v.push(b'\n');
    }
    v.extend_from_slice(b"last line without newline");
    v
}

#[test]
fn help_documents_the_exit_codes_and_version_prints() {
    let help = String::from_utf8(ok(&["--help"], b"")).unwrap();
    for needle in [
        "Exit codes",
        "0  success",
        "1  runtime error",
        "2  usage error",
        "3  `check` found damage",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from --help");
    }
    let stats_help = String::from_utf8(ok(&["stats", "--help"], b"")).unwrap();
    assert!(stats_help.contains("memory_budget") && stats_help.contains("torn_records"));
    let version = String::from_utf8(ok(&["--version"], b"")).unwrap();
    assert_eq!(
        version.trim(),
        format!("crivello {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn usage_errors_exit_with_2() {
    let err = fails(2, &["uniq", "--memory", "12Q"], b"");
    contains_all(&err, &["--memory", "unknown unit"]);
    let err = fails(2, &["push", "d", "--memory", "512K"], b"");
    contains_all(&err, &["--memory", "between"]);
    fails(2, &["pop"], b"");
    fails(2, &["frobnicate"], b"");
}

#[test]
fn push_flush_pop_emit_each_bfs_stream_exactly_as_expected() {
    for name in STREAMS {
        let Some((input, expected)) = stream(&bfs(name)) else {
            continue;
        };
        let d = tmp();
        let dir = d.path().join("sieve");
        ok(&["push", arg(&dir), "--memory", "1M"], &input);
        ok(&["flush", arg(&dir)], b"");
        assert!(
            ok(&["pop", arg(&dir)], b"") == expected,
            "{name}: pop differs from the expected output"
        );
        assert!(
            ok(&["pop", arg(&dir)], b"").is_empty(),
            "{name}: a second pop repeats URLs"
        );
    }
}

#[test]
fn pushes_in_several_runs_then_pop_equal_awk_dedup() {
    let Some((input, expected)) = stream("california.bfs") else {
        return;
    };
    let d = tmp();
    let dir = d.path().join("sieve");
    let lines: Vec<&[u8]> = input.split_inclusive(|&b| b == b'\n').collect();
    for (i, chunk) in lines.chunks(lines.len() / 3 + 1).enumerate() {
        ok(&["push", arg(&dir), "--memory", "1M"], &chunk.concat());
        if i == 1 {
            ok(&["flush", arg(&dir)], b"");
        }
    }
    ok(&["flush", arg(&dir)], b"");
    let popped = ok(&["pop", arg(&dir)], b"");
    assert!(
        popped == expected,
        "pushes in several runs lose or repeat URLs"
    );
    let file = d.path().join("stream.txt");
    std::fs::write(&file, &input).unwrap();
    assert!(popped == dedup(&[&file]));
}

#[test]
fn pop_n_then_pop_prints_the_rest_without_repeats_or_skips() {
    let d = tmp();
    let dir = d.path().join("sieve");
    let urls: Vec<String> = (0..10_000)
        .map(|i| format!("http://example.com/{i}"))
        .collect();
    let input = urls
        .iter()
        .flat_map(|u| [u.as_str(), "\n", u.as_str(), "\n"])
        .collect::<String>();
    ok(&["push", arg(&dir)], input.as_bytes());
    ok(&["flush", arg(&dir)], b"");
    assert_eq!(
        ok(&["pop", arg(&dir), "-n", "2"], b""),
        format!("{}\n{}\n", urls[0], urls[1]).into_bytes()
    );
    let rest = String::from_utf8(ok(&["pop", arg(&dir), "--max", "5000"], b"")).unwrap()
        + &String::from_utf8(ok(&["pop", arg(&dir)], b"")).unwrap();
    assert_eq!(rest.lines().collect::<Vec<_>>(), urls[2..]);
    let stats = String::from_utf8(ok(&["stats", arg(&dir), "--json"], b"")).unwrap();
    contains_all(&stats, &["\"consumed\":10000", "\"pending\":0"]);
}

/// A URL holding a newline, which a store written before pushes refused them may hold, would
/// be two lines: `pop` prints and consumes the URLs before it, then stops at it naming it, and
/// again at every run until the library takes it.
#[test]
fn pop_stops_at_a_url_holding_a_newline_after_consuming_those_before_it() {
    let d = tmp();
    let dir = d.path().join("sieve");
    ok(&["push", arg(&dir)], b"http://a/1\nhttp://a/2\n");
    let mut sieve = crivello::Sieve::open(&dir, crivello::Options::new()).unwrap();
    assert!(
        sieve.push(b"http://x/\nhttp://y/").is_err(),
        "a push refuses it"
    );
    // The command line's own entry, which takes lines it split: as an older build pushed it.
    sieve.push_line(b"http://x/\nhttp://y/").unwrap();
    sieve.push_line(b"http://a/3").unwrap();
    sieve.close().unwrap();
    ok(&["flush", arg(&dir)], b"");
    for printed in ["http://a/1\nhttp://a/2\n", ""] {
        let out = run(&["pop", arg(&dir)], b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), printed);
        contains_all(&err, &["holds a newline (byte 9)", "Sieve::frontier_read"]);
    }
    let mut sieve = crivello::Sieve::open(&dir, crivello::Options::new()).unwrap();
    assert_eq!(
        sieve.frontier_next(1).unwrap(),
        [b"http://x/\nhttp://y/".to_vec()]
    );
    sieve.frontier_commit().unwrap();
    sieve.close().unwrap();
    assert_eq!(ok(&["pop", arg(&dir)], b""), b"http://a/3\n");

    // The URL first of a frame after others (each flush begins a frame): those before it are
    // consumed all the same, `-n` stopping before it or at it.
    let dir = d.path().join("later");
    ok(
        &["push", arg(&dir)],
        b"http://a/1\nhttp://a/2\nhttp://a/3\n",
    );
    ok(&["flush", arg(&dir)], b"");
    let mut sieve = crivello::Sieve::open(&dir, crivello::Options::new()).unwrap();
    sieve.push_line(b"http://x/\ny").unwrap();
    sieve.push_line(b"http://a/4").unwrap();
    sieve.close().unwrap();
    ok(&["flush", arg(&dir)], b"");
    assert_eq!(ok(&["pop", arg(&dir), "-n", "1"], b""), b"http://a/1\n");
    for (args, printed) in [
        (
            &["pop", arg(&dir), "-n", "3"][..],
            "http://a/2\nhttp://a/3\n",
        ),
        (&["pop", arg(&dir)][..], ""),
    ] {
        let out = run(args, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), printed);
        contains_all(&err, &["holds a newline (byte 9)"]);
    }
    let stats = String::from_utf8(ok(&["stats", arg(&dir), "--json"], b"")).unwrap();
    contains_all(&stats, &["\"consumed\":3"]);
    let mut sieve = crivello::Sieve::open(&dir, crivello::Options::new()).unwrap();
    assert_eq!(sieve.frontier_next(1).unwrap(), [b"http://x/\ny".to_vec()]);
    sieve.frontier_commit().unwrap();
    sieve.close().unwrap();
    assert_eq!(ok(&["pop", arg(&dir)], b""), b"http://a/4\n");

    // The store's first URL: the first `pop` prints nothing and still makes the store a
    // plain sieve's, as any first `pop` does (a `lease` after it is refused).
    let dir = d.path().join("first");
    let mut sieve = crivello::Sieve::open(&dir, crivello::Options::new()).unwrap();
    sieve.push_line(b"http://x/\ny").unwrap();
    sieve.push_line(b"http://a/1").unwrap();
    sieve.close().unwrap();
    ok(&["flush", arg(&dir)], b"");
    let out = run(&["pop", arg(&dir)], b"");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stdout, b"");
    let err = fails(1, &["lease", arg(&dir)], b"");
    contains_all(&err, &["plain sieve"]);
}

#[test]
fn push_strips_crlf_and_reports_invalid_lines_by_file_and_line() {
    let d = tmp();
    let dir = d.path().join("sieve");
    let dir = arg(&dir);
    ok(&["push", dir], b"http://a/\r\nhttp://a/\nhttp://b/");
    let err = fails(1, &["push", dir], b"http://c/\n\nhttp://d/\n");
    contains_all(&err, &["<stdin>: line 2: empty line", "--skip-invalid"]);
    let file = Path::new(dir).parent().unwrap().join("long.txt");
    std::fs::write(&file, b"http://e/\nhttp://0123456789/\n").unwrap();
    let err = fails(1, &["push", dir, "--max-url-len", "10", arg(&file)], b"");
    let at = format!(
        "{}: line 2: line longer than the maximum of 10 bytes",
        file.display()
    );
    contains_all(&err, &[&at]);
    // The lines before an invalid line are durable; skipped lines are counted.
    let out = run(
        &["push", dir, "--skip-invalid", "--max-url-len", "10"],
        b"\r\nhttp://0123456789/\nhttp://f/\n",
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped 2 invalid lines"));
    ok(&["flush", dir], b"");
    assert_eq!(
        ok(&["pop", dir], b""),
        b"http://a/\nhttp://b/\nhttp://c/\nhttp://e/\nhttp://f/\n"
    );
    let err = fails(1, &["push", dir, "/no/such/file"], b"");
    contains_all(&err, &["cannot open /no/such/file"]);
}

#[test]
fn a_locked_directory_is_refused_clearly() {
    let d = tmp();
    let dir = d.path().join("sieve");
    let held = crivello::Sieve::open(&dir, crivello::Options::new().memory(1 << 20)).unwrap();
    let err = fails(1, &["push", arg(&dir)], b"http://a/\n");
    contains_all(&err, &["locked", "another crivello process is using"]);
    fails(1, &["check", arg(&dir)], b"");
    held.close().unwrap();
    ok(&["push", arg(&dir)], b"http://a/\n");
}

#[test]
fn stats_prints_every_key_as_text_or_json_and_refuses_a_missing_directory() {
    let d = tmp();
    let dir = d.path().join("sieve");
    ok(
        &["push", arg(&dir), "--memory", "1M"],
        b"http://a/\nhttp://b/\nhttp://a/\n",
    );
    // The stable keys, in the order of the fields of `Stats`.
    let keys = "pushed buffered distinct emitted consumed pending unmerged runs flushes merges \
                segments torn_records torn_bytes bytes_a bytes_z bytes_r bytes_f bytes_meta \
                memory_budget slots seed";
    let keys: Vec<&str> = keys.split_whitespace().collect();
    let text = String::from_utf8(ok(&["stats", arg(&dir)], b"")).unwrap();
    let json = ok(&["stats", arg(&dir), "--json", "--memory", "1M"], b"");
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let object = json.as_object().expect("one JSON object");
    assert_eq!(object.len(), keys.len());
    for &key in &keys {
        assert!(object[key].is_u64(), "{key}");
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(key)),
            "{key} missing from:\n{text}"
        );
    }
    assert_eq!(object["pushed"], 3);
    assert_eq!(object["memory_budget"], 1 << 20);
    let missing = d.path().join("missing");
    let err = fails(1, &["stats", arg(&missing)], b"");
    contains_all(&err, &["no such directory"]);
    assert!(!missing.exists(), "stats created the directory");
    let err = fails(1, &["check", arg(d.path())], b"");
    contains_all(&err, &["no sieve"]);
}

#[test]
fn a_store_whose_manifest_was_removed_is_damaged_not_absent() {
    // Before, `check`, `stats` and `pop` said there was no sieve there and that `push`
    // creates one, while `push` said the manifest was missing.
    let d = tmp();
    let dir = d.path().join("s");
    ok(&["push", arg(&dir)], b"http://a/\nhttp://b/\n");
    ok(&["flush", arg(&dir)], b"");
    std::fs::remove_file(dir.join("MANIFEST")).unwrap();
    // `check` finds damage (exit 3); the others fail on it (exit 1), as on any damage.
    for (cmd, code) in [
        ("check", 3),
        ("stats", 1),
        ("pop", 1),
        ("flush", 1),
        ("push", 1),
    ] {
        let err = fails(code, &[cmd, arg(&dir)], b"");
        contains_all(&err, &["MANIFEST", "missing", "restore it from a backup"]);
        assert!(!err.contains("creates one"), "{cmd}: {err}");
    }
    assert!(
        !dir.join("MANIFEST").exists(),
        "a command made a new store over the old"
    );
}

/// A sieve of 3000 URLs pushed and flushed in `parent`/sieve.
fn flushed_sieve(parent: &Path) -> PathBuf {
    let dir = parent.join("sieve");
    let urls: String = (0..3000)
        .map(|i| format!("http://example.org/page/{i}\n"))
        .collect();
    ok(&["push", arg(&dir)], urls.as_bytes());
    ok(&["flush", arg(&dir)], b"");
    dir
}

/// Flips one byte in the middle of the sieve file whose name starts with `prefix`.
fn flip_middle_byte(dir: &Path, prefix: &str) {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}* file"));
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
}

#[test]
fn check_passes_a_sound_store_and_exits_3_on_a_flipped_byte() {
    for prefix in ["f-", "z-"] {
        let d = tmp();
        let dir = flushed_sieve(d.path());
        let report = String::from_utf8(ok(&["check", arg(&dir)], b"")).unwrap();
        assert!(
            report.starts_with("ok: ") && report.contains("3000 signatures"),
            "{report}"
        );
        flip_middle_byte(&dir, prefix);
        let err = fails(3, &["check", arg(&dir)], b"");
        contains_all(&err, &["is damaged", prefix, "corrupt"]);
    }
    // Met while working, corruption is a runtime error.
    let d = tmp();
    let dir = flushed_sieve(d.path());
    flip_middle_byte(&dir, "f-");
    let err = fails(1, &["pop", arg(&dir)], b"");
    contains_all(&err, &["corrupt", "crivello check"]);
}

#[test]
fn check_passes_a_store_whose_buffered_pushes_a_reopen_spilled() {
    // Each `push` leaves its URLs buffered in A; the next open spills them as a run (a
    // generation with no end frame, below the next one): sound, not torn.
    let d = tmp();
    let dir = d.path().join("s");
    for url in ["http://a/\n", "http://b/\n", "http://c/\n"] {
        ok(&["push", arg(&dir)], url.as_bytes());
    }
    let report = String::from_utf8(ok(&["check", arg(&dir)], b"")).unwrap();
    assert!(report.starts_with("ok: "), "{report}");
}

#[test]
fn check_says_what_bytes_after_a_clean_close_are_when_they_are_not_a_frame() {
    // After a clean close, the newest A file ends with the mark a close leaves after its seal:
    // bytes that hold no push. Damaged, they read as a torn tail that begins exactly at the
    // recorded clean end, and `check` says so instead of speaking of a crash.
    let d = tmp();
    let dir = d.path().join("s");
    ok(&["push", arg(&dir)], b"http://a/\nhttp://b/\nhttp://c/\n");
    let a = dir.join("a-0000000000000000.log");
    let mut bytes = std::fs::read(&a).unwrap();
    let at = bytes.len() - 9;
    bytes[at] ^= 0x01;
    std::fs::write(&a, &bytes).unwrap();
    let report = String::from_utf8(ok(&["check", arg(&dir)], b"")).unwrap();
    assert!(
        report.starts_with("ok: ")
            && report.contains("right after where the last clean close left it")
            && !report.contains("torn tail"),
        "{report}"
    );
    ok(&["flush", arg(&dir)], b"");
    let popped = ok(&["pop", arg(&dir)], b"");
    assert_eq!(popped, b"http://a/\nhttp://b/\nhttp://c/\n");

    // More than the close's mark after the clean end: frames a later process wrote and never
    // closed (it crashed), torn or damaged. The note does not say they held nothing.
    let dir = d.path().join("t");
    ok(&["push", arg(&dir)], b"http://a/\nhttp://b/\nhttp://c/\n");
    let a = dir.join("a-0000000000000000.log");
    let mut bytes = std::fs::read(&a).unwrap();
    let at = bytes.len() - 9;
    bytes[at] ^= 0x01;
    bytes.extend_from_slice(&[0x5a; 100]);
    std::fs::write(&a, &bytes).unwrap();
    let report = String::from_utf8(ok(&["check", arg(&dir)], b"")).unwrap();
    assert!(
        report.starts_with("ok: ")
            && report.contains("132 bytes that are not whole frames")
            && report.contains("a later process wrote and never closed")
            && report.contains("pushes are lost")
            && !report.contains("  "),
        "{report}"
    );
}

#[test]
fn a_store_whose_generations_reuse_older_files_checks_sound_with_nothing_torn() {
    // At 1 MiB, S holds about 30,000 slots: each push below fills several generations of
    // URLs of varied lengths (one in four repeats an earlier one), and the later ones are
    // written over superseded ones, ending inside their old frames.
    let d = tmp();
    let dir = d.path().join("s");
    let mut rng = crivello::storage::sim::Rng::new(7);
    let mut lines: Vec<String> = Vec::new();
    for i in 0..300_000u64 {
        if i % 4 == 3 {
            let earlier = lines[rng.below(i) as usize].clone();
            lines.push(earlier);
            continue;
        }
        let pad = "p".repeat(rng.below(40) as usize);
        lines.push(format!("http://h{}.example/{pad}/{i}", rng.below(3000)));
    }
    let (first, second) = lines.split_at(170_000);
    for part in [first, second] {
        ok(
            &["push", "-q", "--memory", "1M", arg(&dir)],
            (part.join("\n") + "\n").as_bytes(),
        );
        let stats = String::from_utf8(ok(&["stats", arg(&dir)], b"")).unwrap();
        assert!(stats.contains("torn_bytes     0\n"), "{stats}");
        let report = String::from_utf8(ok(&["check", arg(&dir)], b"")).unwrap();
        assert!(report.starts_with("ok: "), "{report}");
    }
    ok(&["flush", arg(&dir)], b"");
    let mut seen = std::collections::HashSet::new();
    let want: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| seen.insert(*l))
        .collect();
    let popped = String::from_utf8(ok(&["pop", arg(&dir)], b"")).unwrap();
    assert!(
        popped.lines().eq(want.iter().copied()),
        "the frontier differs"
    );
}

#[test]
fn uniq_equals_awk_on_adversarial_input_with_many_flushes() {
    let d = tmp();
    let file = d.path().join("adversarial.txt");
    std::fs::write(&file, adversarial()).unwrap();
    let expected = dedup(&[&file]);
    let out = ok(
        &[
            "uniq",
            "--memory",
            "1M",
            "--tmp-dir",
            arg(d.path()),
            arg(&file),
        ],
        b"",
    );
    assert!(
        out == expected,
        "uniq differs from awk ({} vs {} bytes)",
        out.len(),
        expected.len()
    );
    // Several inputs, standard input among them; a file may end without "\n".
    let second = d.path().join("second.txt");
    std::fs::write(
        &second,
        b"crlf\r\n\nx\0y\nlast line without newline\nno newline",
    )
    .unwrap();
    let expected = dedup(&[&second, &file, &second]);
    let stdin = std::fs::read(&file).unwrap();
    let out = ok(
        &["uniq", "--memory", "1M", arg(&second), "-", arg(&second)],
        &stdin,
    );
    assert!(out == expected, "uniq of several inputs differs from awk");
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        2,
        "the temporary store was left behind"
    );
}

#[test]
fn uniq_reads_standard_input_redirected_from_a_file_or_named_as_a_path() {
    let d = tmp();
    let file = d.path().join("adversarial.txt");
    std::fs::write(&file, adversarial()).unwrap();
    let expected = dedup(&[&file, &file]);
    // Standard input is a regular file: read where it is, twice through "-".
    let out = Command::new(BIN)
        .args(["uniq", "--memory", "1M", "-", arg(&file)])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout == expected, "uniq < file differs from awk");
    // A path that is a pipe (/dev/stdin): spooled.
    let out = ok(
        &["uniq", "--memory", "1M", "/dev/stdin", arg(&file)],
        &adversarial(),
    );
    assert!(out == expected, "uniq /dev/stdin differs from awk");
}

#[test]
fn uniq_equals_awk_on_the_bfs_streams() {
    for name in STREAMS {
        let Some((input, expected)) = stream(&bfs(name)) else {
            continue;
        };
        let out = ok(&["uniq", "--memory", "1M", "--quiet"], &input);
        assert!(
            out == expected,
            "{name}: uniq differs from the expected output"
        );
        let d = tmp();
        let file = d.path().join("stream.txt");
        std::fs::write(&file, &input).unwrap();
        assert!(out == dedup(&[&file]), "{name}: uniq differs from awk");
    }
}

#[test]
fn uniq_refuses_an_over_long_line_and_removes_its_store() {
    let d = tmp();
    let store = d.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let err = fails(
        1,
        &["uniq", "--max-line-length", "10", "--tmp-dir", arg(&store)],
        b"short\n0123456789A\n",
    );
    contains_all(
        &err,
        &["<stdin>: line 2: longer than the maximum of 10 bytes"],
    );
    assert_eq!(
        std::fs::read_dir(&store).unwrap().count(),
        0,
        "the temporary store was left behind"
    );
}

#[test]
fn uniq_into_a_closed_pipe_ends_quietly_with_0() {
    let d = tmp();
    let file = d.path().join("big.txt");
    let lines: String = (0..400_000)
        .map(|i| format!("http://example.net/{i}\n"))
        .collect();
    std::fs::write(&file, lines).unwrap();
    let store = d.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let (status, err) = (d.path().join("status"), d.path().join("stderr"));
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"{ "$0" uniq "$1" --tmp-dir "$2" 2>"$3"; echo $? >"$4"; } | head -1"#)
        .args([BIN, arg(&file), arg(&store), arg(&err), arg(&status)])
        .output()
        .expect("run sh");
    assert_eq!(out.stdout, b"http://example.net/0\n");
    assert_eq!(std::fs::read_to_string(&status).unwrap().trim(), "0");
    assert_eq!(std::fs::read_to_string(&err).unwrap(), "");
    assert_eq!(
        std::fs::read_dir(&store).unwrap().count(),
        0,
        "the temporary store was left behind"
    );
}

#[test]
fn uniq_interrupted_removes_its_store_and_exits_130() {
    // Ctrl-C, and `timeout`'s or a service manager's SIGTERM.
    for signal in ["-INT", "-TERM"] {
        uniq_interrupted_by(signal);
    }
}

fn uniq_interrupted_by(signal: &str) {
    let d = tmp();
    let mut child = Command::new(BIN)
        .args(["uniq", "--tmp-dir", arg(d.path())])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"http://a/\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_dir(d.path()).unwrap().next().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "uniq did not create its store"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Give the handler time to be installed after the directory appears.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let killed = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    if !killed.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot send {signal} with kill");
        drop(stdin);
        let _ = child.wait();
        return;
    }
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "the temporary store was left behind after {signal}"
    );
}

#[test]
fn uniq_removes_the_directory_a_killed_uniq_left_and_not_a_running_ones() {
    let d = tmp();
    // The directories of the runs in `d` that hold their lock file.
    let owned = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("OWNER").exists())
            .collect();
        v.sort();
        v
    };
    let start = |n: usize| {
        let mut child = Command::new(BIN)
            .args(["uniq", "--tmp-dir", arg(d.path())])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"http://a/\n").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while owned().len() < n {
            assert!(std::time::Instant::now() < deadline, "no directory of uniq");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        (child, stdin)
    };
    let (mut running, running_stdin) = start(1);
    let running_dir = owned().remove(0);
    let (mut killed, _killed_stdin) = start(2);
    killed.kill().unwrap(); // SIGKILL: no handler runs
    killed.wait().unwrap();
    let left: Vec<PathBuf> = owned().into_iter().filter(|p| *p != running_dir).collect();
    assert_eq!(left.len(), 1, "the killed uniq left its directory");
    // A directory of the user's own under such a name, with an `OWNER` of its own: kept.
    let mine = d.path().join("crivello-uniq-mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("OWNER"), b"me\n").unwrap();
    std::fs::write(mine.join("keep.txt"), b"data\n").unwrap();

    let out = run(
        &["uniq", "--tmp-dir", arg(d.path())],
        b"http://b/\nhttp://a/\nhttp://b/\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"http://b/\nhttp://a/\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!("removed {}", left[0].display())) && said.contains("killed"),
        "{said}"
    );
    assert!(!left[0].exists(), "the killed uniq's directory was kept");
    assert!(
        running_dir.exists(),
        "a running uniq's directory was removed"
    );

    assert!(
        mine.join("keep.txt").exists(),
        "a user's own directory was removed"
    );
    std::fs::remove_dir_all(&mine).unwrap();

    drop(running_stdin);
    assert!(running.wait().unwrap().success());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

/// The text of a file of the crate.
fn crate_file(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap()
}

#[test]
fn the_readme_shows_the_crate_example_and_every_stats_key() {
    let lib = crate_file("src/lib.rs");
    let doc: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    let example = |text: &str, fence: &str| -> String {
        let start = text.find(fence).expect("an example") + fence.len();
        text[start..start + text[start..].find("```").unwrap()].to_owned()
    };
    let readme = crate_file("README.md");
    assert_eq!(
        example(&readme, "```rust\n"),
        example(&doc, "```\n"),
        "README example != lib.rs example"
    );
    let d = tmp();
    let dir = d.path().join("sieve");
    ok(&["push", arg(&dir)], b"http://a/\n");
    let json: serde_json::Value =
        serde_json::from_slice(&ok(&["stats", arg(&dir), "--json"], b"")).unwrap();
    for key in json.as_object().unwrap().keys() {
        assert!(
            readme.contains(&format!("| `{key}` |")),
            "README does not document stats key {key}"
        );
    }
}

#[test]
fn a_bad_input_late_in_the_list_stops_the_command_before_anything_is_printed_or_stored() {
    // Before, `uniq a missing` printed a's lines (or some of them) and then failed, and
    // `push` made the store and pushed a's lines before it failed.
    let d = tmp();
    let a = d.path().join("a");
    std::fs::write(&a, b"http://a/\nhttp://b/\n").unwrap();
    let missing = d.path().join("missing");
    let store = d.path().join("s");
    for args in [
        vec!["uniq", arg(&a), arg(&missing)],
        vec!["uniq", "--approx", arg(&a), arg(&missing)],
        vec!["push", arg(&store), arg(&a), arg(&missing)],
    ] {
        let out = run(&args, b"");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: printed before failing");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot open"),
            "{args:?}"
        );
    }
    assert!(
        !store.exists(),
        "push made a store for input it could not read"
    );
    let err = fails(1, &["uniq", arg(&a), arg(d.path())], b"");
    contains_all(&err, &["a directory"]);
    // A named pipe is looked at, not opened, before the reading: opened and closed then, it
    // made the command wait for a writer, whose writes then found no reader.
    let fifo = d.path().join("fifo");
    if std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            std::fs::write(&path, b"x\ny\nx\n").unwrap();
        });
        assert_eq!(
            ok(&["uniq", arg(&a), arg(&fifo)], b""),
            b"http://a/\nhttp://b/\nx\ny\n"
        );
        writer.join().unwrap();
    }
}

#[test]
fn stats_of_a_store_another_process_writes_never_reports_damage() {
    // `stats` takes no lock (it never keeps a writer out): it may read files a writer is
    // replacing. Before, about one call in a hundred then failed ("remove MANIFEST.tmp",
    // or a missing A generation: "restore it from a backup"); a failure now is read again.
    let d = tmp();
    let input = d.path().join("in");
    let mut lines = Vec::with_capacity(40 << 20);
    for i in 0..1_000_000u64 {
        lines
            .extend_from_slice(format!("http://h{}.test/p/{i}\n", (i * 7919) % 100_003).as_bytes());
    }
    std::fs::write(&input, &lines).unwrap();
    let dir = d.path().join("s");
    ok(&["push", arg(&dir), "--memory", "1M"], b"http://first/\n");
    let mut push = Command::new(BIN)
        .args(["push", arg(&dir), "--memory", "1M", "-q"])
        .args(std::iter::repeat_n(&input, 10))
        .spawn()
        .unwrap();
    let mut reads = 0;
    while push.try_wait().unwrap().is_none() && reads < 400 {
        let out = run(&["stats", arg(&dir), "--json"], b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "stats failed while a push ran: {err}");
        reads += 1;
    }
    assert!(push.wait().unwrap().success());
    assert!(reads > 20, "{reads} reads while the push ran");
}

/// A store's directory moved away and another store's put in its place while a `push` runs:
/// the push writes nothing into the other store (it wrote its MANIFEST there, by the path,
/// and the other store was lost) and fails, naming what happened; both stores stay sound,
/// the moved one as last committed.
#[test]
fn a_directory_replaced_while_a_command_runs_is_not_written_into() {
    let t = tmp();
    let (a, b, old) = (
        t.path().join("a"),
        t.path().join("b"),
        t.path().join("a.old"),
    );
    ok(
        &["push", arg(&a), "-q"],
        b"http://a.test/1\nhttp://a.test/2\n",
    );
    ok(&["push", arg(&b), "-q"], b"http://b.test/1\n");
    let mut push = Command::new(BIN)
        .args(["push", arg(&a), "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = push.stdin.take().unwrap();
    // The push takes its lock as its open begins (a second opener is refused), then reads
    // the store's files: the move comes while it reads them or after, and either way the
    // push says what happened (an open that read two stores' files says that, not that
    // either store is damaged).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let held = || std::fs::File::open(a.join("LOCK")).is_ok_and(|f| f.try_lock_shared().is_err());
    while !held() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(held(), "the push never took its lock");
    std::fs::rename(&a, &old).unwrap();
    std::fs::rename(&b, &a).unwrap();
    // (The push may have ended already, its open having met the move: a closed pipe.)
    let _ = input.write_all(b"http://a.test/3\n");
    drop(input);
    let out = push.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("moved, removed or replaced"), "{err}");
    // The store now at `a` is the other one, whole; the one moved holds what it committed.
    ok(&["check", arg(&a)], b"");
    ok(&["flush", arg(&a)], b"");
    assert_eq!(ok(&["pop", arg(&a)], b""), b"http://b.test/1\n");
    ok(&["check", arg(&old)], b"");
    ok(&["flush", arg(&old)], b"");
    let popped = String::from_utf8(ok(&["pop", arg(&old)], b"")).unwrap();
    assert!(
        popped.starts_with("http://a.test/1\nhttp://a.test/2\n"),
        "{popped}"
    );
}

/// A push stopped by an invalid line counts every line before it, the repeats the cache of
/// recent URLs dropped included (it closed without counting them: `pushed 1` for 4 lines).
#[test]
fn a_push_stopped_by_an_invalid_line_counts_the_lines_before_it() {
    let t = tmp();
    let d = t.path().join("s");
    let err = fails(1, &["push", arg(&d), "-q"], b"a\na\na\na\n\n");
    assert!(err.contains("line 5"), "{err}");
    let stats = String::from_utf8(ok(&["stats", arg(&d)], b"")).unwrap();
    assert!(stats.starts_with("pushed         4\n"), "{stats}");
}

/// The help written to a full disk fails, as every other output does (it exited 0).
#[test]
fn help_that_cannot_be_written_fails() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full");
        return;
    };
    let out = Command::new(BIN)
        .arg("--help")
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("write the help"));
}
