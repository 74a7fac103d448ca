//! Fuzz target `ops`: see `crivello::fuzzing` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::fuzzing::target("ops").expect("a known target"))(data)
});
