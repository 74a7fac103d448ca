//! `crivello stats DIR [--json]`: the counts and sizes of a sieve, one `key value` per line,
//! or one JSON object whose keys are the field names of [`crivello::Stats`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::{Options, Stats};
use indicatif::HumanBytes;

use super::stream::Output;
use super::{open_sieve_read_only, require_sieve, Common};

/// The keys of the output and their meaning, shown by `crivello stats --help`.
pub const KEYS_HELP: &str = "\
Keys (the same in the text and the JSON output; every value is an unsigned integer):
  pushed         URLs pushed, duplicates included
  buffered       URLs pushed since the last flush that the cache of recent URLs did not
                 find (a repeat it finds is not written again)
  distinct       distinct URLs merged (signatures in Z)
  emitted        URLs ever appended to the frontier
  consumed       URLs popped from the frontier (durable cursor)
  pending        URLs in the frontier not yet popped (in a frontier: new URLs not yet in
                 their queues, which `lease`, `queues` and `flush` move there)
  unmerged       URLs pushed and spilled to runs, waiting for a merge with Z
  runs           runs waiting for a merge
  flushes        flushes committed (spills and merges)
  merges         merges with Z committed
  segments       Z segment files
  torn_records   records of the write-ahead log dropped as torn tails by recoveries
  torn_bytes     bytes of the write-ahead log dropped as torn tails by recoveries (from the
                 damage to the end of the file: an upper bound in a reused file)
  bytes_a        bytes on disk of the write-ahead log (A), up to 3 spare files included
  bytes_z        bytes of the current Z segments
  bytes_r        bytes on disk of the runs (R)
  bytes_f        bytes on disk of the frontier (F)
  bytes_meta     bytes of the manifest and the cursor
  memory_budget  the memory budget in bytes this command ran with (its --memory: a store
                 keeps no budget, each command has its own)
  slots          slots per buffer of S (the in-memory signature buffer) at that budget
  seed           the signature seed (a 64-bit integer)

A frontier (a store that `lease`, `done`, `policy`, `block`, `pause`, `resume`, a
`push --crawl` of another crawl than DEFAULT or a `push --compress-queues` has made one)
adds:
  queues         queues known
  queues_waiting queues with URLs waiting
  waiting        URLs waiting in their queues
  leased         URLs leased
  done           URLs done
  q_runs         Q runs (files of queued URLs)
  bytes_q        bytes on disk of the Q runs
  bytes_j        bytes on disk of the journal (J)
  bytes_ckpt     bytes on disk of the checkpoint (CHECKPOINT)
  q_compressed   1 if the Q runs are written compressed (--compress-queues), else 0
  paused         1 if hand-outs are paused, else 0

A near-duplicate store (`crivello neardup`) prints instead: documents, repeats (documents
refused for an id seen before), reported, segments, bytes_segments, bytes_log, commits,
ids_pushed, and ids_distinct (the ids merged into its sieve of ids, plus those pushed since
its last merge: until then, an id pushed again after a crash, to bring the sieve of ids up to
the stored documents, counts twice).";

/// The arguments of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The sieve's directory (it must exist).
    pub dir: PathBuf,
    /// Print one JSON object instead of text (keys below).
    #[arg(long)]
    pub json: bool,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `stats`.
pub fn run(args: StatsArgs) -> Result<()> {
    if args.dir.join(crivello::neardup::MANIFEST_FILE).is_file() {
        let all = super::read_beside_writers(&args.dir, "stats", || neardup_fields(&args))?;
        return print(&args, &all);
    }
    require_sieve(&args.dir)?;
    // Another process may write the store meanwhile (a server, a push): `stats` takes no
    // lock, so that it never keeps a writer out, and its files may change while it reads
    // them.
    let all = super::read_beside_writers(&args.dir, "stats", || gather(&args))?;
    print(&args, &all)
}

/// The fields of the store in `dir`, from read-only views: `stats` writes nothing, and
/// works on a full disk and on a read-only file system.
fn gather(args: &StatsArgs) -> Result<Vec<(&'static str, u64)>> {
    let mut sieve = open_sieve_read_only(&args.dir, Options::new().memory(args.common.memory))?;
    let stats = sieve.stats()?;
    let frontier = sieve.mode() == crivello::Mode::Frontier;
    sieve.close()?;
    let mut all: Vec<(&'static str, u64)> = fields(&stats).to_vec();
    if frontier {
        let f = super::open_frontier_read_only(&args.dir, args.common.memory)?;
        let fs = f.stats()?;
        let logs = f.log_bytes()?;
        // Dropped, not closed: a close would write a checkpoint (into the view's memory, at
        // 10^6 queues 50 ms) when J's weight calls for one; a read-only view keeps nothing,
        // and what its close could fail at would be the view's, not the store's.
        drop(f);
        all.extend([
            ("queues", fs.queues),
            ("queues_waiting", fs.queues_waiting),
            ("waiting", fs.waiting),
            ("leased", fs.leased),
            ("done", fs.done),
            ("q_runs", fs.runs),
            ("bytes_q", fs.run_bytes),
            ("bytes_j", logs.journal),
            ("bytes_ckpt", logs.checkpoint),
            ("q_compressed", u64::from(fs.compressed)),
            ("paused", u64::from(fs.paused)),
        ]);
    }
    Ok(all)
}

/// The fields of a near-duplicate store (`crivello neardup`), and the pushes and distinct
/// ids of its sieve of document ids.
fn neardup_fields(args: &StatsArgs) -> Result<Vec<(&'static str, u64)>> {
    let opts = Options::new().memory(args.common.memory);
    let mut store = crivello::neardup::Store::open_read_only(&args.dir, opts)?;
    let ns = store.stats();
    let ids = store.ids().stats()?;
    store.close()?;
    Ok(vec![
        ("documents", ns.docs),
        ("repeats", ns.repeats),
        ("reported", ns.reported),
        ("segments", ns.segments),
        ("bytes_segments", ns.segment_bytes),
        ("bytes_log", ns.log_bytes),
        ("commits", ns.commits),
        ("ids_pushed", ids.pushed),
        ("ids_distinct", ids.distinct + ids.unmerged + ids.buffered),
    ])
}

/// Prints the fields, as text or JSON.
fn print(args: &StatsArgs, all: &[(&'static str, u64)]) -> Result<()> {
    let mut out = Output::new();
    if args.json {
        let object: serde_json::Map<String, serde_json::Value> =
            all.iter().map(|&(k, v)| (k.to_owned(), v.into())).collect();
        out.line(serde_json::Value::Object(object).to_string().as_bytes())?;
    } else {
        for &(key, value) in all {
            let line = if key.starts_with("bytes_") || key == "memory_budget" {
                format!("{key:<14} {value} ({})", HumanBytes(value))
            } else {
                format!("{key:<14} {value}")
            };
            out.line(line.as_bytes())?;
        }
    }
    out.flush()
}

/// The fields of `stats` under their names, in declaration order.
///
/// The destructuring lists every field, so a field added to [`Stats`] fails to compile here
/// until it is given a key (and a line in [`KEYS_HELP`] and the README).
pub fn fields(stats: &Stats) -> [(&'static str, u64); 21] {
    let Stats {
        pushed,
        buffered,
        distinct,
        emitted,
        consumed,
        pending,
        unmerged,
        runs,
        flushes,
        merges,
        segments,
        torn_records,
        torn_bytes,
        bytes_a,
        bytes_z,
        bytes_r,
        bytes_f,
        bytes_meta,
        memory_budget,
        slots,
        seed,
    } = *stats;
    [
        ("pushed", pushed),
        ("buffered", buffered),
        ("distinct", distinct),
        ("emitted", emitted),
        ("consumed", consumed),
        ("pending", pending),
        ("unmerged", unmerged),
        ("runs", runs),
        ("flushes", flushes),
        ("merges", merges),
        ("segments", segments),
        ("torn_records", torn_records),
        ("torn_bytes", torn_bytes),
        ("bytes_a", bytes_a),
        ("bytes_z", bytes_z),
        ("bytes_r", bytes_r),
        ("bytes_f", bytes_f),
        ("bytes_meta", bytes_meta),
        ("memory_budget", memory_budget),
        ("slots", slots),
        ("seed", seed),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_documented_in_the_help() {
        for (key, _) in fields(&Stats::default()) {
            assert!(
                KEYS_HELP
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(key)),
                "{key} is not documented"
            );
        }
    }
}
