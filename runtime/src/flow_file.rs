//! Loading flows from TOML and JSON files.
//!
//! [`parse_toml`] and [`parse_json`] parse a [`Flow`] and then
//! [validate](Flow::validate) it. Every refusal is a [`FlowError`] naming the
//! offending key's path — `leases.tool_cal` for an unknown key,
//! `workers.research` for a table missing a field, `leases.tool_call` for a
//! bad duration, `.` for the document itself — and, for errors found while
//! reading the text, the line and column. [`load`] picks the format by the
//! file's extension and names the file in its errors.
//!
//! ```
//! use leasehold::flow_file::parse_toml;
//!
//! let error = parse_toml(
//!     r#"
//! name = "triage"
//! task = "Sort the open issues by urgency."
//! max_steps = 20
//!
//! [leases]
//! tool_cal = "5m"
//! "#,
//! )
//! .unwrap_err();
//! assert_eq!(error.path, "leases.tool_cal");
//! ```

use std::fmt::Display;
use std::path::{Path, PathBuf};

use leasehold_actors::{Flow, FlowError, ToolServer};

use crate::run_limits::{RunLimits, TooLarge};

/// A flow file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum FlowFileError {
    /// The file could not be read.
    #[error("cannot read flow file `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's extension is neither `.toml` nor `.json`.
    #[error(
        "cannot load flow file `{}`: expected a `.toml` or `.json` extension",
        path.display()
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The file was read but the flow in it was refused.
    #[error("flow file `{}` refused at `{}`: {}", path.display(), error.path, error.message)]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The refusal, naming the offending key.
        #[source]
        error: FlowError,
    },
    /// The file, or the flow in it, is larger than
    /// [`RunLimits`] allow.
    #[error("flow file `{}` refused: {source}", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// What was too large, and the limit's key.
        source: TooLarge,
    },
}

/// Parses and validates a flow written in TOML.
pub fn parse_toml(text: &str) -> Result<Flow, FlowError> {
    validated(read_toml(text)?)
}

/// Parses and validates a flow written in JSON.
pub fn parse_json(text: &str) -> Result<Flow, FlowError> {
    validated(read_json(text)?)
}

/// Parses a flow written in TOML without validating it, for callers that
/// look at it (or complete it) first; validate it before use.
pub fn read_toml(text: &str) -> Result<Flow, FlowError> {
    read_toml_as(text)
}

/// Parses any serde type written in TOML, refusing as a flow does: the
/// offending key's path, the line and the column. Other files of the same
/// shape (experiment workloads) read through it.
pub fn read_toml_as<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, FlowError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(text, ROOT.to_owned(), &e))?;
    serde_path_to_error::deserialize(de)
        .map_err(|e| toml_error(text, e.path().to_string(), e.inner()))
}

/// Parses a flow written in JSON without validating it; validate it before
/// use.
pub fn read_json(text: &str) -> Result<Flow, FlowError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let flow = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| json_error(e.path().to_string(), e.inner()))?;
    de.end().map_err(|e| json_error(ROOT.to_owned(), &e))?;
    Ok(flow)
}

/// Completes each of the flow's tool-server references (a server with
/// neither `command` nor `url`) from `declared`, the configuration's
/// `[[tools]]`: the declaration's `command`, `url` and `env` are taken. A
/// reference that nothing declares is left as it is when `provided` says the
/// engine serves that name in process, and refused otherwise, naming it.
///
/// A reference may only tighten what its declaration says of idempotency
/// (see `tighten_idempotency`): it may mark a tool not idempotent, never
/// idempotent unless the declaration does, since a tool wrongly taken for
/// idempotent is called again after a crash instead of being put to a
/// person.
pub fn resolve_tool_servers(
    flow: &mut Flow,
    declared: &[ToolServer],
    provided: impl Fn(&str) -> bool,
) -> Result<(), FlowError> {
    for (i, server) in flow.tools.iter_mut().enumerate() {
        if !server.is_reference() {
            continue;
        }
        match declared.iter().find(|d| d.name == server.name) {
            Some(declaration) => {
                server.command.clone_from(&declaration.command);
                server.url.clone_from(&declaration.url);
                server.env.clone_from(&declaration.env);
                server.idempotent = tighten_idempotency(i, server, &declaration.idempotent)?;
            }
            // Served in process: the server's own definitions are the
            // declaration, and a flow may not raise them either.
            None if provided(&server.name) => {
                tighten_idempotency(i, server, &std::collections::BTreeMap::new())?;
            }
            None => {
                let known: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
                return Err(FlowError::new(
                    format!("tools[{i}]"),
                    format!(
                        "tool server `{}` has no `command` or `url`, and the configuration \
                         declares none of that name (declared: {}); declare it in the \
                         configuration file as `[[tools]]` with a `name` and a `command` or \
                         `url`",
                        server.name,
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The idempotency of the tools of reference `server` (at `tools[i]`): the
/// declaration's entries, with the flow's `false` entries over them. A flow
/// entry `true` where the declaration does not say `true` is refused,
/// naming it (`tools[0].idempotent.charge`): only whoever declares a server
/// may say a call of it is safe to repeat.
fn tighten_idempotency(
    i: usize,
    server: &ToolServer,
    declared: &std::collections::BTreeMap<String, bool>,
) -> Result<std::collections::BTreeMap<String, bool>, FlowError> {
    let mut merged = declared.clone();
    for (tool, &idempotent) in &server.idempotent {
        if idempotent && declared.get(tool) != Some(&true) {
            let declaration = match declared.get(tool) {
                Some(_) => "marks it `idempotent = false`",
                None => "does not mark it idempotent",
            };
            return Err(FlowError::new(
                format!("tools[{i}].idempotent.{tool}"),
                format!(
                    "expected `false` or nothing: the configuration's declaration of tool \
                     server `{}` {declaration}, and a flow may only tighten it, got `true` (a \
                     tool taken for idempotent is called again after a crash without asking a \
                     person; declare `idempotent = {{ {tool} = true }}` in its [[tools]] entry \
                     if it is)",
                    server.name
                ),
            ));
        }
        if !idempotent {
            merged.insert(tool.clone(), false);
        }
    }
    Ok(merged)
}

/// [`load`], within `limits`: a file longer than
/// [`RunLimits::flow_text`] is refused before it is read, and a flow whose
/// task or whole is larger than allowed once it is parsed.
pub fn load_within(path: &Path, limits: &RunLimits) -> Result<Flow, FlowFileError> {
    let too_large = |source| FlowFileError::TooLarge {
        path: path.to_owned(),
        source,
    };
    let io = |source| FlowFileError::Io {
        path: path.to_owned(),
        source,
    };
    let length = std::fs::metadata(path).map_err(io)?.len();
    let most = limits.flow_text();
    if u64::try_from(most).is_ok_and(|most| length > most) {
        return Err(too_large(TooLarge {
            what: "the file (read up to twice limits.flow, at least 1 MiB)",
            size: usize::try_from(length).unwrap_or(usize::MAX),
            limit: most,
            key: "limits.flow",
            env: "LEASEHOLD_LIMITS_FLOW",
        }));
    }
    let flow = load(path)?;
    limits.check_flow(&flow).map_err(too_large)?;
    Ok(flow)
}

/// Reads the flow in `path`, as TOML or JSON by its extension (`.toml`,
/// `.json`, in any case), and validates it.
pub fn load(path: &Path) -> Result<Flow, FlowFileError> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let parse = match extension.as_deref() {
        Some("toml") => parse_toml,
        Some("json") => parse_json,
        _ => {
            return Err(FlowFileError::UnknownFormat {
                path: path.to_owned(),
            });
        }
    };
    let text = std::fs::read_to_string(path).map_err(|source| FlowFileError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|error| FlowFileError::Invalid {
        path: path.to_owned(),
        error,
    })
}

/// The path of the document itself, as `serde_path_to_error` writes it.
const ROOT: &str = ".";

fn validated(flow: Flow) -> Result<Flow, FlowError> {
    flow.validate()?;
    Ok(flow)
}

fn toml_error(text: &str, path: String, error: &toml::de::Error) -> FlowError {
    let message = error.message().trim_end();
    match error.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            FlowError::new(path, at(message, line, column))
        }
        None => FlowError::new(path, message),
    }
}

fn json_error(path: String, error: &serde_json::Error) -> FlowError {
    // serde_json's Display appends " at line L column C"; put it in our form.
    let full = error.to_string();
    if error.line() == 0 {
        return FlowError::new(path, full);
    }
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full);
    FlowError::new(path, at(message, error.line(), error.column()))
}

fn at(message: &str, line: impl Display, column: impl Display) -> String {
    format!("{message} (line {line}, column {column})")
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}
