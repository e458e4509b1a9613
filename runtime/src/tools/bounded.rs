//! A stdio server's output, held to the MCP library's limit on one message.
//!
//! rmcp reads a stdio server one line (one JSON-RPC message) at a time, at
//! most [`MAX_MESSAGE_BYTES`] per line; a longer line is dropped and the
//! connection kept, so the request it answered waits for an answer that
//! never comes until its lease runs out. [`BoundedLines`] sits between the
//! child's standard output and rmcp and turns such a line into a read
//! error the moment it reaches the limit: rmcp closes the connection, every
//! request in flight fails at once, and [`Overflow`] says why, naming the
//! limit. Memory stays bounded: nothing of the line is buffered here. (Over
//! streamable HTTP, rmcp ends the request itself; the connection's
//! [`WatchedClient`](super::http::WatchedClient) records the overflow.)

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// The most one message from an MCP server may hold, in bytes: rmcp's limit
/// on one line of a stdio server (`DEFAULT_MAX_LINE_LENGTH`, newline
/// included) and on one event of a streamable-HTTP response, 16 MiB.
pub const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Whether a server's message went over [`MAX_MESSAGE_BYTES`]; shared by
/// the reader that saw it and the connection that explains the failure.
#[derive(Clone, Debug, Default)]
pub(super) struct Overflow(Arc<AtomicBool>);

impl Overflow {
    /// Whether it happened.
    pub(super) fn happened(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    pub(super) fn record(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A reader that fails once a line reaches `limit` bytes without its
/// newline — the length at which rmcp would drop it.
pub(super) struct BoundedLines<R> {
    inner: R,
    /// Bytes of the current line so far, its newline not yet seen.
    line: usize,
    limit: usize,
    overflow: Overflow,
}

impl<R> BoundedLines<R> {
    /// `inner`, held to lines of fewer than `limit` bytes (newline
    /// excluded); an overflow is recorded in `overflow`.
    pub(super) fn new(inner: R, limit: usize, overflow: Overflow) -> Self {
        Self {
            inner,
            line: 0,
            limit,
            overflow,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let this = &mut *self;
        let mut pieces = buf.filled()[before..].split(|byte| *byte == b'\n');
        // The first piece continues the current line; each later one begins
        // a new line, the last of them still open.
        if let Some(first) = pieces.next() {
            this.line = this.line.saturating_add(first.len());
            let mut longest = this.line;
            for piece in pieces {
                longest = longest.max(this.line);
                this.line = piece.len();
            }
            longest = longest.max(this.line);
            if longest >= this.limit {
                this.overflow.record();
                // A failed read reads nothing: the connection ends here.
                buf.set_filled(before);
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "the server sent a message of at least {longest} bytes, over the MCP \
                         client's limit of {} bytes on one message",
                        this.limit
                    ),
                )));
            }
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn read_all(input: &[u8], limit: usize) -> (std::io::Result<Vec<u8>>, bool) {
        let overflow = Overflow::default();
        let mut reader = BoundedLines::new(input, limit, overflow.clone());
        let mut out = Vec::new();
        let result = reader.read_to_end(&mut out).await.map(|_| out);
        (result, overflow.happened())
    }

    #[tokio::test]
    async fn lines_under_the_limit_pass_whole() {
        let (read, overflow) = read_all(b"abc\ndefg\n\nhij", 5).await;
        assert_eq!(read.expect("under the limit"), b"abc\ndefg\n\nhij");
        assert!(!overflow);
    }

    #[tokio::test]
    async fn a_line_that_reaches_the_limit_is_an_error_and_is_recorded() {
        let (read, overflow) = read_all(b"abc\nabcde\nx", 5).await;
        let error = read.expect_err("a line of 5 bytes at a limit of 5");
        assert!(error.to_string().contains("limit of 5 bytes"), "{error}");
        assert!(overflow);
    }
}
