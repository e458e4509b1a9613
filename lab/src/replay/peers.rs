//! The peers a replay plays its run against, each answering from the
//! recording's [`Script`]: the model, the tools, the evaluator, and the
//! supervisor's restart delays.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::{
    BoxFuture, BudgetEvaluationRequest, CallOutcome, ChatMessage, ChatRole, ChildEnd, ChildInfo,
    EvaluationRequest, Evaluator, EvaluatorAnswer, EvaluatorError, Evidence, FailFast, Flow,
    ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest, OperationTiming,
    RestartOnIntervene, RestartPolicy, StrategyFactory, StrategyKind, SupervisionAction,
    SupervisionStrategy, TimedEnd, TokenCost, ToolCallRecord, ToolCallState, ToolClient,
    ToolDefinition, ToolError, ToolInvocation, ToolOutput,
};

use super::script::{Answered, Invocation, Script};

/// The marker the engine appends to a result it cut (`truncate_result` of
/// the tool-call actor), up to its figures.
const CUT_MARKER: &str = "\n[leasehold: tool result truncated: ";

/// What the replay plays the run against.
pub(super) struct Peers {
    /// What the recording says of each invocation of each call.
    pub invocations: Invocations,
    pub model: ReplayModel,
    pub tools: ReplayTools,
    pub evaluator: ReplayEvaluator,
    pub delays: Arc<BTreeMap<(String, u32), Duration>>,
    /// The replay's tool servers, by name, each with the tools it lists.
    pub servers: Vec<(String, ReplayTools)>,
}

impl Peers {
    /// The peers of a run whose loops' last snapshots are `snapshots`, whose
    /// tool-call records are `calls`, whose flow names the tool servers
    /// `names`, as `script` has them; `cap` is the replay's
    /// `max_tool_result_bytes`.
    pub fn new(
        mut script: Script,
        snapshots: &[leasehold_actors::Snapshot],
        calls: &[ToolCallRecord],
        names: &[String],
        cap: usize,
    ) -> Self {
        let mut conversations: Vec<(String, Vec<ChatMessage>)> = snapshots
            .iter()
            .filter_map(|s| {
                let transcript: Vec<ChatMessage> =
                    serde_json::from_value(s.state.get("transcript")?.clone()).ok()?;
                Some((s.path.clone(), transcript))
            })
            .collect();
        // A loop cut before it saved a step: its task, and nothing after.
        for (path, task) in &script.tasks {
            if !conversations.iter().any(|(p, _)| p == path) {
                let asked = ChatMessage {
                    role: ChatRole::User,
                    content: task.clone(),
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                };
                conversations.push((path.clone(), vec![asked]));
            }
        }
        let said = Arc::new(tool_results(&conversations));
        let invocations = Arc::new(std::mem::take(&mut script.calls));
        Self {
            invocations: invocations.clone(),
            model: ReplayModel {
                described: script.model_described.take(),
                conversations: Arc::new(conversations),
                started: Arc::default(),
                invocations: invocations.clone(),
                replies: Arc::new(std::mem::take(&mut script.replies)),
                attempts: Arc::default(),
                unanswered: Arc::default(),
            },
            tools: ReplayTools {
                said,
                only: None,
                calls: Arc::new(calls.to_vec()),
                invocations,
                attempts: Arc::default(),
                cap,
            },
            evaluator: ReplayEvaluator {
                verdicts: Arc::new(Mutex::new(std::mem::take(&mut script.verdicts))),
                budgets: Arc::new(Mutex::new(std::mem::take(&mut script.budgets))),
            },
            delays: Arc::new(std::mem::take(&mut script.delays)),
            servers: Vec::new(),
        }
        .served(&script.servers, calls, names)
    }

    /// The tool servers: the run's own, by the names its flow gives them
    /// (`names`), so that its leases' pace keys are the recording's; each
    /// lists the tools its seeded leases say were called on it, the other
    /// tools going to the first (or to [`SERVER`], if the flow has none).
    /// Nothing is started and nothing is reached: a server is only a name
    /// here.
    fn served(
        mut self,
        endpoints: &BTreeMap<String, String>,
        calls: &[ToolCallRecord],
        names: &[String],
    ) -> Self {
        let mut by_server: BTreeMap<String, std::collections::BTreeSet<String>> = names
            .iter()
            .map(|name| (name.clone(), std::collections::BTreeSet::new()))
            .collect();
        let first = names.first().map_or(SERVER, String::as_str);
        for call in calls {
            // An endpoint is the server's name, then what tells it apart.
            let server = endpoints
                .get(&call.tool)
                .and_then(|endpoint| {
                    names
                        .iter()
                        .filter(|name| {
                            endpoint
                                .strip_prefix(name.as_str())
                                .is_some_and(|rest| rest.is_empty() || rest.starts_with('#'))
                        })
                        .max_by_key(|name| name.len())
                })
                .map_or(first, String::as_str);
            by_server
                .entry(server.to_owned())
                .or_default()
                .insert(call.tool.clone());
        }
        self.servers = by_server
            .into_iter()
            .map(|(name, tools)| {
                let served = ReplayTools {
                    only: Some(Arc::new(tools)),
                    ..self.tools.clone()
                };
                (name, served)
            })
            .collect();
        self
    }
}

/// The tool server of a replay whose flow names none, for the tools its
/// recording called.
pub(super) const SERVER: &str = "recorded";

/// Each call's invocations, by the call's path.
pub(super) type Invocations = Arc<BTreeMap<String, Vec<Invocation>>>;

/// What each recorded model call answered with, by loop and step: its
/// usage and why it finished.
type Replies = BTreeMap<(String, u32), (TokenCost, Option<leasehold_actors::FinishReason>)>;

/// How many invocations of each call the replay has made so far.
type Attempts = Arc<Mutex<BTreeMap<String, usize>>>;

/// The invocation of `path` now made (from 0), counted.
fn next_attempt(attempts: &Attempts, path: &str) -> usize {
    let mut attempts = attempts.lock().unwrap_or_else(PoisonError::into_inner);
    let n = attempts.entry(path.to_owned()).or_default();
    let attempt = *n;
    *n += 1;
    attempt
}

/// How the invocation `n` of the call at `path` acts: its own timing; for
/// one its executor stopped while in flight, silence until the replay
/// stops its executor there too; for one whose timing the log lost, the
/// call's last timing.
fn act_of(invocations: &Invocations, path: &str, n: usize) -> Act {
    let Some(all) = invocations.get(path) else {
        return Act::Answer(None);
    };
    match all.get(n) {
        Some(Invocation {
            timing,
            outcome: Some(CallOutcome::Error),
            failure,
            retried,
            ..
        }) => Act::Fail {
            timing: timing.clone(),
            message: failure.clone(),
            retryable: *retried,
        },
        Some(Invocation {
            timing: Some(timing),
            ..
        }) => Act::Answer(Some(timing.clone())),
        Some(Invocation { stopped: true, .. }) => Act::Silent,
        _ => Act::Answer(all.iter().rev().find_map(|i| i.timing.clone())),
    }
}

/// What a replayed call that failed says when the log kept nothing of
/// what the real one said.
const FAILED: &str = "the recording's call failed here";

/// What one invocation does.
enum Act {
    /// Acts out this timing (or none: at once), then answers.
    Answer(Option<OperationTiming>),
    /// Acts out this timing, then fails as the recording's call did.
    Fail {
        timing: Option<OperationTiming>,
        message: Option<String>,
        retryable: bool,
    },
    /// Says nothing and never answers.
    Silent,
}

/// Waits as the recorded operation did: `items` items (each told to
/// `item`), the first after its wait, each recorded silence after the item
/// it followed, the other gaps even, until its length; and its keepalives,
/// at one cadence in its silences (before its first item, in its longest
/// silences, after its last), as a server sends them while it has nothing
/// to say; then returns, or never does if it was cut.
async fn act_out(timing: &OperationTiming, evidence: &Evidence, mut item: impl FnMut(u64)) {
    let ms = Duration::from_millis;
    let first = timing.first_item_ms.unwrap_or(timing.duration_ms);
    let last = timing.last_item_ms.unwrap_or(first);
    let gaps = timing.items.saturating_sub(1);
    // The silences it kept; a timing without them has its longest.
    let mut silences: BTreeMap<u64, u64> = timing
        .silences
        .iter()
        .copied()
        .filter(|(after, _)| *after > 0 && *after < timing.items)
        .collect();
    if silences.is_empty() && timing.silence_after > 0 && timing.silence_after < timing.items {
        silences.insert(timing.silence_after, timing.longest_silence_ms);
    }
    let silent: u64 = silences.values().sum();
    let others = gaps
        .saturating_sub(u64::try_from(silences.len()).unwrap_or(u64::MAX))
        .max(1);
    let spread = last.saturating_sub(first).saturating_sub(silent) / others;
    // When each item comes, and each keepalive (`None`).
    let mut times: Vec<(u64, Option<u64>)> = Vec::new();
    let mut stretches = vec![(0, first)];
    let mut at = 0;
    for n in 0..timing.items {
        let gap = silences.get(&n).copied();
        if let Some(gap) = gap {
            stretches.push((at, gap));
        }
        at = match n {
            0 => first,
            _ => at + gap.unwrap_or(spread),
        };
        times.push((at, Some(n)));
    }
    if timing.items > 0 {
        stretches.push((at, timing.duration_ms.saturating_sub(at)));
    }
    times.extend(keepalives(&stretches, timing.keepalives).map(|t| (t, None)));
    times.sort_by_key(|(t, what)| (*t, what.is_none()));
    let mut now = 0;
    for (at, what) in times {
        tokio::time::sleep(ms(at.saturating_sub(now))).await;
        now = at;
        match what {
            Some(n) => item(n),
            None => evidence.keepalive(),
        }
    }
    if timing.ended == TimedEnd::Cut {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(ms(timing.duration_ms.saturating_sub(now))).await;
}

/// When `count` keepalives came in the silent `stretches` (their start and
/// length): one every so often in each, the cadence that gives as many.
fn keepalives(stretches: &[(u64, u64)], count: u64) -> impl Iterator<Item = u64> {
    let within = |every: u64| -> u64 {
        stretches
            .iter()
            .map(|(_, length)| length.saturating_sub(1) / every)
            .sum()
    };
    // The longest cadence that fits them all in.
    let (mut low, mut high) = (1, stretches.iter().map(|s| s.1).max().unwrap_or(1).max(1));
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        if within(middle) >= count {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    let every = low;
    let mut times: Vec<u64> = if count == 0 {
        Vec::new()
    } else {
        stretches
            .iter()
            .flat_map(|&(start, length)| {
                (1..=length.saturating_sub(1) / every).map(move |n| start + n * every)
            })
            .collect()
    };
    times.sort_unstable();
    times.truncate(usize::try_from(count).unwrap_or(usize::MAX));
    times.into_iter()
}

/// Answers each request with the answer that followed the same
/// conversation in the recording.
#[derive(Clone)]
pub(super) struct ReplayModel {
    /// What the recording's model client called itself, if its leases'
    /// keys said.
    described: Option<String>,
    conversations: Arc<Vec<(String, Vec<ChatMessage>)>>,
    /// The model calls started and not yet asked, by loop and step, as the
    /// replay's engine said it started them.
    pub started: Arc<Mutex<Vec<(String, u32)>>>,
    invocations: Invocations,
    replies: Arc<Replies>,
    attempts: Attempts,
    pub unanswered: Arc<Mutex<Vec<String>>>,
}

impl ReplayModel {
    /// The loop and step a request is the call of, and the answer that
    /// followed it: the recorded conversation it is the beginning of. A
    /// conversation that ends where the request does was cut before it
    /// was answered: `None`. Of conversations that agree (loops that went
    /// round in circles alike), the one whose loop just started this call.
    fn find(&self, asked: &[&ChatMessage]) -> Option<(String, u32, Option<ChatMessage>)> {
        let mut found = Vec::new();
        for (path, transcript) in self.conversations.iter() {
            if !transcript.iter().zip(asked).all(|(a, b)| a == *b) {
                continue;
            }
            // A request longer than its loop's last saved conversation by
            // what the loop adds to a request — nudges, a wrap-up's
            // instruction — was cut before its answer was saved.
            if transcript.len() < asked.len()
                && asked[transcript.len()..]
                    .iter()
                    .any(|m| m.role != ChatRole::User)
            {
                continue;
            }
            let upto = transcript.len().min(asked.len());
            let step = transcript[..upto]
                .iter()
                .filter(|m| m.role == ChatRole::Assistant)
                .count()
                + 1;
            let step = u32::try_from(step).unwrap_or(u32::MAX);
            match transcript.get(asked.len()) {
                Some(answer) if answer.role == ChatRole::Assistant => {
                    found.push((path.clone(), step, Some(answer.clone())));
                }
                None => found.push((path.clone(), step, None)),
                Some(_) => {}
            }
        }
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = found
            .iter()
            .position(|(path, step, _)| started.iter().any(|(p, s)| p == path && s == step));
        if let Some(at) = mine {
            let (path, step, _) = &found[at];
            if let Some(n) = started.iter().position(|(p, s)| p == path && s == step) {
                started.remove(n);
            }
        }
        // Else an answer before a cut.
        let at = mine.or_else(|| found.iter().position(|(_, _, answer)| answer.is_some()));
        at.or((!found.is_empty()).then_some(0))
            .map(|at| found.swap_remove(at))
    }

    /// The error of a request the recording has no answer to, noted.
    fn unanswered(
        &self,
        request: &ModelRequest,
        asked: &[&ChatMessage],
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let said = asked
            .last()
            .map(|m| m.content.chars().take(120).collect::<String>())
            .unwrap_or_default();
        self.unanswered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{} asking, after `{said}`", request.consumer));
        let error = ModelError::new(
            ModelErrorKind::Client,
            format!(
                "the recording has no answer to this conversation of `{}`",
                request.consumer
            ),
            false,
        );
        Box::pin(async move { Err(error) })
    }
}

impl ModelClient for ReplayModel {
    fn describe(&self) -> String {
        self.described
            .clone()
            .unwrap_or_else(|| "the recording's model".to_owned())
    }

    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let asked: Vec<&ChatMessage> = request
            .messages
            .iter()
            .filter(|m| m.role != ChatRole::System)
            .collect();
        let Some((path, step, answer)) = self.find(&asked) else {
            return self.unanswered(&request, &asked);
        };
        let call = format!("{path}/model_call:{step}");
        let n = next_attempt(&self.attempts, &call);
        let act = act_of(&self.invocations, &call, n);
        let repeating = self
            .invocations
            .get(&call)
            .and_then(|all| all.get(n))
            .is_some_and(|i| i.repeating);
        // A call the recording never saw answered can only be one that was
        // cut, or failed.
        let never = |act: &Act| match act {
            Act::Answer(Some(timing)) => timing.ended == TimedEnd::Cut,
            Act::Answer(None) => false,
            Act::Fail { .. } | Act::Silent => true,
        };
        if answer.is_none() && !never(&act) {
            return self.unanswered(&request, &asked);
        }
        let answer = answer.unwrap_or_else(|| ChatMessage {
            role: ChatRole::Assistant,
            content: String::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
        let (usage, finish_reason) = self.replies.get(&(path, step)).copied().unwrap_or_default();
        Box::pin(async move {
            let timing = match act {
                Act::Silent => std::future::pending().await,
                Act::Answer(timing) => timing,
                Act::Fail {
                    timing,
                    message,
                    retryable,
                } => {
                    if let Some(timing) = timing {
                        act_out(&timing, &evidence, |_| evidence.observe()).await;
                    }
                    return Err(ModelError::new(
                        ModelErrorKind::Server,
                        message.unwrap_or_else(|| FAILED.to_owned()),
                        retryable,
                    ));
                }
            };
            if let Some(timing) = timing {
                let pieces = timing.items.max(1);
                let text: Vec<char> = answer.content.chars().collect();
                let size = text
                    .len()
                    .div_ceil(usize::try_from(pieces).unwrap_or(1))
                    .max(1);
                act_out(&timing, &evidence, |n| {
                    if repeating {
                        evidence.observe_text(LOOPING);
                        return;
                    }
                    let from = usize::try_from(n)
                        .unwrap_or(usize::MAX)
                        .saturating_mul(size);
                    let piece: String = text.iter().skip(from).take(size).collect();
                    if piece.is_empty() {
                        evidence.observe();
                    } else {
                        evidence.observe_text(&piece);
                    }
                })
                .await;
            }
            Ok(ModelReply {
                content: answer.content,
                tool_calls: answer.tool_calls,
                usage,
                finish_reason,
            })
        })
    }
}

/// What a stream the watchdog found repeating itself streams in a
/// replay: its own text is not recorded.
const LOOPING: &str = "Let me check the logs once more before I answer. ";

/// What each loop's model was given as each tool call's result, by the
/// call's place (`{loop}/{step}/{index}`, as [`tail`] of its key).
fn tool_results(conversations: &[(String, Vec<ChatMessage>)]) -> BTreeMap<String, String> {
    let mut said = BTreeMap::new();
    for (path, transcript) in conversations {
        let mut step = 0;
        for message in transcript {
            if message.role != ChatRole::Assistant {
                continue;
            }
            step += 1;
            for (index, call) in message.tool_calls.iter().enumerate() {
                let result = transcript.iter().find(|m| {
                    m.role == ChatRole::Tool && m.tool_call_id.as_deref() == Some(&call.id)
                });
                if let Some(result) = result {
                    said.insert(format!("{path}/{step}/{index}"), result.content.clone());
                }
            }
        }
    }
    said
}

/// The idempotency key of a call without its run: `{loop}/{step}/{index}`.
pub(super) fn tail(key: &str) -> String {
    key.split_once('/').map_or(key, |(_, rest)| rest).to_owned()
}

/// Answers each tool call with its recorded result, after its time.
#[derive(Clone)]
pub(super) struct ReplayTools {
    /// What the model was given as each call's result, by its place.
    said: Arc<BTreeMap<String, String>>,
    /// The tools this server lists; all, if none is named.
    only: Option<Arc<std::collections::BTreeSet<String>>>,
    calls: Arc<Vec<ToolCallRecord>>,
    invocations: Invocations,
    attempts: Attempts,
    /// The replay's cap on one result.
    cap: usize,
}

impl ToolClient for ReplayTools {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let mut tools: BTreeMap<String, ToolDefinition> = BTreeMap::new();
        let listed = |tool: &String| self.only.as_ref().is_none_or(|only| only.contains(tool));
        for call in self.calls.iter().filter(|c| listed(&c.tool)) {
            tools
                .entry(call.tool.clone())
                .or_insert_with(|| ToolDefinition {
                    name: call.tool.clone(),
                    description: format!("`{}`, as the recording answered it", call.tool),
                    input_schema: serde_json::json!({"type": "object"}),
                    idempotent: call.idempotent,
                });
        }
        Box::pin(async move { Ok(tools.into_values().collect()) })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        // `{run}/{loop}/{step}/{index}`: the same call of the recording.
        let place = tail(&invocation.idempotency_key);
        let recorded = self
            .calls
            .iter()
            .find(|c| tail(&c.key) == place && c.tool == invocation.name)
            .cloned();
        let lease_path = place.rsplitn(3, '/').collect::<Vec<_>>();
        let call_path = match lease_path.as_slice() {
            [index, step, path] => format!("{path}/tool_call:{step}.{index}"),
            _ => place.clone(),
        };
        let n = next_attempt(&self.attempts, &call_path);
        let act = act_of(&self.invocations, &call_path, n);
        let truncated = self
            .invocations
            .get(&call_path)
            .and_then(|all| all.get(n))
            .and_then(|i| i.truncated);
        let cap = self.cap;
        let said = self.said.get(&place).cloned();
        Box::pin(async move {
            let Some(recorded) = recorded else {
                return Err(ToolError::new(
                    format!(
                        "the recording made no call of `{}` here ({place})",
                        invocation.name
                    ),
                    false,
                ));
            };
            let timing = match act {
                Act::Silent => std::future::pending().await,
                Act::Answer(timing) => timing,
                Act::Fail {
                    timing,
                    message,
                    retryable,
                } => {
                    if let Some(timing) = timing {
                        act_out(&timing, &evidence, |_| evidence.observe()).await;
                    }
                    // A failure not tried again was the model's result.
                    let said = said
                        .as_deref()
                        .or(recorded.result.as_deref())
                        .and_then(|r| r.strip_prefix("error: failed: "));
                    let message = message.or_else(|| said.map(str::to_owned));
                    return Err(ToolError::new(
                        message.unwrap_or_else(|| FAILED.to_owned()),
                        retryable,
                    ));
                }
            };
            if let Some(timing) = timing {
                {
                    // Values as it reported them: rising evenly to its highest.
                    let items = u32::try_from(timing.items.max(1)).unwrap_or(u32::MAX);
                    act_out(&timing, &evidence, |n| {
                        let note = format!("{} of {}", n + 1, timing.items);
                        let done = u32::try_from(n + 1).unwrap_or(u32::MAX);
                        match timing.progress {
                            Some((highest, total)) => evidence.progress_value(
                                highest * f64::from(done) / f64::from(items),
                                total,
                                note,
                            ),
                            None => evidence.progress(note),
                        }
                    })
                    .await;
                }
            }
            match (recorded.state, recorded.result) {
                (ToolCallState::Done, Some(result)) => Ok(match truncated {
                    Some((original, kept)) => uncut(&result, original, kept, cap),
                    None => ToolOutput {
                        content: result,
                        is_error: false,
                    },
                }),
                // No result was recorded: it never answered.
                _ => std::future::pending().await,
            }
        })
    }
}

/// What the tool returned, of which `result` is what the engine kept: its
/// first `kept` bytes, then bytes that make it `original` bytes long and
/// that a cut at `cap` cuts where the recording's was cut (a character
/// across the cap, when the cut fell short of it). A tool's error (the
/// loop writes it `error: …`) is returned as one.
fn uncut(result: &str, original: u64, kept: u64, cap: usize) -> ToolOutput {
    let (Ok(original), Ok(kept)) = (usize::try_from(original), usize::try_from(kept)) else {
        return ToolOutput {
            content: result.to_owned(),
            is_error: false,
        };
    };
    let marked = result.rfind(CUT_MARKER).unwrap_or(result.len());
    let from = marked.saturating_sub(kept);
    let is_error = from > 0 && result[..from] == *"error: ";
    let Some(head) = result.get(from..marked) else {
        return ToolOutput {
            content: result.to_owned(),
            is_error: false,
        };
    };
    let mut content = head.to_owned();
    let across = match cap.saturating_sub(kept) {
        1 => Some('é'),
        2 => Some('€'),
        3 => Some('𝄞'),
        _ => None,
    };
    if let Some(c) = across
        && content.len() + c.len_utf8() <= original
    {
        content.push(c);
    }
    let rest = original.saturating_sub(content.len());
    content.push_str(&".".repeat(rest));
    ToolOutput { content, is_error }
}

/// Gives, lease by lease, the verdicts the recording's evaluator gave, and
/// the budget checkpoints' decisions, loop by loop, each after the time it
/// took; where the breaker decided, it fails as the evaluator did.
#[derive(Clone)]
pub(super) struct ReplayEvaluator {
    verdicts: Arc<Mutex<BTreeMap<String, VecDeque<Answered>>>>,
    budgets: Arc<Mutex<BTreeMap<String, VecDeque<Answered>>>>,
}

fn answer_from(
    answers: &Mutex<BTreeMap<String, VecDeque<Answered>>>,
    path: &str,
) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
    let next = answers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(path)
        .and_then(VecDeque::pop_front);
    Box::pin(async move {
        // Asked once more than the recording says it answered: it had not
        // answered yet when the lease ended, and says nothing here either
        // (past the evaluator's timeout, the breaker answers).
        let Some(answered) = next else {
            return std::future::pending().await;
        };
        tokio::time::sleep(answered.latency).await;
        match answered.breaker {
            Some(reason) => Err(EvaluatorError::new(reason)),
            None => Ok(EvaluatorAnswer {
                text: answered.text,
                cost: TokenCost::default(),
            }),
        }
    })
}

impl Evaluator for ReplayEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        answer_from(&self.verdicts, &request.path)
    }

    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        answer_from(&self.budgets, &request.path)
    }
}

/// The flow's supervision strategy, as the engine makes it from `flow` and
/// `base`, restarting after the delays the recording drew.
pub(super) fn strategy(
    flow: &Flow,
    base: RestartPolicy,
    delays: Arc<BTreeMap<(String, u32), Duration>>,
) -> StrategyFactory {
    let overrides = flow.supervision;
    let policy = RestartPolicy {
        max_restarts: overrides.max_restarts.unwrap_or(base.max_restarts),
        window: overrides.window.unwrap_or(base.window),
        backoff_initial: overrides.backoff_initial.unwrap_or(base.backoff_initial),
        backoff_max: overrides.backoff_max.unwrap_or(base.backoff_max),
        jitter: overrides.jitter.unwrap_or(base.jitter),
        on_exhausted: overrides.on_exhausted.unwrap_or(base.on_exhausted),
        ..base
    };
    let fail_fast = overrides.strategy == Some(StrategyKind::FailFast);
    Arc::new(move || {
        let inner: Box<dyn SupervisionStrategy> = if fail_fast {
            Box::new(FailFast)
        } else {
            Box::new(RestartOnIntervene::new(policy))
        };
        Box::new(Recorded {
            inner,
            delays: delays.clone(),
        })
    })
}

/// A strategy whose restarts come after the delays the recording drew.
struct Recorded {
    inner: Box<dyn SupervisionStrategy>,
    delays: Arc<BTreeMap<(String, u32), Duration>>,
}

impl SupervisionStrategy for Recorded {
    fn decide(
        &mut self,
        child: &ChildInfo,
        end: &ChildEnd,
        now: tokio::time::Instant,
    ) -> SupervisionAction {
        match self.inner.decide(child, end, now) {
            SupervisionAction::Restart { after } => SupervisionAction::Restart {
                after: self
                    .delays
                    .get(&(child.path.clone(), child.attempt.saturating_add(1)))
                    .copied()
                    .unwrap_or(after),
            },
            other => other,
        }
    }

    fn restarts(&self, child: &ChildInfo, end: &ChildEnd) -> bool {
        self.inner.restarts(child, end)
    }
}
