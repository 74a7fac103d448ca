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
