//! `crivello flush DIR`: flush now, so that every URL pushed so far is merged and the new
//! ones become available to `pop`, or, in a frontier, wait in their queues.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::{Mode, Options};

use super::progress::Progress;
use super::{open_frontier_with, open_sieve, require_sieve, Common};

/// The arguments of `flush`.
#[derive(Debug, Args)]
pub struct FlushArgs {
    /// The sieve's directory.
    pub dir: PathBuf,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `flush`.
pub fn run(args: FlushArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    let progress = Progress::new("flush", args.common.quiet);
    let opts = Options::new().memory(args.common.memory).existing(true);
    let mut sieve = open_sieve(&args.dir, opts.clone())?;
    if sieve.mode() == Mode::Frontier {
        // A frontier's new URLs go on into their queues, which the frontier's flush does.
        sieve.close()?;
        let frontier = open_frontier_with(&args.dir, opts)?;
        frontier.flush()?;
        frontier.close()?;
    } else {
        sieve.flush()?;
        sieve.close()?;
    }
    progress.finish();
    Ok(())
}
