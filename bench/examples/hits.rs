//! How many pushes of the synthetic crawl stream a direct-mapped cache of recent signatures
//! catches, for cache sizes from 32 KiB to 32 MiB: the figures behind the default size of
//! crivello's cache of recent signatures (`Options::recent_cache`).
//!
//! `cargo run --release --example hits -- [PUSHES]` (default 10^7).

#[path = "../src/stream.rs"]
#[allow(dead_code)]
mod stream;
use stream::Stream;
fn main() {
    let n: u64 = std::env::args().nth(1).map_or(10_000_000, |s| {
        s.parse::<f64>().expect("a number of pushes") as u64
    });
    let bits = [12u32, 14, 16, 18, 20, 22];
    let mut caches: Vec<Vec<u64>> = bits.iter().map(|b| vec![0u64; 1 << b]).collect();
    let mut hits = vec![0u64; bits.len()];
    let mut s = Stream::new(1);
    let mut buf = Vec::new();
    for _ in 0..n {
        buf.clear();
        s.next_into(&mut buf);
        let sig = xxhash_rust::xxh3::xxh3_64_with_seed(&buf, 42);
        for (i, c) in caches.iter_mut().enumerate() {
            let k = (sig >> (64 - bits[i])) as usize;
            if c[k] == sig {
                hits[i] += 1
            } else {
                c[k] = sig
            }
        }
    }
    for (i, b) in bits.iter().enumerate() {
        println!(
            "2^{b} entries ({} KiB): hits {:.1}% of pushes",
            (8u64 << b) / 1024,
            100.0 * hits[i] as f64 / n as f64
        );
    }
    println!("repeats: {:.1}%", 100.0 * s.repeat_fraction());
}
