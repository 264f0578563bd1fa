//! Clocks from the TSC: monotonic time is TSC ticks since boot, real time is the
//! host's clock at boot plus that. `Clock` is pure arithmetic; [`mono_now`] and
//! [`real_now`] read the TSC against the clock set once at boot (lock-free).

use spin::Once;

/// The clock, set at boot.
static CLOCK: Once<Clock> = Once::new();

/// Sets the clock (once, at boot).
pub fn init(c: Clock) {
    CLOCK.call_once(|| c);
}

/// Monotonic nanoseconds since boot.
pub fn mono_now() -> u64 {
    CLOCK.get().map_or(0, |c| c.mono_ns(onering_arch::cpu::rdtsc()))
}

/// TSC ticks per second (0 before boot set the clock).
pub fn tsc_hz() -> u64 {
    CLOCK.get().map_or(0, |c| c.tsc_hz)
}

/// Nanoseconds since the epoch at TSC value `tsc`.
pub fn real_at(tsc: u64) -> u64 {
    CLOCK.get().map_or(0, |c| c.realtime_ns(tsc))
}

/// Nanoseconds since the epoch.
pub fn real_now() -> u64 {
    CLOCK.get().map_or(0, |c| c.realtime_ns(onering_arch::cpu::rdtsc()))
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Clock {
    pub tsc_hz: u64,
    pub boot_tsc: u64,
    pub boot_realtime_ns: u64,
}

pub const NS_PER_SEC: u64 = 1_000_000_000;

impl Clock {
    /// Nanoseconds per TSC tick in 32.32 fixed point: the vDSO computes time with the
    /// same multiplication, so the two never disagree.
    pub fn mult(&self) -> u64 {
        ((u128::from(NS_PER_SEC) << 32) / u128::from(self.tsc_hz.max(1))) as u64
    }

    /// Nanoseconds since boot at TSC value `tsc`.
    pub fn mono_ns(&self, tsc: u64) -> u64 {
        let ticks = tsc.saturating_sub(self.boot_tsc);
        ((u128::from(ticks) * u128::from(self.mult())) >> 32) as u64
    }

    /// Nanoseconds since the epoch at TSC value `tsc`.
    pub fn realtime_ns(&self, tsc: u64) -> u64 {
        self.boot_realtime_ns.saturating_add(self.mono_ns(tsc))
    }

    /// The TSC value at `mono` nanoseconds since boot.
    pub fn tsc_at(&self, mono: u64) -> u64 {
        self.boot_tsc.saturating_add((u128::from(mono) * u128::from(self.tsc_hz) / u128::from(NS_PER_SEC)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        let c = Clock { tsc_hz: 2_000_000_000, boot_tsc: 1000, boot_realtime_ns: 5 * NS_PER_SEC };
        assert_eq!(c.mono_ns(1000), 0);
        assert_eq!(c.mono_ns(3000), 1000);
        assert_eq!(c.mono_ns(10), 0, "before boot clamps");
        assert_eq!(c.realtime_ns(2_000_001_000), 6 * NS_PER_SEC);
        assert_eq!(c.tsc_at(1000), 3000);
        // 32.32 fixed point: within a nanosecond per ~4 s, as the vDSO computes it.
        let odd = Clock { tsc_hz: 2_445_404_000, boot_tsc: 0, boot_realtime_ns: 0 };
        let hour = 3600 * 2_445_404_000u64;
        assert!(odd.mono_ns(hour).abs_diff(3600 * NS_PER_SEC) < 1000);
        assert_eq!(odd.mult(), ((NS_PER_SEC as u128) << 32).div_euclid(2_445_404_000) as u64);
        let _ = Clock::default().mono_ns(u64::MAX); // no division by zero
    }
}
