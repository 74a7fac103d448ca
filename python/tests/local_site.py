"""A local web site made from a real page graph, served by a few HTTP servers on loopback.

The graph is Hollins University's site (`hollins.dat.xz` of the shared data: its pages,
their URLs and their links). Each page's URL is mapped to one of a few loopback hosts
(127.0.0.2, 127.0.0.3, ...) by a hash, each host its own server; page `i` is `/p/i` there, and its links
point to the pages it links to. The servers record each fetch: when, by which host, which
page, and how many fetches of that host were in flight at once.
"""

from __future__ import annotations

import lzma
import os
import threading
import time
import zlib
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple

DATA = Path(
    os.environ.get("CRIVELLO_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data")
)


def load_graph(name: str = "hollins.dat.xz") -> Tuple[Dict[int, str], Dict[int, List[int]]]:
    """The URL of each node, and the outlinks of each node, by the node's number."""
    with lzma.open(DATA / name, "rt", encoding="utf-8", errors="surrogateescape") as f:
        lines = f.read().split("\n")
    n = int(lines[0].split()[0])
    urls: Dict[int, str] = {}
    for line in lines[1 : n + 1]:
        node, _, url = line.partition(" ")
        urls[int(node)] = url.strip()
    links: Dict[int, List[int]] = {}
    for line in lines[n + 1 :]:
        parts = line.split()
        if len(parts) >= 2:
            links.setdefault(int(parts[0]), []).append(int(parts[1]))
    return urls, links


def bfs(links: Dict[int, List[int]], seed: int, limit: int) -> List[int]:
    """The first `limit` nodes a breadth-first crawl from `seed` discovers."""
    seen = {seed}
    order = [seed]
    todo = deque([seed])
    while todo and len(order) < limit:
        for b in links.get(todo.popleft(), []):
            if b not in seen:
                seen.add(b)
                order.append(b)
                todo.append(b)
                if len(order) == limit:
                    break
    return order


class Site:
    """The pages of the first `pages` nodes of a BFS of the graph, on `hosts` servers."""

    def __init__(
        self, pages: int, hosts: int, latency: float = 0.0, redirect_every: int = 0
    ) -> None:
        urls, links = load_graph()
        nodes = bfs(links, min(links), pages)
        kept = set(nodes)
        self.latency = latency
        # Links to every `redirect_every`-th page go through a redirect (301) on the linking
        # page's host, to the page on its own host.
        self.redirect_every = redirect_every
        self.lock = threading.Lock()
        # (time, host index, page) of each fetch, in arrival order.
        self.fetches: List[Tuple[float, int, int]] = []
        # (time, host index) of every request a host answered, redirects included.
        self.hits: List[Tuple[float, int]] = []
        self.in_flight = [0] * hosts
        self.most_in_flight = [0] * hosts
        self.servers: List[ThreadingHTTPServer] = []
        self.host_of: Dict[int, int] = {}
        for i in nodes:
            self.host_of[i] = zlib.crc32(urls[i].encode("utf-8", "surrogateescape")) % hosts
        self.out = {i: [b for b in links.get(i, []) if b in kept] for i in nodes}
        site = self

        class Handler(BaseHTTPRequestHandler):
            host_index = 0

            def do_GET(self) -> None:  # noqa: N802
                h = type(self).host_index
                with site.lock:
                    site.hits.append((time.time(), h))
                    site.in_flight[h] += 1
                    site.most_in_flight[h] = max(site.most_in_flight[h], site.in_flight[h])
                try:
                    if self.path.startswith("/r/"):
                        target = int(self.path[3:])
                        self.send_response(301)
                        self.send_header("Location", site.url(target))
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    page = self._page()
                    if page is None or site.host_of.get(page) != h:
                        self.send_error(404)
                        return
                    with site.lock:
                        site.fetches.append((time.time(), h, page))
                    if site.latency:
                        time.sleep(site.latency)
                    body = site.html(page).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    with site.lock:
                        site.in_flight[h] -= 1

            def _page(self) -> Optional[int]:
                if not self.path.startswith("/p/"):
                    return None
                try:
                    return int(self.path[3:])
                except ValueError:
                    return None

            def log_message(self, *args: object) -> None:
                pass

        for h in range(hosts):
            handler = type(f"Handler{h}", (Handler,), {"host_index": h})
            server = ThreadingHTTPServer((f"127.0.0.{h + 2}", 0), handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.pages = nodes

    def url(self, page: int) -> str:
        host, port = self.servers[self.host_of[page]].server_address[:2]
        return f"http://{host}:{port}/p/{page}"

    def link(self, page: int, to: int) -> str:
        """The URL by which `page` links to `to`: a redirect on `page`'s host for every
        `redirect_every`-th page."""
        if self.redirect_every and to % self.redirect_every == 0 and to != page:
            host, port = self.servers[self.host_of[page]].server_address[:2]
            return f"http://{host}:{port}/r/{to}"
        return self.url(to)

    def html(self, page: int) -> str:
        links = "".join(f'<a href="{self.link(page, b)}">{b}</a>\n' for b in self.out[page])
        return f"<html><body><h1>{page}</h1>\n{links}</body></html>\n"

    def count(self) -> Dict[int, int]:
        """How many times each page was fetched."""
        with self.lock:
            got: Dict[int, int] = {}
            for _, _, p in self.fetches:
                got[p] = got.get(p, 0) + 1
            return got

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()
