//! `crivello push DIR [FILE...]`: push URLs, one per line, into a sieve.
//!
//! A line is split at "\n"; then one trailing "\r" is removed too, so files with CRLF line
//! endings push the same URLs as files with LF endings. Everything read is durable when the
//! command exits with 0 (the sieve is closed, which syncs). An invalid line stops the
//! command after every line before it was synced, or, with `--skip-invalid`, is skipped and
//! counted.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::{Discovered, Frontier, InvalidUrl, Mode, Options, Sieve};

use super::progress::Progress;
use super::stream::{sources, Line, LineReader};
use super::{
    explained, open_frontier_with, open_sieve, parse_max_url_len, Common, CrawlArg, QueueCodingArg,
};

/// The arguments of `push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The sieve's directory; created if missing.
    pub dir: PathBuf,
    /// Files of URLs, one per line; none, or "-", reads standard input.
    pub files: Vec<PathBuf>,
    /// The longest URL accepted, in bytes (units as for --memory; at most 1G).
    #[arg(long, value_name = "SIZE", default_value_t = Options::DEFAULT_MAX_URL_LEN, value_parser = parse_max_url_len, allow_negative_numbers = true)]
    pub max_url_len: usize,
    /// Skip invalid lines (empty, or longer than --max-url-len) and report how many on
    /// stderr, instead of stopping at the first one.
    #[arg(long)]
    pub skip_invalid: bool,
    /// The crawl the URLs belong to (a frontier's namespace). Another crawl than DEFAULT
    /// makes the directory a frontier.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// How a frontier writes its queues.
    #[command(flatten)]
    pub coding: QueueCodingArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// URLs pushed to a frontier in one durable step.
const FRONTIER_BATCH: usize = 4096;

/// Runs `push`.
pub fn run(args: PushArgs) -> Result<()> {
    // Every input named opens, before a store is made or changed.
    super::stream::sources(&args.files)?;
    let mut progress = Progress::new("push", args.common.quiet);
    // DEFAULT's URLs go to the sieve directly, unless the store is a frontier already:
    // there the frontier says which crawl DEFAULT is (a new one once DEFAULT was deleted).
    let opts = Options::new()
        .memory(args.common.memory)
        .max_url_len(args.max_url_len);
    let mut sieve = None;
    // Compressed queues make a frontier; `--compress-queues=off` changes a frontier only.
    if matches!(args.crawl.name(), "DEFAULT" | "") && args.coding.compress_queues != Some(true) {
        let s = open_sieve(&args.dir, opts.clone())?;
        if s.mode() == Mode::Frontier {
            s.close()?;
        } else {
            sieve = Some(s);
        }
    }
    let skipped = if let Some(s) = sieve {
        let mut sink = SieveSink(s);
        let pushed = push_lines(&args, &mut progress, &mut sink);
        progress.waiting("sync");
        // Closed after an invalid line too (the lines before it synced): the close counts
        // the repeats the cache of recent URLs dropped, which `stats` missed otherwise.
        let closed = sink.0.close();
        let skipped = pushed?;
        closed?;
        skipped
    } else {
        let mut sink = FrontierSink {
            frontier: open_frontier_with(&args.dir, args.coding.apply(opts))?,
            crawl: args.crawl.name(),
            batch: Vec::with_capacity(FRONTIER_BATCH),
        };
        let pushed = push_lines(&args, &mut progress, &mut sink);
        let skipped = pushed.and_then(|skipped| sink.settle().map(|()| skipped));
        let closed = sink.frontier.close();
        let skipped = skipped?;
        closed?;
        skipped
    };
    progress.finish();
    report_skipped(skipped, &args);
    Ok(())
}

/// Where `push` puts the lines it reads.
trait Sink {
    /// Takes one line (its "\r" removed), `n` bytes read; says why it is invalid, if it is.
    fn take(&mut self, url: &[u8], n: usize, progress: &mut Progress)
        -> Result<Option<InvalidUrl>>;
    /// Makes every line taken durable.
    fn settle(&mut self) -> Result<()>;
}

/// A plain sieve: each line pushed as read; the sieve's group commit makes them durable.
struct SieveSink(Sieve);

impl Sink for SieveSink {
    fn take(
        &mut self,
        url: &[u8],
        n: usize,
        progress: &mut Progress,
    ) -> Result<Option<InvalidUrl>> {
        progress.line(n, Some(&mut self.0));
        // The line holds no newline: split at them.
        match self.0.push_line(url) {
            Ok(()) => Ok(None),
            Err(crivello::Error::InvalidUrl(why)) => Ok(Some(why)),
            Err(e) => Err(e.into()),
        }
    }

    fn settle(&mut self) -> Result<()> {
        Ok(self.0.sync()?)
    }
}

/// A crawl of a frontier: lines pushed in durable batches.
struct FrontierSink<'a> {
    frontier: Frontier,
    crawl: &'a str,
    batch: Vec<Vec<u8>>,
}

impl Sink for FrontierSink<'_> {
    fn take(
        &mut self,
        url: &[u8],
        n: usize,
        progress: &mut Progress,
    ) -> Result<Option<InvalidUrl>> {
        progress.line(n, None);
        // Refused as a push of the batch would refuse it, but alone.
        match self.frontier.validate(url, None) {
            Ok(()) => {}
            Err(crivello::Error::InvalidUrl(why)) => return Ok(Some(why)),
            Err(e) => return Err(e.into()),
        }
        self.batch.push(url.to_vec());
        if self.batch.len() >= FRONTIER_BATCH {
            self.settle()?;
        }
        Ok(None)
    }

    fn settle(&mut self) -> Result<()> {
        let items: Vec<Discovered<'_>> = self.batch.iter().map(|u| Discovered::url(u)).collect();
        self.frontier.push(self.crawl, &items)?;
        self.batch.clear();
        Ok(())
    }
}

/// Reads every line of the input into `sink`; returns the invalid lines skipped. An invalid
/// line, unless skipped, stops it once every line before it is durable.
fn push_lines(args: &PushArgs, progress: &mut Progress, sink: &mut dyn Sink) -> Result<u64> {
    let mut skipped = 0u64;
    // A URL and its "\r\n": a longer read without "\n" is a line too long.
    let limit = args.max_url_len + 2;
    for source in sources(&args.files)? {
        let mut input = LineReader::open(source)?;
        loop {
            let Some((mut buf, line)) = input.next_line(limit)? else {
                break;
            };
            let why = match line {
                Line::TooLong => {
                    if args.skip_invalid {
                        input.skip_rest()?;
                    }
                    Some(InvalidUrl::TooLong {
                        len: limit,
                        max: args.max_url_len,
                    })
                }
                Line::Complete(n) => {
                    if let Some(url) = buf.strip_suffix(b"\r") {
                        buf = url;
                    }
                    sink.take(buf, n, progress)?
                }
            };
            if let Some(why) = why {
                if !args.skip_invalid {
                    if let Err(e) = sink.settle() {
                        return Err(e.context("sync the lines before the invalid line"));
                    }
                    return Err(line_error(&input, &why));
                }
                skipped += 1;
            }
        }
    }
    Ok(skipped)
}

/// Reports the invalid lines skipped.
fn report_skipped(skipped: u64, args: &PushArgs) {
    if skipped > 0 && !args.common.quiet {
        let lines = if skipped == 1 { "line" } else { "lines" };
        let note = format!(
            "crivello: skipped {skipped} invalid {lines} (empty, longer than {} bytes, or, in \
             a frontier, with a host over 255 bytes)\n",
            args.max_url_len
        );
        let _ = std::io::stderr().write_all(note.as_bytes());
    }
}

/// The error for an invalid input line.
fn line_error(input: &LineReader, why: &InvalidUrl) -> anyhow::Error {
    let what = match why {
        InvalidUrl::Empty => "empty line".to_owned(),
        InvalidUrl::TooLong { max, .. } => format!("line longer than the maximum of {max} bytes"),
        InvalidUrl::KeyTooLong { len, max } => format!(
            "the URL's queue key, its host (the text after :// up to the first :, /, ? or &), \
             is {len} bytes, longer than the maximum of {max}"
        ),
        other => format!("invalid URL: {other}"),
    };
    let fix = match why {
        InvalidUrl::TooLong { .. } => "raise --max-url-len or fix the line",
        InvalidUrl::KeyTooLong { .. } => {
            "remove or fix the line (no host name is that long: a fragment or a space before the \
             first / can make one)"
        }
        _ => "remove or fix the line",
    };
    explained(
        format!("{}: line {}: {what}", input.name(), input.line_number()),
        format!(
            "{fix}, or pass --skip-invalid to skip invalid lines \
             (the lines before it were pushed and are durable)"
        ),
    )
}
