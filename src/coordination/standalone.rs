//! A sharder on its own, for the bench's simulation of rebalancing at scale
//! (bench/src/sim): the same [`Sharder`] a replica runs once elected, here
//! leading from the start, without probing or a Lease of its own, on the
//! client it is given (a fake API server in the simulation). Members are
//! whatever member Leases that client lists.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;

use super::LeaseNames;
use super::membership::MembershipMetrics;
use super::membership::{Advert, LeaseAt, Membership};
use super::shard::ShardMetrics;
use super::shard::{LeaderGate, MemberView, Peers, Sharder};
use crate::error::Error;
use crate::kubeio::client::Clients;
use crate::observe::metrics::WatchMetrics;

/// Lease timings of the sharder alone.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Runs the member view and the sharder on the current runtime until either
/// fails. Leadership never lapses: the gate is renewed every retry period.
pub async fn run_sharder(
    client: Client,
    identity: &str,
    lease_namespace: &str,
    t: Timings,
) -> Result<(), Error> {
    let registry = prometheus::Registry::new();
    let metrics = Arc::new(ShardMetrics::register(&registry));
    let watches = Arc::new(WatchMetrics::register(&registry));
    let view = MemberView::new(t.lease_duration);
    let leader = LeaderGate::new(t.renew_deadline);
    leader.renewed(Instant::now());
    let renew = {
        let leader = leader.clone();
        async move {
            let mut tick = tokio::time::interval(t.retry_period);
            loop {
                tick.tick().await;
                leader.renewed(Instant::now());
            }
        }
    };
    let sharder = Sharder {
        clients: Clients {
            requests: client.clone(),
            watches: client.clone(),
            leases: client.clone(),
        },
        identity: identity.to_string(),
        lease_names: LeaseNames::default(),
        watch_namespace: None,
        lease_namespace: lease_namespace.to_string(),
        view: view.clone(),
        membership: Membership::new(
            identity.to_string(),
            LeaseAt::new(lease_namespace, &LeaseNames::default().member(identity)),
            t.lease_duration,
            t.renew_deadline,
            t.retry_period,
            Arc::new(MembershipMetrics::register(&registry)),
            Advert::default(),
        ),
        leader,
        peers: Peers::new(identity, false),
        metrics: metrics.clone(),
        watches: watches.clone(),
        retry_period: t.retry_period,
    };
    tokio::select! {
        r = view.run(client, lease_namespace.to_string(), LeaseNames::default(), (metrics, watches)) => r,
        r = sharder.run() => r,
        () = renew => Ok(()),
    }
}
