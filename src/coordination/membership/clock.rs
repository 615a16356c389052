//! The membership's clock: CLOCK_BOOTTIME, as `Instant`s.
//!
//! `Instant` is CLOCK_MONOTONIC on Linux, which stops while the machine is
//! suspended (a VM paused by its hypervisor, a laptop's sleep). A replica
//! whose VM was suspended for a minute would then see no gap in its own
//! heartbeat and go on probing and writing until its next renewal hears
//! that its Lease is gone. CLOCK_BOOTTIME counts the suspension, so the
//! gap shows as a pause ([`super::gate`]) and nothing is dispatched until a
//! renewal started after it is answered.
//!
//! The readings are `Instant`s offset from the first one, so they compare
//! with each other; against `Instant::now()` they run ahead by the time the
//! machine spent suspended since start, which only makes a comparison with
//! the monotonic clock count less time (the judge waits longer, never less).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Now, on CLOCK_BOOTTIME.
pub fn now() -> Instant {
    static BASE: OnceLock<(Instant, Duration)> = OnceLock::new();
    let (instant, boot) = *BASE.get_or_init(|| (Instant::now(), boottime()));
    instant + boottime().saturating_sub(boot)
}

#[cfg(target_os = "linux")]
fn boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec it is given a valid pointer to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return monotonic();
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn boottime() -> Duration {
    monotonic()
}

/// The fallback: time since the first reading, on the monotonic clock.
fn monotonic() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_move_with_the_monotonic_clock_while_nothing_is_suspended() {
        let (a, mono) = (now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, mono2) = (now(), Instant::now());
        assert!(b > a);
        let boot_step = b - a;
        let mono_step = mono2 - mono;
        let skew = boot_step.abs_diff(mono_step);
        assert!(
            skew < Duration::from_millis(5),
            "{boot_step:?} vs {mono_step:?}"
        );
        assert!(boot_step >= Duration::from_millis(20));
    }
}
