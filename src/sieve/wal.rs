//! A, the write-ahead log of pushed URLs: one file per generation.
//!
//! ```text
//! a-file := magic "CRVA" u32 | version u32 | generation u64 | crc32 u32 | frame*
//! ```
//!
//! A generation holds the records of one buffer of S. Its file is created with a synced
//! header (and a synced directory entry) before any record is written, so a damaged header
//! can only be a crash during creation of the newest generation.

use std::sync::Arc;

use crate::error::{Corruption, Error, Result};
use crate::format::{seal, Cursor, PutLe, MAGIC_A, VERSION};
use crate::log::{FrameError, LogReader, LogWriter, FRAME_HEADER};
use crate::storage::{durable, Storage, StorageFile};

/// Bytes of an A header.
pub const HEADER_LEN: u64 = 20;

/// The file name of generation `gen`.
pub fn file_name(gen: u64) -> String {
    format!("a-{gen:016x}.log")
}

/// Parses an A file name.
pub fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("a-")?.strip_suffix(".log")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

fn header(gen: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN as usize);
    b.put_u32(MAGIC_A);
    b.put_u32(VERSION);
    b.put_u64(gen);
    seal(&mut b);
    b
}

/// Continues writing generation `gen` after its valid prefix `end`, in the epoch after `last_epoch`.
pub fn reuse(file: Arc<dyn StorageFile>, gen: u64, end: u64, last_epoch: i64) -> LogWriter {
    LogWriter::new(file, file_name(gen), end, (last_epoch + 1) as u32)
}

/// Creates generation `gen` with a durable header and directory entry.
pub fn create(storage: &dyn Storage, gen: u64) -> Result<LogWriter> {
    let name = file_name(gen);
    durable::create_synced(storage, &name, &header(gen))
        .map_err(|e| Error::io("create", &name, e))?;
    let file = storage
        .open(&name)
        .map_err(|e| Error::io("open", &name, e))?;
    Ok(LogWriter::new(file, name, HEADER_LEN, 0))
}

/// What replaying a generation found.
pub struct Replay {
    /// The file.
    pub file: Arc<dyn StorageFile>,
    /// Records in the valid prefix.
    pub records: u64,
    /// Whether the file ended in a torn tail (or a torn header).
    pub torn: bool,
    /// Bytes dropped as a torn tail.
    pub torn_bytes: u64,
    /// Records of valid frames dropped with the torn tail.
    pub torn_records: u64,
    /// The highest epoch of a valid frame after the damage (if any).
    pub later_epoch: Option<u32>,
    /// The epoch of the last valid frame of the prefix (-1: none).
    pub last_epoch: i64,
    /// The end of the valid prefix.
    pub valid_end: u64,
}

/// Reads generation `gen`, calling `each(index, url)` for every record of the valid prefix.
///
/// A damaged frame ends the valid prefix. It is a torn tail (dropped and counted) unless a
/// valid frame at least two epochs later follows it, which proves it had been synced: then
/// it is corruption. `last` says whether this is the newest generation (only its header may
/// be torn).
pub fn replay(
    storage: &dyn Storage,
    gen: u64,
    last: bool,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<Replay> {
    let name = file_name(gen);
    let file = storage
        .open(&name)
        .map_err(|e| Error::io("open", &name, e))?;
    let len = file.len().map_err(|e| Error::io("stat", &name, e))?;
    let header_ok = (|| -> Result<()> {
        let mut h = [0u8; HEADER_LEN as usize];
        if len < HEADER_LEN {
            return Err(Error::corrupt(
                &name,
                0,
                Corruption::Truncated {
                    needed: HEADER_LEN,
                    available: len,
                },
            ));
        }
        file.read_exact_at(&mut h, 0)
            .map_err(|e| Error::io("read", &name, e))?;
        let mut c = Cursor::new(&h, &name, 0);
        c.magic(MAGIC_A)?;
        c.version()?;
        let found = c.u64()?;
        c.check_crc()?;
        if found != gen {
            return Err(Error::corrupt(
                &name,
                8,
                Corruption::Field {
                    field: "generation",
                    found,
                },
            ));
        }
        Ok(())
    })();
    if let Err(e) = header_ok {
        // A crash while the newest generation was being created; it holds nothing.
        if last && e.is_corruption() && len <= HEADER_LEN + FRAME_HEADER as u64 {
            return Ok(Replay {
                file,
                records: 0,
                torn: true,
                torn_bytes: len,
                torn_records: 0,
                later_epoch: None,
                last_epoch: -1,
                valid_end: 0,
            });
        }
        return Err(e);
    }
    let reader = LogReader::new(&*file, len, u64::MAX);
    let mut offset = HEADER_LEN;
    let mut records = 0u64;
    let mut last_epoch: i64 = -1;
    let mut spare = Vec::new();
    loop {
        match reader.frame_with(offset, std::mem::take(&mut spare)) {
            Ok(frame) => {
                if (frame.epoch as i64) < last_epoch || frame.epoch as i64 > last_epoch.max(0) + 1 {
                    return Err(Error::corrupt(
                        &name,
                        offset,
                        Corruption::Field {
                            field: "frame epoch",
                            found: frame.epoch as u64,
                        },
                    ));
                }
                last_epoch = frame.epoch as i64;
                for url in frame.records() {
                    each(records, url)?;
                    records += 1;
                }
                offset += (FRAME_HEADER + frame.payload.len()) as u64;
                spare = frame.payload;
            }
            Err(FrameError::End) => {
                return Ok(Replay {
                    file,
                    records,
                    valid_end: offset,
                    torn: false,
                    torn_bytes: 0,
                    torn_records: 0,
                    later_epoch: None,
                    last_epoch,
                })
            }
            Err(FrameError::Io(e)) => return Err(Error::io("read", &name, e)),
            Err(FrameError::Invalid(_)) => {
                // Torn tail or corruption? Look for valid frames after the damage.
                let mut later_epoch = None;
                let mut torn_records = 0u64;
                let mut at = offset;
                while let Some((off, epoch)) = reader
                    .find_valid_after(at)
                    .map_err(|e| Error::io("read", &name, e))?
                {
                    if epoch as i64 >= last_epoch + 2 {
                        return Err(Error::corrupt(
                            &name,
                            offset,
                            Corruption::DamagedBeforeValid { next_valid: off },
                        ));
                    }
                    later_epoch = later_epoch.max(Some(epoch));
                    if let Ok(f) = reader.frame_at(off) {
                        torn_records += f.count as u64;
                    }
                    at = off;
                }
                return Ok(Replay {
                    file,
                    records,
                    torn: true,
                    torn_bytes: len - offset,
                    torn_records,
                    later_epoch,
                    last_epoch,
                    valid_end: offset,
                });
            }
        }
    }
}
