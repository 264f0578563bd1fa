//! A slab: values in a vector, found by a key that holds their slot and a
//! generation. The network stack names each of its smoltcp sockets this way
//! (`inet::Ref`) and looks them up several times per packet; a key kept after
//! its value is gone (in a listener's pool, a closing list) finds nothing, never
//! the slot's next value, because the slot's generation moved on.
//!
//! Keys order by generation first, so later values have larger keys (the
//! stack's sets of keys keep creation order). Freed slots are reused, so there
//! are as many slots as the most values held at once, in pages of `PAGE`: no
//! allocation grows with the number of values but the small vector of pages
//! (ten thousand connections' sockets in one vector would need a contiguous
//! megabyte that a fragmented heap may not have).

use alloc::boxed::Box;
use alloc::vec::Vec;

const PAGE: usize = 64;

type Slot<T> = (u32, Option<T>);

pub struct Slab<T> {
    pages: Vec<Box<[Slot<T>]>>,
    /// Slots in use or freed so far (the next new slot's number).
    made: usize,
    free: Vec<u32>,
    gen: u32,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { pages: Vec::new(), made: 0, free: Vec::new(), gen: 0 }
    }
}

/// The slot of key `k`, and the generation it was made in.
fn split(k: u64) -> (usize, u32) {
    ((k & 0xffff_ffff) as usize, (k >> 32) as u32)
}

impl<T> Slab<T> {
    /// Stores `v`; its key (never 0). Fails only when memory does.
    pub fn insert(&mut self, v: T) -> Result<u64, T> {
        // A new generation per value: a key names one value only, ever (2^32
        // values before the generation wraps).
        self.gen = self.gen.wrapping_add(1).max(1);
        let slot = match self.free.pop() {
            Some(s) => s as usize,
            None => {
                if self.made == u32::MAX as usize || self.free.try_reserve(self.made + 1).is_err() {
                    return Err(v);
                }
                if self.made.is_multiple_of(PAGE) {
                    if self.pages.try_reserve(1).is_err() {
                        return Err(v);
                    }
                    let mut page = Vec::new();
                    if page.try_reserve_exact(PAGE).is_err() {
                        return Err(v);
                    }
                    page.resize_with(PAGE, || (0, None));
                    self.pages.push(page.into_boxed_slice());
                }
                self.made += 1;
                self.made - 1
            }
        };
        self.pages[slot / PAGE][slot % PAGE] = (self.gen, Some(v));
        Ok(u64::from(self.gen) << 32 | slot as u64)
    }

    fn slot(&self, s: usize) -> Option<&Slot<T>> {
        self.pages.get(s / PAGE).map(|p| &p[s % PAGE])
    }

    fn slot_mut(&mut self, s: usize) -> Option<&mut Slot<T>> {
        self.pages.get_mut(s / PAGE).map(|p| &mut p[s % PAGE])
    }

    pub fn get(&self, k: u64) -> Option<&T> {
        let (s, g) = split(k);
        match self.slot(s)? {
            (gen, Some(v)) if *gen == g => Some(v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, k: u64) -> Option<&mut T> {
        let (s, g) = split(k);
        match self.slot_mut(s)? {
            (gen, Some(v)) if *gen == g => Some(v),
            _ => None,
        }
    }

    pub fn contains_key(&self, k: u64) -> bool {
        self.get(k).is_some()
    }

    pub fn remove(&mut self, k: u64) -> Option<T> {
        let (s, g) = split(k);
        let slot = self.slot_mut(s)?;
        if slot.0 != g || slot.1.is_none() {
            return None;
        }
        let v = slot.1.take();
        // (Room for every slot was reserved when the slot was made.)
        self.free.push(s as u32);
        v
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.pages.iter().flat_map(|p| p.iter()).filter_map(|(_, v)| v.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_find_their_value_only() {
        let mut s = Slab::default();
        let a = s.insert("a").unwrap();
        let b = s.insert("b").unwrap();
        assert!(a != 0 && b > a);
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None, "gone");
        assert_eq!(s.remove(a), None);
        let c = s.insert("c").unwrap();
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff, "the slot is reused");
        assert_eq!(s.get(a), None, "an old key does not find the slot's new value");
        assert_eq!(s.get(c), Some(&"c"));
        *s.get_mut(b).unwrap() = "B";
        assert_eq!(s.values().copied().collect::<Vec<_>>(), ["c", "B"]);
        assert!(c > b, "later values have larger keys");
        assert_eq!(s.get(0), None);
        let many: Vec<u64> = (0..1000).map(|i| s.insert(if i % 2 == 0 { "x" } else { "y" }).unwrap()).collect();
        assert_eq!(s.get(many[999]), Some(&"y"));
        assert_eq!(s.values().count(), 1002);
        assert_eq!(s.get(u64::MAX), None);
    }
}
