//! A throwaway PostgreSQL for tests: a private cluster started from the
//! installed server binaries in a temporary directory, on a free loopback
//! port, owned by the `postgres` user when the tests run as root (`initdb`
//! refuses root). Dropping the last handle stops it (`pg_ctl stop -m
//! immediate`) and removes the directory — also when a test panics, since
//! the handle is dropped while the panic unwinds.
//!
//! One cluster is shared by the tests of a binary that run at the same
//! time; each test gets a database of its own ([`Cluster::database`]).
//! `pg_stat_statements` is loaded, so that a test can count the statements
//! a store sends.
//! Missing binaries fail the test with a message saying what to install:
//! nothing is skipped silently.
//!
//! [`tls_cluster`] starts a cluster of its own that takes only TLS
//! connections (`ssl = on`, `hostssl`-only `pg_hba.conf`), with the
//! certificate it is given.

#![allow(dead_code, reason = "each test binary uses part of the helper")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A running cluster; stopped and removed when dropped.
pub struct Cluster {
    bin: PathBuf,
    /// Run the server's commands as this user (`Some("postgres")` as root).
    user: Option<&'static str>,
    data: PathBuf,
    port: u16,
    /// The server's options, to start it again as it was.
    options: String,
    databases: AtomicU32,
    // Last: removed after the server is stopped.
    dir: tempfile::TempDir,
}

static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());

/// The cluster of this test binary, started if no test holds it.
pub fn cluster() -> Arc<Cluster> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(Cluster::start());
    *shared = Arc::downgrade(&cluster);
    cluster
}

/// A cluster of the caller's own, not shared with the binary's other
/// tests: for a test that restarts it (started on the blocking pool).
pub async fn own_cluster() -> Cluster {
    tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("the cluster starts")
}

/// The cluster of this test binary (started on the blocking pool, as
/// starting it waits for `initdb` and `pg_ctl`) and a new database of it,
/// by URL.
pub async fn database() -> (Arc<Cluster>, String) {
    tokio::task::spawn_blocking(|| {
        let cluster = cluster();
        let url = cluster.database();
        (cluster, url)
    })
    .await
    .expect("the cluster starts")
}

/// The certificate and key a TLS cluster serves, in PEM.
pub struct ServerTls {
    /// The server's certificate (and any intermediates after it).
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

/// A cluster of its own (not shared) that takes only TLS connections, with
/// `tls`'s certificate.
pub fn tls_cluster(tls: &ServerTls) -> Cluster {
    Cluster::start_with(Some(tls))
}

/// Whether the server binaries (`initdb`, `pg_ctl`) are installed: what a
/// caller that may go without PostgreSQL (a benchmark) asks before
/// [`cluster`], which fails without them.
pub fn server_installed() -> bool {
    find_server_bin().is_some()
}

/// The directory of the installed server binaries (`initdb`, `pg_ctl`).
fn server_bin() -> PathBuf {
    find_server_bin().unwrap_or_else(|| {
        panic!(
            "the PostgreSQL server binaries (initdb, pg_ctl) are not installed: these tests \
             start a throwaway PostgreSQL; install it with `apt-get install postgresql` \
             (scripts/test.sh does)"
        )
    })
}

/// The directory of the installed server binaries, if any.
fn find_server_bin() -> Option<PathBuf> {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    let installed = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"));
    // The newest version first.
    let mut installed: Vec<PathBuf> = installed.collect();
    installed.sort_by(|a, b| b.cmp(a));
    from_pg_config
        .into_iter()
        .chain(installed)
        .find(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

impl Cluster {
    fn start() -> Self {
        Self::start_with(None)
    }

    fn start_with(tls: Option<&ServerTls>) -> Self {
        let bin = server_bin();
        let user = is_root().then_some("postgres");
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pg-")
            .tempdir()
            .expect("a temporary directory");
        let data = dir.path().join("data");
        let mut cluster = Self {
            bin,
            user,
            data,
            port: 0,
            options: String::new(),
            databases: AtomicU32::new(0),
            dir,
        };
        if let Some(user) = user {
            cluster.run(
                Command::new("chown").args([user, &cluster.dir_str()]),
                "chown",
            );
        }
        let mut initdb = cluster.server_command("initdb");
        cluster.run(
            initdb
                .args(["--auth=trust", "--username=postgres", "--encoding=UTF8"])
                .args(["--no-sync", "-D"])
                .arg(&cluster.data),
            "initdb",
        );
        let tls_options = tls
            .map(|tls| cluster.serve_tls_only(tls))
            .unwrap_or_default();
        // A port taken between the probe and the start is retried.
        for _ in 0..5 {
            cluster.port = free_port();
            let options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 \
                 -c shared_preload_libraries=pg_stat_statements",
                cluster.port,
                cluster.dir_str()
            ) + &tls_options;
            let mut start = cluster.server_command("pg_ctl");
            start
                .args(["start", "-w", "-t", "120", "-D"])
                .arg(&cluster.data)
                .args(["-l"])
                .arg(cluster.dir.path().join("server.log"))
                .args(["-o", &options]);
            if start.output().is_ok_and(|out| out.status.success()) {
                cluster.options = options;
                return cluster;
            }
        }
        let log =
            std::fs::read_to_string(cluster.dir.path().join("server.log")).unwrap_or_default();
        panic!("the throwaway PostgreSQL did not start; its log:\n{log}");
    }

    /// Writes the certificate and key, and a `pg_hba.conf` that lets in
    /// TCP connections only over TLS; the server options that turn it on.
    fn serve_tls_only(&self, tls: &ServerTls) -> String {
        let cert = self.dir.path().join("server.crt");
        let key = self.dir.path().join("server.key");
        std::fs::write(&cert, &tls.cert_pem).expect("the server certificate is written");
        std::fs::write(&key, &tls.key_pem).expect("the server key is written");
        // PostgreSQL refuses a key others can read.
        self.run(
            Command::new("chmod").arg("600").arg(&key),
            "chmod of the server key",
        );
        if let Some(user) = self.user {
            self.run(
                Command::new("chown").arg(user).arg(&cert).arg(&key),
                "chown of the server certificate",
            );
        }
        std::fs::write(
            self.data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl all all ::1/128 trust\n",
        )
        .expect("pg_hba.conf is written");
        format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            cert.display(),
            key.display()
        )
    }

    fn dir_str(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// A command of the server's binaries, as the cluster's user.
    fn server_command(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        match self.user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn run(&self, command: &mut Command, what: &str) {
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("{what} could not be started: {e}"));
        assert!(
            output.status.success(),
            "{what} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The URL of a new, empty database of this cluster.
    pub fn database(&self) -> String {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("test_{}_{n}", std::process::id());
        let mut createdb = self.server_command("createdb");
        self.run(
            createdb
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", "postgres", &name]),
            "createdb",
        );
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Stops the server as an operator would (`pg_ctl stop -m fast`: every
    /// session ended, open transactions rolled back), keeps it stopped for
    /// `down`, then starts it again as it was, and waits until it takes
    /// connections.
    pub fn restart_after(&self, down: std::time::Duration) {
        let mut stop = self.server_command("pg_ctl");
        self.run(
            stop.args(["stop", "-m", "fast", "-w", "-D"])
                .arg(&self.data),
            "pg_ctl stop",
        );
        std::thread::sleep(down);
        let mut start = self.server_command("pg_ctl");
        self.run(
            start
                .args(["start", "-w", "-t", "120", "-D"])
                .arg(&self.data)
                .args(["-l"])
                .arg(self.dir.path().join("server.log"))
                .args(["-o", &self.options]),
            "pg_ctl start",
        );
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut stop = self.server_command("pg_ctl");
        let _ = stop
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.data)
            .output();
        // `dir` is removed when it drops, after this.
    }
}
