//! The demo: an incident review with three workers that shows a slow
//! operation kept alive by evidence, a budget extension, a restart after an
//! intervention, and a pause that waits for a person — on the real clock; how
//! long it takes is said once, in the crate's documentation (`src/lib.rs`).

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
