//! A counting proxy in front of a PostgreSQL server, for tests: it passes
//! every byte through both ways and counts the client's `Parse` messages
//! (each a statement PostgreSQL parses and analyses), so that a test can
//! see whether a store prepares a statement once per connection or once
//! per use. What the server sends back is passed through unread.

#![allow(dead_code, reason = "each test binary uses part of the helper")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The protocol codes of the untyped requests a client may send before its
/// startup message: `SSLRequest` and `GSSENCRequest`.
const BEFORE_STARTUP: [u32; 2] = [80_877_103, 80_877_104];

/// What the proxy counted, over every connection through it.
#[derive(Debug, Default)]
pub struct Counts {
    parses: AtomicU64,
}

impl Counts {
    /// `Parse` messages the clients sent.
    pub fn parses(&self) -> u64 {
        self.parses.load(Ordering::SeqCst)
    }
}

/// A proxy on a free loopback port in front of the server on loopback
/// port `server`: its port, and what it counts.
pub async fn proxy(server: u16) -> (u16, Arc<Counts>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port for the proxy");
    let port = listener.local_addr().expect("the proxy's port").port();
    let counts = Arc::new(Counts::default());
    let counting = Arc::clone(&counts);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = TcpStream::connect(("127.0.0.1", server)).await else {
                continue;
            };
            tokio::spawn(relay(client, upstream, Arc::clone(&counting)));
        }
    });
    (port, counts)
}

/// The port of a `postgres://…@host:port/…` URL.
pub fn port_of(url: &str) -> u16 {
    let authority = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no host in {url}"));
    authority
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// `url` with its port replaced by `port`.
pub fn with_port(url: &str, port: u16) -> String {
    url.replacen(&format!(":{}/", port_of(url)), &format!(":{port}/"), 1)
}

/// Passes one connection through: the server's bytes as they come, the
/// client's message by message, counted.
async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let _ = forward_counting(&mut from_client, &mut to_server, &counts).await;
}

/// Forwards the client's messages until either side closes: first the
/// untyped ones (length, then body) up to the startup message, then typed
/// ones (a type byte, length, body), counting each `P`.
async fn forward_counting(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    counts: &Counts,
) -> std::io::Result<()> {
    loop {
        let message = read_message(from, None).await?;
        to.write_all(&message).await?;
        let code = message
            .get(4..8)
            .map(|code| u32::from_be_bytes([code[0], code[1], code[2], code[3]]));
        if !code.is_some_and(|code| BEFORE_STARTUP.contains(&code)) {
            break;
        }
    }
    loop {
        let kind = from.read_u8().await?;
        if kind == b'P' {
            counts.parses.fetch_add(1, Ordering::SeqCst);
        }
        let message = read_message(from, Some(kind)).await?;
        to.write_all(&message).await?;
    }
}

/// One message whose type byte (if any) was read: its bytes as sent, the
/// type byte and the length included, to be written in one piece.
async fn read_message(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    kind: Option<u8>,
) -> std::io::Result<Vec<u8>> {
    let length = from.read_u32().await?;
    let mut message = Vec::new();
    message.extend(kind);
    message.extend_from_slice(&length.to_be_bytes());
    let start = message.len();
    message.resize(
        start + usize::try_from(length).unwrap_or(0).saturating_sub(4),
        0,
    );
    from.read_exact(&mut message[start..]).await?;
    Ok(message)
}
