//! A peer in another language than leasehold: a Python script.

/// A Python script (a peer written in another language than leasehold)
/// started as a child process that prints the port it listens on as its
/// first line; killed when dropped.
pub struct PythonPeer {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub base: String,
    _dir: tempfile::TempDir,
}

impl PythonPeer {
    /// Writes `script` to a temporary file and runs it with `args`.
    pub fn start(script: &str, args: &[&str]) -> Self {
        use std::io::BufRead as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("peer.py");
        std::fs::write(&path, script).expect("write the script");
        let mut child = std::process::Command::new("python3")
            .arg(&path)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("python3 runs (the peer is a Python script)");
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut port)
            .expect("the peer prints its port");
        Self {
            child,
            base: format!("http://127.0.0.1:{}/v1", port.trim()),
            _dir: dir,
        }
    }
}

impl Drop for PythonPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
