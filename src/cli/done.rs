//! `crivello done DIR [FILE...] [--refetch-after DURATION] [--retry]`: end the leases of URLs.
//!
//! Each line is `URL` or `URL<TAB>SECONDS`, how long the fetch took (for the ratio rule). The
//! URLs are done for good, served again after DURATION, or (`--retry`) back in their queue
//! now, the delay applying; a URL that is not leased changes nothing and is counted on
//! stderr. Lines are ended in batches, each durable before the next is read: exit 0 means
//! every line is.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::{Completion, Options};

use super::duration::parse_duration;
use super::stream::{sources, Line, LineReader};
use super::{
    close_after_durable_work, explained, open_frontier, parse_max_url_len, require_sieve, Common,
    CrawlArg,
};

/// Lines ended in one durable step.
const BATCH: usize = 4096;
/// A line's bytes besides its URL, at most: a tab, the seconds, "\r\n".
const LINE_EXTRA: usize = 64;

/// The arguments of `done`.
#[derive(Debug, Args)]
pub struct DoneArgs {
    /// The frontier's directory.
    pub dir: PathBuf,
    /// Files of lines `URL` or `URL<TAB>SECONDS`; none, or "-", reads standard input.
    pub files: Vec<PathBuf>,
    /// Serve the URLs again after DURATION (a whole number with a unit ms, s, m or h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "retry", allow_hyphen_values = true)]
    pub refetch_after: Option<u64>,
    /// Put the URLs back in their queues now (the delay applies) instead of ending them.
    #[arg(long)]
    pub retry: bool,
    /// The longest URL of a line, in bytes (units as for --memory; at most 1G): give the
    /// `push`'s --max-url-len when it was raised. A longer line is an error.
    #[arg(long, value_name = "SIZE", default_value_t = Options::DEFAULT_MAX_URL_LEN, value_parser = parse_max_url_len, allow_negative_numbers = true)]
    pub max_url_len: usize,
    /// The crawl.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `done`.
pub fn run(args: DoneArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    // Every input named opens, before any lease ends.
    super::stream::sources(&args.files)?;
    let now = crivello::queues::Clock::now_ms(&crivello::queues::SystemClock);
    let how = match (args.retry, args.refetch_after) {
        (true, _) => Completion::Retry,
        (false, Some(after)) => Completion::RefetchAt(now.saturating_add(after)),
        (false, None) => Completion::Done,
    };
    let crawl = args.crawl.name();
    let mut not_leased = 0u64;
    // The frontier is opened once the first batch is read (or the input ended): a `done`
    // reading a fetcher's output leaves the directory free while the fetches run.
    let mut frontier = None;
    let read = read_and_end(&args, &mut frontier, crawl, how, &mut not_leased);
    // Counted for the lines before a refused one too.
    note_not_leased(&args, not_leased);
    read?;
    let frontier = match frontier {
        Some(f) => f,
        None => open_frontier(&args.dir, args.common.memory)?,
    };
    close_after_durable_work(frontier, "the leases are ended");
    Ok(())
}

/// Says on stderr how many URLs were not leased.
fn note_not_leased(args: &DoneArgs, not_leased: u64) {
    if not_leased > 0 && !args.common.quiet {
        let urls = if not_leased == 1 {
            "URL was"
        } else {
            "URLs were"
        };
        let note = format!("crivello: {not_leased} {urls} not leased: nothing changed for them\n");
        let _ = std::io::stderr().write_all(note.as_bytes());
    }
}

/// Reads the lines and ends their leases in batches; counts the URLs not leased.
fn read_and_end(
    args: &DoneArgs,
    frontier: &mut Option<crivello::Frontier>,
    crawl: &str,
    how: Completion,
    not_leased: &mut u64,
) -> Result<()> {
    // Each line's URL, the fetch's milliseconds, and whether a "\r" ended the line (taken
    // as the "\r" of "\r\n").
    let mut batch: Vec<(Vec<u8>, u64, bool)> = Vec::with_capacity(BATCH);
    let mut end = |batch: &mut Vec<(Vec<u8>, u64, bool)>| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let f = match frontier {
            Some(f) => f,
            None => frontier.insert(open_frontier(&args.dir, args.common.memory)?),
        };
        let items: Vec<(&[u8], u64)> = batch.iter().map(|(u, t, _)| (&u[..], *t)).collect();
        let ended = f.complete_urls(crawl, &items, how)?;
        // A URL that ends in "\r" itself (`push` removes one "\r" only) is printed by
        // `lease` as it is: its line read back lost that "\r". Not leased without it, it
        // is looked for with it.
        let again: Vec<(Vec<u8>, u64)> = batch
            .iter()
            .zip(&ended)
            .filter(|((_, _, cr), e)| *cr && !**e)
            .map(|((u, t, _), _)| ([&u[..], b"\r"].concat(), *t))
            .collect();
        let mut missed = ended.iter().filter(|e| !**e).count() - again.len();
        if !again.is_empty() {
            let items: Vec<(&[u8], u64)> = again.iter().map(|(u, t)| (&u[..], *t)).collect();
            missed += f
                .complete_urls(crawl, &items, how)?
                .iter()
                .filter(|e| !**e)
                .count();
        }
        *not_leased += missed as u64;
        batch.clear();
        Ok(())
    };
    let mut buf = Vec::new();
    let limit = args.max_url_len + LINE_EXTRA;
    for source in sources(&args.files)? {
        let mut input = LineReader::open(source)?;
        loop {
            buf.clear();
            let Some(line) = input.read_line(&mut buf, limit)? else {
                break;
            };
            if let Line::TooLong = line {
                end(&mut batch)?;
                return Err(bad_line(
                    &input,
                    &format!(
                        "longer than --max-url-len ({} bytes) allows",
                        args.max_url_len
                    ),
                ));
            }
            let cr = buf.last() == Some(&b'\r');
            if cr {
                buf.pop();
            }
            match parse_line(&buf) {
                Ok((url, _)) if url.len() > args.max_url_len => {
                    end(&mut batch)?;
                    return Err(bad_line(
                        &input,
                        &format!(
                            "the URL is longer than --max-url-len ({} bytes)",
                            args.max_url_len
                        ),
                    ));
                }
                // (With seconds after a tab, the URL's own "\r" is before the tab.)
                Ok((url, took)) => batch.push((url, took, cr && !buf.contains(&b'\t'))),
                Err(why) => {
                    end(&mut batch)?;
                    return Err(bad_line(&input, why));
                }
            }
            if batch.len() >= BATCH {
                end(&mut batch)?;
            }
        }
    }
    end(&mut batch)
}

/// The longest fetch a line may give, in seconds: a year.
const MAX_FETCH_S: f64 = 365.0 * 86_400.0;

/// A line `URL` or `URL<TAB>SECONDS`: the URL and the fetch's milliseconds. The seconds are
/// after the line's last tab, so that a URL holding a tab (`push` keeps URLs as they are) is
/// ended by `URL<TAB>SECONDS`.
fn parse_line(line: &[u8]) -> std::result::Result<(Vec<u8>, u64), &'static str> {
    let (url, took) = match memchr::memrchr(b'\t', line) {
        None => (line, 0),
        Some(i) => {
            let secs = std::str::from_utf8(&line[i + 1..])
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite())
                .ok_or("the time after the tab is not a number of seconds")?;
            if secs < 0.0 {
                return Err("the time after the tab is negative");
            }
            // (The ratio rule waits in proportion: a fetch said to take ages would hold its
            // queue back for ever.)
            if secs > MAX_FETCH_S {
                return Err("the time after the tab is more than a year: give how many seconds the fetch took");
            }
            (&line[..i], (secs * 1000.0).round() as u64)
        }
    };
    if url.is_empty() {
        return Err("no URL");
    }
    Ok((url.to_vec(), took))
}

/// The error of a malformed line, once the lines before it are durable.
fn bad_line(input: &LineReader, why: &str) -> anyhow::Error {
    explained(
        format!("{}: line {}: {why}", input.name(), input.line_number()),
        "give lines \"URL\" or \"URL<TAB>SECONDS\" (the lines before it were ended and are durable)",
    )
}

#[cfg(test)]
mod tests {
    use super::parse_line;

    #[test]
    fn done_lines_are_a_url_and_maybe_seconds() {
        assert_eq!(parse_line(b"http://a/"), Ok((b"http://a/".to_vec(), 0)));
        assert_eq!(
            parse_line(b"http://a/\t1.25"),
            Ok((b"http://a/".to_vec(), 1250))
        );
        for bad in [
            &b""[..],
            b"\t1",
            b"http://a/\tx",
            b"http://a/\t-1",
            b"http://a/\tnan",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_line(b"http://a/\t-1"),
            Err("the time after the tab is negative")
        );
    }
}
