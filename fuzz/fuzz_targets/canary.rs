//! Fuzz target `canary`: see `crivello::fuzzing` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::fuzzing::target("canary").expect("a known target"))(data)
});
