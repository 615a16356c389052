//! Part 1b: the checks that are not HTTP. Our prober's gRPC health check
//! (grpc://, grpcs://) and TCP connect check (tcp://) against
//! blackbox_exporter v0.28's grpc and tcp probers, probes per CPU-second of
//! the prober process, on part 1's machinery (probe.rs, engines.rs): the
//! same worker, load, pinning, rounds and tables. The peers are real:
//! grpc-go's health server and a blackbox_exporter newer than Debian's,
//! both built from the Go module proxy (webchecker_kit::peers).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use webchecker_kit::peers::{GrpcHealth, blackbox_exporter_bin};
use webchecker_kit::targets::TestCa;

use crate::common::{Cfg, Res, err, panic_text};
use crate::engines::Proto;
use crate::plots;
use crate::probe::{
    Rig, cpu_split_table, efficiency_table, goal_verdict, latency_table, list, measure_note,
    perf_profile, ratio_range, spawn_target, worst_concurrency,
};
use crate::report::Section;
use crate::runs::{CONCURRENCIES, cores, timings};
use crate::stats::minmax;
use crate::sys::{cmd_out, pin_process};

/// The bar: ours/blackbox probes per CPU-second, gRPC health in
/// plaintext and TCP connect.
const GOAL: f64 = 3.0;

/// blackbox_exporter's modules, one per protocol: the server overall (`""`)
/// over IPv4; over TLS the certificate verified against the test CA, the
/// server name being the target's host (127.0.0.1, an IP SAN), as ours does.
fn blackbox_config(ca: &Path) -> String {
    let grpc = "    prober: grpc\n    timeout: 5s\n    grpc:\n      service: \"\"\n      preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n";
    format!(
        "modules:\n  {}:\n{grpc}      tls: false\n  {}:\n{grpc}      tls: true\n      tls_config:\n        ca_file: {}\n  {}:\n    prober: tcp\n    timeout: 5s\n    tcp:\n      preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n",
        Proto::Grpc.module(),
        Proto::GrpcTls.module(),
        ca.display(),
        Proto::Tcp.module(),
    )
}

/// The gRPC health servers (plaintext, TLS with a certificate for 127.0.0.1
/// from a test CA) on `cpu`, and the CA's file. Blocks (the first use may
/// build the Go peers).
fn grpc_servers(work: &Path, cpu: Option<usize>) -> Res<(GrpcHealth, GrpcHealth, PathBuf)> {
    let ca = TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let (ca_file, cert, key) = (
        work.join("grpc-ca.pem"),
        work.join("grpc-cert.pem"),
        work.join("grpc-key.pem"),
    );
    std::fs::write(&ca_file, &ca.pem)?;
    std::fs::write(&cert, &leaf.cert_pem)?;
    std::fs::write(&key, &leaf.key_pem)?;
    let started = std::panic::catch_unwind(|| {
        let plain = GrpcHealth::start(&[("", "SERVING")], None, None);
        let tls = GrpcHealth::start(&[("", "SERVING")], Some((&cert, &key)), None);
        (plain, tls)
    });
    let (plain, tls) = started.map_err(|p| err(panic_text(&*p)))?;
    if let Some(c) = cpu {
        for pid in [plain.pid(), tls.pid()] {
            pin_process(pid, c);
        }
    }
    Ok((plain, tls, ca_file))
}

/// A version pinned in hack/versions.env (`KEY=1.2.3`).
fn pinned_version(key: &str) -> String {
    let env = std::fs::read_to_string(webchecker_kit::repo().join("hack/versions.env"));
    env.unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map_or_else(|| "?".into(), |v| v.trim().to_string())
}

/// Part 1b's method paragraph: the peers, what each engine does, how it is measured.
fn method(pinned: bool, bb_bin: &Path, bb_version: &str, rounds: usize, d: Duration) -> String {
    format!(
        "Peers: grpc-go's own health server (`health.NewServer()`, hack/tools/grpc-health, grpc-go {}), one \
         process in plaintext and one over TLS (a certificate for 127.0.0.1 from a test CA, ALPN h2), and for TCP \
         part 1's plain target (a tokio accept loop that closes once the client has){}. Ours: `grpc://` and \
         `grpcs://` hosts (one `grpc.health.v1.Health/Check` of the server overall, `\"\"`, per probe, on a new \
         connection, HTTP/2 by prior knowledge or ALPN h2) and `tcp://` with no steps (connect, then close), in part \
         1's `bench prober-worker`. Blackbox: `{bb_version}` (`{}`, built from the Go module proxy by \
         hack/build-probe-peers.sh), modules `prober: grpc` (`service: \"\"`, `preferred_ip_protocol: ip4`, \
         `tls: false`, or `tls: true` with `tls_config.ca_file`: a new `grpc.NewClient` and connection per probe) \
         and `prober: tcp` (connect, then close), `/probe` called over keep-alive connections by the bench's own \
         client{}. Over TLS both verify the server's certificate the same way: chain to the test CA (ours \
         `tls.caBundle`, blackbox `tls_config.ca_file`), name 127.0.0.1 (the target's host, an IP SAN; neither \
         sets a server name), a full handshake per probe (ours never resumes; grpc-go's client keeps no session \
         cache); neither skips verification. A probe whose answer is not SERVING (or whose connect fails) counts \
         as an error. {}",
        pinned_version("GRPC_GO_VERSION"),
        if pinned {
            ", each pinned to core 0"
        } else {
            ""
        },
        bb_bin.display(),
        if pinned { " (on core 0)" } else { "" },
        measure_note(pinned, rounds, d, "protocol and concurrency"),
    )
}

pub fn part(cfg: &Cfg, img: &Path) -> Res<Section> {
    let (pinned, target_cpu, _) = cores();
    std::fs::create_dir_all(&cfg.work)?;
    let bb_bin =
        std::panic::catch_unwind(blackbox_exporter_bin).map_err(|p| err(panic_text(&*p)))?;
    let bb_version = cmd_out(bb_bin.to_str().unwrap_or_default(), &["--version"]);
    let bb_version = bb_version.split(" (").next().unwrap_or_default();
    let (grpc, grpcs, ca) = grpc_servers(&cfg.work, target_cpu)?;
    // The TCP listener: part 1's plain HTTP target, an accept loop that
    // closes once the client has (a connect-only probe sends nothing).
    let (tcp_target, tcp_port, _) = spawn_target(Proto::Http1, target_cpu, &cfg.work)?;
    let urls = [
        (Proto::Grpc, format!("grpc://{}", grpc.addr())),
        (Proto::GrpcTls, format!("grpcs://{}", grpcs.addr())),
        (Proto::Tcp, format!("tcp://127.0.0.1:{tcp_port}")),
    ];
    let yaml = blackbox_config(&ca);
    let mut rig = Rig::start(&bb_bin, &yaml, &cfg.work, "blackbox-0.28")?;
    let runs = rig.measure(&urls, &BTreeMap::from([(Proto::GrpcTls, ca.clone())]), cfg)?;
    let (_, d) = timings(cfg);
    // Where our prober's CPU goes in the gRPC health check.
    let worst_c = worst_concurrency(&runs[&Proto::Grpc]);
    let profile = perf_profile(&mut rig.worker, &urls[0].1, worst_c, d, &cfg.work);
    drop((rig, tcp_target, grpc, grpcs));

    let mut s = method(pinned, &bb_bin, bb_version, cfg.rounds, d);
    let (table, ratio_at) = efficiency_table(&runs);
    s.push_str(&table);
    s.push_str(&latency_table(&runs));
    let (split, user_ratios) = cpu_split_table(&runs);
    s.push_str(&split);
    if let Some(p) = &profile {
        s.push_str(&format!("\n{p}\n"));
    }
    let mut verdicts = Vec::new();
    for proto in [Proto::Grpc, Proto::Tcp] {
        let (verdict, worst, best) = goal_verdict(&ratio_at[&proto], GOAL);
        s.push_str(&format!(
            "\nGoal: ours/blackbox probes per CPU-second >= {GOAL}x, {}: {verdict} (median ratios {worst:.1}x to {best:.1}x).\n",
            proto.label()
        ));
        verdicts.push(format!(
            "{} {} (goal >= {GOAL}x: {verdict})",
            proto.label(),
            ratio_range(&ratio_at[&proto])
        ));
    }
    let grpc_user = minmax(&user_ratios[&Proto::Grpc]);
    let summary = vec![format!(
        "Probe engine, checks that are not HTTP, vs blackbox_exporter {} (median of {} rounds at C = {}): {}, \
         gRPC health over TLS {} (verified handshakes on both sides), in probes per CPU-second. Our user-space CPU \
         per gRPC health probe is {:.1}x–{:.1}x smaller.",
        bb_version
            .split_whitespace()
            .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
            .unwrap_or("0.28"),
        cfg.rounds,
        list(CONCURRENCIES),
        verdicts.join(", "),
        ratio_range(&ratio_at[&Proto::GrpcTls]),
        grpc_user.0,
        grpc_user.1,
    )];
    let plotted =
        plots::probe_efficiency(&img.join("probe-efficiency-grpc.png"), &runs[&Proto::Grpc]);
    if plotted.is_ok() {
        s.push_str("\n![probes per CPU-second, gRPC health](img/probe-efficiency-grpc.png)\n");
    }
    Ok(Section { body: s, summary })
}
