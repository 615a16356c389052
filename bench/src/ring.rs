//! Part 2: ring quality by simulation (pure `webchecker::coordination::ring`): bounded
//! loads against plain rendezvous hashing, replicas added one at a time.

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;
use webchecker::coordination::ring;

use crate::common::{Cfg, Res};
use crate::plots::{Area, BLUE, GREEN, ORANGE, save_png};
use crate::report::Section;
use crate::stats::{fmt_int, median, minmax};

/// One step N -> N+1 over the salts.
pub struct RingRow {
    pub n: usize,
    pub bounded_max: Vec<f64>,
    pub plain_max: Vec<f64>,
    pub bounded_moved: Vec<f64>,
    pub plain_moved: Vec<f64>,
}

fn ring_members(salt: u64, count: usize) -> Vec<String> {
    // Like Deployment pod names: a ReplicaSet hash and a random suffix.
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..count)
        .map(|i| {
            let mut h = ring::mix64((salt << 32) ^ (i as u64 + 1));
            let mut suffix = String::new();
            for _ in 0..5 {
                suffix.push(ALPHA[(h % ALPHA.len() as u64) as usize] as char);
                h /= ALPHA.len() as u64;
            }
            format!("webchecker-operator-7d9f8c6b5-{suffix}")
        })
        .collect()
}

/// One step N -> N+1: (N, largest/mean bounded, largest/mean plain, moved bounded, moved plain).
type RingStep = (usize, f64, f64, f64, f64);

fn ring_sim(m: usize, salt: u64, n_max: usize) -> Vec<RingStep> {
    let members = ring_members(salt, n_max + 1);
    let keys: Vec<String> = (0..m)
        .map(|i| format!("team-{}-{salt}/checker-{i}", i % 13))
        .collect();
    let mut placements: Vec<ring::Placement> = keys
        .iter()
        .map(|k| ring::Placement {
            key: k.clone(),
            holder: None,
        })
        .collect();
    let index: HashMap<String, usize> = keys
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, k)| (k, i))
        .collect();
    let apply = |placements: &mut Vec<ring::Placement>, moves: &[ring::Move]| {
        for mv in moves {
            let (key, to) = match mv {
                ring::Move::Assign { key, to } | ring::Move::Drain { key, to, .. } => (key, to),
            };
            placements[index[key]].holder = Some(to.clone());
        }
    };
    let moves = ring::plan(&members[..2], &placements);
    apply(&mut placements, &moves);
    let prefs = |n: usize| -> Vec<usize> {
        keys.iter()
            .map(|k| {
                let p = ring::preferred(&members[..n], k).unwrap();
                members.iter().position(|m| m == p).unwrap()
            })
            .collect()
    };
    let mut plain_now = prefs(2);
    let mut rows = Vec::new();
    for n in 2..=n_max {
        let mean = m as f64 / n as f64;
        let mut load: HashMap<&str, usize> = HashMap::new();
        for p in &placements {
            *load.entry(p.holder.as_deref().unwrap()).or_default() += 1;
        }
        let bounded_max = *load.values().max().unwrap() as f64 / mean;
        let mut plain_load = vec![0usize; n];
        for &i in &plain_now {
            plain_load[i] += 1;
        }
        let plain_max = *plain_load.iter().max().unwrap() as f64 / mean;
        let moves = ring::plan(&members[..n + 1], &placements);
        let bounded_moved = moves.len() as f64 / m as f64;
        apply(&mut placements, &moves);
        let plain_next = prefs(n + 1);
        let plain_moved = plain_now
            .iter()
            .zip(&plain_next)
            .filter(|(a, b)| a != b)
            .count() as f64
            / m as f64;
        plain_now = plain_next;
        rows.push((n, bounded_max, plain_max, bounded_moved, plain_moved));
    }
    rows
}

pub fn part(cfg: &Cfg, img: &Path) -> Res<Section> {
    let n_max = 50;
    let salts: u64 = if cfg.quick { 2 } else { 5 };
    let results = simulate(salts, n_max);
    let mut s = method(n_max, salts);
    for (m, rows) in results.iter().rev() {
        s.push_str(&table(*m, rows, n_max));
    }
    s.push_str(
        "Why each step moves about the ideal: `plan` gives every member floor(M/N) checkers and the M mod N \
         members that hold the most one more, and a checker moves only when its owner left or is over its target. \
         From a settled assignment a step N -> N+1 therefore leaves only the new replica under its target, and the \
         others shed exactly its share, floor(M/(N+1)) checkers, all towards it.\n\n",
    );
    let r10 = &results[&10_000];
    let r1 = &results[&1_000];
    let summary = vec![summary(r10, r1, n_max)];

    let plotted = plot(&img.join("ring.png"), r10, r1, n_max);
    if plotted.is_ok() {
        s.push_str("![ring quality](img/ring.png)\n");
    }
    Ok(Section { body: s, summary })
}

/// The chain N -> N+1 for N = 2..`n_max` at M = 10,000 and 1,000, with
/// `salts` name sets each (a thread per salt): M -> a row per step.
fn simulate(salts: u64, n_max: usize) -> BTreeMap<usize, Vec<RingRow>> {
    let mut results: BTreeMap<usize, Vec<RingRow>> = BTreeMap::new();
    let t = Instant::now();
    for m in [10_000usize, 1_000] {
        let per_salt: Vec<Vec<RingStep>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..salts)
                .map(|salt| s.spawn(move || ring_sim(m, salt + 1, n_max)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let rows = (0..per_salt[0].len())
            .map(|i| RingRow {
                n: per_salt[0][i].0,
                bounded_max: per_salt.iter().map(|r| r[i].1).collect(),
                plain_max: per_salt.iter().map(|r| r[i].2).collect(),
                bounded_moved: per_salt.iter().map(|r| r[i].3).collect(),
                plain_moved: per_salt.iter().map(|r| r[i].4).collect(),
            })
            .collect();
        results.insert(m, rows);
    }
    eprintln!(
        "bench: ring simulation took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    results
}

/// Part 2's method paragraph.
fn method(n_max: usize, salts: u64) -> String {
    format!(
        "Pure simulation of `webchecker::coordination::ring::plan` (rendezvous hashing with bounded loads: every member holds \
         floor(M/N) or ceil(M/N); sticky owners) against plain rendezvous hashing (`webchecker::coordination::ring::preferred`, \
         no bound). Replicas are added one at a time, N -> N+1 for N = 2..{n_max}, each step starting from the \
         assignment the previous steps settled to (a chain, so drift between loads would show); drains complete \
         at once. \
         Member names look like Deployment pods, keys like `team-3/checker-17`; {salts} different name sets (salts) \
         per M, the table shows the median over salts and, for the largest shard, the worst salt. \
         *moved* is the fraction of checkers that change owner going N -> N+1; the least any scheme can move is \
         1/(N+1).\n\n"
    )
}

/// The table of `m` checkers (some of the steps), the worst over all steps
/// and salts, and what the steps moved in total.
fn table(m: usize, rows: &[RingRow], n_max: usize) -> String {
    let show = [2usize, 3, 4, 5, 7, 10, 15, 20, 25, 30, 40, 50];
    let mut s = format!(
        "**M = {}**\n\n| N | largest/mean bounded (worst) | largest/mean plain (worst) | moved bounded | moved plain | ideal 1/(N+1) |\n|---:|---:|---:|---:|---:|---:|\n",
        fmt_int(m as f64)
    );
    for r in rows.iter().filter(|r| show.contains(&r.n)) {
        s.push_str(&format!(
            "| {} | {:.3} ({:.3}) | {:.3} ({:.3}) | {:.4} | {:.4} | {:.4} |\n",
            r.n,
            median(&r.bounded_max),
            minmax(&r.bounded_max).1,
            median(&r.plain_max),
            minmax(&r.plain_max).1,
            median(&r.bounded_moved),
            median(&r.plain_moved),
            1.0 / (r.n + 1) as f64
        ));
    }
    let worst_b = worst(rows, |r| &r.bounded_max);
    let worst_p = worst(rows, |r| &r.plain_max);
    let over_ideal_b = worst_over_ideal(rows, |r| &r.bounded_moved);
    let over_ideal_p = worst_over_ideal(rows, |r| &r.plain_moved);
    s.push_str(&format!(
        "\nOver all N = 2..{n_max} and salts: largest shard at most **{:.3}x** the mean with bounded loads, \
         **{:.3}x** with plain rendezvous; moved at most **{:.2}x** the ideal 1/(N+1) with bounded loads, {:.2}x plain.\n\n",
        worst_b, worst_p, over_ideal_b, over_ideal_p
    ));
    let total_ideal: f64 = rows.iter().map(|r| 1.0 / (r.n + 1) as f64).sum();
    let total_b: f64 = rows.iter().map(|r| median(&r.bounded_moved)).sum();
    let total_p: f64 = rows.iter().map(|r| median(&r.plain_moved)).sum();
    let empty = rows
        .iter()
        .filter(|r| median(&r.bounded_moved) == 0.0)
        .count();
    s.push_str(&format!(
        "Summed over the {} scale-out steps, bounded loads moved {:.3}x what the ideal moves in total (plain: {:.3}x). \
         Steps at which the new replica received nothing: {empty}.\n\n",
        rows.len(),
        total_b / total_ideal,
        total_p / total_ideal
    ));
    s
}

/// The largest of `f` over all steps and salts.
fn worst(rows: &[RingRow], f: fn(&RingRow) -> &Vec<f64>) -> f64 {
    rows.iter().map(|r| minmax(f(r)).1).fold(0.0, f64::max)
}

/// The largest of `f` x (N+1) over all steps and salts: a fraction moved
/// relative to the ideal 1/(N+1).
fn worst_over_ideal(rows: &[RingRow], f: fn(&RingRow) -> &Vec<f64>) -> f64 {
    rows.iter()
        .map(|r| minmax(f(r)).1 * (r.n + 1) as f64)
        .fold(0.0, f64::max)
}

/// Part 2's summary line.
fn summary(r10: &[RingRow], r1: &[RingRow], n_max: usize) -> String {
    let total = |rows: &[RingRow]| {
        rows.iter().map(|r| median(&r.bounded_moved)).sum::<f64>()
            / rows.iter().map(|r| 1.0 / (r.n + 1) as f64).sum::<f64>()
    };
    format!(
        "Ring (simulation, N = 2..{n_max}): largest shard <= **{:.3}x** the mean at M = 10,000 ({:.3}x at M = 1,000) \
         with bounded loads vs up to {:.2}x ({:.2}x) with plain rendezvous hashing; scale-out N -> N+1 moves \
         {:.2}x the ideal 1/(N+1) in total over the steps ({:.2}x at M = 1,000), at most {:.2}x in one step at \
         M = 10,000 ({:.2}x at M = 1,000).",
        worst(r10, |r| &r.bounded_max),
        worst(r1, |r| &r.bounded_max),
        worst(r10, |r| &r.plain_max),
        worst(r1, |r| &r.plain_max),
        total(r10),
        total(r1),
        worst_over_ideal(r10, |r| &r.bounded_moved),
        worst_over_ideal(r1, |r| &r.bounded_moved),
    )
}

/// The figure: the largest shard (left) and what moves going N -> N+1
/// (right) against N, at M = 10,000 and 1,000.
fn plot(png: &Path, r10: &[RingRow], r1: &[RingRow], n_max: usize) -> Res<()> {
    save_png(png, (1200, 480), |root| {
        let areas = root.split_evenly((1, 2));
        largest_shard_panel(&areas[0], r10, r1, n_max)?;
        moved_panel(&areas[1], r10, r1, n_max)
    })
}

/// Largest shard / mean, median over salts, bounded loads and plain
/// rendezvous.
fn largest_shard_panel(
    area: &Area<'_>,
    r10: &[RingRow],
    r1: &[RingRow],
    n_max: usize,
) -> Result<(), Box<dyn Error>> {
    let top = r1
        .iter()
        .chain(r10.iter())
        .map(|r| median(&r.plain_max))
        .fold(1.0, f64::max)
        * 1.05;
    let mut c = ChartBuilder::on(area)
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
        let bs = ShapeStyle::from(BLUE).stroke_width(style);
        let ps = ShapeStyle::from(ORANGE).stroke_width(style);
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
    Ok(())
}

/// Moved going N -> N+1 relative to the ideal 1/(N+1): bounded loads at
/// both M as lines, plain rendezvous at M = 10,000 as dots.
fn moved_panel(
    area: &Area<'_>,
    r10: &[RingRow],
    r1: &[RingRow],
    n_max: usize,
) -> Result<(), Box<dyn Error>> {
    let top = r1
        .iter()
        .chain(r10.iter())
        .map(|r| median(&r.bounded_moved).max(median(&r.plain_moved)) * (r.n + 1) as f64)
        .fold(1.5, f64::max)
        * 1.05;
    let mut c = ChartBuilder::on(area)
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
    for (rows, m, w, col) in [(r10, "10,000", 2u32, BLUE), (r1, "1,000", 1u32, GREEN)] {
        let st = ShapeStyle::from(col).stroke_width(w);
        c.draw_series(LineSeries::new(
            rows.iter()
                .map(|r| (r.n as f64, median(&r.bounded_moved) * (r.n + 1) as f64)),
            st,
        ))?
        .label(format!("bounded loads, M = {m}"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], st));
    }
    let ps = ShapeStyle::from(ORANGE).stroke_width(1);
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
    Ok(())
}
