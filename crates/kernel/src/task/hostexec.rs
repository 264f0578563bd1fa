//! Processes the host starts in the running VM (`onering exec`, the OCI
//! runtime's `exec`; `onering_abi::exec`), on the task layer's side: which slot
//! runs which process, the queued messages, and the end's report. The VMM
//! queues a request and sets the events page's EXEC bit; the scheduler's poll
//! (`service_events`) takes the messages (`ExecTake`). A spawn goes to the
//! spawner the system-call layer registered at boot (`syscall::hostexec`: it
//! makes the process and loads its program); a signal goes to the slot's
//! process, as `kill` would send it. When such a process (one without a parent
//! in the VM) ends, the VMM hears its wait status (`ExecDone`), after its output.

use super::kernel::Kernel;
use crate::errno::Errno;
use alloc::collections::BTreeMap;
use onering_abi::exec::{Message, Spawn, ENDED, FAILED, MAX_MESSAGE};
use onering_arch::sync::Mutex;
use spin::Once;

/// Slot -> pid of the host's processes that have not ended.
static RUNNING: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// Makes the process of a spawn request (registered by the system-call layer).
pub type Spawner = fn(&'static Kernel, Spawn) -> Result<(), Errno>;

static SPAWNER: Once<Spawner> = Once::new();

/// Registers what makes the host's processes (once, at boot).
pub fn set_spawner(f: Spawner) {
    SPAWNER.call_once(|| f);
}

/// Takes every message the host queued (the EXEC bit was set).
pub fn service(k: &'static Kernel) {
    let mut buf = alloc::vec![0u8; MAX_MESSAGE];
    loop {
        let n = onering_arch::hostcall::exec_take(&mut buf);
        if n <= 0 {
            return;
        }
        match Message::decode(&buf[..(n as usize).min(buf.len())]) {
            Some(Message::Spawn(s)) => {
                let slot = s.slot;
                let made = match SPAWNER.get() {
                    _ if RUNNING.lock().contains_key(&slot) => Err(Errno::EBUSY),
                    Some(spawn) => spawn(k, s),
                    None => Err(Errno::ENOSYS),
                };
                if let Err(e) = made {
                    onering_arch::hostcall::exec_done(slot, FAILED, e as u64);
                }
            }
            Some(Message::Signal { slot, signal }) if (1..=64).contains(&signal) => {
                let Some(pid) = RUNNING.lock().get(&slot).copied() else { continue };
                let info =
                    crate::sigframe::Info { signo: signal, code: crate::sigframe::code::SI_USER, ..Default::default() };
                let _ = super::signal::send_to_process(pid, signal, info);
            }
            _ => {} // (nothing the VMM should send)
        }
    }
}

/// Slot `slot`'s process is `pid` from now on.
pub fn running(slot: u64, pid: u64) {
    RUNNING.lock().insert(slot, pid);
}

/// Slot `slot`'s process never started (its end is reported otherwise).
pub fn forget(slot: u64) {
    RUNNING.lock().remove(&slot);
}

/// Process `pid` (without a parent in the VM) ended with wait status `status`:
/// if the host started it, the VMM hears it once its output has gone.
pub fn ended(k: &Kernel, pid: u64, status: u64) {
    let slot = {
        let mut r = RUNNING.lock();
        let Some(slot) = r.iter().find(|(_, p)| **p == pid).map(|(s, _)| *s) else { return };
        r.remove(&slot);
        slot
    };
    k.console.flush();
    onering_arch::hostcall::exec_done(slot, ENDED, status);
}
