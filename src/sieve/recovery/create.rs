//! Step 1 of opening, when there is no manifest: creating a sieve.

use crate::error::{Corruption, Error, Result};
use crate::frontier::{self, Position};
use crate::manifest::Manifest;
use crate::names::{self, FileName};
use crate::options::Options;
use crate::storage::{durable, Storage, StorageExt};

/// Creates a new sieve: F's first segment and the cursor, then the manifest (the commit).
/// A directory holding other files is refused; one holding what an interrupted creation
/// leaves is created again.
pub(super) fn create(storage: &dyn Storage, opts: &Options) -> Result<Manifest> {
    for n in storage.list_files()? {
        let Some(kind) = names::parse(&n) else {
            let reason = if n == crate::neardup::manifest::NAME {
                format!("the directory is a near-duplicate store (it holds {n:?}), not a sieve")
            } else {
                format!("the directory holds {n:?}, which is not a file of a sieve")
            };
            return Err(Error::NotASieve {
                dir: storage.describe(),
                reason,
            });
        };
        let interrupted_creation = matches!(
            kind,
            FileName::Temp | FileName::Cursor | FileName::Lock | FileName::F(0)
        );
        if !interrupted_creation {
            return Err(Error::corrupt(names::MANIFEST, 0, Corruption::Missing));
        }
    }
    durable::create_synced(storage, &names::f(0), &frontier::header(0, 0))?;
    Position::start().commit_to(storage)?;
    let m = Manifest {
        seed: opts.seed.unwrap_or_else(crate::signature::random_seed),
        commit: 0,
        next_id: 1,
        a_gen: 0,
        a_skip: 0,
        f_tail: 0,
        f_tail_len: frontier::HEADER_LEN,
        f_count: 0,
        pushed: 0,
        flushes: 0,
        torn_records: 0,
        torn_bytes: 0,
        merges: 0,
        mode: crate::manifest::Mode::Unset,
        clean_a: Default::default(),
        clean_j: Default::default(),
        compress_queues: false,
        segments: Vec::new(),
        runs: Vec::new(),
    };
    m.commit_to(storage)?;
    Ok(m)
}
