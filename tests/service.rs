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

#[allow(clippy::all, missing_docs)]
mod pb {
    tonic::include_proto!("urlfrontier");
}

/// A server on a free port of loopback, stopped (SIGTERM) when dropped.
struct Served {
    child: std::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Served {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_crivello"))
            .arg("serve")
            .arg(dir.path().join("store"))
            .args(["--addr", "127.0.0.1:0", "--log-level", "warn"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("no address: {line:?}"))
            .to_owned();
        Served {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A fast client's long `PutURLs` stream of small items, whose acknowledgements it reads
/// only later, stops its own stream for a while (backpressure) and loses nothing: HTTP/2
/// does not close the connection for the many small frames the server holds unread
/// meanwhile (with HTTP/2's default windows it did: GOAWAY, "too_many_data_frames"), and
/// another call on the same connection is answered (with those windows, the stream held the
/// whole connection's window and the call waited for ever).
#[test]
fn a_fast_stream_of_small_items_read_late_keeps_its_connection() {
    use pb::url_frontier_client::UrlFrontierClient;
    let served = Served::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", served.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = UrlFrontierClient::new(channel.clone());
        let n = 1_000_000;
        let items = tokio_stream::iter((0..n).map(|i| pb::UrlItem {
            item: Some(pb::url_item::Item::Discovered(pb::DiscoveredUrlItem {
                info: Some(pb::UrlInfo {
                    url: format!("http://h{}.test/{i}", i % 1000),
                    ..Default::default()
                }),
            })),
            ..Default::default()
        }));
        let mut acks = client.put_ur_ls(items).await.unwrap().into_inner();
        // Busy elsewhere: the acknowledgements wait, and so does the stream.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let stats = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            UrlFrontierClient::new(channel).get_stats(pb::QueueWithinCrawlParams::default()),
        )
        .await
        .expect("another call on the connection was not answered in 20 s");
        assert!(stats.is_ok(), "another call on the connection: {stats:?}");
        let mut ok = 0;
        while let Some(ack) = acks.message().await.unwrap_or_else(|e| {
            panic!("the stream failed after {ok} acknowledgements: {e}");
        }) {
            assert_eq!(ack.status, pb::ack_message::Status::Ok as i32);
            ok += 1;
        }
        assert_eq!(ok, n);
    });
}
