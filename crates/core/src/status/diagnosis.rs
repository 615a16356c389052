//! status.diagnosis in the reducer: what the cluster said of the target
//! when Ready turned False, kept until Ready changes again.

use super::{CheckerStatus, Context, Effects, Truth};
use webchecker_api::Diagnosis;

impl CheckerStatus {
    /// The cluster's word on the failure; the status to write. Nothing
    /// once Ready is no longer False (the answer came too late).
    pub fn diagnosed(&mut self, d: Diagnosis, ctx: &Context<'_>) -> Effects {
        if self.ready != Truth::False {
            return Effects::default();
        }
        self.diagnosis = Some(d);
        let status = self.render(ctx, None);
        Effects {
            write: self.maybe_write(status, ctx),
            ..Default::default()
        }
    }
}
