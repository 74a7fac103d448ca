//! Helpers shared by the integration tests: the reference model and the shared data.

#![allow(
    dead_code,
    unused_imports,
    reason = "each test crate uses some of the helpers"
)]

use std::path::PathBuf;
use std::process::Command;

pub use crivello::internals::emit_model;

/// The shared data folder (next to the crate), if present.
pub fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data"))
}

/// Lines of an xz-compressed file of the shared data, or `None` (with a message naming the
/// missing file) when the file or the `xz` command is missing.
pub fn shared_lines(name: &str) -> Option<Vec<Vec<u8>>> {
    let path = data_dir().join(name);
    if !path.exists() {
        eprintln!("skipped: shared data file {name} is missing");
        return None;
    }
    let out = match Command::new("xz").arg("-dc").arg(&path).output() {
        Ok(o) if o.status.success() => o.stdout,
        _ => {
            eprintln!("skipped: cannot decompress {name} (is xz installed?)");
            return None;
        }
    };
    Some(split_lines(&out))
}

/// Splits on "\n" (a last line without newline counts).
pub fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(|l| l.to_vec()).collect();
    if v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// The fixture copy of the CC0 UKWA 1996 stream, always available.
pub fn ukwa_fixture() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let stream = split_lines(include_bytes!("../fixtures/ukwa-1996-hosts.bfs-stream.txt"));
    let expected = split_lines(include_bytes!(
        "../fixtures/ukwa-1996-hosts.bfs-expected.txt"
    ));
    (stream, expected)
}
