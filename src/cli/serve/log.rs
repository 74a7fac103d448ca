//! The service's log: one line per event on stderr, at a level that `--log-level`, `--quiet`
//! and the `SetLogLevel` call choose.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How much the log says, from the most to the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Level {
    /// Every hand-out (GetURLs) and every commit of items.
    Trace,
    /// Every stream and batch.
    Debug,
    /// Start, stop, and what an operator should know.
    Info,
    /// Refused input, clients that went away.
    Warn,
    /// What failed.
    Error,
}

impl Level {
    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Trace,
            1 => Level::Debug,
            2 => Level::Info,
            3 => Level::Warn,
            _ => Level::Error,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// The log: a level shared by every thread.
#[derive(Debug)]
pub struct Log {
    level: AtomicU8,
}

impl Log {
    /// A log that writes lines of `level` and above.
    pub fn new(level: Level) -> Log {
        Log {
            level: AtomicU8::new(level as u8),
        }
    }

    /// Writes lines of `level` and above from now on.
    pub fn set_level(&self, level: Level) {
        self.level.store(level as u8, Ordering::Relaxed);
    }

    /// The level in force.
    pub fn level(&self) -> Level {
        Level::from_u8(self.level.load(Ordering::Relaxed))
    }

    /// Whether lines of `level` are written.
    pub fn enabled(&self, level: Level) -> bool {
        level >= self.level()
    }

    /// Writes one line, `<UTC time> <LEVEL> <message>`, if `level` is enabled.
    pub fn write(&self, level: Level, message: fmt::Arguments<'_>) {
        if !self.enabled(level) {
            return;
        }
        let line = format!("{} {} {message}\n", utc_now(), level.name());
        // A log that cannot be written is no reason to stop serving.
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// Writes a line to a [`Log`] at a level: `log!(log, Info, "listening on {addr}")`.
macro_rules! log {
    ($log:expr, $level:ident, $($arg:tt)*) => {
        $log.write($crate::cli::serve::log::Level::$level, format_args!($($arg)*))
    };
}
pub(crate) use log;

/// The time now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn utc_now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    format_utc(ms)
}

/// `ms` milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian).
fn format_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_formatted_in_utc() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(format_utc(1_795_656_896_007), "2026-11-26T01:34:56.007Z");
    }

    #[test]
    fn levels_below_the_one_set_are_not_written() {
        let log = Log::new(Level::Warn);
        assert!(!log.enabled(Level::Info));
        assert!(log.enabled(Level::Error));
        log.set_level(Level::Trace);
        assert!(log.enabled(Level::Debug));
        assert_eq!(log.level(), Level::Trace);
    }
}
