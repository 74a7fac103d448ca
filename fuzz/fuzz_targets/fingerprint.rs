//! Fuzz target `fingerprint`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("fingerprint").expect("a known target"))(data)
});
