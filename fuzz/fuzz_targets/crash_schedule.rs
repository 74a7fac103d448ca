//! Fuzz target `crash_schedule`: see `crivello::testing::fuzz` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::testing::fuzz::target("crash_schedule").expect("a known target"))(data)
});
