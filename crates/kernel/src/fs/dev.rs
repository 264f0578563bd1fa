//! The device nodes of /dev: null, zero, full, random and urandom. (The standard
//! streams are `stdio`.)

use super::NodeRef;
use crate::errno::{Errno, SysResult};
use crate::file::{File, Meta, OpenFile};
use crate::mm::user::UserMem;
use crate::rng::Rng;
use crate::vfs::{Device, Ino};
use core::any::Any;
use onering_arch::sync::Mutex;

pub struct DevFile {
    pub node: NodeRef,
    pub kind: Device,
    pub rng: &'static Mutex<Rng>,
}

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;

/// Fills `len` bytes of user memory at `buf` with random bytes.
#[inline(never)]
fn random(rng: &Mutex<Rng>, user: &dyn UserMem, buf: u64, len: u64) -> SysResult {
    let mut chunk = [0u8; 256];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(256) as usize;
        rng.lock().fill(&mut chunk[..n]);
        if let Err(e) = user.write(buf + done, &chunk[..n]) {
            return if done > 0 { Ok(done) } else { Err(e) };
        }
        done += n as u64;
    }
    Ok(len)
}

impl File for DevFile {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, _: Option<u64>) -> SysResult {
        let len = len.min(MAX_RW_COUNT);
        match self.kind {
            Device::Null => Ok(0),
            Device::Zero | Device::Full => {
                user.fill(buf, 0, len)?;
                Ok(len)
            }
            Device::Random | Device::Urandom => random(self.rng, user, buf, len),
            _ => Err(Errno::EBADF),
        }
    }

    /// Like Linux, these do not even look at the buffer; /dev/full is always full.
    fn write(&self, _: &OpenFile, _: &dyn UserMem, _: u64, len: u64, _: Option<u64>) -> SysResult {
        match self.kind {
            Device::Full => Err(Errno::ENOSPC),
            _ => Ok(len.min(MAX_RW_COUNT)),
        }
    }

    fn stat(&self) -> Meta {
        self.node.meta()
    }

    /// Seeking a device "works" and stays at 0, as Linux's null and zero.
    fn seek(&self, _: &OpenFile, _: i64, _: u64) -> SysResult {
        Ok(0)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
