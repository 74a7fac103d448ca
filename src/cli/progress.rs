//! Progress on stderr for long work: lines, bytes, rate and flushes, shown only when stderr
//! is a terminal and `--quiet` was not given.

use std::io::IsTerminal as _;
use std::time::Duration;

use crivello::Sieve;
use indicatif::{HumanBytes, HumanCount, ProgressBar, ProgressStyle};

/// The display is refreshed every this many lines.
const REFRESH_LINES: u64 = 1 << 14;
/// The flush count is read from the sieve every this many lines (it lists the directory).
const STATS_LINES: u64 = 1 << 20;

/// Counts lines and bytes and shows them in a spinner.
pub struct Progress {
    /// The spinner, when progress is shown.
    bar: Option<ProgressBar>,
    /// Lines so far.
    lines: u64,
    /// Bytes so far.
    bytes: u64,
    /// Flushes committed, as last read from the sieve.
    flushes: Option<u64>,
}

impl Progress {
    /// A progress display for the work named `what`, hidden when `quiet` or when stderr is
    /// not a terminal.
    pub fn new(what: &'static str, quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let style =
                ProgressStyle::with_template("{spinner} {prefix} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let bar = ProgressBar::new_spinner()
                .with_style(style)
                .with_prefix(what);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            lines: 0,
            bytes: 0,
            flushes: None,
        }
    }

    /// Counts one line of `bytes` bytes; now and then refreshes the display, reading the
    /// flush count from `sieve` when given.
    pub fn line(&mut self, bytes: usize, sieve: Option<&mut Sieve>) {
        self.lines += 1;
        self.bytes += bytes as u64;
        if self.bar.is_none() || !self.lines.is_multiple_of(REFRESH_LINES) {
            return;
        }
        if self.lines.is_multiple_of(STATS_LINES) {
            if let Some(sieve) = sieve {
                self.flushes = sieve.stats().ok().map(|s| s.flushes);
            }
        }
        self.refresh();
    }

    /// Counts `lines` lines of `bytes` bytes in all; now and then refreshes the display.
    pub fn lines(&mut self, lines: u64, bytes: usize) {
        let before = self.lines / REFRESH_LINES;
        self.lines += lines;
        self.bytes += bytes as u64;
        if self.bar.is_some() && self.lines / REFRESH_LINES != before {
            self.refresh();
        }
    }

    /// Sets the counts of lines, bytes and (when known) flushes, and refreshes the display.
    pub fn set(&mut self, lines: u64, bytes: u64, flushes: Option<u64>) {
        self.lines = lines;
        self.bytes = bytes;
        self.flushes = flushes.or(self.flushes);
        self.refresh();
    }

    /// Redraws the message.
    fn refresh(&self) {
        let Some(bar) = &self.bar else { return };
        let secs = bar.elapsed().as_secs_f64().max(1e-3);
        let mut msg = format!(
            "{} lines, {}, {} lines/s",
            HumanCount(self.lines),
            HumanBytes(self.bytes),
            HumanCount((self.lines as f64 / secs) as u64)
        );
        if let Some(f) = self.flushes {
            msg.push_str(&format!(", flushes: {}", HumanCount(f)));
        }
        bar.set_message(msg);
    }

    /// Shows that the work is waiting for something, e.g. the last flush.
    pub fn waiting(&self, what: &'static str) {
        if let Some(bar) = &self.bar {
            bar.set_prefix(what);
            self.refresh();
        }
    }

    /// Removes the display.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // Never leave a spinner behind an error message.
        self.finish();
    }
}
