"""Real Scrapy crawls of a local site with crivello's scheduler and duplicate filter: every
page once, politely; kill -9 and resume; the duplicate filter alone; bad settings."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest

scrapy = pytest.importorskip("scrapy")

import crivello  # noqa: E402
from crivello.scrapy import bypass_identity  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from local_site import DATA, Site  # noqa: E402

SPIDER = str(Path(__file__).parent / "follow_spider.py")
pytestmark = pytest.mark.skipif(
    not (DATA / "hollins.dat.xz").exists(), reason=f"no page graph in {DATA}"
)

CRIVELLO = {
    "SCHEDULER": "crivello.scrapy.Scheduler",
    "DUPEFILTER_CLASS": "crivello.scrapy.DupeFilter",
}


def settings(store: Path, **extra: object) -> Dict[str, str]:
    s = {
        "CRIVELLO_DIR": str(store),
        "CRIVELLO_MEMORY": "16M",
        "TELNETCONSOLE_ENABLED": "0",
        "LOG_LEVEL": "INFO",
        "ROBOTSTXT_OBEY": "0",
    }
    s.update({k: str(v) for k, v in extra.items()})
    return s


def command(
    site: Site, opts: Dict[str, str], spider: str = SPIDER, args: Sequence[str] = ()
) -> List[str]:
    cmd = [sys.executable, "-m", "scrapy", "runspider", spider, "-a", f"start={site.url(site.pages[0])}"]
    for a in args:
        cmd += ["-a", a]
    for k, v in opts.items():
        cmd += ["-s", f"{k}={v}"]
    return cmd


def crawl(
    site: Site,
    opts: Dict[str, str],
    timeout: float = 120,
    spider: str = SPIDER,
    args: Sequence[str] = (),
) -> Tuple[int, str, int]:
    """Runs a crawl to its end: exit status, log, peak RSS in KiB."""
    p = subprocess.Popen(
        command(site, opts, spider, args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, log = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    # The child was reaped by communicate; its peak RSS is in the children's usage.
    import resource

    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return p.returncode, log, rss


def fingerprint(url: str) -> str:
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinter

    return RequestFingerprinter().fingerprint(Request(url)).hex()


def identities(site: Site) -> Dict[int, str]:
    """The identity in the frontier of each page: its request's fingerprint; the start
    page's request bypasses the filter (Scrapy's start requests do)."""
    ids = {p: fingerprint(site.url(p)) for p in site.pages}
    start = site.pages[0]
    ids[start] = bypass_identity(ids[start])
    return ids


def host_key(site: Site, page: int) -> str:
    """The queue of a page: its download slot, the host."""
    return site.servers[site.host_of[page]].server_address[0]


def per_host_gaps(site: Site) -> float:
    """The smallest time between two fetches of one host."""
    last: Dict[int, float] = {}
    smallest = float("inf")
    for t, h, _ in sorted(site.fetches):
        if h in last:
            smallest = min(smallest, t - last[h])
        last[h] = t
    return smallest


@pytest.fixture
def site() -> Site:
    s = Site(pages=500, hosts=4, latency=0.002)
    yield s
    s.close()


def test_a_crawl_fetches_every_page_once_politely(site: Site, tmp_path: Path) -> None:
    delay = 0.05
    rc, log, rss = crawl(site, settings(tmp_path / "store", DOWNLOAD_DELAY=delay, **CRIVELLO))
    assert rc == 0, log[-3000:]
    counts = site.count()
    assert set(counts) == set(site.pages), f"missing {set(site.pages) - set(counts)}"
    assert max(counts.values()) == 1, {p: c for p, c in counts.items() if c > 1}
    # One fetch of a host at a time, at least the delay apart (from the end of the previous
    # fetch: arrivals are further apart still).
    assert site.most_in_flight == [1] * 4
    assert per_host_gaps(site) >= delay
    assert rss < 300 * 1024, f"peak RSS {rss} KiB"
    # The frontier holds every page as done, and the crawl's name is the spider's.
    with crivello.Frontier(tmp_path / "store") as f:
        assert f.crawls() == ["follow"]
        c = f.counts("follow")
        assert (c["done"], c["waiting"], c["leased"]) == (len(site.pages), 0, 0)
    # Run again: the crawl is over, nothing is fetched again.
    before = len(site.fetches)
    rc, log, _ = crawl(site, settings(tmp_path / "store", **CRIVELLO))
    assert rc == 0, log[-3000:]
    assert len(site.fetches) == before
    assert f"{len(site.pages)} requests done before, none waiting" in log, log[-3000:]


def test_kill_9_or_interrupt_at_random_instants_then_resume_fetches_everything_once(
    site: Site, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    opts = settings(store, DOWNLOAD_DELAY=0.01, CRIVELLO_LEASE=600, **CRIVELLO)
    ids = identities(site)
    rng = random.Random(int(os.environ.get("CRIVELLO_SEED", "7")))
    # After each kill: the pages the frontier holds as done, and when.
    done_at_kill: List[Tuple[float, Set[int]]] = []
    # Two kills, and between them an interrupt (Scrapy's graceful stop, as Ctrl-C).
    for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGKILL):
        started = len(site.fetches)
        p = subprocess.Popen(command(site, opts), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Kill once the crawl has fetched something, at a random instant after.
        deadline = time.time() + 30
        while len(site.fetches) == started and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.05, 0.6))
        p.send_signal(sig)
        p.communicate(timeout=60)
        killed = time.time()
        with crivello.Frontier(store) as f:
            done = {
                page
                for page, i in ids.items()
                if f.status(i, crawl="follow", key=host_key(site, page))[0] == "done"
            }
            # The leases of the killed process are still there, until the next run.
            leased = f.stats()["leased"]
        done_at_kill.append((killed, done))
        assert leased <= 16
    rc, log, _ = crawl(site, opts)
    assert rc == 0, log[-3000:]
    assert "Resuming crawl follow" in log
    counts = site.count()
    assert set(counts) == set(site.pages), f"missing {set(site.pages) - set(counts)}"
    # A page done at a kill is never fetched after it.
    for killed, done in done_at_kill:
        again = {p for t, _, p in site.fetches if t > killed and p in done}
        assert not again, f"pages done before a kill fetched again: {sorted(again)}"
    # Only pages in flight at a kill are fetched twice: a few per kill at most.
    twice = [p for p, c in counts.items() if c > 1]
    assert len(twice) <= 3 * 16, twice
    assert done_at_kill[-1][1], "nothing was done before the last kill"


def test_the_duplicate_filter_alone_keeps_scrapys_semantics(site: Site, tmp_path: Path) -> None:
    opts = settings(
        tmp_path / "seen", DUPEFILTER_CLASS="crivello.scrapy.DupeFilter", LOG_LEVEL="DEBUG"
    )
    rc, log, _ = crawl(site, opts)
    assert rc == 0, log[-3000:]
    counts = site.count()
    assert set(counts) == set(site.pages) and max(counts.values()) == 1
    # Logged as Scrapy's filter logs them, and counted.
    assert "Filtered duplicate request" in log
    assert "'dupefilter/filtered'" in log
    # The fingerprints survived the run: a second run fetches the start page (it bypasses
    # the filter) and no other.
    before = len(site.fetches)
    rc, log, _ = crawl(site, opts)
    assert rc == 0, log[-3000:]
    assert [p for _, _, p in site.fetches[before:]] == [site.pages[0]]


def test_the_delay_runs_from_the_response_not_from_the_end_of_the_callback(
    tmp_path: Path,
) -> None:
    # Each callback works 0.4 s; the delay is 0.5 s. Counted from the completion (once the
    # callback's output is pushed), two fetches of the host would be 0.9 s apart; from the
    # response, 0.5 s and a little.
    site = Site(pages=10, hosts=1, latency=0.001)
    try:
        opts = settings(tmp_path / "store", DOWNLOAD_DELAY=0.5, **CRIVELLO)
        rc, log, _ = crawl(site, opts, timeout=120, args=["think=0.4"])
        assert rc == 0, log[-3000:]
        assert sorted(site.count()) == sorted(site.pages)
        starts = sorted(t for t, _, _ in site.fetches)
        gaps = sorted(b - a for a, b in zip(starts, starts[1:]))
        assert gaps[0] >= 0.5, gaps
        assert gaps[len(gaps) // 2] < 0.75, gaps
    finally:
        site.close()


def test_a_callback_longer_than_the_delay_does_not_hold_its_host(tmp_path: Path) -> None:
    # Each callback awaits 1.2 s (not blocking: the downloader goes on); the delay is 0.3
    # s. The request keeps its lease until its output is pushed, but its host's next
    # request is handed out 0.3 s after its response, not after its callback: one download
    # of the host at a time, the delay apart, as with Scrapy's own scheduler.
    site = Site(pages=16, hosts=1, latency=0.001)
    try:
        opts = settings(tmp_path / "store", DOWNLOAD_DELAY=0.3, **CRIVELLO)
        rc, log, _ = crawl(site, opts, timeout=120, args=["wait=1.2"])
        assert rc == 0, log[-3000:]
        counts = site.count()
        assert set(counts) == set(site.pages), f"missing {set(site.pages) - set(counts)}"
        assert max(counts.values()) == 1, {p: c for p, c in counts.items() if c > 1}
        assert site.most_in_flight == [1]
        starts = sorted(t for t, _, _ in site.fetches)
        gaps = sorted(b - a for a, b in zip(starts, starts[1:]))
        assert gaps[0] >= 0.3, gaps
        # Held by the callback, the gaps would be 1.2 s and more.
        assert gaps[len(gaps) // 2] < 0.6, gaps
        with crivello.Frontier(tmp_path / "store") as f:
            c = f.counts("follow")
            assert (c["done"], c["waiting"], c["leased"]) == (len(site.pages), 0, 0)
    finally:
        site.close()


def test_a_redirect_to_another_host_is_spaced_with_that_host(tmp_path: Path) -> None:
    # Every third page is linked through a redirect on the linking page's host: the
    # redirected request goes to its target's queue (Scrapy keeps the source's download
    # slot), so that the target host, too, gets one request at a time, the delay apart.
    delay = 0.2
    site = Site(pages=90, hosts=3, latency=0.001, redirect_every=3)
    try:
        rc, log, _ = crawl(site, settings(tmp_path / "store", DOWNLOAD_DELAY=delay, **CRIVELLO))
        assert rc == 0, log[-3000:]
        counts = site.count()
        assert set(counts) == set(site.pages), f"missing {set(site.pages) - set(counts)}"
        assert max(counts.values()) == 1, {p: c for p, c in counts.items() if c > 1}
        assert site.most_in_flight == [1] * 3
        last: Dict[int, float] = {}
        close = []
        for t, h in sorted(site.hits):
            if h in last and t - last[h] < delay:
                close.append((h, round(t - last[h], 4)))
            last[h] = t
        assert not close, close
    finally:
        site.close()


def test_a_request_longer_than_its_lease_is_fetched_once(tmp_path: Path) -> None:
    # Every download takes 1.5 s, the lease 1 s: the frontier counts each request lost while
    # it is in flight and hands it out again; the scheduler gives the new lease to the
    # request it holds instead of fetching it twice, and its completion ends that lease.
    site = Site(pages=12, hosts=3, latency=1.5)
    try:
        opts = settings(tmp_path / "store", CRIVELLO_LEASE=1, DOWNLOAD_TIMEOUT=10, **CRIVELLO)
        rc, log, _ = crawl(site, opts, timeout=120)
        assert rc == 0, log[-3000:]
        counts = site.count()
        assert set(counts) == set(site.pages), f"missing {set(site.pages) - set(counts)}"
        assert max(counts.values()) == 1, {p: c for p, c in counts.items() if c > 1}
        assert "ended while it was in flight: it holds a new one" in log, log[-3000:]
        with crivello.Frontier(tmp_path / "store") as f:
            c = f.counts("follow")
            assert (c["done"], c["waiting"], c["leased"]) == (len(site.pages), 0, 0)
    finally:
        site.close()


def test_a_request_completed_after_its_lease_ended_is_not_fetched_again(tmp_path: Path) -> None:
    # Each callback works 1.5 s (blocking), the lease lasts 1 s, and each host waits 1 s
    # after a fetch (from a lease's expiry too): every request's lease ends during its
    # callback, its completion finds it no longer leased, and the frontier, which has it
    # back, hands it out again after the delay; the scheduler completes that hand-out at
    # once instead of fetching the page again.
    site = Site(pages=6, hosts=2, latency=0.001)
    try:
        opts = settings(
            tmp_path / "store", CRIVELLO_LEASE=1, DOWNLOAD_DELAY=1, **CRIVELLO
        )
        rc, log, _ = crawl(site, opts, timeout=180, args=["think=1.5"])
        assert rc == 0, log[-3000:]
        counts = site.count()
        assert set(counts) == set(site.pages), f"missing {set(site.pages) - set(counts)}"
        assert max(counts.values()) == 1, {p: c for p, c in counts.items() if c > 1}
        assert "ended before its work did" in log, log[-3000:]
        # Handed out again once completed: completed at once (the stats Scrapy logs).
        assert "'crivello/completed_late'" in log, log[-3000:]
        with crivello.Frontier(tmp_path / "store") as f:
            c = f.counts("follow")
            assert (c["done"], c["waiting"], c["leased"]) == (len(site.pages), 0, 0)
    finally:
        site.close()


def without_cascade(log: str) -> bool:
    """Whether a crawl stopped at start by a setting said why without the cascade of the
    engine's own errors that follows a failure once it began to open the spider (a store
    opened by the scheduler's `open` failed amid tracebacks of the scraper's unassigned slot
    and of the stats; what Scrapy says of any scheduler it could not build remains)."""
    cascade = ("Scraper slot not assigned", "Scraper close failure", "CoreStats.spider_closed")
    return not any(c in log for c in cascade)


def test_bad_settings_stop_the_crawl_at_start_with_what_to_do(site: Site, tmp_path: Path) -> None:
    opts = settings(tmp_path / "store", **CRIVELLO)
    del opts["CRIVELLO_DIR"]
    rc, log, _ = crawl(site, opts)
    assert "CRIVELLO_DIR is not set" in log, log[-3000:]
    # Said in a log line of its own, not only inside the traceback Scrapy buries it in.
    assert "[crivello.scrapy] ERROR: CRIVELLO_DIR is not set" in log, log[-3000:]
    assert len(site.fetches) == 0
    # Locked: another handle holds the store.
    with crivello.Frontier(tmp_path / "store"):
        rc, log, _ = crawl(site, settings(tmp_path / "store", **CRIVELLO))
        assert "is in use by another crawl" in log, log[-3000:]
        # Said on a line of its own (raised by the scheduler's open), once.
        said = [l for l in log.splitlines() if "[crivello.scrapy] ERROR:" in l]
        assert len(said) == 1 and "is in use by another crawl" in said[0], log[-3000:]
        assert rc != 0 and without_cascade(log), log[-3000:]
        # The filter alone, under Scrapy's own scheduler, the same.
        rc, log, _ = crawl(
            site,
            settings(tmp_path / "store", DUPEFILTER_CLASS=CRIVELLO["DUPEFILTER_CLASS"]),
        )
        assert "[crivello.scrapy] ERROR: CRIVELLO_DIR=" in log, log[-3000:]
        assert "is in use by another crawl" in log, log[-3000:]
        assert rc != 0 and without_cascade(log), log[-3000:]
    # A path that cannot be a directory: the store's error was buried in tracebacks.
    (tmp_path / "a-file").write_text("not a directory")
    for where in (tmp_path / "a-file", tmp_path / "a-file" / "store"):
        rc, log, _ = crawl(site, settings(where, **CRIVELLO))
        said = [l for l in log.splitlines() if "[crivello.scrapy] ERROR:" in l]
        assert len(said) == 1 and "cannot hold the store" in said[0], log[-3000:]
        assert rc != 0 and without_cascade(log), log[-3000:]
    # A store of the other kind.
    with crivello.Sieve(tmp_path / "plain") as s:
        s.push("http://a.test/")
        s.flush()
        s.pop()
    rc, log, _ = crawl(site, settings(tmp_path / "plain", **CRIVELLO))
    assert "give each use its own directory" in log, log[-3000:]
    # The filter alone on the scheduler's frontier: refused before any request is pushed.
    with crivello.Frontier(tmp_path / "frontier") as f:
        f.push(["http://a.test/"])
    alone = {"DUPEFILTER_CLASS": CRIVELLO["DUPEFILTER_CLASS"]}
    rc, log, _ = crawl(site, settings(tmp_path / "frontier", **alone))
    assert "give each use its own directory" in log, log[-3000:]
    assert "[crivello.scrapy] ERROR:" in log, log[-3000:]
    with crivello.Frontier(tmp_path / "frontier") as f:
        f.flush()
        assert f.counts()["waiting"] == 1
    rc, log, _ = crawl(site, settings(tmp_path / "l", CRIVELLO_LEASE="abc", **CRIVELLO))
    assert "CRIVELLO_LEASE='abc': not a number" in log, log[-3000:]
    # Not finite, or a lease that ends as it begins: before, the crawl started, then failed
    # every 5 s (nan) or handed the same requests out thousands of times (1e-9).
    for lease in ("nan", "1e-9"):
        rc, log, _ = crawl(site, settings(tmp_path / "l", CRIVELLO_LEASE=lease, **CRIVELLO))
        assert "at least 0.001" in log, log[-3000:]
    rc, log, _ = crawl(site, settings(tmp_path / "m", CRIVELLO_MEMORY="lots", **CRIVELLO))
    assert "CRIVELLO_MEMORY='lots'" in log, log[-3000:]
    assert rc != 0 and without_cascade(log), log[-3000:]
    # A delay that is not a number: it was taken as 0, the crawl running without one.
    rc, log, _ = crawl(site, settings(tmp_path / "d", DOWNLOAD_DELAY="nan", **CRIVELLO))
    assert "DOWNLOAD_DELAY=nan: a finite number of seconds" in log, log[-3000:]
    assert len(site.fetches) == 0


def test_an_unserialisable_request_is_an_error_naming_it(site: Site, tmp_path: Path) -> None:
    spider = tmp_path / "lambda_spider.py"
    spider.write_text(
        "import scrapy\n"
        "class LambdaSpider(scrapy.Spider):\n"
        "    name = 'lambda'\n"
        "    def __init__(self, start='', **kw):\n"
        "        super().__init__(**kw)\n"
        "        self.start_urls = [start]\n"
        "    def parse(self, response):\n"
        "        yield scrapy.Request(response.url + '?x', callback=lambda r: None)\n"
    )
    rc, log, _ = crawl(site, settings(tmp_path / "store", **CRIVELLO), spider=str(spider))
    assert "cannot store the request <GET " in log and "?x>" in log, log[-3000:]


def test_a_callback_may_return_one_request_or_a_list(site: Site, tmp_path: Path) -> None:
    spider = tmp_path / "single_spider.py"
    spider.write_text(
        "import scrapy\n"
        "class SingleSpider(scrapy.Spider):\n"
        "    name = 'single'\n"
        "    def __init__(self, start='', **kw):\n"
        "        super().__init__(**kw)\n"
        "        self.start_urls = [start]\n"
        "    def parse(self, response):\n"
        "        links = response.css('a::attr(href)').getall()\n"
        "        if response.url.endswith('/p/1'):\n"
        "            return [response.follow(h) for h in links]\n"
        "        return response.follow(links[0]) if links else None\n"
    )
    rc, log, _ = crawl(site, settings(tmp_path / "store", **CRIVELLO), spider=str(spider))
    assert rc == 0, log[-3000:]
    counts = site.count()
    # The start page's links, each followed by the first link of each page, once each.
    assert len(counts) > len(site.out[site.pages[0]]) and max(counts.values()) == 1
    with crivello.Frontier(tmp_path / "store") as f:
        c = f.counts("single")
        assert (c["waiting"], c["leased"]) == (0, 0) and c["done"] == len(counts)


def _scheduler(spider_class: type, tmp_path: Path) -> Any:
    """crivello's scheduler for a crawler of `spider_class`, its store in `tmp_path` (opened
    as Scrapy builds it; the scheduler's `open` not called)."""
    from scrapy.utils.test import get_crawler

    from crivello.scrapy import Scheduler

    crawler = get_crawler(
        spider_class,
        {
            "SCHEDULER": "crivello.scrapy.Scheduler",
            "DUPEFILTER_CLASS": "crivello.scrapy.DupeFilter",
            "CRIVELLO_DIR": str(tmp_path / "store"),
        },
    )
    return Scheduler.from_crawler(crawler)


def test_a_scheduler_closed_unopened_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    # Scrapy closes a scheduler it built when the spider's start fails before the scheduler
    # opened: no crawl was chosen, and the DEFAULT crawl's leases (another run's) stay.
    with crivello.Frontier(tmp_path / "store") as f:
        f.push(["http://a.test/"])
        assert len(f.lease(ttl=3600)) == 1

    class Spider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "unopened"

    s = _scheduler(Spider, tmp_path)
    s.close("shutdown")
    with crivello.Frontier(tmp_path / "store") as f:
        assert f.counts()["leased"] == 1


def test_requests_keep_their_callback_and_errback_by_name(tmp_path: Path) -> None:
    import pickle

    from scrapy.utils.request import request_from_dict

    class NamedSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "named"

        def parse_item(self, response: object) -> None:
            pass

        def on_error(self, failure: object) -> None:
            pass

    spider = NamedSpider()
    other = NamedSpider()
    sched = _scheduler(NamedSpider, tmp_path)
    sched.spider = spider
    for _ in range(2):  # the second time from what was remembered
        req = scrapy.Request(
            "http://a.example/x", callback=spider.parse_item, errback=spider.on_error
        )
        back = request_from_dict(pickle.loads(sched._serialise(req)), spider=spider)
        assert back.callback == spider.parse_item and back.errback == spider.on_error
        # The request itself is left as it was.
        assert req.callback == spider.parse_item and req.errback == spider.on_error
    # A method of another instance of the class is found by its name, as Scrapy finds it.
    req = scrapy.Request("http://a.example/y", callback=other.parse_item)
    back = request_from_dict(pickle.loads(sched._serialise(req)), spider=spider)
    assert back.callback == spider.parse_item and back.errback is None
    # No callback stays none; a function that is no method is refused, naming the request.
    back = request_from_dict(
        pickle.loads(sched._serialise(scrapy.Request("http://a.example/z"))), spider=spider
    )
    assert back.callback is None
    with pytest.raises(ValueError, match="cannot store the request <GET http://a.example/w>"):
        sched._serialise(scrapy.Request("http://a.example/w", callback=lambda r: None))


def test_a_failed_store_stops_the_crawl_with_its_reason(tmp_path: Path) -> None:
    """A store that cannot take more (a full disk: a StorageError, then PoisonedError at every
    call) closed the spider never: the crawl logged a traceback every 5 s until killed. Now
    the first failure closes it with its reason, and nothing is pending after it."""
    from crivello.scrapy import Scheduler

    class Engine:
        def __init__(self) -> None:
            self.closed: list = []

        def close_spider(self, spider: object, reason: str) -> None:
            self.closed.append(reason)

    class Crawler:
        engine = Engine()

    class Failing:
        def lease(self, *a: object, **k: object) -> list:
            raise crivello.PoisonedError("the frontier is poisoned")

    s = Scheduler(Crawler(), None, str(tmp_path / "store"))  # type: ignore[arg-type]
    s.spider = object()
    s.frontier = Failing()  # type: ignore[assignment]
    assert s.next_request() is None
    assert Crawler.engine.closed == ["crivello_store_failed"]
    assert not s.has_pending_requests()
    assert s.next_request() is None and Crawler.engine.closed == ["crivello_store_failed"]
    # A request yielded by a callback still running is refused quietly, the store not
    # touched (its push raised PoisonedError into the engine).
    assert s.enqueue_request(scrapy.Request("http://a.example/late")) is False

    # Closing after the failure lets the handle go and raises nothing (it flushed the
    # completions first, whose PoisonedError Scrapy logged as a close failure, and never
    # reached the store's close): the release and the close are tried, each failure let go.
    calls: list[str] = []

    class FailedStore(Failing):
        def complete(self, *a: object, **k: object) -> None:
            calls.append("complete")
            raise crivello.PoisonedError("the frontier is poisoned")

        def release(self, *a: object, **k: object) -> int:
            calls.append("release")
            raise crivello.PoisonedError("the frontier is poisoned")

        def close(self) -> None:
            calls.append("close")
            raise crivello.PoisonedError("the frontier is poisoned")

    class Filter:
        def close(self, reason: str) -> None:
            calls.append(reason)

    s.frontier = FailedStore()  # type: ignore[assignment]
    s.df = Filter()
    s.close("crivello_store_failed")
    assert calls == ["release", "close", "crivello_store_failed"]
    # Completions waiting are not made: the requests yielded since the failure were
    # dropped, and their parents must be fetched again to yield them again.
    calls.clear()
    s.frontier = FailedStore()  # type: ignore[assignment]
    s._to_complete.append(7)
    s.close("crivello_store_failed")
    assert calls == ["release", "close", "crivello_store_failed"], calls

    # A Scrapy whose engine closes through close_spider_async (2.14 and later): that is
    # called, and its failure is logged.
    closed: list = []

    class AsyncEngine:
        async def close_spider_async(self, *, reason: str = "cancelled") -> None:
            closed.append(reason)

    class AsyncCrawler:
        engine = AsyncEngine()

    s = Scheduler(AsyncCrawler(), None, str(tmp_path / "store2"))  # type: ignore[arg-type]
    s.spider = object()
    s.frontier = Failing()  # type: ignore[assignment]

    async def in_a_crawls_loop() -> None:
        import asyncio

        assert s.next_request() is None
        for _ in range(3):
            await asyncio.sleep(0)

    import asyncio

    asyncio.run(in_a_crawls_loop())
    assert closed == ["crivello_store_failed"]


def test_a_request_without_a_host_is_scheduled(tmp_path: Path) -> None:
    # A `file:` request has no host, and so no download slot: its queue is the frontier's
    # default one (a key is never empty), and it is handed out as any other.
    class LocalSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "local"

    spider = LocalSpider()
    sched = _scheduler(LocalSpider, tmp_path)
    sched.open(spider)
    assert sched.enqueue_request(scrapy.Request((tmp_path / "page.html").as_uri()))
    assert sched.enqueue_request(scrapy.Request("data:,hello"))
    # One queue, one request of it at a time (the policy's), the other waiting behind it.
    leased = sched.frontier.lease(crawl=sched.crawl)
    assert [lease.key for lease in leased] == ["_DEFAULT_"]
    assert sched.frontier.counts(sched.crawl)["waiting"] == 1


def test_a_request_scheduled_with_no_origin_bypasses_the_filter_in_every_run(
    site: Site, tmp_path: Path
) -> None:
    """A ``dont_filter=True`` request that no request yielded and that is not a start request
    (scheduled from a signal: a poll) is new in each run, as with Scrapy's scheduler; it was
    numbered from the process's start, so a second run's polls were taken for the first's
    and dropped. The start request is still not fetched again by the second run."""
    if not hasattr(__import__("scrapy.spidermiddlewares", fromlist=["start"]), "start"):
        pytest.skip("this Scrapy does not mark its start requests (2.13 does)")
    poll = str(Path(__file__).parent / "poll_spider.py")
    store = tmp_path / "poll"
    start = site.pages[0]
    fetched = []
    for _ in range(2):
        before = len(site.fetches)
        code, log, _ = crawl(site, {**CRIVELLO, **settings(store)}, spider=poll)
        assert code == 0, log[-2000:]
        fetched.append(sum(1 for _, _, p in site.fetches[before:] if p == start))
    # The start request and three polls, then three polls.
    assert fetched == [4, 3], fetched


def test_a_slot_longer_than_a_key_is_scheduled_in_a_queue_of_its_own(tmp_path: Path) -> None:
    """A host or a download slot longer than a frontier's key (255 bytes) raised out of
    enqueue_request, and a start request's shut the crawl down: it is now a shortened key
    with a hash of the whole, two such slots two queues."""
    from crivello.scrapy import _key_of

    class LongSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "long"

    spider = LongSpider()
    sched = _scheduler(LongSpider, tmp_path)
    sched.open(spider)
    host = "a" * 300 + ".test"
    assert sched.enqueue_request(scrapy.Request(f"http://{host}/"))
    for i, slot in enumerate(["x" * 256, "x" * 255 + "y", "é" * 200]):
        req = scrapy.Request(f"http://b.example/{i}", meta={"download_slot": slot})
        assert sched.enqueue_request(req)
    keys = {_key_of(host), _key_of("x" * 256), _key_of("x" * 255 + "y"), _key_of("é" * 200)}
    assert len(keys) == 4 and all(len(k.encode()) <= 255 for k in keys)
    assert _key_of("b.example") == "b.example"
    sched.frontier.flush()
    queued = {q["key"] for q in sched.frontier.queues(crawl=sched.crawl)}
    assert queued == keys


def test_a_failure_without_an_errback_goes_on_as_the_same_failure(tmp_path: Path) -> None:
    """The errback put in place of a request's missing one returns the failure it got, so
    that Scrapy (2.11 compares it with the download's) logs a download error only, not a
    spider error too."""
    from twisted.python.failure import Failure

    from crivello.scrapy import _Completing

    class FailSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "fail"

    sched = _scheduler(FailSpider, tmp_path)
    sched.open(FailSpider())
    try:
        raise ConnectionRefusedError("refused")
    except ConnectionRefusedError:
        failure = Failure()
    assert _Completing(sched, 1, None, True)(failure) is failure


def test_the_duplicate_filter_takes_a_subclasss_own_fingerprint(tmp_path: Path) -> None:
    import warnings

    from crivello.scrapy import DupeFilter

    class ByPath(DupeFilter):
        def request_fingerprint(self, request: Any) -> str:
            return str(request.url.split("?")[0].encode().hex())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Scrapy 2.13 and later deprecate the override
        df = ByPath(str(tmp_path / "seen"))
    df.open()
    assert not df.request_seen(scrapy.Request("http://a.example/x?1"))
    assert df.request_seen(scrapy.Request("http://a.example/x?2"))
    assert not df.request_seen(scrapy.Request("http://a.example/y?1"))
    df.close("finished")

    class ByPathBytes(DupeFilter):
        def request_fingerprint(self, request: Any) -> Any:
            return request.url.split("?")[0].encode()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = ByPathBytes(str(tmp_path / "seen-bytes"))
    assert df.fingerprint_of(scrapy.Request("http://a.example/x?1")) == b"http://a.example/x".hex()
    df.open()
    assert not df.request_seen(scrapy.Request("http://a.example/x?1"))
    assert df.request_seen(scrapy.Request("http://a.example/x?2"))
    df.close("finished")

    # A fingerprint holding a newline, which the store takes in no entry, is kept as its
    # bytes' hex: still a duplicate of itself, still distinct from the others.
    class ByLines(DupeFilter):
        def request_fingerprint(self, request: Any) -> str:
            host, _, rest = request.url.partition("://")[2].partition("/")
            return host + "\n" + rest.split("?")[0]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = ByLines(str(tmp_path / "seen-lines"))
    assert df.fingerprint_of(scrapy.Request("http://a.example/x?1")) == b"a.example\nx".hex()
    df.open()
    assert not df.request_seen(scrapy.Request("http://a.example/x?1"))
    assert df.request_seen(scrapy.Request("http://a.example/x?2"))
    assert not df.request_seen(scrapy.Request("http://a.example/y"))
    df.close("finished")


def test_the_duplicate_filter_alone_makes_a_burst_durable_without_more_requests(
    tmp_path: Path,
) -> None:
    """Fingerprints were synced only by a later request_seen: a burst followed by a quiet
    spell (downloads only) was lost by a kill -9. A timer now syncs them within a second."""
    script = tmp_path / "burst.py"
    script.write_text(
        "import os, sys\n"
        "from twisted.internet import reactor\n"
        "import scrapy\n"
        "from crivello.scrapy import DupeFilter\n"
        "df = DupeFilter(sys.argv[1])\n"
        "df.open()\n"
        "for i in range(200):\n"
        "    assert not df.request_seen(scrapy.Request(f'http://a.example/{i}'))\n"
        "reactor.callLater(2.5, lambda: os.kill(os.getpid(), 9))\n"
        "reactor.run()\n"
    )
    store = tmp_path / "seen"
    proc = subprocess.run(
        [sys.executable, str(script), str(store)], capture_output=True, timeout=60
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    from crivello.scrapy import DupeFilter

    df = DupeFilter(str(store))
    df.jobdir = True  # (no warning about an earlier run)
    df.open()
    seen = sum(df.request_seen(scrapy.Request(f"http://a.example/{i}")) for i in range(200))
    df.close("finished")
    assert seen == 200


def test_a_spiders_download_delay_attribute_is_the_hosts_delay(tmp_path: Path) -> None:
    """Scrapy before 2.18 does not copy a spider's ``download_delay`` into DOWNLOAD_DELAY
    (its downloader honours it all the same): the frontier's delay follows it too."""

    class SlowSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "slow"
        download_delay = 2.0

    sched = _scheduler(SlowSpider, tmp_path)
    sched.open(SlowSpider())
    assert sched.frontier.policy(sched.crawl).delay == 2.0


def test_a_crawl_without_twisteds_reactor_fetches_every_page(site: Site, tmp_path: Path) -> None:
    """Scrapy 2.14 and later may run on asyncio alone (``TWISTED_REACTOR_ENABLED=False``):
    the scheduler's wake-ups imported Twisted's reactor, failing at each request and leaving
    the crawl to the engine's 5-second heartbeat."""
    from scrapy.settings import default_settings

    if not hasattr(default_settings, "TWISTED_REACTOR_ENABLED"):
        pytest.skip("this Scrapy always runs on Twisted's reactor")
    delay = 0.02
    opts = settings(
        tmp_path / "store", DOWNLOAD_DELAY=delay, TWISTED_REACTOR_ENABLED="False", **CRIVELLO
    )
    started = time.monotonic()
    rc, log, _ = crawl(site, opts)
    took = time.monotonic() - started
    assert rc == 0, log[-3000:]
    assert "ImportError" not in log and "ERROR" not in log, log[-3000:]
    counts = site.count()
    assert set(counts) == set(site.pages) and max(counts.values()) == 1
    assert per_host_gaps(site) >= delay
    # 500 pages over 4 hosts, 20 ms apart: about 3 s; riding the heartbeat takes far longer.
    print(f"crawl without the reactor: {took:.1f} s")


def test_a_paused_store_is_said_at_open_and_a_filter_without_a_directory_is_named(
    tmp_path: Path, caplog: Any
) -> None:
    from crivello.scrapy import DupeFilter, SettingError

    class PausedSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "paused"

    with crivello.Frontier(tmp_path / "store") as f:
        f.pause()
    sched = _scheduler(PausedSpider, tmp_path)
    with caplog.at_level("WARNING"):
        sched.open(PausedSpider())
    assert "is paused" in caplog.text and "resume" in caplog.text
    sched.frontier.close()
    with pytest.raises(SettingError, match="CRIVELLO_DIR"):
        DupeFilter().open()


def test_the_filters_timer_runs_once_and_is_never_cancelled_after(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Twisted's reactor (Scrapy before 2.14, with no helper of its own) refuses to cancel a
    call that ran: the timer's sync cancelled itself, raised, and every later sync and the
    close raised too."""
    from twisted.internet.error import AlreadyCalled

    import crivello.scrapy as cs

    class Delayed:
        def __init__(self, fn: Any) -> None:
            self.fn, self.called = fn, False

        def run(self) -> None:
            self.called = True
            self.fn()

        def cancel(self) -> None:
            if self.called:
                raise AlreadyCalled()

    calls: List[Delayed] = []

    def later(delay: float, fn: Any) -> Delayed:
        calls.append(Delayed(fn))
        return calls[-1]

    monkeypatch.setattr(cs, "_call_later", later)
    df = cs.DupeFilter(str(tmp_path / "seen"))
    df.open()
    assert not df.request_seen(scrapy.Request("http://a.example/1"))
    assert len(calls) == 1
    calls[0].run()  # the quiet spell's sync
    assert not df.request_seen(scrapy.Request("http://a.example/2"))
    assert len(calls) == 2
    calls[1].run()
    df._synced -= 2  # a second later: the request's own sync
    assert not df.request_seen(scrapy.Request("http://a.example/3"))
    assert not df.request_seen(scrapy.Request("http://a.example/4"))
    df.close("finished")
    df = cs.DupeFilter(str(tmp_path / "seen"))
    df.jobdir = True
    df.open()
    assert all(df.request_seen(scrapy.Request(f"http://a.example/{i}")) for i in range(1, 5))
    df.close("finished")


def test_the_resume_log_counts_the_requests_pushed_last(tmp_path: Path, caplog: Any) -> None:
    """Requests pushed just before a stop (a clean close keeps them unmerged, for the next
    flush), not yet in their queues, were left out of the resume's count."""
    store = tmp_path / "store"
    script = (
        "import os, sys, crivello\n"
        "f = crivello.Frontier(sys.argv[1])\n"
        "f.push_new([(f'id{i}', 'a.example', b'') for i in range(5)], crawl='resumed')\n"
        "f.close()\n"
    )
    subprocess.run([sys.executable, "-c", script, str(store)], check=True, timeout=60)

    class ResumedSpider(scrapy.Spider):  # type: ignore[misc,name-defined]
        name = "resumed"

    sched = _scheduler(ResumedSpider, tmp_path)
    with caplog.at_level("INFO"):
        sched.open(ResumedSpider())
    assert "5 requests waiting" in caplog.text, caplog.text
    sched.frontier.close()
