//! Reads and writes of the API server that are not coordination: clients
//! with deadlines (`client`), start-up permission checks (`preflight`) and
//! what the forgery guard learns from the cluster (`egress`). The fenced
//! status writes are the engine's (`crate::engine::writer`): they ask the
//! membership gate, which stands on these clients.

pub(crate) mod client;
pub(crate) mod egress;
#[cfg(test)]
pub(crate) mod mock_api;
pub(crate) mod preflight;
