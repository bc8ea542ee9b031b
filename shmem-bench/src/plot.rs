//! PNG plot: latency and bandwidth against message size for every sized
//! benchmark of every run, with the memcpy and cache-line references.

use std::path::Path;

use crate::error::{BenchError, Result};
use crate::report::RunResult;

/// One line on a panel.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    reference: bool,
}

/// The latency and bandwidth lines of `runs`.
fn series(runs: &[RunResult]) -> (Vec<Series>, Vec<Series>) {
    let (mut lat, mut bw) = (Vec::new(), Vec::new());
    for run in runs {
        let tag = if runs.len() > 1 {
            format!(" ({})", run.engine)
        } else {
            String::new()
        };
        for b in &run.benches {
            // The copy-engine benchmarks' rows are not a size sweep.
            if !b.bench.sized()
                || b.bench.family() == crate::cli::Family::CopyEngine
                || b.rows.is_empty()
            {
                continue;
            }
            let name = format!("{}{tag}", b.bench.name());
            lat.push(Series {
                name: name.clone(),
                points: b
                    .rows
                    .iter()
                    .map(|r| (r.size as f64, r.stats.median_us))
                    .collect(),
                reference: false,
            });
            let points: Vec<(f64, f64)> = b
                .rows
                .iter()
                .filter_map(|r| r.bandwidth_gbs().map(|g| (r.size as f64, g)))
                .collect();
            if !points.is_empty() {
                bw.push(Series {
                    name,
                    points,
                    reference: false,
                });
            }
        }
    }
    if let Some(run) = runs.first() {
        let (lo, hi) = x_range(&lat);
        let memcpy: Vec<(usize, f64)> = run
            .memcpy
            .iter()
            .copied()
            .filter(|&(s, _)| (s as f64) >= lo && (s as f64) <= hi)
            .collect();
        if !memcpy.is_empty() {
            lat.push(Series {
                name: "memcpy, one core".into(),
                points: memcpy.iter().map(|&(s, us)| (s as f64, us)).collect(),
                reference: true,
            });
            bw.push(Series {
                name: "memcpy, one core".into(),
                points: memcpy
                    .iter()
                    .map(|&(s, us)| (s as f64, s as f64 / us / 1e3))
                    .collect(),
                reference: true,
            });
        }
        if let (Some(c), false) = (run.cacheline_us, lat.is_empty()) {
            lat.push(Series {
                name: "cache-line ping-pong".into(),
                points: vec![(lo, c), (hi, c)],
                reference: true,
            });
        }
    }
    (lat, bw)
}

fn x_range(s: &[Series]) -> (f64, f64) {
    let xs = s.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(0.0, f64::max);
    (lo, hi)
}

fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0) {
        return (1.0, 10.0);
    }
    if hi <= lo {
        (lo / 2.0, lo * 2.0)
    } else {
        (lo / 1.5, hi * 1.5)
    }
}

/// Log-scale ticks fall on powers of ten: `10 B`, `1 kB`, `10 MB`.
fn decimal_bytes(x: f64) -> String {
    let units = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in units {
        if x >= scale * 0.999 {
            return format!("{} {unit}", short_number(x / scale));
        }
    }
    format!("{} B", short_number(x))
}

/// `0.001`, `0.5`, `12`, `300`: no trailing zeros.
fn short_number(y: f64) -> String {
    let text = if y >= 10.0 {
        format!("{y:.0}")
    } else {
        format!("{y:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Draws `runs` into the PNG at `path`.
pub fn draw(path: &Path, runs: &[RunResult]) -> Result<()> {
    let (lat, bw) = series(runs);
    if lat.iter().all(|s| s.reference) {
        return Err(BenchError::Plot {
            path: path.to_path_buf(),
            message: "nothing to plot: none of the benchmarks sweeps message sizes".into(),
        });
    }
    draw_panels(path, runs, &lat, &bw).map_err(|message| BenchError::Plot {
        path: path.to_path_buf(),
        message,
    })
}

#[cfg(feature = "plot")]
fn draw_panels(
    path: &Path,
    runs: &[RunResult],
    lat: &[Series],
    bw: &[Series],
) -> std::result::Result<(), String> {
    use plotters::prelude::*;
    use plotters::style::register_font;

    let err = |e: &dyn std::fmt::Display| e.to_string();
    register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded font could not be read".to_string())?;
    let title = runs.first().map_or_else(String::new, |r| {
        let engines: Vec<&str> = runs.iter().map(|r| r.routes.as_str()).collect();
        format!("shmem-bench, {} PEs, {}", r.pes, engines.join(" vs "))
    });
    let root = BitMapBackend::new(path, (1400, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(&title, ("sans-serif", 24))
        .map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(700);
    let panels = [
        (&left, lat, "latency (median, us per operation)", "us"),
        (&right, bw, "bandwidth at the median (GB/s)", "GB/s"),
    ];
    for (area, series, caption, unit) in panels {
        if series.is_empty() {
            continue;
        }
        let (x0, x1) = x_range(series);
        let (x0, x1) = padded(x0, x1);
        let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let (y0, y1) = padded(
            ys.clone()
                .filter(|y| *y > 0.0)
                .fold(f64::INFINITY, f64::min),
            ys.fold(0.0, f64::max),
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("message size")
            .y_desc(unit)
            .x_label_formatter(&|x| decimal_bytes(*x))
            .y_label_formatter(&|y| short_number(*y))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        let mut colour = 0;
        for s in series {
            let style = if s.reference {
                // memcpy black, the cache-line floor grey.
                let shade = if s.name.starts_with("memcpy") { 0 } else { 150 };
                RGBColor(shade, shade, shade).stroke_width(2)
            } else {
                colour += 1;
                Palette99::pick(colour - 1).stroke_width(2)
            };
            let legend_style = style;
            let anno = if s.reference {
                chart
                    .draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 5, style))
                    .map_err(|e| err(&e))?
            } else {
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), style))
                    .map_err(|e| err(&e))?;
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, style.filled())))
                    .map_err(|e| err(&e))?
            };
            anno.label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], legend_style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(not(feature = "plot"))]
fn draw_panels(
    _path: &Path,
    _runs: &[RunResult],
    _lat: &[Series],
    _bw: &[Series],
) -> std::result::Result<(), String> {
    Err("this shmem-bench was built without the `plot` feature".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels() {
        assert_eq!(decimal_bytes(10.0), "10 B");
        assert_eq!(decimal_bytes(1000.0), "1 kB");
        assert_eq!(decimal_bytes(1e7), "10 MB");
        assert_eq!(short_number(0.001), "0.001");
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(short_number(300.0), "300");
    }
}
