//! The tools of `/mcp`, each the route it stands for: its arguments read
//! into what the route reads, the scope and tenant the guard would ask for
//! the route checked, then the route's own code called.
//!
//! | tool | the route |
//! |---|---|
//! | `start_run` | `POST /runs` |
//! | `get_run` | `GET /runs/{id}` |
//! | `wait_events` | `GET /runs/{id}/events`, one wait at a time |
//! | `answer_pause` | `POST /runs/{id}/resume` |
//! | `steer` | `POST /runs/{id}/messages` |
//! | `cancel` | `POST /runs/{id}/cancel` |
//!
//! Arguments a tool cannot take — missing, of the wrong type, unknown,
//! out of range — are a tool error naming them (`invalid_arguments`), and
//! nothing is done.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{Method, StatusCode};
use rmcp::model::{ErrorData, JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{answered, refusal};
use crate::server::App;
use crate::server::api::{self, Control, Format};
use crate::server::caller::{self, Caller};
use crate::server::error::ApiError;
use crate::server::{by_hand, events};

/// The longest a `wait_events` call waits, in milliseconds, as
/// `timeout_ms` counts.
const MAX_WAIT_MS: u64 = 60_000;

/// How long a `wait_events` call waits when it does not say, in
/// milliseconds.
const DEFAULT_WAIT_MS: u64 = 10_000;

/// The most events one `wait_events` answer holds, and how many when the
/// call does not say.
const MAX_EVENTS: u64 = 1000;
const DEFAULT_EVENTS: u64 = 100;

const START_RUN: &str = "start_run";
const GET_RUN: &str = "get_run";
const WAIT_EVENTS: &str = "wait_events";
const ANSWER_PAUSE: &str = "answer_pause";
const STEER: &str = "steer";
const CANCEL: &str = "cancel";

/// What a call answers: the tool's result, or a refusal (a tool error).
pub(super) type Answer = Result<Value, Value>;

/// Calls the tool `name` with `arguments` for `caller`. A tool that does
/// not exist is a JSON-RPC error (invalid params); everything a tool
/// refuses is an [`Answer`] of its own.
pub(super) async fn call(
    app: &Arc<App>,
    caller: &Caller,
    name: &str,
    arguments: JsonObject,
) -> Result<Answer, ErrorData> {
    if let Some(tool) = all().into_iter().find(|tool| tool.name == name)
        && let Err(refused) = conforms(&tool, &arguments)
    {
        return Ok(Err(refused));
    }
    Ok(match name {
        START_RUN => start_run(app, caller, arguments).await,
        GET_RUN => get_run(app, caller, arguments).await,
        WAIT_EVENTS => wait_events(app, caller, arguments).await,
        ANSWER_PAUSE => control(app, caller, ANSWER_PAUSE, "resume", arguments).await,
        STEER => control(app, caller, STEER, "messages", arguments).await,
        CANCEL => control(app, caller, CANCEL, "cancel", arguments).await,
        other => {
            return Err(ErrorData::invalid_params(
                format!(
                    "there is no tool named `{other}`: this server has {START_RUN}, {GET_RUN}, \
                     {WAIT_EVENTS}, {ANSWER_PAUSE}, {STEER} and {CANCEL}"
                ),
                None,
            ));
        }
    })
}

/// 400 `invalid_arguments`: the tool cannot take what it was given.
fn invalid(tool: &str, why: impl std::fmt::Display) -> Value {
    refusal(&ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_arguments",
        format!("`{tool}` was called with arguments it cannot take: {why}"),
    ))
}

/// Whether `arguments` are what `tool`'s schema describes: each required
/// one given, none it lacks, each of its type, within its values and
/// bounds; a refusal naming the first that is not.
fn conforms(tool: &Tool, arguments: &JsonObject) -> Result<(), Value> {
    let name = tool.name.as_ref();
    let empty = JsonObject::new();
    let properties = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required = tool.input_schema.get("required").and_then(Value::as_array);
    for needed in required.into_iter().flatten().filter_map(Value::as_str) {
        if !arguments.contains_key(needed) {
            return Err(invalid(name, format!("the argument `{needed}` is missing")));
        }
    }
    for (argument, value) in arguments {
        let Some(spec) = properties.get(argument) else {
            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
            return Err(invalid(
                name,
                format!(
                    "`{argument}` is not one of its arguments ({})",
                    known.join(", ")
                ),
            ));
        };
        let types: Vec<&str> = match &spec["type"] {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let fits = |kind: &&str| match *kind {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "object" => value.is_object(),
            _ => true,
        };
        if !types.is_empty() && !types.iter().any(fits) {
            return Err(invalid(
                name,
                format!(
                    "`{argument}` is {}, not {}",
                    types.join(" or "),
                    shown(value)
                ),
            ));
        }
        if let Some(allowed) = spec["enum"].as_array()
            && !allowed.contains(value)
        {
            let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
            return Err(invalid(
                name,
                format!(
                    "`{argument}` is one of {}, not {}",
                    allowed.join(", "),
                    shown(value)
                ),
            ));
        }
        if let Some(number) = value
            .as_i64()
            .map(i128::from)
            .or(value.as_u64().map(i128::from))
        {
            if let Some(least) = spec["minimum"].as_i64()
                && number < i128::from(least)
            {
                return Err(invalid(
                    name,
                    format!("`{argument}` is {number}, less than its least, {least}"),
                ));
            }
            if let Some(most) = spec["maximum"].as_u64()
                && number > i128::from(most)
            {
                return Err(invalid(
                    name,
                    format!("`{argument}` is {number}, more than its most, {most}"),
                ));
            }
        }
    }
    Ok(())
}

/// A value as a refusal shows it: at most 80 characters of its JSON.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The arguments read as `T`, or a refusal naming what was wrong.
fn read<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, Value> {
    serde_json::from_value(Value::Object(arguments)).map_err(|e| invalid(tool, e))
}

/// The scope the route needs, and for a run, that it is the caller's: a
/// run of another tenant is answered as one that does not exist.
async fn admit(
    app: &App,
    caller: &Caller,
    method: &Method,
    route: &str,
    run_id: Option<&str>,
) -> Result<(), Value> {
    caller::check_scope(caller, method, route).map_err(|e| refusal(&e))?;
    if let Some(run_id) = run_id {
        caller::check_run(app, caller, run_id)
            .await
            .map_err(|e| refusal(&e))?;
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartArguments {
    flow: Value,
    format: Option<String>,
    idempotency_key: Option<String>,
}

/// `start_run`: `POST /runs`.
async fn start_run(app: &Arc<App>, caller: &Caller, arguments: JsonObject) -> Answer {
    let StartArguments {
        flow,
        format,
        idempotency_key,
    } = read(START_RUN, arguments)?;
    admit(app, caller, &Method::POST, "/runs", None).await?;
    let (format, text) = match (flow, format.as_deref()) {
        (flow @ Value::Object(_), None | Some("json")) => (Format::Json, flow.to_string()),
        (Value::Object(_), Some(other)) => {
            return Err(invalid(
                START_RUN,
                format!("`flow` is a JSON object, but `format` says {other:?}"),
            ));
        }
        (Value::String(text), Some("json")) => (Format::Json, text),
        (Value::String(text), Some("toml")) => (Format::Toml, text),
        (Value::String(text), None) if text.trim_start().starts_with('{') => (Format::Json, text),
        (Value::String(text), None) => (Format::Toml, text),
        (Value::String(_), Some(other)) => {
            return Err(invalid(
                START_RUN,
                format!("`format` is \"json\" or \"toml\", not {other:?}"),
            ));
        }
        (other, _) => {
            return Err(invalid(
                START_RUN,
                format!("`flow` is a JSON object or the flow's text, not {other}"),
            ));
        }
    };
    let mut options = leasehold::RunOptions::default();
    if let Some(key) = idempotency_key {
        options.idempotency_key = Some(
            api::checked_idempotency_key("the argument `idempotency_key`", &key)
                .map_err(|e| refusal(&e))?,
        );
    }
    answered(api::post_flow(app, caller, format, &text, options).await).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArguments {
    run_id: String,
}

/// `get_run`: `GET /runs/{id}`.
async fn get_run(app: &Arc<App>, caller: &Caller, arguments: JsonObject) -> Answer {
    let RunArguments { run_id } = read(GET_RUN, arguments)?;
    admit(
        app,
        caller,
        &Method::GET,
        &format!("/runs/{run_id}"),
        Some(&run_id),
    )
    .await?;
    let view = api::run_view(app, &run_id).await.map_err(|e| refusal(&e))?;
    serde_json::to_value(view).map_err(|e| {
        refusal(&ApiError::internal(format!(
            "the run could not be encoded: {e}"
        )))
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArguments {
    run_id: String,
    #[serde(default)]
    after: u64,
    timeout_ms: Option<u64>,
    limit: Option<u64>,
}

/// `wait_events`: the events after the cursor `after`, as the event
/// stream (`GET /runs/{id}/events`) sends them, waited for up to
/// `timeout_ms`.
async fn wait_events(app: &Arc<App>, caller: &Caller, arguments: JsonObject) -> Answer {
    let WaitArguments {
        run_id,
        after,
        timeout_ms,
        limit,
    } = read(WAIT_EVENTS, arguments)?;
    // Within the schema's bounds ([`conforms`]); held to them again here,
    // whoever calls.
    let timeout_ms = timeout_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS);
    let limit = limit.unwrap_or(DEFAULT_EVENTS).clamp(1, MAX_EVENTS);
    admit(
        app,
        caller,
        &Method::GET,
        &format!("/runs/{run_id}/events"),
        Some(&run_id),
    )
    .await?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let within = Duration::from_millis(timeout_ms);
    let waited = events::wait(app, &run_id, after, within, limit)
        .await
        .map_err(|e| refusal(&e))?;
    serde_json::to_value(waited).map_err(|e| {
        refusal(&ApiError::internal(format!(
            "the events could not be encoded: {e}"
        )))
    })
}

/// `answer_pause`, `steer` and `cancel`: `POST /runs/{id}/{route}`, the
/// arguments but `run_id` its body, read by the route itself.
async fn control(
    app: &Arc<App>,
    caller: &Caller,
    tool: &str,
    route: &str,
    mut arguments: JsonObject,
) -> Answer {
    let run_id = match arguments.remove("run_id") {
        Some(Value::String(run_id)) => run_id,
        Some(other) => return Err(invalid(tool, format!("`run_id` is a string, not {other}"))),
        None => return Err(invalid(tool, "missing field `run_id`")),
    };
    admit(
        app,
        caller,
        &Method::POST,
        &format!("/runs/{run_id}/{route}"),
        Some(&run_id),
    )
    .await?;
    let body = serde_json::to_vec(&Value::Object(arguments))
        .map_err(|e| invalid(tool, e))?
        .into();
    let control = Control {
        run_id,
        body,
        caller: caller.clone(),
    };
    let state = State(Arc::clone(app));
    let answer = match route {
        "resume" => api::resume(state, control).await,
        "messages" => by_hand::message(state, control).await,
        _ => api::cancel(state, control).await,
    };
    answered(answer).await
}

/// Every tool, with the schema of its arguments.
pub(super) fn all() -> Vec<Tool> {
    let run_id = json!({"type": "string", "description": "the run's id"});
    vec![
        Tool::new(
            START_RUN,
            "Start a run of a flow, as POST /runs: the flow as a JSON object, or as its text \
             (JSON or TOML). Answers the run's id and status (running, or queued).",
            schema(
                json!({
                    "flow": {
                        "type": ["object", "string"],
                        "description": "the flow: a JSON object, or its text in JSON or TOML"
                    },
                    "format": {
                        "type": "string",
                        "enum": ["json", "toml"],
                        "description": "how a flow given as text is written (default: JSON when \
                                        it begins with `{`, TOML otherwise)"
                    },
                    "idempotency_key": {
                        "type": "string",
                        "description": "a retried start with the same key answers the run it \
                                        started (1 to 255 visible ASCII characters)"
                    }
                }),
                &["flow"],
            ),
        )
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
        Tool::new(
            GET_RUN,
            "Read a run, as GET /runs/{id}: its status, pause, flow, tool calls and usage.",
            schema(json!({"run_id": run_id}), &["run_id"]),
        )
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(
            WAIT_EVENTS,
            "Wait for a run's events after a cursor (an event's seq; 0 for all). Answers the \
             events, the cursor of the next wait (`next`), the run's status, and whether it ended \
             (`ended`); no events once the timeout has passed.",
            schema(
                json!({
                    "run_id": run_id,
                    "after": {"type": "integer", "minimum": 0,
                              "description": "the seq of the last event seen (default 0)"},
                    "timeout_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS,
                                   "description": "how long to wait for an event (default 10000)"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_EVENTS,
                              "description": "the most events to answer (default 100)"}
                }),
                &["run_id"],
            ),
        )
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(
            ANSWER_PAUSE,
            "Answer a run waiting for a person (status waiting_human), as POST \
             /runs/{id}/resume: it resumes, with the guidance given if any.",
            schema(
                json!({
                    "run_id": run_id,
                    "guidance": {"type": "string", "description": "what the run should do now"}
                }),
                &["run_id"],
            ),
        )
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
        Tool::new(
            STEER,
            "Send a message to a running run, as POST /runs/{id}/messages.",
            schema(
                json!({
                    "run_id": run_id,
                    "text": {"type": "string", "description": "the message"},
                    "policy": {
                        "type": "string",
                        "enum": ["enqueue", "interrupt", "reject", "rollback"],
                        "description": "enqueue (default): the next step sees it; interrupt: the \
                                        step in flight is cut short; reject: only when the run \
                                        is paused; rollback: a fork before the current step, \
                                        this run cancelled"
                    },
                    "by": {"type": "string", "description": "who sends it"}
                }),
                &["run_id", "text"],
            ),
        )
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
        Tool::new(
            CANCEL,
            "Cancel a run, as POST /runs/{id}/cancel.",
            schema(
                json!({
                    "run_id": run_id,
                    "reason": {"type": "string", "description": "why, for its trace"}
                }),
                &["run_id"],
            ),
        )
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(true),
        ),
    ]
}

/// An object schema of `properties`, `required` among them, no others.
fn schema(properties: Value, required: &[&str]) -> JsonObject {
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    match schema {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal_of(tool: &str, arguments: Value) -> Option<String> {
        let tool = all()
            .into_iter()
            .find(|t| t.name == tool)
            .unwrap_or_else(|| panic!("no tool {tool}"));
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object");
        };
        conforms(&tool, &arguments)
            .err()
            .map(|refused| refused["error"]["message"].to_string())
    }

    #[test]
    fn arguments_are_held_to_their_tools_schema_and_named_when_refused() {
        let refused = [
            (GET_RUN, json!({}), "`run_id` is missing"),
            (GET_RUN, json!({"run_id": 7}), "`run_id` is string, not 7"),
            (GET_RUN, json!({"run_id": "r", "x": 1}), "`x` is not one of"),
            (
                WAIT_EVENTS,
                json!({"run_id": "r", "after": -1}),
                "`after` is -1",
            ),
            (
                WAIT_EVENTS,
                json!({"run_id": "r", "limit": 0}),
                "`limit` is 0",
            ),
            (
                WAIT_EVENTS,
                json!({"run_id": "r", "timeout_ms": 60_001}),
                "`timeout_ms` is 60001, more than its most, 60000",
            ),
            (
                START_RUN,
                json!({"flow": 1}),
                "`flow` is object or string, not 1",
            ),
            (
                STEER,
                json!({"run_id": "r", "text": "t", "policy": "sideways"}),
                "`policy` is one of",
            ),
            (
                ANSWER_PAUSE,
                json!({"run_id": "r", "guidance": 5}),
                "`guidance` is string",
            ),
        ];
        for (tool, arguments, expected) in refused {
            let message = refusal_of(tool, arguments.clone())
                .unwrap_or_else(|| panic!("{tool} took {arguments}"));
            assert!(message.contains(expected), "{tool} {arguments}: {message}");
            assert!(message.contains(tool), "{message}");
        }
        let taken = [
            (GET_RUN, json!({"run_id": "r"})),
            (
                WAIT_EVENTS,
                json!({"run_id": "r", "after": 3, "timeout_ms": 60_000, "limit": 1000}),
            ),
            (
                START_RUN,
                json!({"flow": {"name": "f"}, "idempotency_key": "k"}),
            ),
            (START_RUN, json!({"flow": "name = 'f'", "format": "toml"})),
            (
                STEER,
                json!({"run_id": "r", "text": "t", "policy": "interrupt"}),
            ),
            (CANCEL, json!({"run_id": "r"})),
        ];
        for (tool, arguments) in taken {
            assert_eq!(
                refusal_of(tool, arguments.clone()),
                None,
                "{tool} {arguments}"
            );
        }
    }

    #[test]
    fn a_refused_value_is_shown_cut_short() {
        let long = Value::String("x".repeat(10_000));
        let shown = shown(&long);
        assert!(shown.chars().count() <= 81, "{shown}");
        assert!(shown.ends_with('…'));
        assert_eq!(super::shown(&json!(5)), "5");
    }
}
