//! What a hand-out gives: the URLs of one call in one buffer ([`LeasedBatch`]), and a
//! hand-out made in parts ([`Handout`]), each part its own durable step, so that a server can
//! send the first URLs while it leases the next ones and never holds them all at once.

use super::{LeaseRequest, Leased};

/// The URLs one hand-out leased, their crawl, key, URL and metadata in one buffer: 24 bytes
/// each beside their bytes, where [`Leased`] values take four allocations each. Made by
/// [`crate::Frontier::lease_batch`] and [`crate::Frontier::lease_part`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeasedBatch {
    /// Each URL's key, URL and metadata, one after the other.
    bytes: Vec<u8>,
    items: Vec<Item>,
    /// The names of the crawls of the batch, in the order first met (a few).
    crawls: Vec<Vec<u8>>,
    /// The token of the first URL: the others follow it one by one.
    first_token: u64,
    deadline_ms: u64,
}

/// Where one URL of a [`LeasedBatch`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    /// The end of its bytes in `bytes` (they start where the previous item's end).
    end: usize,
    key_len: u32,
    url_len: u32,
    /// Its crawl's index in `crawls`.
    crawl: u32,
}

/// One URL of a [`LeasedBatch`], borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasedRef<'a> {
    /// Identifies the lease for [`crate::Frontier::done`] and [`crate::Frontier::retry`].
    pub token: u64,
    /// Its crawl.
    pub crawl: &'a [u8],
    /// Its queue's key.
    pub key: &'a [u8],
    /// The URL.
    pub url: &'a [u8],
    /// Its metadata.
    pub metadata: &'a [u8],
    /// The end of the lease, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
}

impl LeasedRef<'_> {
    /// The same URL as an owned [`Leased`].
    pub fn to_leased(&self) -> Leased {
        Leased {
            token: self.token,
            crawl: self.crawl.to_vec(),
            key: self.key.to_vec(),
            url: self.url.to_vec(),
            metadata: self.metadata.to_vec(),
            deadline_ms: self.deadline_ms,
        }
    }
}

impl LeasedBatch {
    /// An empty batch whose URLs get tokens from `first_token` on, leased until `deadline_ms`,
    /// with room for `capacity` URLs of `bytes` bytes in all (keys and metadata included).
    pub(crate) fn new(
        first_token: u64,
        deadline_ms: u64,
        capacity: usize,
        bytes: usize,
    ) -> LeasedBatch {
        LeasedBatch {
            bytes: Vec::with_capacity(bytes),
            items: Vec::with_capacity(capacity),
            crawls: Vec::new(),
            first_token,
            deadline_ms,
        }
    }

    /// Appends the next URL (its token the next one).
    pub(crate) fn push(&mut self, crawl: &[u8], key: &[u8], url: &[u8], metadata: &[u8]) {
        let c = match self.crawls.iter().position(|c| c == crawl) {
            Some(c) => c,
            None => {
                self.crawls.push(crawl.to_vec());
                self.crawls.len() - 1
            }
        };
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(url);
        self.bytes.extend_from_slice(metadata);
        self.items.push(Item {
            end: self.bytes.len(),
            key_len: u32::try_from(key.len()).expect("a key is shorter than 4 GiB"),
            url_len: u32::try_from(url.len()).expect("a URL is shorter than 4 GiB"),
            crawl: c as u32,
        });
    }

    /// How many URLs it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The `i`-th URL, in the order handed out.
    pub fn get(&self, i: usize) -> Option<LeasedRef<'_>> {
        let item = self.items.get(i)?;
        let start = if i == 0 { 0 } else { self.items[i - 1].end };
        let bytes = &self.bytes[start..item.end];
        let (key, rest) = bytes.split_at(item.key_len as usize);
        let (url, metadata) = rest.split_at(item.url_len as usize);
        Some(LeasedRef {
            token: self.first_token + i as u64,
            crawl: &self.crawls[item.crawl as usize],
            key,
            url,
            metadata,
            deadline_ms: self.deadline_ms,
        })
    }

    /// Its URLs, in the order handed out.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = LeasedRef<'_>> + '_ {
        (0..self.items.len()).map(|i| self.get(i).expect("in range"))
    }

    /// Its URLs as owned [`Leased`] values.
    pub fn to_leased(&self) -> Vec<Leased> {
        self.iter().map(|l| l.to_leased()).collect()
    }

    /// The bytes it holds on the heap, about.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.items.capacity() * std::mem::size_of::<Item>()
            + self.crawls.iter().map(|c| c.capacity() + 24).sum::<usize>()
    }
}

/// A hand-out made in parts ([`crate::Frontier::lease_part`]): the URLs one
/// [`crate::Frontier::lease_with`] of the same request would give, in parts of a few queues
/// each, every part leased durably on its own. A queue served by one part is not served by a
/// later one (so that each queue gives at most `per_queue` URLs over the parts, as in one
/// call); a queue that becomes due between parts may be served by a later part, and a
/// hand-out serves at most as many queues as there were after its first part, so that new
/// ones cannot keep it going. Other calls may run between two parts.
#[derive(Debug, Clone)]
pub struct Handout {
    pub(super) req: LeaseRequest,
    /// The queues the request asked for (its `max_queues` before the first part bounds it
    /// by the queues there are).
    pub(super) asked: usize,
    /// The queues served so far, and those held out of the heap meanwhile.
    pub(super) part: super::core::Parts,
    /// URLs handed out so far.
    pub(super) urls: usize,
    pub(super) started: bool,
    pub(super) finished: bool,
    /// Where its first part stands with the flush an empty front asks for.
    pub(super) flush: super::core::FrontFlush,
}

impl Handout {
    /// A hand-out of what `req` asks, in parts.
    pub fn new(req: LeaseRequest) -> Handout {
        Handout {
            asked: req.max_queues,
            req,
            part: Default::default(),
            urls: 0,
            started: false,
            finished: false,
            flush: Default::default(),
        }
    }

    /// Whether its parts gave all they may: its bounds are reached, or the last part found
    /// no more queues due. A part asked after this gives nothing.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Queues served so far.
    pub fn queues(&self) -> usize {
        self.part.served.len()
    }

    /// URLs handed out so far.
    pub fn urls(&self) -> usize {
        self.urls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_gives_back_what_was_pushed_with_consecutive_tokens() {
        let mut b = LeasedBatch::new(7, 1_000, 0, 0);
        assert!(b.is_empty());
        b.push(b"DEFAULT", b"a.example", b"http://a.example/x", b"");
        b.push(b"news", b"k", b"http://b.example/", b"m=1");
        b.push(b"DEFAULT", b"c.example", b"http://c.example/", b"\0\xff");
        assert_eq!(b.len(), 3);
        let all: Vec<Leased> = b.to_leased();
        assert_eq!(all[0].token, 7);
        assert_eq!(all[2].token, 9);
        assert_eq!(all[0].key, b"a.example");
        assert_eq!(all[0].url, b"http://a.example/x");
        assert!(all[0].metadata.is_empty());
        assert_eq!(all[1].crawl, b"news");
        assert_eq!(all[1].metadata, b"m=1");
        assert_eq!(all[2].crawl, b"DEFAULT");
        assert_eq!(all[2].metadata, b"\0\xff");
        assert!(all.iter().all(|l| l.deadline_ms == 1_000));
        assert!(b.get(3).is_none());
        assert_eq!(b.crawls.len(), 2);
    }
}
