//! The evaluator over the real model client: the watchdog's and the budget
//! checkpoints' judge, on the `fast` role, held to the strict JSON of their
//! parsers.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Semaphore;

use super::client::{OpenAiClient, json_object_format};
use super::settings::ModelRole;
use leasehold_actors::{
    BUDGET_CONSUMER, BoxFuture, BudgetEvaluationRequest, ChatMessage, EvaluationRequest, Evaluator,
    EvaluatorAnswer, EvaluatorError, Evidence, ModelErrorKind, ModelRequest, TranscriptMessage,
    WATCHDOG_CONSUMER,
};

/// The longest excerpt of one transcript message shown to the evaluator.
const MESSAGE_EXCERPT: usize = 2_000;

const LEASE_SYSTEM: &str = "\
You are the watchdog of an agent runtime. A lease — a timer beside a slow \
operation — has expired. The operation is still running; nothing has been \
cancelled. Judge from the evidence whether it is alive and worth more time.

Verdicts:
- RENEW: it looks alive (evidence keeps arriving, or the work is known to be slow); give it another lease period.
- NUDGE: it is alive but heading the wrong way; say in `nudge` what the next step should do differently. The running call is not changed.
- INTERVENE: it looks stuck or dead; cancel it and let it be retried.
- ESCALATE: a person must decide; the run pauses until one answers.

phi is an accrual failure detector's suspicion that the evidence has stopped: \
below 1 the evidence is fresh, around 3 it is late, above 8 it has almost \
certainly stopped. No evidence at all means the operation has said nothing \
since it started. A stream that keeps sending is alive but not necessarily \
going anywhere: you are asked anyway after a few renewals on evidence alone, \
and when its text repeats itself. `repetition` is the share of repeated \
three-word sequences in the tail of its text (near 0 for ordinary prose, \
near 1 for one phrase over and over); the tail itself is shown when there is \
one. A stream that loops is a case for NUDGE, INTERVENE or ESCALATE. \
Evidence is counted by kind: text, reasoning and tool_call bytes that add \
to an answer, progress values that rose, worker steps, notes, and \
keepalives. A keepalive (an empty chunk, a comment, a progress value that \
did not move) shows only that the connection is open, never that the work \
advances: an operation that sends nothing but keepalives is wedged until \
shown otherwise.

Answer with exactly one JSON object and nothing else — no prose, no code \
fence — with exactly these three keys:
{\"verdict\": \"RENEW\" | \"NUDGE\" | \"INTERVENE\" | \"ESCALATE\", \"reason\": \"<one sentence>\", \"nudge\": \"<message for the next step>\" | null}
`verdict` is one of the four words, in capitals. `reason` is never empty. \
`nudge` is a non-empty string for NUDGE and null otherwise.";

const BUDGET_SYSTEM: &str = "\
You are the budget checkpoint of an agent runtime. A loop of an agent run \
has used up the steps it declared. Decide whether to give it more steps \
(EXTEND: it is converging — milestones are closing, the work is nearly \
done) or to make it wrap up now with what it has (WRAP_UP: it is looping, \
stuck, or done). More steps cost real model calls; an extension is \
proportional to the steps already used.

Answer with exactly one JSON object and nothing else — no prose, no code \
fence — with exactly these three keys:
{\"decision\": \"EXTEND\" | \"WRAP_UP\", \"reason\": \"<one sentence>\", \"confidence\": <a number from 0 to 1>}
`decision` is one of the two words, in capitals. `reason` is never empty.";

/// An [`Evaluator`] over the real model client: the watchdog's and the
/// budget checkpoints' judge, on the `fast` role.
///
/// Its prompts show the request's real figures — for a lease: kind,
/// subject, renewals, lease length, the evidence with its phi, the
/// transcript tail; for a budget: steps, tool calls, spawns, milestones,
/// extensions — and demand exactly the strict JSON the watchdog's
/// ([`parse_verdict`](leasehold_actors::parse_verdict)) and the budget's
/// ([`parse_budget_decision`](leasehold_actors::parse_budget_decision)) parsers
/// accept. It asks for `response_format: {"type": "json_object"}`; a server
/// that refuses the request with any 4xx (whatever its message says: not
/// every server names the field it cannot take) is asked once more
/// without it, and, if that answers, is never sent it again by this
/// evaluator — which says so once in the log, with the refusal. The
/// answer's text is returned raw: validating it is the watchdog's job, so
/// every evaluator is held to one standard.
///
/// Calls are attributed to `engine.watchdog` and `engine.budget`. There is
/// no timeout here: the watchdog and the checkpoint run the evaluator under
/// their own flat one.
///
/// The judge costs less than what it judges ([`JudgeBounds`]): every
/// request carries `max_tokens` (small enough for the verdict's JSON), is
/// streamed, so that when its time is up and the call is dropped the
/// server sees the connection close and stops generating, and waits for
/// one of a bounded number of places on the endpoint (one by default),
/// within the evaluator's timeout — past which the breaker answers. The
/// watchdog never has two calls in flight for one lease.
#[derive(Clone, Debug)]
pub struct ModelEvaluator {
    client: OpenAiClient,
    /// Set once the endpoint refused JSON mode and answered without it.
    plain: Arc<AtomicBool>,
    bounds: JudgeBounds,
    /// The places on the endpoint: one permit a call in flight.
    places: Arc<Semaphore>,
}

/// What one judge call may cost: its length, and how many are in flight at
/// once on the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JudgeBounds {
    /// `max_tokens` of a lease verdict (`watchdog.max_tokens`).
    pub verdict_max_tokens: u32,
    /// `max_tokens` of a budget checkpoint's decision
    /// (`budget.checkpoint_max_tokens`).
    pub checkpoint_max_tokens: u32,
    /// Judge calls in flight at once on the endpoint, verdicts and
    /// checkpoints together (`watchdog.max_concurrent_calls`, at least 1).
    pub max_in_flight: u32,
}

impl JudgeBounds {
    /// The most tokens of a verdict or a decision by default (256): the
    /// JSON object with a one-sentence reason and a nudge fits in a
    /// hundred.
    pub const DEFAULT_MAX_TOKENS: u32 = super::settings::JUDGE_MAX_TOKENS;
    /// Judge calls in flight at once on one endpoint by default: one, so
    /// that the judge takes at most one of a local server's slots from the
    /// work it judges.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = super::settings::JUDGE_MAX_IN_FLIGHT;
}

impl Default for JudgeBounds {
    fn default() -> Self {
        Self {
            verdict_max_tokens: Self::DEFAULT_MAX_TOKENS,
            checkpoint_max_tokens: Self::DEFAULT_MAX_TOKENS,
            max_in_flight: Self::DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

fn places(bounds: &JudgeBounds) -> Arc<Semaphore> {
    let permits = usize::try_from(bounds.max_in_flight.max(1)).unwrap_or(usize::MAX);
    Arc::new(Semaphore::new(permits.min(Semaphore::MAX_PERMITS)))
}

impl ModelEvaluator {
    /// An evaluator on the `fast` role of `client` (its default endpoint
    /// when no fast one is configured), recording into `client`'s ledger.
    pub fn new(client: &OpenAiClient) -> Self {
        Self::with_role(client, ModelRole::Fast)
    }

    /// An evaluator on `role` of `client` (`LEASEHOLD_WATCHDOG_ROLE`).
    pub fn with_role(client: &OpenAiClient, role: ModelRole) -> Self {
        let bounds = JudgeBounds::default();
        Self {
            client: client.role(role),
            plain: Arc::default(),
            places: places(&bounds),
            bounds,
        }
    }

    /// This evaluator held to `bounds` (a `max_in_flight` of 0 counts as 1).
    #[must_use]
    pub fn with_bounds(self, bounds: JudgeBounds) -> Self {
        Self {
            places: places(&bounds),
            bounds,
            ..self
        }
    }

    /// What its calls may cost.
    pub fn bounds(&self) -> JudgeBounds {
        self.bounds
    }

    /// The messages an expired lease is judged on.
    pub fn lease_prompt(request: &EvaluationRequest) -> Vec<ChatMessage> {
        let mut text = String::new();
        let _ = writeln!(text, "An expired lease of run {}.", request.run_id);
        let _ = writeln!(text, "kind: {}", request.kind);
        let _ = writeln!(text, "subject: {}", request.subject);
        let _ = writeln!(text, "path: {}", request.path);
        let _ = writeln!(
            text,
            "lease: {} ms per period; renewed {} times so far in doubt (renewals earned by \
             progress toward a total or by an answer streaming at its pace are not counted), \
             at most {} before the renewal cap ends it",
            request.lease.as_millis(),
            request.renewals,
            request.max_renewals
        );
        // The same words the verdict's record and the trace give.
        let _ = write!(text, "evidence: {}", request.evidence.describe(None));
        text.push('\n');
        let _ = writeln!(
            text,
            "renewed on evidence alone {} times in a row before this expiry",
            request.evidence_renewals
        );
        if let Some(tail) = &request.stream_tail {
            let _ = writeln!(
                text,
                "the tail of the text streamed so far (the last {} bytes):\n<<<\n{tail}\n>>>",
                tail.len()
            );
        }
        transcript(&mut text, &request.transcript_tail);
        text.push_str("\nYour verdict, as the JSON object:");
        vec![ChatMessage::system(LEASE_SYSTEM), ChatMessage::user(text)]
    }

    /// The messages an exhausted step budget is judged on.
    pub fn budget_prompt(request: &BudgetEvaluationRequest) -> Vec<ChatMessage> {
        let figures = &request.figures;
        let mut text = String::new();
        match &figures.spending {
            Some(spending) => {
                let _ = writeln!(
                    text,
                    "Run {} has spent its budget: {}. Extending it lets its loops go on \
                     spending; not extending it pauses the run for a person. Asked by the \
                     loop {}, whose figures follow; the extensions are the run's spending \
                     extensions.",
                    request.run_id,
                    spending.describe(),
                    request.path
                );
            }
            None => {
                let _ = writeln!(
                    text,
                    "The loop {} of run {} has used up its steps.",
                    request.path, request.run_id
                );
            }
        }
        let _ = writeln!(
            text,
            "steps: {} used, {} declared, current limit {}",
            figures.steps_used, figures.steps_declared, figures.limit
        );
        let _ = writeln!(text, "tool calls so far: {}", figures.tool_calls);
        let _ = writeln!(text, "workers spawned so far: {}", figures.spawns);
        let _ = writeln!(
            text,
            "milestones closed: {}",
            list(&figures.milestones_closed)
        );
        let _ = writeln!(text, "milestones open: {}", list(&figures.milestones_open));
        let _ = writeln!(
            text,
            "extensions: {} granted, {} left",
            figures.extensions_used, figures.extensions_left
        );
        transcript(&mut text, &request.transcript_tail);
        text.push_str("\nYour decision, as the JSON object:");
        vec![ChatMessage::system(BUDGET_SYSTEM), ChatMessage::user(text)]
    }

    async fn ask(
        self,
        messages: Vec<ChatMessage>,
        max_tokens: u32,
        consumer: &str,
    ) -> Result<EvaluatorAnswer, EvaluatorError> {
        let Self {
            client,
            plain,
            places,
            ..
        } = self;
        // A place on the endpoint first: waited for within the caller's
        // timeout, past which the breaker answers.
        let _place = places
            .acquire_owned()
            .await
            .map_err(|_| EvaluatorError::new("the evaluator's places were closed"))?;
        // Streamed, so that dropping the call when its time is up closes
        // the connection and the server stops generating; bounded in
        // length whatever the server would otherwise generate.
        let request = ModelRequest {
            max_tokens: Some(max_tokens.max(1)),
            traceparent: None,
            messages,
            tools: Vec::new(),
            stream: true,
            consumer: consumer.to_owned(),
        };
        let format = json_object_format();
        let json_mode = !plain.load(Ordering::Relaxed);
        let first = client
            .call(
                request.clone(),
                Evidence::detached(),
                json_mode.then_some(&format),
            )
            .await;
        let reply = match first {
            Err(refused) if json_mode && refused.kind == ModelErrorKind::Client => {
                let again = client.call(request, Evidence::detached(), None).await;
                if again.is_ok() && !plain.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint = %leasehold_actors::ModelClient::describe(&client),
                        refusal = %refused.message,
                        "the evaluator's endpoint refused JSON mode (response_format) and \
                         answered without it: it is asked without it from now on"
                    );
                }
                again
            }
            other => other,
        }
        .map_err(|e| EvaluatorError::new(e.to_string()))?;
        Ok(EvaluatorAnswer {
            text: reply.content,
            cost: reply.usage,
        })
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

fn transcript(text: &mut String, tail: &[TranscriptMessage]) {
    if tail.is_empty() {
        text.push_str("transcript tail: empty\n");
        return;
    }
    let _ = writeln!(text, "transcript tail (the last {} messages):", tail.len());
    for message in tail {
        let content = match message.content.char_indices().nth(MESSAGE_EXCERPT) {
            Some((cut, _)) => format!("{} […]", &message.content[..cut]),
            None => message.content.clone(),
        };
        let _ = writeln!(text, "[{}] {}", message.role, content);
    }
}

impl Evaluator for ModelEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let messages = Self::lease_prompt(&request);
        let max_tokens = self.bounds.verdict_max_tokens;
        Box::pin(self.clone().ask(messages, max_tokens, WATCHDOG_CONSUMER))
    }

    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let messages = Self::budget_prompt(&request);
        let max_tokens = self.bounds.checkpoint_max_tokens;
        Box::pin(self.clone().ask(messages, max_tokens, BUDGET_CONSUMER))
    }

    fn model_name(&self) -> Option<String> {
        leasehold_actors::ModelClient::model_name(&self.client)
    }
}
