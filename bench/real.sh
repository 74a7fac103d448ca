#!/usr/bin/env bash
# Runs the peers and the deduplicating tools on the real BFS-crawl streams of the shared data:
# the URLs a breadth-first crawler of three real web graphs would push, each with the output
# an exact sieve must give (see that data's README.md).
#
# Usage: bench/real.sh [REPS]          (default 5; run from anywhere)
#
# For each stream: `crivello-bench run --input STREAM --expected EXPECTED --reps REPS` (every
# peer, the median run by pushes/s, each checked against the expected output), then
# `crivello uniq`, huniq, runiq and awk, each run REPS times (mean milliseconds per run), each
# output compared byte for byte with the expected file. The streams are small (24,000 to
# 192,000 URLs), so a sieve's fixed costs (creating its files, the fsyncs of its one flush)
# weigh heavily in its time.
# Environment: DATA=DIR (default ../shared/data beside the project) holds the `.xz` files;
# JSON=FILE appends the peers' records to FILE; huniq and runiq are timed when installed
# (bench/uniq.sh installs them); TMPDIR and CARGO_TARGET_DIR are honoured.
set -euo pipefail

reps="${1:-5}"
if ! [[ "$reps" =~ ^[0-9]+$ ]] || [ "$reps" -eq 0 ]; then
    echo "usage: $0 [REPS]   (a positive number of repetitions, default 5)" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
data="${DATA:-$root/../shared/data}"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
for tool in xz awk cmp; do
    if ! command -v "$tool" >/dev/null; then
        echo "$tool is needed" >&2
        exit 1
    fi
done
if [ ! -d "$data" ]; then
    echo "no shared data at $data (set DATA=DIR)" >&2
    exit 1
fi

echo "building crivello and crivello-bench ..." >&2
(cd "$root" && cargo build --release --quiet)
(cd "$here" && cargo build --release --quiet)
crivello="${CARGO_TARGET_DIR:-$root/target}/release/crivello"
bench="${CARGO_TARGET_DIR:-$here/target}/release/crivello-bench"

work="$(mktemp -d "${TMPDIR:-/tmp}/crivello-real.XXXXXX")"
trap 'rm -rf "$work"' EXIT
json=()
if [ -n "${JSON:-}" ]; then
    json=(--json "$JSON")
fi

# time_tool NAME OUTPUT COMMAND...: runs COMMAND REPS times, prints a table row.
time_tool() {
    local name="$1" out="$2"
    shift 2
    local start end
    start=$(date +%s%N)
    for _ in $(seq "$reps"); do
        "$@" >"$out"
    done
    end=$(date +%s%N)
    local same="DIFFERS"
    if cmp -s "$out" "$expected"; then same="identical"; fi
    awk -v n="$name" -v ns="$((end - start))" -v r="$reps" -v s="$same" \
        'BEGIN { printf "| %s | %.1f | %s |\n", n, ns / r / 1e6, s }'
    [ "$same" = identical ]
}

status=0
for stream in hollins.bfs california.bfs ukwa-1996-hosts.bfs ukwa-1996-hosts.bfs-all; do
    input="$work/$stream-stream.txt"
    expected="$work/$stream-expected.txt"
    xz -dc "$data/$stream-stream.txt.xz" >"$input"
    xz -dc "$data/$stream-expected.txt.xz" >"$expected"
    echo
    echo "## $stream: $(wc -l <"$input") URLs, $(wc -l <"$expected") distinct"
    echo
    "$bench" run --input "$input" --expected "$expected" --reps "$reps" ${json[@]+"${json[@]}"} || status=1
    echo
    echo "| tool | ms per run (mean of $reps) | output against the expected |"
    echo "|---|---|---|"
    time_tool "crivello uniq" "$work/out" "$crivello" uniq --quiet "$input" || status=1
    for tool in huniq runiq; do
        if command -v "$tool" >/dev/null; then
            if [ "$tool" = huniq ]; then
                time_tool huniq "$work/out" sh -c 'huniq <"$1"' sh "$input" || status=1
            else
                time_tool runiq "$work/out" runiq "$input" || status=1
            fi
        fi
    done
    time_tool "LC_ALL=C awk '!seen[\$0]++'" "$work/out" env LC_ALL=C awk '!seen[$0]++' "$input" ||
        status=1
done
exit "$status"
