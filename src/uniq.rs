//! Each distinct line of a sequence of inputs once, in first-appearance order, in bounded
//! memory: the engine of `crivello uniq`.
//!
//! It is the sieve without A and F. A line is identified by its signature and its place in
//! the input, and the input itself keeps the bytes: a buffer of S holds a (signature, index)
//! slot per line, and its batch remembers which stretches of which inputs its lines came
//! from. A flush sorts the batch and spills it as a run, or merges Z, the runs and the batch
//! into a new Z segment exactly as the sieve does (so the cost per line stays flat); the
//! lines no input of Z holds are then printed by reading their stretches of input again,
//! in order, source after source. Nothing is copied but the signatures.
//!
//! A regular file is read again where it is (by its path, or by its handle for standard
//! input); any other input (a pipe, a terminal) is copied as it is read to a spool file in
//! the temporary storage, which is read again instead. The lines printed are checked against
//! their signatures: an input that changed while it was being read is an
//! [`Error::InputChanged`], never a wrong output passed silently.
//!
//! Nothing here must survive a crash: the storage is scratch space (use it through
//! [`crate::storage::Unsynced`] to skip the fsyncs).
//!
//! ```
//! # fn main() -> crivello::Result<()> {
//! use std::sync::Arc;
//! use crivello::storage::SimDisk;
//! use crivello::uniq::{Input, Uniq};
//!
//! let out = Arc::new(std::sync::Mutex::new(Vec::new()));
//! let sink = crivello::uniq::SharedBuffer(out.clone());
//! let mut uniq = Uniq::new(Arc::new(SimDisk::new()), crivello::Options::new(), Box::new(sink))?;
//! uniq.read(Input::reader("lines", &b"b\na\nb\nc\na\n"[..]))?;
//! uniq.finish()?;
//! assert_eq!(*out.lock().unwrap(), b"b\na\nc\n");
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::options::Options;
use crate::run::{Run, RunMeta, Slot};
use crate::segment::Segment;
use crate::sieve::flush::{self, check_term, Positions};
use crate::sieve::signature;
use crate::storage::{Storage, StorageFile};

/// Bytes read from an input at a time (the buffer grows only for a longer line).
const READ_BUFFER: usize = 1 << 20;
/// Bytes read at a time when lines are read again to be printed.
const REREAD_BUFFER: usize = 1 << 20;
/// The output's buffer.
const WRITE_BUFFER: usize = 256 << 10;
/// The progress callback is called every this many lines.
const PROGRESS_LINES: u64 = 1 << 14;
/// The name of the output in error messages.
pub const OUTPUT_NAME: &str = "<output>";

/// An input to read: a file by its path, a regular file already open, or any reader.
pub struct Input {
    name: String,
    kind: Kind,
}

enum Kind {
    Path(PathBuf),
    Handle(File),
    Stream(Box<dyn Read + Send>),
}

impl Input {
    /// The file at `path`, opened when it is read. A regular file is read again by its
    /// path to print its lines; anything else (a named pipe, a device) is spooled.
    pub fn path(path: impl AsRef<Path>) -> Input {
        let path = path.as_ref();
        Input {
            name: path.display().to_string(),
            kind: Kind::Path(path.to_owned()),
        }
    }

    /// An open file named `name` in messages, read from its current offset. A regular file
    /// is read again through the handle; anything else is spooled.
    pub fn file(name: impl Into<String>, file: File) -> Input {
        Input {
            name: name.into(),
            kind: Kind::Handle(file),
        }
    }

    /// Any reader, named `name` in messages: its bytes are spooled to the storage as they
    /// are read.
    pub fn reader(name: impl Into<String>, reader: impl Read + Send + 'static) -> Input {
        Input {
            name: name.into(),
            kind: Kind::Stream(Box::new(reader)),
        }
    }
}

/// Where the lines of an input are read again.
enum Origin {
    /// A regular file, opened again by its path; its device and inode must not change.
    Path { path: PathBuf, dev: u64, ino: u64 },
    /// A regular file kept open.
    Handle(File),
    /// The spool file that copies a stream, in the storage.
    Spool(Arc<dyn StorageFile>),
}

/// What the metadata of a regular file said once it was read to its end: its size and the
/// time of its last change (which every write sets, and no one can set back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: meta.len(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// An input read so far, as its batches see it.
struct Source {
    name: String,
    origin: Origin,
    /// A regular file's stamp, once it was read to its end.
    stamp: std::sync::OnceLock<Stamp>,
}

impl Source {
    fn changed(&self) -> Error {
        Error::InputChanged {
            file: self.name.clone(),
        }
    }

    /// The stamp of the file first read, now: `Ok(None)` for a spool, `Err` when its path
    /// names another file or its metadata cannot be read.
    fn stamp_now(&self) -> std::result::Result<Option<Stamp>, ()> {
        let meta = match &self.origin {
            Origin::Path { path, dev, ino } => match std::fs::metadata(path) {
                Ok(m) if m.dev() == *dev && m.ino() == *ino => m,
                _ => return Err(()),
            },
            Origin::Handle(file) => file.metadata().map_err(|_| ())?,
            Origin::Spool(_) => return Ok(None),
        };
        Ok(Some(Stamp::of(&meta)))
    }

    /// Records the stamp of a regular file read to its end (of the file first read: a path
    /// that names another file now gets none, and [`Source::differs`] sees the change).
    fn seal(&self) {
        if let Ok(Some(stamp)) = self.stamp_now() {
            let _ = self.stamp.set(stamp);
        }
    }

    /// Whether the file is seen to have changed since it was read: another file at its path,
    /// or another size or a later change time than its stamp. A spool never changes.
    fn differs(&self) -> bool {
        match self.stamp_now() {
            Err(()) => true,
            Ok(None) => false,
            Ok(Some(now)) => self.stamp.get().is_some_and(|s| now != *s),
        }
    }

    /// Opens the input to read its lines again.
    fn reopen(&self) -> Result<Reread<'_>> {
        match &self.origin {
            Origin::Path { path, dev, ino } => {
                let file = File::open(path).map_err(|e| Error::io("open", &self.name, e))?;
                let meta = file
                    .metadata()
                    .map_err(|e| Error::io("stat", &self.name, e))?;
                if meta.dev() != *dev || meta.ino() != *ino {
                    return Err(self.changed());
                }
                Ok(Reread::Owned(file))
            }
            Origin::Handle(file) => Ok(Reread::File(file)),
            Origin::Spool(file) => Ok(Reread::Spool(&**file)),
        }
    }
}

enum Reread<'a> {
    Owned(File),
    File(&'a File),
    Spool(&'a dyn StorageFile),
}

impl Reread<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self {
            Reread::Owned(f) => f.read_at(buf, offset),
            Reread::File(f) => f.read_at(buf, offset),
            Reread::Spool(f) => f.read_at(buf, offset),
        }
    }
}

/// A stretch of an input holding consecutive lines of a batch: bytes `start..end`, which
/// hold `lines` lines (each ends with "\n" but the input's last one may not).
struct Piece {
    source: Arc<Source>,
    start: u64,
    end: u64,
    lines: u64,
}

/// A run on disk with the stretches of input its indexes refer to.
struct UniqRun {
    run: Arc<Run>,
    pieces: Arc<Vec<Piece>>,
}

/// A flush to run: spill `slots` as a run, or merge it with Z and the runs.
struct Job {
    storage: Arc<dyn Storage>,
    seed: u64,
    next_id: u64,
    segments: Vec<Arc<Segment>>,
    runs: Vec<UniqRun>,
    slots: Vec<Slot>,
    pieces: Vec<Piece>,
    merge: bool,
    max_line: usize,
    out: BufWriter<Box<dyn Write + Send>>,
}

/// What a flush left.
struct Done {
    next_id: u64,
    segments: Vec<Arc<Segment>>,
    runs: Vec<UniqRun>,
    out: BufWriter<Box<dyn Write + Send>>,
    printed: u64,
    /// The batch's buffer, emptied, for the next batch.
    spare: Vec<Slot>,
}

/// The callback of [`Uniq::on_progress`].
type ProgressFn = Box<dyn FnMut(&UniqStats) + Send>;

/// Counts of a [`Uniq`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UniqStats {
    /// Lines read.
    pub lines: u64,
    /// Bytes read, "\n" included.
    pub bytes: u64,
    /// Distinct lines printed so far.
    pub printed: u64,
    /// Flushes (spills and merges) started.
    pub flushes: u64,
    /// Merges with Z started.
    pub merges: u64,
}

/// Prints each distinct line of its inputs once, in first-appearance order, in the memory
/// budget of its [`Options`]. See the [module documentation](self).
pub struct Uniq {
    storage: Arc<dyn Storage>,
    seed: u64,
    slots: usize,
    max_runs: usize,
    max_line: usize,
    background: bool,
    next_id: u64,
    spools: u64,
    segments: Vec<Arc<Segment>>,
    runs: Vec<UniqRun>,
    /// Signatures in Z.
    distinct: u64,
    s: Vec<Slot>,
    /// The buffer the last flush handed back, emptied: the next S.
    next_s: Vec<Slot>,
    pieces: Vec<Piece>,
    /// The stretch of the input being read that the current batch holds.
    piece: Option<Piece>,
    inflight: Option<JoinHandle<Result<Done>>>,
    out: Option<BufWriter<Box<dyn Write + Send>>>,
    buf: Vec<u8>,
    stats: UniqStats,
    progress: Option<ProgressFn>,
    failed: bool,
}

impl Uniq {
    /// A dedup of lines into `out`, keeping its runs and segments in `storage` (scratch
    /// space: nothing in it is reused). Of `opts`, the memory budget (or the slots), the seed
    /// (random by default), the background flushes and the longest URL, here the longest
    /// line without its "\n", apply.
    pub fn new(
        storage: Arc<dyn Storage>,
        opts: Options,
        out: Box<dyn Write + Send>,
    ) -> Result<Uniq> {
        // No cache of recent signatures here: its room goes to S.
        let opts = opts.recent_cache(0);
        let slots = opts.validate()?;
        Ok(Uniq {
            storage,
            seed: opts
                .seed
                .unwrap_or_else(crate::sieve::recovery::random_seed),
            slots,
            max_runs: crate::options::max_runs(opts.memory),
            max_line: opts.max_url_len,
            background: opts.background,
            next_id: 0,
            spools: 0,
            segments: Vec::new(),
            runs: Vec::new(),
            distinct: 0,
            s: Vec::new(),
            next_s: Vec::new(),
            pieces: Vec::new(),
            piece: None,
            inflight: None,
            out: Some(BufWriter::with_capacity(WRITE_BUFFER, out)),
            buf: Vec::new(),
            stats: UniqStats::default(),
            progress: None,
            failed: false,
        })
    }

    /// Calls `f` with the counts now and then while reading.
    pub fn on_progress(&mut self, f: impl FnMut(&UniqStats) + Send + 'static) {
        self.progress = Some(Box::new(f));
    }

    /// The counts so far.
    pub fn stats(&self) -> &UniqStats {
        &self.stats
    }

    /// Reads `input` to its end. Its new lines are printed by the flushes that follow (all
    /// of them by [`Uniq::finish`]). After an error the dedup cannot go on.
    pub fn read(&mut self, input: Input) -> Result<()> {
        if self.failed {
            return Err(Error::Poisoned);
        }
        let r = self.read_input(input);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Flushes everything read and prints the last new lines; returns the counts.
    pub fn finish(mut self) -> Result<UniqStats> {
        if self.failed {
            return Err(Error::Poisoned);
        }
        self.freeze(true)?;
        self.wait()?;
        let mut out = self
            .out
            .take()
            .expect("the output is back after the last flush");
        out.flush()
            .map_err(|e| Error::io("write", OUTPUT_NAME, e))?;
        Ok(self.stats.clone())
    }

    fn read_input(&mut self, input: Input) -> Result<()> {
        let name = input.name;
        let (origin, mut reader, start): (Origin, Box<dyn Read + Send>, u64) = match input.kind {
            Kind::Path(path) => {
                let file = File::open(&path).map_err(|e| Error::io("open", &name, e))?;
                let meta = file.metadata().map_err(|e| Error::io("stat", &name, e))?;
                if meta.is_file() {
                    let origin = Origin::Path {
                        path,
                        dev: meta.dev(),
                        ino: meta.ino(),
                    };
                    (origin, Box::new(file), 0)
                } else {
                    (self.spool()?, Box::new(file), 0)
                }
            }
            Kind::Handle(file) => {
                let meta = file.metadata().map_err(|e| Error::io("stat", &name, e))?;
                if meta.is_file() {
                    use std::io::Seek as _;
                    let mut reader = file.try_clone().map_err(|e| Error::io("open", &name, e))?;
                    let start = reader
                        .stream_position()
                        .map_err(|e| Error::io("seek", &name, e))?;
                    (Origin::Handle(file), Box::new(reader), start)
                } else {
                    (self.spool()?, Box::new(file), 0)
                }
            }
            Kind::Stream(reader) => (self.spool()?, reader, 0),
        };
        let source = Arc::new(Source {
            name,
            origin,
            stamp: std::sync::OnceLock::new(),
        });
        let spool = match &source.origin {
            Origin::Spool(f) => Some(f.clone()),
            _ => None,
        };
        self.piece = Some(Piece {
            source: source.clone(),
            start,
            end: start,
            lines: 0,
        });

        let max = self.max_line;
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(READ_BUFFER.min(max.saturating_add(1)).max(4096), 0);
        // buf[pos..filled] is unread; buf[0] is at input offset `offset`.
        let (mut pos, mut filled, mut offset) = (0usize, 0usize, start);
        let mut line_number = 0u64;
        let too_long = |line: u64| Error::LineTooLong {
            file: source.name.clone(),
            line,
            max,
        };
        loop {
            while let Some(i) = memchr::memchr(b'\n', &buf[pos..filled]) {
                line_number += 1;
                if i > max {
                    self.buf = buf;
                    return Err(too_long(line_number));
                }
                let sig = signature(&buf[pos..pos + i], self.seed);
                pos += i + 1;
                self.line(sig, (i + 1) as u64, offset + pos as u64)?;
            }
            if filled - pos > max {
                self.buf = buf;
                return Err(too_long(line_number + 1));
            }
            buf.copy_within(pos..filled, 0);
            offset += pos as u64;
            filled -= pos;
            pos = 0;
            if filled == buf.len() {
                let grown = (2 * buf.len()).min(max.saturating_add(1).max(buf.len() + 1));
                buf.resize(grown, 0);
            }
            let n = loop {
                match reader.read(&mut buf[filled..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.buf = buf;
                        return Err(Error::io("read", &source.name, e));
                    }
                }
            };
            if let Some(spool) = &spool {
                spool
                    .write_all_at(&buf[filled..filled + n], offset + filled as u64)
                    .map_err(|e| Error::io("write", "spool", e))?;
            }
            if n == 0 {
                if filled > 0 {
                    // The last line, without "\n".
                    let sig = signature(&buf[..filled], self.seed);
                    self.line(sig, filled as u64, offset + filled as u64)?;
                }
                break;
            }
            filled += n;
        }
        self.buf = buf;
        source.seal();
        if let Some(p) = self.piece.take() {
            if p.lines > 0 {
                self.pieces.push(p);
            }
        }
        Ok(())
    }

    /// Creates a spool file for a stream.
    fn spool(&mut self) -> Result<Origin> {
        let name = format!("spool-{}", self.spools);
        self.spools += 1;
        let f = self
            .storage
            .create(&name)
            .map_err(|e| Error::io("create", &name, e))?;
        Ok(Origin::Spool(f))
    }

    /// Counts one line of `bytes` bytes with signature `sig`, which ends at input offset
    /// `end`; freezes the batch when S is full.
    fn line(&mut self, sig: u64, bytes: u64, end: u64) -> Result<()> {
        let idx = self.s.len() as u32;
        crate::run::push_slot(&mut self.s, Slot { sig, idx }, self.slots);
        let piece = self.piece.as_mut().expect("a piece while reading");
        piece.lines += 1;
        piece.end = end;
        self.stats.lines += 1;
        self.stats.bytes += bytes;
        if self.stats.lines % PROGRESS_LINES == 0 {
            if let Some(f) = &mut self.progress {
                f(&self.stats);
            }
        }
        if self.s.len() >= self.slots {
            self.freeze(false)?;
        }
        Ok(())
    }

    /// Waits for the flush under way, if any, and takes its result.
    fn wait(&mut self) -> Result<()> {
        let Some(h) = self.inflight.take() else {
            return Ok(());
        };
        let done = match h.join() {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::io(
                    "flush",
                    "uniq",
                    io::Error::other("the flush thread panicked"),
                ))
            }
        };
        self.apply(done);
        Ok(())
    }

    fn apply(&mut self, done: Done) {
        self.next_id = done.next_id;
        self.segments = done.segments;
        self.distinct = self.segments.iter().map(|s| s.meta().sigs).sum();
        self.runs = done.runs;
        self.out = Some(done.out);
        self.stats.printed += done.printed;
        self.next_s = done.spare;
    }

    /// Hands the batch to a flush: a merge if `merge` or if one is due, else a spill.
    fn freeze(&mut self, merge: bool) -> Result<()> {
        let r = self.freeze_inner(merge);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn freeze_inner(&mut self, merge: bool) -> Result<()> {
        if let Some(p) = &mut self.piece {
            if p.lines > 0 {
                let next = Piece {
                    source: p.source.clone(),
                    start: p.end,
                    end: p.end,
                    lines: 0,
                };
                self.pieces.push(std::mem::replace(p, next));
            }
        }
        self.wait()?;
        let unmerged =
            self.runs.iter().map(|r| r.run.meta().records).sum::<u64>() + self.s.len() as u64;
        let merge =
            merge || flush::merge_due(unmerged, self.distinct, self.runs.len(), self.max_runs);
        if self.s.is_empty() && !merge {
            return Ok(());
        }
        self.stats.flushes += 1;
        self.stats.merges += u64::from(merge);
        let job = Job {
            storage: self.storage.clone(),
            seed: self.seed,
            next_id: self.next_id,
            segments: self.segments.clone(),
            runs: std::mem::take(&mut self.runs),
            slots: std::mem::replace(&mut self.s, std::mem::take(&mut self.next_s)),
            pieces: std::mem::take(&mut self.pieces),
            merge,
            max_line: self.max_line,
            out: self.out.take().expect("the output is back between flushes"),
        };
        if self.background {
            let h = std::thread::Builder::new()
                .name("crivello-uniq-flush".into())
                .spawn(move || job.run())
                .map_err(|e| Error::io("spawn", "flush thread", e))?;
            self.inflight = Some(h);
        } else {
            let done = job.run()?;
            self.apply(done);
        }
        Ok(())
    }
}

impl Drop for Uniq {
    /// Never leaves a flush writing to the scratch storage after an error dropped the dedup.
    fn drop(&mut self) {
        if let Some(h) = self.inflight.take() {
            let _ = h.join();
        }
    }
}

impl Job {
    fn run(self) -> Result<Done> {
        let Job {
            storage,
            seed,
            mut next_id,
            segments,
            mut runs,
            mut slots,
            pieces,
            merge,
            max_line,
            mut out,
        } = self;
        let storage = &*storage;
        let records = slots.len() as u64;
        crate::run::sort_slots(&mut slots);
        if !merge {
            let meta = RunMeta {
                id: next_id,
                gen: 0,
                skip: 0,
                records,
                pairs: slots.len() as u64,
            };
            next_id += 1;
            crate::run::write(storage, meta, &slots)?;
            slots.clear();
            runs.push(UniqRun {
                run: Arc::new(Run::open(storage, meta)?),
                pieces: Arc::new(pieces),
            });
            return Ok(Done {
                next_id,
                segments,
                runs,
                out,
                printed: 0,
                spare: slots,
            });
        }
        let run_files: Vec<Arc<Run>> = runs.iter().map(|r| r.run.clone()).collect();
        let merged = flush::merge_signatures(storage, &mut next_id, &segments, &run_files, &slots)?;
        slots.clear();
        let mut printed = 0;
        let mut chunk = Vec::new();
        for (i, r) in merged.regions.iter().enumerate() {
            if r.count == 0 {
                continue;
            }
            let (name, pieces) = match runs.get(i) {
                Some(run) => (run.run.name(), &run.pieces[..]),
                None => ("batch", &pieces[..]),
            };
            let new = Positions::read(&*merged.scratch, r, name)?;
            let sum = print(pieces, new.iter(), seed, max_line, &mut out, &mut chunk)?;
            if sum != r.sum {
                // Lines printed are not the lines read, somewhere in this source.
                return Err(changed(pieces));
            }
            printed += r.count;
        }
        out.flush()
            .map_err(|e| Error::io("write", OUTPUT_NAME, e))?;
        // The merged runs, superseded segments and scratch file go.
        for r in &run_files {
            let _ = storage.remove(r.name());
        }
        for s in &segments {
            let _ = storage.remove(s.name());
        }
        let _ = storage.remove(flush::SCRATCH);
        Ok(Done {
            next_id,
            segments: merged.segment.into_iter().collect(),
            runs: Vec::new(),
            out,
            printed,
            spare: slots,
        })
    }
}

/// The error for a batch whose lines changed, somewhere: names its input if it has one, else
/// the first of its inputs whose metadata shows a change, else all of them.
fn changed(pieces: &[Piece]) -> Error {
    let mut sources: Vec<&Source> = Vec::new();
    for p in pieces {
        if !sources.iter().any(|s| std::ptr::eq(*s, &*p.source)) {
            sources.push(&p.source);
        }
    }
    match sources[..] {
        [] => Error::InputChanged {
            file: "input".into(),
        },
        [one] => one.changed(),
        _ => match sources.iter().find(|s| s.differs()) {
            Some(s) => s.changed(),
            None => Error::InputChanged {
                file: sources
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" or "),
            },
        },
    }
}

/// Prints the lines at the increasing `positions` (line indexes in the batch) of the
/// batch's `pieces`; returns the wrapping sum of their check terms (signature and index). No line is longer than
/// `max_line` unless the input changed.
fn print(
    pieces: &[Piece],
    positions: impl Iterator<Item = u64>,
    seed: u64,
    max_line: usize,
    out: &mut impl Write,
    chunk: &mut Vec<u8>,
) -> Result<u64> {
    let mut next = positions.peekable();
    let mut sum = 0u64;
    // The batch index of the piece's first line.
    let mut first = 0u64;
    for piece in pieces {
        let Some(&want) = next.peek() else { break };
        if want >= first + piece.lines {
            first += piece.lines;
            continue;
        }
        let source = &*piece.source;
        let file = source.reopen()?;
        // chunk[..filled] holds input bytes from `offset`; lines start at `pos`.
        let (mut offset, mut pos, mut filled) = (piece.start, 0usize, 0usize);
        let mut idx = first;
        let end_idx = first + piece.lines;
        while next.peek().is_some_and(|&p| p < end_idx) {
            match memchr::memchr(b'\n', &chunk[pos..filled]) {
                Some(i) => {
                    if next.peek() == Some(&idx) {
                        let line = &chunk[pos..pos + i];
                        sum = sum.wrapping_add(check_term(signature(line, seed), idx));
                        write_line(out, line)?;
                        next.next();
                    }
                    idx += 1;
                    pos += i + 1;
                }
                None => {
                    let at = offset + filled as u64;
                    if at >= piece.end {
                        // The input's last line, without "\n".
                        if idx + 1 != end_idx || pos == filled {
                            return Err(source.changed());
                        }
                        if next.peek() == Some(&idx) {
                            let line = &chunk[pos..filled];
                            sum = sum.wrapping_add(check_term(signature(line, seed), idx));
                            write_line(out, line)?;
                            next.next();
                        }
                        idx += 1;
                        pos = filled;
                        continue;
                    }
                    if filled - pos > max_line {
                        return Err(source.changed());
                    }
                    chunk.copy_within(pos..filled, 0);
                    offset += pos as u64;
                    filled -= pos;
                    pos = 0;
                    let room = REREAD_BUFFER.max(2 * filled);
                    if chunk.len() < room {
                        chunk.resize(room, 0);
                    }
                    let want_bytes = (chunk.len() - filled).min((piece.end - at) as usize);
                    let n = file
                        .read_at(&mut chunk[filled..filled + want_bytes], at)
                        .map_err(|e| Error::io("read", &source.name, e))?;
                    if n == 0 {
                        return Err(source.changed());
                    }
                    filled += n;
                }
            }
        }
        first = end_idx;
    }
    if next.peek().is_some() {
        return Err(changed(pieces));
    }
    Ok(sum)
}

fn write_line(out: &mut impl Write, line: &[u8]) -> Result<()> {
    out.write_all(line)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(|e| Error::io("write", OUTPUT_NAME, e))
}

/// A writer into a shared buffer, for examples and tests that read the output back.
#[derive(Clone, Default)]
pub struct SharedBuffer(pub Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
