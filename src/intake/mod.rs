//! Intake: the checkers of this replica's shard as the engine needs them.
//! The watch of the shard (`feed`), the Secret and ConfigMap values they
//! reference (`resolver`, `secrets`), their compiled patterns (`compiler`)
//! and the per-namespace memory budgets both are counted against (`budget`).
//! A valid checker travels between them as a `found::Found` and reaches the
//! engine as a fully resolved `crate::engine::Checker`.

pub(crate) mod compiler;
pub(crate) mod feed;
pub(crate) mod found;
pub(crate) mod resolver;
pub(crate) mod secrets;
