//! Fuzz target `canary`: see `crivello::testing::fuzz` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::testing::fuzz::target("canary").expect("a known target"))(data)
});
