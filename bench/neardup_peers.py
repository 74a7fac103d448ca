"""The Python peers of crivello's near-duplicate store, run by `crivello-bench neardup`.

The PyPI `simhash` package (Simhash and SimhashIndex) and datasketch (MinHash and MinHashLSH),
on the same texts and fingerprints as crivello. `crivello-bench neardup` writes a task as JSON
to a file and runs this script with the file's path; the script prints one JSON object of
figures on stdout.

    python3 neardup_peers.py TASK.json

The task holds:
- "texts": the corpus's texts; "edited": [original index, edit kind, edited text];
  "unrelated": [index, index] pairs; "seconds": the time each speed measurement may take;
- "fingerprints": the fingerprints crivello's store was given, and "stored": the counts at
  which SimhashIndex is measured (a prefix of the fingerprints each).
"""

import json
import sys
import time

from datasketch import MinHash


def shingles(text, n=5):
    """The 5-character shingles of a text normalised about as crivello normalises it (lower
    case, every run of characters that are not letters or digits one space; Python's
    `str.isalnum` differs from Rust's `char::is_alphanumeric` on some combining marks)."""
    out = []
    gap = False
    for c in text:
        if c.isalnum():
            if gap and out:
                out.append(" ")
            gap = False
            out.append(c.lower())
        else:
            gap = True
    norm = "".join(out)
    if len(norm) <= n:
        return [norm.encode()] if norm else []
    return [norm[i : i + n].encode() for i in range(len(norm) - n + 1)]


def timed(texts, seconds, one):
    """MB/s of `one` over the texts, repeated until `seconds` have passed (the whole corpus at
    least once, or as many texts as the time allows)."""
    done = 0
    start = time.perf_counter()
    while True:
        for t in texts:
            one(t)
            done += len(t.encode())
            if time.perf_counter() - start > seconds:
                return done / 1e6 / (time.perf_counter() - start)
        if time.perf_counter() - start > seconds:
            return done / 1e6 / (time.perf_counter() - start)


def minhash(text):
    """datasketch's MinHash of a text's shingles (made in Python, as a user of it would)."""
    m = MinHash(num_perm=128)
    m.update_batch(shingles(text))
    return m


def simhash_of(text):
    """The `simhash` package's fingerprint of a text, by its own tokenisation (lower case,
    the characters its default pattern keeps, 4-character windows). Its features are given
    as a list, one entry per occurrence: the same sums as `Simhash(text)`, which weighs each
    distinct feature by its count and, with numpy 2, fails with an OverflowError on a feature
    that occurs more than 255 times."""
    from simhash import Simhash

    return Simhash(_TOKENIZER()._tokenize(text))


def _TOKENIZER():
    from simhash import Simhash

    global _tokenizer
    if _tokenizer is None:
        _tokenizer = Simhash(0)
    return _tokenizer


_tokenizer = None


def fingerprint_speed(task):
    texts = task["texts"]
    s = task["seconds"]
    return {
        "simhash_mb_s": timed(texts, s, lambda t: simhash_of(t).value),
        "minhash_mb_s": timed(texts, s, minhash),
    }


def recall(task):
    """Recall of one-edit copies and precision on unrelated pairs: the `simhash` package's
    own Simhash at k = 3, and MinHash LSH at a Jaccard threshold of 0.8 (128 permutations)."""
    from datasketch import MinHashLSH

    texts, edited, unrelated = task["texts"], task["edited"], task["unrelated"]
    out = {}

    fps = [simhash_of(t) for t in texts]
    hits = sum(1 for i, _, e in edited if fps[i].distance(simhash_of(e)) <= 3)
    close = sum(1 for a, b in unrelated if fps[a].distance(fps[b]) <= 3)
    out["simhash"] = {"recall": hits / len(edited), "unrelated_close": close}

    mins = [minhash(t) for t in texts]
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    for i, m in enumerate(mins):
        lsh.insert(i, m)
    hits = sum(1 for i, _, e in edited if i in lsh.query(minhash(e)))
    close = sum(1 for a, b in unrelated if b in lsh.query(mins[a]))
    out["minhash_lsh"] = {"recall": hits / len(edited), "unrelated_close": close}
    return out


def index_speed(task):
    """SimhashIndex at k = 3: for each fingerprint, the stored ones within 3, then it is
    added; documents/s for each count in "stored", and the process's peak RSS."""
    import resource

    from simhash import Simhash, SimhashIndex

    fps = task["fingerprints"]
    rows = []
    for n in task["stored"]:
        index = SimhashIndex([], k=3)
        found = 0
        start = time.perf_counter()
        for i in range(n):
            h = Simhash(fps[i])
            found += 1 if index.get_near_dups(h) else 0
            index.add(str(i), h)
        secs = time.perf_counter() - start
        rows.append({"stored": n, "docs_s": n / secs, "near": found})
        del index
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"simhash_index": rows, "peak_rss_kib": peak}


def main():
    with open(sys.argv[1]) as f:
        task = json.load(f)
    result = {}
    if task.get("texts"):
        result["fingerprint"] = fingerprint_speed(task)
        result["recall"] = recall(task)
    if task.get("fingerprints"):
        result["index"] = index_speed(task)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
