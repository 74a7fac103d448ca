//! The frontier's state and its changes. Every change is a journal entry: an operation
//! writes its entries, syncs J, and only then applies them with [`Core::apply`], the function
//! that recovery also replays, so that the state after a crash is the state the acknowledged
//! operations left. A hand-out applies its lease entries through the part of it that leases
//! a record once its queue is known ([`Core::lease_in_queue`]), the queue known already
//! instead of found again from the record.

mod ahead;
mod checkpoint;
mod compaction;
mod due;
mod in_order;
mod index;
mod job;
mod leases;
mod mover;
mod table;

pub(crate) use table::HOT as HOT_QUEUES;

pub(crate) use checkpoint::in_version as checkpoint_in_version;
pub(crate) use checkpoint::runs_of as checkpoint_runs;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::clock::Clock;
use super::commits::Commits;
use super::journal::{Entry, ImportedQueue};
use super::key::{default_key, queue_id};
use super::qrun::{self, check_record, split, Run, RunCoding, RunWriter};
use super::{FrontierStats, LeasedBatch, Policy};
use crate::error::{Corruption, Error, Result};
use crate::frames::Frame;
use crate::frames::FrameWriter;
use crate::manifest::Mode;
use crate::names::{self, FileName};
use crate::record::{self, Record};
use crate::sieve::wal::{self, Kind};
use crate::sieve::Sieve;
use crate::storage::{Storage, StorageExt};
use due::DueHeap;
use index::{KeyAt, Keys, QueueIndex};
use leases::{Lease, Leases};

/// The longest wait of the ratio rule, 100 years (the command line's longest duration): a
/// fetch said to take a year under a ratio of one millionth would wait a million years, an
/// instant a double (a JSON number, to most readers) does not hold exactly.
pub(crate) const RATIO_WAIT_MAX_MS: u64 = 876_000 * 3_600_000;
/// J, the journal.
pub(crate) const J: Kind = Kind {
    magic: crate::format::MAGIC_J,
    name: names::j,
};

/// Entries of ended leases the heap of deadlines may hold beyond the live leases
/// ([`Core::push_expiry`]).
const EXPIRIES_SLACK: usize = 4096;

/// A close writes a checkpoint when J's generation holds more than this many bytes (or than
/// the checkpoint threshold, if smaller) and more than the last checkpoint: reopening then
/// reads the state whole rather than replay it.
const CLOSE_CHECKPOINT_MIN: u64 = 256 << 10;

/// What a group of a Q run weighs, in bytes of J, when J's replay is weighed against its
/// bound ([`Core::replay_weight`]): an open seats each group of the runs installed since the
/// last checkpoint (about 150 ns each, a queue made for each new one), about what 32 bytes
/// of other entries cost (an estimate: a byte of J was not timed alone). A `moved` entry of
/// a few bytes may bring 10^5 groups.
const GROUP_BYTES: u64 = 32;

/// A set of the store's own counters (seqs, tokens, queue places, crawl ids): values no
/// caller chooses.
pub(crate) type CounterSet<K> = std::collections::HashSet<K, CounterHash>;

/// A set of queue ids. An id hashes its crawl and key with a seed anyone can read, and the
/// keys are hosts that crawled pages choose: ids sharing their low bits can be searched for,
/// and one multiply keeps that sharing in its low bits, the table's buckets. So these take
/// SipHash with the process's random keys.
pub(crate) type QueueIdSet = std::collections::HashSet<u64>;

/// The hash of [`CounterSet`]: one multiply per word (FxHash's). Callers choose none of the
/// keys, so nothing needs SipHash's defence against chosen collisions, which costs several
/// times more on the lease and done paths. Sequential seqs differ in their low bits, which
/// the product keeps distinct; its high bits, which the table's tags use, mix them all.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CounterHash;

impl std::hash::BuildHasher for CounterHash {
    type Hasher = CounterHasher;

    fn build_hasher(&self) -> CounterHasher {
        CounterHasher(0)
    }
}

/// The state of [`CounterHash`].
pub(crate) struct CounterHasher(u64);

impl CounterHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(Self::K);
    }
}

impl std::hash::Hasher for CounterHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The groups of a run seated together, in the order of their queues' places
/// ([`Core::seat_groups`]): 40 bytes each for the time of an install.
const SEATS: usize = 1 << 16;

/// The largest buffer kept from one hand-out to the next (a frame of a huge record is not
/// kept).
const SPARE_MAX: usize = 64 << 10;

/// A queue: the URLs of one key of one crawl. (Its id is in `Core::ids`, at its place.)
struct Queue {
    crawl: u32,
    /// Its key, in `Core::keys`.
    key: KeyAt,
    /// The seq of the next record to serve from the Q runs: those below were handed out.
    next_seq: u64,
    /// Records in the Q runs from `next_seq` on.
    waiting: u64,
    /// Its records out of the runs, and the seqs it passes in them: none in most queues, so
    /// out of line (one word).
    lists: Option<Box<Lists>>,
    /// Its leases, those whose fetch ended included.
    leased: u32,
    /// Its leases whose fetch ended (`End::Fetched`): no longer holding a place under its
    /// policy's `per_queue`, and still counted by its limit until they end.
    fetched: u32,
    /// Records done.
    completed: u64,
    /// Not served before this instant.
    due: u64,
    /// The instant of its entry in the scheduler's heap (`u64::MAX`: none). Entries of other
    /// instants are stale and skipped.
    heap_at: u64,
    /// Runs (by their index in `Core::runs`) that may hold its records.
    runs: u64,
    /// Where `next_seq` is. A cache: `None` after a restart or a compaction.
    at: Option<At>,
}

/// Where a flush made in steps stands (see [`Core::flush_step`]).
#[derive(Debug, Default, Clone)]
pub(super) struct FlushState {
    /// The sieve's job the flush waits for (see `Sieve::flush_step`).
    ticket: Option<u64>,
    /// F's records committed when that job was applied: the moves go up to there.
    target: Option<u64>,
}

/// What a step of a flush leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlushStep {
    /// The sieve's flush thread merges: wait for it, without the lock.
    Wait,
    /// More of F to move: let the lock go, then go on.
    More,
    /// Done.
    Done,
}

/// Where a hand-out stands with the flush of the sieve its empty front asks for (see
/// [`Core::lease`]).
#[derive(Debug, Default, Clone)]
pub(super) struct FrontFlush {
    state: FlushState,
    /// Whether the flush began: the hand-out goes on with it, whatever the front now.
    begun: bool,
    /// Whether the flush is done: a hand-out flushes once.
    done: bool,
    /// When it began, by the system's clock.
    began: Option<std::time::Instant>,
}

/// Where the flushes that hand-outs ask for while some queue still waits stand (see
/// [`Core::demand_flush`]).
#[derive(Debug, Default, Clone, Copy)]
struct DemandFlush {
    /// When the one under way began: by the frontier's clock as it reads (not
    /// [`Core::now_ms`]), and by the system's monotonic one (its length is the sieve's
    /// job's, measured where it ran).
    started: Option<(u64, std::time::Instant)>,
    /// The first instant the next may begin, by the frontier's clock as it reads.
    next_at: u64,
    /// The gap `next_at` was set from.
    gap: u64,
    /// How many began since the open (for tests).
    begun: u64,
}

/// A Z of this many signatures (8 MB) or more is not merged again for a caller that only
/// reads counts before the spacing of [`Core::merged_recently`]: a monitor polling the counts
/// every few milliseconds would otherwise merge Z whole at each poll. A smaller Z is cheap
/// to merge at every call (what a merge costs beyond it is its syncs, the same for any
/// size), so that a small store's counts are always exact.
const COSTLY_Z: u64 = 1_000_000;

/// The last instant a queue is due at: `u64::MAX` marks a queue out of the scheduler's
/// heap.
const LAST_DUE: u64 = u64::MAX - 1;

/// The least time between two flushes that hand-outs ask for while some queue still waits:
/// the URLs pushed since wait at most about this long for a hand-out to find them, while
/// the flushes cost little.
const DEMAND_GAP_MS: u64 = 1_000;

/// The least time between two such flushes, in times the last one took (the sieve's job,
/// timed where it ran): they take at most about a tenth of the frontier's time, however
/// large the sieve's Z, which each of them reads and writes whole.
const DEMAND_FACTOR: u64 = 10;

/// Whether a wait of `gap` that ends at `until` still runs at `now`: not once `until` has
/// come, nor when `now` is before the wait began (the clock was set back).
fn waits_for(now: u64, until: u64, gap: u64) -> bool {
    now < until && until - now <= gap
}

/// A queue's records out of its runs, and the seqs its runs hold that it passes.
#[derive(Default)]
struct Lists {
    /// Records handed out whose lease ended without their being done: served first, in seq
    /// order.
    returned: Vec<(u64, Box<[u8]>)>,
    /// Records done and served again once their instant has passed, by (instant, seq).
    refetch: Vec<(u64, u64, Box<[u8]>)>,
    /// Seqs of records in the Q runs, from `next_seq` on, that a known update ended: not
    /// counted in `waiting`, passed over when reached, dropped by the next compaction.
    /// Sorted.
    skips: Vec<u64>,
}

/// A Q frame a hand-out read, kept for the next one: run `run`'s frame at `offset`, its
/// records from `frame.first` to `end` decoded. Runs are immutable and their ids never
/// reused, so it stays true.
struct Recent {
    run: u64,
    offset: u64,
    end: u32,
    frame: Frame,
}

/// Where a queue's next record is in the Q runs: a frame's offset, the place there of the
/// group's first record not yet taken or passed over, the group's records from there on, and
/// the run's index in
/// `Core::runs` (plus one, so that `Option<At>` takes no more room than `At`).
#[derive(Debug, Clone, Copy)]
struct At {
    offset: u64,
    left: u32,
    start: u16,
    slot: std::num::NonZeroU8,
}

impl At {
    /// (run's index, frame's offset, first record there, records left) as an `At`.
    fn new((slot, offset, start, left): (usize, u64, u16, u32)) -> At {
        let slot = u8::try_from(slot + 1)
            .ok()
            .and_then(std::num::NonZeroU8::new)
            .expect("fewer than 64 runs");
        At {
            offset,
            left,
            start,
            slot,
        }
    }

    /// The run's index, the frame's offset, the group's first record there not yet taken or
    /// passed over, and its records from there on.
    fn get(self) -> (usize, u64, u16, u32) {
        (
            usize::from(self.slot.get()) - 1,
            self.offset,
            self.start,
            self.left,
        )
    }

    /// The same place once the runs before slot `n` are merged into `new` runs (0 or 1):
    /// `None` if it was in one of them.
    fn after_merge(self, n: usize, new: usize) -> Option<At> {
        let (slot, offset, start, left) = self.get();
        (slot >= n).then(|| At::new((slot - n + new, offset, start, left)))
    }
}

/// A place in a queue's held URLs ([`Core::visit_held`]): its part (leased, returned,
/// waiting in the runs, to fetch again), the instant (to fetch again) and seq of a URL there,
/// and for a URL of a run, where its record is in that run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeldAt {
    part: u8,
    at_ms: u64,
    seq: u64,
    run: Option<RunAt>,
}

/// Where a visit of held URLs resumes: a queue's key and a place in it.
pub(super) type HeldFrom<'a> = Option<(&'a [u8], HeldAt)>;

/// A URL a visit of held URLs ([`Core::visit_held`]) gives: its record decoded and as it is
/// held, its seq and its status.
pub(super) struct Held<'a> {
    pub(super) record: Record<'a>,
    pub(super) bytes: &'a [u8],
    pub(super) seq: u64,
    pub(super) status: super::UrlStatus,
}

impl<'a> Held<'a> {
    fn of(record: Record<'a>, bytes: &'a [u8], seq: u64, status: super::UrlStatus) -> Held<'a> {
        Held {
            record,
            bytes,
            seq,
            status,
        }
    }
}

/// The place of a record in a run: the run's id, the queue's group there, and the place
/// just after the record in that group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunAt {
    run: u64,
    group: qrun::Group,
    at: qrun::GroupAt,
}

impl HeldAt {
    const LEASED: u8 = 0;
    const RETURNED: u8 = 1;
    const RUNS: u8 = 2;
    const REFETCH: u8 = 3;

    /// A place in one of the lists (not in the runs).
    fn listed(part: u8, at_ms: u64, seq: u64) -> HeldAt {
        HeldAt {
            part,
            at_ms,
            seq,
            run: None,
        }
    }

    /// The order of places within a queue.
    fn order(&self) -> (u8, u64, u64) {
        (self.part, self.at_ms, self.seq)
    }
}

impl Queue {
    /// Its leases that hold a place under its policy's `per_queue`: those whose fetch has
    /// not ended.
    fn holding(&self) -> u32 {
        self.leased - self.fetched
    }

    /// Records handed out whose lease ended without their being done, by seq.
    fn returned(&self) -> &[(u64, Box<[u8]>)] {
        self.lists.as_ref().map_or(&[], |l| &l.returned)
    }

    /// Records to fetch again, by (instant, seq).
    fn refetch(&self) -> &[(u64, u64, Box<[u8]>)] {
        self.lists.as_ref().map_or(&[], |l| &l.refetch)
    }

    /// Seqs passed in the runs, sorted.
    fn skips(&self) -> &[u64] {
        self.lists.as_ref().map_or(&[], |l| &l.skips)
    }

    /// The lists, to change (made if it had none; [`Queue::tidy`] drops them empty).
    fn lists_mut(&mut self) -> &mut Lists {
        self.lists.get_or_insert_with(Box::default)
    }

    /// Drops the lists once all three are empty.
    fn tidy(&mut self) {
        let empty = |l: &Lists| l.returned.is_empty() && l.refetch.is_empty() && l.skips.is_empty();
        if self.lists.as_deref().is_some_and(empty) {
            self.lists = None;
        }
    }

    /// Records `seq`, returned, in its place among the returned records.
    fn insert_returned(&mut self, seq: u64, record: Box<[u8]>) {
        let returned = &mut self.lists_mut().returned;
        let k = returned.partition_point(|(s, _)| *s < seq);
        returned.insert(k, (seq, record));
    }

    /// Whether it holds records to serve, now or later.
    fn has_waiting(&self) -> bool {
        self.waiting > 0 || !self.returned().is_empty() || !self.refetch().is_empty()
    }

    /// Takes record `seq` out of the returned records or those to fetch again; false when
    /// it is in neither.
    fn take_listed(&mut self, seq: u64) -> bool {
        let Some(l) = self.lists.as_mut() else {
            return false;
        };
        if let Some(k) = l.returned.iter().position(|(s, _)| *s == seq) {
            l.returned.remove(k);
        } else if let Some(k) = l.refetch.iter().position(|(_, s, _)| *s == seq) {
            l.refetch.remove(k);
        } else {
            return false;
        }
        self.tidy();
        true
    }

    /// The first instant a record of it is available (politeness aside).
    fn available(&self) -> u64 {
        if self.waiting > 0 || !self.returned().is_empty() {
            0
        } else {
            self.refetch().first().map_or(u64::MAX, |r| r.0)
        }
    }

    /// The first instant the queue may be served, blocked until `blocked`: at most
    /// [`LAST_DUE`], so that a queue held back to the end of time is still in the heap (it
    /// waits, and `next_due` says until when, rather than nothing).
    fn ready_at(&self, blocked: u64) -> u64 {
        self.due.max(blocked).max(self.available()).min(LAST_DUE)
    }

    /// [`Core::schedule`]'s change of the state, under `policy` and blocked until
    /// `blocked`: its heap entry, if it needs one earlier than it has, as (instant, its
    /// crawl if it had none).
    fn schedule(&mut self, policy: Policy, blocked: u64) -> Option<(u64, Option<u32>)> {
        if !self.has_waiting() || !room(policy, self) {
            return None;
        }
        let at = self.ready_at(blocked);
        (at < self.heap_at).then(|| {
            let new = self.heap_at == u64::MAX;
            self.heap_at = at;
            (at, new.then_some(self.crawl))
        })
    }
}

/// What a hand-out in parts keeps from one part to the next ([`Core::lease`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Parts {
    /// The ids of the queues served so far.
    pub(crate) served: QueueIdSet,
    /// Queues served by an earlier part that a later one took out of the heap: scheduled
    /// again when the hand-out ends. (A hand-out left unfinished leaves them out until one of
    /// their leases ends, which schedules its queue: each has one.)
    pub(crate) held: Vec<u32>,
}

/// A queue's hand-out under way, for [`Core::serve`].
struct Serving {
    /// The queue's next seq.
    next: u64,
    /// Records taken of it so far, and the most the call may take.
    n: usize,
    k: usize,
    /// Its records waiting in the runs, less those taken.
    left_waiting: u64,
    /// Its crawl.
    crawl: u32,
    /// Whether it skips any of its records.
    skips: bool,
}

/// A record a hand-out takes from queue `queue`, to be leased once journaled.
struct Pick {
    seq: u64,
    queue: u32,
    record: Box<[u8]>,
    /// Taken from the queue's returned records or those to fetch again, not from a run
    /// (whose records were checked against their queue as they were read).
    listed: bool,
    /// Where the record's key is in it, found when it was checked (a record of a run whose
    /// key is not the fallback key).
    key: Option<std::ops::Range<usize>>,
}

/// How a lease ends.
#[derive(Debug, Clone, Copy)]
pub(super) enum End {
    /// Done for good.
    Done,
    /// Back in its queue, in its place.
    Retry,
    /// Done, and served again once the instant has passed.
    Refetch(u64),
    /// Not ended: its fetch ended, and it no longer holds its queue's place.
    Fetched,
}

/// The state of a frontier, and its files.
pub(crate) struct Core {
    /// A compaction under way on a thread of its own. First, so that a drop stops and joins
    /// it before the store (and its lock) goes.
    compaction: Option<compaction::Compaction>,
    /// A move whose run is written on a thread of its own; before the store too.
    moving: Option<mover::Move>,
    /// The run of the move being committed, as its writer described it: installed from this
    /// when the entry is applied (see [`Core::install_written`]).
    written: Option<(u64, mover::Written)>,
    /// The merge's run being committed and where its queues' groups begin in it, as the
    /// merge found them: the queues are pointed there when the entry is applied (see
    /// [`Core::seat`]).
    seats: Option<(u64, Vec<compaction::Seat>)>,
    /// The checkpoint being switched in on a thread of its own (before `sieve`, whose lock of
    /// the store a drop releases only once the switch is done).
    switching: Option<checkpoint::Switch>,
    /// Compactions run on a thread of their own (the options' background flushes).
    background: bool,
    pub(super) sieve: Sieve,
    clock: Arc<dyn Clock>,
    /// The latest instant the clock gave: the frontier's time never runs back
    /// ([`Core::now_ms`]).
    clock_high: AtomicU64,
    /// The seq the next record entering a queue gets.
    next_seq: u64,
    /// The id the next Q run gets.
    next_run: u64,
    crawls: HashMap<Vec<u8>, u32>,
    crawl_names: HashMap<u32, Vec<u8>, CounterHash>,
    /// The id the next new crawl gets: above every id a crawl or a queue ever had, so that a
    /// deleted crawl's id is never reused.
    next_crawl: u32,
    default_policy: Policy,
    policies: HashMap<u64, Policy>,
    /// Blocked queues: not served before the instant.
    blocks: HashMap<u64, u64>,
    paused: bool,
    /// The flushes hand-outs ask for while the front is not empty ([`Core::demand_flush`]).
    demand: DemandFlush,
    /// The error of such a flush that failed to begin, for the next hand-out to return.
    demand_error: Option<Error>,
    /// The queues' states, by place (packed: `src/queues/core/table.rs`).
    queues: table::Table,
    /// The queues' ids, at their places: apart from their state, so that the look-ups in
    /// the index and its growth, which compare and hash ids, read 8 bytes a queue.
    ids: Vec<u64>,
    /// The queues' places by id.
    index: QueueIndex,
    /// The queues' keys.
    keys: Keys,
    runs: Vec<Run>,
    /// Q runs of the records compactions took out of the runs (handed out or skipped), in
    /// the order written: read by exports only, so that a queue moves with its done URLs.
    archives: Vec<u64>,
    /// The transfers imported, by the name their sender gave them, each with the ids of the
    /// queues received under it: a queue is received once per transfer.
    transfers: HashMap<Vec<u8>, QueueIdSet>,
    /// The deliveries received, by sender: the highest sequence number noted
    /// ([`Core::update`]'s receipts).
    receipts: BTreeMap<Vec<u8>, u64>,
    /// Queues moved to another frontier ([`Core::release`]): left out of exports until they
    /// take records again.
    released: QueueIdSet,
    leases: Leases,
    /// The token the next lease gets.
    next_token: u64,
    expiries: BinaryHeap<Reverse<(u64, u64)>>,
    heap: DueHeap,
    /// Milliseconds the fetches of the current burst took (the ratio rule), by queue place:
    /// only queues whose burst has had a fetch end and not its last (a burst ends with the
    /// end of the last lease of its queue holding a place; a lease that expires leaves the
    /// burst to the next end), so a few, beside every queue.
    bursts: HashMap<u32, u64, CounterHash>,
    /// The latest instant a fetch of the current burst ended, by queue place, for the same
    /// queues as `bursts` (and those whose ended fetches took 0 ms): an end said to be earlier
    /// is taken as then, so that the ratio rule's wait runs from the burst's last end. In
    /// memory only: the leases of a burst found at open count as handed out then.
    burst_ends: HashMap<u32, u64, CounterHash>,
    /// Whether a call returned expired leases since the last entry 22 (a hand-out's
    /// instant): the next hand-out journals its instant before its leases, so that a replay
    /// returns the same leases first, as the call did.
    expired_unjournaled: bool,
    /// Queues with a live entry in the heap, by crawl.
    scheduled: HashMap<u32, u64, CounterHash>,
    /// Until when (by the clock as it reads, [`Core::now_ms`] aside) a hand-out with an
    /// empty front does not flush first: the last such flush left the front empty (the URLs
    /// pushed went to queues whose fetchers were all out), so the next one waits
    /// [`DEMAND_FACTOR`] times as long as it took (`fruitless_gap`); meanwhile the flushes
    /// in the background bring what was pushed ([`Core::demand_flush`]).
    fruitless_until: u64,
    /// The wait `fruitless_until` was set from: a clock set back to before the wait began
    /// does not hold the next flush back.
    fruitless_gap: u64,
    done: u64,
    poisoned: bool,
    /// Pushes were made since the sieve's last sync: the next commit to J syncs them first,
    /// so that nothing J holds is durable before a push made ahead of it.
    unsynced: bool,
    /// The journal's writer, at the end of its newest generation.
    journal: Option<FrameWriter>,
    /// The newest generation of J.
    j_gen: u64,
    /// The oldest generation of J on disk.
    first_j_gen: u64,
    /// The group commit of J across the threads that share the frontier
    /// (`src/queues/commits.rs`).
    commits: Arc<Commits<crate::storage::File>>,
    /// Bytes of J written by deferred commits (a count across generations, for `commits`).
    j_written: u64,
    /// A J generation that a checkpoint replaced, kept for the next generation to take its
    /// file (see [`Core::checkpoint`]): never replayed, its number being below the
    /// checkpoint's. Removed by a close, and by any open.
    j_spare: Option<u64>,
    /// A checkpoint is written once J's generation weighs this many bytes
    /// ([`Core::replay_weight`]).
    journal_bytes: u64,
    /// The groups of Q runs that a replay of J from the last checkpoint reads: those of the
    /// runs moves and imports installed since, and those a compaction's entry has the replay
    /// walk again (see [`Core::replay_weight`]).
    j_groups: u64,
    /// The size of the last checkpoint written or loaded: a close writes a new one when J's
    /// weight ([`Core::replay_weight`]) has grown past it (and past
    /// [`CLOSE_CHECKPOINT_MIN`]), so that an open replays no more than it would read of a
    /// checkpoint.
    checkpoint_bytes: u64,
    /// Q runs are merged into one once they are this many.
    max_runs: usize,
    /// How the Q runs this frontier writes code their frames.
    coding: RunCoding,
    /// While J is replayed: the runs a later compaction removed (their files may be gone).
    replay_gone: Option<std::collections::HashSet<u64>>,
    /// While J is replayed: the queues in the order of their ids, which the reads of whole
    /// runs walk instead of looking each group's queue up in the index.
    in_order: Option<in_order::IdOrder>,
    /// While J is replayed: the generation of the entry applied.
    replaying_gen: Option<u64>,
    /// While J is replayed: the place of the queue of the `lease` entry applied, found
    /// before the replay (see [`Core::lease_places`]); its id is checked before it is used.
    hint: Option<u32>,
    /// Tests: the lease entries whose queue [`Core::lease_places`] found at the last open.
    #[cfg(test)]
    lease_places_found: u64,
    /// Tests: the Q frames hand-outs read from their runs.
    #[cfg(test)]
    frames_read: u64,
    /// Tests: the records of the runs that visits of held URLs walked.
    #[cfg(test)]
    held_walked: u64,
    /// Tests: the records of the Q runs that looks-ups of URLs in their queues walked
    /// ([`Core::find_in_runs`]).
    #[cfg(test)]
    looked_up: std::cell::Cell<u64>,
    /// The payload of the last Q frame read by a hand-out, given back for the next one.
    frame_spare: Vec<u8>,
    /// The Q frame a hand-out read last in each run, by the run's index (see
    /// [`Core::read_frame`]).
    recent: Vec<Option<Recent>>,
    /// Whether that frame was compressed: the next frames likely are too (a store writes
    /// its runs in one coding), and reading one again costs more than keeping a record.
    reads_compressed: bool,
    /// Queues' records read ahead (see [`ahead`]).
    ahead: ahead::Ahead,
    /// The directory block a hand-out decoded last in each run, by the run's index (see
    /// [`Run::group_cached`]).
    dir_cache: Vec<Option<super::qrun::DirBlock>>,
    /// The manifest was committed in this build's version since the open: J may take
    /// entries that older builds cannot read.
    versioned: bool,
    /// Hand-outs take only the queues whose key passes (none: every queue).
    serve_only: Option<super::KeyFilter>,
}

impl Core {
    /// Opens the frontier on `sieve`'s store: replays J, then, for a store used as a plain
    /// sieve so far with no reader yet, queues F's bare URLs and fixes the mode. `compress`
    /// says whether its Q runs are to be written compressed (`None`: as the manifest says),
    /// recorded in the manifest before the open returns.
    pub(super) fn open(
        sieve: Sieve,
        clock: Arc<dyn Clock>,
        max_runs: usize,
        journal_bytes: u64,
        background: bool,
        (hot, compress): (usize, Option<bool>),
    ) -> Result<Core> {
        if sieve.mode() == Mode::Sieve {
            return Err(sieve.wrong_mode());
        }
        let compress = compress.unwrap_or_else(|| sieve.compress_queues());
        let coding = if compress {
            RunCoding::Compressed
        } else {
            RunCoding::Front
        };
        let storage = sieve.storage().clone();
        let st = &*storage;
        let mut core = Core {
            compaction: None,
            moving: None,
            written: None,
            seats: None,
            switching: None,
            background,
            sieve,
            clock,
            clock_high: AtomicU64::new(0),
            journal: None,
            j_gen: 0,
            first_j_gen: 0,
            j_spare: None,
            commits: Arc::new(Commits::new()),
            j_written: 0,
            journal_bytes,
            j_groups: 0,
            checkpoint_bytes: 0,
            next_seq: 0,
            next_run: 1,
            crawls: HashMap::from([(b"DEFAULT".to_vec(), 0)]),
            crawl_names: HashMap::from_iter([(0, b"DEFAULT".to_vec())]),
            next_crawl: 1,
            default_policy: Policy::default(),
            policies: HashMap::new(),
            blocks: HashMap::new(),
            paused: false,
            demand: DemandFlush::default(),
            demand_error: None,
            queues: table::Table::with_limit(hot),
            ids: Vec::new(),
            index: QueueIndex::default(),
            keys: Keys::default(),
            runs: Vec::new(),
            archives: Vec::new(),
            transfers: HashMap::new(),
            receipts: BTreeMap::new(),
            released: QueueIdSet::default(),
            leases: Leases::default(),
            next_token: 1,
            expiries: BinaryHeap::new(),
            heap: DueHeap::default(),
            bursts: HashMap::default(),
            burst_ends: HashMap::default(),
            expired_unjournaled: false,
            scheduled: HashMap::default(),
            fruitless_until: 0,
            fruitless_gap: 0,
            done: 0,
            poisoned: false,
            unsynced: false,
            replay_gone: None,
            in_order: None,
            hint: None,
            #[cfg(test)]
            lease_places_found: 0,
            #[cfg(test)]
            frames_read: 0,
            #[cfg(test)]
            held_walked: 0,
            #[cfg(test)]
            looked_up: std::cell::Cell::new(0),
            replaying_gen: None,
            frame_spare: Vec::new(),
            recent: Vec::new(),
            reads_compressed: false,
            ahead: ahead::Ahead::default(),
            dir_cache: Vec::new(),
            versioned: false,
            serve_only: None,
            max_runs,
            coding,
        };
        // The checkpoint, decoded once (and checked whole), and its first generation of the
        // journal to replay.
        let bytes = match st.open_if_exists(names::CHECKPOINT)? {
            Some(f) => Some(f.read_all()?),
            None => None,
        };
        let image = bytes.as_deref().map(checkpoint::decode).transpose()?;
        let from = image.as_ref().map_or(0, checkpoint::Image::j_gen);
        let mut gens: Vec<u64> = Vec::new();
        let mut runs_on_disk = false;
        for n in st.list_files()? {
            runs_on_disk |= matches!(names::parse(&n), Some(FileName::Q(_)));
            if let Some(FileName::J(g)) = names::parse(&n) {
                if g < from {
                    // Replaced by the checkpoint: a crash came before their removal.
                    st.remove_file(&n)?;
                } else {
                    gens.push(g);
                }
            }
        }
        gens.sort_unstable();
        if from > 0 && gens.first() != Some(&from) {
            return Err(Error::corrupt(&names::j(from), 0, Corruption::Missing));
        }
        if image.is_none() && gens.first().is_some_and(|&g| g > 0) {
            // Generations below the newest are removed only once a checkpoint covers them:
            // without one, J starts at generation 0 (a spare kept after a checkpoint is its
            // old generation, whole). A first generation above 0 means a checkpoint was
            // there: replayed without it, the state would be J's newest entries alone, and
            // every queue and lease before them lost.
            return Err(Error::corrupt(names::CHECKPOINT, 0, Corruption::Missing));
        }
        if image.is_none() && gens.is_empty() && runs_on_disk {
            // A Q run is installed by an entry of J, which exists from the frontier's first
            // open on: runs with neither J nor a checkpoint mean J was lost (recreated
            // empty, the runs would be removed as unreferenced).
            return Err(Error::corrupt(&names::j(0), 0, Corruption::Missing));
        }
        let clean = core.sieve.clean_journal();
        wal::check_clean_present(J, from, &gens, clean)?;
        let (journal, newest, entries) = match gens.first() {
            None => (wal::create_of(J, st, from, None)?, from, Entries::default()),
            Some(_) => read_journal(st, &gens, clean)?,
        };
        core.journal = Some(journal.synced_by_others());
        core.first_j_gen = gens.first().copied().unwrap_or(from);
        core.j_gen = newest;
        // Every entry is decoded (and checked) before any is applied, and again as it is
        // applied: held decoded at once, 10^6 entries took about 80 MB more.
        let mut gone = std::collections::HashSet::new();
        let mut leases = 0;
        for d in entries.decoded() {
            match d? {
                (_, Entry::Compacted { removed, .. }) => gone.extend(removed.iter().copied()),
                (_, Entry::Lease { .. }) => leases += 1,
                _ => {}
            }
        }
        // The state at the checkpoint (but for the runs a later compaction removed), then the
        // journal's entries after it.
        core.replay_gone = Some(gone);
        core.in_order = Some(in_order::IdOrder::default());
        let len = bytes.as_ref().map_or(0, |b| b.len() as u64);
        // (The load counts no groups in `j_groups`: the runs the checkpoint holds are read
        // from it again at the next open.)
        core.load_checkpoint(st, image, len)?;
        drop(bytes);
        let places = core.lease_places(&entries, leases)?;
        let mut leases = places.iter();
        for (i, d) in entries.decoded().enumerate() {
            let (g, entry) = d?;
            core.replaying_gen = Some(g);
            if let Entry::Lease { .. } = entry {
                core.hint = leases.next().copied().filter(|&p| p != u32::MAX);
            }
            // An entry that contradicts the state is damage at its frame (the changes name
            // J's generation, and no place in it).
            core.apply(&entry)
                .map_err(|e| e.placed_in(&names::j(g), entries.frames[i]))?;
            core.hint = None;
        }
        drop(places);
        core.replaying_gen = None;
        core.replay_gone = None;
        core.in_order = None;
        if core.sieve.read_before_cursor() {
            // The cursor is committed after the journal's entry that moves past it.
            let from = entries
                .decoded()
                .filter_map(|d| match d {
                    Ok((g, Entry::Moved { .. })) => Some(g),
                    _ => None,
                })
                .last()
                .map_or_else(|| names::CHECKPOINT.to_owned(), names::j);
            return Err(Error::corrupt(
                &from,
                0,
                Corruption::Invalid {
                    field: "position of the frontier's mover",
                    expected: "at or after the sieve's cursor",
                    found: core.sieve.read_position().consumed,
                },
            ));
        }
        core.remove_orphan_runs(st)?;
        if core.sieve.mode() == Mode::Unset {
            // Everything pushed so far is a bare URL: flushed, queued, and only then the
            // mode says that records follow.
            core.sieve.flush()?;
            while core.sieve.unread_records() > 0 {
                core.move_f(false)?;
            }
            core.sieve.fix_mode(Mode::Frontier)?;
        }
        if !crate::planted::active(crate::planted::Bug::CodingUnrecorded) {
            core.sieve.fix_queue_coding(compress)?;
        }
        let mut now = core.now_ms();
        if crate::planted::active(crate::planted::Bug::ForgetLeases) {
            now = u64::MAX;
        }
        core.expire(now);
        give_back_freed_memory();
        Ok(core)
    }

    /// Removes Q runs that J does not name (a mover or a compaction that crashed before its
    /// entry was durable).
    fn remove_orphan_runs(&mut self, st: &dyn Storage) -> Result<()> {
        for n in st.list_files()? {
            if let Some(FileName::Q(id)) = names::parse(&n) {
                if !self.runs.iter().any(|r| r.id() == id) && !self.archives.contains(&id) {
                    st.remove_file(&n)?;
                }
            }
        }
        Ok(())
    }

    /// The J generation that holds the entry applied: while J is replayed, the one
    /// replayed; otherwise the newest, which the entry was just written to.
    fn journal_gen(&self) -> u64 {
        self.replaying_gen.unwrap_or(self.j_gen)
    }

    /// The journal's writer.
    fn writer(&mut self) -> &mut FrameWriter {
        self.journal
            .as_mut()
            .expect("the journal is open once the frontier is")
    }

    fn writable(&self) -> Result<()> {
        if self.poisoned {
            Err(Error::Poisoned)
        } else {
            Ok(())
        }
    }

    /// Writes `entries` to J and makes them durable, then applies them. A failure poisons the
    /// frontier: what J holds past its last sync is unknown.
    fn commit(&mut self, entries: &[Entry<'_>]) -> Result<()> {
        self.journal(entries)?;
        self.apply_all(entries)
    }

    /// Applies entries J holds (or will hold once the waiters' sync returns), then writes a
    /// checkpoint if one is due. A failure poisons the frontier.
    fn apply_all(&mut self, entries: &[Entry<'_>]) -> Result<()> {
        for e in entries {
            if let Err(err) = self.apply(e) {
                self.poisoned = true;
                return Err(err);
            }
        }
        self.checkpoint_if_due()
    }

    /// [`Core::commit`], but J is not synced here: the caller, once it lets the frontier's
    /// lock go, waits for J to be durable ([`Core::durable_target`]), sharing the sync with
    /// the calls of other threads. For the changes nothing else depends on before they are
    /// durable (hand-outs, ends of leases, known URLs); a change that another durable step
    /// follows (a move, a compaction, a checkpoint) commits with J synced.
    fn commit_deferred(&mut self, entries: &[Entry<'_>]) -> Result<()> {
        self.journal_deferred(entries)?;
        self.apply_all(entries)
    }

    /// [`Core::journal`] without J's sync: the entries are written (after the pushes made
    /// before them are durable), and the group commit learns how far J goes.
    fn journal_deferred(&mut self, entries: &[Entry<'_>]) -> Result<()> {
        self.writable()?;
        fits_journal(entries)?;
        if crate::planted::active(crate::planted::Bug::LeaseBeforeSync) {
            // The planted bug writes and acknowledges without waiting for J.
            return self.journal(entries);
        }
        if !crate::planted::active(crate::planted::Bug::CommitBeforePushes) {
            self.sync()?;
        }
        self.next_epoch_if_durable();
        let before = self.writer().end();
        // Room for an entry of a lease or an end and its record: grown once for a larger one.
        let mut buf = Vec::with_capacity(512);
        let written = (|| {
            for e in entries {
                buf.clear();
                e.encode(&mut buf);
                self.writer().append(&buf)?;
            }
            self.writer().write_frame()
        })();
        if let Err(e) = written {
            self.poisoned = true;
            return Err(e);
        }
        self.j_written += self.writer().end() - before;
        let file = self.writer().file().clone();
        self.commits.wrote(self.j_written, &file);
        Ok(())
    }

    /// Syncs J under the lock, through the group commit (which serialises it with the
    /// waiters' syncs, so that a failed one is always seen): every byte written is durable.
    fn sync_journal(&mut self) -> Result<()> {
        let (commits, written) = (self.commits.clone(), self.j_written);
        self.writer().sync_with(&mut |f| {
            commits
                .sync_now(f, written)
                .map_err(|e| f.io_error("sync", e))
        })
    }

    /// Before J is written under the lock: once a sync (any thread's) has made every frame
    /// written durable, the next frames are of the next epoch (see
    /// [`FrameWriter::synced_by_others`]).
    fn next_epoch_if_durable(&mut self) {
        // The planted bug's frames are neither synced nor counted: its epochs stay as they
        // were before group commit, so that its loss reads as docs/testing.md says.
        if crate::planted::active(crate::planted::Bug::LeaseBeforeSync) {
            return;
        }
        if self.commits.covers(self.j_written) {
            self.writer().next_epoch_if_written();
        }
    }

    /// What a call must wait for, once it lets the frontier's lock go, before it answers:
    /// J durable up to the bytes written so far (by it, or by the calls of other threads
    /// whose changes it may have seen).
    pub(in crate::queues) fn durable_target(&self) -> (Arc<Commits<crate::storage::File>>, u64) {
        (self.commits.clone(), self.j_written)
    }

    /// After a failed sync of J (a waiter's or one under the lock), what J holds past its
    /// last sync is unknown: the frontier is poisoned (returns true).
    pub(in crate::queues) fn poison_if_sync_failed(&mut self) -> bool {
        if self.commits.failed() {
            self.poisoned = true;
        }
        self.poisoned && self.commits.failed()
    }

    /// Writes `entries` to J and makes them durable (after the pushes made before them),
    /// without applying them: [`Core::commit`]'s first half. A failure poisons the frontier.
    fn journal(&mut self, entries: &[Entry<'_>]) -> Result<()> {
        self.writable()?;
        fits_journal(entries)?;
        if !crate::planted::active(crate::planted::Bug::CommitBeforePushes) {
            self.sync()?;
        }
        self.next_epoch_if_durable();
        let mut buf = Vec::new();
        let written = (|| {
            for e in entries {
                buf.clear();
                e.encode(&mut buf);
                self.writer().append(&buf)?;
            }
            if crate::planted::active(crate::planted::Bug::LeaseBeforeSync) {
                return self.writer().write_frame();
            }
            self.sync_journal()
        })();
        if let Err(e) = written {
            self.poisoned = true;
            return Err(e);
        }
        Ok(())
    }

    /// What an open would replay of J: its newest generation's bytes, and each group of
    /// the Q runs it would read weighed as [`GROUP_BYTES`] bytes. The runs a checkpoint
    /// holds are not read again (each queue's bitmap says which may hold it), but for a
    /// compaction's entry replayed after it, which walks every run left, so a frontier
    /// whose moves bring many groups in few bytes of J is checkpointed as often as its
    /// replay, not its bytes, requires.
    fn replay_weight(&mut self) -> u64 {
        self.writer()
            .end()
            .saturating_add(self.j_groups.saturating_mul(GROUP_BYTES))
    }

    /// Writes a checkpoint once J's generation weighs more than its bound
    /// ([`Core::replay_weight`]).
    fn checkpoint_if_due(&mut self) -> Result<()> {
        self.poll_checkpoint()?;
        if self.replay_weight() > self.journal_bytes {
            // One checkpoint at a time: the next once the switch under way is done.
            if self.switching.is_some() {
                return Ok(());
            }
            // The checkpoint holds F's read position: not past records in no run yet. While
            // a move's run is being written the checkpoint waits for its install (which
            // commits to J, and so writes it), rather than wait for it under the lock.
            if self.move_busy() {
                return Ok(());
            }
            self.settle_move()?;
            if self.replay_weight() > self.journal_bytes {
                self.checkpoint(true)?;
            }
        }
        Ok(())
    }

    /// Applies one change: at runtime after J holds it durably, and at recovery.
    fn apply(&mut self, e: &Entry<'_>) -> Result<()> {
        match e {
            Entry::Moved { run, f, next_seq } => {
                if let Some(id) = run {
                    self.next_run = self.next_run.max(id + 1);
                    let gone = self.replay_gone.as_ref().is_some_and(|g| g.contains(id));
                    // A run a later compaction removed: its records waiting then are in the
                    // compaction's run, and the compaction's entry says how many.
                    if !gone {
                        let run = Run::open(self.sieve.storage().as_ref(), *id)?;
                        // A move's run its writer described (at runtime), or read (replay).
                        match self.written.take_if(|(w, _)| w == id) {
                            Some((_, written)) => self.install_written(run, &written)?,
                            None => self.install(run)?,
                        }
                    }
                }
                self.next_seq = *next_seq;
                let g = self.journal_gen();
                self.sieve
                    .seek_read(*f)
                    .map_err(|what| Error::corrupt(&names::j(g), 0, what))?;
            }
            Entry::Lease {
                seq,
                token,
                deadline,
                record,
            } => self.apply_lease(*seq, *token, *deadline, record)?,
            // The leases that expired by `at` are returned first: at runtime the call did so
            // before it wrote the entry, and a replay must count the same leases in force (the
            // delay after a burst depends on them).
            // The politeness runs from the fetch's end, which the caller may have said was
            // before the call.
            Entry::Done {
                seq,
                at,
                took,
                ended,
            } => {
                self.expire(*at);
                self.end_lease(*seq, *ended, *took, End::Done, None)?;
                self.done = self.done.saturating_add(1);
            }
            Entry::Retry {
                seq,
                at,
                took,
                ended,
            } => {
                self.expire(*at);
                self.end_lease(*seq, *ended, *took, End::Retry, None)?;
            }
            Entry::Refetch {
                seq,
                at,
                took,
                when,
                ended,
            } => {
                self.expire(*at);
                self.end_lease(*seq, *ended, *took, End::Refetch(*when), None)?;
            }
            Entry::Known {
                seq,
                at,
                when,
                fresh,
                record,
            } => {
                self.expire(*at);
                self.apply_known(*seq, *at, *when, *fresh, record)?;
            }
            Entry::Fetched {
                seq,
                at,
                took,
                ended,
            } => {
                self.expire(*at);
                self.lease_fetched(*seq, *ended, *took)?;
            }
            Entry::Expired { at } => self.expire(*at),
            Entry::Policy {
                crawl,
                key,
                policy,
                at,
            } => {
                // The leases expired by then were returned under the policy before: their
                // queues' delays run from their deadlines by it (`Core::fetch_ended`).
                if let Some(at) = at {
                    self.expire(*at);
                }
                match key {
                    None => {
                        let old = std::mem::replace(&mut self.default_policy, *policy);
                        if let Some(at) = at {
                            // Every queue that follows the default in a field.
                            for i in 0..self.queues.len() as u32 {
                                let own = self.policies.get(&self.ids[i as usize]).copied();
                                let (before, after) = match own {
                                    Some(own) => {
                                        (Policy::resolve(own, old), Policy::resolve(own, *policy))
                                    }
                                    None => (old, *policy),
                                };
                                if before != after {
                                    self.shorten_wait(i, before, after, *at);
                                }
                            }
                        }
                    }
                    Some(k) => {
                        // The queue exists from its policy on (so that deleting its crawl
                        // finds the policy).
                        let id = queue_id(*crawl, k);
                        let i = self.queue(id, *crawl, k);
                        let old = self.policy(id);
                        self.policies.insert(id, *policy);
                        if let Some(at) = at {
                            self.shorten_wait(i, old, self.policy(id), *at);
                        }
                    }
                }
                for i in 0..self.queues.len() {
                    self.schedule(i as u32);
                }
            }
            Entry::Block { crawl, key, until } => {
                let id = queue_id(*crawl, key);
                if *until == 0 {
                    self.blocks.remove(&id);
                } else {
                    // The queue exists from its block on (so that deleting its crawl finds
                    // the block).
                    self.queue(id, *crawl, key);
                    self.blocks.insert(id, *until);
                }
                if let Some(i) = self.place(id) {
                    self.schedule(i);
                }
            }
            Entry::Pause(on) => self.paused = *on,
            Entry::Crawl { id, name } => {
                self.crawls.insert(name.to_vec(), *id);
                self.crawl_names.insert(*id, name.to_vec());
                self.next_crawl = self.next_crawl.max(id.saturating_add(1));
            }
            Entry::DeleteQueue { crawl, key } => {
                let id = queue_id(*crawl, key);
                if let Some(i) = self.place(id) {
                    self.drop_queue(i);
                }
                self.policies.remove(&id);
                self.blocks.remove(&id);
            }
            Entry::DeleteCrawl { id } => {
                let of_crawl: Vec<u32> = (0..self.queues.len() as u32)
                    .filter(|&i| self.queues.get(i).crawl == *id)
                    .collect();
                for i in of_crawl {
                    let qid = self.ids[i as usize];
                    self.drop_queue(i);
                    self.policies.remove(&qid);
                    self.blocks.remove(&qid);
                }
                // Its name is free: used again, it names a new crawl (a new id, so that its
                // URLs are new), DEFAULT's too.
                if let Some(name) = self.crawl_names.remove(id) {
                    self.crawls.remove(&name);
                }
            }
            Entry::Archived { run } => {
                self.next_run = self.next_run.max(run + 1);
                self.archives.push(*run);
            }
            Entry::Released { crawl, key } => {
                let id = queue_id(*crawl, key);
                if let Some(i) = self.place(id) {
                    self.drop_queue(i);
                }
                self.policies.remove(&id);
                self.blocks.remove(&id);
                self.released.insert(id);
            }
            Entry::EndTransfer { name } => {
                self.transfers.remove(*name);
            }
            Entry::Receipted { receipts, known } => {
                for k in known {
                    self.apply(k)?;
                }
                for (from, seq) in receipts {
                    let at = self.receipts.entry(from.to_vec()).or_default();
                    *at = (*at).max(*seq);
                }
            }
            Entry::Imported {
                transfer,
                run,
                next_seq,
                queues,
            } => self.apply_import(transfer, *run, *next_seq, queues)?,
            Entry::Compacted {
                removed,
                added,
                waiting,
            } => {
                // Live, the runs merged are the first ones (a merge takes every run there is
                // when it begins, and later runs come after them).
                let n = removed.len();
                let first = self.replay_gone.is_none()
                    && n <= self.runs.len()
                    && self.runs[..n]
                        .iter()
                        .map(Run::id)
                        .eq(removed.iter().copied());
                let runs = std::mem::take(&mut self.runs);
                if let Some(id) = added {
                    self.next_run = self.next_run.max(id + 1);
                    // Unless a later compaction removed it too.
                    if !self.replay_gone.as_ref().is_some_and(|g| g.contains(id)) {
                        let run = Run::open(self.sieve.storage().as_ref(), *id)?;
                        self.runs.push(run);
                    }
                }
                let new = self.runs.len() as u32;
                if first {
                    // Each queue's bits move down past the runs merged; the merge's run may
                    // hold records of each queue that one of them might have held.
                    self.runs.extend(runs.into_iter().skip(n));
                    let merged = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
                    self.queues.for_each_mut(|_, q| {
                        let had = u64::from(q.runs & merged != 0) & u64::from(new);
                        q.runs = (q.runs.checked_shr(n as u32).unwrap_or(0) << new) | had;
                        q.at = q.at.and_then(|a| a.after_merge(n, new as usize));
                    });
                    // (Live, the commit always gives the seats of the run it adds; queues not
                    // seated would look their place up at their next hand-out.)
                    let seats = self.seats.take();
                    if let Some((_, seats)) =
                        seats.filter(|&(id, _)| new == 1 && Some(id) == *added)
                    {
                        self.seat(&seats);
                    }
                } else {
                    self.runs
                        .extend(runs.into_iter().filter(|r| !removed.contains(&r.id())));
                    self.queues.for_each_mut(|_, q| {
                        q.runs = 0;
                        q.at = None;
                    });
                    // Every run left is the merge's, or later than it: the bits are rebuilt.
                    let runs = self.runs.clone();
                    for (i, run) in runs.iter().enumerate() {
                        self.for_each_group(run, |core, q, _| {
                            core.queues.update(q, |q| q.runs |= 1 << i);
                        })?;
                    }
                }
                // Live, the counts are the queues' own, in the order of their places: one
                // pass finds that nothing changes. A replay, which leaves out the runs a
                // later compaction removed, takes them from the entry.
                let same = self.counts_are(waiting);
                self.queues.for_each_mut(|_, q| {
                    if !same {
                        q.waiting = 0;
                    }
                    // The compaction dropped the records skipped.
                    if let Some(l) = q.lists.as_mut() {
                        l.skips = Vec::new();
                    }
                    q.tidy();
                });
                if !same {
                    let walk = self.begin_walk(waiting.len() as u64);
                    for &(id, n) in waiting {
                        if let Some(q) = self.place_walking(id, walk) {
                            self.queues.update(q, |q| q.waiting = n);
                        }
                    }
                }
                for i in 0..self.queues.len() {
                    self.schedule(i as u32);
                }
                // A replay of this entry walks every run left.
                let walked: u64 = self.runs.iter().map(Run::group_count).sum();
                self.j_groups = self.j_groups.saturating_add(walked);
            }
        }
        Ok(())
    }

    /// Whether `waiting` lists the queues with records waiting in the runs, with their
    /// counts, in the order of their places: what a compaction's entry holds live.
    fn counts_are(&self, waiting: &[(u64, u64)]) -> bool {
        let mut own = (self.queues.iter().zip(&self.ids))
            .filter(|(q, _)| q.waiting > 0)
            .map(|(q, &id)| (id, q.waiting));
        waiting.iter().all(|&w| own.next() == Some(w)) && own.next().is_none()
    }

    /// Points each queue with no place whose runs included one merged (the merge's run now
    /// slot 0) at the start of its group there, from the seats the merge found as it wrote
    /// the run, in the order of the queues' places: instead of a lookup in a block at each
    /// queue's next hand-out, in the order the queues come due. A hand-out passes over the
    /// records below the queue's next seq (those served while the merge ran), as it does
    /// after a lookup. (A replay seats none: it rebuilds every queue's runs and places.)
    fn seat(&mut self, seats: &[compaction::Seat]) {
        #[cfg(test)]
        self.check_seats(seats);
        for s in seats {
            // In place: a queue packed stays packed.
            self.queues.update(s.place, |q| {
                if q.at.is_none() && q.runs & 1 != 0 && q.crawl == s.crawl && s.records > 0 {
                    q.at = Some(At::new((0, s.offset, s.start, s.records)));
                }
            });
        }
    }

    /// Tests: the seats a merge found are what the run's directory (slot 0) says of the
    /// known queues, by place.
    #[cfg(test)]
    fn check_seats(&self, seats: &[compaction::Seat]) {
        let mut expected: Vec<compaction::Seat> = (self.runs[0].scanning().groups())
            .filter_map(|g| {
                let g = g.unwrap();
                let place = self.place(g.queue)?;
                Some(compaction::Seat {
                    offset: g.offset,
                    place,
                    records: g.records,
                    crawl: g.crawl,
                    start: g.start,
                })
            })
            .collect();
        expected.sort_unstable_by_key(|s| s.place);
        assert_eq!(seats, expected, "the seats of run {}", self.runs[0].id());
    }

    /// Adds a Q run: each of its groups waits in its queue.
    fn install(&mut self, run: Run) -> Result<()> {
        let slot = self.next_slot(&run)?;
        // Its groups, and the first record of each queue new here, are read in the order they
        // lie in the run: through a scanning view, not the mapping.
        let scan = run.scanning();
        let mut seats = Vec::new();
        self.for_each_group(&scan, |core, i, g| {
            seats.push((i, *g));
            if seats.len() == SEATS {
                core.seat_groups(slot, &mut seats);
            }
        })?;
        self.seat_groups(slot, &mut seats);
        self.j_groups = self.j_groups.saturating_add(run.group_count());
        self.runs.push(run);
        Ok(())
    }

    /// Calls `each` with every group of `run`, in its order, and the place of the group's
    /// queue (created if new: its key is in its records). While J is replayed the queues
    /// are found by a walk in id order ([`Core::begin_walk`]), and the queues of a batch of
    /// groups are read together before their groups are given: their cache misses overlap
    /// instead of following each other. A damaged directory block ends the calls with its
    /// error, once the groups of the blocks before it are given.
    fn for_each_group(
        &mut self,
        run: &Run,
        mut each: impl FnMut(&mut Core, u32, &super::qrun::Group),
    ) -> Result<()> {
        const BATCH: usize = 64;
        let walk = self.begin_walk(run.group_count());
        let mut cache = None;
        let mut groups = run.groups();
        let mut batch: Vec<(super::qrun::Group, Option<u32>)> = Vec::with_capacity(BATCH);
        let mut damage = None;
        while damage.is_none() {
            batch.clear();
            for g in groups.by_ref().take(BATCH) {
                match g {
                    Ok(g) => batch.push((g, None)),
                    Err(e) => {
                        damage = Some(e);
                        break;
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            if let Some(order) = self.in_order.as_mut().filter(|_| walk) {
                for (g, p) in &mut batch {
                    *p = order.guess(g.queue);
                }
                // Their ids are read together.
                let mut sum = 0u64;
                for &(_, p) in &batch {
                    if let Some(p) = p {
                        sum = sum.wrapping_add(self.ids[p as usize]);
                    }
                }
                std::hint::black_box(sum);
            }
            for (g, p) in &batch {
                let i = match *p {
                    Some(p)
                        if self.ids[p as usize] == g.queue
                            || crate::planted::active(crate::planted::Bug::WalkTrustsGuess) =>
                    {
                        p
                    }
                    _ => self.queue_of_group(run, g, &mut cache, walk)?,
                };
                each(self, i, g);
            }
        }
        damage.map_or(Ok(()), Err)
    }

    /// Begins a look-up of `n` queues in the order of their ids (the groups of a run):
    /// whether they are found by walking the queues in id order ([`Core::place_walking`]),
    /// which is while J is replayed, when they are enough to pay for taking in the queues
    /// made since the last walk; otherwise in the index.
    fn begin_walk(&mut self, n: u64) -> bool {
        let len = self.queues.len() as u32;
        let ids = &self.ids;
        match self.in_order.as_mut() {
            Some(order) if n.saturating_mul(8) >= order.behind(len) => {
                order.start(len, |j| ids[j as usize]);
                true
            }
            _ => false,
        }
    }

    /// The place of queue `id`: by the walk [`Core::begin_walk`] began (`walk`), or in the
    /// index.
    fn place_walking(&mut self, id: u64, walk: bool) -> Option<u32> {
        let ids = &self.ids;
        match self.in_order.as_mut() {
            Some(order) if walk => order.find(id, |j| ids[j as usize]),
            _ => self.place(id),
        }
    }

    /// [`Core::install`] of a move's run from what its writer knew of it: its groups and
    /// their queues' keys, as the directory and the records hold them, read from neither.
    fn install_written(&mut self, run: Run, written: &mover::Written) -> Result<()> {
        let slot = self.next_slot(&run)?;
        #[cfg(test)]
        Self::check_written(&run, written);
        let mut seats = Vec::with_capacity(written.groups.len().min(SEATS));
        for (n, g) in written.groups.iter().enumerate() {
            let i = match self.place(g.queue) {
                Some(i) => i,
                None => self.queue(g.queue, g.crawl, written.key(n)),
            };
            seats.push((i, *g));
            if seats.len() == SEATS {
                self.seat_groups(slot, &mut seats);
            }
        }
        self.seat_groups(slot, &mut seats);
        self.j_groups = self.j_groups.saturating_add(written.groups.len() as u64);
        self.runs.push(run);
        Ok(())
    }

    /// Tests: what a run's writer described is what its directory and records say.
    #[cfg(test)]
    fn check_written(run: &Run, written: &mover::Written) {
        let scan = run.scanning();
        let groups: Vec<super::qrun::Group> = scan.groups().map(|g| g.unwrap()).collect();
        assert_eq!(groups, written.groups, "the groups of run {}", run.id());
        let mut cache = None;
        for (n, g) in groups.iter().enumerate() {
            let mut key = Vec::new();
            scan.walk_group_cached(g, &mut cache, |_, rec, _| {
                let r = crate::record::decode(rec).unwrap();
                key.extend_from_slice(r.key.unwrap_or_else(|| default_key(r.url)));
                Ok(false)
            })
            .unwrap();
            assert_eq!(key, written.key(n), "the key of group {n}");
        }
    }

    /// The slot of the next run installed: an error past 64 runs (a damaged J).
    fn next_slot(&self, run: &Run) -> Result<usize> {
        let slot = self.runs.len();
        if slot >= 64 {
            return Err(run.file().corrupt(
                0,
                Corruption::OutOfRange {
                    field: "Q runs",
                    found: slot as u64 + 1,
                    limit: 65,
                },
            ));
        }
        Ok(slot)
    }

    /// [`Core::seat_group`] of each (queue, group) of `seats`, which it empties, in the order
    /// of the queues' places: a run's groups come in the order of their ids, and the queues'
    /// states are packed by place (`src/queues/core/table.rs`), so that each block of them
    /// is read and packed again once for all its queues rather than once for each.
    fn seat_groups(&mut self, slot: usize, seats: &mut Vec<(u32, super::qrun::Group)>) {
        const _: () = assert!(SEATS <= 1 << 16, "a seat's index takes 16 bits");
        debug_assert!(seats.len() <= SEATS, "{} seats", seats.len());
        // Sorted as (place, index) keys of 8 bytes rather than as seats of 40.
        let mut order: Vec<u64> = (seats.iter().enumerate())
            .map(|(k, &(i, _))| (u64::from(i) << 16) | k as u64)
            .collect();
        order.sort_unstable();
        for key in order {
            let (i, g) = seats[(key & 0xffff) as usize];
            self.seat_group(slot, i, &g);
        }
        seats.clear();
    }

    /// Adds group `g` of the run of slot `slot` to queue `i`, and schedules the queue.
    fn seat_group(&mut self, slot: usize, i: u32, g: &super::qrun::Group) {
        // A queue moved away that takes records again is exported again.
        if !self.released.is_empty() {
            self.released.remove(&g.queue);
        }
        let (policy, blocked) = self.schedule_terms(i);
        let entry = self.queues.update(i, |q| {
            q.waiting += u64::from(g.records);
            if q.runs == 0 && q.at.is_none() && g.records > 0 {
                // Its first records in the runs: its hand-out starts here, with no lookup.
                q.at = Some(At::new((slot, g.offset, g.start, g.records)));
            }
            q.runs |= 1 << slot;
            q.schedule(policy, blocked)
        });
        self.push_entry(i, entry);
    }

    /// The index of the queue of group `g` of `run`, created if new (its key is in its
    /// records). `cache` holds the frame read last (see [`Run::walk_group_cached`]).
    fn queue_of_group(
        &mut self,
        run: &Run,
        g: &super::qrun::Group,
        cache: &mut Option<crate::frames::Frame>,
        walk: bool,
    ) -> Result<u32> {
        if let Some(i) = self.place_walking(g.queue, walk) {
            return Ok(i);
        }
        let mut key = Vec::new();
        run.walk_group_cached(g, cache, |_, rec, offset| {
            check_record(run.file(), offset, rec, g.queue, g.crawl)?;
            let r = record::decode(rec).map_err(|what| run.file().corrupt(offset, what))?;
            key.extend_from_slice(r.key.unwrap_or_else(|| default_key(r.url)));
            Ok(false)
        })?;
        Ok(self.new_queue(g.queue, g.crawl, &key))
    }

    /// The index of queue `id`, created if new.
    fn queue(&mut self, id: u64, crawl: u32, key: &[u8]) -> u32 {
        match self.place(id) {
            Some(i) => i,
            None => self.new_queue(id, crawl, key),
        }
    }

    /// Creates queue `id`, which has no place yet; returns its place.
    fn new_queue(&mut self, id: u64, crawl: u32, key: &[u8]) -> u32 {
        let i = self.new_queue_unindexed(id, crawl, key);
        let ids = &self.ids;
        self.index.insert(id, i, |j| ids[j as usize]);
        i
    }

    /// [`Core::new_queue`] but for the index, which the caller fills
    /// ([`index::QueueIndex::insert_places`]) before anything looks the queue up.
    fn new_queue_unindexed(&mut self, id: u64, crawl: u32, key: &[u8]) -> u32 {
        self.new_queue_filled(id, crawl, key, |_| ())
    }

    /// [`Core::new_queue_unindexed`] of a queue whose state `fill` sets (from the new
    /// queue's) before it is stored.
    fn new_queue_filled(
        &mut self,
        id: u64,
        crawl: u32,
        key: &[u8],
        fill: impl FnOnce(&mut Queue),
    ) -> u32 {
        self.next_crawl = self.next_crawl.max(crawl.saturating_add(1));
        let key = self.keys.add(key);
        due::grow_by_a_quarter(&mut self.ids);
        self.ids.push(id);
        let mut q = Queue {
            crawl,
            key,
            next_seq: 0,
            waiting: 0,
            lists: None,
            leased: 0,
            fetched: 0,
            completed: 0,
            due: 0,
            heap_at: u64::MAX,
            runs: 0,
            at: None,
        };
        fill(&mut q);
        self.queues.push(q)
    }

    /// The place of queue `id` in `queues`.
    fn place(&self, id: u64) -> Option<u32> {
        self.index.get(id, |j| self.ids[j as usize])
    }

    /// The key of `q`.
    fn key(&self, q: &Queue) -> &[u8] {
        self.keys.get(q.key)
    }

    /// The policy in force for queue `id`: its own fields, the default's for the others.
    fn policy(&self, id: u64) -> Policy {
        match self.policies.get(&id) {
            Some(&own) => Policy::resolve(own, self.default_policy),
            None => self.default_policy,
        }
    }

    /// Whether queue `q` may get more leases (politeness aside): room under its policy's
    /// `per_queue`, and under its limit.
    fn has_room(&self, id: u64, q: &Queue) -> bool {
        room(self.policy(id), q)
    }

    /// The first instant queue `q` may be served: its due instant, its block, and its first
    /// record's availability.
    fn ready_at(&self, id: u64, q: &Queue) -> u64 {
        q.ready_at(self.blocks.get(&id).copied().unwrap_or(0))
    }

    /// Puts queue `i` in the scheduler's heap if it may be served (now or later), or moves
    /// its entry earlier (an entry too early is put back when it comes out).
    fn schedule(&mut self, i: u32) {
        let (policy, blocked) = self.schedule_terms(i);
        let entry = self.queues.update(i, |q| q.schedule(policy, blocked));
        self.push_entry(i, entry);
    }

    /// What scheduling queue `i` reads besides its state: its policy and its block.
    fn schedule_terms(&self, i: u32) -> (Policy, u64) {
        let id = self.ids[i as usize];
        (self.policy(id), self.blocks.get(&id).copied().unwrap_or(0))
    }

    /// Puts the entry [`Queue::schedule`] gave queue `i` in the heap, if any.
    fn push_entry(&mut self, i: u32, entry: Option<(u64, Option<u32>)>) {
        if let Some((at, new)) = entry {
            if let Some(crawl) = new {
                *self.scheduled.entry(crawl).or_default() += 1;
            }
            self.heap.push(at, i);
        }
    }

    /// [`Core::schedule`] after a change outside a hand-out that may have left queue `i`
    /// nothing to serve (its records taken, or its room): such a queue leaves the heap's
    /// count, as a hand-out takes out each queue it pops. The count of queues scheduled is
    /// what tells an empty front ([`Core::lease`]), which flushes what was pushed.
    fn settle(&mut self, i: u32) {
        let (policy, _) = self.schedule_terms(i);
        let servable = {
            let q = self.queues.get(i);
            q.has_waiting() && room(policy, &q)
        };
        if servable {
            self.schedule(i);
        } else {
            self.unschedule(i);
        }
    }

    /// Takes queue `i`'s entry out of the heap (any entry left there is stale), changing
    /// its state in place: a packed queue is not taken into the hot map.
    fn unschedule(&mut self, i: u32) {
        let was = self.queues.update(i, |q| {
            let crawl = q.crawl;
            (std::mem::replace(&mut q.heap_at, u64::MAX) != u64::MAX).then_some(crawl)
        });
        self.unscheduled(was);
    }

    /// [`Core::unschedule`] of a state read out of the table, to be put back.
    fn unschedule_state(&mut self, q: &mut Queue) {
        let was = (std::mem::replace(&mut q.heap_at, u64::MAX) != u64::MAX).then_some(q.crawl);
        self.unscheduled(was);
    }

    /// Counts a queue of crawl `was` (if any) out of the heap.
    fn unscheduled(&mut self, was: Option<u32>) {
        if let Some(crawl) = was {
            if let Some(n) = self.scheduled.get_mut(&crawl) {
                *n -= 1;
            }
        }
    }

    /// The queue of a record, and the signature of its URL (for leases by URL).
    fn locate(&self, record: &[u8]) -> std::result::Result<(u64, u32, u64), Corruption> {
        let r = record::decode(record)?;
        let key = r.key.unwrap_or_else(|| default_key(r.url));
        let sig = crate::signature(r.url, record::crawl_seed(self.sieve.seed(), r.crawl));
        Ok((queue_id(r.crawl, key), r.crawl, sig))
    }

    fn apply_lease(&mut self, seq: u64, token: u64, deadline: u64, record: &[u8]) -> Result<()> {
        let g = self.journal_gen();
        let corrupt = |what| Error::corrupt(&names::j(g), 0, what);
        let (qid, crawl, sig) = self.locate(record).map_err(corrupt)?;
        self.next_token = self.next_token.max(token + 1);
        if let Some((i, old, fetched)) = self
            .leases
            .get(seq)
            .map(|l| (l.queue, l.deadline, l.fetched))
        {
            // Handed out again after its lease expired (a replay: the call that handed it
            // out returned it first). The expiry's politeness as that call ran it
            // (`Core::expire`), then the new lease.
            self.lease_left(i, fetched, old, 0);
            self.queues.get_mut(i).leased += 1;
            let given = self.now_ms();
            self.leases.renew(seq, token, deadline, given);
            self.push_expiry(deadline, seq);
            self.settle(i);
            return Ok(());
        }
        let replaying = self.replay_gone.is_some();
        let i = self.queue_of_record(qid, crawl, record, replaying, "lease's queue")?;
        self.lease_in_queue(
            seq,
            token,
            deadline,
            i,
            crawl,
            sig,
            record.into(),
            replaying,
            self.now_ms(),
        )?;
        // The hand-out this replays took the queue out of the heap, and scheduled it again
        // only if it could still be served.
        self.settle(i);
        Ok(())
    }

    /// [`Core::apply_lease`] of a record a hand-out just took from queue `i` and journaled:
    /// the same change, with the queue known (the hand-out checked that the record is of it)
    /// instead of found again from the record's key. Appends the URL to `out`.
    fn apply_lease_taken(
        &mut self,
        pick: Pick,
        token: u64,
        deadline: u64,
        given: u64,
        out: &mut LeasedBatch,
    ) -> Result<()> {
        let g = self.journal_gen();
        let corrupt = |what| Error::corrupt(&names::j(g), 0, what);
        let r = record::decode(&pick.record).map_err(corrupt)?;
        let key = match &pick.key {
            Some(span) => &pick.record[span.clone()],
            None => r.key.unwrap_or_else(|| default_key(r.url)),
        };
        let name = self
            .crawl_names
            .get(&r.crawl)
            .map_or(&[][..], Vec::as_slice);
        out.push(name, key, r.url, r.meta);
        let crawl = r.crawl;
        let (id, q) = (self.ids[pick.queue as usize], &*self.queues.get(pick.queue));
        if pick.listed && (crawl != q.crawl || queue_id(crawl, key) != id) {
            // A record of another queue in this one's lists (as a replay would find).
            return Err(corrupt(Corruption::Mismatch {
                field: "queue of a returned record",
                expected: id,
                found: queue_id(crawl, key),
            }));
        }
        let sig = crate::signature(r.url, record::crawl_seed(self.sieve.seed(), crawl));
        debug_assert_eq!(
            self.locate(&pick.record),
            Ok((self.ids[pick.queue as usize], crawl, sig))
        );
        debug_assert!(!self.leases.contains(pick.seq));
        self.next_token = self.next_token.max(token + 1);
        self.lease_in_queue(
            pick.seq,
            token,
            deadline,
            pick.queue,
            crawl,
            sig,
            pick.record,
            false,
            given,
        )
    }

    /// The rest of a lease's change once its queue `i` is known: record `seq` leaves the
    /// queue's returned records, those to fetch again, or the head of its runs, and is leased.
    #[allow(clippy::too_many_arguments)]
    fn lease_in_queue(
        &mut self,
        seq: u64,
        token: u64,
        deadline: u64,
        i: u32,
        crawl: u32,
        sig: u64,
        record: Box<[u8]>,
        replaying: bool,
        given: u64,
    ) -> Result<()> {
        let q = self.queues.get_mut(i);
        // The lists first: a record to fetch again after a known update may have a seq
        // past the queue's next one.
        if q.take_listed(seq) {
            // Taken from the returned records or those to fetch again.
        } else if seq >= q.next_seq && (q.waiting > 0 || replaying) {
            // While replaying, a count may lag until the next compaction's entry sets it.
            q.waiting = q.waiting.saturating_sub(1);
            q.next_seq = seq + 1;
            // The records skipped on the way are passed.
            if let Some(l) = q.lists.as_mut() {
                l.skips.retain(|&s| s > seq);
            }
            q.tidy();
        } else {
            let g = self.journal_gen();
            return Err(Error::corrupt(
                &names::j(g),
                0,
                Corruption::Invalid {
                    field: "leased record",
                    expected: "the next record of its queue",
                    found: seq,
                },
            ));
        }
        self.insert_lease(seq, token, deadline, i, crawl, sig, record, given);
        Ok(())
    }

    /// Records lease `token` of record `seq` of queue `i` (its URL's signature `sig` in
    /// `crawl`) until `deadline`: in the tables by seq, token and URL, the heap of deadlines,
    /// and the queue's count.
    #[allow(clippy::too_many_arguments)]
    fn insert_lease(
        &mut self,
        seq: u64,
        token: u64,
        deadline: u64,
        i: u32,
        crawl: u32,
        sig: u64,
        record: Box<[u8]>,
        given: u64,
    ) {
        self.queues.get_mut(i).leased += 1;
        self.leases.insert(Lease {
            seq,
            token,
            deadline,
            given,
            sig,
            queue: i,
            crawl,
            fetched: false,
            record,
        });
        self.push_expiry(deadline, seq);
    }

    /// Notes that lease `seq` expires at `deadline`. An entry of a lease that ended, or
    /// whose deadline moved, stays in the heap until it reaches the top, which takes as long
    /// as the lease would have lasted: at hundreds of thousands of hand-outs a second and
    /// deadlines of minutes, millions of them. Once they are more than the live leases (and
    /// a few thousand), the heap keeps only the live entries: it never holds more than twice
    /// the leases, and each hand-out pays for the sweep a constant on average.
    fn push_expiry(&mut self, deadline: u64, seq: u64) {
        self.expiries.push(Reverse((deadline, seq)));
        if self.expiries.len() > 2 * self.leases.len() + EXPIRIES_SLACK {
            let leases = &self.leases;
            self.expiries.retain(|Reverse((deadline, seq))| {
                leases.get(*seq).is_some_and(|l| l.deadline == *deadline)
            });
            if self.expiries.capacity() > 4 * self.expiries.len() + EXPIRIES_SLACK {
                self.expiries
                    .shrink_to(2 * self.expiries.len() + EXPIRIES_SLACK);
            }
        }
    }

    /// Ends the lease of `seq` at `at`, after a fetch of `took` milliseconds; a record to
    /// fetch again is `record` when given, else the lease's.
    fn end_lease(
        &mut self,
        seq: u64,
        at: u64,
        took: u64,
        end: End,
        record: Option<&[u8]>,
    ) -> Result<()> {
        let g = self.journal_gen();
        let lease = self.leases.remove(seq).ok_or_else(|| {
            Error::corrupt(
                &names::j(g),
                0,
                Corruption::Invalid {
                    field: "end of a lease",
                    expected: "a leased record",
                    found: seq,
                },
            )
        })?;
        let i = lease.queue;
        self.lease_left(i, lease.fetched, at, took);
        let q = self.queues.get_mut(i);
        match end {
            End::Done => q.completed = q.completed.saturating_add(1),
            End::Retry => q.insert_returned(seq, lease.record),
            End::Refetch(when) => {
                let rec = record.map_or(lease.record, Into::into);
                insert_refetch(q, when, seq, rec);
            }
            // Its entry is applied by `Core::lease_fetched`.
            End::Fetched => unreachable!("a fetch's end given as a lease's"),
        }
        self.schedule(i);
        Ok(())
    }

    /// The fetch of the lease of `seq` ended at `at`, after `took` milliseconds: its queue's
    /// politeness runs from `at`, and the lease no longer holds the queue's place. It stays
    /// until it ends or expires.
    fn lease_fetched(&mut self, seq: u64, at: u64, took: u64) -> Result<()> {
        if !self.leases.set_fetched(seq) {
            let g = self.journal_gen();
            return Err(Error::corrupt(
                &names::j(g),
                0,
                Corruption::Invalid {
                    field: "end of a fetch",
                    expected: "a leased record whose fetch had not ended",
                    found: seq,
                },
            ));
        }
        let i = self.leases.get(seq).expect("leased").queue;
        self.queues.get_mut(i).fetched += 1;
        self.fetch_ended(i, at, took);
        self.schedule(i);
        Ok(())
    }

    /// One lease of queue `i` ends, its fetch ended at `at` after `took` milliseconds (an
    /// expiry: at the deadline, after 0), unless it had ended before (`fetched`: the
    /// politeness ran then).
    fn lease_left(&mut self, i: u32, fetched: bool, at: u64, took: u64) {
        let q = self.queues.get_mut(i);
        q.leased -= 1;
        if fetched {
            q.fetched -= 1;
        } else {
            self.fetch_ended(i, at, took);
        }
    }

    /// The fetch of a lease of queue `i` ended at `at`, after `took` milliseconds, and the
    /// lease no longer holds its place (the caller counted it out): the queue's next
    /// hand-out waits for the politeness of the lecture notes' §2.7.
    fn fetch_ended(&mut self, i: u32, at: u64, took: u64) {
        let p = self.policy(self.ids[i as usize]);
        let burst = self.burst(i).saturating_add(took);
        let q = self.queues.get_mut(i);
        let ends = q.holding() == 0;
        // Rule 1: a delay from the end of the fetch.
        let mut wait = p.delay_ms;
        // Rule 2: after the burst's fetches took s' in all, wait s'/p.
        if p.ratio_ppm > 0 && ends {
            let ratio_wait = burst.saturating_mul(1_000_000) / u64::from(p.ratio_ppm);
            wait = wait.max(ratio_wait.min(RATIO_WAIT_MAX_MS));
        }
        q.due = q.due.max(at.saturating_add(wait));
        self.set_burst(i, if ends { 0 } else { burst });
        if ends {
            if !self.burst_ends.is_empty() {
                self.burst_ends.remove(&i);
            }
        } else {
            let last = self.burst_ends.entry(i).or_insert(at);
            *last = (*last).max(at);
        }
    }

    /// Shortens the wait queue `i` began under policy `old` to what policy `new`, set at
    /// `at`, allows: at most its delay (rule 1) from `at`, or, for the ratio rule, the wait
    /// left scaled by the ratios (when `old` had no ratio rule, the fetch's time is unknown
    /// and that part of the wait is kept). Never longer: a wait begun ends by the policy it
    /// began under or sooner, and since the fetch ended at or before `at`, the new delay
    /// still holds from its end.
    fn shorten_wait(&mut self, i: u32, old: Policy, new: Policy, at: u64) {
        let left = self.queues.get(i).due.saturating_sub(at);
        if left == 0 {
            return;
        }
        let ratio_part = match (old.ratio_ppm, new.ratio_ppm) {
            (_, 0) => 0,
            (0, _) => left,
            (o, n) => {
                u64::try_from(u128::from(left) * u128::from(o) / u128::from(n)).unwrap_or(u64::MAX)
            }
        };
        let wait = left.min(new.delay_ms.max(ratio_part));
        if wait < left {
            self.queues.update(i, |q| q.due = at + wait);
        }
    }

    /// Milliseconds the fetches of queue `i`'s current burst took.
    fn burst(&self, i: u32) -> u64 {
        if self.bursts.is_empty() {
            return 0;
        }
        self.bursts.get(&i).copied().unwrap_or(0)
    }

    /// Sets them (0: no burst, the queue's entry removed).
    fn set_burst(&mut self, i: u32, ms: u64) {
        if ms == 0 {
            if !self.bursts.is_empty() {
                self.bursts.remove(&i);
            }
        } else {
            self.bursts.insert(i, ms);
        }
    }

    /// The queue `qid` of record `record` (of crawl `crawl`); made when `create` (a queue
    /// first seen in a run a later compaction removed, while replaying; a known update of a
    /// done URL), else a damaged `field` of J.
    fn queue_of_record(
        &mut self,
        qid: u64,
        crawl: u32,
        record: &[u8],
        create: bool,
        field: &'static str,
    ) -> Result<u32> {
        let g = self.journal_gen();
        let corrupt = |what| Error::corrupt(&names::j(g), 0, what);
        let hinted = (self.hint.take()).filter(|&p| self.ids.get(p as usize) == Some(&qid));
        match hinted.or_else(|| self.place(qid)) {
            Some(i) => Ok(i),
            None if create => {
                let r = record::decode(record).map_err(corrupt)?;
                Ok(self.queue(qid, crawl, r.key.unwrap_or_else(|| default_key(r.url))))
            }
            None => Err(corrupt(Corruption::Invalid {
                field,
                expected: "a queue of the frontier",
                found: qid,
            })),
        }
    }

    /// The place of the queue of each `lease` entry of J, in their order (`u32::MAX` for a
    /// queue the state does not hold yet, or a record that does not decode): found together
    /// after the checkpoint's load, in the order of their ids by the walk of the queues in
    /// that order, rather than each in the index as it is applied (at 10^6 queues a look-up
    /// lands on the table and then on the queue at random: a fifth of an open whose J held
    /// 700,000 hand-outs). A place is a hint: the replay checks the queue's id. 20 bytes a
    /// `lease` entry (there are `leases`), 4 of them for the time of the replay.
    fn lease_places(&mut self, entries: &Entries, leases: usize) -> Result<Vec<u32>> {
        let mut order: Vec<(u64, u32)> = Vec::with_capacity(leases);
        let mut k = 0u32;
        for d in entries.decoded() {
            if let (_, Entry::Lease { record, .. }) = d? {
                if let Ok((qid, _, _)) = self.locate(record) {
                    order.push((qid, k));
                }
                k += 1;
            }
        }
        order.sort_unstable();
        let mut places = vec![u32::MAX; k as usize];
        let walk = self.begin_walk(order.len() as u64);
        for &(qid, k) in &order {
            if let Some(p) = self.place_walking(qid, walk) {
                places[k as usize] = p;
                #[cfg(test)]
                {
                    self.lease_places_found += 1;
                }
            }
            // Tests: the walk finds what the index does.
            #[cfg(test)]
            assert_eq!(
                places[k as usize],
                self.place(qid).unwrap_or(u32::MAX),
                "the place of lease entry {k}'s queue"
            );
        }
        Ok(places)
    }

    /// Applies a known update (journal entry 13): record `seq` is done (`when` 0) or to fetch
    /// again from `when`, as `record`, whatever it was; `fresh`: a done URL to fetch again,
    /// under the new seq `seq`.
    fn apply_known(
        &mut self,
        seq: u64,
        at: u64,
        when: u64,
        fresh: bool,
        record: &[u8],
    ) -> Result<()> {
        let g = self.journal_gen();
        let corrupt = |what| Error::corrupt(&names::j(g), 0, what);
        let (qid, crawl, _) = self.locate(record).map_err(corrupt)?;
        if !fresh
            && self
                .leases
                .get(seq)
                .is_some_and(|l| self.ids[l.queue as usize] == qid)
        {
            let end = if when == 0 {
                End::Done
            } else {
                End::Refetch(when)
            };
            self.end_lease(seq, at, 0, end, Some(record))?;
            if when == 0 {
                self.done = self.done.saturating_add(1);
            }
            return Ok(());
        }
        let replaying = self.replay_gone.is_some();
        let i =
            self.queue_of_record(qid, crawl, record, fresh || replaying, "known URL's queue")?;
        let next_seq = self.next_seq;
        let q = self.queues.get_mut(i);
        let bad = |field| {
            corrupt(Corruption::Invalid {
                field,
                expected: "a record of its queue",
                found: seq,
            })
        };
        if fresh {
            if seq < next_seq {
                return Err(bad("new seq of a known URL"));
            }
            self.next_seq = seq + 1;
            // No longer done (counted again below if it is done again): the queue's done
            // URLs, which its crawl limit counts, are URLs, not fetches.
            if q.completed > 0 {
                q.completed -= 1;
                self.done = self.done.saturating_sub(1);
            }
        } else if q.take_listed(seq) {
            // Taken from the returned records or those to fetch again.
        } else if seq >= q.next_seq && seq < next_seq {
            match q.skips().binary_search(&seq) {
                Ok(_) => return Err(bad("seq of a known URL")),
                Err(k) => q.lists_mut().skips.insert(k, seq),
            }
            if let Some(c) = self.compaction.as_mut() {
                // The merge under way keeps the record: it is not committed.
                c.spoil();
            }
            // While replaying, a count may lag until the next compaction's entry sets it.
            q.waiting = q.waiting.saturating_sub(1);
        } else {
            return Err(bad("seq of a known URL"));
        }
        let q = self.queues.get_mut(i);
        if when == 0 {
            q.completed = q.completed.saturating_add(1);
            self.done = self.done.saturating_add(1);
        } else {
            insert_refetch(q, when, seq, record.into());
        }
        self.settle(i);
        Ok(())
    }

    /// The frontier's time: the clock's instant, or the latest one it gave if the clock was
    /// set back since (a system clock stepped back). Expiries are not undone, so a call must
    /// not journal an instant earlier than one at which a call before it returned leases: a
    /// replay returns the leases whose deadline passed at each instant it reads, and would
    /// return them later than the calls did. Held for the open only: an open's replay has
    /// run every expiry up to the journal's latest instant, so an earlier one after it
    /// returns nothing a replay would not (and a clock that ran ahead before a restart does
    /// not hold the frontier's time back after it).
    pub(super) fn now_ms(&self) -> u64 {
        let now = self.clock.now_ms();
        if crate::planted::active(crate::planted::Bug::ClockRunsBack) {
            return now;
        }
        now.max(self.clock_high.fetch_max(now, Ordering::Relaxed))
    }

    /// Returns the leases whose deadline passed to their queues.
    fn expire(&mut self, now: u64) {
        while let Some(&Reverse((deadline, seq))) = self.expiries.peek() {
            if deadline > now {
                break;
            }
            self.expiries.pop();
            let current = self.leases.get(seq).is_some_and(|l| l.deadline == deadline);
            if !current {
                continue;
            }
            let lease = self.leases.remove(seq).expect("present");
            if self.replay_gone.is_none() {
                self.expired_unjournaled = true;
            }
            // The fetch's end is not known (unless it was said): the politeness delay runs
            // from the deadline, so that a fetcher that died, or one too slow, does not make
            // its host served again sooner than one that reported.
            self.lease_left(lease.queue, lease.fetched, deadline, 0);
            self.queues
                .get_mut(lease.queue)
                .insert_returned(seq, lease.record);
            self.schedule(lease.queue);
        }
    }

    /// Applies an import (journal entry 15): each queue named is replaced, as a delete would
    /// empty it, by the state the entry gives it; the import's records are in Q run `run`.
    fn apply_import(
        &mut self,
        transfer: &[u8],
        run: Option<u64>,
        next_seq: u64,
        queues: &[ImportedQueue<'_>],
    ) -> Result<()> {
        let g = self.journal_gen();
        let corrupt = |what| Error::corrupt(&names::j(g), 0, what);
        let given = self.now_ms();
        let mut slots = Vec::with_capacity(queues.len());
        for iq in queues {
            let id = queue_id(iq.crawl, iq.key);
            if let Some(i) = self.place(id) {
                self.drop_queue(i);
            }
            self.policies.remove(&id);
            self.blocks.remove(&id);
            slots.push(self.queue(id, iq.crawl, iq.key));
        }
        self.next_seq = self.next_seq.max(next_seq);
        if let Some(id) = run {
            self.next_run = self.next_run.max(id + 1);
            // Unless a later compaction removed it: its records are in that one's run.
            if !self.replay_gone.as_ref().is_some_and(|g| g.contains(&id)) {
                let run = Run::open(self.sieve.storage().as_ref(), id)?;
                self.install(run)?;
            }
        }
        for (iq, &i) in queues.iter().zip(&slots) {
            let id = queue_id(iq.crawl, iq.key);
            if let Some(p) = iq.policy {
                self.policies.insert(id, p);
            }
            if iq.block != 0 {
                self.blocks.insert(id, iq.block);
            }
            self.done = self.done.saturating_add(iq.completed);
            let q = self.queues.get_mut(i);
            q.next_seq = iq.next_seq;
            q.waiting = iq.waiting;
            q.completed = iq.completed;
            q.due = iq.due;
            q.at = None;
            q.lists = None;
            for &(seq, r) in &iq.returned {
                q.insert_returned(seq, r.into());
            }
            for &(when, seq, r) in &iq.refetch {
                insert_refetch(q, when, seq, r.into());
            }
            for &(seq, token, deadline, record) in &iq.leases {
                let (qid, crawl, sig) = self.locate(record).map_err(corrupt)?;
                if qid != id {
                    return Err(corrupt(Corruption::Mismatch {
                        field: "queue of an imported lease",
                        expected: id,
                        found: qid,
                    }));
                }
                self.next_token = self.next_token.max(token + 1);
                self.insert_lease(seq, token, deadline, i, crawl, sig, record.into(), given);
            }
            self.set_burst(i, iq.burst);
            self.unschedule(i);
            self.schedule(i);
        }
        let receipts = self.transfers.entry(transfer.to_vec()).or_default();
        for iq in queues {
            let id = queue_id(iq.crawl, iq.key);
            receipts.insert(id);
            self.released.remove(&id);
        }
        Ok(())
    }

    /// Empties queue `i`: its records waiting are skipped for good (those in the Q runs go at
    /// the next compaction), its leases end (a later done of one changes nothing), and its
    /// counts start again. Returns how many URLs it held (leased ones included).
    fn drop_queue(&mut self, i: u32) -> u64 {
        let seqs: Vec<u64> = self
            .leases
            .iter()
            .filter(|l| l.queue == i)
            .map(|l| l.seq)
            .collect();
        for &seq in &seqs {
            self.leases.remove(seq).expect("listed");
        }
        let next_seq = self.next_seq;
        let q = self.queues.get_mut(i);
        let held = q.waiting + (q.returned().len() + q.refetch().len() + seqs.len()) as u64;
        self.done = self.done.saturating_sub(q.completed);
        q.next_seq = next_seq;
        q.waiting = 0;
        q.lists = None;
        q.leased = 0;
        q.fetched = 0;
        q.completed = 0;
        q.due = 0;
        q.runs = 0;
        q.at = None;
        self.bursts.remove(&i);
        self.burst_ends.remove(&i);
        self.unschedule(i);
        held
    }
    /// Pushes discovered URLs of crawl `crawl`: durable when this returns.
    pub(super) fn push(&mut self, crawl: &[u8], items: &[super::Discovered<'_>]) -> Result<()> {
        own_keys(items)?;
        self.push_items(crawl, items, None)?;
        self.sync()
    }

    /// Pushes `items` of `crawl`, and says of each whether it was new: a URL already known
    /// to the crawl (pushed before, this batch's earlier items included) is not pushed.
    /// Durable when this returns if `durable`; otherwise at the next [`Core::sync`] (or
    /// commit to J, or flush).
    pub(super) fn push_new(
        &mut self,
        crawl: &[u8],
        items: &[super::Discovered<'_>],
        durable: bool,
    ) -> Result<Vec<bool>> {
        own_keys(items)?;
        let mut new = Vec::with_capacity(items.len());
        self.push_items(crawl, items, Some(&mut new))?;
        if durable {
            self.sync()?;
        }
        Ok(new)
    }

    /// Makes every push made so far durable (a no-op when none waits).
    pub(super) fn sync(&mut self) -> Result<()> {
        if self.unsynced {
            self.sieve.sync()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Pushes `items` of `crawl`, not yet durable ([`Core::sync`] makes them so); with
    /// `new`, only those not known, each one's novelty appended to it.
    fn push_items(
        &mut self,
        crawl: &[u8],
        items: &[super::Discovered<'_>],
        new: Option<&mut Vec<bool>>,
    ) -> Result<()> {
        self.writable()?;
        for it in items {
            self.validate(it.url, it.key)?;
            super::validate_metadata(it.metadata)?;
        }
        let id = self.crawl_id(crawl)?;
        let seed = record::crawl_seed(self.sieve.seed(), id);
        let sigs: Vec<u64> = items
            .iter()
            .map(|it| crate::signature(it.url, seed))
            .collect();
        // With `new`: which URLs were known before this batch, looked up together (each
        // block of Z and of the runs read once for all of them); the batch's own repeats are
        // found in a set of its signatures.
        let mut novelty = match new {
            Some(new) => Some((
                new,
                self.sieve.known_signatures(&sigs)?,
                std::collections::HashSet::with_capacity(items.len()),
            )),
            None => None,
        };
        let mut buf = Vec::new();
        for (i, (it, &sig)) in items.iter().zip(&sigs).enumerate() {
            self.unsynced = true;
            if let Some((new, known, batch)) = novelty.as_mut() {
                let fresh = !known[i] && batch.insert(sig);
                new.push(fresh);
                if !fresh {
                    self.sieve.count_repeat();
                    continue;
                }
            }
            buf.clear();
            record::encode(
                &mut buf,
                &Record {
                    crawl: id,
                    key: it.key,
                    meta: it.metadata,
                    url: it.url,
                },
            );
            self.sieve.push_parts(&[], &buf, sig)?;
        }
        Ok(())
    }

    /// Refuses a URL or a key that a push would refuse.
    pub(super) fn validate(&self, url: &[u8], key: Option<&[u8]>) -> Result<()> {
        self.sieve.validate(url)?;
        super::refuse_newline_key(key)?;
        super::validate_key(key)
    }

    /// The id of crawl `name`, given a new one (durably) if it has none; a new name over
    /// [`super::MAX_CRAWL_LEN`] bytes is refused.
    fn crawl_id(&mut self, name: &[u8]) -> Result<u32> {
        if !self.crawls.contains_key(name) && name.len() > super::MAX_CRAWL_LEN {
            return Err(Error::InvalidOption {
                option: "crawl",
                reason: format!("a crawl's name is at most {} bytes", super::MAX_CRAWL_LEN),
            });
        }
        self.crawl_id_any(name)
    }

    /// [`Core::crawl_id`] of a name of any length: a queue imported from another frontier
    /// keeps the crawl it had there (one made by a build before the bound included).
    fn crawl_id_any(&mut self, name: &[u8]) -> Result<u32> {
        if let Some(&id) = self.crawls.get(name) {
            return Ok(id);
        }
        let id = self.next_crawl;
        self.commit(&[Entry::Crawl { id, name }])?;
        Ok(id)
    }

    /// Flushes the sieve and queues every new URL.
    pub(super) fn flush(&mut self) -> Result<()> {
        self.writable()?;
        self.sieve.flush()?;
        self.unsynced = false;
        self.settle_move()?;
        while self.sieve.unread_records() > 0 {
            self.move_f(false)?;
        }
        self.poll_compaction()
    }

    /// One step of a flush that holds the lock for no merge and no more than one move:
    /// [`Core::flush`], except that it does not wait for the sieve's flush thread and moves
    /// one part of F ([`Core::move_f`]) a step. The caller lets the lock go between two
    /// steps, waits for the sieve's thread when told ([`FlushStep::Wait`],
    /// [`Core::sieve_busy`]), and calls again with the same `st`, until
    /// [`FlushStep::Done`]: the pushes made before the first step are merged, and F is moved
    /// into the queues up to its end when their merge was applied (what merges of later
    /// pushes add to F is not waited for).
    pub(super) fn flush_step(&mut self, st: &mut FlushState) -> Result<FlushStep> {
        self.writable()?;
        if st.target.is_none() {
            if crate::planted::active(crate::planted::Bug::FlushUnderLock) {
                while !self.sieve.flush_step(&mut st.ticket)? {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            } else if !self.sieve.flush_step(&mut st.ticket)? {
                return Ok(FlushStep::Wait);
            }
            st.target = Some(self.sieve.f_read_and_count().1);
        }
        let target = st.target.unwrap_or(0);
        // A move under way counts its records as read: they are in their queues only once
        // it is installed.
        if self.move_busy() {
            return Ok(FlushStep::Wait);
        }
        self.settle_move()?;
        if self.sieve.f_read_and_count().0 < target {
            self.move_f(true)?;
            if self.moving.is_some() {
                return Ok(FlushStep::Wait);
            }
            if self.sieve.f_read_and_count().0 < target {
                return Ok(FlushStep::More);
            }
        }
        self.poll_compaction()?;
        Ok(FlushStep::Done)
    }

    /// The store's description (its directory, for one on disk).
    pub(super) fn describe(&self) -> String {
        self.sieve.storage().describe()
    }

    /// Whether the sieve's flush thread runs a job, or a move's thread writes a run, that has
    /// not ended.
    pub(super) fn sieve_busy(&self) -> bool {
        self.sieve.flush_thread_busy() || self.move_busy()
    }

    /// Pushes not in their queues yet: see [`super::Frontier::unqueued`]. (F's records past
    /// the mover's position, not the durable cursor's, which may lag it after a crash: J
    /// holds the move.)
    pub(super) fn unqueued(&mut self) -> Result<u64> {
        self.poll_move()?;
        Ok(self.sieve.unmerged_pushes()? + self.sieve.unread_records())
    }

    /// The queues scheduled, of crawl `only` or of every crawl.
    fn front(&self, only: Option<u32>) -> u64 {
        match only {
            None => self.scheduled.values().sum(),
            Some(id) => self.scheduled.get(&id).copied().unwrap_or(0),
        }
    }

    /// Hands out up to `per_queue` URLs (and the queue's policy's room) of each of up to
    /// `max_queues` due queues, leased for `ttl` milliseconds.
    /// `part`: for a part of a hand-out ([`super::Handout`]), what its earlier parts did: the
    /// queues they served are passed over (and held out of the heap until the hand-out ends,
    /// [`Core::reschedule`]), and this part adds its own. `first`: the first part (or a whole
    /// hand-out): only then does an empty front flush the sieve, in steps
    /// ([`Core::flush_step`]). `Err(step)`: nothing was handed out, the flush is under way;
    /// the caller lets the lock go (and, for [`FlushStep::Wait`], waits for the sieve's
    /// thread), then calls again with the same `flush`.
    pub(super) fn lease(
        &mut self,
        req: &super::LeaseRequest,
        mut part: Option<&mut Parts>,
        first: bool,
        flush: &mut FrontFlush,
    ) -> Result<std::result::Result<LeasedBatch, FlushStep>> {
        let (max_queues, per_queue, ttl) = (req.max_queues, req.per_queue, req.ttl_ms);
        self.writable()?;
        // A merge that ended in an error says so here, with its file (the count of unread
        // records below would only leave the sieve poisoned).
        self.sieve.poll_flush()?;
        let now = self.now_ms();
        if let Some((start, began)) = self.demand.started {
            if !self.sieve.flush_thread_busy() {
                // How long the job ran, from its start to its end where it ran (not to this
                // call, which may come long after).
                let took = self.sieve.last_flush_end().map_or(0, |end| {
                    let ms = end.saturating_duration_since(began).as_millis();
                    u64::try_from(ms).unwrap_or(u64::MAX)
                });
                let gap = took.saturating_mul(DEMAND_FACTOR).max(DEMAND_GAP_MS);
                self.demand = DemandFlush {
                    started: None,
                    next_at: start.saturating_add(gap),
                    gap,
                    begun: self.demand.begun,
                };
            }
        }
        if let Some(e) = self.demand_error.take() {
            // The flush an earlier hand-out began failed to start; that hand-out was
            // answered, and this call says so.
            self.poisoned = true;
            return Err(e);
        }
        self.poll_compaction()?;
        self.expire(now);
        if crate::planted::active(crate::planted::Bug::MoveUnderLock) {
            self.settle_move()?;
        }
        self.poll_move()?;
        if self.paused {
            return Ok(Ok(LeasedBatch::default()));
        }
        // F's new records go to a run on a thread of their own, one move at a time: they
        // are newer than every record in the queues, which are served meanwhile.
        if self.moving.is_none() && self.sieve.unread_records() > 0 {
            self.move_f(true)?;
        }
        let only = match &req.crawl {
            None => None,
            Some(name) => match self.crawls.get(super::crawl_name(name)) {
                Some(&id) => Some(id),
                // A crawl never pushed to has no queues.
                None => return Ok(Ok(LeasedBatch::default())),
            },
        };
        // A queue the heap still counts but that has nothing to serve would hide an empty
        // front (and the flush it asks for) until a hand-out popped it.
        self.purge_stale_top(false);
        let front = self.front(only);
        // With flushes in the background, an empty front whose last flush left it empty
        // flushes again only some time after (each merges Z whole: a crawler whose every
        // host has its fetcher out, pushing the links it finds, paid one at each call).
        let spaced = self.background
            && front == 0
            && !flush.begun
            && waits_for(
                self.clock.now_ms(),
                self.fruitless_until,
                self.fruitless_gap,
            );
        if first && !flush.done && !spaced && (flush.begun || front == 0) {
            // Nothing of the crawls asked waits: what was pushed is flushed, as BUbiNG does
            // when its front is empty (once per hand-out), and moved into the queues before
            // any is served: once begun, the flush goes on whatever the front becomes.
            if !flush.begun {
                flush.began = Some(std::time::Instant::now());
            }
            flush.begun = !crate::planted::active(crate::planted::Bug::FrontServedEarly);
            match self.flush_step(&mut flush.state)? {
                FlushStep::Done => {
                    flush.done = true;
                    (self.fruitless_until, self.fruitless_gap) =
                        match (self.front(only), flush.began) {
                            (0, Some(began)) => {
                                let took = u64::try_from(began.elapsed().as_millis()).unwrap_or(0);
                                let gap = took.saturating_mul(DEMAND_FACTOR) + 1;
                                (self.clock.now_ms().saturating_add(gap), gap)
                            }
                            _ => (0, 0),
                        };
                }
                step => return Ok(Err(step)),
            }
        }
        let deadline = now.saturating_add(ttl);
        // The queues to serve, with how many records of each, in the order chosen.
        // Sized for the queues a call commonly serves, so that a call of a thousand queues
        // does not grow them a dozen times.
        let room = max_queues.min(req.max_urls).min(4096);
        let mut chosen: Vec<(u32, u32)> = Vec::with_capacity(room);
        let mut planned = 0;
        let mut served: Vec<u32> = Vec::with_capacity(room);
        let mut popped: Vec<u32> = Vec::with_capacity(room);
        // One queue asked by its key: that queue only (of DEFAULT when no crawl is given).
        let mut one = match &req.key {
            None => None,
            Some(key) => {
                let crawl = match only {
                    Some(id) => Some(id),
                    None => self.crawls.get(&b"DEFAULT"[..]).copied(),
                };
                let Some(crawl) = crawl else {
                    return Ok(Ok(LeasedBatch::default()));
                };
                let qid = queue_id(crawl, key);
                let waits = |c: &Core| c.place(qid).is_some_and(|i| c.queues.get(i).has_waiting());
                if !waits(self) && (front > 0 || spaced) && first && !flush.done {
                    // What was pushed to it may still be in the sieve (the flush of an
                    // empty front, spaced, did not run for it).
                    flush.begun = true;
                    match self.flush_step(&mut flush.state)? {
                        FlushStep::Done => flush.done = true,
                        step => return Ok(Err(step)),
                    }
                }
                match self.place(qid) {
                    Some(i) => Some(i),
                    None => return Ok(Ok(LeasedBatch::default())),
                }
            }
        };
        // The queues chosen stay decoded until their leases are applied (a call that fails on
        // the way poisons the frontier: nothing packs them again, nor needs to); those popped
        // and passed over are changed in place.
        self.queues.hold();
        while served.len() < max_queues && planned < req.max_urls {
            let (i, popped_at) = if req.key.is_some() {
                let Some(i) = one.take() else {
                    break;
                };
                (i, None)
            } else {
                let Some((due, i)) = self.heap.peek() else {
                    break;
                };
                if due > now {
                    break;
                }
                self.heap.pop();
                (i, Some(due))
            };
            // Read once, before it is taken out of the heap: a queue served is taken into
            // the hot map as read, one passed over is coded again in place.
            let (held, k, cold) = {
                let (id, state) = (self.ids[i as usize], self.queues.get(i));
                let q = &*state;
                if popped_at.is_some_and(|due| q.heap_at != due) {
                    // A stale entry: the queue's entry is another one.
                    continue;
                }
                let held = part.as_ref().is_some_and(|p| p.served.contains(&id))
                    && !crate::planted::active(crate::planted::Bug::PartsServeTwice);
                let k = if held
                    || !q.has_waiting()
                    || !self.has_room(id, q)
                    || only.is_some_and(|c| c != q.crawl)
                    || self.serve_only.as_ref().is_some_and(|f| !f(self.key(q)))
                    || self.ready_at(id, q) > now
                {
                    // Another crawl's queue (or one not served here), or one whose instant
                    // moved later since it was scheduled: scheduled again below.
                    0
                } else {
                    let policy = self.policy(id);
                    let mut room = policy.per_queue - q.holding();
                    if policy.limit > 0 {
                        let left = policy.limit - q.completed - u64::from(q.leased);
                        room = room.min(u32::try_from(left).unwrap_or(u32::MAX));
                    }
                    let k = per_queue.map_or(room, |k| k.clamp(1, room.max(1)).min(room));
                    let k = k.min(u32::try_from(req.max_urls - planned).unwrap_or(u32::MAX));
                    // What it holds to serve now: its returned records, those to fetch again
                    // whose instant has passed, and those waiting in the runs.
                    let listed =
                        q.returned().len() + q.refetch().iter().take_while(|r| r.0 <= now).count();
                    u64::from(k).min(listed as u64 + q.waiting) as u32
                };
                let cold = match state {
                    table::Ref::Hot(_) => None,
                    table::Ref::Cold(q) => Some(q),
                };
                (held, k, cold)
            };
            // Out of the heap: served by an earlier part (until the hand-out ends, so that
            // later parts do not pop it again and again), passed over, or served now.
            let served_now = !held && k > 0;
            match cold {
                Some(mut q) => {
                    self.unschedule_state(&mut q);
                    match served_now {
                        // Decoded once for the steps below (and not packed before its
                        // leases are applied: at most the call's queues more in the hot map).
                        true => self.queues.heat(i, q),
                        false => self.queues.put(i, q),
                    }
                }
                None => self.unschedule(i),
            }
            if held {
                if let Some(p) = part.as_mut() {
                    p.held.push(i);
                }
                continue;
            }
            popped.push(i);
            if k == 0 {
                continue;
            }
            chosen.push((i, k));
            planned += k as usize;
            // Counted as served when chosen: it gives `k` records unless its runs are damaged
            // (they hold fewer than its count says), and then fewer.
            served.push(i);
            if let Some(p) = part.as_mut() {
                p.served.insert(self.ids[i as usize]);
            }
        }
        let picked = match self.take_all(&chosen, now) {
            Ok(picked) => picked,
            Err(e) => {
                // The state of the queues popped is unknown to the heap: stop here.
                self.poisoned = true;
                return Err(e);
            }
        };
        let first_token = self.next_token;
        if !picked.is_empty() {
            // The leases returned since the last entry 22, in deadline order: a replay
            // returns them at this instant, before the leases (entry 22), as this call did.
            let expired = (self.expired_unjournaled
                && !crate::planted::active(crate::planted::Bug::ExpiryUnjournaled))
            .then_some(Entry::Expired { at: now });
            if expired.is_some() {
                if let Err(e) = self.commit_version() {
                    self.queues.release();
                    return Err(e);
                }
            }
            let entries: Vec<Entry<'_>> = (expired.into_iter())
                .chain(picked.iter().enumerate().map(|(k, p)| Entry::Lease {
                    seq: p.seq,
                    token: first_token + k as u64,
                    deadline,
                    record: &p.record,
                }))
                .collect();
            if let Err(e) = self.journal_deferred(&entries) {
                self.queues.release();
                return Err(e);
            }
            self.expired_unjournaled = false;
        }
        // Written (durable before the caller answers, see `commit_deferred`): applied as a
        // replay would apply the entries, the records moved into the
        // leases, and the URLs copied into the batch on the way.
        // Each URL, key and metadata comes from its record, which holds them and a few bytes
        // (a URL's host, its default key, counted again: the batch holds it apart).
        let bytes = (picked.iter())
            .map(|p| p.record.len() + p.key.as_ref().map_or(0, |k| k.len()))
            .sum();
        let mut out = LeasedBatch::new(first_token, deadline, picked.len(), bytes);
        for (k, pick) in picked.into_iter().enumerate() {
            if let Err(e) =
                self.apply_lease_taken(pick, first_token + k as u64, deadline, now, &mut out)
            {
                self.poisoned = true;
                return Err(e);
            }
        }
        self.queues.release();
        if !out.is_empty() {
            self.checkpoint_if_due()?;
        }
        for i in popped {
            self.schedule(i);
        }
        // (A hand-out in parts asks once it ended: `Frontier::lease_part`.)
        if part.is_none() && served.len() < max_queues && planned < req.max_urls {
            self.demand_flush();
        }
        Ok(Ok(out))
    }

    /// A hand-out (or one in parts, once it ended) found fewer queues due than it could
    /// serve, while the sieve holds URLs pushed since its last flush: they may be of new
    /// queues, or of queues that ran dry, which a flush only moves into the queues. The
    /// front not being empty, nothing flushed them before (an empty front does, and waits
    /// for it: [`Core::lease`]); without this, a
    /// crawl whose queues never all run dry would serve the hosts it found first, and none
    /// found since, until S fills. So the flush begins here, on the sieve's thread, and this
    /// hand-out does not wait for it: the next ones move F into the queues as ever, once it
    /// ended. At most one at a time, and each [`DEMAND_GAP_MS`] after the last, or
    /// [`DEMAND_FACTOR`] times as long as the last took, whichever is longer (each merges Z
    /// whole).
    pub(super) fn demand_flush(&mut self) {
        // The clock as it reads: this spacing journals nothing, and a clock set back to before
        // the wait began does not hold it back (the frontier's time would stand still).
        let now = self.clock.now_ms();
        let waits = waits_for(now, self.demand.next_at, self.demand.gap.max(DEMAND_GAP_MS));
        if self.paused
            || self.demand.started.is_some()
            || waits
            || self.sieve_busy()
            || !self.sieve.holds_unflushed()
            || self.demand_error.is_some()
        {
            return;
        }
        let began = std::time::Instant::now();
        let mut ticket = None;
        match self.sieve.flush_step(&mut ticket) {
            Ok(_) => {
                self.demand.started = Some((now, began));
                self.demand.begun += 1;
            }
            // The hand-out that asked is answered: its leases are journaled. The sieve
            // refuses writes from now on, and the next hand-out returns this error.
            Err(e) => self.demand_error = Some(e),
        }
    }

    /// Whether a flush for a caller that reads counts may be skipped: Z holds at least
    /// [`COSTLY_Z`] signatures, and the sieve's last merge ended less than [`DEMAND_GAP_MS`]
    /// ago, or [`DEMAND_FACTOR`] times as long as it took (the spacing of the flushes
    /// hand-outs ask for), by the system's clock where it ran.
    pub(super) fn merged_recently(&self) -> bool {
        if self.sieve.z_signatures() < COSTLY_Z {
            return false;
        }
        let Some((began, ended)) = self.sieve.last_merge() else {
            return false;
        };
        let took = ended.saturating_duration_since(began);
        let gap =
            (took * DEMAND_FACTOR as u32).max(std::time::Duration::from_millis(DEMAND_GAP_MS));
        ended.elapsed() < gap
    }

    /// How many flushes hand-outs began while other queues still served, since the open.
    pub(super) fn demand_flushes(&self) -> u64 {
        self.demand.begun
    }

    /// Puts the queues a hand-out in parts held out of the heap back in it (its end).
    pub(super) fn reschedule(&mut self, held: &mut Vec<u32>) {
        for i in held.drain(..) {
            if (i as usize) < self.queues.len() {
                self.schedule(i);
            }
        }
    }

    /// How many queues the frontier has (deleted ones among them until they are dropped).
    pub(super) fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// Takes the records of each (queue, count) of `chosen` ([`Core::take`]), and gives them
    /// in the order of `chosen`. The queues are read in the order their records lie in the
    /// runs (by run, then by queue id, the order of the runs' directories and frames), not
    /// in the order chosen, which is the heap's: a hand-out of many queues then reads each
    /// run front to back, each page of it once, rather than here and there.
    fn take_all(&mut self, chosen: &[(u32, u32)], now: u64) -> Result<Vec<Pick>> {
        let planned: usize = chosen.iter().map(|&(_, k)| k as usize).sum();
        let mut taken: CounterSet<u64> = CounterSet::with_capacity_and_hasher(planned, CounterHash);
        let mut out: Vec<Pick> = Vec::with_capacity(planned);
        if chosen.len() < 2 {
            for &(i, k) in chosen {
                self.take(i, k as usize, now, &mut out, &mut taken)?;
            }
            return Ok(out);
        }
        let mut order: Vec<(u32, u64, u32)> = chosen
            .iter()
            .enumerate()
            .map(|(c, &(i, _))| {
                let q = &*self.queues.get(i);
                let slot = match q.at {
                    Some(at) => at.get().0 as u32,
                    None if q.runs != 0 => q.runs.trailing_zeros(),
                    None => u32::MAX,
                };
                (slot, self.ids[i as usize], c as u32)
            })
            .collect();
        order.sort_unstable();
        let mut spans = vec![(0, 0); chosen.len()];
        for &(_, _, c) in &order {
            let (i, k) = chosen[c as usize];
            let before = out.len();
            self.take(i, k as usize, now, &mut out, &mut taken)?;
            spans[c as usize] = (before, out.len());
        }
        let mut read: Vec<Option<Pick>> = out.into_iter().map(Some).collect();
        Ok(spans
            .into_iter()
            .flat_map(|(from, to)| from..to)
            .map(|j| read[j].take().expect("each record once"))
            .collect())
    }

    /// Takes up to `k` records of queue `i` in order (returned ones first), without changing
    /// its counts (the lease entries do).
    /// `taken`: the seqs of the call's records so far; a record of a run must be none of
    /// them, nor leased (seqs are unique: a run that repeats one is damaged).
    fn take(
        &mut self,
        i: u32,
        k: usize,
        now: u64,
        out: &mut Vec<Pick>,
        taken: &mut CounterSet<u64>,
    ) -> Result<()> {
        let q = &*self.queues.get(i);
        // A record out of the queue's runs has a seq no other record has: one that is also
        // leased, or already taken by this call from another queue's run, is a seq of the
        // checkpoint or J edited (`check` finds it too: `verify_seqs`).
        let dup = out_of_runs_clash;
        let mut n = 0;
        for (seq, rec) in q.returned().iter().take(k) {
            if self.leases.contains(*seq) || !taken.insert(*seq) {
                return Err(dup(*seq));
            }
            out.push(Pick {
                seq: *seq,
                queue: i,
                record: rec.clone(),
                listed: true,
                key: None,
            });
            n += 1;
        }
        // Then the records to fetch again whose instant has passed, in date order.
        for (_, seq, rec) in q.refetch().iter().take_while(|r| r.0 <= now).take(k - n) {
            if self.leases.contains(*seq) || !taken.insert(*seq) {
                return Err(dup(*seq));
            }
            out.push(Pick {
                seq: *seq,
                queue: i,
                record: rec.clone(),
                listed: true,
                key: None,
            });
            n += 1;
        }
        let mut next = q.next_seq;
        let mut left_waiting = q.waiting;
        // Read once: the loop below changes neither (a queue with skips is hot, and its
        // skips are found in place).
        let (crawl, skips) = (q.crawl, !q.skips().is_empty());
        let id = self.ids[i as usize];
        while n < k && left_waiting > 0 {
            let Some((slot, offset, start, left)) = self.position(i, next)? else {
                break;
            };
            let mut st = Serving {
                next,
                n,
                k,
                left_waiting,
                crawl,
                skips,
            };
            let run_id = self.runs[slot].id();
            if self.ahead.find(i, (run_id, offset, start), id) {
                // The records read ahead at an earlier hand-out: the frame is not read.
                let e = self.ahead.get(i).expect("found");
                let (here, frame) = (e.count.min(left), (slot, offset, e.size, e.frame_count));
                let run = &self.runs[slot];
                let records = e.records().take(here as usize);
                let passed = self.serve(i, run, offset, records, &mut st, out, taken)?;
                (next, n, left_waiting) = (st.next, st.n, st.left_waiting);
                self.place_after(i, frame, (start, left), (here, passed))?;
                self.ahead.advance(i, passed);
                continue;
            }
            // Only the records the call may take are decoded (more are read if some are
            // passed over), but for a queue whose group goes on in the frame: its records
            // there are decoded to be kept for its next hand-outs, room allowing. Of a
            // compressed frame, whose every read decompresses it whole, even one record
            // left is worth keeping.
            let want = u32::try_from(k - n).unwrap_or(u32::MAX);
            let more = if self.reads_compressed {
                0
            } else {
                ahead::MIN_RECORDS
            };
            let ahead = left > want.saturating_add(more) && self.ahead.room(ahead::ENTRY_ROOM);
            let end = u32::from(start).saturating_add(if ahead { left } else { left.min(want) });
            let (f, decoded) = self.read_frame(slot, offset, (start, end))?;
            let run = &self.runs[slot];
            let here = run.in_frame(&f, start, left)?;
            // The group's records in this frame that the window holds, and those passed.
            let held = here.min(decoded.saturating_sub(u32::from(start)));
            let records = f.records_from(u32::from(start)).take(held as usize);
            let passed = self.serve(i, run, offset, records, &mut st, out, taken)?;
            (next, n, left_waiting) = (st.next, st.n, st.left_waiting);
            if ahead
                && passed + ahead::least_records(f.compressed) <= here
                && held == here
                && f.layout != crate::frames::coded::Layout::Lines
            {
                let mut rest = f
                    .records_from(u32::from(start) + passed)
                    .take((here - passed) as usize);
                let base = f.payload.as_ptr() as usize;
                if let Some(first) = rest.next() {
                    let from = first.as_ptr() as usize - base - 4;
                    let last = rest.last().unwrap_or(first);
                    let to = last.as_ptr() as usize - base + last.len();
                    // (A place past a u16 is a damaged frame's: `place_after` says so.)
                    if let Ok(start) = u16::try_from(u32::from(start) + passed) {
                        self.ahead.keep(
                            i,
                            (run_id, offset, f.size(), f.count, start),
                            id,
                            &f.payload[from..to],
                            here - passed,
                        );
                    }
                }
            }
            let frame = (slot, offset, f.size(), f.count);
            self.place_after(i, frame, (start, left), (here, passed))?;
            self.keep_frame(slot, offset, decoded, f);
        }
        Ok(())
    }

    /// Serves queue `i`'s `records` of the frame at `offset` of `run` (its group's there,
    /// from its place on) into `out`: passes over those before the queue's next seq or
    /// skipped, takes the rest while the call may; returns how many it took or passed over.
    #[allow(clippy::too_many_arguments)]
    fn serve<'r>(
        &self,
        i: u32,
        run: &Run,
        offset: u64,
        records: impl Iterator<Item = &'r [u8]>,
        st: &mut Serving,
        out: &mut Vec<Pick>,
        taken: &mut CounterSet<u64>,
    ) -> Result<u32> {
        let mut passed = 0u32;
        for r in records {
            let (seq, rec) = split(run.file(), offset, r)?;
            if seq < st.next || (st.skips && self.queues.get(i).skips().binary_search(&seq).is_ok())
            {
                passed += 1;
                continue;
            }
            if st.n == st.k || st.left_waiting == 0 {
                // (`left_waiting` 0: the queue's count says it has no more; a damaged
                // run holds more.)
                break;
            }
            let key = check_record(run.file(), offset, rec, self.ids[i as usize], st.crawl)?;
            self.numbered(run, offset, seq)?;
            if self.leases.contains(seq) || !taken.insert(seq) {
                return Err(run.file().corrupt(
                    offset,
                    Corruption::Invalid {
                        field: "seq of a record",
                        expected: "a seq no other record has",
                        found: seq,
                    },
                ));
            }
            out.push(Pick {
                seq,
                queue: i,
                record: rec.into(),
                listed: false,
                key,
            });
            st.next = seq + 1;
            st.n += 1;
            st.left_waiting -= 1;
            passed += 1;
        }
        Ok(passed)
    }

    /// Moves queue `i`'s place past the `passed` of the `here` records of its group in the
    /// frame at (`slot`, `offset`) of `size` bytes and `count` records, from record `start`
    /// on, `left` of the group from there on: to the first not passed, in this frame or the
    /// next.
    fn place_after(
        &mut self,
        i: u32,
        (slot, offset, size, count): (usize, u64, u64, u32),
        (start, left): (u16, u32),
        (here, passed): (u32, u32),
    ) -> Result<()> {
        let run = &self.runs[slot];
        let q = self.queues.get_mut(i);
        q.at = if passed == here {
            let left = left - here;
            (left > 0).then(|| At::new((slot, offset + size, 0, left)))
        } else {
            // A writer's frame holds fewer than 2^16 records: a place past a u16 is a
            // damaged frame's (left where it was, the next pass would read the same
            // records again, and again).
            let at = u32::from(start) + passed;
            let Ok(at) = u16::try_from(at) else {
                return Err(run.file().corrupt(
                    offset,
                    Corruption::OutOfRange {
                        field: "records of a Q run's frame",
                        found: u64::from(count),
                        limit: 1 << 16,
                    },
                ));
            };
            Some(At::new((slot, offset, at, left - passed)))
        };
        if q.at.is_none() {
            q.runs &= !(1 << slot);
        }
        Ok(())
    }

    /// The frame at `offset` of run `slot`, with at least its records `start` to `end`
    /// decoded, and the end of the records decoded: the frame read last if it is that one
    /// (a frame of many queues serves the hand-outs of each, which come one after the other
    /// as often as not), else read into the spare buffer.
    fn read_frame(
        &mut self,
        slot: usize,
        offset: u64,
        (start, end): (u16, u32),
    ) -> Result<(Frame, u32)> {
        let run = &self.runs[slot];
        let (start, mut end) = (u32::from(start), end);
        if let Some(r) = self.recent.get_mut(slot).and_then(Option::take) {
            let same = r.run == run.id() && r.offset == offset;
            if same && r.frame.first <= start && r.end >= end.min(r.frame.count) {
                return Ok((r.frame, r.end));
            }
            if same {
                // Asked again for more: the hand-outs of the frame's next queues will be
                // too, in the order of their ids as often as not. It is decoded from here to
                // its end.
                end = u32::MAX;
            }
            if r.frame.payload.capacity() <= SPARE_MAX {
                self.frame_spare = r.frame.payload;
            }
        }
        if self.reads_compressed {
            // A compressed frame is decompressed whole at each read: its records are
            // decoded to its end, for the frame's next queues.
            end = u32::MAX;
        }
        let spare = std::mem::take(&mut self.frame_spare);
        let f = run.frame_window(offset, spare, (start, end))?;
        self.reads_compressed = f.compressed;
        #[cfg(test)]
        {
            self.frames_read += 1;
        }
        let end = end.min(f.count);
        Ok((f, end))
    }

    /// Keeps `f`, its records decoded up to `end`, for the next [`Core::read_frame`] in its
    /// run. Of the frames kept, one at most is larger than [`SPARE_MAX`] (a frame of a long
    /// record): the others are about a frame's target each.
    fn keep_frame(&mut self, slot: usize, offset: u64, end: u32, f: Frame) {
        if self.recent.len() <= slot {
            self.recent.resize_with(slot + 1, || None);
        }
        if f.payload.capacity() > SPARE_MAX {
            for r in &mut self.recent {
                if r.as_ref()
                    .is_some_and(|r| r.frame.payload.capacity() > SPARE_MAX)
                {
                    *r = None;
                }
            }
        }
        self.recent[slot] = Some(Recent {
            run: self.runs[slot].id(),
            offset,
            end,
            frame: f,
        });
    }

    /// The frame holding queue `i`'s record `next` (or its first record after it): (run,
    /// offset, the group's first record in that frame not yet taken or passed over, records
    /// of the group from there on).
    fn position(&mut self, i: u32, next: u64) -> Result<Option<(usize, u64, u16, u32)>> {
        if let Some(at) = self.queues.get(i).at {
            return Ok(Some(at.get()));
        }
        let id = self.ids[i as usize];
        loop {
            let bits = self.queues.get(i).runs;
            if bits == 0 {
                return Ok(None);
            }
            let slot = bits.trailing_zeros() as usize;
            if self.dir_cache.len() <= slot {
                self.dir_cache.resize_with(slot + 1, || None);
            }
            let Some(g) = self.runs[slot].group_cached(id, &mut self.dir_cache[slot])? else {
                self.queues.get_mut(i).runs &= !(1 << slot);
                continue;
            };
            // Skip the frames wholly before `next`.
            let (mut offset, mut start, mut left) = (g.offset, g.start, g.records);
            while left > 0 {
                let wanted = u32::from(start).saturating_add(left);
                let (f, decoded) = self.read_frame(slot, offset, (start, wanted))?;
                let run = &self.runs[slot];
                let here = run.in_frame(&f, start, left)?;
                let last = f
                    .records_from(u32::from(start))
                    .nth(here as usize - 1)
                    .map(|r| split(run.file(), offset, r).map(|(s, _)| s))
                    .transpose()?
                    .unwrap_or(0);
                let size = f.size();
                // The hand-out reads this frame next: it finds it kept.
                self.keep_frame(slot, offset, decoded, f);
                if last >= next {
                    let at = (slot, offset, start, left);
                    self.queues.get_mut(i).at = Some(At::new(at));
                    return Ok(Some(at));
                }
                left -= here;
                offset += size;
                start = 0;
            }
            self.queues.get_mut(i).runs &= !(1 << slot);
        }
    }

    /// Ends the lease of `token`: done, or back in its queue. Returns false when it is not
    /// leased (nothing changes).
    pub(super) fn complete(&mut self, token: u64, took_ms: u64, end: End) -> Result<bool> {
        Ok(self.complete_many(&[(token, took_ms, end, u64::MAX)])?[0])
    }

    /// Returns every lease of `crawl` (every crawl: None) to its queue, as retries in one
    /// commit; returns how many.
    pub(super) fn release_leases(&mut self, crawl: Option<&[u8]>) -> Result<u64> {
        self.writable()?;
        let crawl = match crawl {
            Some(name) => match self.crawls.get(name) {
                Some(&id) => Some(id),
                None => return Ok(0),
            },
            None => None,
        };
        let mut items: Vec<(u64, u64, End, u64)> = self
            .leases
            .iter()
            .filter(|l| crawl.is_none_or(|id| self.queues.get(l.queue).crawl == id))
            .map(|l| (l.token, 0, End::Retry, u64::MAX))
            .collect();
        // In token order, so that a replay sees the same sequence.
        items.sort_unstable_by_key(|i| i.0);
        let done = self.complete_many(&items)?;
        Ok(done.iter().filter(|&&d| d).count() as u64)
    }

    /// Ends several leases in one commit, each `(token, took, end, fetch_ended)`: its fetch
    /// took `took` ms and ended at the instant `fetch_ended` (u64::MAX: now; not later than
    /// now, nor before the lease was handed out). Returns, for each, whether it was leased.
    pub(super) fn complete_many(&mut self, items: &[(u64, u64, End, u64)]) -> Result<Vec<bool>> {
        self.writable()?;
        // A move whose run is written is installed by whichever call comes first.
        self.poll_move()?;
        let now = self.now_ms();
        self.expire(now);
        let mut ended = CounterSet::with_capacity_and_hasher(items.len(), CounterHash);
        let mut fetched = CounterSet::default();
        let mut entries = Vec::with_capacity(items.len());
        let mut out = Vec::with_capacity(items.len());
        // The latest end given so far in this call, by queue place: kept only when some end
        // is said to be earlier than the call (ends at the call, the common case, need none).
        let any_earlier = items.iter().any(|&(.., e)| e < now);
        let mut batch_ends: HashMap<u32, u64, CounterHash> = HashMap::default();
        for &(token, took, end, fetch_ended) in items {
            // A lease ends once; its fetch ends once, before the lease does.
            let Some((seq, was_fetched, given, queue)) = self
                .leases
                .of_token(token)
                .map(|l| (l.seq, l.fetched, l.given, l.queue))
            else {
                out.push(false);
                continue;
            };
            let seq = match end {
                End::Fetched if !ended.contains(&seq) && !was_fetched && fetched.insert(seq) => seq,
                End::Done | End::Retry | End::Refetch(_) if ended.insert(seq) => seq,
                _ => {
                    out.push(false);
                    continue;
                }
            };
            out.push(true);
            let at = now;
            // The fetch ended when the caller says, but not after now, nor before the
            // hand-out, nor before another fetch of its burst ended (this call's included):
            // the ratio rule's wait runs from the burst's last end.
            // The end of a lease whose fetch was said to end before (earlier, or by an item
            // before it in this call) runs no politeness: its instant is the call's, and it
            // is no end of a burst.
            let fetch_said =
                !matches!(end, End::Fetched) && (was_fetched || fetched.contains(&seq));
            let fetch_ended = if any_earlier && !fetch_said {
                let i = queue;
                let burst_end = self.burst_ends.get(&i).copied().unwrap_or(0);
                let batch_end = batch_ends.get(&i).copied().unwrap_or(0);
                let floor = given.max(burst_end).max(batch_end);
                let fetch_ended = fetch_ended.min(now).max(floor.min(now));
                let last = batch_ends.entry(i).or_insert(fetch_ended);
                *last = (*last).max(fetch_ended);
                fetch_ended
            } else {
                now
            };
            entries.push(match end {
                End::Done => Entry::Done {
                    seq,
                    at,
                    took,
                    ended: fetch_ended,
                },
                End::Retry => Entry::Retry {
                    seq,
                    at,
                    took,
                    ended: fetch_ended,
                },
                End::Refetch(when) => Entry::Refetch {
                    seq,
                    at,
                    took,
                    when,
                    ended: fetch_ended,
                },
                End::Fetched => Entry::Fetched {
                    seq,
                    at,
                    took,
                    ended: fetch_ended,
                },
            });
        }
        let earlier = |e: &Entry<'_>| match e {
            Entry::Done { at, ended, .. }
            | Entry::Retry { at, ended, .. }
            | Entry::Refetch { at, ended, .. } => ended != at,
            _ => false,
        };
        if entries
            .iter()
            .any(|e| earlier(e) || matches!(e, Entry::Fetched { .. }))
        {
            // Entries 20 and 21: a build before them refuses the store by its version.
            self.commit_version()?;
        }
        if !entries.is_empty() {
            self.commit_deferred(&entries)?;
        } else if self.expired_unjournaled
            && out.contains(&false)
            && !crate::planted::active(crate::planted::Bug::DoneExpiryUnjournaled)
        {
            // A lease a call found expired (this one, or one before it that journaled no
            // instant since) may be what this call answers "not leased": the expiries are
            // journaled (entry 22 at this instant), so that a replay, whatever the clock
            // says when it runs, finds them expired too. (An entry of an end above has the
            // call's instant: its replay returns those leases first.)
            self.commit_version()?;
            self.commit_deferred(&[Entry::Expired { at: now }])?;
            self.expired_unjournaled = false;
        }
        Ok(out)
    }

    /// [`Core::next_due`] of the queues and leases of crawl `crawl` alone (None: it has
    /// none); a pass over every queue.
    pub(super) fn next_due_of(&mut self, crawl: &[u8]) -> Option<u64> {
        let any = self.next_due()?;
        let &id = self.crawls.get(crawl)?;
        let now = self.now_ms();
        let mut first: Option<u64> = self.moving.as_ref().filter(|_| !self.paused).map(|_| any);
        let mut at = |t: u64| first = Some(first.map_or(t, |f| f.min(t)));
        for i in (0..self.queues.len() as u32).filter(|_| !self.paused) {
            let (qid, q) = (self.ids[i as usize], &*self.queues.get(i));
            if q.crawl == id && q.has_waiting() && self.has_room(qid, q) {
                at(self.ready_at(qid, q).max(now));
            }
        }
        for l in self.leases.iter() {
            if l.crawl == id {
                at(l.deadline);
            }
        }
        first
    }

    /// Drops the entries at the top of the scheduler's heap that are stale (a queue served,
    /// emptied or rescheduled since), taking a queue that may no longer be served out of the
    /// count of queues scheduled. With `exact`, a queue whose first instant moved later is
    /// also put back at that instant, so that the first entry left is exact (a hand-out
    /// leaves those in place: one due by now is served in its turn).
    fn purge_stale_top(&mut self, exact: bool) {
        while let Some((at, i)) = self.heap.peek() {
            let (id, q) = (self.ids[i as usize], &*self.queues.get(i));
            if q.heap_at != at {
                self.heap.pop();
            } else if !q.has_waiting() || !self.has_room(id, q) {
                self.heap.pop();
                self.unschedule(i);
            } else if exact && self.ready_at(id, q) > at {
                self.heap.pop();
                self.unschedule(i);
                self.schedule(i);
            } else {
                break;
            }
        }
    }

    /// The first instant a queue may be served (None: nothing waits).
    pub(super) fn next_due(&mut self) -> Option<u64> {
        let _ = self.poll_move();
        let now = self.now_ms();
        self.expire(now);
        self.purge_stale_top(true);
        while let Some(&Reverse((deadline, seq))) = self.expiries.peek() {
            if self.leases.get(seq).is_some_and(|l| l.deadline == deadline) {
                break;
            }
            self.expiries.pop();
        }
        // A queue due since an instant past is due now; none is while hand-outs are paused.
        let heap = match self.paused {
            true => None,
            false => self.heap.peek().map(|(at, _)| at.max(now)),
        };
        let lease = self.expiries.peek().map(|Reverse((d, _))| *d);
        // A move under way brings records to queues: what is due among them is known once
        // it is installed, within the next millisecond or so. (An install that fails
        // poisons the frontier, which the next call reports.)
        let heap = match self.moving {
            Some(_) if !self.paused => Some(heap.map_or(now + 1, |at| at.min(now + 1))),
            _ => heap,
        };
        match (heap, lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The policy in force for queue `key` of `crawl` (its own, or the default), or the
    /// default (`key` None).
    pub(super) fn policy_of(&self, crawl: &[u8], key: Option<&[u8]>) -> Policy {
        match (self.crawls.get(crawl), key) {
            (Some(&id), Some(k)) => self.policy(queue_id(id, k)),
            _ => self.default_policy,
        }
    }

    /// The token of the lease of `url` in crawl `crawl`, if it is leased.
    pub(super) fn token_of(&mut self, crawl: &[u8], url: &[u8]) -> Option<u64> {
        self.tokens_of(crawl, &[url])[0]
    }

    /// [`Core::token_of`] of each of `urls`, the clock read, the expired leases returned and
    /// the crawl looked up once for all.
    pub(super) fn tokens_of(&mut self, crawl: &[u8], urls: &[&[u8]]) -> Vec<Option<u64>> {
        let now = self.now_ms();
        self.expire(now);
        let Some(&id) = self.crawls.get(crawl) else {
            return vec![None; urls.len()];
        };
        let seed = record::crawl_seed(self.sieve.seed(), id);
        urls.iter()
            .map(|url| {
                self.leases
                    .of_url(id, crate::signature(url, seed))
                    .map(|l| l.token)
            })
            .collect()
    }

    /// Sets the policy of queue `key` of `crawl`, every field, or the default (`key` None).
    pub(super) fn set_policy(&mut self, crawl: &[u8], key: Option<&[u8]>, p: Policy) -> Result<()> {
        self.change_policy(crawl, key, super::PolicyFields::all(p))
    }

    /// Changes the fields given of the policy of queue `key` of `crawl` (the others stay its
    /// own, or follow the default), or of the default (`key` None).
    pub(super) fn change_policy(
        &mut self,
        crawl: &[u8],
        key: Option<&[u8]>,
        fields: super::PolicyFields,
    ) -> Result<()> {
        validate_fields(&fields, key.is_some())?;
        // The default is the store's, whatever the crawl named: naming one does not make it.
        let (id, p) = match key {
            Some(k) => {
                let id = self.crawl_id(crawl)?;
                let own = self.policies.get(&queue_id(id, k)).copied();
                let own = own.map_or_else(Default::default, super::PolicyFields::of_stored);
                (id, own.then(fields).stored())
            }
            None => (0, fields.over(self.default_policy)),
        };
        // Entry 19: a build before version 15 cannot read it; a queue's fields left to the
        // default, one before 16.
        self.commit_version()?;
        self.commit(&[Entry::Policy {
            crawl: id,
            key,
            policy: p,
            at: Some(self.now_ms()),
        }])
    }

    /// Blocks queue `key` of `crawl` until `until` (0: unblocks it).
    pub(super) fn block(&mut self, crawl: &[u8], key: &[u8], until: u64) -> Result<()> {
        let id = self.crawl_id(crawl)?;
        self.commit(&[Entry::Block {
            crawl: id,
            key,
            until,
        }])
    }

    /// The URLs queue `i` holds: waiting, to fetch again, and leased.
    fn held(&self, i: u32) -> u64 {
        let q = &*self.queues.get(i);
        q.waiting + (q.returned().len() + q.refetch().len()) as u64 + u64::from(q.leased)
    }

    /// Whether queue `q` is listed: it holds or held URLs, or has a policy or block of its
    /// own (a deleted queue has neither).
    fn listed(&self, id: u64, q: &Queue) -> bool {
        q.has_waiting()
            || q.leased > 0
            || q.completed > 0
            || self.policies.contains_key(&id)
            || self.blocks.contains_key(&id)
    }

    /// Deletes queue `key` of `crawl` (everything pushed before is deleted too); returns the
    /// URLs it held.
    pub(super) fn delete_queue(&mut self, crawl: &[u8], key: &[u8]) -> Result<u64> {
        self.flush()?;
        // Queues go or come: a compaction under way (or one the flush began) is committed
        // first.
        self.finish_compaction()?;
        let now = self.now_ms();
        self.expire(now);
        let Some(&id) = self.crawls.get(crawl) else {
            return Ok(0);
        };
        let qid = queue_id(id, key);
        let held = self.place(qid).map_or(0, |i| self.held(i));
        let known = held > 0 || self.policies.contains_key(&qid) || self.blocks.contains_key(&qid);
        if known || self.place(qid).is_some() {
            self.commit(&[Entry::DeleteQueue { crawl: id, key }])?;
        }
        Ok(held)
    }

    /// Calls `visit` with everything each queue that `select` (given its crawl and key)
    /// picks holds: its URLs by state (the waiting ones in their order), its policy, block
    /// and counts. Returns how many queues it visited. Nothing changes.
    pub(super) fn export(
        &mut self,
        select: &mut dyn FnMut(&str, &[u8]) -> bool,
        visit: &mut dyn FnMut(super::QueueExport) -> Result<()>,
    ) -> Result<u64> {
        self.writable()?;
        // Every URL pushed before is in its queue, and every lease past its deadline back.
        self.flush()?;
        // Queues go or come: a compaction under way (or one the flush began) is committed
        // first.
        self.finish_compaction()?;
        let now = self.now_ms();
        self.expire(now);
        let mut picked = Vec::new();
        for (i, q) in self.queues.iter().enumerate() {
            let Some(name) = self.crawl_names.get(&q.crawl) else {
                // A deleted crawl's queue.
                continue;
            };
            if !self.released.contains(&self.ids[i])
                && select(&String::from_utf8_lossy(name), self.key(&q))
            {
                picked.push(i);
            }
        }
        self.export_picked(&picked, visit)
    }

    /// [`Core::export`] of the queues `queues` (crawl, key) that exist and are not released.
    pub(super) fn export_queues(
        &mut self,
        queues: &[(&str, &[u8])],
        visit: &mut dyn FnMut(super::QueueExport) -> Result<()>,
    ) -> Result<u64> {
        self.writable()?;
        self.flush()?;
        // Queues go or come: a compaction under way (or one the flush began) is committed
        // first.
        self.finish_compaction()?;
        let now = self.now_ms();
        self.expire(now);
        let mut picked = Vec::new();
        for &(crawl, key) in queues {
            let Some(&id) = self.crawls.get(super::crawl_name(crawl)) else {
                continue;
            };
            let qid = queue_id(id, key);
            if let Some(i) = self.place(qid) {
                if !self.released.contains(&qid) {
                    picked.push(i as usize);
                }
            }
        }
        self.export_picked(&picked, visit)
    }

    /// Calls `visit` with each queue of `picked` (indexes of live crawls' queues) whole.
    fn export_picked(
        &mut self,
        picked: &[usize],
        visit: &mut dyn FnMut(super::QueueExport) -> Result<()>,
    ) -> Result<u64> {
        let st = self.sieve.storage().clone();
        let archives = self
            .archives
            .iter()
            .map(|&id| Run::open(&*st, id))
            .collect::<Result<Vec<_>>>()?;
        let mut leases_of: HashMap<u32, Vec<u64>> = HashMap::new();
        for l in self.leases.iter() {
            leases_of.entry(l.queue).or_default().push(l.seq);
        }
        let mut visited = 0;
        for &i in picked {
            let (id, q) = (self.ids[i], &*self.queues.get(i as u32));
            let crawl = self
                .crawl_names
                .get(&q.crawl)
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            let moved =
                |rec: &[u8], file: &crate::storage::File, at: u64| -> Result<super::MovedUrl> {
                    let r = record::decode(rec).map_err(|what| file.corrupt(at, what))?;
                    Ok(super::MovedUrl {
                        url: r.url.to_vec(),
                        metadata: r.meta.to_vec(),
                    })
                };
            let mut ex = super::QueueExport {
                crawl,
                key: self.key(q).to_vec(),
                policy: self
                    .policies
                    .get(&id)
                    .copied()
                    .map(super::PolicyFields::of_stored),
                blocked_until_ms: self.blocks.get(&id).copied().unwrap_or(0),
                completed: q.completed,
                burst_ms: self.burst(i as u32),
                due_ms: q.due,
                ..Default::default()
            };
            // The URLs handed out and not done: their records are the state's own.
            let mut live: CounterSet<u64> = CounterSet::default();
            let mut seqs = leases_of.remove(&(i as u32)).unwrap_or_default();
            seqs.sort_unstable();
            let j = names::j(self.j_gen);
            for seq in seqs {
                let l = self.leases.get(seq).expect("listed");
                let r = record::decode(&l.record).map_err(|what| Error::corrupt(&j, 0, what))?;
                ex.leased.push((
                    super::MovedUrl {
                        url: r.url.to_vec(),
                        metadata: r.meta.to_vec(),
                    },
                    l.deadline,
                ));
                live.insert(seq);
            }
            for (seq, rec) in q.returned() {
                let r = record::decode(rec).map_err(|what| Error::corrupt(&j, 0, what))?;
                ex.returned.push(super::MovedUrl {
                    url: r.url.to_vec(),
                    metadata: r.meta.to_vec(),
                });
                live.insert(*seq);
            }
            for (when, seq, rec) in q.refetch() {
                let r = record::decode(rec).map_err(|what| Error::corrupt(&j, 0, what))?;
                ex.refetch.push((
                    *when,
                    super::MovedUrl {
                        url: r.url.to_vec(),
                        metadata: r.meta.to_vec(),
                    },
                ));
                live.insert(*seq);
            }
            // Every record the queue ever had is in a run or an archive: from `next_seq` on
            // (but the skipped ones) waiting, below it done unless listed above.
            let mut waiting: Vec<(u64, super::MovedUrl)> = Vec::new();
            let mut done: Vec<(u64, super::MovedUrl)> = Vec::new();
            for run in self.runs.iter().chain(&archives) {
                let Some(g) = run.group(id)? else {
                    continue;
                };
                run.walk_group(&g, |seq, rec, at| {
                    check_record(run.file(), at, rec, id, q.crawl)?;
                    if live.contains(&seq) {
                        return Ok(true);
                    }
                    let u = moved(rec, run.file(), at)?;
                    if seq >= q.next_seq && q.skips().binary_search(&seq).is_err() {
                        waiting.push((seq, u));
                    } else {
                        done.push((seq, u));
                    }
                    Ok(true)
                })?;
            }
            waiting.sort_unstable_by_key(|(seq, _)| *seq);
            waiting.dedup_by_key(|(seq, _)| *seq);
            ex.waiting = waiting.into_iter().map(|(_, u)| u).collect();
            // A URL done under one seq may be live under another (a known update gave it a
            // fresh one), or be the same record twice (an archive written by a compaction
            // whose entry was lost): the live state counts, and each URL once.
            let mut seen: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
            let live_urls = (ex.leased.iter().map(|(u, _)| u))
                .chain(&ex.returned)
                .chain(ex.refetch.iter().map(|(_, u)| u))
                .chain(&ex.waiting);
            for u in live_urls {
                seen.insert(u.url.clone());
            }
            done.sort_unstable_by_key(|(seq, _)| *seq);
            for (_, u) in done {
                if seen.insert(u.url.clone()) {
                    ex.done.push(u);
                }
            }
            visit(ex)?;
            visited += 1;
        }
        Ok(visited)
    }

    /// Imports queues exported from another frontier, as transfer `transfer`: each queue not
    /// received under `transfer` before replaces the queue of its crawl and key here, with
    /// every URL of it known to the crawl's sieve. One commit. Returns how many queues it
    /// imported.
    pub(super) fn import(&mut self, transfer: &[u8], images: &[super::QueueExport]) -> Result<u64> {
        self.writable()?;
        let mut queues_seen = std::collections::HashSet::new();
        for im in images {
            if !queues_seen.insert((super::crawl_name(&im.crawl), &im.key[..])) {
                return Err(Error::InvalidOption {
                    option: "import",
                    reason: format!(
                        "the queue {} of crawl {} twice",
                        String::from_utf8_lossy(&im.key),
                        im.crawl
                    ),
                });
            }
            // A key over 255 bytes is a URL's own key (a queue its sender made from a plain
            // sieve's output, a known update, or before pushes refused such URLs): taken, so
            // that the queue moves; only an empty one, or one longer than any URL, is refused.
            if im.key.is_empty() || im.key.len() > crate::Options::MAX_MAX_URL_LEN {
                super::validate_key(Some(&im.key))?;
                return Err(Error::InvalidOption {
                    option: "key",
                    reason: format!("{} bytes, longer than any URL", im.key.len()),
                });
            }
            if let Some(p) = &im.policy {
                validate_fields(p, true)?;
            }
            let mut urls = std::collections::HashSet::new();
            let all = im
                .done
                .iter()
                .chain(im.leased.iter().map(|(u, _)| u))
                .chain(&im.returned)
                .chain(im.refetch.iter().map(|(_, u)| u))
                .chain(&im.waiting);
            for u in all {
                // Not a push: the sending node's own URLs, which a store written before
                // pushes refused newlines may hold.
                crate::sieve::validate_url(&u.url, self.sieve.max_url_len())?;
                if !urls.insert(&u.url[..]) {
                    return Err(Error::InvalidOption {
                        option: "import",
                        reason: format!(
                            "URL {} twice in the queue {} of crawl {}",
                            String::from_utf8_lossy(&u.url),
                            String::from_utf8_lossy(&im.key),
                            im.crawl
                        ),
                    });
                }
            }
        }
        // Its entry holds the records out of the runs (leased, returned, to fetch again):
        // refused before anything changes when they would not fit one entry of J.
        let held: usize = images
            .iter()
            .flat_map(|im| {
                (im.leased.iter().map(|(u, _)| u))
                    .chain(&im.returned)
                    .chain(im.refetch.iter().map(|(_, u)| u))
                    .map(|u| u.url.len() + u.metadata.len() + im.key.len() + 64)
            })
            .sum();
        fits_entry(held, "import")?;
        let crawls = images
            .iter()
            .map(|im| self.crawl_id_any(super::crawl_name(&im.crawl)))
            .collect::<Result<Vec<u32>>>()?;
        // The queues received under this transfer before stay as they are here (they may
        // have been served since): a sender that did not learn the outcome sends them again.
        let (images, crawls): (Vec<&super::QueueExport>, Vec<u32>) =
            match self.transfers.get(transfer) {
                None => (images.iter().collect(), crawls),
                Some(got) => {
                    let fresh: Vec<(&super::QueueExport, u32)> = images
                        .iter()
                        .zip(crawls)
                        .filter(|(im, c)| !got.contains(&queue_id(*c, &im.key)))
                        .collect();
                    if fresh.is_empty() {
                        return Ok(0);
                    }
                    fresh.into_iter().unzip()
                }
            };
        // Everything pushed before is in its queue, as before a delete.
        self.flush()?;
        // Queues come: a compaction under way (or one the flush began) is committed first,
        // and there is room for the run.
        self.finish_compaction()?;
        self.make_room()?;
        self.commit_version()?;
        let mut seq = self.next_seq;
        let mut token = self.next_token;
        let mut batch: Vec<(u64, u32, u64, Vec<u8>)> = Vec::new();
        // Per queue: its next seq and the ranges of `batch` of its leases, returned records
        // and records to fetch again.
        let mut shapes = Vec::with_capacity(images.len());
        for (im, &crawl) in images.iter().zip(&crawls) {
            let qid = queue_id(crawl, &im.key);
            let encode = |u: &super::MovedUrl| {
                let mut b = Vec::with_capacity(u.url.len() + im.key.len() + u.metadata.len() + 8);
                let key = (default_key(&u.url) != &im.key[..]).then_some(&im.key[..]);
                record::encode(
                    &mut b,
                    &Record {
                        crawl,
                        key,
                        meta: &u.metadata,
                        url: &u.url,
                    },
                );
                b
            };
            // Handed out first (below the queue's next seq), then the waiting URLs in order.
            for u in &im.done {
                batch.push((qid, crawl, seq, encode(u)));
                seq += 1;
            }
            let leases = batch.len();
            for (u, _) in &im.leased {
                batch.push((qid, crawl, seq, encode(u)));
                seq += 1;
            }
            let returned = batch.len();
            for u in &im.returned {
                batch.push((qid, crawl, seq, encode(u)));
                seq += 1;
            }
            let refetch = batch.len();
            for (_, u) in &im.refetch {
                batch.push((qid, crawl, seq, encode(u)));
                seq += 1;
            }
            let next = seq;
            for u in &im.waiting {
                batch.push((qid, crawl, seq, encode(u)));
                seq += 1;
            }
            shapes.push((next, leases, returned, refetch));
        }
        // The sieve learns every URL: each is pushed marked as imported, so that the mover
        // passes over it in F. A crash before the commit below leaves the URLs known and the
        // queues as they were: the import is to be done again (it is not acknowledged).
        let st = self.sieve.storage().clone();
        let mut marked = Vec::new();
        let skip = crate::planted::active(crate::planted::Bug::ImportUnknown);
        for (_, crawl, _, rec) in batch.iter().filter(|_| !skip) {
            let r = record::decode(rec).expect("encoded above");
            let sig = crate::signature(r.url, record::crawl_seed(self.sieve.seed(), *crawl));
            marked.clear();
            marked.extend_from_slice(rec);
            record::mark_imported(&mut marked);
            self.unsynced = true;
            self.sieve.push_parts(&[], &marked, sig)?;
        }
        let run = if batch.is_empty() {
            None
        } else {
            let id = self.next_run;
            let mut order: Vec<usize> = (0..batch.len()).collect();
            order.sort_unstable_by_key(|&k| (batch[k].0, batch[k].2));
            let mut w = RunWriter::create(&*st, id, self.coding)?;
            for k in order {
                let (q, crawl, s, rec) = &batch[k];
                w.push(*q, *crawl, *s, rec)?;
            }
            w.finish()?;
            st.sync_directory()?;
            Some(id)
        };
        let mut queues = Vec::with_capacity(images.len());
        for ((&im, &crawl), &(next, leases, returned, refetch)) in
            images.iter().zip(&crawls).zip(&shapes)
        {
            let mut iq = ImportedQueue {
                crawl,
                key: &im.key,
                policy: im.policy.map(super::PolicyFields::stored),
                block: im.blocked_until_ms,
                next_seq: next,
                waiting: im.waiting.len() as u64,
                completed: im.completed,
                burst: im.burst_ms,
                due: im.due_ms,
                leases: Vec::with_capacity(im.leased.len()),
                returned: Vec::with_capacity(im.returned.len()),
                refetch: Vec::with_capacity(im.refetch.len()),
            };
            for (k, (_, deadline)) in im.leased.iter().enumerate() {
                let (_, _, s, rec) = &batch[leases + k];
                iq.leases.push((*s, token, *deadline, &rec[..]));
                token += 1;
            }
            for k in 0..im.returned.len() {
                let (_, _, s, rec) = &batch[returned + k];
                iq.returned.push((*s, &rec[..]));
            }
            for (k, (when, _)) in im.refetch.iter().enumerate() {
                let (_, _, s, rec) = &batch[refetch + k];
                iq.refetch.push((*when, *s, &rec[..]));
            }
            queues.push(iq);
        }
        let n = queues.len() as u64;
        self.commit(&[Entry::Imported {
            transfer,
            run,
            next_seq: seq,
            queues,
        }])?;
        self.compact_if_due()?;
        Ok(n)
    }

    /// Releases the queues `queues` (crawl, key) moved to another frontier: each is emptied
    /// as a delete would, and exports leave it out until it takes records again. One commit.
    pub(super) fn release(&mut self, queues: &[(&str, &[u8])]) -> Result<()> {
        self.writable()?;
        let mut entries = Vec::with_capacity(queues.len());
        for &(crawl, key) in queues {
            if let Some(&id) = self.crawls.get(super::crawl_name(crawl)) {
                entries.push(Entry::Released { crawl: id, key });
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        // Everything pushed before is in its queue, as before a delete.
        self.flush()?;
        // Queues go: a compaction under way (or one the flush began) is committed first.
        self.finish_compaction()?;
        self.commit_version()?;
        self.commit(&entries)
    }

    /// Forgets the receipts of transfer `transfer`; false when there were none.
    pub(super) fn end_transfer(&mut self, transfer: &[u8]) -> Result<bool> {
        self.writable()?;
        if !self.transfers.contains_key(transfer) {
            return Ok(false);
        }
        self.commit_version()?;
        self.commit(&[Entry::EndTransfer { name: transfer }])?;
        Ok(true)
    }

    /// Commits the manifest in this build's version once per open, before J takes an entry
    /// or A a record that older builds cannot read: they then refuse the store by its version
    /// instead of reporting damage.
    fn commit_version(&mut self) -> Result<()> {
        // A frontier stopped by an earlier error writes nothing more, its manifest included.
        self.writable()?;
        if !self.versioned {
            let r = self.sieve.commit_version();
            if r.is_err() {
                self.poisoned = true;
            }
            r?;
            self.versioned = true;
        }
        Ok(())
    }

    /// Hand-outs take only the queues whose key passes `filter` (none: every queue).
    pub(super) fn set_serve_only(&mut self, filter: Option<super::KeyFilter>) {
        self.serve_only = filter;
    }

    /// Whether the queue of `key` in `crawl` was received under transfer `transfer`.
    pub(super) fn received(&self, transfer: &[u8], crawl: &[u8], key: &[u8]) -> bool {
        let Some(&id) = self.crawls.get(crawl) else {
            return false;
        };
        self.transfers
            .get(transfer)
            .is_some_and(|ids| ids.contains(&queue_id(id, key)))
    }

    /// Whether transfer `transfer` was imported.
    pub(super) fn imported(&self, transfer: &[u8]) -> bool {
        self.transfers.contains_key(transfer)
    }

    /// Deletes crawl `crawl` (everything pushed before is deleted too); returns the URLs its
    /// queues held.
    pub(super) fn delete_crawl(&mut self, crawl: &[u8]) -> Result<u64> {
        self.flush()?;
        // Queues go or come: a compaction under way (or one the flush began) is committed
        // first.
        self.finish_compaction()?;
        let now = self.now_ms();
        self.expire(now);
        let Some(&id) = self.crawls.get(crawl) else {
            return Ok(0);
        };
        let held = (0..self.queues.len() as u32)
            .filter(|&i| self.queues.get(i).crawl == id)
            .map(|i| self.held(i))
            .fold(0, u64::saturating_add);
        self.commit(&[Entry::DeleteCrawl { id }])?;
        Ok(held)
    }

    /// The names of the crawls, sorted: each one pushed to (or given a policy or a block) and
    /// not deleted since, and DEFAULT when it has queues.
    pub(super) fn crawls(&self) -> Vec<Vec<u8>> {
        let default_used =
            (self.queues.iter().zip(&self.ids)).any(|(q, &id)| q.crawl == 0 && self.listed(id, &q));
        let mut names: Vec<Vec<u8>> = self
            .crawls
            .iter()
            .filter(|(_, &id)| id != 0 || default_used)
            .map(|(name, _)| name.clone())
            .collect();
        names.sort_unstable();
        names
    }

    /// The counts of crawl `crawl`, or of its queue `key`.
    pub(super) fn counts(&mut self, crawl: &[u8], key: Option<&[u8]>) -> super::Counts {
        let now = self.now_ms();
        self.expire(now);
        let mut c = super::Counts::default();
        let Some(&id) = self.crawls.get(crawl) else {
            return c;
        };
        let one = key.map(|k| queue_id(id, k));
        for (q, &qid) in self.queues.iter().zip(&self.ids) {
            if q.crawl != id || one.is_some_and(|o| o != qid) || !self.listed(qid, &q) {
                continue;
            }
            c.queues += 1;
            let waiting = q.waiting + (q.returned().len() + q.refetch().len()) as u64;
            c.waiting = c.waiting.saturating_add(waiting);
            c.leased += u64::from(q.leased);
            c.done = c.done.saturating_add(q.completed);
            if waiting > 0 {
                c.queues_waiting += 1;
            }
            if waiting > 0 || q.leased > 0 {
                c.queues_active += 1;
            }
            if q.has_waiting() && self.has_room(qid, &q) && self.ready_at(qid, &q) <= now {
                c.queues_due += 1;
            }
        }
        c
    }

    /// The queues of `crawl`, by key, from the `start`-th: at most `max`.
    pub(super) fn queues(
        &mut self,
        crawl: &[u8],
        start: usize,
        max: usize,
    ) -> Result<Vec<super::QueueInfo>> {
        let now = self.now_ms();
        self.expire(now);
        let Some(&id) = self.crawls.get(crawl) else {
            return Ok(Vec::new());
        };
        let mut qs: Vec<(u64, u32, index::KeyAt)> = (self.ids.iter().copied())
            .zip(self.queues.iter())
            .enumerate()
            .filter(|(_, (qid, q))| q.crawl == id && self.listed(*qid, q))
            .map(|(i, (qid, q))| (qid, i as u32, q.key))
            .collect();
        qs.sort_unstable_by(|a, b| self.keys.get(a.2).cmp(self.keys.get(b.2)));
        Ok(qs
            .into_iter()
            .skip(start)
            .take(max)
            .map(|(qid, i, _)| (qid, self.queues.get(i)))
            .map(|(qid, q)| super::QueueInfo {
                key: self.key(&q).to_vec(),
                waiting: q.waiting + (q.returned().len() + q.refetch().len()) as u64,
                leased: u64::from(q.leased),
                done: q.completed,
                next_due_ms: (q.has_waiting() && self.has_room(qid, &q))
                    .then(|| self.ready_at(qid, &q)),
                policy: self.policies.contains_key(&qid).then(|| self.policy(qid)),
                // A block whose instant passed holds nothing back.
                blocked_until_ms: self.blocks.get(&qid).copied().filter(|&b| b > now),
            })
            .collect())
    }

    /// What the frontier knows of `url` of `crawl`: [`Core::lookup`]'s status, or
    /// [`super::UrlStatus::Unknown`]. (What was pushed reached its queue first:
    /// `Frontier::status` flushes.)
    pub(super) fn status(
        &mut self,
        crawl: &[u8],
        key: Option<&[u8]>,
        url: &[u8],
    ) -> Result<super::UrlStatus> {
        Ok(self
            .lookup(crawl, key, url)?
            .map_or(super::UrlStatus::Unknown, |h| h.status))
    }

    /// [`Core::status`] with what the frontier holds of the URL: its queue's key and its
    /// metadata, from its lease (in any queue), or from the queue `key` (None: its default
    /// key) or else its default key's, in a walk of each queue's records at most. A done
    /// URL has the key asked (or its default key) and no metadata; an unknown one is None.
    pub(super) fn lookup(
        &mut self,
        crawl: &[u8],
        key: Option<&[u8]>,
        url: &[u8],
    ) -> Result<Option<super::HeldUrl>> {
        use super::UrlStatus;
        self.writable()?;
        let now = self.now_ms();
        self.expire(now);
        let Some(&id) = self.crawls.get(crawl) else {
            return Ok(None);
        };
        let held = |record: &[u8], status: UrlStatus| -> Result<super::HeldUrl> {
            let g = self.journal_gen();
            let r = record::decode(record).map_err(|what| Error::corrupt(&names::j(g), 0, what))?;
            Ok(super::HeldUrl {
                key: r.key.unwrap_or_else(|| default_key(r.url)).to_vec(),
                url: r.url.to_vec(),
                metadata: r.meta.to_vec(),
                status,
            })
        };
        let sig = crate::signature(url, record::crawl_seed(self.sieve.seed(), id));
        if let Some(l) = self.leases.of_url(id, sig) {
            let until_ms = l.deadline;
            return held(&l.record, UrlStatus::Leased { until_ms }).map(Some);
        }
        let host = default_key(url);
        let mut keys = vec![key.unwrap_or(host)];
        if keys[0] != host {
            keys.push(host);
        }
        for k in keys {
            let Some(i) = self.place(queue_id(id, k)) else {
                continue;
            };
            let q = &*self.queues.get(i);
            let same = |rec: &[u8]| record::decode(rec).is_ok_and(|r| r.url == url);
            if let Some(r) = q.refetch().iter().find(|r| same(&r.2)) {
                return held(&r.2, UrlStatus::Refetch { at_ms: r.0 }).map(Some);
            }
            if let Some(r) = q.returned().iter().find(|r| same(&r.1)) {
                return held(&r.1, UrlStatus::Waiting).map(Some);
            }
            if let Some(record) = self.record_in_runs(i, url)? {
                return held(&record, UrlStatus::Waiting).map(Some);
            }
        }
        if self.sieve.contains_signature(sig)? {
            Ok(Some(super::HeldUrl {
                key: key.unwrap_or(host).to_vec(),
                url: url.to_vec(),
                metadata: Vec::new(),
                status: UrlStatus::Done,
            }))
        } else {
            Ok(None)
        }
    }

    /// The record of `url` among queue `i`'s records waiting in the Q runs (not handed out,
    /// not skipped), found in one walk of its groups that stops there.
    fn record_in_runs(&self, i: u32, url: &[u8]) -> Result<Option<Vec<u8>>> {
        let q = &*self.queues.get(i);
        let mut found = None;
        for (slot, run) in self.runs.iter().enumerate() {
            if q.runs & (1 << slot) == 0 || found.is_some() {
                continue;
            }
            let Some(g) = run.group(self.ids[i as usize])? else {
                continue;
            };
            run.walk_group(&g, |seq, rec, _| {
                if seq < q.next_seq || q.skips().binary_search(&seq).is_ok() {
                    return Ok(true);
                }
                if record::decode(rec).is_ok_and(|r| r.url == url) {
                    found = Some(rec.to_vec());
                    return Ok(false);
                }
                Ok(true)
            })?;
        }
        Ok(found)
    }

    /// Visits the URLs the queues of `crawl` (or its queue `key`) hold, queue by queue in
    /// key order: those leased (by seq), those returned (by seq), those waiting in the Q runs
    /// (in queue order), those to fetch again (in date order). `f` gets each one's record
    /// and status, and returns false to stop. Done URLs are not held (the sieve keeps their
    /// signatures only).
    ///
    /// With `after` (a queue's key and a place there that an earlier visit returned), the
    /// visit starts just after that place: the queues of smaller keys, and the URLs of that
    /// queue up to the place, are passed over. A URL leased or completed since in a place
    /// already passed shifts nothing. Returns the place of the last URL `f` got (`None`
    /// if it got none). Within the runs a place also holds where its record is in its run
    /// (which no run rewrites: runs are immutable), so that a visit resumed in a long queue
    /// reads on from there; if that run was merged away since, the resumed visit passes
    /// over the queue's records up to the place's seq.
    pub(super) fn visit_held(
        &mut self,
        crawl: &[u8],
        (key, after): (Option<&[u8]>, HeldFrom<'_>),
        f: &mut dyn FnMut(Held<'_>) -> bool,
    ) -> Result<Option<(Vec<u8>, HeldAt)>> {
        use super::UrlStatus;
        // What was pushed reached its queue first (`Frontier::urls` flushes; the callers of
        // `Frontier::urls_from` flush before their first page).
        self.writable()?;
        let now = self.now_ms();
        self.expire(now);
        let Some(&id) = self.crawls.get(crawl) else {
            return Ok(None);
        };
        let mut qs: Vec<(u32, index::KeyAt)> = match key {
            Some(key) => (self.place(queue_id(id, key)).into_iter())
                .map(|i| (i, self.queues.get(i).key))
                .collect(),
            None => (self.queues.iter().enumerate())
                .filter(|(_, q)| q.crawl == id)
                .map(|(i, q)| (i as u32, q.key))
                .collect(),
        };
        if let Some((from, _)) = after {
            qs.retain(|q| self.keys.get(q.1) >= from);
        }
        qs.sort_unstable_by(|a, b| self.keys.get(a.1).cmp(self.keys.get(b.1)));
        let mut leased: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for l in self.leases.iter() {
            leased.entry(l.queue).or_default().push((l.seq, l.deadline));
        }
        // Records of leases and lists came from J's entries, checked when they were read.
        let g = self.journal_gen();
        fn listed(rec: &[u8], g: u64) -> Result<Record<'_>> {
            record::decode(rec).map_err(|w| Error::corrupt(&names::j(g), 0, w))
        }
        // The last place visited: the queue's index and key, and the place in it.
        let mut last: Option<(u32, index::KeyAt, HeldAt)> = None;
        let place = |last: Option<(u32, index::KeyAt, HeldAt)>, keys: &Keys| {
            last.map(|(_, k, at)| (keys.get(k).to_vec(), at))
        };
        for (i, k) in qs {
            // Where to resume in this queue: after `after`'s place if it is this queue's.
            let from = after
                .filter(|(key, _)| *key == self.keys.get(k))
                .map(|(_, at)| at);
            let passed = |at: &HeldAt| from.is_some_and(|from| at.order() <= from.order());
            if let Some(mut ls) = leased.remove(&i) {
                ls.sort_unstable();
                for (seq, until_ms) in ls {
                    let at = HeldAt::listed(HeldAt::LEASED, 0, seq);
                    if passed(&at) {
                        continue;
                    }
                    last = Some((i, k, at));
                    let rec = &self.leases.get(seq).expect("listed").record;
                    let status = UrlStatus::Leased { until_ms };
                    if !f(Held::of(listed(rec, g)?, rec, seq, status)) {
                        return Ok(place(last, &self.keys));
                    }
                }
            }
            let q = &*self.queues.get(i);
            for (seq, rec) in q.returned() {
                let at = HeldAt::listed(HeldAt::RETURNED, 0, *seq);
                if passed(&at) {
                    continue;
                }
                last = Some((i, k, at));
                if !f(Held::of(listed(rec, g)?, rec, *seq, UrlStatus::Waiting)) {
                    return Ok(place(last, &self.keys));
                }
            }
            // In the runs: from the run and place `from` holds if that run is still one of
            // this queue's (the runs before it hold smaller seqs), else from the start of
            // each, passing over the seqs up to `from`'s.
            let in_runs = from.filter(|at| at.part == HeldAt::RUNS);
            let resume = in_runs.and_then(|at| at.run).filter(|r| {
                (self.runs.iter().enumerate())
                    .any(|(slot, run)| q.runs & (1 << slot) != 0 && run.id() == r.run)
            });
            let runs_passed = from.is_some_and(|at| at.part > HeldAt::RUNS);
            let mut more = true;
            #[cfg(test)]
            let mut walked = 0u64;
            let mut before_resume = resume.is_some();
            for (slot, run) in self.runs.iter().enumerate() {
                if q.runs & (1 << slot) == 0 || !more || runs_passed {
                    continue;
                }
                let here = resume.filter(|r| r.run == run.id());
                if before_resume && here.is_none() {
                    continue;
                }
                before_resume = false;
                let Some(grp) = run.group(self.ids[i as usize])? else {
                    continue;
                };
                let start = match here {
                    Some(r) if r.group == grp => r.at,
                    _ => qrun::GroupAt::start(&grp),
                };
                run.walk_group_from(&grp, start, &mut None, |seq, rec, offset, next| {
                    #[cfg(test)]
                    {
                        walked += 1;
                    }
                    if seq < q.next_seq || q.skips().binary_search(&seq).is_ok() {
                        return Ok(true);
                    }
                    let at = HeldAt {
                        part: HeldAt::RUNS,
                        at_ms: 0,
                        seq,
                        run: Some(RunAt {
                            run: run.id(),
                            group: grp,
                            at: next,
                        }),
                    };
                    if in_runs.is_some_and(|from| seq <= from.seq) {
                        return Ok(true);
                    }
                    let r = record::decode(rec).map_err(|w| run.file().corrupt(offset, w))?;
                    last = Some((i, k, at));
                    more = f(Held::of(r, rec, seq, UrlStatus::Waiting));
                    Ok(more)
                })?;
            }
            #[cfg(test)]
            {
                self.held_walked += walked;
            }
            if !more {
                return Ok(place(last, &self.keys));
            }
            let q = &*self.queues.get(i);
            for (at_ms, seq, rec) in q.refetch() {
                let at = HeldAt::listed(HeldAt::REFETCH, *at_ms, *seq);
                if passed(&at) {
                    continue;
                }
                last = Some((i, k, at));
                let status = UrlStatus::Refetch { at_ms: *at_ms };
                if !f(Held::of(listed(rec, g)?, rec, *seq, status)) {
                    return Ok(place(last, &self.keys));
                }
            }
        }
        Ok(place(last, &self.keys))
    }

    /// The seqs of `urls` among queue `i`'s records waiting in the Q runs (not handed out,
    /// not skipped), in one walk of its groups.
    fn find_in_runs(&self, i: u32, urls: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let q = &*self.queues.get(i);
        let mut found = vec![None; urls.len()];
        let mut left = urls.len();
        let wanted: HashMap<&[u8], usize> = urls.iter().enumerate().map(|(k, u)| (*u, k)).collect();
        for (slot, run) in self.runs.iter().enumerate() {
            if q.runs & (1 << slot) == 0 || left == 0 {
                continue;
            }
            let Some(g) = run.group(self.ids[i as usize])? else {
                continue;
            };
            run.walk_group(&g, |seq, rec, _| {
                #[cfg(test)]
                self.looked_up.set(self.looked_up.get() + 1);
                if seq < q.next_seq || q.skips().binary_search(&seq).is_ok() {
                    return Ok(true);
                }
                let at = record::decode(rec)
                    .ok()
                    .and_then(|r| wanted.get(r.url).copied());
                if let Some(k) = at {
                    if found[k].is_none() {
                        found[k] = Some(seq);
                        left -= 1;
                    }
                }
                Ok(left > 0)
            })?;
        }
        Ok(found)
    }

    /// Known updates of `crawl` (url-frontier's known URL items): each URL is done
    /// (`refetch_ms` 0) or to fetch again from `refetch_ms`, with its metadata, whatever it
    /// was: unknown (pushed first), waiting (skipped in its queue), leased (its lease ends:
    /// the fetch ended now), returned, to fetch again, or done. Of one URL given twice, the
    /// last item counts. Durable when this returns. `receipts` (sender, sequence number) are
    /// noted in the same entry as the updates, so that both are durable or neither is.
    pub(super) fn update(
        &mut self,
        crawl: &[u8],
        items: &[super::Known<'_>],
        receipts: &[(&[u8], u64)],
    ) -> Result<()> {
        self.writable()?;
        if items.is_empty() && receipts.is_empty() {
            return Ok(());
        }
        for it in items {
            super::validate_metadata(it.metadata)?;
        }
        if !receipts.is_empty() {
            // One entry of J holds the updates and their receipts: refused before anything
            // changes (the URLs not known yet are pushed first) when it would not fit.
            let bytes: usize = (items.iter())
                .map(|it| it.url.len() + it.key.map_or(0, <[u8]>::len) + it.metadata.len() + 64)
                .chain(receipts.iter().map(|(from, _)| from.len() + 16))
                .sum();
            fits_entry(bytes, "batch")?;
        }
        // The last item of each URL, in the order given.
        let mut last: HashMap<&[u8], usize> = HashMap::new();
        for (k, it) in items.iter().enumerate() {
            last.insert(it.url, k);
        }
        let items: Vec<&super::Known<'_>> = items
            .iter()
            .enumerate()
            .filter(|(k, it)| last[it.url] == *k)
            .map(|(_, it)| it)
            .collect();
        // A URL or key holding a newline is taken only when the crawl knows the URL (a store
        // written before pushes refused them may hold some, whose leases must end): such an
        // item is not pushed below.
        let newline = |it: &&super::Known<'_>| {
            memchr::memchr(b'\n', it.url).is_some()
                || it.key.is_some_and(|k| memchr::memchr(b'\n', k).is_some())
        };
        if items.iter().any(newline) {
            let held: Vec<&&super::Known<'_>> = items.iter().filter(|it| newline(it)).collect();
            for it in &held {
                crate::sieve::validate_url(it.url, self.sieve.max_url_len())?;
                super::validate_key(it.key)?;
            }
            let known = match self.crawls.get(crawl) {
                Some(&id) => {
                    let seed = record::crawl_seed(self.sieve.seed(), id);
                    let sigs: Vec<u64> = (held.iter())
                        .map(|it| crate::signature(it.url, seed))
                        .collect();
                    // A lease says so without a lookup of the sieve's files.
                    if sigs
                        .iter()
                        .all(|&sig| self.leases.of_url(id, sig).is_some())
                    {
                        vec![true; sigs.len()]
                    } else {
                        self.sieve.known_signatures(&sigs)?
                    }
                }
                None => vec![false; held.len()],
            };
            if let Some(k) = known.iter().position(|&known| !known) {
                // What a push of it would answer.
                let it = held[k];
                crate::sieve::refuse_newline(it.url)?;
                super::refuse_newline_key(it.key)?;
            }
        }
        // The usual case, a crawler ending its leases, needs no push and no flush.
        let mut now = self.now_ms();
        self.expire(now);
        let all_leased = items.is_empty()
            || self.crawls.get(crawl).is_some_and(|&id| {
                let seed = record::crawl_seed(self.sieve.seed(), id);
                items.iter().all(|it| {
                    crate::sieve::validate_url(it.url, self.sieve.max_url_len()).is_ok()
                        && super::validate_key(it.key).is_ok()
                        && self
                            .leases
                            .of_url(id, crate::signature(it.url, seed))
                            .is_some()
                })
            });
        if !all_leased {
            // URLs not known yet become known (they reach their queues, where they are
            // skipped).
            let discovered: Vec<super::Discovered<'_>> = items
                .iter()
                .filter(|it| !newline(it))
                .map(|it| super::Discovered {
                    url: it.url,
                    key: it.key,
                    metadata: it.metadata,
                })
                .collect();
            self.push_items(crawl, &discovered, None)?;
            self.flush()?;
            now = self.now_ms();
            self.expire(now);
        }
        let Some(&id) = self.crawls.get(crawl) else {
            // Receipts alone, of a crawl never pushed to.
            return self.commit_receipts(receipts, Vec::new());
        };
        let seed = record::crawl_seed(self.sieve.seed(), id);
        let mut records = Vec::with_capacity(items.len());
        for it in &items {
            let mut buf = Vec::new();
            record::encode(
                &mut buf,
                &Record {
                    crawl: id,
                    key: it.key,
                    meta: it.metadata,
                    url: it.url,
                },
            );
            records.push(buf);
        }
        // Where each one is: (seq, fresh), or None (done, and done it stays).
        let mut at: Vec<Option<(u64, bool)>> = vec![None; items.len()];
        let mut in_runs: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (k, it) in items.iter().enumerate() {
            let sig = crate::signature(it.url, seed);
            if let Some(l) = self.leases.of_url(id, sig) {
                at[k] = Some((l.seq, false));
                // Its lease ends in the queue that handed it out, whatever key the caller
                // gives: under another key the update would reach a queue without it.
                let given = it.key.unwrap_or_else(|| default_key(it.url));
                let g = self.journal_gen();
                let r = record::decode(&l.record)
                    .map_err(|what| Error::corrupt(&names::j(g), 0, what))?;
                if r.key.unwrap_or_else(|| default_key(it.url)) != given {
                    records[k].clear();
                    record::encode(
                        &mut records[k],
                        &Record {
                            crawl: id,
                            key: r.key,
                            meta: it.metadata,
                            url: it.url,
                        },
                    );
                }
                continue;
            }
            let qid = queue_id(id, it.key.unwrap_or_else(|| default_key(it.url)));
            let Some(i) = self.place(qid) else {
                continue;
            };
            let q = &*self.queues.get(i);
            let same = |rec: &[u8]| record::decode(rec).is_ok_and(|r| r.url == it.url);
            if let Some(r) = q.returned().iter().find(|r| same(&r.1)) {
                at[k] = Some((r.0, false));
            } else if let Some(r) = q.refetch().iter().find(|r| same(&r.2)) {
                at[k] = Some((r.1, false));
            } else {
                in_runs.entry(i).or_default().push(k);
            }
        }
        for (i, ks) in in_runs {
            let urls: Vec<&[u8]> = ks.iter().map(|&k| items[k].url).collect();
            for (k, seq) in ks.into_iter().zip(self.find_in_runs(i, &urls)?) {
                at[k] = seq.map(|s| (s, false));
            }
        }
        let mut fresh = self.next_seq;
        let mut entries = Vec::new();
        for (k, it) in items.iter().enumerate() {
            let (seq, is_fresh) = match at[k] {
                Some(found) => found,
                // Done: to fetch again, under a new seq; done again, nothing changes.
                None if it.refetch_ms > 0 => {
                    fresh += 1;
                    (fresh - 1, true)
                }
                None => continue,
            };
            entries.push(Entry::Known {
                seq,
                at: now,
                when: it.refetch_ms,
                fresh: is_fresh,
                record: &records[k],
            });
        }
        if !receipts.is_empty() {
            return self.commit_receipts(receipts, entries);
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.commit_deferred(&entries)
    }

    /// Makes done the URLs a visit of held URLs ([`Core::visit_held`]) gave in this hold of
    /// the lock, each by its seq and its record as held (`found`): known entries to done,
    /// as [`Core::update`] writes, without looking the URLs up again (their places are
    /// the visit's: nothing changed them since). Durable as [`Core::update`].
    pub(super) fn complete_held(&mut self, found: &[(u64, Vec<u8>)]) -> Result<()> {
        self.writable()?;
        if found.is_empty() {
            return Ok(());
        }
        let now = self.now_ms();
        let entries: Vec<Entry<'_>> = (found.iter())
            .map(|(seq, record)| Entry::Known {
                seq: *seq,
                at: now,
                when: 0,
                fresh: false,
                record,
            })
            .collect();
        self.commit_deferred(&entries)
    }

    /// Commits known entries and receipts as one entry.
    fn commit_receipts(&mut self, receipts: &[(&[u8], u64)], known: Vec<Entry<'_>>) -> Result<()> {
        self.commit_version()?;
        if crate::planted::active(crate::planted::Bug::ReceiptApart) && !known.is_empty() {
            // The planted bug: the updates durable first, their receipt after.
            self.commit(&known)?;
            return self.commit(&[Entry::Receipted {
                receipts: receipts.to_vec(),
                known: Vec::new(),
            }]);
        }
        self.commit(&[Entry::Receipted {
            receipts: receipts.to_vec(),
            known,
        }])
    }

    /// The highest sequence number of `from`'s deliveries noted as received.
    pub(super) fn receipt(&self, from: &[u8]) -> Option<u64> {
        self.receipts.get(from).copied()
    }

    /// Checks that record `seq` of `run` (its frame at `offset`) was numbered below the
    /// frontier's next seq, as every record of the runs was.
    fn numbered(&self, run: &Run, offset: u64, seq: u64) -> Result<()> {
        if seq >= self.next_seq {
            return Err(run.file().corrupt(
                offset,
                Corruption::OutOfRange {
                    field: "seq of a record",
                    found: seq,
                    limit: self.next_seq,
                },
            ));
        }
        Ok(())
    }

    /// For `check`: every record leased, returned or to fetch again has a seq of its own;
    /// every record waiting in the Q runs (at or after its queue's next seq, not skipped)
    /// has a seq of its own, below the frontier's next seq: none of a leased, returned or
    /// refetched record, none twice in a run, and each run's above the runs' before it (a run
    /// holds records queued after every earlier run's). A hand-out would find a repeat only when it served both;
    /// this finds it at once. It holds 8 bytes per record of the largest run.
    pub(super) fn verify_seqs(&self) -> Result<()> {
        // The records out of the runs first: leased, returned, to fetch again, each with a
        // seq of its own (a hand-out finds a repeat only when it takes both).
        let mut out = std::collections::HashSet::new();
        let returned = self
            .queues
            .iter()
            .flat_map(|q| q.returned().iter().map(|r| r.0).collect::<Vec<_>>());
        let refetch = self
            .queues
            .iter()
            .flat_map(|q| q.refetch().iter().map(|r| r.1).collect::<Vec<_>>());
        for seq in self
            .leases
            .iter()
            .map(|l| l.seq)
            .chain(returned)
            .chain(refetch)
        {
            if !out.insert(seq) {
                return Err(out_of_runs_clash(seq));
            }
        }
        let mut below = None;
        for run in &self.runs {
            let mut seqs: Vec<(u64, u64)> = Vec::new();
            let mut cache = None;
            for g in run.groups() {
                let g = g?;
                let Some(i) = self.place(g.queue) else {
                    continue;
                };
                let q = &*self.queues.get(i);
                run.walk_group_cached(&g, &mut cache, |seq, _, offset| {
                    if seq >= q.next_seq && q.skips().binary_search(&seq).is_err() {
                        seqs.push((seq, offset));
                    }
                    Ok(true)
                })?;
            }
            seqs.sort_unstable();
            if let Some(&(seq, offset)) = seqs.last() {
                self.numbered(run, offset, seq)?;
            }
            let repeat = seqs.windows(2).find(|w| w[0].0 == w[1].0).map(|w| w[1]);
            let taken = seqs.iter().find(|(s, _)| out.contains(s)).copied();
            let early = seqs.first().filter(|(s, _)| below.is_some_and(|b| *s <= b));
            if let Some((seq, offset)) = repeat.or(taken).or(early.copied()) {
                return Err(run.file().corrupt(
                    offset,
                    Corruption::Invalid {
                        field: "seq of a record",
                        expected: "a seq no other record has, above the earlier runs'",
                        found: seq,
                    },
                ));
            }
            if let Some(&(last, _)) = seqs.last() {
                below = Some(last);
            }
        }
        Ok(())
    }

    /// Pauses or resumes the hand-outs.
    pub(super) fn set_paused(&mut self, on: bool) -> Result<()> {
        self.commit(&[Entry::Pause(on)])
    }

    /// Counts.
    pub(super) fn stats(&mut self) -> Result<FrontierStats> {
        self.poll_move()?;
        let now = self.now_ms();
        self.expire(now);
        let waiting: u64 = self
            .queues
            .iter()
            .map(|q| q.waiting + (q.returned().len() + q.refetch().len()) as u64)
            .fold(0, u64::saturating_add);
        let run_bytes = (self.runs.iter().map(Run::bytes)).fold(0, u64::saturating_add);
        Ok(FrontierStats {
            queues: (self.queues.iter().zip(&self.ids))
                .filter(|(q, &id)| self.listed(id, q))
                .count() as u64,
            queues_waiting: self.queues.iter().filter(|q| q.has_waiting()).count() as u64,
            waiting,
            leased: self.leases.len() as u64,
            done: self.done,
            runs: self.runs.len() as u64,
            run_bytes,
            compressed: self.coding == RunCoding::Compressed,
            paused: self.paused,
        })
    }

    /// J's and the checkpoint's files as they are on disk, as the sieve counts A's.
    pub(super) fn log_bytes(&self) -> Result<super::LogBytes> {
        let mut bytes = super::LogBytes::default();
        let st = self.sieve.storage();
        for name in st.list_files()? {
            let counter = match crate::names::parse(&name) {
                Some(crate::names::FileName::J(_)) => &mut bytes.journal,
                Some(crate::names::FileName::Checkpoint) => &mut bytes.checkpoint,
                _ => continue,
            };
            if let Ok(Some(f)) = st.open_if_exists(&name) {
                *counter = counter.saturating_add(f.len().unwrap_or(0));
            }
        }
        Ok(bytes)
    }

    /// Syncs and closes.
    pub(super) fn close(mut self) -> Result<()> {
        self.writable()?;
        self.settle_move()?;
        self.finish_compaction()?;
        self.settle_checkpoint()?;
        let grown = self.replay_weight();
        if grown > CLOSE_CHECKPOINT_MIN.min(self.journal_bytes) && grown > self.checkpoint_bytes {
            self.checkpoint(false)?;
        }
        // A frontier opened after a clean close and left untouched writes nothing.
        let gen = self.journal_gen();
        if self.sieve.clean_journal().of(gen) != Some(self.writer().end()) {
            let (commits, written) = (self.commits.clone(), self.j_written);
            self.writer().seal_with(&mut |f| {
                commits
                    .sync_now(f, written)
                    .map_err(|e| f.io_error("sync", e))
            })?;
        } else if !self.commits.covers(self.j_written) {
            // Nothing written since the open, but a waiter's sync failed.
            return Err(Error::Poisoned);
        }
        let end = self.writer().end();
        if let Some(g) = self.j_spare.take() {
            // Best effort: a spare left behind is removed by the next open.
            let _ = self.sieve.storage().remove_file(&names::j(g));
        }
        self.sieve
            .close_with_journal(Some(crate::manifest::CleanEnd { gen, end }))
    }
}

/// Puts record `seq` among queue `q`'s records to fetch again at `when`, in (instant, seq)
/// order.
/// Refuses policy fields that a call could not set (in a queue's own policy as the store
/// keeps it, a delay or limit of 2^64 - 1 stands for a field not given: `own`).
fn validate_fields(p: &super::PolicyFields, own: bool) -> Result<()> {
    if p.per_queue == Some(0) {
        return Err(Error::InvalidOption {
            option: "per_queue",
            reason: "0: at least 1 URL of a queue may be leased at once".into(),
        });
    }
    if let Some(r) = p.ratio_ppm.filter(|&r| r > 1_000_000) {
        return Err(Error::InvalidOption {
            option: "ratio",
            reason: format!("{r} millionths: the ratio is at most 1"),
        });
    }
    for (option, v) in [("delay", p.delay_ms), ("limit", p.limit)] {
        if own && v == Some(u64::MAX) {
            return Err(Error::InvalidOption {
                option,
                reason: format!("{}: at most {}", u64::MAX, u64::MAX - 1),
            });
        }
    }
    Ok(())
}

fn insert_refetch(q: &mut Queue, when: u64, seq: u64, record: Box<[u8]>) {
    let refetch = &mut q.lists_mut().refetch;
    let k = refetch.partition_point(|(w, s, _)| (*w, *s) < (when, seq));
    refetch.insert(k, (when, seq, record));
}

/// Gives the pages of the open's buffers, freed by now, back to the system: the
/// checkpoint's bytes and ids, the walk of the queues in id order, the sorts of the index's
/// fill. glibc's allocator keeps freed memory in its heap for the next allocations (and
/// serves large ones from it rather than by mappings of their own once it has freed such
/// a mapping): at 10^6 queues about 6 MiB stayed resident after an open for nothing.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only gives free pages of the allocator's heaps back to the
    // system; no memory in use is touched.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The most bytes one entry of J may take: its record's length and its frame's are 4-byte
/// fields, and the frame holds the records buffered before it too. (A unit test's bound is
/// 1 MiB, so that a change past it takes little memory to make.)
#[cfg(not(test))]
const MAX_ENTRY_BYTES: usize = 1 << 31;
#[cfg(test)]
const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Refuses, before anything is written, a change whose entry of many records (known
/// updates with their receipts, an import) would not fit one record of J: written, its
/// length would wrap and the journal could no longer be read. (The calls that make such
/// entries check an estimate first, before they change anything: this is the last guard.)
/// The other entries hold one record at most, which the bounds of a URL, a key and metadata
/// keep far below it, but for a compaction's, of 16 bytes per queue with URLs waiting: it
/// reaches the bound past 10^8 such queues, which no frontier of this design holds in RAM.
fn fits_journal(entries: &[Entry<'_>]) -> Result<()> {
    let mut buf = Vec::new();
    for e in entries {
        if matches!(e, Entry::Receipted { .. } | Entry::Imported { .. }) {
            buf.clear();
            e.encode(&mut buf);
            fits_entry(buf.len(), "batch")?;
        }
    }
    Ok(())
}

/// Refuses an entry of J of `bytes` bytes past [`MAX_ENTRY_BYTES`], naming `option`.
fn fits_entry(bytes: usize, option: &'static str) -> Result<()> {
    if bytes > MAX_ENTRY_BYTES {
        return Err(Error::InvalidOption {
            option,
            reason: format!(
                "the change takes about {bytes} bytes in the journal, over the \
                 {MAX_ENTRY_BYTES} one step may: make it in smaller calls"
            ),
        });
    }
    Ok(())
}

/// Refuses discovered URLs given no key whose own key is over [`super::key::MAX_KEY_LEN`] bytes
/// (`super::validate_own_key`): a push makes no queue no call could name. An update takes
/// them: a frontier may hold such URLs, moved from a plain sieve's output or pushed by a
/// build before the check, and an update must still end their leases.
fn own_keys(items: &[super::Discovered<'_>]) -> Result<()> {
    items
        .iter()
        .try_for_each(|it| super::validate_own_key(it.url, it.key))
}

/// Whether queue `q` may get more leases under policy `p` (politeness aside): room under its
/// `per_queue`, and under its limit.
fn room(p: Policy, q: &Queue) -> bool {
    q.holding() < p.per_queue
        && (p.limit == 0 || q.completed.saturating_add(u64::from(q.leased)) < p.limit)
}

/// The error of a seq that two records out of the Q runs (leased, returned, to fetch again)
/// share, or one of them and a record taken from a run: the checkpoint's or J's seqs were
/// edited under valid checksums. It names the checkpoint, which J's entries are replayed on.
fn out_of_runs_clash(seq: u64) -> Error {
    Error::corrupt(
        names::CHECKPOINT,
        0,
        Corruption::Invalid {
            field: "seq of a record out of its queue's runs",
            expected: "a seq no other record has",
            found: seq,
        },
    )
}

/// J's entries read at an open: their bytes one after the other in one buffer, each one's
/// end, and each generation with the number of entries up to its end. (An allocation of
/// its own per entry took about 100 bytes an entry beyond its bytes.)
#[derive(Default)]
struct Entries {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// The offset in its generation's file of the frame that holds each entry, for the
    /// errors that name an entry's place.
    frames: Vec<u64>,
    gens: Vec<(u64, usize)>,
}

impl Entries {
    fn push(&mut self, g: u64, frame: u64, entry: &[u8]) {
        self.bytes.extend_from_slice(entry);
        self.ends.push(self.bytes.len());
        self.frames.push(frame);
        match self.gens.last_mut() {
            Some((last, n)) if *last == g => *n += 1,
            _ => {
                let before = self.gens.last().map_or(0, |&(_, n)| n);
                self.gens.push((g, before + 1));
            }
        }
    }

    /// Each entry, decoded, with its generation; a damaged one is an error naming it.
    fn decoded(&self) -> impl Iterator<Item = Result<(u64, Entry<'_>)>> + '_ {
        let mut gen = 0;
        self.ends.iter().enumerate().map(move |(i, &end)| {
            while self.gens[gen].1 <= i {
                gen += 1;
            }
            let g = self.gens[gen].0;
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            Entry::decode(&self.bytes[start..end])
                .map(|e| (g, e))
                .map_err(|what| Error::corrupt(&names::j(g), self.frames[i], what))
        })
    }
}

/// Reads J's generations `gens` (consecutive): their entries, and a writer continuing the
/// last one after its valid frames (a torn tail is marked first, as A's is).
fn read_journal(
    st: &dyn Storage,
    gens: &[u64],
    clean: crate::manifest::CleanEnd,
) -> Result<(FrameWriter, u64, Entries)> {
    let mut entries = Entries::default();
    let last = *gens.last().expect("a generation");
    let mut replay = None;
    for (i, &g) in gens.iter().enumerate() {
        if g != gens[0] + i as u64 {
            return Err(Error::corrupt(
                &names::j(gens[0] + i as u64),
                0,
                Corruption::Missing,
            ));
        }
        let r = wal::replay_of(J, st, g, g == last, |_, frame, e| {
            entries.push(g, frame, e);
            Ok(())
        })?;
        r.check_clean(g, clean)?;
        if g != last && r.ends_the_stream(false) {
            return Err(Error::corrupt(
                &names::j(g),
                r.valid_end,
                Corruption::Invalid {
                    field: "journal generation",
                    expected: "whole, when a later generation follows",
                    found: g,
                },
            ));
        }
        replay = Some(r);
    }
    let r = replay.expect("the last generation");
    if r.valid_end < wal::HEADER_LEN {
        // A crash while its header was written: it holds nothing.
        drop(r);
        st.remove_file(&names::j(last))?;
        return Ok((wal::create_of(J, st, last, None)?, last, entries));
    }
    if r.ended {
        // Closed by a checkpoint that did not happen: the next generation follows it.
        drop(r);
        return Ok((wal::create_of(J, st, last + 1, None)?, last + 1, entries));
    }
    wal::mark_torn_tail(last, &r)?;
    if clean.of(last) != Some(r.valid_end) {
        // A crash left it: its valid entries may sit unsynced in the system's cache, and an
        // entry of the next epoch must never reach the disk without them.
        r.file.sync()?;
    }
    let writer = wal::reuse(r.file, last, r.valid_end, r.records, r.last_epoch).assume_synced();
    Ok((writer, last, entries))
}

#[cfg(test)]
pub(super) mod tests {
    use crate::queues::{Discovered, Frontier, ManualClock};

    /// A frontier on a simulated disk that merges on the caller's thread.
    fn inline_frontier() -> Frontier {
        inline_frontier_with(|o| o)
    }

    /// [`inline_frontier`] with its options changed by `change`.
    /// Pushes `urls` and flushes them into their queues: one move, one Q run.
    pub(in crate::queues::core) fn push_run(f: &Frontier, urls: &[String]) {
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        f.flush().unwrap();
    }

    fn inline_frontier_with(change: impl FnOnce(crate::Options) -> crate::Options) -> Frontier {
        let clock = std::sync::Arc::new(ManualClock::new(1_000));
        let opts = crate::Options::new()
            .seed(1)
            .background_flush(false)
            .frontier_low(0);
        let disk = std::sync::Arc::new(crate::storage::SimDisk::new());
        Frontier::open_with(disk, change(opts), clock).unwrap()
    }

    /// Pushes URL `i` of host `i % hosts` for each `i` of `range`.
    fn push_urls(f: &Frontier, range: std::ops::Range<usize>, hosts: usize) {
        let urls: Vec<String> = range
            .map(|i| format!("http://h{}.test/{i}", i % hosts))
            .collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
    }

    /// A store whose manifest says version 14 (as the build before entry 19 left it), or 15
    /// (before a queue's policy could leave fields to the default), opens, and its manifest
    /// says this build's version before J holds a policy, so that a build before refuses the
    /// store by its version rather than meeting an entry it cannot read.
    #[test]
    fn a_policy_commits_the_manifest_in_this_builds_version_first() {
        for older in [14u32, 15] {
            let clock = std::sync::Arc::new(ManualClock::new(1_000));
            let opts = crate::Options::new()
                .seed(1)
                .background_flush(false)
                .frontier_low(0);
            let open = |disk: &crate::storage::SimDisk| {
                Frontier::open_with(
                    std::sync::Arc::new(disk.clone()),
                    opts.clone(),
                    clock.clone(),
                )
                .unwrap()
            };
            let disk = crate::storage::SimDisk::new();
            let f = open(&disk);
            push_urls(&f, 0..10, 2);
            f.flush().unwrap();
            f.close().unwrap();
            let version = || disk.content(crate::names::MANIFEST).unwrap()[4..8].to_vec();
            let m = crate::manifest::Manifest::decode(
                &disk.content(crate::names::MANIFEST).unwrap(),
                "MANIFEST",
            )
            .unwrap();
            disk.set_content(crate::names::MANIFEST, m.encode_as(older));
            assert_eq!(version(), older.to_le_bytes());
            let f = open(&disk);
            let p = crate::Policy {
                delay_ms: 5,
                ..crate::Policy::default()
            };
            f.set_policy("", Some(b"h0.test"), p).unwrap();
            assert_eq!(version(), crate::format::MANIFEST_VERSION.to_le_bytes());
            drop(f);
            // After a crash, the entry replays.
            let f = open(&disk);
            assert_eq!(f.policy("", Some(b"h0.test")).unwrap(), p);
            f.close().unwrap();
        }
    }

    /// The hand-out's own guard, alone: a queue the heap counts as scheduled though it can no
    /// longer be served (here a limit put in place behind the scheduler's back, as a path that
    /// forgot to settle its queue would leave it) is dropped from the count at the hand-out's
    /// start, so that the empty front flushes and the host pushed since is served at once.
    /// Without the drop, this hand-out answered nothing (and `next_due_ms` then said a queue
    /// was due).
    #[test]
    fn a_hand_out_drops_a_stale_scheduled_queue_before_it_counts_the_front() {
        let f = inline_frontier();
        push_run(&f, &["http://h0.test/a".to_string()]);
        f.with(|c| {
            let id = crate::queues::key::queue_id(0, b"h0.test");
            assert!(c.place(id).is_some() && c.front(None) == 1);
            c.policies.insert(
                id,
                crate::Policy {
                    limit: 1,
                    ..crate::Policy::default()
                },
            );
            c.queues.get_mut(c.place(id).unwrap()).completed = 1;
            Ok(())
        })
        .unwrap();
        push_urls(&f, 1..2, 2);
        let got = f.lease(10, None, 60_000).unwrap();
        let got: Vec<&[u8]> = got.iter().map(|l| &l.url[..]).collect();
        assert_eq!(got, [&b"http://h1.test/1"[..]]);
        assert_eq!(f.with(|c| Ok(c.front(None))).unwrap(), 0);
    }

    #[test]
    fn a_flush_in_steps_moves_f_up_to_its_end_when_its_merge_was_applied() {
        use super::{FlushState, FlushStep};
        let f = inline_frontier();
        let push = |from: usize| push_urls(&f, from..from + 300_000, 1000);
        push(0);
        // The first step merges and moves one part (2^18 records of 300,000).
        let mut st = FlushState::default();
        assert_eq!(f.with(|c| c.flush_step(&mut st)).unwrap(), FlushStep::More);
        assert_eq!(st.target, Some(300_000));
        // Pushes go on between two steps, and another merge adds their URLs to F.
        push(300_000);
        f.with(|c| c.sieve.flush()).unwrap();
        let mut steps = 0;
        while f.with(|c| c.flush_step(&mut st)).unwrap() != FlushStep::Done {
            steps += 1;
            assert!(steps < 10, "the flush goes on after its own URLs are moved");
        }
        let (read, count) = f.with(|c| Ok(c.sieve.f_read_and_count())).unwrap();
        assert!(read >= 300_000 && read < count, "{read} of {count}");
        assert_eq!(count, 600_000);
    }

    /// An open whose J holds hand-outs after a checkpoint of their queues finds those
    /// queues together before the replay (`Core::lease_places`, which asserts in tests that
    /// the walk finds what the index does), and the leases come back whole.
    #[test]
    fn the_queues_of_js_hand_outs_are_found_together_at_an_open() {
        let disk = crate::storage::SimDisk::new();
        let clock = std::sync::Arc::new(ManualClock::new(1_000));
        let open = |journal: u64| {
            let opts = crate::Options::new()
                .seed(1)
                .background_flush(false)
                .frontier_low(0)
                .journal_bytes(journal);
            Frontier::open_with(std::sync::Arc::new(disk.clone()), opts, clock.clone()).unwrap()
        };
        // A checkpoint of 400 queues: the move's 400 groups weigh more than 4 KiB.
        let f = open(4096);
        push_urls(&f, 0..2_000, 400);
        f.flush().unwrap();
        f.close().unwrap();
        assert!(disk.content(crate::names::CHECKPOINT).is_some());
        // 300 hand-outs, then a crash: J holds their entries after the checkpoint.
        let f = open(64 << 20);
        let leased = f.lease(300, None, 60_000).unwrap();
        assert_eq!(leased.len(), 300);
        drop(f);
        let f = open(64 << 20);
        let replayed = f.with(|c| Ok(c.lease_places_found)).unwrap();
        assert_eq!(replayed, 300, "lease entries whose queue the walk found");
        assert_eq!(f.stats().unwrap().leased, 300);
        // None of them is handed out again before its deadline.
        let again = f.lease(400, None, 60_000).unwrap();
        assert_eq!(again.len(), 100);
        for l in &again {
            assert!(leased.iter().all(|m| m.url != l.url));
        }
    }

    /// Leases one URL of up to `queues` queues a call and ends each call's leases as done,
    /// until nothing is due; returns the URLs of each call, in order.
    fn one_of_each_queue(f: &Frontier, queues: usize) -> Vec<Vec<String>> {
        let mut calls = Vec::new();
        loop {
            let leased = f.lease(queues, Some(1), 60_000).unwrap();
            if leased.is_empty() {
                return calls;
            }
            let done: Vec<(&[u8], u64)> = leased.iter().map(|l| (&l.url[..], 0)).collect();
            assert!(f
                .complete_urls("", &done, crate::queues::Completion::Done)
                .unwrap()
                .iter()
                .all(|&e| e));
            calls.push(
                leased
                    .into_iter()
                    .map(|l| String::from_utf8(l.url).unwrap())
                    .collect(),
            );
        }
    }

    /// Hand-outs of one URL from each of several queues whose groups fill frames take a
    /// queue's next records from those read ahead at its hand-out before, not from its
    /// frame read and decoded again: each frame is read about once, and every URL comes out
    /// once, in its queue's order.
    #[test]
    fn a_queues_records_read_ahead_serve_its_next_hand_outs() {
        let f = inline_frontier();
        // Three hosts of 200 URLs each, one after the other in the run: each group fills
        // frames of its own (2 KiB, about 60 of these records).
        push_urls(&f, 0..600, 3);
        f.flush().unwrap();
        let mut served: Vec<Vec<String>> = vec![Vec::new(); 3];
        for call in one_of_each_queue(&f, 3) {
            // One of each host a call: their frames are read in turn.
            assert_eq!(call.len(), 3);
            for url in call {
                let n: usize = url.rsplit('/').next().unwrap().parse().unwrap();
                served[n % 3].push(url);
            }
        }
        for (h, urls) in served.iter().enumerate() {
            let expected: Vec<String> = (0..600)
                .filter(|i| i % 3 == h)
                .map(|i| format!("http://h{h}.test/{i}"))
                .collect();
            assert_eq!(urls, &expected, "host {h}'s URLs, once each, in order");
        }
        // 200 calls of three queues: without the records read ahead, 600 frames read.
        let read = f.with(|c| Ok(c.frames_read)).unwrap();
        assert!(read <= 40, "{read} frames read for 600 hand-outs");
    }

    /// Hand-outs of one URL from each of many small queues of compressed runs (frames of
    /// many queues, decompressed whole at each read) read each frame about once for each
    /// turn that first reaches it: a frame is decoded whole and kept for the next queues,
    /// one frame kept in each run (the queues of a turn are at different runs), and a queue
    /// keeps even one record read ahead. Every URL comes out once, in its queue's order.
    #[test]
    fn compressed_frames_of_many_queues_are_read_about_once() {
        let f = inline_frontier_with(|o| o.compress_queues(true));
        let hosts = 400;
        // A first run in which host h has 2 or 3 URLs (by its parity), then a second run
        // of 3 each: from the third turn on, a turn takes some queues' URLs from the second
        // run and the others' from the first.
        let mut urls: Vec<Vec<String>> = vec![Vec::new(); hosts];
        let mut n = 0;
        for run in 0..2 {
            let mut batch = Vec::new();
            for round in 0..3 {
                for (h, list) in urls.iter_mut().enumerate() {
                    if run == 0 && round == 2 && h % 2 == 0 {
                        continue;
                    }
                    let u = format!("http://h{h}.test/page-{n}.html");
                    n += 1;
                    list.push(u.clone());
                    batch.push(u);
                }
            }
            let items: Vec<Discovered<'_>> = batch
                .iter()
                .map(|u| Discovered::url(u.as_bytes()))
                .collect();
            f.push("", &items).unwrap();
            f.flush().unwrap();
            f.lease(0, Some(1), 60_000).unwrap();
        }
        assert_eq!(f.stats().unwrap().runs, 2);
        let mut served: Vec<Vec<String>> = vec![Vec::new(); hosts];
        for url in one_of_each_queue(&f, hosts).into_iter().flatten() {
            let h: usize = url["http://h".len()..url.find('.').unwrap()]
                .parse()
                .unwrap();
            served[h].push(url);
        }
        assert_eq!(served, urls, "every URL once, each host's in order");
        let read = f.with(|c| Ok(c.frames_read)).unwrap();
        let frames: u64 = f
            .with(|c| Ok(c.runs.iter().map(|r| r.frame_count()).sum()))
            .unwrap();
        // Each frame is read once for the queues that reach it in one turn, and once more
        // for those that reach it in the next (the second run's frames, from the third
        // turn on); before, a frame was read again at every turn and twice in a turn.
        assert!(
            read <= 2 * frames,
            "{read} frames read for {frames} frames, {n} URLs"
        );
    }

    /// A walk of held URLs in pages, each resumed at the place the one before returned,
    /// lists each URL once, in the order of one walk, reads a long queue's runs on from the
    /// place rather than again from their start, and still lists each URL once when the runs
    /// were merged between two pages or URLs already passed were completed.
    #[test]
    fn held_urls_listed_in_pages_resume_inside_a_queue() {
        let f = inline_frontier_with(|o| o);
        f.with(|c| {
            c.max_runs = super::compaction::RUNS_LIMIT;
            Ok(())
        })
        .unwrap();
        // Host h0 in three runs of 600 URLs, with a few URLs of other hosts around it.
        for run in 0..3 {
            let urls: Vec<String> = (0..600)
                .map(|j| format!("http://h0.test/{run}/{j}"))
                .chain((1..4).map(|h| format!("http://h{h}.test/{run}")))
                .collect();
            let items: Vec<Discovered<'_>> =
                urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
            f.flush().unwrap();
            f.lease(0, Some(1), 60_000).unwrap();
        }
        assert_eq!(f.stats().unwrap().runs, 3);
        // One of each part: h0's first URL to fetch again, its second returned, its third
        // leased.
        let two_at_once = crate::Policy {
            per_queue: 2,
            ..crate::Policy::default()
        };
        f.set_policy("", Some(b"h0.test"), two_at_once).unwrap();
        let first = f.lease(1, Some(1), 60_000).unwrap();
        let refetch = crate::Completion::RefetchAt(u64::MAX / 2);
        let ended = f.complete_urls("", &[(first[0].url.as_slice(), 0)], refetch);
        assert!(ended.unwrap()[0]);
        let two = f.lease(1, Some(2), 60_000).unwrap();
        assert_eq!(two.len(), 2);
        assert!(f.retry(two[0].token, 0).unwrap());
        let whole = |f: &Frontier| {
            let mut all = Vec::new();
            f.urls("", None, |h| {
                all.push((h.url, h.status));
                true
            })
            .unwrap();
            all
        };
        let all = whole(&f);
        assert_eq!(all.len(), 1809);
        let walked = |f: &Frontier| f.with(|c| Ok(c.held_walked)).unwrap();
        // Pages of `size`: every URL once, in order; the runs' records walked about once.
        type Between<'a> = Box<dyn FnMut(usize, &Frontier) + 'a>;
        let pages_of = |size: usize, f: &Frontier, mut between: Between<'_>| {
            let (mut got, mut after, mut page) = (Vec::new(), None, 0);
            loop {
                let mut n = 0;
                let place = f
                    .urls_from("", None, after.as_ref(), |h| {
                        got.push((h.url, h.status));
                        n += 1;
                        n < size
                    })
                    .unwrap();
                if n < size {
                    return got;
                }
                after = place;
                between(page, f);
                page += 1;
            }
        };
        let pages = |f: &Frontier, between: Between<'_>| pages_of(50, f, between);
        let differ = |a: &[(Vec<u8>, crate::UrlStatus)], b: &[(Vec<u8>, crate::UrlStatus)]| {
            let at = (a.iter().zip(b)).position(|(x, y)| x != y);
            (
                a.len(),
                b.len(),
                at.map(|k| {
                    (
                        String::from_utf8_lossy(&a[k].0).into_owned(),
                        String::from_utf8_lossy(&b[k].0).into_owned(),
                    )
                }),
            )
        };
        // Page boundaries on every part: the leased URL (the first), the returned one, the
        // first and last of each run's group, within frames and at their ends.
        for size in [1, 2, 3, 7, 50, 597, 598, 599, 600, 601, 1000] {
            let before = walked(&f);
            let paged = pages_of(size, &f, Box::new(|_, _| {}));
            assert_eq!(differ(&paged, &all), (all.len(), all.len(), None), "{size}");
            let walked_pages = walked(&f) - before;
            // The runs hold 1809 records (the three handed out among them); a walk from the
            // start of h0's groups at each of its 36 pages of 50 would walk about 32,000.
            let pages = (1809 / size) as u64 + 1;
            assert!(
                walked_pages <= 1809 + pages,
                "pages of {size}: {walked_pages} records walked"
            );
        }
        // Between pages: the returned URL, which the walk passed, leased again and done;
        // then the runs merged into one.
        let retried = two[0].url.clone();
        let seen = std::cell::RefCell::new(Vec::new());
        let got = pages(
            &f,
            Box::new(|page, f| {
                if page == 3 {
                    // (The other queues' URLs leased go back to their places.)
                    let again = f.lease(10, Some(2), 60_000).unwrap();
                    assert!(again.iter().any(|l| l.url == retried));
                    for l in again {
                        let ended = match l.url == retried {
                            true => f.done(l.token, 0),
                            false => f.retry(l.token, 0),
                        };
                        assert!(ended.unwrap());
                    }
                }
                if page == 5 {
                    f.with(|c| {
                        c.max_runs = 1;
                        c.compact_if_due()
                    })
                    .unwrap();
                    assert_eq!(f.stats().unwrap().runs, 1);
                }
                seen.borrow_mut().push(page);
            }),
        );
        assert!(seen.into_inner().len() > 5);
        // The URL done was listed before it was; none after it shifted.
        let expected = all;
        assert_eq!(
            differ(&got, &expected),
            (expected.len(), expected.len(), None)
        );
    }

    /// A purge of a long queue's waiting URLs in pages makes each URL picked done where the
    /// walk found it: the runs' records are walked about once in all (before, each page
    /// looked its URLs up from the queue's first record), the URLs picked are never served,
    /// and the others are, in order, also after a reopen.
    #[test]
    fn a_purge_in_pages_of_a_long_queue_walks_its_runs_about_once() {
        let disk = crate::storage::SimDisk::new();
        let clock = std::sync::Arc::new(ManualClock::new(1_000));
        let opts = crate::Options::new()
            .seed(8)
            .frontier_low(0)
            .background_flush(false);
        let open = || {
            Frontier::open_with(
                std::sync::Arc::new(disk.clone()),
                opts.clone(),
                clock.clone(),
            )
        };
        let f = open().unwrap();
        let mut all = Vec::new();
        // Host h0 in three runs of 600 URLs.
        for run in 0..3 {
            let urls: Vec<String> = (0..600)
                .map(|j| format!("http://h0.test/{run}/{j}"))
                .collect();
            push_run(&f, &urls);
            all.extend(urls);
        }
        let walked = |f: &Frontier| f.with(|c| Ok(c.held_walked + c.looked_up.get())).unwrap();
        let before = walked(&f);
        let mut n = 0u64;
        let purged = f
            .purge("", None, 50, |_| {
                n += 1;
                n.is_multiple_of(2)
            })
            .unwrap();
        assert_eq!(purged, 900);
        let pages = 1800 / 50 + 1;
        let cost = walked(&f) - before;
        assert!(cost <= 1800 + pages, "{cost} records walked");
        let kept: Vec<String> = all.iter().step_by(2).cloned().collect();
        let drain = |f: &Frontier| {
            let mut served = Vec::new();
            loop {
                let got = f.lease(10, None, 60_000).unwrap();
                if got.is_empty() {
                    return served;
                }
                for l in got {
                    assert!(f.done(l.token, 0).unwrap());
                    served.push(String::from_utf8(l.url).unwrap());
                }
            }
        };
        let crashed = disk.crash_image(crate::storage::sim::CrashImage::KillProcess);
        assert_eq!(drain(&f), kept);
        let f =
            Frontier::open_with(std::sync::Arc::new(crashed), opts.clone(), clock.clone()).unwrap();
        assert_eq!(drain(&f), kept, "after a crash");
    }

    /// A purge makes done what each page of its walk picks, in the same step as the walk:
    /// a URL another thread schedules again while a page runs is purged before that (and
    /// so scheduled again after it) or judged by its new metadata, never purged after it.
    #[test]
    fn a_purge_completes_what_each_page_picks_in_the_walks_step() {
        let f = inline_frontier_with(|o| o);
        let urls: Vec<String> = (0..30)
            .map(|i| format!("http://h{}.test/{i}", i % 3))
            .collect();
        let metas: Vec<&[u8]> = (0..30)
            .map(|i| if i % 2 == 0 { &b"old"[..] } else { b"new" })
            .collect();
        let items: Vec<Discovered<'_>> = (urls.iter().zip(&metas))
            .map(|(u, m)| Discovered {
                url: u.as_bytes(),
                key: None,
                metadata: m,
            })
            .collect();
        f.push("", &items).unwrap();
        f.flush().unwrap();
        // h0's first URL (0, old) leased: its lease ends as done.
        let leased = f.lease(1, Some(1), 60_000).unwrap();
        assert_eq!(leased[0].url, urls[0].as_bytes());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let later = 10 * 86_400_000;
        let purged = std::thread::scope(|s| {
            // Once the purge's first page (h0's URLs 0, 3, 6 and 9) runs, URLs 6 (old, in
            // that page) and 26 (old, in h2's queue, a later page) are scheduled again with
            // new metadata; the call waits for the page's step to end.
            let urls = &urls;
            let f = &f;
            s.spawn(move || {
                rx.recv().unwrap();
                let again = |u: &'static str| crate::Known {
                    url: u.as_bytes(),
                    key: None,
                    metadata: b"newer",
                    refetch_ms: later,
                };
                assert_eq!(urls[6], "http://h0.test/6");
                assert_eq!(urls[26], "http://h2.test/26");
                let items = [again("http://h0.test/6"), again("http://h2.test/26")];
                f.update("", &items).unwrap();
            });
            let mut first = true;
            f.purge("", None, 4, |h| {
                if std::mem::take(&mut first) {
                    tx.send(()).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                h.metadata == b"old"
            })
            .unwrap()
        });
        // URL 26 is purged if its page came before the update (then scheduled again by
        // it), or judged by its new metadata and passed over.
        assert!(purged == 15 || purged == 14, "{purged}");
        for (i, u) in urls.iter().enumerate() {
            let status = f.status("", None, u.as_bytes()).unwrap();
            let expected = match i {
                6 | 26 => crate::UrlStatus::Refetch { at_ms: later },
                i if i % 2 == 0 => crate::UrlStatus::Done,
                _ => crate::UrlStatus::Waiting,
            };
            assert_eq!(status, expected, "{u}");
        }
        assert!(!f.done(leased[0].token, 0).unwrap(), "the lease ended");
        // A pick that panics: its page completes nothing, the panic reaches the caller, and
        // the frontier goes on.
        let mut calls = 0;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f.purge("", Some(b"h1.test"), 10, |_| {
                calls += 1;
                assert!(calls < 3, "a pick that panics");
                true
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(f.counts("", Some(b"h1.test")).unwrap().waiting, 5);
        // A key's queue alone, and nothing left to pick.
        assert_eq!(f.purge("", Some(b"h1.test"), 1, |_| true).unwrap(), 5);
        assert_eq!(f.purge("", Some(b"h1.test"), 1, |_| true).unwrap(), 0);
        // A host longer than a key may be given: its URLs, pushed without a key, are purged.
        // (A push refuses such a URL now; a frontier still holds those a plain sieve's
        // output or a build before the check brought, as this push, past the check, does.)
        let long = format!("http://{}.test/", "a".repeat(300));
        assert!(f.push("", &[Discovered::url(long.as_bytes())]).is_err());
        f.with(|c| {
            c.push_items(b"DEFAULT", &[Discovered::url(long.as_bytes())], None)?;
            c.sync()
        })
        .unwrap();
        assert_eq!(
            f.purge("", None, 1, |h| h.url == long.as_bytes()).unwrap(),
            1
        );
        assert_eq!(
            f.status("", None, long.as_bytes()).unwrap(),
            crate::UrlStatus::Done
        );
    }

    /// A change whose one entry of J would pass the bound (known updates noted with their
    /// receipts) is refused before anything is written, and the frontier goes on.
    #[test]
    fn a_change_too_large_for_one_entry_of_the_journal_is_refused_whole() {
        let f = inline_frontier_with(|o| o);
        push_urls(&f, 0..4, 4);
        f.flush().unwrap();
        let meta = vec![b'm'; 600 << 10];
        let item = |u: &'static str| crate::Known {
            url: u.as_bytes(),
            key: None,
            metadata: &meta,
            refetch_ms: 5_000,
        };
        let two = [item("http://h0.test/0"), item("http://h1.test/1")];
        let refused = f.update_receipted("", &two, &[(b"peer", 1)]);
        assert!(
            matches!(
                refused,
                Err(crate::Error::InvalidOption {
                    option: "batch",
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(
            f.receipt(b"peer").unwrap(),
            None,
            "nothing of it was applied"
        );
        assert_eq!(
            f.status("", None, b"http://h0.test/0").unwrap(),
            crate::UrlStatus::Waiting
        );
        // In two calls, each fits.
        f.update_receipted("", &two[..1], &[(b"peer", 1)]).unwrap();
        f.update_receipted("", &two[1..], &[(b"peer", 2)]).unwrap();
        assert_eq!(f.receipt(b"peer").unwrap(), Some(2));
        assert_eq!(
            f.status("", None, b"http://h1.test/1").unwrap(),
            crate::UrlStatus::Refetch { at_ms: 5_000 }
        );
    }

    /// A hand-out of one crawl pops the other crawls' due queues and passes over them: they
    /// are changed in place, and only the queues it serves are decoded into the hot map.
    #[test]
    fn the_queues_a_hand_out_passes_over_stay_packed() {
        let clock = std::sync::Arc::new(ManualClock::new(1_000));
        let opts = crate::Options::new()
            .seed(1)
            .background_flush(false)
            .frontier_low(0)
            .hot_queues(64);
        let disk = std::sync::Arc::new(crate::storage::SimDisk::new());
        let f = Frontier::open_with(disk, opts, clock).unwrap();
        push_urls(&f, 0..5_000, 5_000);
        let urls: Vec<String> = (0..10).map(|i| format!("http://a{i}.test/")).collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("a", &items).unwrap();
        f.flush().unwrap();
        let req = crate::queues::LeaseRequest {
            max_queues: 10,
            crawl: Some("a".into()),
            ..Default::default()
        };
        assert_eq!(f.lease_batch(&req).unwrap().len(), 10);
        let (hot, room) = f
            .with(|c| Ok((c.queues.hot(), c.queues.hot_room())))
            .unwrap();
        // 64 at most before it, and the 10 it leased; the map's room, which it keeps, was
        // never that of the 5,000 passed over.
        assert!(hot <= 74, "{hot} queues decoded of 5,010");
        assert!(room < 1_000, "room for {room} queues");
        // The queues passed over are still due.
        assert_eq!(f.lease(10_000, None, 60_000).unwrap().len(), 5_000);
    }

    #[test]
    fn the_state_of_a_queue_takes_what_design_md_says() {
        // The queue, its id (in a vector of its own), its key's place, its entry in the id
        // index (a u32) and in the heap (instant and queue in a u128): docs/design.md,
        // "Memory" of the frontier, states these.
        assert_eq!(std::mem::size_of::<super::Queue>(), 96);
        assert_eq!(std::mem::size_of::<super::leases::Lease>(), 72);
        assert_eq!(std::mem::size_of::<super::KeyAt>(), 8);
        assert_eq!(std::mem::size_of::<u128>(), 16);
    }

    #[test]
    fn the_heap_of_deadlines_holds_at_most_twice_the_leases() {
        let f = inline_frontier();
        push_urls(&f, 0..40_000, 20);
        f.flush().unwrap();
        // Leases of an hour, each done at once: none of their deadlines passes.
        let mut most = 0;
        for _ in 0..2_000 {
            for l in f.lease(20, None, 3_600_000).unwrap() {
                assert!(f.done(l.token, 0).unwrap());
            }
            // At most 20 leases live at once.
            let held = f.with(|c| Ok(c.expiries.len())).unwrap();
            assert!(held <= 2 * 20 + super::EXPIRIES_SLACK + 1, "{held} entries");
            most = most.max(held);
        }
        assert_eq!(f.stats().unwrap().done, 40_000);
        // The sweep ran: without it the heap would hold every lease made.
        assert!(most > super::EXPIRIES_SLACK, "{most}");
    }

    /// Under group commit, J's frames move to the next epoch only once a sync has made every
    /// frame written durable: a sync under way when a frame is written does not count, so a
    /// torn frame is never followed by one two epochs later unless it was synced.
    #[test]
    fn the_journal_moves_to_the_next_epoch_only_once_its_frames_are_durable() {
        use crate::queues::journal::Entry;
        use crate::queues::{Frontier, ManualClock};
        use crate::storage::SimDisk;
        use crate::Options;
        use std::sync::Arc;
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = Options::new().seed(1).background_flush(false);
        let f = Frontier::open_with(Arc::new(SimDisk::new()), opts, clock).unwrap();
        f.with(|c| {
            let e0 = c.writer().epoch();
            c.journal_deferred(&[Entry::Pause(false)])?;
            c.journal_deferred(&[Entry::Pause(false)])?;
            // Neither is durable: the second frame is of the first one's epoch.
            assert_eq!(c.writer().epoch(), e0);
            let (commits, target) = c.durable_target();
            // A waiter's sync (another thread's, as it would run) covers both.
            commits.wait(target).unwrap();
            c.journal_deferred(&[Entry::Pause(false)])?;
            assert_eq!(c.writer().epoch(), e0 + 1);
            // Written, not synced: the next frame stays in its epoch.
            c.journal_deferred(&[Entry::Pause(false)])?;
            assert_eq!(c.writer().epoch(), e0 + 1);
            Ok(())
        })
        .unwrap();
        f.close().unwrap();
    }

    /// A queue's place in a frame is kept in 16 bits: a frame of more records than that (no
    /// writer makes one) is reported as damage where a hand-out's place would pass 2^16.
    #[test]
    fn a_place_past_a_frames_2_to_the_16_records_is_reported_as_damage() {
        use crate::queues::qrun::TEST_FRAME_TARGET;
        use crate::queues::{Discovered, Frontier, ManualClock, Policy};
        use crate::storage::SimDisk;
        use crate::{Error, Options};
        use std::sync::Arc;
        // A writer closes a frame at 2 KiB, a few hundred records: a queue's place in a frame
        // is kept in 16 bits. A frame of 70,000 records of one queue (made here by a writer
        // told to close frames at 64 MiB) is a damaged run's: the hand-out that would pass
        // record 2^16 of it reports the run as damaged instead of wrapping its place around.
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = Options::new()
            .seed(1)
            .background_flush(false)
            .slots(1 << 17);
        let f = Frontier::open_with(Arc::new(SimDisk::new()), opts, clock).unwrap();
        f.set_policy(
            "",
            None,
            Policy {
                per_queue: 1_000,
                ..Policy::default()
            },
        )
        .unwrap();
        let urls: Vec<String> = (0..70_000).map(|i| format!("http://h.test/{i}")).collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        TEST_FRAME_TARGET.with(|c| c.set(64 << 20));
        f.flush().unwrap();
        let mut served = 0;
        let err = loop {
            match f.lease(1, Some(1_000), 60_000) {
                Ok(got) => {
                    assert_eq!(got.len(), 1_000, "after {served}");
                    for l in got {
                        assert_eq!(l.url, urls[served].as_bytes());
                        served += 1;
                        assert!(f.done(l.token, 0).unwrap());
                    }
                }
                Err(e) => break e,
            }
        };
        TEST_FRAME_TARGET.with(|c| c.set(0));
        assert_eq!(served, 65_000, "{err}");
        let Error::Corrupt { file, .. } = &err else {
            panic!("{err}");
        };
        assert!(file.starts_with("q-"), "{err}");
        assert!(
            err.to_string().contains("records of a Q run's frame"),
            "{err}"
        );
    }

    /// A frontier's F written front coded alone (layout 3), as stores kept it before F was
    /// compressed, and then compressed (layout 1): the mover reads both into the queues, and
    /// each host's URLs come out in first-appearance order.
    #[test]
    fn the_mover_reads_fs_frames_of_the_older_layout_and_the_compressed_one() {
        use crate::frontier::append::FRONT_ONLY;
        use crate::names::{self, FileName};
        use crate::queues::{Discovered, Frontier, ManualClock};
        use crate::storage::{SimDisk, Storage};
        use crate::Options;
        use std::collections::HashMap;
        use std::sync::Arc;
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = || Options::new().seed(1).background_flush(false).slots(512);
        let disk = SimDisk::new();
        let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).unwrap();
        let urls: Vec<String> = (0..4_000)
            .map(|i| format!("http://h{}.test/some/path/{i}", i % 40))
            .collect();
        // F's layouts: the byte after each coded frame's header.
        let layouts = |disk: &SimDisk| -> Vec<u8> {
            let mut seen = Vec::new();
            for name in disk.list().unwrap() {
                if matches!(names::parse(&name), Some(FileName::F(_))) {
                    let c = disk.content(&name).unwrap();
                    let magic = crate::format::MAGIC_CODED.to_le_bytes();
                    for i in 0..c.len().saturating_sub(crate::frames::FRAME_HEADER) {
                        if c[i..i + 4] == magic {
                            seen.push(c[i + crate::frames::FRAME_HEADER]);
                        }
                    }
                }
            }
            seen
        };
        let push = |f: &Frontier, part: &[String]| {
            let items: Vec<Discovered<'_>> =
                part.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
        };
        // Pushes past the buffer: merges write F, which no hand-out has moved yet.
        FRONT_ONLY.with(|c| c.set(true));
        push(&f, &urls[..2_000]);
        FRONT_ONLY.with(|c| c.set(false));
        let old = layouts(&disk);
        assert!(old.contains(&3), "F front coded alone: {old:?}");
        push(&f, &urls[2_000..]);
        f.close().unwrap();
        let both = layouts(&disk);
        assert!(both.contains(&3) && both.contains(&1), "{both:?}");
        let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock).unwrap();
        let mut served: HashMap<String, Vec<u32>> = HashMap::new();
        loop {
            let got = f.lease(100, Some(1_000), 60_000).unwrap();
            if got.is_empty() {
                break;
            }
            for l in got {
                let u = String::from_utf8(l.url.clone()).unwrap();
                let (host, n) = u.rsplit_once('/').unwrap();
                served
                    .entry(host.to_owned())
                    .or_default()
                    .push(n.parse().unwrap());
                assert!(f.done(l.token, 0).unwrap());
            }
        }
        let mut all: Vec<u32> = served.values().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..4_000).collect::<Vec<u32>>(), "every URL once");
        for (host, ns) in &served {
            assert!(ns.windows(2).all(|w| w[0] < w[1]), "{host}: out of order");
        }
        f.close().unwrap();
    }

    /// A checkpoint keeps the generation it replaced as a spare, and the next one takes its
    /// file: never more than two J files, the newest generation written over the old bytes
    /// of the spare's; a close removes the spare, and the state reopens whole.
    #[test]
    fn the_next_journal_generation_takes_the_spares_file() {
        use crate::names::{self, FileName};
        use crate::queues::{Discovered, Frontier, ManualClock};
        use crate::storage::{SimDisk, Storage};
        use crate::Options;
        use std::sync::Arc;
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = || {
            Options::new()
                .seed(1)
                .background_flush(false)
                .journal_bytes(4096)
        };
        let disk = SimDisk::new();
        let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone()).unwrap();
        let urls: Vec<String> = (0..3_000)
            .map(|i| format!("http://h{}.test/{i}", i % 30))
            .collect();
        let items: Vec<Discovered<'_>> =
            urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
        f.push("", &items).unwrap();
        f.flush().unwrap();
        let journals = || -> Vec<u64> {
            let mut gens: Vec<u64> = disk
                .list()
                .unwrap()
                .iter()
                .filter_map(|n| match names::parse(n) {
                    Some(FileName::J(g)) => Some(g),
                    _ => None,
                })
                .collect();
            gens.sort_unstable();
            gens
        };
        let (mut reused, mut gens_seen) = (0, std::collections::HashSet::new());
        for _ in 0..50 {
            for l in f.lease(30, None, 60_000).unwrap() {
                assert!(f.done(l.token, 0).unwrap());
            }
            let gens = journals();
            assert!(gens.len() <= 2, "J files {gens:?}");
            let (newest, end) = f.with(|c| Ok((c.j_gen, c.writer().end()))).unwrap();
            assert_eq!(*gens.last().unwrap(), newest);
            if let [spare, _] = gens[..] {
                assert_eq!(spare + 1, newest, "the spare is the generation before");
            }
            let len = disk.open(&names::j(newest)).unwrap().len().unwrap();
            if len > end && gens_seen.insert(newest) {
                // Bytes past the writer's end: the spare's, overwritten as J grows.
                reused += 1;
            }
        }
        assert!(reused >= 3, "{reused} generations took a spare's file");
        assert_eq!(f.stats().unwrap().done, 1_500);
        f.close().unwrap();
        assert_eq!(journals().len(), 1, "a close removes the spare");
        let f = Frontier::open_with(Arc::new(disk.clone()), opts(), clock).unwrap();
        assert_eq!(f.stats().unwrap().done, 1_500);
        assert_eq!(f.stats().unwrap().waiting, 1_500);
        let mut served = 0;
        loop {
            let leased = f.lease(30, None, 60_000).unwrap();
            if leased.is_empty() {
                break;
            }
            for l in leased {
                assert!(f.done(l.token, 0).unwrap());
                served += 1;
            }
        }
        assert_eq!(served, 1_500);
        f.close().unwrap();
    }

    /// A flush hands the sieve its S back, emptied, for the next pushes; the move of the new
    /// URLs into the queues that follows frees it (its buffers take that room), and the next
    /// pushes grow an S again.
    #[test]
    fn the_move_into_the_queues_frees_the_spare_s() {
        use crate::queues::{Discovered, Frontier, ManualClock};
        use crate::storage::SimDisk;
        use crate::Options;
        use std::sync::Arc;
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = Options::new().seed(1).background_flush(false);
        let f = Frontier::open_with(Arc::new(SimDisk::new()), opts, clock).unwrap();
        let push = |from: usize| {
            let urls: Vec<String> = (from..from + 100_000)
                .map(|i| format!("http://h{}.test/{i}", i % 50))
                .collect();
            let items: Vec<Discovered<'_>> =
                urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
        };
        push(0);
        f.with(|c| c.sieve.flush()).unwrap();
        let spare = f.with(|c| Ok(c.sieve.spare_s_slots())).unwrap();
        assert!(spare >= 100_000, "the flush kept no spare S: {spare} slots");
        f.flush().unwrap();
        assert_eq!(f.with(|c| Ok(c.sieve.spare_s_slots())).unwrap(), 0);
        assert_eq!(f.stats().unwrap().waiting, 100_000);
        push(100_000);
        f.flush().unwrap();
        assert_eq!(f.stats().unwrap().waiting, 200_000);
    }
}
