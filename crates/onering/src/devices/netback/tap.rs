//! The TAP back end (`--net tap:NAME`, as Firecracker): an existing TAP device,
//! created and addressed by the user on the host (`ip tuntap add NAME mode tap`),
//! attached with `TUNSETIFF` (`IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`) on a
//! non-blocking descriptor. One `read` is one frame, one `write` sends one, each
//! with the 12-byte virtio header in front (`TUNSETVNETHDRSZ`): the guest's
//! checksum requests go to the host kernel as they are, and the host may hand us
//! frames whose checksum it left to complete (`TUN_F_CSUM`), so neither side
//! checksums what stays on this machine. No segmentation offloads (TSO): frames
//! stay within the MTU. The device must exist: onering does not create network
//! devices on the host.

use super::NetBackError;
use crate::devices::virtio::net::{Backend, HDR_LEN};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// An attached TAP device.
pub struct Tap {
    file: File,
    name: String,
}

impl Tap {
    /// Attaches to the TAP device `name`.
    pub fn open(name: &str) -> Result<Tap, NetBackError> {
        let sys = Path::new("/sys/class/net").join(name);
        if name.is_empty() || name.contains('/') || name.len() >= libc::IFNAMSIZ || !sys.exists() {
            return Err(NetBackError::NoTapDevice(name.into()));
        }
        // A tun/tap device has tun_flags; a TAP one has IFF_TAP in them.
        let flags = std::fs::read_to_string(sys.join("tun_flags")).ok();
        let flags = flags.as_deref().and_then(|f| i64::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok());
        if flags.is_none_or(|f| f & i64::from(libc::IFF_TAP) == 0) {
            return Err(NetBackError::NotTap(name.into()));
        }
        let err = |error| NetBackError::Tap { name: name.into(), error };
        let tun = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(err)?;
        let fd = OwnedFd::from(tun);
        crate::sys::net::tun_set_iff(&fd, name, (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as i16)
            .map_err(err)?;
        crate::sys::net::tun_set_vnet(&fd, HDR_LEN as i32, crate::sys::net::TUN_F_CSUM).map_err(err)?;
        Ok(Tap { file: File::from(fd), name: name.into() })
    }
}

impl Backend for Tap {
    fn send(&mut self, frame: &[u8]) -> std::io::Result<bool> {
        match self.file.write(frame) {
            Ok(_) => Ok(true),
            // A full queue, the link down (EIO), a header the host refused (EINVAL:
            // a checksum request outside the frame): the frame is lost, as on a wire.
            Err(e)
                if e.kind() == ErrorKind::WouldBlock || matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        loop {
            match self.file.read(buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn offloads(&self) -> bool {
        true
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn name(&self) -> String {
        format!("tap:{}", self.name)
    }
}
