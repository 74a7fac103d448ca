//! The merge: Z's segments, the runs waiting and a sorted batch joined in one sequential pass
//! into one new Z segment, which finds the signatures Z lacks and the position of the first
//! occurrence of each. The sieve's flush and `uniq` both merge through here.
//!
//! Deferring merges (IRLbot's DRUM: Lee, Leonard, Wang, Loguinov, "IRLbot: Scaling to 6
//! billion pages and beyond", 2008) keeps the cost per URL flat: a batch is spilled as a run
//! until the runs and the batch hold as many signatures as Z ([`merge_due`]), so that each
//! merge reads and rewrites Z for at least as many new signatures as it holds.
//!
//! Z's side and the new side are each merged by a [`tree`] of losers, and joined two-way; the
//! new positions are marked in memory (the batch's, and each run's while the runs' bitmaps
//! fit [`REGIONS_IN_MEMORY`]) or go to the scratch file, source by source ([`positions`]).

pub(crate) mod positions;
pub(crate) mod tree;

use std::sync::Arc;

use crate::buffer::Slot;
use crate::error::Result;
use crate::names::SCRATCH;
use crate::run::Run;
use crate::segment::{Segment, SegmentWriter};
use crate::storage::{File, Storage, StorageExt};

pub(crate) use positions::{check_term, Positions, Region};
use tree::{Head, Input, Merger};

/// The rule of deferred merges (DRUM's): a batch is merged with Z, rather than spilled as a
/// run, once the records waiting in the runs and the batch (`unmerged`) reach the
/// signatures in Z (`distinct`), so that reading and rewriting Z costs a bounded amount per
/// push, or once one more run would reach `max_runs`, so that a merge's buffers stay in the
/// budget.
pub(crate) fn merge_due(unmerged: u64, distinct: u64, runs: usize, max_runs: usize) -> bool {
    unmerged >= distinct || runs + 1 >= max_runs
}

/// Bytes of the bitmaps of new positions a merge keeps in memory for its runs (the batch's is
/// always kept): a run whose bitmap still fits writes no scratch. 1 MiB is a bit for each
/// record of three full runs at a budget of 64 MiB.
pub(crate) const REGIONS_IN_MEMORY: u64 = 1 << 20;

/// The new segment of a merge, created at its first signature (a merge whose output is
/// empty creates no file and takes no id).
struct MergeOut<'a> {
    storage: &'a dyn Storage,
    id: u64,
    next_id: &'a mut u64,
    /// The most signatures the merge can write.
    max_sigs: u64,
    writer: Option<SegmentWriter>,
}

impl MergeOut<'_> {
    fn push(&mut self, sig: u64) -> Result<()> {
        let w = match &mut self.writer {
            Some(w) => w,
            None => {
                *self.next_id += 1;
                self.writer
                    .insert(SegmentWriter::create(self.storage, self.id, self.max_sigs)?)
            }
        };
        w.push(sig)
    }
}

/// What a merge of signatures produced: the new Z segment (none when Z stays empty), and
/// the new positions of every source.
pub(crate) struct Merged {
    pub segment: Option<Arc<Segment>>,
    /// The merge created the scratch file [`SCRATCH`] (some run's positions did not fit in
    /// memory): the caller removes it once the positions are read.
    pub scratch: bool,
    /// One region per run, in push order, then one for the batch.
    pub regions: Vec<Region>,
}

/// Joins Z's signatures (`next_z`, increasing) with the new side's (`next_new`, increasing,
/// each with its earliest source): every signature goes to `out`, and one that Z lacks is new,
/// its position added to its source's region.
fn join(
    mut next_z: impl FnMut() -> Result<Option<u64>>,
    mut next_new: impl FnMut() -> Result<Option<Head>>,
    out: &mut MergeOut<'_>,
    regions: &mut [Region],
) -> Result<()> {
    let mut head = next_z()?;
    while let Some(p) = next_new()? {
        while let Some(s) = head.filter(|&s| s < p.sig) {
            out.push(s)?;
            head = next_z()?;
        }
        out.push(p.sig)?;
        if head == Some(p.sig) {
            head = next_z()?;
        } else {
            regions[p.src].add(p.sig, p.idx)?;
        }
    }
    while let Some(s) = head {
        out.push(s)?;
        head = next_z()?;
    }
    Ok(())
}

/// Merges Z's `segments` with the `runs` (in push order) and the sorted `batch` (after
/// them) into one new segment, numbered from `next_id`. A signature no segment holds is new,
/// and its first occurrence is the one of the earliest source: its position goes to that
/// source's region, in memory or in the scratch file [`SCRATCH`] (created only for a run
/// whose bitmap does not fit what is left of `in_memory` bytes, [`REGIONS_IN_MEMORY`] but in
/// tests).
pub(crate) fn merge_signatures(
    storage: &dyn Storage,
    next_id: &mut u64,
    segments: &[Arc<Segment>],
    runs: &[Arc<Run>],
    batch: &[Slot],
    in_memory: u64,
) -> Result<Merged> {
    let mut scratch: Option<File> = None;
    let mut regions = Vec::with_capacity(runs.len() + 1);
    let mut offset = 0u64;
    // Each run's positions in memory if its bitmap fits what is left of `in_memory`, in push
    // order; the others in the scratch file.
    let mut left = in_memory;
    for r in runs {
        let bitmap = r.meta().records.div_ceil(64) * 8;
        if bitmap <= left {
            left -= bitmap;
            regions.push(Region::in_memory(r.meta().records));
        } else {
            let file = match &scratch {
                Some(f) => f.clone(),
                None => scratch.insert(storage.create_file(SCRATCH)?).clone(),
            };
            regions.push(Region::new(file, offset));
            offset += 4 * r.meta().pairs;
        }
    }
    // The batch's positions, always in memory: one bit per record up to its last pair's
    // (at most a bit per slot of S, as the emission's bitmap of any source).
    let records = batch
        .iter()
        .map(|p| u64::from(p.idx) + 1)
        .max()
        .unwrap_or(0);
    regions.push(Region::in_memory(records));

    let max_sigs = segments.iter().map(|s| s.meta().sigs).sum::<u64>()
        + runs.iter().map(|r| r.meta().pairs).sum::<u64>()
        + batch.len() as u64;
    let mut out = MergeOut {
        storage,
        id: *next_id,
        next_id,
        max_sigs,
        writer: None,
    };
    if segments.len() <= 1 && runs.is_empty() {
        // The usual case, Z in one segment and no run waiting: each side read straight.
        let mut z = segments.first().map(|s| s.iter());
        let next_z = || z.as_mut().and_then(Iterator::next).transpose();
        let mut batch = batch.iter();
        let next_new = || {
            let p = batch.next();
            Ok(p.map(|p| Head {
                sig: p.sig,
                src: 0,
                idx: p.idx,
            }))
        };
        join(next_z, next_new, &mut out, &mut regions)?;
    } else {
        // Each side merged by its own tournament. The new side's sources are the runs in push
        // order, then the batch, so a signature they share comes from the earliest. Z holds
        // most of the signatures, and each of them costs one comparison in the join.
        let mut z = Merger::new(segments.iter().map(|s| Input::Z(s.iter())).collect())?;
        let fresh = runs.iter().map(|r| Input::Run(r.iter()));
        let fresh = fresh.chain(std::iter::once(Input::Batch(batch.iter())));
        let mut fresh = Merger::new(fresh.collect())?;
        let next_z = || z.next().map(|h| h.map(|h| h.sig));
        join(next_z, || fresh.next(), &mut out, &mut regions)?;
    }
    for r in &mut regions {
        r.finish()?;
    }
    let segment = match out.writer {
        Some(w) => Some(Arc::new(w.finish()?)),
        None => None,
    };
    Ok(Merged {
        segment,
        scratch: scratch.is_some(),
        regions,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::run::RunMeta;
    use crate::storage::SimDisk;

    /// range, `u64::MAX` among them.
    fn sig(x: u8) -> u64 {
        if x == 0 {
            u64::MAX
        } else {
            u64::from(x).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        }
    }

    proptest::proptest! {
        /// The merge against a reference: every signature of every input once, in order, and
        /// each one no Z segment holds as new at its earliest source's position. Z has 0 to 3
        /// segments (several go through the Z side's tournament), 0 to 5 runs wait. A run
        /// marked `big` says it has 9·10^6 records (its few pairs among the first): its bitmap
        /// passes [`REGIONS_IN_MEMORY`], so its positions go to the scratch file, which the
        /// merge creates then and only then.
        #[test]
        fn a_merge_writes_every_signature_once_and_finds_each_new_one_at_its_first_source(
            zs in proptest::collection::vec(proptest::collection::btree_set(0u8..48, 0..30), 0..4),
            news in proptest::collection::vec(proptest::collection::vec(0u8..48, 0..40), 1..7),
            big in proptest::collection::vec(proptest::bool::weighted(0.3), 6),
        ) {
            let disk = SimDisk::new();
            let mut segments = Vec::new();
            for (i, z) in zs.iter().enumerate() {
                let mut sigs: Vec<u64> = z.iter().map(|&x| sig(x)).collect();
                sigs.sort_unstable();
                let id = 100 + i as u64;
                let mut w = SegmentWriter::create(&disk, id, sigs.len() as u64).unwrap();
                for &s in &sigs {
                    w.push(s).unwrap();
                }
                segments.push(Arc::new(w.finish().unwrap()));
            }
            // Each new source's pairs: sorted, the first position of each signature kept.
            let sources: Vec<Vec<Slot>> = news
                .iter()
                .map(|v| {
                    let mut slots: Vec<Slot> = v
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| Slot { sig: sig(x), idx: i as u32 })
                        .collect();
                    crate::buffer::sort_slots(&mut slots);
                    slots
                })
                .collect();
            let (batch, waiting) = sources.split_last().unwrap();
            let mut runs = Vec::new();
            for (i, pairs) in waiting.iter().enumerate() {
                let meta = RunMeta {
                    id: 200 + i as u64,
                    gen: i as u64,
                    skip: 0,
                    records: if big[i] { 9_000_000 } else { news[i].len() as u64 },
                    pairs: pairs.len() as u64,
                };
                crate::run::write(&disk, meta, pairs).unwrap();
                runs.push(Arc::new(Run::open(&disk, meta).unwrap()));
            }

            let mut next_id = 1000;
            let mut merged =
                merge_signatures(&disk, &mut next_id, &segments, &runs, batch, REGIONS_IN_MEMORY).unwrap();
            let to_disk = big[..waiting.len()].iter().any(|&b| b);
            proptest::prop_assert_eq!(merged.scratch, to_disk);
            proptest::prop_assert_eq!(disk.files().iter().any(|f| f == SCRATCH), to_disk);

            let mut all: Vec<u64> = zs.iter().flatten().map(|&x| sig(x)).collect();
            all.extend(sources.iter().flatten().map(|p| p.sig));
            all.sort_unstable();
            all.dedup();
            let written: Vec<u64> = match &merged.segment {
                Some(z) => z.iter().map(|s| s.unwrap()).collect(),
                None => Vec::new(),
            };
            proptest::prop_assert_eq!(written, all);
            let in_z: std::collections::HashSet<u64> =
                zs.iter().flatten().map(|&x| sig(x)).collect();
            let mut first = std::collections::HashSet::new();
            for (i, pairs) in sources.iter().enumerate() {
                let mut want: Vec<u64> = pairs
                    .iter()
                    .filter(|p| { let s = p.sig; !in_z.contains(&s) && first.insert(s) })
                    .map(|p| u64::from(p.idx))
                    .collect();
                want.sort_unstable();
                let r = &mut merged.regions[i];
                let got: Vec<u64> = Positions::read(r, "source")
                    .unwrap()
                    .iter()
                    .collect();
                proptest::prop_assert_eq!(got, want, "source {}", i);
            }
        }
    }
}
