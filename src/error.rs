//! Errors of the operator process. Probe failures are not errors: they are
//! [`crate::probe::Reason`]s, reported in status, metrics and events.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot load the kubeconfig or in-cluster config: {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    KubeClient(#[source] kube::Error),
    #[error("cannot reach the Kubernetes API server at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: kube::Error,
    },
    #[error("the {0} task stopped")]
    TaskDied(&'static str),
    #[error("the {0} task panicked: {1}")]
    TaskPanicked(&'static str, String),
    #[error("missing permission: {0}")]
    Forbidden(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Kube(_) => "kube",
            Error::InferConfig(_) | Error::KubeClient(_) => "kubeconfig",
            Error::Unreachable { .. } => "unreachable",
            Error::TaskDied(_) | Error::TaskPanicked(..) => "task_died",
            Error::Forbidden(_) => "forbidden",
            Error::Io(_) => "io",
        }
    }
}

pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Whether a watch failed because its resource is not served (its CRD is
/// not installed).
pub fn watch_not_found(e: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error as W;
    match e {
        W::WatchStartFailed(k) | W::InitialListFailed(k) | W::WatchFailed(k) => {
            api_code(k) == Some(404)
        }
        W::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// A kube error in a line of a log: the API server's code, reason and
/// message, or that it did not answer; no debug dump.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("HTTP {} {}: {}", s.code, s.reason, s.message),
        _ => "the API server did not answer".to_string(),
    }
}
