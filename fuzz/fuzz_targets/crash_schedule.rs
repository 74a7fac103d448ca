//! Fuzz target `crash_schedule`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("crash_schedule").expect("a known target"))(data)
});
