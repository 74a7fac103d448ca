//! `crivello uniq --approx`: the Bloom filter against its theory, and the command line's
//! contract: a subsequence of the exact output, in order, never a line twice; memory fixed
//! on an endless pipe; its options.

mod common;

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};

use crivello::uniq::approx::{Bloom, Layout, Sizing};

const BIN: &str = env!("CARGO_BIN_EXE_crivello");

/// Feeds `n` distinct lines through a filter sized for `n` at `p`; returns the lines dropped
/// and the number the theory expects: the sum over the lines of the rate the filter had when
/// each came (integrated in steps of 1,000 lines, at the lines inserted so far).
fn drops(layout: Layout, n: u64, p: f64) -> (u64, f64) {
    let sizing = Sizing::for_expected_and_rate(layout, n, p);
    let mut bloom = Bloom::new(sizing);
    let (mut dropped, mut expected) = (0u64, 0.0f64);
    const STEP: u64 = 1000;
    for i in 0..n {
        if i % STEP == 0 {
            expected += STEP.min(n - i) as f64 * sizing.rate_after(bloom.inserted());
        }
        let line = (i ^ 0x5bd1_e995).to_le_bytes();
        dropped += u64::from(!bloom.insert(&line));
    }
    (dropped, expected)
}

#[test]
fn the_drop_rate_is_within_20_percent_of_the_theory() {
    let mut cases = vec![];
    for p in [0.01, 0.001] {
        for n in [1_000_000, 10_000_000] {
            cases.push((Layout::Standard, n, p));
        }
        cases.push((Layout::Blocked, 1_000_000, p));
    }
    for (layout, n, p) in cases {
        let (dropped, expected) = drops(layout, n, p);
        let ratio = dropped as f64 / expected;
        eprintln!("{layout:?} n {n} p {p}: {dropped} dropped, {expected:.0} expected ({ratio:.3})");
        assert!(
            (0.8..=1.2).contains(&ratio),
            "{layout:?}, {n} lines at {p}: {dropped} dropped, the theory says {expected:.0}"
        );
    }
}

/// Runs `crivello uniq --approx ARGS` on `input`; returns stdout and stderr.
fn approx(args: &[&str], input: &[u8]) -> (Vec<u8>, String) {
    let out = run_approx(args, input);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    (out.stdout, err)
}

/// `crivello uniq --approx ARGS` fed `input`, whatever its exit.
fn run_approx(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .arg("uniq")
        .arg("--approx")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || drop(pipe.write_all(&data)));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// The exact dedup of `input`'s lines, in first-appearance order.
fn exact(input: &[u8]) -> Vec<Vec<u8>> {
    let mut seen = HashSet::new();
    common::split_lines(input)
        .into_iter()
        .filter(|l| seen.insert(l.clone()))
        .collect()
}

/// Whether `sub` is a subsequence of `all`.
fn is_subsequence(sub: &[Vec<u8>], all: &[Vec<u8>]) -> bool {
    let mut it = all.iter();
    sub.iter().all(|l| it.any(|a| a == l))
}

#[test]
fn the_output_is_an_ordered_subsequence_of_the_exact_output_with_no_line_twice() {
    // Repeats near and far, empty lines, CR, NUL, a last line without "\n".
    let mut input = Vec::new();
    for i in 0..300_000u32 {
        let j = (i.wrapping_mul(2_654_435_761) >> 8) % 120_000;
        input.extend_from_slice(format!("http://h{}.example/{j}\n", j % 97).as_bytes());
        if i % 1000 == 0 {
            input.extend_from_slice(b"\n\r\n\0x\n");
        }
    }
    input.extend_from_slice(b"last");
    let want = exact(&input);
    // A generous filter drops (almost) nothing; a tiny one drops many lines.
    for (args, min_share) in [
        (&["--memory", "4M"][..], 0.999),
        (&["--memory", "1M", "--expected", "200000"][..], 0.5),
        (&["--expected", "1e5", "--fp-rate", "0.2"][..], 0.5),
    ] {
        let (out, _) = approx(args, &input);
        let got = common::split_lines(&out);
        assert!(
            is_subsequence(&got, &want),
            "{args:?}: not an ordered subsequence"
        );
        let distinct: HashSet<&Vec<u8>> = got.iter().collect();
        assert_eq!(distinct.len(), got.len(), "{args:?}: a line printed twice");
        let share = got.len() as f64 / want.len() as f64;
        assert!(share >= min_share && share <= 1.0, "{args:?}: {share}");
    }
    // The same file read twice: the second copy adds nothing.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, &input).unwrap();
    let path = file.to_str().unwrap();
    let (twice, _) = approx(&["--memory", "4M", path, path], b"");
    let (once, _) = approx(&["--memory", "4M", path], b"");
    assert_eq!(twice, once);
}

#[test]
fn verbose_reports_the_sizing_and_the_rate_and_bad_options_are_refused() {
    let input: Vec<u8> = (0..50_000)
        .flat_map(|i| format!("u{i}\n").into_bytes())
        .collect();
    let (out, err) = approx(
        &["--verbose", "--expected", "1e5", "--fp-rate", "0.001"],
        &input,
    );
    assert!(
        err.contains("k = 10") && err.contains("once 100000 distinct"),
        "{err}"
    );
    assert!(err.contains("50000 lines read"), "{err}");
    assert!(err.contains("full"), "{err}");
    assert!(common::split_lines(&out).len() >= 49_900);
    for (args, says) in [
        (&["--fp-rate", "0"][..], "strictly between 0 and 1"),
        (&["--fp-rate", "1.5"][..], "strictly between 0 and 1"),
        (&["--expected", "0"][..], "at least 1"),
        (&["--expected", "lots"][..], "not a count"),
        // Options that would do nothing: refused rather than ignored.
        (&["--tmp-dir", "/nonexistent"][..], "cannot be used with"),
        (&["--verbose", "-q"][..], "cannot be used with"),
    ] {
        let out = Command::new(BIN)
            .args(["uniq", "--approx"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}"
        );
    }
    let out = Command::new(BIN)
        .args([
            "uniq",
            "--approx",
            "--memory",
            "8M",
            "--expected",
            "10",
            "--fp-rate",
            "0.1",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("two of them"));
    // A sizing no machine serves (8.63 TiB for one line at 1e-300): a usage error, not an
    // abort of the allocator.
    let out = run_approx(&["--expected", "1", "--fp-rate", "1e-300"], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("crivello: ")
            && err.contains("cannot be allocated")
            && err.lines().count() == 1,
        "{err}"
    );
    // An --expected whose standard size is 2^64 bits or more (it wrapped to 0, and the
    // doubling of 0 never ended): refused.
    for expected in ["6393154322601327296", "18446744073709551615"] {
        let out = run_approx(&["--expected", expected, "--fp-rate", "0.25"], b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{expected}: {err}");
    }
    // A --memory of 2^61 bytes or more: the bits saturate and the filter cannot be
    // allocated (the product wrapped, and a filter of 64 bytes dropped nearly every line).
    for memory in ["2305843009213693952", "4294967296G", "3000000000000000000"] {
        let out = run_approx(&["--memory", memory], b"1\n2\n3\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{memory}: {err}");
        assert!(
            err.contains("cannot be allocated") && out.stdout.is_empty(),
            "{err}"
        );
    }
    // A rate no filter of the given size reaches, even for one line (the hash functions are
    // at most 24): refused, not run at a rate it never promised.
    for args in [
        &["--fp-rate", "1e-300"][..],
        &["--memory", "8M", "--fp-rate", "1e-200"],
        &["--expected", "1000000000000", "--fp-rate", "1e-300"],
    ] {
        let out = run_approx(args, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("no Bloom filter reaches a false-positive rate of 1.00e-")
                && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    let out = Command::new(BIN)
        .args(["uniq", "--expected", "10"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--expected without --approx");
}

#[test]
#[allow(
    clippy::zombie_processes,
    reason = "libc::wait4 reaps the child, to read its peak RSS"
)]
fn memory_stays_fixed_on_an_endless_pipe() {
    // 10^7 distinct lines through a pipe into a 16 MiB filter.
    let mut child = Command::new(BIN)
        .args(["uniq", "--approx", "--memory", "16M", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut buf = Vec::with_capacity(1 << 20);
        for i in 0..10_000_000u64 {
            buf.extend_from_slice(format!("http://host{}.example/page/{i}\n", i % 9973).as_bytes());
            if buf.len() >= 1 << 20 {
                pipe.write_all(&buf).unwrap();
                buf.clear();
            }
        }
        pipe.write_all(&buf).unwrap();
    });
    let lines = BufReader::new(child.stdout.take().unwrap())
        .split(b'\n')
        .count();
    writer.join().unwrap();
    let pid = child.id() as i32;
    // wait4 gives the child's peak RSS.
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 writes into `status` and `usage`
    // only, for the child this test spawned and has not waited for.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    eprintln!("{lines} lines printed of 10^7, peak RSS {peak_mib:.1} MiB");
    assert!(lines > 9_900_000, "{lines}");
    assert!(
        peak_mib < 16.0 + 12.0,
        "peak RSS {peak_mib:.1} MiB for a 16 MiB filter"
    );
}

/// A line longer than `--max-line-length` stops the command, naming it, after the lines
/// before it are printed (each distinct one once, in order).
#[test]
fn the_lines_before_one_too_long_are_printed_before_it_stops() {
    let mut input: Vec<u8> = (0..10_000)
        .flat_map(|i| format!("{}\n", i % 7_000).into_bytes())
        .collect();
    // New lines last: the ones a batch not yet printed holds when the long line comes.
    input.extend((0..101).flat_map(|i| format!("new{i}\n").into_bytes()));
    input.extend_from_slice(b"12345678901234567890\nafter\n");
    let out = run_approx(&["--max-line-length", "10"], &input);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("line 10102"), "{err}");
    let before = &input[..input.len() - b"12345678901234567890\nafter\n".len()];
    let printed: Vec<Vec<u8>> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let want = exact(before);
    assert!(is_subsequence(&printed, &want), "not a subsequence");
    // With the default sizing, nearly every distinct line (7,101) gets through, and the
    // last ones before the long line all do.
    assert!(printed.len() > 7_000, "{} lines printed", printed.len());
    for i in 0..101 {
        let line = format!("new{i}").into_bytes();
        assert!(printed.contains(&line), "new{i} was not printed");
    }
}

/// Each line is printed once it is read: a pipe that stays open (`tail -f`) sees its lines
/// before the input ends. Before, they waited until 256 KiB of output had gathered.
#[cfg(feature = "cli")]
#[test]
fn each_line_of_an_open_pipe_is_printed_before_the_input_ends() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crivello"))
        .args(["uniq", "--approx", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        while out.read_line(&mut line).unwrap() > 0 {
            tx.send(std::mem::take(&mut line)).unwrap();
        }
    });
    for (i, l) in ["first\n", "first\n", "second\n"].iter().enumerate() {
        stdin.write_all(l.as_bytes()).unwrap();
        stdin.flush().unwrap();
        if i != 1 {
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("a line read is printed while the input stays open");
            assert_eq!(got, *l);
        }
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    assert!(rx.try_recv().is_err(), "the repeat was printed");
}

/// A filter sized for far more lines than its memory holds drops most new lines: the
/// command says so even without `--verbose`; a filter of a sane size says nothing.
#[test]
fn a_filter_too_small_for_its_lines_is_warned_of() {
    let input: Vec<u8> = (0..10)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let (out, err) = approx(&["--expected", "1e12", "--memory", "1M"], &input);
    assert!(out.len() <= input.len());
    assert!(err.contains("warning"), "{err}");
    assert!(err.contains("1000000000000 distinct lines"), "{err}");
    assert!(err.contains("larger --memory"), "{err}");
    let (out, err) = approx(&["--expected", "1e6", "--memory", "1M"], &input);
    assert_eq!(out, input);
    assert!(!err.contains("warning"), "{err}");
    // A high rate that --fp-rate chose is not warned of.
    let (_, err) = approx(&["--memory", "1M", "--fp-rate", "0.5"], &input);
    assert!(!err.contains("warning"), "{err}");
}
