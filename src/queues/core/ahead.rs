//! Records read ahead: a queue's records that follow, in the frame a hand-out read, the ones
//! it took, kept decoded for the queue's next hand-outs.
//!
//! A hand-out of one URL from each of many queues passes over every queue before it comes
//! back to the first: the frame it read for a queue is read again, and decoded again from
//! its start, at each of that queue's hand-outs, one record a time. A queue whose group
//! goes on in the frame keeps the group's records there, decoded, in a table of a fixed
//! size; its next hand-outs take them from there and read the frame no more.
//!
//! An entry is a function of its place in a run (the run's id, the frame's offset, the
//! record of the frame it starts at): runs are never written again, so an entry is either
//! what the frame holds there or not found (its queue's place moved elsewhere). A hand-out
//! checks the records it takes from an entry as it checks those of a frame.

use std::collections::HashMap;

use super::CounterHash;

/// Bytes of records kept at most (the records in the plain layout: a 4-byte length, the
/// seq, the record).
pub(super) const AHEAD_BYTES: usize = 8 << 20;

/// Room an entry is made only while this much is left: a frame's records decoded.
pub(super) const ENTRY_ROOM: usize = 4 << 10;

/// Records a queue keeps read ahead at least: fewer are not worth an entry, when the frame
/// is front coded alone (its read costs little more than walking to the queue's records).
pub(super) const MIN_RECORDS: u32 = 4;

/// Records a queue keeps read ahead at least, of a frame `compressed` or not: one of a
/// compressed frame, whose every read decompresses it whole; else [`MIN_RECORDS`].
pub(super) fn least_records(compressed: bool) -> u32 {
    if compressed {
        1
    } else {
        MIN_RECORDS
    }
}

/// Bytes an entry takes beside its records: the entry and its slot in the table, counted
/// with the records against the table's room.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Entry>() + std::mem::size_of::<u32>() + 8;

/// An entry untouched for this many look-ups is dropped when room is short.
const STALE_AFTER: u64 = 1 << 20;

/// Look-ups between two sweeps at most.
const SWEEP_EVERY: u64 = 1 << 16;

/// One queue's records read ahead.
pub(super) struct Entry {
    /// The run's id.
    pub(super) run: u64,
    /// The frame's offset in the run.
    pub(super) offset: u64,
    /// The frame's size, header included.
    pub(super) size: u64,
    /// The frame's records.
    pub(super) frame_count: u32,
    /// The frame's record the first one kept is.
    pub(super) start: u16,
    /// The queue's id.
    pub(super) queue: u64,
    /// The records, in the plain layout (those before `pos` taken).
    bytes: Box<[u8]>,
    /// Where the first record not taken starts in `bytes`.
    pos: usize,
    /// How many records from `pos` on.
    pub(super) count: u32,
    /// The table's look-ups when it was last used.
    touched: u64,
}

impl Entry {
    /// What the entry counts against the table's room: its records and [`ENTRY_OVERHEAD`].
    fn weight(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD
    }

    /// The records kept, in order.
    pub(super) fn records(&self) -> crate::frames::Records<'_> {
        crate::frames::Records::plain(&self.bytes[self.pos..])
    }

    /// Drops the first `n` records (of `count`); false if the first left would be past
    /// the frame's 2^16th record (a damaged frame's: the entry is no use).
    fn advance(&mut self, n: u32) -> bool {
        let Some(start) = u16::try_from(n)
            .ok()
            .and_then(|n| self.start.checked_add(n))
        else {
            return false;
        };
        let mut it = self.records();
        for _ in 0..n {
            it.next();
        }
        self.pos += it.position();
        self.count -= n;
        self.start = start;
        true
    }
}

/// The entries, by queue place.
pub(super) struct Ahead {
    entries: HashMap<u32, Entry, CounterHash>,
    /// Bytes of the entries (their records and [`ENTRY_OVERHEAD`] each), and the most they
    /// may take.
    bytes: usize,
    most: usize,
    /// Look-ups so far, and at the last sweep.
    clock: u64,
    swept: u64,
}

impl Default for Ahead {
    fn default() -> Ahead {
        Ahead::with_room(AHEAD_BYTES)
    }
}

impl Ahead {
    /// A table of entries of at most `most` bytes of records.
    pub(super) fn with_room(most: usize) -> Ahead {
        Ahead {
            entries: HashMap::default(),
            bytes: 0,
            most,
            clock: 0,
            swept: 0,
        }
    }

    /// Whether an entry of `len` bytes more fits (after a sweep of the entries long
    /// untouched, if it does not and none was made in the last [`SWEEP_EVERY`] look-ups).
    pub(super) fn room(&mut self, len: usize) -> bool {
        if self.bytes + len <= self.most {
            return true;
        }
        if self.clock - self.swept < SWEEP_EVERY {
            return false;
        }
        self.swept = self.clock;
        let old = self.clock.saturating_sub(STALE_AFTER);
        let mut freed = 0;
        self.entries.retain(|_, e| {
            let keep = e.touched >= old;
            if !keep {
                freed += e.weight();
            }
            keep
        });
        self.bytes -= freed;
        self.bytes + len <= self.most
    }

    /// Whether queue `place` has an entry starting at (`run`, `offset`, `start`) of queue
    /// `queue`; an entry of the place that does not is dropped.
    pub(super) fn find(
        &mut self,
        place: u32,
        (run, offset, start): (u64, u64, u16),
        queue: u64,
    ) -> bool {
        self.clock += 1;
        let Some(e) = self.entries.get(&place) else {
            return false;
        };
        if e.run == run && e.offset == offset && e.start == start && e.queue == queue {
            return true;
        }
        let len = e.weight();
        self.entries.remove(&place);
        self.bytes -= len;
        false
    }

    /// Queue `place`'s entry.
    pub(super) fn get(&self, place: u32) -> Option<&Entry> {
        self.entries.get(&place)
    }

    /// Drops the first `used` records of queue `place`'s entry, the entry with its last.
    pub(super) fn advance(&mut self, place: u32, used: u32) {
        let Some(e) = self.entries.get_mut(&place) else {
            return;
        };
        if used < e.count && e.advance(used) {
            e.touched = self.clock;
            return;
        }
        let len = e.weight();
        self.entries.remove(&place);
        self.bytes -= len;
    }

    /// Keeps `records` (plain layout, `count` of them) for queue `place`, if there is room
    /// (see [`Ahead::room`]).
    pub(super) fn keep(
        &mut self,
        place: u32,
        (run, offset, size, frame_count, start): (u64, u64, u64, u32, u16),
        queue: u64,
        records: &[u8],
        count: u32,
    ) {
        if !self.room(records.len() + ENTRY_OVERHEAD) {
            return;
        }
        let e = Entry {
            run,
            offset,
            size,
            frame_count,
            start,
            queue,
            bytes: records.into(),
            pos: 0,
            count,
            touched: self.clock,
        };
        self.bytes += e.weight();
        if let Some(old) = self.entries.insert(place, e) {
            self.bytes -= old.weight();
        }
    }

    /// Drops every entry.
    pub(super) fn clear(&mut self) {
        self.entries = HashMap::default();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` records of `len` bytes each in the plain layout, the seq of record `i` being
    /// `first + i`.
    fn records(first: u64, n: u32, len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            out.extend_from_slice(&((8 + len) as u32).to_le_bytes());
            out.extend_from_slice(&(first + u64::from(i)).to_le_bytes());
            out.extend(std::iter::repeat_n(b'a' + i as u8 % 26, len));
        }
        out
    }

    fn seqs(e: &Entry) -> Vec<u64> {
        e.records()
            .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn an_entry_is_found_only_at_its_place_and_gives_its_records_in_order() {
        let mut a = Ahead::default();
        a.keep(7, (3, 100, 2048, 64, 5), 42, &records(10, 6, 20), 6);
        // Another run, frame, record or queue: not it, and it goes.
        assert!(!a.find(7, (3, 100, 6), 42));
        assert!(a.get(7).is_none());
        assert_eq!(a.bytes, 0);
        a.keep(7, (3, 100, 2048, 64, 5), 42, &records(10, 6, 20), 6);
        assert!(!a.find(7, (3, 100, 5), 43));
        a.keep(7, (3, 100, 2048, 64, 5), 42, &records(10, 6, 20), 6);
        assert!(a.find(7, (3, 100, 5), 42));
        assert_eq!(seqs(a.get(7).unwrap()), vec![10, 11, 12, 13, 14, 15]);
        // Two taken: the entry starts two records on.
        a.advance(7, 2);
        assert!(!a.find(7, (3, 100, 5), 42));
        a.keep(7, (3, 100, 2048, 64, 5), 42, &records(10, 6, 20), 6);
        a.advance(7, 2);
        assert!(a.find(7, (3, 100, 7), 42));
        let e = a.get(7).unwrap();
        assert_eq!((e.count, e.size), (4, 2048));
        assert_eq!(seqs(e), vec![12, 13, 14, 15]);
        // The last taken: it goes, with its bytes.
        a.advance(7, 4);
        assert!(a.get(7).is_none());
        assert_eq!(a.bytes, 0);
        // A place past the frame's 2^16th record (a damaged frame's): the entry goes.
        a.keep(
            7,
            (3, 100, 2048, 70_000, u16::MAX - 1),
            42,
            &records(10, 6, 20),
            6,
        );
        assert!(a.find(7, (3, 100, u16::MAX - 1), 42));
        a.advance(7, 1);
        assert!(a.find(7, (3, 100, u16::MAX), 42));
        a.advance(7, 1);
        assert!(a.get(7).is_none());
        assert_eq!(a.bytes, 0);
    }

    #[test]
    fn entries_take_no_more_than_their_room_and_those_long_untouched_make_way() {
        let one = records(0, 4, 100).len() + ENTRY_OVERHEAD;
        let mut a = Ahead::with_room(10 * one);
        for place in 0..20 {
            a.keep(
                place,
                (1, u64::from(place) * 4096, 4096, 64, 0),
                9,
                &records(0, 4, 100),
                4,
            );
            assert!(a.bytes <= 10 * one);
        }
        assert_eq!(a.entries.len(), 10, "the first ten kept, the rest refused");
        // Places 0 and 1 are looked up again and again; the others not.
        for _ in 0..(STALE_AFTER + SWEEP_EVERY) / 2 {
            assert!(a.find(0, (1, 0, 0), 9));
            assert!(a.find(1, (1, 4096, 0), 9));
            a.advance(0, 0);
            a.advance(1, 0);
        }
        // Room is short: the eight untouched go, and the new entry is kept.
        a.keep(30, (1, 30 * 4096, 4096, 64, 0), 9, &records(0, 4, 100), 4);
        let mut kept: Vec<u32> = a.entries.keys().copied().collect();
        kept.sort();
        assert_eq!(kept, vec![0, 1, 30]);
        assert_eq!(a.bytes, 3 * one);
        a.clear();
        assert_eq!((a.entries.len(), a.bytes), (0, 0));
    }
}
