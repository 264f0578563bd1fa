//! The address spaces processes run in, and switching a vCPU between them.
//!
//! A [`Space`] is an address space (`UserSpace`: VMAs, backing, page tables with a
//! root of their own) with the processes that use it counted: a process and its
//! CLONE_VM children (vfork, posix_spawn) share one; `fork` makes a copy-on-write copy
//! (`AddressSpace::fork`). Spaces live in an arena of `&'static` slots, as
//! processes and threads do, so a thread reaches its space through its process
//! with no reference count on the system-call path. When its last process lets it
//! go the space is torn down (memory freed, page tables given back) and the slot
//! waits for the next space.
//!
//! Switching: each vCPU remembers which space it runs (`LOADED`, by id: ids are
//! never reused, so a root recycled for a new space is loaded again rather than
//! trusted). The scheduler calls [`switch_to`] before it runs a thread; only a
//! thread of another space costs a switch (`supervisor::set_root`: a hostcall on
//! PVM, `mov cr3` on hardware KVM). The boot space is id 1 and every vCPU starts
//! on its root, so a program that never forks never switches. The idle loop
//! keeps whatever was loaded (it touches only the kernel's half).

use super::user::GuestUser;
use super::UserSpace;
use crate::errno::Errno;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use onering_abi::MAX_CPUS;
use onering_arch::sync::Mutex;
use spin::Once;

/// Most address spaces at once (one per process at most).
pub const MAX_SPACES: usize = crate::task::process::MAX_PROCS;

pub struct Space {
    slot: usize,
    /// Unique over the VM's life (the boot space is 1).
    id: AtomicU64,
    /// Processes using it.
    users: AtomicUsize,
    /// Whether it has memory shared with other spaces (then a process-shared
    /// futex there is keyed by where it is in guest memory).
    shares: AtomicBool,
    pub mm: Mutex<UserSpace>,
}

impl core::fmt::Debug for Space {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Space").field("id", &self.id()).finish()
    }
}

static ARENA: [Once<&'static Space>; MAX_SPACES] = [const { Once::new() }; MAX_SPACES];

struct Table {
    /// Slots allocated so far.
    used: usize,
    /// Slots whose space ended.
    free: Vec<usize>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { used: 0, free: Vec::new() });
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The space each vCPU runs (its id): the boot space's at first.
static LOADED: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(1) }; MAX_CPUS];

/// Makes `space` a space processes can use, with one user (the caller's process
/// to be). EAGAIN when the arena is full.
pub fn install(space: UserSpace) -> Result<&'static Space, Errno> {
    let mut t = TABLE.lock();
    let slot = match t.free.pop() {
        Some(s) => s,
        None if t.used < MAX_SPACES => {
            t.used += 1;
            t.used - 1
        }
        None => {
            drop(t);
            let mut space = space;
            drop(space.teardown());
            return Err(Errno::EAGAIN);
        }
    };
    let mut space = Some(space);
    let s = ARENA[slot].call_once(|| {
        alloc::boxed::Box::leak(alloc::boxed::Box::new(Space {
            slot,
            id: AtomicU64::new(0),
            users: AtomicUsize::new(0),
            shares: AtomicBool::new(false),
            mm: Mutex::new(space.take().unwrap_or_else(|| unreachable!())),
        }))
    });
    if let Some(space) = space {
        // A reused slot: the old space was torn down (it maps nothing).
        *s.mm.lock() = space;
    }
    s.id.store(NEXT_ID.fetch_add(1, Relaxed), Relaxed);
    s.note_sharing();
    s.users.store(1, Release);
    Ok(s)
}

/// A new empty address space with page tables of its own (`execve`), one hold
/// passing to the caller's process. `key` (the program's, or 0) picks page
/// tables last used by a space of the same key first (`PageTables::new_space_for`).
pub fn fresh(chunks: &super::space::Chunks, key: u64) -> Result<&'static Space, Errno> {
    let tables = onering_arch::mm::PageTables::new_space_for(&mut chunks.lock(), key).map_err(|_| Errno::ENOMEM)?;
    let mmap_top = onering_abi::layout::MMAP_TOP;
    install(UserSpace::new(chunks.clone(), tables, 0, super::space::MMAP_BOTTOM, mmap_top))
}

/// The space of the thread running here (the boot space before the first thread).
pub fn current() -> &'static Space {
    match crate::task::thread::try_current() {
        Some(t) => t.process().space(),
        None => boot(),
    }
}

/// The first space made (the program's at boot).
pub fn boot() -> &'static Space {
    match ARENA[0].get() {
        Some(s) => s,
        None => panic!("no address space yet"),
    }
}

impl Space {
    pub fn id(&self) -> u64 {
        self.id.load(Relaxed)
    }

    /// One more process uses it (a CLONE_VM child).
    pub fn hold(&self) {
        self.users.fetch_add(1, AcqRel);
    }

    /// A process no longer uses it; the last one tears it down. Called with no
    /// lock held (a file mapping's record may close its file).
    pub fn release(&'static self) {
        if self.users.fetch_sub(1, AcqRel) != 1 {
            return;
        }
        // What its shared file mappings hold goes to their files, as at the
        // program's end, if its memory is the one loaded here (it is when its
        // last thread ends; a child that never ran shares its blocks with its
        // parent, which writes them back).
        if LOADED[onering_arch::cpu::cpu_id()].load(Relaxed) == self.id() {
            let pieces = self.mm.lock().shared_in(0, onering_abi::layout::USER_END);
            let _ = super::filemap::each(&self.user(), &pieces, super::filemap::write_back);
        }
        let records = self.mm.lock().teardown();
        drop(records);
        TABLE.lock().free.push(self.slot);
    }

    /// Its memory, as handlers copy through it (it must be the one loaded).
    pub fn user(&'static self) -> GuestUser<'static> {
        GuestUser::new(&self.mm)
    }

    /// The futex-table key of user address `addr` in this space: private futexes
    /// of different spaces never meet.
    pub fn futex_key(&self, addr: u64) -> u64 {
        addr | (self.slot as u64) << 47
    }

    /// Records whether the space now has memory shared with another (after a
    /// fork shared its MAP_SHARED blocks).
    pub fn note_sharing(&self) {
        self.shares.store(self.mm.lock().has_shared(), Relaxed);
    }

    /// The key of a process-shared futex (no FUTEX_PRIVATE_FLAG) at `addr`: in
    /// memory shared with other processes, where it is in guest memory (bit 63
    /// set: no private key has it), so that a wake in one process reaches a
    /// waiter in another, as on Linux; elsewhere the private key. A space that
    /// shares nothing pays one load.
    pub fn shared_futex_key(&self, addr: u64) -> u64 {
        if self.shares.load(Relaxed) {
            if let Some(phys) = self.mm.lock().shared_phys(addr) {
                return phys | 1 << 63;
            }
        }
        self.futex_key(addr)
    }
}

/// The id of the space CPU `cpu` has loaded (or had, the moment it is read).
pub fn loaded(cpu: usize) -> u64 {
    LOADED.get(cpu).map_or(0, |l| l.load(Relaxed))
}

/// Makes this vCPU run `space` (before a thread of it runs here): nothing if it
/// does already.
pub fn switch_to(space: &Space) {
    load(space, true)
}

/// [`switch_to`] a space being built (execve), leaving in its tables what an
/// earlier space left there (`PageTables::settle`, which the caller calls once
/// it has mapped the new image, before anything else touches the user half):
/// an entry that already holds what the image maps is then not stored again.
pub fn switch_to_unsettled(space: &Space) {
    load(space, false)
}

fn load(space: &Space, settle: bool) {
    let cpu = onering_arch::cpu::cpu_id();
    let id = space.id();
    if LOADED[cpu].load(Relaxed) == id {
        return;
    }
    let mut mm = space.mm.lock();
    // (Tables handed out again hold what an earlier space left where this one
    // maps nothing: cleared before they are first loaded.)
    if settle {
        mm.mmu().settle();
    }
    onering_arch::supervisor::set_root(mm.mmu());
    LOADED[cpu].store(id, Relaxed);
}
