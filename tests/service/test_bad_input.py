"""Bad input: each gets its answer, changes nothing else, and never disturbs other clients."""

import grpc
import pytest

from helpers import discovered, get, known, put, stats


def test_bad_items_fail_and_change_nothing_else(server):
    pb = server.pb
    acks = put(
        server,
        [
            discovered(pb, "http://good.bad/1"),
            discovered(pb, "", ident="empty"),
            discovered(pb, "http://long.bad/" + "x" * (70 << 10), ident="long"),
            discovered(pb, "http://good.bad/2", key="k" * 300, ident="long key"),
            # No key, and the URL's own (the text after :// up to the first :, /, ? or &)
            # over 255 bytes: no call could name its queue (url-frontier skips it too). A
            # known item of it is taken: a store may hold such URLs (from a plain sieve's
            # output, or a build before the check), whose leases must end.
            discovered(pb, "https://good.bad#" + "section-" * 40, ident="long own key"),
            known(pb, "https://good.bad#" + "section-" * 40, ident="long own key known"),
            discovered(pb, "http://good.bad/4", crawl="c" * 1025, ident="long crawl"),
            known(pb, "http://good.bad/5", crawl="c" * 1025, ident="long crawl known"),
            pb.URLItem(ID="no item"),
            known(pb, "", ident="empty known"),
            # A newline: one URL is one line of the command line's `lease` and `pop`.
            discovered(pb, "http://good.bad/6\nhttp://good.bad/7", ident="newline"),
            known(pb, "http://good.bad/8\n", ident="newline known"),
            # Committed in one call with the item above, which the call would refuse whole.
            known(pb, "http://other.bad/z", ident="known beside"),
            discovered(pb, "http://good.bad/9", key="good\nbad", ident="newline key"),
            discovered(pb, "http://good.bad/3"),
        ],
    )
    # SKIPPED, as url-frontier's API says of an item that should not be resent ("there is
    # something inherently wrong with it"); FAIL would have the client send it again.
    assert acks == [
        ("http://good.bad/1", "OK"),
        ("empty", "SKIPPED"),
        ("long", "SKIPPED"),
        ("long key", "SKIPPED"),
        ("long own key", "SKIPPED"),
        ("long own key known", "OK"),
        ("long crawl", "SKIPPED"),
        ("long crawl known", "SKIPPED"),
        ("no item", "SKIPPED"),
        ("empty known", "SKIPPED"),
        ("newline", "SKIPPED"),
        ("newline known", "SKIPPED"),
        ("known beside", "OK"),
        ("newline key", "SKIPPED"),
        ("http://good.bad/3", "OK"),
    ]
    assert stats(server, key="good.bad").size == 2
    assert stats(server, key="long.bad").numberOfQueues == 0


def test_unknown_crawls_give_empty_answers(server):
    pb = server.pb
    s = stats(server, crawl="nobody")
    assert (s.size, s.numberOfQueues, s.crawlID) == (0, 0, "nobody")
    assert get(server, crawl="nobody") == []
    assert list(server.stub.ListURLs(pb.ListUrlParams(crawlID="nobody"))) == []
    assert server.stub.CountURLs(pb.CountUrlParams(crawlID="nobody")).value == 0
    assert list(server.stub.ListQueues(pb.Pagination(crawlID="nobody")).values) == []
    assert server.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="nobody")).value == 0
    with pytest.raises(grpc.RpcError) as e:
        server.stub.GetURLStatus(pb.URLStatusRequest(url="http://x/", crawlID="nobody"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_empty_keys_and_urls_are_invalid_arguments(server):
    pb = server.pb
    for call in [
        lambda: server.stub.BlockQueueUntil(pb.BlockQueueParams(key="", time=1)),
        lambda: server.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="")),
        lambda: server.stub.GetURLStatus(pb.URLStatusRequest(url="")),
        lambda: server.stub.SetLogLevel(pb.LogLevelParams(level=42)),
    ]:
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_key_too_long_is_refused_alike_by_every_call_and_named_as_a_key(server):
    pb = server.pb
    long = "k" * 300
    for call in [
        lambda: server.stub.GetURLStatus(pb.URLStatusRequest(url="http://a/", key=long)),
        lambda: server.stub.SetDelay(pb.QueueDelayParams(key=long, delay_requestable=1)),
        lambda: server.stub.BlockQueueUntil(pb.BlockQueueParams(key=long, time=1)),
    ]:
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "invalid key: longer than 255 bytes" in e.value.details(), e.value.details()
        assert "option" not in e.value.details(), e.value.details()


@pytest.mark.parametrize(
    "method", ["GetStats", "ListQueues", "SetDelay", "GetURLStatus", "DeleteCrawl"]
)
def test_malformed_messages_are_invalid_arguments(server, method):
    raw = server.channel.unary_unary(
        f"/urlfrontier.URLFrontier/{method}", request_serializer=None, response_deserializer=None
    )
    for body in [b"\xff\xff\xff", b"\x0a\x05ab", b"\x08"]:
        with pytest.raises(grpc.RpcError) as e:
            raw(body)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, body
    # The server still answers.
    assert server.stub.GetActive(server.pb.Local()).state is True


def test_oversized_messages_are_resource_exhausted(server):
    pb = server.pb
    channel = grpc.insecure_channel(server.addr, options=[("grpc.max_send_message_length", 64 << 20)])
    raw = channel.unary_unary(
        "/urlfrontier.URLFrontier/GetStats", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\x0a" + b"\x80\x80\x80\x09" + b"k" * (18 << 20))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # On a stream: what came before is acknowledged, then the stream ends with the status.
    stub = server.rpc.URLFrontierStub(channel)
    big = discovered(pb, "http://big.bad/" + "x" * 100, metadata={"m": ["y" * (17 << 20)]})
    acks = []
    with pytest.raises(grpc.RpcError) as e:
        for a in stub.PutURLs(iter([discovered(pb, "http://before.bad/"), big])):
            acks.append((a.ID, a.status))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert acks == [("http://before.bad/", pb.AckMessage.Status.OK)]
    channel.close()
    assert stats(server, key="before.bad").size == 1
    assert stats(server, key="big.bad").size == 0
    assert server.stub.GetActive(pb.Local()).state is True


def test_an_item_a_default_client_could_not_receive_is_skipped(server):
    """An item of 5 MiB (metadata) fits the server's 16 MiB messages, but handed out it
    would not reach a client of gRPC's default 4 MiB limit (StormCrawler's): its GetURLs
    stream ended at it every time, and the URLs leased with it in that call never reached
    the client. It is refused (SKIPPED) and changes nothing; an item just under the bound
    is stored and handed out whole to a default client."""
    pb = server.pb
    channel = grpc.insecure_channel(server.addr, options=[("grpc.max_send_message_length", 64 << 20)])
    stub = server.rpc.URLFrontierStub(channel)
    big = discovered(pb, "http://big.bad/1", metadata={"m": ["y" * (5 << 20)]}, ident="big")
    near = discovered(pb, "http://near.bad/1", metadata={"m": ["z" * 3_900_000]}, ident="near")
    acks = [(a.ID, pb.AckMessage.Status.Name(a.status)) for a in stub.PutURLs(iter([big, near]))]
    channel.close()
    assert acks == [("big", "SKIPPED"), ("near", "OK")]
    assert stats(server, key="big.bad").size == 0
    # The default client (4 MiB) receives it.
    default = server.rpc.URLFrontierStub(grpc.insecure_channel(server.addr))
    got = list(default.GetURLs(pb.GetParams(max_urls_per_queue=1, key="near.bad")))
    assert [u.url for u in got] == ["http://near.bad/1"]
    assert len(got[0].metadata["m"].values[0]) == 3_900_000
