//! `leasehold serve`: the HTTP API and the dashboard over this process's
//! engine, until SIGINT, SIGTERM or SIGHUP.
//!
//! On any of them the server stops taking requests and ends (the server
//! bounds how long its open event streams may hold it), then the engine
//! stops every run in place — resumable, their tool servers killed — and
//! the store is flushed; the exit code is 130 after SIGINT, 143 after
//! SIGTERM, 129 after SIGHUP.
//!
//! While it serves, the executor sweeps for orphans every third of the
//! run-lease TTL ([`leasehold::executor::sweep`]); with resume on boot its
//! claimer ([`leasehold::executor::claim_queued`], every
//! `executor.claim_interval` and whenever one of its runs ends) claims and
//! resumes them within its limit of live runs, then claims queued runs,
//! and the API controls them like the runs it started. Its limit adapts
//! to its lag ([`leasehold::executor::admission`]), measured by the probe its
//! leases read too. Finished runs past their retention
//! (`executor.retention`) are deleted in the background
//! ([`leasehold::retention`]).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::signal::Signals;
use super::{CliError, GlobalArgs, install_signals};
use leasehold::config::{Config, Flag};
use leasehold::executor::Executor;
use leasehold_server::metrics::{MeteredStore, Metrics};
use leasehold_server::{self as server, App, ServerLimits, ServerOptions};

/// Serves until SIGINT, SIGTERM or SIGHUP.
pub(super) async fn serve(
    global: &GlobalArgs,
    addr: Option<String>,
    allow_flow_tools: bool,
) -> Result<ExitCode, CliError> {
    // Before the runs resumed at boot start their tool servers.
    let signals = install_signals()?;
    let mut extra: Vec<Flag> = addr
        .into_iter()
        .map(|value| Flag {
            key: "server.addr".into(),
            value,
            given_as: "--addr".into(),
        })
        .collect();
    if allow_flow_tools {
        extra.push(Flag {
            key: "server.allow_flow_tools".into(),
            value: "true".into(),
            given_as: "--allow-flow-tools".into(),
        });
    }
    let config = global.load(&extra)?;
    let options = options(&config);
    options
        .check(config.server_addr.value)
        .map_err(|e| CliError::other(e.to_string()))?;
    // Bound first, so that this executor's id says where it serves: a
    // person refused because it holds a run learns the `--server` to use.
    let listener = bind(config.server_addr.value).await?;
    let bound = listener.local_addr().map_err(|e| {
        CliError::other(format!(
            "cannot listen on {}: {e}",
            config.server_addr.value
        ))
    })?;
    let url = config
        .webhooks_public_url
        .value
        .clone()
        .unwrap_or_else(|| format!("http://{bound}"));
    // Its store's writes are timed into the server's metrics.
    let metrics = Arc::new(Metrics::new());
    let mut builder = global
        .register(config.engine_builder_for_serving()?)
        .owner_id(leasehold::OwnerId::of_process().serving_at(&url))
        .wrap_store(|store| MeteredStore::wrap(store, &metrics));
    // Its leases and its admission read the same probe of its lag.
    if let Some(gauge) = config.load_gauge() {
        builder = builder.load(gauge);
    }
    let engine = builder.build().await?;
    let mut traces = super::Traces::start(&engine);
    if let Some(counts) = traces.counts() {
        metrics.trace_source(counts);
    }
    let executor = Executor::new(Arc::new(engine), config.executor_options());
    // Finished runs past their retention are deleted in the background.
    let counted = Arc::clone(&metrics);
    executor.keep(leasehold::retention::spawn(
        Arc::clone(executor.engine().store()),
        Arc::clone(executor.engine().clock()),
        config.executor_retention.value,
        executor.stopping(),
        move |runs| counted.purged(runs),
    ));
    // Orphans are marked as the server starts; with resume on boot its
    // claimer resumes them within its limit of live runs, with queued runs.
    let app = App::with_metrics(Arc::clone(&executor), options, Arc::clone(&metrics));
    let (addr, serving) = start(Arc::clone(&app), listener, &signals)?;
    // Pauses and ends are told to the webhook receivers from the store's
    // outbox, beside the runs: a receiver never holds one up. Without
    // receivers, the outbox is emptied all the same: nobody is to be told.
    let webhooks = leasehold::webhooks::deliver::Deliverer::start(
        Arc::clone(executor.engine().store()),
        config.webhook_delivery(addr),
        Arc::clone(executor.engine().clock()),
    )
    .map_err(CliError::other)?;
    if !config.webhook_receivers.is_empty() {
        let counts = webhooks.counts();
        metrics.webhook_source(Box::new(move || {
            [counts.delivered(), counts.failed(), counts.given_up()]
        }));
    }
    let stopping = executor.stopping();
    executor.keep(tokio::spawn(async move {
        stopping.cancelled().await;
        webhooks.stop().await;
    }));
    out!("leasehold serving on http://{addr}/ (dashboard at /, API under /runs)");
    if let Some(why) = executor.engine().without_model() {
        tracing::warn!("{why}");
        out!("leasehold: {why}");
    }
    let served = serving.await;
    // No claim or sweep may start a run while the engine stops its runs.
    executor.shutdown().await?;
    traces.finish(executor.engine()).await;
    served
        .map_err(|e| CliError::other(format!("the server stopped: {e}")))?
        .map_err(|e| CliError::other(format!("the server stopped: {e}")))?;
    Ok(match signals.heard() {
        Some(stop) => {
            say!(
                "leasehold: {}: the server stopped; its runs stay in the store, resumable",
                stop.name()
            );
            ExitCode::from(stop.exit_code())
        }
        None => ExitCode::SUCCESS,
    })
}

/// The server's options from the configuration.
pub(super) fn options(config: &Config) -> ServerOptions {
    let run_limits = config.run_limits();
    ServerOptions {
        token: config.api_token.value.clone(),
        limits: ServerLimits {
            header_timeout: config.server_header_timeout.value,
            body_timeout: config.server_body_timeout.value,
            max_connections: config.server_max_connections.value,
            max_event_streams: config.server_max_event_streams.value,
            shutdown_grace: config.server_shutdown_grace.value,
        },
        allowed_hosts: config.server_allowed_hosts.value.clone(),
        allowed_origins: config.server_allowed_origins.value.clone(),
        tools: config.tools.clone(),
        allow_flow_tools: config.server_allow_flow_tools.value,
        receivers: config.webhook_receivers.clone(),
        max_body: run_limits.flow_text(),
        run_limits,
        ..ServerOptions::default()
    }
}

/// A listener on `addr`.
pub(super) async fn bind(addr: SocketAddr) -> Result<TcpListener, CliError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::other(format!("cannot listen on {addr}: {e}")))
}

/// Serves `app` on `listener` in a task until SIGINT, SIGTERM or SIGHUP; returns
/// the bound address (useful with port 0).
pub(super) fn start(
    app: Arc<App>,
    listener: TcpListener,
    signals: &Signals,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>), CliError> {
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::other(format!("cannot listen: {e}")))?;
    let signals = signals.clone();
    let serving = tokio::spawn(server::serve(listener, app, async move {
        signals.stopped().await;
    }));
    Ok((bound, serving))
}
