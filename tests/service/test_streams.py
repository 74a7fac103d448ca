"""PutDiscovered, and StormCrawler's way of using the service: GetURLs of 10 queues x 10
URLs, one long-lived PutURLs stream acked by ID, PutDiscovered batches of 100."""

import queue
import threading

import pytest

from helpers import discovered, get, info, known, put


def test_put_discovered_statuses(server):
    pb = server.pb
    put(server, [discovered(pb, "http://disc.com/known")])
    batches = [
        pb.DiscoveredBatch(
            ID="b1",
            items=[
                info(pb, "http://disc.com/new"),
                info(pb, "http://disc.com/new"),
                info(pb, "http://disc.com/known"),
                info(pb, ""),
                info(pb, "http://disc.com/other", crawl="BATCHES"),
            ],
        ),
        # Clients probe with an empty batch.
        pb.DiscoveredBatch(ID="empty"),
        pb.DiscoveredBatch(ID="b2", items=[info(pb, "http://disc.com/new")]),
    ]
    acks = list(server.stub.PutDiscovered(iter(batches)))
    S = pb.AckMessage.Status
    assert [(a.ID, list(a.statuses)) for a in acks] == [
        ("b1", [S.OK, S.SKIPPED, S.SKIPPED, S.SKIPPED, S.OK]),
        ("empty", []),
        ("b2", [S.SKIPPED]),
    ]


@pytest.fixture
def stormcrawler(server_factory):
    # StormCrawler takes 10 URLs of a queue per query: 10 of a queue may be in transit.
    return server_factory("--per-queue", "10")


def test_stormcrawler_pattern(stormcrawler):
    server = stormcrawler
    pb = server.pb
    hosts = [f"host{h}.sc" for h in range(25)]
    seeds = [f"http://{h}/{p}" for h in hosts for p in range(12)]
    # Discoveries: batches of 100 on one PutDiscovered stream.
    batches = [
        pb.DiscoveredBatch(ID=f"batch{k}", items=[info(pb, u) for u in seeds[k : k + 100]])
        for k in range(0, len(seeds), 100)
    ]
    acks = list(server.stub.PutDiscovered(iter(batches)))
    assert all(set(a.statuses) == {pb.AckMessage.Status.OK} for a in acks)
    assert sum(len(a.statuses) for a in acks) == len(seeds)

    # One long-lived PutURLs stream for the status updates, acked by ID.
    updates = queue.Queue()
    acked = {}

    def feed():
        while True:
            item = updates.get()
            if item is None:
                return
            yield item

    def read_acks(stream):
        for a in stream:
            acked[a.ID] = pb.AckMessage.Status.Name(a.status)

    stream = server.stub.PutURLs(feed())
    reader = threading.Thread(target=read_acks, args=(stream,))
    reader.start()

    fetched = []
    for _ in range(200):
        got = get(server, max_queues=10, max_urls_per_queue=10)
        assert len({g.key for g in got}) <= 10
        for key in {g.key for g in got}:
            assert sum(1 for g in got if g.key == key) <= 10
        for g in got:
            fetched.append(g.url)
            updates.put(known(pb, g.url, 0, key=g.key, ident=g.url))
        if len(fetched) == len(seeds):
            break
    updates.put(None)
    reader.join(timeout=30)
    assert sorted(fetched) == sorted(seeds), "every URL fetched exactly once"
    assert acked == {u: "OK" for u in seeds}
    s = server.stub.GetStats(pb.QueueWithinCrawlParams())
    assert (s.size, s.inProcess, s.counts["completed"]) == (0, 0, len(seeds))


def test_a_hand_out_of_many_queues_comes_whole(server):
    """GetURLs of more queues than the service leases at once (it leases and sends a
    hand-out in parts): every queue once, up to max_queues, each with its first URL, and
    nothing served twice across parts."""
    pb = server.pb
    hosts = 5000
    for start in range(0, hosts, 1000):
        batch = [
            discovered(pb, f"http://h{h}.parts.test/{p}", crawl="PARTS")
            for h in range(start, start + 1000)
            for p in range(2)
        ]
        assert all(status == "OK" for _, status in put(server, batch))
    got = get(server, max_queues=3500, max_urls_per_queue=2, delay_requestable=600, crawl="PARTS")
    assert len(got) == 3500
    assert len({u.key for u in got}) == 3500
    assert all(u.url.endswith("/0") for u in got)
    rest = get(server, max_queues=0, max_urls_per_queue=2, delay_requestable=600, crawl="PARTS")
    assert len(rest) == hosts - 3500
    assert {u.key for u in rest}.isdisjoint({u.key for u in got})
    # One URL of a host in transit at a time: nothing more is due.
    assert get(server, max_queues=0, crawl="PARTS") == []
