//! Sizes on the command line: bytes, or a number with a unit K, M or G (powers of 1024),
//! optionally followed by "B" or "iB", in any case.

use crivello::{parse_size, Options};

/// Parses a size that must lie in `min..=max`.
fn parse_bounded(text: &str, min: u64, max: u64, unit_help: &str) -> Result<usize, String> {
    let n = parse_size(text)?;
    if n < min || n > max {
        return Err(format!(
            "{n} bytes is not between {min} and {max} ({unit_help})"
        ));
    }
    usize::try_from(n).map_err(|_| "too large for this machine".to_owned())
}

/// Parses `--memory`: a size of at least 1 MiB.
pub fn parse_memory(text: &str) -> Result<usize, String> {
    parse_bounded(text, Options::MIN_MEMORY as u64, u64::MAX, "from 1M")
}

/// Parses `--max-url-len`: 1 byte to 1 GiB.
pub fn parse_max_url_len(text: &str) -> Result<usize, String> {
    parse_bounded(text, 1, Options::MAX_MAX_URL_LEN as u64, "1 to 1G")
}

/// Parses `--max-line-length`: 1 byte to 1 GiB less one (one byte goes to the line's tag).
pub fn parse_max_line_length(text: &str) -> Result<usize, String> {
    parse_bounded(
        text,
        1,
        Options::MAX_MAX_URL_LEN as u64 - 1,
        "1 to 1G minus 1",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_in_any_case() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2mb"), Ok(2 << 20));
        assert_eq!(parse_size("10B"), Ok(10));
        for bad in ["", "M", "12Q", "1.5G", "-1", "1 T", "99999999999999999999"] {
            assert!(parse_size(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn memory_below_one_mebibyte_is_refused() {
        assert!(parse_memory("512K").is_err());
        assert_eq!(parse_memory("1M"), Ok(1 << 20));
    }
}
