//! The frontier's harnesses: a store with every file kind of the frontier (J, its checkpoint,
//! Q runs), the outcome every edit of them must have, and the fuzz targets `decode_j`,
//! `decode_checkpoint`, `decode_q`, `decode_q_compressed` and `frontier_ops`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use super::corrupt::{edit_one, get_u64, seal_at, seal_frames, seal_frames_until, Edited};
use super::Bytes;
use crate::names::{self, FileName};
use crate::queues::qrun;
use crate::queues::ManualClock;
use crate::storage::sim::CrashImage;
use crate::storage::SimDisk;
use crate::{check_storage, Discovered, Error, Frontier, LeaseRequest, Options, Policy};

/// The instant the corruption store's crawl starts at.
pub const T0: u64 = 1_000_000;

/// The options of the corruption store: small buffers, Q runs compacted when 3 wait, and a
/// checkpoint every 2 KiB of J.
pub fn frontier_corruption_opts() -> Options {
    Options::new()
        .slots(16)
        .seed(5)
        .background_flush(false)
        .frontier_low(0)
        .queue_runs(3)
        .journal_bytes(2048)
}

/// What a frontier holds, as a crawler sees it: URLs done, then every URL still to serve,
/// queue by queue in the order served.
pub type FrontierState = (u64, BTreeMap<Vec<u8>, Vec<Vec<u8>>>);

/// Opens the store an hour after the crawl (every lease expired) and serves everything.
pub fn frontier_outcome(disk: &SimDisk) -> Result<FrontierState, Error> {
    frontier_outcome_in(Arc::new(disk.clone()))
}

/// [`frontier_outcome`] of the store in `storage` (a real directory, whose Q runs are read
/// through a mapping).
pub fn frontier_outcome_in(
    storage: Arc<dyn crate::storage::Storage>,
) -> Result<FrontierState, Error> {
    let clock = Arc::new(ManualClock::new(T0 + 3_600_000));
    let f = Frontier::open_with(storage, frontier_corruption_opts(), clock.clone())?;
    let done = f.stats()?.done;
    let mut queues: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    loop {
        let got = f.lease(usize::MAX, None, 1_000)?;
        if got.is_empty() {
            break;
        }
        for l in got {
            assert!(f.done(l.token, 0)?, "a lease just handed out ends");
            queues.entry(l.key).or_default().push(l.url);
        }
        clock.advance(1);
    }
    Ok((done, queues))
}

/// A crawl that leaves Q runs, J generations and a checkpoint; returns its disk, the state it
/// ends in, and every state it was in after a change.
pub fn frontier_store() -> (SimDisk, FrontierState, Vec<FrontierState>) {
    let (disk, history) = frontier_store_images();
    let end = frontier_outcome(&disk.crash_image(CrashImage::KillProcess)).expect("clean");
    let history: Vec<FrontierState> = history
        .iter()
        .map(|img| frontier_outcome(img).expect("clean before"))
        .collect();
    assert!(Some(&end) != history.last(), "the last change shows");
    (disk, end, history)
}

/// The crawl of [`frontier_store`]: its disk, and a crash image taken after each change.
pub fn frontier_store_images() -> (SimDisk, Vec<SimDisk>) {
    frontier_store_images_with(frontier_corruption_opts())
}

/// The crawl of [`frontier_store`] with its Q runs compressed
/// ([`Options::compress_queues`]): the same states, in files of other bytes.
pub fn compressed_frontier_store() -> SimDisk {
    frontier_store_images_with(frontier_corruption_opts().compress_queues(true)).0
}

/// The crawl of [`frontier_store`], the frontier opened with `opts`.
fn frontier_store_images_with(opts: Options) -> (SimDisk, Vec<SimDisk>) {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(T0));
    let f = Frontier::open_with(Arc::new(disk.clone()), opts, clock.clone()).expect("create");
    let mut last = None;
    let mut history = vec![disk.crash_image(CrashImage::KillProcess)];
    for round in 0..12u32 {
        let urls: Vec<String> = (0..30u32)
            .map(|i| format!("http://h{}.test/{round}/{i}", (i * 7 + round) % 9))
            .collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).expect("push");
        history.push(disk.crash_image(CrashImage::KillProcess));
        f.flush().expect("flush");
        history.push(disk.crash_image(CrashImage::KillProcess));
        let leased = f.lease(4, None, 60_000).expect("lease");
        history.push(disk.crash_image(CrashImage::KillProcess));
        clock.advance(10);
        for (k, l) in leased.iter().enumerate() {
            match k % 4 {
                0 => assert!(f.done(l.token, 3).expect("done")),
                // A fetch that ended before its completion (entry 20).
                1 => {
                    let ended = crate::queues::Clock::now_ms(&*clock) - 5;
                    let how = crate::queues::Completion::Done;
                    let ends = f.complete_ended(&[(l.token, 3, how, ended)]);
                    assert_eq!(ends.expect("done"), [true]);
                }
                2 => assert!(f.retry(l.token, 3).expect("retry")),
                _ => {
                    // Kept leased, its fetch ended (entry 21, and the checkpoint's list).
                    let how = crate::queues::Completion::Fetched;
                    let r = f.complete(&[(l.token, 3, how)]).expect("fetched");
                    assert_eq!(r, [true]);
                    last = Some(l.token);
                }
            }
            history.push(disk.crash_image(CrashImage::KillProcess));
        }
    }
    let stats = f.stats().expect("stats");
    assert!(
        stats.done > 0 && stats.leased > 0 && stats.runs > 0,
        "{stats:?}"
    );
    // The last change: a done of a lease still in force.
    assert!(f.done(last.expect("a lease kept"), 3).expect("done"));
    f.close().expect("close");
    // The checkpoint lists leases whose fetch ended (version 13), so that its flips and
    // truncations reach that list too.
    let k = disk
        .content(crate::names::CHECKPOINT)
        .expect("a checkpoint");
    assert_eq!(k[4..8], 13u32.to_le_bytes(), "the checkpoint's version");
    let files = disk.files();
    for kind in FrontierFile::ALL {
        assert!(
            files.iter().any(|f| FrontierFile::of(f) == Some(kind)),
            "no {kind:?} file in {files:?}"
        );
    }
    (disk, history)
}

/// The file kinds of the frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FrontierFile {
    /// A generation of the journal J.
    J,
    /// The checkpoint.
    Checkpoint,
    /// A Q run.
    Q,
}

impl FrontierFile {
    /// Every kind.
    pub const ALL: [FrontierFile; 3] = [FrontierFile::J, FrontierFile::Checkpoint, FrontierFile::Q];

    /// The kind of a file, from its name.
    pub fn of(name: &str) -> Option<FrontierFile> {
        match names::parse(name)? {
            FileName::J(_) => Some(FrontierFile::J),
            FileName::Checkpoint => Some(FrontierFile::Checkpoint),
            FileName::Q(_) => Some(FrontierFile::Q),
            _ => None,
        }
    }
}

/// Rewrites every crc of a file of `kind`, as far as its lengths can be followed, so that
/// edits reach the decoders.
pub fn reseal_frontier(kind: FrontierFile, b: &mut [u8]) {
    match kind {
        FrontierFile::J => seal_frames(b, crate::sieve::wal::HEADER_LEN as usize),
        FrontierFile::Checkpoint => {
            if let Some(end) = b.len().checked_sub(4) {
                seal_at(b, 0, end);
            }
        }
        FrontierFile::Q => seal_q(b),
    }
}

/// Rewrites every crc of a Q run: header, tail, index, directory blocks, frames.
fn seal_q(b: &mut [u8]) {
    let header = qrun::HEADER_LEN as usize;
    let Some(tail) = b.len().checked_sub(qrun::TAIL_LEN as usize) else {
        return;
    };
    seal_at(b, tail, tail + 8);
    let index = get_u64(b, tail).map_or(tail, |i| (i as usize).min(tail));
    let mut frames_end = index;
    if let Some(blocks) = get_u64(b, index) {
        let end = (index as u64 + 8).saturating_add(blocks.saturating_mul(qrun::INDEX_ENTRY));
        if end.saturating_add(4) <= tail as u64 {
            seal_at(b, index, end as usize);
            // The directory blocks lie one after the other, the last one before the index.
            let offsets: Vec<usize> = (0..blocks as usize)
                .map_while(|k| get_u64(b, index + 16 + k * qrun::INDEX_ENTRY as usize))
                .map(|o| o as usize)
                .collect();
            for (k, &start) in offsets.iter().enumerate() {
                let next = offsets.get(k + 1).copied().unwrap_or(index);
                if start < next && next >= start + 8 && next <= index {
                    seal_at(b, start, next - 4);
                    frames_end = frames_end.min(start);
                }
            }
        }
    }
    seal_frames_until(b, header, frames_end);
}

/// The store of [`frontier_store`], its end state, its history, and its files.
fn shared() -> &'static (SimDisk, FrontierState, Vec<FrontierState>, Vec<String>) {
    static STORE: OnceLock<(SimDisk, FrontierState, Vec<FrontierState>, Vec<String>)> =
        OnceLock::new();
    STORE.get_or_init(|| {
        let (disk, end, history) = frontier_store();
        let files = disk
            .files()
            .into_iter()
            .filter(|n| FrontierFile::of(n).is_some())
            .collect();
        (disk, end, history, files)
    })
}

/// How an edit of a frontier file turned out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// A corruption error naming a file of the store, which `check` reports too.
    Caught,
    /// Checksums rewritten over the edit, which only serving the records shows: a corruption
    /// error naming the edited file when it is served (the frontier stops, poisoned).
    CaughtServing,
    /// The exact state.
    Harmless,
    /// The newest J generation cut: a state the store was in before.
    CutTail,
    /// Damage in the newest J generation read as a torn tail (listed by `check`): a state
    /// the store was in before.
    TornTail,
    /// Checksums rewritten over the edit: another state, as well formed as the edit left it.
    Resealed,
}

/// Judges the store `img`, whose file `name` was edited: panics when a guarantee is broken.
/// `truncated_only`: the edit only cut the file's end; `resealed`: its checksums were
/// rewritten after the edit (then a different state is no silent damage: the bytes say so).
pub fn judge_frontier_edit(
    img: &SimDisk,
    name: &str,
    truncated_only: bool,
    resealed: bool,
) -> Verdict {
    let (disk, expected, history, _) = shared();
    let files = disk.files();
    let newest_j = files
        .iter()
        .filter(|f| FrontierFile::of(f) == Some(FrontierFile::J))
        .max()
        .cloned();
    let report = check_storage(Arc::new(img.crash_image(CrashImage::KillProcess)));
    match (frontier_outcome(img), report) {
        (Err(e @ Error::Corrupt { .. }), Ok(report)) => {
            let Error::Corrupt { file, .. } = &e else {
                unreachable!()
            };
            // A file of the store, or one a damaged checkpoint or J names.
            assert!(
                files.contains(file) || names::parse(file).is_some(),
                "the error names a file of the store: {file}"
            );
            if report.is_sound() {
                // Check replays what an open does; a crafted edit (checksums rewritten) of a
                // Q run may show only when its records are served: then the error names it.
                let opens = Frontier::open_with(
                    Arc::new(img.crash_image(CrashImage::KillProcess)),
                    frontier_corruption_opts(),
                    Arc::new(ManualClock::new(T0 + 3_600_000)),
                )
                .is_ok();
                assert!(
                    resealed && opens && file == name,
                    "{name}: check missed what open found: {e}"
                );
                return Verdict::CaughtServing;
            }
            Verdict::Caught
        }
        (Err(Error::Corrupt { .. }), Err(e)) => {
            assert!(e.is_corruption(), "{name}: check failed with {e}");
            Verdict::Caught
        }
        (Err(e), _) => panic!("{name}: not a corruption error: {e}"),
        (Ok(_), Err(e)) => {
            assert!(e.is_corruption(), "{name}: check failed with {e}");
            Verdict::Caught
        }
        (Ok(s), _) if &s == expected => Verdict::Harmless,
        (Ok(_), _) if resealed => Verdict::Resealed,
        (Ok(s), Ok(report)) => {
            assert!(
                Some(name) == newest_j.as_deref() && history.contains(&s),
                "{name}: a wrong state, silently"
            );
            if truncated_only {
                Verdict::CutTail
            } else {
                assert!(
                    !report.torn_tails.is_empty() || !report.is_sound(),
                    "{name}: check did not list the torn tail"
                );
                Verdict::TornTail
            }
        }
    }
}

/// Fuzz targets `decode_j`, `decode_checkpoint`, `decode_q`: a file of `kind` of a real
/// frontier is edited by the input (flips, overwrites, truncations, insertions, removals,
/// interesting 32-bit values), its checksums rewritten unless the input says not to, and the
/// frontier is opened, served to the end and checked.
///
/// Always: no panic, no hang, no allocation out of proportion; any error is a typed
/// corruption error naming a file, which `check` also reports. Unedited: the exact state.
/// Edited without resealing: the exact state, or, for the newest J generation only, a state
/// the store was in before (its torn tail).
pub fn decode_frontier(kind: FrontierFile, data: &[u8]) {
    let (disk, _, _, files) = shared();
    edit_and_judge(disk, files, kind, data);
}

/// Edits one file of `kind` among `files` of `disk` as `data` says, and judges the outcome
/// against the corruption store's states.
fn edit_and_judge(disk: &SimDisk, files: &[String], kind: FrontierFile, data: &[u8]) {
    let candidates: Vec<&String> = files
        .iter()
        .filter(|f| FrontierFile::of(f) == Some(kind))
        .collect();
    let Edited {
        img,
        name,
        resealed,
        changed,
        truncated_only,
    } = edit_one(disk, &candidates, data, |b| reseal_frontier(kind, b));
    let verdict = judge_frontier_edit(&img, name, truncated_only, resealed && changed);
    assert!(
        changed || verdict == Verdict::Harmless,
        "{name} unedited: {verdict:?}"
    );
}

/// Fuzz target `decode_q_compressed`: [`decode_frontier`] of a Q run of the same crawl with
/// its runs compressed ([`compressed_frontier_store`]: frame layout 6, zstd over front-coded
/// records), judged against the same states. Resealed edits reach zstd's decoder and the
/// front decoding of what it gives.
pub fn decode_q_compressed(data: &[u8]) {
    static STORE: OnceLock<(SimDisk, Vec<String>)> = OnceLock::new();
    let (disk, files) = STORE.get_or_init(|| {
        let disk = compressed_frontier_store();
        let files = disk.files();
        (disk, files)
    });
    edit_and_judge(disk, files, FrontierFile::Q, data);
}

/// What the light model of [`frontier_ops`] knows of a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Url {
    Waiting,
    /// `fetched`: its fetch ended (`Completion::Fetched`), and it no longer holds a place.
    Leased {
        token: u64,
        deadline: u64,
        fetched: bool,
    },
    Done,
    Refetch {
        at: u64,
    },
    Deleted,
}

/// A light model of a frontier: each URL's state, the politeness settings, the counts that
/// limits use. What order and delays a frontier keeps is the model proptest's
/// (`tests/frontier.rs`); this one checks exclusivity, done, deletes and crashes.
#[derive(Default)]
struct Light {
    urls: HashMap<(String, String), Url>,
    completed: HashMap<(String, String), u64>,
    blocked: HashMap<String, u64>,
    policy: Policy,
    /// The fields of a queue's own policy, by (crawl, host); the others are the default's.
    own: HashMap<(String, String), crate::PolicyFields>,
    paused: bool,
}

impl Light {
    /// The policy in force for the queue of `host` in `crawl`.
    fn policy_of(&self, crawl: &str, host: &str) -> Policy {
        let key = (crawl.to_owned(), host.to_owned());
        self.own
            .get(&key)
            .map_or(self.policy, |o| o.over(self.policy))
    }

    /// A URL's state at `now` (a lease past its deadline is waiting again).
    fn at(&self, key: &(String, String), now: u64) -> Option<Url> {
        self.urls.get(key).map(|&u| match u {
            Url::Leased { deadline, .. } if deadline <= now => Url::Waiting,
            u => u,
        })
    }

    /// Deletes the URLs of `crawl` for which `of` holds; returns how many the queues held.
    fn delete(&mut self, crawl: &str, now: u64, of: impl Fn(&str) -> bool, forget: bool) -> u64 {
        let keys: Vec<(String, String)> = self
            .urls
            .keys()
            .filter(|(c, u)| c == crawl && of(u))
            .cloned()
            .collect();
        let mut held = 0;
        for k in keys {
            let state = self.at(&k, now).expect("listed");
            let held_here = matches!(
                state,
                Url::Waiting | Url::Leased { .. } | Url::Refetch { .. }
            );
            held += u64::from(held_here);
            if forget {
                self.urls.remove(&k);
            } else if held_here {
                self.urls.insert(k, Url::Deleted);
            }
        }
        self.completed
            .retain(|(c, h), _| c != crawl || !of(&format!("http://{h}/")));
        self.own
            .retain(|(c, h), _| c != crawl || !of(&format!("http://{h}/")));
        held
    }
}

/// The host of a fuzzed URL.
fn host(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Fuzz target `frontier_ops`: random pushes (two crawls), leases, dones, retries,
/// refetches, policies, blocks, pauses, deletes of queues and crawls, flushes, reopens and
/// power losses (every image kind), with a simulated clock, against a light model. Every call
/// syncs what it changed, so a crash changes nothing. Never a URL served while leased, after
/// done or deleted, beyond its queue's room, while blocked or paused; an end of lease answers
/// whether the lease was in force; at the end every URL waiting is served exactly once.
pub fn frontier_ops(data: &[u8]) {
    let mut input = Bytes(data);
    let b = input.u8();
    let opts = Options::new()
        .slots(2 + usize::from(b & 7))
        .seed(u64::from(b >> 5))
        .background_flush(false)
        .frontier_low(0)
        .queue_runs(2 + usize::from((b >> 3) & 3))
        .journal_bytes(512 << ((b >> 5) & 3));
    let clock = Arc::new(ManualClock::new(T0));
    let mut disk = SimDisk::new();
    let open = |disk: &SimDisk| {
        Frontier::open_with(Arc::new(disk.clone()), opts.clone(), clock.clone()).expect("open")
    };
    let mut f = open(&disk);
    let mut m = Light::default();
    let mut tokens: Vec<u64> = Vec::new();
    let crawl_of = |b: u8| if b & 0x80 == 0 { "DEFAULT" } else { "x" };
    let mut steps = 0;
    // The latest instant the clock gave since the open: the frontier's time does not run
    // back while it is open (each step reads it, as the frontier's calls read the clock).
    let mut high = 0;
    while !input.is_empty() && steps < 300 {
        steps += 1;
        high = high.max(crate::queues::Clock::now_ms(&*clock));
        let now = f.now_ms().expect("the frontier's time");
        assert_eq!(now, high, "the frontier's time");
        let op = input.u8();
        let arg = input.u8();
        match op % 16 {
            0..=3 => {
                let crawl = crawl_of(op);
                let n = 1 + usize::from(arg >> 6);
                let urls: Vec<String> = (0..n)
                    .map(|k| {
                        format!(
                            "http://h{}.t/{}",
                            usize::from(arg).wrapping_add(k) % 5,
                            usize::from(arg >> 2) % 16 + k
                        )
                    })
                    .collect();
                let items: Vec<Discovered<'_>> =
                    urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
                if op & 0x40 == 0 {
                    f.push(crawl, &items).expect("push");
                } else {
                    // Which were new: exactly those the crawl does not know.
                    let new = f.push_new(crawl, &items).expect("push");
                    for (u, n) in urls.iter().zip(new) {
                        let known = m.urls.contains_key(&(crawl.to_owned(), u.clone()));
                        assert_eq!(n, !known, "novelty of {u} in {crawl}");
                    }
                }
                for u in urls {
                    m.urls.entry((crawl.to_owned(), u)).or_insert(Url::Waiting);
                }
            }
            4 | 5 => {
                let crawl = match arg % 3 {
                    0 => None,
                    k => Some(crawl_of((k - 1) << 7).to_owned()),
                };
                let req = LeaseRequest {
                    max_urls: 1 + usize::from(arg >> 4),
                    max_queues: 1 + usize::from((arg >> 2) & 3),
                    per_queue: (op & 0x40 != 0).then_some(u32::from(op >> 7) + 1),
                    ttl_ms: 500 + u64::from(arg) * 10,
                    crawl: crawl.clone(),
                    key: None,
                };
                let got = f.lease_with(&req).expect("lease");
                assert!(!m.paused || got.is_empty(), "served while paused");
                assert!(got.len() <= req.max_urls, "more URLs than asked");
                let queues: HashSet<&[u8]> = got.iter().map(|l| &l.key[..]).collect();
                assert!(queues.len() <= req.max_queues, "more queues than asked");
                for l in &got {
                    let c = String::from_utf8(l.crawl.clone()).expect("utf-8");
                    if let Some(want) = &crawl {
                        assert_eq!(&c, want, "a URL of another crawl");
                    }
                    let u = String::from_utf8(l.url.clone()).expect("utf-8");
                    let h = host(&u);
                    let k = (c.clone(), u.clone());
                    match m.at(&k, now) {
                        Some(Url::Waiting) => {}
                        Some(Url::Refetch { at }) => assert!(at <= now, "{u} before its refetch"),
                        other => panic!("{u} served while {other:?}"),
                    }
                    if c == "DEFAULT" {
                        let until = m.blocked.get(&h).copied().unwrap_or(0);
                        assert!(until <= now, "{u} served while its queue is blocked");
                    }
                    m.urls.insert(
                        k,
                        Url::Leased {
                            token: l.token,
                            deadline: l.deadline_ms,
                            fetched: false,
                        },
                    );
                    tokens.push(l.token);
                    // Its queue's leases in force: all of them, and those that hold a place
                    // (their fetch not ended).
                    let (mut leased, mut holding) = (0u64, 0u64);
                    for ((c2, u2), s) in &m.urls {
                        if let Url::Leased {
                            deadline, fetched, ..
                        } = s
                        {
                            if *c2 == c && host(u2) == h && *deadline > now {
                                leased += 1;
                                holding += u64::from(!fetched);
                            }
                        }
                    }
                    let p = m.policy_of(&c, &h);
                    assert!(
                        holding <= u64::from(p.per_queue),
                        "{holding} URLs of {h} leased at once"
                    );
                    if p.limit > 0 {
                        let done = m
                            .completed
                            .get(&(c.clone(), h.clone()))
                            .copied()
                            .unwrap_or(0);
                        assert!(done + leased <= p.limit, "{h} past its limit");
                    }
                }
            }
            6..=8 if !tokens.is_empty() => {
                let token = tokens[usize::from(arg) % tokens.len()];
                let found = m.urls.iter().find_map(|(k, s)| match s {
                    Url::Leased {
                        token: t,
                        deadline,
                        fetched,
                    } if *t == token && *deadline > now => Some((k.clone(), *fetched)),
                    _ => None,
                });
                let took = u64::from(arg & 15);
                if op & 0x20 != 0 {
                    // Its fetch ended first: it keeps its lease, and no longer holds its
                    // queue's place (the hand-outs above count only those that do).
                    let r = f
                        .complete(&[(token, took, crate::Completion::Fetched)])
                        .expect("end of a fetch");
                    assert_eq!(
                        r,
                        [found.as_ref().is_some_and(|(_, fetched)| !fetched)],
                        "end of the fetch of lease {token}"
                    );
                    if let Some((k, _)) = &found {
                        if let Some(Url::Leased { fetched, .. }) = m.urls.get_mut(k) {
                            *fetched = true;
                        }
                    }
                    if arg & 0x80 == 0 {
                        continue;
                    }
                }
                let found = found.map(|(k, _)| k);
                let ended = if op & 0x40 != 0 {
                    // Its fetch ended before the call (entry 20), maybe before its hand-out.
                    let how = match op % 16 {
                        6 => crate::Completion::Done,
                        7 => crate::Completion::Retry,
                        _ => crate::Completion::RefetchAt(now + u64::from(arg) * 5),
                    };
                    let fetch_ended = now.saturating_sub(u64::from(arg) * 7);
                    f.complete_ended(&[(token, took, how, fetch_ended)])
                        .map(|e| e[0])
                } else {
                    match op % 16 {
                        6 => f.done(token, took),
                        7 => f.retry(token, took),
                        _ => f.refetch(token, took, now + u64::from(arg) * 5),
                    }
                }
                .expect("end of a lease");
                assert_eq!(ended, found.is_some(), "end of lease {token}");
                if let Some(k) = found {
                    let state = match op % 16 {
                        6 => {
                            *m.completed.entry((k.0.clone(), host(&k.1))).or_default() += 1;
                            Url::Done
                        }
                        7 => Url::Waiting,
                        _ => Url::Refetch {
                            at: now + u64::from(arg) * 5,
                        },
                    };
                    m.urls.insert(k, state);
                }
            }
            9 if op == 0xC9 => {
                // A system clock stepped back (one op byte of the sixteen that advance the
                // clock, the one the committed corpus uses least).
                let back =
                    crate::queues::Clock::now_ms(&*clock).saturating_sub(u64::from(arg) * 20);
                clock.set(back);
            }
            9 => clock.advance(u64::from(arg) * 20),
            10 if op & 0x40 != 0 => {
                // Some fields of one queue's own policy; the others follow the default.
                let (crawl, h) = (crawl_of(op), format!("h{}.t", arg % 5));
                let fields = crate::PolicyFields {
                    per_queue: (arg & 0x08 != 0).then(|| 1 + u32::from((arg >> 4) & 1)),
                    limit: (arg & 0x20 != 0).then(|| u64::from(arg >> 6)),
                    delay_ms: (arg & 0x28 == 0).then_some(0),
                    ratio_ppm: None,
                };
                f.change_policy(crawl, Some(h.as_bytes()), fields)
                    .expect("policy of a queue");
                let own = m.own.entry((crawl.to_owned(), h)).or_default();
                *own = own.then(fields);
            }
            10 => {
                let p = Policy {
                    delay_ms: u64::from(arg & 7) * 50,
                    ratio_ppm: 0,
                    per_queue: 1 + u32::from((arg >> 3) & 1),
                    limit: u64::from(arg >> 5),
                };
                f.set_policy("", None, p).expect("policy");
                m.policy = p;
            }
            11 => {
                let h = format!("h{}.t", arg % 5);
                let until = if arg & 0x80 == 0 {
                    0
                } else {
                    now + u64::from(arg) * 10
                };
                f.block("", h.as_bytes(), until).expect("block");
                m.blocked.insert(h, until);
            }
            12 => {
                m.paused = !m.paused;
                f.set_paused(m.paused).expect("pause");
            }
            13 => {
                let crawl = crawl_of(arg);
                if arg & 0x40 == 0 {
                    let h = format!("h{}.t", arg % 5);
                    let held = f.delete_queue(crawl, h.as_bytes()).expect("delete queue");
                    let want = m.delete(crawl, now, |u| host(u) == h, false);
                    assert_eq!(held, want, "URLs of deleted queue {h} of {crawl}");
                    if crawl == "DEFAULT" {
                        m.blocked.remove(&h);
                    }
                } else {
                    let held = f.delete_crawl(crawl).expect("delete crawl");
                    let want = m.delete(crawl, now, |_| true, true);
                    assert_eq!(held, want, "URLs of deleted crawl {crawl}");
                    if crawl == "DEFAULT" {
                        m.blocked.clear();
                    }
                }
            }
            14 if arg & 1 == 0 => f.flush().expect("flush"),
            14 => {
                // A known update: done, or to fetch again, whatever the URL was.
                let crawl = crawl_of(op);
                let u = format!("http://h{}.t/{}", (arg >> 1) % 5, (arg >> 4) % 12);
                let when = if arg & 2 == 0 {
                    0
                } else {
                    now + u64::from(arg) * 7
                };
                let item = crate::Known {
                    url: u.as_bytes(),
                    key: None,
                    metadata: b"",
                    refetch_ms: when,
                };
                f.update(crawl, &[item]).expect("update");
                let k = (crawl.to_owned(), u.clone());
                // Held in a queue (or never seen: it is pushed, then taken out of its queue).
                let held = matches!(
                    m.at(&k, now),
                    None | Some(Url::Waiting | Url::Leased { .. } | Url::Refetch { .. })
                );
                if when > 0 {
                    if !held {
                        // Done (or deleted): fetched again, and no longer done.
                        if let Some(c) = m.completed.get_mut(&(k.0.clone(), host(&u))) {
                            *c = c.saturating_sub(1);
                        }
                    }
                    m.urls.insert(k, Url::Refetch { at: when });
                } else if held {
                    *m.completed.entry((k.0.clone(), host(&u))).or_default() += 1;
                    m.urls.insert(k, Url::Done);
                }
            }
            _ => {
                if arg & 1 == 0 {
                    f.close().expect("close");
                } else {
                    let image = match (arg >> 1) % 5 {
                        0 => CrashImage::KillProcess,
                        1 => CrashImage::DropAll,
                        2 => CrashImage::KeepDataDropDir,
                        3 => CrashImage::ZeroedData,
                        _ => CrashImage::Random(u64::from(arg)),
                    };
                    let img = disk.crash_image(image);
                    drop(f);
                    disk = img;
                }
                // The clock caught up first: the frontier's time is not kept across an
                // open, and the model's stays the same. A replay then meets every instant
                // the calls ran at, steps back included.
                clock.set(high);
                f = open(&disk);
                high = 0;
            }
        }
    }
    // The end: everything waiting, leased or to fetch again comes out once.
    let done: u64 = m.completed.values().sum();
    assert_eq!(f.stats().expect("stats").done, done, "URLs done");
    clock.advance(86_400_000);
    let now = crate::queues::Clock::now_ms(&*clock);
    f.set_paused(false).expect("resume");
    f.set_policy("", None, Policy::default()).expect("policy");
    for (c, h) in m.own.keys() {
        f.set_policy(c, Some(h.as_bytes()), Policy::default())
            .expect("policy of a queue");
    }
    for h in 0..5 {
        f.block("", format!("h{h}.t").as_bytes(), 0)
            .expect("unblock");
    }
    f.flush().expect("flush");
    let mut served = HashSet::new();
    loop {
        let got = f.lease(usize::MAX, None, 1_000).expect("lease");
        if got.is_empty() {
            break;
        }
        for l in got {
            assert!(
                f.done(l.token, 0).expect("done"),
                "a lease just handed out ends"
            );
            let k = (
                String::from_utf8(l.crawl).expect("utf-8"),
                String::from_utf8(l.url).expect("utf-8"),
            );
            assert!(served.insert(k.clone()), "{k:?} served twice");
        }
    }
    let want: HashSet<(String, String)> = m
        .urls
        .keys()
        .filter(|k| {
            matches!(
                m.at(k, now),
                Some(Url::Waiting | Url::Leased { .. } | Url::Refetch { .. })
            )
        })
        .cloned()
        .collect();
    assert_eq!(served, want, "the URLs left to serve");
    f.close().expect("close");
}

/// Checkpoint `bytes` rewritten in the layout of an older version (4 or 6), as a store of
/// that version wrote it.
pub fn checkpoint_in_version(bytes: &[u8], version: u32) -> crate::Result<Vec<u8>> {
    crate::queues::core::checkpoint_in_version(bytes, version)
}
