//! `StaticRef<T>`: a `&'static T` that can be changed later, read with one load.
//! The kernel keeps its long-lived objects (threads, processes) as leaked
//! `&'static` structures that are recycled, and one refers to another through these
//! (a thread to its process) without a lock or a reference count.

use core::sync::atomic::{AtomicPtr, Ordering};

pub struct StaticRef<T: 'static> {
    p: AtomicPtr<T>,
}

impl<T: Sync + 'static> StaticRef<T> {
    pub const fn empty() -> Self {
        StaticRef { p: AtomicPtr::new(core::ptr::null_mut()) }
    }

    pub fn new(v: &'static T) -> Self {
        StaticRef { p: AtomicPtr::new(v as *const T as *mut T) }
    }

    /// The reference (None while empty).
    #[inline(always)]
    pub fn get(&self) -> Option<&'static T> {
        let p = self.p.load(Ordering::Acquire);
        // SAFETY: the pointer is null or was made by `new`/`set` from a `&'static T`,
        // which stays valid and shared forever.
        unsafe { p.as_ref() }
    }

    pub fn set(&self, v: Option<&'static T>) {
        self.p.store(v.map_or(core::ptr::null_mut(), |r| r as *const T as *mut T), Ordering::Release);
    }
}

impl<T: Sync + 'static> Default for StaticRef<T> {
    fn default() -> Self {
        Self::empty()
    }
}

impl<T: 'static> core::fmt::Debug for StaticRef<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("StaticRef")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_set() {
        static A: u32 = 1;
        static B: u32 = 2;
        let r = StaticRef::new(&A);
        assert_eq!(r.get(), Some(&1));
        r.set(Some(&B));
        assert_eq!(r.get(), Some(&2));
        r.set(None);
        assert_eq!(r.get(), None);
    }
}
