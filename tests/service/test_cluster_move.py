"""A node joins a cluster of `crivello serve` nodes, or leaves it: restarted with the new list
(the node that leaves started once with it, to send its queues), the nodes move the queues
whose owner changed, with everything they carry (waiting URLs in order, leases and their
deadlines, done URLs, blocks), kill -9 of a node during the move included; nothing is lost,
nothing is served twice, a URL seen before is still known, and each host lives on one node."""

import os
import random
import subprocess
import time

import grpc

from conftest import BIN, Server, free_ports
from helpers import discovered, known, put
from test_cluster import host_of, hosts_urls, served_by_each


def node_stats(node):
    pb = node.pb
    return node.stub.GetStats(pb.QueueWithinCrawlParams(local=True))


def wait_moved(nodes, timeout=90):
    """Waits until no node has a move under way, and each hands out (the other nodes'
    hand-off logs for it delivered, or a node down given up on)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        counts = [node_stats(n).counts for n in nodes]
        if all(c.get("moving", 0) == 0 and c.get("catching_up", 0) == 0 for c in counts):
            return
        time.sleep(0.2)
    logs = "\n".join(n.log()[-3000:] for n in nodes)
    raise AssertionError(f"the move did not finish; logs:\n{logs}")


def owners(nodes):
    """{host: index of the node whose store holds its queue}; no host on two nodes."""
    pb = nodes[0].pb
    out = {}
    for i, node in enumerate(nodes):
        for key in node.stub.ListQueues(pb.Pagination(size=10000, local=True, include_inactive=True)).values:
            assert key not in out, f"{key} on nodes {out[key]} and {i}"
            out[key] = i
    return out


class Nodes:
    """The nodes of a cluster as `served_by_each` takes them."""

    def __init__(self, nodes):
        self.nodes = nodes

    def __getitem__(self, i):
        return self.nodes[i]


def put_until_ok(nodes, urls, deadline_s=60):
    """Puts each URL through the nodes in turn until it is acknowledged OK (or SKIPPED):
    during a move, items of a queue that has not arrived FAIL, and a node may be down."""
    pb = nodes[0].pb
    left = list(urls)
    deadline = time.time() + deadline_s
    k = 0
    while left:
        assert time.time() < deadline, f"{len(left)} URLs never acknowledged"
        node = nodes[k % len(nodes)]
        k += 1
        try:
            acks = put(node, [discovered(pb, u, ident=u) for u in left])
        except grpc.RpcError:
            time.sleep(0.05)
            continue
        left = [u for u, s in acks if s not in ("OK", "SKIPPED")]
        if left:
            time.sleep(0.05)


def restart_with_n3(api, c, up):
    """Stops the nodes of `c`, restarts the first `up` of them with a fourth node n3 in the
    list, and starts n3; returns the nodes restarted and n3."""
    for n in c.nodes:
        assert n.stop() == 0, n.log()
    port = free_ports(1)[0]
    peers = f"{c.peers},n3=127.0.0.1:{port}"
    root = c[0].dir.rsplit("/", 1)[0]
    nodes = [
        Server(api, n.dir, "--node", name, "--peers", peers, listen=False)
        for name, n in zip(c.names[:up], c.nodes[:up])
    ]
    n3 = Server(api, f"{root}/n3", "--node", "n3", "--peers", peers, listen=False)
    return nodes, n3


def grow(api, c, kills=(), during=()):
    """Stops the nodes of `c`, restarts them with a fourth node n3 in the list, starts n3;
    puts the URLs `during` while the move runs (each until acknowledged); kills the nodes in
    `kills` (-9) at a random instant of the move and restarts them."""
    nodes, n3 = restart_with_n3(api, c, len(c.nodes))
    nodes.append(n3)
    if during:
        put_until_ok(nodes, during[: len(during) // 2])
    for k in kills:
        time.sleep(random.uniform(0, 0.3))
        nodes[k].kill()
        nodes[k].restart()
    if during:
        put_until_ok(nodes, during[len(during) // 2 :])
    c.nodes = nodes
    return nodes


def crawl_state(c):
    """URLs on 60 hosts put to a three-node cluster; one URL of every host leased for an
    hour, half of those acknowledged done; one host blocked for an hour."""
    pb = c[0].pb
    urls = hosts_urls(60, 6, tag="j")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    leased = []
    for node in c.nodes:
        got = list(node.stub.GetURLs(pb.GetParams(crawlID="DEFAULT", max_urls_per_queue=1,
                                                  delay_requestable=3600)))
        leased += [g.url for g in got]
    assert len(leased) == 60
    done = leased[::2]
    assert all(s == "OK" for _, s in put(c[1], [known(pb, u, 0) for u in done]))
    blocked = "j7.example"
    c[2].stub.BlockQueueUntil(pb.BlockQueueParams(key=blocked, crawlID="DEFAULT",
                                                  time=int(time.time()) + 3600))
    return urls, set(leased) - set(done), set(done), blocked


def check_after_move(nodes, urls, in_transit, done, blocked):
    pb = nodes[0].pb
    where = owners(nodes)
    assert sorted(where) == sorted({host_of(u) for u in urls})
    assert set(where.values()) == set(range(len(nodes))), "a node holds no host"
    # Every URL is still known, through any node.
    again = put(nodes[-1], [discovered(pb, u) for u in urls])
    assert [s for _, s in again] == ["SKIPPED"] * len(urls)
    # The leases still run (a host with a URL in transit gets no other: one at a time) and
    # the block holds: served now are exactly the other hosts' URLs waiting.
    served = served_by_each(Nodes(nodes))
    everything = [u for got in served.values() for u in got]
    busy = {host_of(u) for u in in_transit} | {blocked}
    want = [u for u in urls if u not in done and host_of(u) not in busy]
    assert sorted(everything) == sorted(want), "each waiting URL served once"
    for i, got in served.items():
        assert all(where[host_of(u)] == i for u in got), f"node {i} served another's URL"
        for h in {host_of(u) for u in got}:
            assert [u for u in got if host_of(u) == h] == [u for u in want if host_of(u) == h]
    # The blocked host's URLs and those in transit are held where their host lives now.
    owner_of_blocked = nodes[where[blocked]]
    assert owner_of_blocked.stub.CountURLs(
        pb.CountUrlParams(key=blocked, crawlID="DEFAULT", local=True)).value == len(
        [u for u in urls if host_of(u) == blocked and u not in done])
    for i, node in enumerate(nodes):
        mine = [u for u in in_transit if where[host_of(u)] == i]
        assert node_stats(node).inProcess == len(mine), (i, node.log()[-2000:])


def test_a_node_joins_and_the_hosts_it_owns_move_to_it_with_their_state(api, cluster_factory):
    c = cluster_factory(3)
    state = crawl_state(c)
    nodes = grow(api, c)
    wait_moved(nodes)
    check_after_move(nodes, *state)
    assert "moved" in nodes[0].log() + nodes[1].log() + nodes[2].log()


def test_kill_9_during_a_move_loses_and_duplicates_nothing(api, cluster_factory):
    c = cluster_factory(3)
    urls, in_transit, done, blocked = crawl_state(c)
    # New URLs while the queues move (some of the hosts moving), each put until acknowledged.
    during = hosts_urls(60, 1, tag="j")
    during = [u.replace("/0", "/late") for u in during] + hosts_urls(20, 2, tag="late")
    nodes = grow(api, c, kills=(0, 3, 1), during=during)
    wait_moved(nodes)
    check_after_move(nodes, urls + during, in_transit, done, blocked)


def shrink(api, c, kills=(), kill_leaving=False):
    """Stops the four nodes of `c`, restarts n0..n2 with a list without n3, and starts n3 once
    with that list: it sends its queues to their owners and exits 0. Kills the nodes in
    `kills` (-9) at a random instant of the move and restarts them."""
    for n in c.nodes:
        assert n.stop() == 0, n.log()
    peers = ",".join(c.peers.split(",")[:3])
    nodes = [
        Server(api, n.dir, "--node", name, "--peers", peers, listen=False)
        for name, n in zip(c.names[:3], c.nodes[:3])
    ]
    leave = [BIN, "serve", c[3].dir, "--node", "n3", "--peers", peers]
    leaving = subprocess.Popen(leave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if kill_leaving:
        time.sleep(random.uniform(0, 0.1))
        leaving.kill()
        leaving.wait()
        leaving = subprocess.Popen(leave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for k in kills:
        time.sleep(random.uniform(0, 0.3))
        nodes[k].kill()
        nodes[k].restart()
    out, err = leaving.communicate(timeout=90)
    assert leaving.returncode == 0, err.decode()
    # (Killed after it finished, the second run finds nothing left to send.)
    assert b"can be removed" in err or (kill_leaving and b"holds nothing" in err), err.decode()
    # Started again, it has nothing left to send.
    again = subprocess.run(leave, capture_output=True, timeout=60)
    assert again.returncode == 0 and b"holds nothing" in again.stderr, again
    c.nodes = nodes
    return nodes


def test_a_node_leaves_and_its_hosts_move_to_the_others_with_their_state(api, cluster_factory):
    c = cluster_factory(4)
    state = crawl_state(c)
    nodes = shrink(api, c)
    wait_moved(nodes)
    check_after_move(nodes, *state)


def test_kill_9_while_a_node_leaves_loses_and_duplicates_nothing(api, cluster_factory):
    c = cluster_factory(4)
    state = crawl_state(c)
    nodes = shrink(api, c, kills=(1, 0), kill_leaving=True)
    wait_moved(nodes)
    check_after_move(nodes, *state)


def test_a_third_list_is_refused_until_the_move_is_finished(api, cluster_factory):
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(30, 2, tag="t")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    for n in c.nodes:
        assert n.stop() == 0
    p4, p5 = free_ports(2)
    four = f"{c.peers},n3=127.0.0.1:{p4}"
    five = f"{four},n4=127.0.0.1:{p5}"
    # n0 alone restarted with four nodes: its move cannot finish while the others are down.
    n0 = Server(api, c[0].dir, "--node", "n0", "--peers", four, listen=False)
    assert node_stats(n0).counts["moving"] == 1
    assert n0.stop() == 0
    out = subprocess.run([BIN, "serve", c[0].dir, "--node", "n0", "--peers", five],
                         capture_output=True, timeout=60)
    assert out.returncode != 0 and b"is not finished" in out.stderr, out
    # With the move's list, everyone up, it finishes, and every URL is there once.
    nodes = [Server(api, n.dir, "--node", name, "--peers", four, listen=False)
             for name, n in zip(c.names, c.nodes)]
    nodes.append(Server(api, c[0].dir.rsplit("/", 1)[0] + "/n3", "--node", "n3", "--peers",
                        four, listen=False))
    c.nodes = nodes
    wait_moved(nodes)
    assert nodes[0].stub.CountURLs(pb.CountUrlParams()).value == len(urls)


def test_a_new_node_started_before_the_others_takes_nothing_a_move_would_replace(api, cluster_factory):
    """A node added to the list and started while the cluster's nodes still run with the old
    list acknowledges nothing of its keys (a move will bring their queues, and replace them);
    once the others restart with the new list, the move runs and every URL acknowledged is
    served once."""
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(40, 3, tag="e")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    # A default delay and a pause set on every node: the new node takes them too.
    c[1].stub.SetDelay(pb.QueueDelayParams(delay_requestable=30))
    c[2].stub.SetActive(pb.Active(state=False))
    port = free_ports(1)[0]
    peers = f"{c.peers},n3=127.0.0.1:{port}"
    root = c[0].dir.rsplit("/", 1)[0]
    n3 = Server(api, f"{root}/n3", "--node", "n3", "--peers", peers, listen=False)
    extra = [f"http://e{h}.example/late" for h in range(40)]
    acks = put(n3, [discovered(pb, u, ident=u) for u in extra])
    assert len(acks) == len(extra)
    assert [u for u, s in acks if s == "OK"] == [], "acknowledged before the move"
    assert node_stats(n3).counts.get("moving", 0) == 1
    assert "runs with another list" in n3.log()
    # The cluster's nodes restart with the new list: the move runs.
    for n in c.nodes:
        assert n.stop() == 0, n.log()
    nodes = [
        Server(api, n.dir, "--node", name, "--peers", peers, listen=False)
        for name, n in zip(c.names, c.nodes)
    ] + [n3]
    c.nodes = nodes
    put_until_ok(nodes, extra)
    wait_moved(nodes)
    where = owners(nodes)
    assert any(i == 3 for i in where.values()), "the new node holds hosts"
    assert n3.stub.GetActive(pb.Local(local=True)).state is False, "the pause reached n3"
    n3.stub.SetActive(pb.Active(state=True))
    assert [n.stub.GetActive(pb.Local(local=True)).state for n in nodes] == [True] * 4
    # The default delay holds on the new node's hosts: a second URL of a host waits.
    mine = next(h for h, i in where.items() if i == 3)
    got = list(n3.stub.GetURLs(pb.GetParams(key=mine, max_urls_per_queue=5)))
    assert len(got) == 1
    assert [s for _, s in put(n3, [known(pb, got[0].url, 0)])] == ["OK"]
    assert list(n3.stub.GetURLs(pb.GetParams(key=mine, max_urls_per_queue=5))) == [], \
        "the default delay of 30 s"
    n3.stub.SetDelay(pb.QueueDelayParams(delay_requestable=0))
    served = served_by_each(Nodes(nodes))
    everything = [u for got in served.values() for u in got]
    # The delay set to 0 ends the wait of the host fetched last too: every URL but the one
    # fetched is served once.
    want = [u for u in urls + extra if u != got[0].url]
    assert sorted(everything) == sorted(want), "each URL served once"
    for i, got in served.items():
        assert all(where[host_of(u)] == i for u in got), f"node {i} served another's URL"


def test_a_node_lost_for_good_leaves_with_lost_and_its_hand_offs_reach_the_new_owners(api, cluster_factory):
    """Node n2 dies with its store. The other two restart without it and with --lost n2: the
    move does not wait for it, the items their hand-off logs kept for it go to the new owners
    of its keys, and every URL acknowledged is served once, but those that lived on n2."""
    import shutil

    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(40, 2, tag="g")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    where = owners(c.nodes)
    on_n2 = [u for u in urls if where[host_of(u)] == 2]
    assert on_n2
    c[2].kill()
    shutil.rmtree(c[2].dir)
    # Put while n2 is gone: its keys' items wait in the others' hand-off logs.
    extra = [f"http://g{h}.example/while-down" for h in range(40)]
    acks = put(c[0], [discovered(pb, u, ident=u) for u in extra])
    assert all(s == "OK" for _, s in acks)
    assert node_stats(c[0]).counts.get("handoff_records", 0) > 0
    # --lost naming a node of the list is refused.
    bad = subprocess.run(
        [BIN, "serve", c[0].dir + "-x", "--node", "n0", "--peers", c.peers, "--lost", "n2"],
        capture_output=True, timeout=30,
    )
    assert bad.returncode == 1 and b"is in the list" in bad.stderr, bad.stderr
    # Without --lost, the new list is refused while a hand-off log holds n2's items.
    peers = ",".join(p for p in c.peers.split(",") if not p.startswith("n2="))
    for n in c.nodes[:2]:
        assert n.stop() == 0, n.log()
    bad = subprocess.run(
        [BIN, "serve", c[0].dir, "--node", "n0", "--peers", peers],
        capture_output=True, timeout=30,
    )
    assert bad.returncode == 1 and b"hand-off log" in bad.stderr, bad.stderr
    nodes = [
        Server(api, n.dir, "--node", name, "--peers", peers, "--lost", "n2", listen=False)
        for name, n in zip(c.names[:2], c.nodes[:2])
    ]
    c.nodes = nodes
    wait_moved(nodes)
    deadline = time.time() + 30
    while any(node_stats(n).counts.get("handoff_records", 0) for n in nodes):
        assert time.time() < deadline, "the lost node's items were not sent on"
        time.sleep(0.2)
    assert "lost" in nodes[0].log()
    # Each says, at its start, which nodes were lost and what became of their keys (a list
    # that only drops the lost nodes makes no move, and said nothing of it).
    for n in nodes:
        assert "nodes lost for good (--lost): n2; the keys they held start empty" in n.log()
    served = served_by_each(Nodes(nodes))
    everything = [u for got in served.values() for u in got]
    want = [u for u in urls if u not in on_n2] + extra
    assert sorted(everything) == sorted(want), "each URL acknowledged and not on n2 served once"


def test_a_lost_node_whose_store_comes_back_is_refused_and_takes_nothing_back(api, cluster_factory):
    """Node n2 dies, and the other two restart without it and with --lost n2; its store is
    not gone after all, and is started with their list (a node that leaves). Its queues are
    out of date: the others refuse them (while they run with --lost n2, and once restarted
    without it, the move over), it stops with a message, and every URL the cluster
    acknowledged since is still served once; no node is left moving."""
    c = cluster_factory(3)
    pb = c[0].pb
    # Each node learns that no move is under way (a node new to the cluster asks, and
    # keeps the file `handoff/new` until it knows).
    deadline = time.time() + 30
    while any(os.path.exists(os.path.join(n.dir, "handoff", "new")) for n in c.nodes):
        assert time.time() < deadline, "the nodes did not settle"
        time.sleep(0.1)
    urls = hosts_urls(40, 2, tag="r")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    where = owners(c.nodes)
    on_n2 = [u for u in urls if where[host_of(u)] == 2]
    assert on_n2
    c[2].kill()
    peers = ",".join(p for p in c.peers.split(",") if not p.startswith("n2="))
    for n in c.nodes[:2]:
        assert n.stop() == 0, n.log()

    def restart(*args):
        nodes = [
            Server(api, n.dir, "--node", name, "--peers", peers, *args, listen=False)
            for name, n in zip(c.names[:2], c.nodes[:2])
        ]
        wait_moved(nodes)
        return nodes

    def comes_back(nodes):
        back = subprocess.run(
            [BIN, "serve", c[2].dir, "--node", "n2", "--peers", peers],
            capture_output=True, timeout=60,
        )
        assert back.returncode == 1, back.stderr
        assert b"out of date" in back.stderr, back.stderr
        assert all(node_stats(n).counts.get("moving", 0) == 0 for n in nodes)
        return back.stderr

    nodes = restart("--lost", "n2")
    # Acknowledged after the loss: new URLs of n2's hosts, now owned by n0 and n1.
    new = sorted({f"http://{host_of(u)}/after-the-loss" for u in on_n2})
    acks = put(nodes[0], [discovered(pb, u, ident=u) for u in new])
    assert all(s == "OK" for _, s in acks), acks
    assert b"named lost" in comes_back(nodes)
    for n in nodes:
        assert n.stop() == 0, n.log()
    nodes = restart()
    assert b"is over on this node" in comes_back(nodes)
    # A delete waits for no move.
    nodes[0].stub.DeleteQueue(pb.QueueWithinCrawlParams(key="no-such-queue.example"))
    c.nodes = nodes
    served = served_by_each(Nodes(nodes))
    everything = [u for got in served.values() for u in got]
    want = [u for u in urls if u not in on_n2] + new
    assert sorted(everything) == sorted(want), "each URL acknowledged and not on n2 served once"


def test_a_move_to_a_node_lost_before_it_took_anything_is_taken_back_with_lost(api, cluster_factory):
    """The three nodes restart with a fourth node in the list, which never comes: the move
    cannot end, and a third list is refused. Restarted with their old list and --lost n3, the
    nodes end the move, and every URL is served once."""
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(40, 2, tag="k")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    for n in c.nodes:
        assert n.stop() == 0, n.log()
    port = free_ports(1)[0]
    grown = f"{c.peers},n3=127.0.0.1:{port}"
    nodes = [
        Server(api, n.dir, "--node", name, "--peers", grown, listen=False)
        for name, n in zip(c.names, c.nodes)
    ]
    time.sleep(1)
    assert all(node_stats(n).counts.get("moving", 0) == 1 for n in nodes)
    for n in nodes:
        assert n.stop() == 0, n.log()
    bad = subprocess.run(
        [BIN, "serve", nodes[0].dir, "--node", "n0", "--peers", c.peers],
        capture_output=True, timeout=30,
    )
    assert bad.returncode == 1 and b"not finished" in bad.stderr, bad.stderr
    nodes = [
        Server(api, n.dir, "--node", name, "--peers", c.peers, "--lost", "n3", listen=False)
        for name, n in zip(c.names, nodes)
    ]
    c.nodes = nodes
    wait_moved(nodes)
    served = served_by_each(Nodes(nodes))
    everything = [u for got in served.values() for u in got]
    assert sorted(everything) == sorted(urls), "each URL served once"


def test_a_lane_item_refused_for_a_pending_key_is_not_covered_by_a_later_receipt(api, cluster_factory):
    """During a move, a node refuses the items of keys whose queues have not arrived. In a
    lane's stream, the numbered items after a refused one are refused too: otherwise the
    owner's receipt, raised by a later item, would cover the refused one, and the sender's
    next sending of it would be taken for a repeat."""
    c = cluster_factory(3)
    pb = c[0].pb
    urls = hosts_urls(60, 1, tag="q")
    assert all(s == "OK" for _, s in put(c[0], [discovered(pb, u) for u in urls]))
    before = owners(c.nodes)
    # n2 stays down: the keys n3 takes from it wait, those it takes from n0 and n1 arrive.
    nodes, n3 = restart_with_n3(api, c, 2)
    deadline = time.time() + 30
    while True:
        mine = n3.stub.ListQueues(pb.Pagination(size=1000, local=True)).values
        if any(before[k] != 2 for k in mine) or time.time() > deadline:
            break
        time.sleep(0.1)
    arrived = next(k for k in mine if before[k] != 2)
    # A key n3 owns now that n2 held: pending. Found as a URL n3 refuses.
    pending = None
    for u in urls:
        if before[host_of(u)] == 2 and host_of(u) not in mine:
            if put(n3, [known(pb, u, 0, ident="p")]) == [("p", "FAIL")]:
                pending = u
                break
    assert pending, "a key pending on n3"
    with open(f"{n3.dir}/handoff/members") as f:
        members = f.read().strip()
    meta = [("crivello-node", "n0"), ("crivello-members", members),
            ("crivello-lane", "3/00000000000000cd")]
    first = (1 << 41) + 1
    later = f"http://{arrived}/0"
    items = [known(pb, pending, 0, ident=str(first)), known(pb, later, 0, ident=str(first + 1))]
    acks = [(a.ID, a.status) for a in n3.stub.PutURLs(iter(items), metadata=meta)]
    FAIL = pb.AckMessage.Status.FAIL
    assert acks == [(str(first), FAIL), (str(first + 1), FAIL)], "refused after the first"
    # Not applied, and not covered: sent alone again, the later one is applied.
    st = n3.stub.GetURLStatus(pb.URLStatusRequest(url=later, crawlID="DEFAULT"))
    assert st.known.refetchable_from_date > 0, "not applied (waiting: due since stored)"
    acks = [(a.ID, a.status) for a in n3.stub.PutURLs(iter(items[1:]), metadata=meta)]
    assert acks == [(str(first + 1), pb.AckMessage.Status.OK)]
    st = n3.stub.GetURLStatus(pb.URLStatusRequest(url=later, crawlID="DEFAULT"))
    assert (st.WhichOneof("item"), st.known.refetchable_from_date) == ("known", 0), "applied"
    c.nodes = nodes + [n3]


def test_a_move_from_a_list_that_named_a_node_never_run_says_what_it_waits_for(api, tmp_path):
    """Node n1 started once with a list naming n2, a node that never ran, then restarted with
    the right list: both nodes join the move from that list, which waits for n2 for good.
    Each says so in its log, naming the node and the way out (--lost), which ends the move.
    Before, nothing said what the move waited for."""
    ports = free_ports(3)
    right = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports[:2]))
    wrong = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = []
    try:
        nodes.append(Server(api, tmp_path / "n0", "--node", "n0", "--peers", right, listen=False))
        nodes.append(Server(api, tmp_path / "n1", "--node", "n1", "--peers", wrong, listen=False))
        time.sleep(1)
        assert nodes[1].stop() == 0, nodes[1].log()
        nodes[1] = Server(api, tmp_path / "n1", "--node", "n1", "--peers", right, listen=False)
        said = "waits for node(s) n2 to send their queues"
        deadline = time.time() + 30
        while not all(said in n.log() for n in nodes):
            assert time.time() < deadline, "\n".join(n.log()[-2000:] for n in nodes)
            time.sleep(0.2)
        assert all(node_stats(n).counts.get("moving", 0) == 1 for n in nodes)
        assert "--lost n2" in nodes[0].log()
        # The way out the log gives.
        for i in range(2):
            assert nodes[i].stop() == 0
        for i in range(2):
            nodes[i] = Server(api, tmp_path / f"n{i}", "--node", f"n{i}", "--peers", right,
                              "--lost", "n2", listen=False)
        wait_moved(nodes, timeout=30)
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.kill()
