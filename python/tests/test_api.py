"""The Python API: each class over the library, errors as exception classes, threads,
context managers."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import crivello


def test_a_sieve_emits_each_url_once_in_first_appearance_order(tmp_path: Path) -> None:
    with crivello.Sieve(tmp_path / "s", memory="4M") as s:
        s.push("http://a.test/1")
        s.push_many(["http://b.test/", b"http://a.test/1", "http://a.test/2"])
        assert s.push_new("http://c.test/") is True
        assert s.push_new("http://b.test/") is False
        assert "http://a.test/2" in s
        assert "http://z.test/" not in s
        s.flush()
        assert s.peek(2) == ["http://a.test/1", "http://b.test/"]
        # Not consumed: given again until a commit.
        assert s.peek(10) == ["http://a.test/2", "http://c.test/"]
        s.commit()
        assert s.pop() == []
        st = s.stats()
        assert st["distinct"] == 4 and st["consumed"] == 4
    # A reopen resumes after what was consumed.
    with crivello.Sieve(tmp_path / "s") as s:
        s.push_many(["http://a.test/1", "http://d.test/"])
        s.flush()
        assert s.pop() == ["http://d.test/"]


def test_urls_that_are_not_utf8_come_back_as_the_same_bytes(tmp_path: Path) -> None:
    raw = b"http://x.test/\xff\xfe"
    with crivello.Frontier(tmp_path / "f") as f:
        f.set_policy(crivello.Policy(per_queue=2))
        f.push([raw, "http://x.test/caf\u00e9"])
        f.flush()
        got = f.lease(10, per_queue=2)
        urls = [g.url for g in got]
        assert urls[0].encode("utf-8", "surrogateescape") == raw
        assert urls[1] == "http://x.test/caf\u00e9"
        # The str that came back names the same URL.
        assert f.done(got[0]) is True
        assert f.status(urls[0])[0] == "done"


def test_a_frontier_serves_hosts_politely_with_keys_metadata_and_leases(tmp_path: Path) -> None:
    with crivello.Frontier(tmp_path / "f", memory=8 << 20) as f:
        f.set_policy(crivello.Policy(delay=30.0))
        assert f.policy() == crivello.Policy(delay=30.0)
        f.push(
            [
                "http://a.test/1",
                ("http://a.test/2", None, b"depth=1"),
                ("http://b.test/1", "shared-key"),
                ("http://c.test/1", "shared-key", b"m"),
            ],
            crawl="c1",
        )
        f.flush()
        got = f.lease(10, crawl="c1", ttl=60)
        assert sorted(g.url for g in got) == ["http://a.test/1", "http://b.test/1"]
        by_url = {g.url: g for g in got}
        assert by_url["http://b.test/1"].key == "shared-key"
        assert by_url["http://a.test/1"].crawl == "c1"
        assert by_url["http://a.test/1"].deadline > crivello.now() + 50
        # One URL of a queue at a time; then the delay from the end of the fetch.
        assert f.lease(10, crawl="c1") == []
        assert f.done(by_url["http://a.test/1"], took=0.5) is True
        assert f.done(by_url["http://a.test/1"]) is False
        assert f.status("http://a.test/1", crawl="c1") == ("done", None)
        state, until = f.status("http://b.test/1", crawl="c1", key="shared-key")
        assert state == "leased" and until is not None
        assert f.lease(10, crawl="c1") == []
        assert f.counts("c1")["waiting"] == 2
        due = f.next_due()
        assert due is not None and due > crivello.now() + 20
        # The frontier's time: the system's clock, which did not step back here.
        assert crivello.now() - 1 <= f.now() <= crivello.now() + 1
        # Back in its queue, in its place; a batch of completions in one step.
        assert f.retry(by_url["http://b.test/1"]) is True
        assert f.complete([by_url["http://b.test/1"].token]) == [False]
        assert f.crawls() == ["c1"]
        qs = f.queues("c1")
        assert [q["key"] for q in qs] == ["a.test", "shared-key"]
        assert qs[0]["done"] == 1 and qs[0]["waiting"] == 1
        assert f.delete_queue("shared-key", crawl="c1") == 2
        assert f.stats()["waiting"] == 1


def test_a_completion_may_say_when_its_fetch_ended(tmp_path: Path) -> None:
    with crivello.Frontier(tmp_path / "f") as f:
        f.set_policy(crivello.Policy(delay=1.0))
        f.push(["http://a.test/1", "http://a.test/2", "http://b.test/1", "http://b.test/2"])
        f.push(["http://c.test/1", "http://c.test/2"])
        f.flush()
        got = {g.url: g for g in f.lease(10)}
        leased_at = crivello.now()
        time.sleep(0.4)
        with pytest.raises(ValueError, match="2 instants for 1 leases"):
            f.complete([got["http://a.test/1"]], ended=[leased_at, leased_at])
        with pytest.raises(ValueError, match="ended must be"):
            f.complete([got["http://a.test/1"]], ended=-1.0)
        for wrong in ("12", b"\x05", bytearray(b"\x05"), {1.0}, {1.0: 2.0}):
            with pytest.raises(TypeError, match="ended is a number"):
                f.complete([got["http://a.test/1"]], ended=wrong)  # type: ignore[arg-type]
        # None in a sequence: now, for that lease (12345 is no lease); any iterable in order.
        assert f.complete([12345], ended=[None]) == [False]
        assert f.complete([12345], ended=(x for x in [1.0])) == [False]
        # a: its fetch ended at the hand-out; b: at this call (no instant given).
        assert f.complete([got["http://a.test/1"]], ended=[leased_at]) == [True]
        assert f.complete([got["http://b.test/1"]]) == [True]
        assert f.retry(got["http://c.test/1"], ended=leased_at) is True
        due = {q["key"]: q["next_due"] for q in f.queues()}
        assert leased_at + 0.9 < due["a.test"] < leased_at + 1.1, (due, leased_at)
        assert leased_at + 0.9 < due["c.test"] < leased_at + 1.1, (due, leased_at)
        assert due["b.test"] >= leased_at + 1.4, (due, leased_at)


def test_a_fetch_that_ended_frees_its_host_while_its_lease_stays(tmp_path: Path) -> None:
    with crivello.Frontier(tmp_path / "f") as f:
        f.set_policy(crivello.Policy(delay=0.3))
        f.push(["http://a.test/1", "http://a.test/2", "http://a.test/3"])
        f.flush()
        (a1,) = f.lease(10)
        assert f.lease(10) == []
        responded = crivello.now()
        assert f.fetched(a1, ended=responded) is True
        # Once: the second says it had ended; the lease stays.
        assert f.fetched(a1) is False
        assert f.status("http://a.test/1")[0] == "leased"
        (q,) = f.queues()
        assert q["leased"] == 1
        assert responded + 0.25 < q["next_due"] < responded + 0.35, (q, responded)
        time.sleep(0.35)
        (a2,) = f.lease(10)
        assert a2.url == "http://a.test/2"
        # a/1 done now: no delay runs again (a/2 holds the host until its fetch ends).
        assert f.done(a1) is True
        assert f.complete([a2], how="fetched") == [True]
        due = f.queues()[0]["next_due"]
        assert f.complete([a2, a2], how="done") == [True, False]
        assert f.queues()[0]["next_due"] == due
        with pytest.raises(ValueError, match='at goes with how="refetch" only'):
            f.complete([a2], how="fetched", at=1.0)
        with pytest.raises(ValueError, match='"fetched"'):
            f.complete([a2], how="fetch")  # type: ignore[arg-type]


def test_compressed_queues_are_kept_by_the_store(tmp_path: Path) -> None:
    urls = [f"http://site.test/a/{i % 9}/page-{i}.html" for i in range(2000)]
    sizes = {}
    for compress in (False, True):
        path = tmp_path / f"f{compress}"
        with crivello.Frontier(path, compress_queues=compress) as f:
            f.push(urls)
            f.flush()
            st = f.stats()
            assert st["compressed"] is compress
            sizes[compress] = st["bytes_runs"]
        # Reopened without a choice: the store's is kept, and every URL is there.
        with crivello.Frontier(path) as f:
            assert f.stats()["compressed"] is compress
            f.set_policy(crivello.Policy(per_queue=5000))
            assert sorted(g.url for g in f.lease(5000, per_queue=5000)) == sorted(urls)
    assert 0 < sizes[True] * 2 < sizes[False], sizes


def test_push_new_says_which_urls_are_new_and_sync_false_waits_for_the_next_commit(
    tmp_path: Path,
) -> None:
    with crivello.Frontier(tmp_path / "f") as f:
        assert f.push_new(["http://a.test/1", "http://a.test/1", "http://b.test/"]) == [
            True,
            False,
            True,
        ]
        assert f.push_new(["http://b.test/", "http://c.test/"], sync=False) == [False, True]
        f.sync()
        f.flush()
        assert f.stats()["waiting"] == 3


def test_leases_of_a_dead_process_are_released_by_the_next_user(tmp_path: Path) -> None:
    path = tmp_path / "f"
    code = (
        "import crivello, os\n"
        f"f = crivello.Frontier({str(path)!r})\n"
        "f.push(['http://a.test/1', 'http://b.test/1'])\n"
        "f.flush()\n"
        "assert len(f.lease(10, ttl=3600)) == 2\n"
        "os._exit(0)\n"  # no close: as a kill
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with crivello.Frontier(path) as f:
        assert f.stats()["leased"] == 2
        assert f.lease(10) == []
        assert f.release() == 2
        assert len(f.lease(10)) == 2


def test_each_error_is_its_own_class_with_the_librarys_message(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with crivello.Frontier(path) as f:
        with pytest.raises(crivello.InvalidUrlError, match="empty"):
            f.push(["http://ok.test/", ""])
        assert f.stats()["waiting"] == 0  # the whole batch was refused
        with pytest.raises(ValueError):  # InvalidUrlError is a ValueError too
            f.push([""])
        with pytest.raises(crivello.InvalidOptionError, match="key"):
            f.push([("http://a.test/", "k" * 100_000)])
        with pytest.raises(crivello.InvalidUrlError, match="give it a key of its own"):
            f.push(["https://a.test#" + "section-" * 40])
        with pytest.raises(crivello.InvalidUrlError, match=r"newline \(byte 14\)"):
            f.push(["http://ok.test/", "http://a.test/\nhttp://b.test/"])
        assert f.stats()["waiting"] == 0
        with pytest.raises(crivello.InvalidOptionError, match="64 MiB") as e:
            f.push([("http://a.test/", "a.test", b"m" * ((64 << 20) + 1))])
        assert e.value.option == "metadata"
        with pytest.raises(TypeError, match="str or bytes"):
            f.push([42])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="wrap a single URL"):
            f.push("http://a.test/")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="seconds"):
            f.lease(ttl=-1)
        with pytest.raises(ValueError, match="at least 0.001 seconds"):
            f.lease(ttl=0)
        with pytest.raises(crivello.InvalidOptionError, match="empty"):
            f.push([("http://a.test/", "")])
        with pytest.raises(ValueError, match="seconds from 0"):
            crivello.Policy(delay=1e300)
        with pytest.raises(ValueError, match="token is from 0"):
            f.done(-1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="how"):
            f.complete([1], how="later")  # type: ignore[arg-type]
        # A second handle on the same directory: locked.
        with pytest.raises(crivello.LockedError, match="locked") as e:
            crivello.Frontier(path)
        assert e.value.path is not None and str(path) in e.value.path
    # A plain sieve's store is not a frontier, and the reverse.
    with crivello.Sieve(tmp_path / "s") as s:
        s.push("http://a.test/")
        s.flush()
        s.pop()
    with pytest.raises(crivello.WrongModeError, match="plain sieve"):
        crivello.Frontier(tmp_path / "s")
    with pytest.raises(crivello.WrongModeError, match="used as a frontier"):
        crivello.Sieve(path)
    with pytest.raises(ValueError, match="memory"):
        crivello.Sieve(tmp_path / "x", memory="lots")
    with pytest.raises(crivello.InvalidOptionError):
        crivello.Sieve(tmp_path / "x", memory=1000)
    with pytest.raises(ValueError, match="number of bytes"):
        crivello.Sieve(tmp_path / "x", memory=-1)
    # A file system error: the library's message, and OSError's fields.
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(crivello.StorageError) as se:
        crivello.Sieve(tmp_path / "a-file")
    assert isinstance(se.value, OSError)
    assert "not a directory" in str(se.value).lower() and "None" not in str(se.value), str(se.value)
    assert se.value.filename is not None and "a-file" in se.value.filename
    assert se.value.errno == errno.ENOTDIR and se.value.strerror == os.strerror(errno.ENOTDIR)
    # An empty path names no directory (it said "list : No such file or directory").
    with pytest.raises(crivello.StorageError, match="an empty path names no directory"):
        crivello.Frontier("")
    # A closed handle refuses calls; closing twice is fine.
    f = crivello.Frontier(path)
    f.close()
    f.close()
    with pytest.raises(crivello.ClosedError):
        f.stats()


def test_a_damaged_file_raises_a_corruption_naming_the_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with crivello.Sieve(path, memory="2M") as s:
        s.push_many(f"http://h{i % 50}.test/{i}" for i in range(20_000))
        s.flush()
    f_files = sorted(p for p in path.iterdir() if p.name.startswith("f-"))
    assert f_files, sorted(p.name for p in path.iterdir())
    data = bytearray(f_files[0].read_bytes())
    data[len(data) // 2] ^= 0x40
    f_files[0].write_bytes(bytes(data))
    with pytest.raises(crivello.CorruptError) as e:
        with crivello.Sieve(path) as s:
            while s.pop(10_000):
                pass
    assert e.value.file == f_files[0].name
    assert isinstance(e.value.offset, int)
    assert f_files[0].name in str(e.value)


def test_threads_share_a_frontier_and_each_url_is_leased_once(tmp_path: Path) -> None:
    urls = [f"http://h{i % 40}.test/{i}" for i in range(4000)]
    with crivello.Frontier(tmp_path / "f") as f:
        f.push(urls)
        f.flush()
        got: list[str] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def fetcher() -> None:
            try:
                while True:
                    leased = f.lease(20, ttl=60)
                    if not leased:
                        if f.stats()["waiting"] == 0:
                            return
                        continue
                    with lock:
                        got.extend(x.url for x in leased)
                    assert all(f.complete(leased))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=fetcher) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sorted(got) == sorted(urls)
        assert f.stats()["done"] == len(urls)


def test_calls_release_the_interpreter_while_the_library_works(tmp_path: Path) -> None:
    # With a long switch interval, a thread holding the interpreter's lock keeps it: another
    # thread runs during a call only if the call releases it.
    urls = [f"http://h{i % 999}.test/{i}" for i in range(300_000)]
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    try:
        with crivello.Sieve(tmp_path / "s", memory="64M") as s:
            t = threading.Thread(target=count)
            t.start()
            time.sleep(0.05)  # lets it start
            s.push_many(urls)
            before = ticks
            s.flush()  # sorts and writes, then waits for the disk
            during = ticks - before
            stop.set()
        t.join()
    finally:
        sys.setswitchinterval(old)
    assert during > 0, "no other thread ran during flush"


def test_the_stubs_match_the_module() -> None:
    names = {n for n in dir(crivello._crivello) if not n.startswith("_")}
    stub = (Path(crivello.__file__).parent / "_crivello.pyi").read_text()
    for n in names:
        assert f"{n}" in stub, n
    for cls in (crivello.Sieve, crivello.Frontier, crivello.Leased, crivello.Policy):
        for m in dir(cls):
            if not m.startswith("_"):
                assert f"def {m}(" in stub, f"{cls.__name__}.{m} has no stub"


def test_the_package_type_checks_with_mypy(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    example = tmp_path / "example.py"
    example.write_text(
        "import crivello\n"
        "with crivello.Frontier('d') as f:\n"
        "    f.push(['http://a/', ('http://b/', 'k', b'm')])\n"
        "    for l in f.lease(10, ttl=5.0):\n"
        "        u: str = l.url\n"
        "        f.done(l, took=0.1)\n"
        "    st: int = f.stats()['waiting']\n"
        "    p: crivello.Policy = f.policy()\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text("import crivello\ncrivello.Frontier('d').lease(ttl='x')\n")
    env = dict(os.environ, MYPY_CACHE_DIR=str(tmp_path / "cache"))
    ok = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(example)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(bad)], capture_output=True, text=True, env=env
    )
    assert wrong.returncode == 1 and "lease" in wrong.stdout, wrong.stdout
    # The package's own Python (the Scrapy classes) is checked against the stubs too.
    package = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "-p", "crivello"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert package.returncode == 0, package.stdout + package.stderr


def test_a_handle_in_a_forked_process_is_refused_and_the_parent_keeps_its_store(
    tmp_path: Path,
) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    f = crivello.Frontier(tmp_path / "f")
    s = crivello.Sieve(tmp_path / "s")
    f.push(["http://a.test/1"])
    s.push("http://a.test/1")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every call refused, then an exit with the handles alive
        os.close(r)
        said = []
        for call in (lambda: f.lease(), lambda: f.push(["http://b.test/"]), lambda: s.push("x")):
            try:
                call()
                said.append("served")
            except crivello.ClosedError as e:
                said.append("refused" if "fork" in str(e) else str(e))
        f.close()  # lets the handle go: nothing of the parent's store is touched
        os.write(w, ",".join(said).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    said = os.read(r, 4096).decode()
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert said == "refused,refused,refused", said
    # The parent's handles work on, and the URL is leased once, here.
    assert [l.url for l in f.lease()] == ["http://a.test/1"]
    assert f.lease() == []
    f.close()
    s.close()
    with crivello.Frontier(tmp_path / "f") as f2:
        assert f2.status("http://a.test/1")[0] == "leased"
        assert f2.counts()["waiting"] == 0
    # A child that exits with live handles (a sys.exit, its objects collected) ends
    # cleanly too (it aborted before: the handle's threads are not in the child).
    code = (
        "import os, sys, crivello\n"
        f"f = crivello.Frontier({str(tmp_path / 'g')!r})\n"
        f"s = crivello.Sieve({str(tmp_path / 'h')!r})\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "f.close()\n"
        "s.close()\n"
        "print(st)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stdout + out.stderr


def test_a_lease_of_another_frontier_ends_nothing_here(tmp_path: Path) -> None:
    with crivello.Frontier(tmp_path / "a") as a, crivello.Frontier(tmp_path / "b") as b:
        a.push(["http://a.test/page"])
        b.push(["http://b.test/other"])
        (la,) = a.lease()
        (lb,) = b.lease()
        assert la.token == lb.token  # each store counts its own
        assert not b.done(la)
        assert not b.retry(la) and not b.refetch(la, crivello.now() + 60)
        assert b.complete([la, lb]) == [False, True]
        assert b.status("http://b.test/other")[0] == "done"
        assert a.status("http://a.test/page")[0] == "leased"
        assert a.done(la.token)  # a token alone is taken as this store's


def test_policies_are_kept_as_the_store_keeps_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one millionth"):
        crivello.Policy(ratio=4e-7)
    p = crivello.Policy(delay=1.23456, ratio=0.5000004)
    assert (p.delay, p.ratio) == (1.235, 0.5)
    assert len({p, crivello.Policy(delay=1.235, ratio=0.5)}) == 1
    # Under half a millisecond, a delay is one, not none (it turned the delay off).
    assert crivello.Policy(delay=0.0004).delay == 0.001
    with crivello.Frontier(tmp_path / "f") as f:
        f.set_policy(p, key="a.test")
        assert f.policy(key="a.test") == p
        with pytest.raises(ValueError, match="per_queue"):
            f.lease(per_queue=0)
        with pytest.raises(crivello.InvalidOptionError, match="255"):
            f.set_policy(p, key="k" * 300)
        with pytest.raises(crivello.InvalidOptionError, match="255"):
            f.block("k" * 300, crivello.now() + 60)


def test_counts_and_the_next_due_instant_see_what_was_just_pushed(tmp_path: Path) -> None:
    with crivello.Frontier(tmp_path / "f") as f:
        f.push(["http://held.test/1"])
        f.flush()
        f.block("held.test", crivello.now() + 100)
        f.push(["http://a.test/"])
        assert f.counts()["waiting"] == 2
        assert f.stats()["waiting"] == 2
        assert [q["key"] for q in f.queues()] == ["a.test", "held.test"]
        due = f.next_due()
        assert due is not None and due <= crivello.now() + 1
        # Of one crawl: the blocked host's, in 100 s; a crawl with nothing, None.
        f.push(["http://held.test/1"], crawl="other")
        f.flush()
        f.block("held.test", crivello.now() + 100, crawl="other")
        due = f.next_due(crawl="other")
        assert due is not None and due >= crivello.now() + 90
        assert f.next_due(crawl="nothing") is None
        # Paused: no queue is due (a loop sleeping until next_due spun at "now"), only a
        # lease's expiry.
        f.pause()
        assert f.lease(10) == []
        assert f.next_due() is None and f.next_due(crawl="other") is None
        f.resume()
        (lease,) = f.lease(10)
        f.pause()
        due = f.next_due()
        assert due is not None and abs(due - lease.deadline) < 0.002
        f.resume()


def test_a_with_block_raises_its_own_error_not_the_close_after_it(tmp_path: Path) -> None:
    """A store poisoned by the error a `with` block raised: the block's error reaches the
    caller, with its file and errno, not the PoisonedError of the close (the close lets the
    handle go all the same)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    crivello.Frontier(tmp_path / "f").close()
    try:
        with pytest.raises(crivello.StorageError) as raised:
            with crivello.Frontier(tmp_path / "f") as f:
                resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
                f.push([("http://h.test/big", None, b"x" * 300_000)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    e = raised.value
    assert e.errno == errno.EFBIG and e.strerror == os.strerror(errno.EFBIG), e
    assert e.filename
    # The handle was let go: the store opens again (the push that failed may or may not
    # be there, as after any failed call).
    with crivello.Frontier(tmp_path / "f") as f:
        assert f.counts()["waiting"] in (0, 1)
    # A close that fails on its own (its sync of pushes not yet durable), in a block that
    # raised something else: the close's error is raised, the block's as its context, so
    # that the caller does not take the pushes for durable.
    try:
        with pytest.raises(crivello.StorageError) as raised:
            with crivello.Frontier(tmp_path / "g") as f:
                f.push_new(["http://h.test/1"], sync=False)
                resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))
                raise KeyError("the block's own")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert isinstance(raised.value.__context__, KeyError), repr(raised.value.__context__)


def test_misuses_are_refused_with_what_to_do(tmp_path: Path) -> None:
    with crivello.Sieve(tmp_path / "s") as s:
        with pytest.raises(TypeError, match="iterable of URLs"):
            s.push_many("http://a.test/")
        with pytest.raises(ValueError, match="max must be from 0"):
            s.peek(-1)
    # A negative count names its argument (Python's conversion raised an OverflowError
    # that did not).
    with pytest.raises(ValueError, match="max_url_len must be from 0"):
        crivello.Sieve(tmp_path / "n", max_url_len=-1)
    for n in (-1, 0, 2**32):
        with pytest.raises(ValueError, match="per_queue must be from 1 to 4294967295"):
            crivello.Policy(per_queue=n)
    with pytest.raises(ValueError, match="limit must be from 0"):
        crivello.Policy(limit=2**64)
    # Past 2**127 too (the conversion to 128 bits raised an OverflowError, or a TypeError
    # that said an int was not one).
    with pytest.raises(ValueError, match="limit must be from 0.*2\\*\\*127 - 1 or more"):
        crivello.Policy(limit=2**200)
    with pytest.raises(ValueError, match="seed must be from 0.*-2\\*\\*127 or less"):
        crivello.Sieve(tmp_path / "huge", seed=-(2**200))
    with pytest.raises(ValueError, match="memory must be a number of bytes"):
        crivello.Sieve(tmp_path / "huge", memory=2**200)
    assert not (tmp_path / "huge").exists()
    # A policy is copied and pickled by value.
    import copy
    import pickle

    p = crivello.Policy(delay=1.5, ratio=0.25, per_queue=3, limit=2**64 - 1)
    assert copy.copy(p) == p and pickle.loads(pickle.dumps(p)) == p
    with crivello.Frontier(tmp_path / "nf") as f:
        with pytest.raises(ValueError, match="token is from 0"):
            f.done(2**200)
        with pytest.raises(ValueError, match="max_urls must be from 0"):
            f.lease(2**300)
        # The defaults read as numbers.
        assert "max_urls=100" in (getattr(type(f).lease, "__text_signature__", None) or "")
        for kwargs, name in (
            ({"max_urls": -1}, "max_urls must be from 0"),
            ({"max_queues": -5}, "max_queues must be from 0"),
            ({"per_queue": -1}, "per_queue must be from 1"),
            ({"per_queue": 0}, "per_queue must be from 1"),
        ):
            with pytest.raises(ValueError, match=name):
                f.lease(**kwargs)  # type: ignore[arg-type]
        # The default policy is the store's: a crawl without a key would be ignored.
        with pytest.raises(ValueError, match="crawl without key"):
            f.set_policy(crivello.Policy(delay=7), crawl="other")
        assert f.policy().delay == 0
        f.set_policy(crivello.Policy(delay=7), crawl="other", key="a.test")
        assert f.policy(crawl="other", key="a.test").delay == 7 and f.policy().delay == 0
        with pytest.raises(ValueError, match="start must be from 0"):
            f.queues(start=-1)
    s2 = crivello.Sieve(tmp_path / "s2")
    s2.close()
    with pytest.raises(crivello.ClosedError):
        with s2:
            pass
    # A sieve committed before it gave anything (the duplicate filter's store) is a plain
    # sieve for good: a frontier refuses it instead of taking its lines for URLs.
    with crivello.Sieve(tmp_path / "fp") as s:
        assert s.push_new("a3f1c2d4e5")
        s.commit()
    with pytest.raises(crivello.WrongModeError, match="plain sieve"):
        crivello.Frontier(tmp_path / "fp")
    # A handle dropped without close is closed: what it pushed is durable.
    s3 = crivello.Sieve(tmp_path / "s3")
    s3.push("http://dropped.test/")
    del s3
    import gc

    gc.collect()
    with crivello.Sieve(tmp_path / "s3") as s:
        s.flush()
        assert s.pop() == ["http://dropped.test/"]
