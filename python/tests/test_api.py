"""The Python API: each class over the library, errors as exception classes, threads,
context managers."""

from __future__ import annotations

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
        # Back in its queue, in its place; a batch of completions in one step.
        assert f.retry(by_url["http://b.test/1"]) is True
        assert f.complete([by_url["http://b.test/1"].token]) == [False]
        assert f.crawls() == ["c1"]
        qs = f.queues("c1")
        assert [q["key"] for q in qs] == ["a.test", "shared-key"]
        assert qs[0]["done"] == 1 and qs[0]["waiting"] == 1
        assert f.delete_queue("shared-key", crawl="c1") == 2
        assert f.stats()["waiting"] == 1


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
        with pytest.raises(TypeError, match="str or bytes"):
            f.push([42])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="wrap a single URL"):
            f.push("http://a.test/")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="seconds"):
            f.lease(ttl=-1)
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
    assert "not a directory" in str(se.value) and "None" not in str(se.value), str(se.value)
    assert se.value.filename is not None and "a-file" in se.value.filename
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
