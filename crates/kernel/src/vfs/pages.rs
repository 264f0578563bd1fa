//! A file's bytes in memory, in 64 KiB chunks: a file grows by adding chunks
//! (never by moving everything to a larger buffer, which needs one free block of
//! the new size and copies the old), a hole is a missing chunk that reads as
//! zeros, and truncating gives chunks back. The writable files of the tree (/tmp,
//! the rootfs' upper layer) live here; so does the page cache of host files,
//! where a missing chunk means "not read yet" rather than zeros. Pure logic.

use crate::errno::Errno;
use alloc::boxed::Box;
use alloc::vec::Vec;

/// Bytes in one chunk.
pub const CHUNK: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct Pages {
    chunks: Vec<Option<Box<[u8]>>>,
    len: u64,
    /// Chunks allocated (each CHUNK bytes).
    present: usize,
}

impl Pages {
    pub fn new() -> Pages {
        Pages::default()
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes the chunks take.
    pub fn footprint(&self) -> usize {
        self.present * CHUNK + self.chunks.capacity() * core::mem::size_of::<Option<Box<[u8]>>>()
    }

    /// Whether chunk `i` is in memory.
    pub fn has(&self, i: usize) -> bool {
        self.chunks.get(i).is_some_and(|c| c.is_some())
    }

    /// Chunk `i`, if in memory.
    pub fn chunk(&self, i: usize) -> Option<&[u8]> {
        self.chunks.get(i)?.as_deref()
    }

    /// Copies bytes from `offset` into `buf` (holes read as zeros), up to the
    /// length; how many.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        self.each(offset, buf.len(), |piece, at, n| {
            let dst = &mut buf[done..done + n];
            match piece {
                Some(c) => dst.copy_from_slice(&c[at..at + n]),
                None => dst.fill(0),
            }
            done += n;
            Ok::<(), Errno>(())
        })
        .ok();
        done
    }

    /// Calls `f(chunk, offset in chunk, count)` for each piece of the `len` bytes
    /// from `offset` (within the length), in order.
    pub fn each<E>(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(Option<&[u8]>, usize, usize) -> Result<(), E>,
    ) -> Result<usize, E> {
        let end = offset.saturating_add(len as u64).min(self.len);
        let mut at = offset;
        while at < end {
            let i = (at / CHUNK as u64) as usize;
            let o = (at % CHUNK as u64) as usize;
            let n = (CHUNK - o).min((end - at) as usize);
            f(self.chunk(i), o, n)?;
            at += n as u64;
        }
        Ok(end.saturating_sub(offset) as usize)
    }

    /// Makes the chunks for bytes `offset..offset + len` (zeroed where new) and
    /// calls `fill(data offset, destination)` for each piece in order; the length
    /// grows to the end of what was filled. ENOSPC when a chunk cannot be had; if
    /// `fill` fails the length stays (chunks made stay too, zeroed: a hole).
    pub fn write_with(
        &mut self,
        offset: u64,
        len: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let end = offset.checked_add(len as u64).ok_or(Errno::EFBIG)?;
        let mut at = offset;
        while at < end {
            let i = (at / CHUNK as u64) as usize;
            let o = (at % CHUNK as u64) as usize;
            let n = (CHUNK - o).min((end - at) as usize);
            let c = self.make(i)?;
            fill((at - offset) as usize, &mut c[o..o + n])?;
            at += n as u64;
            self.len = self.len.max(at);
        }
        Ok(len)
    }

    /// Puts chunk `i` in place (the page cache fills a chunk it read).
    pub fn insert(&mut self, i: usize, data: Box<[u8]>) -> Result<(), Errno> {
        debug_assert_eq!(data.len(), CHUNK);
        self.slot(i)?;
        if self.chunks[i].replace(data).is_none() {
            self.present += 1;
        }
        Ok(())
    }

    /// Forgets chunk `i` (cache eviction).
    pub fn evict(&mut self, i: usize) {
        if self.chunks.get_mut(i).and_then(|c| c.take()).is_some() {
            self.present -= 1;
        }
    }

    /// Sets the length, without making chunks (a hole grows it).
    pub fn set_len(&mut self, len: u64) {
        if len < self.len {
            let keep = len.div_ceil(CHUNK as u64) as usize;
            for i in keep..self.chunks.len() {
                self.evict(i);
            }
            self.chunks.truncate(keep);
            // What lies past the end in the last chunk reads as zeros if the file
            // grows again.
            let o = (len % CHUNK as u64) as usize;
            if o != 0 {
                if let Some(Some(c)) = self.chunks.get_mut(keep - 1) {
                    c[o..].fill(0);
                }
            }
        }
        self.len = len;
    }

    fn slot(&mut self, i: usize) -> Result<(), Errno> {
        if i >= self.chunks.len() {
            self.chunks.try_reserve(i + 1 - self.chunks.len()).map_err(|_| Errno::ENOSPC)?;
            self.chunks.resize_with(i + 1, || None);
        }
        Ok(())
    }

    fn make(&mut self, i: usize) -> Result<&mut [u8], Errno> {
        self.slot(i)?;
        if self.chunks[i].is_none() {
            self.chunks[i] = Some(zeroed_chunk()?);
            self.present += 1;
        }
        Ok(self.chunks[i].as_deref_mut().expect("made above"))
    }
}

/// A zeroed chunk from the heap, or ENOSPC.
pub fn zeroed_chunk() -> Result<Box<[u8]>, Errno> {
    let mut v = Vec::new();
    v.try_reserve_exact(CHUNK).map_err(|_| Errno::ENOSPC)?;
    v.resize(CHUNK, 0);
    Ok(v.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_read_as_zeros_and_writes_span_chunks() {
        let mut p = Pages::new();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        p.write_with(CHUNK as u64 * 3 - 10, data.len(), |at, dst| {
            dst.copy_from_slice(&data[at..at + dst.len()]);
            Ok(())
        })
        .unwrap();
        assert_eq!(p.len(), CHUNK as u64 * 3 - 10 + 100_000);
        assert!(!p.has(0) && !p.has(1) && p.has(2) && p.has(3) && p.has(4));
        let mut buf = vec![1u8; 20];
        assert_eq!(p.read(CHUNK as u64 * 3 - 20, &mut buf), 20);
        assert_eq!(&buf[..10], &[0; 10]);
        assert_eq!(&buf[10..], &data[..10]);
        let mut all = vec![0u8; 100_000];
        assert_eq!(p.read(CHUNK as u64 * 3 - 10, &mut all), 100_000);
        assert_eq!(all, data);
        let mut zeros = vec![1u8; 100];
        assert_eq!(p.read(5, &mut zeros), 100);
        assert!(zeros.iter().all(|b| *b == 0));
        assert_eq!(p.read(p.len(), &mut zeros), 0);
    }

    #[test]
    fn truncation_frees_chunks_and_zeros_the_tail() {
        let mut p = Pages::new();
        p.write_with(0, CHUNK * 2, |_, d| {
            d.fill(7);
            Ok(())
        })
        .unwrap();
        assert_eq!(p.footprint() / CHUNK, 2);
        p.set_len(10);
        assert_eq!(p.len(), 10);
        assert!(p.has(0) && !p.has(1));
        p.set_len(100);
        let mut buf = [9u8; 100];
        assert_eq!(p.read(0, &mut buf), 100);
        assert_eq!(&buf[..10], &[7; 10]);
        assert!(buf[10..].iter().all(|b| *b == 0), "what was cut reads as zeros");
        p.set_len(0);
        assert!(!p.has(0) && p.is_empty());
    }

    #[test]
    fn a_failed_fill_keeps_the_length() {
        let mut p = Pages::new();
        p.write_with(0, 10, |_, d| {
            d.fill(1);
            Ok(())
        })
        .unwrap();
        assert_eq!(p.write_with(5, 100, |_, _| Err(Errno::EFAULT)), Err(Errno::EFAULT));
        assert_eq!(p.len(), 10);
        assert_eq!(p.write_with(u64::MAX - 1, 10, |_, _| Ok(())), Err(Errno::EFBIG));
    }
}
