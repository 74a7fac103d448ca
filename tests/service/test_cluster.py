"""Three `crivello serve` nodes sharing the hosts (--node, --peers): items put to any node
reach their key's owner, each URL is served once and by its owner only, calls with
local = false reach the owner or every node, a node that is down has its items kept in the
hand-off logs of the others and delivered once when it is back, and bad lists are refused."""

import subprocess
import threading
import time

import grpc
import pytest

from conftest import BIN, Server, free_ports, now_s
from helpers import discovered, get, known, put


def hosts_urls(n_hosts, per_host, tag="h"):
    return [f"http://{tag}{h}.example/{i}" for i in range(per_host) for h in range(n_hosts)]


def host_of(url):
    return url.split("/")[2]


def served_by_each(cluster, crawl="DEFAULT", rounds=50):
    """Leases everything each node hands out (acking each URL done); {node index: [url]}."""
    pb = cluster[0].pb
    out = {i: [] for i in range(len(cluster.nodes))}
    for _ in range(rounds):
        got_any = False
        for i, node in enumerate(cluster.nodes):
            got = list(node.stub.GetURLs(pb.GetParams(crawlID=crawl, max_urls_per_queue=100)))
            if got:
                got_any = True
                out[i] += [g.url for g in got]
                assert all(a == "OK" for _, a in put(node, [known(pb, g.url, 0) for g in got]))
        if not got_any:
            break
    return out


def local_count(node, key="", crawl="DEFAULT"):
    pb = node.pb
    return node.stub.CountURLs(pb.CountUrlParams(key=key, crawlID=crawl, local=True)).value


def test_list_nodes_lists_every_node(cluster_factory):
    c = cluster_factory(3)
    want = [f"127.0.0.1:{p}" for p in c.ports]
    for node in c.nodes:
        assert sorted(node.stub.ListNodes(node.pb.Empty()).values) == sorted(want)


def test_urls_put_to_any_node_are_served_once_each_by_their_owner(cluster_factory):
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(60, 5)
    # Half through PutURLs to node 0, half through PutDiscovered to node 1.
    first, second = urls[: len(urls) // 2], urls[len(urls) // 2 :]
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in first]))
    batches = [pb.DiscoveredBatch(ID=str(i), items=[pb.URLInfo(url=u) for u in second[i : i + 50]])
               for i in range(0, len(second), 50)]
    acks = list(c[1].stub.PutDiscovered(iter(batches)))
    assert [a.ID for a in acks] == [b.ID for b in batches]
    assert all(s == pb.AckMessage.Status.OK for a in acks for s in a.statuses)
    # Again through node 2: every one is known already, wherever it lives.
    again = put(c[2], [discovered(pb, u) for u in urls[:40]])
    assert [s for _, s in again] == ["SKIPPED"] * 40

    # Every node owns some hosts; each host lives on one node.
    owners = {}
    for i, node in enumerate(c.nodes):
        listed = node.stub.ListQueues(pb.Pagination(size=1000, local=True)).values
        for key in listed:
            assert key not in owners, f"{key} on nodes {owners[key]} and {i}"
            owners[key] = i
    assert sorted(owners) == sorted({host_of(u) for u in urls})
    assert len(set(owners.values())) == 3, owners

    # Aggregates through any node count all of them; local ones only the node's.
    for node in c.nodes:
        s = node.stub.GetStats(pb.QueueWithinCrawlParams())
        assert s.size == len(urls) and s.numberOfQueues == 60
        assert node.stub.CountURLs(pb.CountUrlParams()).value == len(urls)
        q = node.stub.ListQueues(pb.Pagination(size=7, start=10))
        assert q.total == 60 and q.size == 7
    assert sum(local_count(n) for n in c.nodes) == len(urls)

    served = served_by_each(c)
    everything = [u for got in served.values() for u in got]
    assert sorted(everything) == sorted(urls), "each URL served once"
    for i, got in served.items():
        assert all(owners[host_of(u)] == i for u in got), f"node {i} served another's URL"
    # First-appearance order within each host.
    for i, got in served.items():
        for h in {host_of(u) for u in got}:
            assert [u for u in got if host_of(u) == h] == [u for u in urls if host_of(u) == h]


def test_calls_reach_the_owner_or_every_node(cluster_factory):
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(30, 3, tag="k") + [f"http://x.example/{i}" for i in range(3)]
    put(c[0], [discovered(pb, u, crawl="one") for u in urls])
    put(c[0], [discovered(pb, u, crawl="two") for u in urls[:9]])
    owner = next(i for i, n in enumerate(c.nodes) if local_count(n, "x.example", "one") == 3)
    other = (owner + 1) % 3

    # Per-key calls through a node that does not own the key reach its owner.
    item = c[other].stub.GetURLStatus(pb.URLStatusRequest(url="http://x.example/1", crawlID="one"))
    assert item.known.info.url == "http://x.example/1"
    with pytest.raises(grpc.RpcError) as e:
        c[other].stub.GetURLStatus(pb.URLStatusRequest(url="http://x.example/9", crawlID="one"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    c[other].stub.BlockQueueUntil(
        pb.BlockQueueParams(key="x.example", crawlID="one", time=int(time.time()) + 3600))
    assert list(c[owner].stub.GetURLs(pb.GetParams(key="x.example", crawlID="one"))) == []
    c[other].stub.BlockQueueUntil(pb.BlockQueueParams(key="x.example", crawlID="one", time=0))
    c[other].stub.SetCrawlLimit(pb.CrawlLimitParams(key="x.example", crawlID="one", limit=1))
    got = list(c[owner].stub.GetURLs(pb.GetParams(key="x.example", crawlID="one", max_urls_per_queue=5)))
    assert [g.url for g in got] == ["http://x.example/0"]
    st = c[other].stub.GetStats(pb.QueueWithinCrawlParams(key="x.example", crawlID="one"))
    assert st.size == 3 and st.inProcess == 1
    assert c[other].stub.CountURLs(pb.CountUrlParams(key="x.example", crawlID="one")).value == 3
    listed = list(c[other].stub.ListURLs(pb.ListUrlParams(key="x.example", crawlID="one")))
    assert [i.known.info.url for i in listed] == [f"http://x.example/{i}" for i in range(3)]
    assert c[other].stub.DeleteQueue(pb.QueueWithinCrawlParams(key="x.example", crawlID="one")).value == 3
    assert local_count(c[owner], "x.example", "one") == 0

    # Aggregates: every node's share, pages cut across nodes.
    n = len(urls) - 3
    for node in c.nodes:
        assert sorted(node.stub.ListCrawls(pb.Local()).values) == ["one", "two"]
        pages = []
        for start in range(0, n, 7):
            page = list(node.stub.ListURLs(pb.ListUrlParams(crawlID="one", start=start, size=7)))
            assert len(page) == min(7, n - start)
            pages += [i.known.info.url for i in page]
        assert sorted(pages) == sorted(urls[:-3])
    assert sorted(c[0].stub.ListCrawls(pb.Local(local=True)).values) in (["one"], ["one", "two"])

    # Reaching every node: SetActive, SetDelay with no key, DeleteCrawl.
    c[1].stub.SetActive(pb.Active(state=False))
    assert [n.stub.GetActive(pb.Local()).state for n in c.nodes] == [False] * 3
    assert all(list(n.stub.GetURLs(pb.GetParams(crawlID="one"))) == [] for n in c.nodes)
    c[2].stub.SetActive(pb.Active(state=True))
    assert [n.stub.GetActive(pb.Local()).state for n in c.nodes] == [True] * 3
    # local = true: this node alone.
    c[0].stub.SetActive(pb.Active(state=False, local=True))
    assert [n.stub.GetActive(pb.Local(local=True)).state for n in c.nodes] == [False, True, True]
    # Asked of the cluster (local false): active only if every node is.
    assert [n.stub.GetActive(pb.Local()).state for n in c.nodes] == [False] * 3
    c[0].stub.SetActive(pb.Active(state=True, local=True))
    assert c[2].stub.DeleteCrawl(pb.DeleteCrawlMessage(value="two")).value == 9
    assert all(node.stub.ListCrawls(pb.Local(local=True)).values in ([], ["one"]) for node in c.nodes)


def test_per_host_exclusivity_across_the_cluster(cluster_factory):
    """Fetchers on every node at once: never two URLs of one host in transit together."""
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(12, 6, tag="p")
    put(c[0], [discovered(pb, u) for u in urls])
    in_flight = set()
    served = []
    errors = []
    lock = threading.Lock()
    deadline = time.time() + 60

    def fetcher(node):
        while time.time() < deadline:
            got = list(node.stub.GetURLs(pb.GetParams(crawlID="DEFAULT", max_urls_per_queue=1)))
            if not got:
                with lock:
                    if len(served) == len(urls):
                        return
                time.sleep(0.01)
                continue
            with lock:
                for g in got:
                    if host_of(g.url) in in_flight:
                        errors.append(g.url)
                    in_flight.add(host_of(g.url))
                    served.append(g.url)
            time.sleep(0.005)
            with lock:
                for g in got:
                    in_flight.discard(host_of(g.url))
            # Done through another node than the one that handed it out.
            other = c[(c.nodes.index(node) + 1) % 3]
            put(other, [known(pb, g.url, 0) for g in got])

    threads = [threading.Thread(target=fetcher, args=(c[i % 3],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(served) == sorted(urls)


def test_a_node_that_is_down_gets_its_items_once_when_it_is_back(cluster_factory):
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(40, 10, tag="d")
    c[2].kill()
    # Streams to node 0 while node 2 is down: every item acknowledged OK.
    acks = put(c[0], [discovered(pb, u, ident=u) for u in urls])
    assert len(acks) == len(urls) and all(s == "OK" for _, s in acks)
    # Known updates of URLs node 2 owns wait in the log too, behind their discovery.
    down_keys = set()
    for u in urls:
        h = host_of(u)
        if local_count(c[0], h) == 0 and local_count(c[1], h) == 0:
            down_keys.add(h)
    assert down_keys, "node 2 owns none of 40 hosts"
    done_url = next(u for u in urls if host_of(u) in down_keys)
    assert put(c[1], [known(pb, done_url, 0)]) == [(done_url, "OK")]
    # kill -9 of node 0 too, with its hand-off log full: nothing acknowledged is lost.
    c[0].kill()
    c[0].restart()
    c[2].restart()
    want = len([u for u in urls if host_of(u) in down_keys]) - 1
    deadline = time.time() + 30
    while local_count(c[2]) < want and time.time() < deadline:
        time.sleep(0.1)
    assert local_count(c[2]) == want
    served = served_by_each(c)
    everything = sorted(u for got in served.values() for u in got)
    assert everything == sorted(u for u in urls if u != done_url)
    assert "hand-off" in c[0].log()
    # Delivered once: a second restart delivers nothing again.
    c[0].stop()
    c[0].restart()
    time.sleep(0.5)
    assert local_count(c[2]) == 0
    assert served_by_each(c) == {0: [], 1: [], 2: []}


def test_a_node_back_hands_out_nothing_before_the_hand_off_logs_kept_for_it(cluster_factory):
    # Leases run out while their owner is down, and their fetchers put the URLs' updates
    # through another node: acknowledged OK, they wait in its hand-off log. Before, the owner
    # back handed every one of them out again at its first GetURLs (the log reached it up to
    # 5 s later), and an older update delivered late replaced a newer one.
    c = cluster_factory(3)
    pb = c[0].pb
    urls = [f"http://k{i:02}.t/{j}" for j in (1, 2) for i in range(40)]
    assert {s for _, s in put(c[0], [discovered(pb, u) for u in urls])} == {"OK"}
    leased = {}
    for i, n in enumerate(c.nodes):
        for x in get(n, max_queues=0, delay_requestable=2):
            leased[x.url] = i
    victim = max(range(3), key=lambda i: sum(v == i for v in leased.values()))
    other = (victim + 1) % 3
    mine = sorted(u for u, i in leased.items() if i == victim)
    assert len(mine) >= 4, leased
    done, later = mine[::2], mine[1::2]
    tomorrow = now_s() + 86400
    c[victim].kill()
    items = [known(pb, u, 0) for u in done] + [known(pb, u, tomorrow) for u in later]
    assert {s for _, s in put(c[other], items)} == {"OK"}
    time.sleep(2.5)  # the leases' deadlines pass while their owner is down
    c[victim].start()
    # At once, while the other nodes' logs are delivered: nothing of those URLs.
    handed = set()
    deadline = time.time() + 30
    while time.time() < deadline:
        handed |= {x.url for x in get(c[victim], max_queues=0, delay_requestable=60)}
        counts = c[victim].stub.GetStats(pb.QueueWithinCrawlParams(local=True)).counts
        if counts.get("catching_up", 0) == 0:
            break
        time.sleep(0.01)
    handed |= {x.url for x in get(c[victim], max_queues=0, delay_requestable=60)}
    assert not handed & set(mine), sorted(handed & set(mine))
    # The URLs of their hosts waiting behind them are served: the owner hands out again.
    assert handed, "nothing handed out once the hand-off logs were delivered"
    assert "delivered what their hand-off logs held for this node" in c[victim].log()
    for u in done:
        status = c[victim].stub.GetURLStatus(pb.URLStatusRequest(url=u))
        assert status.known.refetchable_from_date == 0, u
    for u in later:
        status = c[victim].stub.GetURLStatus(pb.URLStatusRequest(url=u))
        assert status.known.refetchable_from_date == tomorrow, u
    # A done put on the owner directly now is not replaced by anything delivered late.
    assert put(c[victim], [known(pb, later[0], 0)]) == [(later[0], "OK")]
    time.sleep(0.5)
    status = c[victim].stub.GetURLStatus(pb.URLStatusRequest(url=later[0]))
    assert status.known.refetchable_from_date == 0


def test_a_node_back_waits_for_what_was_held_not_for_a_flow_that_never_stops(cluster_factory):
    # The owner restarted waits for the records another node's logs held for it at its first
    # answer, not for those a steady flow of items appends behind them (that node delivers
    # one record a round and logs what came meanwhile as the next one: its count would never
    # reach zero while the owner hands out nothing).
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(40, 1, tag="f")
    assert {s for _, s in put(c[0], [discovered(pb, u) for u in urls])} == {"OK"}
    owned = {i: [u for u in urls if local_count(n, host_of(u)) == 1] for i, n in enumerate(c.nodes)}
    victim = max(owned, key=lambda i: len(owned[i]))
    other = (victim + 1) % 3
    hosts = sorted({host_of(u) for u in owned[victim]})
    c[victim].kill()
    assert {s for _, s in put(c[other], [discovered(pb, f"http://{h}/held") for h in hosts])} == {"OK"}
    stop = threading.Event()

    def flow(j):
        k = 0
        while not stop.is_set():
            k += 1
            put(c[other], [discovered(pb, f"http://{h}/flow{j}-{k}") for h in hosts])

    threads = [threading.Thread(target=flow, args=(j,)) for j in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        c[victim].start()
        deadline = time.time() + 20
        while True:
            counts = c[victim].stub.GetStats(pb.QueueWithinCrawlParams(local=True)).counts
            if counts.get("catching_up", 0) == 0:
                break
            assert time.time() < deadline, c[victim].log()[-3000:]
            time.sleep(0.05)
        # What was held at its first answer is there.
        for h in hosts:
            assert local_count(c[victim], h) >= 2, h
        assert "handing out without" not in c[victim].log()
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_nodes_started_with_other_lists_refuse_each_other(cluster_factory, server_factory, tmp_path):
    c = cluster_factory(2)
    pb = c[0].pb
    # A third process that believes it is n1 in a three-node cluster with n0.
    p = free_ports(1)[0]
    wrong = f"{c.peers},n2=127.0.0.1:{p}"
    stray = server_factory("--node", "n2", "--peers", wrong, directory=tmp_path / "stray")
    urls = hosts_urls(30, 1, tag="w")
    acks = put(stray, [discovered(pb, u) for u in urls])
    # Its own keys OK; the items for n0 and n1 refused by them (FAIL), never acked OK.
    assert any(s == "FAIL" for _, s in acks)
    time.sleep(0.2)
    log = c[0].log() + c[1].log() + stray.log()
    assert c.peers in stray.log() and wrong in stray.log(), log[-3000:]
    assert "another list of nodes" in stray.log()
    total = sum(local_count(n) for n in c.nodes)
    assert total == 0


@pytest.mark.parametrize(
    "peers, why",
    [
        ("b=127.0.0.1:1", "not among the --peers"),
        ("a=127.0.0.1:1,a=127.0.0.1:2", "two nodes are named a"),
        ("a=127.0.0.1:1,b=127.0.0.1:1", "two nodes have the address"),
        ("a=somewhere:1", "not an address"),
    ],
)
def test_bad_peer_lists_are_refused(tmp_path, peers, why):
    out = subprocess.run(
        [BIN, "serve", str(tmp_path / "d"), "--node", "a", "--peers", peers],
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 2, "a usage error"
    assert why in out.stderr.decode(), out.stderr.decode()


def test_kill_9_of_the_owner_while_clients_stream_to_another_node(cluster_factory):
    """Every item acknowledged OK survives, and reaches its owner once it is back."""
    c = cluster_factory(3, "--per-queue", "100")
    pb = c[0].pb
    urls = hosts_urls(50, 60, tag="s")
    acked = []
    failed = []

    def stream(node, part):
        def items():
            for i, u in enumerate(part):
                if i % 50 == 0:
                    time.sleep(0.01)
                yield discovered(pb, u, ident=u)

        try:
            for a in node.stub.PutURLs(items()):
                (acked if a.status == pb.AckMessage.Status.OK else failed).append(a.ID)
        except grpc.RpcError:
            pass

    threads = [
        threading.Thread(target=stream, args=(c[0], urls[0::2])),
        threading.Thread(target=stream, args=(c[1], urls[1::2])),
    ]
    for t in threads:
        t.start()
    time.sleep(0.3)
    c[2].kill()
    for t in threads:
        t.join()
    assert failed == []
    assert len(acked) == len(urls), "both streams ran to their end"
    c[2].restart()
    deadline = time.time() + 30
    while sum(local_count(n) for n in c.nodes) < len(urls) and time.time() < deadline:
        time.sleep(0.1)
    served = served_by_each(c, rounds=200)
    everything = [u for got in served.values() for u in got]
    assert len(everything) == len(set(everything)), "served twice"
    assert sorted(everything) == sorted(acked)
    assert "hand-off" in c[0].log() + c[1].log()


def start_fails(directory, *args):
    out = subprocess.run([BIN, "serve", str(directory), *args], capture_output=True, timeout=60)
    assert out.returncode != 0, out
    return out.stderr.decode()


def test_a_new_list_that_would_strand_queues_or_hand_offs_is_refused(cluster_factory, server_factory):
    # A node that served alone cannot join a cluster with queues another node would own.
    alone_node = server_factory()
    pb = alone_node.pb
    urls = hosts_urls(20, 2, tag="m")
    assert all(s == "OK" for _, s in put(alone_node, [discovered(pb, u) for u in urls]))
    assert alone_node.stop() == 0
    pair = ",".join(f"{m}=127.0.0.1:{p}" for m, p in zip(["n0", "n1"], free_ports(2)))
    err = start_fails(alone_node.dir, "--node", "n0", "--peers", pair)
    assert "it served them alone" in err, err

    c = cluster_factory(2)
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    grown = f"{c.peers},n2=127.0.0.1:{free_ports(1)[0]}"

    # n1 down, items for it in n0's hand-off log: a list without n1 is refused.
    c[1].kill()
    mine = [u for u in hosts_urls(20, 1, tag="q")]
    put(c[0], [discovered(pb, u) for u in mine])
    assert "hand-off" in c[0].log()
    assert c[0].stop() == 0
    alone = c.peers.split(",")[0]
    err = start_fails(c[0].dir, "--node", "n0", "--peers", alone)
    assert "records for node n1" in err, err
    # n1 still listed, but the list changed: some of those records' keys may now be n2's.
    err = start_fails(c[0].dir, "--node", "n0", "--peers", grown)
    assert "the node list changed" in err, err
    c[0].restart()
    c[1].restart()
    deadline = time.time() + 30
    while c[0].stub.CountURLs(pb.CountUrlParams()).value < len(urls) + len(mine) and time.time() < deadline:
        time.sleep(0.1)
    assert c[0].stub.CountURLs(pb.CountUrlParams()).value == len(urls) + len(mine)


def test_a_delete_waits_for_hand_offs_that_would_undo_it(cluster_factory):
    c = cluster_factory(2)
    pb = c[0].pb
    c[1].kill()
    urls = hosts_urls(20, 2, tag="x")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u, crawl="gone") for u in urls]))
    stats = c[0].stub.GetStats(pb.QueueWithinCrawlParams(crawlID="gone", local=True))
    assert stats.counts["handoff_records"] > 0
    with pytest.raises(grpc.RpcError) as e:
        c[0].stub.DeleteCrawl(pb.DeleteCrawlMessage(value="gone"))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "hand-off records wait" in e.value.details()
    c[1].restart()
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            deleted = c[0].stub.DeleteCrawl(pb.DeleteCrawlMessage(value="gone")).value
            break
        except grpc.RpcError:
            time.sleep(0.2)
    assert deleted == len(urls)
    time.sleep(0.5)
    assert c[0].stub.CountURLs(pb.CountUrlParams(crawlID="gone")).value == 0


def owners_of(cluster, urls):
    """Puts `urls` through node 0; {host: index of the node holding its queue}."""
    pb = cluster[0].pb
    assert all(s == "OK" for _, s in put(cluster[0], [discovered(pb, u) for u in urls]))
    owners = {}
    for i, node in enumerate(cluster.nodes):
        for key in node.stub.ListQueues(pb.Pagination(size=1000, local=True)).values:
            assert key not in owners, f"{key} on nodes {owners[key]} and {i}"
            owners[key] = i
    assert sorted(owners) == sorted({host_of(u) for u in urls})
    return owners


def test_every_assignment_and_replica_count_is_honoured(cluster_factory):
    urls = hosts_urls(90, 2, tag="a")
    maps = {}
    for args in [(), ("--assign", "rendezvous"), ("--assign", "permutation"),
                 ("--assign", "consistent", "--replicas", "7")]:
        c = cluster_factory(3, *args)
        owners = maps[args] = owners_of(c, urls)
        assert len(set(owners.values())) == 3, (args, owners)
        # Each URL served once, by the node its method gives its host.
        served = served_by_each(c)
        assert sorted(u for got in served.values() for u in got) == sorted(urls), args
        for i, got in served.items():
            assert all(owners[host_of(u)] == i for u in got), (args, i)
        c.stop()
    # The flags take effect: over 90 hosts, two methods (or C = 7 against C = 300) giving
    # the same owner to every host would be a coincidence of about 3^-60.
    kinds = list(maps)
    for a in range(len(kinds)):
        for b in range(a + 1, len(kinds)):
            assert maps[kinds[a]] != maps[kinds[b]], (kinds[a], kinds[b])


def test_nodes_with_another_assignment_refuse_each_other(api, tmp_path):
    # One list of nodes, two methods: n1 refuses what n0 forwards, naming both.
    ports = free_ports(2)
    peers = f"n0=127.0.0.1:{ports[0]},n1=127.0.0.1:{ports[1]}"
    nodes = [
        Server(api, tmp_path / "n0", "--node", "n0", "--peers", peers, listen=False),
        Server(api, tmp_path / "n1", "--node", "n1", "--peers", peers, "--assign", "rendezvous",
               listen=False),
    ]
    try:
        pb = nodes[0].pb
        acks = put(nodes[0], [discovered(pb, u) for u in hosts_urls(30, 1, tag="r")])
        assert any(s == "FAIL" for _, s in acks)
        time.sleep(0.2)
        log = nodes[0].log() + nodes[1].log()
        assert "rendezvous" in log and "consistent" in log, log[-3000:]
        assert "another list of nodes" in log, log[-3000:]
        # What n0 accepted is its own keys' (by its method), none of them on n1.
        assert local_count(nodes[1]) == 0
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait()


def owner_index(cluster, url, crawl="DEFAULT"):
    """The node that holds `url`'s queue (local count of its host)."""
    for i, node in enumerate(cluster.nodes):
        if local_count(node, host_of(url), crawl) > 0:
            return i
    raise AssertionError(f"no node holds {url}")


def status_of(node, url):
    """(known?, refetch date) of `url` on its owner, through `node`."""
    pb = node.pb
    item = node.stub.GetURLStatus(pb.URLStatusRequest(url=url, crawlID="DEFAULT"))
    return item.WhichOneof("item"), item.known.refetchable_from_date


def test_forwarded_known_items_apply_once_and_each_start_numbers_anew(cluster_factory):
    """A known item forwarded by another node carries its number in the sender's lane: sent
    again (the sender did not learn that it arrived), it is answered OK and not applied
    twice; a node restarted numbers its items above everything it sent before."""
    c = cluster_factory(3)
    pb = c[0].pb
    urls = [f"http://r{h}.example/{i}" for h in range(30) for i in range(3)]
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    # A host owned by neither node 0 (the sender) nor node 2 (the one the test plays).
    host = next(h for h in range(30) if owner_index(c, f"http://r{h}.example/0") == 1)
    u = [f"http://r{host}.example/{i}" for i in range(3)]
    owner = c[1]

    # Through node 0: done, then node 0 restarts (kill -9), then the next URL done through it.
    assert put(c[0], [known(pb, u[0], 0, ident="a")]) == [("a", "OK")]
    assert status_of(owner, u[0]) == ("known", 0)
    c[0].kill()
    c[0].restart()
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            acks = put(c[0], [known(pb, u[1], 0, ident="x")])
            break
        except grpc.RpcError:
            time.sleep(0.1)
    assert acks == [("x", "OK")]
    # Numbered below what node 0 sent before its restart, it would be taken for a repeat.
    assert status_of(owner, u[1]) == ("known", 0), "an item after a restart was not applied"
    got = [g.url for g in get(owner, key=f"r{host}.example", max_urls_per_queue=5)]
    assert got == [u[2]]
    assert put(owner, [known(pb, u[2], 0, ident="c")]) == [("c", "OK")]

    # Playing node 2's lane 5: an item to fetch again now, then the same item sent again
    # after the URL was fetched and done.
    with open(f"{owner.dir}/handoff/members") as f:
        members = f.read().strip()
    meta = [("crivello-node", "n2"), ("crivello-members", members),
            ("crivello-lane", "5/00000000000000ab")]
    number = str((1 << 62) + 7)
    again = known(pb, u[0], now_s() - 10, ident=number)
    acks = [(a.ID, a.status) for a in owner.stub.PutURLs(iter([again]), metadata=meta)]
    assert acks == [(number, pb.AckMessage.Status.OK)]
    assert status_of(owner, u[0])[1] > 0, "to fetch again"
    deadline = time.time() + 10
    served = []
    while u[0] not in served and time.time() < deadline:
        served += [g.url for g in get(owner, key=f"r{host}.example", max_urls_per_queue=5)]
        time.sleep(0.05)
    assert u[0] in served
    assert put(owner, [known(pb, u[0], 0, ident="done")]) == [("done", "OK")]
    acks = [(a.ID, a.status) for a in owner.stub.PutURLs(iter([again]), metadata=meta)]
    assert acks == [(number, pb.AckMessage.Status.OK)], "a repeat is acknowledged"
    assert status_of(owner, u[0]) == ("known", 0), "a repeat applied again"
    time.sleep(0.5)
    assert u[0] not in [g.url for g in get(owner, key=f"r{host}.example", max_urls_per_queue=5)]
    # The receipt outlives a restart of the owner.
    owner.kill()
    owner.restart()
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            acks = [(a.ID, a.status) for a in owner.stub.PutURLs(iter([again]), metadata=meta)]
            break
        except grpc.RpcError:
            time.sleep(0.1)
    assert acks == [(number, pb.AckMessage.Status.OK)]
    assert status_of(owner, u[0]) == ("known", 0), "a repeat applied after a restart"


def test_a_store_started_under_another_nodes_name_is_refused(cluster_factory):
    # A node's store records whose it is at its first start: started as another node of the
    # list, it would serve (or, under a name the list does not hold, send away) what the
    # other node's store holds, and the URLs put through it would be lost to both.
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(30, 2, tag="w")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    assert c[0].stop() == 0
    err = start_fails(c[0].dir, "--node", "n1", "--peers", c.peers)
    assert "is the store of node n0, not of node n1" in err, err
    assert "--node n0" in err, err
    # A name the list does not hold: refused too, and the store keeps its records.
    err = start_fails(c[0].dir, "--node", "x", "--peers", c.peers)
    assert "is the store of node n0, not of node x" in err, err
    c[0].restart()
    deadline = time.time() + 30
    while c[0].stub.CountURLs(pb.CountUrlParams()).value < len(urls) and time.time() < deadline:
        time.sleep(0.1)
    assert c[0].stub.CountURLs(pb.CountUrlParams()).value == len(urls)
