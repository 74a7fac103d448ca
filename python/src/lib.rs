//! `crivello._crivello`: the Python classes over the library's [`crivello::Sieve`] and
//! [`crivello::Frontier`].
//!
//! Thin on purpose: each method converts its arguments while it holds the interpreter's lock,
//! then releases it for the library's call (I/O, sorting, waiting for another thread's call),
//! then converts the answer. A handle is shared between threads: the library's own lock
//! orders the calls, and it is never waited for while the interpreter's lock is held.
//!
//! URLs and keys are bytes to the library. From Python they are `str` (encoded as UTF-8) or
//! `bytes`, and they come back as `str`: bytes that are not UTF-8 come back with the
//! `surrogateescape` error handler, which gives the same bytes when encoded the same way, so
//! that nothing is lost either way. Instants and durations are seconds (`float`); the
//! library's are milliseconds.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyByteArray, PyBytes, PyDict, PyFrozenSet, PyList, PySet, PyString, PyTuple, PyType,
};

use crivello::{Completion, Discovered, LeaseRequest, Options, Policy as LibPolicy, UrlStatus};

// ---------------------------------------------------------------------------------------
// Errors: the library's, as the Python classes of `crivello.errors`.

/// The Python classes of the errors, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module = ERRORS.get_or_try_init(py, || py.import("crivello.errors").map(Bound::unbind))?;
    module
        .bind(py)
        .getattr(name)?
        .cast_into::<PyType>()
        .map_err(PyErr::from)
}

/// The Python exception of a library error: its class says what went wrong, its message is
/// the library's, and a corruption carries the file and the offset.
fn to_py(py: Python<'_>, err: crivello::Error) -> PyErr {
    let class = match &err {
        crivello::Error::Corrupt { .. } => "CorruptError",
        crivello::Error::Locked { .. } => "LockedError",
        crivello::Error::InvalidUrl(_) => "InvalidUrlError",
        crivello::Error::InvalidOption { .. } => "InvalidOptionError",
        crivello::Error::Poisoned => "PoisonedError",
        crivello::Error::NotASieve { .. } => "NotAStoreError",
        crivello::Error::WrongMode { .. } => "WrongModeError",
        crivello::Error::Io { .. } => "StorageError",
        _ => "Error",
    };
    let message = match &err {
        // The library's message speaks of processes; a handle of this process holds a lock
        // as well.
        crivello::Error::Locked { dir } => format!(
            "{dir} is locked: another handle is using it, in this process or another; close \
             it first"
        ),
        _ => err.to_string(),
    };
    let made = (|| -> PyResult<PyErr> {
        let value = error_class(py, class)?.call1((message,))?;
        match &err {
            crivello::Error::Corrupt { file, offset, .. } => {
                value.setattr("file", file)?;
                value.setattr("offset", offset)?;
            }
            crivello::Error::Locked { dir }
            | crivello::Error::NotASieve { dir, .. }
            | crivello::Error::WrongMode { dir, .. } => value.setattr("path", dir)?,
            crivello::Error::InvalidOption { option, .. } => value.setattr("option", option)?,
            crivello::Error::Io { file, source, .. } => {
                value.setattr("filename", file)?;
                value.setattr("errno", source.raw_os_error())?;
                if let Some(code) = source.raw_os_error() {
                    // The system's text, as Python's own OSError gives it (Rust's adds
                    // " (os error N)").
                    let text = py.import("os")?.call_method1("strerror", (code,))?;
                    value.setattr("strerror", text)?;
                }
            }
            _ => {}
        }
        Ok(PyErr::from_value(value))
    })();
    made.unwrap_or_else(|e| e)
}

/// Runs `f` with the interpreter's lock released, and raises its error.
fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> crivello::Result<T> + Send,
) -> PyResult<T> {
    py.detach(f).map_err(|e| to_py(py, e))
}

fn closed(py: Python<'_>, what: &str) -> PyErr {
    match error_class(py, "ClosedError") {
        Ok(class) => PyErr::from_type(class, format!("the {what} is closed")),
        Err(e) => e,
    }
}

/// Refuses a handle in a process forked from the one that opened it (`fork`, or a
/// `multiprocessing` pool started with it). The child has a copy of the handle's memory but
/// none of its threads, and shares its files and its lock with the parent: used there, the
/// handle would write the parent's store behind its back (a URL leased in both), or wait for
/// threads that do not exist.
fn not_forked(py: Python<'_>, what: &str, opened_by: u32) -> PyResult<()> {
    let here = std::process::id();
    if here == opened_by {
        return Ok(());
    }
    Err(match error_class(py, "ClosedError") {
        Ok(class) => PyErr::from_type(
            class,
            format!(
                "the {what} was opened by process {opened_by}, and this process ({here}) is a \
                 fork of it: a handle cannot be used across fork() (and this process holds \
                 the store's lock until it exits); give each worker process a store of its \
                 own, opened there (a multiprocessing pool: the \"spawn\" start method), or \
                 share one handle between threads"
            ),
        ),
        Err(e) => e,
    })
}

// ---------------------------------------------------------------------------------------
// Conversions.

/// The bytes of a URL or a key: `bytes` as they are, `str` encoded as UTF-8 (lone surrogates
/// with `surrogateescape`, as the library's answers decode them).
fn text_bytes<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.clone());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return match s.encode_utf8() {
            Ok(b) => Ok(b),
            Err(_) => Ok(obj
                .call_method1("encode", ("utf-8", "surrogateescape"))?
                .cast_into::<PyBytes>()?),
        };
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be str or bytes, not {}",
        obj.get_type().name()?
    )))
}

/// `bytes` as a `str`: UTF-8, or with `surrogateescape` when not.
fn to_text<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(PyString::new(py, s).into_any()),
        Err(_) => PyBytes::new(py, bytes).call_method1("decode", ("utf-8", "surrogateescape")),
    }
}

/// Seconds as milliseconds; a negative or non-finite number is refused.
fn millis(seconds: f64, what: &str) -> PyResult<u64> {
    // 2^53 ms, about 285,000 years: above it a number is a mistake (a date in
    // milliseconds given as seconds, say), and would not come back as it was given.
    const MOST: f64 = 9_007_199_254_740_992.0;
    if !seconds.is_finite() || seconds < 0.0 || seconds * 1000.0 > MOST {
        return Err(PyValueError::new_err(format!(
            "{what} must be a finite number of seconds from 0 to {}, not {seconds}",
            MOST / 1000.0
        )));
    }
    // A positive duration under half a millisecond is one, not none (a delay turned off).
    let ms = (seconds * 1000.0).round() as u64;
    Ok(if ms == 0 && seconds > 0.0 { 1 } else { ms })
}

/// A Python `int` of any size, as an `i128`: one past that range is taken as the range's
/// nearest end, which every range of the functions below refuses, naming the argument
/// (Python's own conversion raises an `OverflowError` that names none). Anything but an
/// `int` is a `TypeError`.
#[derive(Clone, Copy, Debug)]
struct Int(i128);

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Int> {
        match obj.extract::<i128>() {
            Ok(n) => Ok(Int(n)),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                Ok(Int(if obj.lt(0)? { i128::MIN } else { i128::MAX }))
            }
            Err(e) => Err(e),
        }
    }
}

impl std::fmt::Display for Int {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            i128::MAX => f.write_str("an int of 2**127 - 1 or more"),
            i128::MIN => f.write_str("an int of -2**127 or less"),
            n => write!(f, "{n}"),
        }
    }
}

/// An `int` argument from 0 to `max`, or a `ValueError` naming it (Python's own conversion
/// raises an `OverflowError` that does not say which argument).
fn count(n: Int, what: &str, max: u64) -> PyResult<u64> {
    let Int(v) = n;
    u64::try_from(v)
        .ok()
        .filter(|&v| v <= max)
        .ok_or_else(|| PyValueError::new_err(format!("{what} must be from 0 to {max}, not {n}")))
}

/// An `int` argument from `min` to `max`, or a `ValueError` naming it and its range.
fn count_from(n: Int, what: &str, min: u64, max: u64) -> PyResult<u64> {
    u64::try_from(n.0)
        .ok()
        .filter(|&v| (min..=max).contains(&v))
        .ok_or_else(|| {
            PyValueError::new_err(format!("{what} must be from {min} to {max}, not {n}"))
        })
}

/// [`count`] as a `usize`.
fn count_usize(n: Int, what: &str) -> PyResult<usize> {
    Ok(count(n, what, usize::MAX as u64)? as usize)
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A size in bytes: an `int`, or a `str` with a unit K, M or G (powers of 1024), like "64M".
fn size(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    if let Ok(n) = obj.extract::<usize>() {
        return Ok(n);
    }
    if let Ok(n) = obj.extract::<Int>() {
        return Err(PyValueError::new_err(format!(
            "{what} must be a number of bytes from 0 to {}, not {n}",
            usize::MAX
        )));
    }
    let text: String = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!("{what} must be an int or a str like \"64M\""))
    })?;
    let n = crivello::parse_size(&text)
        .map_err(|e| PyValueError::new_err(format!("{what} {text:?}: {e}")))?;
    usize::try_from(n).map_err(|_| PyValueError::new_err(format!("{what} {text:?}: too large")))
}

fn options(
    memory: Option<&Bound<'_, PyAny>>,
    max_url_len: Option<Int>,
    seed: Option<Int>,
) -> PyResult<Options> {
    let mut opts = Options::new();
    if let Some(m) = memory {
        opts = opts.memory(size(m, "memory")?);
    }
    if let Some(n) = max_url_len {
        opts = opts.max_url_len(count_usize(n, "max_url_len")?);
    }
    if let Some(s) = seed {
        opts = opts.seed(count(s, "seed", u64::MAX)?);
    }
    Ok(opts)
}

// ---------------------------------------------------------------------------------------
// Sieve.

/// A durable sieve: each distinct URL pushed comes out once, in first-appearance order, in
/// bounded memory, across crashes.
///
/// `Sieve(path, *, memory="64M", max_url_len=65536, seed=None)` opens (or creates) the store
/// in the directory `path`, which one handle at a time may use (else `LockedError`). A push
/// is durable once a later `sync`, `flush` or `close` returns. A context manager: `with`
/// closes it. Safe to share between threads.
#[pyclass(frozen, module = "crivello")]
struct Sieve {
    inner: Mutex<Option<crivello::Sieve>>,
    /// The process that opened it (see [`not_forked`]).
    pid: u32,
}

impl Drop for Sieve {
    /// A handle dropped without `close` (collected, or left at exit) is closed, as a Python
    /// file is: what was pushed becomes durable. In a forked process the handle is the
    /// parent's: it is let go without touching the store (its threads are not here).
    fn drop(&mut self) {
        let taken = match self.inner.get_mut() {
            Ok(s) => s.take(),
            Err(poisoned) => {
                // A panic left its state unknown: dropped without a close (see `close`).
                drop(poisoned.into_inner().take());
                None
            }
        };
        if std::process::id() != self.pid {
            std::mem::forget(taken);
        } else if let Some(s) = taken {
            let _ = s.close();
        }
    }
}

impl Sieve {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut crivello::Sieve) -> crivello::Result<T> + Send,
    ) -> PyResult<T> {
        not_forked(py, "sieve", self.pid)?;
        // A thread that panicked while holding the lock left the sieve's state unknown: it is
        // poisoned, as the library's frontier is.
        let r = py.detach(|| match self.inner.lock() {
            Ok(mut guard) => Ok(guard.as_mut().map(f)),
            Err(_) => Err(crivello::Error::Poisoned),
        });
        match r {
            Ok(Some(r)) => r.map_err(|e| to_py(py, e)),
            Ok(None) => Err(closed(py, "sieve")),
            Err(e) => Err(to_py(py, e)),
        }
    }
}

#[pymethods]
impl Sieve {
    #[new]
    #[pyo3(signature = (path, *, memory=None, max_url_len=None, seed=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        memory: Option<&Bound<'_, PyAny>>,
        max_url_len: Option<Int>,
        seed: Option<Int>,
    ) -> PyResult<Sieve> {
        let opts = options(memory, max_url_len, seed)?;
        let sieve = detached(py, || {
            let sieve = crivello::Sieve::open(&path, opts)?;
            // A plain sieve's pushes into a frontier's store would join its first crawl's
            // queues as URLs: refused here, before anything is pushed.
            if sieve.mode() == crivello::Mode::Frontier {
                return Err(crivello::Error::WrongMode {
                    dir: path.display().to_string(),
                    mode: crivello::Mode::Frontier,
                });
            }
            Ok(sieve)
        })?;
        Ok(Sieve {
            inner: Mutex::new(Some(sieve)),
            pid: std::process::id(),
        })
    }

    /// Pushes one URL (`str` or `bytes`).
    fn push(&self, py: Python<'_>, url: &Bound<'_, PyAny>) -> PyResult<()> {
        let url = text_bytes(url, "a URL")?;
        let url = url.as_bytes();
        self.with(py, |s| s.push(url))
    }

    /// Pushes URLs (an iterable of `str` or `bytes`); if one is invalid, none is pushed.
    fn push_many(&self, py: Python<'_>, urls: &Bound<'_, PyAny>) -> PyResult<()> {
        let objs = collect_texts(urls)?;
        let urls: Vec<&[u8]> = objs.iter().map(|b| b.as_bytes()).collect();
        self.with(py, |s| s.push_batch(&urls))
    }

    /// Pushes `url` unless it was pushed before; returns whether it was new (exact).
    fn push_new(&self, py: Python<'_>, url: &Bound<'_, PyAny>) -> PyResult<bool> {
        let url = text_bytes(url, "a URL")?;
        let url = url.as_bytes();
        self.with(py, |s| s.push_new(url))
    }

    /// Whether `url` was ever pushed (and acknowledged, or pushed by this handle).
    fn __contains__(&self, py: Python<'_>, url: &Bound<'_, PyAny>) -> PyResult<bool> {
        let url = text_bytes(url, "a URL")?;
        let url = url.as_bytes();
        self.with(py, |s| s.contains(url))
    }

    /// Makes every push so far durable (a group commit).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, crivello::Sieve::sync)
    }

    /// Merges every push so far: the new URLs join the output. Durable when it returns.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, crivello::Sieve::flush)
    }

    /// The next URLs of the output after those peeked before, at most `max`, without
    /// consuming them: a `commit` does, and until then a reopen gives them again. The output
    /// holds the URLs merged so far: those pushed since the last merge come after a `flush`
    /// (or the merge a full buffer starts on its own).
    #[pyo3(signature = (max=Int(1000)), text_signature = "($self, max=1000)")]
    fn peek<'py>(&self, py: Python<'py>, max: Int) -> PyResult<Bound<'py, PyList>> {
        let max = count_usize(max, "max")?;
        let urls = self.with(py, |s| s.frontier_next(max))?;
        texts_list(py, &urls)
    }

    /// Consumes, durably, every URL `peek` gave. The first commit (even of nothing) fixes
    /// the store as a plain sieve: a `Frontier` then refuses it.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, crivello::Sieve::frontier_commit)
    }

    /// `peek` then `commit`: the next URLs of the output, at most `max`, consumed (the URLs
    /// merged so far: `flush` first to have every URL pushed).
    #[pyo3(signature = (max=Int(1000)), text_signature = "($self, max=1000)")]
    fn pop<'py>(&self, py: Python<'py>, max: Int) -> PyResult<Bound<'py, PyList>> {
        let max = count_usize(max, "max")?;
        let urls = self.with(py, |s| {
            let urls = s.frontier_next(max)?;
            s.frontier_commit()?;
            Ok(urls)
        })?;
        texts_list(py, &urls)
    }

    /// Counts, as a dict: pushed, distinct, emitted, consumed, pending, and more.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.with(py, crivello::Sieve::stats)?;
        let d = PyDict::new(py);
        d.set_item("pushed", st.pushed)?;
        d.set_item("buffered", st.buffered)?;
        d.set_item("distinct", st.distinct)?;
        d.set_item("emitted", st.emitted)?;
        d.set_item("consumed", st.consumed)?;
        d.set_item("pending", st.pending)?;
        d.set_item("flushes", st.flushes)?;
        d.set_item("merges", st.merges)?;
        d.set_item("bytes_a", st.bytes_a)?;
        d.set_item("bytes_z", st.bytes_z)?;
        d.set_item("bytes_r", st.bytes_r)?;
        d.set_item("bytes_f", st.bytes_f)?;
        Ok(d)
    }

    /// Syncs and closes; later calls raise `ClosedError`. Closing twice does nothing. In a
    /// process forked from the one that opened it, lets the handle go without touching the
    /// store.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Ok(());
        }
        let taken = py.detach(|| match self.inner.lock() {
            Ok(mut guard) => Ok(guard.take()),
            // A panic left its state unknown: dropped without a close, which would write it;
            // the next open recovers from what is durable.
            Err(poisoned) => {
                drop(poisoned.into_inner().take());
                Err(crivello::Error::Poisoned)
            }
        });
        match taken {
            Ok(Some(s)) => detached(py, || s.close()),
            Ok(None) => Ok(()),
            Err(e) => Err(to_py(py, e)),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().with(slf.py(), |_| Ok(()))?;
        Ok(slf)
    }

    /// Closes. When the block raised: a store poisoned (by that error, as a rule) is let go
    /// without a second error over the block's, which goes on; another failure of the
    /// close (its sync, which makes the block's pushes durable) is raised, the block's
    /// exception as its context.
    #[pyo3(signature = (*exc))]
    fn __exit__(&self, py: Python<'_>, exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        exit_closing(py, exc, self.close(py))
    }
}

/// What `__exit__` does with the result of its close (see `Sieve.__exit__`).
fn exit_closing(py: Python<'_>, exc: &Bound<'_, PyTuple>, closed: PyResult<()>) -> PyResult<bool> {
    let Err(e) = closed else {
        return Ok(false);
    };
    let Ok(raised) = exc.get_item(1) else {
        return Err(e);
    };
    if raised.is_none() {
        return Err(e);
    }
    if e.is_instance(py, error_class(py, "PoisonedError")?.as_any()) {
        return Ok(false);
    }
    e.value(py).setattr("__context__", raised)?;
    Err(e)
}

/// The items of an iterable of URLs, as bytes objects kept alive while the library reads
/// them.
fn collect_texts<'py>(urls: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    if urls.is_instance_of::<PyString>() || urls.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "push_many takes an iterable of URLs: push one URL with push, or wrap it in a list",
        ));
    }
    let mut objs = Vec::with_capacity(urls.len().unwrap_or(0));
    for u in urls.try_iter()? {
        objs.push(text_bytes(&u?, "a URL")?);
    }
    Ok(objs)
}

fn texts_list<'py>(py: Python<'py>, items: &[Vec<u8>]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for u in items {
        list.append(to_text(py, u)?)?;
    }
    Ok(list)
}

// ---------------------------------------------------------------------------------------
// Frontier.

/// A URL handed out by `Frontier.lease`: fetch it, then end its lease with `done`,
/// `refetch` or `retry` before its `deadline` (seconds since the epoch), after which it goes
/// back to its queue.
#[pyclass(frozen, module = "crivello")]
struct Leased {
    /// Identifies the lease.
    #[pyo3(get)]
    token: u64,
    crawl: Vec<u8>,
    key: Vec<u8>,
    url: Vec<u8>,
    metadata: Vec<u8>,
    deadline_ms: u64,
}

#[pymethods]
impl Leased {
    /// The URL.
    #[getter]
    fn url<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_text(py, &self.url)
    }

    /// Its queue's key.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_text(py, &self.key)
    }

    /// Its crawl.
    #[getter]
    fn crawl<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_text(py, &self.crawl)
    }

    /// The bytes pushed with it.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.metadata)
    }

    /// The end of the lease, in seconds since the epoch.
    #[getter]
    fn deadline(&self) -> f64 {
        seconds(self.deadline_ms)
    }

    fn __repr__(&self) -> String {
        format!(
            "Leased(token={}, url={:?}, key={:?})",
            self.token,
            String::from_utf8_lossy(&self.url),
            String::from_utf8_lossy(&self.key)
        )
    }
}

/// The politeness of a queue, or the default of the store's queues.
///
/// `delay`: seconds from the end of one fetch to the next hand-out; `ratio`: after fetches
/// that took s seconds in all, wait s/ratio (0: off; the longer of the two waits applies);
/// `per_queue`: the most URLs of the queue leased at once; `limit`: the most URLs of the
/// queue done (0: no limit).
#[pyclass(frozen, eq, module = "crivello")]
#[derive(Clone, PartialEq)]
struct Policy {
    #[pyo3(get)]
    delay: f64,
    #[pyo3(get)]
    ratio: f64,
    #[pyo3(get)]
    per_queue: u32,
    #[pyo3(get)]
    limit: u64,
}

#[pymethods]
impl Policy {
    #[new]
    #[pyo3(signature = (*, delay=0.0, ratio=0.0, per_queue=Int(1), limit=Int(0)), text_signature = "(*, delay=0.0, ratio=0.0, per_queue=1, limit=0)")]
    fn new(delay: f64, ratio: f64, per_queue: Int, limit: Int) -> PyResult<Policy> {
        let per_queue = count_from(per_queue, "per_queue", 1, u64::from(u32::MAX))? as u32;
        let limit = count(limit, "limit", u64::MAX)?;
        // Kept as the store keeps them, in whole milliseconds and millionths: the policy
        // read back equals the one set.
        let delay_ms = millis(delay, "delay")?;
        if !ratio.is_finite() || !(0.0..=1.0).contains(&ratio) {
            return Err(PyValueError::new_err(format!(
                "ratio must be between 0 and 1, not {ratio}"
            )));
        }
        let ratio_ppm = (ratio * 1e6).round() as u32;
        if ratio > 0.0 && ratio_ppm == 0 {
            // Rounded to 0, it would turn the rule off, the opposite of a long wait.
            return Err(PyValueError::new_err(format!(
                "ratio must be 0 (off) or at least one millionth (0.000001), not {ratio}"
            )));
        }
        if per_queue == 0 {
            return Err(PyValueError::new_err("per_queue must be at least 1"));
        }
        Ok(Policy::from_lib(LibPolicy {
            delay_ms,
            ratio_ppm,
            per_queue,
            limit,
        }))
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            self.delay.to_bits(),
            self.ratio.to_bits(),
            self.per_queue,
            self.limit,
        )
            .hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        format!(
            "Policy(delay={}, ratio={}, per_queue={}, limit={})",
            self.delay, self.ratio, self.per_queue, self.limit
        )
    }

    /// The arguments that make it again: `copy` and `pickle` use them.
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("delay", self.delay)?;
        kwargs.set_item("ratio", self.ratio)?;
        kwargs.set_item("per_queue", self.per_queue)?;
        kwargs.set_item("limit", self.limit)?;
        Ok((PyTuple::empty(py), kwargs))
    }
}

impl Policy {
    fn to_lib(&self) -> PyResult<LibPolicy> {
        Ok(LibPolicy {
            delay_ms: millis(self.delay, "delay")?,
            ratio_ppm: (self.ratio * 1e6).round() as u32,
            per_queue: self.per_queue,
            limit: self.limit,
        })
    }

    fn from_lib(p: LibPolicy) -> Policy {
        Policy {
            delay: seconds(p.delay_ms),
            ratio: f64::from(p.ratio_ppm) / 1e6,
            per_queue: p.per_queue,
            limit: p.limit,
        }
    }
}

/// An item of `Frontier.push`: the bytes of its URL, key and metadata, kept alive while the
/// library reads them.
struct Item<'py> {
    url: Bound<'py, PyBytes>,
    key: Option<Bound<'py, PyBytes>>,
    metadata: Option<Bound<'py, PyBytes>>,
}

fn item<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Item<'py>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Ok(Item {
            url: text_bytes(obj, "a URL")?,
            key: None,
            metadata: None,
        });
    }
    let Ok(t) = obj.cast::<PyTuple>() else {
        return Err(PyTypeError::new_err(format!(
            "an item is a URL (str or bytes) or a tuple (url, key) or (url, key, metadata), not {}",
            obj.get_type().name()?
        )));
    };
    if !(1..=3).contains(&t.len()) {
        return Err(PyTypeError::new_err(format!(
            "an item's tuple is (url, key) or (url, key, metadata), not {} values",
            t.len()
        )));
    }
    let url = text_bytes(&t.get_item(0)?, "a URL")?;
    let key = match t.get_item(1) {
        Ok(k) if !k.is_none() => Some(text_bytes(&k, "a key")?),
        _ => None,
    };
    let metadata = match t.get_item(2) {
        Ok(m) if !m.is_none() => Some(
            m.cast_into::<PyBytes>()
                .map_err(|_| PyTypeError::new_err("metadata must be bytes"))?,
        ),
        _ => None,
    };
    Ok(Item { url, key, metadata })
}

fn collect_items<'py>(items: &Bound<'py, PyAny>) -> PyResult<Vec<Item<'py>>> {
    if items.is_instance_of::<PyString>() || items.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "push and push_new take an iterable of items: wrap a single URL in a list",
        ));
    }
    let mut out = Vec::with_capacity(items.len().unwrap_or(0));
    for it in items.try_iter()? {
        out.push(item(&it?)?);
    }
    Ok(out)
}

fn discovered<'a>(items: &'a [Item<'_>]) -> Vec<Discovered<'a>> {
    items
        .iter()
        .map(|it| Discovered {
            url: it.url.as_bytes(),
            key: it.key.as_ref().map(|k| k.as_bytes()),
            metadata: it.metadata.as_ref().map_or(&[][..], |m| m.as_bytes()),
        })
        .collect()
}

/// A lease to end: its token, and for a `Leased` its crawl and URL, which the lease of that
/// token must have (see [`ends`]).
struct LeaseRef {
    token: u64,
    of: Option<(String, Vec<u8>)>,
}

fn lease_ref(obj: &Bound<'_, PyAny>) -> PyResult<LeaseRef> {
    if let Ok(l) = obj.cast::<Leased>() {
        let l = l.get();
        return Ok(LeaseRef {
            token: l.token,
            of: Some((
                String::from_utf8_lossy(&l.crawl).into_owned(),
                l.url.clone(),
            )),
        });
    }
    Ok(LeaseRef {
        token: token(obj)?,
        of: None,
    })
}

/// Whether the lease `r` names is a lease of `f`: tokens count from 1 in every store, so
/// a `Leased` of another frontier (or of an earlier store in the same directory) could
/// name a lease of this one; its URL must be the one this token leased.
fn ends(f: &crivello::Frontier, r: &LeaseRef) -> crivello::Result<bool> {
    match &r.of {
        Some((crawl, url)) => Ok(f.lease_of(crawl, url)? == Some(r.token)),
        None => Ok(true),
    }
}

/// A lease's token: a `Leased` or an `int`.
fn token(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(l) = obj.cast::<Leased>() {
        return Ok(l.get().token);
    }
    if let Ok(n) = obj.extract::<Int>() {
        return u64::try_from(n.0).map_err(|_| {
            PyValueError::new_err(format!(
                "a lease's token is from 0 to {}, not {n}",
                u64::MAX
            ))
        });
    }
    obj.extract::<u64>()
        .map_err(|_| PyTypeError::new_err("a lease is a Leased or its token (an int)"))
}

fn optional_key<'py>(key: Option<&Bound<'py, PyAny>>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    key.filter(|k| !k.is_none())
        .map(|k| text_bytes(k, "a key"))
        .transpose()
}

/// A durable frontier: per-host queues over the sieve, with politeness and leases that
/// survive crashes.
///
/// `Frontier(path, *, memory="64M", max_url_len=65536, seed=None, compress_queues=None)`
/// opens (or creates) the store in the directory `path`, which one handle at a time may use
/// (else `LockedError`); `seed` counts only when the store is created, `compress_queues`
/// (None: as the store was) is kept by the store.
/// Every call that changes something is durable when it returns, but `push_new` with
/// `sync=False`. URLs go through the sieve of their crawl (`""` is `"DEFAULT"`); each queue
/// is served in first-appearance order. A context manager: `with` closes it. Safe to share
/// between threads.
#[pyclass(frozen, module = "crivello")]
struct Frontier {
    inner: RwLock<Option<crivello::Frontier>>,
    /// The process that opened it (see [`not_forked`]).
    pid: u32,
}

impl Drop for Frontier {
    /// As [`Sieve`]'s: closed when dropped without `close`; let go in a forked process.
    fn drop(&mut self) {
        let taken = self
            .inner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if std::process::id() != self.pid {
            std::mem::forget(taken);
        } else if let Some(f) = taken {
            let _ = f.close();
        }
    }
}

impl Frontier {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&crivello::Frontier) -> crivello::Result<T> + Send,
    ) -> PyResult<T> {
        not_forked(py, "frontier", self.pid)?;
        let r = py.detach(|| {
            let guard = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            guard.as_ref().map(f)
        });
        match r {
            Some(r) => r.map_err(|e| to_py(py, e)),
            None => Err(closed(py, "frontier")),
        }
    }

    /// Ends one lease as `how` says, after a fetch of `took` seconds that ended at `ended`
    /// (None: now). False when it was not leased.
    fn end_one(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyAny>,
        took: f64,
        ended: Option<f64>,
        how: Completion,
    ) -> PyResult<bool> {
        let (r, took) = (lease_ref(lease)?, millis(took, "took")?);
        let ended = ended.map(|e| millis(e, "ended")).transpose()?;
        self.with(py, |f| {
            Ok(ends(f, &r)?
                && f.complete_ended(&[(r.token, took, how, ended.unwrap_or(u64::MAX))])?[0])
        })
    }
}

/// The instants `ended` of `complete` in milliseconds (u64::MAX: now), one per lease: None
/// (now for all), one number of seconds since the epoch (for all), or an iterable of as many
/// numbers or Nones as there are leases, in their order (a str, bytes, set or dict is
/// neither).
fn instants_of(ended: Option<&Bound<'_, PyAny>>, leases: usize) -> PyResult<Vec<u64>> {
    let Some(e) = ended.filter(|e| !e.is_none()) else {
        return Ok(vec![u64::MAX; leases]);
    };
    let what = "ended is a number of seconds since the epoch, or one per lease in order";
    // Text, and collections without an order, are neither.
    let unordered = e.is_instance_of::<PySet>()
        || e.is_instance_of::<PyFrozenSet>()
        || e.is_instance_of::<PyDict>();
    if e.is_instance_of::<PyString>()
        || e.is_instance_of::<PyBytes>()
        || e.is_instance_of::<PyByteArray>()
        || unordered
    {
        return Err(PyTypeError::new_err(what));
    }
    let Ok(each) = e.try_iter() else {
        let one = e.extract::<f64>().map_err(|_| PyTypeError::new_err(what))?;
        return Ok(vec![millis(one, "ended")?; leases]);
    };
    let mut out = Vec::with_capacity(leases);
    for x in each {
        let x = x?;
        out.push(if x.is_none() {
            u64::MAX
        } else {
            let v = x.extract::<f64>().map_err(|_| PyTypeError::new_err(what))?;
            millis(v, "ended")?
        });
    }
    if out.len() != leases {
        return Err(PyValueError::new_err(format!(
            "ended holds {} instants for {leases} leases",
            out.len()
        )));
    }
    Ok(out)
}

fn leased_list<'py>(
    py: Python<'py>,
    leased: Vec<crivello::Leased>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for l in leased {
        list.append(Bound::new(
            py,
            Leased {
                token: l.token,
                crawl: l.crawl,
                key: l.key,
                url: l.url,
                metadata: l.metadata,
                deadline_ms: l.deadline_ms,
            },
        )?)?;
    }
    Ok(list)
}

fn status_tuple<'py>(py: Python<'py>, st: UrlStatus) -> PyResult<Bound<'py, PyTuple>> {
    let (name, at): (&str, Option<f64>) = match st {
        UrlStatus::Unknown => ("unknown", None),
        UrlStatus::Waiting => ("waiting", None),
        UrlStatus::Leased { until_ms } => ("leased", Some(seconds(until_ms))),
        UrlStatus::Done => ("done", None),
        UrlStatus::Refetch { at_ms } => ("refetch", Some(seconds(at_ms))),
    };
    PyTuple::new(
        py,
        [
            name.into_pyobject(py)?.into_any(),
            at.into_pyobject(py)?.into_any(),
        ],
    )
}

#[pymethods]
impl Frontier {
    #[new]
    #[pyo3(signature = (path, *, memory=None, max_url_len=None, seed=None, compress_queues=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        memory: Option<&Bound<'_, PyAny>>,
        max_url_len: Option<Int>,
        seed: Option<Int>,
        compress_queues: Option<bool>,
    ) -> PyResult<Frontier> {
        let mut opts = options(memory, max_url_len, seed)?;
        if let Some(on) = compress_queues {
            opts = opts.compress_queues(on);
        }
        let f = detached(py, || crivello::Frontier::open(&path, opts))?;
        Ok(Frontier {
            inner: RwLock::new(Some(f)),
            pid: std::process::id(),
        })
    }

    /// Pushes discovered URLs of `crawl`. An item is a URL (`str` or `bytes`), or a tuple
    /// `(url, key)` or `(url, key, metadata)`: `key` `None` is the URL's default key (its
    /// host as written: the text after `://` up to `:`, `/`, `?` or `&`); `metadata`
    /// bytes are handed out with the URL. A URL already seen in the crawl changes nothing.
    /// If one item is invalid, none is pushed. Durable when it returns.
    #[pyo3(signature = (items, *, crawl=""))]
    fn push(&self, py: Python<'_>, items: &Bound<'_, PyAny>, crawl: &str) -> PyResult<()> {
        let items = collect_items(items)?;
        let d = discovered(&items);
        self.with(py, |f| f.push(crawl, &d))
    }

    /// `push`, saying of each item whether its URL was new to the crawl (exactly). With
    /// `sync=False` it does not wait for the disk: the next call that changes something
    /// durably (or `sync`) makes these pushes durable first; a crash before may lose them,
    /// and nothing done after them.
    #[pyo3(signature = (items, *, crawl="", sync=true))]
    fn push_new(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
        crawl: &str,
        sync: bool,
    ) -> PyResult<Vec<bool>> {
        let items = collect_items(items)?;
        let d = discovered(&items);
        self.with(py, |f| {
            if sync {
                f.push_new(crawl, &d)
            } else {
                f.push_new_unsynced(crawl, &d)
            }
        })
    }

    /// Makes every push so far durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, crivello::Frontier::sync)
    }

    /// Flushes: every URL pushed so far is merged and, if new, waits in its queue.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, crivello::Frontier::flush)
    }

    /// Hands out up to `max_urls` URLs of queues that may be served now, leased for `ttl`
    /// seconds: at most `max_queues` queues, `per_queue` URLs of each (and what its policy
    /// leaves room for), of `crawl` only (None: every crawl; with `key`, DEFAULT), of the
    /// queue `key` only.
    /// Durable when it returns.
    #[pyo3(signature = (max_urls=Int(100), *, max_queues=None, per_queue=None, ttl=30.0, crawl=None, key=None), text_signature = "($self, max_urls=100, *, max_queues=None, per_queue=None, ttl=30.0, crawl=None, key=None)")]
    #[allow(clippy::too_many_arguments)]
    fn lease<'py>(
        &self,
        py: Python<'py>,
        max_urls: Int,
        max_queues: Option<Int>,
        per_queue: Option<Int>,
        ttl: f64,
        crawl: Option<String>,
        key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let max_urls = count_usize(max_urls, "max_urls")?;
        let max_queues = max_queues
            .map(|n| count_usize(n, "max_queues"))
            .transpose()?;
        let per_queue = per_queue
            .map(|n| count_from(n, "per_queue", 1, u64::from(u32::MAX)).map(|n| n as u32))
            .transpose()?;
        let key = optional_key(key)?;
        let ttl_ms = millis(ttl, "ttl")?;
        if ttl_ms == 0 {
            return Err(PyValueError::new_err(format!(
                "ttl must be at least 0.001 seconds (a lease of no time expires as it is made), \
                 not {ttl}"
            )));
        }
        let req = LeaseRequest {
            max_urls,
            max_queues: max_queues.unwrap_or(usize::MAX),
            per_queue,
            ttl_ms,
            crawl,
            key: key.map(|k| k.as_bytes().to_vec()),
        };
        let leased = self.with(py, |f| f.lease_with(&req))?;
        leased_list(py, leased)
    }

    /// Ends a lease (a `Leased` or its token): the URL is done, never served again. `took`:
    /// the fetch's seconds (for the ratio rule); `ended`: when the fetch ended (seconds since
    /// the epoch; None: now), the instant its queue's delay runs from. Returns False when it
    /// was not leased (its lease expired, or it ended before). Durable when it returns.
    #[pyo3(signature = (lease, *, took=0.0, ended=None))]
    fn done(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyAny>,
        took: f64,
        ended: Option<f64>,
    ) -> PyResult<bool> {
        self.end_one(py, lease, took, ended, Completion::Done)
    }

    /// Ends a lease: done, and served again once the instant `at` (seconds since the epoch)
    /// has passed. Returns False when it was not leased.
    #[pyo3(signature = (lease, at, *, took=0.0, ended=None))]
    fn refetch(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyAny>,
        at: f64,
        took: f64,
        ended: Option<f64>,
    ) -> PyResult<bool> {
        let at = millis(at, "at")?;
        self.end_one(py, lease, took, ended, Completion::RefetchAt(at))
    }

    /// Ends a lease: the URL goes back to its queue, in its place, and the queue's delay
    /// applies. Returns False when it was not leased.
    #[pyo3(signature = (lease, *, took=0.0, ended=None))]
    fn retry(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyAny>,
        took: f64,
        ended: Option<f64>,
    ) -> PyResult<bool> {
        self.end_one(py, lease, took, ended, Completion::Retry)
    }

    /// Says that a lease's fetch ended (its response arrived) while the work that follows
    /// (parsing the page, pushing its links) goes on: its queue's delay runs from `ended`
    /// (None: now), and the lease no longer holds one of its queue's places, so the queue's
    /// next URL may be handed out once due. The lease stays until `done`, `retry` or
    /// `refetch` ends it (its delay does not run again) or it expires. Returns False when it
    /// was not leased, or its fetch had ended already. Durable when it returns.
    #[pyo3(signature = (lease, *, took=0.0, ended=None))]
    fn fetched(
        &self,
        py: Python<'_>,
        lease: &Bound<'_, PyAny>,
        took: f64,
        ended: Option<f64>,
    ) -> PyResult<bool> {
        self.end_one(py, lease, took, ended, Completion::Fetched)
    }

    /// Ends many leases in one durable step, each as `how` says: "done", "retry", or
    /// "refetch" (at the instant `at`); or, with "fetched", says their fetches ended (see
    /// `fetched`). `ended`: when the fetches ended (seconds since the
    /// epoch; one instant for all, or one per lease), if before this call: each queue's
    /// delay runs from it (not before the hand-out, not after the call). Returns, for each,
    /// whether it was leased.
    #[pyo3(signature = (leases, *, how="done", at=None, took=0.0, ended=None))]
    fn complete(
        &self,
        py: Python<'_>,
        leases: &Bound<'_, PyAny>,
        how: &str,
        at: Option<f64>,
        took: f64,
        ended: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<bool>> {
        let how = match (how, at) {
            ("done", None) => Completion::Done,
            ("retry", None) => Completion::Retry,
            ("fetched", None) => Completion::Fetched,
            ("refetch", Some(at)) => Completion::RefetchAt(millis(at, "at")?),
            ("refetch", None) => {
                return Err(PyValueError::new_err(
                    "how=\"refetch\" needs the instant at",
                ))
            }
            ("done" | "retry" | "fetched", Some(_)) => {
                return Err(PyValueError::new_err("at goes with how=\"refetch\" only"))
            }
            (other, _) => {
                return Err(PyValueError::new_err(format!(
                    "how is \"done\", \"retry\", \"refetch\" or \"fetched\", not {other:?}"
                )))
            }
        };
        let took = millis(took, "took")?;
        let mut refs = Vec::new();
        for l in leases.try_iter()? {
            refs.push(lease_ref(&l?)?);
        }
        // u64::MAX: now.
        let fetch_ends = instants_of(ended, refs.len())?;
        self.with(py, |f| {
            // A `Leased` of another store is not ended (nor sent: a token of this store
            // may be its own).
            let mut mine = Vec::with_capacity(refs.len());
            for r in &refs {
                mine.push(ends(f, r)?);
            }
            let items: Vec<(u64, u64, Completion, u64)> = refs
                .iter()
                .zip(&mine)
                .zip(&fetch_ends)
                .filter(|((_, m), _)| **m)
                .map(|((r, _), &e)| (r.token, took, how, e))
                .collect();
            let mut ended = f.complete_ended(&items)?.into_iter();
            Ok(mine
                .iter()
                .map(|m| *m && ended.next().unwrap_or(false))
                .collect())
        })
    }

    /// Returns every URL leased in `crawl` (None: every crawl) to its queue, in its place:
    /// for the one user of a store, whose earlier process died with URLs leased. Returns how
    /// many.
    #[pyo3(signature = (crawl=None))]
    fn release(&self, py: Python<'_>, crawl: Option<String>) -> PyResult<u64> {
        self.with(py, |f| f.release_leases(crawl.as_deref()))
    }

    /// The policy in force for the queue `key` of `crawl` (its own or the default), or the
    /// default (`key` None), which is the store's: one for every crawl.
    #[pyo3(signature = (crawl="", key=None))]
    fn policy(
        &self,
        py: Python<'_>,
        crawl: &str,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Policy> {
        let key = optional_key(key)?;
        let key = key.as_ref().map(|k| k.as_bytes());
        Ok(Policy::from_lib(self.with(py, |f| f.policy(crawl, key))?))
    }

    /// Sets the policy of the queue `key` of `crawl` (default DEFAULT), every field of it, or
    /// (`key` None) the default, of every crawl of the store, which each queue follows in the
    /// fields not set for it: `crawl` without `key` is refused (ValueError), since that default
    /// is no crawl's own. Durable when it returns.
    #[pyo3(signature = (policy, *, crawl=None, key=None))]
    fn set_policy(
        &self,
        py: Python<'_>,
        policy: &Policy,
        crawl: Option<&str>,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let p = policy.to_lib()?;
        let key = optional_key(key)?;
        let key = key.as_ref().map(|k| k.as_bytes());
        if key.is_none() && crawl.is_some() {
            return Err(PyValueError::new_err(
                "set_policy: crawl without key: the default policy is the store's, of every \
                 crawl; give key= for a queue of the crawl, or leave crawl out",
            ));
        }
        self.with(py, |f| f.set_policy(crawl.unwrap_or(""), key, p))
    }

    /// Blocks the queue `key` of `crawl` until the instant `until` (seconds since the epoch;
    /// 0 unblocks it): after an HTTP 429 or 503, say. Durable when it returns.
    #[pyo3(signature = (key, until, *, crawl=""))]
    fn block(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        until: f64,
        crawl: &str,
    ) -> PyResult<()> {
        let key = text_bytes(key, "a key")?;
        let key = key.as_bytes();
        let until = millis(until, "until")?;
        self.with(py, |f| f.block(crawl, key, until))
    }

    /// Pauses the hand-outs (durably): `lease` hands out nothing until `resume`.
    fn pause(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |f| f.set_paused(true))
    }

    /// Resumes the hand-outs.
    fn resume(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |f| f.set_paused(false))
    }

    /// The queues of `crawl`, in key order from the `start`-th, at most `max`: dicts of key,
    /// waiting, leased, done, next_due (seconds since the epoch, or None), policy (or None),
    /// blocked_until (or None). Flushes first (see `counts`), unless `flush=False`.
    #[pyo3(signature = (crawl="", *, start=Int(0), max=Int(1000), flush=true), text_signature = "($self, crawl=\"\", *, start=0, max=1000, flush=True)")]
    fn queues<'py>(
        &self,
        py: Python<'py>,
        crawl: &str,
        start: Int,
        max: Int,
        flush: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let (start, max) = (count_usize(start, "start")?, count_usize(max, "max")?);
        let qs = self.with(py, |f| {
            if flush {
                f.flush_for_reading()?;
            }
            f.queues(crawl, start, max)
        })?;
        let list = PyList::empty(py);
        for q in qs {
            let d = PyDict::new(py);
            d.set_item("key", to_text(py, &q.key)?)?;
            d.set_item("waiting", q.waiting)?;
            d.set_item("leased", q.leased)?;
            d.set_item("done", q.done)?;
            d.set_item("next_due", q.next_due_ms.map(seconds))?;
            d.set_item("policy", q.policy.map(Policy::from_lib))?;
            d.set_item("blocked_until", q.blocked_until_ms.map(seconds))?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// What the frontier knows of `url` of `crawl`: a tuple (state, instant) where state is
    /// "unknown", "waiting", "leased" (until the instant), "done" or "refetch" (at the
    /// instant), instants in seconds since the epoch (None for the others). The URL is
    /// looked for in the queue `key` (None: its default key), then in that of its default
    /// key: a URL pushed with a key of its own must be asked with it, else it reads as
    /// "done" (the frontier keeps a signature of each URL, not its queue). Flushes first: a
    /// merge, when URLs were pushed since the last one.
    #[pyo3(signature = (url, *, crawl="", key=None))]
    fn status<'py>(
        &self,
        py: Python<'py>,
        url: &Bound<'py, PyAny>,
        crawl: &str,
        key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let url = text_bytes(url, "a URL")?;
        let url = url.as_bytes();
        let key = optional_key(key)?;
        let key = key.as_ref().map(|k| k.as_bytes());
        let st = self.with(py, |f| f.status(crawl, key, url))?;
        status_tuple(py, st)
    }

    /// Counts of the whole frontier, as a dict: queues, queues_waiting, waiting, leased,
    /// done, runs, bytes_runs, compressed, paused. Flushes first (see `counts`), unless
    /// `flush=False`.
    #[pyo3(signature = (*, flush=true))]
    fn stats<'py>(&self, py: Python<'py>, flush: bool) -> PyResult<Bound<'py, PyDict>> {
        let (st, logs) = self.with(py, |f| {
            if flush {
                f.flush_for_reading()?;
            }
            Ok((f.stats()?, f.log_bytes()?))
        })?;
        let d = PyDict::new(py);
        d.set_item("queues", st.queues)?;
        d.set_item("queues_waiting", st.queues_waiting)?;
        d.set_item("waiting", st.waiting)?;
        d.set_item("leased", st.leased)?;
        d.set_item("done", st.done)?;
        d.set_item("runs", st.runs)?;
        d.set_item("bytes_runs", st.run_bytes)?;
        d.set_item("bytes_journal", logs.journal)?;
        d.set_item("bytes_checkpoint", logs.checkpoint)?;
        d.set_item("compressed", st.compressed)?;
        d.set_item("paused", st.paused)?;
        Ok(d)
    }

    /// Counts of `crawl`, or of its queue `key`, as a dict: queues, queues_waiting,
    /// queues_active (with URLs waiting or leased), queues_due, waiting, leased, done. Flushes first, so that what was pushed is counted
    /// (a store of a million URLs or more flushes at most about once a second for these
    /// reads: what was pushed since may be counted a little later); `flush=False` counts
    /// what the last flush brought, without waiting.
    #[pyo3(signature = (crawl="", key=None, *, flush=true))]
    fn counts<'py>(
        &self,
        py: Python<'py>,
        crawl: &str,
        key: Option<&Bound<'py, PyAny>>,
        flush: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = optional_key(key)?;
        let key = key.as_ref().map(|k| k.as_bytes());
        let c = self.with(py, |f| {
            if flush {
                f.flush_for_reading()?;
            }
            f.counts(crawl, key)
        })?;
        let d = PyDict::new(py);
        d.set_item("queues", c.queues)?;
        d.set_item("queues_waiting", c.queues_waiting)?;
        d.set_item("queues_active", c.queues_active)?;
        d.set_item("queues_due", c.queues_due)?;
        d.set_item("waiting", c.waiting)?;
        d.set_item("leased", c.leased)?;
        d.set_item("done", c.done)?;
        Ok(d)
    }

    /// The frontier's time, in seconds since the epoch: the clock's, or the latest instant
    /// it gave since the open if the system's clock was set back since (the frontier's time
    /// never runs back while it is open). Delays, deadlines, blocks and `next_due` are
    /// instants of this time.
    fn now(&self, py: Python<'_>) -> PyResult<f64> {
        let ms = self.with(py, |f| f.now_ms())?;
        Ok(seconds(ms))
    }

    /// The first instant (seconds since the epoch) something may be handed out, or a lease
    /// expires; None when nothing waits and nothing is leased (while paused no queue is due:
    /// only a lease's expiry counts). Of the crawl `crawl` alone
    /// when given (what a `lease(crawl=...)` may hand out). Flushes first (see `counts`),
    /// unless `flush=False`: then what was pushed since the last flush is not seen.
    #[pyo3(signature = (*, crawl=None, flush=true))]
    fn next_due(&self, py: Python<'_>, crawl: Option<&str>, flush: bool) -> PyResult<Option<f64>> {
        let due = self.with(py, |f| {
            if flush {
                f.flush_for_reading()?;
            }
            match crawl {
                Some(c) => f.next_due_ms_of(c),
                None => f.next_due_ms(),
            }
        })?;
        Ok(due.map(seconds))
    }

    /// The names of the crawls, sorted.
    fn crawls(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, crivello::Frontier::crawls)
    }

    /// Deletes the queue `key` of `crawl` with its URLs (they stay known to the crawl).
    /// Returns how many URLs it held.
    #[pyo3(signature = (key, *, crawl=""))]
    fn delete_queue(&self, py: Python<'_>, key: &Bound<'_, PyAny>, crawl: &str) -> PyResult<u64> {
        let key = text_bytes(key, "a key")?;
        let key = key.as_bytes();
        self.with(py, |f| f.delete_queue(crawl, key))
    }

    /// Deletes `crawl` with its queues; its URLs are forgotten. Returns how many URLs its
    /// queues held.
    fn delete_crawl(&self, py: Python<'_>, crawl: &str) -> PyResult<u64> {
        self.with(py, |f| f.delete_crawl(crawl))
    }

    /// Syncs and closes; later calls raise `ClosedError`. Closing twice does nothing. Waits
    /// for the calls of other threads in progress. In a process forked from the one that
    /// opened it, lets the handle go without touching the store.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Ok(());
        }
        let taken = py.detach(|| {
            self.inner
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        match taken {
            Some(f) => detached(py, || f.close()),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().with(slf.py(), |_| Ok(()))?;
        Ok(slf)
    }

    /// Closes. When the block raised: a store poisoned (by that error, as a rule) is let go
    /// without a second error over the block's, which goes on; another failure of the
    /// close (its sync, which makes the block's pushes durable) is raised, the block's
    /// exception as its context.
    #[pyo3(signature = (*exc))]
    fn __exit__(&self, py: Python<'_>, exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        exit_closing(py, exc, self.close(py))
    }
}

/// The current time, in seconds since the epoch, by the system's clock, which a frontier
/// reads: its time unless the clock was set back while it is open (`Frontier.now()`).
#[pyfunction]
fn now() -> f64 {
    seconds(now_ms())
}

#[pymodule]
fn _crivello(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Sieve>()?;
    m.add_class::<Frontier>()?;
    m.add_class::<Leased>()?;
    m.add_class::<Policy>()?;
    m.add_function(wrap_pyfunction!(now, m)?)?;
    m.add("DEFAULT_MEMORY", Options::DEFAULT_MEMORY)?;
    m.add("DEFAULT_MAX_URL_LEN", Options::DEFAULT_MAX_URL_LEN)?;
    Ok(())
}
