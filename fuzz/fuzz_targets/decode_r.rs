//! Fuzz target `decode_r`: see `crivello::testing::fuzz` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::testing::fuzz::target("decode_r").expect("a known target"))(data)
});
