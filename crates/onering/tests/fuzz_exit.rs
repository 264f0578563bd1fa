//! Fuzzing the exit handler: made-up exits (MMIO anywhere, near the doorbell and the
//! local APIC, every size; port I/O, halts, triple faults, failed entries) against a
//! guest whose memory is garbage where the VMM looks: page tables whose entries
//! point anywhere (into memory, at themselves, past its end, huge or not), hostcall
//! blocks of random numbers and edge values, random fatal frames. The handler must
//! never panic and never hang, and must keep the promises of the threat model: it
//! writes only to fds 1 and 2, in pieces of at most 64 KiB, halts at most 1 s, kicks
//! only vCPUs that exist, and reads stdin into at most 64 KiB at a time.
//!
//! A plain test: `ONERING_FUZZ_ITERS` and `ONERING_FUZZ_SEED` change the run, as for
//! the rewriter's fuzz tests (crates/rewrite/tests/fuzz.rs).

use onering::devices::{standard_bus, MmioBus};
use onering::exit::{handle, Action, Env, Outcome, VmExit};
use onering_abi::layout;
use onering_rewrite::fuzz::{self, Rng};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What the run exercised (printed at the end, to show the garbage reached the
/// hostcalls): output pieces written, stdin reads, halts, kicks, resumed exits,
/// stopped VMs.
static SEEN: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
const OUTPUTS: usize = 0;
const INPUTS: usize = 1;
const HALTS: usize = 2;
const KICKS: usize = 3;
const RESUMED: usize = 4;
const STOPPED: usize = 5;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const PIECE: usize = 64 * 1024;
/// The longest halt the VMM grants, whatever the guest asks (an idle VM sleeps
/// until its deadline or a kick; signals from the host still kick it).
const MAX_HALT: Duration = Duration::from_nanos(onering_abi::hostcall::MAX_HALT_NS);

struct FuzzEnv<'a> {
    mem: &'a GuestMemoryMmap,
    bus: &'a MmioBus,
    cpu: u64,
    ncpus: u64,
    rng: Rng,
    /// Bytes the host's stdout/stderr take before they fail (a closed pipe).
    output_budget: u64,
    /// What the handler did that it must not.
    broken: Vec<String>,
}

impl Env for FuzzEnv<'_> {
    fn mem(&self) -> &GuestMemoryMmap {
        self.mem
    }
    fn bus(&self) -> &MmioBus {
        self.bus
    }
    fn cpu(&self) -> u64 {
        self.cpu
    }
    fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()> {
        // An exec'd process's output stream: none holds a slot in this VM, so the
        // VMM's answer is EBADF, as its own would be.
        if onering_abi::exec::slot_of(u64::from(fd)).is_some_and(|(_, n)| n != 0) {
            return Err(std::io::Error::from_raw_os_error(libc::EBADF));
        }
        if fd != 1 && fd != 2 {
            self.broken.push(format!("output to fd {fd}"));
        }
        if data.len() > PIECE {
            self.broken.push(format!("an output piece of {} bytes", data.len()));
        }
        match self.output_budget.checked_sub(data.len() as u64) {
            Some(left) if !self.rng.one_in(64) => {
                SEEN[OUTPUTS].fetch_add(1, Relaxed);
                self.output_budget = left;
                Ok(())
            }
            _ => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn stdin_request(&mut self, virt: u64, len: u64, stream: u64) -> i64 {
        // The real device, answered at once with random input (or a failing read).
        let Some(input) = onering_abi::exec::input_of(stream) else { return -9 };
        let stdin = onering::vstate::stdin::Stdin::new(input, !self.rng.one_in(16));
        match stdin.request(self.mem, virt, len) {
            Ok(seq) => {
                if len > PIECE as u64 {
                    self.broken.push(format!("a stdin request of {len} bytes was taken"));
                }
                SEEN[INPUTS].fetch_add(1, Relaxed);
                let n = self.rng.index(len as usize + 1);
                let data = vec![0x5a; n];
                struct Failing;
                impl std::io::Read for Failing {
                    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                        Err(std::io::ErrorKind::Other.into())
                    }
                }
                if self.rng.one_in(8) {
                    stdin.complete(self.mem, &mut Failing, seq);
                } else {
                    stdin.complete(self.mem, &mut &data[..], seq);
                }
                0
            }
            Err(e) => e,
        }
    }
    fn halt(&mut self, d: Duration) {
        SEEN[HALTS].fetch_add(1, Relaxed);
        if d > MAX_HALT {
            self.broken.push(format!("a halt of {d:?}"));
        }
    }
    fn ncpus(&self) -> u64 {
        self.ncpus
    }
    fn kick(&mut self, cpu: u64) -> Result<(), String> {
        SEEN[KICKS].fetch_add(1, Relaxed);
        if cpu >= self.ncpus {
            self.broken.push(format!("a kick of vCPU {cpu} of {}", self.ncpus));
        }
        if self.rng.one_in(16) {
            Err("cannot start vCPU".into())
        } else {
            Ok(())
        }
    }
}

/// Guest memories of three shapes: 8 MiB; 4 MiB low and 2 MiB above 4 GiB (a hole
/// in between, as with large --mem); 64 KiB, too small for the per-CPU headers and
/// the hostcall blocks.
fn memories() -> Vec<GuestMemoryMmap> {
    [
        &[(GuestAddress(0), 8usize << 20)][..],
        &[(GuestAddress(0), 4 << 20), (GuestAddress(layout::HIGH_RAM_START), 2 << 20)],
        &[(GuestAddress(0), 64 << 10)],
    ]
    .iter()
    .map(|r| GuestMemoryMmap::from_ranges(r).unwrap())
    .collect()
}

/// The guest-physical pages the page-table garbage lives in: the boot PML4 and the
/// pages after it.
const TABLES: u64 = 8;

fn size(mem: &GuestMemoryMmap) -> u64 {
    use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
    mem.iter().map(|r| r.start_addr().0 + r.len()).max().unwrap_or(0)
}

/// A page-table entry: mostly present, mostly pointing at one of the tables (so
/// walks go deep), else somewhere in memory or past it; huge or not.
fn entry(rng: &mut Rng, mem_size: u64) -> u64 {
    let target = match rng.below(8) {
        0..=5 => layout::BOOT_PT_PHYS + rng.below(TABLES) * 4096,
        6 => rng.below(mem_size) & !0xfff,
        _ => rng.edge(mem_size),
    };
    let mut flags = rng.below(0x1000);
    if !rng.one_in(16) {
        flags |= 1;
    }
    (target & 0x000f_ffff_ffff_f000) | flags | (rng.next_u64() & (0xfff << 52))
}

/// A guest-virtual address: usually canonical (so the walk starts), sometimes an
/// edge value.
fn virt(rng: &mut Rng) -> u64 {
    if rng.one_in(4) {
        return rng.edge(0x40_0000);
    }
    let v = rng.next_u64() & ((1 << 48) - 1);
    if v & (1 << 47) != 0 {
        v | 0xffff_0000_0000_0000
    } else {
        v
    }
}

/// A length, often on an edge: 0, 1, a page, the 64 KiB piece and its neighbours,
/// Linux's MAX_RW_COUNT, the top.
fn length(rng: &mut Rng) -> u64 {
    let near = [0, 4096, 64 << 10, 0x7fff_f000, 1 << 20][rng.index(5)];
    rng.edge(near)
}

/// Fills the tables and the CPU's fatal frame with garbage, and its hostcall block
/// with arguments for hostcall `nr` (biased to what that hostcall reads).
fn scribble(mem: &GuestMemoryMmap, rng: &mut Rng, cpu: u64, ncpus: u64, nr: u64) {
    let mem_size = size(mem);
    for t in 0..TABLES {
        let page = layout::BOOT_PT_PHYS + t * 4096;
        let words: Vec<u8> = (0..512).flat_map(|_| entry(rng, mem_size).to_le_bytes()).collect();
        let _ = mem.write_slice(&words, GuestAddress(page));
    }
    let mut args: [u64; 7] = std::array::from_fn(|_| rng.edge(0));
    match nr {
        1 => args[..3].copy_from_slice(&[
            if rng.one_in(8) { rng.edge(1) } else { 1 + rng.below(2) },
            virt(rng),
            length(rng),
        ]),
        4 | 7 => args[..2].copy_from_slice(&[virt(rng), length(rng)]),
        8 => args[0] = rng.edge(1_000_000_000),
        9 => args[0] = if rng.one_in(4) { rng.edge(ncpus) } else { rng.below(ncpus + 2) },
        _ => {}
    }
    let block = onering::layout::hostcall_block(cpu);
    for (i, a) in args.iter().enumerate() {
        let _ = mem.write_obj(*a, GuestAddress(block + 8 * i as u64));
    }
    let frame = onering::layout::fatal_frame_phys(cpu);
    for i in 0..7 {
        let _ = mem.write_obj(rng.next_u64(), GuestAddress(frame + 8 * i));
    }
}

/// A hostcall number: mostly a valid one (1 to 9), sometimes not.
fn hostcall_number(rng: &mut Rng) -> u64 {
    if rng.one_in(8) {
        rng.edge(0)
    } else {
        1 + rng.below(9)
    }
}

/// An exit: mostly the doorbell ringing with `nr`, else MMIO near the devices or
/// anywhere, port I/O, halts, triple faults, failed entries.
fn exit(rng: &mut Rng, nr: u64) -> VmExit {
    let len = [1, 2, 4, 8][rng.index(4)];
    if rng.below(8) < 5 {
        return VmExit::MmioWrite { addr: layout::HOSTCALL_DOORBELL_PHYS, data: nr, len: 8 };
    }
    let near = [layout::HOSTCALL_DOORBELL_PHYS, layout::LAPIC_PHYS, 0, layout::MMIO_HOLE_START];
    let addr = if rng.one_in(4) {
        rng.next_u64()
    } else {
        let n = near[rng.index(near.len())];
        rng.edge(n)
    };
    match rng.below(8) {
        0..=3 => VmExit::MmioWrite { addr, data: if rng.one_in(2) { nr } else { rng.edge(0) }, len },
        4 => VmExit::MmioRead { addr, len },
        5 => [VmExit::IoOut { port: rng.next_u64() as u16 }, VmExit::IoIn { port: rng.next_u64() as u16 }]
            [rng.index(2)]
        .clone(),
        6 => [VmExit::Hlt, VmExit::Shutdown, VmExit::InternalError][rng.index(3)].clone(),
        _ => VmExit::FailEntry(rng.edge(0)),
    }
}

#[test]
fn fuzz_exit_handler() {
    let report = fuzz::run("exit", fuzz::iterations(20_000), fuzz::seed(), Duration::from_secs(60), |rng, _| {
        thread_local! {
            static MEMS: Vec<GuestMemoryMmap> = memories();
            static BUS: MmioBus = standard_bus().unwrap();
        }
        MEMS.with(|mems| {
            BUS.with(|bus| {
                let mem = &mems[rng.index(mems.len())];
                let ncpus = 1 + rng.below(64);
                let cpu = rng.below(ncpus);
                let budget = if rng.one_in(2) { rng.below(1 << 20) } else { rng.edge(4096) };
                let mut env = FuzzEnv {
                    mem,
                    bus,
                    cpu,
                    ncpus,
                    rng: Rng::new(rng.next_u64()),
                    output_budget: budget,
                    broken: Vec::new(),
                };
                // A few exits in a row, as a vCPU would take them, until one stops it.
                for _ in 0..1 + rng.below(4) {
                    let nr = hostcall_number(rng);
                    scribble(mem, rng, cpu, ncpus, nr);
                    let x = exit(rng, nr);
                    let action = handle(x.clone(), &mut env);
                    if let Some(b) = env.broken.first() {
                        return Err(format!("{b} on {x:?}"));
                    }
                    match action {
                        Action::Stop(Outcome::Exited(_))
                        | Action::Stop(Outcome::Killed { .. })
                        | Action::Stop(Outcome::Fatal { .. })
                        | Action::Stop(Outcome::KernelPanic(_))
                        | Action::Stop(Outcome::GuestError(_))
                        | Action::Stop(Outcome::Stopped(_)) => {
                            SEEN[STOPPED].fetch_add(1, Relaxed);
                            break;
                        }
                        Action::Resume => {
                            SEEN[RESUMED].fetch_add(1, Relaxed);
                        }
                        Action::CompleteRead { .. } => return Err(format!("no device answers reads, yet {x:?}")),
                    }
                }
                Ok(())
            })
        })
    });
    let seen = |i: usize| SEEN[i].load(Relaxed);
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "fuzz exit: {} output pieces, {} stdin reads, {} halts, {} kicks; {} exits resumed, {} VMs stopped",
        seen(OUTPUTS),
        seen(INPUTS),
        seen(HALTS),
        seen(KICKS),
        seen(RESUMED),
        seen(STOPPED)
    );
    assert_eq!(report.failures, 0, "fuzz exit: {:?}", report.first);
}
