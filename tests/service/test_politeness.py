"""Politeness through the API: SetDelay, BlockQueueUntil, the crawl limit, leases that
expire and are served again, known updates that end them."""

import threading
import time

from helpers import discovered, get, known, now_s, put, stats


def fetch_all(server, key, n, delay_requestable=30, within=60):
    """Leases the queue's URLs one at a time, acking each done at once, until `n` were
    handed out or `within` seconds passed; returns (time, url) of each hand-out."""
    pb = server.pb
    out = []
    deadline = time.time() + within
    while len(out) < n and time.time() < deadline:
        got = get(server, key=key, max_urls_per_queue=1, delay_requestable=delay_requestable, crawl="DEFAULT")
        for g in got:
            out.append((time.monotonic(), g.url))
            put(server, [known(pb, g.url, 0, key=key)])
        if not got:
            time.sleep(0.02)
    return out


def test_set_delay_spaces_hand_outs(server):
    pb = server.pb
    urls = [f"http://slow.com/{i}" for i in range(3)]
    put(server, [discovered(pb, u) for u in urls])
    server.stub.SetDelay(pb.QueueDelayParams(key="slow.com", delay_requestable=2))
    got = fetch_all(server, "slow.com", 3)
    assert [u for _, u in got] == urls
    gaps = [b[0] - a[0] for a, b in zip(got, got[1:])]
    # The delay runs from the end of each fetch (the done), so hand-outs are at least 2 s
    # apart.
    assert all(g >= 1.95 for g in gaps), gaps


def test_set_delay_holds_with_four_concurrent_clients(server):
    pb = server.pb
    urls = [f"http://busy.com/{i}" for i in range(5)]
    put(server, [discovered(pb, u) for u in urls])
    server.stub.SetDelay(pb.QueueDelayParams(key="busy.com", delay_requestable=1))
    handed = []
    in_flight = []
    lock = threading.Lock()
    stop = time.time() + 30

    def client():
        while time.time() < stop:
            with lock:
                if len(handed) == len(urls):
                    return
            got = get(server, max_queues=10, max_urls_per_queue=5, delay_requestable=30)
            got = [g for g in got if g.key == "busy.com"]
            for g in got:
                with lock:
                    in_flight.append(g.url)
                    assert len(in_flight) == 1, f"two URLs of one host at once: {in_flight}"
                    handed.append((time.monotonic(), g.url))
                time.sleep(0.05)  # the fetch
                with lock:
                    in_flight.remove(g.url)
                put(server, [known(pb, g.url, 0)])
            if not got:
                time.sleep(0.01)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(u for _, u in handed) == sorted(urls)
    times = sorted(t for t, _ in handed)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g >= 1.0 for g in gaps), gaps


def test_block_queue_until(server):
    pb = server.pb
    put(server, [discovered(pb, "http://blocked.com/1")])
    server.stub.BlockQueueUntil(pb.BlockQueueParams(key="blocked.com", time=now_s() + 3600))
    assert get(server, key="blocked.com", crawl="DEFAULT") == []
    # A blocked queue is inactive.
    assert "blocked.com" not in server.stub.ListQueues(pb.Pagination()).values
    assert "blocked.com" in server.stub.ListQueues(pb.Pagination(include_inactive=True)).values
    server.stub.BlockQueueUntil(pb.BlockQueueParams(key="blocked.com", time=0))
    assert [g.url for g in get(server, key="blocked.com", crawl="DEFAULT")] == ["http://blocked.com/1"]


def test_crawl_limit(server):
    pb = server.pb
    urls = [f"http://limited.com/{i}" for i in range(4)]
    put(server, [discovered(pb, u) for u in urls])
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="limited.com", limit=2))
    got = fetch_all(server, "limited.com", 4, within=1.5)
    assert [u for _, u in got] == urls[:2]
    assert get(server, key="limited.com", crawl="DEFAULT") == []
    # 0 lifts it.
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="limited.com", limit=0))
    assert [g.url for g in get(server, key="limited.com", crawl="DEFAULT")] == [urls[2]]


def test_lease_expires_and_is_served_again(server):
    pb = server.pb
    put(server, [discovered(pb, "http://lease.com/1")])
    first = get(server, key="lease.com", delay_requestable=1, crawl="DEFAULT")
    assert [g.url for g in first] == ["http://lease.com/1"]
    assert get(server, key="lease.com", delay_requestable=1, crawl="DEFAULT") == []
    assert stats(server, key="lease.com").inProcess == 1
    time.sleep(1.1)
    again = get(server, key="lease.com", delay_requestable=1, crawl="DEFAULT")
    assert [g.url for g in again] == ["http://lease.com/1"]


def test_known_update_ends_the_lease(server):
    pb = server.pb
    put(server, [discovered(pb, "http://ack.com/1"), discovered(pb, "http://ack.com/2")])
    got = get(server, key="ack.com", delay_requestable=60, crawl="DEFAULT")
    assert [g.url for g in got] == ["http://ack.com/1"]
    assert stats(server, key="ack.com").inProcess == 1
    assert put(server, [known(pb, "http://ack.com/1", 0)]) == [("http://ack.com/1", "OK")]
    s = stats(server, key="ack.com")
    assert (s.inProcess, s.size, s.counts["completed"]) == (0, 1, 1)
    assert [g.url for g in get(server, key="ack.com", crawl="DEFAULT")] == ["http://ack.com/2"]
    # Refetch from a date in the past: served again.
    put(server, [known(pb, "http://ack.com/2", now_s() - 5)])
    assert [g.url for g in get(server, key="ack.com", crawl="DEFAULT")] == ["http://ack.com/2"]


def test_set_active(server):
    pb = server.pb
    put(server, [discovered(pb, "http://paused.com/1")])
    server.stub.SetActive(pb.Active(state=False))
    try:
        assert server.stub.GetActive(pb.Local()).state is False
        assert get(server, key="paused.com", crawl="DEFAULT") == []
        # Puts are still taken.
        assert put(server, [discovered(pb, "http://paused.com/2")]) == [("http://paused.com/2", "OK")]
    finally:
        server.stub.SetActive(pb.Active(state=True))
    assert server.stub.GetActive(pb.Local()).state is True
    assert [g.url for g in get(server, key="paused.com", crawl="DEFAULT")] == ["http://paused.com/1"]


def test_an_expired_lease_waits_for_the_delay_from_its_expiry(server):
    # A fetcher that never reports: the URL comes back when its lease expires, and the
    # queue's delay runs from that instant, as from the end of a fetch.
    pb = server.pb
    put(server, [discovered(pb, "http://gone.com/0")])
    server.stub.SetDelay(pb.QueueDelayParams(key="gone.com", delay_requestable=2))
    times = []
    stop = time.time() + 12
    while len(times) < 3 and time.time() < stop:
        got = get(server, key="gone.com", crawl="DEFAULT", delay_requestable=1)
        if got:
            assert [g.url for g in got] == ["http://gone.com/0"]
            times.append(time.monotonic())
        time.sleep(0.02)
    assert len(times) == 3, times
    gaps = [b - a for a, b in zip(times, times[1:])]
    # Lease of 1 s, then the delay of 2 s from its expiry.
    assert all(g >= 2.95 for g in gaps), gaps


def test_hosts_found_while_the_others_keep_serving_are_served_soon(server):
    # A crawler's loop on three hosts whose queues never run dry: each round leases what is
    # due, reports it done and, on the same stream, a URL of a new host it found. The new
    # hosts are handed out within a few seconds, not once the others are exhausted. (A crawl
    # of its own: the other tests' queues are not in it.)
    pb = server.pb
    c = "busy"
    put(server, [discovered(pb, f"http://{h}.busy/{i}", crawl=c) for i in range(400) for h in "abc"])
    new = {}
    served = {}
    start = time.monotonic()
    while time.monotonic() - start < 20 and (len(new) < 10 or len(served) < len(new)):
        got = get(server, max_queues=100, delay_requestable=30, crawl=c)
        for g in got:
            if g.url in new:
                served[g.url] = time.monotonic() - new[g.url]
        items = [known(pb, g.url, 0, crawl=c) for g in got]
        if len(new) < 10:
            url = f"http://new{len(new)}.busy/1"
            new[url] = time.monotonic()
            items.append(discovered(pb, url, crawl=c))
        put(server, items)
        time.sleep(0.05)
    assert len(served) == 10 and max(served.values()) < 5, served
    assert stats(server, crawl=c).size > 0, "the others ran dry: the test proves nothing"


def test_a_key_set_in_one_field_follows_the_default_in_the_others(server_factory, tmp_path):
    """SetDelay or SetCrawlLimit on a key sets that field of the queue alone: the default's
    limit, delay and per-queue number (`--per-queue`) set later reach it. Before, a key's
    SetDelay froze the default's limit as it was then, and its SetCrawlLimit the delay."""
    directory = tmp_path / "follow"
    server = server_factory(directory=directory)
    pb = server.pb
    hosts = ["a.com", "f.com", "d.com", "e.com"]
    put(server, [discovered(pb, f"http://{h}/{i}") for h in hosts for i in range(4)])
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="f.com", limit=100))
    server.stub.SetDelay(pb.QueueDelayParams(key="d.com", delay_requestable=0))
    server.stub.SetDelay(pb.QueueDelayParams(key="e.com", delay_requestable=0))
    server.stub.SetDelay(pb.QueueDelayParams(key="", delay_requestable=5))
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="", limit=2))
    served = {}
    deadline = time.time() + 2.5
    while time.time() < deadline:
        got = get(server, max_urls_per_queue=1, delay_requestable=30, crawl="DEFAULT")
        for g in got:
            host = g.url.split("/")[2]
            served[host] = served.get(host, 0) + 1
            put(server, [known(pb, g.url, 0)])
        if not got:
            time.sleep(0.05)
    # a.com and f.com: one fetch, then the default's 5 s; d.com and e.com: no delay of
    # their own, the default's limit of 2.
    assert served == {"a.com": 1, "f.com": 1, "d.com": 2, "e.com": 2}, served
    server.stop()
    # The default's per-queue number, set at a restart, reaches the keys that set a field.
    server = server_factory("--per-queue", "2", directory=directory)
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="e.com", limit=0))
    got = get(server, key="e.com", max_urls_per_queue=10, delay_requestable=30, crawl="DEFAULT")
    assert [g.url for g in got] == ["http://e.com/2", "http://e.com/3"]


def test_the_crawl_limit_counts_urls_done_not_fetches(server):
    """A done URL scheduled again is no longer done: fetched and done twice, it counts
    once toward `completed` and the crawl limit (it counted twice, and the queue's other URL
    was never served)."""
    pb = server.pb
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="twice.com", limit=2))
    put(server, [discovered(pb, "http://twice.com/x"), discovered(pb, "http://twice.com/y")])
    got = get(server, key="twice.com", crawl="DEFAULT")
    assert [g.url for g in got] == ["http://twice.com/x"]
    put(server, [known(pb, "http://twice.com/x", 0)])
    assert stats(server, key="twice.com").counts["completed"] == 1
    put(server, [known(pb, "http://twice.com/x", now_s() - 1)])
    assert stats(server, key="twice.com").counts["completed"] == 0
    got = get(server, key="twice.com", crawl="DEFAULT")
    assert [g.url for g in got] == ["http://twice.com/x"]
    put(server, [known(pb, "http://twice.com/x", 0)])
    assert stats(server, key="twice.com").counts["completed"] == 1
    got = get(server, key="twice.com", crawl="DEFAULT")
    assert [g.url for g in got] == ["http://twice.com/y"]
