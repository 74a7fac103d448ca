"""kill -9 of the server in the middle of streams, then a restart: every URL acknowledged OK
is there; delays, blocks and limits are kept; a URL in transit is not served again before
its deadline; a done URL never again."""

import threading
import time

import grpc

from helpers import discovered, get, info, known, now_s, put, stats


def test_kill_9_in_the_middle_of_streams(server_factory, tmp_path):
    # Up to 100 URLs of a queue in transit, so that the check at the end drains quickly.
    server = server_factory("--per-queue", "100", directory=tmp_path / "killed")
    pb = server.pb

    # State to keep: a delay, a block, a limit, leases, dones.
    put(server, [discovered(pb, f"http://delayed.k/{i}") for i in range(3)])
    server.stub.SetDelay(pb.QueueDelayParams(key="delayed.k", delay_requestable=3600))
    first = get(server, key="delayed.k", max_urls_per_queue=1, crawl="DEFAULT")
    assert [g.url for g in first] == ["http://delayed.k/0"]
    assert put(server, [known(pb, "http://delayed.k/0", 0)])[0][1] == "OK"

    put(server, [discovered(pb, "http://blocked.k/1")])
    server.stub.BlockQueueUntil(pb.BlockQueueParams(key="blocked.k", time=now_s() + 3600))

    put(server, [discovered(pb, f"http://limited.k/{i}") for i in range(3)])
    server.stub.SetCrawlLimit(pb.CrawlLimitParams(key="limited.k", limit=1))
    got = get(server, key="limited.k", crawl="DEFAULT")
    assert put(server, [known(pb, got[0].url, 0)])[0][1] == "OK"

    put(server, [discovered(pb, f"http://leased{h}.k/1") for h in range(5)])
    leased = []
    for h in range(5):
        leased += [g.url for g in get(server, key=f"leased{h}.k", delay_requestable=3600, crawl="DEFAULT")]
    assert len(leased) == 5

    put(server, [discovered(pb, f"http://done{h}.k/1") for h in range(5)])
    done = []
    for h in range(5):
        for g in get(server, key=f"done{h}.k", crawl="DEFAULT"):
            done.append(g.url)
    assert put(server, [known(pb, u, 0) for u in done]) == [(u, "OK") for u in done]

    # Streams running when the server is killed: every ack read is of a durable item.
    acked = []
    acked_batches = []
    lock = threading.Lock()

    def put_stream(n):
        def items():
            for i in range(20_000):
                if i % 100 == 0:
                    time.sleep(0.005)
                yield discovered(pb, f"http://stream{n}-{i % 50}.k/{i}")

        try:
            for a in server.stub.PutURLs(items()):
                if a.status == pb.AckMessage.Status.OK:
                    with lock:
                        acked.append(a.ID)
        except grpc.RpcError:
            pass

    def discover_stream(n):
        def batches():
            for b in range(400):
                time.sleep(0.005)
                yield pb.DiscoveredBatch(
                    ID=str(b), items=[info(pb, f"http://batch{n}-{b % 20}.k/{b}/{i}") for i in range(100)]
                )

        try:
            for a in server.stub.PutDiscovered(batches()):
                b = int(a.ID)
                with lock:
                    acked_batches.append(
                        [f"http://batch{n}-{b % 20}.k/{b}/{i}" for i, s in enumerate(a.statuses) if s == 0]
                    )
        except grpc.RpcError:
            pass

    threads = [threading.Thread(target=put_stream, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=discover_stream, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    while True:
        with lock:
            if len(acked) > 2000 and len(acked_batches) > 20:
                break
        time.sleep(0.01)
    server.kill()
    for t in threads:
        t.join(timeout=30)
    with lock:
        acked_urls = acked + [u for b in acked_batches for u in b]
    assert len(acked_urls) > 4000
    # The streams were cut short: the kill came in their middle.
    assert len(acked) < 40_000 and len(acked_batches) < 800

    server.restart()
    # Every URL acknowledged OK is there.
    for u in acked_urls[:: max(1, len(acked_urls) // 300)] + acked_urls[-50:]:
        try:
            server.stub.GetURLStatus(pb.URLStatusRequest(url=u))
        except grpc.RpcError as e:
            raise AssertionError(f"{u} was acknowledged and is lost: {e.code()}")
    expected = {}
    for u in acked_urls:
        key = u.split("/")[2]
        expected[key] = expected.get(key, 0) + 1
    for key, n in list(expected.items())[:20]:
        assert stats(server, key=key).size >= n, key

    # The delay, the block and the limit are kept; leased URLs are not served before their
    # deadline; done URLs are never served again.
    assert get(server, key="delayed.k", crawl="DEFAULT") == []
    assert get(server, key="blocked.k", crawl="DEFAULT") == []
    assert get(server, key="limited.k", crawl="DEFAULT") == []
    for h in range(5):
        assert get(server, key=f"leased{h}.k", crawl="DEFAULT") == []
        assert stats(server, key=f"leased{h}.k").inProcess == 1
    served = set()
    for _ in range(100_000):
        got = get(server, max_queues=0, max_urls_per_queue=0)
        if not got:
            break
        served.update(g.url for g in got)
        put(server, [known(pb, g.url, 0) for g in got])
    assert not served & set(done)
    assert not served & set(leased)
    assert not any(u.startswith(("http://delayed.k/", "http://blocked.k/", "http://limited.k/")) for u in served)
    assert set(acked_urls) <= served
    assert server.stop() == 0, server.log()
