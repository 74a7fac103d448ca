//! Chooses the fingerprint's shingle by measurement: for each shingle size, the recall of
//! one-small-edit copies at k = 3 (by kind of edit) and the precision on unrelated pairs, on
//! the corpus of this machine's texts (`crivello::internals::corpus`).
//!
//! `cargo run --release --no-default-features --example neardup_shingles`

use crivello::internals::corpus::{machine_corpus, Edit};
use crivello::neardup::{distance, Fingerprinter};

fn main() {
    let Some(c) = machine_corpus(20) else {
        eprintln!("fewer than 20 texts of at least 2000 bytes on this machine");
        std::process::exit(1);
    };
    println!(
        "{} texts, {} edited copies, {} unrelated pairs",
        c.texts.len(),
        c.edited.len(),
        c.unrelated.len()
    );
    println!("shingle | date | name | added | removed | all (k=3) | unrelated > 3 | mean d edit | mean d unrelated (min, 1st percentile)");
    let mut f = Fingerprinter::new();
    for w in [3, 4, 5, 6, 8] {
        let fps: Vec<u64> = c
            .texts
            .iter()
            .map(|(_, t)| f.fingerprint_with(t, w).unwrap())
            .collect();
        let mut hit = [0usize; 4];
        let mut all = [0usize; 4];
        let mut dsum = 0u64;
        for (i, kind, copy) in &c.edited {
            let d = distance(fps[*i], f.fingerprint_with(copy, w).unwrap());
            let k = Edit::ALL.iter().position(|e| e == kind).unwrap();
            all[k] += 1;
            hit[k] += usize::from(d <= 3);
            dsum += u64::from(d);
        }
        let far = c
            .unrelated
            .iter()
            .filter(|(a, b)| distance(fps[*a], fps[*b]) > 3)
            .count();
        let udsum: u64 = c
            .unrelated
            .iter()
            .map(|(a, b)| u64::from(distance(fps[*a], fps[*b])))
            .sum();
        let mut ud: Vec<u32> = c
            .unrelated
            .iter()
            .map(|(a, b)| distance(fps[*a], fps[*b]))
            .collect();
        ud.sort_unstable();
        let low = (ud[0], ud[ud.len() / 100]);
        let pct = |h: usize, a: usize| 100.0 * h as f64 / a.max(1) as f64;
        println!(
            "{w} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.2}% | {:.2} | {:.1} (min {}, 1st percentile {})",
            pct(hit[0], all[0]),
            pct(hit[1], all[1]),
            pct(hit[2], all[2]),
            pct(hit[3], all[3]),
            pct(hit.iter().sum(), all.iter().sum()),
            pct(far, c.unrelated.len()),
            dsum as f64 / c.edited.len().max(1) as f64,
            udsum as f64 / c.unrelated.len().max(1) as f64,
            low.0,
            low.1,
        );
    }
}
