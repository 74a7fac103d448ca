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
//! # fn main() -> crivello::uniq::Result<()> {
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

pub mod approx;
mod error;
mod flush;
mod input;

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::MetadataExt as _;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::buffer::Slot;
use crate::options::Options;
use crate::segment::Segment;
use crate::signature::signature;
use crate::storage::{Storage, StorageExt};

pub use error::{Error, Result};
use flush::{Done, Job, UniqRun};
pub use input::Input;
use input::{Kind, Origin, Piece, Source};

/// Bytes read from an input at a time (the buffer grows only for a longer line).
const READ_BUFFER: usize = 1 << 20;
/// The output's buffer.
const WRITE_BUFFER: usize = 256 << 10;
/// The progress callback is called every this many lines.
const PROGRESS_LINES: u64 = 1 << 14;

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
            seed: opts.seed.unwrap_or_else(crate::signature::random_seed),
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
            return Err(Error::Stopped);
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
            return Err(Error::Stopped);
        }
        self.freeze(true)?;
        self.wait()?;
        let mut out = self
            .out
            .take()
            .expect("the output is back after the last flush");
        out.flush().map_err(Error::Output)?;
        Ok(self.stats.clone())
    }

    /// Reads `input` to its end, line by line, into S. (Over 80 lines: one loop over a read
    /// buffer that grows only for a line longer than it, and every way out of it.)
    fn read_input(&mut self, input: Input) -> Result<()> {
        let name = input.name;
        let (origin, mut reader, start) = self.open_input(&name, input.kind)?;
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
        // buf[pos..pos + scanned] holds no newline: a line longer than a read is searched
        // once, not again from its start after each read (which made a long line from a
        // pipe cost the square of its length).
        let mut scanned = 0usize;
        let too_long = |line: u64| Error::LineTooLong {
            file: source.name.clone(),
            line,
            max,
        };
        loop {
            while let Some(i) = memchr::memchr(b'\n', &buf[pos + scanned..filled]) {
                let i = i + scanned;
                scanned = 0;
                line_number += 1;
                if i > max {
                    self.buf = buf;
                    return Err(too_long(line_number));
                }
                let sig = signature(&buf[pos..pos + i], self.seed);
                pos += i + 1;
                self.line(sig, (i + 1) as u64, offset + pos as u64)?;
            }
            scanned = filled - pos;
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
                        return Err(Error::input("read", &source.name, e));
                    }
                }
            };
            if let Some(spool) = &spool {
                spool.write_all_at(&buf[filled..filled + n], offset + filled as u64)?;
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

    /// Opens an input: where its lines will be read again, a reader of its bytes, and its
    /// offset at the start. A regular file is read again where it is; anything else is
    /// spooled.
    fn open_input(
        &mut self,
        name: &str,
        kind: Kind,
    ) -> Result<(Origin, Box<dyn Read + Send>, u64)> {
        Ok(match kind {
            Kind::Path(path) => {
                let file = File::open(&path).map_err(|e| Error::input("open", name, e))?;
                let meta = file.metadata().map_err(|e| Error::input("stat", name, e))?;
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
                let meta = file.metadata().map_err(|e| Error::input("stat", name, e))?;
                if meta.is_file() {
                    use std::io::Seek as _;
                    let mut reader = file
                        .try_clone()
                        .map_err(|e| Error::input("open", name, e))?;
                    let start = reader
                        .stream_position()
                        .map_err(|e| Error::input("seek", name, e))?;
                    (Origin::Handle(file), Box::new(reader), start)
                } else {
                    (self.spool()?, Box::new(file), 0)
                }
            }
            Kind::Stream(reader) => (self.spool()?, reader, 0),
        })
    }

    /// Creates a spool file for a stream.
    fn spool(&mut self) -> Result<Origin> {
        let f = self
            .storage
            .create_file(&crate::names::spool(self.spools))?;
        self.spools += 1;
        Ok(Origin::Spool(f))
    }

    /// Counts one line of `bytes` bytes with signature `sig`, which ends at input offset
    /// `end`; freezes the batch when S is full.
    fn line(&mut self, sig: u64, bytes: u64, end: u64) -> Result<()> {
        let idx = self.s.len() as u32;
        crate::buffer::push_slot(&mut self.s, Slot { sig, idx }, self.slots);
        let piece = self.piece.as_mut().expect("a piece while reading");
        piece.lines += 1;
        piece.end = end;
        self.stats.lines += 1;
        self.stats.bytes += bytes;
        if self.stats.lines.is_multiple_of(PROGRESS_LINES) {
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
                return Err(Error::Store(crate::Error::io(
                    "flush",
                    "(uniq's flush thread)",
                    io::Error::other("the flush thread panicked"),
                )))
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
        let merge = merge
            || crate::merge::merge_due(unmerged, self.distinct, self.runs.len(), self.max_runs);
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
                .map_err(|e| crate::Error::io("spawn", "(uniq's flush thread)", e))?;
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
