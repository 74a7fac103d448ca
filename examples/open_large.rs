//! Builds a store holding N distinct signatures, then times opening it.
//!
//! `cargo run --release --example open_large -- [DIR] [N] [MEMORY_MIB]` (defaults: a
//! temporary directory, 10^8, 64). Pushes N distinct short URLs while a consumer pops and
//! commits the frontier (so consumed F segments are deleted as it goes), closes the store,
//! then opens it five times and prints each open's time and the median. With a DIR the store
//! is kept there, and a second run with the same DIR only times the opens.

use std::path::PathBuf;
use std::time::Instant;

use crivello::{Options, Sieve};

fn main() -> crivello::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(PathBuf::from);
    let n: u64 = args
        .next()
        .map_or(100_000_000, |s| s.parse::<f64>().expect("a count") as u64);
    let mib: usize = args.next().map_or(64, |s| s.parse().expect("MiB"));
    let tmp;
    let dir = match dir {
        Some(d) => d,
        None => {
            tmp = tempfile::tempdir().expect("a temporary directory");
            tmp.path().to_owned()
        }
    };
    // Lazy merges: the consumer keeps the frontier short, which would merge every buffer.
    let opts = Options::new().memory(mib << 20).frontier_low(0);
    let mut sieve = Sieve::open(&dir, opts.clone())?;
    let have = sieve.stats()?.distinct + sieve.stats()?.buffered;
    if have < n {
        let start = Instant::now();
        let mut url = Vec::with_capacity(32);
        for i in have..n {
            url.clear();
            url.extend_from_slice(format!("http://h{}.example/{i:x}", i % 1000).as_bytes());
            sieve.push(&url)?;
            if i % (1 << 20) == 0 {
                drain(&mut sieve)?;
            }
        }
        sieve.flush()?;
        drain(&mut sieve)?;
        eprintln!(
            "pushed {} distinct URLs in {:.1} s",
            n - have,
            start.elapsed().as_secs_f64()
        );
    }
    let st = sieve.stats()?;
    sieve.close()?;
    eprintln!(
        "store: {} signatures in {} segments, Z {:.1} MiB",
        st.distinct,
        st.segments,
        st.bytes_z as f64 / (1 << 20) as f64
    );
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let s = Sieve::open(&dir, opts.clone())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        s.close()?;
    }
    let shown: Vec<String> = times.iter().map(|t| format!("{t:.2}")).collect();
    times.sort_by(f64::total_cmp);
    println!(
        "open of a store of {} signatures: {} ms (median {:.2} ms)",
        st.distinct,
        shown.join(", "),
        times[2]
    );
    Ok(())
}

/// Pops and commits everything the frontier holds.
fn drain(sieve: &mut Sieve) -> crivello::Result<()> {
    while !sieve.frontier_next(1 << 16)?.is_empty() {}
    sieve.frontier_commit()
}
