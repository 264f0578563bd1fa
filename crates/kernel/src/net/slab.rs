//! A slab: values in a vector, found by a key that holds their slot and a
//! generation. The network stack names each of its smoltcp sockets this way
//! (`inet::Ref`) and looks them up several times per packet; a key kept after
//! its value is gone (in a listener's pool, a closing list) finds nothing, never
//! the slot's next value, because the slot's generation moved on.
//!
//! Keys order by generation first, so later values have larger keys (the
//! stack's sets of keys keep creation order). Freed slots are reused, so the
//! vector is as long as the most values held at once.

use alloc::vec::Vec;

pub struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    gen: u32,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { slots: Vec::new(), free: Vec::new(), gen: 0 }
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
            Some(s) => s,
            None => {
                if self.slots.try_reserve(1).is_err() || self.free.try_reserve(self.slots.len() + 1).is_err() {
                    return Err(v);
                }
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        self.slots[slot as usize] = (self.gen, Some(v));
        Ok(u64::from(self.gen) << 32 | u64::from(slot))
    }

    pub fn get(&self, k: u64) -> Option<&T> {
        let (s, g) = split(k);
        match self.slots.get(s)? {
            (gen, Some(v)) if *gen == g => Some(v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, k: u64) -> Option<&mut T> {
        let (s, g) = split(k);
        match self.slots.get_mut(s)? {
            (gen, Some(v)) if *gen == g => Some(v),
            _ => None,
        }
    }

    pub fn contains_key(&self, k: u64) -> bool {
        self.get(k).is_some()
    }

    pub fn remove(&mut self, k: u64) -> Option<T> {
        let (s, g) = split(k);
        let slot = self.slots.get_mut(s)?;
        if slot.0 != g || slot.1.is_none() {
            return None;
        }
        let v = slot.1.take();
        // (Room for every slot was reserved when the slot was made.)
        self.free.push(s as u32);
        v
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
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
        assert_eq!(s.get(u64::MAX), None);
    }
}
