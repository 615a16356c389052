//! The owner's side: ask another replica to probe a checker whose failure
//! would turn it Ready=False, or each other zone to probe a checker with
//! `spec.locations`, and turn the replies into a [`Verdict`] or answers.
//!
//! Within one deadline a second member is asked when the first refused or
//! could not be reached (a member that said nothing in time may still be
//! probing: asking another then could put two probers in one zone). Why an
//! ask got no answer is for this replica's log, never for a checker's
//! status: it says what the operator lacks, not what the target does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;
use tracing::debug;

use super::choice::{Candidate, confirmers};
use super::tokens::TokenSource;
use super::zones::{ZoneAnswer, ZoneResult, zone_probers};
use super::{Ask, PATH, Place, Reply, Verdict};
use crate::coordination::shard::MemberView;

/// Members asked at most for one failure (the next one only when the first
/// refused or could not be reached, within the same deadline).
const ATTEMPTS: usize = 2;
/// Bytes of a reply read at most.
const REPLY_LIMIT: usize = 4096;
/// Asks out to one confirmer at once, at most (its listener admits twice
/// as many connections from one address); more wait for one to end.
pub const PER_CONFIRMER: usize = 16;

pub struct Asker {
    pub me: Candidate,
    view: Arc<MemberView>,
    tokens: TokenSource,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    /// Asks out, by confirmer address.
    out: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Why one member gave no probe result.
enum Miss {
    /// It did not probe (refused, or could not be reached): another member
    /// may be asked.
    NotProbed(String),
    /// No answer in time: it may still be probing.
    Late,
}

impl Asker {
    pub fn new(me: Candidate, view: Arc<MemberView>, tokens: TokenSource) -> Arc<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(4))
            .build(connector);
        Arc::new(Asker {
            me,
            view,
            tokens,
            http,
            out: Mutex::new(HashMap::new()),
        })
    }

    /// Keeps a token at hand, so the first failures after a cut do not wait
    /// for one, and says in the log and a metric when none can be made.
    pub async fn warm(&self) {
        loop {
            let wait = match self.tokens.token().await {
                Ok(_) => Duration::from_secs(60),
                Err(_) => super::tokens::RETRY_AFTER,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Where this replica runs.
    pub fn place(&self) -> Place {
        Place {
            replica: self.me.identity.clone(),
            zone: self.me.zone.clone(),
        }
    }

    /// The members as the view has them, with their listeners of asks (the
    /// main address of a member that advertises none).
    fn members(&self) -> Vec<Candidate> {
        self.view
            .places()
            .into_iter()
            .filter_map(|(identity, p)| {
                Some(Candidate {
                    identity,
                    address: p.confirm_address.or(p.address)?,
                    zone: p.zone,
                    node: p.node,
                })
            })
            .collect()
    }

    /// Asks one member in each of up to `others` other zones to probe
    /// `ask`'s checker now (crate::ask::zones), all at once, within
    /// `limit`: a zone's next member when its first did not probe. One
    /// answer per zone asked.
    pub async fn ask_zones(&self, ask: Ask, others: usize, limit: Duration) -> Vec<ZoneAnswer> {
        let deadline = Instant::now() + limit;
        let members = self.members();
        let key = format!("{}/{}", ask.namespace, ask.name);
        let zones = zone_probers(&self.me, &key, &members, others);
        if zones.is_empty() {
            return Vec::new();
        }
        let token = self.tokens.token().await.ok();
        let ask = Ask {
            wait_millis: Some(limit.as_millis() as u64),
            ..ask
        };
        let asks = zones.into_iter().map(|zone| {
            let (token, ask, key) = (&token, &ask, &key);
            async move {
                let mut by = place(zone[0]);
                let mut said = Vec::new();
                for c in zone {
                    by = place(c);
                    let Some(token) = token else {
                        said.push("no credentials to ask with".to_string());
                        break;
                    };
                    match self.attempt(c, token, ask, deadline).await {
                        Ok(Reply::Probed {
                            success,
                            reason,
                            millis,
                        }) => {
                            let result = ZoneResult::Probed {
                                success,
                                reason,
                                millis,
                            };
                            return ZoneAnswer { by, result };
                        }
                        Ok(Reply::Refused { why }) => said.push(format!("{}: {why}", c.identity)),
                        Err(Miss::NotProbed(why)) => said.push(format!("{}: {why}", c.identity)),
                        Err(Miss::Late) => {
                            said.push(format!("{}: no answer in time", c.identity));
                            break;
                        }
                    }
                }
                debug!(checker = %key, zone = %by.zone, ?said, "no probe from the zone");
                ZoneAnswer {
                    by,
                    result: ZoneResult::NoAnswer,
                }
            }
        });
        futures::future::join_all(asks).await
    }

    /// Asks about `ask`'s checker, within `limit`.
    pub async fn ask(&self, ask: Ask, limit: Duration) -> Verdict {
        let deadline = Instant::now() + limit;
        let members = self.members();
        let key = format!("{}/{}", ask.namespace, ask.name);
        let chosen = confirmers(&self.me, &key, &members, ATTEMPTS);
        if chosen.is_empty() {
            return Verdict::Alone;
        }
        let Ok(token) = self.tokens.token().await else {
            return Verdict::Unanswered {
                why: "this replica has no credentials to ask with (see its log)".into(),
            };
        };
        let ask = Ask {
            wait_millis: Some(limit.as_millis() as u64),
            ..ask
        };
        let mut said = Vec::new();
        for c in chosen {
            let by = place(c);
            match self.attempt(c, &token, &ask, deadline).await {
                Ok(Reply::Probed {
                    success: true,
                    millis,
                    ..
                }) => return Verdict::Refuted { by, millis },
                Ok(Reply::Probed { success: false, .. }) => return Verdict::Confirmed { by },
                Ok(Reply::Refused { why }) => said.push(format!("{}: {why}", c.identity)),
                Err(Miss::NotProbed(why)) => said.push(format!("{}: {why}", c.identity)),
                Err(Miss::Late) => {
                    said.push(format!("{}: no answer in time", c.identity));
                    break;
                }
            }
        }
        debug!(checker = %key, ?said, "failure unconfirmed");
        Verdict::Unanswered {
            why: said.join("; "),
        }
    }

    /// One ask of `c`, by `deadline`, with at most [`PER_CONFIRMER`] out to it.
    async fn attempt(
        &self,
        c: &Candidate,
        token: &str,
        ask: &Ask,
        deadline: Instant,
    ) -> Result<Reply, Miss> {
        let left = deadline.saturating_duration_since(Instant::now());
        let gate = {
            let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
            out.retain(|_, s| Arc::strong_count(s) > 1);
            out.entry(c.address.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(PER_CONFIRMER)))
                .clone()
        };
        let work = async {
            let _turn = gate.acquire().await;
            self.post(&c.address, token, ask).await
        };
        match tokio::time::timeout(left, work).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Miss::Late),
        }
    }

    async fn post(&self, address: &str, token: &str, ask: &Ask) -> Result<Reply, Miss> {
        let not = |why: &str| Miss::NotProbed(why.to_string());
        let body = serde_json::to_vec(ask).map_err(|_| not("the ask could not be written"))?;
        let req = http::Request::post(format!("http://{address}{PATH}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| not("the ask could not be written"))?;
        // A connection that failed or was closed before an answer (refused,
        // reset: the member's process ended) leaves no probe running there:
        // the confirmer drops the work of an ask whose connection is gone.
        let resp = match self.http.request(req).await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(not("could not be reached")),
            Err(_) => return Err(not("closed the connection before answering")),
        };
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), REPLY_LIMIT)
            .collect()
            .await
            .map_err(|_| Miss::Late)?
            .to_bytes();
        if status == http::StatusCode::SERVICE_UNAVAILABLE && !bytes.starts_with(b"busy") {
            // It stopped waiting for its own probe.
            return Err(Miss::Late);
        }
        if !status.is_success() {
            return Err(Miss::NotProbed(format!(
                "answered HTTP {}",
                status.as_u16()
            )));
        }
        serde_json::from_slice(&bytes).map_err(|_| not("its reply could not be read"))
    }
}

fn place(c: &Candidate) -> Place {
    Place {
        replica: c.identity.clone(),
        zone: c.zone.clone(),
    }
}
