//! A reader of `GET /runs/{id}/events` as a client reads it: its frames,
//! one at a time, each with its `event:` name, `id:` and `data:`.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// One Server-Sent Events frame.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    /// `event:`, none for a plain (event) frame.
    pub event: Option<String>,
    /// `id:`, if it had one.
    pub id: Option<String>,
    /// `data:`, parsed as JSON.
    pub data: serde_json::Value,
}

/// The frames of one open stream.
pub struct Frames {
    bytes: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

impl Frames {
    /// Opens `url` (with `Last-Event-ID: last` when given).
    pub async fn open(http: &reqwest::Client, url: &str, last: Option<&str>) -> Self {
        let mut request = http.get(url);
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        let response = request.send().await.expect("GET the event stream");
        assert!(response.status().is_success(), "{}", response.status());
        Self {
            bytes: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next frame within `patience`; `None` when the stream closed.
    pub async fn next(&mut self, patience: Duration) -> Option<Frame> {
        loop {
            if let Some(at) = self.buffer.find("\n\n") {
                let text: String = self.buffer.drain(..at + 2).collect();
                let mut frame = Frame::default();
                let mut data = String::new();
                for line in text.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        frame.event = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("id:") {
                        frame.id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.strip_prefix(' ').unwrap_or(value));
                    }
                }
                if data.is_empty() && frame.event.is_none() {
                    // A keep-alive comment.
                    continue;
                }
                frame.data = serde_json::from_str(&data).unwrap_or(serde_json::Value::Null);
                return Some(frame);
            }
            let chunk = tokio::time::timeout(patience, self.bytes.next())
                .await
                .expect("the stream sent nothing in time")?;
            let chunk = chunk.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
