//! `leasehold serve`: the HTTP API and the dashboard over this process's
//! engine, until SIGINT or SIGTERM.
//!
//! On either signal the server stops taking requests and ends (the server
//! bounds how long its open event streams may hold it), then the engine
//! stops every run in place — resumable, their tool servers killed — and
//! the store is flushed; the exit code is 130 after SIGINT, 143 after
//! SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::signal::Signals;
use super::{CliError, GlobalArgs, engine_builder, install_signals, open_store};
use crate::config::Flag;
use crate::server::{self, App, ServerOptions};

/// Serves until SIGINT or SIGTERM.
pub(super) async fn serve(global: &GlobalArgs, addr: Option<String>) -> Result<ExitCode, CliError> {
    // Before the runs resumed at boot start their tool servers.
    let signals = install_signals()?;
    let extra: Vec<Flag> = addr
        .into_iter()
        .map(|value| Flag {
            key: "server.addr".into(),
            value,
            given_as: "--addr".into(),
        })
        .collect();
    let config = global.load(&extra)?;
    let token = config.api_token.value.clone();
    server::check_bind(config.server_addr.value, token.as_deref())
        .map_err(|e| CliError::other(e.to_string()))?;
    let store = open_store(&config)?;
    let engine = engine_builder(&config, store)?.build().await?;
    let boot = crate::executor::boot(&engine, config.resume_on_boot.value).await?;
    if !boot.orphaned.is_empty() {
        tracing::warn!(runs = ?boot.orphaned, "orphaned runs found at boot");
    }
    let app = App::new(
        Arc::new(engine),
        ServerOptions {
            token,
            ..ServerOptions::default()
        },
    );
    for handle in boot.resumed {
        tracing::info!(run_id = handle.run_id(), "resumed at boot");
        app.adopt(handle);
    }
    let (addr, serving) = start(Arc::clone(&app), config.server_addr.value, &signals).await?;
    println!("leasehold serving on http://{addr}/ (dashboard at /, API under /runs)");
    serving
        .await
        .map_err(|e| CliError::other(format!("the server stopped: {e}")))?
        .map_err(|e| CliError::other(format!("the server stopped: {e}")))?;
    app.engine().shutdown().await;
    app.engine().store().flush().await?;
    Ok(match signals.heard() {
        Some(stop) => {
            eprintln!(
                "leasehold: {}: the server stopped; its runs stay in the store, resumable",
                stop.name()
            );
            ExitCode::from(stop.exit_code())
        }
        None => ExitCode::SUCCESS,
    })
}

/// Binds `addr` and serves `app` in a task until SIGINT or SIGTERM;
/// returns the bound address (useful with port 0).
pub(super) async fn start(
    app: Arc<App>,
    addr: SocketAddr,
    signals: &Signals,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>), CliError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::other(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::other(format!("cannot listen on {addr}: {e}")))?;
    let signals = signals.clone();
    let serving = tokio::spawn(server::serve(listener, app, async move {
        signals.stopped().await;
    }));
    Ok((bound, serving))
}
