//! `docs/runtime-semantics.md` states each rule as one sentence followed by
//! the name of the test that proves it. This keeps the document honest: every
//! rule line must name a test, and every named test must exist.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace")
        .to_path_buf()
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == ".git" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The test named at the end of a rule line: `- sentence — \`name\``.
fn named_test(line: &str) -> Option<&str> {
    let (_, tail) = line.rsplit_once(" — `")?;
    tail.strip_suffix('`')
}

/// `line` without the visibility before its item (`pub`, `pub(super)`,
/// …): a conformance rule is a function its suite's table names from
/// another file.
fn without_visibility(line: &str) -> &str {
    let Some(rest) = line.strip_prefix("pub") else {
        return line;
    };
    let rest = match rest.strip_prefix('(') {
        Some(scoped) => scoped.split_once(')').map_or(rest, |(_, after)| after),
        None => rest,
    };
    rest.strip_prefix(' ').unwrap_or(line)
}

#[test]
fn every_semantics_line_names_a_test_that_exists() {
    let doc = fs::read_to_string(workspace().join("docs/runtime-semantics.md"))
        .expect("the document exists");
    let mut sources = Vec::new();
    rust_sources(&workspace(), &mut sources);
    let defined: BTreeSet<String> = sources
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .flat_map(|text| {
            text.lines()
                .map(|l| without_visibility(l.trim_start()))
                .filter_map(|l| {
                    l.strip_prefix("async fn ")
                        .or_else(|| l.strip_prefix("fn "))
                })
                .filter_map(|rest| rest.split(['(', '<']).next().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();

    let mut named = 0;
    let mut problems = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        if !line.starts_with("- ") {
            continue;
        }
        match named_test(line) {
            None => problems.push(format!("line {}: names no test: {line}", n + 1)),
            Some(test) if !defined.contains(test) => {
                problems.push(format!("line {}: no test `{test}` is defined", n + 1));
            }
            Some(_) => named += 1,
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(named >= 30, "only {named} rules named a test");
}

#[test]
fn named_test_reads_the_last_backticked_name() {
    assert_eq!(named_test("- A rule. — `a_test`"), Some("a_test"));
    assert_eq!(
        named_test("- A rule with `code` in it — `b_test`"),
        Some("b_test")
    );
    assert_eq!(named_test("- A rule without a test."), None);
}
