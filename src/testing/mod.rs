//! Test harnesses shared by the fuzz targets (`fuzz/`), the corpus replay test and the crash
//! and corruption suites: the reference model, a workload runner that records what was
//! acknowledged, the checker of a reopened store, and one entry point per fuzz target.
//!
//! Every entry point takes arbitrary bytes and panics exactly when a guarantee is broken
//! (except [`canary`], which panics on purpose, to show that the fuzzing setup finds a
//! failure). Not part of the stable API.

pub mod corpus;
pub mod corrupt;
pub mod frontier;
pub mod fuzz;
pub mod neardup;

use std::collections::HashSet;
use std::sync::Arc;

use crate::storage::sim::CrashImage;
use crate::storage::SimDisk;
use crate::{check_storage, Options, Sieve};

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
    /// The same through [`Sieve::frontier_read_lines`] (the URLs hold no newline), which
    /// reads F ahead on other threads.
    PopLines(usize),
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
        Step::PopLines(n) => {
            let mut urls = Vec::new();
            sieve.frontier_read_lines(*n, usize::MAX, |text, k| {
                let before = urls.len();
                urls.extend(text.split(|&b| b == b'\n').take(k).map(<[u8]>::to_vec));
                assert_eq!(urls.len() - before, k, "a chunk of {k} lines");
                Ok(())
            })?;
            o.in_doubt = urls;
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
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl Bytes<'_> {
    pub(crate) fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
