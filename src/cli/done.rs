//! `crivello done DIR [FILE...] [--refetch-after DURATION] [--retry]`: end the leases of URLs.
//!
//! Each line is `URL` or `URL<TAB>SECONDS`, how long the fetch took (for the ratio rule). The
//! URLs are done for good, served again after DURATION, or (`--retry`) back in their queue
//! now, the delay applying; a URL that is not leased changes nothing and is counted on
//! stderr. `lease`'s own line of a URL ends its lease whatever the URL holds (a tab, a
//! trailing "\r"), unless both `U` and `U<TAB>SECONDS` are leased: the line of the second
//! then ends the first's lease, and the second's stays until it expires. Lines are ended in batches, each durable before the next is read: exit 0
//! means every line is.

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
        let note = format!(
            "crivello: {not_leased} {urls} not leased: nothing changed for them (a lease that \
             expired before its done is one: its URL is handed out again; give `lease` a --ttl \
             longer than the fetches take)\n"
        );
        let _ = std::io::stderr().write_all(note.as_bytes());
    }
}

/// A line to end: the URL it reads as, the fetch's milliseconds, and what the URLs looked for
/// in turn when that one is not leased are made of (see [`Ending::alternatives`]).
struct Ending {
    url: Vec<u8>,
    took: u64,
    /// The line whole, when it holds a tab (else it is `url`).
    whole: Option<Vec<u8>>,
    /// Whether a "\r" ended the line (removed, as `push` removes one).
    cr: bool,
}

impl Ending {
    /// The URLs the line may stand for besides `url`, to look for in turn when that one is
    /// not leased: `lease` prints a URL as it is, and `push` keeps a URL's tabs and all but
    /// one trailing "\r". A line that holds a tab: the line whole (its text after the tab the
    /// URL's, not seconds); a line that ended in "\r": the line with it. Made only for a line
    /// not leased as read, so that a CRLF file copies nothing more.
    fn alternatives(&self, max_url_len: usize) -> Vec<Vec<u8>> {
        let line = self.whole.as_deref().unwrap_or(&self.url);
        let mut alternatives = Vec::new();
        if self.whole.is_some() {
            alternatives.push(line.to_vec());
        }
        if self.cr {
            alternatives.push([line, b"\r"].concat());
        }
        alternatives.retain(|u| u.len() <= max_url_len);
        alternatives
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
    let mut batch: Vec<Ending> = Vec::with_capacity(BATCH);
    // Ends the batch's lines (durable when it returns): how many were not leased.
    let mut end = |batch: &mut Vec<Ending>| -> Result<u64> {
        if batch.is_empty() {
            return Ok(0);
        }
        let f = match frontier {
            Some(f) => f,
            None => frontier.insert(open_frontier(&args.dir, args.common.memory)?),
        };
        let items: Vec<(&[u8], u64)> = batch.iter().map(|e| (&e.url[..], e.took)).collect();
        let ended = f.complete_urls(crawl, &items, how)?;
        let mut missed: Vec<Vec<Vec<u8>>> = batch
            .iter_mut()
            .zip(ended)
            .filter(|(_, ended)| !ended)
            .map(|(e, _)| e.alternatives(args.max_url_len))
            .collect();
        // A URL not leased as the line reads is looked for as `lease` may have printed it,
        // each alternative in turn (a fetch of 0 s: the line's tab is the URL's own).
        for round in 0.. {
            let items: Vec<(&[u8], u64)> = missed
                .iter()
                .filter_map(|alts| alts.get(round).map(|u| (&u[..], 0)))
                .collect();
            if items.is_empty() {
                break;
            }
            let mut found = f.complete_urls(crawl, &items, how)?.into_iter();
            missed.retain(|alts| {
                alts.get(round).is_none() || !found.next().expect("an answer for each URL")
            });
        }
        batch.clear();
        Ok(missed.len() as u64)
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
                *not_leased += end(&mut batch)?;
                return Err(bad_line(
                    &input,
                    &format!(
                        "longer than --max-url-len ({} bytes) allows, with {LINE_EXTRA} bytes \
                         for a tab and the seconds",
                        args.max_url_len
                    ),
                ));
            }
            let cr = buf.last() == Some(&b'\r');
            if cr {
                buf.pop();
            }
            let whole = buf.contains(&b'\t').then(|| buf.clone());
            match parse_line(&buf) {
                Ok((url, _)) if url.len() > args.max_url_len => {
                    *not_leased += end(&mut batch)?;
                    return Err(bad_line(
                        &input,
                        &format!(
                            "the URL is longer than --max-url-len ({} bytes)",
                            args.max_url_len
                        ),
                    ));
                }
                Ok((url, took)) => batch.push(Ending {
                    url,
                    took,
                    whole,
                    cr,
                }),
                // Not `URL<TAB>SECONDS`: the line may be a URL that holds a tab, as `lease`
                // prints it. Once the lines before it are ended, it is ended whole if it is
                // leased; else it is the malformed line it reads as.
                Err(why) if whole.is_some() && buf.len() <= args.max_url_len => {
                    *not_leased += end(&mut batch)?;
                    // The line whole, then (see `Ending::alternatives`) with its "\r".
                    let mut alone = vec![Ending {
                        url: buf.clone(),
                        took: 0,
                        whole: None,
                        cr,
                    }];
                    if end(&mut alone)? > 0 {
                        return Err(bad_line(
                            &input,
                            &format!("{why}, and the whole line is no URL leased"),
                        ));
                    }
                }
                Err(why) => {
                    *not_leased += end(&mut batch)?;
                    return Err(bad_line(&input, why));
                }
            }
            if batch.len() >= BATCH {
                *not_leased += end(&mut batch)?;
            }
        }
    }
    *not_leased += end(&mut batch)?;
    Ok(())
}

/// The longest fetch a line may give, in seconds: a year.
const MAX_FETCH_S: f64 = 365.0 * 86_400.0;

/// A line `URL` or `URL<TAB>SECONDS`: the URL and the fetch's milliseconds. The seconds are
/// after the line's last tab, so that a URL holding a tab (`push` keeps URLs as they are) is
/// ended by `URL<TAB>SECONDS`, as by the line alone (see [`Ending::alternatives`]).
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
