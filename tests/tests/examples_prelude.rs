//! The examples build on the prelude alone (and the scripted fakes of
//! `leasehold::testing`; `leasehold_lab`, the crate that compares
//! strategies, is the lab, not the engine): what an embedder needs is one import
//! away.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the examples folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn the_examples_import_leasehold_through_the_prelude_alone() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files = Vec::new();
    rust_files(&examples, &mut files);
    assert!(files.len() >= 3, "found {files:?}");
    let mut through_prelude = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read an example");
        for line in text.lines().map(str::trim) {
            let Some(path) = line.strip_prefix("use leasehold::") else {
                continue;
            };
            assert!(
                path == "prelude::*;" || path.starts_with("testing::"),
                "{}: `{line}` reaches past the prelude",
                file.display()
            );
            through_prelude += usize::from(path == "prelude::*;");
        }
    }
    assert!(through_prelude >= 3, "the examples use the prelude");
}
