//! A flush of `uniq`: the batch spilled as a run, or merged with Z and the runs, the new
//! lines then printed by reading their stretches of input again.

use std::io::{BufWriter, Write};
use std::sync::Arc;

use super::error::{Error, Result};
use super::input::{Piece, Source};
use crate::buffer::Slot;
use crate::merge::{check_term, merge_signatures, Positions};
use crate::run::{Run, RunMeta};
use crate::segment::Segment;
use crate::signature::signature;
use crate::storage::Storage;

/// Bytes read at a time when lines are read again to be printed.
const REREAD_BUFFER: usize = 1 << 20;

/// A run on disk with the stretches of input its indexes refer to.
pub(super) struct UniqRun {
    pub(super) run: Arc<Run>,
    pub(super) pieces: Arc<Vec<Piece>>,
}

/// A flush to run: spill `slots` as a run, or merge it with Z and the runs.
pub(super) struct Job {
    pub(super) storage: Arc<dyn Storage>,
    pub(super) seed: u64,
    pub(super) next_id: u64,
    pub(super) segments: Vec<Arc<Segment>>,
    pub(super) runs: Vec<UniqRun>,
    pub(super) slots: Vec<Slot>,
    pub(super) pieces: Vec<Piece>,
    pub(super) merge: bool,
    pub(super) max_line: usize,
    pub(super) out: BufWriter<Box<dyn Write + Send>>,
}

/// What a flush left.
pub(super) struct Done {
    pub(super) next_id: u64,
    pub(super) segments: Vec<Arc<Segment>>,
    pub(super) runs: Vec<UniqRun>,
    pub(super) out: BufWriter<Box<dyn Write + Send>>,
    pub(super) printed: u64,
    /// The batch's buffer, emptied, for the next batch.
    pub(super) spare: Vec<Slot>,
}

impl Job {
    pub(super) fn run(self) -> Result<Done> {
        let Job {
            storage,
            seed,
            mut next_id,
            segments,
            mut runs,
            mut slots,
            pieces,
            merge,
            max_line,
            mut out,
        } = self;
        let storage = &*storage;
        let records = slots.len() as u64;
        crate::buffer::sort_slots(&mut slots);
        if !merge {
            let meta = RunMeta {
                id: next_id,
                gen: 0,
                skip: 0,
                records,
                pairs: slots.len() as u64,
            };
            next_id += 1;
            crate::run::write(storage, meta, &slots)?;
            slots.clear();
            runs.push(UniqRun {
                run: Arc::new(Run::open(storage, meta)?),
                pieces: Arc::new(pieces),
            });
            return Ok(Done {
                next_id,
                segments,
                runs,
                out,
                printed: 0,
                spare: slots,
            });
        }
        let run_files: Vec<Arc<Run>> = runs.iter().map(|r| r.run.clone()).collect();
        let mut merged = merge_signatures(
            storage,
            &mut next_id,
            &segments,
            &run_files,
            &slots,
            crate::merge::REGIONS_IN_MEMORY,
        )?;
        slots.clear();
        let mut printed = 0;
        let mut chunk = Vec::new();
        for (i, r) in merged.regions.iter_mut().enumerate() {
            if r.count == 0 {
                continue;
            }
            let (name, pieces) = match runs.get(i) {
                Some(run) => (run.run.name(), &run.pieces[..]),
                None => ("batch", &pieces[..]),
            };
            let new = Positions::read(r, name)?;
            let sum = print(pieces, new.iter(), seed, max_line, &mut out, &mut chunk)?;
            if sum != r.sum {
                // Lines printed are not the lines read, somewhere in this source.
                return Err(changed(pieces));
            }
            printed += r.count;
        }
        out.flush().map_err(Error::Output)?;
        // The merged runs, superseded segments and scratch file go.
        for r in &run_files {
            let _ = storage.remove(r.name());
        }
        for s in &segments {
            let _ = storage.remove(s.name());
        }
        if merged.scratch {
            let _ = storage.remove(crate::names::SCRATCH);
        }
        Ok(Done {
            next_id,
            segments: merged.segment.into_iter().collect(),
            runs: Vec::new(),
            out,
            printed,
            spare: slots,
        })
    }
}

/// The error for a batch whose lines changed, somewhere: names its input if it has one, else
/// the first of its inputs whose metadata shows a change, else all of them.
pub(super) fn changed(pieces: &[Piece]) -> Error {
    let mut sources: Vec<&Source> = Vec::new();
    for p in pieces {
        if !sources.iter().any(|s| std::ptr::eq(*s, &*p.source)) {
            sources.push(&p.source);
        }
    }
    match sources[..] {
        [] => Error::InputChanged {
            file: "input".into(),
        },
        [one] => one.changed(),
        _ => match sources.iter().find(|s| s.differs()) {
            Some(s) => s.changed(),
            None => Error::InputChanged {
                file: sources
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" or "),
            },
        },
    }
}

/// Prints the lines at the increasing `positions` (line indexes in the batch) of the
/// batch's `pieces`; returns the wrapping sum of their check terms (signature and index). No
/// line is longer than `max_line` unless the input changed. (Over 80 lines: one loop over a
/// sliding window of input, whose every exit is a check that the input did not change.)
fn print(
    pieces: &[Piece],
    positions: impl Iterator<Item = u64>,
    seed: u64,
    max_line: usize,
    out: &mut impl Write,
    chunk: &mut Vec<u8>,
) -> Result<u64> {
    let mut next = positions.peekable();
    let mut sum = 0u64;
    // The batch index of the piece's first line.
    let mut first = 0u64;
    for piece in pieces {
        let Some(&want) = next.peek() else { break };
        if want >= first + piece.lines {
            first += piece.lines;
            continue;
        }
        let source = &*piece.source;
        let file = source.reopen()?;
        // chunk[..filled] holds input bytes from `offset`; lines start at `pos`.
        let (mut offset, mut pos, mut filled) = (piece.start, 0usize, 0usize);
        let mut idx = first;
        let end_idx = first + piece.lines;
        while next.peek().is_some_and(|&p| p < end_idx) {
            match memchr::memchr(b'\n', &chunk[pos..filled]) {
                Some(i) => {
                    if next.peek() == Some(&idx) {
                        let line = &chunk[pos..pos + i];
                        sum = sum.wrapping_add(check_term(signature(line, seed), idx));
                        write_line(out, line)?;
                        next.next();
                    }
                    idx += 1;
                    pos += i + 1;
                }
                None => {
                    let at = offset + filled as u64;
                    if at >= piece.end {
                        // The input's last line, without "\n".
                        if idx + 1 != end_idx || pos == filled {
                            return Err(source.changed());
                        }
                        if next.peek() == Some(&idx) {
                            let line = &chunk[pos..filled];
                            sum = sum.wrapping_add(check_term(signature(line, seed), idx));
                            write_line(out, line)?;
                            next.next();
                        }
                        idx += 1;
                        pos = filled;
                        continue;
                    }
                    if filled - pos > max_line {
                        return Err(source.changed());
                    }
                    chunk.copy_within(pos..filled, 0);
                    offset += pos as u64;
                    filled -= pos;
                    pos = 0;
                    let room = REREAD_BUFFER.max(2 * filled);
                    if chunk.len() < room {
                        chunk.resize(room, 0);
                    }
                    let want_bytes = (chunk.len() - filled).min((piece.end - at) as usize);
                    let n = file
                        .read_at(&mut chunk[filled..filled + want_bytes], at)
                        .map_err(|e| Error::input("read", &source.name, e))?;
                    if n == 0 {
                        return Err(source.changed());
                    }
                    filled += n;
                }
            }
        }
        first = end_idx;
    }
    if next.peek().is_some() {
        return Err(changed(pieces));
    }
    Ok(sum)
}

fn write_line(out: &mut impl Write, line: &[u8]) -> Result<()> {
    out.write_all(line)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(Error::Output)
}
