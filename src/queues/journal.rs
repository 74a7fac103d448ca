//! J, the frontier's journal: every change of the queues' state, one record each, in
//! generations of A's layout (`j-<gen>.log`: header, frames, tail marks; the torn-tail rule
//! of A applies), made durable by the fsync that acknowledges the change.
//!
//! ```text
//! entry := kind u8 | fields
//!   1 moved     run u64 (0: none) | f_segment u64 | f_offset u64 | f_skip u32 | f_consumed u64
//!               | next_seq u64          the mover installed a Q run: F read up to the
//!                                       position, records numbered below next_seq queued
//!   2 lease     seq u64 | token u64 | deadline u64 | record      record `seq` handed out
//!   3 done      seq u64 | at u64 | took u64                      its fetch ended at `at`
//!   4 retry     seq u64 | at u64 | took u64                      back in its queue
//!   5 policy    crawl u32 | delay u64 | ratio u32 | per_queue u32 | limit u64 | key flag u8
//!               | key                   (no key: the default; ratio in millionths, 0: none;
//!                                       limit 0: none)
//!   6 pause     on u8
//!   7 crawl     id u32 | name                                    a crawl's id
//!   8 compacted removed u32 | removed x run u64 | added u64 (0: none) | queues u32
//!               | queues x (queue u64 | waiting u64)   the records each queue has waiting
//!                                       in the runs left (replays skip the removed runs)
//!   9 block     crawl u32 | until u64 | key                      no hand-out before `until`
//!  10 refetch   seq u64 | at u64 | took u64 | when u64           done, served again at `when`
//!  11 delete queue  crawl u32 | key       its records, leases, counts, policy and block go
//!  12 delete crawl  id u32                each of its queues is deleted, and its name is free
//!                                         (but DEFAULT's): a new push makes it a new crawl
//!  13 known     seq u64 | at u64 | when u64 | fresh u8 | record
//!               a URL the crawler says it fetched (url-frontier's known item): record `seq`
//!               (leased, returned, to fetch again, or waiting in the Q runs: then skipped
//!               there) is done (`when` 0) or to fetch again from `when`, as `record` (its
//!               metadata replaced); fresh 1: a done URL to fetch again, `seq` a new seq
//!  14 archived  run u64                 the compaction that follows keeps the records it takes
//!                                       out of the runs in Q run `run`, read by exports only
//!  15 imported  transfer_len u32 | transfer | run u64 (0: none) | next_seq u64
//!               | queues u32 x (crawl u32 | key_len u32 | key | policy flag u8
//!                 | policy (if the flag is 1: delay u64 | ratio u32 | per_queue u32 | limit u64)
//!                 | block u64 | next_seq u64 | waiting u64 | completed u64 | burst u64
//!                 | due u64 | leases u32 x (seq u64 | token u64 | deadline u64 | len u32 | record)
//!                 | returned u32 x (seq u64 | len u32 | record)
//!                 | refetch u32 x (when u64 | seq u64 | len u32 | record))
//!               queues of another frontier, each replacing the queue of its crawl and key:
//!               their records in Q run `run`, numbered below next_seq; each queue is
//!               received once per transfer (the transfer keeps the queue's receipt)
//!  16 released  crawl u32 | key        the queue moved to another frontier: emptied as by a
//!                                      delete, and left out of exports until it takes URLs
//!  17 end transfer  name              the transfer's receipts are forgotten
//!  18 receipted  receipts u32 x (len u32 | from | seq u64)
//!               | known u32 x (seq u64 | at u64 | when u64 | fresh u8 | len u32 | record)
//!               known entries (as 13) applied in order, then each sender `from` noted as
//!               received up to `seq`: one entry, so that a delivery counts whole or not at all
//!  19 policy   as 5, with the instant it was set after crawl: crawl u32 | at u64 | ...
//!  20 ended     kind u8 (3, 4 or 10) | that kind's fields | ended u64
//!               an entry 3, 4 or 10 whose fetch ended at `ended`, before `at` (the caller
//!               said when): the queue's politeness runs from `ended`; the leases expired by
//!               `at` are returned first, as for the entry alone
//!  21 fetched   seq u64 | at u64 | took u64 | ended u64
//!               the fetch of the lease of `seq` ended at `ended` (at or before `at`), after
//!               `took`: the queue's politeness runs from `ended` and the lease no longer
//!               holds the queue's place; it stays until a later end or its deadline, neither
//!               of which runs the politeness again (the leases expired by `at` are returned
//!               first)
//!  22 expired   at u64                  the leases whose deadline passed by `at` are returned
//!                                       to their queues, in deadline order: a hand-out's
//!                                       instant, before its lease entries, when a call
//!                                       or the open returned leases since the last
//!                                       entry 22; or alone, under that condition, by
//!                                       a call that ends leases and ends none
//! ```
//!
//! Times are milliseconds since the Unix epoch; `took` is the fetch's duration in
//! milliseconds. A record is `src/record.rs`'s.

use crate::error::Corruption;
use crate::format::PutLe;
use crate::frontier::Position;

/// One change of the frontier's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry<'a> {
    /// The mover queued F's records up to `f` (numbered below `next_seq`) in Q run `run`.
    Moved {
        run: Option<u64>,
        f: Position,
        next_seq: u64,
    },
    /// Record `seq` leased until `deadline`, as lease `token`.
    Lease {
        seq: u64,
        token: u64,
        deadline: u64,
        record: &'a [u8],
    },
    /// The lease of `seq` ended at `at`: done for good; its fetch ended at `ended` (at or
    /// before `at`: entry 20 when before).
    Done {
        seq: u64,
        at: u64,
        took: u64,
        ended: u64,
    },
    /// The lease of `seq` ended at `at`: back in its queue, in its place; its fetch ended at
    /// `ended`.
    Retry {
        seq: u64,
        at: u64,
        took: u64,
        ended: u64,
    },
    /// The policy of a queue of `crawl` (`key`), or the default one; set at `at` (entry 19),
    /// when the leases expired by then are returned first, under the policy before it (None:
    /// entry 5, of a build before, which returned them at the next entry with an instant).
    Policy {
        crawl: u32,
        key: Option<&'a [u8]>,
        policy: super::Policy,
        at: Option<u64>,
    },
    /// Queue `key` of `crawl` gets nothing before `until` (0: unblocked).
    Block {
        crawl: u32,
        key: &'a [u8],
        until: u64,
    },
    /// The lease of `seq` ended at `at`: done, and served again once `when` has passed; its
    /// fetch ended at `ended`.
    Refetch {
        seq: u64,
        at: u64,
        took: u64,
        when: u64,
        ended: u64,
    },
    /// The fetch of the lease of `seq` ended at `ended` (at or before `at`), after `took`;
    /// the lease stays, no longer holding its queue's place.
    Fetched {
        seq: u64,
        at: u64,
        took: u64,
        ended: u64,
    },
    /// The leases whose deadline passed by `at` returned to their queues (a hand-out's
    /// instant, before its leases).
    Expired { at: u64 },
    /// The frontier paused or resumed.
    Pause(bool),
    /// The id of a crawl's name.
    Crawl { id: u32, name: &'a [u8] },
    /// Queue `key` of `crawl` deleted.
    DeleteQueue { crawl: u32, key: &'a [u8] },
    /// Crawl `id` deleted.
    DeleteCrawl { id: u32 },
    /// A known URL: record `seq` is done (`when` 0) or to fetch again from `when`, as
    /// `record`, whatever it was (leased, returned, to fetch again, or waiting in the Q runs);
    /// `fresh`: a done URL to fetch again, under the new seq `seq`.
    Known {
        seq: u64,
        at: u64,
        when: u64,
        fresh: bool,
        record: &'a [u8],
    },
    /// Q runs merged: `removed` replaced by `added`; `waiting`: each queue's records waiting
    /// in the runs then (the others have none).
    Compacted {
        removed: Vec<u64>,
        added: Option<u64>,
        waiting: Vec<(u64, u64)>,
    },
    /// The compaction that follows keeps the records it takes out of the runs in Q run `run`.
    Archived { run: u64 },
    /// Queue `key` of `crawl` moved to another frontier.
    Released { crawl: u32, key: &'a [u8] },
    /// The receipts of transfer `name` are forgotten.
    EndTransfer { name: &'a [u8] },
    /// Known entries (each an [`Entry::Known`]) applied in order, then each sender's
    /// deliveries noted as received up to its sequence number.
    Receipted {
        receipts: Vec<(&'a [u8], u64)>,
        known: Vec<Entry<'a>>,
    },
    /// Queues imported from another frontier as transfer `transfer`: their records are in Q
    /// run `run`, numbered below `next_seq`.
    Imported {
        transfer: &'a [u8],
        run: Option<u64>,
        next_seq: u64,
        queues: Vec<ImportedQueue<'a>>,
    },
}

/// A queue's state as an import sets it: the queue of `key` in `crawl` is replaced by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImportedQueue<'a> {
    pub crawl: u32,
    pub key: &'a [u8],
    /// Its own policy, if it has one.
    pub policy: Option<super::Policy>,
    /// Blocked until this instant (0: not blocked).
    pub block: u64,
    /// Its records in the import's run below this seq were handed out.
    pub next_seq: u64,
    pub waiting: u64,
    pub completed: u64,
    pub burst: u64,
    pub due: u64,
    /// (seq, token, deadline, record).
    pub leases: Vec<(u64, u64, u64, &'a [u8])>,
    /// (seq, record).
    pub returned: Vec<(u64, &'a [u8])>,
    /// (when, seq, record).
    pub refetch: Vec<(u64, u64, &'a [u8])>,
}

impl Entry<'_> {
    /// Appends the entry's bytes to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        if crate::planted::active(crate::planted::Bug::EndedUnjournaled) {
            // The planted bug journals an earlier end as one at the call.
            let mut plain = self.clone();
            if let Entry::Done { at, ended, .. }
            | Entry::Retry { at, ended, .. }
            | Entry::Refetch { at, ended, .. } = &mut plain
            {
                if ended != at {
                    *ended = *at;
                    return plain.encode(out);
                }
            }
        }
        match self {
            Entry::Moved { run, f, next_seq } => {
                out.push(1);
                out.put_u64(run.unwrap_or(0));
                out.put_u64(f.segment);
                out.put_u64(f.offset);
                out.put_u32(f.skip);
                out.put_u64(f.consumed);
                out.put_u64(*next_seq);
            }
            Entry::Lease {
                seq,
                token,
                deadline,
                record,
            } => {
                out.push(2);
                out.put_u64(*seq);
                out.put_u64(*token);
                out.put_u64(*deadline);
                out.extend_from_slice(record);
            }
            Entry::Done {
                seq,
                at,
                took,
                ended,
            }
            | Entry::Retry {
                seq,
                at,
                took,
                ended,
            } => {
                if ended != at {
                    out.push(20);
                }
                out.push(if matches!(self, Entry::Done { .. }) {
                    3
                } else {
                    4
                });
                out.put_u64(*seq);
                out.put_u64(*at);
                out.put_u64(*took);
                if ended != at {
                    out.put_u64(*ended);
                }
            }
            Entry::Policy {
                crawl,
                key,
                policy,
                at,
            } => {
                match at {
                    None => out.push(5),
                    Some(_) => out.push(19),
                }
                out.put_u32(*crawl);
                if let Some(at) = at {
                    out.put_u64(*at);
                }
                out.put_u64(policy.delay_ms);
                out.put_u32(policy.ratio_ppm);
                out.put_u32(policy.per_queue);
                out.put_u64(policy.limit);
                if let Some(key) = key {
                    out.push(1);
                    out.extend_from_slice(key);
                } else {
                    out.push(0);
                }
            }
            Entry::Pause(on) => {
                out.push(6);
                out.push(u8::from(*on));
            }
            Entry::Crawl { id, name } => {
                out.push(7);
                out.put_u32(*id);
                out.extend_from_slice(name);
            }
            Entry::DeleteQueue { crawl, key } => {
                out.push(11);
                out.put_u32(*crawl);
                out.extend_from_slice(key);
            }
            Entry::DeleteCrawl { id } => {
                out.push(12);
                out.put_u32(*id);
            }
            Entry::Known {
                seq,
                at,
                when,
                fresh,
                record,
            } => {
                out.push(13);
                out.put_u64(*seq);
                out.put_u64(*at);
                out.put_u64(*when);
                out.push(u8::from(*fresh));
                out.extend_from_slice(record);
            }
            Entry::Fetched {
                seq,
                at,
                took,
                ended,
            } => {
                out.push(21);
                out.put_u64(*seq);
                out.put_u64(*at);
                out.put_u64(*took);
                out.put_u64(*ended);
            }
            Entry::Expired { at } => {
                out.push(22);
                out.put_u64(*at);
            }
            Entry::Block { crawl, key, until } => {
                out.push(9);
                out.put_u32(*crawl);
                out.put_u64(*until);
                out.extend_from_slice(key);
            }
            Entry::Refetch {
                seq,
                at,
                took,
                when,
                ended,
            } => {
                if ended != at {
                    out.push(20);
                }
                out.push(10);
                out.put_u64(*seq);
                out.put_u64(*at);
                out.put_u64(*took);
                out.put_u64(*when);
                if ended != at {
                    out.put_u64(*ended);
                }
            }
            Entry::Compacted {
                removed,
                added,
                waiting,
            } => {
                out.push(8);
                out.put_u32(removed.len() as u32);
                for r in removed {
                    out.put_u64(*r);
                }
                out.put_u64(added.unwrap_or(0));
                out.put_u32(waiting.len() as u32);
                for (q, n) in waiting {
                    out.put_u64(*q);
                    out.put_u64(*n);
                }
            }
            Entry::Archived { run } => {
                out.push(14);
                out.put_u64(*run);
            }
            Entry::Released { crawl, key } => {
                out.push(16);
                out.put_u32(*crawl);
                out.extend_from_slice(key);
            }
            Entry::EndTransfer { name } => {
                out.push(17);
                out.extend_from_slice(name);
            }
            Entry::Receipted { receipts, known } => {
                out.push(18);
                out.put_u32(receipts.len() as u32);
                for (from, seq) in receipts {
                    put_bytes(out, from);
                    out.put_u64(*seq);
                }
                out.put_u32(known.len() as u32);
                for k in known {
                    if let Entry::Known {
                        seq,
                        at,
                        when,
                        fresh,
                        record,
                    } = k
                    {
                        out.put_u64(*seq);
                        out.put_u64(*at);
                        out.put_u64(*when);
                        out.push(u8::from(*fresh));
                        put_bytes(out, record);
                    } else {
                        debug_assert!(false, "a receipted entry holds known entries only");
                    }
                }
            }
            Entry::Imported {
                transfer,
                run,
                next_seq,
                queues,
            } => {
                out.push(15);
                put_bytes(out, transfer);
                out.put_u64(run.unwrap_or(0));
                out.put_u64(*next_seq);
                out.put_u32(queues.len() as u32);
                for q in queues {
                    out.put_u32(q.crawl);
                    put_bytes(out, q.key);
                    match &q.policy {
                        None => out.push(0),
                        Some(p) => {
                            out.push(1);
                            put_policy(out, p);
                        }
                    }
                    for v in [q.block, q.next_seq, q.waiting, q.completed, q.burst, q.due] {
                        out.put_u64(v);
                    }
                    out.put_u32(q.leases.len() as u32);
                    for (seq, token, deadline, record) in &q.leases {
                        out.put_u64(*seq);
                        out.put_u64(*token);
                        out.put_u64(*deadline);
                        put_bytes(out, record);
                    }
                    out.put_u32(q.returned.len() as u32);
                    for (seq, record) in &q.returned {
                        out.put_u64(*seq);
                        put_bytes(out, record);
                    }
                    out.put_u32(q.refetch.len() as u32);
                    for (when, seq, record) in &q.refetch {
                        out.put_u64(*when);
                        out.put_u64(*seq);
                        put_bytes(out, record);
                    }
                }
            }
        }
    }

    /// Decodes an entry; what a well-formed journal never holds is corruption.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Entry<'_>, Corruption> {
        let mut r = Fields(bytes);
        let mut kind = r.u8()?;
        // Entry 20: an end of a lease whose fetch ended earlier, its instant after the fields.
        let earlier = kind == 20;
        if earlier {
            kind = r.u8()?;
            if !matches!(kind, 3 | 4 | 10) {
                return Err(invalid("kind of an earlier end", "3, 4 or 10", kind.into()));
            }
        }
        let mut entry = match kind {
            1 => {
                let run = r.counter("run of a move")?;
                let f = Position {
                    segment: r.u64()?,
                    offset: r.u64()?,
                    skip: r.u32()?,
                    consumed: r.u64()?,
                };
                Entry::Moved {
                    run: (run != 0).then_some(run),
                    f,
                    next_seq: r.counter("next seq of a move")?,
                }
            }
            2 => {
                let seq = r.counter("seq of a lease")?;
                let token = r.counter("token of a lease")?;
                let deadline = r.u64()?;
                let record = r.rest();
                crate::record::decode(record)?;
                Entry::Lease {
                    seq,
                    token,
                    deadline,
                    record,
                }
            }
            k @ (3 | 4) => {
                let (seq, at, took) = (r.counter("seq of an ack")?, r.u64()?, r.u64()?);
                let ended = at;
                if k == 3 {
                    Entry::Done {
                        seq,
                        at,
                        took,
                        ended,
                    }
                } else {
                    Entry::Retry {
                        seq,
                        at,
                        took,
                        ended,
                    }
                }
            }
            k @ (5 | 19) => {
                let crawl = r.u32()?;
                let at = if k == 19 { Some(r.u64()?) } else { None };
                let policy = r.policy()?;
                let key = match r.u8()? {
                    0 => None,
                    1 => Some(r.rest()),
                    found => return Err(invalid("policy's key flag", "0 or 1", found.into())),
                };
                // The default has every field (a queue's own policy may leave some to it).
                if key.is_none() && (policy.per_queue == 0 || policy.ratio_ppm > 1_000_000) {
                    return Err(invalid("default policy's per_queue or ratio", "a value", 0));
                }
                Entry::Policy {
                    crawl,
                    key,
                    policy,
                    at,
                }
            }
            9 => Entry::Block {
                crawl: r.u32()?,
                until: r.u64()?,
                key: r.rest(),
            },
            10 => {
                let (seq, at) = (r.counter("seq of a refetch")?, r.u64()?);
                Entry::Refetch {
                    seq,
                    at,
                    took: r.u64()?,
                    when: r.u64()?,
                    ended: at,
                }
            }
            21 => {
                let (seq, at) = (r.counter("seq of a fetch's end")?, r.u64()?);
                let took = r.u64()?;
                let ended = r.u64()?;
                if ended > at {
                    return Err(invalid(
                        "end of a fetch",
                        "an instant not after the entry's",
                        ended,
                    ));
                }
                Entry::Fetched {
                    seq,
                    at,
                    took,
                    ended,
                }
            }
            22 => Entry::Expired { at: r.u64()? },
            6 => match r.u8()? {
                b @ (0 | 1) => Entry::Pause(b == 1),
                found => return Err(invalid("pause flag", "0 or 1", found.into())),
            },
            7 => Entry::Crawl {
                id: r.u32()?,
                name: r.rest(),
            },
            11 => Entry::DeleteQueue {
                crawl: r.u32()?,
                key: r.rest(),
            },
            12 => Entry::DeleteCrawl { id: r.u32()? },
            13 => r.known(false)?,
            8 => {
                let n = r.u32()?;
                if n as usize > r.0.len() / 8 {
                    return Err(invalid(
                        "runs removed",
                        "the count the entry holds",
                        n.into(),
                    ));
                }
                let mut removed = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    removed.push(r.counter("run removed")?);
                }
                let added = r.counter("run added")?;
                let n = r.u32()?;
                if n as usize > r.0.len() / 16 {
                    return Err(invalid(
                        "queues of a compaction",
                        "the count the entry holds",
                        n.into(),
                    ));
                }
                let mut waiting = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    waiting.push((r.u64()?, r.counter("records waiting in a queue")?));
                }
                Entry::Compacted {
                    removed,
                    added: (added != 0).then_some(added),
                    waiting,
                }
            }
            14 => Entry::Archived {
                run: r.counter("run of an archive")?,
            },
            16 => Entry::Released {
                crawl: r.u32()?,
                key: r.rest(),
            },
            17 => Entry::EndTransfer { name: r.rest() },
            18 => {
                // A receipt takes at least 12 bytes, a known entry at least 29.
                let n = r.count(12, "receipts")?;
                let mut receipts = Vec::with_capacity(n);
                for _ in 0..n {
                    let from = r.bytes()?;
                    receipts.push((from, r.u64()?));
                }
                let n = r.count(29, "known entries of a receipted entry")?;
                let mut known = Vec::with_capacity(n);
                for _ in 0..n {
                    known.push(r.known(true)?);
                }
                Entry::Receipted { receipts, known }
            }
            15 => {
                let transfer = r.bytes()?;
                let run = r.counter("run of an import")?;
                let next_seq = r.counter("next seq of an import")?;
                // A queue takes at least 69 bytes.
                let n = r.count(69, "queues of an import")?;
                let mut queues = Vec::with_capacity(n);
                for _ in 0..n {
                    let crawl = r.u32()?;
                    let key = r.bytes()?;
                    let policy = match r.u8()? {
                        0 => None,
                        1 => Some(r.policy()?),
                        found => {
                            return Err(invalid("import's policy flag", "0 or 1", found.into()))
                        }
                    };
                    let mut q = ImportedQueue {
                        crawl,
                        key,
                        policy,
                        block: r.u64()?,
                        next_seq: r.counter("next seq of an imported queue")?,
                        waiting: r.counter("records waiting in an imported queue")?,
                        completed: r.u64()?,
                        burst: r.u64()?,
                        due: r.u64()?,
                        leases: Vec::new(),
                        returned: Vec::new(),
                        refetch: Vec::new(),
                    };
                    for _ in 0..r.count(28, "leases of an import")? {
                        let seq = r.counter("seq of an imported lease")?;
                        let token = r.counter("token of an imported lease")?;
                        let deadline = r.u64()?;
                        q.leases.push((seq, token, deadline, r.record()?));
                    }
                    for _ in 0..r.count(12, "returned records of an import")? {
                        let seq = r.counter("seq of an imported record")?;
                        q.returned.push((seq, r.record()?));
                    }
                    for _ in 0..r.count(20, "records to fetch again of an import")? {
                        let when = r.u64()?;
                        let seq = r.counter("seq of an imported record")?;
                        q.refetch.push((when, seq, r.record()?));
                    }
                    queues.push(q);
                }
                Entry::Imported {
                    transfer,
                    run: (run != 0).then_some(run),
                    next_seq,
                    queues,
                }
            }
            kind => return Err(invalid("journal entry kind", "1 to 22", kind.into())),
        };
        if earlier {
            let instant = r.u64()?;
            let (Entry::Done { at, ended, .. }
            | Entry::Retry { at, ended, .. }
            | Entry::Refetch { at, ended, .. }) = &mut entry
            else {
                return Err(invalid("kind of an earlier end", "3, 4 or 10", kind.into()));
            };
            if instant >= *at {
                return Err(invalid(
                    "end of an earlier fetch",
                    "an instant before the entry's",
                    instant,
                ));
            }
            *ended = instant;
        }
        if !r.0.is_empty() {
            return Err(invalid(
                "bytes after a journal entry",
                "none",
                r.0.len() as u64,
            ));
        }
        Ok(entry)
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.put_u32(bytes.len() as u32);
    out.extend_from_slice(bytes);
}

fn put_policy(out: &mut Vec<u8>, p: &super::Policy) {
    out.put_u64(p.delay_ms);
    out.put_u32(p.ratio_ppm);
    out.put_u32(p.per_queue);
    out.put_u64(p.limit);
}

fn invalid(field: &'static str, expected: &'static str, found: u64) -> Corruption {
    Corruption::Invalid {
        field,
        expected,
        found,
    }
}

/// Reads little-endian fields.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corruption> {
        if self.0.len() < n {
            return Err(Corruption::Truncated {
                needed: n as u64,
                available: self.0.len() as u64,
            });
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Corruption> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Corruption> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, Corruption> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A seq, a token, a run's id, a count of records waiting, or a counter of them: below
    /// [`super::COUNTER_LIMIT`]. (A receipt's seq is its sender's, not bounded.)
    fn counter(&mut self, field: &'static str) -> Result<u64, Corruption> {
        let found = self.u64()?;
        if found >= super::COUNTER_LIMIT {
            return Err(Corruption::OutOfRange {
                field,
                found,
                limit: super::COUNTER_LIMIT,
            });
        }
        Ok(found)
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
    /// A field of `len u32 | bytes`.
    fn bytes(&mut self) -> Result<&'a [u8], Corruption> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A record of `len u32 | record`, decoded to check it.
    fn record(&mut self) -> Result<&'a [u8], Corruption> {
        let record = self.bytes()?;
        crate::record::decode(record)?;
        Ok(record)
    }
    /// A known entry's fields (kind 13): its record the rest of the bytes, or (`sized`) a
    /// `len u32 | record` field.
    fn known(&mut self, sized: bool) -> Result<Entry<'a>, Corruption> {
        let (seq, at, when) = (
            self.counter("seq of a known entry")?,
            self.u64()?,
            self.u64()?,
        );
        let fresh = match self.u8()? {
            b @ (0 | 1) => b == 1,
            found => return Err(invalid("known entry's fresh flag", "0 or 1", found.into())),
        };
        if fresh && when == 0 {
            return Err(invalid("known entry's instant", "not 0 when fresh", 0));
        }
        let record = if sized { self.bytes()? } else { self.rest() };
        crate::record::decode(record)?;
        Ok(Entry::Known {
            seq,
            at,
            when,
            fresh,
            record,
        })
    }
    /// A count of items of at least `size` bytes each, which the bytes left must hold.
    fn count(&mut self, size: usize, field: &'static str) -> Result<usize, Corruption> {
        let n = self.u32()?;
        if n as usize > self.0.len() / size {
            return Err(invalid(field, "the count the entry holds", n.into()));
        }
        Ok(n as usize)
    }
    /// A policy: delay u64 | ratio u32 | per_queue u32 | limit u64.
    fn policy(&mut self) -> Result<super::Policy, Corruption> {
        let policy = super::Policy {
            delay_ms: self.u64()?,
            ratio_ppm: self.u32()?,
            per_queue: self.u32()?,
            limit: self.u64()?,
        };
        // per_queue 0, ratio u32::MAX: fields a queue's own policy follows the default in
        // (version 16 on).
        if policy.ratio_ppm > 1_000_000 && policy.ratio_ppm != u32::MAX {
            return Err(invalid(
                "policy's ratio",
                "at most 1,000,000 millionths (or 4294967295: the default's)",
                policy.ratio_ppm.into(),
            ));
        }
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_their_truncations_are_refused() {
        let entries = [
            Entry::Moved {
                run: Some(5),
                f: Position {
                    segment: 1,
                    offset: 200,
                    skip: 3,
                    consumed: 40,
                },
                next_seq: 41,
            },
            Entry::Moved {
                run: None,
                f: Position::default(),
                next_seq: 0,
            },
            Entry::Lease {
                seq: 9,
                token: 4,
                deadline: 1_000,
                record: b"\0http://a/",
            },
            Entry::Done {
                seq: 9,
                at: 5,
                took: 3,
                ended: 5,
            },
            Entry::Retry {
                seq: 9,
                at: 5,
                took: 3,
                ended: 5,
            },
            Entry::Done {
                seq: 9,
                at: 5,
                took: 3,
                ended: 2,
            },
            Entry::Retry {
                seq: 9,
                at: 5,
                took: 3,
                ended: 0,
            },
            Entry::Policy {
                crawl: 2,
                key: Some(b"a.com"),
                policy: crate::queues::Policy {
                    delay_ms: 250,
                    ratio_ppm: 0,
                    per_queue: 2,
                    limit: 7,
                },
                at: Some(1_234),
            },
            Entry::Policy {
                crawl: 0,
                key: None,
                policy: crate::queues::Policy::default(),
                at: Some(5),
            },
            Entry::Policy {
                crawl: 2,
                key: Some(b"b.com"),
                policy: crate::queues::Policy::default(),
                at: None,
            },
            Entry::Policy {
                crawl: 0,
                key: None,
                policy: crate::queues::Policy::default(),
                at: None,
            },
            Entry::Block {
                crawl: 1,
                key: b"h",
                until: 99,
            },
            Entry::Refetch {
                seq: 4,
                at: 5,
                took: 6,
                when: 7,
                ended: 5,
            },
            Entry::Refetch {
                seq: 4,
                at: 5,
                took: 6,
                when: 7,
                ended: 4,
            },
            Entry::Fetched {
                seq: 4,
                at: 5,
                took: 6,
                ended: 5,
            },
            Entry::Fetched {
                seq: 4,
                at: 5,
                took: 0,
                ended: 0,
            },
            Entry::Expired { at: 77 },
            Entry::Pause(true),
            Entry::Crawl {
                id: 3,
                name: b"BESPOKE",
            },
            Entry::Compacted {
                removed: vec![1, 2],
                added: Some(3),
                waiting: vec![(7, 2), (9, 1)],
            },
            Entry::DeleteQueue {
                crawl: 4,
                key: b"a.com",
            },
            Entry::DeleteCrawl { id: 4 },
            Entry::Known {
                seq: 8,
                at: 1_000,
                when: 0,
                fresh: false,
                record: b"\0http://a/",
            },
            Entry::Known {
                seq: 9,
                at: 1_000,
                when: 5_000,
                fresh: true,
                record: b"\0http://a/",
            },
            Entry::Archived { run: 12 },
            Entry::Released {
                crawl: 3,
                key: b"a.com",
            },
            Entry::EndTransfer { name: b"a->b" },
            Entry::Receipted {
                receipts: vec![(b"b/3", 41), (b"c/0", 1 << 40)],
                known: vec![
                    Entry::Known {
                        seq: 8,
                        at: 1_000,
                        when: 0,
                        fresh: false,
                        record: b"\0http://a/",
                    },
                    Entry::Known {
                        seq: 9,
                        at: 1_000,
                        when: 5_000,
                        fresh: true,
                        record: b"\0http://b/",
                    },
                ],
            },
            Entry::Receipted {
                receipts: vec![(b"b/3", 42)],
                known: Vec::new(),
            },
            Entry::Imported {
                transfer: b"a->b 7",
                run: Some(13),
                next_seq: 30,
                queues: vec![
                    ImportedQueue {
                        crawl: 2,
                        key: b"a.com",
                        policy: Some(crate::queues::Policy {
                            delay_ms: 5,
                            ratio_ppm: 0,
                            per_queue: 2,
                            limit: 9,
                        }),
                        block: 77,
                        next_seq: 25,
                        waiting: 5,
                        completed: 3,
                        burst: 4,
                        due: 99,
                        leases: vec![(21, 8, 1_000, b"\x01\x02http://a.com/1")],
                        returned: vec![(22, b"\x01\x02http://a.com/2")],
                        refetch: vec![(2_000, 23, b"\x01\x02http://a.com/3")],
                    },
                    ImportedQueue {
                        crawl: 0,
                        key: b"b.com",
                        policy: None,
                        block: 0,
                        next_seq: 26,
                        waiting: 0,
                        completed: 1,
                        burst: 0,
                        due: 0,
                        leases: Vec::new(),
                        returned: Vec::new(),
                        refetch: Vec::new(),
                    },
                ],
            },
            Entry::Imported {
                transfer: b"",
                run: None,
                next_seq: 0,
                queues: Vec::new(),
            },
        ];
        for e in &entries {
            let mut b = Vec::new();
            e.encode(&mut b);
            assert_eq!(&Entry::decode(&b).unwrap(), e);
            let fixed_len = !matches!(
                e,
                Entry::Lease { .. }
                    | Entry::Crawl { .. }
                    | Entry::Policy { key: Some(_), .. }
                    | Entry::Block { .. }
                    | Entry::DeleteQueue { .. }
                    | Entry::Known { .. }
                    | Entry::Released { .. }
                    | Entry::EndTransfer { .. }
            );
            if fixed_len {
                for len in 0..b.len() {
                    assert!(Entry::decode(&b[..len]).is_err(), "{e:?} cut at {len}");
                }
                let mut longer = b.clone();
                longer.push(0);
                assert!(Entry::decode(&longer).is_err(), "{e:?} with a byte more");
            }
        }
        assert!(Entry::decode(&[9]).is_err());
        assert!(Entry::decode(&[2; 25]).is_err());
        // A fetch said to end after the entry's instant is damage.
        let mut b = Vec::new();
        Entry::Fetched {
            seq: 4,
            at: 5,
            took: 0,
            ended: 6,
        }
        .encode(&mut b);
        let e = Entry::decode(&b).unwrap_err().to_string();
        assert!(e.contains("end of a fetch"), "{e}");
    }

    /// A seq or a token at the counters' limit is damage, one below it an entry.
    #[test]
    fn seqs_and_tokens_at_the_counters_limit_are_refused() {
        let limit = super::super::COUNTER_LIMIT;
        for (seq, token) in [(limit, 1), (1, limit), (u64::MAX, 1)] {
            let mut b = Vec::new();
            let lease = Entry::Lease {
                seq,
                token,
                deadline: 1_000,
                record: b"\0http://a/",
            };
            lease.encode(&mut b);
            let e = Entry::decode(&b).unwrap_err().to_string();
            assert!(
                e.contains("of a lease") && e.contains("must be below"),
                "{e}"
            );
            let mut b = Vec::new();
            Entry::Done {
                seq,
                at: 0,
                took: 0,
                ended: 0,
            }
            .encode(&mut b);
            assert_eq!(Entry::decode(&b).is_err(), seq >= limit);
        }
        let mut b = Vec::new();
        let lease = Entry::Lease {
            seq: limit - 1,
            token: limit - 1,
            deadline: 1_000,
            record: b"\0http://a/",
        };
        lease.encode(&mut b);
        assert_eq!(Entry::decode(&b).unwrap(), lease);
    }
}
