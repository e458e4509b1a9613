//! How long a test waits, and waiting on what it cannot be told about.
//!
//! A patience is a bound, never a pace: a test that passes waits only as
//! long as the binary takes; the patience says when to call it failed.

use std::future::Future;
use std::time::Duration;

/// How long a test waits for the binary to do what it should (start, say
/// where it listens, take a run through a step, end) before calling it
/// failed. Generous for a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(180);

/// [`PATIENCE`] for tests that crowd the machine: a real model answering on
/// its CPU, or many executors, a database and their peers at once.
pub const CROWDED_PATIENCE: Duration = Duration::from_secs(240);

/// `check` polled every 50 ms until it gives a value, within `patience`;
/// `what` names what is awaited, for the failure message.
pub async fn until<T, Fut>(what: &str, patience: Duration, mut check: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(patience, async {
        loop {
            if let Some(value) = check().await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("waited {patience:?} for {what}"))
}

/// `command`'s output, once it ended within `patience`.
pub async fn output_within(
    command: &mut tokio::process::Command,
    patience: Duration,
) -> std::process::Output {
    tokio::time::timeout(patience, command.output())
        .await
        .expect("ends in time")
        .expect("runs")
}

/// `command`'s output, once it ended within [`PATIENCE`].
pub async fn finished(command: &mut tokio::process::Command) -> std::process::Output {
    output_within(command, PATIENCE).await
}
