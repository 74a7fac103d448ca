//! A copy-on-write view of a directory: reads see the directory's files, and every change
//! (creations, writes, truncations, renames, removals) stays in memory and is forgotten with
//! the view. `check` opens a frontier on one, so that it replays what an open replays without
//! changing anything.
//!
//! A file's changes are kept as the writes made to it (later ones over earlier ones) and its
//! length; a read takes the directory's bytes below the length the file had when first
//! written or truncated below, zeros past them, then the writes. Recovery writes little, so
//! the list of writes stays short.

use std::any::Any;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// A copy-on-write view of `base`.
pub(crate) struct Overlay {
    base: Arc<dyn Storage>,
    /// Files the view changed: `None` when removed.
    changed: Mutex<HashMap<String, Option<Arc<OverlayFile>>>>,
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a copy-on-write view of {:?}", self.base)
    }
}

impl Overlay {
    /// A view of `base` with no change yet.
    pub(crate) fn new(base: Arc<dyn Storage>) -> Overlay {
        Overlay {
            base,
            changed: Mutex::new(HashMap::new()),
        }
    }

    fn changed(&self) -> MutexGuard<'_, HashMap<String, Option<Arc<OverlayFile>>>> {
        self.changed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The view's file `name`, made a changed file (so that a later open sees the changes).
    fn file(&self, name: &str) -> io::Result<Arc<OverlayFile>> {
        let mut changed = self.changed();
        match changed.get(name) {
            Some(Some(f)) => Ok(f.clone()),
            Some(None) => Err(io::ErrorKind::NotFound.into()),
            None => {
                let base = self.base.open(name)?;
                let len = base.len()?;
                let f = Arc::new(OverlayFile {
                    base: Some(base),
                    state: Mutex::new(State {
                        len,
                        base_len: len,
                        writes: Vec::new(),
                    }),
                });
                changed.insert(name.to_owned(), Some(f.clone()));
                Ok(f)
            }
        }
    }
}

impl Storage for Overlay {
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let f = Arc::new(OverlayFile {
            base: None,
            state: Mutex::new(State::default()),
        });
        self.changed().insert(name.to_owned(), Some(f.clone()));
        Ok(f)
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.file(name)?)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let f = self.file(from)?;
        let mut changed = self.changed();
        changed.insert(from.to_owned(), None);
        changed.insert(to.to_owned(), Some(f));
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        // Without opening it: a file the view removes (a leftover a writer would remove) may
        // be one this user cannot read.
        let mut changed = self.changed();
        let present = match changed.get(name) {
            Some(f) => f.is_some(),
            None => self.base.list()?.iter().any(|n| n == name),
        };
        if !present {
            return Err(io::ErrorKind::NotFound.into());
        }
        changed.insert(name.to_owned(), None);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let changed = self.changed();
        let mut names: Vec<String> = self
            .base
            .list()?
            .into_iter()
            .filter(|n| !changed.contains_key(n))
            .collect();
        names.extend(
            changed
                .iter()
                .filter(|(_, f)| f.is_some())
                .map(|(n, _)| n.clone()),
        );
        names.sort_unstable();
        Ok(names)
    }

    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        // The view's owner holds the directory's lock.
        Ok(Box::new(()))
    }

    fn describe(&self) -> String {
        self.base.describe()
    }
}

#[derive(Default)]
struct State {
    len: u64,
    /// The directory's bytes below this are the file's (but where written over).
    base_len: u64,
    /// Writes, oldest first.
    writes: Vec<(u64, Vec<u8>)>,
}

/// A file of the view.
struct OverlayFile {
    base: Option<Arc<dyn StorageFile>>,
    state: Mutex<State>,
}

impl OverlayFile {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StorageFile for OverlayFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let st = self.state();
        if offset >= st.len {
            return Ok(0);
        }
        let n = (st.len - offset).min(buf.len() as u64) as usize;
        let buf = &mut buf[..n];
        buf.fill(0);
        if let Some(base) = &self.base {
            if offset < st.base_len {
                let from_base = (st.base_len - offset).min(n as u64) as usize;
                base.read_exact_at(&mut buf[..from_base], offset)?;
            }
        }
        for (at, bytes) in &st.writes {
            let end = at + bytes.len() as u64;
            let (lo, hi) = (offset.max(*at), (offset + n as u64).min(end));
            if lo < hi {
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&bytes[(lo - at) as usize..(hi - at) as usize]);
            }
        }
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.state();
        st.writes.push((offset, buf.to_vec()));
        st.len = st.len.max(offset + buf.len() as u64);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.state().len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.state();
        st.len = len;
        st.base_len = st.base_len.min(len);
        for (at, bytes) in &mut st.writes {
            bytes.truncate(len.saturating_sub(*at) as usize);
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    #[test]
    fn a_view_changes_nothing_below_it_and_reads_its_own_changes() {
        let disk = SimDisk::new();
        let f = disk.create("a").unwrap();
        f.write_all_at(b"0123456789", 0).unwrap();
        disk.create("b").unwrap().write_all_at(b"bee", 0).unwrap();
        let base: Arc<dyn Storage> = Arc::new(disk.clone());
        let view = Overlay::new(base);
        let a = view.open("a").unwrap();
        a.write_all_at(b"xy", 8).unwrap();
        a.write_all_at(b"Z", 12).unwrap();
        assert_eq!(a.read_all().unwrap(), b"01234567xy\0\0Z");
        a.set_len(4).unwrap();
        a.set_len(6).unwrap();
        assert_eq!(view.open("a").unwrap().read_all().unwrap(), b"0123\0\0");
        view.rename("b", "c").unwrap();
        view.create("d").unwrap().write_all_at(b"dee", 0).unwrap();
        view.remove("d").unwrap();
        assert_eq!(view.list().unwrap(), ["a", "c"]);
        assert_eq!(view.open("c").unwrap().read_all().unwrap(), b"bee");
        assert!(view.open("b").is_err());
        // Below, nothing changed.
        assert_eq!(disk.content("a").unwrap(), b"0123456789");
        assert_eq!(disk.files(), ["a", "b"]);
    }

    #[test]
    fn a_view_removes_a_file_it_may_not_read_and_only_a_file_that_is_there() {
        let disk = SimDisk::new();
        disk.create("tmp")
            .unwrap()
            .write_all_at(b"left over", 0)
            .unwrap();
        disk.set_unreadable("tmp", true);
        let view = Overlay::new(Arc::new(disk.clone()));
        assert_eq!(
            view.open("tmp").err().map(|e| e.kind()),
            Some(io::ErrorKind::PermissionDenied)
        );
        view.remove("tmp").unwrap();
        assert!(view.list().unwrap().is_empty());
        let again = view.remove("tmp").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            view.remove("never").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(disk.files(), ["tmp"]);
    }
}
