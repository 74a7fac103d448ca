//! `crivello block DIR KEY (--until UNIX_SECONDS | --for DURATION)`: hand out nothing of a
//! queue before an instant (after an HTTP 429 or 503, say); `--until 0` unblocks it.

use std::path::PathBuf;

use anyhow::Result;
use clap::{ArgGroup, Args};

use super::duration::{key_parser, parse_duration};
use super::{open_frontier, require_sieve, Common, CrawlArg};

/// The arguments of `block`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("when").required(true).args(["until", "for_"])))]
pub struct BlockArgs {
    /// The frontier's directory.
    pub dir: PathBuf,
    /// The queue's key.
    #[arg(value_parser = key_parser())]
    pub key: std::ffi::OsString,
    /// Until this instant, in seconds since the Unix epoch (0: unblock), at most the end of
    /// the year 9999 (253402300799).
    #[arg(long, value_name = "UNIX_SECONDS", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(..=LAST_INSTANT_S))]
    pub until: Option<u64>,
    /// For this long from now (a whole number with a unit ms, s, m or h).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub for_: Option<u64>,
    /// The crawl.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// The last instant `--until` takes: 9999-12-31 23:59:59 UTC.
const LAST_INSTANT_S: u64 = 253_402_300_799;

/// Runs `block`.
pub fn run(args: BlockArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    let now = crivello::queues::Clock::now_ms(&crivello::queues::SystemClock);
    let until = match (args.until, args.for_) {
        (Some(s), _) => s.saturating_mul(1000),
        (None, Some(d)) if now.saturating_add(d) <= LAST_INSTANT_S * 1000 => now + d,
        (None, Some(_)) => {
            return Err(super::explained(
                "--for: past the end of the year 9999",
                "give a shorter duration",
            ))
        }
        (None, None) => unreachable!("clap requires one"),
    };
    let frontier = open_frontier(&args.dir, args.common.memory)?;
    frontier.block(args.crawl.name(), args.key.as_encoded_bytes(), until)?;
    super::close_after_durable_work(frontier, "the block is set");
    Ok(())
}
