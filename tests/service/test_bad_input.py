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
            pb.URLItem(ID="no item"),
            known(pb, "", ident="empty known"),
            discovered(pb, "http://good.bad/3"),
        ],
    )
    assert acks == [
        ("http://good.bad/1", "OK"),
        ("empty", "FAIL"),
        ("long", "FAIL"),
        ("long key", "FAIL"),
        ("no item", "FAIL"),
        ("empty known", "FAIL"),
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
