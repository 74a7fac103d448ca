//! Human-readable reports: one summary per peer, and a Markdown table of all results.

use std::fmt::Write as _;

use crate::record::{Record, Recovery};

/// MiB from KiB.
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Pushes per second, in millions.
fn rate(r: &Record) -> String {
    let m = r.pushes_per_s / 1e6;
    if m >= 10.0 {
        format!("{m:.1} M/s")
    } else {
        format!("{m:.2} M/s")
    }
}

/// Pushes per second of the peer's own work (the generator's time taken out).
fn own_rate(r: &Record) -> String {
    match r.own_pushes_per_s() {
        Some(p) if p >= 1e7 => format!("{:.1} M/s", p / 1e6),
        Some(p) => format!("{:.2} M/s", p / 1e6),
        None => "–".into(),
    }
}

/// A count as a power of ten when it is one.
pub fn count(n: u64) -> String {
    let mut p = 0;
    let mut m = n;
    while m >= 10 && m.is_multiple_of(10) {
        m /= 10;
        p += 1;
    }
    match (m, p) {
        (1, p) if p >= 3 => format!("10^{p}"),
        (m, p) if p >= 6 => format!("{m}·10^{p}"),
        _ => n.to_string(),
    }
}

/// Whether the peer is exact, or what it lost.
fn exactness(r: &Record) -> String {
    if r.peer == "none" {
        "–".into()
    } else if r.exact() {
        "yes".into()
    } else if r.emitted < r.truth_distinct && r.peer == "bloom" {
        let lost = r.truth_distinct - r.emitted;
        format!(
            "no: drops {lost} new URLs ({:.3}%)",
            lost as f64 * 100.0 / r.truth_distinct as f64
        )
    } else {
        format!(
            "NO: {} emitted of {} distinct, digest {} vs {}",
            r.emitted, r.truth_distinct, r.digest, r.truth_digest
        )
    }
}

/// The peer's remark for the table.
fn short_note(r: &Record) -> String {
    let mut s = match r.peer.as_str() {
        "none" if r.input.is_some() => "the file's URLs served alone: the ceiling".to_string(),
        "none" => "the stream generator alone: the ceiling of every peer".to_string(),
        "crivello" => "durable, bounded RAM; a consumer pops 1 URL per 50 pushes".into(),
        "hashset" => "RAM grows with the distinct URLs; not durable".into(),
        "bloom" => "RAM sized for the scale; not durable; lossy".into(),
        "mercator" => "bounded RAM; no crash safety; all of Z rewritten at every flush".into(),
        "fjall" => "durable LSM store, get + insert per URL".into(),
        _ => String::new(),
    };
    if r.pushes < r.requested {
        let _ = write!(s, "; capped at {} pushes", count(r.pushes));
    }
    s
}

/// The crivello record at the same scale and budget, if any.
fn reference<'a>(r: &Record, all: &'a [Record]) -> Option<&'a Record> {
    all.iter().rev().find(|c| {
        c.peer == "crivello"
            && c.requested == r.requested
            && c.memory_mib == r.memory_mib
            && c.seed == r.seed
    })
}

/// The time in flushes, and its share of the run.
fn flush_time(r: &Record) -> String {
    match r.flush_s {
        Some(f) => format!("{f:.2} s ({:.0}%)", f * 100.0 / r.seconds),
        None => "–".into(),
    }
}

/// Bytes on disk per distinct URL: Z, and every file.
fn disk(r: &Record) -> String {
    let per = |b: u64| b as f64 / r.emitted.max(1) as f64;
    match (r.z_bytes, r.disk_bytes) {
        (Some(z), Some(all)) => format!("{:.1} / {:.0}", per(z), per(all)),
        _ => "–".into(),
    }
}

/// A summary of one peer's record, checked against the hash set's record at the same scale.
pub fn summary(r: &Record, earlier: &[Record]) -> String {
    let mut s = format!(
        "  {}: {} pushes in {:.2} s = {} ({} without the generator's {:.2} s), peak RSS \
         {:.1} MiB, emitted {} of {} distinct ({})",
        r.peer,
        r.pushes,
        r.seconds,
        rate(r),
        own_rate(r),
        r.generator_s.unwrap_or(0.0),
        mib(r.peak_rss_kib),
        r.emitted,
        r.truth_distinct,
        exactness(r)
    );
    if let Some(h) = earlier
        .iter()
        .find(|h| h.peer == "hashset" && h.pushes == r.pushes && h.seed == r.seed)
    {
        let same = h.emitted == r.emitted && h.digest == r.digest;
        let _ = write!(
            s,
            "; hashset emitted {}: {}",
            h.emitted,
            if same { "same sequence" } else { "differs" }
        );
    }
    if r.flush_s.is_some() {
        let _ = write!(s, "\n    time in flushes {}", flush_time(r));
        if let Some(n) = r.flushes {
            let _ = write!(s, ", {n} flushes");
        }
    }
    if r.z_bytes.is_some() {
        let _ = write!(
            s,
            "\n    disk bytes per distinct URL (Z / all): {}",
            disk(r)
        );
    }
    if let Some(w) = r.bytes_written {
        let _ = write!(s, ", {:.1} GB written", w as f64 / 1e9);
    }
    if let Some(o) = r.open_s {
        let _ = write!(s, "\n    open of the finished store: {:.2} ms", o * 1e3);
    }
    if let Some(p) = r.popped {
        let _ = write!(s, "\n    frontier URLs popped while pushing: {p}");
    }
    for n in &r.notes {
        let _ = write!(s, "\n    {n}");
    }
    s
}

/// A summary of a recovery measurement.
pub fn recovery_summary(rec: &Recovery) -> String {
    let mut s = format!(
        "  recovery of {} URLs in A ({:.1} MiB), medians of {}: page cache warm: open {:.3} s, \
         sequential read {:.3} s (ratio {:.2})",
        rec.records,
        rec.a_bytes as f64 / (1 << 20) as f64,
        rec.reps,
        rec.warm_open_s,
        rec.warm_read_s,
        rec.warm_open_s / rec.warm_read_s
    );
    match (rec.cold_open_s, rec.cold_read_s) {
        (Some(o), Some(r)) => {
            let _ = write!(
                s,
                "; evicted: open {o:.3} s, sequential read {r:.3} s (ratio {:.2})",
                o / r
            );
        }
        _ => s.push_str("; the page cache could not be evicted: no cold figures"),
    }
    s
}

/// The stream's figures, from the largest run.
fn stream_line(all: &[Record]) -> Option<String> {
    let r = all.iter().max_by_key(|r| r.pushes)?;
    let source = match &r.input {
        Some(name) => format!("Stream {name}"),
        None => format!("Stream (seed {})", r.seed),
    };
    Some(format!(
        "{source} ({} pushes): mean URL length {:.1} bytes, {:.1}% of pushes repeat an \
         earlier URL, {} distinct URLs.\n",
        count(r.pushes),
        r.mean_url_len,
        r.repeat_fraction * 100.0,
        r.truth_distinct
    ))
}

/// A Markdown table of every record, by scale, with crivello's open and recovery figures.
pub fn markdown(all: &[Record]) -> String {
    let mut rows: Vec<&Record> = all.iter().collect();
    rows.sort_by_key(|r| (r.memory_mib, r.requested));
    let mut s = String::new();
    if let Some(l) = stream_line(all) {
        s.push_str(&l);
        s.push('\n');
    }
    s.push_str(
        "| peer | pushes | pushes/s | own pushes/s | peak RSS | vs crivello (own) | distinct \
         emitted | exact | time in flushes | disk B per distinct URL (Z / all) | notes |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &rows {
        let ratio = match reference(r, all) {
            Some(c) => match (r.own_pushes_per_s(), c.own_pushes_per_s()) {
                (Some(a), Some(b)) => {
                    format!("{:.2}x ({:.2}x)", r.pushes_per_s / c.pushes_per_s, a / b)
                }
                _ => format!("{:.2}x", r.pushes_per_s / c.pushes_per_s),
            },
            None => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} MiB | {} | {} | {} | {} | {} | {} |",
            r.peer,
            count(r.pushes),
            rate(r),
            own_rate(r),
            mib(r.peak_rss_kib),
            ratio,
            r.emitted,
            exactness(r),
            flush_time(r),
            disk(r),
            short_note(r)
        );
    }
    let mut extra = String::new();
    for r in rows.iter().filter(|r| r.peer == "crivello") {
        if let Some(o) = r.open_s {
            let _ = writeln!(
                extra,
                "- crivello, {} pushes, {} MiB: open of the finished store {:.2} ms",
                count(r.pushes),
                r.memory_mib,
                o * 1e3
            );
        }
        if let Some(rec) = &r.recovery {
            let _ = writeln!(
                extra,
                "- crivello, {} MiB: {}",
                r.memory_mib,
                recovery_summary(rec).trim_start()
            );
        }
    }
    if !extra.is_empty() {
        s.push('\n');
        s.push_str(&extra);
    }
    s
}
