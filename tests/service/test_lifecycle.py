"""The server's life: it creates its directory, refuses a second server on it, and stops
cleanly on SIGINT and SIGTERM (exit 0) with everything acknowledged kept."""

import signal
import subprocess

from conftest import BIN
from helpers import discovered, put, stats


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
    assert out.returncode == 1
    assert b"not an address" in out.stderr
