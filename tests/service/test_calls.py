"""The clauses of the API not covered elsewhere: ListNodes, SetLogLevel and the log's levels,
PurgeURLs, ListQueues pages, DeleteCrawl counts, GetURLs by crawl, --memory."""

import time

from helpers import discovered, get, known, now_s, put, stats


def test_list_nodes_is_this_node(server):
    assert list(server.stub.ListNodes(server.pb.Empty()).values) == [server.addr]


def test_set_log_level_changes_what_is_logged(server):
    pb = server.pb
    L = pb.LogLevelParams.Level
    server.stub.SetLogLevel(pb.LogLevelParams(level=L.Value("DEBUG")))
    put(server, [discovered(pb, "http://loud.t/1")])
    time.sleep(0.2)
    assert "PutURLs: a client opens a stream" in server.log()
    server.stub.SetLogLevel(pb.LogLevelParams(level=L.Value("ERROR")))
    before = server.log()
    put(server, [discovered(pb, "")])  # refused: a WARN line, not written at ERROR
    time.sleep(0.2)
    assert server.log() == before
    server.stub.SetLogLevel(pb.LogLevelParams(level=L.Value("INFO")))
    put(server, [discovered(pb, "")])
    time.sleep(0.2)
    assert "refused" in server.log()[len(before):]


def test_quiet_logs_errors_only(server_factory):
    server = server_factory("--quiet", "--memory", "8M")
    pb = server.pb
    put(server, [discovered(pb, "")])
    assert server.stop() == 0
    assert server.log() == ""


def test_purge_urls_by_creation_date(server):
    pb = server.pb
    old = now_s() - 10 * 86_400
    items = [
        discovered(pb, "http://purge.t/old"),
        discovered(pb, "http://purge.t/new"),
    ]
    items[0].creation_date = old
    put(server, items)
    purged = server.stub.PurgeURLs(pb.PurgeUrlParams(key="purge.t", days=5))
    assert purged.value == 1
    listed = [i.known.info.url for i in server.stub.ListURLs(pb.ListUrlParams(key="purge.t"))]
    assert listed == ["http://purge.t/new"]
    status = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://purge.t/old"))
    assert status.known.refetchable_from_date == 0
    assert server.stub.PurgeURLs(pb.PurgeUrlParams(key="purge.t", days=5)).value == 0
    # With 0 days, also what was put in the call's own second.
    put(server, [discovered(pb, f"http://purge.t/now{i}") for i in range(3)])
    assert server.stub.PurgeURLs(pb.PurgeUrlParams(key="purge.t", days=0)).value == 4
    assert list(server.stub.ListURLs(pb.ListUrlParams(key="purge.t"))) == []


def test_list_queues_pages_and_total(server):
    pb = server.pb
    crawl = "PAGES"
    put(server, [discovered(pb, f"http://q{i:02}.t/", crawl=crawl) for i in range(25)])
    first = server.stub.ListQueues(pb.Pagination(crawlID=crawl, size=10))
    assert list(first.values) == [f"q{i:02}.t" for i in range(10)]
    assert (first.total, first.start, first.size, first.crawlID) == (25, 0, 10, crawl)
    last = server.stub.ListQueues(pb.Pagination(crawlID=crawl, start=20, size=10))
    assert list(last.values) == [f"q{i:02}.t" for i in range(20, 25)]
    assert len(server.stub.ListQueues(pb.Pagination(crawlID=crawl)).values) == 25
    # A queue whose URLs are all done is inactive.
    got = get(server, key="q00.t", crawl=crawl)
    put(server, [known(pb, g.url, 0, crawl=crawl) for g in got])
    assert "q00.t" not in server.stub.ListQueues(pb.Pagination(crawlID=crawl)).values
    everything = server.stub.ListQueues(pb.Pagination(crawlID=crawl, include_inactive=True))
    assert "q00.t" in everything.values
    assert server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value=crawl)).value == 24


def test_get_urls_by_crawl(server):
    pb = server.pb
    put(server, [discovered(pb, "http://one.t/", crawl="C1"), discovered(pb, "http://two.t/", crawl="C2")])
    assert [g.url for g in get(server, crawl="C1")] == ["http://one.t/"]
    rest = list(server.stub.GetURLs(pb.GetParams(anyCrawlID=pb.AnyCrawlID())))
    # Every crawl's (the other tests' URLs of DEFAULT too), but not what C1 has in transit.
    mine = [(g.url, g.crawlID) for g in rest if g.crawlID in ("C1", "C2")]
    assert mine == [("http://two.t/", "C2")]


def test_a_url_in_transit_under_a_key_of_its_own_asked_without_it_reads_as_in_transit(server):
    """Put under a key of its own and asked without it, a URL in transit is answered (its
    state and its lease's end, the host as key), not NOT_FOUND."""
    pb = server.pb
    put(server, [discovered(pb, "http://own.t/1", key="K-own")])
    got = get(server, key="K-own", delay_requestable=60, crawl="DEFAULT")
    assert [g.url for g in got] == ["http://own.t/1"]
    item = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://own.t/1"))
    assert item.known.info.url == "http://own.t/1"
    assert item.known.refetchable_from_date >= now_s() + 50, "in transit for a minute"
    # Asked with its key: the same, with its key.
    item = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://own.t/1", key="K-own"))
    assert item.known.info.key == "K-own"


def test_an_unknown_long_url_is_not_found(server):
    """The message names a long URL by its start and length: whole, a 20 KB URL made a
    header the client refused (RESOURCE_EXHAUSTED instead of NOT_FOUND)."""
    import grpc
    import pytest

    pb = server.pb
    url = "http://long.t/" + "x" * 20_000
    with pytest.raises(grpc.RpcError) as e:
        server.stub.GetURLStatus(pb.URLStatusRequest(url=url))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
    assert "20014 bytes" in e.value.details()


def test_a_urls_status_asked_with_another_key_is_found_in_its_hosts_queue(server):
    """GetURLStatus looks in the queue of the key given and in the URL's host's queue: a
    waiting URL asked with another key is found (with its queue's key), not NOT_FOUND."""
    pb = server.pb
    put(server, [discovered(pb, "http://st.t/1"), discovered(pb, "http://st.t/2")])
    for key in ["", "st.t", "some-other-key"]:
        item = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://st.t/2", key=key))
        assert item.known.info.url == "http://st.t/2"
        assert item.known.info.key == "st.t"
        assert item.known.refetchable_from_date > 0, "waiting: due from a date"


def test_list_urls_answers_100_by_default_and_pages_across_queues(server_factory):
    """ListURLs without a size answers 100 URLs (the published API's default); a listing
    longer than the service's walk of 10,000 URLs at a time gives every URL once, in key
    order and first-appearance order within a queue, whatever window is asked."""
    server = server_factory()
    pb = server.pb
    hosts = [f"h{i:03}.t" for i in range(150)]
    urls = {h: [f"http://{h}/{j}" for j in range(70)] for h in hosts}
    for h in hosts:
        assert {s for _, s in put(server, [discovered(pb, u) for u in urls[h]])} == {"OK"}
    expected = [u for h in sorted(hosts) for u in urls[h]]
    assert len(expected) == 10_500

    def listed(**p):
        return [i.known.info.url for i in server.stub.ListURLs(pb.ListUrlParams(**p))]

    assert listed() == expected[:100]
    assert listed(size=0, start=7) == expected[7:107]
    assert listed(size=20_000) == expected
    # Windows across the walk's page boundary (10,000), one within a queue.
    assert listed(start=9_990, size=30) == expected[9_990:10_020]
    assert listed(start=9_000, size=1_500) == expected[9_000:]
    assert listed(start=10_499, size=5) == expected[10_499:]
    # A filter counts matches only.
    sevens = [u for u in expected if u.endswith("/7")]
    assert listed(size=1_000, filter="/7", ignoreCase=False) == [
        u for u in expected if "/7" in u
    ]
    assert [u for u in listed(size=20_000, filter="/7") if u.endswith("/7")] == sevens


def test_urls_pushed_through_the_command_line_read_as_waiting(server_factory, tmp_path):
    """A URL pushed through the command line has no storing instant the service knows: its
    known item says it is due (1), not done (0), and PurgeURLs takes it only with days 0."""
    import subprocess

    from conftest import BIN

    store = tmp_path / "pushed"
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://cli.t/a\nhttp://cli.t/b\n")
    subprocess.run([BIN, "push", str(store), str(seeds)], check=True, capture_output=True)
    server = server_factory(directory=store)
    pb = server.pb
    status = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://cli.t/a"))
    assert (status.known.refetchable_from_date, status.creation_date) == (1, 0)
    listed = list(server.stub.ListURLs(pb.ListUrlParams(key="cli.t")))
    assert [i.known.refetchable_from_date for i in listed] == [1, 1]
    assert server.stub.PurgeURLs(pb.PurgeUrlParams(key="cli.t", days=30)).value == 0
    assert [u.url for u in get(server, key="cli.t", max_urls_per_queue=1)] == ["http://cli.t/a"]
    assert server.stub.PurgeURLs(pb.PurgeUrlParams(key="cli.t", days=0)).value == 2
    status = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://cli.t/b"))
    assert status.known.refetchable_from_date == 0


def test_active_queues_count_queues_whose_urls_are_all_in_transit(server_factory):
    """GetStats' active_queues counts a queue with URLs waiting or in transit, as the
    reference service does."""
    server = server_factory()
    pb = server.pb
    put(server, [discovered(pb, "http://act1.t/1"), discovered(pb, "http://act2.t/1")])
    put(server, [discovered(pb, "http://act2.t/2")])
    assert stats(server).counts["active_queues"] == 2
    assert len(get(server, max_urls_per_queue=1)) == 2
    st = stats(server)
    assert (st.counts["active_queues"], st.inProcess) == (2, 2), st
    put(server, [known(pb, "http://act1.t/1")])
    assert stats(server).counts["active_queues"] == 1
