//! Every key a flow file may hold, with what it takes, its default and what
//! it means: the source of the key reference in `docs/flows.md`
//! ([`keys_table`]). Tests parse a flow holding every key of the table
//! (so each is a real key), check that the flow written back holds no key
//! the table lacks, and that every public field of the flow's types is in
//! the table, so the reference cannot fall behind them.

/// One key of a flow file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowKey {
    /// Its path: `leases.tool_call`, `tools[].command` (a key of each
    /// `[[tools]]` entry), `workers.<kind>.prompt` (of each worker kind).
    pub key: &'static str,
    /// What it takes.
    pub takes: &'static str,
    /// Its value when the flow leaves it out.
    pub default: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// A value it takes, written in TOML.
    pub sample: &'static str,
}

const fn key(
    key: &'static str,
    takes: &'static str,
    default: &'static str,
    meaning: &'static str,
    sample: &'static str,
) -> FlowKey {
    FlowKey {
        key,
        takes,
        default,
        meaning,
        sample,
    }
}

/// Every key of a flow file, in the order of the reference.
pub const FLOW_KEYS: &[FlowKey] = &[
    key(
        "name",
        "text",
        "(required)",
        "the flow's name, shown in events, listings and the dashboard",
        "\"triage\"",
    ),
    key(
        "task",
        "text",
        "(required)",
        "what the run is asked to do: the root loop's first user message",
        "\"Say what is wrong.\"",
    ),
    key(
        "system_prompt",
        "text",
        "empty",
        "the root loop's system prompt",
        "\"You triage incidents.\"",
    ),
    key(
        "max_steps",
        "count",
        "(required)",
        "steps of the root loop; 0 = unlimited (a budget checkpoint decides past it)",
        "20",
    ),
    key(
        "stream",
        "true or false",
        "true",
        "stream model answers (lease kind `model_stream`, each chunk evidence) or wait for them whole (`model_blocking`)",
        "true",
    ),
    key(
        "max_tokens",
        "1 to 1000000",
        "`model.max_tokens`",
        "the most tokens one model answer of the root loop (and of workers that set none) may hold, sent as `max_tokens`; a cut-off answer is continued in the next step",
        "4096",
    ),
    key(
        "milestones",
        "list of names",
        "none",
        "milestones the root loop reports as it reaches them (`complete_milestone`), shown to budget checkpoints",
        "[\"cause found\"]",
    ),
    key(
        "retention",
        "duration",
        "`executor.retention`",
        "how long the run is kept once finished; may shorten the configuration's, never lengthen it",
        "\"7days\"",
    ),
    key(
        "notify",
        "list of receiver names",
        "none",
        "webhook receivers of the configuration (`[webhooks.receivers.NAME]`) told when the run pauses or ends, besides those told of every run; at most 16",
        "[\"pager\"]",
    ),
    key(
        "keyed_limits.<limit>.live",
        "count, at most the server's",
        "the server's",
        "at most this many of the flow's runs live among those of one value of the key of the server's keyed limit `<limit>` (`[keyed_limits.<limit>]`); only a limit the server has and a field it sets, never over its number: a flow beyond what the server allows is refused",
        "5",
    ),
    key(
        "keyed_limits.<limit>.per_minute",
        "count, at most the server's",
        "the server's",
        "at most this many of the flow's runs started in any minute among those of one value of the key of the server's keyed limit `<limit>`; as `live`",
        "10",
    ),
    key(
        "tools[].name",
        "text",
        "(required)",
        "the MCP server's name, unique in the flow; workers name it in `tools`",
        "\"ops\"",
    ),
    key(
        "tools[].command",
        "program and arguments",
        "none",
        "a stdio MCP server started for the run; an argument written `{ secret = \"…\" }` is shown as `***`",
        "[\"node\", \"server.js\"]",
    ),
    key(
        "tools[].url",
        "http:// or https:// URL",
        "none",
        "a streamable-HTTP MCP server; with neither `command` nor `url` the entry names a server the runtime provides (the configuration's `[[tools]]`)",
        "\"http://127.0.0.1:9000/mcp\"",
    ),
    key(
        "tools[].env",
        "table of text",
        "none",
        "environment of a `command` server, beside its command only",
        "{ LOG_LEVEL = \"warn\" }",
    ),
    key(
        "tools[].idempotent",
        "table of true or false",
        "none",
        "tools safe to call twice with the same idempotency key: a restart retries them; others of unknown outcome wait for a person. An entry naming a tool the server does not have says nothing of any call, and is warned of when the run connects to the server (a warning in the log naming the entry and the server's tools)",
        "{ search_logs = true }",
    ),
    key(
        "workers.<kind>.prompt",
        "text",
        "(required)",
        "the system prompt of workers of this kind",
        "\"You investigate one service.\"",
    ),
    key(
        "workers.<kind>.max_steps",
        "count",
        "(required)",
        "steps of each such worker's loop; 0 = unlimited",
        "10",
    ),
    key(
        "workers.<kind>.tools",
        "list of tool server names",
        "all the flow's",
        "the tool servers its workers may use",
        "[\"ops\"]",
    ),
    key(
        "workers.<kind>.milestones",
        "list of names",
        "none",
        "milestones its workers report",
        "[\"evidence\"]",
    ),
    key(
        "workers.<kind>.max_tokens",
        "1 to 1000000",
        "the flow's `max_tokens`",
        "the most tokens one answer of its workers may hold",
        "1024",
    ),
    key(
        "leases.model_stream",
        "duration",
        "`lease.model_stream`",
        "lease of a streaming model call",
        "\"2m\"",
    ),
    key(
        "leases.model_blocking",
        "duration",
        "`lease.model_blocking`",
        "lease of a blocking model call",
        "\"5m\"",
    ),
    key(
        "leases.tool_call",
        "duration",
        "`lease.tool_call`",
        "lease of a tool call",
        "\"90s\"",
    ),
    key(
        "leases.worker_step",
        "duration",
        "`lease.worker_step`",
        "lease of a worker's step",
        "\"10m\"",
    ),
    key(
        "leases.max_renewals",
        "count",
        "`lease.max_renewals`",
        "renewals a lease may have before its next expiry stops the operation",
        "10",
    ),
    key(
        "leases.free_renewals",
        "count",
        "`watchdog.free_renewals`",
        "expiries renewed on the ladder without asking the evaluator; at most `max_renewals`",
        "2",
    ),
    key(
        "leases.evidence_renewals",
        "count",
        "`watchdog.evidence_renewals`",
        "consecutive renewals on evidence alone before the evaluator is asked anyway",
        "3",
    ),
    key(
        "leases.policy",
        "policy, or per kind",
        "`watchdog.policy`",
        "the verdict policy: `leasehold`, `deadline`, `idle_kill`, `always_evaluate` or one the embedder registered, for every kind or per kind (`\"leasehold, tool_call = idle_kill\"`)",
        "\"leasehold\"",
    ),
    key(
        "leases.pace",
        "learn, reset or off",
        "learn",
        "what the run's leases do with each endpoint's learned pace: `learn` seeds each call with the pace the last runs of its key showed (once three runs taught it, or from this run's own earlier calls) and teaches it one sample a run; `reset` starts this run's calls cold and teaches as `learn` does, never resetting what other runs are judged by (`leasehold paces --reset KEY` does that); `off` neither uses nor teaches",
        "\"learn\"",
    ),
    key(
        "supervision.strategy",
        "restart or fail_fast",
        "restart",
        "what a supervisor does when a child fails",
        "\"restart\"",
    ),
    key(
        "supervision.max_restarts",
        "count",
        "`restart.max_restarts`",
        "restarts allowed within `window`",
        "3",
    ),
    key(
        "supervision.window",
        "duration",
        "`restart.window`",
        "the window `max_restarts` counts over",
        "\"10m\"",
    ),
    key(
        "supervision.backoff_initial",
        "duration",
        "`restart.backoff_initial`",
        "the first restart's backoff",
        "\"1s\"",
    ),
    key(
        "supervision.backoff_max",
        "duration",
        "`restart.backoff_max`",
        "the cap of the growing backoff; at least `backoff_initial`",
        "\"30s\"",
    ),
    key(
        "supervision.jitter",
        "share from 0 to 1",
        "0.1",
        "random spread of each backoff",
        "0.1",
    ),
    key(
        "supervision.on_exhausted",
        "pause or fail",
        "`restart.on_exhausted`",
        "what a failure that reaches the top of the tree does",
        "\"pause\"",
    ),
    key(
        "budget.max_extensions",
        "0 to 3",
        "`budget.max_extensions`",
        "budget extensions each loop may be granted at a checkpoint; may lower the cap, never raise it",
        "2",
    ),
    key(
        "budget.max_tokens",
        "count",
        "none",
        "the run's budget of tokens over its model calls: reaching it is a checkpoint",
        "200000",
    ),
    key(
        "budget.max_cost",
        "amount",
        "none",
        "the run's budget of money at the configured prices: reaching it is a checkpoint",
        "2.5",
    ),
    key(
        "spawn.max_per_answer",
        "count",
        "`spawn.max_per_answer`",
        "workers one model answer may spawn; may only lower the configuration's",
        "4",
    ),
    key(
        "spawn.max_per_run",
        "count",
        "`spawn.max_per_run`",
        "workers the whole run may start, restarts included",
        "32",
    ),
    key(
        "spawn.max_depth",
        "count",
        "`spawn.max_depth`",
        "how deep workers may nest: 1 lets the root spawn workers that spawn none",
        "2",
    ),
];

/// The line before the key table in `docs/flows.md`.
pub const FLOW_KEYS_START: &str =
    "<!-- flow keys: generated from runtime/src/flow_keys.rs; a test checks it -->";

/// The line after the key table in `docs/flows.md`.
pub const FLOW_KEYS_END: &str = "<!-- end flow keys -->";

/// The key reference as a Markdown table, as `docs/flows.md` holds it.
pub fn keys_table() -> String {
    let mut table = String::from("| key | takes | default | meaning |\n|---|---|---|---|\n");
    for k in FLOW_KEYS {
        table.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            k.key,
            k.takes,
            k.default,
            k.meaning.replace('|', "\\|")
        ));
    }
    table
}

/// A flow file (TOML) that sets every key of [`FLOW_KEYS`] to its sample:
/// one `[[tools]]` entry, one worker kind `w`.
pub fn sample_flow() -> String {
    let mut top = String::new();
    let mut tables: Vec<(String, String)> = Vec::new();
    for k in FLOW_KEYS {
        let (table, leaf) = if let Some(leaf) = k.key.strip_prefix("tools[].") {
            ("[[tools]]".to_owned(), leaf)
        } else if let Some(leaf) = k.key.strip_prefix("workers.<kind>.") {
            ("[workers.w]".to_owned(), leaf)
        } else if let Some(leaf) = k.key.strip_prefix("keyed_limits.<limit>.") {
            ("[keyed_limits.provider]".to_owned(), leaf)
        } else if let Some((table, leaf)) = k.key.split_once('.') {
            (format!("[{table}]"), leaf)
        } else {
            top.push_str(&format!("{} = {}\n", k.key, k.sample));
            continue;
        };
        let line = format!("{leaf} = {}\n", k.sample);
        match tables.iter_mut().find(|(name, _)| *name == table) {
            Some((_, body)) => body.push_str(&line),
            None => tables.push((table, line)),
        }
    }
    for (name, body) in tables {
        top.push_str(&format!("\n{name}\n{body}"));
    }
    top
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use leasehold_actors::Flow;

    /// The key paths of `value`, as the table writes them.
    fn paths(value: &serde_json::Value, at: &str, out: &mut BTreeSet<String>) {
        let known: BTreeSet<&str> = FLOW_KEYS.iter().map(|k| k.key).collect();
        match value {
            serde_json::Value::Object(map) => {
                for (name, inner) in map {
                    let path = match at {
                        "" => name.clone(),
                        "workers" => "workers.<kind>".to_owned(),
                        "keyed_limits" => "keyed_limits.<limit>".to_owned(),
                        _ => format!("{at}.{name}"),
                    };
                    if known.contains(path.as_str()) {
                        out.insert(path);
                    } else {
                        paths(inner, &path, out);
                    }
                }
            }
            serde_json::Value::Array(items) if at == "tools" => {
                for item in items {
                    paths(item, "tools[]", out);
                }
            }
            _ => {
                out.insert(at.to_owned());
            }
        }
    }

    #[test]
    fn the_reference_names_every_key_a_flow_holds_and_no_other() {
        let text = sample_flow();
        let flow: Flow = toml::from_str(&text)
            .unwrap_or_else(|e| panic!("a key of the reference is no flow key: {e}\n{text}"));
        let mut held = BTreeSet::new();
        paths(&serde_json::to_value(&flow).expect("json"), "", &mut held);
        let listed: BTreeSet<String> = FLOW_KEYS.iter().map(|k| k.key.to_owned()).collect();
        assert_eq!(
            held, listed,
            "the flow, written back, holds these keys; FLOW_KEYS lists the others"
        );
    }

    /// The `pub` fields of `pub struct NAME` in `source`.
    fn fields_of(source: &str, name: &str) -> Vec<String> {
        let start = source
            .find(&format!("pub struct {name} {{"))
            .unwrap_or_else(|| panic!("no struct {name}"));
        let body = &source[start..];
        let body = &body[..body.find("\n}").expect("its end")];
        body.lines()
            .filter_map(|line| line.trim().strip_prefix("pub "))
            .filter_map(|rest| {
                rest.split_once(':')
                    .map(|(field, _)| field.trim().to_owned())
            })
            .filter(|field| !field.contains(' '))
            .collect()
    }

    #[test]
    fn every_field_of_the_flows_types_is_in_the_reference() {
        let flow = include_str!("../../actors/src/flow.rs");
        let overrides = include_str!("../../actors/src/flow/overrides.rs");
        let keyed = include_str!("../../actors/src/keyed_limits.rs");
        let listed: BTreeSet<&str> = FLOW_KEYS.iter().map(|k| k.key).collect();
        let tables = [
            (flow, "Flow", ""),
            (flow, "ToolServer", "tools[]."),
            (flow, "WorkerKind", "workers.<kind>."),
            (overrides, "LeaseOverrides", "leases."),
            (overrides, "SupervisionOverrides", "supervision."),
            (overrides, "BudgetOverrides", "budget."),
            (overrides, "SpawnOverrides", "spawn."),
            (keyed, "FlowKeyedLimit", "keyed_limits.<limit>."),
        ];
        let sections = [
            "tools",
            "workers",
            "leases",
            "supervision",
            "budget",
            "spawn",
            "keyed_limits",
        ];
        for (source, name, prefix) in tables {
            let fields = fields_of(source, name);
            assert!(!fields.is_empty(), "{name} has fields");
            for field in fields {
                if prefix.is_empty() && sections.contains(&field.as_str()) {
                    continue;
                }
                let key = format!("{prefix}{field}");
                assert!(
                    listed.contains(key.as_str()),
                    "{name}.{field} is a key of a flow file that FLOW_KEYS does not describe: add `{key}`"
                );
            }
        }
    }

    #[test]
    fn the_key_table_of_docs_flows_md_is_the_one_the_code_writes() {
        let doc = include_str!("../../docs/flows.md");
        let start = doc
            .find(FLOW_KEYS_START)
            .expect("docs/flows.md marks its table's start");
        let end = doc
            .find(FLOW_KEYS_END)
            .expect("docs/flows.md marks its table's end");
        let table = doc[start + FLOW_KEYS_START.len()..end].trim_start_matches('\n');
        assert_eq!(
            table,
            keys_table(),
            "put the table keys_table() writes between the markers of docs/flows.md"
        );
    }
}
