//! The MMIO bus: a map from guest-physical ranges to devices. Built before the first
//! vCPU runs and never changed after, so every vCPU thread looks devices up without a
//! lock: a binary search over a sorted vector (two entries today). An access must lie
//! wholly inside one device's range; anything else is nobody's.

use super::{MmioAction, MmioDevice};
use std::sync::Arc;
use thiserror::Error;

/// Why a device could not be put on the bus.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BusError {
    #[error("MMIO range {base:#x}+{len:#x} is empty or wraps around")]
    BadRange { base: u64, len: u64 },
    #[error("MMIO range {base:#x}+{len:#x} overlaps the device at {other:#x}")]
    Overlap { base: u64, len: u64, other: u64 },
}

struct Entry {
    base: u64,
    /// Last address of the range (inclusive: a range may end at the top of memory).
    last: u64,
    device: Arc<dyn MmioDevice>,
}

/// Devices by guest-physical range.
#[derive(Default)]
pub struct MmioBus {
    /// Sorted by `base`, disjoint.
    entries: Vec<Entry>,
}

impl std::fmt::Debug for MmioBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| e.base..=e.last)).finish()
    }
}

impl MmioBus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `device` at `[base, base + len)`.
    pub fn insert(&mut self, base: u64, len: u64, device: Arc<dyn MmioDevice>) -> Result<(), BusError> {
        let last = len.checked_sub(1).and_then(|l| base.checked_add(l)).ok_or(BusError::BadRange { base, len })?;
        let at = self.entries.partition_point(|e| e.base < base);
        let before = at.checked_sub(1).and_then(|i| self.entries.get(i)).filter(|e| e.last >= base);
        let after = self.entries.get(at).filter(|e| e.base <= last);
        if let Some(other) = before.or(after) {
            return Err(BusError::Overlap { base, len, other: other.base });
        }
        self.entries.insert(at, Entry { base, last, device });
        Ok(())
    }

    /// The device holding all of `[addr, addr + len)`, and the offset of `addr` in it.
    fn find(&self, addr: u64, len: usize) -> Option<(&dyn MmioDevice, u64)> {
        let i = self.entries.partition_point(|e| e.base <= addr).checked_sub(1)?;
        let e = self.entries.get(i)?;
        let end = addr.checked_add((len as u64).max(1) - 1)?;
        (end <= e.last).then(|| (&*e.device, addr - e.base))
    }

    /// A vCPU read `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> MmioAction {
        match self.find(addr, len) {
            Some((device, offset)) => device.read(offset, len),
            None => MmioAction::Unhandled,
        }
    }

    /// A vCPU wrote the `len` low bytes of `data` at `addr`.
    pub fn write(&self, addr: u64, data: u64, len: usize) -> MmioAction {
        match self.find(addr, len) {
            Some((device, offset)) => device.write(offset, data, len),
            None => MmioAction::Unhandled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Remembers the last access; reads answer the offset.
    #[derive(Default)]
    struct Probe(Mutex<Option<(u64, u64, usize)>>);

    impl MmioDevice for Probe {
        fn read(&self, offset: u64, _: usize) -> MmioAction {
            MmioAction::Value(offset)
        }
        fn write(&self, offset: u64, data: u64, len: usize) -> MmioAction {
            *self.0.lock().unwrap() = Some((offset, data, len));
            MmioAction::Done
        }
    }

    #[test]
    fn routes_by_range_with_offsets() {
        let mut bus = MmioBus::new();
        let a = Arc::new(Probe::default());
        bus.insert(0x2000, 0x1000, a.clone()).unwrap();
        bus.insert(0x1000, 0x1000, Arc::new(Probe::default())).unwrap();
        bus.insert(u64::MAX - 0xfff, 0x1000, Arc::new(Probe::default())).unwrap();
        assert_eq!(bus.read(0x2010, 4), MmioAction::Value(0x10));
        assert_eq!(bus.read(0x1ffc, 4), MmioAction::Value(0xffc));
        assert_eq!(bus.write(0x2ff8, 0xab, 8), MmioAction::Done);
        assert_eq!(*a.0.lock().unwrap(), Some((0xff8, 0xab, 8)));
        // Straddling the end of a range, past the last device, below the first.
        assert_eq!(bus.read(0x2ffc, 8), MmioAction::Unhandled);
        assert_eq!(bus.read(0x3000, 1), MmioAction::Unhandled);
        assert_eq!(bus.read(0xfff, 1), MmioAction::Unhandled);
        assert_eq!(bus.read(u64::MAX - 7, 8), MmioAction::Value(0xff8));
        assert_eq!(bus.read(u64::MAX, 2), MmioAction::Unhandled);
    }

    #[test]
    fn overlaps_and_empty_ranges_are_refused() {
        let mut bus = MmioBus::new();
        let p = || Arc::new(Probe::default());
        bus.insert(0x1000, 0x1000, p()).unwrap();
        assert_eq!(bus.insert(0x1fff, 2, p()), Err(BusError::Overlap { base: 0x1fff, len: 2, other: 0x1000 }));
        assert_eq!(bus.insert(0x800, 0x801, p()), Err(BusError::Overlap { base: 0x800, len: 0x801, other: 0x1000 }));
        assert_eq!(bus.insert(0, 0x10000, p()), Err(BusError::Overlap { base: 0, len: 0x10000, other: 0x1000 }));
        assert_eq!(bus.insert(0x5000, 0, p()), Err(BusError::BadRange { base: 0x5000, len: 0 }));
        assert_eq!(bus.insert(u64::MAX, 2, p()), Err(BusError::BadRange { base: u64::MAX, len: 2 }));
        bus.insert(0x800, 0x800, p()).unwrap();
        bus.insert(0x2000, 1, p()).unwrap();
    }

    /// The bus against a linear scan, on random ranges and accesses.
    #[test]
    fn lookups_agree_with_a_linear_scan() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let mut bus = MmioBus::new();
            let mut ranges: Vec<(u64, u64)> = Vec::new();
            for _ in 0..8 {
                let (base, len) = (next() % 0x10000, 1 + next() % 0x2000);
                let free = ranges.iter().all(|&(b, l)| base + len <= b || b + l <= base);
                assert_eq!(bus.insert(base, len, Arc::new(Probe::default())).is_ok(), free);
                if free {
                    ranges.push((base, len));
                }
            }
            for _ in 0..64 {
                let (addr, len) = (next() % 0x12000, [1, 2, 4, 8][(next() % 4) as usize]);
                let want =
                    ranges.iter().find(|&&(b, l)| addr >= b && addr + len as u64 <= b + l).map(|&(b, _)| addr - b);
                let got = match bus.read(addr, len) {
                    MmioAction::Value(off) => Some(off),
                    _ => None,
                };
                assert_eq!(got, want, "{addr:#x}+{len}");
            }
        }
    }
}
