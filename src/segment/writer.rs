//! Writing a Z segment: blocks of Rice-coded gaps, then the footer (the sparse index) and
//! the tail, through one buffer.

use super::rice::{self, BitWriter};
use super::{IndexEntry, Segment, SegmentMeta, BLOCK_SIGS};
use crate::error::{Corruption, Result};
use crate::format::{crc, seal, PutLe, MAGIC_Z, MAGIC_ZEND, VERSION};
use crate::names;
use crate::storage::{File, Storage, StorageExt};

/// Bytes buffered before they are written.
const WRITE_BUFFER: usize = 1 << 20;

/// Writes a segment from signatures given in strictly increasing order.
pub struct SegmentWriter {
    file: File,
    id: u64,
    buf: Vec<u8>,
    written: u64,
    block: Vec<u64>,
    index: Vec<IndexEntry>,
    last: Option<u64>,
    count: u64,
    /// The buffer is written out when it holds this many bytes.
    drain_at: usize,
}

impl SegmentWriter {
    /// Creates the segment file `id` (truncating any leftover with that name), for at most
    /// about `max_sigs` signatures: its sparse index is allocated once for that many (it
    /// grows if more come).
    pub fn create(storage: &dyn Storage, id: u64, max_sigs: u64) -> Result<SegmentWriter> {
        SegmentWriter::create_draining_at(storage, id, max_sigs, WRITE_BUFFER)
    }

    pub(super) fn create_draining_at(
        storage: &dyn Storage,
        id: u64,
        max_sigs: u64,
        drain_at: usize,
    ) -> Result<SegmentWriter> {
        let file = storage.create_file(&names::z(id))?;
        let mut buf = Vec::with_capacity(drain_at + 64 * 1024);
        buf.put_u32(MAGIC_Z);
        buf.put_u32(VERSION);
        buf.put_u64(id);
        seal(&mut buf);
        Ok(SegmentWriter {
            file,
            id,
            buf,
            written: 0,
            block: Vec::with_capacity(BLOCK_SIGS),
            index: Vec::with_capacity(max_sigs.div_ceil(BLOCK_SIGS as u64) as usize),
            last: None,
            count: 0,
            drain_at,
        })
    }

    /// Appends a signature, which must be larger than the previous one.
    pub fn push(&mut self, sig: u64) -> Result<()> {
        if let Some(prev) = self.last {
            if sig <= prev {
                return Err(self.file.corrupt(
                    self.written + self.buf.len() as u64,
                    Corruption::OutOfOrder {
                        previous: prev,
                        got: sig,
                    },
                ));
            }
        }
        self.last = Some(sig);
        self.block.push(sig);
        self.count += 1;
        if self.block.len() == BLOCK_SIGS {
            self.end_block()?;
        }
        Ok(())
    }

    fn end_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let first = self.block[0];
        let last = *self.block.last().expect("not empty");
        let n = self.block.len();
        let k = rice::parameter(
            last - first - (n as u64 - 1),
            (n as u64).saturating_sub(1).max(1),
        );
        let mut w = BitWriter::new();
        for pair in self.block.windows(2) {
            w.write_rice(pair[1] - pair[0] - 1, k);
        }
        let payload = w.into_bytes();
        let offset = self.written + self.buf.len() as u64;
        let start = self.buf.len();
        self.buf.put_u32(n as u32);
        self.buf.put_u32(k);
        self.buf.put_u64(first);
        self.buf.put_u32(payload.len() as u32);
        self.buf.extend_from_slice(&payload);
        let c = crc(&self.buf[start..]);
        self.buf.put_u32(c);
        self.index.push(IndexEntry {
            first,
            offset,
            count: n as u32,
        });
        self.block.clear();
        if self.buf.len() >= self.drain_at {
            self.drain()?;
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<()> {
        self.file.write_all_at(&self.buf, self.written)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the footer and makes the file durable (its directory entry is not synced
    /// here); returns the segment, open, with the index the writer built.
    pub fn finish(mut self) -> Result<Segment> {
        self.end_block()?;
        let footer_offset = self.written + self.buf.len() as u64;
        // The footer goes out through the buffer as the blocks did, so that the buffer never
        // holds the whole index.
        let mut hasher = crc32fast::Hasher::new();
        let mut start = self.buf.len();
        self.buf.put_u64(self.index.len() as u64);
        self.buf.put_u64(self.count);
        let index = std::mem::take(&mut self.index);
        for e in &index {
            self.buf.put_u64(e.first);
            self.buf.put_u64(e.offset);
            self.buf.put_u32(e.count);
            if self.buf.len() >= self.drain_at {
                hasher.update(&self.buf[start..]);
                self.drain()?;
                start = 0;
            }
        }
        hasher.update(&self.buf[start..]);
        self.buf.put_u32(hasher.finalize());
        let tail_start = self.buf.len();
        self.buf.put_u64(footer_offset);
        let c = crc(&self.buf[tail_start..]);
        self.buf.put_u32(c);
        self.buf.put_u32(MAGIC_ZEND);
        self.drain()?;
        self.file.sync()?;
        let meta = SegmentMeta {
            id: self.id,
            sigs: self.count,
            bytes: self.written,
        };
        Ok(Segment {
            file: self.file,
            meta,
            index,
        })
    }
}
