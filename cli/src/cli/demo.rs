//! `leasehold demo`: the embedded demo, optionally with the dashboard.
//!
//! SIGINT, SIGTERM or SIGHUP before the run ends stops it in place, shuts the
//! engine and the demo's servers down and exits 130 or 143, in every mode;
//! with `--serve`, once the run has ended, either signal just takes the
//! dashboard down (the exit code is then the demo's).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::signal::{Signals, Stop};
use super::{CliError, GlobalArgs, install_signals};
use crate::demo::{self, Answer, DemoError, DemoStack};
use leasehold::Store;
use leasehold::config::{Config, Source};
use leasehold::executor::{Executor, ExecutorOptions};
use leasehold_server::{App, ServerOptions};

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
pub(super) async fn run(global: &GlobalArgs, args: DemoArgs) -> Result<ExitCode, CliError> {
    let answer = if args.interactive {
        Answer::Stdin
    } else {
        Answer::auto()
    };
    // The demo's run is kept where every other run is, so that `leasehold
    // runs show` and the dashboard find it afterwards; only the demo's own
    // settings (its servers, its short leases) are its own.
    let config = global.load(&[])?;
    let store = config.open_store()?;
    let kept_in = kept_in(&config);
    let signals = install_signals()?;
    let mut out = std::io::stdout();
    let outcome = if args.serve {
        let stack = DemoStack::start().await?.priced(config.prices.clone());
        serve(stack, args.addr, store, answer, &mut out, &signals).await?
    } else {
        let prices = config.prices.clone();
        demo::run_until_in(store, prices, answer, &mut out, signals.stopped()).await?
    };
    let report = match outcome {
        Ok(report) => report,
        Err(stop) => {
            let _ = out.flush();
            say!(
                "leasehold: {}: the demo stopped before its run ended",
                stop.name()
            );
            return Ok(ExitCode::from(stop.exit_code()));
        }
    };
    let _ = writeln!(
        out,
        "\nThe run is kept in {}: `leasehold runs trace {}{}` shows its verdicts again, who \
         decided each, and their counts (`runs show` prints its whole record as JSON).",
        kept_in.0, report.run_id, kept_in.1
    );
    let _ = out.flush();
    if report.as_expected() {
        return Ok(ExitCode::SUCCESS);
    }
    say!("leasehold: the demo did not show everything it should (see the summary)");
    if report.state.status.is_paused() {
        Ok(ExitCode::from(super::EXIT_PAUSED))
    } else {
        Ok(ExitCode::FAILURE)
    }
}

/// Where the demo's run is kept, and what a `runs` command must be given
/// to find it there (the flag that chose it, if one did).
fn kept_in(config: &Config) -> (String, String) {
    if let Some(url) = &config.store_url.value {
        let flag = match &config.store_url.source {
            Source::Flag(_) => " --store URL",
            _ => "",
        };
        return (
            format!("the store at {}", leasehold::store::redact_url(url)),
            flag.to_owned(),
        );
    }
    let dir = config.data_dir.value.display();
    let flag = match &config.data_dir.source {
        Source::Flag(_) => format!(" --data-dir {dir}"),
        _ => String::new(),
    };
    (format!("the data directory `{dir}`"), flag)
}

/// The demo with the dashboard: the same engine behind the HTTP server, the
/// run adopted by it so the page can resume it. After the run the dashboard
/// stays up until SIGINT, SIGTERM or SIGHUP; one before the run ends stops
/// everything (`Err` with the signal).
async fn serve(
    stack: DemoStack,
    addr: SocketAddr,
    store: Arc<dyn Store>,
    answer: Answer,
    out: &mut std::io::Stdout,
    signals: &Signals,
) -> Result<Result<demo::DemoReport, Stop>, CliError> {
    leasehold_server::check_bind(addr, None).map_err(|e| CliError::other(e.to_string()))?;
    let engine = stack.engine_builder()?.store(store).build().await?;
    let executor = Executor::new(Arc::new(engine), ExecutorOptions::command_line());
    let app = App::new(Arc::clone(&executor), ServerOptions::default());
    let listener = super::serve::bind(addr).await?;
    let (bound, serving) = super::serve::start(Arc::clone(&app), listener, signals)?;
    writeln!(out, "dashboard: http://{bound}/").map_err(DemoError::Io)?;
    out.flush().map_err(DemoError::Io)?;
    let driven = demo::drive_with(&executor, stack.flow(), answer, out, move |handle| {
        out!("run: {}", handle.run_id());
        let _ = std::io::stdout().flush();
    });
    // The server stops on the same signal.
    let outcome = tokio::select! {
        outcome = driven => Ok(outcome),
        stop = signals.stopped() => Err(stop),
    };
    let mut report = match outcome {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => {
            serving.abort();
            executor.shutdown().await?;
            stack.shutdown().await;
            return Err(error.into());
        }
        Err(stop) => {
            let _ = serving.await;
            executor.shutdown().await?;
            stack.shutdown().await;
            return Ok(Err(stop));
        }
    };
    report.attach_server_record(&stack.idempotency_keys_seen());
    report.write_summary(out).map_err(DemoError::Io)?;
    writeln!(
        out,
        "the dashboard stays up at http://{bound}/ — Ctrl-C (or SIGTERM) to stop"
    )
    .map_err(DemoError::Io)?;
    out.flush().map_err(DemoError::Io)?;
    let _ = serving.await;
    executor.shutdown().await?;
    stack.shutdown().await;
    Ok(Ok(report))
}
