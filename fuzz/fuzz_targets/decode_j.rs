//! Fuzz target `decode_j`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("decode_j").expect("a known target"))(data)
});
