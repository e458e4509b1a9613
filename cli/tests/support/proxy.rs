//! A TCP proxy between executors and their database, for the tests of a
//! database that goes away: it relays, cuts every connection (and refuses
//! new ones), or holds them (open, nothing relayed) until told to relay
//! again.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Relays both ways.
    Relay,
    /// Closes every connection, and each new one as soon as it is made.
    Cut,
    /// Keeps every connection open and relays nothing, until relaying
    /// again; new connections are held as well.
    Hold,
}

/// A proxy on a loopback port to `upstream`, relaying until told not to;
/// it stops when dropped.
pub struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("bound").port();
        let mode = watch::Sender::new(Mode::Relay);
        let watching = mode.subscribe();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = watching.clone();
                if *mode.borrow() == Mode::Cut {
                    drop(client);
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pipe(client_read, server_write, mode.clone()),
                        pipe(server_read, client_write, mode),
                    );
                });
            }
        });
        Self { port, mode, task }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Relays, cuts or holds from now on.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.set(Mode::Cut);
        self.task.abort();
    }
}

/// Copies `from` to `to` while the proxy relays, waits while it holds, and
/// ends (closing both) when it cuts or either side closes.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = mode.wait_for(|m| *m == Mode::Cut) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match mode.wait_for(|m| *m != Mode::Hold).await.map(|m| *m) {
            Ok(Mode::Relay) => {}
            _ => return,
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
