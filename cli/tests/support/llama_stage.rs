//! A real model for real `leasehold` processes: llama.cpp's `llama-server`
//! running a real small instruct model (SmolLM2-135M-Instruct) on one
//! thread with two slots, whose timing and words no script decides, behind
//! a proxy in Python (`recording_proxy.py`) that passes every byte through
//! and writes down each request (whether it was a judge's, its
//! `max_tokens`, whether it was streamed, the text of its messages), when
//! the first bytes of an answer passed, and when a client left mid-answer.

use std::path::PathBuf;
use std::time::Duration;

use leasehold_tests::llama::LlamaServer;
use serde_json::Value;

use super::PythonPeer;

const PROXY: &str = include_str!("recording_proxy.py");

/// A real model answers on the CPU here.
pub const PATIENCE: Duration = super::CROWDED_PATIENCE;

/// The model server, its proxy, and a directory for flows, data and the
/// proxy's journal.
pub struct Stage {
    pub dir: tempfile::TempDir,
    pub llama: LlamaServer,
    pub proxy: PythonPeer,
}

impl Stage {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let llama = LlamaServer::start().await;
        let journal = dir.path().join("journal.jsonl");
        let proxy = PythonPeer::start(
            PROXY,
            &[&llama.port().to_string(), journal.to_str().expect("a path")],
        );
        Self { dir, llama, proxy }
    }

    /// Every line the proxy wrote down, in order.
    pub fn journal(&self) -> Vec<Value> {
        super::journal(&self.dir.path().join("journal.jsonl"))
    }

    /// The judges' requests the proxy passed.
    pub fn judge_requests(&self) -> Vec<Value> {
        super::judge_requests(&self.dir.path().join("journal.jsonl"))
    }

    /// The runs' own requests (not a judge's) the proxy passed, in order.
    pub fn loop_requests(&self) -> Vec<Value> {
        self.journal()
            .into_iter()
            .filter(|e| e["judge"] == false && e.get("said").is_some())
            .collect()
    }

    /// `flow` written as `NAME.json` in the stage's directory.
    pub fn flow(&self, name: &str, flow: &Value) -> PathBuf {
        super::write_flow(self.dir.path(), name, flow)
    }

    /// `leasehold` on the stage's data directory and model.
    pub fn leasehold(&self) -> super::Leasehold {
        super::leasehold(&self.dir.path().join("data"))
            .model(&self.proxy.base, &self.llama.model_name())
    }

    /// Waits until the first bytes of the `n`-th loop answer (from 1)
    /// passed the proxy.
    pub async fn until_answer_streams(&self, n: usize) {
        let seen = tokio::time::timeout(PATIENCE, async {
            loop {
                let began = self
                    .journal()
                    .iter()
                    .filter(|e| e["first_bytes"] == true)
                    .count();
                if began >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(seen.is_ok(), "answer {n} never began: {:?}", self.journal());
    }

    /// Waits until the first bytes of a loop's answer passed the proxy.
    pub async fn until_the_answer_streams(&self) {
        self.until_answer_streams(1).await;
    }
}
