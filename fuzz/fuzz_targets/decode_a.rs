//! Fuzz target `decode_a`: see `crivello::testing::fuzz` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::testing::fuzz::target("decode_a").expect("a known target"))(data)
});
