//! `crivello-bench neardup`: crivello's near-duplicate store beside the PyPI `simhash`
//! package, datasketch's MinHash and a linear scan, in one run:
//!
//! 1. fingerprinting, MB/s of text on one core, on the corpus of this machine's texts
//!    (crivello in process; `simhash.Simhash` and datasketch's `MinHash` with 128 permutations
//!    in a Python child process, `neardup_peers.py`);
//! 2. recall of one-edit copies and unrelated pairs found close, on the same corpus: crivello
//!    at k = 3, `simhash.Simhash` at k = 3, MinHash LSH at a Jaccard threshold of 0.8;
//! 3. query + insert at k = 3 with the fingerprints given, documents/s as the store grows to
//!    each count of `--stored`: crivello's store in a child process of its own (its peak RSS
//!    its own), a linear scan of the same fingerprints in memory (on a sample of queries),
//!    and `SimhashIndex` up to `--simhash-cap` documents.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crivello::internals::corpus::{machine_corpus, Corpus};
use crivello::neardup::{distance, Fingerprinter, Store};
use crivello::Options;

use crate::peers::{dir_size, peak_rss_kib};
use crate::record::Result;

/// The arguments of `neardup`.
#[derive(Debug, clap::Args)]
pub struct NeardupArgs {
    /// Counts of stored documents to measure query + insert at, comma-separated.
    #[arg(long, value_parser = crate::parse_count, value_delimiter = ',', default_value = "1e6,1e7")]
    pub stored: Vec<u64>,
    /// crivello's memory budget, MiB.
    #[arg(long, default_value_t = 64)]
    pub memory: usize,
    /// Documents per `Store::insert_with` call; 0: as many as one batch of the store takes
    /// (`Store::batch_docs`).
    #[arg(long, value_parser = crate::parse_count, default_value = "1e5")]
    pub batch: u64,
    /// The Python with `simhash` and `datasketch` installed (`none`: no Python peer).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// The most documents `SimhashIndex` is measured with (it is slow, and all in RAM).
    #[arg(long, value_parser = crate::parse_count, default_value = "1e5")]
    pub simhash_cap: u64,
    /// Seconds each fingerprinting measurement takes.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Where the stores are made (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Writes the figures to this JSON file too.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draws query + insert against stored documents to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// The `crivello` command to time `crivello neardup` with, as users run it, on
    /// `--cli-docs` synthetic documents (not given, or `none`: not timed).
    #[arg(long)]
    pub cli: Option<PathBuf>,
    /// Documents of the command-line run.
    #[arg(long, value_parser = crate::parse_count, default_value = "1e6")]
    pub cli_docs: u64,
}

/// Writes `n` synthetic documents as JSON lines: 40 words each from a vocabulary of 5,000,
/// a quarter of them a near-duplicate (one word changed) of a recent one, two in five a
/// repeat of an earlier id. Returns the bytes written and the distinct ids.
fn write_docs(path: &std::path::Path, n: u64) -> Result<(u64, u64)> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let word = |w: u64| format!("w{}x{}", w % 5000, (w * 7) % 13);
    let mut recent: Vec<Vec<u64>> = Vec::new();
    let (mut bytes, mut ids) = (0u64, 0u64);
    for i in 0..n {
        let id = if i > 0 && rand() % 5 < 2 {
            rand() % ids.max(1)
        } else {
            ids += 1;
            ids - 1
        };
        let words: Vec<u64> = if !recent.is_empty() && rand() % 4 == 0 {
            let mut w = recent[(rand() % recent.len() as u64) as usize].clone();
            let at = (rand() % w.len() as u64) as usize;
            w[at] = rand();
            w
        } else {
            (0..40).map(|_| rand()).collect()
        };
        let text: Vec<String> = words.iter().map(|&w| word(w)).collect();
        let line = serde_json::json!({"id": format!("doc-{id}"), "text": text.join(" ")});
        let line = format!("{line}\n");
        bytes += line.len() as u64;
        out.write_all(line.as_bytes())?;
        if recent.len() < 64 {
            recent.push(words);
        } else {
            let at = (rand() % 64) as usize;
            recent[at] = words;
        }
    }
    out.flush()?;
    Ok((bytes, ids))
}

/// The synthetic fingerprints: one in eight a near-duplicate (two bits off) of the one
/// before it, the others uniformly random. The same for every peer.
pub struct Fingerprints(u64, u64);

impl Fingerprints {
    /// The sequence from its start.
    pub fn new() -> Fingerprints {
        Fingerprints(0x9e37_79b9_7f4a_7c15, 0)
    }

    /// The next fingerprint, a near-duplicate being two bits off a random one of `ring`, which
    /// keeps up to `keep` of them (each new one replacing a random one once it is full).
    fn far(&mut self, ring: &mut Vec<u64>, keep: usize) -> u64 {
        let fp = if !ring.is_empty() && self.rand().is_multiple_of(8) {
            let r = self.rand();
            ring[(r >> 8) as usize % ring.len()] ^ 0b11 << (r % 62)
        } else {
            self.rand()
        };
        if ring.len() < keep {
            ring.push(fp);
        } else {
            let at = (self.rand() >> 8) as usize % keep;
            ring[at] = fp;
        }
        fp
    }

    fn rand(&mut self) -> u64 {
        let s = &mut self.0;
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }
}

impl Iterator for Fingerprints {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let fp = if self.1 != 0 && self.rand().is_multiple_of(8) {
            let r = self.rand();
            self.1 ^ 0b11 << (r % 62)
        } else {
            self.rand()
        };
        self.1 = fp;
        Some(fp)
    }
}

/// Runs crivello's store alone (the hidden `neardup-store` subcommand): inserts `stored`
/// synthetic fingerprints at k = 3 in batches, and prints one JSON line of figures.
///
/// With `far`, each near-duplicate is two bits off an earlier fingerprint drawn at random
/// among up to 2^20 kept (by the bench, outside the heap it counts) instead of the one before
/// it.
pub fn store_child(
    stored: u64,
    memory: usize,
    batch: u64,
    dir: Option<PathBuf>,
    far: bool,
) -> Result<()> {
    const RING: usize = 1 << 20;
    let mut ring: Vec<u64> = Vec::with_capacity(if far { RING } else { 0 });
    let parent = dir.unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(parent)?;
    // The live heap (`heap`), counted from before the store opens. At each call: what is
    // live before the bench makes its ids and documents is the store's (its standing
    // structures); the most live during the call, less the bench's ids and documents, is the
    // store's memory at its peak (the results are reported without copies).
    // glibc's allocator bound as `crivello serve` bounds it (two arenas, a fixed mmap
    // threshold of 256 KiB), so that the peak RSS is near what is allocated: by default
    // glibc keeps the batches' freed vectors in its arenas (`bench/README.md`).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets the allocator's parameters; the store's threads are not
    // started yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
    crate::heap::start();
    let mut store = Store::open(tmp.path(), Options::new().memory(memory << 20))?;
    let mut fps = Fingerprints::new();
    let mut near = 0u64;
    let start = Instant::now();
    let mut at = 0u64;
    let mut progress = Instant::now();
    let (mut store_max, mut bench_max) = (0usize, 0usize);
    while at < stored {
        let call = if batch == 0 {
            store.batch_docs(3) as u64
        } else {
            batch
        };
        let n = call.min(stored - at);
        let standing = crate::heap::live();
        let ids: Vec<String> = (at..at + n).map(|i| format!("d{i}")).collect();
        let docs: Vec<(&[u8], u64)> = ids
            .iter()
            .map(|id| {
                let fp = if far {
                    fps.far(&mut ring, RING)
                } else {
                    fps.next().expect("endless")
                };
                (id.as_bytes(), fp)
            })
            .collect();
        let before = crate::heap::live();
        crate::heap::reset_peak();
        store.insert_with(&docs, 3, |_, s| {
            near += u64::from(s.is_some_and(|s| s.nearest.is_some()));
        })?;
        let peak = crate::heap::peak();
        store_max = store_max.max(peak - (before - standing));
        bench_max = bench_max.max(before - standing);
        at += n;
        if progress.elapsed().as_secs() >= 10 {
            progress = Instant::now();
            eprintln!(
                "  crivello: {at} stored, {:.0} documents/s so far",
                at as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = store.stats();
    store.close()?;
    let out = serde_json::json!({
        "stored": stored,
        "secs": secs,
        "docs_s": stored as f64 / secs,
        "near": near,
        "segments": stats.segments,
        "disk_bytes": dir_size(tmp.path()),
        "peak_rss_kib": peak_rss_kib(),
        "store_heap_max_mib": store_max as f64 / (1 << 20) as f64,
        "bench_heap_max_mib": bench_max as f64 / (1 << 20) as f64,
    });
    println!("{out}");
    Ok(())
}

/// MB/s of crivello's fingerprint over the texts, for `seconds`.
fn fingerprint_speed(texts: &[(String, String)], seconds: f64) -> f64 {
    let mut f = Fingerprinter::new();
    let mut x = 0u64;
    let mut done = 0usize;
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        for (_, t) in texts {
            x = x.rotate_left(1) ^ f.fingerprint(t).expect("within the maximum");
            done += t.len();
        }
    }
    std::hint::black_box(x);
    done as f64 / 1e6 / start.elapsed().as_secs_f64()
}

/// crivello's recall of one-edit copies at k = 3, and the unrelated pairs within 3.
fn recall(c: &Corpus) -> (f64, usize) {
    let mut f = Fingerprinter::new();
    let fps: Vec<u64> = c
        .texts
        .iter()
        .map(|(_, t)| f.fingerprint(t).expect("within the maximum"))
        .collect();
    let hits = c
        .edited
        .iter()
        .filter(|(i, _, e)| distance(fps[*i], f.fingerprint(e).expect("within")) <= 3)
        .count();
    let close = c
        .unrelated
        .iter()
        .filter(|(a, b)| distance(fps[*a], fps[*b]) <= 3)
        .count();
    (hits as f64 / c.edited.len() as f64, close)
}

/// Queries/s of a linear scan over `fps` at k = 3, on a sample of queries.
fn scan_speed(fps: &[u64]) -> f64 {
    let start = Instant::now();
    let mut hits = 0usize;
    let mut q = 0usize;
    while q < 20 || start.elapsed().as_secs_f64() < 1.0 {
        let fp = fps[(q * 7919) % fps.len()] ^ 1;
        hits += fps.iter().filter(|&&f| distance(f, fp) <= 3).count();
        q += 1;
    }
    std::hint::black_box(hits);
    q as f64 / start.elapsed().as_secs_f64()
}

/// Runs `neardup_peers.py` with the Python `python` on `task`, and returns its figures.
fn run_python(python: &str, task: &serde_json::Value) -> Result<serde_json::Value> {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("task.json");
    std::fs::write(&path, task.to_string())?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("neardup_peers.py");
    eprintln!("running the Python peers ({python})");
    let out = Command::new(python).arg(&script).arg(&path).output()?;
    if !out.status.success() {
        return Err(format!(
            "{python} {}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Runs the benchmark and prints its tables.
pub fn run(a: &NeardupArgs) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut report = serde_json::Map::new();

    // The corpus, and the task of the Python peers.
    let corpus = machine_corpus(20)
        .ok_or("fewer than 20 texts of 2,000 bytes on this machine: no corpus")?;
    let bytes: usize = corpus.texts.iter().map(|(_, t)| t.len()).sum();
    println!(
        "corpus: {} texts ({:.1} MB), {} one-edit copies, {} unrelated pairs\n",
        corpus.texts.len(),
        bytes as f64 / 1e6,
        corpus.edited.len(),
        corpus.unrelated.len()
    );
    let max_stored = a.stored.iter().copied().max().unwrap_or(0);
    let simhash_counts: Vec<u64> = a
        .stored
        .iter()
        .map(|&n| n.min(a.simhash_cap))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let python = if a.python == "none" {
        None
    } else {
        let fps: Vec<u64> = Fingerprints::new()
            .take(*simhash_counts.last().unwrap_or(&0) as usize)
            .collect();
        let texts = serde_json::json!({
            "texts": corpus.texts.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            "edited": corpus.edited.iter().map(|(i, k, e)| (i, format!("{k:?}"), e)).collect::<Vec<_>>(),
            "unrelated": corpus.unrelated,
            "seconds": a.seconds,
        });
        // The index in a process of its own, so that its peak RSS is the index's.
        let index = serde_json::json!({"fingerprints": fps, "stored": simhash_counts});
        let mut merged = run_python(&a.python, &texts)?;
        let index = run_python(&a.python, &index)?;
        merged["index"] = index["index"].clone();
        Some(merged)
    };
    let py = |path: &[&str]| -> Option<f64> {
        let mut v = python.as_ref()?;
        for p in path {
            v = v.get(p)?;
        }
        v.as_f64()
    };

    // 1. Fingerprinting.
    let mbs = fingerprint_speed(&corpus.texts, a.seconds);
    println!("| fingerprinting, one core | MB/s of text | crivello is |");
    println!("|---|---:|---:|");
    println!("| crivello (SimHash, 5-character shingles, xxh3) | {mbs:.1} | |");
    for (name, key) in [
        (
            "PyPI `simhash` (`Simhash`: its tokenisation, 4-character windows, md5)",
            "simhash_mb_s",
        ),
        (
            "datasketch `MinHash`, 128 permutations (shingles made in Python)",
            "minhash_mb_s",
        ),
    ] {
        if let Some(v) = py(&["fingerprint", key]) {
            println!("| {name} | {v:.2} | {:.0}x |", mbs / v);
        }
    }
    report.insert("fingerprint_mb_s".into(), mbs.into());

    // 2. Recall and precision.
    let (rec, close) = recall(&corpus);
    let pairs = corpus.unrelated.len();
    println!("\n| recall and precision | one-edit copies found | unrelated pairs found close |");
    println!("|---|---:|---:|");
    println!(
        "| crivello, k = 3 | {:.1} % | {close} of {pairs} |",
        100.0 * rec
    );
    for (name, key) in [
        ("PyPI `simhash`, k = 3", "simhash"),
        ("datasketch MinHash LSH, Jaccard ≥ 0.8", "minhash_lsh"),
    ] {
        if let (Some(r), Some(c)) = (
            py(&["recall", key, "recall"]),
            py(&["recall", key, "unrelated_close"]),
        ) {
            println!("| {name} | {:.1} % | {c} of {pairs} |", 100.0 * r);
        }
    }
    report.insert("recall".into(), rec.into());
    report.insert("unrelated_close".into(), close.into());
    report.insert("python".into(), python.clone().unwrap_or_default());

    // 3. Query + insert.
    println!(
        "\n| query + insert, k = 3, fingerprints given | stored | documents/s | crivello is | peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|");
    let fps: Vec<u64> = Fingerprints::new().take(max_stored as usize).collect();
    let mut rows = Vec::new();
    for &n in &a.stored {
        let mut cmd = Command::new(&exe);
        cmd.args(["neardup-store", "--stored", &n.to_string()])
            .args(["--memory", &a.memory.to_string()])
            .args(["--batch", &a.batch.to_string()]);
        if let Some(d) = &a.dir {
            cmd.arg("--dir").arg(d);
        }
        let out = cmd.stderr(std::process::Stdio::inherit()).output()?;
        if !out.status.success() {
            return Err(format!("crivello's store at {n}: {}", out.status).into());
        }
        let r: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let docs_s = r["docs_s"].as_f64().unwrap_or(0.0);
        let calls = match a.batch {
            0 => "calls of one batch".to_owned(),
            b => format!("calls of {b}"),
        };
        println!(
            "| crivello, {} MiB, {calls} | {n} | {docs_s:.0} | | {} MiB, the store's heap {:.1} MiB ({} segments, {:.0} MB on disk) |",
            a.memory,
            r["peak_rss_kib"].as_u64().unwrap_or(0) / 1024,
            r["store_heap_max_mib"].as_f64().unwrap_or(0.0),
            r["segments"],
            r["disk_bytes"].as_f64().unwrap_or(0.0) / 1e6
        );
        // crivello's figure is over a store growing from 0 to n: the scan's cost per query
        // over that growth is its cost at the mean size, n / 2.
        let scan = scan_speed(&fps[..(n as usize / 2).max(1)]);
        println!(
            "| linear scan (in memory), at the mean size {} | {n} | {scan:.0} | {:.0}x | |",
            n / 2,
            docs_s / scan
        );
        let mut row = serde_json::json!({"stored": n, "crivello": r, "scan_docs_s": scan});
        if let Some(rs) = python
            .as_ref()
            .and_then(|p| p["index"]["simhash_index"].as_array())
        {
            if let Some(s) = rs.iter().find(|s| s["stored"].as_u64() == Some(n)) {
                let v = s["docs_s"].as_f64().unwrap_or(0.0);
                println!(
                    "| PyPI `SimhashIndex`, k = 3 | {n} | {v:.0} | {:.0}x | {} MiB (its process, at {}) |",
                    docs_s / v,
                    python.as_ref().map_or(0, |p| p["index"]["peak_rss_kib"]
                        .as_u64()
                        .unwrap_or(0)
                        / 1024),
                    a.simhash_cap.min(max_stored)
                );
                row["simhash_index_docs_s"] = v.into();
                row["simhash_stored"] = n.into();
            }
        }
        rows.push(row);
    }
    if let Some(cli) = a.cli.as_ref().filter(|c| c.as_os_str() != "none") {
        let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
        let tmp = tempfile::tempdir_in(parent)?;
        let input = tmp.path().join("docs.jsonl");
        let (bytes, ids) = write_docs(&input, a.cli_docs)?;
        let store = tmp.path().join("store");
        let start = Instant::now();
        let mut cmd = Command::new(cli);
        cmd.arg("neardup")
            .arg(&store)
            .arg(&input)
            .args(["--memory", &format!("{}M", a.memory)]);
        let (out, rss_kib) = output_with_peak_rss(cmd)?;
        let secs = start.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(format!(
                "{} neardup: {}",
                cli.display(),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let lines = out.stdout.iter().filter(|&&b| b == b'\n').count() as u64;
        if lines != ids {
            return Err(format!("crivello neardup printed {lines} lines for {ids} new ids").into());
        }
        let near = out
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty() && !l.ends_with(b"\t-\t-"))
            .count();
        println!(
            "\n`crivello neardup`, {} MiB: {} documents ({:.0} MB of JSON lines, {ids} new ids, {near} near-duplicates) in {secs:.2} s: {:.0} documents/s, {:.0} MB/s, peak RSS {} MiB",
            a.memory,
            a.cli_docs,
            bytes as f64 / 1e6,
            a.cli_docs as f64 / secs,
            bytes as f64 / 1e6 / secs,
            rss_kib / 1024
        );
        report.insert(
            "cli".into(),
            serde_json::json!({"docs": a.cli_docs, "bytes": bytes, "new": ids, "near": near, "secs": secs, "peak_rss_kib": rss_kib}),
        );
    }
    if let Some(svg) = &a.svg {
        plot(&rows, a.memory, svg)?;
    }
    report.insert("index".into(), rows.into());
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::Value::Object(report).to_string())?;
    }
    Ok(())
}

/// Draws documents/s against stored documents (both axes logarithmic) for crivello, the
/// linear scan and `SimhashIndex`, from the rows of a run, to the SVG file `output`.
fn plot(rows: &[serde_json::Value], memory: usize, output: &std::path::Path) -> Result<()> {
    use plotters::prelude::*;
    let series: [(&str, RGBColor, String); 3] = [
        (
            "crivello",
            RGBColor(214, 39, 40),
            format!("crivello's store (durable, {memory} MiB)"),
        ),
        (
            "scan",
            RGBColor(127, 127, 127),
            "linear scan (in memory)".into(),
        ),
        (
            "simhash",
            RGBColor(31, 119, 180),
            "PyPI SimhashIndex (in memory)".into(),
        ),
    ];
    let point = |r: &serde_json::Value, which: &str| -> Option<(f64, f64)> {
        let n = r["stored"].as_f64()?;
        match which {
            "crivello" => Some((n, r["crivello"]["docs_s"].as_f64()?)),
            "scan" => Some((n, r["scan_docs_s"].as_f64()?)),
            _ => Some((
                r["simhash_stored"].as_f64()?,
                r["simhash_index_docs_s"].as_f64()?,
            )),
        }
    };
    let all: Vec<(f64, f64)> = rows
        .iter()
        .flat_map(|r| series.iter().filter_map(|s| point(r, s.0)))
        .collect();
    if all.is_empty() {
        return Err("no figures to draw".into());
    }
    let (xmin, xmax) = all
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = all
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let root = SVGBackend::new(output, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Near-duplicates: query + insert at k = 3, fingerprints given",
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(
            (xmin / 2.0..xmax * 2.0).log_scale(),
            (ymin / 3.0..ymax * 3.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("documents stored")
        .y_desc("documents per second")
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()?;
    for (which, color, legend) in series {
        let mut pts: Vec<(f64, f64)> = rows.iter().filter_map(|r| point(r, which)).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
        if pts.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(legend)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Runs `cmd` to its end, its standard output and error gathered, and returns them with its
/// peak RSS in KiB, measured by this program's `peak-rss` in a process of its own: a child's
/// peak (`wait4`'s) counts the process it was spawned from, here this one with its
/// fingerprints, before it ran the command.
fn output_with_peak_rss(cmd: Command) -> Result<(std::process::Output, u64)> {
    let tmp = tempfile::NamedTempFile::new()?;
    let out = Command::new(std::env::current_exe()?)
        .arg("peak-rss")
        .arg(tmp.path())
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(std::process::Stdio::null())
        .output()?;
    let rss = std::fs::read_to_string(tmp.path())?
        .trim()
        .parse()
        .unwrap_or(0);
    Ok((out, rss))
}

/// The `peak-rss` subcommand: runs `command` with this process's standard input and
/// outputs, writes its peak RSS in KiB (`wait4`'s) to `out`, and exits with its code.
pub fn peak_rss_child(out: &std::path::Path, command: &[std::ffi::OsString]) -> Result<()> {
    let child = Command::new(&command[0]).args(&command[1..]).spawn()?;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing its status and usage into the two locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    if pid < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    std::fs::write(out, usage.ru_maxrss.to_string())?;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    std::process::exit(code)
}
