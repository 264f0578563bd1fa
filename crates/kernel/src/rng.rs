//! The kernel's random numbers (getrandom, /dev/urandom): xoshiro256++ seeded from
//! 16 bytes of the host's randomness. Fast and unpredictable to the program, but not
//! a cryptographic generator: fine for hash seeds and temporary names, and the same
//! strength the program's AT_RANDOM bytes get from the host.

#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: [u64; 2]) -> Rng {
        let mut x = seed[0] ^ seed[1].rotate_left(32);
        Rng { s: [splitmix(&mut x), splitmix(&mut x), splitmix(&mut x), splitmix(&mut x)] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_seeds_differ_and_bytes_vary() {
        let (mut a, mut b) = (Rng::new([1, 2]), Rng::new([1, 3]));
        assert_ne!(a.next_u64(), b.next_u64());
        let mut buf = [0u8; 37];
        a.fill(&mut buf);
        assert!(buf.iter().any(|x| *x != 0));
    }
}
