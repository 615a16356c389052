//! The report's PNG plots (plotters, a pure-Rust font rasteriser): the font,
//! writing a figure to a PNG file, the colours the figures share, and the
//! figures of the parts whose data are plain (part 1's runs, part 7's
//! curves). A part with a data type of its own draws its figure itself with
//! [`save_png`] (ring.rs, failover.rs).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::common::{Res, err};
use crate::engines::EngineRun;
use crate::stats::fmt_int;

/// Registers a TrueType font for the plots' text; false when none is found
/// (the plots are skipped then).
pub fn register_font() -> bool {
    let mut candidates: Vec<PathBuf> = std::env::var("BENCH_FONT")
        .ok()
        .map(PathBuf::from)
        .into_iter()
        .collect();
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    ] {
        candidates.push(PathBuf::from(p));
    }
    for p in candidates {
        if let Ok(bytes) = std::fs::read(&p) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// The colours of the figures' series.
pub const BLUE: RGBColor = RGBColor(31, 119, 180);
pub const ORANGE: RGBColor = RGBColor(255, 127, 14);
pub const GREEN: RGBColor = RGBColor(44, 160, 44);

/// A figure's drawing area (or a part of it).
pub type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Draws a `w` x `h` figure on white with `draw` and writes it to `path`.
pub fn save_png(
    path: &Path,
    (w, h): (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Result<(), Box<dyn Error>>,
) -> Res<()> {
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        draw(&root).map_err(|e| err(e.to_string()))?;
        root.present().map_err(|e| err(e.to_string()))?;
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let file = std::fs::File::create(path)?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc.write_header()?;
    wr.write_image_data(&buf)?;
    Ok(())
}

pub fn probe_efficiency(
    png: &Path,
    runs: &BTreeMap<usize, Vec<(EngineRun, EngineRun)>>,
) -> Res<()> {
    save_png(png, (900, 420), |root| {
        let max = runs
            .values()
            .flatten()
            .map(|r| r.0.per_cpu_s().max(r.1.per_cpu_s()))
            .fold(0.0, f64::max)
            * 1.15;
        let n = runs.len();
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Probes per CPU-second of the prober process (each dot: one round)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..max)?;
        let labels: Vec<usize> = runs.keys().copied().collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round() as i64;
                if (x - i as f64).abs() < 0.01 && i >= 0 && (i as usize) < labels.len() {
                    format!("C = {}", labels[i as usize])
                } else {
                    String::new()
                }
            })
            .y_desc("probes / CPU-s")
            .y_label_formatter(&|y| fmt_int(*y))
            .draw()?;
        let (blue, orange) = (BLUE, ORANGE);
        let pts = |ours: bool| -> Vec<(f64, f64)> {
            runs.values()
                .enumerate()
                .flat_map(|(i, runs)| {
                    runs.iter().enumerate().map(move |(k, r)| {
                        let (off, v) = if ours {
                            (-0.15, r.0.per_cpu_s())
                        } else {
                            (0.15, r.1.per_cpu_s())
                        };
                        (i as f64 + off + 0.02 * k as f64, v)
                    })
                })
                .collect()
        };
        chart
            .draw_series(
                pts(true)
                    .into_iter()
                    .map(|p| Circle::new(p, 4, blue.filled())),
            )?
            .label("webchecker prober")
            .legend(move |(x, y)| Circle::new((x + 5, y), 4, blue.filled()));
        chart
            .draw_series(
                pts(false)
                    .into_iter()
                    .map(|p| Circle::new(p, 4, orange.filled())),
            )?
            .label("blackbox_exporter")
            .legend(move |(x, y)| Circle::new((x + 5, y), 4, orange.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        Ok(())
    })
}

/// Part 7: time to settle each step, one line per simulated scenario
/// (labelled), log scale.
pub fn rebalance_curve(png: &Path, runs: &[(String, Vec<(String, f64)>)]) -> Res<()> {
    let steps: Vec<String> = runs
        .first()
        .map(|r| r.1.iter().map(|s| s.0.clone()).collect())
        .unwrap_or_default();
    let all = runs.iter().flat_map(|r| r.1.iter().map(|s| s.1));
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = ((lo * 0.7).max(0.05), (hi * 1.5).max(1.0));
    save_png(png, (1000, 520), |root| {
        let mut c = ChartBuilder::on(root)
            .caption(
                "Simulated rebalance: time to settle each step",
                ("sans-serif", 20),
            )
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.2f64..(steps.len() as f64 - 0.8), (lo..hi).log_scale())?;
        let names = steps.clone();
        c.configure_mesh()
            .x_desc("members")
            .y_desc("seconds (log)")
            .x_labels(steps.len())
            .x_label_formatter(&move |x| {
                let i = x.round();
                if (x - i).abs() < 0.05 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.1}"))
            .draw()?;
        for (i, (label, pts)) in runs.iter().enumerate() {
            let col = Palette99::pick(i).to_rgba();
            let st = ShapeStyle::from(col).stroke_width(2);
            let xy: Vec<(f64, f64)> = pts
                .iter()
                .enumerate()
                .map(|(j, p)| (j as f64, p.1))
                .collect();
            c.draw_series(LineSeries::new(xy.clone(), st))?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], st));
            c.draw_series(xy.into_iter().map(|p| Circle::new(p, 3, st.filled())))?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        Ok(())
    })
}
