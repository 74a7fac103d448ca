//! Fuzz target `frontier_ops`: see `crivello::internals` and `docs/testing.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (crivello::internals::target("frontier_ops").expect("a known target"))(data)
});
