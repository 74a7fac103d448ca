//! `crivello neardup` as users run it: the exact output contract, bad input, `stats` and
//! `check` of the store, and real `kill -9` cycles (no line skipped, none different, no
//! document stored twice).
//!
//! `CRIVELLO_KILL_CYCLES` sets the number of kill cycles (default 6).

#![cfg(all(unix, feature = "cli"))]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crivello::storage::sim::Rng;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_crivello"))
}

/// Runs `neardup DIR args...` with `input` on stdin; returns (exit code, stdout, stderr).
fn neardup(dir: &Path, args: &[&str], input: &[u8]) -> (i32, String, String) {
    let mut child = bin()
        .arg("neardup")
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn doc(id: &str, text: &str) -> String {
    serde_json::json!({"id": id, "text": text}).to_string() + "\n"
}

const PARAGRAPH: &str = "Permission is hereby granted, free of charge, to any person obtaining a \
    copy of this software and associated documentation files, to deal in the Software without \
    restriction, including without limitation the rights to use, copy, modify, merge, publish, \
    distribute, sublicense, and sell copies of the Software, and to permit persons to whom the \
    Software is furnished to do so, subject to the following conditions: the above copyright \
    notice and this permission notice shall be included in all copies or substantial portions \
    of the Software. THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY KIND, EXPRESS OR \
    IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A \
    PARTICULAR PURPOSE AND NONINFRINGEMENT.";

#[test]
fn the_output_contract() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let edited = PARAGRAPH.replace("free of charge", "free of cost");
    let input = [
        doc("a", PARAGRAPH),
        doc(
            "b",
            "Something else entirely, about crawling the web with politeness.",
        ),
        doc("c", &edited),
        doc("a", "a repeated id: no line"),
        doc("e", ""),
        r#"{"id":"f","text":"extra fields are ignored","lang":"en","n":[1,2]}"#.to_owned() + "\n",
    ]
    .concat();
    let (code, out, err) = neardup(&d, &[], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 5, "{out}");
    let ids: Vec<&str> = lines.iter().map(|l| l[0]).collect();
    assert_eq!(ids, ["a", "b", "c", "e", "f"]);
    for l in &lines {
        assert_eq!(l.len(), 4);
        assert_eq!(l[1].len(), 16);
        assert!(l[1]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
    assert_eq!(&lines[0][2..], ["-", "-"]);
    assert_eq!(lines[2][2], "a");
    assert!(lines[2][3].parse::<u32>().unwrap() <= 3);
    assert_eq!(lines[3][1], "0000000000000000");
    assert!(err.contains("1 with an id seen before"), "{err}");

    // A second run: ids seen before print nothing; matches reach the earlier run's documents.
    let again = [doc("c", &edited), doc("g", PARAGRAPH)].concat();
    let (code, out, err) = neardup(&d, &["-k", "0"], again.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("g\t{}\ta\t0\n", lines[0][1]));
    assert!(err.contains("1 with an id seen before"), "{err}");

    // stats and check know the store.
    let stats = bin().arg("stats").arg(&d).arg("--json").output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(v["documents"], 6);
    assert_eq!(v["repeats"], 2);
    let check = bin().arg("check").arg(&d).output().unwrap();
    assert!(check.status.success());
    assert!(String::from_utf8_lossy(&check.stdout).starts_with("ok:"));

    // k out of range is a usage error.
    let (code, _, err) = neardup(&d, &["-k", "7"], b"");
    assert_eq!(code, 2, "{err}");

    // Damage in the sieve of ids is reported under the file's own name in the directory.
    let cursor = d.join("ids.CURSOR");
    let mut bytes = std::fs::read(&cursor).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    std::fs::write(&cursor, &bytes).unwrap();
    let check = bin().arg("check").arg(&d).output().unwrap();
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(3), "{err}");
    assert!(err.contains("ids.CURSOR"), "{err}");
}

#[test]
fn bad_input_names_file_and_line_and_stores_nothing_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let long_id = "x".repeat(70_000);
    let cases: Vec<(String, &str)> = vec![
        ("not json\n".into(), "not JSON"),
        ("[1,2]\n".into(), "not a JSON object"),
        ("{\"text\":\"t\"}\n".into(), "no \"id\""),
        (
            "{\"id\":5,\"text\":\"t\"}\n".into(),
            "\"id\" is not a string",
        ),
        ("{\"id\":\"z\"}\n".into(), "no \"text\""),
        (
            "{\"id\":\"z\",\"text\":null}\n".into(),
            "\"text\" is not a string",
        ),
        ("{\"id\":\"\",\"text\":\"t\"}\n".into(), "1 to"),
        (doc(&long_id, "t"), "1 to"),
        (doc("tab\there", "t"), "tab or a line break"),
        (doc("-", "t"), "mark of no near-duplicate"),
        ("\n".into(), "an empty line, not a JSON object"),
        // Given twice, which one counts would be a guess (the last one did).
        (
            "{\"id\":\"x\",\"text\":\"t\",\"id\":\"z\"}\n".into(),
            "\"id\" given twice",
        ),
        (
            "{\"text\":\"t\",\"id\":\"x\",\"text\":\"u\"}\n".into(),
            "\"text\" given twice",
        ),
        // A byte-order mark is taken only at a file's start.
        (format!("\u{feff}{}", doc("bom", "t")), "not JSON"),
    ];
    for (i, (bad, why)) in cases.iter().enumerate() {
        let d = dir.path().join(format!("s{i}"));
        let file = dir.path().join(format!("in{i}.jsonl"));
        std::fs::write(
            &file,
            [doc("ok", PARAGRAPH), bad.clone(), doc("after", "t")].concat(),
        )
        .unwrap();
        let out = bin().arg("neardup").arg(&d).arg(&file).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {err}");
        assert!(
            err.contains(&format!("{}: line 2: ", file.display())) && err.contains(why),
            "{bad:?}: {err}"
        );
        // The line before it was stored and printed; nothing of it or after it.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with("ok\t") && stdout.lines().count() == 1,
            "{stdout}"
        );
        let stats = bin().arg("stats").arg(&d).arg("--json").output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
        assert_eq!(v["documents"], 1, "{bad:?}");
    }
    // A text over the maximum is refused, never read whole into a fingerprint.
    let d = dir.path().join("big");
    let big = doc("big", &"a".repeat(crivello::neardup::MAX_TEXT + 1));
    let (code, out, err) = neardup(&d, &[], big.as_bytes());
    assert_eq!(code, 1);
    assert!(out.is_empty() && err.contains("at most"), "{err}");
    // A file saved with a byte-order mark (as some editors save UTF-8) is read.
    let d = dir.path().join("bom");
    let input = format!("\u{feff}{}{}", doc("first", "t"), doc("second", "u"));
    let (code, out, err) = neardup(&d, &[], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("first\t") && out.contains("\nsecond\t"),
        "{out}"
    );
    // Other fields are ignored, valid JSON that a parser building values refuses included:
    // a number past a double's range, arrays nested 200 deep (both stopped the command).
    let d = dir.path().join("other-fields");
    let input = format!(
        "{{\"id\":\"n\",\"text\":\"t\",\"n\":1e400}}\n{{\"id\":\"o\",\"o\":{}{},\"text\":\"u\"}}\n",
        "[".repeat(200),
        "]".repeat(200)
    );
    let (code, out, err) = neardup(&d, &[], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("n\t") && out.contains("\no\t"), "{out}");
    // A line that is not JSON is said to be so, whatever its first byte.
    for bad in ["[1,2\n", "123abc\n", "\"x\" y\n"] {
        let (code, _, err) = neardup(&d, &[], bad.as_bytes());
        assert_eq!(code, 1, "{bad:?}");
        assert!(err.contains("not JSON: "), "{bad:?}: {err}");
    }
    let (code, _, err) = neardup(&d, &[], b"[1,2]\n");
    assert_eq!(code, 1);
    assert!(err.contains("not a JSON object with a string"), "{err}");
}

/// A refused line deep in a large input (the input is parsed in chunks on other threads,
/// read ahead of the documents stored): the documents before it are stored and printed, none
/// after it, in every chunk read ahead; the same input fixed then stores the rest.
#[test]
fn a_refused_line_deep_in_a_large_input_stops_there() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let n = 30_000;
    let bad_at = 7_654;
    // Unrelated texts of about 350 bytes (near-duplicates would make the search the test).
    let line = |i: usize| {
        let mut r = Rng::new(i as u64);
        let words: Vec<String> = (0..20).map(|_| format!("{:x}", r.next_u64())).collect();
        doc(&format!("d{i}"), &words.join(" "))
    };
    let mut bad = String::new();
    for i in 0..n {
        bad.push_str(&if i == bad_at {
            "{oops\n".to_owned()
        } else {
            line(i)
        });
    }
    assert!(bad.len() > 8 << 20, "more chunks than are read ahead");
    let file = dir.path().join("in.jsonl");
    std::fs::write(&file, &bad).unwrap();
    let out = bin().arg("neardup").arg(&d).arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}: line {}: not JSON",
            file.display(),
            bad_at + 1
        )),
        "{err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    let want: Vec<String> = (0..bad_at).map(|i| format!("d{i}")).collect();
    assert_eq!(ids, want);
    let fixed: String = (0..n).map(line).collect();
    std::fs::write(&file, &fixed).unwrap();
    let out = bin().arg("neardup").arg(&d).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    let want: Vec<String> = (bad_at..n).map(|i| format!("d{i}")).collect();
    assert_eq!(ids, want);
}

/// A refused line stops the command at once, before the input ends (a stream left open
/// after it), and before any later input is opened: its message is the one given, not a
/// later file's.
#[test]
fn a_refused_line_stops_the_command_before_the_input_ends() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let mut child = bin()
        .arg("neardup")
        .arg(&d)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            [doc("ok", PARAGRAPH), "{oops\n".to_owned()]
                .concat()
                .as_bytes(),
        )
        .unwrap();
    stdin.flush().unwrap();
    // The input stays open: the command must not wait for more of it.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting for input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("line 2: not JSON"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok\t"));

    let file = dir.path().join("in.jsonl");
    let missing = dir.path().join("missing.jsonl");
    std::fs::write(
        &file,
        [doc("a", "t"), "[1]\n".to_owned(), doc("b", "u")].concat(),
    )
    .unwrap();
    let out = bin()
        .arg("neardup")
        .arg(dir.path().join("s2"))
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}: line 2: not a JSON object", file.display())),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    // A file that does not open stops the command before anything is read or stored.
    let out = bin()
        .arg("neardup")
        .arg(dir.path().join("s3"))
        .arg(&file)
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot open"), "{err}");
    assert!(out.stdout.is_empty() && !dir.path().join("s3").exists());
}

/// A seeded input: `n` documents, a quarter of them near-duplicates of an earlier one, some
/// ids repeated.
fn input(n: usize) -> Vec<u8> {
    let words = [
        "crawl",
        "frontier",
        "sieve",
        "host",
        "queue",
        "politeness",
        "lease",
        "fetch",
        "page",
        "link",
        "durable",
        "exactly",
        "once",
        "order",
        "memory",
        "disk",
        "merge",
        "segment",
    ];
    let mut r = Rng::new(7);
    let mut texts: Vec<String> = Vec::with_capacity(n);
    let mut out = Vec::new();
    for i in 0..n {
        let text = if i > 0 && r.below(4) == 0 {
            let j = r.below(i as u64) as usize;
            format!("{} edited", texts[j])
        } else {
            (0..40)
                .map(|_| words[r.below(words.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let id = format!("page-{}", r.below(n as u64 * 9 / 10));
        out.extend_from_slice(doc(&id, &text).as_bytes());
        texts.push(text);
    }
    out
}

#[test]
fn kill_9_cycles_skip_no_line_and_store_nothing_twice() {
    let cycles: usize = std::env::var("CRIVELLO_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.jsonl");
    std::fs::write(&file, input(300_000)).unwrap();
    let clean = bin()
        .arg("neardup")
        .arg(dir.path().join("clean"))
        .arg(&file)
        .arg("-q")
        .output()
        .unwrap();
    assert!(clean.status.success());
    let expected: Vec<String> = String::from_utf8(clean.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let all: HashSet<&str> = expected.iter().map(String::as_str).collect();
    let store = dir.path().join("killed");
    let mut r = Rng::new(99);
    let mut printed: HashSet<String> = HashSet::new();
    let mut kills = 0;
    for _ in 0..cycles {
        let mut child = bin()
            .arg("neardup")
            .arg(&store)
            .arg(&file)
            .arg("-q")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        std::thread::sleep(Duration::from_millis(30 + r.below(900)));
        kills += usize::from(child.try_wait().unwrap().is_none());
        let _ = child.kill();
        child.wait().unwrap();
        let out = reader.join().unwrap();
        // Only whole lines count: a kill may cut the last one.
        let whole = out.rfind('\n').map_or("", |i| &out[..=i]);
        for l in whole.lines() {
            assert!(all.contains(l), "a line differs from the clean run's: {l}");
            printed.insert(l.to_owned());
        }
    }
    let last = bin()
        .arg("neardup")
        .arg(&store)
        .arg(&file)
        .arg("-q")
        .output()
        .unwrap();
    assert!(last.status.success());
    for l in String::from_utf8(last.stdout).unwrap().lines() {
        assert!(all.contains(l), "a line differs from the clean run's: {l}");
        printed.insert(l.to_owned());
    }
    assert_eq!(printed.len(), expected.len(), "lines were skipped");
    let stats = bin()
        .arg("stats")
        .arg(&store)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(
        v["documents"],
        expected.len() as u64,
        "a document stored twice or lost"
    );
    let check = bin().arg("check").arg(&store).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    eprintln!("{kills} of {cycles} runs killed before their end");
}

/// The sieve's and the frontier's commands given a near-duplicate store say what it is and
/// what reads it, rather than offering to make a sieve there.
#[test]
fn a_near_duplicate_store_given_to_a_sieves_command_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let (code, _, err) = neardup(&d, &[], doc("a", "some text").as_bytes());
    assert_eq!(code, 0, "{err}");
    for cmd in ["lease", "pop", "queues", "flush"] {
        let out = bin().arg(cmd).arg(&d).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(err.contains("a near-duplicate store"), "{cmd}: {err}");
        assert!(!err.contains("creates one"), "{cmd}: {err}");
    }
}

/// A near-duplicate store whose marker file was removed is damaged, not a directory to
/// make a sieve in: `check` finds the damage (exit 3), the other commands name it (exit 1).
#[test]
fn a_near_duplicate_store_without_its_marker_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let (code, _, err) = neardup(&d, &[], doc("a", "some text").as_bytes());
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(d.join(crivello::neardup::MANIFEST_FILE)).unwrap();
    for (cmd, code) in [("check", 3), ("stats", 1), ("pop", 1)] {
        let out = bin().arg(cmd).arg(&d).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{cmd}: {err}");
        assert!(
            err.contains("NEARDUP") && err.contains("missing") && !err.contains("creates one"),
            "{cmd}: {err}"
        );
    }
}

/// Damage found after the open (a segment's block read by a query) names the store's
/// directory, the file and the offset, and says to run `check`.
#[test]
fn damage_found_by_a_query_names_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("store");
    let docs = input(5_000);
    let (code, _, err) = neardup(&d, &["-q"], &docs);
    assert_eq!(code, 0, "{err}");
    let seg = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a segment");
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    // The same texts under ids not stored: every query reads the blocks of its fingerprint.
    let again = String::from_utf8(docs).unwrap().replace("page-", "again-");
    let (code, _, err) = neardup(&d, &["-q"], again.as_bytes());
    let name = seg.file_name().unwrap().to_str().unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "near-duplicate store {}: {name}: corrupt at offset",
            d.display()
        )) && err.contains("crivello check"),
        "{err}"
    );
}

/// `neardup DIR` fed through a pipe: the child, its stdin, its output lines as a thread
/// reads them, and that thread.
fn piped_neardup(
    dir: &Path,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    use std::io::BufRead as _;
    let mut child = bin()
        .arg("neardup")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    (child, stdin, rx, lines)
}

/// A slow input (a crawler that sends each page as it fetches it): each document is stored
/// and its line printed while the input stays open, not once a batch of 65,536 fills or the
/// input ends.
#[test]
fn a_slow_input_is_answered_as_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut stdin, rx, lines) = piped_neardup(&dir.path().join("s"));
    let texts = [PARAGRAPH, "an unrelated short page", PARAGRAPH];
    for (i, text) in texts.iter().enumerate() {
        stdin
            .write_all(doc(&format!("page{i}"), text).as_bytes())
            .unwrap();
        stdin.flush().unwrap();
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no line for page{i} while the input stays open"));
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[0], format!("page{i}"), "{line}");
        let matched = if i == 2 { ["page0", "0"] } else { ["-", "-"] };
        assert_eq!(fields[2..], matched, "{line}");
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    lines.join().unwrap();
    // An input that never pauses for long (a page every 50 ms): the first lines come while
    // it still flows, not once 65,536 documents are in.
    let (mut child, mut stdin, rx, lines) = piped_neardup(&dir.path().join("s2"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..400 {
            if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let page = doc(
                &format!("steady{i}"),
                &format!("page {i} of a steady crawl"),
            );
            stdin.write_all(page.as_bytes()).unwrap();
            stdin.flush().unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(15));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let first = first.expect("no line while the input flowed");
    assert!(first.starts_with("steady0\t"), "{first}");
    assert!(child.wait().unwrap().success());
    lines.join().unwrap();
}
