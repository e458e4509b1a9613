//! leasehold: an actor runtime for agent platforms that supervises every slow
//! thing in an agent run with *leases* instead of deadlines.
//!
//! A lease is a timer beside the work. When it expires nothing is cancelled:
//! a watchdog is asked for a verdict — `RENEW`, `NUDGE`, `INTERVENE`,
//! `ESCALATE` — made on liveness evidence (stream tokens, MCP progress, worker
//! steps) and, only when the evidence is silent or suspicious, on a cheap
//! model's judgement. Detection and allocation are separate jobs, so a slow
//! tool and a dead tool no longer leave the same trace.
//!
//! This crate is the one to depend on. It re-exports the supervision tree
//! ([`leasehold_actors`]) and holds the real parts an engine is built from:
//! the sled and PostgreSQL stores, the model and MCP clients, flows and
//! configuration. The HTTP server (`leasehold-server`), the command line
//! with the demo (`leasehold-cli`) and the experiments (`leasehold-lab`)
//! are crates of their own, built on this one.
//!
//! # Cargo features
//!
//! The default features turn on both stores and both clients. An embedder
//! that needs only the engine turns them off (`default-features = false`)
//! and keeps the engine, flows and configuration (`[model]` and
//! `[[tools]]` included), without reqwest, rmcp or hyper; it brings a model
//! client and a tool client of its own, or turns `openai` and `mcp` back
//! on.
//!
//! | feature | what it adds | on by default |
//! |---|---|---|
//! | `openai` | the model client for OpenAI-compatible servers and the evaluator on it (`model::OpenAiClient`, `model::ModelEvaluator`; `model::ModelSettings` is in every build): reqwest over rustls | yes |
//! | `mcp` | the MCP tool client (`tools::McpToolClient`): rmcp, process-wrap, nix | yes |
//! | `store` | the embedded sled run store (`store::SledStore`; `store::Durability`, a setting, is in every build) | yes |
//! | `postgres` | the PostgreSQL run store many executors share (`store::PostgresStore`; see `docs/deployment.md`) | yes |
//! | `test-util` | scripted fakes of every port (`testing`) | no |
//!
//! The library only emits `tracing` events and spans; it installs no
//! subscriber. The `leasehold` binary installs one (`RUST_LOG` decides); an embedder
//! installs its own.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use leasehold::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let events = EventBus::new();
//! let supervision = Supervision::start(SupervisionConfig::default(), None, Arc::new(events)).await?;
//! let spec = supervision.config.lease.spec(LeaseKind::ToolCall, "search")?;
//! let handle = supervision.leases.supervise(spec, |_evidence| async { 2 + 2 })?;
//! assert_eq!(handle.outcome().await?, 4);
//! # Ok(())
//! # }
//! ```

// The supervision tree: `leasehold-actors`' root is this crate's root, so
// no name is copied by hand. What that makes public is held by the
// public-API snapshot (`tests/api/`), so that every change to it shows.
pub use leasehold_actors::*;

pub mod config;
pub mod executor;
pub mod flow_check;
pub mod flow_file;
pub mod flow_keys;
pub mod model;
pub mod printable;
pub mod retention;
pub mod run_limits;
pub mod secret;
mod server_limits;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod trace;
pub mod webhooks;

/// The names most users need: the engine and its runs, flows, events,
/// every port to implement with the records it takes and gives, supervision
/// strategies and verdict policies, leases for supervising work of your
/// own, and a run's trace.
pub mod prelude {
    pub use crate::trace::TraceSummary;
    pub use leasehold_actors::prelude::*;
}
