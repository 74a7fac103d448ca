"""url-frontier's own test suite (URLFrontierServiceTest of crawler-commons/url-frontier),
case by case, and the assertions of its DumpURLsTest through ListURLs, GetURLStatus and
CountURLs."""

import time

import grpc
import pytest

from helpers import discovered, get, known, now_s, put, stats


@pytest.fixture(autouse=True)
def clean(server):
    # As the original suite does before each test.
    pb = server.pb
    server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="BESPOKE"))
    server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value=""))


def test_never_refetched(server):
    acks = put(server, [known(server.pb, "http://key1.com/", 0, key="key1.com")])
    assert len(acks) == 1
    got = get(server, key="key1.com", max_urls_per_queue=1, delay_requestable=2, crawl="DEFAULT")
    assert got == []


def test_right_order(server):
    pb = server.pb
    now = now_s()
    acks = put(
        server,
        [
            known(pb, "http://key1.com/later", now, key="key1.com"),
            known(pb, "http://key1.com/sooner", now - 10000, key="key1.com"),
        ],
    )
    assert len(acks) == 2
    got = get(server, key="key1.com", max_urls_per_queue=2, delay_requestable=2, crawl="DEFAULT")
    assert got and got[0].url == "http://key1.com/sooner"


def test_updates(server):
    pb = server.pb
    url = "http://key1.com/"
    acks = put(server, [discovered(pb, url, key="key1.com"), discovered(pb, url, key="key1.com")])
    assert len(acks) == 2
    # crivello says which one was new.
    assert [s for _, s in acks] == ["OK", "SKIPPED"]
    queues = server.stub.ListQueues(pb.Pagination())
    assert list(queues.values) == ["key1.com"]
    got = get(server, key="key1.com", max_urls_per_queue=1, delay_requestable=2, crawl="DEFAULT")
    assert [g.url for g in got] == [url]
    s = stats(server, key="key1.com")
    assert s.numberOfQueues == 1
    assert s.inProcess == 1
    assert get(server, key="key1.com", max_urls_per_queue=1, delay_requestable=2, crawl="DEFAULT") == []
    time.sleep(2)
    assert stats(server, key="key1.com").inProcess == 0
    deleted = server.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="key1.com"))
    assert deleted.value == 1
    assert stats(server, key="key1.com").numberOfQueues == 0


def test_queue_names(server):
    pb = server.pb
    url = "http://gac.icann.org?language_id=9"
    assert len(put(server, [discovered(pb, url)])) == 1
    assert stats(server, key="gac.icann.org").size == 1
    deleted = server.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="gac.icann.org"))
    assert deleted.value == 1


def test_crawl_ids(server):
    pb = server.pb
    assert list(server.stub.ListCrawls(pb.Local()).values) == []
    url = "http://key1.com/"
    # The same URL in crawl BESPOKE, with no crawl, and in DEFAULT: three streams.
    assert len(put(server, [discovered(pb, url, crawl="BESPOKE")])) == 1
    assert len(put(server, [discovered(pb, url)])) == 1
    assert len(put(server, [discovered(pb, url, crawl="DEFAULT")])) == 1
    s = stats(server)
    assert (s.size, s.crawlID, s.numberOfQueues) == (1, "DEFAULT", 1)
    s = stats(server, crawl="BESPOKE")
    assert (s.size, s.numberOfQueues) == (1, 1)
    server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="BESPOKE"))
    s = stats(server, crawl="BESPOKE")
    assert (s.size, s.crawlID) == (0, "BESPOKE")
    server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value=""))
    assert stats(server, crawl="").size == 0
    assert list(server.stub.ListCrawls(pb.Local()).values) == []


def _dump(server, crawl=""):
    pb = server.pb
    return list(server.stub.ListURLs(pb.ListUrlParams(crawlID=crawl)))


def test_dump_urls_assertions(server):
    pb = server.pb
    later = now_s() + 3600
    acks = put(
        server,
        [
            discovered(pb, "http://dump.com/seed", metadata={"source": ["seed"]}),
            known(pb, "http://dump.com/done", 0),
            known(pb, "http://dump.com/later", later, metadata={"depth": ["2"]}),
            discovered(pb, "http://bespoke.com/", crawl="BESPOKE"),
        ],
    )
    assert [s for _, s in acks] == ["OK"] * 4
    items = _dump(server) + _dump(server, "BESPOKE")
    # Every item comes back as a known item. crivello lists the URLs its queues hold: a
    # done URL is known by its signature only (GetURLStatus answers for it).
    assert all(i.WhichOneof("item") == "known" for i in items)
    by_url = {i.known.info.url: i for i in items}
    assert set(by_url) == {"http://dump.com/seed", "http://dump.com/later", "http://bespoke.com/"}
    seed = by_url["http://dump.com/seed"]
    assert list(seed.known.info.metadata["source"].values) == ["seed"]
    assert seed.creation_date > 0
    assert by_url["http://dump.com/later"].known.refetchable_from_date == later
    assert by_url["http://bespoke.com/"].known.info.crawlID == "BESPOKE"

    status = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://dump.com/done"))
    assert status.known.refetchable_from_date == 0
    status = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://dump.com/later"))
    assert status.known.refetchable_from_date == later
    assert list(status.known.info.metadata["depth"].values) == ["2"]
    status = server.stub.GetURLStatus(pb.URLStatusRequest(url="http://dump.com/seed"))
    assert status.creation_date == seed.creation_date
    with pytest.raises(grpc.RpcError) as e:
        server.stub.GetURLStatus(pb.URLStatusRequest(url="http://dump.com/never"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND

    assert server.stub.CountURLs(pb.CountUrlParams(crawlID="BESPOKE")).value == 1
    assert server.stub.CountURLs(pb.CountUrlParams()).value == 2
    assert server.stub.CountURLs(pb.CountUrlParams(filter="SEED", ignoreCase=True)).value == 1
    assert server.stub.CountURLs(pb.CountUrlParams(filter="SEED")).value == 0

    # Wiped, then re-imported from the dump: the date and the metadata are kept.
    server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value=""))
    server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="BESPOKE"))
    assert list(server.stub.ListCrawls(pb.Local(local=True)).values) == []
    for i in items:
        i.ID = ""
    acks = put(server, items)
    assert [s for _, s in acks] == ["OK"] * 3
    again = {i.known.info.url: i for i in _dump(server) + _dump(server, "BESPOKE")}
    assert again["http://dump.com/seed"].creation_date == seed.creation_date
    assert list(again["http://dump.com/seed"].known.info.metadata["source"].values) == ["seed"]


def test_list_urls_pages(server):
    pb = server.pb
    urls = [f"http://page.com/{i:02}" for i in range(21)]
    assert len(put(server, [discovered(pb, u) for u in urls])) == 21
    listed = [
        i.known.info.url
        for i in server.stub.ListURLs(pb.ListUrlParams(key="page.com", start=5, size=10))
    ]
    # First-appearance order in a queue.
    assert listed == urls[5:15]
    every = [i.known.info.url for i in server.stub.ListURLs(pb.ListUrlParams(key="page.com"))]
    assert every == urls
