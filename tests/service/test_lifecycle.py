"""The server's life: it creates its directory, refuses a second server on it, and stops
cleanly on SIGINT and SIGTERM (exit 0) with everything acknowledged kept."""

import json
import signal
import subprocess

from conftest import BIN
from helpers import discovered, get, put, stats


def test_start_lock_and_clean_stops(server_factory, tmp_path):
    directory = tmp_path / "not" / "there" / "yet"
    server = server_factory(directory=directory)
    assert directory.is_dir()
    pb = server.pb
    assert put(server, [discovered(pb, "http://life.t/1")]) == [("http://life.t/1", "OK")]

    second = subprocess.run(
        [BIN, "serve", str(directory), "--addr", "127.0.0.1:0"],
        capture_output=True,
        timeout=30,
    )
    assert second.returncode == 1
    assert b"locked" in second.stderr

    assert server.stop(signal.SIGINT) == 0
    assert "SIGINT: stopping" in server.log()
    assert "synced and closed" in server.log()

    server.restart()
    assert stats(server, key="life.t").size == 1
    assert put(server, [discovered(pb, "http://life.t/2")]) == [("http://life.t/2", "OK")]
    assert server.stop(signal.SIGTERM) == 0
    assert "SIGTERM: stopping" in server.log()


def test_a_bad_address_is_a_usage_error(tmp_path):
    out = subprocess.run(
        [BIN, "serve", str(tmp_path / "d"), "--addr", "not-an-address"],
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert b"not an address" in out.stderr


def test_an_address_in_use_is_named_with_what_to_do(server_factory, tmp_path):
    server = server_factory()
    other = tmp_path / "other"
    out = subprocess.run(
        [BIN, "serve", str(other), "--addr", server.addr],
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 1
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert f"listen on {server.addr}" in lines[0]
    assert "another program listens there" in lines[0]
    # The start failed before the store was made: nothing is left behind.
    assert not other.exists()
    assert server.stop(signal.SIGTERM) == 0


def stats_json(directory):
    """`crivello stats --json` of a stopped server's directory."""
    out = subprocess.run(
        [BIN, "stats", str(directory), "--json"], capture_output=True, timeout=30, check=True
    )
    return json.loads(out.stdout)


def test_compressed_queues_are_chosen_by_a_flag_and_kept(server_factory, tmp_path):
    directory = tmp_path / "packed"
    server = server_factory("--compress-queues", directory=directory)
    pb = server.pb
    urls = [f"http://packed.t/section/{i % 7}/page-{i}.html" for i in range(500)]
    assert len(put(server, [discovered(pb, u, ident=u) for u in urls])) == 500
    # The first GetURLs moves the URLs into the queues: a compressed Q run.
    got = get(server, max_urls_per_queue=1, delay_requestable=60)
    assert [i.url for i in got] == [urls[0]]
    assert server.stop() == 0
    before = stats_json(directory)
    assert before["q_compressed"] == 1
    assert before["bytes_q"] > 0
    # Started again without the flag: the directory keeps the choice, every URL is there.
    server.args = []
    server.restart()
    s = stats(server, key="packed.t")
    assert (s.size, s.inProcess) == (500, 1)
    assert server.stop() == 0
    assert stats_json(directory)["q_compressed"] == 1
    # --compress-queues=off turns it off.
    server.args = ["--compress-queues=off"]
    server.restart()
    assert server.stop() == 0
    assert stats_json(directory)["q_compressed"] == 0


def test_a_stream_still_sending_when_the_server_stops_ends_unavailable(server):
    """A PutURLs stream the client is still writing to when the server stops ends with
    UNAVAILABLE, after the acknowledgements of what was taken: the client learns that what it
    sent after them was not read (an OK end said everything was), and every item
    acknowledged is kept."""
    import threading
    import time

    import grpc

    pb = server.pb
    sending = threading.Event()
    sending.set()

    def items():
        i = 0
        while sending.is_set():
            yield discovered(pb, f"http://open.t/{i}", ident=str(i))
            i += 1
            time.sleep(0.01)

    acks, ends = [], []

    def read():
        try:
            for a in server.stub.PutURLs(items()):
                acks.append(a.ID)
            ends.append("OK")
        except grpc.RpcError as e:
            ends.append(e.code())

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 20
    while len(acks) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(acks) >= 5, acks
    # The signal alone (the fixture's stop closes the client's channel first).
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    reader.join(20)
    sending.clear()
    assert ends == [grpc.StatusCode.UNAVAILABLE], ends
    server.channel.close()
    server.stderr.close()
    server.restart()
    assert stats(server, key="open.t").size >= len(acks)
