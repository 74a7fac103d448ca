"""Scrapy with crivello's scheduler against Scrapy's own schedulers: crawl speed and memory.

Run it with the Python that has Scrapy and crivello installed::

    python python/bench/scrapy_bench.py crawl              # 10^5 pages, 64 hosts
    python python/bench/scrapy_bench.py crawl --pages 2e4 --repeat 3
    python python/bench/scrapy_bench.py memory             # 10^6 pending requests
    python python/bench/scrapy_bench.py memory --requests 1e5 --schedulers default,crivello

It measures what the benchmark of the issue asks for:

- ``crawl``: pages per second of a real Scrapy crawl of a synthetic local site with each
  scheduler: (a) Scrapy's default in-memory scheduler, (b) the same with ``JOBDIR`` (its
  disk queues), (c) ``crivello.scrapy.Scheduler`` with ``crivello.scrapy.DupeFilter``.
  The site has N pages (``--pages``, default 10^5) on H loopback hosts (``--hosts``,
  default 64: 127.0.0.2, 127.0.0.3, ...), all on one port, page ``i`` at ``/p/<i>`` on a
  host drawn from ``--seed``. Each page links to 8 pages: its children in a tree
  (``4i+1 .. 4i+4``, so that every page is reachable from page 0) and pseudo-random pages
  (mostly duplicates of pages found otherwise). The site is served by a separate process
  (an asyncio server, HTTP/1.1 keep-alive), which counts the fetches of each page: every
  crawl must fetch every page exactly once. Each crawl runs in a fresh subprocess
  (``CrawlerProcess``, ``CONCURRENT_REQUESTS`` 32, ``CONCURRENT_REQUESTS_PER_DOMAIN`` 1,
  ``DOWNLOAD_DELAY`` ``--delay`` (0 by default) not randomised, no retries, no cookies,
  the default reactor) whose spider follows every link from page 0 (with ``--wait S``,
  each callback first awaits S seconds without blocking, as one that calls another
  service does). ``--sites`` and
  ``--locality`` shape the site as sites of their own (``SiteGraph``), ``--zipf S`` gives
  those sites sizes spread as real sites' are (in proportion to ``1 / (h + 1) ** S``), and
  ``--latency`` makes the server answer each page that long after its request, as a remote
  server does (without it, every answer is immediate and the crawl is bound by the
  crawler's processor, whatever the scheduler does with hosts); the server records
  the gaps between two fetches of a host, and a crivello crawl with a gap below the delay
  fails. The rate is pages / seconds from the first response to the spider's close
  (the scheduler's close included); engine start to close is shown too. Repetitions are
  interleaved (a, b, c, a, b, c, ...) so that drift of the machine hits each alike. Also
  shown: each crawl process's peak RSS (``ru_maxrss``) and CPU seconds (user + system).
- ``memory``: the RSS of a scheduler holding M pending requests (``--requests``, default
  10^6, over 10^4 hosts), each scheduler in a fresh subprocess: a crawler from
  ``scrapy.utils.test.get_crawler``, the scheduler from ``Scheduler.from_crawler``, opened,
  then M distinct requests enqueued (built one by one: building them is in the time). It
  shows the RSS just before enqueueing (baseline), the peak (``VmHWM``, reset just before
  enqueueing), their difference (the scheduler's own), the enqueue rate, then a few
  requests dequeued (a check, and for crivello the first merge of what was pushed), the
  pending count after, the close and the size of the state on disk.

State directories (JOBDIR, CRIVELLO_DIR) go under ``--workdir`` (default: the system's
temporary directory); the file system they are on is printed, since a tmpfs would flatter
the disk-based schedulers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Tuple, cast

SCHEDULERS = ("default", "jobdir", "crivello", "aware")
DEFAULT_SCHEDULERS = ("default", "jobdir", "crivello")
LABELS = {
    "default": "scrapy default (memory)",
    "jobdir": "scrapy JOBDIR (disk)",
    "crivello": "crivello",
    "aware": "scrapy downloader-aware",
}
CRIVELLO_SETTINGS = {
    "SCHEDULER": "crivello.scrapy.Scheduler",
    "DUPEFILTER_CLASS": "crivello.scrapy.DupeFilter",
}
ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
MIB = 1024 * 1024


# Small helpers.


def count_arg(text: str) -> int:
    """A count given as ``100000``, ``100_000`` or ``1e5``."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if not value.is_integer() or value < 0:
        raise argparse.ArgumentTypeError(f"not a whole count: {text!r}")
    return int(value)


def share_arg(text: str) -> float:
    """A share from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a share from 0 to 1, not {text!r}")
    return value


def schedulers_arg(text: str) -> List[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    for name in names:
        if name not in SCHEDULERS:
            raise argparse.ArgumentTypeError(f"{name!r}: one of {', '.join(SCHEDULERS)}")
    return names


def filesystem_of(path: str) -> Tuple[str, str, str]:
    """The mount point, file system type and device of the file system holding ``path``."""
    real = os.path.realpath(path)
    best = ("/", "?", "?")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                device, mount, fstype = line.split()[:3]
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[0]):
                    best = (mount, fstype, device)
    except OSError:
        pass
    return best


def disk_usage(path: Path) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def proc_status_kib(field: str) -> int:
    """A ``kB`` field of /proc/self/status (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux 4.0+); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def versions() -> str:
    import scrapy
    import twisted

    import crivello

    try:
        from importlib.metadata import version

        crivello_version = version("crivello")
    except Exception:  # noqa: BLE001 - only informative
        crivello_version = "?"
    return (
        f"Python {platform.python_version()}, Scrapy {scrapy.__version__}, "
        f"Twisted {twisted.__version__}, crivello {crivello_version} "
        f"({Path(crivello.__file__).parent})"
    )


def machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load}"


@dataclass
class Child:
    """A finished subprocess: its exit status, peak RSS and CPU time."""

    returncode: int
    max_rss_kib: int
    cpu_seconds: float
    wall_seconds: float


def run_child(args: Sequence[str], log: Path, timeout: float) -> Child:
    """Runs this script with ``args`` in a fresh Python, its output to ``log``, and reaps it
    with ``wait4`` to get its own resource usage (not that of every child)."""
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    start = time.monotonic()
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    return Child(
        returncode=p.returncode,
        max_rss_kib=usage.ru_maxrss,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        wall_seconds=time.monotonic() - start,
    )


def log_tail(log: Path, lines: int = 30) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# The site.


def site_starts(pages: int, hosts: int, zipf: float) -> List[int]:
    """The first page of each site and the end: sites of one size, or (``zipf`` > 0) of sizes
    in proportion to ``1 / (h + 1) ** zipf``, each at least one page."""
    if zipf <= 0:
        return [h * pages // hosts for h in range(hosts + 1)]
    weights = [1.0 / (h + 1) ** zipf for h in range(hosts)]
    spare = pages - hosts
    total = sum(weights)
    sizes = [1 + int(spare * w / total) for w in weights]
    sizes[0] += pages - sum(sizes)  # what rounding left over, to the largest
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + size)
    return starts


class SiteGraph:
    """The synthetic site: page ``i`` on host ``host_of[i]``, linking to 8 pages.

    Two shapes. By default each page is on a host drawn at random, and the pages form one
    tree over all hosts (page ``i`` links to ``4i+1 .. 4i+4``). With ``sites``, each host is
    a site of its own: host ``h`` holds a block of consecutive pages, its first page the
    site's home page, the block a tree of its own (the page at place ``j`` of the block links
    to places ``4j+1 .. 4j+4``), and each home page also links to the home pages of hosts
    ``4h+1 .. 4h+4``, so that a crawl finds new pages of a site many at a time, as a crawl of
    real sites does. The sites are of one size, or with ``zipf`` s > 0 of sizes in
    proportion to ``1 / (h + 1) ** s`` (host 0, where the crawl starts, the largest; at least
    one page each), as the sizes of real sites are spread. Either way the remaining links of
    a page (up to 8) are drawn at random, a share ``locality`` of them on the page's own
    host."""

    LINKS = 8

    def __init__(
        self,
        pages: int,
        hosts: int,
        seed: int,
        locality: float = 0.0,
        sites: bool = False,
        zipf: float = 0.0,
    ) -> None:
        if pages < 1:
            raise ValueError("at least one page")
        if not 1 <= hosts <= 250:
            raise ValueError("1 to 250 hosts (127.0.0.2 to 127.0.0.251)")
        if sites and pages < hosts:
            raise ValueError("--sites needs at least one page a host")
        if zipf and not sites:
            raise ValueError("--zipf shapes the sites of --sites")
        self.pages = pages
        self.hosts = hosts
        self.sites = sites
        rng = random.Random(seed)
        if sites:
            self.first = site_starts(pages, hosts, zipf)
            self.host_of = array("H", bytes(2 * pages))
            for h in range(hosts):
                for page in range(self.first[h], self.first[h + 1]):
                    self.host_of[page] = h
        else:
            self.host_of = array("H", (rng.randrange(hosts) for _ in range(pages)))
            self.host_of[0] = 0  # the start page: on the first host
        # LINKS pseudo-random targets per page, never page 0 (its request, a start request,
        # bypasses the duplicate filter: a link to it would fetch it again); a page uses as
        # many as it lacks tree links.
        top = max(pages, 2)
        self.extra = array("I", (rng.randrange(1, top) for _ in range(pages * self.LINKS)))
        if locality > 0:
            # A share ``locality`` of the pseudo-random links goes to a page of the linking
            # page's own host, as most links of a real site do.
            of_host: List[List[int]] = [[] for _ in range(hosts)]
            for page in range(1, pages):
                of_host[self.host_of[page]].append(page)
            for page in range(pages):
                own = of_host[self.host_of[page]]
                if not own:
                    continue
                for k in range(page * self.LINKS, (page + 1) * self.LINKS):
                    if rng.random() < locality:
                        self.extra[k] = own[rng.randrange(len(own))]

    def tree(self, page: int) -> List[int]:
        """The page's links that make every page reachable from page 0."""
        if not self.sites:
            return list(range(4 * page + 1, min(4 * page + 5, self.pages)))
        host = self.host_of[page]
        first, end = self.first[host], self.first[host + 1]
        j = page - first
        links = list(range(first + 4 * j + 1, min(first + 4 * j + 5, end)))
        if j == 0:
            links += [self.first[h] for h in range(4 * host + 1, min(4 * host + 5, self.hosts))]
        return links

    def links(self, page: int) -> List[int]:
        tree = self.tree(page)
        start = page * self.LINKS
        extra = self.extra[start : start + max(0, self.LINKS - len(tree))]
        return tree + [p for p in extra if p != page and p < self.pages]

    @staticmethod
    def address(host: int) -> str:
        return f"127.0.0.{host + 2}"

    def url(self, page: int, port: int) -> str:
        return f"http://{self.address(self.host_of[page])}:{port}/p/{page}"


FILLER = (
    "<p>A page of a synthetic site for crawling benchmarks: a title, a paragraph, and a "
    "list of links to other pages of the site, some found by other pages too.</p>"
)


class Site:
    """The site's pages as HTTP responses, and the count of each page's fetches."""

    def __init__(self, graph: SiteGraph, port: int, latency: float = 0.0) -> None:
        self.graph = graph
        self.port = port
        # Seconds each answer waits before it is sent, as a remote server's would.
        self.latency = latency
        self.fetches = array("I", bytes(4 * graph.pages))
        self.bad = 0
        # Each host's last fetch (monotonic seconds), and the gaps between two fetches of a host.
        self.last = [float("-inf")] * graph.hosts
        self.gaps = array("d")
        self.addresses = {graph.address(h): h for h in range(graph.hosts)}
        # Each host's pages asked for and not answered yet, and the most there were at once
        # (with --latency; else every answer is sent as its request is read).
        self.in_flight = [0] * graph.hosts
        self.most_in_flight = 0

    def page(self, host: int, path: bytes) -> Tuple[int, bytes, str]:
        """Status, body and content type of a GET of ``path`` on ``host``."""
        if path.startswith(b"/p/"):
            try:
                page = int(path[3:])
            except ValueError:
                page = -1
            if 0 <= page < self.graph.pages and self.graph.host_of[page] == host:
                self.fetches[page] += 1
                self.in_flight[host] += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight[host])
                now = time.monotonic()
                if self.last[host] != float("-inf"):
                    self.gaps.append(now - self.last[host])
                self.last[host] = now
                return 200, self.html(page), "text/html; charset=utf-8"
        elif path == b"/stats":
            return 200, json.dumps(self.stats()).encode(), "application/json"
        elif path == b"/reset":
            self.fetches = array("I", bytes(4 * self.graph.pages))
            self.bad = 0
            self.last = [float("-inf")] * self.graph.hosts
            self.gaps = array("d")
            self.in_flight = [0] * self.graph.hosts
            self.most_in_flight = 0
            return 200, b"{}", "application/json"
        self.bad += 1
        return 404, b"not found\n", "text/plain"

    def html(self, page: int) -> bytes:
        items = "".join(
            f'<li><a href="{self.graph.url(p, self.port)}">page {p}</a></li>'
            for p in self.graph.links(page)
        )
        return (
            f"<!DOCTYPE html>\n<html><head><title>Page {page}</title></head><body>"
            f"<h1>Page {page}</h1>{FILLER}<ul>{items}</ul></body></html>\n"
        ).encode()

    def stats(self) -> Dict[str, Any]:
        fetched = sum(1 for c in self.fetches if c)
        twice = sum(1 for c in self.fetches if c > 1)
        missing = [i for i, c in enumerate(self.fetches) if not c][:10]
        gaps = sorted(self.gaps)

        def gap(q: float) -> float:
            return gaps[min(len(gaps) - 1, int(q * len(gaps)))] if gaps else float("nan")

        return {
            "most_in_flight": self.most_in_flight,
            "gap_min": gap(0.0),
            "gap_median": gap(0.5),
            "gap_p90": gap(0.9),
            "pages": self.graph.pages,
            "fetches": sum(self.fetches),
            "fetched": fetched,
            "twice": twice,
            "max": max(self.fetches),
            "missing_sample": missing,
            "bad": self.bad,
        }


class HttpProtocol(asyncio.Protocol):
    """HTTP/1.1 GETs with keep-alive, pipelined or not; no request bodies."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.transport: Optional[asyncio.Transport] = None
        self.host = -1
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        address = transport.get_extra_info("sockname")[0]
        self.host = self.site.addresses.get(address, -1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65536:
                    self.close()
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            if not self.respond(head):
                self.close()
                return

    def respond(self, head: bytes) -> bool:
        """Answers one request; whether the connection stays open."""
        assert self.transport is not None
        lines = head.split(b"\r\n")
        parts = lines[0].split()
        if len(parts) != 3:
            return False
        method, target, version = parts
        keep_alive = version == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"connection":
                value = value.strip().lower()
                keep_alive = value == b"keep-alive" or (keep_alive and value != b"close")
        if method != b"GET":
            status, body, ctype = 405, b"", "text/plain"
        else:
            status, body, ctype = self.site.page(self.host, target)
        # A page's answer ends its fetch as the server counts them: now, or once sent.
        page = status == 200 and target.startswith(b"/p/")
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}[status]
        answer = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        ).encode() + body
        if self.site.latency > 0 and target.startswith(b"/p/"):
            # Sent later, in the order the requests came (each waits as long), and the
            # connection closed after it if it is not kept.
            loop = asyncio.get_running_loop()
            loop.call_later(self.site.latency, self.send, answer, keep_alive, page)
            return True
        if page:
            self.site.in_flight[self.host] -= 1
        self.transport.write(answer)
        return keep_alive

    def send(self, answer: bytes, keep_alive: bool, page: bool) -> None:
        if page:
            self.site.in_flight[self.host] -= 1
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(answer)
        if not keep_alive:
            self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(graph: SiteGraph, latency: float = 0.0) -> None:
    """Listens on every host's address on one port, prints ``PORT <n>``, serves forever."""
    loop = asyncio.get_running_loop()
    addresses = [graph.address(h) for h in range(graph.hosts)]
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = int(probe.getsockname()[1])
        site = Site(graph, port, latency)
        try:
            server = await loop.create_server(
                lambda: HttpProtocol(site), host=addresses, port=port, backlog=1024
            )
        except OSError:
            continue  # the port was taken on another address meanwhile: another one
        print(f"PORT {port}", flush=True)
        async with server:
            await server.serve_forever()
        return
    raise RuntimeError("no port free on every address")


class Server:
    """The site's server, in its own process."""

    def __init__(
        self,
        pages: int,
        hosts: int,
        seed: int,
        locality: float,
        sites: bool,
        zipf: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "_serve",
            f"--pages={pages}",
            f"--hosts={hosts}",
            f"--seed={seed}",
            f"--locality={locality}",
            f"--zipf={zipf}",
            f"--latency={latency}",
            *(["--sites"] if sites else []),
        ]
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError("the site's server did not start")
        self.port = int(line[1])
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get(self, path: str) -> Dict[str, Any]:
        with self.opener.open(f"http://127.0.0.2:{self.port}{path}", timeout=60) as r:
            return cast(Dict[str, Any], json.loads(r.read()))

    def reset(self) -> None:
        self.get("/reset")

    def stats(self) -> Dict[str, Any]:
        return self.get("/stats")

    def cpu_seconds(self) -> float:
        """CPU time the server process used so far (from /proc)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# One crawl, in its own process.


def crawl_settings(kind: str, state: Path, args: argparse.Namespace) -> Dict[str, Any]:
    settings: Dict[str, Any] = {
        "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": args.delay,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "LOG_LEVEL": args.log_level,
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,
        "HTTPPROXY_ENABLED": False,
    }
    if kind == "jobdir":
        settings["JOBDIR"] = str(state)
    elif kind == "crivello":
        settings.update(CRIVELLO_SETTINGS)
        settings["CRIVELLO_DIR"] = str(state)
    elif kind == "aware":
        settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.DownloaderAwarePriorityQueue"
    return settings


def crawl_one(args: argparse.Namespace) -> None:
    """The ``_crawl-one`` subcommand: one crawl of the site from ``args.start``; writes its
    figures to ``args.result`` as JSON."""
    import scrapy
    from scrapy import signals
    from scrapy.crawler import Crawler, CrawlerProcess
    from scrapy.http import Response

    clock: Dict[str, float] = {}

    class BenchSpider(scrapy.Spider):
        """Follows every link of every page."""

        name = "bench"
        pages = 0

        @classmethod
        def from_crawler(cls, crawler: Crawler, *a: Any, **kw: Any) -> BenchSpider:
            spider = super().from_crawler(crawler, *a, **kw)
            crawler.signals.connect(spider.engine_started, signal=signals.engine_started)
            crawler.signals.connect(spider.spider_closed, signal=signals.spider_closed)
            return spider

        def engine_started(self) -> None:
            clock["engine_started"] = time.monotonic()

        def spider_closed(self) -> None:
            clock["spider_closed"] = time.monotonic()

        def parse(self, response: Response, **kwargs: Any) -> Any:
            if not self.pages:
                clock["first_response"] = time.monotonic()
            clock["last_response"] = time.monotonic()
            self.pages += 1
            if args.wait > 0:
                return self.after_a_wait(response)
            return self.links(response)

        def links(self, response: Response) -> Iterator[scrapy.Request]:
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

        async def after_a_wait(self, response: Response) -> AsyncIterator[scrapy.Request]:
            # A callback that awaits another service (not blocking: the downloader goes on).
            await asyncio.sleep(args.wait)
            for request in self.links(response):
                yield request

    state = Path(args.state)
    process = CrawlerProcess(crawl_settings(args.scheduler, state, args))
    crawler = process.create_crawler(BenchSpider)
    process.crawl(crawler, start_urls=[args.start])
    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    process.start()
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    spider = cast(BenchSpider, crawler.spider)
    assert crawler.stats is not None
    stats = crawler.stats.get_stats()
    keep = (
        "dupefilter/filtered",
        "scheduler/enqueued",
        "scheduler/dequeued",
        "downloader/response_count",
        "log_count/WARNING",
        "log_count/ERROR",
        "finish_reason",
    )
    result = {
        "pages": spider.pages,
        "clock": clock,
        "stats": {k: stats.get(k, 0) for k in keep},
        "state_bytes": disk_usage(state),
    }
    Path(args.result).write_text(json.dumps(result, default=str))


# The crawl benchmark.


@dataclass
class CrawlRun:
    rep: int
    kind: str
    pages: int
    seconds: float
    engine_seconds: float
    child: Child
    checked: bool
    problem: str
    stats: Dict[str, Any]
    state_bytes: int
    site: Dict[str, Any]

    @property
    def rate(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0


def check_fetches(
    stats: Dict[str, Any], pages: int, fetched_by_spider: int, delay: float, polite: bool
) -> str:
    """What is wrong with a crawl's fetches, or ``""``; ``polite``: one fetch of a host at a
    time is checked (seen at the server with ``--latency`` only)."""
    problems = []
    if polite and stats["most_in_flight"] > 1:
        problems.append(f"{stats['most_in_flight']} fetches of one host at once")
    # Two fetches of a host closer than the delay (a millisecond of slack: the server sees
    # the request a little after the crawler sent it, and not always as late).
    if delay > 0 and stats["gap_min"] < delay - 0.001:
        problems.append(f"two fetches of a host {stats['gap_min']:.4f} s apart")
    if stats["fetched"] != pages:
        problems.append(
            f"{pages - stats['fetched']} pages never fetched (e.g. {stats['missing_sample']})"
        )
    if stats["twice"]:
        problems.append(f"{stats['twice']} pages fetched more than once (max {stats['max']})")
    if stats["bad"]:
        problems.append(f"{stats['bad']} requests for no page")
    if fetched_by_spider != pages:
        problems.append(f"the spider parsed {fetched_by_spider} pages, not {pages}")
    return "; ".join(problems)


def bench_crawl(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="crivello-bench-", dir=args.workdir))
    mount, fstype, device = filesystem_of(str(work))
    shape = ", each host a site" if args.sites else ""
    if args.zipf:
        sizes = site_starts(args.pages, args.hosts, args.zipf)
        shape += f" of Zipf sizes (s {args.zipf}: the largest {sizes[1] - sizes[0]} pages)"
    if args.latency:
        shape += f", answers after {args.latency} s"
    print(f"crawl: {args.pages} pages on {args.hosts} hosts (seed {args.seed}, locality "
          f"{args.locality}{shape}), CONCURRENT_REQUESTS {args.concurrency}, 1 per host, "
          f"DOWNLOAD_DELAY {args.delay} s, callbacks await {args.wait} s, repeat {args.repeat}")
    print(versions())
    print(machine())
    print(f"state directories under {work}: {fstype} ({device} on {mount})")
    if fstype in ("tmpfs", "ramfs"):
        print("  warning: a RAM file system; give --workdir on a disk for a fair JOBDIR/crivello")
    started = time.monotonic()
    server = Server(
        args.pages, args.hosts, args.seed, args.locality, args.sites, args.zipf, args.latency
    )
    start_url = f"http://{SiteGraph.address(0)}:{server.port}/p/0"
    runs: List[CrawlRun] = []
    try:
        for rep in range(1, args.repeat + 1):
            for kind in args.schedulers:
                run = crawl_run(args, work, server, start_url, rep, kind)
                runs.append(run)
                status = "ok" if run.checked else f"FAILED: {run.problem}"
                print(
                    f"  [{rep}] {LABELS[kind]:<24} {run.pages:>8} pages {run.seconds:8.2f} s "
                    f"{run.rate:9.1f} pages/s  {status}",
                    flush=True,
                )
        server_cpu = server.cpu_seconds()
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print_crawl_table(runs, args.schedulers)
    if args.delay > 0:
        print("note: the delays differ: crivello's runs from the response (checked at the "
              "server), Scrapy's own from the start of the previous download in the crawler")
    print(f"\nserver CPU: {server_cpu:.1f} s over the whole run; "
          f"total time {time.monotonic() - started:.0f} s")
    return 0 if all(r.checked for r in runs) else 1


def crawl_run(
    args: argparse.Namespace, work: Path, server: Server, start_url: str, rep: int, kind: str
) -> CrawlRun:
    state = work / f"{kind}-{rep}"
    state.mkdir()
    result = work / f"{kind}-{rep}.json"
    log = work / f"{kind}-{rep}.log"
    server.reset()
    child_args = [
        "_crawl-one",
        f"--scheduler={kind}",
        f"--start={start_url}",
        f"--state={state}",
        f"--result={result}",
        f"--concurrency={args.concurrency}",
        f"--log-level={args.log_level}",
        f"--delay={args.delay}",
        f"--wait={args.wait}",
    ]
    if args.profile:
        child_args.append(f"--profile={Path(args.profile) / f'{kind}-{rep}.prof'}")
    child = run_child(child_args, log, args.timeout)
    site = server.stats()
    if child.returncode != 0 or not result.exists():
        tail = log_tail(log)
        print(f"crawl {kind} failed (exit {child.returncode}); log tail:\n{tail}")
        return CrawlRun(rep, kind, 0, 0.0, 0.0, child, False, "crashed", {}, 0, site)
    data = json.loads(result.read_text())
    clock = data["clock"]
    seconds = clock["spider_closed"] - clock["first_response"]
    engine_seconds = clock["spider_closed"] - clock["engine_started"]
    # crivello's delay is counted from the response, and held at the server (checked);
    # Scrapy's own from the start of the previous download in the crawler, which the server
    # may see closer (the gaps are shown, not checked). Likewise one fetch of a host at a
    # time: checked of crivello, shown of the others (Scrapy 2.19's downloader sends every
    # request queued for a host at once when its delay is 0, CONCURRENT_REQUESTS_PER_DOMAIN
    # notwithstanding).
    delay = args.delay if kind == "crivello" else 0.0
    problem = check_fetches(site, args.pages, data["pages"], delay, kind == "crivello")
    shutil.rmtree(state, ignore_errors=True)
    return CrawlRun(
        rep,
        kind,
        data["pages"],
        seconds,
        engine_seconds,
        child,
        not problem,
        problem,
        data["stats"],
        data["state_bytes"],
        site,
    )


def gaps(site: Dict[str, Any]) -> str:
    """The shortest, median and 90th percentile gap between two fetches of a host, in ms."""
    try:
        return "/".join(f"{1000 * site[k]:.0f}" for k in ("gap_min", "gap_median", "gap_p90"))
    except (KeyError, ValueError, OverflowError):
        return "-"


def print_crawl_table(runs: List[CrawlRun], kinds: Sequence[str]) -> None:
    default_of = {r.rep: r for r in runs if r.kind == "default"}
    jobdir_of = {r.rep: r for r in runs if r.kind == "jobdir"}
    header = (
        f"{'rep':>3}  {'scheduler':<24} {'pages':>7} {'seconds':>8} {'pages/s':>8} "
        f"{'x default':>9} {'start->close':>12} {'peak RSS':>9} {'CPU s':>7} "
        f"{'state':>8} {'filtered':>8} {'host gap min/median/p90':>23} {'at once':>7}  check"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        base = default_of.get(r.rep)
        ratio = f"{r.rate / base.rate:9.3f}" if base and base.rate else f"{'-':>9}"
        print(
            f"{r.rep:>3}  {LABELS[r.kind]:<24} {r.pages:>7} {r.seconds:8.2f} {r.rate:8.1f} "
            f"{ratio} {r.engine_seconds:12.2f} {r.child.max_rss_kib / 1024:6.0f} MiB "
            f"{r.child.cpu_seconds:7.1f} {r.state_bytes / MIB:4.1f} MiB "
            f"{r.stats.get('dupefilter/filtered', 0):>8} "
            f"{gaps(r.site):>23} {r.site.get('most_in_flight', '-'):>7}  "
            f"{'ok' if r.checked else 'FAILED: ' + r.problem}"
        )
    print()
    print("median over repetitions:")
    medians: Dict[str, float] = {}
    for kind in kinds:
        rates = [r.rate for r in runs if r.kind == kind and r.checked]
        if rates:
            medians[kind] = statistics.median(rates)
            rss = max(r.child.max_rss_kib for r in runs if r.kind == kind) / 1024
            cpu = statistics.median(r.child.cpu_seconds for r in runs if r.kind == kind)
            print(
                f"  {LABELS[kind]:<24} {medians[kind]:8.1f} pages/s  peak RSS {rss:6.0f} MiB"
                f"  CPU {cpu:6.1f} s"
            )
    c = medians.get("crivello")
    for label, kind, of, target in [
        ("default:", "default", default_of, 0.9),
        ("JOBDIR: ", "jobdir", jobdir_of, 1.5),
    ]:
        other = medians.get(kind)
        if not (c and other):
            continue
        per_rep = [
            r.rate / of[r.rep].rate
            for r in runs
            if r.kind == "crivello" and r.rep in of and of[r.rep].rate
        ]
        print(f"  crivello / {label} {c / other:.3f}  (per repetition: "
              f"{', '.join(f'{x:.3f}' for x in per_rep)}; target >= {target})")


# The memory benchmark.


def memory_one(args: argparse.Namespace) -> None:
    """The ``_memory-one`` subcommand: one scheduler holding ``args.requests`` requests;
    writes its figures to ``args.result`` as JSON."""
    import resource

    from scrapy.utils.reactor import install_reactor

    # JOBDIR keeps a file open per host: as many as allowed.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    install_reactor(ASYNCIO_REACTOR)

    import scrapy
    from scrapy.core.engine import ExecutionEngine
    from scrapy.http import Response
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler

    class MemorySpider(scrapy.Spider):
        name = "memory"

        def parse(self, response: Response, **kwargs: Any) -> None:
            pass

    state = Path(args.state)
    settings: Dict[str, Any] = {"LOG_LEVEL": "WARNING"}
    if args.scheduler == "jobdir":
        settings["JOBDIR"] = str(state)
    elif args.scheduler == "crivello":
        settings.update(CRIVELLO_SETTINGS)
        settings["CRIVELLO_DIR"] = str(state)
    elif args.scheduler == "aware":
        settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.DownloaderAwarePriorityQueue"
    crawler = get_crawler(MemorySpider, settings)
    spider = MemorySpider.from_crawler(crawler)
    crawler.spider = spider
    # The default priority queue asks the downloader for slots: an engine, not started.
    crawler.engine = ExecutionEngine(crawler, lambda _: None)
    scheduler = load_object(crawler.settings["SCHEDULER"]).from_crawler(crawler)
    scheduler.open(spider)

    n, hosts = args.requests, args.hosts
    gc.collect()
    reset = reset_peak_rss()
    baseline = proc_status_kib("VmRSS")
    hwm_before = proc_status_kib("VmHWM")
    t0 = time.perf_counter()
    for i in range(n):
        url = f"http://h{i % hosts}.example/p/{i // hosts}"
        if not scheduler.enqueue_request(scrapy.Request(url, callback=spider.parse)):
            raise RuntimeError(f"the scheduler refused {url}")
    enqueue_seconds = time.perf_counter() - t0
    peak_enqueued = proc_status_kib("VmHWM")
    rss_enqueued = proc_status_kib("VmRSS")

    t0 = time.perf_counter()
    got = []
    for _ in range(args.dequeue):
        request = scheduler.next_request()
        if request is None:
            raise RuntimeError("the scheduler gave no request")
        got.append(request)
    dequeue_seconds = time.perf_counter() - t0
    for request in got:
        if request.callback is None or not request.url.startswith("http://h"):
            raise RuntimeError(f"a dequeued request is wrong: {request!r}")
    pending = len(scheduler)
    has_pending = bool(scheduler.has_pending_requests())
    peak = proc_status_kib("VmHWM")

    t0 = time.perf_counter()
    scheduler.close("finished")
    close_seconds = time.perf_counter() - t0
    result = {
        "requests": n,
        "hwm_reset": reset,
        "hwm_before": hwm_before,
        "baseline_kib": baseline,
        "peak_enqueued_kib": peak_enqueued,
        "rss_enqueued_kib": rss_enqueued,
        "peak_kib": peak,
        "enqueue_seconds": enqueue_seconds,
        "dequeued": len(got),
        "dequeue_seconds": dequeue_seconds,
        "pending_after": pending,
        "has_pending": has_pending,
        "close_seconds": close_seconds,
        "state_bytes": disk_usage(state),
    }
    Path(args.result).write_text(json.dumps(result))


def bench_memory(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="crivello-bench-", dir=args.workdir))
    mount, fstype, device = filesystem_of(str(work))
    print(f"memory: {args.requests} distinct requests over {args.hosts} hosts, "
          f"then {args.dequeue} dequeued")
    print(versions())
    print(machine())
    print(f"state directories under {work}: {fstype} ({device} on {mount})")
    results: Dict[str, Dict[str, Any]] = {}
    failed = False
    try:
        for kind in args.schedulers:
            state = work / kind
            state.mkdir()
            result = work / f"{kind}.json"
            log = work / f"{kind}.log"
            child = run_child(
                [
                    "_memory-one",
                    f"--scheduler={kind}",
                    f"--requests={args.requests}",
                    f"--hosts={args.hosts}",
                    f"--dequeue={args.dequeue}",
                    f"--state={state}",
                    f"--result={result}",
                ],
                log,
                args.timeout,
            )
            if child.returncode != 0 or not result.exists():
                print(f"{kind} failed (exit {child.returncode}); log tail:\n{log_tail(log)}")
                failed = True
                continue
            data = json.loads(result.read_text())
            data["child"] = child
            results[kind] = data
            print(f"  {LABELS[kind]:<24} done in {child.wall_seconds:.0f} s", flush=True)
            shutil.rmtree(state, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print_memory_table(results, args.requests)
    return 1 if failed else 0


def print_memory_table(results: Dict[str, Dict[str, Any]], n: int) -> None:
    header = (
        f"{'scheduler':<24} {'baseline':>9} {'peak':>9} {'own':>9} {'enqueue s':>9} "
        f"{'req/s':>8} {'dequeue s':>9} {'pending':>8} {'close s':>7} {'disk':>9} "
        f"{'maxrss':>9} {'CPU s':>6}"
    )
    print(header)
    print("-" * len(header))
    for kind, d in results.items():
        child: Child = d["child"]
        own = (d["peak_kib"] - d["baseline_kib"]) / 1024
        rate = d["requests"] / d["enqueue_seconds"]
        print(
            f"{LABELS[kind]:<24} {d['baseline_kib'] / 1024:5.0f} MiB "
            f"{d['peak_kib'] / 1024:5.0f} MiB "
            f"{own:5.0f} MiB {d['enqueue_seconds']:9.1f} {rate:8.0f} {d['dequeue_seconds']:9.2f} "
            f"{d['pending_after']:>8} {d['close_seconds']:7.2f} {d['state_bytes'] / MIB:5.0f} MiB "
            f"{child.max_rss_kib / 1024:5.0f} MiB {child.cpu_seconds:6.1f}"
        )
        if d["pending_after"] != n - d["dequeued"] or not d["has_pending"]:
            print(
                f"  note: len(scheduler) = {d['pending_after']} after the dequeues, not "
                f"{n - d['dequeued']} (has_pending_requests: {d['has_pending']})"
            )
        if not d["hwm_reset"]:
            print("  note: VmHWM could not be reset: the peak includes start-up")
    print()
    print("baseline: RSS just before enqueueing; peak: VmHWM after enqueueing and dequeueing "
          "(reset to the baseline first); own: peak - baseline")
    peaks = {k: (d["peak_enqueued_kib"] - d["baseline_kib"]) / 1024 for k, d in results.items()}
    print("own peak right after enqueueing (before any dequeue): "
          + ", ".join(f"{LABELS[k]} {v:.0f} MiB" for k, v in peaks.items()))
    if "crivello" in results and "default" in results:
        c, d = results["crivello"], results["default"]
        own_ratio = (c["peak_kib"] - c["baseline_kib"]) / max(1, d["peak_kib"] - d["baseline_kib"])
        print(f"crivello / default: own {own_ratio:.3f} (target <= 0.25), "
              f"whole process {c['peak_kib'] / d['peak_kib']:.3f}, enqueue rate "
              f"{d['enqueue_seconds'] / c['enqueue_seconds']:.3f}")
    if "crivello" in results and "jobdir" in results:
        c, j = results["crivello"], results["jobdir"]
        own_ratio = (c["peak_kib"] - c["baseline_kib"]) / max(1, j["peak_kib"] - j["baseline_kib"])
        print(f"crivello / JOBDIR:  own {own_ratio:.3f}, enqueue rate "
              f"{j['enqueue_seconds'] / c['enqueue_seconds']:.3f}")


# Command line.


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--schedulers", type=schedulers_arg, default=list(DEFAULT_SCHEDULERS),
                       help="which, comma-separated, of " + ", ".join(SCHEDULERS)
                       + " (default: default,jobdir,crivello; aware: Scrapy's memory queues "
                       "with its DownloaderAwarePriorityQueue)")
        q.add_argument("--workdir", default=tempfile.gettempdir(),
                       help="where the state directories go (default: %(default)s)")
        q.add_argument("--keep", action="store_true", help="keep the work directory")
        q.add_argument("--timeout", type=float, default=3600.0,
                       help="seconds one subprocess may take (default: %(default)s)")

    c = sub.add_parser("crawl", help="pages/s of a crawl of a local site")
    c.add_argument("--pages", type=count_arg, default=100_000)
    c.add_argument("--hosts", type=int, default=64)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--delay", type=float, default=0.0,
                   help="DOWNLOAD_DELAY in seconds, not randomised (default: 0)")
    c.add_argument("--wait", type=float, default=0.0,
                   help="seconds each callback awaits before it yields its links, not "
                   "blocking (default: 0)")
    c.add_argument("--locality", type=share_arg, default=0.0,
                   help="share of a page's pseudo-random links to its own host (default: 0)")
    c.add_argument("--sites", action="store_true",
                   help="each host a site of its own: a tree of its pages, home pages linked")
    c.add_argument("--zipf", type=float, default=0.0, metavar="S",
                   help="with --sites: site sizes in proportion to 1/(h+1)^S, the crawl's "
                   "first host the largest (default: 0, sites of one size)")
    c.add_argument("--latency", type=float, default=0.0, metavar="SECONDS",
                   help="each page answered this long after its request, as by a remote "
                   "server (default: 0)")
    c.add_argument("--concurrency", type=int, default=32, help="CONCURRENT_REQUESTS")
    c.add_argument("--repeat", type=int, default=1)
    c.add_argument("--log-level", default="WARNING")
    c.add_argument("--profile", metavar="DIR",
                   help="profile each crawl process (cProfile) into DIR/<scheduler>-<rep>.prof")
    common(c)

    m = sub.add_parser("memory", help="RSS of a scheduler holding many pending requests")
    m.add_argument("--requests", type=count_arg, default=1_000_000)
    m.add_argument("--hosts", type=count_arg, default=10_000)
    m.add_argument("--dequeue", type=int, default=100)
    common(m)

    # Internal: run by the commands above in subprocesses.
    s = sub.add_parser("_serve")
    s.add_argument("--pages", type=count_arg, required=True)
    s.add_argument("--hosts", type=int, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--locality", type=float, required=True)
    s.add_argument("--sites", action="store_true")
    s.add_argument("--zipf", type=float, default=0.0)
    s.add_argument("--latency", type=float, default=0.0)

    def one(name: str) -> argparse.ArgumentParser:
        o = sub.add_parser(name)
        o.add_argument("--scheduler", choices=SCHEDULERS, required=True)
        o.add_argument("--state", required=True)
        o.add_argument("--result", required=True)
        return o

    one_crawl = one("_crawl-one")
    one_crawl.add_argument("--start", required=True)
    one_crawl.add_argument("--concurrency", type=int, required=True)
    one_crawl.add_argument("--log-level", default="WARNING")
    one_crawl.add_argument("--delay", type=float, required=True)
    one_crawl.add_argument("--wait", type=float, default=0.0)
    one_crawl.add_argument("--profile")
    mem = one("_memory-one")
    mem.add_argument("--requests", type=count_arg, required=True)
    mem.add_argument("--hosts", type=count_arg, required=True)
    mem.add_argument("--dequeue", type=int, required=True)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "crawl":
        if args.zipf and not args.sites:
            parser().error("--zipf shapes the sites of --sites: give both")
        if args.zipf < 0 or args.latency < 0:
            parser().error("--zipf and --latency take a number of at least 0")
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            args.profile = os.path.abspath(args.profile)
        return bench_crawl(args)
    if args.command == "memory":
        return bench_memory(args)
    if args.command == "_serve":
        graph = SiteGraph(args.pages, args.hosts, args.seed, args.locality, args.sites, args.zipf)
        asyncio.run(serve(graph, args.latency))
        return 0
    if args.command == "_crawl-one":
        crawl_one(args)
        return 0
    if args.command == "_memory-one":
        memory_one(args)
        return 0
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
