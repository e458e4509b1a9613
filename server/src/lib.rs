//! The HTTP API, its live event stream, `/metrics` and the dashboard,
//! served by `leasehold serve` (crate `leasehold-cli`) or by an embedder
//! around an [`Executor`](leasehold::executor::Executor) of its own
//! ([`serve`]): the server is its HTTP face.
//!
//! **A run never hangs off a request.** `POST /runs` records the run
//! `queued` and, when this executor has room under its limit of live runs,
//! claims it and starts it in the engine's actors; it answers at once with
//! its id. The request's task only waits for the run to be recorded (and
//! claimed), and even that is done in a task of its own, so a client that
//! disconnects mid-request cancels nothing. A run left queued is claimed by
//! the first executor sharing the store that has room ([`serve`] has this
//! executor claim, [`Executor::serve`](leasehold::executor::Executor::serve)). Event
//! streams are read from the run's stored log and the engine's bus by a task
//! per stream: a client that goes away, reads slowly or never reads only ends
//! or slows its own stream, never the run. Streams have no write timeout and
//! send keep-alive comments instead.
//!
//! **Safe to expose.** A request never names a process to start or an
//! address to connect to: posted flows name the tool servers of the
//! configuration (`[[tools]]`, [`ServerOptions::tools`]). The guard
//! (`guard.rs`) refuses other sites' requests (`Origin`, `Sec-Fetch-Site`),
//! foreign `Host`s without a token (DNS rebinding) and, with a token, any
//! request without it. Every client is bounded ([`ServerLimits`]): header
//! and body time limits, open connections, open event streams; live runs
//! and runs waiting queued in the store
//! ([`ExecutorOptions`](leasehold::executor::ExecutorOptions)); what one run may hold from a client
//! (its task, its flow, a person's texts:
//! [`RunLimits`](leasehold::run_limits::RunLimits)); a listing's size
//! (summaries, never whole runs); and shutdown closes every stream with a
//! last frame within a grace.
//!
//! Every refusal is a 4xx with a JSON body `{"error": {"code", "message"}}`.
//! See `docs/http-api.md`, whose "Security" section is the trust model.
//!
//! [`metrics`] is what operators scrape: counters fed from the event bus,
//! runs by status from the store, live leases from the lease actors.

pub mod metrics;
mod server;

pub use server::*;
