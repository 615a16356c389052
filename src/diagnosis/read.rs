//! The reads of one diagnosis, all in the checker's own namespace, each
//! under a deadline, at most [`MAX_READS`] in all.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use serde_json::Value;

use super::explain;
use super::metrics::DiagnosisMetrics;
use webchecker_api::Diagnosis;
use webchecker_core::diagnosis::{Subject, Target};

/// Reads one diagnosis may make.
pub const MAX_READS: usize = 6;
/// Each read's deadline.
const READ: Duration = Duration::from_secs(2);
/// Objects one list returns.
const LIST_LIMIT: u32 = 20;
/// Certificates read: one page (a route's diagnosis after a TLS failure
/// makes 6 reads with it).
const CERTIFICATE_LIMIT: u32 = 100;

/// One diagnosis' reads: counted, bounded, in one namespace.
pub struct Reader<'a> {
    pub client: Client,
    pub namespace: &'a str,
    pub metrics: &'a DiagnosisMetrics,
    pub reads: usize,
}

/// A read that could not be made or did not answer: the diagnosis ends.
pub struct Stop;

impl Reader<'_> {
    async fn read<T>(
        &mut self,
        kind: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Stop> {
        if self.reads >= MAX_READS {
            return Err(Stop);
        }
        self.reads += 1;
        let r = tokio::time::timeout(READ, f).await;
        let (result, out) = match r {
            Ok(Ok(v)) => ("ok", Ok(v)),
            Ok(Err(kube::Error::Api(e))) if e.code == 403 => ("forbidden", Err(Stop)),
            // A kind the cluster does not serve (cert-manager not installed).
            Ok(Err(kube::Error::Api(e))) if e.code == 404 => ("absent", Err(Stop)),
            Ok(Err(_)) => ("error", Err(Stop)),
            Err(_) => ("timeout", Err(Stop)),
        };
        self.metrics.read(kind, result);
        out
    }

    fn dynamic(&self, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
        // from_gvk's plural is the kind's lower case with an s: right for
        // Gateway and Certificate, the kinds read here.
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let ar = ApiResource::from_gvk(&gvk);
        Api::namespaced_with(self.client.clone(), self.namespace, &ar)
    }

    async fn get_dynamic(&mut self, kind: &str, name: &str) -> Result<Option<Value>, Stop> {
        let api = self.dynamic("gateway.networking.k8s.io", "v1", kind);
        let o = self.read(kind, api.get_opt(name)).await?;
        Ok(o.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// Why a Service of the namespace does not serve, when that is plain.
    pub async fn service(&mut self, name: &str) -> Result<Option<Diagnosis>, Stop> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), self.namespace);
        let Some(svc) = self.read("Service", api.get_opt(name)).await? else {
            return Ok(Some(Diagnosis {
                cause: "NoService".into(),
                message: format!("Service {name} does not exist"),
            }));
        };
        // No selector (ExternalName, endpoints kept by hand): nothing to say.
        let Some(selector) = svc.spec.and_then(|s| s.selector).filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), self.namespace);
        let lp = ListParams::default()
            .labels(&format!("kubernetes.io/service-name={name}"))
            .limit(LIST_LIMIT);
        let found = self.read("EndpointSlice", slices.list(&lp)).await?;
        let ready = explain::has_ready_endpoint(&found.items);
        let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), self.namespace);
        let lp = ListParams::default()
            .labels(&labels.join(","))
            .limit(LIST_LIMIT);
        let pods = self.read("Pod", pods.list(&lp)).await?;
        let now = k8s_openapi::jiff::Timestamp::now();
        Ok(explain::service_pods(name, &pods.items, ready, now))
    }

    /// A route: its own conditions, its Gateways', then its backends'.
    pub async fn route(&mut self, kind: &str, name: &str) -> Result<Option<Diagnosis>, Stop> {
        let Some(route) = self.get_dynamic(kind, name).await? else {
            return Ok(None);
        };
        if let Some(d) = explain::route(kind, name, &route) {
            return Ok(Some(d));
        }
        for gw in explain::parent_gateways(&route, self.namespace, 1) {
            if let Some(g) = self.get_dynamic("Gateway", &gw).await?
                && let Some(d) = explain::gateway(&gw, &g)
            {
                return Ok(Some(d));
            }
        }
        self.backends(&route).await
    }

    pub async fn ingress(&mut self, name: &str) -> Result<Option<Diagnosis>, Stop> {
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), self.namespace);
        let Some(ing) = self.read("Ingress", api.get_opt(name)).await? else {
            return Ok(None);
        };
        let v = serde_json::to_value(ing).unwrap_or_default();
        if let Some(d) = explain::ingress(name, &v) {
            return Ok(Some(d));
        }
        self.backends(&v).await
    }

    /// The first backend Service that does not serve.
    async fn backends(&mut self, v: &Value) -> Result<Option<Diagnosis>, Stop> {
        for svc in explain::backend_services(v, self.namespace, 1) {
            if let Some(d) = self.service(&svc).await? {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    /// The Certificates of the namespace: the first one for `host` that
    /// is not Ready.
    async fn certificates(&mut self, host: &str) -> Result<Option<Diagnosis>, Stop> {
        let api = self.dynamic("cert-manager.io", "v1", "Certificate");
        let lp = ListParams::default().limit(CERTIFICATE_LIMIT);
        let page = self.read("Certificate", api.list(&lp)).await?;
        let items: Vec<Value> = page
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap_or_default())
            .collect();
        Ok(explain::certificate(host, &items))
    }

    /// A TLS failure's Certificates first (none, or cert-manager absent:
    /// the target still speaks), then the target's objects.
    pub async fn subject(&mut self, s: &Subject) -> Result<Option<Diagnosis>, Stop> {
        if let Some(host) = &s.certificate_host
            && let Ok(Some(d)) = self.certificates(host).await
        {
            return Ok(Some(d));
        }
        match &s.target {
            Some(t) => self.target(t).await,
            None => Ok(None),
        }
    }

    pub async fn target(&mut self, t: &Target) -> Result<Option<Diagnosis>, Stop> {
        match t {
            Target::Service(n) => self.service(n).await,
            Target::Ingress(n) => self.ingress(n).await,
            Target::HttpRoute(n) => self.route("HTTPRoute", n).await,
            Target::GrpcRoute(n) => self.route("GRPCRoute", n).await,
        }
    }
}
