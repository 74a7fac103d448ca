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
use crivello::{InvalidUrl, Options, Sieve};

use super::progress::Progress;
use super::stream::{sources, Line, LineReader};
use super::{explained, open_frontier, open_sieve, parse_max_url_len, Common, CrawlArg};

/// The arguments of `push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The sieve's directory; created if missing.
    pub dir: PathBuf,
    /// Files of URLs, one per line; none, or "-", reads standard input.
    pub files: Vec<PathBuf>,
    /// The longest URL accepted, in bytes (units as for --memory; at most 1G).
    #[arg(long, value_name = "SIZE", default_value_t = Options::DEFAULT_MAX_URL_LEN, value_parser = parse_max_url_len)]
    pub max_url_len: usize,
    /// Skip invalid lines (empty, or longer than --max-url-len) and report how many on
    /// stderr, instead of stopping at the first one.
    #[arg(long)]
    pub skip_invalid: bool,
    /// The crawl the URLs belong to (a frontier's namespace). Another crawl than DEFAULT
    /// makes the directory a frontier.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// URLs pushed to a frontier in one durable step.
const FRONTIER_BATCH: usize = 4096;

/// Runs `push`.
pub fn run(args: PushArgs) -> Result<()> {
    if !matches!(args.crawl.name(), "DEFAULT" | "") {
        return run_crawl(args);
    }
    let opts = Options::new()
        .memory(args.common.memory)
        .max_url_len(args.max_url_len);
    let mut sieve = open_sieve(&args.dir, opts)?;
    let mut progress = Progress::new("push", args.common.quiet);
    let mut skipped = 0u64;
    // A URL and its "\r\n": a longer read without "\n" is a line too long.
    let limit = args.max_url_len + 2;
    let mut buf = Vec::with_capacity(64 << 10);
    for source in sources(&args.files) {
        let mut input = LineReader::open(source)?;
        loop {
            buf.clear();
            let Some(line) = input.read_line(&mut buf, limit)? else {
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
                    if buf.last() == Some(&b'\r') {
                        buf.pop();
                    }
                    progress.line(n, Some(&mut sieve));
                    match sieve.push(&buf) {
                        Ok(()) => None,
                        Err(crivello::Error::InvalidUrl(why)) => Some(why),
                        Err(e) => return Err(e.into()),
                    }
                }
            };
            if let Some(why) = why {
                if !args.skip_invalid {
                    return Err(invalid_line(sieve, &input, &why));
                }
                skipped += 1;
            }
        }
    }
    progress.waiting("sync");
    sieve.close()?;
    progress.finish();
    report_skipped(skipped, &args);
    Ok(())
}

/// Pushes to a crawl of a frontier, in durable batches.
fn run_crawl(args: PushArgs) -> Result<()> {
    let frontier = open_frontier(&args.dir, args.common.memory)?;
    let crawl = args.crawl.name();
    let mut progress = Progress::new("push", args.common.quiet);
    let mut skipped = 0u64;
    let limit = args.max_url_len + 2;
    let mut buf = Vec::with_capacity(64 << 10);
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(FRONTIER_BATCH);
    let push = |batch: &mut Vec<Vec<u8>>| -> Result<()> {
        let items: Vec<crivello::Discovered<'_>> =
            batch.iter().map(|u| crivello::Discovered::url(u)).collect();
        frontier.push(crawl, &items)?;
        batch.clear();
        Ok(())
    };
    for source in sources(&args.files) {
        let mut input = LineReader::open(source)?;
        loop {
            buf.clear();
            let Some(line) = input.read_line(&mut buf, limit)? else {
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
                    if buf.last() == Some(&b'\r') {
                        buf.pop();
                    }
                    progress.line(n, None);
                    if buf.is_empty() {
                        Some(InvalidUrl::Empty)
                    } else {
                        batch.push(buf.clone());
                        None
                    }
                }
            };
            if let Some(why) = why {
                if !args.skip_invalid {
                    push(&mut batch)?;
                    return Err(line_error(&input, &why));
                }
                skipped += 1;
            }
            if batch.len() >= FRONTIER_BATCH {
                push(&mut batch)?;
            }
        }
    }
    push(&mut batch)?;
    frontier.close()?;
    progress.finish();
    report_skipped(skipped, &args);
    Ok(())
}

/// Reports the invalid lines skipped.
fn report_skipped(skipped: u64, args: &PushArgs) {
    if skipped > 0 && !args.common.quiet {
        let lines = if skipped == 1 { "line" } else { "lines" };
        let note = format!(
            "crivello: skipped {skipped} invalid {lines} (empty, or longer than {} bytes)\n",
            args.max_url_len
        );
        let _ = std::io::stderr().write_all(note.as_bytes());
    }
}

/// The error for an invalid input line, once every line before it is durable.
fn invalid_line(sieve: Sieve, input: &LineReader, why: &InvalidUrl) -> anyhow::Error {
    if let Err(e) = sieve.close() {
        return anyhow::Error::new(e).context("sync the lines before the invalid line");
    }
    line_error(input, why)
}

/// The error for an invalid input line.
fn line_error(input: &LineReader, why: &InvalidUrl) -> anyhow::Error {
    let what = match why {
        InvalidUrl::Empty => "empty line".to_owned(),
        InvalidUrl::TooLong { max, .. } => format!("line longer than the maximum of {max} bytes"),
        other => format!("invalid URL: {other}"),
    };
    let fix = match why {
        InvalidUrl::TooLong { .. } => "raise --max-url-len or fix the line",
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
