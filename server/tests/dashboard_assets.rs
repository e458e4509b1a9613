//! The dashboard's files over a real socket: the page loads its script as
//! an ES module, and every module that script imports, transitively, is
//! served with a 200 and a JavaScript content type (a browser refuses a
//! module script of any other type), so a module left without its route
//! fails here, not only in a browser.

mod support;

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;

use leasehold::testing::ScriptedModel;
use leasehold_server::ServerOptions;
use support::Served;

/// A fresh engine served on a loopback port until dropped.
async fn served() -> Served {
    let engine = support::scripted_engine(ScriptedModel::new()).await;
    Served::start(support::app(engine, ServerOptions::default())).await
}

/// `GET path` of `served`: its status, `Content-Type` and body.
async fn get(served: &Served, path: &str) -> (u16, String, String) {
    let response = reqwest::get(format!("{}{path}", served.base))
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.text().await.unwrap_or_default();
    (status, content_type, body)
}

/// The quoted string that starts `text` (`'…'` or `"…"`), if it does.
fn quoted(text: &str) -> Option<&str> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &text[1..];
    rest.find(quote).map(|end| &rest[..end])
}

/// The `src` of the page's `<script type="module">`.
fn module_entry(page: &str) -> Option<String> {
    page.split("<script").skip(1).find_map(|tag| {
        let tag = &tag[..tag.find('>')?];
        if !tag.contains(r#"type="module""#) {
            return None;
        }
        let src = tag.split("src=").nth(1)?;
        quoted(src).map(str::to_owned)
    })
}

/// The specifiers a module imports statically: `… from 'x'` and
/// `import 'x'`.
fn imports(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in source.lines().map(str::trim_start) {
        if line.starts_with("//") || line.starts_with('*') {
            continue;
        }
        for marker in ["from ", "import "] {
            for (at, _) in line.match_indices(marker) {
                if let Some(spec) = quoted(&line[at + marker.len()..]) {
                    found.push(spec.to_owned());
                }
            }
        }
    }
    found
}

/// `spec` resolved against the module at `base` (an absolute path).
fn resolve(base: &str, spec: &str) -> String {
    assert!(
        spec.starts_with("./") || spec.starts_with("../") || spec.starts_with('/'),
        "{base} imports {spec:?}: the dashboard imports only its own modules, by path"
    );
    if spec.starts_with('/') {
        return spec.to_owned();
    }
    let mut parts: Vec<&str> = base.split('/').collect();
    parts.pop();
    for part in spec.split('/') {
        match part {
            "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

#[test]
fn imports_are_found_and_resolved_as_a_browser_would() {
    let source = "// import { x } from './comment.js';\n\
                  import { a, b } from './a.js';\nimport './side.js';\n\
                  import {\n  c,\n} from \"../c.js\";\nconst s = 'from here';\n";
    assert_eq!(imports(source), ["./a.js", "./side.js", "../c.js"]);
    assert_eq!(resolve("/assets/app.js", "./a.js"), "/assets/a.js");
    assert_eq!(resolve("/assets/sub/x.js", "../c.js"), "/assets/c.js");
    assert_eq!(
        module_entry(r#"<link href="/x.css"><script type="module" src="/assets/app.js"></script>"#),
        Some("/assets/app.js".to_owned())
    );
    assert_eq!(
        module_entry(r#"<script src="/assets/app.js"></script>"#),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_module_is_served_as_javascript() {
    let served = served().await;
    let (status, _, page) = get(&served, "/").await;
    assert_eq!(status, 200, "{page}");
    let entry = module_entry(&page).expect("the page loads its script as a module");

    let mut seen = BTreeSet::from([entry.clone()]);
    let mut queue = VecDeque::from([entry]);
    while let Some(path) = queue.pop_front() {
        let (status, content_type, body) = get(&served, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(
            content_type.starts_with("text/javascript"),
            "{path} is served as {content_type:?}, which a browser refuses for a module"
        );
        for spec in imports(&body) {
            let module = resolve(&path, &spec);
            if seen.insert(module.clone()) {
                queue.push_back(module);
            }
        }
    }

    // Every module of the dashboard's folder is reached from the entry (so
    // the walk above covered them all), and nothing else is.
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/dashboard");
    let files: BTreeSet<String> = std::fs::read_dir(&folder)
        .expect("the dashboard's folder")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".js"))
        .map(|name| format!("/assets/{name}"))
        .collect();
    assert!(
        files.len() > 1,
        "the script is split into modules: {files:?}"
    );
    assert_eq!(seen, files);

    // A module that does not exist is a 404, not a page.
    let (status, _, _) = get(&served, "/assets/missing.js").await;
    assert_eq!(status, 404);
}

#[test]
fn no_dashboard_module_writes_html_from_a_string() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/dashboard");
    let mut read = 0;
    for entry in std::fs::read_dir(&folder).expect("the dashboard's folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "js") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("a module");
        read += 1;
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "createContextualFragment",
        ] {
            assert!(
                !source.contains(sink),
                "{} uses {sink}: event text must reach the page as text, never as HTML",
                path.display()
            );
        }
    }
    assert!(read > 1, "the dashboard's modules were read: {read}");
}

#[test]
fn no_dashboard_text_counts_with_a_parenthesised_plural() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/dashboard");
    let mut read = 0;
    for entry in std::fs::read_dir(&folder).expect("the dashboard's folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "js" && e != "html") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("a module");
        read += 1;
        for (number, line) in source.lines().enumerate() {
            assert!(
                !line.contains("(s)"),
                "{}:{}: `(s)` in text a person reads; count with `counted(n, noun)` of text.js, \
                 which agrees with its noun: {line}",
                path.display(),
                number + 1
            );
        }
    }
    assert!(read > 1, "the dashboard's files were read: {read}");
}
