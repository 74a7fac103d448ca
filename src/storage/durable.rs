//! The durability rules, in one place (the habit of lsm-tree's `file.rs`).
//!
//! * data is durable only after the file's `fsync` returned Ok;
//! * a new or renamed name is durable only after the directory's `fsync`;
//! * an atomic replace is: write `X.tmp`, fsync it, rename it over `X`, fsync the directory;
//! * an fsync that failed is never retried: the caller poisons the store.

use super::file::StorageExt;
use super::Storage;
use crate::error::{Error, Result};
use crate::names;

/// Replaces `name` atomically with `bytes`: temp file, fsync, rename, fsync directory.
/// When this returns Ok the new content is durable under `name`.
pub(crate) fn replace(storage: &dyn Storage, name: &str, bytes: &[u8]) -> Result<()> {
    replace_with(storage, name, |f| f.write_all_at(bytes, 0))
}

/// Replaces `name` atomically as [`replace`] does, with the bytes `write` writes into the
/// temporary file (from offset 0); returns what `write` returned.
pub(crate) fn replace_with<T>(
    storage: &dyn Storage,
    name: &str,
    write: impl FnOnce(&super::file::File) -> Result<T>,
) -> Result<T> {
    let tmp = names::tmp(name);
    let f = storage.create_file(&tmp)?;
    let out = write(&f)?;
    switch_in(storage, f, name)?;
    Ok(out)
}

/// The second half of [`replace_with`]: `f`, the temporary file of `name` (`names::tmp`)
/// holding the new bytes, is synced, then renamed to `name`, then the directory synced. Until
/// the rename is durable `name` holds its old bytes.
pub(crate) fn switch_in(storage: &dyn Storage, f: super::file::File, name: &str) -> Result<()> {
    f.sync()?;
    drop(f);
    rename(storage, &names::tmp(name), name)?;
    storage.sync_directory()
}

/// Creates `name` holding `bytes`, durable (file fsync then directory fsync).
pub(crate) fn create_synced(storage: &dyn Storage, name: &str, bytes: &[u8]) -> Result<()> {
    let f = storage.create_file(name)?;
    f.write_all_at(bytes, 0)?;
    f.sync()?;
    storage.sync_directory()
}

/// Gives the existing file `old` to `name`, with `bytes` written over its start, durably:
/// write, fsync, rename, fsync directory. Until the rename is durable the bytes are under
/// `old`; the rest of the file keeps its earlier contents. A file is reused this way to keep
/// its cached pages and its blocks instead of getting new ones.
pub(crate) fn reuse_synced(
    storage: &dyn Storage,
    old: &str,
    name: &str,
    bytes: &[u8],
) -> Result<()> {
    let f = storage.open_file(old)?;
    f.write_all_at(bytes, 0)?;
    f.sync()?;
    drop(f);
    rename(storage, old, name)?;
    storage.sync_directory()
}

/// Renames `from` to `to` (not durable until the directory is synced).
pub(crate) fn rename(storage: &dyn Storage, from: &str, to: &str) -> Result<()> {
    storage
        .rename(from, to)
        .map_err(|e| Error::io("rename", from, e))
}
