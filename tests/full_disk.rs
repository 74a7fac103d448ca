//! A store on a full disk, or one that must not be written: an open after a clean close
//! writes nothing, and a read-only view reads what a crashed store holds without writing,
//! where a writable open would have to recover and cannot (`docs/design.md`, "Opening
//! without writing").

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::emit_model;
use crivello::queues::ManualClock;
use crivello::storage::sim::{CrashImage, FaultKind};
use crivello::storage::SimDisk;
use crivello::{check_storage, Discovered, Frontier, Options, Sieve};

fn opts() -> Options {
    Options::new()
        .slots(64)
        .seed(9)
        .background_flush(false)
        .frontier_low(0)
}

fn urls(n: u32, round: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("http://h{}.test/{round}/{}", i % 11, (i * 5) % 150).into_bytes())
        .collect()
}

/// Every file of the disk with its bytes.
fn contents(disk: &SimDisk) -> BTreeMap<String, Vec<u8>> {
    disk.files()
        .into_iter()
        .map(|n| {
            let c = disk.content(&n).expect("listed");
            (n, c)
        })
        .collect()
}

/// The offset of the tail mark that ends the frames of the A file `file` (a 20-byte header,
/// then frames of a 28-byte header whose tag is at 8 and payload length at 16; the mark is
/// the frame of count 0 and payload 4).
fn tail_mark_offset(file: &[u8]) -> usize {
    let tag = &file[8..16];
    let mut at = 20;
    loop {
        let head = &file[at..at + 28];
        assert_eq!(&head[8..16], tag, "no tail mark");
        let len = u32::from_le_bytes(head[16..20].try_into().unwrap()) as usize;
        let count = u32::from_le_bytes(head[20..24].try_into().unwrap());
        if count == 0 && len == 4 {
            return at;
        }
        at += 28 + len;
    }
}

#[test]
fn a_sieve_opened_after_a_clean_close_and_left_untouched_writes_nothing() {
    let disk = SimDisk::new();
    let all = urls(300, 0);
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for u in &all[..200] {
        s.push(u).unwrap();
    }
    s.flush().unwrap();
    let first = s.frontier_next(10).unwrap();
    s.frontier_commit().unwrap();
    // Pushes not flushed: the next open takes them back into S, without a spill.
    for u in &all[200..] {
        s.push(u).unwrap();
    }
    s.close().unwrap();
    let before = contents(&disk);
    let ops = disk.ops();
    for _ in 0..3 {
        let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
        let stats = s.stats().unwrap();
        assert_eq!(stats.pushed, 300);
        assert_eq!(stats.consumed, first.len() as u64);
        assert!(s.contains(&all[250]).unwrap());
        s.close().unwrap();
    }
    assert_eq!(disk.ops(), ops, "an untouched open and close wrote");
    assert_eq!(contents(&disk), before);
    // The pushes taken back are flushed as any others.
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    s.flush().unwrap();
    let mut out = first.clone();
    loop {
        let b = s.frontier_next(100).unwrap();
        if b.is_empty() {
            break;
        }
        out.extend(b);
    }
    assert_eq!(out, emit_model(&all));
    s.close().unwrap();
}

/// A store closed with S exactly full (the push that filled it made no freeze yet) is
/// reopened with S full, as the process left it: nothing spilled, nothing written; the next
/// push freezes it, as it would have.
#[test]
fn a_sieve_closed_with_s_exactly_full_reopens_it_full_and_writes_nothing() {
    let disk = SimDisk::new();
    let all: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("http://full{}.test/{i}", i % 7).into_bytes())
        .collect();
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for u in &all[..100] {
        s.push(u).unwrap();
    }
    s.flush().unwrap();
    let slots = s.stats().unwrap().slots;
    assert_eq!(slots, 64);
    for u in &all[100..164] {
        s.push(u).unwrap();
    }
    assert_eq!(s.stats().unwrap().buffered, slots);
    s.close().unwrap();
    let before = contents(&disk);
    let ops = disk.ops();
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    let stats = s.stats().unwrap();
    assert_eq!(
        (stats.buffered, stats.runs),
        (slots, 0),
        "S not taken back full"
    );
    s.close().unwrap();
    assert_eq!(disk.ops(), ops, "reopening a full S wrote");
    assert_eq!(contents(&disk), before);
    // The next push freezes it; everything comes out once, in order.
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for u in &all[164..] {
        s.push(u).unwrap();
    }
    s.flush().unwrap();
    assert_eq!(drain(&mut s), emit_model(&all));
    s.close().unwrap();
    assert!(check_storage(Arc::new(disk.clone())).is_ok_and(|r| r.is_sound()));
}

/// The same S exactly full, left by a crash instead of a close (its pushes synced): every
/// image of the crash reopens with the pushes in S, loses none, and is sound after.
#[test]
fn a_crash_with_s_exactly_full_loses_no_synced_push() {
    let all: Vec<Vec<u8>> = (0..164)
        .map(|i| format!("http://crash{}.test/{i}", i % 5).into_bytes())
        .collect();
    let disk = SimDisk::new();
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for u in &all[..100] {
        s.push(u).unwrap();
    }
    s.flush().unwrap();
    for u in &all[100..] {
        s.push(u).unwrap();
    }
    s.sync().unwrap();
    assert_eq!(s.stats().unwrap().buffered, 64);
    for image in CrashImage::each_kind(7) {
        let img = disk.crash_image(image);
        let mut s = Sieve::open_with(Arc::new(img.clone()), opts()).unwrap();
        let stats = s.stats().unwrap();
        assert_eq!((stats.buffered, stats.runs), (64, 0), "{image:?}");
        s.flush().unwrap();
        assert_eq!(drain(&mut s), emit_model(&all), "{image:?}");
        s.close().unwrap();
        assert!(
            check_storage(Arc::new(img)).is_ok_and(|r| r.is_sound()),
            "{image:?}"
        );
    }
    drop(s);
}

/// Every URL of the frontier, in order.
fn drain(s: &mut Sieve) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let b = s.frontier_next(100).unwrap();
        if b.is_empty() {
            return out;
        }
        out.extend(b);
    }
}

#[test]
fn a_frontier_opened_after_a_clean_close_and_left_untouched_writes_nothing() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).unwrap();
    let all = urls(120, 1);
    let items: Vec<Discovered<'_>> = all.iter().map(|u| Discovered::url(u)).collect();
    f.push("", &items).unwrap();
    f.flush().unwrap();
    let leased = f.lease(3, None, 600_000).unwrap();
    assert!(f.done(leased[0].token, 5).unwrap());
    f.close().unwrap();
    let before = contents(&disk);
    let ops = disk.ops();
    let stats = {
        let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).unwrap();
        let stats = f.stats().unwrap();
        f.close().unwrap();
        stats
    };
    assert_eq!((stats.leased, stats.done), (2, 1));
    assert_eq!(disk.ops(), ops, "an untouched open and close wrote");
    assert_eq!(contents(&disk), before);
}

#[test]
fn a_full_disk_after_a_crash_is_read_by_a_view_and_recovered_once_space_is_freed() {
    let disk = SimDisk::new();
    let all = urls(400, 2);
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for u in &all[..150] {
        s.push(u).unwrap();
    }
    s.flush().unwrap();
    for u in &all[150..220] {
        s.push(u).unwrap();
    }
    s.sync().unwrap();
    // The disk fills: every later write fails, and the push stream stops with an error.
    disk.fail_at(1, FaultKind::NoSpace, true);
    let refused = all[220..]
        .iter()
        .try_for_each(|u| s.push(u).and_then(|()| s.sync()));
    assert!(refused.unwrap_err().is_write_refused());
    drop(s);
    let full = disk.crash_image(CrashImage::KillProcess);
    // The write the disk refused was torn: its first bytes reached the file, over the tail
    // mark that ended the generation's valid frames.
    let newest = full
        .files()
        .into_iter()
        .filter(|n| n.starts_with("a-"))
        .max()
        .unwrap();
    let mut torn = full.content(&newest).unwrap();
    let mark = tail_mark_offset(&torn);
    torn[mark..mark + 32].fill(0x5a);
    full.set_content(&newest, torn);
    full.fail_at(1, FaultKind::NoSpace, true);
    let before = contents(&full);

    // A writable open must recover (a run of the pushes not flushed), and cannot.
    let opened = Sieve::open_with(Arc::new(full.clone()), opts());
    let e = opened.expect_err("an open that must write fails");
    assert!(e.is_write_refused(), "{e}");

    // The view reads the committed frontier and counts every acknowledged push.
    let mut view = Sieve::open_read_only_with(Arc::new(full.clone()), opts()).unwrap();
    let stats = view.stats().unwrap();
    assert_eq!(stats.pushed, 220);
    assert_eq!(stats.emitted, emit_model(&all[..150]).len() as u64);
    let mut committed = Vec::new();
    loop {
        let b = view.frontier_next(64).unwrap();
        if b.is_empty() {
            break;
        }
        committed.extend(b);
    }
    view.frontier_commit().unwrap();
    assert_eq!(committed, emit_model(&all[..150]));
    // A flush in the view works in memory, and is forgotten.
    view.flush().unwrap();
    assert!(!view.frontier_next(1).unwrap().is_empty());
    view.close().unwrap();
    let report = check_storage(Arc::new(full.clone())).unwrap();
    assert!(report.is_sound(), "{:?}", report.damage);
    assert_eq!(contents(&full), before, "the view or check wrote");

    // Space freed: the writable open recovers, and nothing acknowledged is lost.
    let freed = full.crash_image(CrashImage::KillProcess);
    let mut s = Sieve::open_with(Arc::new(freed), opts()).unwrap();
    s.flush().unwrap();
    let mut out = Vec::new();
    loop {
        let b = s.frontier_next(100).unwrap();
        if b.is_empty() {
            break;
        }
        out.extend(b);
    }
    let model = emit_model(&all);
    assert!(model.starts_with(&out), "not a prefix of the model");
    assert!(
        out.len() >= emit_model(&all[..220]).len(),
        "acknowledged pushes lost"
    );
}

/// A size-limited tmpfs, mounted for a test (needs root), unmounted when dropped.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it), or says why it cannot.
    fn mount(size: &str) -> Result<SmallFs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot mount a tmpfs (root is needed): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallFs { dir })
    }

    /// [`SmallFs::mount`], or `None` once the test said why it is skipped.
    fn mount_or_skip(size: &str) -> Option<SmallFs> {
        SmallFs::mount(size)
            .inspect_err(|why| eprintln!("skipped: {why}"))
            .ok()
    }

    fn remount_read_only(&self) {
        let ok = std::process::Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount read-only");
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

fn crivello(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_crivello"))
        .args(args)
        .output()
        .expect("run crivello")
}

#[test]
fn on_a_full_then_read_only_file_system_stats_check_and_pop_still_work() {
    let Some(fs) = SmallFs::mount_or_skip("2m") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let write = |name: &str, n: u32, prefix: &str| {
        let p = work.path().join(name);
        let text: String = (0..n).map(|i| format!("http://{prefix}/{i}\n")).collect();
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let small = write("small.txt", 5000, "a");
    let big = write("big.txt", 200_000, "example.com/page");
    let store = fs.dir.path().join("s");
    let dir = store.display().to_string();
    assert!(crivello(&["push", &dir, &small]).status.success());
    assert!(crivello(&["flush", &dir]).status.success());
    // The disk fills up in the middle of a push.
    let out = crivello(&["push", &dir, &big]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    let files = |dir: &std::path::Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect()
    };
    let mut before = files(&store);
    let committed: String = (0..5000).map(|i| format!("http://a/{i}\n")).collect();
    for read_only in [false, true] {
        if read_only {
            fs.remount_read_only();
        }
        let stats = crivello(&["stats", &dir]);
        assert!(stats.status.success(), "{stats:?}");
        assert!(String::from_utf8_lossy(&stats.stdout).contains("emitted        5000"));
        let check = crivello(&["check", &dir]);
        assert!(check.status.success(), "{check:?}");
        assert!(String::from_utf8_lossy(&check.stdout).starts_with("ok:"));
        let after = files(&store);
        assert!(
            after == before,
            "a read-only command wrote: {:?} became {:?}",
            before.iter().map(|(n, c)| (n, c.len())).collect::<Vec<_>>(),
            after.iter().map(|(n, c)| (n, c.len())).collect::<Vec<_>>()
        );
        // pop prints what the frontier holds, says it could not consume it, and why.
        let pop = crivello(&["pop", &dir]);
        assert_eq!(pop.status.code(), Some(1), "{pop:?}");
        assert_eq!(String::from_utf8_lossy(&pop.stdout), committed);
        let err = String::from_utf8_lossy(&pop.stderr);
        assert!(err.contains("printed the 5000 URLs"), "{err}");
        assert!(err.contains("without consuming them"), "{err}");
        let why = if read_only {
            "file system is read-only"
        } else {
            "the disk is full"
        };
        assert!(err.contains(why), "{err}");
        assert!(err.contains("free some disk space"), "{err}");
        // A command that must write fails, saying what to do.
        let flush = crivello(&["flush", &dir]);
        assert_eq!(flush.status.code(), Some(1));
        let err = String::from_utf8_lossy(&flush.stderr);
        let what = if read_only {
            "read-only"
        } else {
            "No space left on device"
        };
        assert!(err.contains(what), "{err}");
        let fix = if read_only {
            "remount the file system read-write"
        } else {
            "free some disk space"
        };
        assert!(err.contains(fix), "{err}");
        // What pop and flush tried to write before they failed (a recovery's first steps)
        // is taken up again by the next open.
        before = files(&store);
    }
}

#[test]
fn a_generation_a_crash_left_is_synced_before_it_is_continued() {
    // Frames written but never synced before the process died: the system still holds them.
    let disk = SimDisk::new();
    let opts = || opts().frame_bytes(256);
    let mut s = Sieve::open_with(Arc::new(disk.clone()), opts()).unwrap();
    for u in &urls(60, 3) {
        s.push(u).unwrap();
    }
    drop(s);
    let left = disk.crash_image(CrashImage::KillProcess);
    let newest = left
        .files()
        .into_iter()
        .filter(|n| n.starts_with("a-"))
        .max()
        .unwrap();
    let reopened = Sieve::open_with(Arc::new(left.clone()), opts()).unwrap();
    // The open synced the generation it continues, before anything else was written to it.
    let trace = left.trace();
    let synced = trace
        .iter()
        .position(|op| *op == crivello::storage::sim::Op::Sync(newest.clone()));
    let first_write = trace.iter().position(
        |op| matches!(op, crivello::storage::sim::Op::Write(name, _, _) if *name == newest),
    );
    assert!(synced.is_some(), "{newest} not synced at open: {trace:?}");
    assert!(first_write.is_none_or(|w| w > synced.unwrap()), "{trace:?}");
    drop(reopened);
    // After a clean close, the same open syncs nothing (the close did).
    let mut s = Sieve::open_with(Arc::new(left.clone()), opts()).unwrap();
    s.push(b"http://after.example/").unwrap();
    s.close().unwrap();
    let ops = left.ops();
    Sieve::open_with(Arc::new(left.clone()), opts())
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(left.ops(), ops);
}

/// `pause`, `resume`, `block` and `policy` on a full disk: each change is durable in the
/// journal before the close, whose manifest then cannot be written. The command says so and
/// exits 0 (it exited 1 saying to run it again, though the change was in force).
#[test]
fn a_change_made_durable_before_a_close_that_fails_on_a_full_disk_exits_0() {
    let Some(fs) = SmallFs::mount_or_skip("8m") else {
        return;
    };
    let dir = fs.dir.path().join("f").display().to_string();
    let push = std::process::Command::new(env!("CARGO_BIN_EXE_crivello"))
        .args(["push", &dir, "-q"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(b"http://a.test/1\nhttp://b.test/1\n")?;
            c.wait()
        })
        .unwrap();
    assert!(push.success());
    assert!(crivello(&["lease", &dir, "--ttl", "1h"]).status.success());
    // Fill the file system.
    let filler = fs.dir.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 1 << 16];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let stats = || String::from_utf8_lossy(&crivello(&["stats", &dir]).stdout).into_owned();
    let pause = crivello(&["pause", &dir]);
    let err = String::from_utf8_lossy(&pause.stderr);
    if pause.status.success() {
        // The commit's write found room (a journal's block not full): nothing to test
        // beyond the change.
        assert!(stats().contains("paused         1"));
    } else {
        // The journal's commit itself failed: nothing changed.
        assert_eq!(pause.status.code(), Some(1), "{err}");
        assert!(stats().contains("paused         0"));
    }
    if pause.status.success() && !err.is_empty() {
        assert!(
            err.contains("hand-outs are paused, but closing the store failed"),
            "{err}"
        );
    }
    let block = crivello(&["block", &dir, "b.test", "--for", "2h"]);
    let err = String::from_utf8_lossy(&block.stderr);
    if block.status.success() {
        assert!(
            err.is_empty() || err.contains("the block is set, but"),
            "{err}"
        );
    } else {
        assert!(!err.contains("the block is set"), "{err}");
    }
    std::fs::remove_file(&filler).unwrap();
    // Whatever each said, what it said holds once space is freed.
    let s = stats();
    assert_eq!(
        s.contains("paused         1"),
        pause.status.success(),
        "{s}"
    );
    let q = String::from_utf8_lossy(&crivello(&["queues", &dir]).stdout).into_owned();
    let blocked = q
        .lines()
        .any(|l| l.starts_with("b.test") && !l.ends_with('-'));
    assert_eq!(blocked, block.status.success(), "{q}");
}

/// `uniq` whose temporary directory fills up fails (exit 1), names that directory and the
/// option that moves it, and leaves nothing behind there.
#[test]
fn uniq_on_a_full_temporary_directory_names_it() {
    let Some(fs) = SmallFs::mount_or_skip("2m") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("in.txt");
    let text: String = (0..400_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let tmp = fs.dir.path().display().to_string();
    let input = input.display().to_string();
    let out = crivello(&["uniq", "--memory", "1M", "--tmp-dir", &tmp, &input]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains(&format!("the temporary store in {tmp}/")),
        "{err}"
    );
    assert!(err.contains("--tmp-dir"), "{err}");
    let left: Vec<_> = std::fs::read_dir(fs.dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
