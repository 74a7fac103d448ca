//! Counts and sizes of a sieve.

use super::Sieve;
use crate::error::Result;
use crate::names::{self, FileName};
use crate::storage::StorageExt;

/// Counts and sizes of a sieve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// URLs pushed, duplicates included (flushed, being flushed, and buffered). After a
    /// crash, the repeats that the cache of recent signatures dropped since the last flush
    /// are not counted.
    pub pushed: u64,
    /// URLs pushed since the last flush (buffered in S or being flushed).
    pub buffered: u64,
    /// Distinct URLs seen and merged (signatures in Z).
    pub distinct: u64,
    /// URLs ever appended to the frontier F.
    pub emitted: u64,
    /// URLs consumed from the frontier (durable cursor).
    pub consumed: u64,
    /// URLs in the frontier not yet consumed.
    pub pending: u64,
    /// Pushes spilled as runs and waiting for a merge with Z (in A, not yet in F).
    pub unmerged: u64,
    /// Runs waiting for a merge.
    pub runs: u64,
    /// Flushes committed (spills and merges).
    pub flushes: u64,
    /// Merges with Z committed.
    pub merges: u64,
    /// Z segments.
    pub segments: u64,
    /// Records of A dropped as torn tails by recoveries.
    pub torn_records: u64,
    /// Bytes of A dropped as torn tails by recoveries, from the damage to the end of the
    /// file (in a file reused from a superseded generation, an upper bound).
    pub torn_bytes: u64,
    /// Bytes on disk of A files (superseded ones the reaper has not yet removed, and its
    /// spares, included).
    pub bytes_a: u64,
    /// Bytes of Z: its current segments (not the superseded ones awaiting removal).
    pub bytes_z: u64,
    /// Bytes on disk of R runs.
    pub bytes_r: u64,
    /// Bytes on disk of F segments.
    pub bytes_f: u64,
    /// Bytes of the manifest and the cursor.
    pub bytes_meta: u64,
    /// The memory budget in bytes.
    pub memory_budget: u64,
    /// Slots per buffer of S.
    pub slots: u64,
    /// The signature seed.
    pub seed: u64,
}

impl Sieve {
    /// Pushes not merged yet (repeats among them): [`Stats::buffered`] plus
    /// [`Stats::unmerged`], without the sizes of the files.
    pub(crate) fn unmerged_pushes(&mut self) -> Result<u64> {
        let r = self.decide();
        self.poison(r)?;
        let _ = self.poll_inflight();
        let inflight = self.inflight.as_ref().map_or(0, |f| f.pushes);
        let spilled: u64 = (self.spilled_beside_merge.iter())
            .map(|r| r.meta().records)
            .sum();
        let runs: u64 = self.manifest.runs.iter().map(|r| r.records).sum();
        Ok(inflight + self.s.len() as u64 + self.absorbed + runs + spilled)
    }

    /// Counts and sizes.
    pub fn stats(&mut self) -> Result<Stats> {
        let r = self.decide();
        self.poison(r)?;
        let _ = self.poll_inflight();
        let inflight = self.inflight.as_ref().map_or(0, |f| f.pushes);
        let spilled: u64 = self
            .spilled_beside_merge
            .iter()
            .map(|r| r.meta().records)
            .sum();
        let m = &self.manifest;
        let mut st = Stats {
            pushed: m.pushed + inflight + spilled + self.s.len() as u64 + self.absorbed,
            buffered: inflight + self.s.len() as u64 + self.absorbed,
            distinct: m.segments.iter().map(|s| s.sigs).sum(),
            unmerged: m.runs.iter().map(|r| r.records).sum::<u64>() + spilled,
            runs: (m.runs.len() + self.spilled_beside_merge.len()) as u64,
            merges: m.merges,
            emitted: m.f_count,
            consumed: self.cursor.consumed,
            pending: m.f_count - self.cursor.consumed,
            flushes: m.flushes,
            segments: m.segments.len() as u64,
            torn_records: m.torn_records,
            torn_bytes: m.torn_bytes,
            memory_budget: self.opts.memory as u64,
            slots: self.slots as u64,
            seed: m.seed,
            bytes_z: m.segments.iter().map(|s| s.bytes).sum(),
            ..Stats::default()
        };
        if self.opts.slots.is_some() {
            st.memory_budget = (self.slots * crate::options::BYTES_PER_SLOT) as u64;
        }
        for name in self.storage.list_files()? {
            let counter = match names::parse(&name) {
                Some(FileName::A(_)) => &mut st.bytes_a,
                Some(FileName::R(_)) => &mut st.bytes_r,
                Some(FileName::F(_)) => &mut st.bytes_f,
                Some(FileName::Manifest | FileName::Cursor) => &mut st.bytes_meta,
                _ => continue,
            };
            if let Ok(Some(f)) = self.storage.open_if_exists(&name) {
                *counter += f.len().unwrap_or(0);
            }
        }
        Ok(st)
    }
}
