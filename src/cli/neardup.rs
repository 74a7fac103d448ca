//! `crivello neardup DIR [FILE...] [-k K]`: near-duplicate pages by SimHash.
//!
//! Reads JSON lines `{"id": STRING, "text": STRING}`, fingerprints each text, and stores
//! each document whose id is new, printing `ID<TAB>FINGERPRINT<TAB>MATCH<TAB>DISTANCE`. Lines
//! are printed in batches, each after its documents are durable; the store then records that
//! they were printed (durably at its next commit), and a run that finds documents stored but
//! not recorded as printed (an earlier run was interrupted) prints their lines first. Two
//! threads parse and fingerprint chunks of lines while the command's thread reads the input
//! and stores the documents, in input order.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::neardup::{Fingerprinter, Store, StoredRef, MAX_ID, MAX_TEXT};
use crivello::Options;

use super::stream::{sources, Line, LineReader, Output};
use super::{explained, Common};

/// Documents fingerprinted before a batch is stored and its lines printed.
const BATCH_DOCS: usize = 1 << 16;

/// How long a document may wait for its batch to fill: then the documents read so far are
/// stored and their lines printed (see [`wait`]).
const IDLE: std::time::Duration = std::time::Duration::from_millis(200);

/// The longest a document waits for its batch to fill.
const MOST_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a document may wait for its batch to fill, when storing the last batch (and
/// printing its lines) took `took`: [`IDLE`], or ten times as long as that took (a batch
/// reads every segment of the store, so that the batches of a slow input take a tenth of
/// the time at most), but at most [`MOST_IDLE`] (a disk that stalled once, or a reader
/// slow to take the lines, holds back the next lines for a few seconds at most).
fn wait(took: std::time::Duration) -> std::time::Duration {
    IDLE.max(took.saturating_mul(10)).min(MOST_IDLE)
}

/// Bytes of ids in a batch.
const BATCH_ID_BYTES: usize = 16 << 20;
/// The longest input line: a text of [`MAX_TEXT`] bytes, with room for its JSON escapes.
const MAX_LINE: usize = MAX_TEXT + (1 << 20);
/// Threads that parse and fingerprint the input.
const PARSERS: usize = 2;
/// Input bytes of a chunk of lines handed to a parsing thread (or one longer line).
const CHUNK_BYTES: usize = 1 << 20;
/// Room in a chunk for the line that takes it past [`CHUNK_BYTES`], so that a chunk of lines
/// of usual lengths is allocated once.
const CHUNK_SLACK: usize = 64 << 10;

/// The arguments of `neardup`.
#[derive(Debug, Args)]
pub struct NeardupArgs {
    /// The store's directory (created if missing).
    pub dir: PathBuf,
    /// Inputs of JSON lines {"id": ..., "text": ...}; none or "-": standard input.
    pub files: Vec<PathBuf>,
    /// Near-duplicates differ in at most K bits of their 64-bit fingerprints (0 to 6).
    #[arg(short = 'k', value_name = "K", default_value_t = 3, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(0..=6))]
    pub k: u32,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// The command's help: what a near-duplicate is, and what k means.
pub const HELP: &str = "\
Each input line is a JSON object with a string \"id\" and a string \"text\" (other fields are
ignored). The text's fingerprint is its 64-bit SimHash: the text is lower-cased, every run of
characters that are not letters or digits becomes one space (markup is not removed: give the
page's text), every 5 consecutive characters are a feature hashed to 64 bits, and bit i of the
fingerprint is set when most features have bit i set. Similar texts get fingerprints that
differ in few bits; an empty text (or one with no letter or digit) has the fingerprint 0.

Two documents are near-duplicates when their fingerprints differ in at most K bits (the
Hamming distance; default 3, as Google's crawler used over 8 billion pages). For each
document whose id is new, one line: ID, the fingerprint (16 hex digits), the id of the stored
document nearest to it within K (ties: the earliest stored) and the distance, or \"-\" and
\"-\"; every new document is stored, near-duplicate or not. A document whose id was stored
before prints nothing; their count goes to stderr at the end. A line is printed once its
document is durable (documents are stored in batches of 65,536, or of what came within 0.2 s
of a batch's first document, or ten times as long as the last batch took to store, 5 s at
most); an interrupted run, run again, may print a line again, never skips one.

An input line that is not such an object, an id that is empty, longer than 64 KiB, holds a
tab or a line break or is \"-\", or a text over 16 MiB stops the command (exit 1) with the file and line,
after the documents before it were stored and printed.";

/// One line of output.
fn line(out: &mut Output, s: &StoredRef<'_>) -> Result<()> {
    let id = String::from_utf8_lossy(s.id);
    let fp = s.fingerprint;
    match &s.nearest {
        Some(n) => out.text(&format!(
            "{id}\t{fp:016x}\t{}\t{}\n",
            String::from_utf8_lossy(n.id),
            n.distance
        )),
        None => out.text(&format!("{id}\t{fp:016x}\t-\t-\n")),
    }
}

/// Runs `neardup`.
pub fn run(args: NeardupArgs) -> Result<()> {
    // Every input named opens, before the store is made or changed.
    sources(&args.files)?;
    let opts = Options::new().memory(args.common.memory);
    let named = |e: crivello::Error| {
        anyhow::Error::new(e).context(format!("near-duplicate store {}", args.dir.display()))
    };
    let mut store =
        super::waiting_for_lock(|| Store::open(&args.dir, opts.clone())).map_err(|e| match e {
            crivello::Error::Locked { .. } | crivello::Error::NotASieve { .. } => {
                anyhow::Error::new(e)
            }
            e => named(e),
        })?;
    let mut out = Output::new();
    // Lines of an interrupted run, stored but not recorded as printed.
    let pending = store.unreported();
    for doc in pending.clone() {
        let s = store.document(doc).map_err(named)?;
        line(&mut out, &s.as_stored_ref())?;
    }
    out.flush()?;
    store.set_reported(pending.end);

    let mut batch = Batch::default();
    let (mut new, mut repeats) = (0u64, 0u64);
    // A thread reads the input in chunks of lines, handed in turn to two threads that parse
    // and fingerprint them; this one takes their documents in input order and stores them.
    // At the end of the input the threads have ended, and are joined. At a refused line
    // this one stops at once, without waiting for them: a thread left waiting (for input
    // that may never come, or for room) ends with the process.
    let parsed = start_parsing(&args.files)?;
    let mut failure = None;
    let mut ended = None;
    // Stores the batch and prints its lines, timing it.
    let mut flush = |b: &mut Batch| -> Result<()> {
        let start = std::time::Instant::now();
        store_batch(
            &mut store,
            &mut out,
            &mut b.docs,
            args.k,
            (&mut new, &mut repeats),
            &named,
        )?;
        (b.bytes, b.since, b.took) = (0, None, start.elapsed());
        Ok(())
    };
    for n in 0.. {
        let from = &parsed.from[n % PARSERS];
        let next = loop {
            let Some(t) = batch.since else {
                break from.recv().ok();
            };
            match from.recv_timeout(wait(batch.took).saturating_sub(t.elapsed())) {
                // The documents read wait no longer for a batch to fill: a crawler that
                // sends pages as it fetches them gets their lines.
                Err(mpsc::RecvTimeoutError::Timeout) => flush(&mut batch)?,
                got => break got.ok(),
            }
        };
        let Some(p) = next else {
            ended = Some(n);
            break;
        };
        if !p.docs.is_empty() {
            batch.since.get_or_insert_with(std::time::Instant::now);
        }
        for d in p.docs {
            batch.bytes += d.0.len();
            batch.docs.push(d);
            if batch.docs.len() >= BATCH_DOCS || batch.bytes >= BATCH_ID_BYTES {
                flush(&mut batch)?;
                batch.since = Some(std::time::Instant::now());
            }
        }
        // An input that never pauses: what waited long enough is stored (once a chunk).
        if batch.docs.is_empty() {
            batch.since = None;
        } else if batch.since.is_some_and(|t| t.elapsed() >= wait(batch.took)) {
            flush(&mut batch)?;
        }
        if p.refused.is_some() {
            failure = p.refused;
            break;
        }
    }
    match ended {
        // The end of the input, every chunk taken, unless a thread failed.
        Some(n) => parsed.check_ended(n)?,
        // Stopped at a refused line: nothing more is taken.
        None => drop(parsed),
    }
    flush(&mut batch)?;
    store.close().map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "close the near-duplicate store {}",
            args.dir.display()
        ))
    })?;
    if !args.common.quiet {
        eprintln!(
            "crivello: neardup: {new} new {} stored, {repeats} with an id seen before",
            if new == 1 { "document" } else { "documents" }
        );
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The documents fingerprinted and not stored yet.
#[derive(Default)]
struct Batch {
    /// Their ids and fingerprints, in input order.
    docs: Vec<(String, u64)>,
    /// The bytes of their ids.
    bytes: usize,
    /// When the first of them came (`None`: none waits).
    since: Option<std::time::Instant>,
    /// How long storing the last batch (and printing its lines) took.
    took: std::time::Duration,
}

/// Stores a batch, prints its lines, flushes them, and records them as printed.
fn store_batch(
    store: &mut Store,
    out: &mut Output,
    batch: &mut Vec<(String, u64)>,
    k: u32,
    (new, repeats): (&mut u64, &mut u64),
    named: &dyn Fn(crivello::Error) -> anyhow::Error,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let docs: Vec<(&[u8], u64)> = batch.iter().map(|(id, fp)| (id.as_bytes(), *fp)).collect();
    // The lines of each batch of the store as it is durable; after a failure to write, no
    // more (the documents stored are printed by the next run, as unreported).
    let mut last = None;
    let mut failed = None;
    store
        .insert_with(&docs, k, |_, s| match s {
            Some(s) if failed.is_none() => match line(out, &s) {
                Ok(()) => {
                    *new += 1;
                    last = Some(s.doc);
                }
                Err(e) => failed = Some(e),
            },
            Some(_) => {}
            None => *repeats += 1,
        })
        .map_err(named)?;
    if let Some(e) = failed {
        return Err(e);
    }
    out.flush()?;
    if let Some(doc) = last {
        store.set_reported(doc + 1);
    }
    batch.clear();
    Ok(())
}

/// Lines of one input, for a parsing thread.
struct Chunk {
    /// The input's name in messages.
    source: Arc<str>,
    /// The number of its first line.
    first_line: u64,
    /// The lines without their newlines, one after the other.
    bytes: Vec<u8>,
    /// Where each line ends in `bytes`.
    ends: Vec<usize>,
    /// Whether a line longer than [`MAX_LINE`] follows the last one (nothing after it is
    /// read).
    too_long: bool,
}

/// What the reading thread hands a parsing thread: lines, or the input's failure (nothing
/// after it is read).
enum Piece {
    Lines(Chunk),
    Failed(anyhow::Error),
}

/// A chunk parsed: the documents of its lines, in order, up to the first refused line.
struct Parsed {
    /// The documents: id and fingerprint.
    docs: Vec<(String, u64)>,
    /// Why the line after them was refused, or the input failed; `None`: every line parsed.
    refused: Option<anyhow::Error>,
}

/// The threads that read and parse the input.
struct Parsing {
    /// Each parsing thread's results: chunk `n`'s are the next of `from[n % PARSERS]`.
    from: Vec<mpsc::Receiver<Parsed>>,
    /// The reading thread and the parsing threads.
    reader: std::thread::JoinHandle<()>,
    parsers: Vec<std::thread::JoinHandle<()>>,
}

impl Parsing {
    /// Called when chunk `n`'s results end, which is the end of the input when the threads
    /// ended well: the parsing thread of chunk `n` ended, so the reading thread did (its
    /// chunks end when it does). Either one's panic is an error here, never a short input.
    fn check_ended(self, n: usize) -> Result<()> {
        let mut parsers = self.parsers;
        let parser = parsers.swap_remove(n % PARSERS);
        for (what, thread) in [("parse", parser), ("read", self.reader)] {
            if thread.join().is_err() {
                anyhow::bail!("the thread that {what}s the input failed");
            }
        }
        Ok(())
    }
}

/// Starts the thread that reads `files` (or standard input) in chunks and the [`PARSERS`]
/// threads that parse them, chunk `n` going to thread `n % PARSERS`.
fn start_parsing(files: &[PathBuf]) -> Result<Parsing> {
    let mut to = Vec::with_capacity(PARSERS);
    let mut from = Vec::with_capacity(PARSERS);
    let mut parsers = Vec::with_capacity(PARSERS);
    for _ in 0..PARSERS {
        // A chunk is handed over when the thread takes it, and one parsed chunk may wait.
        let (pieces, rx) = mpsc::sync_channel::<Piece>(0);
        let (tx, parsed) = mpsc::sync_channel::<Parsed>(1);
        let parser = std::thread::Builder::new()
            .name("crivello-parse".into())
            .spawn(move || {
                let mut fp = Fingerprinter::new();
                for piece in rx {
                    let p = match piece {
                        Piece::Lines(chunk) => parse_chunk(&chunk, &mut fp),
                        Piece::Failed(e) => Parsed {
                            docs: Vec::new(),
                            refused: Some(e),
                        },
                    };
                    if tx.send(p).is_err() {
                        return;
                    }
                }
            })
            .context("start a thread to parse the input")?;
        to.push(pieces);
        from.push(parsed);
        parsers.push(parser);
    }
    let files: Vec<Option<PathBuf>> = sources(files)?
        .into_iter()
        .map(|s| s.map(Path::to_path_buf))
        .collect();
    let reader = std::thread::Builder::new()
        .name("crivello-read".into())
        .spawn(move || {
            let mut n = 0;
            // Hands `piece` to the next parsing thread; false when nothing more is taken.
            let mut hand = |piece: Piece| {
                let taken = to[n % PARSERS].send(piece).is_ok();
                n += 1;
                taken
            };
            for source in &files {
                let mut reader = match LineReader::open(source.as_deref()) {
                    Ok(r) => r,
                    Err(e) => {
                        hand(Piece::Failed(e));
                        return;
                    }
                };
                let name: Arc<str> = reader.name().into();
                loop {
                    match read_chunk(&mut reader, &name) {
                        Ok(Some(chunk)) => {
                            let too_long = chunk.too_long;
                            if !hand(Piece::Lines(chunk)) || too_long {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            hand(Piece::Failed(e));
                            return;
                        }
                    }
                }
            }
        })
        .context("start a thread to read the input")?;
    Ok(Parsing {
        from,
        reader,
        parsers,
    })
}

/// The next lines of `reader`: one, then those read already while they hold under
/// [`CHUNK_BYTES`]; `None` at the end of the input.
fn read_chunk(reader: &mut LineReader, source: &Arc<str>) -> Result<Option<Chunk>> {
    let mut chunk = Chunk {
        source: source.clone(),
        first_line: reader.line_number() + 1,
        bytes: Vec::with_capacity(CHUNK_BYTES + CHUNK_SLACK),
        ends: Vec::new(),
        too_long: false,
    };
    match reader.next_line(MAX_LINE)? {
        None => return Ok(None),
        Some((_, Line::TooLong)) => chunk.too_long = true,
        Some((line, Line::Complete(_))) => {
            chunk.bytes.extend_from_slice(line);
            chunk.ends.push(chunk.bytes.len());
            // Then the lines read already: a chunk never waits for the input, so that a
            // refused line is parsed as soon as it is read.
            while chunk.bytes.len() < CHUNK_BYTES {
                let Some(line) = reader.next_read_line(MAX_LINE) else {
                    break;
                };
                chunk.bytes.extend_from_slice(line);
                chunk.ends.push(chunk.bytes.len());
            }
        }
    }
    Ok(Some(chunk))
}

/// Parses and fingerprints the lines of `chunk`, up to the first one refused.
fn parse_chunk(chunk: &Chunk, fp: &mut Fingerprinter) -> Parsed {
    let refusal = |i: usize, why: String| {
        explained(
            format!(
                "{}: line {}: {why}",
                chunk.source,
                chunk.first_line + i as u64
            ),
            "fix the input line; the documents before it were stored",
        )
    };
    let mut docs = Vec::with_capacity(chunk.ends.len());
    let mut start = 0;
    for (i, &end) in chunk.ends.iter().enumerate() {
        let line = &chunk.bytes[start..end];
        // A file's first line may begin with a byte-order mark (as some editors save UTF-8).
        let line = match chunk.first_line + i as u64 {
            1 => line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line),
            _ => line,
        };
        match parse(line, fp) {
            Ok(d) => docs.push(d),
            Err(why) => {
                return Parsed {
                    docs,
                    refused: Some(refusal(i, why)),
                }
            }
        }
        start = end;
    }
    let refused = chunk.too_long.then(|| {
        refusal(
            chunk.ends.len(),
            format!(
                "a line longer than {MAX_LINE} bytes (17 MiB: a text of 16 MiB and its JSON \
                 escapes; each \\u escape counts 6 bytes: write the text as UTF-8, e.g. \
                 json.dumps(..., ensure_ascii=False))"
            ),
        )
    });
    Parsed { docs, refused }
}

/// A line's object: its `id` and `text` as they are (their types are checked after), every
/// other field skipped unread (as `IgnoredAny`: a number past a double's range, or arrays
/// nested deeper than the parser's limit for values it builds, are valid JSON there).
struct Doc {
    id: Option<serde_json::Value>,
    text: Option<serde_json::Value>,
}

impl<'de> serde::Deserialize<'de> for Doc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Doc, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Doc;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Doc, A::Error> {
                let mut doc = Doc {
                    id: None,
                    text: None,
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*key {
                        // Given twice, which one counts is a guess: refused.
                        "id" if doc.id.is_some() => {
                            return Err(serde::de::Error::duplicate_field("id"))
                        }
                        "text" if doc.text.is_some() => {
                            return Err(serde::de::Error::duplicate_field("text"))
                        }
                        "id" => doc.id = Some(map.next_value()?),
                        "text" => doc.text = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Parses one input line into (id, fingerprint), or says why it is refused.
fn parse(line: &[u8], fp: &mut Fingerprinter) -> std::result::Result<(String, u64), String> {
    let doc: Doc = serde_json::from_slice(line).map_err(|e| {
        // Not an object at its first byte: whether the line is JSON at all is found by
        // reading it whole (`[1,2` is not JSON; `[1,2]` is, and is not an object).
        let e = match e.classify() {
            serde_json::error::Category::Data => {
                match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
                    Err(syntax) => syntax,
                    Ok(_) => e,
                }
            }
            _ => e,
        };
        // The parser's own position is within the line: said as a column, not as a
        // "line 1" that would contradict the input's line number.
        let what = e.to_string();
        let what = what.split(" at line ").next().unwrap_or(&what).to_owned();
        if line.is_empty() {
            "an empty line, not a JSON object".to_owned()
        } else if let Some(field) = what.strip_prefix("duplicate field ") {
            format!("{} given twice", field.replace('`', "\""))
        } else if e.classify() == serde_json::error::Category::Data {
            // Valid JSON of another type than an object.
            "not a JSON object with a string \"id\" and a string \"text\"".to_owned()
        } else {
            format!("not JSON: {what} (at byte {} of the line)", e.column())
        }
    })?;
    let id = match &doc.id {
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err("\"id\" is not a string".into()),
        None => return Err("no \"id\"".into()),
    };
    let text = match &doc.text {
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err("\"text\" is not a string".into()),
        None => return Err("no \"text\"".into()),
    };
    if id.is_empty() || id.len() > MAX_ID {
        return Err(format!(
            "the id is {} bytes long: it must be 1 to {MAX_ID}",
            id.len()
        ));
    }
    if id.contains(['\t', '\n', '\r']) {
        return Err("the id holds a tab or a line break, which the output cannot show".into());
    }
    if id == "-" {
        return Err(
            "the id is \"-\", the output's mark of no near-duplicate: give the document another id"
                .into(),
        );
    }
    let f = fp
        .fingerprint(text)
        .ok_or_else(|| format!("the text is {} bytes long: at most {MAX_TEXT}", text.len()))?;
    Ok((id.clone(), f))
}
