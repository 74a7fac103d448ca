"""Type stubs of the native module: the classes over the library's sieve and frontier.

URLs and keys are `str` (UTF-8) or `bytes`; they come back as `str` (bytes that are not
UTF-8 with the `surrogateescape` handler, so that encoding them back gives the same bytes).
Instants are seconds since the epoch and durations seconds, as floats.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Dict, Iterable, List, Optional, Tuple, Union, final

from typing_extensions import Literal, Self, TypedDict

Text = Union[str, bytes]
"""A URL or a key."""

Item = Union[Text, Tuple[Text, Optional[Text]], Tuple[Text, Optional[Text], Optional[bytes]]]
"""An item of `Frontier.push`: a URL, or (url, key), or (url, key, metadata)."""

Size = Union[int, str]
"""A size in bytes: an int, or a str with a unit K, M or G like "64M"."""

DEFAULT_MEMORY: int
"""The default memory budget: 64 MiB."""
DEFAULT_MAX_URL_LEN: int
"""The default maximum URL length: 64 KiB."""

def now() -> float:
    """The current time, in seconds since the epoch, by the system's clock, which a frontier
    reads: its time unless the clock was set back while it is open (`Frontier.now()`)."""

class SieveStats(TypedDict):
    pushed: int
    buffered: int
    distinct: int
    emitted: int
    consumed: int
    pending: int
    flushes: int
    merges: int
    bytes_a: int
    bytes_z: int
    bytes_r: int
    bytes_f: int

class FrontierStats(TypedDict):
    queues: int
    queues_waiting: int
    waiting: int
    leased: int
    done: int
    runs: int
    bytes_runs: int
    bytes_journal: int
    bytes_checkpoint: int
    compressed: bool
    paused: bool

class Counts(TypedDict):
    queues: int
    queues_waiting: int
    queues_active: int
    queues_due: int
    waiting: int
    leased: int
    done: int

class QueueInfo(TypedDict):
    key: str
    waiting: int
    leased: int
    done: int
    next_due: Optional[float]
    policy: Optional[Policy]
    blocked_until: Optional[float]

State = Literal["unknown", "waiting", "leased", "done", "refetch"]

@final
class Sieve:
    """A durable sieve: each distinct URL pushed comes out once, in first-appearance order,
    in bounded memory, across crashes.

    Opens (or creates) the store in the directory `path`, which one handle at a time may use
    (else `LockedError`); a store used as a frontier is refused (`WrongModeError`: open it
    with `Frontier`). A push is durable once a later `sync`, `flush` or `close` returns.
    A context manager: `with` closes it. Safe to share between threads.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        memory: Optional[Size] = None,
        max_url_len: Optional[int] = None,
        seed: Optional[int] = None,
    ) -> None: ...
    def push(self, url: Text) -> None:
        """Pushes one URL; an invalid one (empty, too long, holding a newline) raises
        `InvalidUrlError` and changes nothing."""
    def push_many(self, urls: Iterable[Text]) -> None:
        """Pushes URLs; if one is invalid (empty, too long, holding a newline), none is
        pushed."""
    def push_new(self, url: Text) -> bool:
        """Pushes `url` unless it was pushed before; returns whether it was new (exact)."""
    def __contains__(self, url: Text, /) -> bool:
        """Whether `url` was ever pushed."""
    def sync(self) -> None:
        """Makes every push so far durable (a group commit)."""
    def flush(self) -> None:
        """Merges every push so far: the new URLs join the output. Durable when it returns."""
    def peek(self, max: int = 1000) -> List[str]:
        """The next URLs of the output after those peeked before, without consuming them:
        `commit` does, and until then a reopen gives them again. The output holds the URLs
        merged so far: those pushed since the last merge come after a `flush` (or the merge
        a full buffer starts on its own), so `push` then `peek` gives `[]` until then."""
    def commit(self) -> None:
        """Consumes, durably, every URL `peek` gave. The first commit (even of nothing)
        fixes the store as a plain sieve: a `Frontier` then refuses it."""
    def pop(self, max: int = 1000) -> List[str]:
        """`peek` then `commit`: the next URLs of the output, at most `max`, consumed (the
        URLs merged so far: `flush` first to have every URL pushed)."""
    def stats(self) -> SieveStats:
        """Counts."""
    def close(self) -> None:
        """Syncs and closes; later calls raise `ClosedError`. Closing twice does nothing."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Leased:
    """A URL handed out by `Frontier.lease`: end its lease with `done`, `refetch` or `retry`
    before its `deadline`, after which it goes back to its queue."""

    @property
    def token(self) -> int:
        """Identifies the lease."""
    @property
    def url(self) -> str:
        """The URL."""
    @property
    def key(self) -> str:
        """Its queue's key."""
    @property
    def crawl(self) -> str:
        """Its crawl."""
    @property
    def metadata(self) -> bytes:
        """The bytes pushed with it."""
    @property
    def deadline(self) -> float:
        """The end of the lease, in seconds since the epoch."""

@final
class Policy:
    """The politeness of a queue, or the default of the store's queues (of every crawl).

    `delay`: seconds from the end of one fetch to the next hand-out; `ratio`: after fetches
    that took s seconds in all, wait s/ratio (0: off; the longer wait applies); `per_queue`:
    the most URLs of the queue leased at once; `limit`: the most URLs of the queue done
    (0: no limit; a key's own policy takes at most 2**64 - 2, the default's 2**64 - 1).
    Hashable, compared by value, and copied and pickled as its four values.
    """

    def __init__(
        self, *, delay: float = 0.0, ratio: float = 0.0, per_queue: int = 1, limit: int = 0
    ) -> None: ...
    def __getnewargs_ex__(self) -> Tuple[Tuple[()], Dict[str, Union[float, int]]]: ...
    @property
    def delay(self) -> float: ...
    @property
    def ratio(self) -> float: ...
    @property
    def per_queue(self) -> int: ...
    @property
    def limit(self) -> int: ...

Lease = Union[Leased, int]
"""A lease: a `Leased`, or its token."""

@final
class Frontier:
    """A durable frontier: per-host queues over the sieve, with politeness and leases that
    survive crashes.

    Opens (or creates) the store in the directory `path`, which one handle at a time may use
    (else `LockedError`). Every call that changes something is durable when it returns, but
    `push_new(..., sync=False)`. URLs go through the sieve of their crawl (`""` is
    `"DEFAULT"`); each queue is served in first-appearance order. A context manager: `with`
    closes it. Safe to share between threads.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        memory: Optional[Size] = None,
        max_url_len: Optional[int] = None,
        seed: Optional[int] = None,
        compress_queues: Optional[bool] = None,
    ) -> None: ...
    def push(self, items: Iterable[Item], *, crawl: str = "") -> None:
        """Pushes discovered URLs; a URL already seen in the crawl changes nothing. If one
        item is invalid (an empty or too long URL, a URL or key holding a newline, a key
        over 255 bytes or, with none, a URL whose own key is, metadata over 64 MiB), none is
        pushed. Durable when it
        returns."""
    def push_new(
        self, items: Iterable[Item], *, crawl: str = "", sync: bool = True
    ) -> List[bool]:
        """`push`, saying of each item whether its URL was new to the crawl. With
        `sync=False`, the next call that changes something durably (or `sync`) makes these
        pushes durable first."""
    def sync(self) -> None:
        """Makes every push so far durable."""
    def flush(self) -> None:
        """Every URL pushed so far is merged and, if new, waits in its queue."""
    def lease(
        self,
        max_urls: int = 100,
        *,
        max_queues: Optional[int] = None,
        per_queue: Optional[int] = None,
        ttl: float = 30.0,
        crawl: Optional[str] = None,
        key: Optional[Text] = None,
    ) -> List[Leased]:
        """Hands out up to `max_urls` URLs of queues that may be served now, leased for
        `ttl` seconds, of `crawl` only (None: every crawl; with `key`, DEFAULT). Durable when
        it returns."""
    def done(
        self, lease: Lease, *, took: float = 0.0, ended: Optional[float] = None
    ) -> bool:
        """Ends a lease: the URL is done. False when it was not leased (a `Leased` of
        another store is not a lease of this one). `ended`: when the fetch ended, if before
        this call (as for `complete`); `done`, `refetch` and `retry` all take it."""
    def refetch(
        self, lease: Lease, at: float, *, took: float = 0.0, ended: Optional[float] = None
    ) -> bool:
        """Ends a lease: done, and served again once the instant `at` has passed."""
    def retry(
        self, lease: Lease, *, took: float = 0.0, ended: Optional[float] = None
    ) -> bool:
        """Ends a lease: the URL goes back to its queue, in its place."""
    def fetched(
        self, lease: Lease, *, took: float = 0.0, ended: Optional[float] = None
    ) -> bool:
        """Says that a lease's fetch ended (its response arrived) while the work after it
        goes on: its queue's delay runs from `ended` (None: now) and the lease no longer
        holds one of its queue's places, so the queue's next URL may be handed out once due.
        The lease stays until `done`, `retry` or `refetch` ends it (the delay does not run
        again) or it expires. False when it was not leased, or its fetch had ended."""
    def complete(
        self,
        leases: Iterable[Lease],
        *,
        how: Literal["done", "retry", "refetch", "fetched"] = "done",
        at: Optional[float] = None,
        took: float = 0.0,
        ended: Union[None, float, Iterable[Optional[float]]] = None,
    ) -> List[bool]:
        """Ends many leases in one durable step (or, with how="fetched", says their fetches
        ended, as `fetched` does); for each, whether it was leased. `ended`:
        when the fetches ended (seconds since the epoch; one for all, or a sequence of one per
        lease, None for now), if before this call: each queue's delay runs from it (not before the hand-out, not after
        the call)."""
    def release(self, crawl: Optional[str] = None) -> int:
        """Returns every URL leased (in `crawl`) to its queue; returns how many."""
    def policy(self, crawl: str = "", key: Optional[Text] = None) -> Policy:
        """The policy in force for a queue, or the default (one for every crawl)."""
    def set_policy(
        self, policy: Policy, *, crawl: Optional[str] = None, key: Optional[Text] = None
    ) -> None:
        """Sets the policy of a queue (`key` of `crawl`, default DEFAULT), every field of it,
        or (no key) the default, of every crawl of the store, which each queue follows in the
        fields not set for it (a key's SetDelay or `crivello policy --key K --delay D` sets
        one field). `crawl` without `key` raises ValueError: the default is no crawl's own."""
    def block(self, key: Text, until: float, *, crawl: str = "") -> None:
        """Blocks a queue until the instant `until` (0 unblocks it)."""
    def pause(self) -> None:
        """Pauses the hand-outs, durably."""
    def resume(self) -> None:
        """Resumes the hand-outs."""
    def queues(
        self, crawl: str = "", *, start: int = 0, max: int = 1000, flush: bool = True
    ) -> List[QueueInfo]:
        """The queues of `crawl`, in key order from the `start`-th, at most `max`. Flushes
        first (see `counts`)."""
    def status(
        self, url: Text, *, crawl: str = "", key: Optional[Text] = None
    ) -> Tuple[State, Optional[float]]:
        """What the frontier knows of `url`: (state, instant of "leased" or "refetch").
        Looked for in the queue `key` (None: the URL's default key), then in that of its
        default key: a URL pushed with a key of its own must be asked with it, else it
        reads as "done". Flushes first (a merge, when URLs were pushed since)."""
    def stats(self, *, flush: bool = True) -> FrontierStats:
        """Counts of the whole frontier. Flushes first (see `counts`)."""
    def counts(self, crawl: str = "", key: Optional[Text] = None, *, flush: bool = True) -> Counts:
        """Counts of a crawl, or of one of its queues. Flushes first, so that what was
        pushed is counted (on a store of a million URLs or more, at most about once a
        second); `flush=False` counts what the last flush brought, without waiting."""
    def now(self) -> float:
        """The frontier's time, in seconds since the epoch: the clock's, or the latest
        instant it gave since the open if the system's clock was set back since. Delays,
        deadlines, blocks and `next_due` are instants of this time."""
    def next_due(self, *, crawl: Optional[str] = None, flush: bool = True) -> Optional[float]:
        """The first instant something may be handed out, or a lease expires (of the crawl
        `crawl` alone when given); None when nothing waits and nothing is leased. While paused
        no queue is due: only a lease's expiry counts. Flushes first (see `counts`)."""
    def crawls(self) -> List[str]:
        """The names of the crawls, sorted."""
    def delete_queue(self, key: Text, *, crawl: str = "") -> int:
        """Deletes a queue with its URLs; returns how many it held."""
    def delete_crawl(self, crawl: str) -> int:
        """Deletes a crawl; its URLs are forgotten. Returns how many its queues held."""
    def close(self) -> None:
        """Syncs and closes; later calls raise `ClosedError`. Closing twice does nothing."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
