//! The owner's side: ask another replica to probe a checker whose failure
//! would turn it Ready=False, and turn its reply into a [`Verdict`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
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

pub struct Asker {
    pub me: Candidate,
    view: Arc<MemberView>,
    tokens: TokenSource,
    http: HttpClient<HttpConnector, Full<Bytes>>,
}

impl Asker {
    pub fn new(me: Candidate, view: Arc<MemberView>, tokens: TokenSource) -> Arc<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Arc::new(Asker {
            me,
            view,
            tokens,
            http,
        })
    }

    /// Makes the token now, so the first failures after a cut do not wait
    /// for one (errors are remembered and retried at the first ask).
    pub async fn warm(&self) {
        let _ = self.tokens.token().await;
    }

    /// Where this replica runs.
    pub fn place(&self) -> Place {
        Place {
            replica: self.me.identity.clone(),
            zone: self.me.zone.clone(),
        }
    }

    /// The members as the view has them, with their HTTP servers.
    fn members(&self) -> Vec<Candidate> {
        self.view
            .places()
            .into_iter()
            .filter_map(|(identity, p)| {
                Some(Candidate {
                    identity,
                    address: p.address?,
                    zone: p.zone,
                    node: p.node,
                })
            })
            .collect()
    }

    /// Asks one member in each of up to `others` other zones to probe
    /// `ask`'s checker now (crate::confirm::zones), all at once, within
    /// `limit`; one answer per zone asked.
    pub async fn ask_zones(&self, ask: Ask, others: usize, limit: Duration) -> Vec<ZoneAnswer> {
        let members = self.members();
        let key = format!("{}/{}", ask.namespace, ask.name);
        let chosen = zone_probers(&self.me, &key, &members, others);
        if chosen.is_empty() {
            return Vec::new();
        }
        let token = match self.tokens.token().await {
            Ok(t) => t,
            Err(why) => {
                let why = format!("this replica has no credentials to ask with: {why}");
                return chosen
                    .into_iter()
                    .map(|c| ZoneAnswer {
                        by: place(c),
                        result: ZoneResult::NoAnswer(why.clone()),
                    })
                    .collect();
            }
        };
        let asks = chosen.into_iter().map(|c| {
            let (token, ask) = (&token, &ask);
            async move {
                let result =
                    match tokio::time::timeout(limit, self.post(&c.address, token, ask)).await {
                        Ok(Ok(Reply::Probed {
                            success,
                            reason,
                            millis,
                        })) => ZoneResult::Probed {
                            success,
                            reason,
                            millis,
                        },
                        Ok(Ok(Reply::Refused { why })) => {
                            ZoneResult::NoAnswer(format!("refused: {why}"))
                        }
                        Ok(Err(e)) => ZoneResult::NoAnswer(e),
                        Err(_) => ZoneResult::NoAnswer("did not answer in time".into()),
                    };
                ZoneAnswer {
                    by: place(c),
                    result,
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
        let token = match self.tokens.token().await {
            Ok(t) => t,
            Err(why) => {
                return Verdict::Unanswered {
                    why: format!("this replica has no credentials to ask with: {why}"),
                };
            }
        };
        let mut said = Vec::new();
        for c in chosen {
            let by = place(c);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                said.push(format!("{} did not answer in time", by.describe()));
                break;
            }
            match tokio::time::timeout(left, self.post(&c.address, &token, &ask)).await {
                Ok(Ok(Reply::Probed {
                    success: true,
                    millis,
                    ..
                })) => return Verdict::Refuted { by, millis },
                Ok(Ok(Reply::Probed { success: false, .. })) => {
                    return Verdict::Confirmed { by };
                }
                Ok(Ok(Reply::Refused { why })) => {
                    said.push(format!("{} refused: {why}", by.describe()))
                }
                Ok(Err(e)) => said.push(format!("{}: {e}", by.describe())),
                Err(_) => said.push(format!("{} did not answer in time", by.describe())),
            }
        }
        debug!(checker = %key, ?said, "failure unconfirmed");
        Verdict::Unanswered {
            why: said.join("; "),
        }
    }

    async fn post(&self, address: &str, token: &str, ask: &Ask) -> Result<Reply, String> {
        let body = serde_json::to_vec(ask).map_err(|e| e.to_string())?;
        let req = http::Request::post(format!("http://{address}{PATH}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|_| "could not be reached".to_string())?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), REPLY_LIMIT)
            .collect()
            .await
            .map_err(|_| "its reply was cut short or too long".to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("answered HTTP {}", status.as_u16()));
        }
        serde_json::from_slice(&bytes).map_err(|_| "its reply could not be read".to_string())
    }
}

fn place(c: &Candidate) -> Place {
    Place {
        replica: c.identity.clone(),
        zone: c.zone.clone(),
    }
}
