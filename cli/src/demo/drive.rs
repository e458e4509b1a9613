//! The driver: starts the demo's run, writes one line per interesting event,
//! answers the pause, and counts what happened.

use std::io::Write;
use std::time::Duration;

use std::io::BufRead;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::report::{DemoReport, PauseAnswer, Responder};
use super::{Answer, DemoError};
use std::sync::Arc;

use crate::columns::{KIND_WIDTH, path_column};
use leasehold::executor::Executor;
use leasehold::printable::printable;
use leasehold::{
    Clock, ControlError, Engine, Event, EventKind, EventStream, Flow, Lagged, RunHandle, RunState,
    RunStatus, SystemClock,
};

/// How long the driver keeps reading after the run has ended, for the
/// events still on their way (the run's last event ends it sooner).
const DRAIN: Duration = Duration::from_millis(250);

/// The log: the run's events as lines, timed from the start.
struct Log<'a, W: Write + Send> {
    out: &'a mut W,
    origin: u64,
    run_id: String,
    events: Vec<Event>,
    lost: u64,
    /// Whether the event stream is still open (it closes only with the
    /// engine's bus).
    open: bool,
}

impl<W: Write + Send> Log<'_, W> {
    /// Takes the next item of the event stream: logs and keeps an event of
    /// this run, counts lost ones.
    fn take(
        &mut self,
        next: Option<Result<std::sync::Arc<Event>, Lagged>>,
    ) -> Result<(), DemoError> {
        match next {
            Some(Ok(event)) if *event.run_id == *self.run_id => {
                if let Some(line) = line(&event, self.origin) {
                    writeln!(self.out, "{line}")?;
                }
                self.events.push((*event).clone());
            }
            Some(Ok(_)) => {}
            None => self.open = false,
            Some(Err(lagged)) => {
                self.lost += lagged.missed;
                writeln!(
                    self.out,
                    "{}  (the log fell behind: {} events were lost)",
                    seconds(SystemClock.now_unix_ms(), self.origin),
                    lagged.missed
                )?;
            }
        }
        Ok(())
    }

    /// Logs every event already waiting, so that a line of the driver's own
    /// comes after the events that led to it.
    fn catch_up(&mut self, stream: &mut EventStream) -> Result<(), DemoError> {
        while let Some(next) = stream.try_recv() {
            self.take(Some(next))?;
        }
        Ok(())
    }

    /// A line of the driver's own, timed now.
    fn note(&mut self, text: &str) -> Result<(), DemoError> {
        let at = seconds(SystemClock.now_unix_ms(), self.origin);
        let mut lines = text.lines();
        if let Some(first) = lines.next() {
            writeln!(self.out, "{at}  ── {first}")?;
        }
        for rest in lines {
            writeln!(self.out, "           {rest}")?;
        }
        Ok(())
    }
}

/// Starts `flow` on `executor`, writes a readable log of its events to `out`
/// — one line per interesting event, timed from the start — answers its
/// pause as `answer` says, and returns what it showed.
///
/// The log says when the run pauses and how it will be answered. The
/// report's retries do not yet include the tool server's record: attach it
/// with [`DemoReport::attach_server_record`]. The summary is written by
/// [`DemoReport::write_summary`].
pub async fn drive(
    executor: &Arc<Executor>,
    flow: Flow,
    answer: Answer,
    out: &mut (impl Write + Send),
) -> Result<DemoReport, DemoError> {
    drive_with(executor, flow, answer, out, |_| {}).await
}

/// [`drive`], handing the run's handle to `on_start` as soon as the run has
/// started: for instance to a person's task, which resumes the run from
/// outside ([`Answer::External`]). The executor's controls reach it too
/// (an HTTP server of the executor's runs, say).
pub async fn drive_with(
    executor: &Arc<Executor>,
    flow: Flow,
    answer: Answer,
    out: &mut (impl Write + Send),
    on_start: impl FnOnce(&RunHandle) + Send,
) -> Result<DemoReport, DemoError> {
    let engine = executor.engine();
    let mut stream = engine.events().subscribe();
    let begun = Instant::now();
    let origin = SystemClock.now_unix_ms();
    header(engine, &flow, &answer, out)?;
    let mut run = executor
        .start(flow, leasehold::RunOptions::default())
        .await
        .map_err(DemoError::Start)?;
    on_start(&run);
    let mut log = Log {
        out,
        origin,
        run_id: run.run_id().to_owned(),
        events: Vec::new(),
        lost: 0,
        open: true,
    };
    let mut answer = answer;
    let mut answers = Vec::new();
    let state = loop {
        let state = tokio::select! {
            state = run.wait_until(|s| s.status.is_paused()) => state,
            next = stream.recv(), if log.open => {
                log.take(next)?;
                continue;
            }
        };
        if state.status.is_terminal() || state.lost.is_some() {
            break state;
        }
        let answered =
            wait_for_answer(&mut run, &mut stream, &mut log, &mut answer, &state).await?;
        answers.push(answered);
    };
    drain(&mut stream, &mut log).await?;
    if let Some(lost) = &state.lost {
        log.note(&format!("this executor lost the run: {lost}"))?;
    }
    fill_external_guidance(&mut answers, &log.events);
    let elapsed_ms = u64::try_from(begun.elapsed().as_millis()).unwrap_or(u64::MAX);
    let Log {
        run_id,
        events,
        lost,
        ..
    } = log;
    Ok(DemoReport::from_events(
        run_id, state, &events, answers, elapsed_ms, lost,
    ))
}

/// The opening lines: what runs, with which timings, and what to watch for.
fn header(
    engine: &Engine,
    flow: &Flow,
    answer: &Answer,
    out: &mut (impl Write + Send),
) -> Result<(), DemoError> {
    let config = engine.config();
    let lease = flow.lease_config(config.supervision.lease);
    let watchdog = flow.watchdog_config(&config.supervision.watchdog);
    let tools: Vec<String> = flow
        .tools
        .iter()
        .map(|t| {
            t.url
                .as_deref()
                .map(leasehold::secret::redact_url)
                .or_else(|| {
                    t.command
                        .as_ref()
                        .map(|c| leasehold::secret::redact_command(c).join(" "))
                })
                .unwrap_or_else(|| t.name.clone())
        })
        .collect();
    writeln!(
        out,
        "leasehold demo: flow `{}` — a root and {} workers ({}), tools at {}",
        flow.name,
        flow.workers.len(),
        flow.workers.keys().cloned().collect::<Vec<_>>().join(", "),
        tools.join(", ")
    )?;
    writeln!(
        out,
        "leases: tool call {}, model stream {}, worker step {}; {} free renewals; evaluator timeout {}",
        humantime::format_duration(lease.tool_call),
        humantime::format_duration(lease.model_stream),
        humantime::format_duration(lease.worker_step),
        watchdog.free_renewals,
        humantime::format_duration(watchdog.evaluator_timeout),
    )?;
    writeln!(out, "watch for:")?;
    for item in [
        "the deploys worker's plan streams slowly: past its free renewals, its lease is renewed on the evidence of its chunks",
        "search_logs is slow but sends MCP progress: renewed on that evidence, without asking the evaluator",
        "fetch_metrics hangs without a word: the evaluator intervenes, and it is restarted with the same idempotency key",
        "the logs worker uses up its 2 steps: its budget checkpoint extends it",
        "rollback_deploy goes silent and changes production: escalated, the whole run pauses for a person",
    ] {
        writeln!(out, "  · {item}")?;
    }
    let how = match answer {
        Answer::Auto { after, .. } => format!(
            "answered automatically {} after it starts",
            humantime::format_duration(*after)
        ),
        Answer::Stdin => "answered by you, on standard input".to_owned(),
        Answer::External => "answered from outside (the HTTP API or the dashboard)".to_owned(),
    };
    writeln!(out, "the pause will be {how}.")?;
    writeln!(out)?;
    Ok(())
}

/// Waits while the run is paused, answering as `answer` says, logging
/// events meanwhile; returns how the pause was answered.
async fn wait_for_answer<W: Write + Send>(
    run: &mut RunHandle,
    stream: &mut EventStream,
    log: &mut Log<'_, W>,
    answer: &mut Answer,
    state: &RunState,
) -> Result<PauseAnswer, DemoError> {
    let paused_at = Instant::now();
    log.catch_up(stream)?;
    let (subject, reason) = state
        .paused
        .as_ref()
        .map(|p| (p.subject.clone(), p.reason.clone()))
        .unwrap_or_default();
    let status = if state.status == RunStatus::WaitingHuman {
        "waiting_human"
    } else {
        "reconciliation_required"
    };
    log.note(&format!(
        "the run is PAUSED ({status}) about `{subject}`: nothing starts and no lease expires \
         until a person answers"
    ))?;
    let control = run.clone();
    let mut auto_at = None;
    let mut line: Option<oneshot::Receiver<Option<String>>> = None;
    let mut given: Option<(Responder, Option<String>)> = None;
    if state.status == RunStatus::ReconciliationRequired {
        // The demo's flow never leaves a call of unknown outcome; a person
        // must decide, which only the HTTP API offers.
        if let Answer::Auto { .. } = answer {
            log.note(
                "a tool call's outcome is unknown, which the demo does not expect: \
                 cancelling the run",
            )?;
            control
                .cancel("the demo does not decide on tool calls of unknown outcome")
                .await
                .or_else(ignore_settled)?;
            given = Some((Responder::Auto, None));
        } else {
            log.note("decide on the call through the HTTP API or the dashboard; waiting")?;
        }
    } else {
        match answer {
            Answer::Auto { after, guidance } => {
                log.note(&format!(
                    "answering automatically in {} with: \"{guidance}\"",
                    humantime::format_duration(*after)
                ))?;
                auto_at = Some(Instant::now() + *after);
            }
            Answer::Stdin => {
                log.note(
                    "type your guidance for the run and press Enter (an empty line resumes \
                     without guidance)",
                )?;
                line = Some(read_line());
            }
            Answer::External => log.note(&format!(
                "waiting for someone to resume run {} (the HTTP API or the dashboard)",
                log.run_id
            ))?,
        }
    }
    loop {
        tokio::select! {
            state = run.wait_until(|s| !s.status.is_paused()) => {
                let (answered_by, guidance) = given.unwrap_or((Responder::External, None));
                log.catch_up(stream)?;
                if !state.status.is_terminal() {
                    log.note("resumed: the clocks run again")?;
                }
                return Ok(PauseAnswer {
                    subject,
                    reason,
                    answered_by,
                    guidance,
                    waited_ms: u64::try_from(paused_at.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            next = stream.recv(), if log.open => log.take(next)?,
            () = sleep_until(auto_at), if auto_at.is_some() => {
                auto_at = None;
                if let Answer::Auto { guidance, .. } = answer {
                    let guidance = guidance.clone();
                    log.note(&format!("a person answers: \"{guidance}\""))?;
                    control.resume(Some(guidance.clone())).await.or_else(ignore_settled)?;
                    given = Some((Responder::Auto, Some(guidance)));
                }
            }
            typed = wait_line(&mut line), if line.is_some() => {
                line = None;
                match typed {
                    Some(text) => {
                        let guidance = Some(text.trim().to_owned()).filter(|t| !t.is_empty());
                        control.resume(guidance.clone()).await.or_else(ignore_settled)?;
                        given = Some((Responder::Stdin, guidance));
                    }
                    None => {
                        *answer = Answer::External;
                        log.note(&format!(
                            "standard input is closed: waiting for someone to resume run {} \
                             (the HTTP API or the dashboard)",
                            log.run_id
                        ))?;
                    }
                }
            }
        }
    }
}

/// A resume or cancel refused because the run was already answered or
/// ended by someone else is not a failure of the driver.
fn ignore_settled(error: ControlError) -> Result<(), DemoError> {
    match error {
        ControlError::NotPaused { .. } | ControlError::AlreadyFinished { .. } => Ok(()),
        other => Err(DemoError::Control(other)),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn wait_line(line: &mut Option<oneshot::Receiver<Option<String>>>) -> Option<String> {
    match line.as_mut() {
        Some(receiver) => receiver.await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// Reads one line of standard input in the background: `None` at its end.
///
/// The read runs on a thread of its own, not on tokio's blocking pool: the
/// runtime's shutdown waits for its blocking tasks, and a read of a
/// terminal nobody types into would make Ctrl-C wait for Enter. A detached
/// thread does not hold the process up.
fn read_line() -> oneshot::Receiver<Option<String>> {
    let (sender, receiver) = oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line);
        let _ = sender.send(match read {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        });
    });
    receiver
}

/// Reads what is still on its way after the run ended, until the run's
/// last event or a short quiet.
async fn drain<W: Write + Send>(
    stream: &mut EventStream,
    log: &mut Log<'_, W>,
) -> Result<(), DemoError> {
    let ended = |events: &[Event]| {
        events.iter().any(|e| {
            matches!(
                e.kind,
                EventKind::RunCompleted { .. }
                    | EventKind::RunFailed { .. }
                    | EventKind::RunCancelled { .. }
            )
        })
    };
    while !ended(&log.events) {
        match tokio::time::timeout(DRAIN, stream.recv()).await {
            Ok(Some(next)) => log.take(Some(next))?,
            Ok(None) | Err(_) => break,
        }
    }
    Ok(())
}

/// Pauses answered from outside get the guidance their `resumed` event
/// carried.
fn fill_external_guidance(answers: &mut [PauseAnswer], events: &[Event]) {
    let resumed: Vec<Option<&String>> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Resumed { guidance, .. } => Some(guidance.as_ref()),
            _ => None,
        })
        .collect();
    for (answer, guidance) in answers.iter_mut().zip(resumed) {
        if answer.answered_by == Responder::External && answer.guidance.is_none() {
            answer.guidance = guidance.cloned();
        }
    }
}

/// The log line of `event`, or `None` for the noisy ones: every model call's
/// start, every lease expiry (its verdict follows at once), and each
/// progress report but a lease's first.
fn line(event: &Event, origin: u64) -> Option<String> {
    let text = match &event.kind {
        EventKind::ModelCallStarted { .. } | EventKind::Wait { .. } => return None,
        EventKind::Progress { count, .. } if *count > 1 => return None,
        EventKind::Progress { note, .. } => format!(
            "{} (evidence for its lease; later reports are not shown)",
            note.as_deref().unwrap_or("progress")
        ),
        EventKind::Verdict(record) => {
            let phi = record
                .evidence
                .phi
                .map_or_else(|| "none".to_owned(), |phi| format!("{phi:.2}"));
            format!(
                "{} {} after {} renewal{} → {} by {} (evidence {}, phi {phi}): {}",
                record.lease_kind,
                record.subject,
                record.renewals,
                if record.renewals == 1 { "" } else { "s" },
                record.verdict,
                record.decided_by,
                record.evidence.count,
                record.reason
            )
        }
        other => other.describe(),
    };
    Some(format!(
        "{}  {} {:<KIND_WIDTH$} {}",
        seconds(event.at, origin),
        path_column(&event.path),
        event.kind.name(),
        printable(&text)
    ))
}

/// `  1.23s`: the time from `origin` to `at`, both Unix milliseconds.
fn seconds(at: u64, origin: u64) -> String {
    let millis = at.saturating_sub(origin);
    format!("{:>3}.{:02}s", millis / 1000, (millis % 1000) / 10)
}
