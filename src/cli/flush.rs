//! `crivello flush DIR`: flush now, so that every URL pushed so far is merged and the new
//! ones become available to `pop`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::Options;

use super::progress::Progress;
use super::{open_sieve, require_sieve, Common};

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
    let mut sieve = open_sieve(&args.dir, Options::new().memory(args.common.memory))?;
    sieve.flush()?;
    sieve.close()?;
    progress.finish();
    Ok(())
}
