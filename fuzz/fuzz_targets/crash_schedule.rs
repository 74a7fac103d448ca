//! Fuzz target `crash_schedule`: see `crivello::fuzzing` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::fuzzing::target("crash_schedule").expect("a known target"))(data)
});
