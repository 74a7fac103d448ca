//! The durable hand-off log of one peer: the items this node accepted for keys that peer
//! owns, while the peer could not be reached. An item is acknowledged once it is in the log
//! and the log is synced; the log is delivered to the peer in order when it is back, and a
//! delivered record is never sent again unless this node crashes between the peer's
//! acknowledgement and the durable record of it (then the record is sent once more, and the
//! peer recognises its known items by their numbers; see docs/design.md, "The cluster").
//! [`next_epoch`] gives each start of the node the epoch its items are numbered under
//! (`DIR/handoff/epoch`, with the store's identity).
//!
//! Files, in `DIR/handoff/` (DIR is the frontier's directory):
//!
//! - `NAME.log`, records appended one after the other, each
//!   `magic "CHO1" | len u32 LE | seq u64 LE | crc32 u32 LE | payload (len bytes)`,
//!   the crc over the magic, `len`, `seq` and the payload. The payload is the items, each a
//!   length-delimited url-frontier `URLItem`. Sequence numbers grow by one per record.
//! - `NAME.sent`, the sequence number of the last record the peer acknowledged:
//!   `seq u64 LE | crc32 u32 LE`, replaced whole (a temporary file, fsync, rename, fsync of
//!   the directory). Missing: none.
//!
//! Opening scans the log: records up to the one `NAME.sent` names were delivered; a record
//! that is incomplete or fails its crc at the end of the file is a torn tail (never
//! acknowledged: its append did not finish its sync) and is cut off; one with records after
//! it is damage, and the node refuses to start naming the file and the offset. Once every
//! record was delivered the log is truncated to nothing (`NAME.sent` keeps the sequence).

use std::io;
use std::path::Path;
use std::sync::Arc;

use crivello::storage::{DirStorage, Storage, StorageFile};
use prost::Message as _;

use super::pb;

/// A record's first four bytes.
const MAGIC: &[u8; 4] = b"CHO1";

/// A record's header: magic, length, sequence number, crc.
const HEADER: usize = 20;

/// The largest payload of one record.
const MAX_PAYLOAD: usize = 64 << 20;

/// The hand-off log of one peer.
pub struct HandOff {
    storage: Arc<dyn Storage>,
    name: String,
    file: Arc<dyn StorageFile>,
    /// Where the first record not yet delivered starts.
    next_at: u64,
    /// The end of the log.
    end: u64,
    /// The sequence number of the last record delivered.
    sent: u64,
    /// The sequence number of the last record appended.
    last: u64,
    /// A write or a sync failed: what was written since the last good sync may not be on
    /// disk, and a later sync proves nothing of it. Every later append fails, until the
    /// node restarts and opening scans the log again.
    failed: bool,
}

/// A record read back for delivery.
pub struct Record {
    /// Its sequence number.
    pub seq: u64,
    /// Its items.
    pub items: Vec<pb::UrlItem>,
    /// Where the next record starts.
    next_at: u64,
}

impl HandOff {
    /// Opens (or creates) the log of peer `name` in the directory `dir` (created if
    /// missing), recovering as the module says.
    pub fn open(dir: &Path, name: &str) -> io::Result<HandOff> {
        HandOff::open_in(Arc::new(within_store(dir)?), name)
    }

    /// [`HandOff::open`] in `storage`: every read, write and sync goes through it (so that
    /// the simulated disk can crash it at any step).
    pub fn open_in(storage: Arc<dyn Storage>, name: &str) -> io::Result<HandOff> {
        let log = format!("{name}.log");
        let file = if storage.list()?.contains(&log) {
            storage.open(&log)?
        } else {
            let file = storage.create(&log)?;
            // The file's name is durable before anything in it is acknowledged.
            storage.sync_dir()?;
            file
        };
        let sent = read_sent(storage.as_ref(), name)?;
        let len = file.len()?;
        let mut at = 0u64;
        let mut next_at = None;
        let mut last = sent;
        while at < len {
            match read_record(file.as_ref(), at, len)? {
                Scan::Record { seq, size } => {
                    if seq > sent && next_at.is_none() {
                        next_at = Some(at);
                    }
                    last = last.max(seq);
                    at += size;
                }
                Scan::Bad(why) => {
                    // Torn only if nothing valid follows: a record after it was synced after
                    // it, so it was complete once.
                    if follows_a_record(file.as_ref(), at + 1, len)? {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}/{log}: damaged record at offset {at} ({why}) with records \
                                 after it",
                                storage.describe()
                            ),
                        ));
                    }
                    file.set_len(at)?;
                    file.sync()?;
                    break;
                }
            }
        }
        let end = at;
        let mut h = HandOff {
            storage,
            name: name.to_owned(),
            file,
            next_at: next_at.unwrap_or(end),
            end,
            sent,
            last,
            failed: false,
        };
        if h.next_at == h.end && h.end > 0 {
            h.clear()?;
        }
        Ok(h)
    }

    /// Whether records wait for delivery.
    pub fn pending(&self) -> bool {
        self.next_at < self.end
    }

    /// Records waiting for delivery.
    pub fn waiting(&self) -> u64 {
        self.last - self.sent
    }

    /// The seq of the last record appended, and of the last delivered (both grow across
    /// truncations and restarts: a record appended by now is delivered once the second
    /// reaches the first).
    pub fn marks(&self) -> (u64, u64) {
        (self.last, self.sent)
    }

    /// Appends `items` as one record and syncs the log: once this returns they are durable.
    pub fn append(&mut self, items: &[pb::UrlItem]) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other(
                "an earlier write or sync of this hand-off log failed: restart the node",
            ));
        }
        let r = self.append_synced(items);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn append_synced(&mut self, items: &[pb::UrlItem]) -> io::Result<()> {
        let mut payload = Vec::new();
        for item in items {
            item.encode_length_delimited(&mut payload)
                .map_err(io::Error::other)?;
        }
        if payload.len() > MAX_PAYLOAD {
            // Split: records stay readable with a bounded buffer.
            let half = items.len() / 2;
            if half == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an item larger than a hand-off record",
                ));
            }
            self.append_unsynced(&items[..half])?;
            self.append_unsynced(&items[half..])?;
        } else {
            self.write_record(&payload)?;
        }
        if crivello::planted::active(crivello::planted::Bug::HandoffNoSync) {
            return Ok(());
        }
        self.file.sync()
    }

    fn append_unsynced(&mut self, items: &[pb::UrlItem]) -> io::Result<()> {
        let mut payload = Vec::new();
        for item in items {
            item.encode_length_delimited(&mut payload)
                .map_err(io::Error::other)?;
        }
        if payload.len() > MAX_PAYLOAD && items.len() > 1 {
            let half = items.len() / 2;
            self.append_unsynced(&items[..half])?;
            return self.append_unsynced(&items[half..]);
        }
        self.write_record(&payload)
    }

    fn write_record(&mut self, payload: &[u8]) -> io::Result<()> {
        let seq = self.last + 1;
        let mut rec = Vec::with_capacity(HEADER + payload.len());
        rec.extend_from_slice(MAGIC);
        rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        rec.extend_from_slice(&seq.to_le_bytes());
        rec.extend_from_slice(&crc(&rec[..16], payload).to_le_bytes());
        rec.extend_from_slice(payload);
        if let Err(e) = self.file.write_all_at(&rec, self.end) {
            // Nothing of it counts: cut what was written.
            let _ = self.file.set_len(self.end);
            return Err(e);
        }
        self.end += rec.len() as u64;
        self.last = seq;
        Ok(())
    }

    /// The first record not yet delivered, if any.
    pub fn next(&mut self) -> io::Result<Option<Record>> {
        if !self.pending() {
            return Ok(None);
        }
        let mut header = [0u8; HEADER];
        self.file.read_exact_at(&mut header, self.next_at)?;
        let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
        let seq = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        if len > MAX_PAYLOAD {
            return Err(self.damaged(self.next_at, "a length past the largest record"));
        }
        let mut payload = vec![0u8; len];
        self.file
            .read_exact_at(&mut payload, self.next_at + HEADER as u64)?;
        let want = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
        if crc(&header[..16], &payload) != want {
            return Err(self.damaged(self.next_at, "a checksum mismatch"));
        }
        let mut items = Vec::new();
        let mut buf = &payload[..];
        while !buf.is_empty() {
            items.push(
                pb::UrlItem::decode_length_delimited(&mut buf)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            );
        }
        Ok(Some(Record {
            seq,
            items,
            next_at: self.next_at + (HEADER + len) as u64,
        }))
    }

    fn damaged(&self, at: u64, why: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}/{}.log: the record at offset {at} is damaged ({why})",
                self.storage.describe(),
                self.name
            ),
        )
    }

    /// Records that `record` was delivered: durable once this returns.
    pub fn delivered(&mut self, record: &Record) -> io::Result<()> {
        use crivello::planted::{active, Bug};
        if active(Bug::HandoffSkip) && record.seq < self.last {
            // The planted bug: the next record is noted as delivered too.
            let next = self.next_at_after(record.next_at)?;
            write_sent(self.storage.as_ref(), &self.name, record.seq + 1)?;
            self.sent = record.seq + 1;
            self.next_at = next;
            if !self.pending() {
                self.clear()?;
            }
            return Ok(());
        }
        write_sent(self.storage.as_ref(), &self.name, record.seq)?;
        self.sent = record.seq;
        self.next_at = record.next_at;
        if !self.pending() {
            self.clear()?;
        }
        Ok(())
    }

    /// Where the record after the one at `at` starts (a planted bug's step).
    fn next_at_after(&mut self, at: u64) -> io::Result<u64> {
        let mut header = [0u8; HEADER];
        self.file.read_exact_at(&mut header, at)?;
        let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as u64;
        Ok(at + HEADER as u64 + len)
    }

    /// Truncates a log whose records were all delivered.
    fn clear(&mut self) -> io::Result<()> {
        if let Err(e) = self.file.set_len(0).and_then(|()| self.file.sync()) {
            self.failed = true;
            return Err(e);
        }
        self.end = 0;
        self.next_at = 0;
        Ok(())
    }
}

/// What the scan found at an offset.
enum Scan {
    Record { seq: u64, size: u64 },
    Bad(&'static str),
}

/// Reads the record at `at` of `file`, whose length is `len`.
fn read_record(file: &dyn StorageFile, at: u64, len: u64) -> io::Result<Scan> {
    let left = len - at;
    if left < HEADER as u64 {
        return Ok(Scan::Bad("an incomplete header"));
    }
    let mut header = [0u8; HEADER];
    file.read_exact_at(&mut header, at)?;
    if &header[..4] != MAGIC {
        return Ok(Scan::Bad("no record's magic"));
    }
    let plen = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as u64;
    if plen > MAX_PAYLOAD as u64 || HEADER as u64 + plen > left {
        return Ok(Scan::Bad("a length past the end"));
    }
    let mut payload = vec![0u8; plen as usize];
    file.read_exact_at(&mut payload, at + HEADER as u64)?;
    let want = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
    if crc(&header[..16], &payload) != want {
        return Ok(Scan::Bad("a checksum mismatch"));
    }
    Ok(Scan::Record {
        seq: u64::from_le_bytes(header[8..16].try_into().expect("8 bytes")),
        size: HEADER as u64 + plen,
    })
}

/// Whether a valid record starts anywhere in `from..len` of `file`.
fn follows_a_record(file: &dyn StorageFile, from: u64, len: u64) -> io::Result<bool> {
    let from = from.min(len);
    let mut rest = vec![0u8; (len - from) as usize];
    file.read_exact_at(&mut rest, from)?;
    let mut at = 0;
    while let Some(i) = memchr::memmem::find(&rest[at..], MAGIC) {
        let start = at + i;
        let tail = Bytes(&rest[start..]);
        if let Scan::Record { .. } = read_record(&tail, 0, (rest.len() - start) as u64)? {
            return Ok(true);
        }
        at = start + 1;
    }
    Ok(false)
}

/// Bytes read as a file (the scan for a record after damage reads the rest of the log once).
struct Bytes<'a>(&'a [u8]);

impl StorageFile for Bytes<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let from = (offset as usize).min(self.0.len());
        let n = buf.len().min(self.0.len() - from);
        buf[..n].copy_from_slice(&self.0[from..from + n]);
        Ok(n)
    }
    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::other("read only"))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(io::Error::other("read only"))
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

fn crc(head: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(payload);
    h.finalize()
}

/// The sequence number in `NAME.sent` (0 if missing).
fn read_sent(storage: &dyn Storage, name: &str) -> io::Result<u64> {
    read_counter(storage, &format!("{name}.sent"))
}

/// Replaces `NAME.sent` with `seq`, durably.
fn write_sent(storage: &dyn Storage, name: &str, seq: u64) -> io::Result<()> {
    write_counter(storage, &format!("{name}.sent"), seq)
}

/// The file of the node's epochs: one per start, durable before the start numbers an item.
const EPOCH: &str = "epoch";

/// Gives this start of the node its epoch: one more than the last start's (1 for the
/// first), durable in `DIR/handoff/epoch` when this returns, with the store's identity (a
/// random number drawn at the first start, so that a node of the same name on a new store
/// numbers its items apart): `id u64 LE | epoch u64 LE | crc32 u32 LE` (the crc over the 16
/// bytes before it), replaced whole. Returns (id, epoch).
pub fn next_epoch(dir: &Path) -> io::Result<(u64, u64)> {
    next_epoch_in(&within_store(dir)?)
}

/// The hand-off directory `dir` (`DIR/handoff`) as a storage checked against the store's
/// lock (the one noted by [`serving`], else the one found now): nothing written there
/// after the store was removed, moved away or replaced is acknowledged (and the store is
/// not made again).
fn within_store(dir: &Path) -> io::Result<DirStorage> {
    let store = dir.parent().unwrap_or(Path::new("."));
    match SERVED.get() {
        Some((served, lock)) if served == store => DirStorage::open_within_lock(dir, store, *lock),
        _ => DirStorage::open_within(dir, store),
    }
}

/// The store this process serves, and its lock file's device and inode when it was locked.
static SERVED: std::sync::OnceLock<(std::path::PathBuf, (u64, u64))> = std::sync::OnceLock::new();

/// Notes that this process serves the store in `store`, locked by it now: its hand-off
/// files are checked against this lock file from now on, by [`check_served`] and by every
/// log's storage.
pub fn serving(store: &Path) -> io::Result<()> {
    let lock = crivello::storage::lock_file_id(store)?;
    let _ = SERVED.set((store.to_path_buf(), lock));
    Ok(())
}

/// Fails when the store at `store`'s path is not the one this process noted ([`serving`]):
/// moved away, removed or replaced. (Nothing is checked for a store not noted.) Called
/// before a hand-off file is created, replaced or removed outside a log's storage, and after
/// its sync.
pub fn check_served(store: &Path) -> io::Result<()> {
    let Some((served, lock)) = SERVED.get() else {
        return Ok(());
    };
    if served != store {
        return Ok(());
    }
    match crivello::storage::lock_file_id(store) {
        Ok(now) if now == *lock => Ok(()),
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Err(io::Error::other(format!(
            "the directory {} was moved, removed or replaced by another while in use: \
             nothing more is written there",
            store.display()
        ))),
    }
}

/// [`next_epoch`] in `storage`.
pub fn next_epoch_in(storage: &dyn Storage) -> io::Result<(u64, u64)> {
    let damaged = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}/{EPOCH}: damaged (not 20 bytes with their checksum)",
                storage.describe()
            ),
        )
    };
    let (id, epoch) = if storage.list()?.iter().any(|f| f == EPOCH) {
        let b = storage.open(EPOCH)?.read_all()?;
        if b.len() != 20 || crc32fast::hash(&b[..16]).to_le_bytes() != b[16..20] {
            return Err(damaged());
        }
        let id = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let epoch = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        (id, epoch + 1)
    } else {
        (store_id(storage), 1)
    };
    if epoch >= 1 << 23 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}/{EPOCH}: {epoch} starts, past the 2^23 that items' numbers allow",
                storage.describe()
            ),
        ));
    }
    let mut bytes = id.to_le_bytes().to_vec();
    bytes.extend_from_slice(&epoch.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    replace(storage, EPOCH, &bytes)?;
    Ok((id, epoch))
}

/// A store's identity: a hash of the instant, the process and the directory, which no other
/// store drawing one shares in practice.
fn store_id(storage: &dyn Storage) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos} {} {}", std::process::id(), storage.describe());
    xxhash_rust::xxh3::xxh3_64(seed.as_bytes())
}

/// The counter in file `file` (0 if missing): `value u64 LE | crc32 u32 LE`.
fn read_counter(storage: &dyn Storage, file: &str) -> io::Result<u64> {
    if !storage.list()?.iter().any(|f| f == file) {
        return Ok(0);
    }
    let bytes = storage.open(file)?.read_all()?;
    if bytes.len() != 12 || crc32fast::hash(&bytes[..8]).to_le_bytes() != bytes[8..12] {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}/{file}: damaged (not 12 bytes with their checksum)",
                storage.describe()
            ),
        ));
    }
    Ok(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")))
}

/// Replaces file `file` with the counter `seq`, durably.
fn write_counter(storage: &dyn Storage, file: &str, seq: u64) -> io::Result<()> {
    let mut bytes = seq.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&seq.to_le_bytes()).to_le_bytes());
    replace(storage, file, &bytes)
}

/// Replaces file `file` with `bytes`, durably (a temporary file written and synced, renamed
/// over it, the directory synced).
fn replace(storage: &dyn Storage, file: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = format!("{file}.tmp");
    let f = storage.create(&tmp)?;
    f.write_all_at(bytes, 0)?;
    f.sync()?;
    storage.rename(&tmp, file)?;
    storage.sync_dir()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use crivello::storage::sim::CrashImage;
    use crivello::storage::SimDisk;

    use super::*;

    fn item(url: &str) -> pb::UrlItem {
        pb::UrlItem {
            item: Some(pb::url_item::Item::Discovered(pb::DiscoveredUrlItem {
                info: Some(pb::UrlInfo {
                    url: url.to_owned(),
                    key: String::new(),
                    metadata: Default::default(),
                    crawl_id: "c".to_owned(),
                }),
            })),
            id: String::new(),
            creation_date: 7,
        }
    }

    fn urls(r: &Record) -> Vec<String> {
        r.items
            .iter()
            .map(|i| match &i.item {
                Some(pb::url_item::Item::Discovered(d)) => d.info.as_ref().unwrap().url.clone(),
                _ => panic!("not discovered"),
            })
            .collect()
    }

    /// A directory with a lock file, as a store a node serves: its hand-off logs go in
    /// `handoff/` under it.
    fn locked_store() -> tempfile::TempDir {
        let store = tempfile::tempdir().unwrap();
        fs::write(store.path().join("LOCK"), b"").unwrap();
        store
    }

    /// The store this process serves, noted once (`serving`): a log opened after the store
    /// was replaced by another (its own lock file) is refused, as are the small files
    /// written or removed outside a log, rather than checked against the new lock file.
    /// (The only test of this binary that notes a store: the note is for the process.)
    #[test]
    fn the_lock_noted_at_the_start_is_the_one_checked() {
        let store = locked_store();
        serving(store.path()).unwrap();
        let dir = store.path().join("handoff");
        HandOff::open(&dir, "b")
            .unwrap()
            .append(&[item("http://a/1")])
            .unwrap();
        super::super::cluster::write_durably(&dir.join("members"), "x\n").unwrap();
        let moved = tempfile::tempdir().unwrap();
        fs::rename(store.path(), moved.path().join("away")).unwrap();
        fs::create_dir(store.path()).unwrap();
        fs::write(store.path().join("LOCK"), b"").unwrap();
        let e = HandOff::open(&dir, "c").err().expect("refused");
        assert!(e.to_string().contains("moved, removed or replaced"), "{e}");
        assert!(next_epoch(&dir).is_err());
        let e = super::super::cluster::write_durably(&dir.join("members"), "y\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("moved, removed or replaced"),
            "{e:#}"
        );
        let e = super::super::cluster::remove_handoff_file(&dir.join("members")).unwrap_err();
        assert!(e.to_string().contains("moved, removed or replaced"), "{e}");
        assert!(
            !dir.exists(),
            "handoff/ made again in the store put in its place"
        );
    }

    #[test]
    fn nothing_is_acknowledged_in_a_store_removed_or_replaced_while_served() {
        let store = locked_store();
        let dir = store.path().join("handoff");
        let mut h = HandOff::open(&dir, "b").unwrap();
        h.append(&[item("http://a/1")]).unwrap();
        // Moved away: an append is not acknowledged, and the log stays failed.
        let moved = tempfile::tempdir().unwrap();
        let away = moved.path().join("store");
        fs::rename(store.path(), &away).unwrap();
        let e = h.append(&[item("http://a/2")]).unwrap_err();
        assert!(e.to_string().contains("moved, removed or replaced"), "{e}");
        assert!(h.append(&[item("http://a/3")]).is_err());
        // Not made again where it was, neither by a log nor by an epoch.
        assert!(HandOff::open(&dir, "c").is_err());
        assert!(next_epoch(&dir).is_err());
        assert!(!store.path().exists());
        // Replaced by another store (another lock file): refused too.
        fs::create_dir(store.path()).unwrap();
        fs::write(store.path().join("LOCK"), b"").unwrap();
        let mut h = HandOff::open(&away.join("handoff"), "b").unwrap();
        fs::rename(&away, moved.path().join("elsewhere")).unwrap();
        fs::rename(store.path(), &away).unwrap();
        assert!(h.append(&[item("http://a/4")]).is_err());
        // What was acknowledged is where the store went, first in its log (the appends
        // refused may follow it: written, never acknowledged).
        let mut h = HandOff::open(&moved.path().join("elsewhere").join("handoff"), "b").unwrap();
        assert_eq!(urls(&h.next().unwrap().unwrap()), ["http://a/1"]);
    }

    #[test]
    fn records_come_back_in_order_once_each_across_reopening() {
        let store = locked_store();
        let dir = store.path().join("handoff");
        let mut h = HandOff::open(&dir, "b").unwrap();
        assert!(!h.pending());
        h.append(&[item("http://a/1"), item("http://a/2")]).unwrap();
        h.append(&[item("http://a/3")]).unwrap();
        assert_eq!(h.waiting(), 2);
        drop(h);
        let mut h = HandOff::open(&dir, "b").unwrap();
        let r = h.next().unwrap().unwrap();
        assert_eq!(urls(&r), ["http://a/1", "http://a/2"]);
        h.delivered(&r).unwrap();
        drop(h);
        let mut h = HandOff::open(&dir, "b").unwrap();
        let r = h.next().unwrap().unwrap();
        assert_eq!(urls(&r), ["http://a/3"]);
        h.delivered(&r).unwrap();
        assert!(!h.pending());
        assert_eq!(fs::metadata(dir.join("b.log")).unwrap().len(), 0);
        // Sequence numbers go on after the truncation.
        h.append(&[item("http://a/4")]).unwrap();
        drop(h);
        let mut h = HandOff::open(&dir, "b").unwrap();
        let r = h.next().unwrap().unwrap();
        assert_eq!((r.seq, urls(&r)), (3, vec!["http://a/4".to_owned()]));
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_before_a_record_is_refused() {
        let store = locked_store();
        let dir = store.path().join("handoff");
        let mut h = HandOff::open(&dir, "b").unwrap();
        h.append(&[item("http://a/1")]).unwrap();
        h.append(&[item("http://a/2")]).unwrap();
        drop(h);
        let path = dir.join("b.log");
        let full = fs::read(&path).unwrap();
        let first = full.len() / 2;
        // Every truncation inside the second record: the first one survives alone.
        for cut in first + 1..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            let mut h = HandOff::open(&dir, "b").unwrap();
            assert_eq!(h.waiting(), 1, "cut at {cut}");
            let r = h.next().unwrap().unwrap();
            assert_eq!(urls(&r), ["http://a/1"]);
            assert_eq!(fs::metadata(&path).unwrap().len(), first as u64);
        }
        // A flipped byte in the last record: torn. In the first: damage.
        for at in 0..full.len() {
            let mut bad = full.clone();
            bad[at] ^= 0x20;
            fs::write(&path, &bad).unwrap();
            let opened = HandOff::open(&dir, "b");
            if at < first {
                let e = opened.err().expect("damage refused");
                assert!(e.to_string().contains("offset 0"), "{e}");
            } else {
                assert_eq!(opened.unwrap().waiting(), 1, "flip at {at}");
            }
        }
    }

    #[test]
    fn a_damaged_sent_file_is_refused() {
        let store = locked_store();
        let dir = store.path().join("handoff");
        let mut h = HandOff::open(&dir, "b").unwrap();
        h.append(&[item("http://a/1")]).unwrap();
        let r = h.next().unwrap().unwrap();
        h.delivered(&r).unwrap();
        drop(h);
        let path = dir.join("b.sent");
        let mut bytes = fs::read(&path).unwrap();
        bytes[0] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let e = HandOff::open(&dir, "b").err().unwrap();
        assert!(e.to_string().contains("b.sent"), "{e}");
    }

    /// What one run of [`work`] saw before the crash.
    #[derive(Default)]
    struct Seen {
        /// The records acknowledged: (seq, URL).
        acked: Vec<(u64, String)>,
        /// The seqs handed to the peer, in order (each acknowledged by it: its delivery was
        /// recorded, or under way at the crash).
        with_peer: Vec<u64>,
        /// The last seq whose delivery was recorded.
        noted: u64,
    }

    /// One run of appends and deliveries on `disk`, stopping at the first error (the crash).
    fn work(disk: &Arc<SimDisk>) -> Seen {
        let mut seen = Seen::default();
        let Ok(mut h) = HandOff::open_in(disk.clone(), "b") else {
            return seen;
        };
        let mut n = 0;
        for round in 0..3 {
            for _ in 0..3 {
                n += 1;
                let url = format!("http://a/{n}");
                if h.append(&[item(&url)]).is_err() {
                    return seen;
                }
                seen.acked.push((h.last, url));
            }
            // Deliver two records a round (all of them in the last one, which truncates).
            let k = if round == 2 { usize::MAX } else { 2 };
            for _ in 0..k {
                match h.next() {
                    Ok(Some(r)) => {
                        seen.with_peer.push(r.seq);
                        if h.delivered(&r).is_err() {
                            return seen;
                        }
                        seen.noted = r.seq;
                    }
                    Ok(None) => break,
                    Err(_) => return seen,
                }
            }
        }
        seen
    }

    #[test]
    fn a_crash_at_every_step_loses_no_acknowledged_record_and_sends_none_delivered_again() {
        let steps = {
            let disk = Arc::new(SimDisk::new());
            let seen = work(&disk);
            assert_eq!(seen.acked.len(), 9, "the run without a crash");
            assert_eq!(
                seen.with_peer,
                (1..=9).collect::<Vec<_>>(),
                "each delivered once, in order"
            );
            disk.ops()
        };
        for k in 0..=steps {
            for image in CrashImage::each_kind(k) {
                let disk = Arc::new(SimDisk::new());
                disk.crash_at(k);
                let seen = work(&disk);
                let after = Arc::new(disk.crash_image(image));
                let mut h = HandOff::open_in(after, "b")
                    .unwrap_or_else(|e| panic!("crash at step {k} ({image:?}): {e}"));
                let mut back = Vec::new();
                while let Some(r) = h.next().unwrap() {
                    back.push((r.seq, urls(&r)[0].clone()));
                    h.delivered(&r).unwrap();
                }
                // Every acknowledged record the peer does not have comes back, in order,
                // once; none noted delivered comes back; the one whose delivery was under
                // way at the crash may come back once more.
                let owed: Vec<_> = (seen.acked.iter())
                    .filter(|(s, _)| !seen.with_peer.contains(s))
                    .cloned()
                    .collect();
                let extra: Vec<_> = back.iter().filter(|(s, _)| *s <= seen.noted).collect();
                assert!(
                    extra.is_empty(),
                    "crash at step {k} ({image:?}): sent again {extra:?}"
                );
                assert!(
                    back.windows(2).all(|w| w[0].0 < w[1].0),
                    "crash at step {k} ({image:?}): out of order {back:?}"
                );
                for o in &owed {
                    assert!(
                        back.contains(o),
                        "crash at step {k} ({image:?}): acknowledged {o:?} lost; back {back:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn each_start_gets_an_epoch_above_every_earlier_one_whatever_the_crash() {
        let steps = {
            let disk = SimDisk::new();
            let got: Vec<(u64, u64)> = (0..3).map(|_| next_epoch_in(&disk).unwrap()).collect();
            assert_eq!(
                got.iter().map(|g| g.1).collect::<Vec<_>>(),
                [1, 2, 3],
                "epochs"
            );
            assert!(got.iter().all(|g| g.0 == got[0].0), "one identity");
            assert_ne!(got[0].0, next_epoch_in(&SimDisk::new()).unwrap().0);
            disk.ops()
        };
        for k in 0..=steps {
            for image in CrashImage::each_kind(k) {
                let disk = SimDisk::new();
                disk.crash_at(k);
                let mut given = None;
                for _ in 0..3 {
                    match next_epoch_in(&disk) {
                        Ok(e) => given = Some(e),
                        Err(_) => break,
                    }
                }
                let after = disk.crash_image(image);
                let next = next_epoch_in(&after)
                    .unwrap_or_else(|e| panic!("crash at step {k} ({image:?}): {e}"));
                if let Some((id, epoch)) = given {
                    assert!(
                        next.0 == id && next.1 > epoch,
                        "crash at step {k} ({image:?}): {next:?} after {given:?} was given"
                    );
                }
            }
        }
        // A damaged file is refused, naming it.
        let disk = SimDisk::new();
        next_epoch_in(&disk).unwrap();
        disk.set_content(EPOCH, vec![1, 0, 0]);
        let e = next_epoch_in(&disk).unwrap_err();
        assert!(e.to_string().contains("epoch: damaged"), "{e}");
        disk.set_content(EPOCH, vec![0; 12]);
        assert!(next_epoch_in(&disk).is_err(), "the 12 bytes of a counter");
    }
}
