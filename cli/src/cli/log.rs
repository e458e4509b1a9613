//! Following a run from the command line: a readable live log, or one JSON
//! event per line (the event schema, unchanged).

use std::io::Write;
use std::time::Duration;

use leasehold::{Event, EventKind, EventStream, RunHandle, RunState, Store, StoreError};

use super::signal::{Signals, Stop};
use crate::columns::{KIND_WIDTH, path_column};
use leasehold::printable::{printable, printable_block, printable_json};

/// How events are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// One line per event: time, path, kind, what happened.
    Readable,
    /// One JSON event per line.
    Json,
}

/// One readable line for `event`, its time counted from `origin` (Unix ms).
/// What a client, a model or a tool wrote in it (a flow's name, a tool's
/// name, an answer, an error) is printed as text: one event, one line.
pub(crate) fn line(event: &Event, origin: u64) -> String {
    let millis = event.at.saturating_sub(origin);
    format!(
        "{:>4}.{:02}s  {} {:<KIND_WIDTH$} {}",
        millis / 1000,
        (millis % 1000) / 10,
        path_column(&event.path),
        event.kind.name(),
        printable(&event.kind.describe())
    )
}

/// Prints `event` to stdout as `output` says.
pub(crate) fn print(event: &Event, output: Output, origin: u64) {
    let text = match output {
        Output::Json => {
            let json = serde_json::to_string(event).unwrap_or_else(|e| {
                serde_json::json!({"seq": event.seq, "error": e.to_string()}).to_string()
            });
            printable_json(&json).into_owned()
        }
        Output::Readable => {
            // Progress is evidence more than news: an operation's first
            // report is shown, then at most one a period.
            if matches!(event.kind, EventKind::Progress { .. })
                && !PROGRESS_SHOWN
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .show(event)
            {
                return;
            }
            line(event, origin)
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
}

/// How often, at most, the readable log shows the progress of one
/// operation (of one path of one run): its first report, then one per
/// period of the events' own time.
pub(crate) const PROGRESS_PERIOD_MS: u64 = 5_000;

/// When the readable log last showed each operation's progress.
static PROGRESS_SHOWN: std::sync::LazyLock<std::sync::Mutex<ProgressPace>> =
    std::sync::LazyLock::new(Default::default);

/// Which progress events the readable log shows: per run and path, the
/// first, then one at least [`PROGRESS_PERIOD_MS`] after the last shown.
#[derive(Debug, Default)]
pub(crate) struct ProgressPace {
    shown: std::collections::HashMap<(std::sync::Arc<str>, std::sync::Arc<str>), u64>,
}

impl ProgressPace {
    /// Whether `event` (a progress event) is shown; if so, it is the last
    /// shown of its operation from now on.
    pub(crate) fn show(&mut self, event: &Event) -> bool {
        let key = (event.run_id.clone(), event.path.clone());
        match self.shown.get(&key) {
            Some(&last) if event.at < last.saturating_add(PROGRESS_PERIOD_MS) => false,
            _ => {
                self.shown.insert(key, event.at);
                true
            }
        }
    }
}

/// How following a run ended.
pub(crate) struct Followed {
    /// The run's last state.
    pub(crate) state: RunState,
    /// The signal (SIGINT, SIGTERM or SIGHUP) that stopped the following before the
    /// run ended or paused, if one did.
    pub(crate) stopped: Option<Stop>,
    /// The run.
    run_id: String,
    /// The seq of the last event printed.
    last_seq: u64,
    /// The time of the first event printed (Unix ms).
    origin: Option<u64>,
    /// How events were printed.
    output: Output,
}

impl Followed {
    /// Prints what the run's log holds after the last event printed: the
    /// bus is a live view that a loaded machine can outrun, the log is the
    /// record. Call it once the engine has written its log out.
    pub(crate) async fn print_rest(&self, store: &dyn Store) -> Result<(), StoreError> {
        for event in store.load_events(&self.run_id, self.last_seq).await? {
            print(&event, self.output, self.origin.unwrap_or(event.at));
        }
        Ok(())
    }
}

/// Prints the run's events as they happen until it ends, pauses for a
/// person, is lost to another executor, or SIGINT, SIGTERM or SIGHUP arrives.
pub(crate) async fn follow(
    mut handle: RunHandle,
    events: &mut EventStream,
    output: Output,
    signals: &Signals,
) -> Followed {
    let run_id = handle.run_id().to_owned();
    let mut origin = None;
    let mut last_seq = 0;
    let mut show = |event: &Event| {
        if *event.run_id == *run_id && event.seq > last_seq {
            let start = *origin.get_or_insert(event.at);
            last_seq = event.seq;
            print(event, output, start);
        }
    };
    let signalled = signals.stopped();
    tokio::pin!(signalled);
    let mut stopped = None;
    let state = loop {
        tokio::select! {
            state = handle.wait_until(|s| s.status.is_paused()) => break state,
            stop = &mut signalled => {
                stopped = Some(stop);
                break handle.state();
            }
            received = events.recv() => match received {
                Some(Ok(event)) => show(&event),
                Some(Err(lagged)) => say!("leasehold: {lagged}; `leasehold runs events {run_id}` has them all"),
                None => break handle.wait().await,
            },
        }
    };
    // The last events are published around the state change: take what
    // arrives until the bus is quiet.
    // Not after a signal: whoever sent it wants out, now.
    while stopped.is_none()
        && let Ok(Some(Ok(event))) =
            tokio::time::timeout(Duration::from_millis(200), events.recv()).await
    {
        show(&event);
    }
    match stopped {
        Some(stop) => say!(
            "{}: run {run_id} stays in the store as it is, its tool servers stopped; \
             `leasehold runs resume {run_id}` picks it up from its last snapshots",
            stop.name()
        ),
        None => report(&run_id, &state, output),
    }
    Followed {
        state,
        stopped,
        run_id,
        last_seq,
        origin,
        output,
    }
}

/// Says how the run ended, or how to resume it, on stderr (and the answer
/// on stdout in the readable log).
fn report(run_id: &str, state: &RunState, output: Output) {
    if let Some(lost) = &state.lost {
        say!(
            "run {run_id} was lost to another executor: {}",
            printable(lost)
        );
        return;
    }
    let status = serde_json::to_value(state.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    if state.status.is_paused() {
        say!("{}", paused_line(run_id, &status, state.paused.as_ref()));
        if state.status == leasehold::RunStatus::ReconciliationRequired {
            let key = state
                .paused
                .as_ref()
                .and_then(|p| p.call.as_ref())
                .map_or_else(
                    || "KEY".to_owned(),
                    |call| printable(&call.key).into_owned(),
                );
            say!(
                "decide about the call with: leasehold runs reconcile {run_id} --key {key} \
                 (--mark-done [--result TEXT] | --retry | --cancel)"
            );
        } else {
            say!("resume it with: leasehold runs resume {run_id} --guidance \"what to do\"");
        }
        return;
    }
    if output == Output::Readable
        && let Some(answer) = &state.answer
    {
        out!("\nanswer: {}", printable_block(answer));
    }
    let reason = state
        .reason
        .as_deref()
        .map(|r| format!(": {}", printable(r)))
        .unwrap_or_default();
    say!("run {run_id} {status}{reason}");
}

/// What a paused run waits for, in the words of its `paused` event: what
/// was being done, then the reason as it was given.
fn paused_line(run_id: &str, status: &str, pause: Option<&leasehold::PauseRecord>) -> String {
    match pause {
        Some(pause) if pause.subject == leasehold::ENDPOINT_SUBJECT => format!(
            "run {run_id} is paused ({status}), waiting for its endpoint to answer again: {}",
            printable(&pause.reason)
        ),
        Some(pause) => format!(
            "run {run_id} is paused ({status}), waiting for a person about `{}`: {}",
            printable(&pause.subject),
            printable(&pause.reason)
        ),
        None => format!("run {run_id} is paused ({status})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &str) -> Event {
        Event {
            seq: 1,
            position: 1,
            at: 2_500,
            run_id: "run-1".into(),
            path: path.into(),
            kind: EventKind::Resumed {
                guidance: Some("go on".to_owned()),
                by: None,
            },
        }
    }

    #[test]
    fn a_long_path_keeps_its_end_and_the_columns_after_it_in_place() {
        let short = line(&at("run"), 0);
        let long_path = "run/worker:research:1/worker:deep:2/tool_call:3.0";
        let long = line(&at(long_path), 0);
        // Where the kind starts, in characters as a terminal shows them.
        let kind_at = |line: &str| {
            let byte = line.find("resumed").expect("the kind");
            line[..byte].chars().count()
        };
        assert_eq!(kind_at(&long), kind_at(&short), "{short}\n{long}");
        assert!(long.contains("…/worker:deep:2/tool_call:3.0 "), "{long}");
    }

    #[test]
    fn the_longest_kind_keeps_the_text_after_it_in_place() {
        let reconciliation = EventKind::ReconciliationRequired {
            tool: "charge".to_owned(),
            idempotency_key: "k".to_owned(),
            arguments: Box::new(serde_json::json!({})),
            reason: "unknown".to_owned(),
        };
        assert_eq!(reconciliation.name().len(), KIND_WIDTH);
        let mut event = at("run");
        let resumed = line(&event, 0);
        event.kind = reconciliation;
        let reconciled = line(&event, 0);
        let text_at = |line: &str| {
            line.find("a person answered")
                .or_else(|| line.find("charge"))
                .expect("the text")
        };
        assert_eq!(
            text_at(&resumed),
            text_at(&reconciled),
            "{resumed}\n{reconciled}"
        );
    }

    #[test]
    fn a_pause_reads_as_what_was_being_done_then_its_reason() {
        let pause = leasehold::PauseRecord {
            reason: "HTTP 503 Service Unavailable; resume to try again.".to_owned(),
            subject: "model call".to_owned(),
            path: "run".to_owned(),
            call: None,
        };
        assert_eq!(
            paused_line("run-1", "waiting_human", Some(&pause)),
            "run run-1 is paused (waiting_human), waiting for a person about `model call`: \
             HTTP 503 Service Unavailable; resume to try again."
        );
        assert_eq!(
            paused_line("run-1", "waiting_human", None),
            "run run-1 is paused (waiting_human)"
        );
    }

    fn progress(path: &str, at: u64) -> Event {
        Event {
            seq: 1,
            position: 1,
            at,
            run_id: "run-1".into(),
            path: path.into(),
            kind: EventKind::Progress {
                lease_id: leasehold::LeaseId(1),
                count: 1,
                note: Some("shard 1 of 4".to_owned()),
                reports: 1,
            },
        }
    }

    #[test]
    fn an_operations_first_progress_is_shown_then_one_a_period() {
        let mut pace = ProgressPace::default();
        let search = "run/tool_call:1.0";
        assert!(pace.show(&progress(search, 1_000)), "the first");
        assert!(!pace.show(&progress(search, 1_500)));
        assert!(!pace.show(&progress(search, 5_999)));
        assert!(pace.show(&progress(search, 6_000)), "a period later");
        assert!(!pace.show(&progress(search, 7_000)));
        assert!(
            pace.show(&progress("run/tool_call:2.0", 7_000)),
            "another operation's first"
        );
    }
}
