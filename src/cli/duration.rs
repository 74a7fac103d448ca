//! Durations on the command line: a whole number with a unit, `ms`, `s`, `m` or `h`.

/// Parses a duration: `250ms`, `2s`, `5m`, `1h`; returns milliseconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let usage = "expected a whole number with a unit ms, s, m or h, like 250ms, 2s, 5m, 1h";
    if digits.is_empty() {
        return Err(usage.to_owned());
    }
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("no unit: {usage}")),
        other => return Err(format!("unknown unit {other:?}: {usage}")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(ms))
        .filter(|&ms| ms <= LONGEST_MS)
        .ok_or_else(|| "too large: at most 876000h (100 years)".to_owned())
}

/// The longest duration taken: 100 years. A delay, a lease or a refetch longer than that is a
/// typing error, and one past the year 9999 would not be kept as an instant.
pub const LONGEST_MS: u64 = 876_000 * 3_600_000;

/// Parses a duration that must be above zero (a lease's): see [`parse_duration`].
pub fn parse_positive_duration(text: &str) -> Result<u64, String> {
    match parse_duration(text)? {
        0 => Err("a lease of no time would expire at once: give at least 1ms".to_owned()),
        ms => Ok(ms),
    }
}

/// The parser of a queue's key given as an argument: its bytes as they are (a key holds
/// the bytes of a URL's host, which need not be UTF-8), not empty.
pub fn key_parser() -> impl clap::builder::TypedValueParser<Value = std::ffi::OsString> {
    use clap::builder::TypedValueParser as _;
    clap::builder::OsStringValueParser::new().try_map(|s| {
        if s.is_empty() {
            Err("a queue's key is not empty (URLs whose key would be empty are in `_DEFAULT_`)")
        } else {
            Ok(s)
        }
    })
}

/// Parses a ratio of the ratio rule: a number above 0 and at most 1; returns millionths.
pub fn parse_ratio(text: &str) -> Result<u32, String> {
    let p: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number above 0 and at most 1, like 0.1".to_owned())?;
    if !(p > 0.0 && p <= 1.0) {
        return Err(format!("{} is not above 0 and at most 1", text.trim()));
    }
    // Kept in millionths: a finer P would be changed without a word.
    if p < 0.000_000_5 {
        return Err(format!(
            "{} is below 0.000001, the finest ratio kept",
            text.trim()
        ));
    }
    let ppm = ((p * 1e6).round() as u32).max(1);
    let kept = f64::from(ppm) / 1e6;
    if (kept - p).abs() > p * 1e-9 {
        // Said, not refused: a ratio such as 1/3 given to many decimals is meant.
        eprintln!(
            "crivello: note: --ratio {} is kept in millionths, as {kept}",
            text.trim()
        );
    }
    Ok(ppm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ratios_parse_and_nonsense_is_refused() {
        assert_eq!(parse_ratio("0.000001"), Ok(1));
        assert!(parse_ratio("1e-7").unwrap_err().contains("finest"));
        assert!(parse_ratio("-0.5").is_err());
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("2s"), Ok(2_000));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("0s"), Ok(0));
        for bad in [
            "",
            "5",
            "s",
            "-1s",
            "1.5s",
            "2d",
            "1 s",
            "99999999999999999999h",
            "99999999999h",
            "876001h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_duration("876000h"), Ok(LONGEST_MS));
        assert!(parse_ratio("1e-300")
            .unwrap_err()
            .starts_with("1e-300 is below"));
        assert_eq!(parse_positive_duration("1ms"), Ok(1));
        assert!(parse_positive_duration("0s").is_err());
        assert_eq!(parse_ratio("0.1"), Ok(100_000));
        assert_eq!(parse_ratio("1"), Ok(1_000_000));
        for bad in ["0", "-0.5", "1.5", "nan", "inf", "x", ""] {
            assert!(parse_ratio(bad).is_err(), "{bad:?}");
        }
    }
}
