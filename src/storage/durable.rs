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
