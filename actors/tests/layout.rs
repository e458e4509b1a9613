//! The layout of the supervision tree, held by the source itself: shared
//! types are leaves that name no actor's module, and the agent loop names
//! nothing of the engine that spawns it.

use std::fs;
use std::path::{Path, PathBuf};

/// The modules whose file holds an actor (or spawns the tree). The lease's
/// identity and settings and a loop's budget figures are not theirs: they
/// are words of `vocabulary`, which every module shares.
const ACTOR_MODULES: &[&str] = &[
    "agent",
    "budget",
    "engine",
    "event_log",
    "lease",
    "run",
    "supervision",
    "watchdog",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, recursively, and `dir.rs` beside it.
fn module_files(dir: &str) -> Vec<PathBuf> {
    let root = src();
    let mut files = vec![root.join(format!("{dir}.rs"))];
    let mut pending = vec![root.join(dir)];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.retain(|f| f.exists());
    files
}

/// Each `crate::a::b` path named in `text`, as its segments.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    text.match_indices("crate::")
        .map(|(at, found)| {
            let mut rest = &text[at + found.len()..];
            let mut segments = Vec::new();
            loop {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if end == 0 {
                    break;
                }
                segments.push(rest[..end].to_owned());
                match rest[end..].strip_prefix("::") {
                    Some(next) => rest = next,
                    None => break,
                }
            }
            segments
        })
        .collect()
}

/// The paths in `file` that reach into an actor's module.
fn actor_paths(file: &Path) -> Vec<String> {
    let text = fs::read_to_string(file).expect("a readable source file");
    crate_paths(&text)
        .into_iter()
        .filter(|path| {
            let first = path.first().map(String::as_str).unwrap_or_default();
            // The supervision core's modules are its folder's children.
            let module = match (first, path.get(1).map(String::as_str)) {
                ("supervision", Some(child)) => child,
                _ => first,
            };
            ACTOR_MODULES.contains(&module)
        })
        .map(|path| format!("{}: crate::{}", file.display(), path.join("::")))
        .collect()
}

#[test]
fn crate_paths_finds_each_path_named() {
    assert_eq!(
        crate_paths("use crate::lease::meta::{LeaseId};\n[`x`](crate::watchdog::Verdict)"),
        vec![
            vec!["lease".to_owned(), "meta".to_owned()],
            vec!["watchdog".to_owned(), "Verdict".to_owned()],
        ]
    );
}

#[test]
fn shared_types_name_no_actor_module() {
    let mut files = Vec::new();
    for leaf in ["vocabulary", "event", "ports", "serde_time"] {
        files.extend(module_files(leaf));
    }
    assert!(
        files.len() >= 12,
        "the leaves' files were not found: {files:?}"
    );
    let offending: Vec<String> = files.iter().flat_map(|f| actor_paths(f)).collect();
    assert!(
        offending.is_empty(),
        "shared types reach into actors: {offending:#?}"
    );
}

#[test]
fn the_loop_names_nothing_of_the_engine() {
    let mut files = module_files("agent");
    files.extend(module_files("run"));
    assert!(
        files.len() >= 10,
        "the loop's files were not found: {files:?}"
    );
    let offending: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).expect("a readable source file");
            crate_paths(&text)
                .into_iter()
                .filter(|path| path.first().is_some_and(|s| s == "engine"))
                .map(|path| format!("{}: crate::{}", file.display(), path.join("::")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offending.is_empty(),
        "the loop imports from the engine: {offending:#?}"
    );
}
