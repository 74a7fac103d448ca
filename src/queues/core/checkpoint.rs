//! The checkpoint of the frontier's state, so that the journal J stays short:
//!
//! ```text
//! checkpoint := magic "CRVK" u32 | version u32 | j_gen u64 | state | crc32 u32
//! state := next_seq u64 | next_run u64 | next_token u64 | done u64 | paused u8
//!        | next_crawl u32 (the id the next new crawl gets)
//!        | F position (segment u64 | offset u64 | skip u32 | consumed u64)
//!        | default policy (delay u64 | ratio u32 | per_queue u32 | limit u64)
//!        | crawls u32 x (id u32 | len u32 | name)
//!        | policies u32 x (queue u64 | policy)
//!        | blocks u32 x (queue u64 | until u64)
//!        | runs u32 x run u64
//!        | queues u32 x (id u64 | crawl v | len v | key | next_seq v | waiting v
//!                        | completed v | burst v | due v | runs v
//!                        | returned v x (seq u64 | len u32 | record)
//!                        | refetch v x (when u64 | seq u64 | len u32 | record)
//!                        | skips v x seq u64)
//!          (v: a LEB128 varint, version 12; before it crawl, len and the counts are u32,
//!           the five numbers u64, and there is no runs: docs/design.md, "Checkpoint")
//!        | leases u32 x (seq u64 | token u64 | deadline u64 | len u32 | record)
//!        | archives u32 x run u64 | released u32 x queue u64
//!        | transfers u32 x (len u32 | name | queues u32 x queue u64)
//!        | receipts u32 x (len u32 | from | seq u64)
//!        | fetched u32 x seq u64   (version 13: the leases whose fetch ended)
//! ```
//!
//! It is the state after every entry of the J generations before `j_gen`: an open loads it,
//! then replays the generations from `j_gen` on. It is written when J's generation passes a
//! size: (1) the generation is closed by an end frame and synced, and the next one created,
//! empty and durable; (2) the state is written to `CHECKPOINT.tmp`, not synced; (3) J's
//! writer moves to the new generation, and the calls go on; (4) **the switch**: the file is
//! synced, renamed over the old checkpoint, and the directory synced, on a thread of its own
//! when the frontier's flushes run in the background (its fsyncs then hold no lock; a close's
//! checkpoint, and one that gets no thread, switches on the caller's); (5) once the switch is
//! done, a later commit or hand-out removes the old generations, but for the newest, which
//! is kept as a *spare*. One checkpoint at a time: the next waits for the switch. A
//! crash before the rename is durable leaves the old checkpoint, its generations, and the
//! new one (empty, or holding the entries since (3)): the open replays them all from the old
//! checkpoint, and removes the temporary file; a crash after it leaves old generations,
//! which the next open removes.
//!
//! The next checkpoint's new generation takes the spare's file, as A's generations take
//! superseded ones (`crate::sieve::wal`): its header is rewritten and synced, then the file
//! renamed and the directory synced, all before (2). J's appends then overwrite blocks the
//! file already has, and the sync that acknowledges each change writes the data alone, not
//! the file's new size and blocks as well (on ext4, a data write and a cache flush instead of
//! those and a commit of the file system's journal). Past the new frames lie the spare's,
//! whose tag (their generation) ends the log, and every write ends with a tail mark. A crash
//! before the rename leaves the spare's file under its own name, below the checkpoint's
//! generation: the next open removes it; after the rename it is the new generation, holding
//! nothing yet.

use super::job::Job;
use super::{Core, J};
use crate::error::{Corruption, Error, Result};
use crate::format::{ByteReader, PutLe, MAGIC_K, VERSION};

/// The checkpoint's version: 13 adds the leases whose fetch ended (written only when some
/// lease's has, as 12 otherwise, which a build before reads), 12 codes each queue's numbers as varints and adds the runs
/// that may hold it (a queue took 68 bytes and its key, now 20 to 35), 11 added the receipts of deliveries, 10 added the
/// archives, the queues released and the transfers imported, 9 says that
/// the Q runs it lists may hold coded frames (its layout is version 7's), 7 added each queue's
/// skips, 6 added `next_crawl`. A checkpoint of version 11, 10, 9, 7, 6, or 4 (the store's
/// version then, its `next_crawl` taken from the ids it holds) is read; before 12, which
/// runs hold each queue is read from the runs' directories.
const CHECKPOINT_VERSION: u32 = 13;
/// The version that added the leases whose fetch ended.
const FETCHED_VERSION: u32 = 13;
/// The version that codes each queue's numbers as varints.
const CODED_QUEUES_VERSION: u32 = 12;
/// The version that added the receipts of deliveries.
const RECEIPTS_VERSION: u32 = 11;
/// The version that added the archives, the queues released and the transfers imported.
const ARCHIVES_VERSION: u32 = 10;
/// The version that added each queue's skips.
const SKIPS_VERSION: u32 = 7;
use crate::frontier::Position;
use crate::names;
use crate::queues::key::{default_key, queue_id};
use crate::queues::qrun::Run;
use crate::queues::Policy;
use crate::queues::COUNTER_LIMIT;
use crate::sieve::wal;
use crate::storage::{durable, File, Storage, StorageExt};

fn put_varint(b: &mut Vec<u8>, v: u64) {
    crate::record::put_varint(b, v);
}

fn put_bytes(b: &mut Vec<u8>, bytes: &[u8]) {
    b.put_u32(bytes.len() as u32);
    b.extend_from_slice(bytes);
}

fn put_policy(b: &mut Vec<u8>, p: &Policy) {
    b.put_u64(p.delay_ms);
    b.put_u32(p.ratio_ppm);
    b.put_u32(p.per_queue);
    b.put_u64(p.limit);
}

fn bytes<'a>(c: &mut ByteReader<'a>) -> Result<&'a [u8]> {
    let n = c.u32()? as usize;
    c.take(n)
}

fn policy(c: &mut ByteReader<'_>) -> Result<Policy> {
    Ok(Policy {
        delay_ms: c.u64()?,
        ratio_ppm: c.u32()?,
        per_queue: c.u32()?,
        limit: c.u64()?,
    })
}

/// A seq, a token, a run's id, a count of records waiting, or a counter of them: below
/// [`COUNTER_LIMIT`].
fn counter(c: &mut ByteReader<'_>, field: &'static str) -> Result<u64> {
    c.u64_below(field, COUNTER_LIMIT)
}

/// A count of items of at least `size` bytes each, which the bytes left must hold.
fn count(c: &mut ByteReader<'_>, size: usize, field: &'static str) -> Result<usize> {
    let at = c.offset();
    let n = c.u32()? as usize;
    within(c, at, n, size, field)
}

/// [`count`] as a varint (a queue's lists from version 12 on).
fn coded_count(c: &mut ByteReader<'_>, size: usize, field: &'static str) -> Result<usize> {
    let at = c.offset();
    let n = usize::try_from(c.varint(field)?).unwrap_or(usize::MAX);
    within(c, at, n, size, field)
}

/// `n`, read at `at`, if the bytes left can hold `n` items of `size` bytes.
fn within(
    c: &ByteReader<'_>,
    at: u64,
    n: usize,
    size: usize,
    field: &'static str,
) -> Result<usize> {
    if n.saturating_mul(size) > c.remaining() {
        return Err(Error::corrupt(
            names::CHECKPOINT,
            at,
            Corruption::OutOfRange {
                field,
                found: n as u64,
                limit: (c.remaining() / size + 1) as u64,
            },
        ));
    }
    Ok(n)
}

/// Switches in the checkpoint written to its temporary file `f`: sync, rename, sync of the
/// directory ([`durable::switch_in`]).
fn switch_in(st: &dyn Storage, f: File) -> Result<()> {
    if crate::planted::active(crate::planted::Bug::CheckpointUnsynced) {
        drop(f);
        durable::rename(st, &names::tmp(names::CHECKPOINT), names::CHECKPOINT)?;
        return st.sync_directory();
    }
    durable::switch_in(st, f, names::CHECKPOINT)
}

/// A checkpoint written to its temporary file, switched in on a thread of its own
/// ([`Core::checkpoint`]). Dropped without a close, its job waits for the switch before the
/// store's lock goes: the next open finds the old checkpoint or the new one, whole.
pub(super) struct Switch {
    job: Job<()>,
    /// The J generation the new checkpoint is replayed from.
    next: u64,
    /// Its length.
    len: u64,
}

impl Core {
    /// Writes the state, to be replayed from J generation `j_gen` on, into `out`, queue
    /// by queue and lease by lease: a checkpoint takes no copy of the queues and leases (the
    /// smaller lists, policies, blocks, archives, transfers and receipts, are gathered first).
    fn encode_checkpoint(&self, j_gen: u64, out: &mut Out<'_>) -> Result<()> {
        let queues = self
            .queues
            .iter()
            .zip(&self.ids)
            .enumerate()
            .map(|(i, (q, &id))| QueueImage {
                id,
                crawl: q.crawl,
                key: self.keys.get(q.key),
                next_seq: q.next_seq,
                waiting: q.waiting,
                completed: q.completed,
                burst: self.burst(i as u32),
                due: q.due,
                runs: q.runs,
                // (Only a hot queue holds lists.)
                lists: q.hot().and_then(|q| {
                    ImageLists::of(
                        q.returned().iter().map(|(s, r)| (*s, &r[..])).collect(),
                        q.refetch()
                            .iter()
                            .map(|(w, s, r)| (*w, *s, &r[..]))
                            .collect(),
                        q.skips().to_vec(),
                    )
                }),
            });
        let leases = self.leases.iter().map(|l| LeaseImage {
            seq: l.seq,
            token: l.token,
            deadline: l.deadline,
            record: &l.record,
        });
        let mut fetched: Vec<u64> = (self.leases.iter())
            .filter(|l| l.fetched)
            .map(|l| l.seq)
            .collect();
        fetched.sort_unstable();
        if crate::planted::active(crate::planted::Bug::FetchedUncheckpointed) {
            // The planted bug forgets which leases' fetches ended.
            fetched.clear();
        }
        // Version 12 unless some lease's fetch ended: a build before reads it.
        let version = if fetched.is_empty() {
            CODED_QUEUES_VERSION
        } else {
            FETCHED_VERSION
        };
        Image {
            j_gen,
            next_seq: self.next_seq,
            next_run: self.next_run,
            next_token: self.next_token,
            done: self.done,
            paused: self.paused,
            next_crawl: self.next_crawl,
            position: self.sieve.read_position(),
            default_policy: self.default_policy,
            crawls: self
                .crawl_names
                .iter()
                .map(|(id, n)| (*id, &n[..]))
                .collect(),
            policies: self.policies.iter().map(|(q, p)| (*q, *p)).collect(),
            blocks: self.blocks.iter().map(|(q, u)| (*q, *u)).collect(),
            runs: self.runs.iter().map(Run::id).collect(),
            runs_known: true,
            queues: Queues::none(),
            leases: Vec::new(),
            archives: self.archives.clone(),
            released: self.released.iter().copied().collect(),
            transfers: self
                .transfers
                .iter()
                .map(|(t, ids)| (&t[..], ids.iter().copied().collect()))
                .collect(),
            receipts: self
                .receipts
                .iter()
                .map(|(from, seq)| (&from[..], *seq))
                .collect(),
            fetched,
        }
        .encode_to(version, queues, leases, out)
    }

    /// Writes a checkpoint and moves J to a new generation (the steps of the module's
    /// documentation). A checkpoint under way is switched in first. `background`: with the
    /// frontier's flushes in the background, the switch (the new file's sync, its rename, the
    /// directory's sync) runs on a thread of its own, and a later call removes the old
    /// generations ([`Core::poll_checkpoint`]); otherwise, or when no thread can be had, here.
    pub(in crate::queues) fn checkpoint(&mut self, background: bool) -> Result<()> {
        self.writable()?;
        self.settle_checkpoint()?;
        let st = self.sieve.storage().clone();
        let next = self.j_gen + 1;
        let r = (|| {
            // 1. The generation is closed (an end frame: whole, when the next one follows),
            // and the next one created.
            self.writer().finish()?;
            self.sync_journal()?;
            let writer = wal::create_of(J, &*st, next, self.j_spare.take())?;
            // 2. The state, written to the checkpoint's temporary file (not synced yet).
            let f = st.create_file(&names::tmp(names::CHECKPOINT))?;
            let mut out = Out::to_file(&f);
            self.encode_checkpoint(next, &mut out)?;
            let len = out.finish()?.1;
            Ok((writer, f, len))
        })();
        let (writer, f, len) = match r {
            Ok(done) => done,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };
        // 3. J's entries from here on go to the new generation: the old ones stay until the
        // new checkpoint is switched in (a crash before that replays them from the old one).
        drop(self.journal.replace(writer.synced_by_others()));
        self.j_gen = next;
        self.j_groups = 0;
        // 4. The switch.
        let mut f = f;
        if background && self.background {
            let to = st.clone();
            match Job::spawn("crivello-checkpoint", f, move |f: File| switch_in(&*to, f)) {
                Ok(job) => {
                    self.switching = Some(Switch { job, next, len });
                    return Ok(());
                }
                // No thread could be had: the switch is made here.
                Err(back) => f = back,
            }
        }
        if let Err(e) = switch_in(&*st, f) {
            return Err(self.poison_now(e));
        }
        self.switched(next, len);
        Ok(())
    }

    /// Poisons the frontier, and gives `e` back.
    fn poison_now(&mut self, e: Error) -> Error {
        self.poisoned = true;
        e
    }

    /// Step 5, once the checkpoint replayed from generation `next` on (of `len` bytes) is
    /// switched in: the generations before `next` go, but for the newest, kept as a spare.
    fn switched(&mut self, next: u64, len: u64) {
        self.checkpoint_bytes = len;
        self.remove_replaced_gens(next);
    }

    /// Removes J's generations before `next`, but for the newest, kept as a spare.
    fn remove_replaced_gens(&mut self, next: u64) {
        let st = self.sieve.storage().clone();
        for g in self.first_j_gen..next {
            if g + 1 == next && self.j_spare.is_none() {
                self.j_spare = Some(g);
            } else {
                let _ = st.remove_file(&names::j(g));
            }
        }
        self.first_j_gen = self.first_j_gen.max(next);
    }

    /// Completes the checkpoint under way once its switch is done (a no-op while it runs,
    /// or when none is under way).
    pub(super) fn poll_checkpoint(&mut self) -> Result<()> {
        match &self.switching {
            Some(s) if s.job.finished() => self.settle_checkpoint(),
            _ => Ok(()),
        }
    }

    /// Waits for the switch of the checkpoint under way, if any, and completes it: none is
    /// under way when this returns. A failed switch poisons the frontier.
    pub(super) fn settle_checkpoint(&mut self) -> Result<()> {
        let Some(mut s) = self.switching.take() else {
            return Ok(());
        };
        match s.job.join() {
            Ok(()) => {
                self.switched(s.next, s.len);
                Ok(())
            }
            Err(e) => Err(self.poison_now(e)),
        }
    }

    /// Loads checkpoint `k` ([`decode`]: decoded and checked whole, so that nothing of a
    /// damaged checkpoint is used), if there is one, of `len` bytes, but for the runs that
    /// the replay will find removed (`replay_gone`).
    pub(in crate::queues) fn load_checkpoint(
        &mut self,
        st: &dyn Storage,
        k: Option<Image<'_>>,
        len: u64,
    ) -> Result<()> {
        let Some(k) = k else {
            return Ok(());
        };
        self.checkpoint_bytes = len;
        self.next_seq = k.next_seq;
        self.next_run = k.next_run;
        self.next_token = k.next_token;
        self.done = k.done;
        self.paused = k.paused;
        self.next_crawl = k.next_crawl;
        self.sieve
            .seek_read(k.position)
            .map_err(|what| Error::corrupt(names::CHECKPOINT, 0, what))?;
        self.default_policy = k.default_policy;
        // The checkpoint lists every crawl: DEFAULT is missing once deleted.
        self.crawls.clear();
        self.crawl_names.clear();
        for (id, name) in k.crawls {
            self.crawls.insert(name.to_vec(), id);
            self.next_crawl = self.next_crawl.max(id.saturating_add(1));
            self.crawl_names.insert(id, name.to_vec());
        }
        self.policies.extend(k.policies);
        self.blocks.extend(k.blocks);
        self.archives = k.archives;
        self.released = k.released.into_iter().collect();
        self.transfers = k
            .transfers
            .into_iter()
            .map(|(t, ids)| (t.to_vec(), ids.into_iter().collect()))
            .collect();
        self.receipts = k
            .receipts
            .into_iter()
            .map(|(from, seq)| (from.to_vec(), seq))
            .collect();
        // Each of the checkpoint's runs kept, by its slot here.
        let mut slot_of = Vec::with_capacity(k.runs.len());
        for &id in &k.runs {
            // A run a later compaction removed: its file may be gone; the compaction's entry
            // says what waits (and it reads the runs' directories again).
            if self.replay_gone.as_ref().is_some_and(|g| g.contains(&id)) {
                slot_of.push(None);
            } else {
                slot_of.push(Some(self.runs.len()));
                self.runs.push(Run::open(st, id)?);
            }
        }
        let same_slots = slot_of.iter().enumerate().all(|(j, &s)| s == Some(j));
        // Room for every queue at once (doubled tables would hold up to twice it).
        let more = k.queues.len().saturating_sub(self.queues.len());
        self.queues.reserve(more);
        self.ids.reserve_exact(more);
        self.keys.reserve(k.queues.key_bytes);
        // The checkpoint's ids are unique (the decoding checked them), and the load comes
        // first at an open, into a frontier with no queue yet: each is made with no look-up,
        // and the index is filled once all are made.
        debug_assert!(
            self.queues.is_empty(),
            "a checkpoint loads into a new frontier"
        );
        // The leases' queues, found first: every other queue is scheduled as it is made
        // (its state coded once), these once their leases are in.
        let mut leased = Vec::with_capacity(k.leases.len());
        for l in &k.leases {
            let located = self
                .locate(l.record)
                .map_err(|what| Error::corrupt(names::CHECKPOINT, 0, what))?;
            leased.push(located);
        }
        let mut leased_ids: Vec<u64> = leased.iter().map(|&(qid, _, _)| qid).collect();
        leased_ids.sort_unstable();
        leased_ids.dedup();
        let first = self.queues.len() as u32;
        for q in k.queues.iter() {
            let q = q?;
            let terms = match leased_ids.binary_search(&q.id) {
                Ok(_) => None,
                Err(_) => Some((
                    self.policy(q.id),
                    self.blocks.get(&q.id).copied().unwrap_or(0),
                )),
            };
            let mut entry = None;
            let i = self.new_queue_filled(q.id, q.crawl, q.key, |s| {
                s.next_seq = q.next_seq;
                s.waiting = q.waiting;
                s.completed = q.completed;
                s.due = q.due;
                s.runs = match same_slots {
                    true => q.runs,
                    false => remap_runs(q.runs, &slot_of),
                };
                s.lists = q.lists.map(|l| {
                    Box::new(super::Lists {
                        returned: l.returned.iter().map(|&(seq, r)| (seq, r.into())).collect(),
                        refetch: l
                            .refetch
                            .iter()
                            .map(|&(when, seq, r)| (when, seq, r.into()))
                            .collect(),
                        skips: l.skips,
                    })
                });
                if let Some((policy, blocked)) = terms {
                    entry = s.schedule(policy, blocked);
                }
            });
            self.push_entry(i, entry);
            self.set_burst(i, q.burst);
        }
        let ids = &self.ids;
        self.index
            .insert_places(first, ids.len() as u32, |j| ids[j as usize]);
        let given = self.now_ms();
        for (l, (qid, crawl, sig)) in k.leases.into_iter().zip(leased) {
            let queue = self.place(qid).expect("checked by the decoding");
            self.insert_lease(
                l.seq,
                l.token,
                l.deadline,
                queue,
                crawl,
                sig,
                l.record.into(),
                given,
            );
        }
        for seq in k.fetched {
            self.leases.set_fetched(seq);
            let i = self.leases.get(seq).expect("checked by the decoding").queue;
            self.queues.get_mut(i).fetched += 1;
        }
        // Which runs hold each queue: from their directories, unless the checkpoint says.
        if !k.runs_known {
            let runs = self.runs.clone();
            for (slot, run) in runs.iter().enumerate() {
                self.for_each_group(run, |core, i, _| {
                    core.queues.update(i, |q| q.runs |= 1 << slot);
                })?;
            }
        }
        // In the order of their places, as the others were: neighbours share a heap key.
        let mut places: Vec<u32> = (leased_ids.iter())
            .map(|&qid| self.place(qid).expect("checked by the decoding"))
            .collect();
        places.sort_unstable();
        for i in places {
            self.schedule(i);
        }
        Ok(())
    }
}

/// A queue as the checkpoint holds it.
#[derive(Clone)]
pub(in crate::queues) struct QueueImage<'a> {
    id: u64,
    crawl: u32,
    key: &'a [u8],
    next_seq: u64,
    waiting: u64,
    completed: u64,
    burst: u64,
    due: u64,
    /// The runs that may hold its records: bit `j` for the checkpoint's `j`-th run.
    runs: u64,
    /// Its lists, empty in most queues: out of line.
    lists: Option<Box<ImageLists<'a>>>,
}

/// A queue's records out of the runs, and the seqs it passes in them, as the checkpoint
/// holds them.
#[derive(Default, Clone)]
pub(in crate::queues) struct ImageLists<'a> {
    returned: Vec<(u64, &'a [u8])>,
    refetch: Vec<(u64, u64, &'a [u8])>,
    skips: Vec<u64>,
}

impl<'a> ImageLists<'a> {
    /// The lists, `None` when all three are empty.
    fn of(
        returned: Vec<(u64, &'a [u8])>,
        refetch: Vec<(u64, u64, &'a [u8])>,
        skips: Vec<u64>,
    ) -> Option<Box<ImageLists<'a>>> {
        (!(returned.is_empty() && refetch.is_empty() && skips.is_empty())).then(|| {
            Box::new(ImageLists {
                returned,
                refetch,
                skips,
            })
        })
    }
}

impl<'a> QueueImage<'a> {
    fn returned(&self) -> &[(u64, &'a [u8])] {
        self.lists.as_ref().map_or(&[], |l| &l.returned)
    }

    fn refetch(&self) -> &[(u64, u64, &'a [u8])] {
        self.lists.as_ref().map_or(&[], |l| &l.refetch)
    }

    fn skips(&self) -> &[u64] {
        self.lists.as_ref().map_or(&[], |l| &l.skips)
    }
}

/// A lease as the checkpoint holds it.
#[derive(Clone, Copy)]
struct LeaseImage<'a> {
    seq: u64,
    token: u64,
    deadline: u64,
    record: &'a [u8],
}

/// A checkpoint, decoded and checked whole (its checksum first, then every field, every
/// record, and the queue of every lease), so that a load uses nothing of a damaged one and
/// `check` finds what a load would.
pub(in crate::queues) struct Image<'a> {
    j_gen: u64,
    next_seq: u64,
    next_run: u64,
    next_token: u64,
    done: u64,
    paused: bool,
    next_crawl: u32,
    position: Position,
    default_policy: Policy,
    crawls: Vec<(u32, &'a [u8])>,
    policies: Vec<(u64, Policy)>,
    blocks: Vec<(u64, u64)>,
    runs: Vec<u64>,
    /// Whether each queue's `runs` says which runs may hold it (version 12): else the load
    /// reads the runs' directories.
    runs_known: bool,
    queues: Queues<'a>,
    leases: Vec<LeaseImage<'a>>,
    archives: Vec<u64>,
    released: Vec<u64>,
    transfers: Vec<(&'a [u8], Vec<u64>)>,
    receipts: Vec<(&'a [u8], u64)>,
    /// The seqs of the leases whose fetch ended, in order (version 13).
    fetched: Vec<u64>,
}

impl<'a> Image<'a> {
    /// The checkpoint's bytes, in the layout of `version` (what an older one has no field
    /// for is left out). Not as version 12 from a checkpoint of an older one, which does
    /// not say which runs hold each queue.
    fn encode(&self, version: u32) -> Result<Vec<u8>> {
        assert!(
            self.runs_known || version < CODED_QUEUES_VERSION,
            "a checkpoint of an older version rewritten as version {version}"
        );
        let mut out = Out::to_memory();
        self.encode_to(
            version,
            self.queues.images(),
            self.leases.iter().copied(),
            &mut out,
        )?;
        Ok(out.finish()?.0)
    }

    /// Writes the checkpoint into `out` in the layout of `version`, with `queues` and
    /// `leases` in place of the image's own lists.
    fn encode_to(
        &self,
        version: u32,
        queues: impl ExactSizeIterator<Item = QueueImage<'a>>,
        leases: impl ExactSizeIterator<Item = LeaseImage<'a>>,
        out: &mut Out<'_>,
    ) -> Result<()> {
        let b = &mut out.b;
        b.put_u32(MAGIC_K);
        b.put_u32(version);
        b.put_u64(self.j_gen);
        for v in [self.next_seq, self.next_run, self.next_token, self.done] {
            b.put_u64(v);
        }
        b.push(u8::from(self.paused));
        if version >= 6 {
            b.put_u32(self.next_crawl);
        }
        let f = self.position;
        b.put_u64(f.segment);
        b.put_u64(f.offset);
        b.put_u32(f.skip);
        b.put_u64(f.consumed);
        put_policy(b, &self.default_policy);
        b.put_u32(self.crawls.len() as u32);
        for (id, name) in &self.crawls {
            b.put_u32(*id);
            put_bytes(b, name);
        }
        b.put_u32(self.policies.len() as u32);
        for (q, p) in &self.policies {
            b.put_u64(*q);
            put_policy(b, p);
        }
        b.put_u32(self.blocks.len() as u32);
        for (q, until) in &self.blocks {
            b.put_u64(*q);
            b.put_u64(*until);
        }
        b.put_u32(self.runs.len() as u32);
        for r in &self.runs {
            b.put_u64(*r);
        }
        b.put_u32(queues.len() as u32);
        let coded = version >= CODED_QUEUES_VERSION;
        // A count, or one of a queue's numbers: a varint from version 12 on.
        let put_n = |b: &mut Vec<u8>, n: u64, old: fn(&mut Vec<u8>, u64)| match coded {
            true => put_varint(b, n),
            false => old(b, n),
        };
        let u32_of = |b: &mut Vec<u8>, n: u64| b.put_u32(n as u32);
        let u64_of = |b: &mut Vec<u8>, n: u64| b.put_u64(n);
        for q in queues {
            let b = &mut out.b;
            b.put_u64(q.id);
            put_n(b, u64::from(q.crawl), u32_of);
            put_n(b, q.key.len() as u64, u32_of);
            b.extend_from_slice(q.key);
            for v in [q.next_seq, q.waiting, q.completed, q.burst, q.due] {
                put_n(b, v, u64_of);
            }
            if coded {
                put_varint(b, q.runs);
            }
            put_n(b, q.returned().len() as u64, u32_of);
            for (seq, rec) in q.returned() {
                b.put_u64(*seq);
                put_bytes(b, rec);
            }
            put_n(b, q.refetch().len() as u64, u32_of);
            for (when, seq, rec) in q.refetch() {
                b.put_u64(*when);
                b.put_u64(*seq);
                put_bytes(b, rec);
            }
            if version >= SKIPS_VERSION {
                put_n(b, q.skips().len() as u64, u32_of);
                for seq in q.skips() {
                    b.put_u64(*seq);
                }
            }
            out.spill()?;
        }
        let b = &mut out.b;
        b.put_u32(leases.len() as u32);
        for l in leases {
            let b = &mut out.b;
            b.put_u64(l.seq);
            b.put_u64(l.token);
            b.put_u64(l.deadline);
            put_bytes(b, l.record);
            out.spill()?;
        }
        let b = &mut out.b;
        if version >= ARCHIVES_VERSION {
            b.put_u32(self.archives.len() as u32);
            for r in &self.archives {
                b.put_u64(*r);
            }
            b.put_u32(self.released.len() as u32);
            for q in &self.released {
                b.put_u64(*q);
            }
            b.put_u32(self.transfers.len() as u32);
            for (t, ids) in &self.transfers {
                put_bytes(b, t);
                b.put_u32(ids.len() as u32);
                for q in ids {
                    b.put_u64(*q);
                }
            }
        }
        if version >= RECEIPTS_VERSION {
            b.put_u32(self.receipts.len() as u32);
            for (from, seq) in &self.receipts {
                put_bytes(b, from);
                b.put_u64(*seq);
            }
        }
        if version >= FETCHED_VERSION {
            b.put_u32(self.fetched.len() as u32);
            for seq in &self.fetched {
                b.put_u64(*seq);
            }
        }
        Ok(())
    }
}

/// Where a checkpoint is encoded: a buffer that, when it has a file, is written out each
/// time it holds [`SPILL_BYTES`], its checksum kept as it goes.
struct Out<'f> {
    b: Vec<u8>,
    crc: crc32fast::Hasher,
    file: Option<&'f File>,
    /// The bytes written to the file so far.
    at: u64,
}

/// How much of a checkpoint is buffered before it is written.
const SPILL_BYTES: usize = 1 << 20;

impl<'f> Out<'f> {
    /// An encoding kept whole in memory.
    fn to_memory() -> Out<'static> {
        Out {
            b: Vec::with_capacity(1 << 16),
            crc: crc32fast::Hasher::new(),
            file: None,
            at: 0,
        }
    }

    /// An encoding written into `file` from its start.
    fn to_file(file: &'f File) -> Out<'f> {
        Out {
            b: Vec::with_capacity(SPILL_BYTES + (1 << 16)),
            crc: crc32fast::Hasher::new(),
            file: Some(file),
            at: 0,
        }
    }

    /// Writes the buffer out if it holds [`SPILL_BYTES`] and there is a file.
    fn spill(&mut self) -> Result<()> {
        match self.file {
            Some(f) if self.b.len() >= SPILL_BYTES => {
                self.crc.update(&self.b);
                f.write_all_at(&self.b, self.at)?;
                self.at += self.b.len() as u64;
                self.b.clear();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Appends the checksum of everything encoded (as [`crate::format::seal`] does) and writes the rest to
    /// the file, if any; returns what stays in memory (the whole encoding when there is no
    /// file) and the length of the whole encoding.
    fn finish(mut self) -> Result<(Vec<u8>, u64)> {
        self.crc.update(&self.b);
        let c = self.crc.finalize();
        self.b.put_u32(c);
        if let Some(f) = self.file {
            f.write_all_at(&self.b, self.at)?;
        }
        let len = self.at + self.b.len() as u64;
        Ok((self.b, len))
    }
}

/// Checkpoint `bytes` rewritten in the layout of an older `version` (4, 6, 7, 9, 10 or 11),
/// as a store of that version wrote it: for the tests of the reading of old checkpoints.
pub(crate) fn in_version(bytes: &[u8], version: u32) -> Result<Vec<u8>> {
    Image::decode(bytes)?.encode(version)
}

/// A value no sound checkpoint holds, at `at`.
fn invalid(at: u64, field: &'static str, found: u64) -> Error {
    Error::corrupt(
        names::CHECKPOINT,
        at,
        Corruption::Invalid {
            field,
            expected: "in order, below the next seq, and unique",
            found,
        },
    )
}

/// A record of queue `queue` in the checkpoint: it must decode and be of that queue.
fn queue_record<'a>(c: &mut ByteReader<'a>, queue: u64) -> Result<&'a [u8]> {
    let at = c.offset();
    let rec = record_at(c)?;
    let r = crate::record::decode(rec).expect("checked by record_at");
    let found = queue_id(r.crawl, r.key.unwrap_or_else(|| default_key(r.url)));
    if found != queue {
        return Err(Error::corrupt(
            names::CHECKPOINT,
            at,
            Corruption::Mismatch {
                field: "queue of a record",
                expected: queue,
                found,
            },
        ));
    }
    Ok(rec)
}

/// A record of the checkpoint, which must decode.
fn record_at<'a>(c: &mut ByteReader<'a>) -> Result<&'a [u8]> {
    let at = c.offset();
    let rec = bytes(c)?;
    crate::record::decode(rec).map_err(|what| Error::corrupt(names::CHECKPOINT, at, what))?;
    Ok(rec)
}

impl<'a> Image<'a> {
    fn decode(all: &'a [u8]) -> Result<Image<'a>> {
        let mut c = ByteReader::new(all, names::CHECKPOINT, 0);
        c.magic(MAGIC_K)?;
        let version = c.version_between(VERSION, CHECKPOINT_VERSION)?;
        if ![
            VERSION,
            6,
            SKIPS_VERSION,
            9,
            ARCHIVES_VERSION,
            RECEIPTS_VERSION,
            CODED_QUEUES_VERSION,
            FETCHED_VERSION,
        ]
        .contains(&version)
        {
            return Err(Error::corrupt(
                names::CHECKPOINT,
                4,
                Corruption::Version {
                    expected: CHECKPOINT_VERSION,
                    found: version,
                },
            ));
        }
        if all.len() < 12 {
            return Err(Error::corrupt(
                names::CHECKPOINT,
                0,
                Corruption::Truncated {
                    needed: 12,
                    available: all.len() as u64,
                },
            ));
        }
        let body = &all[..all.len() - 4];
        let mut tail = ByteReader::new(all, names::CHECKPOINT, 0);
        tail.take(body.len())?;
        tail.check_crc()?;
        let mut c = ByteReader::new(body, names::CHECKPOINT, 0);
        c.take(8)?;
        let j_gen = c.u64()?;
        let next_seq = counter(&mut c, "next seq")?;
        let next_run = counter(&mut c, "next run")?;
        let next_token = counter(&mut c, "next token")?;
        let done = c.u64()?;
        let at = c.offset();
        let paused = match c.take(1)?[0] {
            0 => false,
            1 => true,
            found => {
                return Err(Error::corrupt(
                    names::CHECKPOINT,
                    at,
                    Corruption::Invalid {
                        field: "pause flag",
                        expected: "0 or 1",
                        found: found.into(),
                    },
                ))
            }
        };
        // Version 4 has no next_crawl: the load takes it above every id it finds.
        let next_crawl = if version >= 6 { c.u32()? } else { 0 };
        let position = Position {
            segment: c.u64()?,
            offset: c.u64()?,
            skip: c.u32()?,
            consumed: c.u64()?,
        };
        let default_policy = policy(&mut c)?;
        if default_policy.per_queue == 0 || default_policy.ratio_ppm > 1_000_000 {
            return Err(Error::corrupt(
                names::CHECKPOINT,
                0,
                Corruption::Invalid {
                    field: "default policy",
                    expected: "per_queue at least 1, a ratio at most 1",
                    found: u64::from(default_policy.per_queue),
                },
            ));
        }
        let mut k = Image {
            j_gen,
            next_seq,
            next_run,
            next_token,
            done,
            paused,
            next_crawl,
            position,
            default_policy,
            crawls: Vec::new(),
            policies: Vec::new(),
            blocks: Vec::new(),
            runs: Vec::new(),
            runs_known: version >= CODED_QUEUES_VERSION,
            queues: Queues::none(),
            leases: Vec::new(),
            archives: Vec::new(),
            released: Vec::new(),
            transfers: Vec::new(),
            receipts: Vec::new(),
            fetched: Vec::new(),
        };
        for _ in 0..count(&mut c, 8, "crawls")? {
            let id = c.u32()?;
            k.crawls.push((id, bytes(&mut c)?));
        }
        for _ in 0..count(&mut c, 32, "policies")? {
            let q = c.u64()?;
            k.policies.push((q, policy(&mut c)?));
        }
        for _ in 0..count(&mut c, 16, "blocks")? {
            k.blocks.push((c.u64()?, c.u64()?));
        }
        let at = c.offset();
        for _ in 0..count(&mut c, 8, "runs")? {
            k.runs.push(counter(&mut c, "run")?);
        }
        // A frontier holds at most 64 runs (a queue's bitmap of them is a u64).
        if k.runs.len() > 64 {
            return Err(Error::corrupt(
                names::CHECKPOINT,
                at,
                Corruption::OutOfRange {
                    field: "runs",
                    found: k.runs.len() as u64,
                    limit: 65,
                },
            ));
        }
        // The queues' ids; the seqs of the records out of the queues' FIFOs (returned, to
        // fetch again, leased), each below the frontier's next seq and none twice (a record
        // to fetch again after a known update may have a seq past its queue's next one).
        let mut out = std::collections::HashSet::new();
        let coded = version >= CODED_QUEUES_VERSION;
        // A queue's fewest bytes: its id, then a byte each for its crawl, its key's length,
        // its five numbers, its runs and its three counts (version 12); before, fixed sizes.
        let least = if coded { 19 } else { 64 };
        let layout = QueueLayout {
            version,
            next_seq: k.next_seq,
            runs: k.runs.len(),
        };
        let n = count(&mut c, least, "queues")?;
        k.queues = Queues {
            bytes: &body[c.offset() as usize..],
            at: c.offset(),
            count: n,
            key_bytes: 0,
            layout,
        };
        // Each queue is checked here and read again by a load, one at a time: at 10^6 queues
        // their images would take 80 MB at once. Their ids, sorted, find duplicates and the
        // leases' queues.
        let mut ids = Vec::with_capacity(n);
        let mut queued = Some(0u64);
        for _ in 0..n {
            let q = read_queue(&mut c, layout, Some(&mut out))?;
            ids.push(q.id);
            k.queues.key_bytes += q.key.len();
            queued = queued
                .and_then(|t| t.checked_add(q.waiting))
                .and_then(|t| t.checked_add((q.returned().len() + q.refetch().len()) as u64))
                .filter(|_| q.next_seq <= k.next_seq);
        }
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(k.queues.repeated(w[0]));
        }
        for _ in 0..count(&mut c, 28, "leases")? {
            let at = c.offset();
            let seq = c.u64()?;
            let token = counter(&mut c, "token of a lease")?;
            let deadline = c.u64()?;
            let record = record_at(&mut c)?;
            let r = crate::record::decode(record).expect("checked by record_at");
            let key = r.key.unwrap_or_else(|| default_key(r.url));
            let qid = queue_id(r.crawl, key);
            if ids.binary_search(&qid).is_err() {
                return Err(Error::corrupt(
                    names::CHECKPOINT,
                    at,
                    Corruption::Invalid {
                        field: "lease's queue",
                        expected: "a queue of the checkpoint",
                        found: qid,
                    },
                ));
            }
            if seq >= k.next_seq || !out.insert(seq) {
                return Err(invalid(at, "seq of a leased record", seq));
            }
            k.leases.push(LeaseImage {
                seq,
                token,
                deadline,
                record,
            });
        }
        if version >= ARCHIVES_VERSION {
            for _ in 0..count(&mut c, 8, "archives")? {
                let at = c.offset();
                let id = c.u64()?;
                if id == 0 || id >= k.next_run || k.archives.last().is_some_and(|&p| p >= id) {
                    return Err(Error::corrupt(
                        names::CHECKPOINT,
                        at,
                        Corruption::Invalid {
                            field: "archive's run",
                            expected: "in order, from 1 and below the next run",
                            found: id,
                        },
                    ));
                }
                k.archives.push(id);
            }
            for _ in 0..count(&mut c, 8, "queues released")? {
                k.released.push(c.u64()?);
            }
            for _ in 0..count(&mut c, 8, "transfers")? {
                let name = bytes(&mut c)?;
                let mut ids = Vec::new();
                for _ in 0..count(&mut c, 8, "queues of a transfer")? {
                    ids.push(c.u64()?);
                }
                k.transfers.push((name, ids));
            }
        }
        if version >= RECEIPTS_VERSION {
            for _ in 0..count(&mut c, 12, "receipts")? {
                let from = bytes(&mut c)?;
                k.receipts.push((from, c.u64()?));
            }
        }
        if version >= FETCHED_VERSION {
            // Seqs of leases of the checkpoint, in order and none twice.
            let mut leased: Vec<u64> = k.leases.iter().map(|l| l.seq).collect();
            leased.sort_unstable();
            for _ in 0..count(&mut c, 8, "leases whose fetch ended")? {
                let at = c.offset();
                let seq = c.u64()?;
                if leased.binary_search(&seq).is_err() || k.fetched.last() >= Some(&seq) {
                    return Err(Error::corrupt(
                        names::CHECKPOINT,
                        at,
                        Corruption::Invalid {
                            field: "lease whose fetch ended",
                            expected: "a lease of the checkpoint, in order",
                            found: seq,
                        },
                    ));
                }
                k.fetched.push(seq);
            }
        }
        c.end()?;
        // Every record out of the Q runs, and every one waiting in them, has its own seq below
        // the frontier's next seq: so their counts add up to no more than it. (The queues are
        // read again only to name the first one past it.)
        let total = queued.and_then(|t| t.checked_add(k.leases.len() as u64));
        if total.is_none_or(|t| t > k.next_seq) {
            return Err(k.too_many_records());
        }
        Ok(k)
    }

    /// The error of the queues whose records, with the leases, outnumber the frontier's next
    /// seq, or one of whose next seqs is past it: it names the first queue where the count
    /// goes past.
    fn too_many_records(&self) -> Error {
        let mut total = self.leases.len() as u64;
        for q in self.queues.iter() {
            let q = match q {
                Ok(q) => q,
                Err(e) => return e,
            };
            let queue = q
                .waiting
                .checked_add((q.returned().len() + q.refetch().len()) as u64);
            total = match queue.and_then(|n| total.checked_add(n)) {
                Some(t) if q.next_seq <= self.next_seq && t <= self.next_seq => t,
                _ => return too_many(q.id),
            };
        }
        too_many(0)
    }
}

/// What reading a queue of a checkpoint needs of the rest of it.
#[derive(Clone, Copy)]
struct QueueLayout {
    version: u32,
    /// The frontier's next seq.
    next_seq: u64,
    /// The checkpoint's runs.
    runs: usize,
}

/// The queues of a checkpoint: checked whole by its decoding, then read again one at a time
/// ([`Queues::iter`]).
#[derive(Clone, Copy)]
pub(in crate::queues) struct Queues<'a> {
    /// The checkpoint's bytes from the first queue on.
    bytes: &'a [u8],
    /// Their offset in the file.
    at: u64,
    count: usize,
    /// The bytes of their keys.
    key_bytes: usize,
    layout: QueueLayout,
}

impl<'a> Queues<'a> {
    fn none() -> Queues<'a> {
        Queues {
            bytes: &[],
            at: 0,
            count: 0,
            key_bytes: 0,
            layout: QueueLayout {
                version: CHECKPOINT_VERSION,
                next_seq: 0,
                runs: 0,
            },
        }
    }

    /// How many.
    fn len(&self) -> usize {
        self.count
    }

    /// Each queue, in the checkpoint's order (the seqs of their lists no longer checked for
    /// repeats: the decoding did).
    fn iter(&self) -> impl ExactSizeIterator<Item = Result<QueueImage<'a>>> + 'a {
        let mut c = ByteReader::new(self.bytes, names::CHECKPOINT, self.at);
        let layout = self.layout;
        (0..self.count).map(move |_| read_queue(&mut c, layout, None))
    }

    /// The images, for a checkpoint decoded already (which checked each).
    fn images(&self) -> impl ExactSizeIterator<Item = QueueImage<'a>> + 'a {
        self.iter().map(|q| q.expect("checked by the decoding"))
    }

    /// The error of a queue id listed twice, at its second place.
    fn repeated(&self, id: u64) -> Error {
        let mut c = ByteReader::new(self.bytes, names::CHECKPOINT, self.at);
        let mut seen = false;
        for _ in 0..self.count {
            let at = c.offset();
            match read_queue(&mut c, self.layout, None) {
                Ok(q) if q.id == id && seen => return invalid(at, "id of a queue", id),
                Ok(q) => seen |= q.id == id,
                Err(e) => return e,
            }
        }
        invalid(self.at, "id of a queue", id)
    }
}

/// Reads and checks a queue of a checkpoint of `layout` at `c`; `out`, the seqs of the
/// records out of the runs so far (each at most once), takes its lists' seqs. Without `out`
/// the queue is read again after the decoding checked it: its id is not hashed again, nor
/// its seqs looked up.
fn read_queue<'a>(
    c: &mut ByteReader<'a>,
    layout: QueueLayout,
    mut out: Option<&mut std::collections::HashSet<u64>>,
) -> Result<QueueImage<'a>> {
    let version = layout.version;
    let coded = version >= CODED_QUEUES_VERSION;
    let lists = |c: &mut ByteReader<'a>, size, field| match coded {
        true => coded_count(c, size, field),
        false => count(c, size, field),
    };
    let at = c.offset();
    let (id, crawl, key) = if coded {
        let id = c.u64()?;
        let crawl_at = c.offset();
        let crawl = c.varint("crawl of a queue")?;
        let crawl = u32::try_from(crawl).map_err(|_| {
            Error::corrupt(
                names::CHECKPOINT,
                crawl_at,
                Corruption::OutOfRange {
                    field: "crawl of a queue",
                    found: crawl,
                    limit: u64::from(u32::MAX) + 1,
                },
            )
        })?;
        let len = c.varint("length of a queue's key")?;
        (
            id,
            crawl,
            c.take(usize::try_from(len).unwrap_or(usize::MAX))?,
        )
    } else {
        let (id, crawl) = (c.u64()?, c.u32()?);
        (id, crawl, bytes(c)?)
    };
    // Read again (no `out`), it was checked by the decoding.
    if out.is_some() && queue_id(crawl, key) != id {
        return Err(Error::corrupt(
            names::CHECKPOINT,
            at,
            Corruption::Mismatch {
                field: "id of a queue",
                expected: queue_id(crawl, key),
                found: id,
            },
        ));
    }
    let next_seq = if coded {
        let at = c.offset();
        let n = c.varint("next seq of a queue")?;
        if n >= COUNTER_LIMIT {
            return Err(Error::corrupt(
                names::CHECKPOINT,
                at,
                Corruption::OutOfRange {
                    field: "next seq of a queue",
                    found: n,
                    limit: COUNTER_LIMIT,
                },
            ));
        }
        n
    } else {
        counter(c, "next seq of a queue")?
    };
    let mut number = |field| match coded {
        true => c.varint(field),
        false => c.u64(),
    };
    let mut q = QueueImage {
        id,
        crawl,
        key,
        next_seq,
        waiting: number("records waiting in a queue")?,
        completed: number("records done in a queue")?,
        burst: number("burst of a queue")?,
        due: number("due instant of a queue")?,
        runs: 0,
        lists: None,
    };
    if coded {
        let at = c.offset();
        q.runs = c.varint("runs of a queue")?;
        if q.runs.checked_shr(layout.runs as u32).unwrap_or(0) != 0 {
            return Err(Error::corrupt(
                names::CHECKPOINT,
                at,
                Corruption::Invalid {
                    field: "runs of a queue",
                    expected: "bits of the checkpoint's runs",
                    found: q.runs,
                },
            ));
        }
    }
    let mut l = ImageLists::default();
    for _ in 0..lists(c, 12, "returned records")? {
        let at = c.offset();
        let seq = c.u64()?;
        let rec = queue_record(c, id)?;
        let ordered = l.returned.last().is_none_or(|&(s, _)| s < seq);
        if !ordered || seq >= layout.next_seq || !out.as_mut().is_none_or(|o| o.insert(seq)) {
            return Err(invalid(at, "seq of a returned record", seq));
        }
        l.returned.push((seq, rec));
    }
    for _ in 0..lists(c, 20, "records to fetch again")? {
        let at = c.offset();
        let (when, seq) = (c.u64()?, c.u64()?);
        let rec = queue_record(c, id)?;
        let ordered = l
            .refetch
            .last()
            .is_none_or(|&(w, s, _)| (w, s) < (when, seq));
        if !ordered || seq >= layout.next_seq || !out.as_mut().is_none_or(|o| o.insert(seq)) {
            return Err(invalid(at, "seq of a record to fetch again", seq));
        }
        l.refetch.push((when, seq, rec));
    }
    if version >= SKIPS_VERSION {
        for _ in 0..lists(c, 8, "skips")? {
            let at = c.offset();
            let seq = c.u64()?;
            let ordered = l.skips.last().is_none_or(|&s| s < seq);
            if !ordered || seq < q.next_seq || seq >= layout.next_seq {
                return Err(invalid(at, "seq of a record skipped", seq));
            }
            l.skips.push(seq);
        }
    }
    q.lists = ImageLists::of(l.returned, l.refetch, l.skips);
    Ok(q)
}

/// The error of a checkpoint whose queues (the first past the count: `id`) hold more records
/// than the frontier's next seq.
fn too_many(id: u64) -> Error {
    Error::corrupt(
        names::CHECKPOINT,
        0,
        Corruption::Invalid {
            field: "records of the queues",
            expected: "fewer than the frontier's next seq",
            found: id,
        },
    )
}

/// A queue's bitmap of the checkpoint's runs (`bits`, below `2^slot_of.len()`) as one of the
/// runs kept: run `j` of the checkpoint is at slot `slot_of[j]`, or gone (`None`).
fn remap_runs(bits: u64, slot_of: &[Option<usize>]) -> u64 {
    slot_of
        .iter()
        .enumerate()
        .filter(|&(j, _)| bits >> j & 1 != 0)
        .filter_map(|(_, &slot)| slot)
        .fold(0, |out, slot| out | 1 << slot)
}

/// Checkpoint `bytes` decoded and checked whole: what an open loads, the first J generation
/// to replay after it among them.
pub(in crate::queues) fn decode(bytes: &[u8]) -> Result<Image<'_>> {
    Image::decode(bytes)
}

impl Image<'_> {
    /// The first J generation to replay after it.
    pub(in crate::queues) fn j_gen(&self) -> u64 {
        self.j_gen
    }
}

/// The first J generation to replay after checkpoint `bytes`, and the Q runs it lists (for
/// `check`, which does not load the state): the whole checkpoint is decoded and checked.
pub(crate) fn runs_of(bytes: &[u8]) -> Result<(u64, Vec<u64>)> {
    let k = Image::decode(bytes)?;
    Ok((k.j_gen, k.runs.into_iter().chain(k.archives).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::{Discovered, Frontier, ManualClock};
    use crate::storage::SimDisk;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// The runs a later compaction removed drop out of a queue's bitmap, and the others move
    /// down to their slots.
    #[test]
    fn a_queues_runs_move_to_the_slots_of_the_runs_kept() {
        let kept = [Some(0), None, Some(1), None, Some(2)];
        assert_eq!(remap_runs(0b10101, &kept), 0b111);
        assert_eq!(remap_runs(0b01010, &kept), 0);
        assert_eq!(remap_runs(0b10110, &kept), 0b110);
        assert_eq!(remap_runs(0, &kept), 0);
        let mut all: Vec<Option<usize>> = vec![None; 64];
        all[63] = Some(0);
        assert_eq!(remap_runs(u64::MAX, &all), 1);
        assert_eq!(remap_runs(1 << 62, &all), 0);
    }

    /// A frontier on `disk` that moves F at once and checkpoints after 64 bytes of J.
    fn small_frontier(disk: &SimDisk) -> Frontier {
        let opts = crate::Options::new()
            .seed(1)
            .background_flush(false)
            .frontier_low(0)
            .journal_bytes(64);
        let clock = Arc::new(ManualClock::new(1_000));
        Frontier::open_with(Arc::new(disk.clone()), opts, clock).unwrap()
    }

    /// The checks that span the queues, which the decoding makes once every queue is read
    /// (their images are not kept): a queue listed twice is damage at its second place; a
    /// lease whose queue is not listed is damage; queues whose records outnumber the
    /// frontier's next seq are damage naming the first queue past the count.
    #[test]
    fn checks_across_the_queues_name_the_queue_and_its_place() {
        let disk = SimDisk::new();
        let f = small_frontier(&disk);
        let urls: Vec<String> = (0..200)
            .map(|i| format!("http://h{}.test/{i}", i % 20))
            .collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        f.flush().unwrap();
        assert_eq!(f.lease(5, None, 60_000).unwrap().len(), 5);
        f.close().unwrap();
        let bytes = disk.content(names::CHECKPOINT).expect("a checkpoint");
        let k = decode(&bytes).unwrap();
        assert_eq!((k.queues.len(), k.leases.len()), (20, 5));
        let encode = |queues: Vec<QueueImage<'_>>, leases: Vec<LeaseImage<'_>>| {
            let mut out = Out::to_memory();
            k.encode_to(
                CHECKPOINT_VERSION,
                queues.into_iter(),
                leases.into_iter(),
                &mut out,
            )
            .unwrap();
            out.finish().unwrap().0
        };
        let all: Vec<QueueImage<'_>> = k.queues.images().collect();
        let leases = k.leases.clone();
        assert_eq!(
            decode(&encode(all.clone(), leases.clone()))
                .unwrap()
                .queues
                .len(),
            20
        );
        // The third queue again at the end: named at its second place, past the first 20.
        let mut twice = all.clone();
        twice.push(all[2].clone());
        let bad = encode(twice, leases.clone());
        let Err(Error::Corrupt { offset, what, .. }) = decode(&bad) else {
            panic!("a queue listed twice was read");
        };
        assert!(what.to_string().contains("id of a queue"), "{what}");
        // A queue begins with its id: the second place the id's bytes are found.
        let id = all[2].id.to_le_bytes();
        let places: Vec<usize> = (0..bad.len() - 8)
            .filter(|&i| bad[i..i + 8] == id)
            .collect();
        assert_eq!(places.len(), 2, "{places:?}");
        assert_eq!(offset, places[1] as u64);
        // A leased record's queue left out.
        let leased = crate::record::decode(leases[0].record).unwrap();
        let qid = queue_id(
            leased.crawl,
            leased.key.unwrap_or_else(|| default_key(leased.url)),
        );
        let without: Vec<QueueImage<'_>> = all.iter().filter(|q| q.id != qid).cloned().collect();
        let err = decode(&encode(without, leases.clone()))
            .err()
            .expect("damage");
        assert!(err.to_string().contains("lease's queue"), "{err}");
        // The fifth queue waiting for as many records as the frontier has numbered.
        let mut many = all.clone();
        many[4].waiting = k.next_seq;
        let err = decode(&encode(many, leases)).err().expect("damage");
        assert!(err.to_string().contains("records of the queues"), "{err}");
        assert!(err.to_string().contains(&all[4].id.to_string()), "{err}");
    }

    /// The leases whose fetch ended are listed, in version 13, only when some lease's has
    /// (else version 12, which a build before reads); a seq that is no lease's, or not in
    /// increasing order, is damage.
    #[test]
    fn the_leases_whose_fetch_ended_are_listed_in_version_13_only() {
        let disk = SimDisk::new();
        let f = small_frontier(&disk);
        let urls: Vec<String> = (0..200)
            .map(|i| format!("http://h{}.test/{i}", i % 20))
            .collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        f.flush().unwrap();
        let leased = f.lease(5, None, 60_000).unwrap();
        f.close().unwrap();
        let version = |b: &[u8]| u32::from_le_bytes(b[4..8].try_into().unwrap());
        let bytes = disk.content(names::CHECKPOINT).expect("a checkpoint");
        assert_eq!(version(&bytes), CODED_QUEUES_VERSION);
        let f = small_frontier(&disk);
        let fetched = crate::queues::Completion::Fetched;
        let told = f
            .complete(&[(leased[3].token, 0, fetched), (leased[1].token, 0, fetched)])
            .unwrap();
        assert_eq!(told, [true, true]);
        f.close().unwrap();
        let bytes = disk.content(names::CHECKPOINT).expect("a checkpoint");
        assert_eq!(version(&bytes), FETCHED_VERSION);
        let mut k = decode(&bytes).unwrap();
        assert_eq!((k.leases.len(), k.fetched.len()), (5, 2));
        assert!(k.fetched[0] < k.fetched[1]);
        let lease_seqs: Vec<u64> = k.leases.iter().map(|l| l.seq).collect();
        let unleased = (0..k.next_seq).find(|s| !lease_seqs.contains(s)).unwrap();
        let good = k.fetched.clone();
        for bad in [
            vec![good[1], good[0]],
            vec![good[0], good[0]],
            vec![good[0], unleased],
        ] {
            k.fetched = bad.clone();
            let mut out = Out::to_memory();
            k.encode_to(
                FETCHED_VERSION,
                k.queues.images(),
                k.leases.iter().copied(),
                &mut out,
            )
            .unwrap();
            let err = decode(&out.finish().unwrap().0).err().expect("damage");
            assert!(
                err.to_string().contains("lease whose fetch ended"),
                "{bad:?}: {err}"
            );
        }
    }

    /// A checkpoint of version 12 says which runs may hold each queue; a bit past its runs
    /// is damage, and the bits it holds are those the runs' directories give.
    #[test]
    fn a_queues_runs_are_kept_and_a_bit_past_the_runs_is_damage() {
        let disk = SimDisk::new();
        let f = small_frontier(&disk);
        for round in 0..3 {
            let urls: Vec<String> = (0..200)
                .map(|i| format!("http://h{}.test/{round}/{i}", i % (20 + round * 10)))
                .collect();
            let items: Vec<Discovered<'_>> =
                urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
            f.flush().unwrap();
        }
        f.close().unwrap();
        let bytes = disk.content(names::CHECKPOINT).expect("a checkpoint");
        let k = decode(&bytes).unwrap();
        assert!(k.runs_known && k.runs.len() >= 3, "{} runs", k.runs.len());
        // Nothing served yet: the bits are the directories' own.
        let st: &dyn Storage = &disk;
        let mut want: HashMap<u64, u64> = HashMap::new();
        for (j, &id) in k.runs.iter().enumerate() {
            for g in Run::open(st, id).unwrap().groups() {
                *want.entry(g.unwrap().queue).or_default() |= 1 << j;
            }
        }
        for q in k.queues.images() {
            assert_eq!(q.runs, want.get(&q.id).copied().unwrap_or(0), "{:x}", q.id);
        }
        // Hosts 20 to 29 are in the last two runs only.
        assert!(k.queues.images().any(|q| q.runs == 0b110));
        let n = k.runs.len();
        let mut out = Out::to_memory();
        let queues = k.queues.images().enumerate().map(|(i, mut q)| {
            if i == 0 {
                q.runs |= 1 << n;
            }
            q
        });
        k.encode_to(
            CHECKPOINT_VERSION,
            queues,
            k.leases.iter().copied(),
            &mut out,
        )
        .unwrap();
        let bad = out.finish().unwrap().0;
        let err = decode(&bad).err().expect("damage");
        assert!(err.to_string().contains("runs of a queue"), "{err}");
    }
}
