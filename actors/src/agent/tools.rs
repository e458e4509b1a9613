//! A run's tool servers, connected as the run's first work.
//!
//! Starting a run never waits for a tool server: the engine only makes the
//! clients ([`ServerClient`]), and the run actor connects them — starts each
//! server, completes its handshake and lists its tools, all servers at once —
//! before its root loop takes a step. What it guarantees:
//!
//! * **The run exists first.** A server that is slow to start, or never
//!   answers, holds up no request: the run is recorded and answered, and the
//!   failure is the run's own, recorded in its events.
//! * **A server that cannot list its tools ends the run**, with a reason
//!   that names the server and what went wrong (the client bounds the start
//!   and the listing; a cancelled run stops waiting at once).
//! * **The tools are fixed once connected**: every loop of the run, the root
//!   and each worker, sees the same routes ([`RunTools`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crate::ports::{ToolClient, ToolDefinition};

/// A tool's server.
#[derive(Clone)]
pub(crate) struct ToolRoute {
    pub(crate) client: Arc<dyn ToolClient>,
    pub(crate) server: String,
    /// Whether calling it twice is harmless: the flow's word, else the
    /// tool's own hint; `None` if unknown.
    pub(crate) idempotent: Option<bool>,
}

/// A client of one tool server a run's flow names, not yet asked for its
/// tools.
#[derive(Clone)]
pub(crate) struct ServerClient {
    /// The server's name in the flow.
    pub(crate) server: String,
    /// Its client.
    pub(crate) client: Arc<dyn ToolClient>,
    /// The flow's word on its tools' idempotency: tool name → idempotent.
    /// A tool it does not name keeps the server's own hint.
    pub(crate) idempotent: BTreeMap<String, bool>,
}

/// The routes and definitions of a run's tools, once its servers are
/// connected.
#[derive(Default)]
pub struct ConnectedTools {
    routes: HashMap<String, ToolRoute>,
    definitions: Vec<ToolDefinition>,
}

impl std::fmt::Debug for ConnectedTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.definitions.iter().map(|d| &d.name))
            .finish()
    }
}

/// A run's tools: empty until its servers are connected, then fixed.
#[derive(Default)]
pub(crate) struct RunTools(OnceLock<ConnectedTools>);

impl RunTools {
    /// The route of tool `name`, once connected.
    pub(crate) fn get(&self, name: &str) -> Option<&ToolRoute> {
        self.0.get().and_then(|tools| tools.routes.get(name))
    }

    /// The definitions the models see, once connected; none before.
    pub(crate) fn definitions(&self) -> &[ToolDefinition] {
        self.0
            .get()
            .map_or(&[], |tools| tools.definitions.as_slice())
    }

    /// Fixes the run's tools; a second time changes nothing.
    pub(crate) fn set(&self, tools: ConnectedTools) {
        let _ = self.0.set(tools);
    }
}

/// Lists the tools of every server at once, and routes each tool to its
/// server, with the flow's word on its idempotency. The first failure ends
/// the whole (the other listings are dropped) with a reason naming its
/// server; so does a tool offered by two servers.
pub(crate) async fn connect(servers: &[ServerClient]) -> Result<ConnectedTools, String> {
    let mut listing = tokio::task::JoinSet::new();
    for (index, server) in servers.iter().enumerate() {
        let listed = server.client.list_tools();
        listing.spawn(async move { (index, listed.await) });
    }
    let mut lists: Vec<Option<Vec<ToolDefinition>>> = vec![None; servers.len()];
    while let Some(joined) = listing.join_next().await {
        let (index, listed) =
            joined.map_err(|e| format!("listing a tool server's tools panicked: {e}"))?;
        let server = &servers[index].server;
        let definitions = listed.map_err(|e| {
            format!(
                "tool server `{server}` could not list its tools: {}",
                e.message
            )
        })?;
        lists[index] = Some(definitions);
    }
    let mut tools = ConnectedTools::default();
    for (server, listed) in servers.iter().zip(lists) {
        let listed = listed.unwrap_or_default();
        for warning in unknown_idempotent_entries(server, &listed) {
            tracing::warn!(server = %server.server, "{warning}");
        }
        for mut definition in listed {
            if let Some(existing) = tools.routes.get(&definition.name) {
                return Err(format!(
                    "tool `{}` is offered by both `{}` and `{}`",
                    definition.name, existing.server, server.server
                ));
            }
            definition.idempotent = server
                .idempotent
                .get(&definition.name)
                .copied()
                .or(definition.idempotent);
            tools.routes.insert(
                definition.name.clone(),
                ToolRoute {
                    client: server.client.clone(),
                    server: server.server.clone(),
                    idempotent: definition.idempotent,
                },
            );
            tools.definitions.push(definition);
        }
    }
    Ok(tools)
}

/// How many of a server's tools a warning names before it counts the rest.
const TOOLS_NAMED: usize = 20;

/// What is wrong with `server`'s `idempotent` entries once its tools are
/// `listed`: one warning for each entry that names a tool the server does
/// not have (a typo, or a tool it no longer offers), which therefore says
/// nothing of any call, naming the entry and the tools the server has.
fn unknown_idempotent_entries(server: &ServerClient, listed: &[ToolDefinition]) -> Vec<String> {
    let has = |name: &str| listed.iter().any(|d| d.name == name);
    let unknown: Vec<&String> = server.idempotent.keys().filter(|n| !has(n)).collect();
    if unknown.is_empty() {
        return Vec::new();
    }
    let mut names: Vec<&str> = listed.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    let offered = match names.len() {
        0 => "it offers no tool".to_owned(),
        n if n <= TOOLS_NAMED => format!("its tools: {}", names.join(", ")),
        n => format!(
            "its tools: {} and {} more",
            names[..TOOLS_NAMED].join(", "),
            n - TOOLS_NAMED
        ),
    };
    unknown
        .into_iter()
        .map(|entry| {
            format!(
                "tool server `{}`: its `idempotent` entry `{entry}` names a tool the server does \
                 not have, so it says nothing of any call ({offered})",
                server.server
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ScriptedTools, ToolAct};

    fn server(idempotent: &[(&str, bool)]) -> ServerClient {
        ServerClient {
            server: "ops".to_owned(),
            client: Arc::new(ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang])),
            idempotent: idempotent
                .iter()
                .map(|(name, is)| ((*name).to_owned(), *is))
                .collect(),
        }
    }

    fn tools(names: &[&str]) -> Vec<ToolDefinition> {
        names
            .iter()
            .map(|name| ToolDefinition {
                name: (*name).to_owned(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
                idempotent: None,
            })
            .collect()
    }

    #[test]
    fn an_entry_naming_a_tool_the_server_has_is_no_warning() {
        let warnings =
            unknown_idempotent_entries(&server(&[("search", true)]), &tools(&["search"]));
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn an_entry_naming_a_tool_the_server_lacks_is_warned_of_with_the_tools_it_has() {
        let warnings = unknown_idempotent_entries(
            &server(&[("search", true), ("serch", true)]),
            &tools(&["search", "fetch"]),
        );
        assert_eq!(
            warnings,
            [
                "tool server `ops`: its `idempotent` entry `serch` names a tool the server does \
              not have, so it says nothing of any call (its tools: fetch, search)"
            ]
        );
    }

    #[test]
    fn a_server_with_many_tools_names_some_and_counts_the_rest() {
        let names: Vec<String> = (0..25).map(|i| format!("tool_{i:02}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let warnings = unknown_idempotent_entries(&server(&[("nope", false)]), &tools(&names));
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].ends_with("tool_18, tool_19 and 5 more)"),
            "{}",
            warnings[0]
        );
        let none = unknown_idempotent_entries(&server(&[("nope", false)]), &[]);
        assert!(none[0].ends_with("(it offers no tool)"), "{}", none[0]);
    }
}
