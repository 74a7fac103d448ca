//! Fuzz target `decode_manifest`: see `crivello::fuzzing` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::fuzzing::target("decode_manifest").expect("a known target"))(data)
});
