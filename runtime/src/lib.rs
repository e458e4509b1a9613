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
//! ([`leasehold_actors`]); the real parts (the sled store, the model and MCP
//! clients, configuration, the server and the command line) live beside it.
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
//! let spec = supervision.config.spec(LeaseKind::ToolCall, "search")?;
//! let handle = supervision.leases.supervise(spec, |_evidence| async { 2 + 2 })?;
//! assert_eq!(handle.outcome().await?, 4);
//! # Ok(())
//! # }
//! ```

pub use leasehold_actors::*;

pub mod cli;
pub mod config;
pub mod demo;
pub mod executor;
pub mod flow_file;
pub mod model;
pub mod server;
pub mod store;
pub mod tools;
pub mod trace;
