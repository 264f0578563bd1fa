//! /proc and /sys: read-only synthetic subtrees of the file tree (`vfs::synth`),
//! made from the kernel's state. Their directories and links are tree nodes, so
//! every path call works on them; a path call that reaches into /proc first brings
//! the tree up to date ([`refresh`]: a directory per process, its descriptors and
//! threads, the links' targets), outside the tree's lock since descriptor tables
//! come before it in the lock order. A file's bytes are made when it is first
//! read (Linux's seq_file: reads at any offset of one snapshot per open), by the
//! pure formatters of `procfmt`; /sys's tree is made once at boot (its values
//! follow `--smp` and `--mem`, which never change).

use super::procfmt::{self as fmt, CpuId, MapLine, ProcInfo, TreeProc};
use super::NodeRef;
use crate::errno::{Errno, SysResult};
use crate::file::{mode as fmode, oflag, File, FileRef, Meta, OpenFile};
use crate::mm::user::UserMem;
use crate::mm::vma::{VmaKind, PROT_EXEC, PROT_WRITE};
use crate::task::process::ExecImage;
use crate::task::{process, sched, thread, Ctx, Kernel};
use crate::vfs::{Data, Ino, Vfs, ROOT};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::sync::atomic::Ordering::Relaxed;
use onering_arch::sync::Mutex;
use spin::Once;

/// Makes /proc (filled on first use) and /sys for `ncpus` CPUs: at boot, before
/// the rootfs is read (whose own /proc and /sys they hide).
pub fn mount(v: &mut Vfs, ncpus: usize) {
    let sys = v.synth_root(b"sys");
    v.sync(sys, &fmt::sys_tree(ncpus), 0);
    v.synth_root(b"proc");
}

/// Whether a path call on `path` (relative to the directory open as `dir`, if
/// given) must [`refresh`] /proc first (/dev/fd is a link into it).
pub fn reaches_proc(path: &[u8], dir: Option<&FileRef>) -> bool {
    match path.strip_prefix(b"/proc").or_else(|| path.strip_prefix(b"/dev/fd")) {
        Some(rest) => rest.is_empty() || rest[0] == b'/',
        None => path.first() != Some(&b'/') && dir.is_some_and(|d| d.downcast::<ProcFile>().is_some()),
    }
}

/// The descriptor-table side of a process, taken before the tree is locked.
struct Taken {
    pid: u64,
    tids: Vec<u64>,
    /// Each descriptor: its node, or the name of what it is (`anon_name`); and
    /// the file, kept alive (and so its node) until the tree is read.
    fds: Vec<(u64, Result<Ino, Vec<u8>>, FileRef)>,
    cwd: Ino,
    /// Keeps the working directory alive until the tree is read.
    _hold: Option<crate::vfs::Hold>,
    /// What /proc/PID/exe names.
    exe: Vec<u8>,
}

/// Brings /proc up to what the processes are now, for the calling thread of `ctx`
/// (its `self` and `thread-self`).
pub fn refresh(ctx: &Ctx) {
    let k = ctx.k;
    let taken: Vec<Taken> = process::all()
        .into_iter()
        .map(|p| {
            let pid = p.pid();
            let files: Vec<(u64, FileRef)> = p.fds.lock().iter().map(|(n, f)| (n, f.clone())).collect();
            // (Named before the tree's lock: a socket's stat takes its stack's.)
            let fds = files.into_iter().map(|(n, f)| (n, f.node().ok_or_else(|| anon_name(&f)), f)).collect();
            let (cwd, _hold) = {
                let fs = p.fs.lock();
                (fs.cwd, fs.cwd_hold.clone())
            };
            let tids = sched::threads_of(pid).iter().map(|t| t.tid()).collect();
            let exe = image_of(k, p).exe.clone();
            Taken { pid, tids, fds, cwd, _hold, exe }
        })
        .collect();
    // (Files are dropped after the tree's lock: a last close may take it.)
    let mut v = k.vfs.lock();
    let procs: Vec<TreeProc> = taken
        .iter()
        .map(|t| TreeProc {
            pid: t.pid,
            tids: t.tids.clone(),
            fds: t
                .fds
                .iter()
                .map(|(n, what, _)| {
                    let link = match what {
                        Ok(ino) => v.live_path(*ino).unwrap_or_else(|| b"(deleted)".to_vec()),
                        Err(name) => name.clone(),
                    };
                    (*n, link)
                })
                .collect(),
            cwd: v.path_of(t.cwd).unwrap_or_else(|_| b"/".to_vec()),
            exe: t.exe.clone(),
        })
        .collect();
    let tree = fmt::proc_tree(&procs, (ctx.thread.pid(), ctx.thread.tid()));
    if let Ok(root) = v.lookup(ROOT, b"/proc", false) {
        v.sync(root, &tree, crate::time::real_now());
    }
}

/// Opening `/proc/PID/fd/N`, `/proc/self/fd/N` or `/dev/fd/N` (absolute `path`; `me` the
/// caller's pid) when descriptor N has no tree node (its link cannot be
/// followed): a pipe end opened for what it does is opened again, as through
/// Linux's magic link (here the same open file description: a pipe has no
/// offset); anything else is ENXIO (Linux too refuses sockets; it would make the
/// other end of a pipe). None when `path` is no such link.
pub fn reopen(path: &[u8], flags: u32, me: u64) -> Option<Result<FileRef, Errno>> {
    let parts: Vec<&[u8]> = match path.strip_prefix(b"/dev/fd/") {
        // /dev/fd is a link to /proc/self/fd.
        Some(fd) => alloc::vec![&b"self"[..], b"fd", fd],
        None => path.strip_prefix(b"/proc/")?.split(|c| *c == b'/').collect(),
    };
    let [pid, b"fd", fd] = parts.as_slice() else { return None };
    let num = |p: &[u8]| core::str::from_utf8(p).ok()?.parse::<u64>().ok();
    let pid = if *pid == b"self" { me } else { num(pid)? };
    let f = process::find(pid)?.fds.lock().get(num(fd)?).ok().cloned()?;
    if f.node().is_some() || flags & oflag::O_PATH != 0 {
        return None;
    }
    let pipe = f.obj().stat().mode & fmode::S_IFMT == fmode::S_IFIFO;
    let same = match flags & oflag::O_ACCMODE {
        oflag::O_RDONLY => f.readable(),
        oflag::O_WRONLY => f.writable(),
        _ => false,
    };
    Some(if pipe && same { Ok(f) } else { Err(Errno::ENXIO) })
}

/// What /proc/PID/fd/N says a descriptor without a tree node is: what Linux
/// calls a pipe, a socket or an anonymous file.
fn anon_name(f: &FileRef) -> Vec<u8> {
    let m = f.obj().stat();
    let name = match m.mode & fmode::S_IFMT {
        fmode::S_IFIFO => alloc::format!("pipe:[{}]", m.ino),
        fmode::S_IFSOCK => alloc::format!("socket:[{}]", m.ino),
        _ if f.downcast::<super::eventfd::EventFdFile>().is_some() => String::from("anon_inode:[eventfd]"),
        _ if f.downcast::<super::epoll::EpollFile>().is_some() => String::from("anon_inode:[eventpoll]"),
        _ if f.downcast::<super::inotify::InotifyFile>().is_some() => String::from("anon_inode:inotify"),
        _ if f.downcast::<super::pidfd::PidFd>().is_some() => String::from("anon_inode:[pidfd]"),
        _ => String::from("anon_inode:[unknown]"),
    };
    name.into_bytes()
}

/// Whether node `ino` is in /proc or /sys (a generated file, or a directory or
/// link under one of them).
pub fn is_synthetic(v: &Vfs, ino: Ino) -> bool {
    match v.node(ino).data {
        Data::Generated => return true,
        Data::Dir(_) | Data::Symlink(_) => {}
        _ => return false,
    }
    v.in_synth(ino, [b"proc", b"sys"])
}

/// Opens node `ino` of /proc or /sys (see [`is_synthetic`]); `v` is locked.
pub fn open(k: &'static Kernel, v: &mut Vfs, ino: Ino, flags: u32) -> FileRef {
    let path = v.path_of(ino).unwrap_or_default();
    let node = NodeRef::new(&k.vfs, v, ino);
    let generated = matches!(v.node(ino).data, Data::Generated);
    OpenFile::new(ProcFile { node, path, k, generated, text: Mutex::new(None) }, flags)
}

/// An open file or directory of /proc or /sys.
pub struct ProcFile {
    node: NodeRef,
    /// Where it is (what it shows follows from that).
    path: Vec<u8>,
    k: &'static Kernel,
    generated: bool,
    /// The bytes, made at the first read.
    text: Mutex<Option<Arc<[u8]>>>,
}

impl ProcFile {
    fn text(&self) -> Result<Arc<[u8]>, Errno> {
        if let Some(t) = self.text.lock().as_ref() {
            return Ok(t.clone());
        }
        let t: Arc<[u8]> = generate(self.k, &self.path)?.into();
        Ok(self.text.lock().get_or_insert(t).clone())
    }
}

impl File for ProcFile {
    fn read(&self, of: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if !self.generated {
            return Err(Errno::EISDIR);
        }
        let text = self.text()?;
        let at = off.unwrap_or(of.offset());
        let from = (at.min(text.len() as u64)) as usize;
        let n = (text.len() - from).min(len.min(u64::from(u32::MAX)) as usize);
        user.write(buf, &text[from..from + n])?;
        if off.is_none() {
            of.set_offset(at + n as u64);
        }
        Ok(n as u64)
    }

    /// Nothing here can be written (opening for writing is refused already).
    fn write(&self, _: &OpenFile, _: &dyn UserMem, _: u64, _: u64, _: Option<u64>) -> SysResult {
        Err(Errno::EACCES)
    }

    fn stat(&self) -> Meta {
        self.node.meta()
    }

    /// As seq_file: from the start or the offset, never from the end.
    fn seek(&self, of: &OpenFile, off: i64, whence: u64) -> SysResult {
        let to = match whence {
            0 => off,
            1 => (of.offset() as i64).checked_add(off).ok_or(Errno::EINVAL)?,
            _ => return Err(Errno::EINVAL),
        };
        if to < 0 {
            return Err(Errno::EINVAL);
        }
        of.set_offset(to as u64);
        Ok(to as u64)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    /// Making the bytes takes processes' descriptor-table locks: not under the
    /// caller's own (see `File::long_io`).
    fn long_io(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The bytes of the /proc or /sys file at `path`.
fn generate(k: &Kernel, path: &[u8]) -> Result<Vec<u8>, Errno> {
    if let Some(rest) = path.strip_prefix(b"/sys/") {
        let pids: Vec<u64> = process::all().iter().map(|p| p.pid()).collect();
        let used = {
            let m = crate::mm::spaces::current().mm.lock();
            m.total_bytes() - m.free_bytes()
        };
        let t = fmt::sys_file(rest, sched::ncpus(), k.cfg.mem, used, &pids).ok_or(Errno::ENOENT)?;
        return Ok(t.into_bytes());
    }
    let rest = path.strip_prefix(b"/proc/").ok_or(Errno::ENOENT)?;
    let parts: Vec<&[u8]> = rest.split(|c| *c == b'/').collect();
    let num = |p: &[u8]| core::str::from_utf8(p).ok().and_then(|s| s.parse::<u64>().ok());
    match parts.as_slice() {
        [b"sys", sys @ ..] => sysctl(k, sys).map(String::into_bytes),
        [name] => top(k, name),
        [pid, rest @ ..] => {
            let pid = num(pid).ok_or(Errno::ENOENT)?;
            let p = process::find(pid).ok_or(Errno::ESRCH)?;
            match rest {
                [b"task", tid, file] => per_process(k, p, num(tid).ok_or(Errno::ENOENT)?, file),
                [b"fdinfo", fd] => {
                    let f = p.fds.lock().get(num(fd).ok_or(Errno::ENOENT)?).cloned()?;
                    let ino = f.node().map_or(f.obj().stat().ino, |i| i as u64 + 1);
                    Ok(fmt::fdinfo(f.offset(), f.flags(), ino).into_bytes())
                }
                [file] => per_process(k, p, pid, file),
                _ => Err(Errno::ENOENT),
            }
        }
        _ => Err(Errno::ENOENT),
    }
}

/// The system-wide files of /proc.
fn top(k: &Kernel, name: &[u8]) -> Result<Vec<u8>, Errno> {
    let ncpus = sched::ncpus();
    let up = crate::time::mono_now();
    let nprocs = process::all().len() as u64;
    let t = match name {
        b"meminfo" => fmt::meminfo(k.cfg.mem, crate::mm::spaces::current().mm.lock().free_bytes()),
        b"cpuinfo" => fmt::cpuinfo(ncpus, &cpuid()),
        b"stat" => {
            let btime = (crate::time::real_now() - up) / crate::time::NS_PER_SEC;
            fmt::kstat(ncpus, up / (crate::time::NS_PER_SEC / fmt::HZ), 0, btime, nprocs, 1)
        }
        b"uptime" => fmt::uptime(up, up * ncpus as u64),
        b"loadavg" => fmt::loadavg(1, nprocs, process::all().iter().map(|p| p.pid()).max().unwrap_or(1)),
        b"mounts" => return Ok(fmt::mounts(&mount_list(k))),
        b"filesystems" => String::from("nodev\tsysfs\nnodev\ttmpfs\nnodev\tproc\nnodev\tcgroup2\nnodev\tdevtmpfs\n"),
        b"version" => alloc::format!("Linux version {} (onering) {}\n", fmt::RELEASE, fmt::VERSION),
        _ => return Err(Errno::ENOENT),
    };
    Ok(t.into_bytes())
}

fn mount_list(k: &Kernel) -> Vec<fmt::Mount<'_>> {
    fmt::mount_list(k.cfg.flags & onering_abi::flags::READ_ONLY != 0, &k.cfg.volumes, &k.cfg.tmpfs)
}

/// The boot's random id (made at the first read).
static BOOT_ID: Once<[u8; 16]> = Once::new();

/// /proc/sys.
fn sysctl(k: &Kernel, path: &[&[u8]]) -> Result<String, Errno> {
    let random = || {
        let mut b = [0u8; 16];
        k.rng.lock().fill(&mut b);
        b
    };
    let line = |s: &str| alloc::format!("{s}\n");
    Ok(match path {
        [b"kernel", b"ostype"] => line(fmt::OSTYPE),
        [b"kernel", b"osrelease"] => line(fmt::RELEASE),
        [b"kernel", b"version"] => line(fmt::VERSION),
        [b"kernel", b"hostname"] => line(&String::from_utf8_lossy(&k.hostname.lock())),
        [b"kernel", b"domainname"] => line("(none)"),
        [b"kernel", b"pid_max"] => line("4194304"),
        [b"kernel", b"threads-max"] => alloc::format!("{}\n", k.cfg.mem / (128 << 10)),
        [b"kernel", b"ngroups_max"] => line("65536"),
        [b"kernel", b"random", b"boot_id"] => fmt::uuid(*BOOT_ID.call_once(random)),
        [b"kernel", b"random", b"uuid"] => fmt::uuid(random()),
        [b"kernel", b"random", b"entropy_avail"] => line("256"),
        [b"vm", b"overcommit_memory"] => line("0"),
        [b"vm", b"max_map_count"] => line("65530"),
        [b"net", b"core", b"somaxconn"] => line("4096"),
        [b"fs", b"file-max"] => line("9223372036854775807"),
        [b"fs", b"nr_open"] => alloc::format!("{}\n", crate::file::NR_OPEN),
        _ => return Err(Errno::ENOENT),
    })
}

/// The files of /proc/PID/ (and of /proc/PID/task/TID/ for thread `tid`).
fn per_process(k: &Kernel, p: &'static process::Process, tid: u64, file: &[u8]) -> Result<Vec<u8>, Errno> {
    let text = match file {
        b"stat" => fmt::stat(&info(k, p, tid)?),
        b"statm" => fmt::statm(&info(k, p, tid)?),
        b"status" => fmt::status(&info(k, p, tid)?),
        b"comm" => {
            let c = *k.comm.lock();
            let n = c.iter().position(|b| *b == 0).unwrap_or(c.len());
            let mut v = c[..n].to_vec();
            v.push(b'\n');
            return Ok(v);
        }
        b"cmdline" => return Ok(image_of(k, p).cmdline.clone()),
        b"environ" => return Ok(image_of(k, p).environ.clone()),
        b"maps" => return Ok(fmt::maps(&maps(k, p.try_space().ok_or(Errno::ESRCH)?, &image_of(k, p)))),
        b"mounts" => return Ok(fmt::mounts(&mount_list(k))),
        b"mountinfo" => return Ok(fmt::mountinfo(&mount_list(k))),
        b"limits" => {
            let set = p.rlimits.lock().clone();
            let l: Vec<(u64, u64)> = (0..16u32)
                .map(|r| set.get(&r).copied().or_else(|| process::default_rlimit(r)).unwrap_or((u64::MAX, u64::MAX)))
                .collect();
            fmt::limits(&l)
        }
        b"cgroup" => String::from("0::/\n"),
        b"oom_score_adj" => String::from("0\n"),
        _ => return Err(Errno::ENOENT),
    };
    Ok(text.into_bytes())
}

/// What stat and status say about process `p` (thread `tid`).
fn info(k: &Kernel, p: &'static process::Process, tid: u64) -> Result<ProcInfo, Errno> {
    let pid = p.pid();
    // (The process's view needs no live first thread: it may have ended first.)
    let t = sched::thread(tid).filter(|t| t.pid() == pid);
    if t.is_none() && tid != pid {
        return Err(Errno::ESRCH);
    }
    let me = thread::try_current().map(|t| t.tid());
    let mut sig = [0u64; 4];
    sig[0] = t.map_or(0, |t| t.sigmask.load(Relaxed));
    for (i, a) in p.actions.lock().iter().enumerate() {
        match a[0] {
            0 => {}
            1 => sig[1] |= 1 << i,
            _ => sig[2] |= 1 << i,
        }
    }
    sig[3] = t.map_or(0, |t| t.pending.load(Relaxed) & !crate::task::thread::STOP_MARK);
    let (mut vsize, mut stack, mut data, mut text, mut start_stack) = (0, 0, 0, 0, 0);
    let space = p.try_space().ok_or(Errno::ESRCH)?;
    let rss = {
        let m = space.mm.lock();
        for v in m.vmas.iter() {
            let len = v.end - v.start;
            vsize += len;
            match v.kind {
                VmaKind::Stack => {
                    stack += len;
                    start_stack = v.end;
                }
                VmaKind::Image if v.prot & PROT_EXEC != 0 => text += len,
                VmaKind::File(_) => {}
                _ if v.prot & PROT_WRITE != 0 => data += len,
                _ => {}
            }
        }
        m.total_bytes() - m.free_bytes()
    };
    Ok(ProcInfo {
        pid,
        tid,
        ppid: p.ppid.load(Relaxed),
        comm: {
            let c = *k.comm.lock();
            c.iter().take_while(|b| **b != 0).copied().collect()
        },
        state: if crate::task::job::is_stopped(p) {
            b'T'
        } else if t.is_some_and(|t| t.sleeping()) && me != Some(tid) {
            b'S'
        } else {
            b'R'
        },
        threads: p.threads.load(Relaxed) as u64,
        uid: k.cfg.uid,
        gid: k.cfg.gid,
        umask: p.fs.lock().umask,
        caps: k.cfg.caps,
        no_new_privs: k.no_new_privs.load(Relaxed),
        vsize,
        rss,
        stack,
        data,
        text,
        start: p.started.load(Relaxed) / (crate::time::NS_PER_SEC / fmt::HZ),
        fds: p.fds.lock().iter().count() as u64,
        sig,
        cpus: sched::ncpus(),
        start_stack,
    })
}

/// What process `p` runs: what `execve` loaded, or the first program.
fn image_of(k: &Kernel, p: &process::Process) -> Arc<ExecImage> {
    p.image.lock().clone().unwrap_or_else(|| {
        Arc::new(ExecImage {
            exe: k.cfg.exe.clone(),
            cmdline: k.cfg.cmdline.clone(),
            environ: k.cfg.environ.clone(),
            span: k.cfg.image,
            vdso: k.cfg.vdso,
        })
    })
}

/// The lines of /proc/PID/maps: the VMAs of the process's address space, named
/// after what it runs.
fn maps(k: &Kernel, space: &crate::mm::spaces::Space, image: &ExecImage) -> Vec<MapLine> {
    let (lo, hi) = image.span;
    let vdso = image.vdso;
    let vvar = vdso.saturating_sub(onering_abi::vvar::BELOW_VDSO);
    // Under the memory lock: the VMAs, and the file mappings' records (kept alive
    // until their paths are read under the tree's lock, which comes first).
    let mut lines: Vec<(MapLine, Option<Arc<crate::mm::filemap::FileMap>>)> = Vec::new();
    {
        let m = space.mm.lock();
        for v in m.vmas.iter() {
            let line = MapLine { start: v.start, end: v.end, prot: v.prot, ..MapLine::default() };
            match v.kind {
                VmaKind::Image if v.start >= lo && v.end <= hi => {
                    let l = MapLine { offset: v.start - lo, name: image.exe.clone(), ..line };
                    lines.push((l, None));
                }
                VmaKind::Image => {
                    // The trampolines, the vDSO's clock page and the vDSO.
                    let cuts = [(v.start, vvar, &b""[..]), (vvar, vdso, b"[vvar]"), (vdso, v.end, b"[vdso]")];
                    for (s, e, name) in cuts {
                        let (s, e) = (s.max(v.start), e.min(v.end));
                        if s < e && vdso != 0 {
                            lines.push((MapLine { start: s, end: e, name: name.to_vec(), ..line.clone() }, None));
                        }
                    }
                    if vdso == 0 {
                        lines.push((line, None));
                    }
                }
                VmaKind::Brk => lines.push((MapLine { name: b"[heap]".to_vec(), ..line }, None)),
                VmaKind::Stack => lines.push((MapLine { name: b"[stack]".to_vec(), ..line }, None)),
                VmaKind::Anon => lines.push((line, None)),
                VmaKind::Shared => {
                    lines.push((MapLine { name: b"/dev/zero (deleted)".to_vec(), shared: true, ..line }, None))
                }
                VmaKind::File(_) => {
                    let f = m.file_at(v.start);
                    let l = match &f {
                        Some(f) => MapLine { offset: f.offset_of(v.start), shared: f.shared, ..line },
                        None => line,
                    };
                    lines.push((l, f));
                }
            }
        }
    }
    let v = k.vfs.lock();
    let out = lines
        .iter()
        .map(|(l, f)| match f.as_ref().and_then(|f| f.file.node()) {
            Some(ino) => MapLine { ino: ino as u64 + 1, name: v.path_of(ino).unwrap_or_default(), ..l.clone() },
            None => l.clone(),
        })
        .collect();
    drop(v);
    out
}

/// The CPU's vendor, model and flags from CPUID (the VMM's table).
fn cpuid() -> CpuId {
    // Each answer is [EAX, EBX, ECX, EDX].
    let cpuid = |leaf| onering_arch::cpuid::query(leaf, 0);
    let [max, b0, c0, d0] = cpuid(0);
    let mut vendor = Vec::new();
    for r in [b0, d0, c0] {
        vendor.extend_from_slice(&r.to_le_bytes());
    }
    let [eax1, _, ecx1, edx1] = cpuid(1);
    let l7 = if max >= 7 { cpuid(7)[1] } else { 0 };
    let family = (eax1 >> 8) & 0xf;
    let model = ((eax1 >> 4) & 0xf) | if family >= 6 { ((eax1 >> 16) & 0xf) << 4 } else { 0 };
    let mut name = Vec::new();
    if cpuid(0x8000_0000)[0] >= 0x8000_0004 {
        for leaf in 0x8000_0002..=0x8000_0004u32 {
            for x in cpuid(leaf) {
                name.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
    let text = |b: &[u8]| String::from(String::from_utf8_lossy(b).trim_matches(|c: char| c == '\0' || c == ' '));
    CpuId {
        vendor: text(&vendor),
        family: family + if family == 0xf { (eax1 >> 20) & 0xff } else { 0 },
        model,
        stepping: eax1 & 0xf,
        name: text(&name),
        mhz: crate::time::tsc_hz() / 1_000_000,
        flags: fmt::cpu_flags([edx1, ecx1, l7]),
    }
}

/// Whether opening node `ino` for writing is refused (EACCES: nothing of /proc or
/// /sys can be written).
pub fn write_refused(v: &Vfs, ino: Ino, flags: u32) -> bool {
    flags & oflag::O_ACCMODE != oflag::O_RDONLY && matches!(v.node(ino).data, Data::Generated)
}
