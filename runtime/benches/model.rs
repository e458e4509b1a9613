//! Streaming overhead of the model client, against a bare reqwest read of
//! the same stream measured in the same run.
//!
//! ```sh
//! eval "$(bash scripts/peers.sh)"      # sets LEASEHOLD_PEER_LLMOCK
//! cargo bench -p leasehold --bench model                # about a minute and a half
//! cargo bench -p leasehold --bench model -- rounds=10   # shorter
//! ```
//!
//! One llmock server (an OpenAI-compatible mock) answers every request with
//! the same streamed completion of 200 words (about 203 SSE chunks). Each
//! round reads it once through leasehold's client — `OpenAiClient::stream`
//! inside `Leases::supervise`, so every chunk goes through the SSE decoder,
//! the idle timer and the lease's evidence cell — and once with a bare
//! reqwest read that only looks for the first word and for `[DONE]`; and,
//! to tell the client's share from the lease's, once through the client
//! without a lease. The order of the three rotates from round to round. Two
//! settings: chunks sent back to back (the client's own cost shows most),
//! and chunks 2 ms apart (a model generating quickly).
//!
//! Measured: time to first token (the first word's arrival, as text to the
//! caller) and time to last token (`[DONE]`), median over the rounds, after
//! two warm-up rounds. Target: leasehold ≤ 1.05× the bare read on both.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{
    ChatMessage, EventBus, Evidence, LeaseKind, Leases, ModelRequest, Supervision,
    SupervisionConfig,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
};
use serde_json::{Value, json};

#[path = "../../actors/benches/support/machine.rs"]
mod machine;
use machine::{cpu_model, load_average};

const WORDS: usize = 200;
const WARM_UP: usize = 2;
const TARGET: f64 = 1.05;

/// One llmock server, killed by its process id when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(chunk_delay_ms: u64) -> Self {
        let executable = std::env::var_os("LEASEHOLD_PEER_LLMOCK")
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "LEASEHOLD_PEER_LLMOCK is not set: run `eval \"$(bash scripts/peers.sh)\"` \
                     first, which installs the peers"
                )
            });
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(executable)
            .args(["serve", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--log-level", "warning", "--stream-chunk-delay-ms"])
            .arg(chunk_delay_ms.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("llmock starts");
        Self { child, port }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    async fn ready(&self, http: &reqwest::Client) {
        let started = Instant::now();
        let health = format!("http://127.0.0.1:{}/health", self.port);
        while !http
            .get(&health)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "llmock did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every request gets the same 200-word answer.
        let text = (0..WORDS)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let scenario = json!({"behaviors": [{"type": "reply", "text": text, "times": null}]});
        let response = http
            .post(format!("http://127.0.0.1:{}/_llmock/scenario", self.port))
            .json(&scenario)
            .send()
            .await
            .expect("scenario accepted");
        assert!(response.status().is_success());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Time to first token and to last token of one read.
#[derive(Clone, Copy, Debug)]
struct Read {
    first: Duration,
    last: Duration,
}

fn request() -> ModelRequest {
    ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![ChatMessage::user("Say two hundred words.")],
        tools: Vec::new(),
        stream: true,
        consumer: "run".into(),
    }
}

async fn through_leasehold(client: &OpenAiClient, leases: &Leases) -> Read {
    let spec = SupervisionConfig::default()
        .lease
        .spec(LeaseKind::ModelStream, "bench")
        .expect("spec");
    let client = client.clone();
    let started = Instant::now();
    let handle = leases
        .supervise(spec, move |evidence: Evidence| async move {
            let mut stream = client.stream(request(), evidence).await.expect("opened");
            let mut first = None;
            while let Some(text) = stream.next_text().await.expect("a chunk") {
                if first.is_none() && !text.is_empty() {
                    first = Some(started.elapsed());
                }
            }
            let reply = stream.finish().await.expect("whole");
            let last = started.elapsed();
            assert!(reply.content.ends_with(&format!("w{}", WORDS - 1)));
            Read {
                first: first.expect("some text"),
                last,
            }
        })
        .expect("supervised");
    handle.outcome().await.expect("not ended by the lease")
}

async fn without_lease(client: &OpenAiClient) -> Read {
    let started = Instant::now();
    let mut stream = client
        .stream(request(), Evidence::detached())
        .await
        .expect("opened");
    let mut first = None;
    while let Some(text) = stream.next_text().await.expect("a chunk") {
        if first.is_none() && !text.is_empty() {
            first = Some(started.elapsed());
        }
    }
    stream.finish().await.expect("whole");
    Read {
        first: first.expect("some text"),
        last: started.elapsed(),
    }
}

async fn bare(http: &reqwest::Client, url: &str, body: &Value) -> Read {
    let started = Instant::now();
    let mut response = http.post(url).json(body).send().await.expect("sent");
    let mut first = None;
    let mut tail: Vec<u8> = Vec::new();
    while let Some(chunk) = response.chunk().await.expect("a chunk") {
        // The markers may straddle two reads: look at the end of the last
        // read too.
        tail.extend_from_slice(&chunk);
        if first.is_none() && contains(&tail, br#""content":"w"#) {
            first = Some(started.elapsed());
        }
        if contains(&tail, b"data: [DONE]") {
            break;
        }
        let keep = tail.len().saturating_sub(16);
        tail.drain(..keep);
    }
    Read {
        first: first.expect("some text"),
        last: started.elapsed(),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `median [p25–p75]` in milliseconds.
fn spread((median, p25, p75): (Duration, Duration, Duration)) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!("{:>8.3} ms [{:.3}–{:.3}]", ms(median), ms(p25), ms(p75))
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn verdict(ratio: f64) -> &'static str {
    if ratio <= TARGET { "PASS" } else { "MISS" }
}

async fn measure(chunk_delay_ms: u64, rounds: usize) -> bool {
    let server = Server::start(chunk_delay_ms);
    let http = reqwest::Client::new();
    server.ready(&http).await;
    let settings = ModelSettings::new(ModelEndpoint::new(server.base_url(), "bench"));
    let client = OpenAiClient::new(settings).expect("client");
    let supervision = Supervision::start(
        SupervisionConfig::default(),
        None,
        Arc::new(EventBus::new()),
    )
    .await
    .expect("supervision");
    let url = format!("{}/chat/completions", server.base_url());
    let body = json!({
        "model": "bench",
        "messages": [{"role": "user", "content": "Say two hundred words."}],
        "stream": true,
        "stream_options": {"include_usage": true},
    });

    // Three readers per round, in a rotating order: leasehold under a
    // lease (the figure with the target), the same client without a lease
    // (to tell the client's share from the lease's), the bare read.
    let (mut ours, mut unleased, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..WARM_UP + rounds {
        let mut reads = [None; 3];
        for k in 0..3 {
            let which = (round + k) % 3;
            reads[which] = Some(match which {
                0 => through_leasehold(&client, &supervision.leases).await,
                1 => without_lease(&client).await,
                _ => bare(&http, &url, &body).await,
            });
        }
        if round >= WARM_UP {
            let [a, b, c] = reads.map(|r| r.expect("each reader ran"));
            ours.push(a);
            unleased.push(b);
            theirs.push(c);
        }
    }
    supervision.stop();

    let column = |reads: &[Read], pick: fn(&Read) -> Duration| {
        let mut values: Vec<Duration> = reads.iter().map(pick).collect();
        values.sort_unstable();
        let at = |q: usize| values[(values.len() - 1) * q / 4];
        (at(2), at(1), at(3))
    };
    println!(
        "{WORDS} words, chunks {chunk_delay_ms} ms apart, {rounds} rounds (+{WARM_UP} warm-up), rotating; median [p25–p75]"
    );
    let mut met = true;
    for (what, pick) in [
        (
            "time to first token",
            (|r: &Read| r.first) as fn(&Read) -> Duration,
        ),
        ("time to last token ", |r: &Read| r.last),
    ] {
        let (leased, client_only, base) = (
            column(&ours, pick),
            column(&unleased, pick),
            column(&theirs, pick),
        );
        let r = ratio(leased.0, base.0);
        met &= r <= TARGET;
        println!(
            "   {what}   leasehold {}   bare reqwest {}   ratio {r:.3}x   {}",
            spread(leased),
            spread(base),
            verdict(r)
        );
        println!(
            "      the client without a lease {}   ratio {:.3}x",
            spread(client_only),
            ratio(client_only.0, base.0)
        );
    }
    met
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds = std::env::args()
        .find_map(|a| a.strip_prefix("rounds=").and_then(|n| n.parse().ok()))
        .unwrap_or(30);
    println!(
        "machine: {} cpus, {}, load average {}",
        std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get),
        cpu_model(),
        load_average()
    );
    println!("target: leasehold <= {TARGET:.2}x the bare read, medians\n");
    let mut all = true;
    for delay in [0, 2] {
        all &= measure(delay, rounds).await;
        println!();
    }
    println!("overall: {}", if all { "PASS" } else { "MISS" });
}
