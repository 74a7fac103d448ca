//! A view of a directory that shows only the files whose names start with a prefix, under
//! their names without it: a store kept inside another store's directory (the sieve of
//! document ids inside a near-duplicate store) with its own file names.

use std::any::Any;
use std::io;
use std::sync::Arc;

use super::{Storage, StorageFile};

/// The files of `inner` named `prefix` + a name.
#[derive(Debug)]
pub(crate) struct Prefixed {
    inner: Arc<dyn Storage>,
    prefix: String,
}

impl Prefixed {
    /// The view of `inner`'s files that start with `prefix`.
    pub(crate) fn new(inner: Arc<dyn Storage>, prefix: &str) -> Prefixed {
        Prefixed {
            inner,
            prefix: prefix.to_owned(),
        }
    }

    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

impl Storage for Prefixed {
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.inner.create(&self.full(name))
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.inner.open(&self.full(name))
    }
    fn open_immutable(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        self.inner.open_immutable(&self.full(name))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(&self.full(from), &self.full(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(&self.full(name))
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self
            .inner
            .list()?
            .into_iter()
            .filter_map(|n| n.strip_prefix(&self.prefix).map(str::to_owned))
            .collect())
    }
    /// The outer store holds the directory's lock for as long as this view is used.
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        Ok(Box::new(()))
    }
    fn describe(&self) -> String {
        format!("{} ({}*)", self.inner.describe(), self.prefix)
    }
}
