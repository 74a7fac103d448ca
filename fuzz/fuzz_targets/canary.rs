//! Fuzz target `canary`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("canary").expect("a known target"))(data)
});
