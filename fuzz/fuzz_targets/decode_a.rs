//! Fuzz target `decode_a`: see `crivello::fuzzing` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::fuzzing::target("decode_a").expect("a known target"))(data)
});
