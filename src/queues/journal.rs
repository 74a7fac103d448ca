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
    /// The lease of `seq` ended: done for good.
    Done { seq: u64, at: u64, took: u64 },
    /// The lease of `seq` ended: back in its queue, in its place.
    Retry { seq: u64, at: u64, took: u64 },
    /// The policy of a queue of `crawl` (`key`), or the default one.
    Policy {
        crawl: u32,
        key: Option<&'a [u8]>,
        policy: super::Policy,
    },
    /// Queue `key` of `crawl` gets nothing before `until` (0: unblocked).
    Block {
        crawl: u32,
        key: &'a [u8],
        until: u64,
    },
    /// The lease of `seq` ended: done, and served again once `when` has passed.
    Refetch {
        seq: u64,
        at: u64,
        took: u64,
        when: u64,
    },
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
}

impl Entry<'_> {
    /// Appends the entry's bytes to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
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
            Entry::Done { seq, at, took } | Entry::Retry { seq, at, took } => {
                out.push(if matches!(self, Entry::Done { .. }) {
                    3
                } else {
                    4
                });
                out.put_u64(*seq);
                out.put_u64(*at);
                out.put_u64(*took);
            }
            Entry::Policy { crawl, key, policy } => {
                out.push(5);
                out.put_u32(*crawl);
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
            } => {
                out.push(10);
                out.put_u64(*seq);
                out.put_u64(*at);
                out.put_u64(*took);
                out.put_u64(*when);
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
        }
    }

    /// Decodes an entry; what a well-formed journal never holds is corruption.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Entry<'_>, Corruption> {
        let mut r = Fields(bytes);
        let entry = match r.u8()? {
            1 => {
                let run = r.u64()?;
                let f = Position {
                    segment: r.u64()?,
                    offset: r.u64()?,
                    skip: r.u32()?,
                    consumed: r.u64()?,
                };
                Entry::Moved {
                    run: (run != 0).then_some(run),
                    f,
                    next_seq: r.u64()?,
                }
            }
            2 => {
                let seq = r.u64()?;
                let token = r.u64()?;
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
                let (seq, at, took) = (r.u64()?, r.u64()?, r.u64()?);
                if k == 3 {
                    Entry::Done { seq, at, took }
                } else {
                    Entry::Retry { seq, at, took }
                }
            }
            5 => {
                let crawl = r.u32()?;
                let policy = super::Policy {
                    delay_ms: r.u64()?,
                    ratio_ppm: r.u32()?,
                    per_queue: r.u32()?,
                    limit: r.u64()?,
                };
                let key = match r.u8()? {
                    0 => None,
                    1 => Some(r.rest()),
                    found => return Err(invalid("policy's key flag", "0 or 1", found.into())),
                };
                if policy.per_queue == 0 {
                    return Err(invalid("policy's per_queue", "at least 1", 0));
                }
                if policy.ratio_ppm > 1_000_000 {
                    return Err(invalid(
                        "policy's ratio",
                        "at most 1,000,000 millionths",
                        policy.ratio_ppm.into(),
                    ));
                }
                Entry::Policy { crawl, key, policy }
            }
            9 => Entry::Block {
                crawl: r.u32()?,
                until: r.u64()?,
                key: r.rest(),
            },
            10 => Entry::Refetch {
                seq: r.u64()?,
                at: r.u64()?,
                took: r.u64()?,
                when: r.u64()?,
            },
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
            13 => {
                let (seq, at, when) = (r.u64()?, r.u64()?, r.u64()?);
                let fresh = match r.u8()? {
                    b @ (0 | 1) => b == 1,
                    found => {
                        return Err(invalid("known entry's fresh flag", "0 or 1", found.into()))
                    }
                };
                if fresh && when == 0 {
                    return Err(invalid("known entry's instant", "not 0 when fresh", 0));
                }
                let record = r.rest();
                crate::record::decode(record)?;
                Entry::Known {
                    seq,
                    at,
                    when,
                    fresh,
                    record,
                }
            }
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
                    removed.push(r.u64()?);
                }
                let added = r.u64()?;
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
                    waiting.push((r.u64()?, r.u64()?));
                }
                Entry::Compacted {
                    removed,
                    added: (added != 0).then_some(added),
                    waiting,
                }
            }
            kind => return Err(invalid("journal entry kind", "1 to 13", kind.into())),
        };
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
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
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
            },
            Entry::Retry {
                seq: 9,
                at: 5,
                took: 3,
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
            },
            Entry::Policy {
                crawl: 0,
                key: None,
                policy: crate::queues::Policy::default(),
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
            },
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
    }
}
