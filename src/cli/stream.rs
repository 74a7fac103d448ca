//! Line input from files or standard input, and buffered standard output that turns a
//! closed pipe into a quiet exit.

use std::fs::File;
use std::io::{self, BufWriter, Read, StdoutLock, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use crivello::internals::Finder;

use super::StdoutClosed;

/// The name of standard input in messages.
pub const STDIN_NAME: &str = "<stdin>";
/// The read buffer of an input.
const READ_BUFFER: usize = 1 << 20;
/// The write buffer of standard output.
const WRITE_BUFFER: usize = 256 << 10;
/// Bytes of frontier URLs read per batch, whatever their number.
pub const BATCH_BYTES: usize = 8 << 20;

/// The error a frontier-reading callback returns to stop the read when writing failed; the
/// caller reports the write error it kept instead.
pub fn stop() -> crivello::Error {
    crivello::Error::Io {
        op: "write",
        file: STDIN_NAME.replace("stdin", "stdout"),
        source: io::Error::other("standard output failed"),
    }
}

/// The inputs named on the command line, in order: `None` is standard input, read when no
/// file is named and for each "-". Each file named must open and not be a directory, checked
/// here, before anything is read: a bad name late in the list stops the command before it
/// prints or stores anything, not after the earlier files.
pub fn sources(files: &[PathBuf]) -> Result<Vec<Option<&Path>>> {
    if files.is_empty() {
        return Ok(vec![None]);
    }
    let all: Vec<Option<&Path>> = files
        .iter()
        .map(|f| (f.as_os_str() != "-").then_some(f.as_path()))
        .collect();
    for path in all.iter().flatten() {
        // Looked at without opening: opening a named pipe would wait for its writer, and
        // closing it again would leave the writer's next write without a reader.
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
        if meta.is_file() {
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        }
        if meta.is_dir() {
            return Err(super::explained(
                format!("cannot read {}: a directory", path.display()),
                "give the files to read (a directory's files are not read)",
            ));
        }
    }
    Ok(all)
}

/// How a line read by [`LineReader::read_line`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A whole line was read; the number of input bytes it took, its "\n" included.
    Complete(usize),
    /// The line is longer than the limit: only its first `limit` bytes were read. The rest
    /// is still unread (see [`LineReader::skip_rest`]).
    TooLong,
}

/// Reads the lines of one input with a large buffer of its own: a line is handed out as a
/// slice of that buffer, copied only when the caller asks for a copy. Its end is found among
/// the newlines of the 64 bytes around it, all found at once: a search started
/// again for each line of about 70 bytes cost more than the line's bytes.
pub struct LineReader {
    /// The input's name in messages: its path, or [`STDIN_NAME`].
    name: String,
    /// The input.
    inner: Box<dyn Read>,
    /// The buffer: bytes `start..end` are read and not yet handed out.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Finds the newlines of the bytes read (`buf[..end]`), which stay where they are until
    /// the next [`LineReader::fill`].
    newlines: Finder,
    /// Whether the input reached its end.
    eof: bool,
    /// The 1-based number of the last line read.
    line: u64,
}

impl LineReader {
    /// Opens a file, or standard input for `None`.
    pub fn open(source: Option<&Path>) -> Result<LineReader> {
        let (name, inner): (String, Box<dyn Read>) = match source {
            None => (STDIN_NAME.to_owned(), Box::new(io::stdin().lock())),
            Some(path) => {
                let file =
                    File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
                (path.display().to_string(), Box::new(file))
            }
        };
        Ok(LineReader::new(name, inner, READ_BUFFER))
    }

    fn new(name: String, inner: Box<dyn Read>, capacity: usize) -> LineReader {
        LineReader {
            name,
            inner,
            buf: vec![0; capacity],
            start: 0,
            end: 0,
            newlines: Finder::default(),
            eof: false,
            line: 0,
        }
    }

    /// The input's name in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 1-based number of the last line read.
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// The next line without its "\n", reading at most `limit` bytes (its "\n" included); a
    /// last line without "\n" is a line. Returns `None` at the end of the input. Memory
    /// stays bounded by the buffer and `limit` however long the line.
    pub fn next_line(&mut self, limit: usize) -> Result<Option<(&[u8], Line)>> {
        // The bytes after `start` known to hold no newline: a line longer than one read is
        // searched on from there, not again from its start at each read.
        let mut scanned = 0;
        let (at, len, how) = loop {
            let avail = self.end - self.start;
            let window = avail.min(limit);
            let found = self.newlines.find(
                &self.buf[..self.end],
                self.start + scanned,
                self.start + window,
            );
            scanned = window;
            if let Some(i) = found {
                let i = i - self.start;
                break (self.start, i, Line::Complete(i + 1));
            }
            if window == limit {
                break (self.start, limit, Line::TooLong);
            }
            if self.eof {
                if avail == 0 {
                    return Ok(None);
                }
                break (self.start, avail, Line::Complete(avail));
            }
            self.fill(limit)?;
        };
        self.start = at
            + match how {
                Line::Complete(n) => n,
                Line::TooLong => len,
            };
        self.line += 1;
        Ok(Some((&self.buf[at..at + len], how)))
    }

    /// Whether the next line (or the end of the input) is in the bytes read already: else
    /// [`LineReader::next_line`] reads on, and may wait for the input.
    pub fn holds_next(&mut self, limit: usize) -> bool {
        let window = (self.end - self.start).min(limit);
        self.eof
            || window == limit
            || self
                .newlines
                .find(&self.buf[..self.end], self.start, self.start + window)
                .is_some()
    }

    /// The next line, as [`LineReader::next_line`] reads it, when it is whole in the bytes
    /// read already; `None` (nothing read, nothing taken) when reading it would mean waiting
    /// for the input.
    pub fn next_read_line(&mut self, limit: usize) -> Option<&[u8]> {
        let window = (self.end - self.start).min(limit);
        let i = self
            .newlines
            .find(&self.buf[..self.end], self.start, self.start + window)?;
        let at = self.start;
        self.start = i + 1;
        self.line += 1;
        Some(&self.buf[at..i])
    }

    /// Appends the next line to `buf`, as [`LineReader::next_line`] reads it.
    pub fn read_line(&mut self, buf: &mut Vec<u8>, limit: usize) -> Result<Option<Line>> {
        Ok(self.next_line(limit)?.map(|(line, how)| {
            buf.extend_from_slice(line);
            how
        }))
    }

    /// Moves the bytes not handed out to the front of the buffer and reads more after them;
    /// when they fill the buffer (a line longer than it, shorter than `limit`), the buffer
    /// doubles first, up to `limit` bytes. Sets `eof` at the end of the input.
    fn fill(&mut self, limit: usize) -> Result<()> {
        self.newlines.forget();
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let len = (2 * self.buf.len()).min(limit).max(self.end + 1);
            self.buf.resize(len, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(anyhow::Error::new(e).context(format!("read {}", self.name))),
            }
        }
    }

    /// Skips the rest of the current line, through its "\n"; returns the bytes skipped.
    pub fn skip_rest(&mut self) -> Result<u64> {
        let mut skipped = 0u64;
        loop {
            let avail = &self.buf[self.start..self.end];
            if let Some(i) = memchr::memchr(b'\n', avail) {
                self.start += i + 1;
                return Ok(skipped + i as u64 + 1);
            }
            skipped += avail.len() as u64;
            self.start = self.end;
            if self.eof {
                return Ok(skipped);
            }
            self.fill(1)?;
        }
    }
}

/// Buffered standard output. Every write error is returned; a closed pipe becomes
/// [`StdoutClosed`], which ends the command quietly with exit code 0.
pub struct Output {
    /// The buffered, locked standard output.
    out: BufWriter<StdoutLock<'static>>,
}

impl Output {
    /// Locks standard output for the rest of the command.
    pub fn new() -> Output {
        let out = io::stdout().lock();
        widen_pipe(&out);
        Output {
            out: BufWriter::with_capacity(WRITE_BUFFER, out),
        }
    }

    /// Writes `bytes` followed by "\n".
    pub fn line(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(write_error)?;
        self.out.write_all(b"\n").map_err(write_error)
    }

    /// Writes bytes as they are (lines with their newlines).
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(write_error)
    }

    /// Writes text as it is.
    pub fn text(&mut self, text: &str) -> Result<()> {
        self.out.write_all(text.as_bytes()).map_err(write_error)
    }

    /// Writes everything buffered to standard output.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(write_error)
    }
}

/// When standard output is a pipe, asks for a pipe buffer of [`PIPE_BUFFER`] bytes (the
/// system's default is 64 KiB): a reader that takes its input in large reads then gets it
/// with a few system calls and context switches per megabyte instead of dozens. Ignored where
/// not allowed (the system's `pipe-max-size`) and on other systems.
fn widen_pipe(out: &StdoutLock<'static>) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = out.as_raw_fd();
        // SAFETY: `fd` is standard output's descriptor, open for as long as the lock lives;
        // fstat writes only into the zeroed `stat` given, and F_SETPIPE_SZ reads no memory of
        // this process. Both results are checked or ignored: this is a hint.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
                libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BUFFER as libc::c_int);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = out;
}

/// The pipe buffer [`Output`] asks for when standard output is a pipe.
const PIPE_BUFFER: usize = 1 << 20;

/// Turns a write error on standard output into the command's error.
fn write_error(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(e).context("write to standard output")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &'static [u8]) -> LineReader {
        LineReader::new("test".into(), Box::new(bytes), 4)
    }

    /// Reads `input` in chunks of at most 3 bytes (a reader that returns less than asked).
    struct Trickle(Vec<u8>, usize);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(3).min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn every_buffer_size_and_limit_splits_as_the_definition_does() {
        let input: Vec<u8> = (0..200u32)
            .flat_map(|i| {
                let mut l = vec![b'a' + (i % 26) as u8; (i as usize * 7) % 23];
                l.push(b'\n');
                l
            })
            .chain(*b"tail")
            .collect();
        for capacity in (1..12).chain([63, 64, 65, 100, 129, 1000]) {
            for limit in [1, 2, 5, 9, 23, 24, 100] {
                // The definition: at most `limit` bytes, "\n" included; a longer line is cut
                // at `limit`, and its rest skipped.
                let mut want = Vec::new();
                let mut rest = &input[..];
                while !rest.is_empty() {
                    let window = &rest[..rest.len().min(limit)];
                    match window.iter().position(|&b| b == b'\n') {
                        Some(i) => {
                            want.push((rest[..i].to_vec(), Line::Complete(i + 1)));
                            rest = &rest[i + 1..];
                        }
                        None if window.len() == limit => {
                            want.push((window.to_vec(), Line::TooLong));
                            let skip = rest.iter().position(|&b| b == b'\n');
                            rest = &rest[skip.map_or(rest.len(), |i| i + 1)..];
                        }
                        None => {
                            want.push((rest.to_vec(), Line::Complete(rest.len())));
                            rest = &[];
                        }
                    }
                }
                // Reads of at most 3 bytes, and reads that fill the buffer (whose blocks of
                // 64 bytes are then read whole).
                for trickle in [true, false] {
                    let inner: Box<dyn Read> = if trickle {
                        Box::new(Trickle(input.clone(), 0))
                    } else {
                        Box::new(io::Cursor::new(input.clone()))
                    };
                    let mut r = LineReader::new("test".into(), inner, capacity);
                    let mut got = Vec::new();
                    while let Some((line, how)) = r.next_line(limit).unwrap() {
                        got.push((line.to_vec(), how));
                        if how == Line::TooLong {
                            r.skip_rest().unwrap();
                        }
                    }
                    assert_eq!(got, want, "capacity {capacity}, limit {limit}, {trickle}");
                    assert_eq!(r.line_number(), want.len() as u64);
                }
            }
        }
    }

    #[test]
    fn lines_are_split_at_newlines_only() {
        let mut r = reader(b"a\r\n\nlong line\nlast");
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(l) = r.read_line(&mut buf, 100).unwrap() {
            got.push((buf.clone(), l));
            buf.clear();
        }
        assert_eq!(
            got,
            [
                (b"a\r".to_vec(), Line::Complete(3)),
                (b"".to_vec(), Line::Complete(1)),
                (b"long line".to_vec(), Line::Complete(10)),
                (b"last".to_vec(), Line::Complete(4)),
            ]
        );
        assert_eq!(r.line_number(), 4);
    }

    #[test]
    fn an_over_long_line_is_reported_and_can_be_skipped() {
        let mut r = reader(b"abc\nabcdef\nxy");
        let mut buf = Vec::new();
        assert_eq!(r.read_line(&mut buf, 4).unwrap(), Some(Line::Complete(4)));
        buf.clear();
        assert_eq!(r.read_line(&mut buf, 4).unwrap(), Some(Line::TooLong));
        assert_eq!(r.line_number(), 2);
        assert_eq!(r.skip_rest().unwrap(), 3);
        buf.clear();
        assert_eq!(r.read_line(&mut buf, 4).unwrap(), Some(Line::Complete(2)));
        assert_eq!(buf, b"xy");
        buf.clear();
        assert_eq!(r.read_line(&mut buf, 4).unwrap(), None);
    }

    /// A reader that hands out its bytes once, then fails: a read after them is a test
    /// failure.
    struct Once(Option<Vec<u8>>);

    impl Read for Once {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let bytes = self.0.take().expect("no read past the bytes handed out");
            buf[..bytes.len()].copy_from_slice(&bytes);
            Ok(bytes.len())
        }
    }

    #[test]
    fn lines_read_already_are_taken_without_reading() {
        let mut r = LineReader::new(
            "test".into(),
            Box::new(Once(Some(b"a\nbc\nd".to_vec()))),
            64,
        );
        assert_eq!(r.next_read_line(100), None, "nothing read yet");
        let (first, how) = r.next_line(100).unwrap().unwrap();
        assert_eq!((first, how), (&b"a"[..], Line::Complete(2)));
        assert_eq!(r.next_read_line(100), Some(&b"bc"[..]));
        assert_eq!(r.line_number(), 2);
        // "d" has no newline yet: taking it would mean reading again.
        assert_eq!(r.next_read_line(100), None);
        assert_eq!(r.next_read_line(1), None);
        assert_eq!(r.line_number(), 2);
    }

    #[test]
    fn dash_and_no_file_mean_standard_input() {
        assert_eq!(sources(&[]).unwrap(), [None]);
        let files = [PathBuf::from("a"), PathBuf::from("-")];
        assert_eq!(sources(&files).unwrap_err().to_string(), "cannot open a");
    }
}
