//! The Python client (`clients/python`, `leasehold_client`) against this
//! build's `leasehold serve`: its pytest suite run with the interpreter
//! `scripts/peers.sh` installs (`LEASEHOLD_PEER_CLIENT_PYTHON`, a venv
//! outside the clone with the client's pinned dependencies and pytest),
//! the binary named by `LEASEHOLD_BIN`, and the client read from the clone
//! (`PYTHONPATH`), which it leaves as it found it: no bytecode, no pytest
//! cache, nothing installed.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Far more than the suite takes (seconds): past it, pytest is killed and
/// the test fails with what it printed.
const SUITE_PATIENCE: Duration = Duration::from_secs(300);

#[test]
fn the_python_client_passes_its_tests_against_a_real_server() {
    let python = std::env::var("LEASEHOLD_PEER_CLIENT_PYTHON").expect(
        "LEASEHOLD_PEER_CLIENT_PYTHON names the Python with the client's dependencies and \
         pytest (eval \"$(scripts/peers.sh)\")",
    );
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let child = Command::new(python)
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "tests"])
        .current_dir(&client)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PYTHONPATH", client.join("src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("LEASEHOLD_BIN", env!("CARGO_BIN_EXE_leasehold"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pytest starts");
    let pid = child.id();
    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let Ok(output) = ended.recv_timeout(SUITE_PATIENCE) else {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("the Python client's tests did not end within {SUITE_PATIENCE:?}");
    };
    let Output {
        status,
        stdout,
        stderr,
    } = output.expect("pytest ran");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    assert!(status.success(), "pytest failed ({status}):\n{said}");
    let summary = said.lines().rev().find(|line| line.contains(" passed"));
    assert!(
        summary.is_some_and(|line| !line.contains("failed") && !line.contains("error")),
        "pytest passed no test:\n{said}"
    );
    // Nothing was written into the clone.
    let left: Vec<_> = walk(&client)
        .into_iter()
        .filter(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            name == "__pycache__" || name == ".pytest_cache" || name.ends_with(".egg-info")
        })
        .collect();
    assert!(left.is_empty(), "the tests left {left:?} in the clone");
}

/// Every file and folder under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}
