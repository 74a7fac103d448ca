//! The near-duplicate store: exact against a brute-force scan, durable, and checked.

use crivello::internals::neardup::{brute, fingerprints, flip};
use crivello::neardup::{check, distance, Store, MAX_K};
use crivello::Options;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn insert_and_query_equal_a_brute_force_scan(
        seed in any::<u64>(),
        n in 1usize..400,
        k in 0u32..=6,
        cuts in proptest::collection::vec(1usize..120, 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let fps = fingerprints(seed, n, k);
        let ids: Vec<Vec<u8>> = (0..n).map(|i| format!("doc-{i}").into_bytes()).collect();
        let mut store = Store::open(dir.path(), Options::new().memory(4 << 20)).unwrap();
        // Several calls (segments, merges), a close and a reopen in the middle.
        let mut at = 0;
        let mut c = 0;
        while at < n {
            let end = (at + cuts[c % cuts.len()]).min(n);
            let batch: Vec<(&[u8], u64)> =
                (at..end).map(|i| (ids[i].as_slice(), fps[i])).collect();
            let out = store.insert(&batch, k).unwrap();
            for (j, o) in out.iter().enumerate() {
                let i = at + j;
                let o = o.as_ref().expect("every id is new");
                prop_assert_eq!(o.doc, i as u64);
                let want = brute(&fps[..i], fps[i], k).first().copied();
                let got = o.nearest.as_ref().map(|m| (m.doc, m.distance));
                prop_assert_eq!(got, want, "doc {}", i);
                if let Some(m) = &o.nearest {
                    prop_assert_eq!(&m.id, &ids[m.doc as usize]);
                }
            }
            at = end;
            c += 1;
            if c == 2 {
                store.close().unwrap();
                store = Store::open(dir.path(), Options::new().memory(4 << 20)).unwrap();
            }
        }
        for q in [fps[0], flip(fps[n / 2], k, seed), flip(fps[n - 1], k + 1, seed), seed] {
            for kk in [0, k, MAX_K] {
                prop_assert_eq!(store.query(q, kk).unwrap(), brute(&fps, q, kk));
            }
        }
        prop_assert!(store.stats().segments <= 12);
        store.close().unwrap();
        let report = check(dir.path()).unwrap();
        prop_assert_eq!(report.docs, n as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Ids repeated within a call and across calls: a repeat is skipped, and each new
    /// document's nearest is the brute-force scan's over the documents stored before it.
    #[test]
    fn repeated_ids_are_skipped_and_the_rest_equal_a_brute_force_scan(
        seed in any::<u64>(),
        n in 1usize..400,
        k in 0u32..=6,
        picks in proptest::collection::vec(any::<u16>(), 400),
        cuts in proptest::collection::vec(1usize..120, 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let fps = fingerprints(seed, n, k);
        // About one document in three takes the id of an earlier one (maybe in its call).
        let ids: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let p = picks[i] as usize;
                let of = if i > 0 && p.is_multiple_of(3) { p % i } else { i };
                format!("doc-{of}").into_bytes()
            })
            .collect();
        let mut store = Store::open(dir.path(), Options::new().memory(4 << 20)).unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut stored: Vec<u64> = Vec::new();
        let mut stored_ids: Vec<Vec<u8>> = Vec::new();
        let (mut at, mut c) = (0, 0);
        while at < n {
            let end = (at + cuts[c % cuts.len()]).min(n);
            let batch: Vec<(&[u8], u64)> =
                (at..end).map(|i| (ids[i].as_slice(), fps[i])).collect();
            let out = store.insert(&batch, k).unwrap();
            for (j, o) in out.iter().enumerate() {
                let i = at + j;
                if !seen.insert(ids[i].clone()) {
                    prop_assert!(o.is_none(), "doc {} repeats an id", i);
                    continue;
                }
                let o = o.as_ref().expect("a new id is stored");
                prop_assert_eq!(o.doc, stored.len() as u64);
                let want = brute(&stored, fps[i], k).first().copied();
                let got = o.nearest.as_ref().map(|m| (m.doc, m.distance));
                prop_assert_eq!(got, want, "doc {}", i);
                if let Some(m) = &o.nearest {
                    prop_assert_eq!(&m.id, &stored_ids[m.doc as usize]);
                }
                stored.push(fps[i]);
                stored_ids.push(ids[i].clone());
            }
            at = end;
            c += 1;
        }
        prop_assert_eq!(store.len(), stored.len() as u64);
        prop_assert_eq!(store.stats().repeats, (n - stored.len()) as u64);
        store.close().unwrap();
    }
}

/// Batches of thousands of documents (the tables sorted by counting, the merges of several
/// large segments) answer as the brute-force scan does, at k = 3 and at k = 5.
#[test]
fn large_batches_and_merges_equal_a_brute_force_scan() {
    for (k, seed) in [(3u32, 41u64), (5, 43)] {
        let dir = tempfile::tempdir().unwrap();
        let n = 24_000;
        let fps = fingerprints(seed, n, k);
        let ids: Vec<Vec<u8>> = (0..n).map(|i| format!("doc-{i}").into_bytes()).collect();
        let mut store = Store::open(dir.path(), Options::new().memory(16 << 20)).unwrap();
        let mut at = 0;
        let mut merged = false;
        for size in [5_000, 9_000, 4_100, 3_000, 1_900, 1_000] {
            let end = (at + size).min(n);
            let batch: Vec<(&[u8], u64)> = (at..end).map(|i| (ids[i].as_slice(), fps[i])).collect();
            let before = store.stats().segments;
            let out = store.insert(&batch, k).unwrap();
            merged |= store.stats().segments <= before;
            for (j, o) in out.iter().enumerate() {
                let i = at + j;
                let o = o.as_ref().expect("every id is new");
                let want = brute(&fps[..i], fps[i], k).first().copied();
                let got = o.nearest.as_ref().map(|m| (m.doc, m.distance));
                assert_eq!(got, want, "doc {i}, k = {k}");
            }
            at = end;
        }
        assert!(merged, "some insert merged segments");
        for i in (0..at).step_by(997) {
            let q = flip(fps[i], k, seed ^ i as u64);
            assert_eq!(
                store.query(q, k).unwrap(),
                brute(&fps[..at], q, k),
                "query {i}"
            );
        }
        store.close().unwrap();
        assert_eq!(check(dir.path()).unwrap().docs, at as u64);
    }
}

/// Large batches (whose ids are looked up on a thread of their own while the segments are
/// searched) with ids repeated within and across calls answer as the brute-force scan does.
#[test]
fn large_batches_with_repeated_ids_equal_a_brute_force_scan() {
    let dir = tempfile::tempdir().unwrap();
    let (n, k, seed) = (14_000, 3, 47u64);
    let fps = fingerprints(seed, n, k);
    let ids: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let r = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            let of = if i > 0 && r.is_multiple_of(3) {
                r as usize % i
            } else {
                i
            };
            format!("doc-{of}").into_bytes()
        })
        .collect();
    let mut store = Store::open(dir.path(), Options::new().memory(16 << 20)).unwrap();
    let mut seen = std::collections::HashSet::new();
    let (mut stored, mut stored_ids): (Vec<u64>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    let mut at = 0;
    for size in [6_000, 5_000, 3_000] {
        let end = (at + size).min(n);
        let batch: Vec<(&[u8], u64)> = (at..end).map(|i| (ids[i].as_slice(), fps[i])).collect();
        let out = store.insert(&batch, k).unwrap();
        for (j, o) in out.iter().enumerate() {
            let i = at + j;
            if !seen.insert(ids[i].clone()) {
                assert!(o.is_none(), "doc {i} repeats an id");
                continue;
            }
            let o = o.as_ref().expect("a new id is stored");
            assert_eq!(o.doc, stored.len() as u64);
            let want = brute(&stored, fps[i], k).first().copied();
            let got = o.nearest.as_ref().map(|m| (m.doc, m.distance));
            assert_eq!(got, want, "doc {i}");
            if let Some(m) = &o.nearest {
                assert_eq!(m.id, stored_ids[m.doc as usize], "doc {i}");
            }
            stored.push(fps[i]);
            stored_ids.push(ids[i].clone());
        }
        at = end;
    }
    assert!(n - stored.len() > 1_000, "many repeats");
    store.close().unwrap();
}

#[test]
fn a_repeated_id_is_not_stored_again_even_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), Options::new().memory(4 << 20)).unwrap();
    let out = store.insert(&[(b"a", 1), (b"b", 2), (b"a", 3)], 3).unwrap();
    assert!(out[0].is_some() && out[1].is_some() && out[2].is_none());
    store.close().unwrap();
    let mut store = Store::open(dir.path(), Options::new().memory(4 << 20)).unwrap();
    let out = store.insert(&[(b"b", 9), (b"c", 1)], 3).unwrap();
    assert!(out[0].is_none());
    let c = out[1].as_ref().unwrap();
    assert_eq!(c.doc, 2);
    assert_eq!(c.nearest.as_ref().unwrap().id, b"a");
    assert_eq!(c.nearest.as_ref().unwrap().distance, 0);
    assert_eq!(store.stats().repeats, 2);
    assert_eq!(store.document(2).unwrap(), *c);
    assert!(store.insert(&[(b"", 1)], 3).is_err());
    assert!(store.insert(&[(b"x", 1)], MAX_K + 1).is_err());
    store.close().unwrap();
}

/// Recall and precision at k = 3 on the corpus of this machine's texts (copyright files and
/// licences), through the store: every exact copy and at least 90 % of the one-edit copies
/// find their original (or a text at least as near), and no unrelated pair is within 3.
/// Skipped, with a note, on a machine with fewer than 20 such texts.
#[test]
fn recall_and_precision_on_real_text() {
    use crivello::internals::corpus::machine_corpus;
    use crivello::neardup::fingerprint;
    let Some(c) = machine_corpus(20) else {
        eprintln!("note: fewer than 20 texts of 2,000 bytes in /usr/share/doc: skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), Options::new().memory(8 << 20)).unwrap();
    let fps: Vec<u64> = c
        .texts
        .iter()
        .map(|(_, t)| fingerprint(t).unwrap())
        .collect();
    let ids: Vec<Vec<u8>> = c
        .texts
        .iter()
        .map(|(p, _)| p.clone().into_bytes())
        .collect();
    let docs: Vec<(&[u8], u64)> = ids
        .iter()
        .map(Vec::as_slice)
        .zip(fps.iter().copied())
        .collect();
    store.insert(&docs, 3).unwrap();
    // Exact copies: distance 0 to their original.
    for (i, &fp) in fps.iter().enumerate() {
        let found = store.query(fp, 3).unwrap();
        assert!(found.iter().any(|&(d, dist)| d == i as u64 && dist == 0));
    }
    let mut hits = 0;
    for (i, _, copy) in &c.edited {
        let found = store.query(fingerprint(copy).unwrap(), 3).unwrap();
        hits += usize::from(found.iter().any(|&(d, _)| d == *i as u64));
    }
    let recall = hits as f64 / c.edited.len() as f64;
    let close = c
        .unrelated
        .iter()
        .filter(|(a, b)| distance(fps[*a], fps[*b]) <= 3)
        .count();
    eprintln!(
        "{} texts: recall of one-edit copies {:.1} % ({hits}/{}), unrelated pairs within 3: {close}/{}",
        c.texts.len(),
        100.0 * recall,
        c.edited.len(),
        c.unrelated.len()
    );
    assert!(recall >= 0.9, "recall {recall}");
    assert_eq!(close, 0, "unrelated pairs within k = 3");
    store.close().unwrap();
}
