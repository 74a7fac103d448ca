//! `crivello check DIR`: verify every checksum of a sieve, without changing it; exit 3 on
//! any damage.
//!
//! The library's verifier ([`crivello::check`]) reads the manifest, the cursor, every block
//! of every Z segment, every pair of every run waiting for a merge, every frame of F (the
//! file that holds the cursor from its start, and those after it) and the live write-ahead
//! log.
//! A torn tail of the write-ahead log is not damage: it holds pushes that were never
//! acknowledged before a crash, and the next open drops them; `check` notes it.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::progress::Progress;
use super::stream::Output;
use super::{require_sieve, Common, Damage};

/// The arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The sieve's directory (it must exist).
    pub dir: PathBuf,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Bytes of the mark a clean close leaves after its last frame (a frame header and 4 bytes).
const CLOSE_MARK: u64 = 32;

/// Runs `check`.
pub fn run(args: CheckArgs) -> Result<()> {
    let damaged = |source: anyhow::Error| {
        anyhow::Error::new(Damage {
            dir: args.dir.clone(),
            source,
        })
    };
    if args.dir.join(crivello::neardup::MANIFEST_FILE).is_file() {
        let report = match crivello::neardup::check(&args.dir) {
            Ok(report) => report,
            Err(e) if e.is_corruption() => return Err(damaged(e.into())),
            Err(e) => return Err(e.into()),
        };
        let text = format!(
            "ok: {}: near-duplicate store: {} document{}, {} segment{}, {} entr{} verified, \
             and its sieve of ids\n",
            args.dir.display(),
            report.docs,
            if report.docs == 1 { "" } else { "s" },
            report.segments,
            if report.segments == 1 { "" } else { "s" },
            report.entries,
            if report.entries == 1 { "y" } else { "ies" },
        );
        let mut out = Output::new();
        out.text(&text)?;
        return out.flush();
    }
    if let Err(e) = require_sieve(&args.dir) {
        // A store whose manifest was lost: damage found, as any other.
        let corrupt = e.chain().any(|c| {
            c.downcast_ref::<crivello::Error>()
                .is_some_and(crivello::Error::is_corruption)
        });
        return Err(if corrupt { damaged(e) } else { e });
    }
    let progress = Progress::new("check", args.common.quiet);
    progress.waiting("check");
    // The library's verifier: it takes the lock and writes nothing.
    let verified = super::waiting_for_lock(|| crivello::check(&args.dir));
    progress.finish();
    let report = match verified {
        Ok(report) => report,
        Err(e) if e.is_corruption() => return Err(damaged(e.into())),
        Err(e) => return Err(e.into()),
    };
    // Files this user may not read: nothing is known of their bytes, and the store is not
    // called damaged for it (exit 1, as `stats` and the writers answer).
    if !report.is_sound() && report.damage.iter().all(not_permitted) {
        let mut all = report.damage.into_iter();
        let first = all.next().expect("not sound");
        let others: Vec<String> = all.map(|e| e.to_string()).collect();
        return Err(match others.is_empty() {
            true => first.into(),
            false => anyhow::Error::new(first).context(format!(
                "{} files this user may not read; the others: {}",
                others.len() + 1,
                others.join("; ")
            )),
        });
    }
    if !report.is_sound() {
        let all: Vec<String> = report.damage.iter().map(ToString::to_string).collect();
        let source = match report.damage.len() {
            1 => anyhow::anyhow!("{}", all[0]),
            n => anyhow::anyhow!("{n} problems: {}", all.join("; ")),
        };
        return Err(damaged(source));
    }
    let mut text = format!(
        "ok: {}: {} files verified: {} signatures in Z, {} frontier URLs pending, {} URLs in \
         runs waiting for a merge, {} URLs in the write-ahead log\n",
        args.dir.display(),
        report.files,
        report.signatures,
        report.pending,
        report.unmerged,
        report.buffered
    );
    for (file, bytes) in &report.torn_tails {
        // A's records are pushes; J's, the frontier's changes (leases, dones, ...).
        let what = if file.starts_with("j-") {
            "changes of the queues"
        } else {
            "pushes"
        };
        // A clean close leaves a tail mark of 32 bytes at its end: more than that after it
        // was written by a later process, which did not close.
        if report.torn_after_clean_end.contains(file) && *bytes > CLOSE_MARK {
            text.push_str(&format!(
                "note: {file} ends in {bytes} bytes that are not whole frames after where the \
                 last clean close left it: most likely frames a later process wrote and never \
                 closed (a crash tore the last), or, in a reused file, an older generation's \
                 bytes; if instead they are damaged frames that process had acknowledged, \
                 their {what} are lost. The next open drops them\n"
            ));
        } else if report.torn_after_clean_end.contains(file) {
            text.push_str(&format!(
                "note: {file} ends in {bytes} bytes that are not a whole frame, right after \
                 where the last clean close left it: a write begun later and never \
                 acknowledged (a crash), or damage to bytes that hold no push; every \
                 acknowledged push is before them, and the next open drops them\n"
            ));
        } else {
            text.push_str(&format!(
                "note: {file} ends in a torn tail of {bytes} bytes: most likely {what} \
                 being written at a crash and never acknowledged; damage to the last \
                 commit before the crash would look the same, and its {what} would be lost. \
                 The next open drops them\n"
            ));
        }
    }
    let mut out = Output::new();
    out.text(&text)?;
    out.flush()
}

/// Whether `e` is the refusal to read a file (EACCES, EPERM), not a finding of its bytes.
fn not_permitted(e: &crivello::Error) -> bool {
    matches!(e, crivello::Error::Io { source, .. }
        if source.kind() == std::io::ErrorKind::PermissionDenied)
}
