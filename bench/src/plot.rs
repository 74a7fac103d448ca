//! `plot`: pushes per second against the number of pushes, one line per peer, as SVG.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::record::{self, Result};

/// The peers' colours and legends, in legend order.
const STYLE: [(&str, RGBColor, &str); 6] = [
    (
        "crivello",
        RGBColor(214, 39, 40),
        "crivello (durable, 64 MiB)",
    ),
    (
        "hashset",
        RGBColor(31, 119, 180),
        "HashSet<u64> (RAM grows)",
    ),
    ("bloom", RGBColor(44, 160, 44), "Bloom filter (lossy)"),
    (
        "mercator",
        RGBColor(148, 103, 189),
        "textbook Mercator sieve",
    ),
    (
        "fjall",
        RGBColor(255, 127, 14),
        "fjall LSM get+insert (to 10^7)",
    ),
    ("none", RGBColor(127, 127, 127), "generator alone (ceiling)"),
];

/// Formats an axis value as a power of ten when it is one.
fn sci(x: f64) -> String {
    let e = x.log10().round();
    if (x - 10f64.powf(e)).abs() < 1e-6 * x {
        format!("10^{e}")
    } else if x >= 1e6 {
        format!("{:.0}M", x / 1e6)
    } else {
        format!("{x:.0}")
    }
}

/// Draws the plot of the results in `input` to the SVG file `output`: log x axis, linear y
/// axis. For each peer and number of pushes the last record counts.
pub fn plot(input: &Path, output: &Path) -> Result<()> {
    let records = record::load(input)?;
    if records.is_empty() {
        return Err(format!("{}: no results", input.display()).into());
    }
    // peer -> pushes -> (pushes/s, budget)
    let mut series: BTreeMap<&str, BTreeMap<u64, (f64, u64)>> = BTreeMap::new();
    for r in &records {
        series
            .entry(r.peer.as_str())
            .or_default()
            .insert(r.pushes, (r.pushes_per_s, r.memory_mib));
    }
    let xs = records.iter().map(|r| r.pushes as f64);
    let ys = records.iter().map(|r| r.pushes_per_s);
    let (xmin, xmax) = (xs.clone().fold(f64::MAX, f64::min), xs.fold(0f64, f64::max));
    let ymax = ys.fold(0f64, f64::max);
    let budget = records
        .iter()
        .find(|r| r.peer == "crivello")
        .map_or(64, |r| r.memory_mib);

    let root = SVGBackend::new(output, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "URL sieves: pushes per second, end to end",
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((xmin / 2.0..xmax * 2.0).log_scale(), 0f64..ymax * 1.45)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .y_labels(12)
        .x_desc("pushes (URLs discovered, 80% repeats)")
        .y_desc("pushes per second")
        .x_label_formatter(&|x| sci(*x))
        .y_label_formatter(&|y| format!("{:.0} M", y / 1e6))
        .draw()?;
    for (peer, color, legend) in STYLE {
        let Some(points) = series.get(peer) else {
            continue;
        };
        let pts: Vec<(f64, f64)> = points.iter().map(|(&n, &(v, _))| (n as f64, v)).collect();
        let legend = if peer == "crivello" {
            legend.replace("64 MiB", &format!("{budget} MiB"))
        } else {
            legend.to_string()
        };
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
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
