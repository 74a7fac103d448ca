//! `crivello-bench frontier-table`: the frontier side by side with its two peers, the
//! in-memory frontier a crawler's author writes by hand and url-frontier's scheme on an LSM
//! store, on the synthetic crawl stream (Zipf hosts) and on the real BFS streams, each run a
//! child process of its own (`crivello-bench frontier ... --json`), so that each peak RSS is
//! its own. Prints a table with the ratios, and draws them as SVG.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::frontier::Figures;
use crate::record::Result;

/// The arguments of `frontier-table`.
#[derive(Debug, clap::Args)]
pub struct FrontierTableArgs {
    /// Pushes of the synthetic crawl stream (seed 42), one run per count.
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_count, default_values = ["1e6", "1e7"])]
    pub pushes: Vec<u64>,
    /// Files of URLs to push too, one run each (e.g. the `.bfs-stream.txt.xz` files of the
    /// real web graphs).
    #[arg(long, value_delimiter = ',')]
    pub inputs: Vec<PathBuf>,
    /// Queues per lease call, and URLs per push and per done call.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// The LSM frontier leases and completes only on sources of at most this many pushes; on
    /// larger ones it pushes only (`--push-only`: its hand-outs of the synthetic stream's 2·10^6
    /// URLs at 10^7 pushes would take a quarter of an hour).
    #[arg(long, value_parser = crate::parse_count, default_value = "2e6")]
    pub lsm_max: u64,
    /// crivello leases with `lease_batch` and ends leases by token (`frontier --tokens`).
    #[arg(long)]
    pub tokens: bool,
    /// Where the stores go (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The figures of every run, one JSON line each (appended).
    #[arg(long, default_value = "results-frontier.json")]
    pub json: PathBuf,
    /// Draws the figures of this run as SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Runs nothing: prints and draws the figures `--json` holds (for each source and peer,
    /// the last).
    #[arg(long)]
    pub from_json: bool,
}

/// A peer: its name in the figures, its flag to `frontier`, its legend, its colour.
type Peer = (
    &'static str,
    Option<&'static str>,
    &'static str,
    (u8, u8, u8),
);

/// A figure drawn: its title, and how it is computed from a run's figures (if it is).
type Metric = (&'static str, fn(&Figures) -> Option<f64>);

/// The peers, in the order of the table and the plot.
const PEERS: [Peer; 3] = [
    (
        "crivello",
        None,
        "crivello (every call durable, 64 MiB)",
        (214, 39, 40),
    ),
    (
        "in-memory",
        Some("--in-memory"),
        "in-memory frontier (nothing durable)",
        (31, 119, 180),
    ),
    (
        "lsm",
        Some("--lsm"),
        "url-frontier's scheme on fjall (every batch synced)",
        (255, 127, 14),
    ),
];

/// Runs every source with every peer, then prints and draws the figures.
pub fn run(a: &FrontierTableArgs) -> Result<()> {
    if a.from_json {
        let mut figures: Vec<Figures> = Vec::new();
        for line in std::fs::read_to_string(&a.json)?.lines() {
            let f: Figures = serde_json::from_str(line)?;
            figures.retain(|g| (&g.source, &g.peer) != (&f.source, &f.peer));
            figures.push(f);
        }
        print_table(&figures);
        if let Some(svg) = &a.svg {
            draw(&figures, svg)?;
        }
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let scratch = tempfile::NamedTempFile::new()?;
    let mut sources: Vec<(Vec<String>, u64)> = Vec::new();
    for &n in &a.pushes {
        sources.push((
            vec![
                "--stream".into(),
                "42".into(),
                "--urls".into(),
                n.to_string(),
            ],
            n,
        ));
    }
    for input in &a.inputs {
        let lines = crate::frontier::Urls::of_file(input)?.pushes();
        sources.push((vec!["--input".into(), input.display().to_string()], lines));
    }
    let mut figures: Vec<Figures> = Vec::new();
    for (args, pushes) in &sources {
        for (peer, flag, _, _) in PEERS {
            let mut c = Command::new(&exe);
            c.arg("frontier").args(args);
            if peer == "lsm" && *pushes > a.lsm_max {
                c.arg("--push-only");
            }
            c.args(["--batch", &a.batch.to_string()]);
            c.arg("--json").arg(scratch.path());
            if let Some(dir) = &a.dir {
                c.arg("--dir").arg(dir);
            }
            match flag {
                Some(f) => {
                    c.arg(f);
                }
                None if a.tokens => {
                    c.arg("--tokens");
                }
                None => {}
            }
            eprintln!("{peer}: {}", args.join(" "));
            let status = c.status()?;
            if !status.success() {
                return Err(format!("{peer} on {}: {status}", args.join(" ")).into());
            }
        }
    }
    for line in std::fs::read_to_string(scratch.path())?.lines() {
        figures.push(serde_json::from_str(line)?);
    }
    {
        use std::io::Write;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&a.json)?;
        for f in &figures {
            writeln!(out, "{}", serde_json::to_string(f)?)?;
        }
    }
    print_table(&figures);
    if let Some(svg) = &a.svg {
        draw(&figures, svg)?;
    }
    Ok(())
}

/// Discovered URLs into queues a second: pushes over the push calls and, for crivello, the
/// flush into its queues.
fn into_queues(f: &Figures) -> f64 {
    f.pushes as f64 / (f.push_s + f.flush_s)
}

/// URLs leased and done a second; none for a run that pushed only.
fn handed_out(f: &Figures) -> Option<f64> {
    (f.lease_done_s > 0.0).then(|| f.distinct as f64 / f.lease_done_s)
}

/// The sources in the order first run.
fn sources(figures: &[Figures]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for f in figures {
        if !out.contains(&f.source.as_str()) {
            out.push(&f.source);
        }
    }
    out
}

/// Prints the figures as a Markdown table, crivello against each peer.
fn print_table(figures: &[Figures]) {
    let find = |source: &str, peer: &str| {
        figures
            .iter()
            .find(|f| f.source == source && f.peer == peer)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a / b),
        _ => "–".into(),
    };
    let rate = |x: Option<f64>| x.map_or("–".into(), |x| format!("{:.0}", x));
    println!(
        "| source (pushes, distinct, queues) | into queues/s: crivello | in-memory | LSM | crivello/in-memory | crivello/LSM | lease + done/s: crivello | in-memory | LSM | crivello/in-memory | crivello/LSM | peak RSS: crivello, in-memory, LSM (MiB) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for s in sources(figures) {
        let (c, m, l) = (find(s, "crivello"), find(s, "in-memory"), find(s, "lsm"));
        let Some(any) = c.or(m).or(l) else {
            continue;
        };
        let push = |f: Option<&Figures>| f.map(into_queues);
        let out = |f: Option<&Figures>| f.and_then(handed_out);
        let rss = |f: Option<&Figures>| {
            f.map_or("–".into(), |f| {
                format!("{:.1}", f.peak_rss_kib as f64 / 1024.0)
            })
        };
        println!(
            "| {s} ({}, {}, {}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}, {}, {} |",
            any.pushes,
            any.distinct,
            any.queues,
            rate(push(c)),
            rate(push(m)),
            rate(push(l)),
            ratio(push(c), push(m)),
            ratio(push(c), push(l)),
            rate(out(c)),
            rate(out(m)),
            rate(out(l)),
            ratio(out(c), out(m)),
            ratio(out(c), out(l)),
            rss(c),
            rss(m),
            rss(l),
        );
    }
}

/// Draws two panels of bars, log scale: URLs into queues a second and URLs leased and done a
/// second, one group of bars per source, one bar per peer.
fn draw(figures: &[Figures], output: &Path) -> Result<()> {
    use plotters::prelude::*;
    let names = sources(figures);
    if names.is_empty() {
        return Err("no figures to draw".into());
    }
    let root = SVGBackend::new(output, (1200, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "The frontier side by side: 1,000 URLs a call, delay 0, one fetcher per host",
        ("sans-serif", 22),
    )?;
    let panels = root.split_evenly((1, 2));
    let metrics: [Metric; 2] = [
        ("discovered URLs into queues a second", |f| {
            Some(into_queues(f))
        }),
        ("URLs leased and done a second", handed_out),
    ];
    for (panel, (title, metric)) in panels.iter().zip(metrics) {
        let values: Vec<f64> = figures.iter().filter_map(metric).collect();
        if values.is_empty() {
            continue;
        }
        // Room above the bars for the legend.
        let ymax = values.iter().cloned().fold(1.0, f64::max) * 40.0;
        let ymin = values.iter().cloned().fold(f64::MAX, f64::min) / 3.0;
        let n = names.len();
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, (ymin..ymax).log_scale())?;
        let labels = names.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 0.01 && i < labels.len() {
                    labels[i].replace(" pushes", "").replace(" seed 42,", "")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .draw()?;
        let width = 0.8 / PEERS.len() as f64;
        for (k, (peer, _, legend, (r, g, b))) in PEERS.iter().enumerate() {
            let color = RGBColor(*r, *g, *b);
            let bars: Vec<Rectangle<(f64, f64)>> = names
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let f = figures.iter().find(|f| f.source == *s && f.peer == *peer)?;
                    let x0 = i as f64 + 0.1 + k as f64 * width;
                    Some(Rectangle::new(
                        [(x0, ymin), (x0 + width * 0.9, metric(f)?)],
                        color.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)?
                .label(*legend)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
