//! The containers' records under `--root`: one directory a container, holding
//! `state.json` (what `create` learnt: the VMM's pid and start time, the bundle,
//! the annotations, the hooks still to run and the cgroup directories made) and, while the container is
//! created but not started, the start gate `exec.fifo`.
//!
//! Every write goes to a temporary file first and is renamed over the record, so
//! a reader sees the old record or the new one, never half of either. A
//! directory without a readable record (onering died between making it and
//! writing the record) is still removed by `delete`; the gate process such a
//! crash may leave behind notices its FIFO is gone and exits.
//!
//! The status is never stored: it is read from the host each time. The VMM's pid
//! and start time (field 22 of /proc/PID/stat) name the process even after its
//! pid is reused; alive and gated is `created`, alive is `running`, else `stopped`.

use oci_spec::runtime::Hooks;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a container's record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("container {0} does not exist")]
    NotFound(String),
    #[error("container {0} already exists")]
    Exists(String),
    #[error("invalid container id {0:?}")]
    BadId(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: corrupt record: {1}")]
    Corrupt(String, serde_json::Error),
}

/// What `create` wrote down about a container.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Record {
    pub id: String,
    pub pid: i32,
    pub start_time: u64,
    pub bundle: PathBuf,
    pub created: String,
    pub oci_version: String,
    pub annotations: BTreeMap<String, String>,
    pub hooks: Option<Hooks>,
    /// The cgroup directories `create` made for the VMM (`cgroup.rs`), which
    /// `delete` removes. (Absent from older records: none.)
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
}

/// A container's status, as the OCI state reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    Created,
    Running,
    Stopped,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Stopped => "stopped",
        }
    }
}

/// The directory of all records (`--root`).
pub struct Store {
    pub root: PathBuf,
}

const RECORD: &str = "state.json";
/// The start gate: the VMM process waits for a byte on it before it runs.
pub const GATE: &str = "exec.fifo";

impl Store {
    /// The directory of container `id` (which must be a plain name).
    pub fn dir(&self, id: &str) -> Result<PathBuf, StateError> {
        let plain = !id.is_empty() && id != "." && id != ".." && !id.contains('/') && !id.contains('\0');
        if !plain {
            return Err(StateError::BadId(id.to_string()));
        }
        Ok(self.root.join(id))
    }

    /// Makes the directory of a new container `id`.
    pub fn make(&self, id: &str) -> Result<PathBuf, StateError> {
        let dir = self.dir(id)?;
        let io = |e| StateError::Io(dir.display().to_string(), e);
        std::fs::create_dir_all(&self.root).map_err(io)?;
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(StateError::Exists(id.to_string())),
            r => r.map_err(io).map(|()| dir.clone()),
        }
    }

    /// Writes the record of `r.id`, atomically.
    pub fn save(&self, r: &Record) -> Result<(), StateError> {
        let text = serde_json::to_vec(r).expect("a record serializes");
        write_atomically(&self.dir(&r.id)?.join(RECORD), &text)
    }

    /// Reads the record of `id`.
    pub fn load(&self, id: &str) -> Result<Record, StateError> {
        let path = self.dir(id)?.join(RECORD);
        let text = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StateError::NotFound(id.to_string()),
            _ => StateError::Io(path.display().to_string(), e),
        })?;
        serde_json::from_slice(&text).map_err(|e| StateError::Corrupt(path.display().to_string(), e))
    }

    /// Removes the directory of `id`, whatever is in it; false if there was none.
    pub fn remove(&self, id: &str) -> Result<bool, StateError> {
        let dir = self.dir(id)?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StateError::Io(dir.display().to_string(), e)),
        }
    }

    /// The status of the container `r` describes.
    pub fn status(&self, r: &Record) -> Status {
        if !alive(r.pid, r.start_time) {
            Status::Stopped
        } else if self.root.join(&r.id).join(GATE).exists() {
            Status::Created
        } else {
            Status::Running
        }
    }
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let io = |e| StateError::Io(path.display().to_string(), e);
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// (state, start time) of process `pid` from /proc/PID/stat.
fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields start after it.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Some((fields.first()?.chars().next()?, fields.get(19)?.parse().ok()?))
}

/// The start time of process `pid` (0 if it has none).
pub fn start_time(pid: i32) -> u64 {
    proc_stat(pid).map_or(0, |(_, t)| t)
}

/// Whether process `pid`, started at `start`, still runs (a zombie does not).
pub fn alive(pid: i32, start: u64) -> bool {
    pid > 0 && matches!(proc_stat(pid), Some((s, t)) if t == start && s != 'Z' && s != 'X')
}

/// The time now as RFC 3339 (UTC, nanoseconds), as runc writes it.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (days, secs) = ((d.as_secs() / 86400) as i64, d.as_secs() % 86400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d.subsec_nanos()
    )
}

/// The OCI state of a container (runtime spec, "State"), with runc's extra
/// fields `rootfs`, `created` and `owner`.
pub fn oci_state(r: &Record, status: Status) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": r.oci_version,
        "id": r.id,
        "status": status.name(),
        "pid": if status == Status::Stopped { 0 } else { r.pid },
        "bundle": r.bundle,
        "rootfs": r.bundle.join("rootfs"),
        "created": r.created,
        "owner": "",
        "annotations": r.annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_status() {
        let root = std::env::temp_dir().join(format!("onering-oci-state-{}", std::process::id()));
        let store = Store { root: root.clone() };
        assert!(matches!(store.dir("a/b"), Err(StateError::BadId(_))));
        assert!(matches!(store.dir(".."), Err(StateError::BadId(_))));
        let dir = store.make("c1").unwrap();
        assert!(matches!(store.make("c1"), Err(StateError::Exists(_))));
        // A directory without a record (a crash mid-create) still goes.
        assert!(matches!(store.load("c1"), Err(StateError::NotFound(_))));
        let me = std::process::id() as i32;
        let r = Record {
            id: "c1".into(),
            pid: me,
            start_time: start_time(me),
            bundle: "/b".into(),
            created: now_rfc3339(),
            oci_version: "1.0.2".into(),
            annotations: BTreeMap::new(),
            hooks: None,
            cgroups: vec![],
        };
        store.save(&r).unwrap();
        assert_eq!(store.status(&store.load("c1").unwrap()), Status::Running);
        // A record from before `cgroups` was kept still loads: none made.
        let mut old = serde_json::to_value(&r).unwrap();
        old.as_object_mut().unwrap().remove("cgroups");
        let old: Record = serde_json::from_value(old).unwrap();
        assert!(old.cgroups.is_empty());
        std::fs::write(dir.join(GATE), "").unwrap();
        assert_eq!(store.status(&r), Status::Created);
        let stale = Record { start_time: r.start_time + 1, ..r.clone() };
        assert_eq!(store.status(&stale), Status::Stopped);
        assert_eq!(oci_state(&stale, Status::Stopped)["pid"], 0);
        assert!(store.remove("c1").unwrap());
        assert!(!store.remove("c1").unwrap());
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn timestamps() {
        let t = now_rfc3339();
        assert_eq!(t.len(), "2026-11-26T22:51:26.123456789Z".len(), "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'));
    }
}
