//! The durability rules, in one place (the habit of lsm-tree's `file.rs`).
//!
//! * data is durable only after the file's `fsync` returned Ok;
//! * a new or renamed name is durable only after the directory's `fsync`;
//! * an atomic replace is: write `X.tmp`, fsync it, rename it over `X`, fsync the directory;
//! * an fsync that failed is never retried: the caller poisons the sieve.

use std::io;

use super::Storage;

/// Replaces `name` atomically with `bytes`: temp file, fsync, rename, fsync directory.
/// When this returns Ok the new content is durable under `name`.
pub fn replace(storage: &dyn Storage, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = format!("{name}.tmp");
    let f = storage.create(&tmp)?;
    f.write_all_at(bytes, 0)?;
    f.sync()?;
    drop(f);
    storage.rename(&tmp, name)?;
    storage.sync_dir()
}

/// Creates `name` holding `bytes`, durable (file fsync then directory fsync).
pub fn create_synced(storage: &dyn Storage, name: &str, bytes: &[u8]) -> io::Result<()> {
    let f = storage.create(name)?;
    f.write_all_at(bytes, 0)?;
    f.sync()?;
    storage.sync_dir()
}

/// Gives the existing file `old` to `name`, with `bytes` written over its start, durably:
/// write, fsync, rename, fsync directory. Until the rename is durable the bytes are under
/// `old`; the rest of the file keeps its earlier contents. A file is reused this way to keep
/// its cached pages and its blocks instead of getting new ones.
pub fn reuse_synced(storage: &dyn Storage, old: &str, name: &str, bytes: &[u8]) -> io::Result<()> {
    let f = storage.open(old)?;
    f.write_all_at(bytes, 0)?;
    f.sync()?;
    drop(f);
    storage.rename(old, name)?;
    storage.sync_dir()
}
