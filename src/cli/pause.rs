//! `crivello pause DIR` and `crivello resume DIR`: stop and restart the hand-outs of the
//! whole frontier (pushes and dones go on).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::{open_frontier, require_sieve, Common, CrawlArg};

/// The arguments of `pause` and `resume`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The frontier's directory.
    pub dir: PathBuf,
    /// The crawl (every crawl pauses: the frontier as a whole does).
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `pause` (`on`) or `resume`.
pub fn run(args: PauseArgs, on: bool) -> Result<()> {
    require_sieve(&args.dir)?;
    let frontier = open_frontier(&args.dir, args.common.memory)?;
    frontier.set_paused(on)?;
    let what = if on { "paused" } else { "resumed" };
    super::close_after_durable_work(frontier, &format!("hand-outs are {what}"));
    Ok(())
}
