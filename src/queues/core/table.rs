//! The queues' states, packed: most queues hold URLs and nothing else (no lease, no record
//! out of the runs), and such a queue's state is a few numbers, most of them small or close
//! to those of the queues made with it. They lie coded in blocks of [`BLOCK`] queues, each
//! field a varint or its step from a base the block keeps; the queues a hand-out, a lease or
//! a change is working on are decoded in a table of their own (*hot*), packed again once
//! they are many.
//!
//! A queue's state at 10^6 queues took 88 bytes unpacked; packed it takes about 10 to 20
//! (`docs/design.md`, "Memory"). The hot queues are packed again once they reach [`HOT`] or
//! twice those that could not be packed at the last packing (leased, or holding records
//! out of the runs), whichever is more: a fixed buffer, and a share of what the leases and
//! those records already cost.
//!
//! Each queue's coding stands alone (its length first, its fields against the block's
//! base): reading one passes over the lengths of those before it in its block, and packing
//! one copies the others' bytes as they are.
//!
//! The packing is exact: every field comes back as it went in (a proptest against a vector
//! of the states).

use std::cell::Cell;
use std::collections::HashMap;

use super::index::KeyAt;
use super::{At, CounterHash, Queue};

/// Queues per block.
pub(super) const BLOCK: usize = 64;

/// Every `MARK`-th queue of a block has its coding's offset kept (its block's `marks`), so
/// that a read passes over fewer than `MARK` lengths.
const MARK: usize = 16;

/// The hot queues kept before the packable ones are packed again.
pub(crate) const HOT: usize = 1 << 14;

/// A block: its queues' states, coded one after the other, how many it holds, and what
/// their fields are coded against.
#[derive(Default)]
struct Block {
    bytes: Vec<u8>,
    base: Base,
    /// Where the codings of queues `MARK`, `2 * MARK` and `3 * MARK` start, those of them
    /// it holds (48 codings of at most 127 bytes each lie before the last). They fill the struct's
    /// padding: no byte more a block.
    marks: [u16; BLOCK / MARK - 1],
    n: u8,
}

impl Block {
    /// Notes that the coding of its `k`-th queue starts at `at`, if that queue is marked.
    fn mark(marks: &mut [u16; BLOCK / MARK - 1], k: usize, at: usize) {
        if k.is_multiple_of(MARK) && k > 0 {
            marks[k / MARK - 1] = at as u16;
        }
    }
}

/// Where the last read was: block `block`'s `k`-th queue, coded from byte `at`. Reads of
/// it again, or in the order of the places, go on from there.
#[derive(Clone, Copy)]
struct Cursor {
    block: usize,
    k: usize,
    at: usize,
}

/// Every queue's state, by place.
pub(super) struct Table {
    blocks: Vec<Block>,
    /// Queues decoded to be used or changed: the truth for their places (their block may
    /// hold an older state, or none yet: every place past a block's last is hot).
    hot: HashMap<u32, Queue, CounterHash>,
    /// The hot queues are packed again once they are this many.
    threshold: usize,
    /// The smallest threshold.
    limit: usize,
    len: u32,
    /// Set by [`Table::hold`]: nothing is packed until [`Table::release`].
    held: bool,
    cursor: Cell<Option<Cursor>>,
    /// A block's coding being made again (kept for its room).
    scratch: Vec<u8>,
}

impl Default for Table {
    fn default() -> Table {
        Table::with_limit(HOT)
    }
}

/// A queue's state read from the table: borrowed if hot, else decoded.
pub(super) enum Ref<'a> {
    Hot(&'a Queue),
    Cold(Queue),
}

impl<'a> Ref<'a> {
    /// The state, if hot: a queue with lists or leases is.
    pub(super) fn hot(&self) -> Option<&'a Queue> {
        match self {
            Ref::Hot(q) => Some(q),
            Ref::Cold(_) => None,
        }
    }
}

impl std::ops::Deref for Ref<'_> {
    type Target = Queue;

    fn deref(&self) -> &Queue {
        match self {
            Ref::Hot(q) => q,
            Ref::Cold(q) => q,
        }
    }
}

impl Queue {
    /// Whether its state can be packed: nothing leased, nothing out of the runs.
    fn packable(&self) -> bool {
        self.leased == 0 && self.lists.is_none()
    }

    /// The fields a block holds of it, to compare.
    #[allow(clippy::type_complexity)]
    fn packed(&self) -> (u32, KeyAt, [u64; 6], Option<(usize, u64, u16, u32)>) {
        let n = [
            self.next_seq,
            self.waiting,
            self.completed,
            self.due,
            self.heap_at,
            self.runs,
        ];
        (self.crawl, self.key, n, self.at.map(At::get))
    }

    /// Its packed part (the rest empty): what a block holds of it.
    #[cfg(test)]
    fn packed_copy(&self) -> Queue {
        Queue {
            crawl: self.crawl,
            key: self.key,
            next_seq: self.next_seq,
            waiting: self.waiting,
            lists: None,
            leased: 0,
            fetched: 0,
            completed: self.completed,
            due: self.due,
            heap_at: self.heap_at,
            runs: self.runs,
            at: self.at,
        }
    }
}

impl Table {
    /// An empty table that packs its hot queues once they are `limit` (tests: small).
    pub(super) fn with_limit(limit: usize) -> Table {
        Table {
            blocks: Vec::new(),
            hot: HashMap::default(),
            threshold: limit,
            limit,
            len: 0,
            held: false,
            cursor: Cell::new(None),
            scratch: Vec::new(),
        }
    }

    /// The number of queues.
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it holds no queue.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes room for `more` queues.
    pub(super) fn reserve(&mut self, more: usize) {
        let blocks = (self.len as usize + more).div_ceil(BLOCK);
        self.blocks
            .reserve_exact(blocks.saturating_sub(self.blocks.len()));
    }

    /// Adds queue `q`; returns its place.
    pub(super) fn push(&mut self, q: Queue) -> u32 {
        let i = self.len;
        assert!(i < u32::MAX, "fewer than 2^32 queues");
        let (b, k) = (i as usize / BLOCK, i as usize % BLOCK);
        if k == 0 {
            if let Some(last) = self.blocks.last_mut() {
                last.bytes.shrink_to_fit();
            }
            if self.blocks.len() == self.blocks.capacity() {
                self.blocks.reserve_exact((self.blocks.len() / 4).max(16));
            }
            self.blocks.push(Block::default());
        }
        let block = &mut self.blocks[b];
        if q.packable() && usize::from(block.n) == k {
            if k == 0 {
                block.base = Base::of(&q);
            }
            Block::mark(&mut block.marks, k, block.bytes.len());
            block.base.encode(&q, &mut block.bytes);
            block.n += 1;
        } else {
            // Packed first: the new place is in neither its block nor the hot ones yet.
            self.make_room();
            self.hot.insert(i, q);
        }
        self.len += 1;
        i
    }

    /// Queue `i`'s state.
    pub(super) fn get(&self, i: u32) -> Ref<'_> {
        match self.hot.get(&i) {
            Some(q) => Ref::Hot(q),
            None => Ref::Cold(self.read(i)),
        }
    }

    /// Queue `i`'s state in its block (it must be there).
    fn read(&self, i: u32) -> Queue {
        let (b, at) = self.find(i);
        let block = &self.blocks[b];
        block.base.decode(&block.bytes, &mut { at })
    }

    /// The block of queue `i`, which must be in it, and where its coding starts there.
    fn find(&self, i: u32) -> (usize, usize) {
        let (b, k) = (i as usize / BLOCK, i as usize % BLOCK);
        let block = &self.blocks[b];
        assert!(
            k < usize::from(block.n),
            "queue {i} is neither hot nor packed"
        );
        let mut c = match self.cursor.get() {
            Some(c) if c.block == b && c.k <= k => c,
            _ => Cursor {
                block: b,
                k: 0,
                at: 0,
            },
        };
        let m = k / MARK * MARK;
        if m > c.k {
            c = Cursor {
                block: b,
                k: m,
                at: usize::from(block.marks[m / MARK - 1]),
            };
        }
        while c.k < k {
            c.at += 1 + usize::from(block.bytes[c.at]);
            c.k += 1;
        }
        self.cursor.set(Some(c));
        (b, c.at)
    }

    /// Changes queue `i`'s state by `f`, in its block if it is packed and stays packable
    /// (its coding replaced there), without making it hot; returns what `f` returns.
    pub(super) fn update<R>(&mut self, i: u32, f: impl FnOnce(&mut Queue) -> R) -> R {
        if let Some(q) = self.hot.get_mut(&i) {
            return f(q);
        }
        let (b, start) = self.find(i);
        let block = &mut self.blocks[b];
        let mut end = start;
        let mut q = block.base.decode(&block.bytes, &mut end);
        let before = q.packed();
        let r = f(&mut q);
        if q.packable() {
            if q.packed() != before {
                Self::recode(block, i, start..end, &q);
            }
        } else {
            // Hot from now on (its block holds its packed part until its packing).
            self.make_room();
            self.hot.insert(i, q);
        }
        r
    }

    /// Codes queue `i`'s state `q` again in its block, in place of its coding `was`.
    fn recode(block: &mut Block, i: u32, was: std::ops::Range<usize>, q: &Queue) {
        let mut c = Coding::default();
        block.base.code(q, &mut c);
        if c.bytes() == &block.bytes[was.clone()] {
            return;
        }
        // The queue's coding starts where it did: the cursor stays true, and the marks
        // after it move by the change of its length.
        let change = c.bytes().len().wrapping_sub(was.len());
        let (new, end) = (c.bytes(), block.bytes.len());
        if new.len() > was.len() {
            block.bytes.resize(end + new.len() - was.len(), 0);
        }
        block.bytes.copy_within(was.end..end, was.start + new.len());
        block.bytes[was.start..was.start + new.len()].copy_from_slice(new);
        block.bytes.truncate(end.wrapping_add(change));
        let k = i as usize % BLOCK;
        let n = usize::from(block.n);
        for (j, mark) in block.marks.iter_mut().enumerate() {
            if (j + 1) * MARK > k && (j + 1) * MARK < n {
                *mark = usize::from(*mark).wrapping_add(change) as u16;
            }
        }
    }

    /// Sets queue `i`'s state to `q`, a changed copy of what [`Table::get`] gave: the hot
    /// state replaced if it is hot, else `q` coded in its block if packable, else taken in
    /// hot.
    pub(super) fn put(&mut self, i: u32, q: Queue) {
        if let Some(hot) = self.hot.get_mut(&i) {
            *hot = q;
            return;
        }
        if !q.packable() {
            self.make_room();
            self.hot.insert(i, q);
            return;
        }
        let (b, start) = self.find(i);
        let block = &mut self.blocks[b];
        let end = start + 1 + usize::from(block.bytes[start]);
        Self::recode(block, i, start..end, &q);
    }

    /// Takes queue `i`'s state `q`, as [`Table::get`] read it from its block and changed
    /// since, into the hot queues: [`Table::get_mut`] without decoding it again.
    pub(super) fn heat(&mut self, i: u32, q: Queue) {
        debug_assert!(!self.hot.contains_key(&i), "queue {i} is hot already");
        self.make_room();
        self.hot.insert(i, q);
    }

    /// Queue `i`'s state, to change.
    pub(super) fn get_mut(&mut self, i: u32) -> &mut Queue {
        if !self.hot.contains_key(&i) {
            assert!(i < self.len, "queue {i} of {}", self.len);
            self.make_room();
            let q = self.read(i);
            self.hot.insert(i, q);
        }
        self.hot.get_mut(&i).expect("hot")
    }

    /// The queues' states, in the order of their places.
    pub(super) fn iter(&self) -> Iter<'_> {
        Iter {
            table: self,
            next: 0,
            at: 0,
        }
    }

    /// Calls `f` with each queue's place and state, to change, in the order of their places.
    pub(super) fn for_each_mut(&mut self, mut f: impl FnMut(u32, &mut Queue)) {
        self.cursor.set(None);
        let mut out = std::mem::take(&mut self.scratch);
        for b in 0..self.blocks.len() {
            let first = (b * BLOCK) as u32;
            let end = (first as usize + BLOCK).min(self.len as usize) as u32;
            let block = &mut self.blocks[b];
            let n = usize::from(block.n);
            let mut at = 0;
            out.clear();
            for i in first..end {
                let k = (i - first) as usize;
                if k < n {
                    Block::mark(&mut block.marks, k, out.len());
                }
                if let Some(q) = self.hot.get_mut(&i) {
                    f(i, q);
                    if k < n {
                        // Its block keeps the state it had.
                        let len = 1 + usize::from(block.bytes[at]);
                        out.extend_from_slice(&block.bytes[at..at + len]);
                        at += len;
                    }
                    continue;
                }
                let mut q = block.base.decode(&block.bytes, &mut at);
                f(i, &mut q);
                block.base.encode(&q, &mut out);
                if !q.packable() {
                    // Made hot (its block holds its packed part, replaced at its packing).
                    self.hot.insert(i, q);
                }
            }
            std::mem::swap(&mut block.bytes, &mut out);
            if (end as usize).is_multiple_of(BLOCK) {
                block.bytes.shrink_to_fit();
            }
        }
        self.scratch = out;
        self.make_room();
    }

    /// Packs nothing until [`Table::release`]: the queues a hand-out works on are read and
    /// changed at each of its steps, and stay decoded between them (the hot queues grow by
    /// at most those it serves).
    pub(super) fn hold(&mut self) {
        self.held = true;
    }

    /// Ends [`Table::hold`], and packs if the hot queues are many.
    pub(super) fn release(&mut self) {
        self.held = false;
        self.make_room();
    }

    /// Packs the hot queues that can be, once they are more than the threshold.
    fn make_room(&mut self) {
        if self.held || self.hot.len() < self.threshold {
            return;
        }
        self.pack();
        // Those that cannot be packed are paid for by what holds them there (their leases,
        // their records); the threshold keeps the packing's cost per queue constant.
        self.threshold = self.limit.max(2 * self.hot.len());
    }

    /// Packs every hot queue that can be.
    pub(super) fn pack(&mut self) {
        let mut places: Vec<u32> = (self.hot.iter())
            .filter(|(_, q)| q.packable())
            .map(|(&i, _)| i)
            .collect();
        places.sort_unstable();
        self.cursor.set(None);
        let mut out = std::mem::take(&mut self.scratch);
        let mut k = 0;
        while k < places.len() {
            let b = places[k] as usize / BLOCK;
            let first = (b * BLOCK) as u32;
            let end = (first as usize + BLOCK).min(self.len as usize) as u32;
            let from = k;
            while k < places.len() && places[k] < end {
                k += 1;
            }
            let targets = &places[from..k];
            let block = &mut self.blocks[b];
            let n = usize::from(block.n);
            let count = n.max((targets[targets.len() - 1] - first) as usize + 1);
            // The codings of the places packed are made again; the bytes between them are
            // copied as they are.
            let (mut at, mut copied) = (0, 0);
            let mut t = 0;
            out.clear();
            for j in 0..count {
                // Queue j's coding starts past the bytes still to copy.
                Block::mark(&mut block.marks, j, out.len() + at - copied);
                let i = first + j as u32;
                let len = if j < n {
                    1 + usize::from(block.bytes[at])
                } else {
                    0
                };
                let target = targets.get(t) == Some(&i);
                if target || j >= n {
                    // A place packed, or past the block's last (hot, packable or not).
                    let q = match target {
                        true => {
                            t += 1;
                            self.hot.remove(&i)
                        }
                        false => None,
                    };
                    let q = q.as_ref().or_else(|| self.hot.get(&i));
                    let q = q.unwrap_or_else(|| panic!("queue {i} is neither hot nor packed"));
                    if j == 0 && n == 0 {
                        block.base = Base::of(q);
                    }
                    out.extend_from_slice(&block.bytes[copied..at]);
                    block.base.encode(q, &mut out);
                    copied = at + len;
                }
                at += len;
            }
            out.extend_from_slice(&block.bytes[copied..at]);
            debug_assert_eq!(at, block.bytes.len());
            block.n = count as u8;
            if count == BLOCK {
                // A full block: exactly its room.
                block.bytes.clear();
                block.bytes.reserve_exact(out.len());
                block.bytes.extend_from_slice(&out);
            } else {
                std::mem::swap(&mut block.bytes, &mut out);
            }
        }
        self.scratch = out;
        // After a peak of queues that could not be packed (many leased at once), the map
        // gives back the room the packings to come no longer need: they let it grow to the
        // threshold, set from what stays hot ([`Table::make_room`]).
        let need = self.limit.max(2 * self.hot.len());
        if self.hot.capacity() > 4 * need {
            self.hot.shrink_to(need);
        }
    }

    /// Bytes held: the blocks, their room, and the hot queues (an estimate of the map's).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        let blocks: usize = self.blocks.iter().map(|b| b.bytes.capacity()).sum();
        blocks
            + self.blocks.capacity() * std::mem::size_of::<Block>()
            + self.hot.capacity() * (std::mem::size_of::<(u32, Queue)>() + 1)
    }

    /// The hot queues.
    #[cfg(test)]
    pub(super) fn hot(&self) -> usize {
        self.hot.len()
    }

    /// The hot queues the map has room for.
    #[cfg(test)]
    pub(super) fn hot_room(&self) -> usize {
        self.hot.capacity()
    }
}

/// The queues' states in the order of their places (see [`Table::iter`]).
pub(super) struct Iter<'a> {
    table: &'a Table,
    next: u32,
    /// Where the next queue of its block is coded.
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Ref<'a>;

    fn next(&mut self) -> Option<Ref<'a>> {
        let i = self.next;
        if i >= self.table.len {
            return None;
        }
        self.next += 1;
        let (b, k) = (i as usize / BLOCK, i as usize % BLOCK);
        if k == 0 {
            self.at = 0;
        }
        let block = &self.table.blocks[b];
        let packed = k < usize::from(block.n);
        let at = self.at;
        if packed {
            self.at += 1 + usize::from(block.bytes[at]);
        }
        match self.table.hot.get(&i) {
            Some(h) => Some(Ref::Hot(h)),
            None => {
                assert!(packed, "queue {i} is neither hot nor packed");
                Some(Ref::Cold(block.base.decode(&block.bytes, &mut { at })))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.table.len - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

// The coding of one queue: the number of bytes after this one, a byte of flags, then its
// fields, each a LEB128 varint, some as the zigzag of their step from the block's base:
//   key's offset (step), key's length field, next seq (step), crawl (if flagged), waiting
//   (if), completed (if), due (step, if nonzero), heap instant (as flagged: none, the due,
//   or its step from the due), runs (if nonzero), place (if flagged: slot, frame offset's
//   step, start, left).
const CRAWL: u8 = 1;
const WAITING: u8 = 2;
const COMPLETED: u8 = 4;
const DUE: u8 = 8;
const HEAP_DUE: u8 = 16;
const HEAP_OTHER: u8 = 32;
const RUNS: u8 = 64;
const AT: u8 = 128;

/// What a block's queues are coded against: the fields of its first queue when it was
/// made, which its neighbours' are close to (keys and seqs are given out in order).
#[derive(Debug, Clone, Copy, Default)]
struct Base {
    key: u64,
    next_seq: u64,
    due: u64,
    at_offset: u64,
}

fn zigzag(step: u64) -> u64 {
    let s = step as i64;
    ((s << 1) ^ (s >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    ((z >> 1) as i64 ^ -((z & 1) as i64)) as u64
}

/// A queue's coding, made on the stack.
struct Coding {
    buf: [u8; 128],
    len: usize,
}

impl Default for Coding {
    fn default() -> Coding {
        Coding {
            buf: [0; 128],
            len: 0,
        }
    }
}

impl Coding {
    fn byte(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// Appends `v` as a LEB128 varint.
    fn put(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The varint at `*at` of a block (which this table coded: never damaged), passed over.
fn take(bytes: &[u8], at: &mut usize) -> u64 {
    let b = bytes[*at];
    if b < 0x80 {
        // Most fields are small.
        *at += 1;
        return u64::from(b);
    }
    crate::record::varint_at(bytes, at).expect("a packed queue's varint")
}

impl Base {
    /// The base of a block whose first queue is `q`.
    fn of(q: &Queue) -> Base {
        Base {
            key: q.key.parts().0,
            next_seq: q.next_seq,
            due: q.due,
            at_offset: q.at.map_or(0, |a| a.get().1),
        }
    }

    /// Appends `q`'s coding to `out`.
    fn encode(&self, q: &Queue, out: &mut Vec<u8>) {
        let mut c = Coding::default();
        self.code(q, &mut c);
        out.extend_from_slice(c.bytes());
    }

    /// `q`'s coding, into `c`.
    fn code(&self, q: &Queue, c: &mut Coding) {
        c.len = 1;
        let mut flags = 0;
        if q.crawl != 0 {
            flags |= CRAWL;
        }
        if q.waiting != 0 {
            flags |= WAITING;
        }
        if q.completed != 0 {
            flags |= COMPLETED;
        }
        if q.due != 0 {
            flags |= DUE;
        }
        if q.heap_at == q.due {
            flags |= HEAP_DUE;
        } else if q.heap_at != u64::MAX {
            flags |= HEAP_OTHER;
        }
        if q.runs != 0 {
            flags |= RUNS;
        }
        if q.at.is_some() {
            flags |= AT;
        }
        c.byte(flags);
        let (offset, len) = q.key.parts();
        c.put(zigzag(offset.wrapping_sub(self.key)));
        c.put(len);
        c.put(zigzag(q.next_seq.wrapping_sub(self.next_seq)));
        if flags & CRAWL != 0 {
            c.put(u64::from(q.crawl));
        }
        if flags & WAITING != 0 {
            c.put(q.waiting);
        }
        if flags & COMPLETED != 0 {
            c.put(q.completed);
        }
        if flags & DUE != 0 {
            c.put(zigzag(q.due.wrapping_sub(self.due)));
        }
        if flags & HEAP_OTHER != 0 {
            c.put(zigzag(q.heap_at.wrapping_sub(q.due)));
        }
        if flags & RUNS != 0 {
            c.put(q.runs);
        }
        if let Some(at) = q.at {
            let (slot, offset, start, left) = at.get();
            c.byte(slot as u8);
            c.put(zigzag(offset.wrapping_sub(self.at_offset)));
            c.put(u64::from(start));
            c.put(u64::from(left));
        }
        // At most 124 bytes (twelve varints of up to 10 bytes, the length, the flags and the
        // slot): its length fits in the first byte, and the coding in the buffer.
        c.buf[0] = (c.len - 1) as u8;
    }

    /// Decodes the queue coded at `*at` in `bytes`, and passes over it.
    fn decode(&self, bytes: &[u8], at: &mut usize) -> Queue {
        let flags = bytes[*at + 1];
        *at += 2;
        let offset = self.key.wrapping_add(unzigzag(take(bytes, at)));
        let len = take(bytes, at);
        let next_seq = self.next_seq.wrapping_add(unzigzag(take(bytes, at)));
        let field = |f: u8, at: &mut usize| if flags & f != 0 { take(bytes, at) } else { 0 };
        let crawl = field(CRAWL, at) as u32;
        let waiting = field(WAITING, at);
        let completed = field(COMPLETED, at);
        let due = if flags & DUE != 0 {
            self.due.wrapping_add(unzigzag(take(bytes, at)))
        } else {
            0
        };
        let heap_at = if flags & HEAP_DUE != 0 {
            due
        } else if flags & HEAP_OTHER != 0 {
            due.wrapping_add(unzigzag(take(bytes, at)))
        } else {
            u64::MAX
        };
        let runs = field(RUNS, at);
        let place = if flags & AT != 0 {
            let slot = usize::from(bytes[*at]);
            *at += 1;
            let offset = self.at_offset.wrapping_add(unzigzag(take(bytes, at)));
            let start = take(bytes, at) as u16;
            let left = take(bytes, at) as u32;
            Some(At::new((slot, offset, start, left)))
        } else {
            None
        };
        Queue {
            crawl,
            key: KeyAt::from_parts(offset, len),
            next_seq,
            waiting,
            lists: None,
            leased: 0,
            fetched: 0,
            completed,
            due,
            heap_at,
            runs,
            at: place,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of a state, to compare.
    type Fields = (
        u32,
        (u64, u64),
        u64,
        u64,
        u32,
        u64,
        u64,
        u64,
        u64,
        Option<(usize, u64, u16, u32)>,
        bool,
    );

    fn fields(q: &Queue) -> Fields {
        (
            q.crawl,
            q.key.parts(),
            q.next_seq,
            q.waiting,
            q.leased,
            q.completed,
            q.due,
            q.heap_at,
            q.runs,
            q.at.map(At::get),
            q.lists.is_some(),
        )
    }

    /// A value of a field: small, large, or at an edge.
    fn pick(v: u64) -> u64 {
        match v % 7 {
            0 => 0,
            1 => u64::MAX,
            2 => v >> 3,
            3 => (v >> 3) % 300,
            4 => u64::MAX - (v >> 60),
            _ => v,
        }
    }

    /// Queue state `v` makes (with leases or lists when `hot`).
    fn state(v: u64, hot: bool) -> Queue {
        let at = v.is_multiple_of(3).then(|| {
            At::new((
                (v % 64) as usize,
                pick(v.rotate_left(17)),
                (v >> 9) as u16,
                (v >> 23) as u32,
            ))
        });
        Queue {
            crawl: pick(v.rotate_left(5)) as u32,
            key: KeyAt::from_parts(pick(v.rotate_left(9)) & ((1 << 40) - 1), v % (1 << 24)),
            next_seq: pick(v.rotate_left(13)),
            waiting: pick(v.rotate_left(21)),
            lists: (hot && v.is_multiple_of(2)).then(Box::default),
            leased: if hot && v % 2 == 1 {
                (v >> 40) as u32 | 1
            } else {
                0
            },
            fetched: 0,
            completed: pick(v.rotate_left(29)),
            due: pick(v.rotate_left(37)),
            heap_at: match v % 5 {
                0 => u64::MAX,
                1 => pick(v.rotate_left(37)),
                _ => pick(v.rotate_left(45)),
            },
            runs: pick(v.rotate_left(53)),
            at,
        }
    }

    fn check(t: &Table, model: &[Queue]) {
        assert_eq!(t.len(), model.len());
        for (i, q) in model.iter().enumerate() {
            assert_eq!(fields(&t.get(i as u32)), fields(q), "queue {i}");
        }
        // Backwards: each read from the block's start or from a mark, not from the last.
        for (i, q) in model.iter().enumerate().rev() {
            assert_eq!(fields(&t.get(i as u32)), fields(q), "queue {i}");
        }
        for block in &t.blocks {
            let mut at = 0;
            for k in 0..usize::from(block.n) {
                if k % MARK == 0 && k > 0 {
                    assert_eq!(usize::from(block.marks[k / MARK - 1]), at, "mark of {k}");
                }
                at += 1 + usize::from(block.bytes[at]);
            }
        }
        let all: Vec<Fields> = t.iter().map(|q| fields(&q)).collect();
        let expected: Vec<Fields> = model.iter().map(fields).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn a_state_comes_back_as_it_went_in() {
        let mut t = Table::with_limit(3);
        let mut model = Vec::new();
        let mut v = 0x0123_4567_89ab_cdefu64;
        for n in 0..700u64 {
            v = v.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(n);
            let q = state(v, n % 11 == 0);
            model.push(q.packed_copy());
            model.last_mut().unwrap().leased = q.leased;
            model.last_mut().unwrap().lists = q.lists.as_ref().map(|_| Box::default());
            t.push(q);
        }
        check(&t, &model);
        t.pack();
        check(&t, &model);
        // Packed, a state takes a few bytes; a block's marks take none.
        assert!(t.hot() < 100, "{}", t.hot());
        assert_eq!(std::mem::size_of::<Block>(), 64);
    }

    #[test]
    fn a_queue_of_urls_waiting_takes_a_few_bytes() {
        // Seated already when first coded (the blocks' bases taken from them): keys one
        // after the other, seqs and frame offsets growing, a few URLs each in one run, due
        // at once.
        let mut t = Table::default();
        let (mut key, mut seq, mut offset) = (0u64, 0u64, 0u64);
        let n = 100_000u64;
        for i in 0..n {
            let len = 12 + i % 9;
            let waiting = 1 + i % 13;
            t.push(Queue {
                crawl: 0,
                key: KeyAt::from_parts(key, len),
                next_seq: seq,
                waiting,
                lists: None,
                leased: 0,
                fetched: 0,
                completed: 0,
                due: 0,
                heap_at: 0,
                runs: 1,
                at: Some(At::new((0, offset, (i % 40) as u16, waiting as u32))),
            });
            key += len;
            seq += waiting;
            offset += 2048 * u64::from(i % 40 == 39);
        }
        t.pack();
        let per_queue = t.bytes() as f64 / n as f64;
        assert!(per_queue < 16.0, "{per_queue} bytes a queue");
        let q = t.get(77_777);
        assert_eq!((q.waiting, q.runs, q.heap_at), (1 + 77_777 % 13, 1, 0));
    }

    /// After a peak of queues that cannot be packed (10,000 leased at once), a packing gives
    /// the map's room back once they can be, and every state comes back as it was.
    #[test]
    fn the_hot_map_gives_its_room_back_after_a_peak() {
        let mut t = Table::with_limit(16);
        let mut model = Vec::new();
        for v in 0..20_000u64 {
            let q = state(v * 7 + 1, false);
            model.push(q.packed_copy());
            t.push(q);
        }
        t.pack();
        for i in 0..10_000u32 {
            t.get_mut(i).leased = 1;
        }
        let peak = t.hot_room();
        assert!(peak >= 10_000, "room for {peak}");
        for i in 0..10_000u32 {
            t.get_mut(i).leased = 0;
        }
        t.pack();
        assert_eq!(t.hot(), 0);
        assert!(
            t.hot_room() <= peak / 8,
            "room for {} after {peak}",
            t.hot_room()
        );
        check(&t, &model);
    }

    proptest::proptest! {
        /// Any sequence of new queues, changes (by place and all at once), and packings
        /// leaves what a vector of the states holds, whatever the threshold.
        #[test]
        fn it_holds_what_a_vector_holds(
            limit in 1usize..40,
            ops in proptest::collection::vec((0u8..7, proptest::num::u64::ANY, 0u32..400), 0..600),
        ) {
            let mut t = Table::with_limit(limit);
            let mut model: Vec<Queue> = Vec::new();
            for (op, v, i) in ops {
                match op {
                    0 | 1 => {
                        let q = state(v, op == 1);
                        let mut m = q.packed_copy();
                        m.leased = q.leased;
                        m.lists = q.lists.as_ref().map(|_| Box::default());
                        model.push(m);
                        proptest::prop_assert_eq!(t.push(q), model.len() as u32 - 1);
                    }
                    2 if !model.is_empty() => {
                        let i = i % model.len() as u32;
                        let new = state(v, v % 4 == 0);
                        let q = t.get_mut(i);
                        let m = &mut model[i as usize];
                        // One field at a time, as the frontier changes them.
                        match v % 6 {
                            0 => (q.waiting, m.waiting) = (new.waiting, new.waiting),
                            1 => (q.due, m.due) = (new.due, new.due),
                            2 => (q.at, m.at) = (new.at, new.at),
                            3 => (q.leased, m.leased) = (new.leased, new.leased),
                            4 => {
                                q.lists = new.lists.as_ref().map(|_| Box::default());
                                m.lists = new.lists.as_ref().map(|_| Box::default());
                            }
                            _ => {
                                let lists = q.lists.take();
                                let leased = q.leased;
                                *q = new.packed_copy();
                                *m = new.packed_copy();
                                (q.lists, q.leased) = (lists, leased);
                                (m.lists, m.leased) =
                                    (q.lists.as_ref().map(|_| Box::default()), leased);
                            }
                        }
                    }
                    3 => {
                        t.for_each_mut(|i, q| {
                            let m = &mut model[i as usize];
                            q.runs = q.runs.rotate_left(1) ^ v;
                            m.runs = m.runs.rotate_left(1) ^ v;
                            if (u64::from(i) ^ v) % 97 == 0 {
                                q.leased += 1;
                                m.leased += 1;
                            }
                        });
                    }
                    4 => t.pack(),
                    5 if !model.is_empty() => {
                        // A change in place: packed again where it lies, or made hot.
                        let i = i % model.len() as u32;
                        let m = &mut model[i as usize];
                        let new = state(v, v % 3 == 0);
                        let got = t.update(i, |q| {
                            q.waiting = new.waiting;
                            q.key = new.key;
                            q.leased = new.leased;
                            q.at = new.at;
                            q.next_seq
                        });
                        proptest::prop_assert_eq!(got, m.next_seq);
                        (m.waiting, m.key, m.leased, m.at) = (new.waiting, new.key, new.leased, new.at);
                    }
                    6 if !model.is_empty() => {
                        // Read, changed, and put back (or, if not hot, taken into the hot
                        // queues as read), as a hand-out does with a queue it pops.
                        let i = i % model.len() as u32;
                        let m = &mut model[i as usize];
                        let new = state(v, v % 5 == 0);
                        let (mut q, was_hot) = match t.get(i) {
                            Ref::Hot(q) => (q.packed_copy(), true),
                            Ref::Cold(q) => (q, false),
                        };
                        if was_hot {
                            // A hot state's lists and leases are its own: put keeps them.
                            q.leased = m.leased;
                            q.lists = m.lists.as_ref().map(|_| Box::default());
                        }
                        q.heap_at = new.heap_at;
                        q.waiting = new.waiting;
                        (m.heap_at, m.waiting) = (new.heap_at, new.waiting);
                        match v % 2 == 0 && !was_hot {
                            true => t.heat(i, q),
                            false => t.put(i, q),
                        }
                    }
                    _ => {}
                }
            }
            check(&t, &model);
            t.pack();
            check(&t, &model);
            let unpackable = model.iter().filter(|q| !q.packable()).count();
            proptest::prop_assert_eq!(t.hot(), unpackable);
        }
    }
}
