//! `leasehold runs … --server URL` against a server that answers its
//! headers and then trickles one byte at a time for ever: the silence
//! bound never fires (the server is never silent for long), so the whole
//! answer is bounded by `--server-timeout`, and the command gives up,
//! naming it.

mod support;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Answers the request on `socket` with headers, then one byte every
/// 200 ms until the client leaves.
fn trickle(mut socket: TcpStream) {
    let mut request = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(read) => request.extend_from_slice(&buffer[..read]),
        }
    }
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000000\r\n\r\n";
    if socket.write_all(head.as_bytes()).is_err() {
        return;
    }
    // The pace of the trickle is the server's, not a wait of the test's.
    while socket.write_all(b" ").is_ok() {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A server that trickles every answer; its URL.
fn trickling_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for socket in listener.incoming().flatten() {
            std::thread::spawn(move || trickle(socket));
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_trickles_an_answer_is_given_up_at_the_server_timeout() {
    let dir = tempfile::tempdir().expect("a directory");
    let base = trickling_server();
    for args in [
        &["runs", "show", "run-1"][..],
        &["runs", "list"],
        &["runs", "cancel", "run-1"],
    ] {
        let mut command = support::leasehold(dir.path());
        command
            .args(args)
            .args(["--server", &base])
            .env("LEASEHOLD_SERVER_TIMEOUT", "2s");
        let ended = support::output_within(&mut command, support::PATIENCE).await;
        let stderr = String::from_utf8_lossy(&ended.stderr);
        assert!(!ended.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no whole answer within 2s (--server-timeout)"),
            "{args:?}: {stderr}"
        );
    }
    // The flag says the same as the setting.
    let mut command = support::leasehold(dir.path());
    command.args([
        "runs",
        "show",
        "run-1",
        "--server",
        &base,
        "--server-timeout",
        "1s",
    ]);
    let ended = support::output_within(&mut command, support::PATIENCE).await;
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert!(!ended.status.success(), "{stderr}");
    assert!(stderr.contains("within 1s (--server-timeout)"), "{stderr}");
}
