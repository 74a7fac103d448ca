//! Options of a sieve.

use crate::error::{Error, Result};

/// Default memory budget: 64 MiB.
pub(crate) const DEFAULT_MEMORY: usize = 64 << 20;
/// Default maximum URL length: 64 KiB.
pub(crate) const DEFAULT_MAX_URL_LEN: usize = 64 << 10;
/// The largest maximum URL length accepted: 1 GiB.
pub(crate) const MAX_MAX_URL_LEN: usize = 1 << 30;
/// Bytes of the budget per slot of S: a 12-byte (signature, index) slot in the buffer that
/// fills, and one in the buffer being flushed, which is sorted in place into its pairs.
pub(crate) const BYTES_PER_SLOT: usize = 24;
/// The smallest memory budget accepted: 1 MiB.
pub(crate) const MIN_MEMORY: usize = 1 << 20;

/// When pushes are made durable without an explicit [`crate::Sieve::sync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Only `sync`, `flush` and `close` make pushes durable (group commit by the caller).
    #[default]
    Manual,
    /// Sync after every `n` pushes (`n >= 1`; 1 makes every push durable before it returns).
    EveryPushes(u64),
}

/// How to open or create a sieve.
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) memory: usize,
    pub(crate) slots: Option<usize>,
    pub(crate) max_url_len: usize,
    pub(crate) sync: SyncPolicy,
    pub(crate) seed: Option<u64>,
    pub(crate) background: bool,
    pub(crate) defer_merges: bool,
    pub(crate) frontier_low: Option<u64>,
    pub(crate) recent: Option<usize>,
    pub(crate) frame_bytes: usize,
    pub(crate) queue_runs: usize,
    pub(crate) journal_bytes: u64,
    pub(crate) hot_queues: usize,
    pub(crate) compress_queues: Option<bool>,
    pub(crate) merge_positions: u64,
    pub(crate) existing: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            memory: DEFAULT_MEMORY,
            slots: None,
            max_url_len: DEFAULT_MAX_URL_LEN,
            sync: SyncPolicy::Manual,
            seed: None,
            background: true,
            existing: false,
            defer_merges: false,
            frontier_low: None,
            recent: None,
            frame_bytes: crate::frames::FRAME_TARGET,
            queue_runs: 32,
            journal_bytes: 64 << 20,
            hot_queues: crate::queues::HOT_QUEUES,
            compress_queues: None,
            merge_positions: crate::merge::REGIONS_IN_MEMORY,
        }
    }
}

impl Options {
    /// The default memory budget: 64 MiB.
    pub const DEFAULT_MEMORY: usize = DEFAULT_MEMORY;
    /// The smallest memory budget accepted: 1 MiB.
    pub const MIN_MEMORY: usize = MIN_MEMORY;
    /// The default maximum URL length: 64 KiB.
    pub const DEFAULT_MAX_URL_LEN: usize = DEFAULT_MAX_URL_LEN;
    /// The largest maximum URL length accepted: 1 GiB.
    pub const MAX_MAX_URL_LEN: usize = MAX_MAX_URL_LEN;

    /// Default options: 64 MiB, 64 KiB URLs, manual sync, a random seed, background flushes.
    pub fn new() -> Options {
        Options::default()
    }

    /// The RAM budget in bytes (at least 1 MiB); the number of slots of S derives from it. A
    /// budget is a bound, not an allocation: S's buffers grow as pushes fill them, and hold at
    /// most 2^32 − 1 slots (about 96 GiB), so a larger budget is accepted and not used past
    /// that.
    pub fn memory(mut self, bytes: usize) -> Options {
        self.memory = bytes;
        self
    }

    /// Sets the number of slots of each of the two buffers of S directly, overriding the
    /// memory budget (tests use tiny buffers to force many flushes).
    pub fn slots(mut self, slots: usize) -> Options {
        self.slots = Some(slots);
        self
    }

    /// The longest URL accepted, in bytes (default 64 KiB, at most 1 GiB).
    pub fn max_url_len(mut self, len: usize) -> Options {
        self.max_url_len = len;
        self
    }

    /// When pushes are synced.
    pub fn sync(mut self, policy: SyncPolicy) -> Options {
        self.sync = policy;
        self
    }

    /// The signature seed, used only when the sieve is created (then kept in the manifest).
    pub fn seed(mut self, seed: u64) -> Options {
        self.seed = Some(seed);
        self
    }

    /// Test only: with inline flushes, a merge is not run when its buffer is frozen but when
    /// something waits for it (`sync`, `flush`, `close`, a read, or a full run limit), as if
    /// the flush thread were very slow; buffers that fill meanwhile are spilled by the pushing
    /// thread. Makes that path's I/O deterministic for the crash tests.
    #[doc(hidden)]
    pub fn defer_merges(mut self, on: bool) -> Options {
        self.defer_merges = on;
        self
    }

    /// Test only: a frontier merges its Q runs into one once they are `runs` (default 32, at
    /// least 2, at most 63), so that tests of a few hundred URLs compact.
    #[doc(hidden)]
    pub fn queue_runs(mut self, runs: usize) -> Options {
        self.queue_runs = runs.clamp(2, 63);
        self
    }

    /// Test only: a frontier writes a checkpoint and starts a new generation of its journal
    /// once the generation passes `bytes` (default 64 MiB), each group of the Q runs its
    /// replay would read weighed as 32 bytes.
    #[doc(hidden)]
    pub fn journal_bytes(mut self, bytes: u64) -> Options {
        self.journal_bytes = bytes.max(1);
        self
    }

    /// Test only: a frontier packs its queues' states once more than `n` of them are
    /// unpacked (default 16,384, at least 1), so that tests of a few queues pack them.
    #[doc(hidden)]
    pub fn hot_queues(mut self, n: usize) -> Options {
        self.hot_queues = n.max(1);
        self
    }

    /// Test only: a merge keeps the new positions of the runs it reads in bitmaps of at most
    /// `bytes` in all (default 1 MiB), the others in its scratch file `merge.tmp`; 0 sends
    /// every run's to the file, so that tests of a few URLs go through it.
    #[doc(hidden)]
    pub fn merge_positions_in_memory(mut self, bytes: u64) -> Options {
        self.merge_positions = bytes;
        self
    }

    /// Test only: A's frames are written every `bytes` of records (default 1 MiB), so that
    /// tests of a few thousand URLs write many frames, on A's thread with background flushes.
    #[doc(hidden)]
    pub fn frame_bytes(mut self, bytes: usize) -> Options {
        self.frame_bytes = bytes;
        self
    }

    /// Whether flushes run on a background thread while pushes continue, and A's frames are
    /// written by a thread of their own, and a near-duplicate store merges its segments on a
    /// thread of its own while its batches go on (default), or everything runs on the
    /// caller's thread, in a fixed order (as the crash tests need).
    pub fn background_flush(mut self, on: bool) -> Options {
        self.background = on;
        self
    }

    /// Opens only a store that exists (off by default): [`crate::Sieve::open`] and
    /// [`crate::Frontier::open`] of a missing directory, or of one without a store, fail
    /// ([`crate::Error::NotASieve`]) instead of making a new store there. Checked again once
    /// the directory's lock is held, so that a store removed while the open waited for its
    /// lock is not made again, empty, under its name.
    pub fn existing(mut self, on: bool) -> Options {
        self.existing = on;
        self
    }

    /// Merges early when the frontier runs low: a full buffer of S is merged with Z at once
    /// (instead of being spilled as a run) whenever fewer than `urls` frontier URLs are
    /// unread. The default is one buffer of S; 0 merges only when the runs are due (see
    /// `docs/design.md`, "Flat cost") or on [`crate::Sieve::flush`].
    pub fn frontier_low(mut self, urls: u64) -> Options {
        self.frontier_low = Some(urls);
        self
    }

    /// The size in bytes of the cache of recent signatures, rounded down to a power of two
    /// of 8-byte entries; 0 turns it off. A push whose signature the cache holds is a repeat
    /// for certain and costs nothing more: it is neither logged nor buffered (BUbiNG keeps
    /// recent URLs the same way). Default: 1/128 of the memory budget, at most 512 KiB (off
    /// when [`Options::slots`] sets the buffers directly). Taken out of the budget.
    pub fn recent_cache(mut self, bytes: usize) -> Options {
        self.recent = Some(bytes);
        self
    }

    /// Whether a frontier writes its Q runs (the URLs waiting in its queues) compressed:
    /// front coded, then zstd, in frames of 8 KiB of records, instead of front coded alone
    /// in frames of 2 KiB. Measured in `docs/performance.md` ("Compressed Q runs"): 39 % of
    /// the URL bytes instead of 75 % on the synthetic crawl, 15 % instead of 34 % on one
    /// site's, at about half the hand-outs a second (a hand-out decompresses a whole frame).
    ///
    /// The choice is kept in the store: the open that makes it records it (in the manifest)
    /// before it returns, and later opens that do not set it write as the store says (off
    /// for a new store). It applies to the runs written from then on, by moves, compactions
    /// and imports alike: a store may hold runs of both kinds, and every reader reads both.
    /// A read-only open records nothing.
    pub fn compress_queues(mut self, on: bool) -> Options {
        self.compress_queues = Some(on);
        self
    }

    /// The entries of the cache of recent signatures (0 or a power of two).
    pub(crate) fn recent_entries(&self) -> usize {
        let bytes = match (self.recent, self.slots) {
            (Some(b), _) => b,
            (None, Some(_)) => 0,
            (None, None) => recent_default(self.memory),
        };
        match bytes / 8 {
            0 => 0,
            n => 1 << n.ilog2(),
        }
    }

    /// Checks the options and returns the number of slots per buffer of S.
    pub(crate) fn validate(&self) -> Result<usize> {
        if self.max_url_len == 0 || self.max_url_len > MAX_MAX_URL_LEN {
            return Err(Error::InvalidOption {
                option: "max_url_len",
                reason: format!(
                    "{} is not between 1 and {MAX_MAX_URL_LEN}",
                    self.max_url_len
                ),
            });
        }
        if let SyncPolicy::EveryPushes(0) = self.sync {
            return Err(Error::InvalidOption {
                option: "sync",
                reason: "EveryPushes(0)".into(),
            });
        }
        let recent = 8 * self.recent_entries();
        if recent > self.memory / 4 {
            return Err(Error::InvalidOption {
                option: "recent_cache",
                reason: format!("{recent} bytes is more than a quarter of the memory budget"),
            });
        }
        if let Some(slots) = self.slots {
            if slots == 0 || slots > u32::MAX as usize {
                return Err(Error::InvalidOption {
                    option: "slots",
                    reason: format!("{slots} is not between 1 and {}", u32::MAX),
                });
            }
            return Ok(slots);
        }
        if self.memory < MIN_MEMORY {
            return Err(Error::InvalidOption {
                option: "memory",
                reason: format!(
                    "{} byte{} below the minimum of 1 MiB",
                    self.memory,
                    if self.memory == 1 { " is" } else { "s are" }
                ),
            });
        }
        let rest = self.memory - io_reserve(self.memory) - recent;
        Ok((rest / BYTES_PER_SLOT).clamp(1, u32::MAX as usize))
    }
}

/// The bytes reserved out of a budget for a merge's buffers (see [`max_runs`]); the fixed
/// frame, segment and run buffers come beside the budget (`docs/design.md`, "Memory").
pub(crate) fn io_reserve(memory: usize) -> usize {
    (4 << 20).min(memory / 4)
}

/// Bytes of buffers per input run of a merge (a decoded block, its raw bytes, and the
/// buffer of the run's new positions).
pub(crate) const MERGE_BYTES_PER_RUN: usize = 32 << 10;

/// The most runs waiting for a merge: the merge's buffers must fit in the I/O reserve.
pub(crate) fn max_runs(memory: usize) -> usize {
    (io_reserve(memory) / MERGE_BYTES_PER_RUN).clamp(4, 128)
}

/// The default size of the cache of recent signatures for a budget: 1/128 of it, at most
/// 512 KiB (an L2 cache's size: a lookup must cost less than the push it saves).
pub(crate) fn recent_default(memory: usize) -> usize {
    (memory / 128).min(512 << 10)
}

/// Parses a size: bytes, or a number with a unit K, M or G (powers of 1024), optionally
/// followed by "B" or "iB", in any case: `512K`, `64M`, `1GiB`, `4096`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let usage = "expected a number of bytes, optionally with a unit K, M or G, like 64M or 1G";
    if digits.is_empty() {
        return Err(usage.to_owned());
    }
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("unknown unit {unit:?}: {usage}")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| "too large".to_owned())
}
