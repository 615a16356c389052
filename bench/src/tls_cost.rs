//! Part 1's tables about what TLS costs: where a TLS probe's CPU goes in our
//! prober (kernel, key exchange, signature verification, the rest), our
//! prober with each rustls provider compiled in, and the ratios against the
//! newest blackbox_exporter beside Debian's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::common::{Cfg, Res, err};
use crate::engines::{Aim, EngineRun, Proto, Worker, run_ours};
use crate::runs::{AllRuns, CONCURRENCIES, Ratios, cores, pairs, timings};
use crate::stats::{fmt_int, median, minmax};

/// What the timed provider counted in one run of a timed worker.
pub struct Timed {
    pub run: EngineRun,
    /// Key exchange and signature verification CPU, ns.
    pub kx_ns: f64,
    pub sig_ns: f64,
    pub kx_calls: f64,
    pub sig_calls: f64,
}

/// (protocol, provider's place in the bench's list, provider, concurrency) -> the timed run.
pub type Split = BTreeMap<(Proto, usize, String, usize), Timed>;

/// One run per provider, TLS protocol and concurrency of a worker whose
/// provider times its key exchange and signature verification (crypto.rs).
/// Not part of the ratios: the timing itself costs a little.
pub fn measure_split(
    providers: &[&str],
    urls: &[(Proto, String)],
    cas: &BTreeMap<Proto, PathBuf>,
    cfg: &Cfg,
) -> Res<Split> {
    let (warm, d) = timings(cfg);
    let mut split = Split::new();
    for (i, p) in providers.iter().enumerate() {
        let mut w = Worker::spawn(cores().2, &[p, "timed"])?;
        for (proto, url) in urls {
            let Some(ca) = cas.get(proto) else { continue };
            for &c in CONCURRENCIES {
                let aim = Aim {
                    url,
                    proto: *proto,
                    ca_file: Some(ca),
                };
                let run = run_ours(&mut w, &aim, c, warm, d)?;
                let cost = w.ask("cost")?;
                let n = |i: usize| -> Res<f64> {
                    cost.get(i)
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| err("prober worker: no cost"))
                };
                eprintln!(
                    "bench: probe {} C={c} {p} timed: {:.0}/cpu-s, kx {:.1} µs, sig {:.1} µs per probe",
                    proto.label(),
                    run.per_cpu_s(),
                    n(1)? / 1e3 / run.probes.max(1.0),
                    n(3)? / 1e3 / run.probes.max(1.0)
                );
                split.insert(
                    (*proto, i, p.to_string(), c),
                    Timed {
                        run,
                        kx_ns: n(1)?,
                        kx_calls: n(2)?,
                        sig_ns: n(3)?,
                        sig_calls: n(4)?,
                    },
                );
            }
        }
    }
    Ok(split)
}

/// Median CPU per probe (µs) of engine `e` at (proto, c): user, kernel.
fn per_probe(all: &AllRuns, e: usize, proto: Proto, c: usize) -> Option<(f64, f64)> {
    let runs: Vec<EngineRun> = all
        .get(&proto)?
        .get(&c)?
        .iter()
        .filter_map(|r| *r.get(e)?)
        .collect();
    if runs.is_empty() {
        return None;
    }
    let user: Vec<f64> = runs.iter().map(|r| r.user_us()).collect();
    let sys: Vec<f64> = runs.iter().map(|r| r.sys_us()).collect();
    Some((median(&user), median(&sys)))
}

/// The CPU split table: the parts the timed worker counted, against the CPU
/// per probe of the untimed worker of the same provider (engine `engines[p]`).
pub fn split_table(split: &Split, all: &AllRuns, engines: &BTreeMap<String, usize>) -> String {
    let mut s = String::from(
        "\nWhere a TLS probe's CPU goes in our prober: CPU per probe and the kernel's part (stime) are the untimed \
         worker's (the table above, median over rounds); key exchange (X25519: key generation and the shared \
         secret) and signature verification (the handshake's signature; the chain's signatures only when the \
         verified-chain cache misses) are counted in one more run of a worker whose provider wraps them in \
         thread CPU clocks (`CLOCK_THREAD_CPUTIME_ID`); the rest of user space is the difference: the record \
         layer, handshake hashing and key schedule, the chain cache's lookup, HTTP, the runtime.\n\n\
         | protocol | provider | C | CPU per probe | kernel | key exchange | signature verification | rest of user space | per probe: key exchanges / signatures | timed worker's CPU per probe |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for ((proto, _, provider, c), t) in split {
        let Some((user, sys)) = engines
            .get(provider)
            .and_then(|e| per_probe(all, *e, *proto, *c))
        else {
            continue;
        };
        let probes = t.run.probes.max(1.0);
        let total = user + sys;
        let kx = t.kx_ns / 1e3 / probes;
        let sig = t.sig_ns / 1e3 / probes;
        let cell = |us: f64| format!("{us:.1} µs ({:.0}%)", 100.0 * us / total);
        s.push_str(&format!(
            "| {} | {provider} | {c} | {total:.1} µs | {} | {} | {} | {} | {:.2} / {:.2} | {:.1} µs |\n",
            proto.label(),
            cell(sys),
            cell(kx),
            cell(sig),
            cell(user - kx - sig),
            t.kx_calls / probes,
            t.sig_calls / probes,
            1e6 * t.run.cpu_s / probes,
        ));
    }
    s
}

/// The operator's rustls provider (engine 0 of the rig).
const OPERATOR: &str = "aws-lc-rs";

/// Our prober with each provider (engines numbered as in the rig): probes
/// per CPU-second and the ratio to the operator's (engine 0), per round.
/// Returns the table and, per protocol, the median ratios by concurrency.
pub fn provider_table(
    all: &AllRuns,
    engines: &BTreeMap<String, usize>,
) -> (String, BTreeMap<(String, Proto), Vec<f64>>) {
    let mut s = String::from(
        "\nOur prober with each rustls provider (the same worker but for the provider, the same suites and key \
         exchange groups in the same order, X25519 first; rounds interleaved with the engines above); the operator's \
         is aws-lc-rs, the ratio is to it:\n\n\
         | protocol | C | provider | probes/CPU-s median (min–max) | ratio to aws-lc-rs median (min–max) | user per probe | kernel per probe | errors |\n\
         |---|---:|---|---:|---:|---:|---:|---:|\n",
    );
    let mut ratios: BTreeMap<(String, Proto), Vec<f64>> = BTreeMap::new();
    for (provider, &e) in engines {
        if e == 0 {
            continue;
        }
        for (proto, by_c) in pairs(all, e, 0) {
            for (c, runs) in by_c {
                let col = |f: &dyn Fn(&(EngineRun, EngineRun)) -> f64| -> Vec<f64> {
                    runs.iter().map(f).collect()
                };
                for (name, idx) in [(OPERATOR, 1), (provider.as_str(), 0)] {
                    let pick = |r: &(EngineRun, EngineRun)| if idx == 0 { r.0 } else { r.1 };
                    let v = col(&|r| pick(r).per_cpu_s());
                    let ratio = col(&|r| pick(r).per_cpu_s() / r.1.per_cpu_s());
                    let (lo, hi) = minmax(&v);
                    let (rlo, rhi) = minmax(&ratio);
                    s.push_str(&format!(
                        "| {} | {c} | {name} | {} ({}–{}) | {} | {:.1} µs | {:.1} µs | {:.0} |\n",
                        proto.label(),
                        fmt_int(median(&v)),
                        fmt_int(lo),
                        fmt_int(hi),
                        if idx == 0 {
                            format!("**{:.2}x** ({:.2}–{:.2})", median(&ratio), rlo, rhi)
                        } else {
                            "1".into()
                        },
                        median(&col(&|r| pick(r).user_us())),
                        median(&col(&|r| pick(r).sys_us())),
                        col(&|r| pick(r).errors).iter().sum::<f64>(),
                    ));
                    if idx == 0 {
                        ratios
                            .entry((provider.clone(), proto))
                            .or_default()
                            .push(median(&ratio));
                    }
                }
            }
        }
    }
    (s, ratios)
}

/// Ours against the newest blackbox_exporter (engine `e`); its ratios.
pub fn latest_table(all: &AllRuns, e: usize, version: &str) -> (String, Ratios) {
    let mut s = format!(
        "\nThe same rounds against blackbox_exporter {version} (the newest release the Go module proxy serves, \
         built by hack/build-probe-peers.sh; same configuration file and load):\n\n\
         | protocol | C | blackbox {version} probes/CPU-s median (min–max) | ratio ours/blackbox {version} median (min–max) | blackbox {version}/0.23 median | blackbox {version} user per probe | blackbox {version} kernel per probe | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut ratio_at = Ratios::new();
    let old = pairs(all, e, 1);
    for (proto, by_c) in pairs(all, 0, e) {
        for (c, runs) in by_c {
            let col = |f: &dyn Fn(&(EngineRun, EngineRun)) -> f64| -> Vec<f64> {
                runs.iter().map(f).collect()
            };
            let b = col(&|r| r.1.per_cpu_s());
            let ratio = col(&|r| r.0.per_cpu_s() / r.1.per_cpu_s());
            let vs_old: Vec<f64> = old
                .get(&proto)
                .and_then(|m| m.get(&c))
                .map(|v| {
                    v.iter()
                        .map(|r| r.0.per_cpu_s() / r.1.per_cpu_s())
                        .collect()
                })
                .unwrap_or_default();
            let (lo, hi) = minmax(&b);
            let (rlo, rhi) = minmax(&ratio);
            s.push_str(&format!(
                "| {} | {c} | {} ({}–{}) | **{:.1}x** ({:.1}–{:.1}) | {:.2}x | {:.1} µs | {:.1} µs | {:.0} |\n",
                proto.label(),
                fmt_int(median(&b)),
                fmt_int(lo),
                fmt_int(hi),
                median(&ratio),
                rlo,
                rhi,
                median(&vs_old),
                median(&col(&|r| r.1.user_us())),
                median(&col(&|r| r.1.sys_us())),
                col(&|r| r.1.errors).iter().sum::<f64>(),
            ));
            ratio_at
                .entry(proto)
                .or_default()
                .insert(c, (median(&ratio), rlo, rhi));
        }
    }
    (s, ratio_at)
}
