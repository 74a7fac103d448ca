//! Fuzz target `decode_q_compressed`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("decode_q_compressed").expect("a known target"))(data)
});
