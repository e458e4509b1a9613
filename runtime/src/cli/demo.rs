//! `leasehold demo`: the embedded demo, optionally with the dashboard.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::{CliError, GlobalArgs};
use crate::demo::{self, Answer, DemoError, DemoStack};
use crate::server::{App, ServerOptions};

/// `leasehold demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Let the person answer the escalation — on standard input, or on the
    /// dashboard with --serve — instead of answering it automatically.
    #[arg(long)]
    interactive: bool,
    /// Serve the dashboard while the demo runs, to watch it.
    #[arg(long)]
    serve: bool,
    /// Where the dashboard listens with --serve (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    addr: SocketAddr,
}

impl From<DemoError> for CliError {
    fn from(error: DemoError) -> Self {
        Self::Other(format!("the demo failed: {error}"))
    }
}

/// Runs the demo; exits 0 when it showed everything it is meant to show.
pub(super) async fn run(_global: &GlobalArgs, args: DemoArgs) -> Result<ExitCode, CliError> {
    let answer = if args.interactive {
        Answer::Stdin
    } else {
        Answer::auto()
    };
    let mut out = std::io::stdout();
    let report = if args.serve {
        match serve(args.addr, answer, &mut out).await? {
            Some(report) => report,
            None => {
                eprintln!("leasehold: the demo was interrupted before its run ended");
                return Ok(ExitCode::from(super::EXIT_INTERRUPTED));
            }
        }
    } else {
        demo::run(answer, &mut out).await?
    };
    let _ = out.flush();
    if report.as_expected() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("leasehold: the demo did not show everything it should (see the summary)");
    if report.state.status.is_paused() {
        Ok(ExitCode::from(super::EXIT_PAUSED))
    } else {
        Ok(ExitCode::FAILURE)
    }
}

/// The demo with the dashboard: the same engine behind the HTTP server, the
/// run adopted by it so the page can resume it. After the run the dashboard
/// stays up until Ctrl-C; a Ctrl-C before the run ends stops everything
/// (`None`).
async fn serve(
    addr: SocketAddr,
    answer: Answer,
    out: &mut std::io::Stdout,
) -> Result<Option<demo::DemoReport>, CliError> {
    crate::server::check_bind(addr, None).map_err(|e| CliError::other(e.to_string()))?;
    let stack = DemoStack::start().await?;
    let engine = stack.engine_builder()?.build().await?;
    let app = App::new(Arc::new(engine), ServerOptions::default());
    let (bound, serving) = super::serve::start(Arc::clone(&app), addr).await?;
    writeln!(out, "dashboard: http://{bound}/").map_err(DemoError::Io)?;
    out.flush().map_err(DemoError::Io)?;
    let engine = Arc::clone(app.engine());
    let adopter = Arc::clone(&app);
    let driven = demo::drive_with(&engine, stack.flow(), answer, out, move |handle| {
        adopter.adopt(handle.clone());
        println!("run: {}", handle.run_id());
        let _ = std::io::stdout().flush();
    });
    // The server listens for Ctrl-C too (every listener hears it).
    let outcome = tokio::select! {
        outcome = driven => Some(outcome),
        _ = tokio::signal::ctrl_c() => None,
    };
    let mut report = match outcome {
        Some(Ok(report)) => report,
        Some(Err(error)) => {
            serving.abort();
            app.engine().shutdown().await;
            stack.shutdown().await;
            return Err(error.into());
        }
        None => {
            let _ = serving.await;
            app.engine().shutdown().await;
            stack.shutdown().await;
            return Ok(None);
        }
    };
    report.attach_server_record(&stack.idempotency_keys_seen());
    report.write_summary(out).map_err(DemoError::Io)?;
    writeln!(
        out,
        "the dashboard stays up at http://{bound}/ — Ctrl-C to stop"
    )
    .map_err(DemoError::Io)?;
    out.flush().map_err(DemoError::Io)?;
    let _ = serving.await;
    app.engine().shutdown().await;
    stack.shutdown().await;
    Ok(Some(report))
}
