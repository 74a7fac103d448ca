//! Fuzz target `decode_cursor`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("decode_cursor").expect("a known target"))(data)
});
