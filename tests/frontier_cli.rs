//! The frontier's command line, through the built binary: `push`, `lease`, `done`,
//! `policy`, `block`, `pause`, `resume`, `queues`, their `--crawl`, the mode a first reader
//! fixes, and bad input.

#![cfg(feature = "cli")]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_crivello");

/// Starts the binary with `args`, its standard input, output and error piped.
fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crivello")
}

/// Runs the binary with `args` in `dir`'s parent, feeding `stdin`.
fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = spawn(args);
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || drop(pipe.write_all(&input)));
    let out = child.wait_with_output().expect("wait for crivello");
    writer.join().unwrap();
    out
}

/// Runs the binary, requires exit code `code`; returns stdout and stderr.
fn expect(code: i32, args: &[&str], stdin: &[u8]) -> (String, String) {
    let out = run(args, stdin);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(out.status.code(), Some(code), "{args:?}: {e}");
    (o, e)
}

fn lines(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

#[test]
fn a_crawl_loop_through_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("crawl");
    let d = d.to_str().unwrap();
    let seeds = b"http://a.test/\nhttp://b.test/\nhttp://a.test/x\nhttp://a.test/\n";
    expect(0, &["push", d], seeds);
    // One URL of each host, the leases durable before they are printed.
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(lines(&out), ["http://a.test/", "http://b.test/"]);
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(out, "", "one URL of a host at a time");
    // The fetch of a.test found links; it took 0.5 s.
    expect(0, &["push", d], b"http://a.test/y\nhttp://c.test/\n");
    let (_, err) = expect(
        0,
        &["done", d],
        b"http://a.test/\t0.5\nhttp://never.test/\n",
    );
    assert!(err.contains("1 URL was not leased"), "{err}");
    let (out, _) = expect(0, &["lease", d, "-n", "10"], b"");
    assert_eq!(lines(&out), ["http://a.test/x", "http://c.test/"]);
    // Queues as rows and as JSON.
    let (out, _) = expect(0, &["queues", d], b"");
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(&rows[0][..4], ["a.test", "1", "1", "1"]);
    let (out, _) = expect(0, &["queues", d, "--json"], b"");
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["key"], "a.test");
    assert_eq!(first["done"], 1);
    // A retry puts a URL back; a refetch serves it again later; pause stops everything.
    expect(0, &["done", d, "--retry"], b"http://c.test/\n");
    expect(0, &["pause", d], b"");
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(out, "");
    expect(0, &["resume", d], b"");
    let (out, _) = expect(0, &["lease", d], b"");
    // b.test's only URL is still leased (30 s).
    assert_eq!(lines(&out), ["http://c.test/"]);
    // A policy and a block, shown by `queues`.
    expect(
        0,
        &[
            "policy",
            d,
            "--key",
            "a.test",
            "--delay",
            "2s",
            "--per-queue",
            "2",
        ],
        b"",
    );
    expect(0, &["block", d, "b.test", "--for", "1h"], b"");
    let (out, _) = expect(0, &["queues", d], b"");
    assert!(
        out.contains("a.test\t") && out.contains("delay=2000ms per-queue=2"),
        "{out}"
    );
    let b_row = out.lines().find(|l| l.starts_with("b.test\t")).unwrap();
    assert!(!b_row.ends_with("\t-"), "blocked: {b_row}");
    // A block whose instant passed is listed as none.
    expect(0, &["block", d, "b.test", "--until", "1"], b"");
    let (out, _) = expect(0, &["queues", d], b"");
    let b_row = out.lines().find(|l| l.starts_with("b.test\t")).unwrap();
    assert!(b_row.ends_with("\t-"), "not blocked: {b_row}");
    expect(0, &["block", d, "b.test", "--for", "1h"], b"");
    // `stats` counts the queues; `check` verifies the journal and the Q runs.
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["queues"], 3);
    let (out, _) = expect(0, &["check", d], b"");
    assert!(out.starts_with("ok"), "{out}");
    // The directory is a frontier now: `pop` refuses it, saying so.
    let (_, err) = expect(1, &["pop", d], b"");
    assert!(err.contains("used as a frontier"), "{err}");
}

#[test]
fn crawls_are_namespaces() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("f");
    let d = d.to_str().unwrap();
    expect(0, &["push", d, "--crawl", "one"], b"http://a.test/\n");
    expect(0, &["push", d, "--crawl", "two"], b"http://a.test/\n");
    let (out, _) = expect(0, &["lease", d, "-n", "10"], b"");
    assert_eq!(out, "", "the default crawl has no URLs");
    for crawl in ["one", "two"] {
        let (out, _) = expect(0, &["lease", d, "-n", "10", "--crawl", crawl], b"");
        assert_eq!(out, "http://a.test/\n", "the same URL in two crawls");
    }
    // An invalid line stops a push to a crawl once the lines before it are durable.
    let (_, err) = expect(
        1,
        &["push", d, "--crawl", "one"],
        b"http://b.test/\n\nhttp://c.test/\n",
    );
    assert!(err.contains("<stdin>: line 2: empty line"), "{err}");
    let (_, err) = expect(
        0,
        &["push", d, "--crawl", "one", "--skip-invalid"],
        b"\nhttp://d.test/\n",
    );
    assert!(err.contains("skipped 1 invalid line"), "{err}");
    // A URL whose queue key (its host) no call could name is an invalid line too.
    let long = format!("https://e.test#{}\n", "section-".repeat(40));
    let (_, err) = expect(1, &["push", d, "--crawl", "one"], long.as_bytes());
    assert!(
        err.contains("<stdin>: line 1: the URL's queue key") && err.contains("327 bytes"),
        "{err}"
    );
    let (_, err) = expect(
        0,
        &["push", d, "--crawl", "one", "--skip-invalid"],
        long.as_bytes(),
    );
    assert!(err.contains("skipped 1 invalid line"), "{err}");
    let (out, _) = expect(0, &["lease", d, "-n", "10", "--crawl", "one"], b"");
    assert_eq!(lines(&out), ["http://b.test/", "http://d.test/"]);
    let (out, _) = expect(0, &["queues", d, "--crawl", "one"], b"");
    assert_eq!(out.lines().count(), 3);
    let (out, _) = expect(0, &["queues", d, "--crawl", "three"], b"");
    assert_eq!(out, "");
}

#[test]
fn a_plain_sieve_refuses_the_frontiers_commands_and_bad_input_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/\n");
    expect(0, &["flush", d], b"");
    expect(0, &["pop", d], b"");
    let (_, err) = expect(1, &["lease", d], b"");
    assert!(err.contains("used as a plain sieve"), "{err}");
    // `serve` refuses it before it listens, with advice for `serve` (not for `lease`).
    let (_, err) = expect(1, &["serve", d, "--addr", "127.0.0.1:0"], b"");
    assert!(
        err.contains(&format!("cannot serve {d}"))
            && err.contains("used as a plain sieve")
            && err.contains("serve another directory")
            && !err.contains("`lease` and `done` on another one"),
        "{err}"
    );
    // A first `pop` that prints nothing (the pushes not flushed yet) fixes the mode too.
    let e = tmp.path().join("e");
    let e = e.to_str().unwrap();
    expect(0, &["push", e], b"http://a.test/\n");
    let (out, _) = expect(0, &["pop", e], b"");
    assert_eq!(out, "");
    let (_, err) = expect(1, &["lease", e], b"");
    assert!(err.contains("used as a plain sieve"), "{err}");
    // `queues` on a store neither `pop` nor `lease` has read lists nothing and leaves its
    // mode free: `pop` then reads it.
    let g = tmp.path().join("g");
    let g = g.to_str().unwrap();
    expect(0, &["push", g], b"http://a.test/\n");
    expect(0, &["flush", g], b"");
    let (out, err) = expect(0, &["queues", g], b"");
    assert!(
        out.is_empty() && err.contains("not used as a frontier yet"),
        "{err}"
    );
    let (out, _) = expect(0, &["pop", g], b"");
    assert_eq!(out, "http://a.test/\n");

    let f = tmp.path().join("f");
    let f = f.to_str().unwrap();
    expect(0, &["push", f], b"http://a.test/\n");
    for bad in [
        &["lease", f, "--ttl", "5"][..],
        &["lease", f, "--ttl", "2d"],
        &["lease", f, "--per-queue", "0"],
        &["policy", f, "--ratio", "0"],
        &["policy", f, "--ratio", "1.5"],
        &["policy", f, "--delay", "1s", "--ratio", "0.5"],
        &["policy", f, "--limit", "-1"],
        &["block", f, "a.test"],
        &["done", f, "--retry", "--refetch-after", "1s"],
    ] {
        expect(2, bad, b"");
    }
    // A negative duration is named with its option (clap's tip named the wrong token).
    for (bad, option) in [
        (&["lease", f, "--ttl", "-1s"][..], "--ttl"),
        (&["policy", f, "--delay", "-1s"], "--delay"),
        (&["block", f, "a.test", "--for", "-5m"], "--for"),
        (&["done", f, "--refetch-after", "-5m"], "--refetch-after"),
    ] {
        let (_, err) = expect(2, bad, b"");
        assert!(err.contains(&format!("for '{option} <DURATION>'")), "{err}");
    }
    // A negative number is refused as the option's value (clap's tip, `-- -1`, was wrong
    // advice: the option would still lack its value).
    for (bad, option) in [
        (&["lease", f, "--per-queue", "-1"][..], "--per-queue <K>"),
        (&["policy", f, "--per-queue", "-1"], "--per-queue <K>"),
        (&["policy", f, "--limit", "-1"], "--limit <N>"),
        (&["lease", f, "-n", "-1"], "--max <N>"),
        (&["serve", f, "--per-queue", "-1"], "--per-queue <N>"),
    ] {
        let (_, err) = expect(2, bad, b"");
        assert!(
            err.contains(&format!("for '{option}'")) && !err.contains("-- -1"),
            "{bad:?}: {err}"
        );
    }
    let (_, err) = expect(1, &["done", f], b"http://a.test/\nhttp://b.test/\tsoon\n");
    assert!(err.contains("<stdin>: line 2"), "{err}");
}

/// `push` without `--crawl` on a frontier whose DEFAULT was deleted pushes to the new
/// DEFAULT (through the frontier, not into the store's first crawl), and refuses a line a
/// push would refuse alone, as on a plain sieve.
#[test]
fn push_reaches_default_after_default_was_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("f");
    let d = dir.to_str().unwrap();
    expect(0, &["push", d, "-q"], b"http://a/1\nhttp://b/1\n");
    expect(0, &["lease", d, "-q"], b"");
    let f = crivello::Frontier::open(&dir, crivello::Options::new()).unwrap();
    f.delete_crawl("").unwrap();
    f.close().unwrap();
    // An empty line is skipped alone (the lines before and after it are pushed).
    let (_, err) = expect(
        0,
        &["push", d, "--skip-invalid"],
        b"http://a/1\n\nhttp://c/1\n",
    );
    assert!(err.contains("skipped 1"), "{err}");
    let f = crivello::Frontier::open(&dir, crivello::Options::new()).unwrap();
    f.flush().unwrap();
    assert_eq!(f.crawls().unwrap(), ["DEFAULT"]);
    // http://a/1 was forgotten with the old DEFAULT: both are new and waiting.
    assert_eq!(f.counts("", None).unwrap().waiting, 2);
    f.close().unwrap();
}

/// The value of `key` in `stats --json`'s object.
fn stat(d: &str, key: &str) -> u64 {
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {out}"))
}

#[test]
fn compressed_queues_are_chosen_once_kept_in_the_directory_and_take_fewer_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, packed) = (tmp.path().join("plain"), tmp.path().join("packed"));
    let (plain, packed) = (plain.to_str().unwrap(), packed.to_str().unwrap());
    // One site's URLs, much alike.
    let urls: String = (0..3_000)
        .map(|i| format!("http://www.example.edu/dept/{}/course-{i}.html\n", i % 40))
        .collect();
    expect(0, &["push", plain, "--crawl", "c"], urls.as_bytes());
    // A push of DEFAULT's URLs with the flag makes the directory a frontier.
    expect(0, &["push", packed, "--compress-queues"], urls.as_bytes());
    // The first lease moves F into the queues: a Q run each.
    for d in [plain, packed] {
        let crawl = if d == plain { "c" } else { "DEFAULT" };
        expect(0, &["lease", d, "--crawl", crawl, "-n", "1"], b"");
    }
    assert_eq!(stat(plain, "q_compressed"), 0);
    assert_eq!(stat(packed, "q_compressed"), 1, "the choice is kept");
    let (a, b) = (stat(plain, "bytes_q"), stat(packed, "bytes_q"));
    assert!(b > 0 && b * 2 < a, "compressed {b} bytes against {a}");
    // Later commands write as the directory says, until it is turned off.
    expect(0, &["push", packed], b"http://www.example.edu/more\n");
    assert_eq!(stat(packed, "q_compressed"), 1);
    expect(0, &["push", packed, "--compress-queues=off"], b"");
    assert_eq!(stat(packed, "q_compressed"), 0);
    // Runs of both kinds are read: every URL comes out once.
    expect(0, &["policy", packed, "--per-queue", "5000"], b"");
    let (out, _) = expect(
        0,
        &["lease", packed, "-n", "10000", "--per-queue", "5000"],
        b"",
    );
    // Every URL pushed, once, but the one leased before.
    let mut served: Vec<&str> = out.lines().collect();
    served.sort_unstable();
    let mut all: Vec<&str> = urls.lines().collect();
    all.push("http://www.example.edu/more");
    all.retain(|u| *u != "http://www.example.edu/dept/0/course-0.html");
    all.sort_unstable();
    assert_eq!(served, all);
    // A value other than on or off is a usage error, and a plain sieve refuses the flag.
    let (_, err) = expect(2, &["push", packed, "--compress-queues=yes"], b"");
    assert!(err.contains("possible values: on, off"), "{err}");
    let sieve = tmp.path().join("sieve");
    let sieve = sieve.to_str().unwrap();
    expect(0, &["push", sieve], b"http://a.test/\n");
    expect(0, &["flush", sieve], b"");
    expect(0, &["pop", sieve], b"");
    let (_, err) = expect(1, &["push", sieve, "--compress-queues"], b"");
    assert!(err.contains("plain sieve"), "{err}");
    // Off, on a directory that is no frontier, changes nothing: it stays a plain sieve.
    let off = tmp.path().join("off");
    let off = off.to_str().unwrap();
    expect(
        0,
        &["push", off, "--compress-queues=off"],
        b"http://a.test/\n",
    );
    expect(0, &["flush", off], b"");
    let (out, _) = expect(0, &["pop", off], b"");
    assert_eq!(out, "http://a.test/\n");
}

/// The README's crawl loop: its code block from `crivello push crawl seeds.txt` on.
fn readme_loop() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("```sh\ncrivello push crawl seeds.txt\n")
        .expect("the README's crawl loop")
        + "```sh\n".len();
    let len = readme[start..].find("```").unwrap();
    readme[start..start + len].to_owned()
}

/// The crawl loop of the README, in a shell, over a small web of 5 hosts: `fetch` prints a
/// page's links (and notes the fetch), each host has a delay of 30 ms. Every page reachable
/// from the seeds is fetched exactly once, and the loop ends by itself.
#[test]
fn the_readmes_shell_crawl_loop_fetches_every_reachable_page_once() {
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if !have("bash") || !have("awk") {
        assert!(
            std::env::var_os("CRIVELLO_REQUIRE_TOOLS").is_none(),
            "bash or awk missing, and CRIVELLO_REQUIRE_TOOLS is set"
        );
        eprintln!("skipped: bash or awk missing");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Page p of host h links p*2+1 and p*2+2 of its host and page p+1 of the next host;
    // pages 0..40 exist. Seeds: page 0 of hosts 0 and 2.
    let url = |h: u32, p: u32| format!("http://h{h}.test/{p}");
    let mut links = String::new();
    for h in 0..5 {
        for p in 0..40 {
            let out: Vec<String> = [(h, p * 2 + 1), (h, p * 2 + 2), ((h + 1) % 5, p + 1)]
                .into_iter()
                .filter(|&(_, q)| q < 40)
                .map(|(g, q)| url(g, q))
                .collect();
            links.push_str(&format!("{} {}\n", url(h, p), out.join(" ")));
        }
    }
    std::fs::write(tmp.path().join("links.txt"), links).unwrap();
    std::fs::write(
        tmp.path().join("seeds.txt"),
        format!("{}\n{}\n", url(0, 0), url(2, 0)),
    )
    .unwrap();
    let readme = readme_loop();
    let (push, rest) = readme.split_once('\n').unwrap();
    let script = format!(
        r#"set -e
crivello() {{ "{bin}" "$@"; }}
fetch() {{ echo "$1" >> fetched.log; awk -v u="$1" '$1 == u {{ for (i = 2; i <= NF; i++) print $i }}' links.txt; }}
# The README's loop, as it is written there, with a delay set after its first push:
{push}
crivello policy crawl --delay 30ms
{rest}"#,
        bin = BIN,
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the loop failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What is reachable from the seeds.
    let mut reach = std::collections::BTreeSet::new();
    let mut todo = vec![(0u32, 0u32), (2, 0)];
    while let Some((h, p)) = todo.pop() {
        if p >= 40 || !reach.insert(url(h, p)) {
            continue;
        }
        todo.extend([(h, p * 2 + 1), (h, p * 2 + 2), ((h + 1) % 5, p + 1)]);
    }
    let log = std::fs::read_to_string(tmp.path().join("fetched.log")).unwrap();
    let fetched: Vec<&str> = log.lines().collect();
    let once: std::collections::BTreeSet<String> = fetched.iter().map(|s| s.to_string()).collect();
    assert_eq!(once.len(), fetched.len(), "a page was fetched twice");
    assert_eq!(once, reach, "the pages fetched are not those reachable");
    let d = tmp.path().join("crawl");
    let (out, _) = expect(0, &["stats", d.to_str().unwrap(), "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["done"], reach.len(), "{st}");
}

/// Nonsense values are usage errors (exit 2); a URL that holds a tab is ended by its line
/// with the seconds after the last tab; a file given as the directory is named as one.
#[test]
fn nonsense_values_are_refused_and_a_url_with_a_tab_can_be_ended() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("f");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/x\ty\n");
    for args in [
        &["lease", d, "--ttl", "0s"][..],
        &["policy", d, "--key", "", "--delay", "1s"],
        &["block", d, "", "--for", "1s"],
        // Past 100 years: a typing error, for every option that takes a duration.
        &["block", d, "a.test", "--for", "99999999999h"],
        &["policy", d, "--delay", "876001h"],
        &["lease", d, "--ttl", "99999999999h"],
        &["done", d, "--refetch-after", "99999999999h"],
    ] {
        expect(2, args, b"");
    }
    // A crawl's name over 1,024 bytes, which no store holds: refused by every subcommand
    // alike (before, `lease`, `done`, `queues` and `policy` printing took it, exit 0).
    let long = "c".repeat(1025);
    for command in [
        "push", "lease", "done", "queues", "policy", "pause", "resume",
    ] {
        let (_, err) = expect(2, &[command, d, "--crawl", &long], b"");
        assert!(
            err.contains("a crawl's name is at most 1024 bytes"),
            "{command}: {err}"
        );
    }
    expect(0, &["queues", d, "--crawl", &"c".repeat(1024)], b"");
    // A done line longer than --max-url-len allows is named, whatever it holds; a negative
    // time says so.
    let mut long = vec![b'x'; (64 << 10) + 100];
    long.push(b'\n');
    let (_, err) = expect(1, &["done", d], &long);
    assert!(
        err.contains("line 1: longer than --max-url-len (65536 bytes)"),
        "{err}"
    );
    let (_, err) = expect(1, &["done", d], b"http://a.test/x\t-1\n");
    assert!(
        err.contains("line 1: the time after the tab is negative"),
        "{err}"
    );
    // `policy` with nothing to set prints the policy in force, the default's or a key's.
    let (out, _) = expect(0, &["policy", d], b"");
    assert_eq!(out, "delay=0ms per-queue=1 limit=0\n");
    expect(
        0,
        &[
            "policy", d, "--key", "b.test", "--ratio", "0.5", "--limit", "7",
        ],
        b"",
    );
    let (out, _) = expect(0, &["policy", d, "--key", "b.test"], b"");
    assert_eq!(out, "ratio=0.5 per-queue=1 limit=7\n");
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(out, "http://a.test/x\ty\n");
    let (_, err) = expect(0, &["done", d], b"http://a.test/x\ty\t0.5\n");
    assert!(!err.contains("not leased"), "{err}");
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["done"], 1, "{st}");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let (_, err) = expect(1, &["lease", file.to_str().unwrap()], b"");
    assert!(err.contains("not a directory"), "{err}");
}

/// `lease`'s own lines end their leases in `done`, whatever their URLs hold: a tab followed
/// by text that is not seconds, or by a number (the URL's own, not a fetch's time), or a
/// trailing "\r", in one batch with a line looked for in vain under its one alternative;
/// a line that reads as another URL leased with its seconds ends that one. A line that is
/// neither a URL leased nor `URL<TAB>SECONDS` still stops the command, the lines before it
/// ended.
#[test]
fn the_lines_lease_prints_end_their_leases_whatever_the_urls_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("f");
    let d = d.to_str().unwrap();
    let urls: [&[u8]; 8] = [
        b"http://a.test/x\ty",
        b"http://b.test/x\t1.5",
        b"http://c.test/x\t-1",
        b"http://d.test/x\r",
        b"http://e.test/x\ty\r",
        // Found at the second alternative only: the whole line with its "\r".
        b"http://g.test/x\t5\r",
        b"http://h.test/x",
        b"http://i.test/x",
    ];
    // (`push` removes one "\r" at a line's end: a URL's own is the one before it.)
    let input: Vec<u8> = urls.iter().flat_map(|u| [*u, b"\r\n"].concat()).collect();
    expect(0, &["push", d], &input);
    let (out, _) = expect(0, &["lease", d], b"");
    let mut printed: Vec<&str> = out.split_terminator('\n').collect();
    printed.sort_unstable();
    let mut want: Vec<String> = urls
        .iter()
        .map(|u| String::from_utf8(u.to_vec()).unwrap())
        .collect();
    want.sort_unstable();
    assert_eq!(printed, want);
    // `lease`'s lines but h's and i's, and a line of no lease whose one alternative (the
    // line whole) is no lease either, in one batch.
    let mut lines: String = out
        .split_inclusive('\n')
        .filter(|l| !l.starts_with("http://h.test/") && !l.starts_with("http://i.test/"))
        .collect();
    lines.push_str("http://j.test/none\t1\n");
    let (_, err) = expect(0, &["done", d], lines.as_bytes());
    assert!(err.contains("1 URL was not leased"), "{err}");
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["done"], 6, "{st}");
    assert_eq!(st["leased"], 2, "{st}");
    // A line that is no URL leased, whole or before its tab, is malformed still; the line
    // before it is ended.
    let (_, err) = expect(1, &["done", d], b"http://h.test/x\nhttp://f.test/\tz\n");
    assert!(
        err.contains(
            "line 2: the time after the tab is not a number of seconds, and the whole line is \
             no URL leased"
        ),
        "{err}"
    );
    assert!(!err.contains("not leased:"), "{err}");
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["done"], 7, "{st}");
    // Both `U` and `U<TAB>5` leased: the line `U<TAB>5` ends `U`'s lease, a fetch of 5 s.
    expect(0, &["push", d], b"http://k.test/x\nhttp://k.test/x\t5\n");
    expect(
        0,
        &["policy", d, "--key", "k.test", "--per-queue", "2"],
        b"",
    );
    let (out, _) = expect(0, &["lease", d, "--per-queue", "2"], b"");
    assert!(
        out.contains("http://k.test/x\n") && out.contains("http://k.test/x\t5\n"),
        "{out}"
    );
    expect(0, &["done", d], b"http://k.test/x\t5\n");
    let (out, _) = expect(0, &["queues", d, "--json"], b"");
    let k = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|q| q["key"] == "k.test")
        .unwrap();
    assert_eq!(
        (k["leased"].as_u64(), k["done"].as_u64()),
        (Some(1), Some(1)),
        "{k}"
    );
    let (_, err) = expect(0, &["done", d], b"http://k.test/x\t5\n");
    assert!(!err.contains("not leased"), "{err}");
}

/// A fetch said to take ages, or a block past the year 9999, would hold a queue back for
/// ever: they are refused, naming the line or the option; what a queue holds back for years
/// still waits, and `lease --wait` waits for it rather than ending as if nothing waited.
#[test]
fn a_queue_held_back_for_years_still_waits_and_absurd_times_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("f");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/1\nhttp://a.test/2\n");
    expect(0, &["policy", d, "--ratio", "0.000001"], b"");
    let (out, _) = expect(0, &["lease", d, "-n", "1"], b"");
    assert_eq!(out, "http://a.test/1\n");
    for took in ["1e300", "18446744073709551616", "31536001"] {
        let line = format!("http://a.test/1\t{took}\n");
        let (_, err) = expect(1, &["done", d], line.as_bytes());
        assert!(
            err.contains("line 1") && err.contains("more than a year"),
            "{err}"
        );
    }
    for until in ["18446744073709552", "253402300800"] {
        let (_, err) = expect(2, &["block", d, "b.test", "--until", until], b"");
        assert!(err.contains("--until"), "{err}");
    }
    expect(0, &["block", d, "b.test", "--until", "253402300799"], b"");
    // A fetch of a day under a ratio of a millionth: the next in about 2,700 years.
    expect(0, &["done", d], b"http://a.test/1\t86400\n");
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (st["waiting"].as_u64(), st["done"].as_u64()),
        (Some(1), Some(1)),
        "{st}"
    );
    let mut wait = spawn(&["lease", d, "--wait"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let ended = wait.try_wait().unwrap();
    let _ = wait.kill();
    let out = wait.wait_with_output().unwrap();
    assert!(
        ended.is_none(),
        "lease --wait ended while a URL waits: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

/// A hand-out that gives nothing for a reason of the store's says so on stderr: hand-outs
/// paused, or a crawl with no queues (a name mistyped); `-q` says nothing.
#[test]
fn an_empty_lease_says_when_hand_outs_are_paused_or_the_crawl_is_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("p");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/1\n");
    let (out, err) = expect(0, &["lease", d, "--crawl", "NOPE"], b"");
    assert!(out.is_empty());
    assert!(
        err.contains("NOPE has no queues") && err.contains("DEFAULT"),
        "{err}"
    );
    expect(0, &["pause", d], b"");
    let (out, err) = expect(0, &["lease", d], b"");
    assert!(out.is_empty());
    assert!(err.contains("paused") && err.contains("resume"), "{err}");
    let (_, err) = expect(0, &["lease", d, "-q"], b"");
    assert!(err.is_empty(), "{err}");
    expect(0, &["resume", d], b"");
    let (out, err) = expect(0, &["lease", d], b"");
    assert_eq!(out, "http://a.test/1\n");
    assert!(err.is_empty(), "{err}");
}

/// Whether a process holds a lock on `file` (Linux's `/proc/locks`, by the file's inode).
fn held(file: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(file) else {
        return false;
    };
    let ino = format!(":{} ", meta.ino());
    std::fs::read_to_string("/proc/locks").is_ok_and(|l| l.lines().any(|x| x.contains(&ino)))
}

/// `lease --wait` started while another process holds the directory (a `push` still
/// reading) waits for it, as it waits for the next URL due.
#[test]
fn lease_wait_started_while_another_process_holds_the_directory_waits_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("w");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/1\n");
    expect(0, &["lease", d, "-n", "0"], b"");
    // With --wait it would wait for ever: a usage error.
    let out = run(&["lease", d, "-n", "0", "--wait"], b"");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("-n 1 or more"));
    let mut push = spawn(&["push", d, "-q"]);
    let mut input = push.stdin.take().unwrap();
    input.write_all(b"http://b.test/1\n").unwrap();
    input.flush().unwrap();
    // Until the push holds the directory (its lock, as the kernel lists it: a probe that
    // took the lock itself could make the push fail).
    let start = std::time::Instant::now();
    loop {
        if held(&std::path::Path::new(d).join("LOCK")) {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "never locked"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut lease = spawn(&["lease", d, "--wait"]);
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(
        lease.try_wait().unwrap().is_none(),
        "lease --wait did not wait for the lock"
    );
    drop(input);
    let pushed = push.wait_with_output().unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let out = lease.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("held by another process"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("http://a.test/1"));
}

/// `lease --wait` leaves the directory free while it waits, and when it wakes to find another
/// process holding it (a `push` still reading its input), it waits for that one too.
#[test]
fn lease_wait_waits_for_a_process_that_holds_the_directory_when_it_wakes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("w");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/1\n");
    expect(0, &["block", d, "a.test", "--for", "1s"], b"");
    let lease = spawn(&["lease", d, "--wait"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // A push that holds the directory until its input ends, past the block's end.
    let mut push = spawn(&["push", d, "-q"]);
    let mut input = push.stdin.take().unwrap();
    input.write_all(b"http://b.test/1\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(input);
    let pushed = push.wait_with_output().unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let out = lease.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8_lossy(&out.stdout);
    assert!(got.contains("http://a.test/1"), "{got}");
}

/// A host that is not UTF-8: `queues` prints its key's bytes as they are, and that field
/// given back to `block` blocks that queue, not a new one.
#[test]
fn a_key_that_is_not_utf8_goes_from_queues_back_to_block() {
    use std::os::unix::ffi::OsStrExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("k");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://h\xff\xfe.test/1\n");
    expect(0, &["lease", d, "--ttl", "1ms"], b"");
    let out = run(&["queues", d], b"");
    let key = out.stdout.split(|&b| b == b'\t').next().unwrap().to_vec();
    assert_eq!(key, b"h\xff\xfe.test");
    let status = Command::new(BIN)
        .arg("block")
        .arg(d)
        .arg(std::ffi::OsStr::from_bytes(&key))
        .args(["--for", "1h"])
        .status()
        .unwrap();
    assert!(status.success());
    let out = run(&["queues", d], b"");
    assert_eq!(
        out.stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        1
    );
    assert!(!out.stdout.ends_with(b"\t-\n"), "not blocked");
    let (leased, _) = expect(0, &["lease", d], b"");
    assert_eq!(leased, "", "the blocked queue handed out a URL");
}

/// Processor time (user and system) of process `pid` so far, in clock ticks (Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: state is the first, utime the 12th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A `lease --wait` of one crawl waits for that crawl's queues only (it looked at every
/// crawl's, and with another crawl's URL due it went round a hundred times a second), and the
/// commands a crawl loop runs beside it wait for the lock it takes a moment each second
/// (pushes failed as locked); a crawl whose URLs wait behind their limit ends the wait with a
/// note, and a pause is waited out.
#[test]
fn lease_wait_of_one_crawl_waits_for_its_own_and_the_commands_beside_it_wait_for_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("w");
    let d = d.to_str().unwrap();
    expect(
        0,
        &["push", d, "--crawl", "Y"],
        b"http://a.test/1\nhttp://a.test/2\n",
    );
    expect(0, &["policy", d, "--delay", "1h"], b"");
    let (out, _) = expect(0, &["lease", d, "--crawl", "Y"], b"");
    expect(0, &["done", d, "--crawl", "Y"], out.as_bytes());
    let mut wait = spawn(&["lease", d, "--wait", "--crawl", "Y", "-q"]);
    // URLs of the default crawl, due at once, one command each.
    for i in 0..60 {
        let line = format!("http://x{i}.test/\n");
        expect(0, &["push", d, "-q"], line.as_bytes());
    }
    let before = cpu_ticks(wait.id());
    std::thread::sleep(std::time::Duration::from_secs(2));
    let spent = cpu_ticks(wait.id()) - before;
    let ended = wait.try_wait().unwrap();
    let _ = wait.kill();
    let _ = wait.wait();
    assert!(ended.is_none(), "lease --wait of crawl Y ended");
    // Two seconds of waiting are two looks at the queues: far below a second of processor
    // time (100 ticks), which a wait that went round every 10 ms took.
    assert!(spent < 50, "lease --wait spent {spent} ticks in 2 s");
    // The default crawl: 60 hosts due, then a queue at its limit.
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(out.lines().count(), 60);
    expect(0, &["done", d], out.as_bytes());
    expect(
        0,
        &["push", d],
        b"http://z.test/1\nhttp://z.test/2\nhttp://z.test/3\n",
    );
    expect(
        0,
        &[
            "policy", d, "--key", "z.test", "--limit", "1", "--delay", "0s",
        ],
        b"",
    );
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(out, "http://z.test/1\n");
    expect(0, &["done", d], out.as_bytes());
    let (out, err) = expect(0, &["lease", d, "--wait"], b"");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("2 URLs wait in queues that reached their limit"),
        "{err}"
    );
    // Paused, `lease --wait` waits for the resume.
    expect(0, &["policy", d, "--key", "z.test", "--limit", "0"], b"");
    expect(0, &["pause", d], b"");
    let wait = spawn(&["lease", d, "--wait"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    expect(0, &["resume", d], b"");
    let out = wait.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "http://z.test/2\n");
}

/// A store removed while a command waits for it (`lease --wait` between two looks, or any
/// command waiting for another's lock) is not made again, empty, under its name: the command
/// fails (it printed nothing and exited 0, which the README's crawl loop reads as a crawl
/// finished, and left an empty store behind).
#[test]
fn a_store_removed_while_a_command_waits_is_not_made_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    let d = dir.to_str().unwrap();
    // Removed at once (moved away, then removed): a command that looks while `rm -rf` is
    // half done finds a store missing some of its files, and rightly reports damage.
    let remove = |dir: &std::path::Path| {
        let gone = tmp.path().join("gone");
        std::fs::rename(dir, &gone).unwrap();
        std::fs::remove_dir_all(&gone).unwrap();
    };
    expect(0, &["push", d], b"http://a.test/1\nhttp://a.test/2\n");
    expect(0, &["lease", d, "--ttl", "1h"], b"");
    let wait = spawn(&["lease", d, "--wait"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    remove(&dir);
    let out = wait.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no such directory"), "{err}");
    assert!(!dir.exists(), "the store was made again");
    // A `pop` waiting for a push's lock, the store removed meanwhile.
    expect(0, &["push", d, "-q"], b"http://a.test/1\n");
    let mut push = spawn(&["push", d, "-q"]);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let pop = spawn(&["pop", d]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    remove(&dir);
    drop(push.stdin.take());
    let _ = push.wait();
    let out = pop.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists(), "the store was made again");
}

/// The bytes process `pid` has read through system calls so far (`rchar` of `/proc/PID/io`).
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    let line = io.lines().find(|l| l.starts_with("rchar:")).unwrap();
    line["rchar:".len()..].trim().parse().unwrap()
}

/// A `lease --wait` with nothing due for an hour opens the store again only when another
/// process changed it (it opened it every second, reading its checkpoint and journal: on a
/// store of 10^6 queues, most of a core), and still wakes for a push, a `done` and a lease's
/// end.
#[test]
fn lease_wait_opens_the_store_again_only_when_it_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("w");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/1\nhttp://b.test/1\n");
    let (out, _) = expect(0, &["lease", d, "--ttl", "1h"], b"");
    assert_eq!(out.lines().count(), 2);
    let mut wait = spawn(&["lease", d, "--wait", "-q"]);
    std::thread::sleep(std::time::Duration::from_millis(800));
    let before = bytes_read(wait.id());
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let after = bytes_read(wait.id());
    assert!(wait.try_wait().unwrap().is_none(), "lease --wait ended");
    assert_eq!(
        before, after,
        "lease --wait read the store while nothing changed"
    );
    // A push by another process wakes it: the new URL is handed out.
    expect(0, &["push", d, "-q"], b"http://c.test/1\n");
    let out = wait.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "http://c.test/1\n");
    // A `done` ending a lease, under a delay of 1 s: woken by the change, the wait then
    // sleeps until the queue is due.
    expect(0, &["push", d, "-q"], b"http://a.test/2\n");
    expect(0, &["policy", d, "--key", "a.test", "--delay", "1s"], b"");
    let wait = spawn(&["lease", d, "--wait", "-q"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    expect(0, &["done", d], b"http://a.test/1\n");
    let out = wait.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "http://a.test/2\n");
    // A lease's end: b.test/1 was leased for an hour; leased again for 1 s, it comes back.
    expect(0, &["done", d, "--retry"], b"http://b.test/1\n");
    let (out, _) = expect(0, &["lease", d, "--ttl", "1s"], b"");
    assert_eq!(out, "http://b.test/1\n");
    let wait = spawn(&["lease", d, "--wait", "-q"]);
    let out = wait.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "http://b.test/1\n");
}

/// `queues` and `flush` show what `push` pushed into a frontier: `queues` merges it first,
/// as `lease` does, and `flush` of a frontier moves it into its queues.
#[test]
fn queues_and_flush_show_the_urls_pushed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("w");
    let d = d.to_str().unwrap();
    expect(
        0,
        &["push", d, "--crawl", "X"],
        b"http://a.test/1\nhttp://b.test/1\n",
    );
    let (out, _) = expect(0, &["queues", d, "--crawl", "X"], b"");
    assert_eq!(out.lines().count(), 2, "{out}");
    expect(0, &["push", d, "--crawl", "X"], b"http://c.test/1\n");
    expect(0, &["flush", d], b"");
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (st["waiting"].as_u64(), st["queues"].as_u64()),
        (Some(3), Some(3)),
        "{st}"
    );
}

/// `done` reading a fetcher's output leaves the directory free until its first batch is
/// read: in `lease | fetch | done`, a `push` of the links found (or the next `lease`) runs
/// while the fetches do. The note of URLs not leased is given even when a later line is
/// refused.
#[test]
fn done_leaves_the_directory_free_until_its_input_comes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("p");
    let d = d.to_str().unwrap();
    expect(0, &["push", d], b"http://a.test/1\nhttp://b.test/1\n");
    let mut done = spawn(&["done", d]);
    let mut input = done.stdin.take().unwrap();
    // (Time for a `done` that opened the frontier at once to hold it.)
    std::thread::sleep(std::time::Duration::from_millis(300));
    // The fetches run: the directory is free for a lease and for a push of links.
    let (leased, _) = expect(0, &["lease", d], b"");
    assert_eq!(lines(&leased), ["http://a.test/1", "http://b.test/1"]);
    expect(0, &["push", d], b"http://a.test/2\n");
    input.write_all(leased.as_bytes()).unwrap();
    drop(input);
    let out = done.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Both ended: the links pushed meanwhile are handed out next.
    let (out, _) = expect(0, &["lease", d], b"");
    assert_eq!(lines(&out), ["http://a.test/2"]);
    // A refused line after a URL not leased: the note still counts it.
    let (_, err) = expect(1, &["done", d], b"http://c.test/9\nnot\tseconds\n");
    assert!(err.contains("1 URL was not leased"), "{err}");
}

/// `lease -n N | done` with a hand-out larger than a pipe holds: `lease` printed while it
/// held the directory, `done` read its first lines and waited for the lock, `lease` waited
/// for the pipe, and `done` gave up ("locked") after 2 s, every URL left leased until its
/// deadline. The lease now lets the directory go before it prints.
#[test]
fn lease_piped_into_done_ends_a_hand_out_larger_than_the_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("big");
    let d = d.to_str().unwrap();
    let mut urls = String::new();
    for i in 0..200 {
        for h in 0..300 {
            urls.push_str(&format!("http://h{h}.example.org/some/path/page{i}.html\n"));
        }
    }
    expect(0, &["push", d, "-q"], urls.as_bytes());
    expect(0, &["policy", d, "--per-queue", "1000"], b"");
    let mut lease = Command::new(BIN)
        .args(["lease", d, "-n", "60000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = lease.stdout.take().unwrap();
    let done = Command::new(BIN)
        .args(["done", d])
        .stdin(Stdio::from(pipe))
        .output()
        .unwrap();
    let leased = lease.wait_with_output().unwrap();
    assert_eq!(leased.status.code(), Some(0), "{leased:?}");
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let (stats, _) = expect(0, &["stats", d], b"");
    let count = |name: &str| -> u64 {
        let line = stats
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {stats}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert_eq!((count("leased"), count("done")), (0, 60_000), "{stats}");
}

/// A URL that ends in "\r" itself (pushed as "URL\r\r\n": `push` removes one "\r") is
/// printed by `lease` as it is, and its line, given back to `done`, ends that lease: `done`
/// took the "\r" for a CRLF's and found nothing leased, so the URL came back at every
/// expiry. A CRLF line of a URL without one still ends its own lease.
#[test]
fn done_ends_a_url_that_ends_in_a_carriage_return_from_leases_own_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("f");
    let d = d.to_str().unwrap();
    expect(
        0,
        &["push", d, "-q"],
        b"http://x.test/a\r\r\nhttp://y.test/b\r\nhttp://z.test/c\r\n",
    );
    let (out, _) = expect(0, &["lease", d, "-q"], b"");
    let mut printed: Vec<&str> = out.split_terminator('\n').collect();
    printed.sort_unstable();
    assert_eq!(
        printed,
        ["http://x.test/a\r", "http://y.test/b", "http://z.test/c"]
    );
    // Back as it was printed, and as a CRLF file would give it.
    let (_, err) = expect(0, &["done", d], out.as_bytes());
    assert!(!err.contains("not leased"), "{err}");
    let (_, err) = expect(0, &["done", d], b"http://x.test/a\r\n");
    assert!(err.contains("1 URL was not leased"), "{err}");
    let (out, _) = expect(0, &["queues", d, "--json"], b"");
    assert_eq!(out.matches("\"done\":1").count(), 3, "{out}");
}

/// `stats`' sizes add up to the store's files: the journal and the checkpoint were left out
/// (84 % of a store after a million URLs leased and done).
#[test]
fn stats_counts_every_file_of_a_frontier() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("f");
    let d = dir.to_str().unwrap();
    let urls: String = (0..3_000)
        .map(|i| format!("http://h{}.test/{i}\n", i % 50))
        .collect();
    expect(0, &["push", d, "-q"], urls.as_bytes());
    for _ in 0..3 {
        let (out, _) = expect(0, &["lease", d, "-q", "-n", "100000"], b"");
        expect(0, &["done", d, "-q"], out.as_bytes());
    }
    let on_disk: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let (out, _) = expect(0, &["stats", d, "--json"], b"");
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    let counted: u64 = stats
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("bytes_"))
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert!(stat(d, "bytes_j") > 0);
    assert_eq!(counted, on_disk, "{out}");
    // A crawl of no queue: nothing listed, and a note as `lease` gives (a mistyped name?).
    let (out, err) = expect(0, &["queues", d, "--crawl", "nosuch"], b"");
    assert!(
        out.is_empty() && err.contains("the crawl nosuch has no queues (the crawls: DEFAULT)"),
        "{err}"
    );
    // A name that would not read as itself in the list is quoted.
    expect(0, &["push", d, "--crawl", " DEFAULT"], b"http://s.test/\n");
    let (_, err) = expect(0, &["queues", d, "--crawl", "a,b"], b"");
    assert!(
        err.contains("the crawl \"a,b\" has no queues (the crawls: \" DEFAULT\", DEFAULT)")
            || err.contains("the crawl \"a,b\" has no queues (the crawls: DEFAULT, \" DEFAULT\")"),
        "{err}"
    );
}

/// A store at `tmp/f` that another user (`nobody`, through `su`) may read and not write,
/// and a way to run this build's binary as that user on it (exit code, stdout, stderr);
/// `None` when the tests do not run as root with `su` (the caller says it skipped).
#[allow(clippy::type_complexity)]
fn as_another_user(
    tmp: &std::path::Path,
) -> Option<Box<dyn Fn(&str) -> (Option<i32>, String, String)>> {
    let root = std::process::Command::new("id").arg("-u").output();
    let as_root = root.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let su =
        std::path::Path::new("/bin/su").exists() || std::path::Path::new("/usr/bin/su").exists();
    if !as_root || !su {
        eprintln!("skipped: needs root and su, to run a command as another user");
        return None;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.join("f");
    let bin = tmp.join("crivello");
    std::fs::copy(env!("CARGO_BIN_EXE_crivello"), &bin).unwrap();
    for path in [&bin, &dir] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    Some(Box::new(move |cmd: &str| {
        let line = format!("{} {cmd} {}", bin.display(), dir.display());
        let out = std::process::Command::new("su")
            .args(["nobody", "-s", "/bin/sh", "-c", &line])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }))
}

/// `queues` of a store this user may not write (its lock file cannot be opened for
/// writing) lists it from a read-only view, as `stats` reads it: it failed with "lock ...:
/// Permission denied". URLs pushed and not yet in their queues are not listed, and a note
/// says so (the listing was silently short). Run as another user; skipped, and said so,
/// where that cannot be done.
#[test]
fn queues_of_a_store_this_user_may_not_write_are_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("f");
    let d = dir.to_str().unwrap();
    expect(0, &["push", d, "-q"], b"http://a.test/1\nhttp://b.test/1\n");
    expect(0, &["lease", d, "-q", "-n", "1"], b"");
    expect(0, &["push", d, "-q"], b"http://c.test/1\nhttp://c.test/2\n");
    let Some(as_nobody) = as_another_user(tmp.path()) else {
        return;
    };
    let (code, out, err) = as_nobody("queues");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("a.test\t") && out.contains("\nb.test\t") && !out.contains("c.test"),
        "{out}"
    );
    assert!(
        err.contains("this listing may lack URLs pushed: 2 pushes (repeats of known URLs among them) are not merged into the queues yet, which needs to write, and this user may not write the store"),
        "{err}"
    );
    let (code, out, err) = as_nobody("stats");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("leased         1"), "{out}");
    // Its owner lists them all, and then the other user too, without a note.
    let (out, _) = expect(0, &["queues", d], b"");
    assert!(out.contains("\nc.test\t2\t"), "{out}");
    let (code, out, err) = as_nobody("queues");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("\nc.test\t2\t") && err.is_empty(),
        "{out}{err}"
    );
}

/// Files this user may not read. A leftover of a crash that a writer would remove (here a
/// `MANIFEST.tmp`) does not stop `stats`: the read-only view removed it by opening it
/// first. And `check` calls an unreadable file what it is, an error of access (exit 1,
/// "check the permissions"), not damage to restore from a backup (exit 3), whatever the
/// file. Run as another user; skipped, and said so, where that cannot be done.
#[test]
fn files_this_user_may_not_read_are_not_damage() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("f");
    let d = dir.to_str().unwrap();
    expect(0, &["push", d, "-q"], b"http://a.test/1\nhttp://b.test/1\n");
    expect(0, &["lease", d, "-q", "-n", "1"], b"");
    let Some(as_nobody) = as_another_user(tmp.path()) else {
        return;
    };
    let unreadable = |name: &str| {
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o000)).unwrap()
    };
    std::fs::write(dir.join("MANIFEST.tmp"), b"x").unwrap();
    unreadable("MANIFEST.tmp");
    let (code, out, err) = as_nobody("stats");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("leased         1"), "{out}");
    let (code, _, err) = as_nobody("check");
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_file(dir.join("MANIFEST.tmp")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "LOCK")
        .collect();
    names.sort();
    assert!(names.iter().any(|n| n.starts_with("j-")), "{names:?}");
    for name in &names {
        unreadable(name);
        let (code, _, err) = as_nobody("check");
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(
            err.contains(name.as_str()) && err.contains("Permission denied"),
            "{name}: {err}"
        );
        assert!(!err.contains("backup"), "{name}: {err}");
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let (code, _, err) = as_nobody("check");
    assert_eq!(code, Some(0), "{err}");
}

/// A directory in the place of the lock file: every writer fails, and says that the lock
/// file is the cause (it named the store's directory), and `check` does not call the store
/// sound (it did, exit 0).
#[test]
fn a_directory_in_the_place_of_the_lock_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("f");
    let d = dir.to_str().unwrap();
    expect(0, &["push", d, "-q"], b"http://a.test/1\n");
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    std::fs::create_dir(dir.join("LOCK")).unwrap();
    let lock = dir.join("LOCK");
    let said = format!("lock {}: Is a directory", lock.display());
    for args in [&["check", d][..], &["lease", d], &["push", d]] {
        let (_, err) = expect(1, args, b"http://b.test/1\n");
        assert!(err.contains(&said), "{args:?}: {err}");
    }
}

/// A URL holding a newline, which a store written before pushes refused them may hold, would
/// be two lines that `done` could not end: `lease` prints the others and names it on stderr.
#[test]
fn lease_names_a_leased_url_holding_a_newline_instead_of_printing_two_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("f");
    expect(
        0,
        &["push", d.to_str().unwrap(), "-q"],
        b"http://h.test/a\n",
    );
    let mut sieve = crivello::Sieve::open(&d, crivello::Options::new()).unwrap();
    assert!(
        sieve.push(b"http://g.test/x\ny").is_err(),
        "a push refuses it"
    );
    sieve.push_line(b"http://g.test/x\ny").unwrap();
    sieve.close().unwrap();
    let d = d.to_str().unwrap();
    let (out, err) = expect(0, &["lease", d], b"");
    assert_eq!(out, "http://h.test/a\n");
    assert!(
        err.contains("1 URL leased holds a newline") && err.contains("\"http://g.test/x\\ny\""),
        "{err}"
    );
    let (out, _) = expect(0, &["queues", d, "--json"], b"");
    assert_eq!(out.matches("\"leased\":1").count(), 2, "{out}");
}

/// `stats` and `policy` read a frontier without its lock while a loop of `lease` and `done`
/// processes writes it: each call writes a checkpoint and begins a journal generation, whose
/// predecessor it removes. A read that met a generation removed under it failed about once
/// in a hundred ("j-….log: corrupt at offset 0: missing", "restore it from a backup"):
/// the writer had exited by the time the reader looked for one, so the failure was taken
/// for damage. A read is now taken again when the store's files changed meanwhile.
#[test]
fn stats_and_policy_beside_a_loop_of_writers_never_report_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    let d = d.to_str().unwrap();
    let mut urls = String::new();
    for i in 0..100_000 {
        urls.push_str(&format!("http://h{}.test/p{i}\n", i % 500));
    }
    expect(0, &["push", d], urls.as_bytes());
    expect(0, &["policy", d, "--per-queue", "1000"], b"");
    let dir = d.to_owned();
    let writer = std::thread::spawn(move || {
        for _ in 0..200 {
            let (leased, _) = expect(0, &["lease", &dir, "-n", "500", "--ttl", "1h"], b"");
            expect(0, &["done", &dir], leased.as_bytes());
        }
    });
    let mut reads = 0;
    while !writer.is_finished() {
        for args in [&["stats", d][..], &["policy", d][..]] {
            let out = run(args, b"");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "{args:?} failed beside the writers: {err}"
            );
            reads += 1;
        }
    }
    writer.join().unwrap();
    assert!(reads > 50, "{reads} reads beside the writers");
    let (out, _) = expect(0, &["stats", d], b"");
    assert!(out.contains("\ndone           100000\n"), "{out}");
}
