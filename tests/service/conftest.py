"""Black-box tests of `crivello serve` through url-frontier's API, with grpcio.

The stubs are generated at test time from the repository's `proto/urlfrontier.proto` with
grpc_tools.protoc (never committed). Each test module starts its own server on a free
loopback port in a fresh directory. CRIVELLO_BIN names the binary (default:
target/release/crivello).
"""

import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("CRIVELLO_BIN") or str(ROOT / "target" / "release" / "crivello")


def _stubs(out):
    from grpc_tools import protoc

    proto = ROOT / "proto"
    code = protoc.main(
        [
            "protoc",
            f"-I{proto}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(proto / "urlfrontier.proto"),
        ]
    )
    assert code == 0, "protoc failed on proto/urlfrontier.proto"
    sys.path.insert(0, str(out))
    import urlfrontier_pb2
    import urlfrontier_pb2_grpc

    return urlfrontier_pb2, urlfrontier_pb2_grpc


_STUBS = {}


@pytest.fixture(scope="session")
def api(tmp_path_factory):
    """The generated modules: (messages, services)."""
    if not _STUBS:
        _STUBS["m"] = _stubs(tmp_path_factory.mktemp("stubs"))
    return _STUBS["m"]


class Server:
    """A `crivello serve` process on a free loopback port."""

    def __init__(self, api, directory, *args, listen=True, creds=None):
        self.pb, self.rpc = api
        # Channel credentials (TLS) for the test's client; None: plain text.
        self.creds = creds
        self.dir = str(directory)
        self.args = list(args)
        # False: the address comes from the arguments (a cluster node's --peers entry).
        self.listen = ["--addr", "127.0.0.1:0"] if listen else []
        self.proc = None
        self.addr = None
        self.stderr_path = pathlib.Path(self.dir + ".log")
        self.start()

    def start(self):
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self.stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(
            [BIN, "serve", self.dir, *self.listen, *self.args],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        line = self.proc.stdout.readline().decode()
        assert line.startswith("listening on "), f"no address printed: {line!r}; log: {self.log()}"
        self.addr = line.split()[-1]
        if self.creds is None:
            self.channel = grpc.insecure_channel(self.addr)
        else:
            self.channel = grpc.secure_channel(self.addr, self.creds)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = self.rpc.URLFrontierStub(self.channel)

    def log(self):
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stops the server with `sig`; returns its exit code."""
        self.channel.close()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.stderr.close()
        return code

    def kill(self):
        """kill -9."""
        return self.stop(signal.SIGKILL)

    def caught_up(self, timeout=30):
        """A cluster node: waits until it hands out, once the other nodes' hand-off logs for
        it are delivered (or a node down was given up on, 10 s after the start)."""
        if "--peers" not in self.args:
            return
        deadline = time.time() + timeout
        while True:
            counts = self.stub.GetStats(self.pb.QueueWithinCrawlParams(local=True)).counts
            if counts.get("catching_up", 0) == 0:
                return
            assert time.time() < deadline, f"still catching up after {timeout} s: {self.log()}"
            time.sleep(0.05)

    def restart(self):
        self.start()
        self.caught_up()


@pytest.fixture
def server_factory(api, tmp_path):
    servers = []

    def make(*args, directory=None):
        s = Server(api, directory or tmp_path / f"store{len(servers)}", *args)
        servers.append(s)
        return s

    yield make
    for s in servers:
        if s.proc and s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


# Every port free_ports handed out in this run: a node stopped for a while (a cluster
# restarted with one node more) must never find its port given to another node.
_GIVEN_PORTS = set()


def free_ports(n):
    """n loopback ports free at the moment, none of them handed out before in this run."""
    import socket

    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port not in _GIVEN_PORTS:
                ports.append(port)
                _GIVEN_PORTS.add(port)
    finally:
        for s in socks:
            s.close()
    return ports


class Cluster:
    """`crivello serve` nodes n0, n1, ... on loopback ports, each given the same --peers."""

    def __init__(self, api, root, n, *args, creds=None):
        self.names = [f"n{i}" for i in range(n)]
        self.ports = free_ports(n)
        self.peers = ",".join(f"{m}=127.0.0.1:{p}" for m, p in zip(self.names, self.ports))
        self.nodes = [
            Server(api, root / m, "--node", m, "--peers", self.peers, *args, listen=False,
                   creds=creds)
            for m in self.names
        ]
        # Every node started, then each waits for the others (a node hands out nothing until
        # every other one has answered what its hand-off logs hold for it).
        for n in self.nodes:
            n.caught_up()

    def __getitem__(self, i):
        return self.nodes[i]

    def stop(self):
        return [n.stop() for n in self.nodes if n.proc.poll() is None]


@pytest.fixture
def cluster_factory(api, tmp_path):
    clusters = []

    def make(n, *args, creds=None):
        c = Cluster(api, tmp_path / f"cluster{len(clusters)}", n, *args, creds=creds)
        clusters.append(c)
        return c

    yield make
    for c in clusters:
        for s in c.nodes:
            if s.proc and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()


@pytest.fixture(scope="module")
def server(api, tmp_path_factory):
    """One server for a module's tests."""
    s = Server(api, tmp_path_factory.mktemp("frontier") / "store")
    yield s
    if s.proc.poll() is None:
        assert s.stop() == 0, s.log()


def now_s():
    return int(time.time())
