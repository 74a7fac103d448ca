"""url-frontier's own test cases (test_conformance) and PutDiscovered's statuses, run against
a three-node cluster through each of its nodes in turn: every call goes to that node, except
GetURLs, which asks every node for its own queues, as a crawler with one spout per node
(StormCrawler) does."""

import pytest

from conftest import Cluster
from test_conformance import (  # noqa: F401  (the tests and their fixture, run here again)
    clean,
    test_crawl_ids,
    test_dump_urls_assertions,
    test_list_urls_pages,
    test_never_refetched,
    test_queue_names,
    test_right_order,
    test_updates,
)
from test_streams import test_put_discovered_statuses  # noqa: F401


class _Stub:
    """A node's stub whose GetURLs asks every node."""

    def __init__(self, cluster, entry):
        self._cluster = cluster
        self._entry = entry

    def __getattr__(self, name):
        return getattr(self._cluster[self._entry].stub, name)

    def GetURLs(self, params, **kw):
        out = []
        for node in self._cluster.nodes:
            out += list(node.stub.GetURLs(params, **kw))
        return iter(out)


class _Through:
    """The cluster as one server, through node `entry`."""

    def __init__(self, cluster, entry):
        node = cluster[entry]
        self.pb, self.rpc = node.pb, node.rpc
        self.stub = _Stub(cluster, entry)
        self.log = node.log


@pytest.fixture(scope="module", params=[0, 1, 2], ids=["via-n0", "via-n1", "via-n2"])
def server(request, api, tmp_path_factory):
    # A fresh cluster for each entry node, as the single-node suite has a fresh server.
    c = Cluster(api, tmp_path_factory.mktemp("cluster"), 3)
    yield _Through(c, request.param)
    assert c.stop() == [0, 0, 0]
