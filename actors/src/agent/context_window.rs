//! The model's context window: what a loop does when its request does not
//! fit it.
//!
//! A server that refuses a request as longer than its model's context
//! window says so in its error ([`ModelErrorKind::ContextOverflow`]), often
//! with both sizes. Sending the same request again cannot help, so the
//! loop's supervision strategy is not asked and no restart is spent:
//!
//! 1. The loop shortens the oldest tool results of its transcript, each to
//!    a short head and a note saying how many characters were cut, oldest
//!    first, until the request should fit (by the server's sizes, at the
//!    request's own characters per token, with a margin) — or half of what
//!    could be cut, when the server gave no sizes. The results of the
//!    latest tool calls, the ones the model is about to read, stay whole.
//!    It saves the shortened transcript and calls the model again.
//! 2. It does so at most [`MAX_SHORTENINGS`] times a step, and each time
//!    the request is shorter than the time before.
//! 3. When nothing is left to shorten, or those attempts are spent, the run
//!    pauses for a person (`waiting_human`) with a reason that names the
//!    overflow and its sizes; a resume calls the model again, with fresh
//!    attempts.
//!
//! Each turn is a `context_overflow` event, after the refused call's
//! `model_call_finished`. Never a failed run, and never a request sent
//! again unchanged.

use ractor::ActorRef;

use super::{AgentLoop, LoopEnd, LoopMsg, Overflow, resume_to_try_again};
use crate::event::{EventKind, OverflowAction, overflow_sizes};
use crate::ports::{ChatMessage, ChatRole, ModelErrorKind, RunStatus};

/// The most times a loop shortens its transcript for one step's model
/// call before it pauses for a person.
pub(crate) const MAX_SHORTENINGS: u32 = 3;

/// The characters a shortened tool result keeps from its start.
pub(crate) const KEPT_HEAD_CHARS: usize = 240;

/// Tokens cut beyond the server's excess, for what a count of characters
/// cannot know of the server's tokenizer.
const MARGIN_TOKENS: u64 = 64;

impl Overflow {
    /// The overflow a model error reports, if it is one.
    pub(crate) fn of(error: &crate::ports::ModelError) -> Option<Self> {
        match error.kind {
            ModelErrorKind::ContextOverflow {
                requested_tokens,
                context_tokens,
            } => Some(Self {
                requested_tokens,
                context_tokens,
                message: error.message.clone(),
            }),
            _ => None,
        }
    }

    /// The characters to cut from a request of `request_chars` characters
    /// so that it fits: the server's excess and a margin, in tokens, at
    /// the request's own characters per token (its characters over the
    /// server's count of its tokens), a tenth more. `None` when the server
    /// did not give both sizes, or gave sizes that show no excess.
    pub(crate) fn chars_to_cut(&self, request_chars: u64) -> Option<u64> {
        let (requested, window) = (self.requested_tokens?, self.context_tokens?);
        if requested <= window {
            return None;
        }
        let excess = u128::from(requested - window) + u128::from(MARGIN_TOKENS);
        let chars = excess
            .saturating_mul(u128::from(request_chars.max(requested)))
            .saturating_mul(11)
            / 10;
        Some(u64::try_from(chars.div_ceil(u128::from(requested))).unwrap_or(u64::MAX))
    }
}

/// What shortening a transcript did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shortened {
    /// Tool results shortened.
    pub(crate) results: u32,
    /// Characters cut from them, net of the notes put in their place.
    pub(crate) chars_cut: u64,
}

/// The note that ends a tool result shortened by `cut` characters.
fn note(cut: usize) -> String {
    format!(
        "\n[… {cut} more characters of this tool result were cut so that the conversation fits \
         the model's context window]"
    )
}

/// The characters shortening `text` saves: what is cut beyond its head,
/// less the note put in its place.
fn saving(text: &str) -> u64 {
    let chars = text.chars().count();
    let cut = chars.saturating_sub(KEPT_HEAD_CHARS);
    let kept = KEPT_HEAD_CHARS + note(cut).chars().count();
    u64::try_from(chars.saturating_sub(kept)).unwrap_or(u64::MAX)
}

/// Shortens the oldest tool results of `transcript`, oldest first, until
/// at least `at_least` characters are cut, or, with no figure, half of
/// what could be cut (at least one result). The results answering the
/// latest assistant message that called tools stay whole, and so does a
/// result whose cut would save less than the head it keeps (a short one,
/// or one already shortened).
pub(crate) fn shorten_tool_results(
    transcript: &mut [ChatMessage],
    at_least: Option<u64>,
) -> Shortened {
    let newest = transcript
        .iter()
        .rposition(|m| m.role == ChatRole::Assistant && !m.tool_calls.is_empty())
        .unwrap_or(transcript.len());
    let worth = |m: &ChatMessage| {
        m.role == ChatRole::Tool
            && saving(&m.content) > u64::try_from(KEPT_HEAD_CHARS).unwrap_or(u64::MAX)
    };
    let candidates: Vec<usize> = transcript[..newest]
        .iter()
        .enumerate()
        .filter(|(_, m)| worth(m))
        .map(|(i, _)| i)
        .collect();
    let target = at_least.unwrap_or_else(|| {
        let all: u64 = candidates
            .iter()
            .map(|&i| saving(&transcript[i].content))
            .sum();
        all.div_ceil(2)
    });
    let mut done = Shortened::default();
    for i in candidates {
        if done.results > 0 && done.chars_cut >= target {
            break;
        }
        let message = &mut transcript[i];
        let saved = saving(&message.content);
        let chars = message.content.chars().count();
        let head_end = message
            .content
            .char_indices()
            .nth(KEPT_HEAD_CHARS)
            .map_or(message.content.len(), |(at, _)| at);
        let mut shortened = message.content[..head_end].to_owned();
        shortened.push_str(&note(chars - KEPT_HEAD_CHARS));
        message.content = shortened;
        done.results += 1;
        done.chars_cut = done.chars_cut.saturating_add(saved);
    }
    done
}

impl AgentLoop {
    /// The characters of the request this loop sends: its system prompt,
    /// its transcript (tool calls' arguments included) and its tools'
    /// definitions.
    fn request_chars(&self) -> u64 {
        let count = |text: &str| u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
        let transcript: u64 = self
            .state
            .transcript
            .iter()
            .map(|m| {
                count(&m.content)
                    + m.tool_calls
                        .iter()
                        .map(|c| count(&c.name) + count(&c.arguments.to_string()))
                        .sum::<u64>()
            })
            .sum();
        let tools: u64 = self
            .tools
            .iter()
            .map(|t| count(&serde_json::to_string(t).unwrap_or_default()))
            .sum();
        count(&self.system_prompt) + transcript + tools
    }

    /// The step's model call was refused as longer than the model's
    /// context window: shorten and call again, or pause for a person.
    pub(super) async fn context_overflowed(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        attempt: u32,
        overflow: Overflow,
    ) -> Option<LoopEnd> {
        let path = format!("{}/model_call:{step}", self.path);
        let shortened = if self.shortenings < MAX_SHORTENINGS {
            let at_least = overflow.chars_to_cut(self.request_chars());
            shorten_tool_results(&mut self.state.transcript, at_least)
        } else {
            Shortened::default()
        };
        let action = if shortened.results > 0 {
            OverflowAction::Shortened
        } else {
            OverflowAction::Paused
        };
        self.ctx.emit(
            &path,
            EventKind::ContextOverflow {
                step,
                attempt,
                requested_tokens: overflow.requested_tokens,
                context_tokens: overflow.context_tokens,
                shortened: shortened.results,
                chars_cut: shortened.chars_cut,
                action,
            },
        );
        let retry = LoopMsg::Retry {
            step,
            index: None,
            attempt: attempt + 1,
        };
        if action == OverflowAction::Shortened {
            self.shortenings += 1;
            // Kept before the call is made again, so that a resume sends
            // the shortened transcript too.
            if !self.save(RunStatus::Running).await {
                return None;
            }
            self.when_open(myself, retry);
            return None;
        }
        let why = if self.shortenings >= MAX_SHORTENINGS {
            format!(
                "it was shortened {} this step, the most it may be",
                crate::event::counted(self.shortenings, "time")
            )
        } else {
            "no tool result is left to shorten (the latest tool calls' results are kept whole)"
                .to_owned()
        };
        // A person's resume calls again with fresh attempts.
        self.shortenings = 0;
        let reason = resume_to_try_again(
            &format!(
                "the request to {} does not fit the model's context window{}: {why}; the server \
                 said: {}",
                self.ctx.model.describe(),
                overflow_sizes(overflow.requested_tokens, overflow.context_tokens),
                overflow.message
            ),
            "with guidance, or once the model's context is larger",
        );
        self.escalate(reason, "model call", None);
        self.when_open(myself, retry);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::ToolCallRequest;

    fn call(id: &str) -> ChatMessage {
        ChatMessage::assistant(
            "",
            vec![ToolCallRequest {
                id: id.to_owned(),
                name: "read".to_owned(),
                arguments: serde_json::json!({}),
            }],
        )
    }

    fn transcript(results: &[usize]) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::user("task")];
        for (n, size) in results.iter().enumerate() {
            let id = format!("c{n}");
            messages.push(call(&id));
            messages.push(ChatMessage::tool(id, "é".repeat(*size)));
        }
        messages
    }

    #[test]
    fn the_oldest_tool_results_are_cut_to_a_head_and_a_note_and_the_newest_kept_whole() {
        let mut messages = transcript(&[3_000, 3_000, 3_000]);
        let done = shorten_tool_results(&mut messages, Some(2_000));
        assert_eq!(done.results, 1, "{done:?}");
        let first = &messages[2].content;
        assert!(first.starts_with(&"é".repeat(KEPT_HEAD_CHARS)), "{first}");
        assert!(
            first.ends_with(&note(3_000 - KEPT_HEAD_CHARS)),
            "the note says how much was cut: {first}"
        );
        assert_eq!(
            done.chars_cut,
            3_000 - u64::try_from(first.chars().count()).unwrap()
        );
        assert_eq!(messages[4].content.chars().count(), 3_000);
        assert_eq!(messages[6].content.chars().count(), 3_000);

        // More than one result cuts the next oldest; the newest stays whole
        // whatever is asked, and a shortened result is not cut again.
        let done = shorten_tool_results(&mut messages, Some(u64::MAX));
        assert_eq!(done.results, 1, "{done:?}");
        assert_eq!(messages[6].content.chars().count(), 3_000);
        assert_eq!(
            shorten_tool_results(&mut messages, None),
            Shortened::default()
        );
    }

    #[test]
    fn with_no_sizes_half_of_what_can_be_cut_is_cut() {
        let mut messages = transcript(&[2_000, 2_000, 2_000, 2_000, 10]);
        let done = shorten_tool_results(&mut messages, None);
        assert_eq!(done.results, 2, "{done:?}");
        // Results too short to gain from a cut are left as they are.
        let mut short = transcript(&[300, 300]);
        assert_eq!(shorten_tool_results(&mut short, None), Shortened::default());
    }

    #[test]
    fn the_cut_is_the_servers_excess_at_the_requests_own_characters_per_token() {
        let overflow = |requested, window| Overflow {
            requested_tokens: requested,
            context_tokens: window,
            message: String::new(),
        };
        // 4135 tokens of 16 540 characters (4 a token) against 4096: 39
        // tokens and a margin of 64, a tenth more.
        assert_eq!(
            overflow(Some(4_135), Some(4_096)).chars_to_cut(16_540),
            Some(454)
        );
        assert_eq!(overflow(Some(4_135), None).chars_to_cut(16_540), None);
        assert_eq!(
            overflow(Some(4_000), Some(4_096)).chars_to_cut(16_540),
            None
        );
        assert!(
            overflow(Some(u64::MAX), Some(0))
                .chars_to_cut(u64::MAX)
                .is_some()
        );
    }
}
