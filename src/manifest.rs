//! The manifest: the one atomic commit point of the producer side.
//!
//! ```text
//! manifest := magic "CRVM" u32 | version u32 | seed u64 | commit u64 | next_id u64
//!           | a_gen u64 | a_skip u64                    first live record of A
//!           | f_tail u64 | f_tail_len u64 | f_count u64 F's committed end, URLs in F
//!           | pushed u64 | flushes u64 | torn_records u64 | torn_bytes u64
//!           | merges u64
//!           | mode u32                                  (version 5; 0 in version 4)
//!           | clean_a_gen u64 | clean_a_end u64         (version 8 on; 0 before)
//!           | clean_j_gen u64 | clean_j_end u64         where the last clean close left A and J
//!           | queue_coding u32                          (version 14 on; 0 before)
//!           | segments u32 | segments x (id u64 | sigs u64 | bytes u64)
//!           | runs u32 | runs x (id u64 | gen u64 | skip u64 | records u64 | pairs u64)
//!           | crc32 u32
//! ```
//!
//! It is replaced atomically (`MANIFEST.tmp`, fsync, rename, fsync directory). A manifest of
//! version 4 is read as of mode 0, one of version 5 as of no clean close recorded, and all
//! are written back as version 18 at the next commit (versions 6 and 7 changed other files
//! only: no manifest has them). Versions 9 to 13 have version 8's layout: 9 says that F's
//! frames may be coded (`src/frames/coded.rs`), which a build that writes version 8 cannot
//! read; 10 that a frontier's journal may hold archives and imports, and its A and F records
//! the import flag, which a build that writes version 9 cannot read; 11 that the journal may
//! hold receipts; 12 that the Q runs may hold many queues per frame (`src/queues/qrun.rs`);
//! 13 that their frames may be compressed (layout 6 of `src/frames/coded.rs`). Version 14
//! adds `queue_coding` after the clean ends: how a frontier writes its Q runs, 0 front coded
//! (`RunCoding::Front`), 1 compressed (`RunCoding::Compressed`); a manifest of an earlier
//! version is read as of 0. Version 15 has version 14's layout and says that a frontier's
//! journal may hold policies with their instant (entry 19), which a build that writes
//! version 14 cannot read. Version 16 has version 14's layout too and says that a queue's own
//! policy, in the journal's entries and the checkpoint, may leave fields to the default's
//! (a delay or limit of 2^64 - 1, a ratio of 2^32 - 1, a per_queue of 0), which a build that
//! writes version 15 would read as values or refuse. Version 17 has version 14's layout and
//! says that the journal may hold ends of fetches that ended before their entry (entry 20),
//! which a build that writes version 16 would report as damage. Version 18 has version 14's
//! layout and says that the journal may hold ends of fetches before their leases end (entry
//! 21) and the checkpoint the leases they ended (its version 13), which a build that writes
//! version 17 would report as damage.

use crate::error::{Corruption, Error, Result};
use crate::format::{seal, ByteReader, PutLe, MAGIC_M, MANIFEST_VERSION, VERSION};
use crate::frontier;
use crate::names::{self, MANIFEST};
use crate::run::RunMeta;
use crate::segment::SegmentMeta;
use crate::storage::{durable, Storage, StorageExt};

/// Every count and id of a manifest (all but the seed) is below this. No store comes near it
/// (2^62 pushes take centuries); a larger value is corruption, and below it the sums a flush
/// makes of these values cannot overflow.
pub(crate) const COUNTER_LIMIT: u64 = 1 << 62;

/// How a store is used: fixed by the first reader of F, and never changed after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Nothing has read F yet: the store is a plain sieve so far.
    #[default]
    Unset,
    /// A plain sieve: F is read through the cursor (`pop`), A and F hold bare URLs.
    Sieve,
    /// A frontier: F is read into per-host queues (`lease`, `done`), and A and F hold records
    /// with a crawl, a key and metadata (`src/record.rs`).
    Frontier,
}

impl Mode {
    fn code(self) -> u32 {
        match self {
            Mode::Unset => 0,
            Mode::Sieve => 1,
            Mode::Frontier => 2,
        }
    }

    fn from_code(code: u32) -> Option<Mode> {
        Some(match code {
            0 => Mode::Unset,
            1 => Mode::Sieve,
            2 => Mode::Frontier,
            _ => return None,
        })
    }
}

/// Where the last clean close left a log's newest generation: its bytes before `end` were
/// synced, then sealed, so damage or a cut before `end` is corruption, never a torn tail
/// (`docs/design.md`, "The clean end"). `end == 0`: none recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CleanEnd {
    /// The generation.
    pub gen: u64,
    /// The end of its valid frames at the close.
    pub end: u64,
}

impl CleanEnd {
    /// The clean end of generation `gen`, if one is recorded for it.
    pub(crate) fn of(self, gen: u64) -> Option<u64> {
        (self.end > 0 && self.gen == gen).then_some(self.end)
    }
}

/// The content of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The signature seed, chosen at creation.
    pub seed: u64,
    /// The number of this commit (increases by one at each switch).
    pub commit: u64,
    /// The next unused file id (Z and F segments).
    pub next_id: u64,
    /// A's first live generation.
    pub a_gen: u64,
    /// Records of generation `a_gen` already flushed.
    pub a_skip: u64,
    /// The id of F's tail segment.
    pub f_tail: u64,
    /// The committed length of F's tail segment.
    pub f_tail_len: u64,
    /// The number of URLs ever appended to F.
    pub f_count: u64,
    /// URLs pushed and flushed (duplicates included).
    pub pushed: u64,
    /// Flushes committed.
    pub flushes: u64,
    /// Records dropped as torn tails of A at recovery.
    pub torn_records: u64,
    /// Bytes dropped as torn tails of A at recovery.
    pub torn_bytes: u64,
    /// Merges of unmerged runs with Z committed.
    pub merges: u64,
    /// How the store is used.
    pub mode: Mode,
    /// Where the last clean close left A's newest generation.
    pub clean_a: CleanEnd,
    /// Where the last clean close left the frontier's journal J (none for a plain sieve).
    pub clean_j: CleanEnd,
    /// Whether the frontier writes its Q runs compressed (`Options::compress_queues`, kept
    /// from the open that last chose); false for a plain sieve.
    pub compress_queues: bool,
    /// Z's segments.
    pub segments: Vec<SegmentMeta>,
    /// Spilled batches not yet merged with Z, in push order.
    pub runs: Vec<RunMeta>,
}

impl Manifest {
    /// Encodes the manifest.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(128 + 24 * self.segments.len());
        b.put_u32(MAGIC_M);
        b.put_u32(MANIFEST_VERSION);
        for v in [
            self.seed,
            self.commit,
            self.next_id,
            self.a_gen,
            self.a_skip,
            self.f_tail,
            self.f_tail_len,
            self.f_count,
            self.pushed,
            self.flushes,
            self.torn_records,
            self.torn_bytes,
            self.merges,
        ] {
            b.put_u64(v);
        }
        b.put_u32(self.mode.code());
        for v in [
            self.clean_a.gen,
            self.clean_a.end,
            self.clean_j.gen,
            self.clean_j.end,
        ] {
            b.put_u64(v);
        }
        b.put_u32(u32::from(self.compress_queues));
        b.put_u32(self.segments.len() as u32);
        for s in &self.segments {
            b.put_u64(s.id);
            b.put_u64(s.sigs);
            b.put_u64(s.bytes);
        }
        b.put_u32(self.runs.len() as u32);
        for r in &self.runs {
            for v in [r.id, r.gen, r.skip, r.records, r.pairs] {
                b.put_u64(v);
            }
        }
        seal(&mut b);
        b
    }

    /// The manifest as a build of `version` (8 to this build's) wrote it: version 8's layout,
    /// without the queue coding before version 14. For tests of older stores.
    #[cfg(test)]
    pub(crate) fn encode_as(&self, version: u32) -> Vec<u8> {
        assert!(
            (8..=MANIFEST_VERSION).contains(&version),
            "version {version}"
        );
        let mut b = self.encode();
        b.truncate(b.len() - 4);
        b[4..8].copy_from_slice(&version.to_le_bytes());
        if version < 14 {
            // The queue coding follows the 13 counters, the mode and the 4 clean ends.
            let coding = 8 + 13 * 8 + 4 + 32;
            b.drain(coding..coding + 4);
        }
        seal(&mut b);
        b
    }

    /// Decodes and checks a manifest read from `file`. (Over 80 lines: one bounded read per
    /// field, in the file's order, as the layout above lists them.)
    pub(crate) fn decode(bytes: &[u8], file: &str) -> Result<Manifest> {
        let mut c = ByteReader::new(bytes, file, 0);
        c.magic(MAGIC_M)?;
        let at = c.offset();
        let version = c.version_between(VERSION, MANIFEST_VERSION)?;
        if version == 6 || version == 7 {
            return Err(Error::corrupt(
                file,
                at,
                Corruption::Invalid {
                    field: "manifest version",
                    expected: "4, 5, 8 to 18 (versions 6 and 7 changed other files)",
                    found: u64::from(version),
                },
            ));
        }
        let seed = c.u64()?;
        let commit = c.u64_below("commit", COUNTER_LIMIT)?;
        let next_id = c.u64_below("next id", COUNTER_LIMIT)?;
        let a_gen = c.u64_below("A generation", COUNTER_LIMIT)?;
        let a_skip = c.u64_below("A skip", COUNTER_LIMIT)?;
        let f_tail = c.u64_below("F tail", next_id)?;
        let f_tail_len = c.u64_below("F tail length", COUNTER_LIMIT)?;
        let f_count = c.u64_below("F count", COUNTER_LIMIT)?;
        let pushed = c.u64_below("pushed", COUNTER_LIMIT)?;
        let flushes = c.u64_below("flushes", COUNTER_LIMIT)?;
        let torn_records = c.u64_below("torn records", COUNTER_LIMIT)?;
        let torn_bytes = c.u64_below("torn bytes", COUNTER_LIMIT)?;
        let merges = c.u64_below("merges", COUNTER_LIMIT)?;
        let mode = if version >= 5 {
            let at = c.offset();
            let code = c.u32()?;
            Mode::from_code(code).ok_or_else(|| {
                Error::corrupt(
                    file,
                    at,
                    Corruption::Invalid {
                        field: "mode",
                        expected: "0, 1 or 2",
                        found: u64::from(code),
                    },
                )
            })?
        } else {
            Mode::Unset
        };
        let (mut clean_a, mut clean_j) = (CleanEnd::default(), CleanEnd::default());
        if version >= 8 {
            clean_a.gen = c.u64_below("clean A generation", COUNTER_LIMIT)?;
            clean_a.end = c.u64_below("clean A end", COUNTER_LIMIT)?;
            clean_j.gen = c.u64_below("clean J generation", COUNTER_LIMIT)?;
            clean_j.end = c.u64_below("clean J end", COUNTER_LIMIT)?;
        }
        let compress_queues = version >= 14 && {
            let at = c.offset();
            match c.u32()? {
                0 => false,
                1 => true,
                code => {
                    return Err(Error::corrupt(
                        file,
                        at,
                        Corruption::Invalid {
                            field: "queue coding",
                            expected: "0 or 1",
                            found: u64::from(code),
                        },
                    ))
                }
            }
        };
        let at = c.offset();
        let n = c.u32()? as usize;
        if n.saturating_mul(24) > c.remaining() {
            return Err(Error::corrupt(
                file,
                at,
                Corruption::OutOfRange {
                    field: "segment count",
                    found: n as u64,
                    limit: (c.remaining() / 24 + 1) as u64,
                },
            ));
        }
        let mut segments = Vec::with_capacity(n);
        for _ in 0..n {
            let id = c.u64_below("segment id", next_id)?;
            segments.push(SegmentMeta {
                id,
                sigs: c.u64_below("segment signatures", COUNTER_LIMIT)?,
                bytes: c.u64_below("segment bytes", COUNTER_LIMIT)?,
            });
        }
        let at = c.offset();
        let n = c.u32()? as usize;
        if n.saturating_mul(40) > c.remaining() {
            return Err(Error::corrupt(
                file,
                at,
                Corruption::OutOfRange {
                    field: "run count",
                    found: n as u64,
                    limit: (c.remaining() / 40 + 1) as u64,
                },
            ));
        }
        let mut runs = Vec::with_capacity(n);
        for _ in 0..n {
            runs.push(RunMeta {
                id: c.u64_below("run id", next_id)?,
                gen: c.u64_below("run generation", COUNTER_LIMIT)?,
                skip: c.u64_below("run skip", COUNTER_LIMIT)?,
                records: c.u64_below("run records", COUNTER_LIMIT)?,
                pairs: c.u64_below("run pairs", COUNTER_LIMIT)?,
            });
        }
        c.check_crc()?;
        c.end()?;
        Ok(Manifest {
            seed,
            commit,
            next_id,
            a_gen,
            a_skip,
            f_tail,
            f_tail_len,
            f_count,
            pushed,
            flushes,
            torn_records,
            torn_bytes,
            merges,
            mode,
            clean_a,
            clean_j,
            compress_queues,
            segments,
            runs,
        })
    }

    /// Reads the manifest of `storage`; `Ok(None)` if there is none.
    pub(crate) fn load(storage: &dyn Storage) -> Result<Option<Manifest>> {
        match storage.open_if_exists(MANIFEST)? {
            Some(f) => Manifest::decode(&f.read_all()?, MANIFEST).map(Some),
            None => Ok(None),
        }
    }

    /// F's committed end.
    pub(crate) fn frontier_end(&self) -> frontier::End {
        frontier::End {
            tail: self.f_tail,
            tail_len: self.f_tail_len,
            count: self.f_count,
        }
    }

    /// Records F's new end.
    pub(crate) fn set_frontier_end(&mut self, end: frontier::End) {
        self.f_tail = end.tail;
        self.f_tail_len = end.tail_len;
        self.f_count = end.count;
    }

    /// Commits this manifest: when this returns Ok it is durable.
    pub(crate) fn commit_to(&self, storage: &dyn Storage) -> Result<()> {
        if crate::planted::active(crate::planted::Bug::NoDirFsync) {
            let tmp = names::tmp(MANIFEST);
            let f = storage.create_file(&tmp)?;
            f.write_all_at(&self.encode(), 0)?;
            f.sync()?;
            return durable::rename(storage, &tmp, MANIFEST);
        }
        durable::replace(storage, MANIFEST, &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            seed: 1,
            commit: 2,
            next_id: 9,
            a_gen: 3,
            a_skip: 4,
            f_tail: 5,
            f_tail_len: 6,
            f_count: 7,
            pushed: 8,
            flushes: 9,
            torn_records: 10,
            torn_bytes: 11,
            merges: 12,
            mode: Mode::Frontier,
            clean_a: CleanEnd { gen: 3, end: 4096 },
            clean_j: CleanEnd { gen: 1, end: 512 },
            compress_queues: true,
            runs: vec![RunMeta {
                id: 7,
                gen: 3,
                skip: 0,
                records: 100,
                pairs: 60,
            }],
            segments: vec![
                SegmentMeta {
                    id: 1,
                    sigs: 2,
                    bytes: 3,
                },
                SegmentMeta {
                    id: 4,
                    sigs: 5,
                    bytes: 6,
                },
            ],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_any_flipped_bit_is_caught() {
        let m = sample();
        let b = m.encode();
        assert_eq!(Manifest::decode(&b, MANIFEST).unwrap(), m);
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Manifest::decode(&c, MANIFEST).unwrap_err().is_corruption(),
                "bit {bit}"
            );
        }
        for len in 0..b.len() {
            assert!(Manifest::decode(&b[..len], MANIFEST)
                .unwrap_err()
                .is_corruption());
        }
    }

    #[test]
    fn manifests_of_versions_4_to_13_read_as_of_no_mode_no_clean_end_and_no_coding() {
        let m = sample();
        let v14 = m.encode();
        let at = 8 + 13 * 8;
        // Versions 8 to 13: no queue coding, read as front coded.
        let coding = at + 4 + 32;
        let mut v8 = v14[..coding].to_vec();
        v8.extend_from_slice(&v14[coding + 4..v14.len() - 4]);
        let no_coding = Manifest {
            compress_queues: false,
            ..m.clone()
        };
        for v in [8u32, 12, 13] {
            v8[4..8].copy_from_slice(&v.to_le_bytes());
            let mut old = v8.clone();
            seal(&mut old);
            assert_eq!(Manifest::decode(&old, MANIFEST).unwrap(), no_coding);
        }
        seal(&mut v8);
        // A coding other than 0 or 1 is corruption.
        let mut bad = v14[..v14.len() - 4].to_vec();
        bad[coding..coding + 4].copy_from_slice(&2u32.to_le_bytes());
        seal(&mut bad);
        let e = Manifest::decode(&bad, MANIFEST).unwrap_err();
        assert!(
            e.is_corruption() && e.to_string().contains("queue coding"),
            "{e}"
        );
        // Version 5: no clean ends.
        let mut v5 = v8[..at + 4].to_vec();
        v5.extend_from_slice(&v8[at + 4 + 32..v8.len() - 4]);
        v5[4..8].copy_from_slice(&5u32.to_le_bytes());
        seal(&mut v5);
        let old = Manifest::decode(&v5, MANIFEST).unwrap();
        let no_clean = Manifest {
            clean_a: CleanEnd::default(),
            clean_j: CleanEnd::default(),
            ..no_coding.clone()
        };
        assert_eq!(old, no_clean);
        // Version 4: no mode field either.
        let mut v4 = v5[..at].to_vec();
        v4.extend_from_slice(&v5[at + 4..v5.len() - 4]);
        v4[4..8].copy_from_slice(&4u32.to_le_bytes());
        seal(&mut v4);
        let old = Manifest::decode(&v4, MANIFEST).unwrap();
        assert_eq!(
            old,
            Manifest {
                mode: Mode::Unset,
                ..no_clean
            }
        );
        let mut bad = v14[..v14.len() - 4].to_vec();
        bad[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
        seal(&mut bad);
        assert!(Manifest::decode(&bad, MANIFEST)
            .unwrap_err()
            .is_corruption());
        let mut v3 = v4.clone();
        v3.truncate(v3.len() - 4);
        v3[4..8].copy_from_slice(&3u32.to_le_bytes());
        seal(&mut v3);
        let e = Manifest::decode(&v3, MANIFEST).unwrap_err();
        assert!(e.to_string().contains("format version 3"), "{e}");
        // No manifest was ever written with version 6 or 7.
        for v in [6u32, 7] {
            let mut odd = v14[..v14.len() - 4].to_vec();
            odd[4..8].copy_from_slice(&v.to_le_bytes());
            seal(&mut odd);
            let e = Manifest::decode(&odd, MANIFEST).unwrap_err();
            assert!(
                e.is_corruption() && e.to_string().contains("manifest version"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_clean_end_names_its_generation_only() {
        let c = CleanEnd { gen: 3, end: 100 };
        assert_eq!(c.of(3), Some(100));
        assert_eq!(c.of(4), None);
        assert_eq!(CleanEnd::default().of(0), None);
    }

    #[test]
    fn a_count_past_its_limit_or_an_id_not_below_next_id_is_corruption() {
        let mut m = sample();
        m.flushes = COUNTER_LIMIT - 1;
        assert_eq!(Manifest::decode(&m.encode(), MANIFEST).unwrap(), m);
        let edits: [fn(&mut Manifest); 8] = [
            |m| m.next_id = u64::MAX,
            |m| m.f_tail = m.next_id,
            |m| m.segments[1].id = m.next_id,
            |m| m.runs[0].id = m.next_id,
            |m| m.flushes = COUNTER_LIMIT,
            |m| m.f_count = u64::MAX,
            |m| m.segments[0].bytes = u64::MAX,
            |m| m.runs[0].records = COUNTER_LIMIT,
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut m = sample();
            edit(&mut m);
            let e = Manifest::decode(&m.encode(), MANIFEST).unwrap_err();
            assert!(e.is_corruption(), "edit {i}: {e}");
        }
        let mut m = sample();
        m.seed = u64::MAX;
        assert_eq!(Manifest::decode(&m.encode(), MANIFEST).unwrap(), m);
    }
}
