//! `crivello policy DIR [--key KEY] [--delay DURATION | --ratio P] [--per-queue K]
//! [--limit N]`: set the politeness of one queue, or the default, which every queue follows
//! in what it did not set. What is not given keeps its value; with none of them, print the policy
//! in force.

use std::path::PathBuf;

use anyhow::Result;
use clap::{ArgGroup, Args};

use super::duration::{key_parser, parse_duration, parse_ratio};
use super::stream::Output;
use super::{open_frontier, open_frontier_read_only, require_sieve, Common, CrawlArg};

/// The arguments of `policy`.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("what")
        .multiple(true)
        .args(["delay", "ratio", "per_queue", "limit"])
))]
pub struct PolicyArgs {
    /// The frontier's directory.
    pub dir: PathBuf,
    /// The queue's key (default: the default policy of every queue without its own, in every
    /// crawl).
    #[arg(long, value_name = "KEY", value_parser = key_parser())]
    pub key: Option<std::ffi::OsString>,
    /// Wait DURATION from the end of one fetch to the next hand-out (rule 1).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "ratio", allow_hyphen_values = true)]
    pub delay: Option<u64>,
    /// After fetches that took s' in all, wait s'/P (rule 2): P above 0 and at most 1.
    #[arg(long, value_name = "P", value_parser = parse_ratio, allow_negative_numbers = true)]
    pub ratio: Option<u32>,
    /// At most K URLs of the queue leased at once (1: never two fetchers on one host).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub per_queue: Option<u32>,
    /// At most N URLs of the queue done (0: no limit).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u64>,
    /// The crawl.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `policy`.
pub fn run(args: PolicyArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    let key = args.key.as_deref().map(std::ffi::OsStr::as_encoded_bytes);
    let crawl = args.crawl.name();
    let given = [args.delay.is_some(), args.ratio.is_some()]
        .into_iter()
        .chain([args.per_queue.is_some(), args.limit.is_some()])
        .any(|g| g);
    if !given {
        // The policy in force, read without the lock and without writing (as `stats` reads).
        let policy = super::read_beside_writers(&args.dir, "policy", || {
            let frontier = open_frontier_read_only(&args.dir, args.common.memory)?;
            Ok(frontier.policy(crawl, key)?)
        })?;
        let text = super::queues::policy_text(&policy);
        let mut out = Output::new();
        out.line(text.as_bytes())?;
        return out.flush();
    }
    let frontier = open_frontier(&args.dir, args.common.memory)?;
    // The fields given (a delay turns the ratio rule off, a ratio the delay); a queue's
    // others stay its own, or follow the default's.
    let mut fields = crivello::PolicyFields {
        per_queue: args.per_queue,
        limit: args.limit,
        ..Default::default()
    };
    if let Some(d) = args.delay {
        fields.delay_ms = Some(d);
        fields.ratio_ppm = Some(0);
    }
    if let Some(r) = args.ratio {
        fields.ratio_ppm = Some(r);
        fields.delay_ms = Some(0);
    }
    frontier.change_policy(crawl, key, fields)?;
    super::close_after_durable_work(frontier, "the policy is set");
    Ok(())
}
