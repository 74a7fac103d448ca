//! The consumer of F: reads through a [`crate::frontier::Reader`] and commits its position in
//! the cursor file.

use super::Sieve;
use crate::error::Result;
use crate::frontier;
use crate::manifest::Mode;

impl Sieve {
    /// Reads up to `max` URLs of the frontier after the read position, and advances the read
    /// position (not the durable cursor: see [`Sieve::frontier_commit`]). Returns fewer, or
    /// none, when the frontier holds fewer; a flush makes more available.
    pub fn frontier_next(&mut self, max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.frontier_read(max, usize::MAX, |url| {
            out.push(url.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    /// Passes frontier URLs after the read position to `each`, until `max_urls` URLs or
    /// `max_bytes` bytes of URLs were passed (at least one URL, if any is available, even
    /// with a `max_bytes` of 0), and
    /// advances the read position past them. Returns how many were passed. If `each` fails,
    /// the read position stays after the last URL it accepted.
    pub fn frontier_read(
        &mut self,
        max_urls: usize,
        max_bytes: usize,
        each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<usize> {
        self.not_a_frontier()?;
        // A bound of 0 bytes still passes the one URL a call always may.
        self.read_records(max_urls, max_bytes.max(1), each)
    }

    /// [`Sieve::frontier_read`] that passes the URLs as text: chunks of whole lines, each URL
    /// followed by a newline, with the number of URLs in each chunk. The fastest way to print
    /// the frontier: most chunks are frames as they were decoded, not copied URL by URL. If
    /// `each` fails, the read position stays after the last chunk it accepted. A URL that
    /// holds a newline, which pushes refuse but a store written before they did may hold,
    /// would be two lines: a call ends before it, and the next one fails at it with
    /// [`crate::InvalidUrl::Newline`], the position staying there ([`Sieve::frontier_read`]
    /// gives it).
    pub fn frontier_read_lines(
        &mut self,
        max_urls: usize,
        max_bytes: usize,
        each: impl FnMut(&[u8], usize) -> Result<()>,
    ) -> Result<usize> {
        self.not_a_frontier()?;
        self.poll_inflight()?;
        let end = self.manifest.frontier_end();
        self.reader
            .read_lines(&*self.storage, &end, max_urls, max_bytes.max(1), each)
    }

    /// [`Sieve::frontier_read`] of F's records, whatever the mode: for the frontier's mover.
    pub(crate) fn read_records(
        &mut self,
        max_urls: usize,
        max_bytes: usize,
        each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<usize> {
        self.poll_inflight()?;
        let end = self.manifest.frontier_end();
        self.reader
            .read(&*self.storage, &end, max_urls, max_bytes, each)
    }

    /// The read position in F.
    pub(crate) fn read_position(&self) -> frontier::Position {
        self.reader.position()
    }

    /// Moves the read position to `to`, a position of F at or after the cursor (the
    /// frontier's mover keeps its position in its journal, ahead of the cursor file). A
    /// position past F's committed end is refused (what holds it is damaged).
    pub(crate) fn seek_read(
        &mut self,
        to: frontier::Position,
    ) -> std::result::Result<(), crate::Corruption> {
        if let Err(crate::Error::Corrupt { what, .. }) =
            to.check_within(&self.manifest.frontier_end())
        {
            return Err(what);
        }
        self.reader.seek(to);
        Ok(())
    }

    /// Whether the read position is before the cursor (which never passes the frontier
    /// mover's position: a store whose journal says otherwise is damaged).
    pub(crate) fn read_before_cursor(&self) -> bool {
        self.reader.position().consumed < self.cursor.consumed
    }

    /// F's records read so far, and F's records committed (the merges applied so far).
    pub(crate) fn f_read_and_count(&self) -> (u64, u64) {
        (self.reader.position().consumed, self.manifest.f_count)
    }

    /// Applies a flush job that ended, if any (an error it ended with is returned, and
    /// poisons the sieve); waits for none.
    pub(crate) fn poll_flush(&mut self) -> Result<()> {
        self.poll_inflight()
    }

    /// Records in F after the read position.
    pub(crate) fn unread_records(&mut self) -> u64 {
        let _ = self.poll_inflight();
        self.manifest.f_count - self.reader.position().consumed
    }

    /// Makes the read position durable: the URLs read so far will not be returned again,
    /// even after a crash. Frontier segments fully consumed are deleted. The first commit
    /// fixes the store as a plain sieve, whether or not it consumes anything: the store
    /// can no longer be opened as a [`crate::Frontier`] (whose open would take every URL
    /// not consumed into its queues).
    pub fn frontier_commit(&mut self) -> Result<()> {
        self.writable()?;
        self.fix_mode(Mode::Sieve)?;
        let read = self.reader.position();
        if read == self.cursor {
            return Ok(());
        }
        self.commit_read()
    }

    /// Commits the read position in the cursor file, whatever the mode, and removes the F
    /// segments it passed.
    pub(crate) fn commit_read(&mut self) -> Result<()> {
        self.writable()?;
        let read = self.reader.position();
        if read == self.cursor {
            return Ok(());
        }
        let r = read.commit_to(&*self.storage);
        self.poison(r)?;
        let old = self.cursor.segment;
        self.cursor = read;
        if self.cursor.segment != old {
            if let Ok(ids) = frontier::segments(&*self.storage) {
                for id in ids.into_iter().filter(|&id| id < self.cursor.segment) {
                    self.reaper.remove(&crate::names::f(id));
                }
            }
        }
        Ok(())
    }

    /// Fails with [`crate::Error::WrongMode`] when the store is a frontier.
    fn not_a_frontier(&self) -> Result<()> {
        match self.manifest.mode {
            Mode::Frontier => Err(self.wrong_mode()),
            Mode::Unset | Mode::Sieve => Ok(()),
        }
    }

    /// Forgets reads not committed: the read position goes back to the durable cursor.
    pub fn frontier_rewind(&mut self) {
        self.reader.seek(self.cursor);
    }

    /// URLs in the frontier after the read position, not yet read.
    pub fn frontier_unread(&mut self) -> u64 {
        let _ = self.poll_inflight();
        self.manifest.f_count - self.reader.position().consumed
    }
}
