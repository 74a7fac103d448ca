//! The mover: F's new records into Q runs, then into their queues (docs/design.md, "The
//! mover"). A move reads a part of F under the frontier's lock; its run is sorted, written
//! and synced either there (`Options::background_flush(false)`, and wherever a caller needs
//! every record in its queue before it goes on) or on a thread of its own while hand-outs,
//! ends of leases and pushes go on; the first call that finds the run written installs it
//! under the lock. One move at a time: a move, a full flush (and so a known update that
//! pushes, a delete, an export, an import, a release), a checkpoint and a close each install
//! the move under way first.

use super::job::Job;
use super::{Core, Mode};
use crate::error::{Error, Result};
use crate::frontier::Position;
use crate::names;
use crate::queues::journal::Entry;
use crate::queues::key::{default_key, queue_id};
use crate::queues::qrun::{Group, RunCoding, RunWriter};
use crate::record;
use crate::storage::{Storage, StorageExt};

/// Bytes of F's records the mover gathers into one Q run at most.
const MOVE_BYTES: usize = 16 << 20;
/// Records the mover gathers into one Q run at most (24 bytes each beside their own).
const MOVE_RECORDS: usize = 256 << 10;

/// A record of F on its way to a Q run ([`Core::move_f`]).
struct Moving {
    queue: u64,
    /// Its seq less the first record's.
    nth: u32,
    crawl: u32,
    /// Its offset in the buffer of the records read, and its length.
    at: u32,
    len: u32,
}

/// The records of one move, read from F and numbered, not yet in a run.
struct Batch {
    /// The records, end to end.
    bytes: Vec<u8>,
    records: Vec<Moving>,
    /// The seq of the first record.
    first: u64,
}

/// What the writer of a move's run knows of it: its groups, as its directory holds them, and
/// the key of each group's queue (its first record's), so that the install under the lock
/// reads neither the directory nor a frame ([`Core::install_written`]).
pub(super) struct Written {
    /// The run's groups, in the order of their queues.
    pub(super) groups: Vec<Group>,
    /// The keys, end to end.
    keys: Vec<u8>,
    /// Where each group's key ends in `keys`.
    key_ends: Vec<u32>,
}

impl Written {
    /// The key of group `n`'s queue.
    pub(super) fn key(&self, n: usize) -> &[u8] {
        let start = if n == 0 { 0 } else { self.key_ends[n - 1] };
        &self.keys[start as usize..self.key_ends[n] as usize]
    }
}

/// A move whose run is written on a thread of its own.
pub(super) struct Move {
    /// The run's writing (dropped without a close: waited for before the store's lock goes;
    /// the run, which J does not name, is removed by the next open).
    job: Job<Written>,
    /// The run's id.
    id: u64,
    /// F's read position past the records moved.
    f: Position,
    /// The seq of the first record moved: the frontier's `next_seq` until the install (no
    /// other call takes seqs while a move is under way).
    first: u64,
    /// The frontier's `next_seq` once the run is installed.
    next_seq: u64,
}

impl Move {
    /// Whether the run is written (or its writing failed).
    pub(super) fn finished(&self) -> bool {
        self.job.finished()
    }
}

impl Batch {
    /// Sorts the records by queue and seq, and writes them as Q run `id`, durably, with its
    /// directory entry when `dir_sync` (always, but for a planted bug); returns what the
    /// install needs of the run.
    fn write(
        mut self,
        st: &dyn Storage,
        (id, coding): (u64, RunCoding),
        dir_sync: bool,
    ) -> Result<Written> {
        self.records.sort_unstable_by_key(|m| (m.queue, m.nth));
        let mut w = RunWriter::create(st, id, coding)?;
        let (mut keys, mut key_ends) = (Vec::new(), Vec::new());
        let mut last = None;
        for m in &self.records {
            let at = m.at as usize;
            let rec = &self.bytes[at..at + m.len as usize];
            if last != Some(m.queue) {
                last = Some(m.queue);
                // Decoded once already, when F was read.
                let r =
                    record::decode(rec).map_err(|what| Error::corrupt(&names::q(id), 0, what))?;
                keys.extend_from_slice(r.key.unwrap_or_else(|| default_key(r.url)));
                key_ends.push(keys.len() as u32);
            }
            w.push(m.queue, m.crawl, self.first + u64::from(m.nth), rec)?;
        }
        let (_, groups) = w.finish_with_groups()?;
        if dir_sync {
            st.sync_directory()?;
        }
        debug_assert_eq!(groups.len(), key_ends.len());
        Ok(Written {
            groups,
            keys,
            key_ends,
        })
    }
}

impl Core {
    /// Moves F's next records into a new Q run, durably, then into their queues. A move
    /// under way is installed first. `background`: with the frontier's flushes in the
    /// background, the run is written on a thread of its own and installed by a later call
    /// ([`Core::poll_move`], [`Core::settle_move`]); otherwise, or when no thread can be
    /// had, here.
    pub(super) fn move_f(&mut self, background: bool) -> Result<()> {
        self.settle_move()?;
        self.writable()?;
        // Room for the run first, before F is read: a merge committed here may write a
        // checkpoint, which must not hold a read position past records in no run yet.
        self.make_room()?;
        let Some(mut batch) = self.read_f()? else {
            return Ok(());
        };
        if crate::planted::active(crate::planted::Bug::CursorBeforeQueues) {
            self.sieve.commit_read()?;
        }
        let id = self.next_run;
        let next_seq = batch.first + batch.records.len() as u64;
        let f = self.sieve.read_position();
        let st = self.sieve.storage().clone();
        if background && self.background {
            // If no thread can be had, the batch comes back and is written here.
            let (to, coding) = (st.clone(), self.coding);
            match Job::spawn("crivello-move", batch, move |batch: Batch| {
                let unsynced = crate::planted::active(crate::planted::Bug::MoveUnsynced);
                batch.write(&*to, (id, coding), !unsynced)
            }) {
                Ok(job) => {
                    // The run's id is taken now: a merge begun before the run is installed
                    // takes the ids after it.
                    self.next_run = id + 1;
                    self.moving = Some(Move {
                        job,
                        id,
                        f,
                        first: self.next_seq,
                        next_seq,
                    });
                    return Ok(());
                }
                Err(back) => batch = back,
            }
        }
        let moved = batch
            .write(&*st, (id, self.coding), true)
            .and_then(|w| self.install_move(id, f, next_seq, w));
        if moved.is_err() {
            self.poisoned = true;
        }
        moved
    }

    /// Installs the move under way once its run is written (a no-op while it is being
    /// written, or when none is under way).
    pub(super) fn poll_move(&mut self) -> Result<()> {
        match &self.moving {
            Some(m) if m.finished() => self.settle_move(),
            _ => Ok(()),
        }
    }

    /// Waits for the run of the move under way, if any, and installs it: no move is under
    /// way when this returns.
    pub(super) fn settle_move(&mut self) -> Result<()> {
        let Some(mut m) = self.moving.take() else {
            return Ok(());
        };
        let written = m.job.join();
        debug_assert_eq!(self.next_seq, m.first, "a seq was taken during a move");
        debug_assert!(
            self.sieve.read_position() == m.f,
            "F was read during a move"
        );
        let moved = written.and_then(|w| self.install_move(m.id, m.f, m.next_seq, w));
        if moved.is_err() {
            self.poisoned = true;
        }
        moved
    }

    /// Whether a move's run is being written.
    pub(super) fn move_busy(&self) -> bool {
        self.moving.as_ref().is_some_and(|m| !m.finished())
    }

    /// Reads F's next records (up to [`MOVE_BYTES`] and [`MOVE_RECORDS`]) and numbers them
    /// from `next_seq`. None: F has none unread. F's read position moves past each record
    /// read: if one does not reach a run, the next move would skip it. A failure from here
    /// on poisons the frontier; a reopen reads F again from the position J holds.
    fn read_f(&mut self) -> Result<Option<Batch>> {
        let raw = self.sieve.mode() != Mode::Frontier;
        // The move's buffers below take the room S's spare held.
        self.sieve.release_spare_s();
        // The records read, end to end in one buffer, and per record its queue, seq, crawl
        // and place in the buffer: 24 bytes beside its own, where a buffer per record cost
        // its allocation's rounding and header too.
        let mut bytes: Vec<u8> = Vec::new();
        let mut records: Vec<Moving> = Vec::new();
        let first = self.next_seq;
        let mut seq = first;
        let mut bad = None;
        let read = self.sieve.read_records(MOVE_RECORDS, MOVE_BYTES, |rec| {
            if bytes.capacity() == 0 {
                // Room for all a move reads (a bare URL takes a byte more): growing by
                // doubling would hold the old buffer and one of twice its size at once.
                // Pages are resident only once written.
                bytes.reserve_exact(MOVE_BYTES + MOVE_RECORDS + rec.len());
                records.reserve_exact(MOVE_RECORDS);
            }
            // The last record may pass the limit by its own length: room for exactly it.
            bytes.reserve_exact((rec.len() + 1).saturating_sub(bytes.capacity() - bytes.len()));
            let start = bytes.len();
            if raw {
                bytes.push(0);
            }
            bytes.extend_from_slice(rec);
            let record = &bytes[start..];
            match record::decode(record) {
                // Its URL is in a queue already: an import put it there, and pushed it only
                // so that the sieve knows it.
                Ok(_) if record::is_imported(record) => {
                    bytes.truncate(start);
                    Ok(())
                }
                Ok(r) => {
                    let key = r.key.unwrap_or_else(|| default_key(r.url));
                    records.push(Moving {
                        queue: queue_id(r.crawl, key),
                        nth: (seq - first) as u32,
                        crawl: r.crawl,
                        at: start as u32,
                        len: (bytes.len() - start) as u32,
                    });
                    seq += 1;
                    Ok(())
                }
                Err(what) => {
                    bad = Some(what);
                    Err(Error::Poisoned)
                }
            }
        });
        if let Err(e) = read {
            self.poisoned = true;
            return Err(match bad {
                Some(what) => {
                    Error::corrupt(&names::f(self.sieve.read_position().segment), 0, what)
                }
                None => e,
            });
        }
        if records.is_empty() {
            return Ok(None);
        }
        Ok(Some(Batch {
            bytes,
            records,
            first,
        }))
    }

    /// Makes the move of run `id` (written and synced, with its directory entry) durable in
    /// J, with F's position `f` past its records and the frontier's `next_seq` after them,
    /// and installs the run from what its writer knew of it (`written`); then commits F's
    /// read position and merges the runs if they are due.
    fn install_move(
        &mut self,
        id: u64,
        f: Position,
        next_seq: u64,
        written: Written,
    ) -> Result<()> {
        // Runs of version 12: the manifest says so before J refers to one.
        self.commit_version()?;
        // The entry's application installs the run: from `written`, not from its directory.
        self.written = Some((id, written));
        let committed = self.commit(&[Entry::Moved {
            run: Some(id),
            f,
            next_seq,
        }]);
        self.written = None;
        committed?;
        self.sieve.commit_read()?;
        self.compact_if_due()
    }
}
