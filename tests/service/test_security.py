"""Security options of `crivello serve`: a shared bearer token (--token-file) and TLS
(--tls-cert, --tls-key). Without the token a call is refused with UNAUTHENTICATED; over TLS
a plaintext client cannot talk to the server, and a client trusting its certificate can."""

import shutil
import time
import subprocess

import grpc
import pytest

from conftest import BIN
from helpers import discovered
from test_cluster import served_by_each


def start(tmp_path, *args):
    """A server on a free loopback port with `args`; returns (process, address)."""
    proc = subprocess.Popen(
        [BIN, "serve", str(tmp_path / "store"), "--addr", "127.0.0.1:0", "--quiet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    line = proc.stdout.readline().decode()
    assert line.startswith("listening on "), proc.stderr.read().decode()
    return proc, line.split()[-1]


def stop(proc):
    proc.terminate()
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()


def put_one(rpc, pb, channel, url, metadata=None):
    stub = rpc.URLFrontierStub(channel)
    acks = list(stub.PutURLs(iter([discovered(pb, url)]), metadata=metadata, timeout=10))
    return [a.status for a in acks]


def test_a_token_is_required_when_configured(api, tmp_path):
    pb, rpc = api
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    proc, addr = start(tmp_path, "--token-file", str(token))
    try:
        with grpc.insecure_channel(addr) as channel:
            stub = rpc.URLFrontierStub(channel)
            for metadata in [None, [("authorization", "Bearer wrong")], [("authorization", "s3cret-token")]]:
                with pytest.raises(grpc.RpcError) as e:
                    stub.GetStats(pb.QueueWithinCrawlParams(), metadata=metadata, timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
                with pytest.raises(grpc.RpcError) as e:
                    put_one(rpc, pb, channel, "http://sec.t/1", metadata)
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            good = [("authorization", "Bearer s3cret-token")]
            assert put_one(rpc, pb, channel, "http://sec.t/1", good) == [pb.AckMessage.Status.OK]
            stats = stub.GetStats(pb.QueueWithinCrawlParams(), metadata=good, timeout=10)
            assert stats.size >= 1
    finally:
        stop(proc)
    # An empty token file is refused at start.
    token.write_text("  \n")
    bad = subprocess.run(
        [BIN, "serve", str(tmp_path / "store"), "--addr", "127.0.0.1:0", "--token-file", str(token)],
        capture_output=True,
        timeout=30,
    )
    assert bad.returncode == 1 and b"not a token" in bad.stderr


def test_tls_serves_a_client_that_trusts_the_certificate_and_no_plaintext_one(api, tmp_path):
    pb, rpc = api
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate to test TLS with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    token = tmp_path / "token"
    token.write_text("tls-and-token")
    proc, addr = start(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), "--token-file", str(token))
    try:
        # A plaintext client gets nowhere.
        with grpc.insecure_channel(addr) as channel:
            with pytest.raises(grpc.RpcError) as e:
                rpc.URLFrontierStub(channel).GetStats(pb.QueueWithinCrawlParams(), timeout=5)
            assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        # A client trusting the certificate, with the token as call credentials.
        creds = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(root_certificates=cert.read_bytes()),
            grpc.access_token_call_credentials("tls-and-token"),
        )
        with grpc.secure_channel(addr, creds) as channel:
            assert put_one(rpc, pb, channel, "http://tls.t/1") == [pb.AckMessage.Status.OK]
            assert rpc.URLFrontierStub(channel).GetStats(pb.QueueWithinCrawlParams(), timeout=10).size >= 1
    finally:
        stop(proc)
    # A key that does not parse is refused at start, naming the problem.
    key.write_text("not a key")
    bad = subprocess.run(
        [BIN, "serve", str(tmp_path / "store2"), "--addr", "127.0.0.1:0",
         "--tls-cert", str(cert), "--tls-key", str(key)],
        capture_output=True,
        timeout=30,
    )
    assert bad.returncode == 1 and b"TLS" in bad.stderr, bad.stderr


def signed_by_a_ca(tmp_path):
    """A certificate authority and a certificate it signed for 127.0.0.1 with its key
    (files: ca, cert, key), or a skip without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate to test TLS with")
    ca, ca_key = tmp_path / "ca.pem", tmp_path / "ca.key"
    cert, key, csr = tmp_path / "node.pem", tmp_path / "node.key", tmp_path / "node.csr"
    ext = tmp_path / "node.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for cmd in (
        ["openssl", "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "1",
         "-subj", "/CN=crivello test CA"],
        ["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost"],
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext)],
    ):
        subprocess.run(cmd, check=True, capture_output=True)
    return ca, cert, key


def test_a_cluster_over_tls_forwards_and_serves_and_refuses_plain_text(api, cluster_factory, tmp_path):
    """Three nodes with a certificate signed by one authority call each other over TLS
    (--tls-ca), with the shared token: items put to one node reach their owners and are
    served once each."""
    pb, rpc = api
    ca, cert, key = signed_by_a_ca(tmp_path)
    token = tmp_path / "token"
    token.write_text("cluster-token")
    creds = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=ca.read_bytes()),
        grpc.access_token_call_credentials("cluster-token"),
    )
    tls = ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca),
           "--token-file", str(token)]
    c = cluster_factory(3, *tls, creds=creds)
    urls = [f"http://t{h}.example/{i}" for h in range(30) for i in range(2)]
    acks = list(c[0].stub.PutURLs(iter([discovered(pb, u, ident=u) for u in urls]), timeout=30))
    assert [a.status for a in acks] == [pb.AckMessage.Status.OK] * len(urls)
    held = [c[i].stub.CountURLs(pb.CountUrlParams(local=True)).value for i in range(3)]
    assert sum(held) == len(urls) and all(h > 0 for h in held), held
    # Served once each (acknowledged done through the node that handed them out).
    served = served_by_each(c)
    assert sorted(u for got in served.values() for u in got) == sorted(urls)
    # A plaintext client gets nowhere.
    with grpc.insecure_channel(c[1].addr) as channel:
        with pytest.raises(grpc.RpcError):
            rpc.URLFrontierStub(channel).GetStats(pb.QueueWithinCrawlParams(), timeout=5)
    # --tls-cert with --peers needs --tls-ca; --tls-ca alone is refused.
    peers = "a=127.0.0.1:1,b=127.0.0.1:2"
    bad = subprocess.run(
        [BIN, "serve", str(tmp_path / "x"), "--node", "a", "--peers", peers,
         "--tls-cert", str(cert), "--tls-key", str(key)],
        capture_output=True, timeout=30,
    )
    assert bad.returncode == 1 and b"--tls-ca" in bad.stderr, bad.stderr
    bad = subprocess.run(
        [BIN, "serve", str(tmp_path / "y"), "--addr", "127.0.0.1:0", "--tls-ca", str(ca)],
        capture_output=True, timeout=30,
    )
    assert bad.returncode == 1 and b"--tls-ca without" in bad.stderr, bad.stderr


def test_a_node_that_refuses_the_token_is_named_as_such_in_the_log(api, tmp_path):
    """Two nodes with different --token-files: the node started second says, at start, that
    the other refuses its token and that items of its keys fail (they are not handed off);
    before, it logged the node as not reachable yet, its items going to a hand-off log."""
    from conftest import Server, free_ports

    ports = free_ports(2)
    peers = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = []
    try:
        for i in range(2):
            token = tmp_path / f"token{i}"
            token.write_text(f"token-{i}")
            nodes.append(
                Server(api, tmp_path / f"n{i}", "--node", f"n{i}", "--peers", peers,
                       "--token-file", str(token), listen=False)
            )
        deadline = time.time() + 20
        while "refuses this node's token" not in nodes[1].log() and time.time() < deadline:
            time.sleep(0.1)
        log = nodes[1].log()
        assert "n0" in log and "refuses this node's token" in log and "FAIL" in log, log
        assert "cannot be reached yet" not in log, log
    finally:
        for n in nodes:
            n.kill()
