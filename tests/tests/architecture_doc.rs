//! `docs/architecture.md` names only files that exist: every path in
//! backticks that ends in a file of the workspace's kinds (`.rs`, `.toml`,
//! `.md`, …), brace lists expanded (`postgres/{listen,commands}.rs`), is
//! the end of the path of a file in the workspace. A file moved or removed
//! without the document following fails here, naming the path.

use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace")
        .to_path_buf()
}

/// Every file of the workspace, as `/`-separated paths from its root.
fn files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name == "target" || name == ".git" || name == "node_modules" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            files(root, &path, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The spans in backticks of `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `a/{b,c}.rs` as `a/b.rs` and `a/c.rs`; one brace list at most.
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|part| format!("{}{}{}", &path[..open], part.trim(), &path[close + 1..]))
            .collect(),
        _ => vec![path.to_owned()],
    }
}

/// Whether `span` reads as a path to a file: no spaces, a `/`, and one of
/// the workspace's file kinds at its end.
fn is_file_path(span: &str) -> bool {
    const KINDS: [&str; 8] = [".rs", ".toml", ".md", ".py", ".sh", ".js", ".css", ".html"];
    !span.contains(char::is_whitespace)
        && !span.contains("::")
        && span.contains('/')
        && KINDS.iter().any(|kind| span.ends_with(kind))
}

/// The paths of `text` that no file of `all` ends with.
fn missing(text: &str, all: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for span in quoted(text).into_iter().filter(|s| is_file_path(s)) {
        for path in expand(span) {
            let found = all
                .iter()
                .any(|file| file == &path || file.ends_with(&format!("/{path}")));
            if !found {
                missing.push(path);
            }
        }
    }
    missing
}

#[test]
fn the_architecture_names_only_files_that_exist() {
    let root = workspace();
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let text = fs::read_to_string(root.join("docs/architecture.md")).expect("the document");
    let named = quoted(&text)
        .into_iter()
        .filter(|s| is_file_path(s))
        .count();
    assert!(named >= 40, "too few paths were read: {named}");
    let missing = missing(&text, &all);
    assert!(
        missing.is_empty(),
        "docs/architecture.md names files that do not exist: {missing:?}"
    );
}

#[test]
fn a_path_is_found_by_its_end_and_a_moved_one_is_named() {
    let all = vec![
        "runtime/src/store/postgres/listen.rs".to_owned(),
        "actors/src/agent/tools.rs".to_owned(),
    ];
    let text = "`postgres/{listen,schema}.rs`, `agent/tools.rs`, `run/tools.rs`, `a b/c.rs`";
    assert_eq!(
        missing(text, &all),
        ["postgres/schema.rs".to_owned(), "run/tools.rs".to_owned()]
    );
}
