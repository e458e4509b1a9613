//! The demo: a slow-but-alive operation kept alive by evidence, a hung one
//! intervened, and an escalation, on the real clock in about three seconds.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let mut out = std::io::stdout();
    match leasehold_examples::run_demo(&mut out).await {
        Ok(report) if report.as_expected() => ExitCode::SUCCESS,
        Ok(report) => {
            eprintln!("the demo did not go as expected: {report:?}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("demo failed: {error}");
            ExitCode::FAILURE
        }
    }
}
