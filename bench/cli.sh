#!/usr/bin/env bash
# The sieve as users run it: `crivello push FILE`, `crivello flush`, `crivello pop > OUT`,
# side by side with an in-memory hash-set sieve that reads the same file and prints the same
# output (huniq), on the seed-42 synthetic crawl stream of `crivello-bench gen`.
#
# Usage: bench/cli.sh [LINES] [REPS]     (defaults 10000000 and 3; run from anywhere)
#
# Each repetition starts from an empty store; the figures are the medians over REPS. Prints:
#   - seconds of each step, their sum against huniq's, peak RSS of each;
#   - pop's output rate from a warm frontier (the pop of the run above, its files cached);
#   - the final flush of a full buffer of S: as many distinct URLs as S holds (the `slots` of
#     `crivello stats`) pushed, then `crivello flush` timed.
# Every crivello output is compared byte for byte with huniq's (first-appearance order).
# Installs huniq with `cargo install --locked` if it is missing; builds crivello and
# crivello-bench in release mode (CRIVELLO=/path/to/crivello uses that binary instead).
# TMPDIR chooses where the stream, the store and the outputs go (about 4 x 70 x LINES bytes).
set -euo pipefail

lines="${1:-10000000}"
reps="${2:-3}"
if ! [[ "$lines" =~ ^[0-9]+$ && "$reps" =~ ^[0-9]+$ ]] || [ "$lines" -eq 0 ] || [ "$reps" -eq 0 ]; then
    echo "usage: $0 [LINES] [REPS]   (positive numbers, defaults 10000000 and 3)" >&2
    exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if [ ! -x /usr/bin/time ]; then
    echo "GNU time is needed at /usr/bin/time (Debian/Ubuntu: apt-get install time)" >&2
    exit 1
fi
if ! command -v huniq >/dev/null; then
    echo "installing huniq ..." >&2
    cargo install --locked --quiet huniq
fi
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

work="$(mktemp -d "${TMPDIR:-/tmp}/crivello-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
input="$work/urls.txt"
"$bench" gen --pushes "$lines" --seed 42 >"$input" 2>"$work/gen.txt"
sed 's/^stream: //' "$work/gen.txt" >&2
bytes_in=$(wc -c <"$input")
echo "input: $lines lines, $bytes_in bytes" >&2

# timed NAME STDIN OUT COMMAND...: appends "NAME seconds kib" to $work/times.
timed() {
    local name="$1" stdin="$2" out="$3"
    shift 3
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" <"$stdin" >"$out"
    echo "$name $(cat "$work/time")" >>"$work/times"
}

# median NAME FIELD: the median of FIELD (2: seconds, 3: KiB) of NAME's records.
median() {
    awk -v n="$1" -v f="$2" '$1 == n { print $f }' "$work/times" | sort -n |
        awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

: >"$work/times"
status=0
for rep in $(seq "$reps"); do
    echo "repetition $rep of $reps ..." >&2
    sync
    timed huniq "$input" "$work/huniq.out" huniq
    rm -rf "$work/store"
    timed push /dev/null /dev/null "$crivello" push --quiet "$work/store" "$input"
    timed flush /dev/null /dev/null "$crivello" flush --quiet "$work/store"
    timed pop /dev/null "$work/crivello.out" "$crivello" pop --quiet "$work/store"
    if ! cmp -s "$work/crivello.out" "$work/huniq.out"; then
        echo "crivello's output DIFFERS from huniq's" >&2
        status=1
    fi
done
out_bytes=$(wc -c <"$work/huniq.out")
distinct=$(wc -l <"$work/huniq.out")

# The final flush of a full buffer: as many distinct URLs as S has slots.
slots=$("$crivello" stats --json "$work/store" | sed 's/.*"slots":\([0-9]*\).*/\1/')
# Distinct URLs not yet in any store: the output, each with a suffix.
full="$work/full.txt"
awk -v n="$slots" 'NR <= n { print $0 "#f" }' "$work/huniq.out" >"$full"
if [ "$(wc -l <"$full")" -lt "$slots" ]; then
    # Fewer distinct URLs than slots: the distinct URLs of a longer stream of another seed
    # (a fifth of its pushes are new), as a crawl would bring them (suffixes on few URLs
    # would make the frames far easier to compress than a crawl's).
    "$bench" gen --pushes "$((slots * 6))" --seed 43 2>/dev/null | huniq >"$work/more.txt"
    head -n "$slots" "$work/more.txt" | awk '{ print $0 "#f" }' >"$full"
    rm -f "$work/more.txt"
fi
full_lines=$(wc -l <"$full")
for rep in $(seq "$reps"); do
    rm -rf "$work/full"
    "$crivello" push --quiet "$work/full" "$full"
    sync
    timed full-flush /dev/null /dev/null "$crivello" flush --quiet "$work/full"
done

h=$(median huniq 2)
p=$(median push 2)
f=$(median flush 2)
o=$(median pop 2)
echo
echo "| | seconds | lines/s | peak RSS |"
echo "|---|---|---|---|"
awk -v s="$h" -v k="$(median huniq 3)" -v l="$lines" \
    'BEGIN { printf "| hash-set sieve (huniq) | %.2f | %.2f M | %.0f MiB |\n", s, l / s / 1e6, k / 1024 }'
for step in push flush pop; do
    awk -v n="crivello $step" -v s="$(median "$step" 2)" -v k="$(median "$step" 3)" \
        'BEGIN { printf "| %s | %.2f | | %.0f MiB |\n", n, s, k / 1024 }'
done
awk -v h="$h" -v p="$p" -v f="$f" -v o="$o" -v l="$lines" \
    'BEGIN { t = p + f + o; printf "| crivello push && flush && pop | %.2f | %.2f M (%.2fx) | |\n", t, l / t / 1e6, h / t }'
echo
awk -v o="$o" -v b="$out_bytes" -v d="$distinct" \
    'BEGIN { printf "pop from a warm frontier: %d URLs, %.0f MB in %.2f s: %.2f GB/s of output\n", d, b / 1e6, o, b / o / 1e9 }'
awk -v s="$(median full-flush 2)" -v n="$full_lines" -v k="$(median full-flush 3)" \
    'BEGIN { printf "final flush of a full buffer (%d distinct URLs, the slots of S at 64 MiB): %.2f s, peak RSS %.0f MiB\n", n, s, k / 1024 }'
if [ "$status" -eq 0 ]; then
    echo "crivello's output: byte-identical to huniq's in every repetition"
fi
exit "$status"
