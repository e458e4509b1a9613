//! Where stdio tool servers are started: in a process group of their own,
//! and — on Linux — bound to this process's life, so that even a SIGKILL of
//! `leasehold` takes the server with it.
//!
//! Linux's parent-death signal (`PR_SET_PDEATHSIG`) is sent when the
//! *thread* that forked the child ends, not the process. Tokio's blocking
//! threads end after a while idle, so a server forked from one would be
//! killed at a random moment. Every stdio server is therefore forked from
//! one thread of its own, started on first use and never ended: its death
//! signal fires only when the process dies. The child sets the signal itself
//! between `fork` and `exec`, then checks that its parent is still this
//! process (had the parent died before the signal was set, nobody would ever
//! send it) and refuses to start otherwise.
//!
//! The death signal reaches the group's leader only. Whatever the server
//! started (a launcher's real server, a helper) stays in its group and is
//! killed by the ledger's reap at the next start on the same data directory
//! (see [`groups`](super::groups)). Elsewhere than on Linux there is no
//! parent-death signal: a killed `leasehold` leaves its servers to that reap
//! alone, which finds them on Linux only.

use std::collections::BTreeMap;
use std::io;
use std::process::Stdio;

use leasehold_actors::CommandArg;
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};

/// The environment variable that marks every process of a tool server's
/// tree with its group's token, so that a leftover process can be told
/// apart from a stranger who got a reused process id.
pub(crate) const GROUP_TOKEN_ENV: &str = "LEASEHOLD_TOOL_GROUP";

/// What one stdio server is started with.
pub(super) struct Launch<'a> {
    pub(super) program: &'a str,
    pub(super) args: &'a [CommandArg],
    pub(super) env: &'a BTreeMap<String, String>,
    /// The token set in [`GROUP_TOKEN_ENV`], when the server is recorded.
    pub(super) token: Option<&'a str>,
}

/// Starts a stdio server, its standard streams piped, as the leader of a
/// new process group.
pub(super) async fn spawn(launch: Launch<'_>) -> io::Result<Box<dyn ChildWrapper>> {
    let mut command = CommandWrap::with_new(launch.program, |command| {
        command
            .args(launch.args.iter().map(CommandArg::value))
            .envs(launch.env)
            .envs(launch.token.map(|token| (GROUP_TOKEN_ENV, token)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(command);
    });
    // A group of its own, so that killing it takes along whatever the
    // program started (`npx` starts `node`). Not tokio's kill-on-drop: it
    // would signal the leader's pid after the group wrapper has reaped it.
    command.wrap(ProcessGroup::leader());
    fork_from_the_long_lived_thread(command).await
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = nix::unistd::Pid::this();
    // SAFETY: the closure runs in the child between `fork` and `exec`, where
    // only async-signal-safe calls are allowed: `prctl` and `getppid` are
    // plain system calls, and building an `io::Error` from an errno does not
    // allocate. It touches no lock and no memory shared with the parent.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(io::Error::from)?;
            // The parent may have died between the fork and the line above:
            // then the signal was never going to come.
            if nix::unistd::getppid() != parent {
                return Err(io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut tokio::process::Command) {}

/// Forks on the spawner thread (see the module documentation), in the
/// caller's runtime so that the child's pipes and exit are driven by it.
#[cfg(target_os = "linux")]
async fn fork_from_the_long_lived_thread(
    mut command: CommandWrap,
) -> io::Result<Box<dyn ChildWrapper>> {
    use std::sync::OnceLock;
    use std::sync::mpsc;

    type Job = Box<dyn FnOnce() + Send>;
    static SPAWNER: OnceLock<io::Result<mpsc::Sender<Job>>> = OnceLock::new();

    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("leasehold-tool-spawner".into())
            // Never ends: the sender is held by the static above.
            .spawn(move || queue.into_iter().for_each(|job| job()))
            .map(|_| jobs)
    });
    let jobs = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    let runtime = tokio::runtime::Handle::current();
    let (reply, spawned) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _entered = runtime.enter();
        let _ = reply.send(command.spawn());
    });
    jobs.send(job)
        .map_err(|_| io::Error::other("the tool-server spawner thread is gone"))?;
    spawned
        .await
        .map_err(|_| io::Error::other("the tool-server spawner thread dropped a start"))?
}

#[cfg(not(target_os = "linux"))]
async fn fork_from_the_long_lived_thread(
    mut command: CommandWrap,
) -> io::Result<Box<dyn ChildWrapper>> {
    command.spawn()
}
