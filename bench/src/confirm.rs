//! Part 5: what confirmation costs (docs/architecture.md, "Verdicts").
//! Three replicas in three zones on the kit's control plane, the third in a
//! network namespace of its own (webchecker_kit::netns), 600 checkers at
//! 2 s on one witness. Twice, on fresh replicas: confirmation on (the
//! default) and off (`--confirm-failures=false`); each time 30 s healthy,
//! then 30 s with the third replica's path to the targets cut. Per phase:
//! owner probes and confirmation probes per second (the witness's log),
//! CPU seconds of the replicas per 1,000 probes, status writes per 100
//! probes, and the most checkers Ready=False at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::ListParams;
use kube::{Api, Client};
use webchecker::api::WebChecker;
use webchecker_kit::fleet::Fleet;
use webchecker_kit::netns::ZonedReplicas;
use webchecker_kit::{Cluster, Operator, Witness, metric};

use crate::common::{Res, err};
use crate::report::Section;
use crate::sys::{clk_tck, cpu_ticks};

const CHECKERS: usize = 600;
const INTERVAL: u32 = 2;
const PHASE: Duration = Duration::from_secs(30);

struct Row {
    confirm: bool,
    cut: bool,
    probes_s: f64,
    confirm_probes_s: f64,
    cpu_per_1000: f64,
    writes_per_100: f64,
    ready_false: usize,
}

fn cpu_s(ops: &[Operator]) -> f64 {
    ops.iter()
        .filter_map(|o| o.child.as_ref().map(|c| c.id()))
        .filter_map(cpu_ticks)
        .map(|(u, s)| (u + s) as f64)
        .sum::<f64>()
        / clk_tck()
}

async fn writes(ops: &[Operator]) -> f64 {
    let mut total = 0.0;
    for o in ops {
        let text = o.metrics().await.unwrap_or_default();
        total +=
            metric(&text, "webchecker_status_writes_total", &[("result", "ok")]).unwrap_or(0.0);
    }
    total
}

async fn ready_false(client: &Client, ns: &str) -> usize {
    let api: Api<WebChecker> = Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|wc| {
            wc.status
                .as_ref()
                .and_then(|s| s.condition("Ready"))
                .is_some_and(|c| c.status == "False")
        })
        .count()
}

/// One phase on a settled fleet.
async fn phase(fleet: &Fleet, confirm: bool, cut: bool) -> Row {
    let (w0, c0) = (writes(&fleet.ops).await, cpu_s(&fleet.ops));
    let confirmations0 = fleet.witness.confirmation_hits().len();
    let from = Instant::now();
    let mut most = 0;
    while from.elapsed() < PHASE {
        most = most.max(ready_false(&fleet.client, &fleet.ns).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let took = from.elapsed().as_secs_f64();
    let probes = fleet.witness.hits_since(from).len() as f64;
    let confirmations = (fleet.witness.confirmation_hits().len() - confirmations0) as f64;
    let cpu = cpu_s(&fleet.ops) - c0;
    let w = writes(&fleet.ops).await - w0;
    Row {
        confirm,
        cut,
        probes_s: probes / took,
        confirm_probes_s: confirmations / took,
        cpu_per_1000: 1000.0 * cpu / (probes + confirmations).max(1.0),
        writes_per_100: 100.0 * w / probes.max(1.0),
        ready_false: most,
    }
}

async fn run(cl: &'static Cluster, confirm: bool) -> Res<Vec<Row>> {
    let ns = cl.namespace(if confirm { "confirm-on" } else { "confirm-off" });
    let tag = if confirm { "on" } else { "off" };
    let flag = format!("--confirm-failures={confirm}");
    let ZonedReplicas {
        netns,
        proxy: _proxy,
        ops,
    } = ZonedReplicas::spawn(cl, &ns, tag, &[flag.as_str(), "--log-level=info"]).await;
    let host = netns.host_ip.clone();
    let witness = Witness::start_on(&host).await;
    witness.set_lean();
    let fleet = Fleet::start_with_witness(cl, ns.clone(), ops, witness, CHECKERS, INTERVAL).await;
    // A first interval of status writes after start-up is not steady state.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let healthy = phase(&fleet, confirm, false).await;
    netns.cut_tcp_to(&[fleet.witness.addr.port()]);
    let cut = phase(&fleet, confirm, true).await;
    netns.heal();
    let namespaces: Api<Namespace> = Api::all(fleet.client.clone());
    let _ = namespaces.delete(&ns, &Default::default()).await;
    Ok(vec![healthy, cut])
}

pub async fn part(cl: &'static Cluster) -> Res<Section> {
    let mut rows = Vec::new();
    for confirm in [true, false] {
        rows.extend(crate::common::caught(run(cl, confirm)).await.map_err(|e| {
            err(format!(
                "confirmation {}: {e}",
                if confirm { "on" } else { "off" }
            ))
        })?);
    }
    let mut body = format!(
        "Three replicas in three zones, the third in a network namespace of its own; {CHECKERS} \
         checkers at {INTERVAL} s on one witness. Each row is {} s on fresh replicas; \"cut\" drops \
         (nftables, inside its namespace) the third replica's packets to the witness, while its \
         API server and peers stay reachable. CPU is the three replicas' user + system time.\n\n\
         | confirmation | path of the third replica | owner probes/s | confirmation probes/s | CPU s per 1,000 probes | status writes per 100 probes | most checkers Ready=False at once |\n\
         |---|---|---|---|---|---|---|\n",
        PHASE.as_secs()
    );
    for r in &rows {
        body.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} | {:.2} | {} |\n",
            if r.confirm { "on" } else { "off" },
            if r.cut { "cut" } else { "healthy" },
            r.probes_s,
            r.confirm_probes_s,
            r.cpu_per_1000,
            r.writes_per_100,
            r.ready_false
        ));
    }
    let on_healthy = &rows[0];
    let off_healthy = &rows[2];
    let (on_cut, off_cut) = (&rows[1], &rows[3]);
    let cpu_ratio = on_healthy.cpu_per_1000 / off_healthy.cpu_per_1000.max(1e-9);
    body.push_str(&format!(
        "\nHealthy, confirmation costs {:.2}x the CPU per probe of none and {:.1} extra probes/s; \
         during the cut it adds {:.1} confirmation probes/s and keeps {} checkers from turning \
         Ready=False ({} with it off).\n",
        cpu_ratio,
        on_healthy.confirm_probes_s,
        on_cut.confirm_probes_s,
        off_cut.ready_false.saturating_sub(on_cut.ready_false),
        off_cut.ready_false
    ));
    let summary = vec![format!(
        "Confirmation: healthy, {:.2}x the CPU per probe of none, {:.1} confirmation probes/s; \
         one replica's path cut: {} checkers Ready=False with it, {} without",
        cpu_ratio, on_healthy.confirm_probes_s, on_cut.ready_false, off_cut.ready_false
    )];
    Ok(Section { body, summary })
}
