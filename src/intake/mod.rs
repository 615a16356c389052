//! Intake: the checkers of this replica's shard as the engine needs them.
//! The watch of the shard (`feed`), the Secret and ConfigMap values they
//! reference (`resolver`, `secrets`), their compiled patterns (`compiler`)
//! and the per-namespace memory budgets both are counted against (`budget`).

pub(crate) mod budget;
pub(crate) mod compiler;
pub(crate) mod feed;
pub(crate) mod resolver;
pub(crate) mod secrets;
