//! No configuration or workload value reaches a panic where it is printed:
//! `leasehold config` and the experiment's table, CSV, JSON and plots lay
//! out values of any length and content (a run-time `format!` width above
//! `u16::MAX` panicked), a long value overflows its own line only, and a
//! control character is shown escaped. Property tests over long and
//! arbitrary strings, and the reported cases through the real binary.

use std::process::{Command, Output};

use leasehold::config::Config;
use leasehold::printable::{is_unprintable, printable};
use leasehold_cli::cli::describe_config;
use leasehold_lab::{MAX_LABEL, Report, StrategyReport, tradeoff_svg, wasted_svg};
use proptest::prelude::*;

/// The widest a line of `leasehold config` gets without a long value in it
/// (the timing lines are about 210 characters).
const SHORT_LINE: usize = 512;

/// Strings that break layouts: very long ones, control characters, wide
/// and combining characters, and anything at all.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        ("[a-zé漢\u{301}]{1,3}", 20_000..70_001usize)
            .prop_map(|(piece, times)| piece.repeat(times)),
        "[\\x00-\\x1f\\x7f\u{85}a,]{0,64}",
        Just("\u{1b}]0;owned\u{7}\u{1b}[2J\nforged row".to_owned()),
    ]
}

/// A configuration file setting `key` (`section.name` or `name`) to the
/// TOML string `value`.
fn config_text(key: &str, value: &str) -> String {
    let value = toml::Value::String(value.to_owned()).to_string();
    match key.split_once('.') {
        Some((section, name)) => format!("[{section}]\n{name} = {value}\n"),
        None => format!("{key} = {value}\n"),
    }
}

/// `text` as `leasehold config` and the table print it: every character a
/// terminal acts on (controls, direction marks, line separators) escaped.
fn printed(text: &str) -> String {
    printable(text).into_owned()
}

/// The lines of `leasehold config`'s output hold no raw control
/// character, and only the few that hold the long value (its key's line,
/// a warning quoting it, a tool server's line) are long: a long value is
/// not padding on every other line. A long line is never a header (`#`),
/// unless it is the line of a tool server whose name is `tool`, which
/// may start with `#` itself.
fn check_layout(out: &str, tool: Option<&str>) -> Result<(), TestCaseError> {
    let tool: Option<String> = tool.map(|name| printed(name).chars().take(8).collect());
    let mut long = 0;
    for line in out.lines() {
        prop_assert!(!line.contains(is_unprintable), "{line:?}");
        if line.chars().count() > SHORT_LINE {
            long += 1;
            let the_tools = tool.as_deref().is_some_and(|name| line.starts_with(name));
            prop_assert!(!line.starts_with('#') || the_tools, "{line}");
        }
    }
    prop_assert!(long <= 3, "{long} long lines");
    Ok(())
}

/// A report of one strategy per name, with the given figures.
fn report(names: &[String], figures: (u64, u64, Option<u64>, f64)) -> Report {
    let (lease_ms, wasted_tokens, detect_ms, share) = figures;
    let strategies = names
        .iter()
        .map(|name| StrategyReport {
            name: name.clone(),
            policy: "deadline".to_owned(),
            lease_ms,
            max_renewals: 10,
            free_renewals: 2,
            max_restarts: 3,
            supervision: "restart".to_owned(),
            alive: 4,
            slow_alive_killed: 1,
            slow_alive_killed_share: share,
            hangs: 1,
            hangs_detected: 1,
            detect_p50_ms: detect_ms,
            detect_p99_ms: detect_ms,
            dead_endpoints: 0,
            dead_endpoints_answered: 0,
            budget_extended: 0,
            budget_wrapped_up: 0,
            kills: 1,
            wasted_tokens,
            wasted_tool_ms: lease_ms,
            evaluator_calls: 1,
            evaluator_tokens: 100,
            evaluator_cost: 0.5,
            runs_completed: 5,
            runs_paused: 0,
            runs_failed: 0,
            virtual_time_ms: lease_ms,
        })
        .collect();
    Report {
        seed: 1,
        operations: 5,
        strategies,
    }
}

/// Every printed form of `report`: the table lays each name out as text on
/// its row, with the other rows short; the CSV and JSON give each name back
/// whole; the plots label each with at most [`MAX_LABEL`] characters and
/// hold no control character.
fn check_report(report: &Report) -> Result<(), TestCaseError> {
    let table = report.to_table();
    prop_assert_eq!(table.lines().count(), report.strategies.len() + 2);
    for (line, strategy) in table.lines().skip(2).zip(&report.strategies) {
        let name = printed(&strategy.name);
        prop_assert!(line.starts_with(name.trim_end()), "{}", strategy.name);
        prop_assert!(!line.contains(is_unprintable));
    }
    let header = table.lines().nth(1).unwrap_or_default();
    prop_assert!(header.chars().count() < SHORT_LINE);

    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("JSON");
    let csv = report.to_csv().expect("CSV");
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let names: Vec<String> = rows
        .records()
        .map(|r| r.expect("a CSV row")[0].to_owned())
        .collect();
    for (i, strategy) in report.strategies.iter().enumerate() {
        prop_assert_eq!(&json["strategies"][i]["name"], &strategy.name);
        prop_assert_eq!(&names[i], &strategy.name);
    }

    for svg in [
        tradeoff_svg(report).expect("the trade-off plot"),
        wasted_svg(report).expect("the wasted plot"),
    ] {
        prop_assert!(svg.starts_with("<svg"));
        prop_assert!(!svg.contains(|c: char| c.is_control() && c != '\n'));
        for strategy in &report.strategies {
            if strategy.name.chars().count() > MAX_LABEL {
                prop_assert!(!svg.contains(&strategy.name));
            }
        }
        // Each label is cut, so the picture stays small.
        prop_assert!(svg.len() < 64 * 1024 + report.strategies.len() * 4 * MAX_LABEL * 6);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_configuration_value_is_printed_by_leasehold_config_without_panic(
        key in proptest::sample::select(
            Config::keys().iter().filter(|k| !k.file.is_empty()).map(|k| k.file).collect::<Vec<_>>()
        ),
        value in hostile(),
    ) {
        match Config::from_toml_str(&config_text(key, &value)) {
            Ok(config) => check_layout(&describe_config(&config), None)?,
            // A refusal is text too, naming the key.
            Err(refused) => prop_assert!(refused.to_string().contains(key)),
        }
    }

    #[test]
    fn every_tool_server_declaration_is_printed_by_leasehold_config_without_panic(
        name in hostile(),
        argument in hostile(),
    ) {
        let declaration = format!(
            "[[tools]]\nname = {}\ncommand = [\"server\", {}]\n",
            toml::Value::String(name.clone()),
            toml::Value::String(argument),
        );
        match Config::from_toml_str(&declaration) {
            Ok(config) => check_layout(&describe_config(&config), Some(&name))?,
            Err(refused) => prop_assert!(refused.to_string().contains("tools")),
        }
    }

    #[test]
    fn every_strategy_name_and_figure_is_printed_in_the_report_without_panic(
        names in proptest::collection::vec(hostile(), 1..4),
        lease_ms in any::<u64>(),
        wasted_tokens in any::<u64>(),
        detect_ms in proptest::option::of(any::<u64>()),
        share in 0.0..=1.0f64,
    ) {
        check_report(&report(&names, (lease_ms, wasted_tokens, detect_ms, share)))?;
    }
}

/// A case found by the property above: a line separator (escaped by the
/// table, as a terminal would break the line on it) before a character
/// with a decomposed form.
#[test]
fn a_strategy_named_with_a_line_separator_is_printed_escaped_on_its_row() {
    let names = ["\u{2028}\u{FB1D}".to_owned(), "b\u{2029}".to_owned()];
    check_report(&report(&names, (1, 2, Some(3), 0.5))).expect("laid out");
    let table = report(&names, (1, 2, Some(3), 0.5)).to_table();
    assert!(
        table
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("\\u{2028}\u{FB1D}"),
        "{table}"
    );
}

#[test]
fn every_string_key_takes_a_70000_character_value_and_prints_it_on_its_own_line() {
    let long = "m".repeat(70_000);
    for key in Config::keys().iter().filter(|k| !k.file.is_empty()) {
        let Ok(config) = Config::from_toml_str(&config_text(key.file, &long)) else {
            continue;
        };
        let out = describe_config(&config);
        check_layout(&out, None).expect("laid out");
        // Printed once, not as padding of every other line.
        assert!(
            out.len() < 2 * long.len(),
            "{}: {} bytes",
            key.file,
            out.len()
        );
    }
}

fn leasehold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env_remove("LEASEHOLD_CONFIG")
        .output()
        .expect("leasehold runs")
}

/// `leasehold config` with `text` as its file: it succeeds, prints the
/// value `shown` whole on its own line, and the output is the value plus
/// the usual few kilobytes, not the value times the lines.
fn config_prints(text: &str, key: &str, shown: &str) {
    // Each line starts with the key's file name and a space.
    let start = format!("{key} ");
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("leasehold.toml");
    std::fs::write(&file, text).expect("written");
    let output = leasehold(&["config", "--config", file.to_str().expect("utf-8")]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out = String::from_utf8(output.stdout).expect("utf-8");
    let line = out
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no {key} line"));
    assert!(line.contains(shown), "{key} is not printed whole");
    assert!(out.len() < shown.len() + 16 * 1024, "{} bytes", out.len());
    for other in out.lines().filter(|l| !l.starts_with(&start)) {
        assert!(other.chars().count() < SHORT_LINE, "{other}");
    }
}

#[test]
fn leasehold_config_prints_a_70000_character_model_name() {
    let name = "m".repeat(70_000);
    config_prints(
        &format!("[model]\nname = \"{name}\"\n"),
        "model.name",
        &name,
    );
}

#[test]
fn leasehold_config_prints_6000_allowed_hosts() {
    let hosts: Vec<String> = (0..6_000).map(|i| format!("h{i}.example")).collect();
    let hosts = hosts.join(",");
    config_prints(
        &format!("[server]\nallowed_hosts = \"{hosts}\"\n"),
        "server.allowed_hosts",
        &hosts,
    );
}

#[test]
fn leasehold_experiment_reports_a_70000_character_strategy_name() {
    let name = "s".repeat(70_000);
    let dir = tempfile::tempdir().expect("dir");
    let workload = dir.path().join("w.toml");
    std::fs::write(
        &workload,
        format!(
            "seed = 1\n[model_streams]\ncount = 2\n\
             duration = {{ dist = \"fixed\", value = \"3s\" }}\nchunk_interval = \"500ms\"\n\
             [[strategies]]\nname = \"{name}\"\npolicy = \"deadline\"\n"
        ),
    )
    .expect("written");
    let out = dir.path().join("out");
    let args = [
        "experiment",
        workload.to_str().expect("utf-8"),
        "--strategies",
        &format!("leasehold,{name}"),
        "--out",
        out.to_str().expect("utf-8"),
    ];
    let output = leasehold(&args);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "a title, the header and two rows");
    assert!(lines[3].starts_with(&name));
    // The other rows are not padded to the long name.
    for line in &lines[..3] {
        assert!(line.chars().count() < SHORT_LINE, "{line}");
    }
    assert!(table.len() < name.len() + 4 * 1024);

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("report.json"))
            .expect("JSON");
    assert_eq!(json["strategies"][1]["name"], name.as_str());
    let csv = std::fs::read_to_string(out.join("report.csv")).expect("report.csv");
    assert!(csv.contains(&name));
    let cut = format!("{}…", "s".repeat(MAX_LABEL - 1));
    for plot in ["tradeoff.svg", "wasted.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).expect("plot");
        assert!(!svg.contains(&name), "{plot} holds the whole name");
        assert!(svg.contains(&cut) || plot == "tradeoff.svg", "{plot}");
        assert!(svg.len() < 64 * 1024, "{plot}: {} bytes", svg.len());
    }
}
