//! Fuzz target `decode_f`: see `crivello::testing::fuzz` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::testing::fuzz::target("decode_f").expect("a known target"))(data)
});
