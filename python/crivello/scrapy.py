"""Scrapy's scheduler and duplicate filter on crivello's durable frontier.

In a project's settings::

    SCHEDULER = "crivello.scrapy.Scheduler"
    DUPEFILTER_CLASS = "crivello.scrapy.DupeFilter"
    CRIVELLO_DIR = "crawl-state"        # required: where the store lives
    # optional: CRIVELLO_MEMORY ("64M"), CRIVELLO_LEASE (seconds a request may stay in
    # flight, default 180), CRIVELLO_CRAWL (the crawl's id, default the spider's name),
    # CRIVELLO_PER_HOST (requests of one download slot in flight at once, default 1)

How the scheduler works:

- A request goes into the frontier as one URL of the crawl whose *identity* is the
  request's fingerprint (Scrapy's ``REQUEST_FINGERPRINTER``), keyed by its download slot
  (``download_slot`` in its meta, else its host), with the request serialised as the
  URL's metadata (``Request.to_dict``, callbacks by name, pickled); a redirect to another
  host is keyed by its own host (Scrapy copies the first request's slot to it). The
  frontier's sieve is the duplicate filter: exact, durable, in bounded memory. A ``dont_filter=True`` request
  bypasses it, as with Scrapy's own scheduler: its identity is the fingerprint with the
  identity of the request it came from and its rank among that request's outputs, so that
  a page fetched again after a crash yields the same identities and adds nothing twice
  (a start request: its rank among them; another with no origin, from a signal: its rank
  in this run, new in each run).
- ``next_request`` leases requests of queues that may be served now, so that the
  downloader is fed across hosts: at most ``CRIVELLO_PER_HOST`` of one host downloading at
  once (one by default), the next one handed out at least ``DOWNLOAD_DELAY`` after the
  previous one's response arrived (or its errback was called): the frontier's delay,
  durable and never randomised, counted from that instant. At its next call after the
  response arrives, the scheduler tells the frontier that the fetch ended then
  (``Frontier.complete(..., how="fetched")``): the request keeps its lease while its
  callback and its output run, and no longer holds its host, as with Scrapy's own
  scheduler, which counts downloads only.
- A request is completed in the frontier only once its work is safe: when the engine lets
  it go, which it does once the output of its callback (or errback) has been processed,
  every request it yielded scheduled, or once the request that replaces it (a redirect, a
  retry) is scheduled, or its failure handled. The completion's commit makes the pushes
  before it durable first. A crash before that fetches it again.
- After ``kill -9``, the same command with the same ``CRIVELLO_DIR`` resumes the crawl: a
  request leased at the kill is handed out again without waiting for its lease (once its
  host's delay has passed since the restart): the store is locked by one process at a
  time, so the process that held it is dead.

Priorities are ignored: each host's requests are served in the order they were first
scheduled (breadth-first), and hosts in the order they become due.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import math
import os
import pathlib
import pickle
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Iterator, List, Optional, Set
from urllib.parse import urlparse

import scrapy
from scrapy import Request
from scrapy.dupefilters import RFPDupeFilter
from scrapy.utils.deprecate import method_is_overridden
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import arg_to_iter, load_object
from scrapy.utils.request import request_from_dict

from . import errors
from ._crivello import Frontier, Policy, Sieve

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider
    from twisted.python.failure import Failure

from scrapy.utils import misc as _scrapy_misc


def build_from_crawler(objcls: Any, crawler: Any) -> Any:
    """``objcls`` built for ``crawler`` as Scrapy builds its components (2.11 has no
    ``build_from_crawler``, only ``create_instance``)."""
    build = getattr(_scrapy_misc, "build_from_crawler", None)
    if build is not None:
        return build(objcls, crawler)
    return getattr(_scrapy_misc, "create_instance")(objcls, settings=None, crawler=crawler)


logger = logging.getLogger(__name__)

#: Start requests (and others with no origin) that bypass the filter: the ranks of this many
#: fingerprints at most are kept; past that, they start again.
MAX_START_RANKS = 100_000

#: Whether this Scrapy marks its start requests (``is_start_request`` in their meta, set by
#: its start spider middleware, 2.13 on): then a request that bypasses the filter with no
#: origin and is not a start request is told apart from those of other runs.
try:
    import scrapy.spidermiddlewares.start  # noqa: F401

    _MARKS_START = True
except ImportError:  # pragma: no cover - Scrapy before 2.13
    _MARKS_START = False

#: The meta key of the token of the lease a handed-out request belongs to.
TOKEN_META = "_crivello_token"
#: The meta key of the token of the request whose callback yielded a request.
PARENT_META = "_crivello_parent"
_OURS = (TOKEN_META, PARENT_META)

DEFAULT_LEASE = 180.0

#: The most identities of requests completed after their lease ended that the scheduler
#: remembers, to complete their next hand-out at once rather than fetch them again.
MAX_LATE = 10_000

#: Seconds between two flushes of new requests into the queues while the downloader has room
#: for more requests than the queues can give.
FLUSH_UNDERFED = 0.05


class SettingError(ValueError):
    """A setting of crivello is missing or wrong: the crawl cannot start."""


@contextlib.contextmanager
def _logged_setting_errors() -> Iterator[None]:
    """Logs a setting error as well as raising it: Scrapy reports the exception of a
    scheduler it could not build only inside a traceback, followed by one of its own
    ("Engine slot not assigned"), and a log line says what to fix on its own."""
    try:
        yield
    except SettingError as e:
        # Once, when a scheduler's open opens its duplicate filter.
        if not getattr(e, "_crivello_logged", False):
            logger.error("%s", e)
            setattr(e, "_crivello_logged", True)
        raise


def _setting_dir(settings: Any) -> str:
    path = settings.get("CRIVELLO_DIR")
    if not path:
        raise SettingError(
            "CRIVELLO_DIR is not set: crivello.scrapy needs a directory for its store. Add "
            "CRIVELLO_DIR = \"crawl-state\" (any path) to the project's settings, or pass "
            "-s CRIVELLO_DIR=crawl-state on the command line."
        )
    return str(path)


def _open_store(kind: Callable[..., Any], path: str, memory: Any) -> Any:
    """Opens a store, with a message that says what to do when it cannot be."""
    try:
        return kind(path, memory=memory)
    except errors.LockedError as e:
        raise SettingError(
            f"CRIVELLO_DIR={path} is in use by another crawl (or another handle): {e}. "
            "Stop that crawl first, or give this one another CRIVELLO_DIR."
        ) from e
    except errors.WrongModeError as e:
        raise SettingError(
            f"CRIVELLO_DIR={path}: {e}. The scheduler keeps a frontier and the duplicate "
            "filter alone keeps a plain sieve: give each use its own directory."
        ) from e
    except errors.NotAStoreError as e:
        raise SettingError(
            f"CRIVELLO_DIR={path}: {e}. Give a new or empty directory, or a store made by "
            "this version of crivello."
        ) from e
    except (ValueError, TypeError) as e:
        raise SettingError(f"CRIVELLO_MEMORY={memory!r}: {e}") from e
    except errors.StorageError as e:
        where = pathlib.Path(path)
        if not where.is_dir():
            # A file where the directory should be, a path where none can be made.
            raise SettingError(
                f"CRIVELLO_DIR={path} cannot hold the store: {e}. Give a directory this user "
                "may create and write (a new one, or one a crawl made)."
            ) from e
        # The store's directory, whose files could not be read or written (a full disk,
        # permissions, the disk's error): its crawl is kept, to resume once that is fixed.
        raise SettingError(
            f"CRIVELLO_DIR={path}: the store could not be opened: {e}. Fix the cause (free "
            "some space, check the permissions or the disk), then run the crawl again: it "
            "resumes from what the store holds."
        ) from e


def _slot_of(request: Request) -> str:
    """The download slot of a request, as Scrapy's downloader computes it by default. The
    requests without one (`file:` and `data:` URLs: Scrapy's slot "") share the frontier's
    queue `_DEFAULT_`, as they share Scrapy's slot (a key is never empty). A slot longer
    than a frontier's key may be is shortened (see `_key_of`)."""
    slot = request.meta.get("download_slot")
    if slot is not None and str(slot) and not _redirect_keeps(request, str(slot)):
        return _key_of(str(slot))
    return _key_of(urlparse_cached(request).hostname or "_DEFAULT_")


#: The longest key a frontier's queue takes, in bytes.
MAX_KEY = 255


def _key_of(slot: str) -> str:
    """The frontier's key of a download slot: the slot itself, or, for a slot longer than
    `MAX_KEY` bytes (a spider's own, or a host name no DNS would resolve), its first 200
    bytes and a hash of the whole, so that two long slots stay two queues and the request
    is scheduled (its download then succeeds or fails on its own)."""
    raw = slot.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_KEY:
        return slot
    head = raw[:200].decode("utf-8", "ignore")
    return f"{head}~{hashlib.sha1(raw).hexdigest()}"


def _redirect_keeps(request: Request, slot: str) -> bool:
    """Whether `request` is a redirect that kept, as its download slot, the host of a
    request of its chain (Scrapy's downloader gave that slot, and its redirect middleware
    copies it): the request then joins the queue of its own host, so that the host it goes
    to gets one request at a time and its delay too. A slot set otherwise is kept (one a
    spider set that is the host of a URL of the chain is taken for the downloader's)."""
    for url in request.meta.get("redirect_urls") or ():
        try:
            if urlparse(str(url)).hostname == slot:
                return True
        except ValueError:
            continue
    return False


def _call_later(delay: float, func: Callable[[], None]) -> Any:
    """Calls `func` in `delay` seconds on the crawl's event loop: Scrapy's own helper where
    it has one (asyncio, or Twisted's reactor; Scrapy 2.14 and later, which may run with no
    reactor), else Twisted's reactor. Returns what ``cancel()`` stops."""
    try:
        from scrapy.utils.asyncio import call_later
    except ImportError:
        if "twisted.internet.reactor" not in sys.modules:
            # No reactor installed (outside a crawl): importing one would install Twisted's
            # default, which a crawl started later in this process may refuse.
            raise RuntimeError("no event loop") from None
        from twisted.internet import reactor

        return reactor.callLater(delay, func)  # type: ignore
    return call_later(delay, func)


def _cancel(call: Any) -> None:
    """Cancels what `_call_later` returned, unless it ran or was cancelled already."""
    from twisted.internet.error import AlreadyCalled, AlreadyCancelled

    try:
        call.cancel()
    except (AlreadyCalled, AlreadyCancelled):
        pass


class DupeFilter(RFPDupeFilter):
    """Scrapy's request-fingerprint duplicate filter with the fingerprints in a durable
    crivello sieve instead of a set in RAM: memory stays bounded however many requests
    were seen, and the fingerprints survive a crash (acknowledged within a second, and at
    close).

    With ``crivello.scrapy.Scheduler`` it keeps no store of its own: the scheduler's frontier
    filters, and this class logs the duplicates. With Scrapy's own scheduler it keeps its
    fingerprints in ``CRIVELLO_DIR``. It logs duplicates as Scrapy's does
    (``DUPEFILTER_DEBUG``) and counts them in ``dupefilter/filtered``.
    """

    #: Seconds between two syncs of the fingerprints (when used alone).
    SYNC_INTERVAL = 1.0

    def __init__(
        self,
        path: Optional[str] = None,
        debug: bool = False,
        *,
        fingerprinter: Any = None,
        memory: Any = "64M",
    ) -> None:
        super().__init__(None, debug, fingerprinter=fingerprinter)
        self.store_path = path
        self.memory = memory
        self.sieve: Optional[Sieve] = None
        self.scheduler: Optional[Scheduler] = None
        # Whether Scrapy's scheduler keeps its queue on disk (JOBDIR).
        self.jobdir = False
        self._synced = time.monotonic()
        # A subclass's own request_fingerprint decides what a duplicate is, as Scrapy's
        # filter lets it.
        self._own_fingerprint = method_is_overridden(
            type(self), RFPDupeFilter, "request_fingerprint"
        )
        self._sync_call: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DupeFilter:
        with _logged_setting_errors():
            return cls._built_for(crawler)

    @classmethod
    def _built_for(cls, crawler: Crawler) -> DupeFilter:
        settings = crawler.settings
        df = cls(
            _setting_dir(settings),
            settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            memory=settings.get("CRIVELLO_MEMORY", "64M"),
        )
        df.jobdir = bool(settings.get("JOBDIR"))
        scheduler = settings.get("SCHEDULER")
        try:
            ours = issubclass(load_object(scheduler), Scheduler)
        except Exception:
            ours = False
        if not ours:
            # Another scheduler (Scrapy's own) opens the filter after the engine began to open
            # the spider, where an error is followed by a cascade of the engine's own: its
            # store is opened now, while the scheduler is built, so that a locked directory
            # or a wrong setting stops the crawl with its message alone. (Crivello's scheduler
            # keeps the fingerprints in its frontier, and the filter opens no store of its
            # own.)
            df._open()
        return df

    def fingerprint_of(self, request: Request) -> str:
        """The request's fingerprint, as hexadecimal text (a subclass's own
        ``request_fingerprint``, when it has one)."""
        if self._own_fingerprint:
            fp = self.request_fingerprint(request)
            if isinstance(fp, bytes):
                return fp.hex()
            text = str(fp)
            # The store takes no newline in what it keeps (one entry is one line of the
            # command line's output): such a fingerprint is kept as the hex of its bytes.
            if "\n" in text:
                return text.encode("utf-8", "surrogatepass").hex()
            return text
        return self.fingerprinter.fingerprint(request).hex()

    def open(self) -> None:
        with _logged_setting_errors():
            self._open()

    def _open(self) -> None:
        if self.scheduler is None and self.sieve is None:
            if self.store_path is None:
                raise SettingError(
                    "crivello's DupeFilter keeps its fingerprints in a directory: build it "
                    "with one (DupeFilter(path)), or through Scrapy with the setting "
                    "CRIVELLO_DIR"
                )
            self.sieve = _open_store(Sieve, self.store_path, self.memory)
            # Fixes the store as a plain sieve: the scheduler, given this directory by
            # mistake, then refuses it, instead of taking the fingerprints for URLs.
            self.sieve.commit()
            seen = self.sieve.stats()["pushed"]
            if seen and not self.jobdir:
                logger.warning(
                    "The duplicate filter's store %(dir)s remembers requests of an earlier "
                    "run: they are filtered now. Scrapy's scheduler without JOBDIR kept none "
                    "of that run's pending requests, so those it had not fetched will not be "
                    "fetched by this run. Resume a stopped crawl with "
                    "SCHEDULER = 'crivello.scrapy.Scheduler' (or set JOBDIR too), or give "
                    "a new CRIVELLO_DIR to crawl again.",
                    {"dir": self.store_path},
                )

    def request_seen(self, request: Request) -> bool:
        fp = self.fingerprint_of(request)
        if self.scheduler is not None:
            # The scheduler's frontier filters; here, only whether it knows the request.
            state, _ = self.scheduler.frontier.status(fp, crawl=self.scheduler.crawl)
            return state != "unknown"
        if self.sieve is None:
            self.open()
        assert self.sieve is not None
        new = self.sieve.push_new(fp)
        now = time.monotonic()
        if now - self._synced >= self.SYNC_INTERVAL:
            self._sync()
        elif new and self._sync_call is None:
            # A quiet spell after a burst: the timer makes its fingerprints durable (with no
            # event loop to run it, outside a crawl, at once).
            try:
                self._sync_call = _call_later(self.SYNC_INTERVAL, self._timed_sync)
            except RuntimeError:
                self._sync()
        return not new

    def _timed_sync(self) -> None:
        """The timer's call: it ran, and is not to be cancelled."""
        self._sync_call = None
        self._sync()

    def _sync(self) -> None:
        """Makes the fingerprints pushed so far durable."""
        if self._sync_call is not None:
            _cancel(self._sync_call)
            self._sync_call = None
        if self.sieve is not None:
            self.sieve.sync()
        self._synced = time.monotonic()

    def close(self, reason: str) -> None:
        if self._sync_call is not None:
            _cancel(self._sync_call)
            self._sync_call = None
        if self.sieve is not None:
            sieve, self.sieve = self.sieve, None
            # What was merged is not needed again: only the fingerprints' signatures are.
            sieve.flush()
            while sieve.pop(100_000):
                pass
            sieve.close()


class _Live:
    """A request handed out and not yet completed."""

    __slots__ = (
        "identity",
        "request",
        "scraping",
        "ranks",
        "ended",
        "lease",
        "responded",
        "fetched",
    )

    def __init__(self, identity: str, request: Request, lease: int) -> None:
        self.identity = identity
        self.request = request
        # The token its completion ends: the lease it was handed out under, or the one the
        # frontier handed it out under again while it was still in flight here.
        self.lease = lease
        # Its output ended (or it was replaced): completed once the engine is done with it.
        self.ended = False
        # Its callback or errback was called: requests that carry its token are its outputs.
        self.scraping = False
        # When its response arrived, or else its callback or errback was called (seconds
        # since the epoch; 0: not yet): its fetch ended by then, and its host's delay runs
        # from there.
        self.responded = 0.0
        # The lease whose fetch the frontier was told ended (0: none yet): it no longer
        # holds its host.
        self.fetched = 0
        # The rank of each fingerprint among its outputs that bypass the filter.
        self.ranks: Dict[str, int] = {}


class _Completing:
    """A request's callback or errback, wrapped: the scheduler completes the request once
    the output has been consumed (or the call raised)."""

    __slots__ = ("scheduler", "token", "original", "errback", "__weakref__")

    def __init__(
        self, scheduler: Scheduler, token: int, original: Any, errback: bool
    ) -> None:
        self.scheduler = scheduler
        self.token = token
        self.original = original
        self.errback = errback

    def __call__(self, result: Any, *args: Any, **kwargs: Any) -> Any:
        sched = self.scheduler
        sched._scraping(self.token)
        try:
            if self.original is None:
                if self.errback:
                    # No errback of its own: the failure goes on as it would have (the
                    # same Failure, so that Scrapy logs it as a download error only).
                    sched._complete(self.token)
                    return result
                original = getattr(sched.spider, "_parse", None) or sched.spider.parse
            else:
                original = self.original
            output = original(result, *args, **kwargs)
        except BaseException:
            sched._complete(self.token)
            raise
        if output is None:
            sched._complete(self.token)
            return None
        if hasattr(output, "__aiter__"):
            return self._async_through(output)
        if hasattr(output, "__await__"):
            return self._awaited_through(output)
        # One request or item, or an iterable of them, as Scrapy takes them.
        return self._through(arg_to_iter(output))

    def _tag(self, item: Any) -> Any:
        if isinstance(item, Request):
            item.meta[PARENT_META] = self.token
        return item

    # Consumed, or stopped by the callback's exception (which Scrapy then handles): either
    # way the request's work ended. Abandoned unconsumed (the crawl shutting down): not
    # completed, so that the request is fetched again.

    def _through(self, output: Any) -> Any:
        try:
            for item in output:
                yield self._tag(item)
        except GeneratorExit:
            raise
        except BaseException:
            self.scheduler._complete(self.token)
            raise
        self.scheduler._complete(self.token)

    async def _async_through(self, output: Any) -> Any:
        try:
            async for item in output:
                yield self._tag(item)
        except GeneratorExit:
            raise
        except BaseException:
            self.scheduler._complete(self.token)
            raise
        self.scheduler._complete(self.token)

    async def _awaited_through(self, output: Any) -> Any:
        try:
            result = await output
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield self._tag(item)
            else:
                for item in arg_to_iter(result):
                    yield self._tag(item)
        except GeneratorExit:
            raise
        except BaseException:
            self.scheduler._complete(self.token)
            raise
        self.scheduler._complete(self.token)


def bypass_identity(fingerprint: str, origin: str = "", rank: int = 0) -> str:
    """The identity in the frontier of a request that bypasses the duplicate filter
    (``dont_filter=True``): its fingerprint (hexadecimal), tagged with the identity of the
    request whose output it is (``origin``; ``""`` for a start request or one scheduled by
    another component) and its rank among that request's outputs of the same fingerprint.
    The same output of the same request has the same identity, so that a page fetched again
    after a crash adds nothing twice. A request that goes through the filter has its
    fingerprint as its identity."""
    tag = hashlib.sha1(f"{origin}#{rank}".encode()).hexdigest()[:16]
    return f"{fingerprint}~{tag}"


def _find_method(spider: Any, func: Any) -> str:
    """The name under which `spider` has the bound method `func` (what ``Request.to_dict``
    looks for); ValueError when it has none."""
    if spider is not None and hasattr(func, "__func__"):
        for name, method in inspect.getmembers(spider, predicate=inspect.ismethod):
            if method.__func__ is func.__func__:
                return name
    raise ValueError(f"Function {func} is not an instance method in: {spider}")


def _unwrapped(request: Request) -> Request:
    """The request with its own callback and errback (not the scheduler's wrappers)."""
    cb, eb = request.callback, request.errback
    if isinstance(cb, _Completing) or isinstance(eb, _Completing):
        request = request.replace(
            callback=cb.original if isinstance(cb, _Completing) else cb,
            errback=eb.original if isinstance(eb, _Completing) else eb,
        )
    return request


class Scheduler:
    """Scrapy's scheduler on crivello's durable frontier: per-host politeness, requests
    that survive ``kill -9``, and memory that stays flat as the crawl grows. See the
    module's documentation for how it works, and the project's README for the settings.
    """

    def __init__(
        self,
        crawler: Crawler,
        dupefilter: Any,
        path: str,
        *,
        memory: Any = "64M",
        lease: float = DEFAULT_LEASE,
        crawl: Optional[str] = None,
        delay: float = 0.0,
        per_host: int = 1,
        batch: int = 16,
        stats: Any = None,
    ) -> None:
        self.crawler = crawler
        self.df = dupefilter
        self.path = path
        self.memory = memory
        self.lease_seconds = float(lease)
        # The frontier keeps whole milliseconds: a lease below one would end as it begins,
        # and every request would be handed out again and again.
        if not math.isfinite(self.lease_seconds) or self.lease_seconds < 0.001:
            raise SettingError(
                f"CRIVELLO_LEASE={lease!r}: a finite number of seconds, at least 0.001 "
                "(above the longest a request takes, retries included)"
            )
        self.crawl_setting = crawl
        self.crawl = ""
        self.delay = self._checked_delay(delay)
        if per_host < 1:
            raise SettingError(f"CRIVELLO_PER_HOST={per_host!r}: at least 1")
        self.per_host = per_host
        self.batch = max(1, batch)
        self.stats = stats
        self.spider: Any = None
        self.frontier: Frontier = None  # type: ignore[assignment]
        # The store's failure that stopped the crawl, if one did.
        self._failed: Optional[BaseException] = None
        # The frontier filters when the duplicate filter is ours; another one filters
        # first, and the frontier then takes every request it lets through.
        self.filtering = isinstance(dupefilter, DupeFilter)
        if self.filtering:
            dupefilter.scheduler = self
        self._ready: Deque[Any] = deque()
        self._live: Dict[int, _Live] = {}
        # The live requests by identity, and the identities completed after their lease
        # had ended (at most MAX_LATE of them): the frontier may hand either out again.
        self._live_ids: Dict[str, int] = {}
        self._late: Dict[str, None] = {}
        self._to_complete: List[int] = []
        self._completing: Set[int] = set()
        # The requests whose fetch ended (their response arrived, or their errback began)
        # and whose lease the frontier has not been told so yet.
        self._to_fetched: Dict[int, None] = {}
        self._unflushed = False
        self._flushed_at = 0.0
        self._start_ranks: Dict[str, int] = {}
        # The requests that bypass the filter with no origin and are not start requests:
        # ranked within this run, which a random tag names.
        self._run_ranks: Dict[str, int] = {}
        self._run = os.urandom(8).hex()
        self._wake_at: Optional[float] = None
        # The name of each spider method met as a callback or errback, by its function.
        self._method_names: Dict[Any, str] = {}

    @staticmethod
    def _checked_delay(delay: Any) -> float:
        """A delay in seconds: Scrapy takes a negative one as none (a NaN is refused first:
        `max` would take it as 0)."""
        try:
            seconds = float(delay)
        except (TypeError, ValueError) as e:
            raise SettingError(f"DOWNLOAD_DELAY={delay!r}: not a number ({e})") from e
        if not math.isfinite(seconds):
            raise SettingError(f"DOWNLOAD_DELAY={delay!r}: a finite number of seconds")
        return max(0.0, seconds)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        with _logged_setting_errors():
            return cls._built_for(crawler)

    @classmethod
    def _built_for(cls, crawler: Crawler) -> Scheduler:
        settings = crawler.settings
        path = _setting_dir(settings)

        def number(name: str, default: Any, kind: Callable[..., Any]) -> Any:
            try:
                return kind(name, default)
            except (TypeError, ValueError) as e:
                what = "a whole number" if kind == settings.getint else "a number"
                raise SettingError(f"{name}={settings.get(name)!r}: not {what} ({e})") from e

        lease = number("CRIVELLO_LEASE", DEFAULT_LEASE, settings.getfloat)
        delay = number("DOWNLOAD_DELAY", 0.0, settings.getfloat)
        per_host = number("CRIVELLO_PER_HOST", 1, settings.getint)
        dupefilter = build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler)
        scheduler = cls(
            crawler,
            dupefilter,
            path,
            memory=settings.get("CRIVELLO_MEMORY", "64M"),
            lease=lease,
            crawl=settings.get("CRIVELLO_CRAWL"),
            delay=delay,
            per_host=per_host,
            batch=settings.getint("CONCURRENT_REQUESTS", 16),
            stats=crawler.stats,
        )
        # Opened now rather than in `open`: the engine builds the scheduler before it begins
        # to open the spider, and a store that cannot be opened (locked by another crawl, of
        # the other kind, a path that cannot be a directory, a memory that is not a size)
        # then stops the crawl with its message alone, not followed by a cascade of the
        # engine's own errors.
        scheduler.frontier = _open_store(Frontier, path, scheduler.memory)
        return scheduler

    # Scrapy's scheduler interface.

    def open(self, spider: Spider) -> None:
        with _logged_setting_errors():
            self._open(spider)

    def _open(self, spider: Spider) -> None:
        self.spider = spider
        self.crawl = self.crawl_setting or spider.name
        if self.frontier is None:
            # (Built without `from_crawler`, which opens it.)
            self.frontier = _open_store(Frontier, self.path, self.memory)
        from scrapy import signals

        self.crawler.signals.connect(self._downloaded, signal=signals.response_downloaded)
        own = getattr(spider, "download_delay", None)
        if own is not None and scrapy.version_info < (2, 18):
            # The spider's attribute, which Scrapy before 2.18 does not copy into the
            # setting: its downloader takes it over DOWNLOAD_DELAY (2.18 and later copy it,
            # unless the setting was given at a higher priority, and read the setting).
            self.delay = self._checked_delay(own)
        policy = Policy(delay=self.delay, per_queue=self.per_host)
        if self.frontier.policy(self.crawl) != policy:
            # The store's default, of every crawl in it.
            self.frontier.set_policy(policy)
        released = self.frontier.release(self.crawl)
        if self.frontier.stats()["paused"]:
            logger.warning(
                "The frontier in %(dir)s is paused (Frontier.pause()): nothing is handed out "
                "and the crawl waits. Stop it, resume the store (crivello resume %(dir)s, or "
                "Frontier(%(dir)r).resume()), and run the crawl again.",
                {"dir": self.path},
                extra={"spider": spider},
            )
        # (After a flush: the requests a stopped run pushed last are counted too.)
        counts = self.frontier.counts(self.crawl)
        if released or counts["waiting"]:
            logger.info(
                "Resuming crawl %(crawl)s from %(dir)s: %(waiting)d requests waiting "
                "(%(released)d in flight when it stopped, handed out again), "
                "%(done)d done",
                {
                    "crawl": self.crawl,
                    "dir": self.path,
                    "waiting": counts["waiting"],
                    "released": released,
                    "done": counts["done"],
                },
                extra={"spider": spider},
            )
        elif counts["done"]:
            logger.info(
                "Crawl %(crawl)s in %(dir)s: %(done)d requests done before, none waiting: "
                "only requests never scheduled in it are fetched (a new CRIVELLO_DIR, or "
                "CRIVELLO_CRAWL, starts afresh)",
                {"crawl": self.crawl, "dir": self.path, "done": counts["done"]},
                extra={"spider": spider},
            )
        if not self.filtering:
            self.df.open()
            if released or counts["waiting"] or counts["done"]:
                logger.warning(
                    "Resuming crawl %(crawl)s with DUPEFILTER_CLASS %(filter)s, which is not "
                    "crivello.scrapy.DupeFilter: the requests it lets through are taken as "
                    "they come, so pages completed before may be fetched again if that "
                    "filter forgot them (Scrapy's own keeps them in memory only).",
                    {"crawl": self.crawl, "filter": type(self.df).__qualname__},
                    extra={"spider": spider},
                )

    def close(self, reason: str) -> None:
        try:
            if self.frontier is not None and self.spider is None:
                # Built (the store opened) and never opened: no crawl was chosen, and no
                # lease of this run to give back (the DEFAULT crawl's are another run's).
                self.frontier.close()
            elif self.frontier is not None and self._failed is None:
                self._flush_completions()
                # Requests leased and not handed to the engine go back at once.
                self.frontier.release(self.crawl)
                self.frontier.close()
            elif self.frontier is not None:
                # The store failed (logged, the crawl stopped with the reason). Nothing is
                # completed: the requests yielded since were dropped, so their parents must
                # be fetched again (and yield them again) in the next run. The leases go back
                # and the handle is let go, each failure let go too (said already).
                for step in (lambda: self.frontier.release(self.crawl), self.frontier.close):
                    try:
                        step()
                    except errors.Error:
                        pass
        finally:
            self.df.close(reason)

    def has_pending_requests(self) -> bool:
        if self._failed is not None:
            return False
        if self._ready or self._unflushed or self._to_complete or self._live:
            return True
        # The engine asks only when it has nothing else to do: a count of this crawl's
        # queues (another crawl's in the same store do not keep this one open). The
        # scheduler flushes on its own terms (_fill).
        counts = self.frontier.counts(self.crawl, flush=False)
        return bool(counts["waiting"] or counts["leased"])

    def __len__(self) -> int:
        # A request pushed since the last flush is counted once it is in its queue: a call
        # flushes what waits (Scrapy itself asks has_pending_requests, not the length).
        if self._unflushed:
            self._flush_pushes()
        counts = self.frontier.counts(self.crawl, flush=False)
        return int(counts["waiting"]) + len(self._ready)

    def enqueue_request(self, request: Request) -> bool:
        if self._failed is not None:
            # The store failed and the crawl is stopping: nothing more goes in (the next
            # run schedules again what the requests in flight yield).
            return False
        replaced = self._replaced(request)
        try:
            new = self._push(request)
        finally:
            # The request it replaces ends with it (pushed, filtered, or refused).
            self._replace_done(replaced)
        if new is None:
            return False
        if not new:
            if not request.dont_filter:
                self.df.log(request, self.spider)
            else:
                logger.debug(
                    "Already in the frontier (scheduled before a restart): %(request)s",
                    {"request": request},
                    extra={"spider": self.spider},
                )
            return False
        if self.stats is not None:
            self.stats.inc_value("scheduler/enqueued/crivello")
            self.stats.inc_value("scheduler/enqueued")
        return True

    def _push(self, request: Request) -> Optional[bool]:
        """Pushes the request: whether it was new to the frontier; None when the duplicate
        filter (another class than ours) or an error refused it."""
        parent = self._parent_of(request)
        if not request.dont_filter and not self.filtering and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return None
        try:
            metadata = self._serialise(request)
        except ValueError as e:
            logger.error("%(error)s", {"error": e}, extra={"spider": self.spider})
            if self.stats is not None:
                self.stats.inc_value("crivello/unserialisable")
            return None
        fp = self._fingerprint(request)
        if self.filtering and not request.dont_filter:
            identity = fp
        else:
            identity = self._unique_identity(fp, parent, request)
        new = self.frontier.push_new(
            [(identity, _slot_of(request), metadata)], crawl=self.crawl, sync=False
        )[0]
        self._unflushed = True
        return new

    def next_request(self) -> Optional[Request]:
        if self._failed is not None:
            return None
        try:
            return self._next_request()
        except (errors.StorageError, errors.PoisonedError, errors.CorruptError) as e:
            # The store cannot take more (a full disk, say): what was acknowledged is durable,
            # and the crawl stops with the reason, instead of failing every call for good.
            self._failed = e
            logger.error(
                "The frontier in %(dir)s failed: %(error)s. The crawl stops; what it had "
                "completed is kept: fix the cause and run the same command again to resume.",
                {"dir": self.path, "error": e},
                extra={"spider": self.spider},
            )
            engine = self.crawler.engine
            if engine is not None and self.spider is not None:
                if hasattr(engine, "close_spider_async"):  # Scrapy 2.14 and later
                    from scrapy.utils.defer import deferred_from_coro

                    closing = deferred_from_coro(
                        engine.close_spider_async(reason="crivello_store_failed")
                    )
                    closing.addErrback(self._close_failed)
                else:
                    engine.close_spider(self.spider, "crivello_store_failed")
            return None

    def _close_failed(self, failure: Any) -> None:
        logger.error(
            "Closing the spider after the frontier failed: %(error)s",
            {"error": failure.getErrorMessage()},
            extra={"spider": self.spider},
        )

    def _next_request(self) -> Optional[Request]:
        self._flush_completions()
        if not self._ready:
            self._fill()
        while self._ready:
            lease = self._ready.popleft()
            request = self._load(lease)
            if request is not None:
                if self.stats is not None:
                    self.stats.inc_value("scheduler/dequeued/crivello")
                    self.stats.inc_value("scheduler/dequeued")
                return request
        self._wake_when_due()
        return None

    # Hand-outs.

    def _fill(self) -> None:
        leased = self.frontier.lease(
            self.batch, ttl=self.lease_seconds, crawl=self.crawl
        )
        if not leased and self._unflushed:
            # Nothing due: what was pushed since the last flush may be (new hosts above
            # all). A flush merges with what the sieve holds: at most one a second while
            # the downloader has its fill, every FLUSH_UNDERFED seconds while it has room
            # (a crawl fanning out over new hosts would otherwise wait for them).
            now = time.monotonic()
            interval = 1.0 if len(self._live) >= self.batch else FLUSH_UNDERFED
            if now - self._flushed_at >= interval or self._nothing_due():
                self._flush_pushes()
                leased = self.frontier.lease(
                    self.batch, ttl=self.lease_seconds, crawl=self.crawl
                )
        self._ready.extend(leased)

    def _nothing_due(self) -> bool:
        """Nothing waits that may be served and nothing is leased, hand-outs not paused (a
        paused store has nothing due either, and a flush would not change that)."""
        if self.frontier.next_due(flush=False) is not None:
            return False
        return not self.frontier.stats(flush=False)["paused"]

    def _flush_pushes(self) -> None:
        """Merges what was pushed since the last flush into the queues."""
        self.frontier.flush()
        self._unflushed = False
        self._flushed_at = time.monotonic()

    def _load(self, lease: Any) -> Optional[Request]:
        if self._again(lease):
            return None
        try:
            d = pickle.loads(lease.metadata)
            request = request_from_dict(d, spider=self.spider)
        except Exception as e:
            # It cannot be fetched by this spider (its code changed since it was
            # scheduled?): said loudly, and done, so that it is not handed out forever.
            logger.error(
                "Cannot load the request %(identity)s of %(key)s scheduled earlier: "
                "%(error)s; it is dropped",
                {"identity": lease.url, "key": lease.key, "error": e},
                extra={"spider": self.spider},
            )
            self.frontier.done(lease)
            if self.stats is not None:
                self.stats.inc_value("crivello/unloadable")
            return None
        token = lease.token
        request.meta[TOKEN_META] = token
        self._live[token] = _Live(lease.url, request, token)
        self._live_ids[lease.url] = token
        from scrapy.http.request import NO_CALLBACK

        if request.callback is not NO_CALLBACK:
            request.callback = _Completing(self, token, request.callback, False)
        request.errback = _Completing(self, token, request.errback, True)
        return request

    def _again(self, lease: Any) -> bool:
        """Whether `lease` hands out again a request this process holds or has completed:
        its lease ended while it was in flight (a download or a callback longer than
        ``CRIVELLO_LEASE``), and the frontier, which counts it lost, served it again. It is
        not fetched twice: a request still in flight takes the new lease, which its
        completion ends; one completed since is completed again at once."""
        key = self._live_ids.get(lease.url)
        if key is not None:
            live = self._live[key]
            live.lease = lease.token
            if live.responded:
                # Its fetch had ended: the new lease does not hold its host either.
                self._to_fetched[key] = None
            self._warn_lease(live, "ended while it was in flight: it holds a new one")
            if self.stats is not None:
                self.stats.inc_value("crivello/lease_renewed")
            return True
        if lease.url in self._late:
            del self._late[lease.url]
            self.frontier.done(lease)
            if self.stats is not None:
                self.stats.inc_value("crivello/completed_late")
            return True
        return False

    def _wake_when_due(self) -> None:
        """Makes the engine ask again when the next queue is due: it asks only after a
        download ends, or every few seconds."""
        due = self.frontier.next_due(flush=False)
        if due is None:
            return
        # The frontier's instants are of its time, which stands still while a system clock
        # set back catches up: an instant past it comes when the clock reaches it.
        wait = due - time.time() if due > self.frontier.now() else 0.0
        # Due now and yet nothing was handed out: another crawl's queue. (Paused, nothing is
        # due but an expiry: the engine's own asking every few seconds sees the resume.)
        delay = min(wait, 5.0) + 0.001 if wait > 0 else 0.25
        if self._unflushed and len(self._live) < self.batch:
            # Pushes wait for their flush, which may bring queues due now (new hosts): ask
            # again when the next flush may run.
            left = self._flushed_at + FLUSH_UNDERFED - time.monotonic()
            delay = min(delay, max(left, 0.0) + 0.001)
        at = time.monotonic() + delay
        if self._wake_at is not None and self._wake_at <= at:
            return
        self._wake_at = at
        _call_later(delay, self._wake)

    def _wake(self) -> None:
        self._wake_at = None
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    # Completions.

    def _downloaded(self, response: Any, request: Request, spider: Any = None) -> None:
        """A response arrived: its request's fetch ended now (its callback begins later)."""
        token = request.meta.get(TOKEN_META)
        live = self._live.get(token) if token is not None else None
        if token is not None and live is not None and not live.responded:
            self._fetch_ended(int(token), live)

    def _scraping(self, token: int) -> None:
        live = self._live.get(token)
        if live is not None:
            live.scraping = True
            if not live.responded:
                self._fetch_ended(token, live)

    def _fetch_ended(self, token: int, live: _Live) -> None:
        """The fetch of the request of `token` ended now: its host's next request may be
        handed out once its delay has passed from now, which the next call for a request
        tells the frontier (the engine asks for one as soon as a download ends)."""
        live.responded = time.time()
        self._to_fetched[token] = None

    def _complete(self, token: int) -> None:
        """The output of the request of `token` ended (or the request was replaced): it is
        completed (durably, with every push before) once the engine is done with it, at a
        hand-out, which the engine asks for when it is."""
        live = self._live.get(token)
        if live is not None:
            live.ended = True
            self._wake_soon()

    def _in_progress(self) -> Optional[Any]:
        """The engine's requests in progress (downloading, or their output being processed),
        when this Scrapy exposes them."""
        engine = getattr(self.crawler, "engine", None)
        slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
        return getattr(slot, "inprogress", None)

    def _gather_completions(self) -> None:
        """Moves the requests whose work is over to the completions to write: their output
        ended and the engine is done with them (it processes a callback's output, items and
        requests alike, before it lets the request go), or, where the engine does not say,
        their output ended."""
        in_progress = self._in_progress()
        for token, live in self._live.items():
            if token in self._completing:
                continue
            if in_progress is not None:
                # Its output processed, or its replacement scheduled, or its failure handled.
                done = live.request not in in_progress
            else:
                done = live.ended
            if done:
                self._completing.add(token)
                self._to_complete.append(token)

    def _wake_soon(self) -> None:
        if self._wake_at is not None and self._wake_at <= time.monotonic():
            return
        self._wake_at = time.monotonic()
        _call_later(0, self._wake)

    def _flush_completions(self) -> None:
        self._gather_completions()
        self._flush_fetched()
        if not self._to_complete:
            return
        tokens, self._to_complete = self._to_complete, []
        leases = [self._live[t].lease if t in self._live else t for t in tokens]
        # The delay of a request's host runs from its response (when its callback began), not
        # from this completion, which waits for its output to be processed.
        now = time.time()
        responded = [
            min(self._live[t].responded or now, now) if t in self._live else now for t in tokens
        ]
        # One commit: it syncs the pushes made before it (the requests' outputs) first.
        ended = self.frontier.complete(leases, ended=responded)
        for t, was_leased in zip(tokens, ended):
            live = self._live.pop(t, None)
            self._completing.discard(t)
            if live is not None and self._live_ids.get(live.identity) == t:
                del self._live_ids[live.identity]
            if not was_leased and live is not None:
                # Its lease ended and the frontier has it back: the next hand-out of it is
                # completed at once, unless this process is gone by then.
                if len(self._late) >= MAX_LATE:
                    self._late.pop(next(iter(self._late)))
                self._late[live.identity] = None
                # The hand-out already leased and not yet loaded.
                again = [x for x in self._ready if x.url == live.identity]
                for x in again:
                    self._ready.remove(x)
                    self.frontier.done(x)
                    self._late.pop(live.identity, None)
                self._warn_lease(live, "ended before its work did")

    def _flush_fetched(self) -> None:
        """Tells the frontier, in one durable step, of the fetches that ended since the last
        call, but for those of requests completed now (their completion gives the instant)."""
        if not self._to_fetched:
            return
        tokens, self._to_fetched = list(self._to_fetched), {}
        lives = [
            live
            for live in (self._live.get(t) for t in tokens if t not in self._completing)
            if live is not None and live.fetched != live.lease
        ]
        if not lives:
            return
        told = self.frontier.complete(
            [live.lease for live in lives],
            how="fetched",
            ended=[live.responded for live in lives],
        )
        for live, ok in zip(lives, told):
            if ok:
                live.fetched = live.lease

    def _warn_lease(self, live: _Live, what: str) -> None:
        logger.warning(
            "The lease of %(request)s %(what)s. Raise CRIVELLO_LEASE (now %(lease)s s) above "
            "the longest a request takes, its download (DOWNLOAD_TIMEOUT) and its callback "
            "included.",
            {"request": live.request, "what": what, "lease": self.lease_seconds},
            extra={"spider": self.spider},
        )

    # Identities.

    def _fingerprint(self, request: Request) -> str:
        if self.filtering:
            return str(self.df.fingerprint_of(request))
        return self.crawler.request_fingerprinter.fingerprint(request).hex()

    def _replaced(self, request: Request) -> Optional[int]:
        """The token of the request this one replaces (a redirect or a retry made by the
        downloader, which copies the meta), if it does."""
        token = request.meta.get(TOKEN_META)
        if PARENT_META in request.meta or token is None:
            return None
        live = self._live.get(token)
        if live is None or live.scraping:
            return None
        return int(token)

    def _replace_done(self, replaced: Optional[int]) -> None:
        if replaced is not None:
            self._complete(replaced)

    def _parent_of(self, request: Request) -> Optional[_Live]:
        token = request.meta.get(PARENT_META, request.meta.get(TOKEN_META))
        if token is None:
            return None
        return self._live.get(token)

    def _unique_identity(self, fp: str, parent: Optional[_Live], request: Request) -> str:
        untagged = request.meta.get(PARENT_META, request.meta.get(TOKEN_META)) is None
        if untagged and _MARKS_START and not request.meta.get("is_start_request"):
            # Scheduled by no request and not a start request (from a signal: a poll, a
            # login renewed): new in each run, as with Scrapy's scheduler.
            if len(self._run_ranks) >= MAX_START_RANKS:
                self._run_ranks.clear()
            ranks, origin = self._run_ranks, f"run {self._run}"
        elif parent is None:
            if len(self._start_ranks) >= MAX_START_RANKS:
                self._start_ranks.clear()
            ranks, origin = self._start_ranks, ""
        else:
            ranks, origin = parent.ranks, parent.identity
        rank = ranks.get(fp, 0)
        ranks[fp] = rank + 1
        return bypass_identity(fp, origin, rank)

    def _method_name(self, func: Any) -> Any:
        """The name of the spider's method `func`, as ``Request.to_dict`` finds it (a search
        of the spider's members, here made once per method rather than once per request);
        None and names stay as they are."""
        if func is None or isinstance(func, str):
            return func
        key = getattr(func, "__func__", None)
        if key is not None and getattr(func, "__self__", None) is self.spider:
            name = self._method_names.get(key)
            if name is None:
                name = _find_method(self.spider, func)
                self._method_names[key] = name
            return name
        return _find_method(self.spider, func)

    def _serialise(self, request: Request) -> bytes:
        try:
            r = _unwrapped(request)
            cb, eb = r.callback, r.errback
            names = (self._method_name(cb), self._method_name(eb))
            # The rest as Scrapy writes it, the methods' names put in after.
            r.callback, r.errback = None, None
            try:
                d = r.to_dict(spider=self.spider)
            finally:
                r.callback, r.errback = cb, eb
            d["callback"], d["errback"] = names
            meta = d.get("meta")
            if meta and any(k in meta for k in _OURS):
                d["meta"] = {k: v for k, v in meta.items() if k not in _OURS}
            return pickle.dumps(d, protocol=4)
        except Exception as e:
            raise ValueError(
                f"crivello.scrapy cannot store the request {request!r}: {e}. Its callback "
                "and errback must be methods of the spider, and its meta and cb_kwargs "
                "must pickle."
            ) from e
