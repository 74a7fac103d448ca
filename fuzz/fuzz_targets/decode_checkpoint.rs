//! Fuzz target `decode_checkpoint`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("decode_checkpoint").expect("a known target"))(data)
});
