"""Builders of url-frontier messages, shared by the test modules."""

import time


def info(pb, url, key="", crawl="", metadata=None):
    md = {k: pb.StringList(values=v) for k, v in (metadata or {}).items()}
    return pb.URLInfo(url=url, key=key, crawlID=crawl, metadata=md)


def discovered(pb, url, key="", crawl="", metadata=None, ident=""):
    return pb.URLItem(
        discovered=pb.DiscoveredURLItem(info=info(pb, url, key, crawl, metadata)), ID=ident
    )


def known(pb, url, refetch=0, key="", crawl="", metadata=None, ident=""):
    return pb.URLItem(
        known=pb.KnownURLItem(
            info=info(pb, url, key, crawl, metadata), refetchable_from_date=refetch
        ),
        ID=ident,
    )


def put(server, items):
    """Sends items on one PutURLs stream; returns {ID: status name} (and the ack count)."""
    pb = server.pb
    acks = list(server.stub.PutURLs(iter(items)))
    return [(a.ID, pb.AckMessage.Status.Name(a.status)) for a in acks]


def get(server, **params):
    """GetURLs; returns the URLInfo messages."""
    pb = server.pb
    crawl = params.pop("crawl", None)
    if crawl is not None:
        params["crawlID"] = crawl
    return list(server.stub.GetURLs(pb.GetParams(**params)))


def stats(server, key="", crawl=""):
    return server.stub.GetStats(server.pb.QueueWithinCrawlParams(key=key, crawlID=crawl))


def now_s():
    return int(time.time())
