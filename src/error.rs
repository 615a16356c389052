//! Errors of the operator process. Probe failures are not errors: they are
//! [`crate::probe::Reason`]s, reported in status, metrics and events.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot load the kubeconfig or in-cluster config: {0}")]
    KubeConfig(String),
    #[error("the {0} task stopped")]
    TaskDied(&'static str),
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
            Error::KubeConfig(_) => "kubeconfig",
            Error::TaskDied(_) => "task_died",
            Error::Forbidden(_) => "forbidden",
            Error::Io(_) => "io",
        }
    }
}

/// Is this API error an answer from the API server (as opposed to no answer)?
pub fn is_api_answer(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code < 500)
}

pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
