//! The configuration's tool servers kept out of the store: a run's flow is
//! stored with each tool server it took from `[[tools]]` in its shown
//! form — its URL redacted, its secret arguments and the values of
//! secret-named flags as `***`, its `env` values as `(set)` — and made
//! whole again from the configuration before it runs, resumes or is
//! forked: a stored server whose shown form is that of the declaration of
//! its name gets the declaration's `command`, `url` and `env`.
//!
//! A server the flow carried itself (a flow file of `leasehold run`, or a
//! flow posted to a server that allows flow tools) is stored as it came:
//! nothing but the flow holds what it needs to run again.

use leasehold_actors::{CommandArg, Flow, ToolSecrets, ToolServer};

use super::{HIDDEN, redact_command, redact_url};

/// The configuration's `[[tools]]`, as [`ToolSecrets`].
pub(crate) struct ConfiguredToolSecrets {
    declared: Vec<ToolServer>,
}

impl ConfiguredToolSecrets {
    pub(crate) fn new(declared: Vec<ToolServer>) -> Self {
        Self { declared }
    }

    fn declaration(&self, name: &str) -> Option<&ToolServer> {
        self.declared.iter().find(|d| d.name == name)
    }
}

impl ToolSecrets for ConfiguredToolSecrets {
    fn at_rest(&self, flow: &Flow) -> Flow {
        let mut flow = flow.clone();
        for server in &mut flow.tools {
            if self
                .declaration(&server.name)
                .is_some_and(|declared| same_process(server, declared))
            {
                *server = shown(server);
            }
        }
        flow
    }

    fn restored(&self, mut flow: Flow) -> Flow {
        for server in &mut flow.tools {
            let Some(declared) = self.declaration(&server.name) else {
                continue;
            };
            if same_process(&shown(server), &shown(declared)) {
                server.command.clone_from(&declared.command);
                server.url.clone_from(&declared.url);
                server.env.clone_from(&declared.env);
            }
        }
        flow
    }
}

/// Whether `a` and `b` start the same process or open the same address.
fn same_process(a: &ToolServer, b: &ToolServer) -> bool {
    a.command == b.command && a.url == b.url && a.env == b.env
}

/// `server` as it is shown: nothing secret left in it.
fn shown(server: &ToolServer) -> ToolServer {
    let mut shown = server.clone();
    shown.url = server.url.as_deref().map(redact_url);
    shown.command = server.command.as_ref().map(|args| {
        redact_command(args)
            .into_iter()
            .zip(args)
            .map(|(text, arg)| {
                if arg.is_secret() {
                    CommandArg::Secret(HIDDEN.to_owned())
                } else {
                    CommandArg::Plain(text)
                }
            })
            .collect()
    });
    for value in shown.env.values_mut() {
        "(set)".clone_into(value);
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(url: &str) -> ToolServer {
        serde_json::from_value(serde_json::json!({"name": "web", "url": url})).unwrap()
    }

    fn ops(token: &str, secret: &str, key: &str) -> ToolServer {
        serde_json::from_value(serde_json::json!({
            "name": "ops",
            "command": ["ops", "--token", token, {"secret": secret}],
            "env": {"KEY": key},
        }))
        .unwrap()
    }

    fn flow(tools: Vec<ToolServer>) -> Flow {
        let mut flow: Flow =
            serde_json::from_value(serde_json::json!({"name": "f", "task": "t", "max_steps": 1}))
                .unwrap();
        flow.tools = tools;
        flow
    }

    #[test]
    fn a_declared_server_is_stored_without_its_secrets_and_restored_whole() {
        let web = server("http://u:hunter2@h:1/mcp?token=s3cret");
        let ops = ops("tok3n", "arg-s3cret", "env-s3cret");
        let secrets = ConfiguredToolSecrets::new(vec![web.clone(), ops.clone()]);
        let whole = flow(vec![web, ops]);
        let stored = secrets.at_rest(&whole);
        let text = serde_json::to_string(&stored).unwrap();
        for secret in ["hunter2", "s3cret", "tok3n", "arg-s3cret", "env-s3cret"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert_eq!(secrets.restored(stored), whole);
        assert_eq!(
            secrets.restored(whole.clone()),
            whole,
            "a whole flow is left as it is"
        );
    }

    #[test]
    fn a_server_the_flow_carried_is_stored_as_it_came_and_never_completed() {
        let secrets =
            ConfiguredToolSecrets::new(vec![server("http://u:hunter2@h:1/mcp?token=s3cret")]);
        // The same name, another address: the flow's own.
        let own = flow(vec![server("http://u:other@elsewhere:2/mcp")]);
        assert_eq!(secrets.at_rest(&own), own);
        assert_eq!(secrets.restored(own.clone()), own);
    }
}
