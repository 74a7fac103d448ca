//! Fuzz target `ops`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("ops").expect("a known target"))(data)
});
