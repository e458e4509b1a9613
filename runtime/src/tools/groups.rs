//! The ledger of the stdio tool servers a process started, kept in its data
//! directory so that the next start can kill what a SIGKILL left behind.
//!
//! A server's parent-death signal (see [`spawner`](super::spawner)) kills
//! the server itself when `leasehold` dies, but not what the server started:
//! a launcher's real server, a helper. Those stay in its process group,
//! re-parented to init. So each process that starts stdio servers keeps a
//! small file, `DATA_DIR/tool-groups/PID-START-N.json`, naming itself (its
//! pid and its start time, which together survive pid reuse) and each live
//! server's group: the group id, the leader's start time and the group's
//! token, an environment variable ([`GROUP_TOKEN_ENV`]) set for the server
//! and inherited by everything it starts. The file is rewritten (write, then
//! rename) when a server starts and when it is stopped, and removed when the
//! last one is; a SIGKILL leaves it.
//!
//! [`reap_leftover_groups`] — run by every command that opens the store of
//! a data directory, before it does anything else — reads the files of
//! processes that are no longer alive and kills, for each group: the whole
//! group if its leader still runs with the recorded start time, and every
//! process carrying the group's token, wherever it moved. A process is
//! killed only on that evidence: a stranger who got a reused pid or group id
//! carries no token. Then the file is removed. Files of live processes (two
//! executors on one PostgreSQL store may share a data directory) are left
//! alone.
//!
//! Linux only: the ledger reads `/proc`. Elsewhere nothing is recorded and
//! nothing reaped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

pub(crate) use super::spawner::GROUP_TOKEN_ENV;

/// The folder of the ledgers inside a data directory.
const FOLDER: &str = "tool-groups";

/// Tells ledgers (and tokens) of one process apart.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A process, named so that a reused pid is not mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Process {
    pid: u32,
    /// Clock ticks after boot (`/proc/PID/stat`, field 22).
    start: u64,
}

/// One started server's group.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Group {
    pgid: u32,
    leader_start: u64,
    token: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct LedgerFile {
    owner: Process,
    groups: Vec<Group>,
}

/// The ledger of one process's stdio tool servers in a data directory,
/// `DATA_DIR/tool-groups/PID-START-N.json`: this process (pid and start
/// time) and each live server's process group, its leader's start time and
/// the token set in its environment (`LEASEHOLD_TOOL_GROUP`), which
/// everything it starts inherits. Rewritten when a server starts or is
/// stopped; what a SIGKILL leaves is read by [`reap_leftover_groups`].
/// Linux only (elsewhere it records nothing). Share it as an `Arc`.
#[derive(Debug)]
pub struct ToolGroups {
    file: PathBuf,
    owner: Option<Process>,
    prefix: String,
    live: Mutex<BTreeMap<String, Group>>,
}

impl ToolGroups {
    /// A ledger in `data_dir`; nothing is written until a server starts.
    pub fn in_data_dir(data_dir: impl AsRef<Path>) -> Self {
        let owner = procfs::start_time(std::process::id()).map(|start| Process {
            pid: std::process::id(),
            start,
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = match owner {
            Some(owner) => format!("{}-{}-{n}", owner.pid, owner.start),
            None => format!("{}-{n}", std::process::id()),
        };
        Self {
            file: data_dir
                .as_ref()
                .join(FOLDER)
                .join(format!("{prefix}.json")),
            owner,
            prefix,
            live: Mutex::new(BTreeMap::new()),
        }
    }

    /// A new token for a server about to start.
    pub(super) fn token(&self) -> String {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("{}.{n}", self.prefix)
    }

    /// Records a started server, the leader of group `pgid`; the record is
    /// forgotten when the returned guard is dropped (after the group was
    /// killed).
    pub(super) fn started(self: &Arc<Self>, token: String, pgid: u32) -> Recorded {
        if let Some(leader_start) = procfs::start_time(pgid) {
            let group = Group {
                pgid,
                leader_start,
                token: token.clone(),
            };
            let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
            live.insert(token.clone(), group);
            self.write(&live);
        }
        Recorded {
            ledger: self.clone(),
            token,
        }
    }

    fn forget(&self, token: &str) {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if live.remove(token).is_some() {
            self.write(&live);
        }
    }

    /// Rewrites the file (or removes it when no server is left). Not synced:
    /// it only has to outlive this process, not the machine, whose restart
    /// ends the servers anyway. A failure costs the reap of this process's
    /// servers, not the run, so it is logged, not returned.
    fn write(&self, live: &BTreeMap<String, Group>) {
        let Some(owner) = self.owner else { return };
        let written = if live.is_empty() {
            match std::fs::remove_file(&self.file) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            let ledger = LedgerFile {
                owner,
                groups: live.values().cloned().collect(),
            };
            write_atomically(&self.file, &ledger)
        };
        if let Err(error) = written {
            tracing::warn!(
                file = %self.file.display(),
                "could not record the tool servers' process groups ({error}): a SIGKILL of this \
                 process would leave what they started running"
            );
        }
    }
}

fn write_atomically(file: &Path, ledger: &LedgerFile) -> std::io::Result<()> {
    let folder = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    let text = serde_json::to_vec(ledger).map_err(std::io::Error::other)?;
    let temporary = file.with_extension("json.new");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, file)
}

/// A server's entry in a ledger, forgotten on drop.
pub(super) struct Recorded {
    ledger: Arc<ToolGroups>,
    token: String,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.ledger.forget(&self.token);
    }
}

/// What [`reap_leftover_groups`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Ledgers of dead processes read and removed.
    pub ledgers: usize,
    /// Processes killed.
    pub killed: usize,
}

/// Kills what the tool servers of dead processes left running in
/// `data_dir`, and forgets them: for each [`ToolGroups`] ledger whose
/// process no longer runs (pid and start time), the whole group of each
/// server whose leader still runs with the recorded start time, and every
/// process carrying one of its tokens — a stranger with a reused pid carries
/// none. Ledgers of live processes are left alone. A data directory without
/// ledgers costs one failed `read_dir`; on other systems than Linux it does
/// nothing.
pub fn reap_leftover_groups(data_dir: &Path) -> Reaped {
    let mut reaped = Reaped::default();
    let Ok(entries) = std::fs::read_dir(data_dir.join(FOLDER)) else {
        return reaped;
    };
    let mut groups = Vec::new();
    let mut files = Vec::new();
    for path in entries.filter_map(|entry| Some(entry.ok()?.path())) {
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        let Ok(ledger) = serde_json::from_slice::<LedgerFile>(&text) else {
            // A half-written temporary or a stranger's file: a temporary is
            // only ever left by a kill mid-write, and its owner is dead.
            if path.extension().is_some_and(|ext| ext == "new") {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        };
        if procfs::start_time(ledger.owner.pid) == Some(ledger.owner.start) {
            continue;
        }
        groups.extend(ledger.groups);
        files.push(path);
    }
    reaped.killed = procfs::kill_groups(&groups);
    for file in &files {
        if std::fs::remove_file(file).is_ok() {
            reaped.ledgers += 1;
        }
    }
    if reaped.killed > 0 {
        tracing::warn!(
            killed = reaped.killed,
            "killed {} that tool servers of a killed leasehold process had left running",
            if reaped.killed == 1 {
                "1 process".to_owned()
            } else {
                format!("{} processes", reaped.killed)
            }
        );
    }
    reaped
}

#[cfg(target_os = "linux")]
mod procfs {
    //! What the ledger reads from `/proc`, and the kills.

    use std::collections::BTreeSet;

    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;

    use super::{GROUP_TOKEN_ENV, Group};

    /// The fields of `/proc/PID/stat` after the command's closing
    /// parenthesis (the command may hold anything, spaces and parentheses
    /// included).
    fn stat_fields(pid: u32) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        Some(rest.split_whitespace().map(str::to_owned).collect())
    }

    /// When process `pid` started (clock ticks after boot), if it runs.
    pub(super) fn start_time(pid: u32) -> Option<u64> {
        // Field 22; the first field after the parenthesis is field 3.
        let fields = stat_fields(pid)?;
        let state = fields.first()?;
        if state == "Z" || state == "X" {
            return None;
        }
        fields.get(19)?.parse().ok()
    }

    /// Whether a process carries one of `tokens` in its environment (as it
    /// was at its `exec`); not when it cannot be read (another user's).
    fn carries(pid: u32, tokens: &BTreeSet<&str>) -> bool {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return false;
        };
        let key = GROUP_TOKEN_ENV.as_bytes();
        environ.split(|b| *b == 0).any(|entry| {
            entry
                .strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(b"="))
                .and_then(|value| std::str::from_utf8(value).ok())
                .is_some_and(|value| tokens.contains(value))
        })
    }

    fn pid(number: u32) -> Option<Pid> {
        i32::try_from(number).ok().map(Pid::from_raw)
    }

    /// Kills each group whose leader still runs as recorded, then every
    /// process carrying one of the groups' tokens; how many were killed.
    pub(super) fn kill_groups(groups: &[Group]) -> usize {
        if groups.is_empty() {
            return 0;
        }
        let mut killed = 0;
        for group in groups {
            if start_time(group.pgid) == Some(group.leader_start)
                && let Some(pgid) = pid(group.pgid)
                && killpg(pgid, Signal::SIGKILL).is_ok()
            {
                killed += 1;
            }
        }
        let tokens: BTreeSet<&str> = groups.iter().map(|g| g.token.as_str()).collect();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return killed;
        };
        let me = std::process::id();
        for number in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            if number != me
                && start_time(number).is_some()
                && carries(number, &tokens)
                && let Some(target) = pid(number)
                && kill(target, Signal::SIGKILL).is_ok()
            {
                killed += 1;
            }
        }
        killed
    }
}

#[cfg(not(target_os = "linux"))]
mod procfs {
    //! No `/proc`: nothing is recorded, nothing reaped.

    use super::Group;

    pub(super) fn start_time(_pid: u32) -> Option<u64> {
        None
    }

    pub(super) fn kill_groups(_groups: &[Group]) -> usize {
        0
    }
}
