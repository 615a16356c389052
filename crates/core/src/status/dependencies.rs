//! spec.dependsOn in the reducer: a failure while a dependency is down is
//! the dependency's (Ready says DependencyDown, its Event is Normal), a
//! failure with every dependency up holds its Warning long enough for a
//! dependency that fell at the same moment to say so, and a checker still
//! failing when its dependency recovers pages then.

use super::{CheckerStatus, Context, Effects, Transition, Truth};
use crate::dependencies::DEPENDENCY_DOWN;

impl CheckerStatus {
    /// Whether Ready blames a dependency now (before a step changes it).
    pub fn blames_dependency(&self) -> bool {
        self.ready == Truth::False && self.reason == DEPENDENCY_DOWN
    }

    /// Applies the checker's dependencies to what a step decided.
    /// `blamed`: [`Self::blames_dependency`] before the step.
    pub(super) fn follow_dependencies(
        &mut self,
        blamed: bool,
        ctx: &Context<'_>,
        fx: &mut Effects,
    ) {
        if self.ready != Truth::False {
            self.held = None;
            return;
        }
        let Some(edge) = ctx.dependency else {
            // No dependencies (any more): a held Warning goes out.
            fx.transition = fx.transition.take().or_else(|| self.release());
            return;
        };
        if let Some(b) = &edge.blocker {
            if self.reason != DEPENDENCY_DOWN {
                self.message = format!(
                    "depends on {}, which is down ({}); this checker fails too: {}",
                    b.name, b.reason, self.message
                );
                self.reason = DEPENDENCY_DOWN.to_string();
            }
            // A held transition goes out now, as news, not as a page.
            if let Some(t) = fx
                .transition
                .as_mut()
                .or(self.held.as_mut().map(|h| &mut h.1))
            {
                t.reason = self.reason.clone();
                t.message = self.message.clone();
            }
            fx.transition = fx
                .transition
                .take()
                .or_else(|| self.held.take().map(|h| h.1));
            fx.quiet = true;
            return;
        }
        if let Some(c) = &edge.cycle
            && self.reason != DEPENDENCY_DOWN
            && !self.message.contains("spec.dependsOn")
        {
            self.message = format!(
                "{} (spec.dependsOn leads back to it through {c}: a failure within that cycle pages on its own)",
                self.message
            );
        }
        if let Some(t) = fx.transition.take() {
            if t.ready == Truth::False && !fx.quiet && !edge.hold.is_zero() {
                self.held = Some(Box::new((ctx.now + edge.hold, t)));
            } else {
                fx.transition = Some(t);
            }
            return;
        }
        if self.held.as_ref().is_some_and(|h| ctx.now >= h.0) {
            fx.transition = self.release();
        } else if blamed && self.reason != DEPENDENCY_DOWN && self.held.is_none() {
            fx.still_down = Some(format!(
                "Ready=False on its own now that its dependencies are up: {}",
                self.message
            ));
        }
    }

    /// The held transition, with what Ready says now.
    fn release(&mut self) -> Option<Transition> {
        let (_, t) = *self.held.take()?;
        Some(Transition {
            reason: self.reason.clone(),
            message: self.message.clone(),
            ..t
        })
    }
}
