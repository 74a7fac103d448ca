//! The sort of a full buffer of S into a run's pairs (`crivello::internals::sort_slots`: a radix
//! sort in place, then the removal of repeats) against the same work done with the standard
//! library's sort, on the signatures of the synthetic crawl stream: the figures behind
//! `src/sort.rs`.
//!
//! `cargo run --release --example sort -- [SLOTS]` (default 2,599,594, the slots of a buffer
//! for a 64 MiB budget).

#[path = "../src/stream.rs"]
#[allow(dead_code)]
mod stream;

use std::time::Instant;

use crivello::internals::{sort_slots, Slot};
use stream::Stream;

fn std_sort_slots(slots: &mut Vec<Slot>) {
    slots.sort_unstable_by_key(|p| p.sig);
    slots.dedup_by(|b, a| {
        if a.sig == b.sig {
            a.idx = a.idx.min(b.idx);
            true
        } else {
            false
        }
    });
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::args().nth(1).map_or(2_599_594, |s| {
        s.parse::<f64>().expect("a number of slots") as usize
    });
    let mut s = Stream::new(7);
    let mut url = Vec::new();
    let batch: Vec<Slot> = (0..n as u32)
        .map(|idx| {
            url.clear();
            s.next_into(&mut url);
            Slot {
                sig: crivello::signature(&url, 42),
                idx,
            }
        })
        .collect();
    let (mut radix, mut standard) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let mut a = batch.clone();
        let t = Instant::now();
        sort_slots(&mut a);
        radix.push(t.elapsed().as_secs_f64() * 1e3);
        let mut b = batch.clone();
        let t = Instant::now();
        std_sort_slots(&mut b);
        standard.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(a == b, "the two sorts disagree");
    }
    let (r, s) = (median(radix), median(standard));
    println!(
        "{n} slots of the stream's signatures, medians of 7: crivello's sort {r:.1} ms, the \
         standard library's {s:.1} ms ({:.2}x)",
        s / r
    );
}
