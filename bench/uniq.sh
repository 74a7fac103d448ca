#!/usr/bin/env bash
# Compares `crivello uniq` with other tools that print each distinct line of a file once:
# huniq, runiq, `sort -u` and awk, on the synthetic crawl stream of `crivello-bench gen`.
#
# Usage: bench/uniq.sh [LINES]          (default 10000000; run from anywhere)
#
# Installs huniq and runiq with `cargo install --locked` if they are missing, builds crivello
# and crivello-bench in release mode, writes the stream to a temporary directory (about
# 70 bytes per line), and times each tool with GNU time: elapsed seconds and peak RSS. The
# outputs of crivello, huniq and runiq must be byte-identical to awk's (first-appearance
# order); `sort -u` prints sorted lines, so only its line count is checked.
# Environment: NO_SORT=1 leaves `sort -u` out (at 10^8 lines it needs gigabytes of memory
# and temporary files, and its output is sorted anyway); TMPDIR chooses where the stream and the outputs go (they need about
# 4 x 70 x LINES bytes); CARGO_TARGET_DIR is honoured; CRIVELLO=/path/to/crivello uses that
# binary instead of building one.
set -euo pipefail

lines="${1:-10000000}"
if ! [[ "$lines" =~ ^[0-9]+$ ]] || [ "$lines" -eq 0 ]; then
    echo "usage: $0 [LINES]   (a positive number of lines, default 10000000)" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if [ ! -x /usr/bin/time ]; then
    echo "GNU time is needed at /usr/bin/time (Debian/Ubuntu: apt-get install time)" >&2
    exit 1
fi
for tool in huniq runiq; do
    if ! command -v "$tool" >/dev/null; then
        echo "installing $tool ..." >&2
        cargo install --locked --quiet "$tool"
    fi
done

if [ -n "${CRIVELLO:-}" ]; then
    crivello="$CRIVELLO"
else
    echo "building crivello ..." >&2
    (cd "$root" && cargo build --release --quiet)
    crivello="${CARGO_TARGET_DIR:-$root/target}/release/crivello"
fi
echo "building crivello-bench ..." >&2
(cd "$here" && cargo build --release --quiet)
bench="${CARGO_TARGET_DIR:-$here/target}/release/crivello-bench"

work="$(mktemp -d "${TMPDIR:-/tmp}/crivello-uniq.XXXXXX")"
trap 'rm -rf "$work"' EXIT
input="$work/urls.txt"
"$bench" gen --pushes "$lines" >"$input" 2>"$work/gen.txt"
sed 's/^stream: //' "$work/gen.txt" >&2
echo "input: $(wc -l <"$input") lines, $(wc -c <"$input") bytes" >&2

# run NAME STDIN OUTPUT COMMAND...: times COMMAND, prints a table row.
run() {
    local name="$1" stdin="$2" out="$3"
    shift 3
    sync
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" <"$stdin" >"$out"
    local secs kb
    read -r secs kb <"$work/time"
    awk -v n="$name" -v s="$secs" -v k="$kb" -v l="$lines" -v u="$(wc -l <"$out")" \
        'BEGIN { printf "| %s | %.2f | %.2f M | %.0f MiB | %d |\n", n, s, (s > 0 ? l / s / 1e6 : 0), k / 1024, u }'
}

# The number of distinct lines (from gen's statistics), which --expected sizes filters for.
distinct=$(sed -n 's/.* \([0-9]*\) distinct.*/\1/p' "$work/gen.txt")
status=0
echo
echo "| tool | seconds | lines/s | peak RSS | distinct lines |"
echo "|---|---|---|---|---|"
run "crivello uniq (64 MiB budget)" /dev/null "$work/crivello.out" "$crivello" uniq --quiet "$input"
run "crivello uniq --approx (64 MiB)" /dev/null "$work/approx.out" "$crivello" uniq --approx --quiet "$input"
run "crivello uniq --approx --fp-rate 0.01 --expected N" /dev/null "$work/approx1.out" \
    "$crivello" uniq --approx --quiet --fp-rate 0.01 --expected "$distinct" "$input"
run "seed 002 (10 hashes, 4 bytes per line)" /dev/null "$work/seed002.out" \
    "$bench" bloom002 --expected "$distinct" "$input"
run "huniq" "$input" "$work/huniq.out" huniq
run "runiq" /dev/null "$work/runiq.out" runiq "$input"
if [ -z "${NO_SORT:-}" ]; then
    run "LC_ALL=C sort -u" /dev/null "$work/sort.out" env LC_ALL=C sort -u "$input"
fi
run "LC_ALL=C awk '!seen[\$0]++'" /dev/null "$work/awk.out" env LC_ALL=C awk '!seen[$0]++' "$input"
echo

# The lossy ones: their output must be an ordered subsequence of awk's; the share dropped.
for tool in approx approx1 seed002; do
    if awk 'NR == FNR { want[++n] = $0; next } { while (i < n && want[++i] != $0) {} if (want[i] != $0) bad = 1 } END { exit bad }' \
        "$work/awk.out" "$work/$tool.out"; then
        awk -v a="$(wc -l <"$work/awk.out")" -v t="$(wc -l <"$work/$tool.out")" -v n="$tool" \
            'BEGIN { printf "%s: an ordered subsequence of awk'"'"'s output; %d of %d distinct lines dropped (%.4f%%)\n", n, a - t, a, 100 * (a - t) / a }'
    else
        echo "$tool: NOT an ordered subsequence of awk's output"
        status=1
    fi
done
for tool in crivello huniq runiq; do
    if cmp -s "$work/$tool.out" "$work/awk.out"; then
        echo "$tool: output byte-identical to awk's"
    else
        echo "$tool: output DIFFERS from awk's"
        status=1
    fi
done
if [ -n "${NO_SORT:-}" ]; then
    echo "sort -u: not run (NO_SORT)"
elif [ "$(wc -l <"$work/sort.out")" = "$(wc -l <"$work/awk.out")" ]; then
    echo "sort -u: same number of lines as awk (sorted order)"
else
    echo "sort -u: line count DIFFERS from awk's"
    status=1
fi
exit "$status"
