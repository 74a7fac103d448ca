//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) and the inputs of past
//! findings (`fuzz/regressions/<target>/`) through the same harnesses the fuzz targets
//! call, plus seeded random inputs, so that plain `cargo test` keeps every case the fuzzer
//! ever found interesting. The canary must fail on its planted input and on nothing else.

use std::panic;
use std::path::Path;

use crivello::internals::{random_input, target};
use crivello::storage::sim::Rng;

const TARGETS: [&str; 15] = [
    "decode_a",
    "decode_z",
    "decode_r",
    "decode_f",
    "decode_cursor",
    "decode_manifest",
    "decode_j",
    "decode_checkpoint",
    "decode_q",
    "decode_q_compressed",
    "ops",
    "frontier_ops",
    "crash_schedule",
    "fingerprint",
    "canary",
];

/// Random inputs per target on top of the corpus (`CRIVELLO_FUZZ_RANDOM` raises it).
fn random_inputs() -> usize {
    std::env::var("CRIVELLO_FUZZ_RANDOM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.expect("a readable corpus directory").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a readable corpus file");
            (p.display().to_string(), bytes)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_corpus_and_regression_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for name in TARGETS {
        let run = target(name).expect("a known target");
        let corpus = inputs(&root.join("corpus").join(name));
        let regressions = inputs(&root.join("regressions").join(name));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{name} is empty: the corpus was not committed"
        );
        let mut rng = Rng::new(7);
        let random =
            (0..random_inputs()).map(|i| (format!("random #{i}"), random_input(&mut rng, 256)));
        let mut count = 0;
        for (what, data) in corpus.iter().chain(&regressions).cloned().chain(random) {
            if name == "canary" && data.starts_with(b"W!") {
                continue;
            }
            if let Err(e) = panic::catch_unwind(|| run(&data)) {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{name}: {what} fails: {msg}");
            }
            count += 1;
        }
        eprintln!(
            "{name}: {} corpus, {} regression, {count} inputs in all",
            corpus.len(),
            regressions.len()
        );
    }
}

#[test]
fn the_canary_fails_on_its_planted_input() {
    let canary = target("canary").expect("a known target");
    assert!(panic::catch_unwind(|| canary(b"W!")).is_err());
    canary(b"W?");
}
