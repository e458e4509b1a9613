//! `docs/getting-started.md` run as written: every command of its shell
//! blocks, in order, in a fresh directory, with `leasehold` on the `PATH`,
//! the files its TOML blocks say to write, against real peers — the demo's
//! OpenAI-compatible model server over HTTP and the MCP server
//! `@modelcontextprotocol/server-everything` over stdio, started with
//! `node` as the doc's flow starts "your" MCP server.
//!
//! What the doc leaves for the reader to fill in is replaced, and only
//! that ([`Fill`]): the endpoint's URL and model names, the API key, the
//! path of the MCP server, `RUN_ID`, and the server's port (7878 may be
//! taken on a test machine). A command the test has no expectation for
//! fails it: a command added to the doc is run here too, or the test says
//! which one it does not know.

mod support;

use std::path::Path;
use std::process::Stdio;

use leasehold_cli::demo::DemoStack;
use support::PATIENCE;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const DOC: &str = include_str!("../../docs/getting-started.md");

/// One fenced block of the doc. A TOML block's first line names the file
/// it is (`# my-flow.toml`, `# leasehold.toml`, `# in my-flow.toml, …`).
#[derive(Debug)]
struct Block {
    lang: String,
    text: String,
}

fn blocks(doc: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        if let Some(lang) = line.strip_prefix("```") {
            let mut text = String::new();
            for inner in lines.by_ref() {
                if inner.starts_with("```") {
                    break;
                }
                text.push_str(inner);
                text.push('\n');
            }
            blocks.push(Block {
                lang: lang.trim().to_owned(),
                text,
            });
        }
    }
    blocks
}

/// What the doc leaves to the reader, and what the test puts there.
struct Fill {
    pairs: Vec<(String, String)>,
}

impl Fill {
    fn apply(&self, text: &str) -> String {
        self.pairs
            .iter()
            .fold(text.to_owned(), |text, (from, to)| text.replace(from, to))
    }

    fn set(&mut self, from: &str, to: &str) {
        self.pairs.retain(|(f, _)| f != from);
        self.pairs.push((from.to_owned(), to.to_owned()));
    }
}

/// What a command of the doc is expected to do.
#[derive(Debug, PartialEq)]
enum Expect {
    /// Exit 0.
    Success,
    /// Exit 1, saying this (a command for a paused run, on a run that
    /// completed: it is refused for what the run is, never as a usage
    /// error).
    Refused(&'static str),
    /// Started in the background until the end: the server.
    Serves,
    /// Not run, for the reason given.
    Skipped(&'static str),
}

fn expectation(command: &str) -> Option<Expect> {
    let table: [(&str, Expect); 14] = [
        (
            "cargo install --path cli",
            Expect::Skipped("it compiles the binary this test runs"),
        ),
        ("leasehold demo", Expect::Success),
        ("leasehold --help", Expect::Success),
        ("leasehold config", Expect::Success),
        ("leasehold run my-flow.toml", Expect::Success),
        ("leasehold runs list", Expect::Success),
        ("leasehold runs show", Expect::Success),
        ("leasehold runs trace", Expect::Success),
        ("leasehold runs events", Expect::Success),
        ("leasehold runs resume", Expect::Refused("is completed")),
        (
            "leasehold runs reconcile",
            Expect::Refused("waits on no call"),
        ),
        ("leasehold --config leasehold.toml serve", Expect::Serves),
        ("curl -X POST", Expect::Success),
        ("curl -N", Expect::Success),
    ];
    table
        .into_iter()
        .find(|(start, _)| command.starts_with(start))
        .map(|(_, expect)| expect)
}

/// The command lines of a shell block: comments and blank lines dropped.
fn commands(block: &Block) -> Vec<String> {
    block
        .text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The evaluator's answers the doc shows (its `json` blocks, one answer a
/// line) are what the strict parsers take: each a verdict or a budget
/// decision, one of each at least; and llmock's default replies, which
/// the doc says are refused, are refused by both.
#[test]
fn the_evaluator_answers_the_doc_shows_are_accepted_and_llmocks_are_refused() {
    let answers: Vec<String> = blocks(DOC)
        .into_iter()
        .filter(|block| block.lang == "json")
        .flat_map(|block| commands(&block))
        .collect();
    let mut verdicts = 0;
    let mut decisions = 0;
    for answer in &answers {
        match (
            leasehold::parse_verdict(answer),
            leasehold::parse_budget_decision(answer),
        ) {
            (Ok(_), _) => verdicts += 1,
            (_, Ok(_)) => decisions += 1,
            (Err(verdict), Err(decision)) => panic!(
                "getting-started.md shows an evaluator answer that is refused: {answer}\n\
                 as a verdict: {verdict}\nas a budget decision: {decision}"
            ),
        }
    }
    assert!(
        verdicts >= 1 && decisions >= 1,
        "getting-started.md shows a verdict and a budget decision: {answers:#?}"
    );
    let said = "Hello! LLMock handled this request for my-model.";
    let prose = DOC.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        prose.contains(said),
        "the doc quotes llmock's default reply"
    );
    for reply in [
        said.to_owned(),
        serde_json::json!({"message": said}).to_string(),
    ] {
        assert!(leasehold::parse_verdict(&reply).is_err(), "{reply}");
        assert!(leasehold::parse_budget_decision(&reply).is_err(), "{reply}");
    }
}

/// `my-flow.toml` with its `[[tools]]` table replaced by `table`.
fn with_tools_table(flow: &str, table: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in flow.lines() {
        if line.trim() == "[[tools]]" {
            skipping = true;
            for kept in table.lines().filter(|l| !l.trim_start().starts_with('#')) {
                out.push_str(kept);
                out.push('\n');
            }
            continue;
        }
        if skipping && line.trim_start().starts_with('[') {
            skipping = false;
            out.push('\n');
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn bash(dir: &Path, bin: &Path, env: &[(String, String)], line: &str) -> Command {
    let mut command = Command::new("bash");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    command
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getting_started_runs_as_written() {
    let everything = std::env::var("LEASEHOLD_PEER_SERVER_EVERYTHING")
        .expect("LEASEHOLD_PEER_SERVER_EVERYTHING: run the tests with scripts/test.sh");
    let stack = DemoStack::start().await.expect("the demo's model server");
    let dir = tempfile::tempdir().expect("dir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_leasehold"), bin.join("leasehold"))
        .expect("leasehold on the PATH");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work");
    let port = support::free_port();

    let mut fill = Fill {
        pairs: vec![
            (
                "http://127.0.0.1:8000/v1".to_owned(),
                stack.model_base_url().to_owned(),
            ),
            ("my-small-model".to_owned(), "leasehold-demo".to_owned()),
            ("my-model".to_owned(), "leasehold-demo".to_owned()),
            ("sk-…".to_owned(), "sk-getting-started".to_owned()),
            ("/path/to/your-mcp-server/index.js".to_owned(), everything),
            ("localhost:7878".to_owned(), format!("127.0.0.1:{port}")),
            (
                "cargo run -p leasehold-cli --".to_owned(),
                "leasehold".to_owned(),
            ),
        ],
    };
    let mut env: Vec<(String, String)> = vec![(
        "LEASEHOLD_SERVER_ADDR".to_owned(),
        format!("127.0.0.1:{port}"),
    )];
    let mut server: Option<Child> = None;
    let mut ran = Vec::new();

    for block in blocks(DOC) {
        match block.lang.as_str() {
            "toml" => {
                let text = fill.apply(&block.text);
                let first = text.lines().next().unwrap_or_default();
                if first.trim() == "# my-flow.toml" {
                    std::fs::write(work.join("my-flow.toml"), &text).expect("my-flow.toml");
                } else if first.trim() == "# leasehold.toml" {
                    std::fs::write(work.join("leasehold.toml"), &text).expect("leasehold.toml");
                } else if first.starts_with("# in my-flow.toml") {
                    let flow = std::fs::read_to_string(work.join("my-flow.toml")).expect("flow");
                    std::fs::write(work.join("my-flow.toml"), with_tools_table(&flow, &text))
                        .expect("my-flow.toml");
                } else {
                    panic!("a TOML block of getting-started.md the test cannot place: {block:?}");
                }
            }
            "sh" => {
                for written in commands(&block) {
                    let line = fill.apply(&written);
                    if let Some(assignment) = line.strip_prefix("export ") {
                        let assignment = assignment.split_whitespace().next().unwrap_or_default();
                        let (name, value) = assignment.split_once('=').expect("NAME=VALUE");
                        env.push((name.to_owned(), value.to_owned()));
                        continue;
                    }
                    let expect = expectation(&line).unwrap_or_else(|| {
                        panic!(
                            "getting-started.md runs `{written}`, which this test has no \
                             expectation for: add one"
                        )
                    });
                    ran.push(written.clone());
                    match expect {
                        Expect::Skipped(_) => {}
                        Expect::Serves => {
                            let mut child = bash(&work, &bin, &env, &line)
                                .process_group(0)
                                .stdout(Stdio::piped())
                                .stderr(Stdio::null())
                                .spawn()
                                .expect("serve");
                            let mut lines =
                                BufReader::new(child.stdout.take().expect("stdout")).lines();
                            let said = tokio::time::timeout(PATIENCE, lines.next_line())
                                .await
                                .expect("the server says where it listens")
                                .expect("read")
                                .expect("a line");
                            assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
                            tokio::spawn(async move {
                                while let Ok(Some(_)) = lines.next_line().await {}
                            });
                            server = Some(child);
                        }
                        Expect::Success | Expect::Refused(_) => {
                            let out = support::output_within(
                                &mut bash(&work, &bin, &env, &line),
                                PATIENCE,
                            )
                            .await;
                            let stdout = String::from_utf8_lossy(&out.stdout);
                            let stderr = String::from_utf8_lossy(&out.stderr);
                            match expect {
                                Expect::Refused(why) => {
                                    assert_eq!(
                                        out.status.code(),
                                        Some(1),
                                        "`{line}`:\n{stdout}\n{stderr}"
                                    );
                                    assert!(stderr.contains(why), "`{line}`: {stderr}");
                                }
                                _ => assert!(
                                    out.status.success(),
                                    "`{line}` failed ({:?}):\n{stdout}\n{stderr}",
                                    out.status.code()
                                ),
                            }
                            // The run a command made is the RUN_ID of the next.
                            if line.starts_with("leasehold run ") {
                                let run_id = run_id_in(&stderr, &stdout)
                                    .unwrap_or_else(|| panic!("a run id: {stderr}"));
                                fill.set("RUN_ID", &run_id);
                            }
                            if line.starts_with("curl -X POST") {
                                let posted: serde_json::Value =
                                    serde_json::from_str(&stdout).expect("the run as JSON");
                                let run_id =
                                    posted["run_id"].as_str().expect("a run id").to_owned();
                                fill.set("RUN_ID", &run_id);
                            }
                            if line.starts_with("curl -N") {
                                assert!(stdout.contains("event: end"), "{stdout}");
                                assert!(stdout.contains("completed"), "{stdout}");
                            }
                            if line.starts_with("leasehold runs events") {
                                assert!(stdout.contains("completed"), "{stdout}");
                                assert!(stderr.contains("ended: completed"), "{stderr}");
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    for must in [
        "leasehold config",
        "leasehold run my-flow.toml",
        "leasehold --config leasehold.toml serve",
        "curl -N",
        "leasehold runs events",
    ] {
        assert!(
            ran.iter().any(|c| c.starts_with(must)),
            "getting-started.md no longer runs `{must}`: {ran:#?}"
        );
    }
    // The server stops on SIGINT (Ctrl-C, to its process group) as the
    // doc says.
    let mut server = server.expect("the doc starts a server");
    let pid = server.id().expect("pid");
    let _ = std::process::Command::new("kill")
        .args(["-INT", "--", &format!("-{pid}")])
        .status();
    let ended = tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("the server stops on SIGINT")
        .expect("wait");
    assert_eq!(ended.code(), Some(130));
    stack.shutdown().await;
}

/// The run id a `leasehold run` printed.
fn run_id_in(stderr: &str, stdout: &str) -> Option<String> {
    stderr
        .split(|c: char| c.is_whitespace() || c == '`' || c == ',' || c == ':')
        .chain(stdout.split(|c: char| c.is_whitespace() || c == '"'))
        .find(|word| word.starts_with("run-") && word.len() > 20)
        .map(str::to_owned)
}
