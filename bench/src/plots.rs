//! The report's PNG plots (plotters, a pure-Rust font rasteriser): one
//! function per figure, fed the figures its part measured.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::failover::{DESIGN_BOUND, RollResult, SHARDING_BOUND};
use crate::probe::EngineRun;
use crate::ring::RingRow;
use crate::stats::{fmt_int, median};
use crate::{Res, err};

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

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn save_png(
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
        let blue = RGBColor(31, 119, 180);
        let orange = RGBColor(255, 127, 14);
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

pub fn ring(png: &Path, r10: &[RingRow], r1: &[RingRow], n_max: usize) -> Res<()> {
    save_png(png, (1200, 480), |root| {
        let areas = root.split_evenly((1, 2));
        let blue = RGBColor(31, 119, 180);
        let orange = RGBColor(255, 127, 14);
        let green = RGBColor(44, 160, 44);
        {
            let top = r1
                .iter()
                .chain(r10.iter())
                .map(|r| median(&r.plain_max))
                .fold(1.0, f64::max)
                * 1.05;
            let mut c = ChartBuilder::on(&areas[0])
                .caption(
                    "Largest shard / mean (median over salts)",
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(55)
                .build_cartesian_2d(2f64..n_max as f64, 0.95f64..top)?;
            c.configure_mesh()
                .x_desc("replicas N")
                .y_desc("largest / mean")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.2}"))
                .draw()?;
            for (rows, m, style) in [(r10, "10,000", 2u32), (r1, "1,000", 1u32)] {
                let bs = ShapeStyle::from(blue).stroke_width(style);
                let ps = ShapeStyle::from(orange).stroke_width(style);
                c.draw_series(LineSeries::new(
                    rows.iter().map(|r| (r.n as f64, median(&r.bounded_max))),
                    bs,
                ))?
                .label(format!("bounded loads, M = {m}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], bs));
                c.draw_series(LineSeries::new(
                    rows.iter().map(|r| (r.n as f64, median(&r.plain_max))),
                    ps,
                ))?
                .label(format!("plain rendezvous, M = {m}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ps));
            }
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.9))
                .draw()?;
        }
        {
            let top = r1
                .iter()
                .chain(r10.iter())
                .map(|r| median(&r.bounded_moved).max(median(&r.plain_moved)) * (r.n + 1) as f64)
                .fold(1.5, f64::max)
                * 1.05;
            let mut c = ChartBuilder::on(&areas[1])
                .caption(
                    "Moved going N -> N+1, relative to the ideal 1/(N+1)",
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(55)
                .build_cartesian_2d(2f64..n_max as f64, 0f64..top)?;
            c.configure_mesh()
                .x_desc("replicas N")
                .y_desc("moved x (N+1)")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.1}"))
                .draw()?;
            let ideal = ShapeStyle::from(BLACK).stroke_width(1);
            c.draw_series(LineSeries::new(
                vec![(2.0, 1.0), (n_max as f64, 1.0)],
                ideal,
            ))?
            .label("ideal 1/(N+1)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ideal));
            for (rows, m, w, col) in [(r10, "10,000", 2u32, blue), (r1, "1,000", 1u32, green)] {
                let st = ShapeStyle::from(col).stroke_width(w);
                c.draw_series(LineSeries::new(
                    rows.iter()
                        .map(|r| (r.n as f64, median(&r.bounded_moved) * (r.n + 1) as f64)),
                    st,
                ))?
                .label(format!("bounded loads, M = {m}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], st));
            }
            let ps = ShapeStyle::from(orange).stroke_width(1);
            c.draw_series(r10.iter().map(|r| {
                Circle::new(
                    (r.n as f64, median(&r.plain_moved) * (r.n + 1) as f64),
                    3,
                    ps.filled(),
                )
            }))?
            .label("plain rendezvous, M = 10,000")
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, ps.filled()));
            c.configure_series_labels()
                .position(SeriesLabelPosition::LowerLeft)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.9))
                .draw()?;
        }
        Ok(())
    })
}

pub fn rolling_restart(png: &Path, r: &RollResult) -> Res<()> {
    save_png(png, (1100, 460), |root| {
        let x1 = r.to + 2.0;
        let ymax = r.points.iter().map(|p| p.1).fold(DESIGN_BOUND, f64::max) + 3.0;
        let mut c = ChartBuilder::on(root)
            .caption(
                "Rolling restart: time since the previous probe of the same checker, per probe",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(-15f64..x1, 0f64..ymax)?;
        c.configure_mesh()
            .x_desc("seconds since the rolling restart began")
            .y_desc("gap (s)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        let blue = RGBColor(31, 119, 180).mix(0.35);
        c.draw_series(r.points.iter().map(|p| Circle::new(*p, 2, blue.filled())))?
            .label("probe (gap since the previous one)")
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, RGBColor(31, 119, 180).filled()));
        let red = ShapeStyle::from(RED).stroke_width(2);
        c.draw_series(LineSeries::new(
            vec![(-15.0, DESIGN_BOUND), (x1, DESIGN_BOUND)],
            red,
        ))?
        .label(format!("DESIGN bound {DESIGN_BOUND:.0} s"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], red));
        let purple = ShapeStyle::from(MAGENTA).stroke_width(1);
        c.draw_series(LineSeries::new(
            vec![(-15.0, SHARDING_BOUND), (x1, SHARDING_BOUND)],
            purple,
        ))?
        .label(format!("2 x lease {SHARDING_BOUND:.0} s"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], purple));
        let grey = ShapeStyle::from(BLACK.mix(0.5)).stroke_width(1);
        for (k, (t, label)) in r.events.iter().enumerate() {
            c.draw_series(LineSeries::new(vec![(*t, 0.0), (*t, ymax)], grey))?;
            c.draw_series(std::iter::once(Text::new(
                label.clone(),
                (*t + 0.3, ymax - 1.0 - 1.3 * (k % 2) as f64),
                ("sans-serif", 14),
            )))?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
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
