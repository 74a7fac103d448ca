//! Step 1 of opening, when there is no manifest: creating a sieve.

use crate::error::{Corruption, Error, Result};
use crate::frontier::{self, Position};
use crate::manifest::Manifest;
use crate::names::{self, FileName};
use crate::options::Options;
use crate::storage::{durable, Storage, StorageExt};

/// Refuses a directory that holds a file no sieve makes (checked again by [`create`], and
/// first by the open before it makes its lock file there, so that a refused directory is
/// left as it was).
pub(super) fn refuse_foreign(storage: &dyn Storage) -> Result<()> {
    match storage
        .list_files()?
        .into_iter()
        .find(|n| names::parse(n).is_none())
    {
        Some(n) => Err(foreign(storage, &n)),
        None => Ok(()),
    }
}

/// The refusal of a directory that holds `n`, which no sieve makes.
fn foreign(storage: &dyn Storage, n: &str) -> Error {
    let reason = if n == crate::neardup::manifest::NAME {
        format!("the directory is a near-duplicate store (it holds {n:?}), not a sieve")
    } else {
        format!("the directory holds {n:?}, which is not a file of a sieve")
    };
    Error::NotASieve {
        dir: storage.describe(),
        reason,
    }
}

/// Whether files of these names are a store's without its manifest: a store's files other
/// than those an interrupted creation leaves (whose manifest never was) mean it was lost.
pub(crate) fn manifest_lost(names: impl IntoIterator<Item = String>) -> bool {
    names.into_iter().any(|n| {
        names::parse(&n).is_some_and(|kind| {
            !matches!(
                kind,
                FileName::Temp | FileName::Cursor | FileName::Lock | FileName::F(0)
            )
        })
    })
}

/// The error of a directory without a manifest, read by a command that only reads: the
/// manifest's loss when the store's other files are there (as an open that would create the
/// store finds it), else not a store.
pub(crate) fn no_manifest(dir: &std::path::Path, reason: &str) -> Error {
    let names = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if manifest_lost(names) {
        return Error::corrupt(names::MANIFEST, 0, Corruption::Missing);
    }
    Error::NotASieve {
        dir: dir.display().to_string(),
        reason: reason.into(),
    }
}

/// Creates a new sieve: F's first segment and the cursor, then the manifest (the commit).
/// A directory holding other files is refused; one holding what an interrupted creation
/// leaves is created again.
pub(super) fn create(storage: &dyn Storage, opts: &Options) -> Result<Manifest> {
    refuse_foreign(storage)?;
    for n in storage.list_files()? {
        let Some(kind) = names::parse(&n) else {
            // (Refused above; listed again, a file another program made meanwhile.)
            return Err(foreign(storage, &n));
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
