//! Known bugs that can be planted, to show that the test suites catch them.
//!
//! Only with the `planted-bugs` feature, and only when the environment variable
//! `CRIVELLO_PLANTED_BUG` names one of the bugs below; without the feature every check is a
//! constant `false`. `.ci/run` runs the suites once per bug and requires each run to fail.

/// A bug that can be planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// `no-dir-fsync`: the manifest's atomic replace skips the directory fsync after the
    /// rename, so a commit can be lost after it was acknowledged.
    NoDirFsync,
    /// `early-a-discard`: a merge removes the merged A generations before the switch.
    EarlyADiscard,
    /// `keep-f-tail`: recovery keeps F's uncommitted tail, and the redo appends after it.
    KeepFTail,
    /// `retry-fsync`: a failed fsync of A is retried, and the retry trusted.
    RetryFsync,
    /// `zero-record`: an all-zero frame header is accepted as the clean end of the log.
    ZeroRecord,
    /// `lease-before-sync`: the frontier's journal entries (a lease among them) are written
    /// but not synced before the caller sees their effect.
    LeaseBeforeSync,
    /// `forget-leases`: a reopened frontier takes every lease for expired.
    ForgetLeases,
    /// `cursor-before-queues`: the mover commits the sieve's cursor (F's read position, and
    /// the removal of the segments read) before the Q run and its journal entry are durable.
    CursorBeforeQueues,
    /// `commit-before-pushes`: a commit to the frontier's journal does not first sync the
    /// pushes made without a sync before it, so a done can be durable without them.
    CommitBeforePushes,
    /// `ids-before-commit`: the near-duplicate store pushes a batch's ids to its sieve of ids,
    /// durably, before the batch's documents are committed, so a crash between the two makes
    /// a re-run skip documents that were never stored.
    IdsBeforeCommit,
    /// `report-before-commit`: the near-duplicate store reports a batch's documents to
    /// `insert_with`'s closure before they are durable, so a crash then loses documents whose
    /// lines were printed.
    ReportBeforeCommit,
    /// `no-clean-end`: a clean close does not record where A and J end, so damage or a cut
    /// in their last frames after a clean close reads as a torn tail.
    NoCleanEnd,
    /// `handoff-unlogged`: `crivello serve` in a cluster answers items for an unreachable
    /// node as accepted without appending them to its hand-off log.
    HandoffUnlogged,
    /// `handoff-skip`: a hand-off log notes the record after the one delivered as delivered
    /// too.
    HandoffSkip,
    /// `handoff-no-sync`: a hand-off log's append returns before its sync, so an item
    /// acknowledged as accepted can be lost at a power cut.
    HandoffNoSync,
    /// `import-unknown`: an import queues its URLs without making them known to the sieve,
    /// so a URL seen before a move is new after it.
    ImportUnknown,
    /// `no-archive`: a compaction drops the records handed out instead of archiving them, so
    /// an export after it misses the queue's done URLs.
    NoArchive,
    /// `receipt-apart`: known updates and the receipt of their delivery are committed as two
    /// entries, so that a crash between them leaves updates applied whose delivery is sent,
    /// and applied, again.
    ReceiptApart,
    /// `receipt-ignored`: `crivello serve` applies a forwarded known item again although its
    /// receipt says that it was received.
    ReceiptIgnored,
    /// `lane-forgets-refusal`: `crivello serve` refuses a lane's numbered item of a key a
    /// move has not brought yet but applies the stream's later numbered items, whose receipt
    /// then covers the refused one.
    LaneForgetsRefusal,
    /// `parts-serve-twice`: a hand-out in parts does not pass over the queues its earlier
    /// parts served, so a queue may give more URLs than the call's bound per queue.
    PartsServeTwice,
    /// `spoiled-merge`: a compaction that ran beside a known update which skipped one of its
    /// records is committed anyway, so the record skipped is served again.
    SpoiledMerge,
    /// `front-served-early`: a hand-out whose empty front began a flush serves once one part
    /// of F is moved into the queues, passing over the queues of the rest.
    FrontServedEarly,
    /// `flush-under-lock`: a hand-out whose empty front flushes the sieve waits for the
    /// merge holding the frontier's lock, so every other call waits too.
    FlushUnderLock,
    /// `move-under-lock`: a hand-out that finds a move's run being written waits for it
    /// holding the frontier's lock, so every other call waits too.
    MoveUnderLock,
    /// `move-unsynced`: the mover's thread writes a move's Q run without syncing the
    /// directory, so the run's name may be lost while J names it.
    MoveUnsynced,
    /// `checkpoint-unsynced`: a checkpoint's switch renames its file into place without
    /// syncing it first, so a power loss may leave the name over bytes that never reached
    /// the disk.
    CheckpointUnsynced,
    /// `walk-trusts-guess`: an open that reads a run's groups in id order seats each group
    /// in the first queue whose id shares its high 32 bits, without checking the whole id.
    WalkTrustsGuess,
    /// `coding-unrecorded`: an open that chooses how the Q runs are written uses the choice
    /// without recording it in the manifest, so the next open writes as before.
    CodingUnrecorded,
    /// `scratch-shifted`: a merge writes each buffer of a run's new positions to its scratch
    /// file where the next buffer belongs, so the positions it reads back are not those it
    /// found.
    ScratchShifted,
    /// `ended-unjournaled`: an end of a lease whose fetch ended before the call is journaled
    /// as ending at the call (no entry 20), so a replay runs the queue's delay from later
    /// than the frontier did.
    EndedUnjournaled,
    /// `fetched-uncheckpointed`: a checkpoint leaves out which leases' fetches ended, so an
    /// open after it counts those leases as holding their queues again.
    FetchedUncheckpointed,
    /// `expiry-unjournaled`: a hand-out that returned expired leases journals no instant
    /// before its leases (no entry 22), so a replay returns them later than the call did.
    ExpiryUnjournaled,
    /// `done-expiry-unjournaled`: an end of leases that ends none of them (a `done` answered
    /// "not leased" for a lease found expired) journals nothing, so that a reopen with the
    /// clock set back holds the lease again.
    DoneExpiryUnjournaled,
    /// `clock-runs-back`: the frontier takes the clock's instant as it is, so a clock set
    /// back makes a hand-out lease until a deadline earlier than the instant at which a call
    /// before it found a lease expired.
    ClockRunsBack,
}

#[cfg(feature = "planted-bugs")]
impl Bug {
    /// Every bug, with the name `CRIVELLO_PLANTED_BUG` takes.
    pub const ALL: [(Bug, &'static str); 35] = [
        (Bug::NoDirFsync, "no-dir-fsync"),
        (Bug::EarlyADiscard, "early-a-discard"),
        (Bug::KeepFTail, "keep-f-tail"),
        (Bug::RetryFsync, "retry-fsync"),
        (Bug::ZeroRecord, "zero-record"),
        (Bug::LeaseBeforeSync, "lease-before-sync"),
        (Bug::ForgetLeases, "forget-leases"),
        (Bug::CursorBeforeQueues, "cursor-before-queues"),
        (Bug::CommitBeforePushes, "commit-before-pushes"),
        (Bug::IdsBeforeCommit, "ids-before-commit"),
        (Bug::ReportBeforeCommit, "report-before-commit"),
        (Bug::NoCleanEnd, "no-clean-end"),
        (Bug::HandoffUnlogged, "handoff-unlogged"),
        (Bug::HandoffSkip, "handoff-skip"),
        (Bug::HandoffNoSync, "handoff-no-sync"),
        (Bug::ImportUnknown, "import-unknown"),
        (Bug::NoArchive, "no-archive"),
        (Bug::ReceiptApart, "receipt-apart"),
        (Bug::ReceiptIgnored, "receipt-ignored"),
        (Bug::LaneForgetsRefusal, "lane-forgets-refusal"),
        (Bug::PartsServeTwice, "parts-serve-twice"),
        (Bug::SpoiledMerge, "spoiled-merge"),
        (Bug::FrontServedEarly, "front-served-early"),
        (Bug::FlushUnderLock, "flush-under-lock"),
        (Bug::MoveUnderLock, "move-under-lock"),
        (Bug::MoveUnsynced, "move-unsynced"),
        (Bug::CheckpointUnsynced, "checkpoint-unsynced"),
        (Bug::WalkTrustsGuess, "walk-trusts-guess"),
        (Bug::CodingUnrecorded, "coding-unrecorded"),
        (Bug::ScratchShifted, "scratch-shifted"),
        (Bug::EndedUnjournaled, "ended-unjournaled"),
        (Bug::FetchedUncheckpointed, "fetched-uncheckpointed"),
        (Bug::ExpiryUnjournaled, "expiry-unjournaled"),
        (Bug::DoneExpiryUnjournaled, "done-expiry-unjournaled"),
        (Bug::ClockRunsBack, "clock-runs-back"),
    ];
}

/// Whether `bug` is planted in this process.
#[cfg(feature = "planted-bugs")]
pub fn active(bug: Bug) -> bool {
    static CHOSEN: std::sync::OnceLock<Option<Bug>> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let name = std::env::var("CRIVELLO_PLANTED_BUG").ok()?;
        let found = Bug::ALL.iter().find(|(_, n)| *n == name).map(|(b, _)| *b);
        assert!(found.is_some(), "CRIVELLO_PLANTED_BUG={name}: no such bug");
        found
    }) == Some(bug)
}

/// Whether `bug` is planted in this process: never, without the `planted-bugs` feature.
#[cfg(not(feature = "planted-bugs"))]
#[inline(always)]
pub fn active(_bug: Bug) -> bool {
    false
}
