//! Host files (issue 16): `-v` volumes read and written through to the host and
//! confined to their directory (links, `..`, a directory swapped for a link while
//! in use), SQLite file databases on /tmp and on a volume (as the host runs them,
//! and two VMs on one database), data on the host after a crash, the page cache
//! giving its memory back under pressure, inotify on a volume, `open(O_CREAT)`,
//! deferred closes and unlocks on a volume as the host has them, and a file a
//! child wrote whole for its parent however its deferred writes went.

mod common;

use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// tests/guest/c/sqlite.c linked statically against Debian's libsqlite3 (glibc).
fn sqlite() -> PathBuf {
    static ONCE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ONCE.lock().unwrap_or_else(|e| e.into_inner());
    let bin = out_dir().join("sqlite-glibc");
    if !bin.exists() {
        let out = Command::new("gcc")
            .args(["-static", "-O2"])
            .arg(root().join("tests/guest/c/sqlite.c"))
            .arg("-o")
            .arg(&bin)
            .args(["-lsqlite3", "-lm", "-lpthread"])
            .output()
            .expect("gcc (apt-get install gcc libsqlite3-dev)");
        assert!(out.status.success(), "building sqlite.c: {}", String::from_utf8_lossy(&out.stderr));
    }
    bin
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = out_dir().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vol(host: &Path, guest: &str) -> String {
    format!("{}:{guest}", host.display())
}

#[test]
fn volumes_are_read_and_written_through_and_nothing_outside_is_reachable() {
    let bin = musl("volumes");
    require_kvm();
    let top = fresh_dir("volumes");
    let (data, outside, ro) = (top.join("data"), top.join("outside"), top.join("ro"));
    for d in [&data, &outside, &ro, &data.join("sub"), &data.join("many")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(outside.join("secret"), "SECRET\n").unwrap();
    std::fs::write(data.join("in.txt"), "from the host\n").unwrap();
    std::fs::write(ro.join("in.txt"), "read-only\n").unwrap();
    std::os::unix::fs::symlink(&outside, data.join("abs")).unwrap();
    std::os::unix::fs::symlink("../outside", data.join("rel")).unwrap();
    for i in 0..100_000 {
        std::fs::File::create(data.join("many").join(format!("f{i}"))).unwrap();
    }
    // The swap: data/swap is a directory holding a harmless "secret", or a link to
    // the outside, back and forth while the program reads through it.
    let swap = data.join("swap");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (swap, outside, stop) = (swap.clone(), outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let (dir, link) = (swap.with_extension("d"), swap.with_extension("l"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("secret"), "harmless\n").unwrap();
            std::os::unix::fs::symlink(&outside, &link).unwrap();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (from, back) = if n.is_multiple_of(2) { (&dir, &dir) } else { (&link, &link) };
                let _ = std::fs::rename(from, &swap);
                std::thread::yield_now();
                let _ = std::fs::rename(&swap, back);
                n += 1;
            }
            n
        })
    };
    let o =
        onering(&["run", "-v", &vol(&data, "/data"), "-v", &format!("{}:/ro:ro", ro.display()), bin.to_str().unwrap()]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let out = stdout(&o);
    assert!(!out.contains("LEAK") && !out.contains("FAIL"), "{out}{}", stderr(&o));
    assert_eq!(status(&o), 0, "{out}{}", stderr(&o));
    assert!(swaps > 100, "the directory was swapped {swaps} times");
    // What the program did is on the host.
    assert_eq!(std::fs::read(data.join("d/moved.txt")).unwrap(), b"from");
    assert_eq!(std::fs::read_link(data.join("d/l")).unwrap(), Path::new("moved.txt"));
    assert!(!data.join("in.txt").exists() && !ro.join("new").exists());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(data.join("d/moved.txt")).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"SECRET\n");
}

#[test]
fn bad_volumes_are_refused_clearly() {
    let bin = musl("hello");
    let d = fresh_dir("volumes-bad");
    let file = d.join("file");
    std::fs::write(&file, "").unwrap();
    for (v, text) in [
        (format!("{}:/x", d.join("missing").display()), "not a directory"),
        (format!("{}:/x", file.display()), "not a directory"),
        (format!("{}:relative", d.display()), "absolute path"),
        (format!("{}:/tmp/x", d.display()), "cannot be"),
        (format!("{}:/x:rx", d.display()), "HOST:GUEST"),
    ] {
        let o = onering(&["run", "-v", &v, bin.to_str().unwrap()]);
        assert_eq!(status(&o), 125, "-v {v}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("onering: -v ") && stderr(&o).contains(text), "-v {v}: {}", stderr(&o));
    }
}

#[test]
fn sqlite_databases_on_tmp_and_on_a_volume_match_the_host() {
    let bin = sqlite();
    require_kvm();
    let d = fresh_dir("sqlite");
    for mode in ["delete", "wal"] {
        let host = Command::new(&bin).arg(d.join("host.db")).arg(mode).output().unwrap();
        assert_eq!(host.status.code(), Some(0), "{}", stdout(&host));
        for path in ["/tmp/t.db", "/data/v.db"] {
            let o = onering(&["run", "--mem", "512M", "-v", &vol(&d, "/data"), bin.to_str().unwrap(), path, mode]);
            assert_eq!(stdout(&o), stdout(&host), "{mode} at {path}: {}", stderr(&o));
            assert_eq!(status(&o), 0);
        }
        // The volume's database is on the host, whole.
        let check =
            Command::new("sqlite3").arg(d.join("v.db")).arg("PRAGMA integrity_check; SELECT count(*) FROM t;").output();
        if let Ok(c) = check {
            assert_eq!(stdout(&c), "ok\n5000\n", "the host reads the VM's database ({mode})");
        }
    }
}

#[test]
fn two_vms_share_one_volume_database_through_host_locks() {
    let bin = sqlite();
    require_kvm();
    let d = fresh_dir("sqlite-share");
    std::fs::remove_file(d.join("s.db")).ok();
    // Made first, so that both VMs find the table.
    let o = onering(&["run", "-v", &vol(&d, "/data"), bin.to_str().unwrap(), "/data/s.db", "share", "0", "init"]);
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    // Two VMs insert side by side.
    let a = cmd(&["run", "-v", &vol(&d, "/data"), bin.to_str().unwrap(), "/data/s.db", "share", "300", "a"])
        .spawn()
        .unwrap();
    let b = cmd(&["run", "-v", &vol(&d, "/data"), bin.to_str().unwrap(), "/data/s.db", "share", "300", "b"])
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!((status(&a), status(&b)), (0, 0), "{}{}{}{}", stdout(&a), stderr(&a), stdout(&b), stderr(&b));
    let c = Command::new("sqlite3")
        .arg(d.join("s.db"))
        .arg("PRAGMA integrity_check; SELECT tag, count(*) FROM s GROUP BY tag;")
        .output()
        .expect("sqlite3 (apt-get install sqlite3)");
    assert_eq!(stdout(&c), "ok\na|300\nb|300\n");
}

#[test]
fn what_a_program_wrote_to_a_volume_is_on_the_host_after_it_crashed() {
    let bin = musl("crashwrite");
    require_kvm();
    let d = fresh_dir("crash");
    let o = onering(&["run", "-v", &vol(&d, "/data"), bin.to_str().unwrap()]);
    assert_eq!(status(&o), 139, "killed by SIGSEGV: {}", stderr(&o));
    assert_eq!(std::fs::read(d.join("log")).unwrap(), b"before the crash\n");
}

/// tests/guest/c/volrace.c: a child writes a volume file in small writes (the
/// header at offset 0 last) and ends; its parent reads it (fstat, read, mmap)
/// while a third process keeps sending the waiting writes from its own vCPU
/// (msync). A write sent that way must reach the host before any call made after
/// it was sent (`onering_arch::hostcall::fs::flush`). Before that held, the
/// parent read the file without it in 0 to 23 rounds of 500 (more on a busy
/// host), as ld now and then found an object file GNU as had just written short
/// (`make -j2` on a volume, `--smp 2`).
#[test]
fn a_file_a_child_wrote_to_a_volume_is_whole_for_its_parent() {
    let bin = musl("volrace");
    require_kvm();
    let d = fresh_dir("volrace");
    let o = onering(&["run", "--smp", "2", "-v", &vol(&d, "/data"), bin.to_str().unwrap(), "/data", "1000"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "rounds 1000, bad 0\n"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "everything it made is removed on the host");
}

#[test]
fn writes_through_a_shared_mapping_of_a_volume_file_reach_the_host() {
    let bin = musl("mmapvol");
    require_kvm();
    let d = fresh_dir("mmapvol");
    std::fs::write(d.join("m"), vec![b'a'; 8192]).unwrap();
    let o = onering(&["run", "-v", &vol(&d, "/data"), bin.to_str().unwrap()]);
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "shared reads the file: yes\nmsync: 0\n");
    let m = std::fs::read(d.join("m")).unwrap();
    assert_eq!(&m[100..102], b"vm", "written back at msync");
    assert_eq!(m[200], b'x', "written back at the program's end");
    assert_eq!(m[300], b'a', "a private mapping's write stays in the VM");
    assert_eq!(m.len(), 8192);
}

#[test]
fn large_file_mappings_are_filled_as_touched() {
    // tests/guest/c/mmaplazy.c: a 400 MiB file with data everywhere mapped whole
    // at --mem 256M (filled eagerly, it would not fit), a 1 GiB sparse file mapped
    // shared and private, MAP_POPULATE, MADV_DONTNEED, read() and write() with a
    // buffer in blocks not filled yet: the host's output.
    let bin = musl("mmaplazy");
    require_kvm();
    let (on_host, in_vm) = (fresh_dir("mmaplazy-host"), fresh_dir("mmaplazy-vol"));
    let host = Command::new(&bin).arg(&on_host).output().unwrap();
    assert!(host.status.success(), "on the host: {}", stdout(&host));
    for smp in ["1", "2"] {
        let o = onering(&["run", "--mem", "256M", "--smp", smp, "-v", &vol(&in_vm, "/data"), bin.to_str().unwrap()]);
        assert_eq!(stdout(&o), stdout(&host), "--smp {smp}: {}", stderr(&o));
        assert_eq!(status(&o), 0);
    }
}

#[test]
fn inotify_on_a_volume_reports_the_programs_own_changes_as_the_host_does() {
    // tests/guest/c/inotify.c in a volume's directory (without its overflow and
    // blocking read): the same events as the program run on the host in a host
    // directory. (Changes made on the host by others are not seen in the VM.)
    let bin = musl("inotify");
    require_kvm();
    let (on_host, in_vm) = (fresh_dir("inotify-host"), fresh_dir("inotify-vol"));
    let host = Command::new(&bin).arg(&on_host).arg("quick").output().unwrap();
    assert!(host.status.success(), "on the host: {}", stdout(&host));
    let o = onering(&["run", "-v", &vol(&in_vm, "/data"), bin.to_str().unwrap(), "/data", "quick"]);
    assert_eq!(stdout(&o), stdout(&host), "{}", stderr(&o));
    assert_eq!(status(&o), 0);
    assert_eq!(std::fs::read_dir(&in_vm).unwrap().count(), 0, "everything it made is removed on the host");
}

/// The host's side of tests/guest/c/volmeta.c, run beside `child` (the program
/// on the host, or onering) working in `dir`: once it made "ready", whether its
/// unlock and its write are the host's (a write lock on "locked" is granted
/// here, "pending" holds "abc") and its read lock on "rd" too (a write lock
/// refused, a read lock granted); then "a"
/// grows and "hostmade" appears, and "changed" says so; once "idle" exists,
/// whether `child` lets its descriptor go within a second (the VMM's deferred
/// close sent when the VM idles).
fn volmeta_host_side(dir: &Path, child: std::process::Child) -> (Output, bool, bool) {
    use std::os::fd::AsRawFd;
    let wait_for = |name: &str| {
        for _ in 0..2000 {
            if dir.join(name).exists() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    };
    assert!(wait_for("ready"), "the program never made ready");
    assert_eq!(std::fs::read(dir.join("pending")).unwrap(), b"abc", "a write reached the host with the next call");
    // An OFD lock of `kind` on `len` bytes of `name`, taken here: granted?
    let try_lock = |name: &str, kind: i32, len: i64| {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(dir.join(name)).unwrap();
        // SAFETY: `flock` is plain integers: all-zero bytes are a valid value.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as i16;
        fl.l_len = len;
        // SAFETY: F_OFD_SETLK reads `fl`, alive across the call, on an open descriptor.
        let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        r == 0
    };
    // "locked" was unlocked; "rd"'s first byte is read-locked.
    let unlocked =
        try_lock("locked", libc::F_WRLCK, 10) && !try_lock("rd", libc::F_WRLCK, 1) && try_lock("rd", libc::F_RDLCK, 1);
    std::fs::OpenOptions::new().append(true).open(dir.join("a")).unwrap().write_all(b"host").unwrap();
    std::fs::write(dir.join("hostmade"), "host\n").unwrap();
    std::fs::write(dir.join("changed"), "").unwrap();
    assert!(wait_for("idle"), "the program never made idle");
    let pid = child.id();
    let holds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|fds| fds.flatten().any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == dir.join("idle"))))
            .unwrap_or(false)
    };
    let mut closed = false;
    for _ in 0..100 {
        // (The file is written and closed right after it is made.)
        std::thread::sleep(std::time::Duration::from_millis(10));
        if !holds() && std::fs::metadata(dir.join("idle")).is_ok_and(|m| m.len() == 1) {
            closed = true;
            break;
        }
    }
    (child.wait_with_output().unwrap(), unlocked, closed)
}

#[test]
fn open_with_create_closes_and_unlocks_on_a_volume_behave_as_on_the_host() {
    use std::process::Stdio;
    let bin = musl("volmeta");
    require_kvm();
    let (on_host, in_vm) = (fresh_dir("volmeta-host"), fresh_dir("volmeta-vol"));
    let child = Command::new(&bin).arg(&on_host).stdout(Stdio::piped()).spawn().unwrap();
    let (host, host_unlocked, host_closed) = volmeta_host_side(&on_host, child);
    assert!(host.status.success() && host_unlocked && host_closed, "on the host: {}", stdout(&host));
    let child = cmd(&["run", "--stats", "-v", &vol(&in_vm, "/data"), bin.to_str().unwrap(), "/data"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (o, unlocked, closed) = volmeta_host_side(&in_vm, child);
    assert_eq!(stdout(&o), stdout(&host), "{}", stderr(&o));
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(unlocked, "the unlock (and the read lock made of one) reached the host with the next file call");
    assert!(closed, "the closed file was let go when the VM idled");
    assert!(stderr(&o).contains("unlocks and writes carried by a later hostcall"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&in_vm).unwrap().count(), 0, "everything it made is removed on the host");
}

/// A file of `mb` MiB whose 32-bit word k is k * 2654435761 (tests/guest/c/reclaim.c
/// checks it).
fn numbered_file(path: &Path, mb: usize) {
    let mut data = Vec::with_capacity(mb << 20);
    for k in 0..(mb << 20) / 4 {
        data.extend_from_slice(&(k as u32).wrapping_mul(2_654_435_761).to_le_bytes());
    }
    std::fs::write(path, data).unwrap();
}

/// The number after `what: ` in `out` (`what: N MB`).
fn megabytes(out: &str, what: &str) -> i64 {
    let line = out.lines().find_map(|l| l.strip_prefix(&format!("{what}: "))).unwrap_or_else(|| panic!("{out}"));
    line.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{out}"))
}

/// The page cache gives its memory back under pressure: at --mem 256M a volume's
/// 128 MiB file read whole leaves the cache holding its quarter of RAM (64 MiB);
/// anonymous memory taken until ENOMEM afterwards, and /tmp written until ENOSPC
/// beside 96 MB of it, get as much as without the file read first (the cache's
/// chunks went, oldest first, and the heap's emptied regions went back to the
/// chunk allocator), where they got 64 MiB less before; the file reads back right
/// while the memory is held (no room to cache: straight to the program) and after.
#[test]
fn the_page_cache_gives_memory_back_under_pressure() {
    let bin = musl("reclaim");
    require_kvm();
    let d = fresh_dir("reclaim");
    numbered_file(&d.join("big"), 128);
    let run = |fill: bool| {
        let mut args = vec!["run", "--stats", "--mem", "256M", "-v"];
        let v = vol(&d, "/data");
        args.push(&v);
        args.extend([bin.to_str().unwrap(), "/data/big"]);
        if fill {
            args.push("fill");
        }
        let o = onering(&args);
        assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
        let out = stdout(&o);
        for what in ["read while held", "read at the end"] {
            assert!(out.contains(&format!("{what}: ok\n")), "{out}");
        }
        let reclaimed: u64 = stderr(&o)
            .lines()
            .find_map(|l| l.strip_prefix("onering: stats: page cache: "))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}", stderr(&o)));
        (out, reclaimed)
    };
    let (base, base_reclaimed) = run(false);
    let (full, reclaimed) = run(true);
    eprintln!("without the cache filled:\n{base}with:\n{full}chunks given back: {base_reclaimed}, {reclaimed}");
    assert!(full.starts_with("read: ok\n") && full.contains("read again: ok\n"), "{full}");
    // The cache held 64 MiB when memory ran out: all of it went.
    assert!(reclaimed >= 64 * 1024 / 64, "{reclaimed} chunks of 64 KiB given back");
    let (anon, anon_full) = (megabytes(&base, "anon"), megabytes(&full, "anon"));
    let (tmp, tmp_full) = (megabytes(&base, "tmp"), megabytes(&full, "tmp"));
    assert!(anon > 150 && tmp > 80, "{base}");
    // Within a few chunks (regions the heap keeps for other objects): without
    // reclaim, 64 MiB less.
    assert!(anon_full >= anon - 12, "anonymous memory: {anon_full} MB with the cache filled, {anon} MB without");
    assert!(tmp_full >= tmp - 12, "/tmp: {tmp_full} MB with the cache filled, {tmp} MB without");
}

/// The host-file poller (`vstate::poller`): a burst of volume calls (create,
/// write, read, close, stat, unlink) is answered right with most calls taking no
/// exit, on 1 and 2 vCPUs; a program that scribbles on every vCPU's poll slot
/// (random states, numbers, roots, arguments) while it uses the volume neither
/// crashes nor hangs the VMM, and the next VM on that volume works.
#[test]
fn host_file_calls_go_through_the_poller_and_scribbled_slots_harm_only_the_program() {
    let bin = musl("pollslot");
    let b = bin.to_str().unwrap();
    let d = fresh_dir("pollslot");
    let v = vol(&d, "/v");
    for smp in ["1", "2"] {
        // The poller serves calls only while it gets a host CPU beside the vCPU;
        // on a machine busy with other tests a run may have it serve none, so up
        // to ten runs (each checked) until one had calls served by it.
        let mut polled = 0;
        let mut last = String::new();
        for _ in 0..10 {
            let o = onering(&["run", "--smp", smp, "--stats", "-v", &v, b, "/v", "calm"]);
            assert_eq!((status(&o), stdout(&o).as_str()), (0, "done\n"), "{}", stderr(&o));
            last = stderr(&o);
            polled = last
                .lines()
                .find_map(|l| l.strip_suffix(" host-file calls served by the poller, without an exit"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0);
            if polled > 0 {
                break;
            }
        }
        assert!(polled > 0, "no call went through the poller in ten runs: {last}");
        // (The program may hang itself; the VMM must still end on SIGTERM: 124,
        // not 137 from the KILL that follows 10 s later.)
        let o = Command::new("timeout")
            .args(["-k", "10", "120", env!("CARGO_BIN_EXE_onering"), "run", "--smp", smp, "-v", &v, b, "/v"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(status(&o) != 137 && status(&o) != 101 && !err.contains("panicked at"), "--smp {smp}: {err}");
    }
    let o = onering(&["run", "-v", &v, b, "/v", "calm"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "done\n"), "{}", stderr(&o));
}
