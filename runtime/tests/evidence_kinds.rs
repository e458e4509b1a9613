//! Evidence that knows what it is worth, against real peers.
//!
//! - A wedged provider: a real OpenAI-compatible server (a few lines of
//!   Python, a child process) that keeps a stream open with `: ping`
//!   comments, empty deltas, role-only and usage-only chunks, and never a
//!   token. Its keepalives show the connection is open and nothing more: no
//!   expiry is renewed on evidence, and the evaluator is asked at the first
//!   expiry past the free ladder — where, if every chunk counted, the
//!   evidence would renew the call ten times first.
//! - The same server, once it starts sending tokens, is alive: its text is
//!   evidence, and renews.
//!
//! Real I/O on real time with short leases (400 ms).

use std::sync::Arc;
use std::time::Duration;

#[path = "support/python.rs"]
mod support;

use leasehold::{
    ChatMessage, DecidedBy, LeaseError, LeaseHandle, LeaseKind, LeaseSpec, ModelClient,
    ModelRequest, Supervision, SupervisionConfig, Verdict, VerdictRecord,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
    testing::{RecordingSink, ScriptedEvaluator},
};
use support::PythonPeer;

/// An OpenAI-compatible server that answers every chat completion with a
/// stream of keepalives, one every 100 ms, cycling through an SSE comment,
/// an empty delta, a role-only chunk and a usage-only chunk. With a first
/// argument `N > 0`, the stream sends a token every 100 ms after its first
/// `N` keepalives, and ends after 30 of them. Prints its port, then serves
/// until killed.
const KEEPALIVE_SERVER: &str = r#"
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS_AFTER = int(sys.argv[1])
KEEPALIVES = [
    b": ping\n\n",
    b'data: {"choices":[{"index":0,"delta":{}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}\n\n',
]

def token(n):
    chunk = {"choices": [{"index": 0, "delta": {"content": f"word{n} "}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        n = 0
        try:
            while True:
                if TOKENS_AFTER and n >= TOKENS_AFTER:
                    self.wfile.write(token(n))
                    if n >= TOKENS_AFTER + 30:
                        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                        self.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\n")
                        self.wfile.write(b"data: [DONE]\n\n")
                        self.wfile.flush()
                        return
                else:
                    self.wfile.write(KEEPALIVES[n % len(KEEPALIVES)])
                self.wfile.flush()
                n += 1
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

struct Rig {
    supervision: Supervision,
    events: RecordingSink,
    evaluator: ScriptedEvaluator,
}

/// Two free renewals, and a streak of ten evidence renewals before the
/// evaluator is asked anyway; the evaluator always says INTERVENE.
async fn rig() -> Rig {
    let events = RecordingSink::new();
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = SupervisionConfig::default();
    config.watchdog.free_renewals = 2;
    config.watchdog.evidence_renewals = 10;
    config.lease.max_renewals = 30;
    let supervision = Supervision::start(
        config,
        Some(Arc::new(evaluator.clone())),
        Arc::new(events.clone()),
    )
    .await
    .expect("supervision starts");
    Rig {
        supervision,
        events,
        evaluator,
    }
}

/// One streamed call to the server at `base`, supervised by `rig` under
/// a 400 ms lease.
fn supervised(
    rig: &Rig,
    base: &str,
) -> LeaseHandle<Result<leasehold::ModelReply, leasehold::ModelError>> {
    let client = OpenAiClient::new(ModelSettings::new(ModelEndpoint::new(base, "wedged")))
        .expect("a client");
    let request = ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![ChatMessage::user("hello")],
        tools: Vec::new(),
        stream: true,
        consumer: "run".into(),
    };
    rig.supervision
        .leases
        .supervise(lease(), move |evidence| client.complete(request, evidence))
        .expect("started")
}

fn lease() -> LeaseSpec {
    LeaseSpec::new(LeaseKind::ModelStream, "model", Duration::from_millis(400))
        .expect("a valid lease")
        .with_max_renewals(30)
        .in_run("run-keepalive", "run/model_call:1")
}

fn decided(verdicts: &[VerdictRecord]) -> Vec<(Verdict, DecidedBy)> {
    verdicts.iter().map(|v| (v.verdict, v.decided_by)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_keepalives_earns_no_renewal_on_evidence_and_reaches_the_evaluator_past_the_ladder()
 {
    let server = PythonPeer::start(KEEPALIVE_SERVER, &["0"]);
    let rig = rig().await;
    let handle = supervised(&rig, &server.base);
    let outcome = handle.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    let verdicts = rig.events.verdicts();
    assert_eq!(
        decided(&verdicts),
        [
            (Verdict::Renew, DecidedBy::Ladder),
            (Verdict::Renew, DecidedBy::Ladder),
            (Verdict::Intervene, DecidedBy::Evaluator),
        ],
        "{verdicts:#?}"
    );
    assert_eq!(rig.evaluator.calls(), 1);
    // The evaluator was shown what the stream was: keepalives, no item of
    // evidence, no phi.
    let shown = &rig.evaluator.requests()[0].evidence;
    assert_eq!(shown.count, 0, "{shown:?}");
    assert_eq!(shown.phi, None, "{shown:?}");
    assert!(shown.kinds.keepalive >= 6, "{shown:?}");
    assert!(shown.keepalive_age_ms.is_some(), "{shown:?}");
    assert_eq!(
        (
            shown.kinds.text,
            shown.kinds.reasoning,
            shown.kinds.tool_call
        ),
        (0, 0, 0),
        "{shown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_stream_once_it_sends_tokens_is_renewed_on_its_text() {
    // Eight keepalives (800 ms), then 30 tokens 100 ms apart (3 s) under
    // the 400 ms lease: the ladder, then renewals on the text's evidence,
    // and the answer whole.
    let server = PythonPeer::start(KEEPALIVE_SERVER, &["8"]);
    let rig = rig().await;
    let handle = supervised(&rig, &server.base);
    let reply = handle
        .outcome()
        .await
        .expect("not ended by the lease")
        .expect("the stream answered");
    assert!(reply.content.starts_with("word8 word9 "), "{reply:?}");
    let verdicts = rig.events.verdicts();
    assert!(
        verdicts
            .iter()
            .any(|v| v.decided_by == DecidedBy::Evidence && v.evidence.kinds.text > 0),
        "{verdicts:#?}"
    );
    assert_eq!(rig.evaluator.calls(), 0, "{verdicts:#?}");
}
