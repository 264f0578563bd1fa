//! Futex wait queues: which threads wait on which address, in arrival order.
//!
//! Pure bookkeeping (tested on the host): the system call (`syscall::futex`) reads and
//! compares the user word, then enqueues or wakes here under one lock, and asks the
//! scheduler to block or wake the threads this table names. A key names a word in
//! one address space, or in memory processes share (`task::futex::key`); a thread
//! that ends is taken off its queue (`task::futex::forget`).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiter {
    tid: u64,
    bitset: u32,
}

/// Every queue, and where each waiting thread is (requeue moves threads).
#[derive(Default, Debug)]
pub struct FutexTable {
    queues: BTreeMap<u64, VecDeque<Waiter>>,
    at: BTreeMap<u64, u64>,
}

impl FutexTable {
    pub const fn new() -> Self {
        FutexTable { queues: BTreeMap::new(), at: BTreeMap::new() }
    }

    /// Thread `tid` waits on `key` for a wake-up matching `bitset`.
    pub fn enqueue(&mut self, key: u64, tid: u64, bitset: u32) {
        self.remove(tid);
        self.queues.entry(key).or_default().push_back(Waiter { tid, bitset });
        self.at.insert(tid, key);
    }

    /// Takes `tid` off whatever queue it is on (timeout, signal); false if it was
    /// not waiting (it was woken already).
    pub fn remove(&mut self, tid: u64) -> bool {
        let Some(key) = self.at.remove(&tid) else {
            return false;
        };
        if let Some(q) = self.queues.get_mut(&key) {
            q.retain(|w| w.tid != tid);
            if q.is_empty() {
                self.queues.remove(&key);
            }
        }
        true
    }

    /// Dequeues up to `n` waiters of `key` whose bitset meets `bitset`, oldest first.
    pub fn wake(&mut self, key: u64, n: usize, bitset: u32) -> Vec<u64> {
        let mut out = Vec::new();
        if let Some(q) = self.queues.get_mut(&key) {
            q.retain(|w| {
                if out.len() < n && w.bitset & bitset != 0 {
                    out.push(w.tid);
                    false
                } else {
                    true
                }
            });
            if q.is_empty() {
                self.queues.remove(&key);
            }
        }
        for t in &out {
            self.at.remove(t);
        }
        out
    }

    /// Wakes up to `nwake` waiters of `from` and moves up to `nmove` of the rest to
    /// `to`. Returns the woken threads and how many moved.
    pub fn requeue(&mut self, from: u64, to: u64, nwake: usize, nmove: usize) -> (Vec<u64>, usize) {
        let woken = self.wake(from, nwake, u32::MAX);
        if from == to || nmove == 0 {
            return (woken, 0);
        }
        let mut moved = Vec::new();
        if let Some(q) = self.queues.get_mut(&from) {
            while moved.len() < nmove {
                match q.pop_front() {
                    Some(w) => moved.push(w),
                    None => break,
                }
            }
            if q.is_empty() {
                self.queues.remove(&from);
            }
        }
        let n = moved.len();
        for w in moved {
            self.at.insert(w.tid, to);
            self.queues.entry(to).or_default().push_back(w);
        }
        (woken, n)
    }

    /// Threads waiting on `key`.
    pub fn waiters(&self, key: u64) -> usize {
        self.queues.get(&key).map_or(0, VecDeque::len)
    }
}

/// FUTEX_WAKE_OP's operation on the old value of the second word: the new value,
/// or None for an unknown operation.
pub fn wake_op_new(encoded: u32, old: u32) -> Option<u32> {
    let op = (encoded >> 28) & 0xf;
    let mut arg = (encoded >> 12) & 0xfff;
    // Sign-extend the 12-bit argument; FUTEX_OP_OPARG_SHIFT (8) means 1 << arg.
    if arg & 0x800 != 0 {
        arg |= 0xffff_f000;
    }
    if op & 8 != 0 {
        arg = 1u32.checked_shl(arg & 31).unwrap_or(0);
    }
    Some(match op & 7 {
        0 => arg,
        1 => old.wrapping_add(arg),
        2 => old | arg,
        3 => old & !arg,
        4 => old ^ arg,
        _ => return None,
    })
}

/// FUTEX_WAKE_OP's comparison of the old value: whether to wake the second queue,
/// or None for an unknown comparison.
pub fn wake_op_cmp(encoded: u32, old: u32) -> Option<bool> {
    let cmp = (encoded >> 24) & 0xf;
    let mut arg = encoded & 0xfff;
    if arg & 0x800 != 0 {
        arg |= 0xffff_f000;
    }
    let (o, a) = (old as i32, arg as i32);
    Some(match cmp {
        0 => o == a,
        1 => o != a,
        2 => o < a,
        3 => o <= a,
        4 => o > a,
        5 => o >= a,
        _ => return None,
    })
}

/// Robust futexes (`set_robust_list`): when a thread ends, every robust mutex it
/// still holds is marked `FUTEX_OWNER_DIED` and one waiter woken, so that the next
/// locker gets EOWNERDEAD instead of waiting forever.
pub mod robust {
    use alloc::vec::Vec;

    pub const FUTEX_WAITERS: u32 = 0x8000_0000;
    pub const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
    pub const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
    /// Linux stops after this many entries (a corrupt or circular list).
    pub const LIST_LIMIT: usize = 2048;
    /// `sizeof(struct robust_list_head)`.
    pub const HEAD_SIZE: u64 = 24;

    /// The futex words of the robust list at `head` (`struct robust_list_head`:
    /// next, futex_offset, list_op_pending), read through `read` (None: unreadable,
    /// which ends the walk). Entry pointers may carry the PI flag in bit 0.
    pub fn words(head: u64, read: impl Fn(u64) -> Option<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        let (Some(mut entry), Some(offset), Some(pending)) = (read(head), read(head + 8), read(head + 16)) else {
            return out;
        };
        let offset = offset as i64;
        let word = |e: u64| (e & !1).wrapping_add_signed(offset);
        let mut n = 0;
        while entry & !1 != head && n < LIST_LIMIT {
            let e = entry & !1;
            // Linux reads the next pointer before handling the entry.
            let next = read(e);
            if e != pending & !1 {
                out.push(word(e));
            }
            match next {
                Some(nx) => entry = nx,
                None => break,
            }
            n += 1;
        }
        if pending & !1 != 0 {
            out.push(word(pending));
        }
        out
    }

    /// The new value of a robust futex word `old` when thread `tid` dies, if `tid`
    /// owns it: OWNER_DIED, keeping the WAITERS bit.
    pub fn owner_died(old: u32, tid: u32) -> Option<u32> {
        (old & FUTEX_TID_MASK == tid).then_some((old & FUTEX_WAITERS) | FUTEX_OWNER_DIED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_in_order_and_by_bitset() {
        let mut t = FutexTable::new();
        t.enqueue(0x1000, 1, u32::MAX);
        t.enqueue(0x1000, 2, 0b01);
        t.enqueue(0x1000, 3, 0b10);
        t.enqueue(0x2000, 4, u32::MAX);
        assert_eq!(t.wake(0x1000, 1, u32::MAX), [1]);
        assert_eq!(t.wake(0x1000, 5, 0b10), [3]);
        assert_eq!(t.waiters(0x1000), 1);
        assert!(t.remove(2));
        assert!(!t.remove(2));
        assert_eq!(t.waiters(0x1000), 0);
        assert_eq!(t.wake(0x2000, 0, u32::MAX), Vec::<u64>::new());
        assert_eq!(t.wake(0x2000, 9, u32::MAX), [4]);
        assert!(!t.remove(4));
    }

    #[test]
    fn requeue_moves_the_rest() {
        let mut t = FutexTable::new();
        for tid in 1..=5 {
            t.enqueue(0xa, tid, u32::MAX);
        }
        let (w, moved) = t.requeue(0xa, 0xb, 1, 2);
        assert_eq!((w, moved), (alloc::vec![1], 2));
        assert_eq!((t.waiters(0xa), t.waiters(0xb)), (2, 2));
        // A moved thread's timeout finds it on its new queue.
        assert!(t.remove(2));
        assert_eq!(t.wake(0xb, 9, u32::MAX), [3]);
        assert_eq!(t.wake(0xa, 9, u32::MAX), [4, 5]);
    }

    #[test]
    fn wake_op_encoding() {
        // FUTEX_OP(FUTEX_OP_SET, 0, FUTEX_OP_CMP_GT, 1): glibc's condvar signal.
        let set0_gt1 = 0x0400_0001;
        assert_eq!(wake_op_new(set0_gt1, 5), Some(0));
        assert_eq!(wake_op_cmp(set0_gt1, 5), Some(true));
        assert_eq!(wake_op_cmp(set0_gt1, 1), Some(false));
        // ADD with OPARG_SHIFT: old + (1 << 3).
        let add_shift = (((8 | 1) << 28) | (3 << 12)) as u32;
        assert_eq!(wake_op_new(add_shift, 1), Some(9));
        // Negative arguments sign-extend.
        let add_neg = ((1 << 28) | (0xfff << 12)) as u32;
        assert_eq!(wake_op_new(add_neg, 1), Some(0));
        assert_eq!(wake_op_new(7 << 28, 0), None);
        assert_eq!(wake_op_cmp(9 << 24, 0), None);
    }

    #[test]
    fn robust_list_walk() {
        use super::robust::*;
        use alloc::collections::BTreeMap;
        // head at 0x1000 -> entry 0x2000 -> entry 0x3001 (PI flag) -> head;
        // the futex word is 8 bytes before each entry; 0x4000 is pending.
        let mut mem = BTreeMap::new();
        mem.insert(0x1000, 0x2000u64);
        mem.insert(0x1008, (-8i64) as u64);
        mem.insert(0x1010, 0x4000);
        mem.insert(0x2000, 0x3001);
        mem.insert(0x3000, 0x1000);
        let read = |a: u64| mem.get(&a).copied();
        assert_eq!(words(0x1000, read), [0x1ff8, 0x2ff8, 0x3ff8]);
        // A pending entry that is also on the list is handled once.
        mem.insert(0x1010, 0x2000);
        assert_eq!(words(0x1000, |a| mem.get(&a).copied()), [0x2ff8, 0x1ff8]);
        // A circular list stops at the limit; an unreadable head gives nothing.
        let mut cyc = BTreeMap::new();
        cyc.insert(0x1000u64, 0x2000u64);
        cyc.insert(0x1008, 0);
        cyc.insert(0x1010, 0);
        cyc.insert(0x2000, 0x2000);
        assert_eq!(words(0x1000, |a| cyc.get(&a).copied()).len(), LIST_LIMIT);
        assert!(words(0x9000, |_| None).is_empty());
    }

    #[test]
    fn robust_owner_died() {
        use super::robust::*;
        assert_eq!(owner_died(42, 42), Some(FUTEX_OWNER_DIED));
        assert_eq!(owner_died(42 | FUTEX_WAITERS, 42), Some(FUTEX_OWNER_DIED | FUTEX_WAITERS));
        assert_eq!(owner_died(43, 42), None);
        assert_eq!(owner_died(0, 42), None);
    }
}
