//! `crivello-bench assign`: the assignment functions of `crivello::assign` (the lecture notes
//! §3) beside hash mod N, on the real host list of the UKWA 1996 link graph and on synthetic
//! hosts: balance (the largest agent's load over the mean, counting hosts and weighting them
//! by their link counts), contravariance (the share of keys that move when one agent joins N
//! or leaves N + 1, against the ideal 1/(N+1), and whether any moves between two agents
//! present on both sides), and lookup time.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::time::Instant;

use crivello::assign::{Assignment, Method, UNIVERSE};

use crate::record::Result;

/// The arguments of `assign`.
#[derive(Debug, clap::Args)]
pub struct AssignArgs {
    /// The UKWA host graph (`year|source|target<TAB>count` lines, xz-compressed); its hosts
    /// are the real key set, weighted by the links they appear in.
    #[arg(long)]
    pub hosts: Option<PathBuf>,
    /// Synthetic hosts (`host-<i>.example`), each of weight 1.
    #[arg(long, value_parser = crate::parse_count, default_value = "1e6")]
    pub synthetic: u64,
    /// Agent counts N to measure.
    #[arg(long, value_delimiter = ',', default_value = "2,3,4,8,16,32,64")]
    pub agents: Vec<usize>,
    /// Replicas per agent of consistent hashing.
    #[arg(long, default_value_t = crivello::assign::DEFAULT_REPLICAS)]
    pub replicas: u32,
    /// Writes the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draws balance and moved share against N here (SVG).
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// A key set: keys and their weights.
struct Keys {
    name: String,
    keys: Vec<Vec<u8>>,
    weights: Vec<u64>,
}

/// `n` agent names, `node-i`, skipping a name whose slot of the permutation method's
/// universe an earlier one took (the method refuses two names in one slot).
fn agent_names(n: usize) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    (0..)
        .map(|i| format!("node-{i}"))
        .filter(|name| {
            taken.insert(xxhash_rust::xxh3::xxh3_64(name.as_bytes()) % u64::from(UNIVERSE))
        })
        .take(n)
        .collect()
}

/// The hosts of the UKWA graph with the number of links each appears in.
fn ukwa(path: &PathBuf) -> Result<Keys> {
    let out = std::process::Command::new("xz")
        .arg("-dc")
        .arg(path)
        .output()
        .map_err(|e| format!("xz -dc {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!("xz -dc {} failed", path.display()).into());
    }
    let mut weight = std::collections::HashMap::<Vec<u8>, u64>::new();
    for line in out.stdout.lines() {
        let line = line?;
        let Some((edge, count)) = line.split_once('\t') else {
            continue;
        };
        let count: u64 = count.trim().parse().unwrap_or(1);
        let mut parts = edge.split('|').skip(1);
        for host in [parts.next(), parts.next()].into_iter().flatten() {
            *weight.entry(host.as_bytes().to_vec()).or_default() += count;
        }
    }
    let mut all: Vec<(Vec<u8>, u64)> = weight.into_iter().collect();
    all.sort();
    let (keys, weights) = all.into_iter().unzip();
    Ok(Keys {
        name: "UKWA 1996 hosts".into(),
        keys,
        weights,
    })
}

fn synthetic(n: u64) -> Keys {
    Keys {
        name: format!("{n} synthetic hosts"),
        keys: (0..n)
            .map(|i| format!("host-{i}.example").into_bytes())
            .collect(),
        weights: vec![1; n as usize],
    }
}

/// Figures of one method at one N on one key set.
#[derive(Debug, serde::Serialize)]
struct Row {
    keys: String,
    method: String,
    agents: usize,
    /// Largest agent's number of keys over the mean.
    balance_keys: f64,
    /// Largest agent's weight over the mean.
    balance_weighted: f64,
    /// Share of keys that move when agent N + 1 joins.
    moved_join: f64,
    /// Share of the weight that moves then.
    moved_join_weighted: f64,
    /// Share of keys that move when one of N + 1 agents leaves (the last named).
    moved_leave: f64,
    /// Keys that moved between two agents present on both sides (join and leave).
    moved_between_old: u64,
    /// The ideal share, 1/(N+1).
    ideal: f64,
    /// Nanoseconds per lookup.
    lookup_ns: f64,
}

/// Runs `assign`.
pub fn run(a: &AssignArgs) -> Result<()> {
    let mut sets = Vec::new();
    if let Some(path) = &a.hosts {
        sets.push(ukwa(path)?);
    }
    sets.push(synthetic(a.synthetic));
    let methods = [
        Method::Consistent {
            replicas: a.replicas,
        },
        Method::Rendezvous,
        Method::Permutation,
        Method::Modulo,
    ];
    let mut rows = Vec::new();
    for set in &sets {
        eprintln!("{}: {} keys", set.name, set.keys.len());
        let total_weight: u64 = set.weights.iter().sum();
        for &n in &a.agents {
            let names = agent_names(n + 1);
            for method in methods {
                let small = Assignment::new(method, &names[..n]).map_err(|e| e.to_string())?;
                let big = Assignment::new(method, &names).map_err(|e| e.to_string())?;
                let t = Instant::now();
                let owners: Vec<usize> = set.keys.iter().map(|k| small.owner(k)).collect();
                let lookup_ns = t.elapsed().as_nanos() as f64 / set.keys.len() as f64;
                let mut load = vec![0u64; n];
                let mut weighted = vec![0u64; n];
                for (i, &o) in owners.iter().enumerate() {
                    load[o] += 1;
                    weighted[o] += set.weights[i];
                }
                let max_over_mean = |v: &[u64], total: u64| {
                    *v.iter().max().unwrap_or(&0) as f64 / (total as f64 / n as f64)
                };
                // Join: N -> N + 1. Names are compared, not indexes (they are sorted per set).
                let (mut moved, mut moved_w, mut between) = (0u64, 0u64, 0u64);
                let joined = &names[n];
                for (i, k) in set.keys.iter().enumerate() {
                    let before = &small.names()[owners[i]];
                    let after = &big.names()[big.owner(k)];
                    if before != after {
                        moved += 1;
                        moved_w += set.weights[i];
                        if after != joined {
                            between += 1;
                        }
                    }
                }
                // Leave: N + 1 -> N without the first-named agent (not the one that joined).
                let gone = &names[0];
                let rest: Vec<&String> = names.iter().filter(|x| *x != gone).collect();
                let left = Assignment::new(method, &rest).map_err(|e| e.to_string())?;
                let mut moved_leave = 0u64;
                for k in &set.keys {
                    let before = &big.names()[big.owner(k)];
                    let after = &left.names()[left.owner(k)];
                    if before != after {
                        moved_leave += 1;
                        if before != gone {
                            between += 1;
                        }
                    }
                }
                let keys = set.keys.len() as f64;
                let row = Row {
                    keys: set.name.clone(),
                    method: method.name().into(),
                    agents: n,
                    balance_keys: max_over_mean(&load, set.keys.len() as u64),
                    balance_weighted: max_over_mean(&weighted, total_weight),
                    moved_join: moved as f64 / keys,
                    moved_join_weighted: moved_w as f64 / total_weight as f64,
                    moved_leave: moved_leave as f64 / keys,
                    moved_between_old: between,
                    ideal: 1.0 / (n + 1) as f64,
                    lookup_ns,
                };
                eprintln!(
                    "  N {n:>2} {:<11} balance {:.3} (weighted {:.3}) moved join {:.4} leave {:.4} \
                     (ideal {:.4}) between old {between} lookup {lookup_ns:.0} ns",
                    row.method,
                    row.balance_keys,
                    row.balance_weighted,
                    row.moved_join,
                    row.moved_leave,
                    row.ideal
                );
                rows.push(row);
            }
        }
    }
    print!("{}", table(&rows));
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)?;
    }
    if let Some(svg) = &a.svg {
        plot(&rows, svg)?;
    }
    Ok(())
}

/// The markdown tables: per key set, one row per N and method.
fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut set = "";
    for r in rows {
        if r.keys != set {
            set = &r.keys;
            out.push_str(&format!(
                "\n{set}\n\n| N | method | balance (keys) | balance (weighted) | moved, one joins | \
                 moved, one leaves | ideal 1/(N+1) | moved between old agents | lookup |\n\
                 |---|---|---|---|---|---|---|---|---|\n"
            ));
        }
        out.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.2} % | {:.2} % | {:.2} % | {} | {:.0} ns |\n",
            r.agents,
            r.method,
            r.balance_keys,
            r.balance_weighted,
            100.0 * r.moved_join,
            100.0 * r.moved_leave,
            100.0 * r.ideal,
            r.moved_between_old,
            r.lookup_ns
        ));
    }
    out
}

/// Two panels: balance (keys, synthetic set) and the share moved when one joins, against N.
fn plot(rows: &[Row], output: &std::path::Path) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(output, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let colors = [
        ("consistent", RGBColor(214, 39, 40)),
        ("rendezvous", RGBColor(31, 119, 180)),
        ("permutation", RGBColor(44, 160, 44)),
        ("modulo", RGBColor(127, 127, 127)),
    ];
    let set = rows.last().map(|r| r.keys.clone()).unwrap_or_default();
    let nmax = rows.iter().map(|r| r.agents).max().unwrap_or(2) as f64;
    let panels: [(&DrawingArea<SVGBackend, plotters::coord::Shift>, &str, bool); 2] = [
        (&left, "balance: largest load / mean", true),
        (&right, "share of keys moved when one agent joins", false),
    ];
    for (area, title, balance) in panels {
        let value = |r: &Row| {
            if balance {
                r.balance_keys
            } else {
                r.moved_join
            }
        };
        let ymax = rows
            .iter()
            .filter(|r| r.keys == set)
            .map(value)
            .fold(0f64, f64::max)
            * 1.1;
        let ymin = if balance { 1.0 } else { 0.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{title} ({set})"), ("sans-serif", 16))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((1.5f64..nmax * 1.3).log_scale(), ymin..ymax.max(ymin + 0.1))?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("agents N")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()?;
        for (method, color) in colors {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.keys == set && r.method == method)
                .map(|r| (r.agents as f64, value(r)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(method)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        if !balance {
            let ideal: Vec<(f64, f64)> = (2..=nmax as usize)
                .map(|n| (n as f64, 1.0 / (n + 1) as f64))
                .collect();
            chart
                .draw_series(LineSeries::new(ideal, BLACK.stroke_width(1)))?
                .label("ideal 1/(N+1)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
