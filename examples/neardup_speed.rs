//! Speed of the near-duplicate store, in process: fingerprinting (MB/s of text, one core, on
//! the corpus of this machine's texts) and query + insert at k = 3 with the fingerprints
//! given (documents/s as the store grows to N), beside a linear scan of the same
//! fingerprints (measured on a sample of queries).
//!
//! `cargo run --release --no-default-features --example neardup_speed -- [N] [MIB]`

use std::time::Instant;

use crivello::internals::corpus::machine_texts;
use crivello::neardup::{Fingerprinter, Store};
use crivello::Options;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .map_or(1_000_000, |a| a.parse::<f64>().unwrap() as u64);
    let mib: usize = args.get(2).map_or(64, |a| a.parse().unwrap());

    let texts = machine_texts(1);
    let bytes: usize = texts.iter().map(|(_, t)| t.len()).sum();
    let mut f = Fingerprinter::new();
    let mut x = 0u64;
    let t = Instant::now();
    let mut done = 0usize;
    while t.elapsed().as_secs_f64() < 2.0 {
        for (_, text) in &texts {
            x ^= f.fingerprint(text).unwrap();
        }
        done += bytes;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "fingerprint: {} texts, {:.1} MB: {:.0} MB/s ({x:x})",
        texts.len(),
        bytes as f64 / 1e6,
        done as f64 / 1e6 / secs
    );

    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), Options::new().memory(mib << 20)).unwrap();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let batch = 1 << 16;
    let mut fps: Vec<u64> = Vec::new();
    let t = Instant::now();
    let mut ids: Vec<Vec<u8>> = Vec::with_capacity(batch);
    let mut found = 0u64;
    let mut at = 0u64;
    let mut last = Instant::now();
    while at < n {
        let m = batch.min((n - at) as usize);
        ids.clear();
        let mut docs = Vec::with_capacity(m);
        for i in 0..m {
            ids.push(format!("d{}", at + i as u64).into_bytes());
            // One document in eight is a near-duplicate (2 bits off) of a recent one.
            let fp = if i > 0 && rand() % 8 == 0 {
                docs.last()
                    .map_or(0, |&(_, f): &(&[u8], u64)| f ^ 0b11 << (rand() % 62))
            } else {
                rand()
            };
            docs.push((&[][..], fp));
        }
        let docs: Vec<(&[u8], u64)> = docs
            .iter()
            .zip(&ids)
            .map(|(&(_, fp), id)| (id.as_slice(), fp))
            .collect();
        fps.extend(docs.iter().map(|d| d.1));
        let out = store.insert(&docs, 3).unwrap();
        found += out.iter().flatten().filter(|s| s.nearest.is_some()).count() as u64;
        at += m as u64;
        if last.elapsed().as_secs_f64() > 5.0 || at == n {
            last = Instant::now();
            println!(
                "  {at} stored: {:.0} documents/s so far, {} segments",
                at as f64 / t.elapsed().as_secs_f64(),
                store.stats().segments
            );
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "query + insert, k = 3, {mib} MiB: {n} documents in {secs:.2} s: {:.0} documents/s ({found} near-duplicates)",
        n as f64 / secs
    );
    // The linear scan over the same fingerprints, for a sample of queries.
    let sample = 200;
    let t = Instant::now();
    let mut hits = 0;
    for q in 0..sample {
        let fp = fps[(q * 7919) % fps.len()] ^ 1;
        hits += fps.iter().filter(|&&f| (f ^ fp).count_ones() <= 3).count();
    }
    let per = t.elapsed().as_secs_f64() / sample as f64;
    println!(
        "linear scan of {} fingerprints: {:.0} queries/s ({hits} hits): the store is {:.0}x faster",
        fps.len(),
        1.0 / per,
        n as f64 / secs * per
    );
    store.close().unwrap();
}
