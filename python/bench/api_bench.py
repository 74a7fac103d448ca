"""The Python API's speed, beside the Rust library's, in one run.

    python python/bench/api_bench.py [--urls 1e6] [--hosts 1e5] [--batch 1e4] [--repeat 2]
        [--rust bench/target/release/crivello-bench] [--dir DIR]

Pushes `--urls` distinct URLs spread over `--hosts` hosts to a new `crivello.Frontier` in
batches of `--batch` (durable pushes), flushes them into their queues, then leases and
completes every URL in batches of `--batch` (one queue's URL at a time: the frontier's
default politeness), and prints URLs/s of each phase. With `--rust`, the bench crate's
`crivello-bench frontier` runs the same workload through the Rust API just before each Python
run, so that the ratio compares runs made under the same load. The Rust bench ends leases by
URL (`complete_urls`, what the gRPC service does), the Python one by token (`complete`).

The stores go under `--dir` (default: the system's temporary directory; use a directory on
the disk the crawl would use, since every push and every lease is a commit).
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import crivello


def count(text: str) -> int:
    """`1000000`, `1e6` or `10^6`."""
    t = text.replace("_", "")
    if "^" in t:
        base, exp = t.split("^", 1)
        return int(int(base) ** int(exp))
    return int(float(t))


def urls_of(n: int, hosts: int) -> List[str]:
    """`n` distinct URLs of about 70 bytes over `hosts` hosts, hosts interleaved."""
    return [f"http://www.host{i % hosts:06d}.example.com/dir/page/{i:09d}.html" for i in range(n)]


def python_run(n: int, hosts: int, batch: int, parent: str) -> Dict[str, float]:
    urls = urls_of(n, hosts)
    d = tempfile.mkdtemp(prefix="crivello-api-bench-", dir=parent)
    try:
        rates: Dict[str, float] = {}
        with crivello.Frontier(d) as f:
            gc.disable()
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                f.push(urls[i : i + batch])
            t1 = time.perf_counter()
            f.flush()
            t2 = time.perf_counter()
            rates["push"] = n / (t1 - t0)
            rates["flush"] = n / (t2 - t1)
            rates["push + flush"] = n / (t2 - t0)
            done = 0
            t3 = time.perf_counter()
            while done < n:
                leased = f.lease(batch)
                if not leased:
                    raise SystemExit(f"only {done} of {n} URLs were handed out")
                ended = f.complete(leased)
                if not all(ended):
                    raise SystemExit("a lease ended before it was completed")
                done += len(leased)
            t4 = time.perf_counter()
            gc.enable()
            rates["lease + complete"] = n / (t4 - t3)
            if f.lease(1):
                raise SystemExit("a URL was handed out twice")
        return rates
    finally:
        shutil.rmtree(d, ignore_errors=True)


def rust_run(binary: str, n: int, hosts: int, batch: int, parent: str) -> Dict[str, float]:
    out = subprocess.run(
        [
            binary,
            "frontier",
            "--urls",
            str(n),
            "--hosts",
            str(hosts),
            "--batch",
            str(batch),
            "--dir",
            parent,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rates: Dict[str, float] = {}
    for name, label in [
        ("push", "push (durable batches)"),
        ("flush", "flush into queues"),
        ("lease + complete", "lease + done"),
    ]:
        m = re.search(re.escape(label) + r"\s+([\d.]+) s\s+(\d+) URLs/s", out)
        if m is None:
            raise SystemExit(f"no figure for {label!r} in the Rust bench's output:\n{out}")
        rates[name] = float(m.group(2))
    rates["push + flush"] = 1 / (1 / rates["push"] + 1 / rates["flush"])
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=count, default=10**6)
    ap.add_argument("--hosts", type=count, default=10**5)
    ap.add_argument("--batch", type=count, default=10**4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rust", help="the bench crate's crivello-bench binary")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    print(
        f"{a.urls} URLs over {a.hosts} hosts, batches of {a.batch}, "
        f"CPython {sys.version.split()[0]}"
    )
    phases = ["push", "flush", "push + flush", "lease + complete"]
    runs: Dict[str, List[Dict[str, float]]] = {"python": [], "rust": []}
    for r in range(a.repeat):
        if a.rust:
            runs["rust"].append(rust_run(a.rust, a.urls, a.hosts, a.batch, a.dir))
        runs["python"].append(python_run(a.urls, a.hosts, a.batch, a.dir))
        line = "  ".join(
            f"{p}: {runs['python'][-1][p] / 1e3:,.0f}k"
            + (f" (rust {runs['rust'][-1][p] / 1e3:,.0f}k)" if a.rust else "")
            for p in phases
        )
        print(f"run {r + 1}: {line} URLs/s")
    print()
    print(f"| phase | Python (best of {a.repeat}) | Rust | Python / Rust |")
    print("|---|---:|---:|---:|")
    for p in phases:
        py = max(x[p] for x in runs["python"])
        if a.rust:
            rs = max(x[p] for x in runs["rust"])
            print(f"| {p} | {py / 1e6:.2f} M/s | {rs / 1e6:.2f} M/s | {py / rs:.2f} |")
        else:
            print(f"| {p} | {py / 1e6:.2f} M/s | | |")


if __name__ == "__main__":
    main()
