//! The black-box suite of `crivello serve` (`tests/service/`, in Python with grpcio): url-
//! frontier's own test cases, politeness, streams, bad input and `kill -9`, against the
//! binary cargo built. It needs a Python with grpcio, grpcio-tools and pytest:
//! `CRIVELLO_PYTHON` names it (default `python3`). Without them the test says so and passes,
//! unless `CRIVELLO_REQUIRE_TOOLS` is set (`.ci/run` installs them and sets it).

#![cfg(feature = "serve")]

use std::path::Path;
use std::process::Command;

#[test]
fn the_service_passes_its_black_box_suite() {
    let python = std::env::var("CRIVELLO_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ready = Command::new(&python)
        .args(["-c", "import grpc, grpc_tools, pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        let what = format!(
            "{python} with grpcio, grpcio-tools and pytest is needed for the service's suite \
             (pip install grpcio grpcio-tools pytest; CRIVELLO_PYTHON names the interpreter)"
        );
        assert!(
            std::env::var_os("CRIVELLO_REQUIRE_TOOLS").is_none(),
            "{what}"
        );
        eprintln!("skipped: {what}");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("service");
    // CRIVELLO_SERVICE_TESTS: the test modules to run (default: all), e.g. test_cluster.py.
    let only = std::env::var("CRIVELLO_SERVICE_TESTS").ok();
    let target = match &only {
        Some(files) => files.split(',').map(|f| dir.join(f)).collect(),
        None => vec![dir.clone()],
    };
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(&target)
        .current_dir(&dir)
        .env("CRIVELLO_BIN", env!("CARGO_BIN_EXE_crivello"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "the service's suite failed:\n{text}");
}

/// A server whose stdout is closed before it prints its address (a caller that went) keeps
/// serving, and still stops cleanly on SIGTERM with code 0.
#[test]
fn a_closed_stdout_does_not_stop_the_server() {
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    // A port free a moment ago.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_crivello"))
        .arg("serve")
        .arg(dir.path().join("store"))
        .args(["--addr", &format!("127.0.0.1:{port}"), "--quiet"])
        .stdout(writer)
        .spawn()
        .unwrap();
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server ended with {status} before it listened");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past the print: the server still answers a connection, then stops on SIGTERM.
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "the server ended");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the server did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
