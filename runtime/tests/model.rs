//! The model client without a model server: settings and their errors, the
//! SSE decoder and tool-call assembly on byte fixtures, the classification
//! of failures, the evaluator's prompts — and, against tiny hand-written
//! HTTP peers on 127.0.0.1, the timeouts and the wire format.
#![cfg(feature = "openai")]

#[path = "support/requests.rs"]
mod requests;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{
    BudgetEvaluationRequest, BudgetFigures, ChatMessage, EvaluationRequest, Evidence,
    EvidenceSummary, FinishReason, LeaseId, LeaseKind, ModelClient, ModelErrorKind, ModelReply,
    ModelRequest, TokenCost, ToolCallRequest, ToolDefinition, TranscriptMessage,
    model::{
        ModelEndpoint, ModelEvaluator, ModelRole, ModelSettings, OpenAiClient, StreamParser,
        UsageLedger, classify_status, parse_retry_after,
    },
};
use proptest::prelude::*;
use requests::ask;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Settings.
// ---------------------------------------------------------------------------

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

const BASE: (&str, &str) = ("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:8000/v1");
const NAME: (&str, &str) = ("LEASEHOLD_MODEL_NAME", "big");

#[test]
fn settings_from_env_read_every_variable() {
    let settings = ModelSettings::from_lookup(env(&[
        BASE,
        NAME,
        ("LEASEHOLD_MODEL_API_KEY", "sk-default"),
        ("LEASEHOLD_FAST_MODEL_BASE_URL", "https://fast.example/v1"),
        ("LEASEHOLD_FAST_MODEL_NAME", "small"),
        ("LEASEHOLD_FAST_MODEL_API_KEY", "sk-fast"),
        ("LEASEHOLD_MODEL_IDLE_TIMEOUT", "250ms"),
        ("LEASEHOLD_MODEL_CONNECT_TIMEOUT", "5m"),
        ("LEASEHOLD_MODEL_RATE_LIMIT_RETRIES", "5"),
    ]))
    .expect("valid settings");
    assert_eq!(
        settings.default,
        ModelEndpoint::new("http://127.0.0.1:8000/v1", "big").with_api_key("sk-default")
    );
    assert_eq!(
        settings.endpoint(ModelRole::Fast),
        &ModelEndpoint::new("https://fast.example/v1", "small").with_api_key("sk-fast")
    );
    assert_eq!(settings.idle_timeout, Duration::from_millis(250));
    assert_eq!(settings.connect_timeout, Duration::from_secs(300));
    assert_eq!(settings.rate_limit_retries, 5);
}

#[test]
fn settings_default_to_ten_second_connect_and_sixty_second_idle_timeouts() {
    let settings = ModelSettings::from_lookup(env(&[BASE, NAME])).expect("valid settings");
    assert_eq!(settings.connect_timeout, Duration::from_secs(10));
    assert_eq!(settings.idle_timeout, Duration::from_secs(60));
    assert_eq!(settings.rate_limit_retries, 3);
    assert_eq!(settings.default.api_key, None);
}

#[test]
fn the_fast_role_falls_back_to_the_default_role_variable_by_variable() {
    let none = ModelSettings::from_lookup(env(&[BASE, NAME])).expect("valid");
    assert_eq!(none.fast, None);
    assert_eq!(none.endpoint(ModelRole::Fast), &none.default);

    let name_only = ModelSettings::from_lookup(env(&[
        BASE,
        NAME,
        ("LEASEHOLD_MODEL_API_KEY", "sk-default"),
        ("LEASEHOLD_FAST_MODEL_NAME", "small"),
    ]))
    .expect("valid");
    assert_eq!(
        name_only.endpoint(ModelRole::Fast),
        &ModelEndpoint::new("http://127.0.0.1:8000/v1", "small").with_api_key("sk-default")
    );
}

/// Variables given, the variable refused, a word of what it expected.
type Vars = &'static [(&'static str, &'static str)];

#[test]
fn a_missing_or_bad_variable_is_refused_naming_it_and_what_it_expected() {
    let cases: [(Vars, &str, &str); 7] = [
        (&[NAME], "LEASEHOLD_MODEL_BASE_URL", "base URL"),
        (&[BASE], "LEASEHOLD_MODEL_NAME", "model name"),
        (
            &[("LEASEHOLD_MODEL_BASE_URL", "127.0.0.1:8000"), NAME],
            "LEASEHOLD_MODEL_BASE_URL",
            "http://",
        ),
        (
            &[BASE, NAME, ("LEASEHOLD_MODEL_IDLE_TIMEOUT", "sixty")],
            "LEASEHOLD_MODEL_IDLE_TIMEOUT",
            "250ms, 90s or 5m",
        ),
        (
            &[BASE, NAME, ("LEASEHOLD_MODEL_CONNECT_TIMEOUT", "0s")],
            "LEASEHOLD_MODEL_CONNECT_TIMEOUT",
            "above 0",
        ),
        (
            &[BASE, NAME, ("LEASEHOLD_FAST_MODEL_BASE_URL", "ftp://x")],
            "LEASEHOLD_FAST_MODEL_BASE_URL",
            "http://",
        ),
        (
            &[BASE, NAME, ("LEASEHOLD_MODEL_RATE_LIMIT_RETRIES", "-1")],
            "LEASEHOLD_MODEL_RATE_LIMIT_RETRIES",
            "whole number",
        ),
    ];
    for (vars, variable, expected) in cases {
        let error = ModelSettings::from_lookup(env(vars)).expect_err(variable);
        let text = error.to_string();
        assert_eq!(error.field, variable, "{text}");
        assert!(text.contains(expected), "{text} lacks {expected:?}");
    }
}

#[test]
fn an_empty_variable_counts_as_unset() {
    let settings = ModelSettings::from_lookup(env(&[
        BASE,
        NAME,
        ("LEASEHOLD_MODEL_API_KEY", ""),
        ("LEASEHOLD_FAST_MODEL_NAME", "  "),
    ]))
    .expect("valid");
    assert_eq!(settings.default.api_key, None);
    assert_eq!(settings.fast, None);
}

#[test]
fn the_api_key_never_shows_in_debug_output() {
    let endpoint = ModelEndpoint::new("http://127.0.0.1:1/v1", "m").with_api_key("sk-secret");
    let client = OpenAiClient::new(ModelSettings::new(endpoint.clone())).expect("client");
    assert!(!format!("{endpoint:?}").contains("sk-secret"));
    assert!(!format!("{client:?}").contains("sk-secret"));
}

// ---------------------------------------------------------------------------
// The SSE decoder and tool-call assembly, on byte fixtures.
// ---------------------------------------------------------------------------

fn event(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn delta(delta: Value) -> String {
    event(&json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]}))
}

/// A stream with text and two tool calls whose names and arguments come in
/// fragments, interleaved, plus a keep-alive comment and a usage chunk.
fn tool_call_stream() -> String {
    [
        delta(json!({"role": "assistant", "content": null})),
        ": keep-alive\n\n".to_owned(),
        delta(json!({"content": "Let me look."})),
        delta(json!({"tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "sea", "arguments": ""}}
        ]})),
        delta(json!({"tool_calls": [{"index": 0, "function": {"name": "rch", "arguments": "{\"q\": "}}]})),
        delta(json!({"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "fetch", "arguments": "{\"url\""}}
        ]})),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"logs ü\"}"}}]})),
        delta(json!({"tool_calls": [{"index": 1, "function": {"arguments": ": \"x\"}"}}]})),
        event(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        event(&json!({"choices": [], "usage": {"prompt_tokens": 31, "completion_tokens": 17, "total_tokens": 48}})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat()
}

fn expected_tool_reply() -> ModelReply {
    ModelReply {
        content: "Let me look.".into(),
        tool_calls: vec![
            ToolCallRequest {
                id: "call_a".into(),
                name: "search".into(),
                arguments: json!({"q": "logs ü"}),
            },
            ToolCallRequest {
                id: "call_b".into(),
                name: "fetch".into(),
                arguments: json!({"url": "x"}),
            },
        ],
        usage: TokenCost {
            counted: false,
            input_tokens: 31,
            output_tokens: 17,
        },
        finish_reason: Some(FinishReason::ToolCalls),
    }
}

fn parse_in_pieces(body: &[u8], cuts: &[usize]) -> Result<ModelReply, leasehold::ModelError> {
    let mut parser = StreamParser::new();
    let mut start = 0;
    for &cut in cuts {
        let cut = cut.clamp(start, body.len());
        parser.feed(&body[start..cut])?;
        start = cut;
    }
    parser.feed(&body[start..])?;
    parser.finish()
}

#[test]
fn tool_call_deltas_are_assembled_by_index_with_names_and_arguments_concatenated() {
    let body = tool_call_stream();
    assert_eq!(
        parse_in_pieces(body.as_bytes(), &[]),
        Ok(expected_tool_reply())
    );
}

#[test]
fn a_stream_fed_one_byte_at_a_time_gives_the_same_reply() {
    let body = tool_call_stream();
    let mut parser = StreamParser::new();
    let mut text = String::new();
    for byte in body.as_bytes() {
        text.push_str(&parser.feed(std::slice::from_ref(byte)).expect("valid").text);
    }
    assert_eq!(text, "Let me look.");
    assert_eq!(parser.finish(), Ok(expected_tool_reply()));
}

#[test]
fn crlf_line_ends_and_multi_line_data_are_decoded() {
    let body = "data: {\"choices\":[{\"index\":0,\r\ndata: \"delta\":{\"content\":\"hi\"}}]}\r\n\r\n\
                data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n\
                data: [DONE]\r\n\r\n";
    let reply = parse_in_pieces(body.as_bytes(), &[]).expect("valid");
    assert_eq!(reply.content, "hi");
}

#[test]
fn bytes_after_done_are_ignored() {
    let body = format!(
        "{}data: [DONE]\n\ndata: not json at all\n\n",
        delta(json!({"content": "ok"}))
    );
    let mut parser = StreamParser::new();
    parser.feed(body.as_bytes()).expect("valid");
    assert!(parser.is_done());
    assert_eq!(parser.finish().map(|r| r.content), Ok("ok".to_owned()));
}

#[test]
fn a_chunk_that_is_not_json_is_a_malformed_chunk_error_that_is_not_retryable() {
    let body = format!(
        "{}data: {{\"choices\": [{{\"ind\n\n",
        delta(json!({"content": "a"}))
    );
    let error = parse_in_pieces(body.as_bytes(), &[]).expect_err("malformed");
    assert_eq!(error.kind, ModelErrorKind::MalformedChunk, "{error}");
    assert!(!error.retryable);
}

#[test]
fn chunks_of_the_wrong_shape_are_malformed_chunk_errors() {
    for bad in [
        json!([1, 2]),
        json!({"choices": {"index": 0}}),
        json!({"choices": [{"index": 0, "delta": {"content": 7}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": -1}]}}]}),
        json!({"choices": [], "usage": {"prompt_tokens": "many"}}),
    ] {
        let error = parse_in_pieces(event(&bad).as_bytes(), &[]).expect_err("wrong shape");
        assert_eq!(error.kind, ModelErrorKind::MalformedChunk, "{bad}: {error}");
    }
}

#[test]
fn malformed_tool_call_arguments_are_a_retryable_error_naming_the_call() {
    let body = [
        delta(json!({"tool_calls": [
            {"index": 0, "id": "c", "function": {"name": "search", "arguments": "{\"q\": \"lo"}}
        ]})),
        event(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let error = parse_in_pieces(body.as_bytes(), &[]).expect_err("bad arguments");
    assert_eq!(error.kind, ModelErrorKind::Other, "{error}");
    assert!(error.retryable);
    assert!(
        error.message.contains("#0") && error.message.contains("search"),
        "{error}"
    );

    let not_an_object = [
        delta(json!({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "[1]"}}]})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let error = parse_in_pieces(not_an_object.as_bytes(), &[]).expect_err("not an object");
    assert!(error.message.contains("JSON object"), "{error}");
}

#[test]
fn empty_tool_call_arguments_are_an_empty_object_and_a_missing_id_is_made_up() {
    let body = [
        delta(json!({"tool_calls": [{"index": 0, "function": {"name": "now", "arguments": ""}}]})),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let reply = parse_in_pieces(body.as_bytes(), &[]).expect("valid");
    assert_eq!(reply.tool_calls[0].arguments, json!({}));
    assert_eq!(reply.tool_calls[0].id, "call_0");
}

#[test]
fn a_stream_that_ends_without_a_finish_reason_or_done_is_a_retryable_disconnect() {
    let body = delta(json!({"content": "half an ans"}));
    let error = parse_in_pieces(body.as_bytes(), &[]).expect_err("cut short");
    assert_eq!(error.kind, ModelErrorKind::Disconnected, "{error}");
    assert!(error.retryable);
}

#[test]
fn a_stream_with_a_finish_reason_but_no_done_is_a_whole_answer() {
    // Some servers end the body without `[DONE]`, and without the last
    // blank line.
    let body = format!(
        "{}data: {}",
        delta(json!({"content": "whole"})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    );
    assert_eq!(
        parse_in_pieces(body.as_bytes(), &[]).map(|r| r.content),
        Ok("whole".to_owned())
    );
}

#[test]
fn an_error_inside_the_stream_is_a_retryable_server_error() {
    for body in [
        event(&json!({"error": {"message": "overloaded", "type": "server_error"}})),
        format!("event: error\n{}", event(&json!({"message": "overloaded"}))),
    ] {
        let error = parse_in_pieces(body.as_bytes(), &[]).expect_err("an error");
        assert_eq!(error.kind, ModelErrorKind::Server, "{error}");
        assert!(error.retryable);
        assert!(error.message.contains("overloaded"), "{error}");
    }
}

proptest! {
    #[test]
    fn the_decoder_gives_the_same_reply_however_the_bytes_are_cut(
        cuts in proptest::collection::vec(0usize..2_000, 0..12)
    ) {
        let body = tool_call_stream();
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(parse_in_pieces(body.as_bytes(), &cuts), Ok(expected_tool_reply()));
    }

    #[test]
    fn the_decoder_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        cut in 0usize..512,
    ) {
        // A typed result either way: reaching the end is the property.
        let _ = parse_in_pieces(&bytes, &[cut]);
    }

    #[test]
    fn the_decoder_never_panics_on_json_shaped_events(
        payloads in proptest::collection::vec(
            prop_oneof![
                Just("{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}".to_owned()),
                Just("{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]}}]}".to_owned()),
                Just("[DONE]".to_owned()),
                "[ -~]{0,40}",
            ],
            0..8,
        )
    ) {
        let body: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
        let _ = parse_in_pieces(body.as_bytes(), &[]);
    }
}

// ---------------------------------------------------------------------------
// Classification.
// ---------------------------------------------------------------------------

#[test]
fn statuses_are_classified_by_one_table() {
    let wait = Some(Duration::from_secs(2));
    for (status, kind, retryable) in [
        (429, ModelErrorKind::RateLimited, true),
        (500, ModelErrorKind::Server, true),
        (502, ModelErrorKind::Server, true),
        (503, ModelErrorKind::Server, true),
        (400, ModelErrorKind::Client, false),
        (401, ModelErrorKind::Client, false),
        (404, ModelErrorKind::Client, false),
        (422, ModelErrorKind::Client, false),
    ] {
        let error = classify_status(status, wait, b"");
        assert_eq!((error.kind, error.retryable), (kind, retryable), "{status}");
        // A wait is kept only where a retry is allowed.
        assert_eq!(error.retry_after, wait.filter(|_| retryable), "{status}");
        assert!(error.message.contains(&status.to_string()));
    }
}

#[test]
fn the_servers_error_message_is_kept() {
    let error = classify_status(
        400,
        None,
        br#"{"error": {"message": "Unknown parameter: 'response_format'.", "type": "invalid_request_error"}}"#,
    );
    assert!(
        error
            .message
            .contains("Unknown parameter: 'response_format'."),
        "{error}"
    );
    let plain = classify_status(502, None, b"<html>Bad Gateway</html>");
    assert!(plain.message.contains("Bad Gateway"), "{plain}");
    let long = classify_status(500, None, "é".repeat(10_000).as_bytes());
    assert!(long.message.chars().count() < 600, "the body is cut short");
}

#[test]
fn retry_after_is_read_as_seconds_milliseconds_or_an_http_date() {
    let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 07:28:00 GMT
    let read = |ms: Option<&str>, value: Option<&str>| parse_retry_after(ms, value, now);
    assert_eq!(read(None, Some("3")), Some(Duration::from_secs(3)));
    assert_eq!(
        read(None, Some(" 1.5 ")),
        Some(Duration::from_millis(1_500))
    );
    assert_eq!(
        read(Some("250"), Some("1")),
        Some(Duration::from_millis(250))
    );
    assert_eq!(read(Some("soon"), Some("2")), Some(Duration::from_secs(2)));
    assert_eq!(
        read(None, Some("Wed, 21 Oct 2015 07:28:10 GMT")),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        read(None, Some("Wed, 21 Oct 2015 07:27:00 GMT")),
        Some(Duration::ZERO),
        "a date in the past means no wait"
    );
    for bad in ["", "-1", "NaN", "inf", "tomorrow", "1e400"] {
        assert_eq!(read(None, Some(bad)), None, "{bad:?}");
    }
    assert_eq!(read(None, None), None);
    // A real date from now on is honoured too.
    let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
    let wait = parse_retry_after(None, Some(&later), SystemTime::now()).expect("a date");
    assert!(wait <= Duration::from_secs(30) && wait >= Duration::from_secs(28));
}

// ---------------------------------------------------------------------------
// Against hand-written HTTP peers on 127.0.0.1.
// ---------------------------------------------------------------------------

/// One step of a scripted peer's answer.
enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
}

fn write(text: &str) -> Step {
    Step::Write(text.as_bytes().to_vec())
}

/// A peer that accepts one connection, reads one request, plays `steps`,
/// and sends the request it read (head and body) back through the channel.
fn peer(steps: Vec<Step>) -> (String, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let request = read_request(&mut stream);
        let _ = tx.send(request);
        for step in steps {
            match step {
                Step::Write(bytes) => {
                    if stream
                        .write_all(&bytes)
                        .and_then(|()| stream.flush())
                        .is_err()
                    {
                        return;
                    }
                }
                Step::Sleep(pause) => thread::sleep(pause),
            }
        }
        // Keep the socket open a little, so that only the script ends it.
        thread::sleep(Duration::from_millis(200));
    });
    (base, rx)
}

fn read_request(stream: &mut TcpStream) -> (String, Value) {
    let mut buffer = Vec::new();
    let mut byte = [0u8; 1];
    while !buffer.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        buffer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buffer).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = stream.read_exact(&mut body);
    (head, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn sse_head() -> Step {
    write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
}

fn json_head(length: usize) -> Step {
    write(&format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
    ))
}

fn client_for(base: &str, idle: Duration) -> OpenAiClient {
    let mut settings = ModelSettings::new(ModelEndpoint::new(base, "m"));
    settings.idle_timeout = idle;
    OpenAiClient::new(settings).expect("client")
}

const COMPLETION: &str = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"slow but whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#;

#[tokio::test]
async fn nothing_listening_is_a_retryable_connection_refused() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let client = client_for(
        &format!("http://127.0.0.1:{port}/v1"),
        Duration::from_secs(5),
    );
    let error = client
        .complete(ask(true), Evidence::detached())
        .await
        .expect_err("nothing listens");
    assert_eq!(error.kind, ModelErrorKind::ConnectionRefused, "{error}");
    assert!(error.retryable);
}

/// What a kept-alive peer does with each request it reads, in order across
/// its connections.
#[derive(Clone, Copy)]
enum Turn {
    /// Answers [`COMPLETION`] and keeps the connection open.
    Answer,
    /// Closes the connection without a byte of answer.
    Close,
}

/// A peer that keeps connections alive and plays `turns`, one a request;
/// it reports each request it reads with the number of its connection.
fn kept_alive_peer(turns: Vec<Turn>) -> (String, mpsc::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut turns = turns.into_iter();
        let mut connection = 0;
        while let Ok((mut stream, _)) = listener.accept() {
            connection += 1;
            loop {
                let (head, _) = read_request(&mut stream);
                if head.is_empty() {
                    break;
                }
                let _ = tx.send(connection);
                match turns.next() {
                    Some(Turn::Answer) => {
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{COMPLETION}",
                            COMPLETION.len()
                        );
                        if stream.write_all(answer.as_bytes()).is_err() {
                            break;
                        }
                    }
                    Some(Turn::Close) | None => break,
                }
            }
        }
    });
    (base, rx)
}

#[tokio::test]
async fn a_kept_alive_connection_closed_as_a_request_goes_out_on_it_is_sent_again_once_on_a_new_one()
 {
    // The second request goes out on the first call's connection, which the
    // server closes unanswered, as one whose keep-alive just ended does.
    let (base, requests) = kept_alive_peer(vec![Turn::Answer, Turn::Close, Turn::Answer]);
    let client = client_for(&base, Duration::from_secs(5));
    let first = client
        .complete(ask(false), Evidence::detached())
        .await
        .expect("the first answer");
    assert_eq!(first.content, "slow but whole");
    let evidence = Evidence::detached();
    let second = client
        .complete(ask(false), evidence.clone())
        .await
        .expect("the request is sent again, not failed");
    assert_eq!(second.content, "slow but whole");
    let seen: Vec<usize> = requests.try_iter().collect();
    assert_eq!(seen, [1, 1, 2], "one resend, on a new connection");
    let summary = evidence.summary(
        tokio::time::Instant::now(),
        &leasehold::AccrualConfig::PEKKO,
    );
    let note = summary.last_note.expect("the resend is noted");
    assert!(
        note.contains("the connection closed before any answer")
            && note.contains("sending the request again"),
        "{note}"
    );
}

#[tokio::test]
async fn a_request_whose_connection_closes_unanswered_twice_is_a_retryable_disconnect() {
    let (base, requests) = kept_alive_peer(vec![Turn::Close, Turn::Close, Turn::Answer]);
    let error = client_for(&base, Duration::from_secs(5))
        .complete(ask(true), Evidence::detached())
        .await
        .expect_err("sent twice, closed twice");
    assert_eq!(error.kind, ModelErrorKind::Disconnected, "{error}");
    assert!(error.retryable);
    assert!(error.message.contains("before the answer began"), "{error}");
    assert_eq!(
        requests.try_iter().count(),
        2,
        "sent once more, not again and again"
    );
}

#[tokio::test]
async fn a_blocking_answer_trickling_for_many_idle_timeouts_completes_whole() {
    // No request-wide timeout: 20 pieces 100 ms apart take 2 s, nearly
    // seven idle timeouts of 300 ms, and the call still completes.
    let mut steps = vec![json_head(COMPLETION.len())];
    let bytes = COMPLETION.as_bytes();
    for piece in bytes.chunks(bytes.len().div_ceil(20)) {
        steps.push(Step::Sleep(Duration::from_millis(100)));
        steps.push(Step::Write(piece.to_vec()));
    }
    let (base, _) = peer(steps);
    let evidence = Evidence::detached();
    let started = Instant::now();
    let reply = client_for(&base, Duration::from_millis(300))
        .complete(ask(false), evidence.clone())
        .await
        .expect("a whole answer");
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(reply.content, "slow but whole");
    assert!(
        evidence.count() >= 10,
        "each piece was evidence: {}",
        evidence.count()
    );
}

#[tokio::test]
async fn a_blocking_answer_whose_body_stalls_past_the_idle_timeout_is_an_idle_timeout() {
    let (base, _) = peer(vec![
        json_head(COMPLETION.len()),
        write(&COMPLETION[..10]),
        Step::Sleep(Duration::from_secs(2)),
        write(&COMPLETION[10..]),
    ]);
    let started = Instant::now();
    let error = client_for(&base, Duration::from_millis(300))
        .complete(ask(false), Evidence::detached())
        .await
        .expect_err("the body stalls");
    assert_eq!(error.kind, ModelErrorKind::IdleTimeout, "{error}");
    assert!(error.retryable);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_stream_that_never_answers_is_an_idle_timeout() {
    let (base, _) = peer(vec![Step::Sleep(Duration::from_secs(2))]);
    let error = client_for(&base, Duration::from_millis(300))
        .complete(ask(true), Evidence::detached())
        .await
        .expect_err("silence");
    assert_eq!(error.kind, ModelErrorKind::IdleTimeout, "{error}");
    assert!(error.retryable);
}

#[tokio::test]
async fn each_chunk_of_a_stream_is_evidence_and_keep_alives_reset_the_idle_timer() {
    let mut steps = vec![sse_head()];
    for word in ["a", "b", "c"] {
        steps.push(Step::Sleep(Duration::from_millis(150)));
        steps.push(write(&delta(json!({"content": word}))));
        // A keep-alive comment between chunks: not evidence, but proof the
        // connection lives.
        steps.push(Step::Sleep(Duration::from_millis(150)));
        steps.push(write(": keep-alive\n\n"));
    }
    steps.push(write(&event(
        &json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    )));
    steps.push(Step::Sleep(Duration::from_millis(30)));
    steps.push(write("data: [DONE]\n\n"));
    let (base, _) = peer(steps);
    let evidence = Evidence::detached();
    let reply = client_for(&base, Duration::from_millis(250))
        .complete(ask(true), evidence.clone())
        .await
        .expect("a whole answer");
    assert_eq!(reply.content, "abc");
    assert_eq!(evidence.count(), 3, "three text chunks");
    let kinds = evidence
        .summary(
            tokio::time::Instant::now(),
            &leasehold::AccrualConfig::PEKKO,
        )
        .kinds;
    assert_eq!(kinds.text, 3, "{kinds:?}");
    // One keepalive a read: the finish and [DONE], 30 ms apart, may come
    // in one.
    assert!(
        (4..=5).contains(&kinds.keepalive),
        "three comments, the finish and [DONE] add nothing to the answer: {kinds:?}"
    );
}

#[tokio::test]
async fn the_request_goes_to_chat_completions_with_bearer_auth_tools_and_usage_requested() {
    let (base, requests) = peer(vec![
        sse_head(),
        write(&event(
            &json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}),
        )),
        write("data: [DONE]\n\n"),
    ]);
    let settings =
        ModelSettings::new(ModelEndpoint::new(format!("{base}/"), "m").with_api_key("sk-test"));
    let client = OpenAiClient::new(settings).expect("client");
    let request = ModelRequest {
        max_tokens: None,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        messages: vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("find it"),
            ChatMessage::assistant(
                "",
                vec![ToolCallRequest {
                    id: "call_1".into(),
                    name: "search".into(),
                    arguments: json!({"q": "it"}),
                }],
            ),
            ChatMessage::tool("call_1", "found"),
        ],
        tools: vec![ToolDefinition {
            name: "search".into(),
            description: "searches".into(),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            idempotent: Some(true),
        }],
        stream: true,
        consumer: "worker:research".into(),
    };
    client
        .complete(request, Evidence::detached())
        .await
        .expect("ok");
    let (head, body) = requests.recv().expect("the peer saw a request");
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: bearer sk-test\r\n"),
        "{head}"
    );
    assert_eq!(body["model"], "m");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "search", "description": "searches",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}
        }}])
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"it\"}"}}
        ]})
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "content": "found", "tool_call_id": "call_1"})
    );
    assert!(body.get("response_format").is_none());
    // Its place in the run's trace, for the server's own tracing.
    assert!(
        head.to_ascii_lowercase()
            .contains("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n"),
        "{head}"
    );
}

#[tokio::test]
async fn a_blocking_request_sends_no_stream_options_and_no_key_when_none_is_set() {
    let (base, requests) = peer(vec![json_head(COMPLETION.len()), write(COMPLETION)]);
    let reply = client_for(&base, Duration::from_secs(5))
        .complete(ask(false), Evidence::detached())
        .await
        .expect("ok");
    assert_eq!(
        reply.usage,
        TokenCost {
            counted: false,
            input_tokens: 3,
            output_tokens: 4
        }
    );
    let (head, body) = requests.recv().expect("a request");
    assert!(
        !head.to_ascii_lowercase().contains("authorization"),
        "{head}"
    );
    assert!(!head.to_ascii_lowercase().contains("traceparent"), "{head}");
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert!(body.get("tools").is_none());
    assert!(body.get("max_tokens").is_none(), "the server's own limit");
}

#[tokio::test]
async fn max_tokens_is_the_requests_else_the_endpoints_else_not_sent() {
    let mut seen = Vec::new();
    for (endpoint, request) in [(Some(128), None), (Some(128), Some(64)), (None, Some(32))] {
        let (base, requests) = peer(vec![json_head(COMPLETION.len()), write(COMPLETION)]);
        let mut at = ModelEndpoint::new(base, "m");
        if let Some(n) = endpoint {
            at = at.with_max_tokens(n);
        }
        let client = OpenAiClient::new(ModelSettings::new(at)).expect("client");
        let mut asked = ask(false);
        asked.max_tokens = request;
        client
            .complete(asked, Evidence::detached())
            .await
            .expect("ok");
        let (_, body) = requests.recv().expect("a request");
        seen.push(body["max_tokens"].as_u64());
    }
    assert_eq!(seen, [Some(128), Some(64), Some(32)]);
}

#[tokio::test]
async fn a_stream_request_answered_whole_as_json_is_still_read() {
    let (base, _) = peer(vec![json_head(COMPLETION.len()), write(COMPLETION)]);
    let client = client_for(&base, Duration::from_secs(5));
    let mut stream = client
        .stream(ask(false), Evidence::detached())
        .await
        .expect("opened");
    assert_eq!(
        stream.next_text().await,
        Ok(Some("slow but whole".to_owned()))
    );
    assert_eq!(stream.next_text().await, Ok(None));
    let reply = stream.finish().await.expect("whole");
    assert_eq!(reply.content, "slow but whole");
    assert_eq!(client.ledger().of("run").output_tokens, 4);
}

#[tokio::test]
async fn a_blocking_request_answered_as_a_stream_is_still_read() {
    let (base, _) = peer(vec![
        sse_head(),
        write(&delta(json!({"content": "streamed anyway"}))),
        write(&event(
            &json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        )),
    ]);
    let reply = client_for(&base, Duration::from_secs(5))
        .complete(ask(false), Evidence::detached())
        .await
        .expect("read as a stream");
    assert_eq!(reply.content, "streamed anyway");
}

// ---------------------------------------------------------------------------
// The evaluator's prompts, and the ledger.
// ---------------------------------------------------------------------------

fn lease_request(evidence: EvidenceSummary) -> EvaluationRequest {
    EvaluationRequest {
        lease_id: LeaseId(3),
        run_id: "run-9".into(),
        path: "run/tool_call:2.0".into(),
        kind: LeaseKind::ToolCall,
        subject: "search_logs".into(),
        renewals: 4,
        max_renewals: 10,
        lease: Duration::from_secs(300),
        evidence,
        evidence_renewals: 0,
        stream_tail: None,
        transcript_tail: vec![
            TranscriptMessage::new("user", "Find the failing deploy."),
            TranscriptMessage::new("assistant", "x".repeat(5_000)),
        ]
        .into(),
    }
}

#[test]
fn the_lease_prompt_shows_every_field_and_demands_the_strict_json() {
    let messages = ModelEvaluator::lease_prompt(&lease_request(EvidenceSummary {
        count: 12,
        last_progress_age_ms: Some(41_000),
        phi: Some(3.456),
        last_note: Some("page 3 of 9".into()),
        repetition: None,
        kinds: leasehold::EvidenceKinds {
            progress: 12,
            keepalive: 7,
            ..Default::default()
        },
        keepalive_age_ms: Some(900),
        progress: Some(leasehold::ProgressSummary {
            value: 3.0,
            total: Some(9.0),
            previous: Some(3.0),
            advanced: false,
        }),
    }));
    let system = &messages[0].content;
    for demanded in [
        r#""verdict""#,
        r#""reason""#,
        r#""nudge""#,
        "RENEW",
        "NUDGE",
        "INTERVENE",
        "ESCALATE",
        "no code",
        "keepalive",
    ] {
        assert!(
            system.contains(demanded),
            "{demanded:?} missing from {system}"
        );
    }
    let user = &messages[1].content;
    for shown in [
        "tool_call",
        "search_logs",
        "run/tool_call:2.0",
        "300000 ms",
        "renewed 4 times",
        "at most 10",
        "12 items",
        "41000 ms ago",
        "phi 3.46",
        "page 3 of 9",
        "by kind: progress 12, keepalive 7",
        "the last keepalive 900 ms ago",
        "progress 3 of 9 (did not move since the last expiry)",
        "[user] Find the failing deploy.",
    ] {
        assert!(user.contains(shown), "{shown:?} missing from {user}");
    }
    assert!(
        user.len() < 4_000,
        "a long message is cut: {} bytes",
        user.len()
    );

    let silent = ModelEvaluator::lease_prompt(&lease_request(EvidenceSummary::default()));
    assert!(
        silent[1]
            .content
            .contains("none since the operation started")
    );
}

#[test]
fn the_budget_prompt_shows_the_figures_and_demands_the_strict_json() {
    let messages = ModelEvaluator::budget_prompt(&BudgetEvaluationRequest {
        run_id: "run-9".into(),
        path: "run/worker:research#1".into(),
        figures: BudgetFigures {
            spending: None,
            steps_used: 6,
            steps_declared: 6,
            limit: 6,
            tool_calls: 9,
            spawns: 2,
            milestones_closed: vec!["gather".into(), "rank".into()],
            milestones_open: vec!["write".into()],
            extensions_used: 1,
            extensions_left: 2,
        },
        transcript_tail: vec![TranscriptMessage::new("tool", "12 results")].into(),
    });
    let system = &messages[0].content;
    for demanded in [
        r#""decision""#,
        r#""reason""#,
        r#""confidence""#,
        "EXTEND",
        "WRAP_UP",
    ] {
        assert!(
            system.contains(demanded),
            "{demanded:?} missing from {system}"
        );
    }
    let user = &messages[1].content;
    for shown in [
        "run/worker:research#1",
        "6 used, 6 declared, current limit 6",
        "tool calls so far: 9",
        "workers spawned so far: 2",
        "milestones closed: gather, rank",
        "milestones open: write",
        "1 granted, 2 left",
        "[tool] 12 results",
    ] {
        assert!(user.contains(shown), "{shown:?} missing from {user}");
    }
}

#[test]
fn the_ledger_adds_per_consumer_and_saturates() {
    let ledger = UsageLedger::new();
    let shared = ledger.clone();
    ledger.record(
        "run",
        TokenCost {
            counted: false,
            input_tokens: 10,
            output_tokens: 2,
        },
    );
    shared.record(
        "run",
        TokenCost {
            counted: false,
            input_tokens: 5,
            output_tokens: 1,
        },
    );
    ledger.record(
        "engine.watchdog",
        TokenCost {
            counted: false,
            input_tokens: u64::MAX,
            output_tokens: 1,
        },
    );
    ledger.record(
        "engine.watchdog",
        TokenCost {
            counted: false,
            input_tokens: 1,
            output_tokens: 1,
        },
    );
    let snapshot = ledger.snapshot();
    assert_eq!(
        snapshot["run"],
        TokenCost {
            counted: false,
            input_tokens: 15,
            output_tokens: 3
        }
    );
    assert_eq!(snapshot["engine.watchdog"].input_tokens, u64::MAX);
    assert_eq!(ledger.of("nobody"), TokenCost::default());
    assert_eq!(ledger.total().input_tokens, u64::MAX);
    assert_eq!(ledger.total().output_tokens, 5);
}

#[test]
fn the_finish_reason_is_read_so_a_cut_off_answer_is_not_taken_for_a_whole_one() {
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The cause is\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let reply = parse_in_pieces(body.as_bytes(), &[]).expect("a reply");
    assert_eq!(reply.content, "The cause is");
    assert_eq!(reply.finish_reason, Some(FinishReason::Length));

    let unknown = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"sleepy\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let reply = parse_in_pieces(unknown.as_bytes(), &[]).expect("a reply");
    assert_eq!(reply.finish_reason, Some(FinishReason::Other));
    assert_eq!(FinishReason::from_openai("stop"), FinishReason::Stop);
    assert_eq!(
        FinishReason::from_openai("function_call"),
        FinishReason::ToolCalls
    );
}

#[test]
fn the_lease_prompt_shows_the_streams_tail_its_repetition_and_the_evidence_streak() {
    let looping = "Let me look at the failing test once more. ".repeat(30);
    let mut request = lease_request(EvidenceSummary {
        count: 300,
        last_progress_age_ms: Some(120),
        phi: Some(0.2),
        last_note: None,
        repetition: Some(0.97),
        ..EvidenceSummary::default()
    });
    request.evidence_renewals = 3;
    request.stream_tail = Some(looping.clone());
    let messages = ModelEvaluator::lease_prompt(&request);
    assert!(
        messages[0].content.contains("repetition"),
        "{}",
        messages[0].content
    );
    let user = &messages[1].content;
    assert!(user.contains("repetition 0.97"), "{user}");
    assert!(
        user.contains("renewed on evidence alone 3 times in a row"),
        "{user}"
    );
    assert!(user.contains(&looping), "{user}");
    // No tail, no tail section.
    let silent = ModelEvaluator::lease_prompt(&lease_request(EvidenceSummary::default()));
    assert!(!silent[1].content.contains("streamed so far"));
}

#[tokio::test]
async fn a_streamed_answers_text_goes_into_its_evidence_tail() {
    let mut steps = vec![sse_head()];
    for word in ["looping ", "looping ", "again"] {
        steps.push(write(&delta(json!({"content": word}))));
    }
    steps.push(write("data: [DONE]\n\n"));
    let (base, _) = peer(steps);
    let evidence = Evidence::detached();
    let reply = client_for(&base, Duration::from_secs(5))
        .complete(ask(true), evidence.clone())
        .await
        .expect("a whole answer");
    assert_eq!(reply.content, "looping looping again");
    assert_eq!(evidence.tail().as_deref(), Some("looping looping again"));
}

/// A server that reports no usage, streamed or whole: the tokens are
/// counted here from the text sent and received, and the call says so; a
/// server that reports usage is taken at its word.
#[tokio::test]
async fn a_server_that_reports_no_usage_has_its_tokens_counted_and_the_call_says_so() {
    let whole = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"twelve chars"},"finish_reason":"stop"}]}"#;
    let (base, _requests) = peer(vec![json_head(whole.len()), write(whole)]);
    let reply = client_for(&base, Duration::from_secs(5))
        .complete(ask(false), Evidence::detached())
        .await
        .expect("ok");
    // "hi" is one token and its message's framing four; the answer's
    // twelve characters are three.
    assert_eq!(
        reply.usage,
        TokenCost {
            input_tokens: 5,
            output_tokens: 3,
            counted: true,
        }
    );

    let (base, _requests) = peer(vec![
        sse_head(),
        write(&event(
            &json!({"choices": [{"index": 0, "delta": {"content": "twelve"}}]}),
        )),
        write(&event(
            &json!({"choices": [{"index": 0, "delta": {"content": " chars"}, "finish_reason": "stop"}]}),
        )),
        write("data: [DONE]\n\n"),
    ]);
    let client = client_for(&base, Duration::from_secs(5));
    let reply = client
        .complete(ask(true), Evidence::detached())
        .await
        .expect("ok");
    assert_eq!(
        reply.usage,
        TokenCost {
            input_tokens: 5,
            output_tokens: 3,
            counted: true,
        }
    );
    assert_eq!(client.ledger().total().input_tokens, 5);

    // Reported: as the server says, not counted.
    let (base, _requests) = peer(vec![json_head(COMPLETION.len()), write(COMPLETION)]);
    let reply = client_for(&base, Duration::from_secs(5))
        .complete(ask(false), Evidence::detached())
        .await
        .expect("ok");
    assert!(!reply.usage.counted);
}
