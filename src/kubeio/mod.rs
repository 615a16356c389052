//! Reads and writes of the API server that are not coordination: clients
//! with deadlines (`client`), start-up permission checks (`preflight`),
//! fenced status writes and drain acknowledgements (`writer`), and what the
//! forgery guard learns from the cluster (`egress`).

pub(crate) mod client;
pub(crate) mod egress;
#[cfg(test)]
pub(crate) mod mock_api;
pub(crate) mod preflight;
pub(crate) mod writer;
