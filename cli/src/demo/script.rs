//! What the scripted model says: who is asking (by the system prompt), at
//! which step (by the assistant turns so far), and so what it answers.
//!
//! Stateless and deterministic: the same transcript always gets the same
//! reply, so a retried or resumed call is answered as the first was.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::flow::{
    CAUSE_FOUND, DEPLOYS_PROMPT, ERRORS_FOUND, FETCH_METRICS, LOGS_PROMPT, METRICS_PROMPT,
    ROLLBACK_DEPLOY, ROOT_PROMPT, SEARCH_LOGS,
};
use super::judge::{self, BUDGET_PROMPT_START, LEASE_PROMPT_START};
use leasehold::{COMPLETE_MILESTONE_TOOL, SPAWN_WORKER_TOOL};

/// How long the deploys worker's first reply takes to stream, chunk by
/// chunk: longer than three model-stream leases, so that after the two free
/// renewals its lease is renewed on the evidence of its chunks.
pub(crate) const SLOW_STREAM: Duration = Duration::from_millis(4200);

/// The pause between the chunks of an ordinary reply.
pub(crate) const BRISK_CHUNK: Duration = Duration::from_millis(15);

/// Who is asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Agent {
    /// The run's root loop.
    Root,
    /// The logs worker.
    Logs,
    /// The metrics worker.
    Metrics,
    /// The deploys worker.
    Deploys,
    /// The watchdog, judging an expired lease.
    LeaseJudge,
    /// A budget checkpoint.
    BudgetJudge,
    /// Someone this script does not know.
    Unknown,
}

impl Agent {
    /// The agent whose system prompt is `system`.
    pub(crate) fn identify(system: &str) -> Self {
        let system = system.trim();
        if system.starts_with(LEASE_PROMPT_START) {
            Self::LeaseJudge
        } else if system.starts_with(BUDGET_PROMPT_START) {
            Self::BudgetJudge
        } else if system == ROOT_PROMPT {
            Self::Root
        } else if system == LOGS_PROMPT {
            Self::Logs
        } else if system == METRICS_PROMPT {
            Self::Metrics
        } else if system == DEPLOYS_PROMPT {
            Self::Deploys
        } else {
            Self::Unknown
        }
    }
}

/// The transcript of a request, as the script reads it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Transcript {
    /// The first system (or developer) message.
    pub(crate) system: String,
    /// Assistant turns so far: the step the agent is at, from 0.
    pub(crate) step: usize,
    /// Tools the request offers.
    pub(crate) tools: BTreeSet<String>,
    /// The text of every tool message, in order.
    pub(crate) tool_results: Vec<String>,
    /// The last user message.
    pub(crate) last_user: String,
    /// User messages after the last tool message (a person's guidance, a
    /// nudge, the wrap-up request).
    pub(crate) after_tools: Vec<String>,
}

/// One tool call of a reply.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    /// The tool.
    pub(crate) name: String,
    /// Its arguments, a JSON object.
    pub(crate) arguments: Value,
}

/// How fast a reply streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pace {
    /// A few words every [`BRISK_CHUNK`].
    Brisk,
    /// Two words at a time over [`SLOW_STREAM`] in all.
    Slow,
}

/// A reply: its text, its tool calls, how fast it streams.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reply {
    /// The text.
    pub(crate) text: String,
    /// Tool calls, in order.
    pub(crate) calls: Vec<Call>,
    /// The pace of its text.
    pub(crate) pace: Pace,
}

impl Reply {
    fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            calls: Vec::new(),
            pace: Pace::Brisk,
        }
    }

    /// Adds a call of `name` if the request offers it.
    fn call(mut self, offered: &BTreeSet<String>, name: &str, arguments: Value) -> Self {
        if offered.contains(name) {
            self.calls.push(Call {
                name: name.to_owned(),
                arguments,
            });
        }
        self
    }

    /// The pieces the text streams in.
    pub(crate) fn pieces(&self) -> Vec<String> {
        let per_piece = match self.pace {
            Pace::Brisk => 6,
            Pace::Slow => 2,
        };
        let words: Vec<&str> = self.text.split_inclusive(' ').collect();
        words
            .chunks(per_piece)
            .map(|chunk| chunk.concat())
            .collect()
    }

    /// The pause before each piece of text.
    pub(crate) fn interval(&self, pieces: usize) -> Duration {
        match self.pace {
            Pace::Brisk => BRISK_CHUNK,
            Pace::Slow => SLOW_STREAM / u32::try_from(pieces.max(1)).unwrap_or(u32::MAX),
        }
    }
}

/// What `agent` answers to `transcript`.
pub(crate) fn reply(agent: Agent, transcript: &Transcript) -> Reply {
    match agent {
        Agent::Root => root(transcript),
        Agent::Logs => logs(transcript),
        Agent::Metrics => metrics(transcript),
        Agent::Deploys => deploys(transcript),
        Agent::LeaseJudge => Reply::text(judge::judge_lease(&transcript.last_user)),
        Agent::BudgetJudge => Reply::text(judge::judge_budget(&transcript.last_user)),
        Agent::Unknown => Reply::text(format!(
            "This is the leasehold demo's scripted model. It answers the agents of the demo's \
             incident-review flow, and does not know the system prompt {:?}.",
            excerpt(&transcript.system, 80)
        )),
    }
}

fn root(t: &Transcript) -> Reply {
    if t.step == 0 && t.tools.contains(SPAWN_WORKER_TOOL) {
        let spawn = |kind: &str, task: &str| json!({"kind": kind, "task": task});
        return Reply::text("Splitting the review three ways: logs, metrics and deploys.")
            .call(
                &t.tools,
                SPAWN_WORKER_TOOL,
                spawn(
                    "logs",
                    "Search the checkout logs around 14:00: when do the errors start, and what \
                     changed just before?",
                ),
            )
            .call(
                &t.tools,
                SPAWN_WORKER_TOOL,
                spawn(
                    "metrics",
                    "Read the checkout.p99 latency series around 14:00.",
                ),
            )
            .call(
                &t.tools,
                SPAWN_WORKER_TOOL,
                spawn(
                    "deploys",
                    "Check the deploys around 14:00 and roll back the one that caused this.",
                ),
            );
    }
    let deploys = t
        .tool_results
        .get(2)
        .map_or_else(String::new, |r| format!(" Deploys: {}", excerpt(r, 240)));
    Reply::text(format!(
        "Checkout latency doubled at 14:00 because the 13:58 deploy of checkout v412 cut the DB \
         pool from 20 to 5 connections; {} worker reports agree.{deploys}",
        t.tool_results.len()
    ))
}

fn logs(t: &Transcript) -> Reply {
    let search = |query: &str| json!({"query": query});
    let milestone = |name: &str| json!({"milestone": name});
    let reply = match t.step {
        0 => Reply::text("").call(&t.tools, SEARCH_LOGS, search("checkout 14:00")),
        1 => Reply::text("Errors start at 13:59:12; looking for their cause.")
            .call(&t.tools, SEARCH_LOGS, search("db pool exhausted"))
            .call(&t.tools, COMPLETE_MILESTONE_TOOL, milestone(ERRORS_FOUND)),
        2 => Reply::text("The pool is exhausted; checking what changed at 13:58.")
            .call(&t.tools, SEARCH_LOGS, search("deploy 13:58"))
            .call(&t.tools, COMPLETE_MILESTONE_TOOL, milestone(CAUSE_FOUND)),
        _ => Reply::text(""),
    };
    if !reply.calls.is_empty() {
        return reply;
    }
    let searches = t
        .tool_results
        .iter()
        .filter(|r| !r.starts_with("milestone"))
        .count();
    Reply::text(format!(
        "Errors start at 13:59:12 (`db pool exhausted`), a minute after the 13:58 deploy of \
         checkout v412 cut db.pool.max_size from 20 to 5 ({searches} searches)."
    ))
}

fn metrics(t: &Transcript) -> Reply {
    if t.step == 0 && t.tools.contains(FETCH_METRICS) {
        return Reply::text("").call(&t.tools, FETCH_METRICS, json!({"series": "checkout.p99"}));
    }
    match t.tool_results.last() {
        Some(result) => Reply::text(format!("p99 latency doubled: {}", excerpt(result, 200))),
        None => Reply::text("No metrics could be fetched."),
    }
}

/// What the deploys worker reads, aloud and slowly, before it acts.
const DEPLOY_HISTORY: &str = "Reading the deploy history. 13:40 payments v88: no change to \
     checkout. 13:58 checkout v412: db.pool.max_size 20 -> 5, at 100 % by 13:59. 14:05 checkout \
     v413: db.pool.max_size back to 20, rolling out. The 13:58 deploy lines up with the latency \
     jump, so I will roll checkout back to v411 now.";

fn deploys(t: &Transcript) -> Reply {
    if t.step == 0 && t.tools.contains(ROLLBACK_DEPLOY) {
        let mut reply = Reply::text(DEPLOY_HISTORY).call(
            &t.tools,
            ROLLBACK_DEPLOY,
            json!({"service": "checkout", "to": "v411"}),
        );
        reply.pace = Pace::Slow;
        return reply;
    }
    // The runtime hands a person's answer over as "… answered: <guidance>".
    let guidance = t
        .after_tools
        .last()
        .and_then(|message| message.split_once("answered: "))
        .map(|(_, guidance)| guidance.trim());
    let escalated = t
        .tool_results
        .last()
        .is_some_and(|r| r.starts_with("escalated"));
    match (guidance, t.tool_results.last()) {
        (Some(guidance), _) => Reply::text(format!(
            "No rollback, as the person said: \"{}\". checkout v413 restores the pool size and \
             is rolling out.",
            excerpt(guidance, 200)
        )),
        (None, Some(_)) if escalated || !t.after_tools.is_empty() => Reply::text(
            "No rollback was made: the person let the run go on without a word, so checkout \
             stays on v412 while v413, which restores the pool size, rolls out.",
        ),
        (None, Some(result)) => Reply::text(format!("Rollback: {}", excerpt(result, 200))),
        (None, None) => Reply::text("No deploy needs rolling back."),
    }
}

/// At most `max` characters of `text`, with `…` if cut.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn agents_are_known_by_their_system_prompts() {
        assert_eq!(Agent::identify(ROOT_PROMPT), Agent::Root);
        assert_eq!(Agent::identify(LOGS_PROMPT), Agent::Logs);
        assert_eq!(Agent::identify(METRICS_PROMPT), Agent::Metrics);
        assert_eq!(Agent::identify(DEPLOYS_PROMPT), Agent::Deploys);
        assert_eq!(Agent::identify("You are a pirate."), Agent::Unknown);
    }

    #[test]
    fn the_root_spawns_three_workers_then_answers() {
        let first = reply(
            Agent::Root,
            &Transcript {
                tools: offered(&[SPAWN_WORKER_TOOL]),
                ..Transcript::default()
            },
        );
        assert_eq!(first.calls.len(), 3);
        assert!(first.calls.iter().all(|c| c.name == SPAWN_WORKER_TOOL));
        let last = reply(
            Agent::Root,
            &Transcript {
                step: 1,
                tools: offered(&[SPAWN_WORKER_TOOL]),
                tool_results: vec!["a".into(), "b".into(), "c".into()],
                ..Transcript::default()
            },
        );
        assert!(last.calls.is_empty());
        assert!(last.text.contains("Deploys: c"), "{}", last.text);
    }

    #[test]
    fn a_tool_the_request_does_not_offer_is_never_called() {
        let wrap_up = reply(
            Agent::Logs,
            &Transcript {
                step: 2,
                ..Transcript::default()
            },
        );
        assert!(wrap_up.calls.is_empty());
        assert!(!wrap_up.text.is_empty());
    }

    #[test]
    fn the_deploys_worker_reads_slowly_then_follows_guidance() {
        let first = reply(
            Agent::Deploys,
            &Transcript {
                tools: offered(&[ROLLBACK_DEPLOY]),
                ..Transcript::default()
            },
        );
        assert_eq!(first.pace, Pace::Slow);
        let pieces = first.pieces();
        assert!(pieces.len() > 10);
        assert_eq!(pieces.concat(), DEPLOY_HISTORY);
        let total = first.interval(pieces.len()) * u32::try_from(pieces.len()).expect("few");
        assert!(total <= SLOW_STREAM && total + Duration::from_millis(1) > SLOW_STREAM);
        let after = reply(
            Agent::Deploys,
            &Transcript {
                step: 1,
                tools: offered(&[ROLLBACK_DEPLOY]),
                tool_results: vec!["escalated".into()],
                after_tools: vec![
                    "A person reviewed the escalation and answered: Do not roll back.".into(),
                ],
                ..Transcript::default()
            },
        );
        assert!(
            after.text.contains("said: \"Do not roll back.\""),
            "{}",
            after.text
        );
    }
}
