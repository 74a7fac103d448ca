//! Fuzz target `decode_a`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("decode_a").expect("a known target"))(data)
});
