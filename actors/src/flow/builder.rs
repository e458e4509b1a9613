//! Flows written in Rust: a typed builder, and a JSON value read with its
//! errors naming the key.

use std::time::Duration;

use super::{
    BudgetOverrides, Flow, FlowError, LeaseOverrides, SpawnOverrides, SupervisionOverrides,
    ToolServer, WorkerKind,
};
use crate::error::ConfigError;
use crate::supervision::policy::{PolicyChoice, PolicyName};
use crate::vocabulary::lease::LeaseKind;

/// Builds a [`Flow`] in Rust, checked as a flow file is: [`Self::build`]
/// refuses what [`Flow::validate`] refuses, naming the key
/// (`leases.tool_call`, `workers.research.max_steps`, `tools[1].url`).
///
/// ```
/// use std::time::Duration;
/// use leasehold_actors::prelude::*;
/// use leasehold_actors::{ToolServer, WorkerKind};
///
/// let flow = Flow::builder("triage", "Sort the open issues by urgency.")
///     .max_steps(20)
///     .tool_server(ToolServer::named("github").idempotent("list_issues", true))
///     .worker("reader", WorkerKind::new("Read one issue and rate it.", 5).tools(["github"]))
///     .lease(LeaseKind::ToolCall, Duration::from_secs(90))
///     .max_renewals(6)
///     .policy(PolicyChoice::all(PolicyName::LEASEHOLD).with_kind(LeaseKind::ToolCall, PolicyName::IDLE_KILL))
///     .build()?;
/// assert_eq!(flow.leases.tool_call, Some(Duration::from_secs(90)));
///
/// // A policy is named as a flow file names it.
/// let flow = Flow::builder("triage", "Sort them.").policy("leasehold, tool_call = mine").build()?;
/// let policy = flow.leases.policy.expect("a policy");
/// assert_eq!(policy.name_for(LeaseKind::ToolCall).as_str(), "mine");
///
/// // A refusal names its key.
/// let refused = Flow::builder("triage", "Sort them.")
///     .worker("reader", WorkerKind::new("Read.", 5).tools(["jira"]))
///     .build()
///     .unwrap_err();
/// assert_eq!(refused.path, "workers.reader.tools[0]");
/// # Ok::<(), FlowError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct FlowBuilder {
    flow: Flow,
    /// The first value refused on the way, which [`Self::build`] returns.
    refused: Option<FlowError>,
}

/// What [`FlowBuilder::policy`] takes: a [`PolicyChoice`], a
/// [`PolicyName`], or the text a flow file writes under `leases.policy`
/// (`"mine"`, `"leasehold, tool_call = mine"`), which
/// [`FlowBuilder::build`] refuses, naming `leases.policy`, if it is not one.
pub trait IntoPolicyChoice: sealed::Sealed {
    /// The choice, or why it is none, naming `key`.
    #[doc(hidden)]
    fn into_policy_choice(self, key: &str) -> Result<PolicyChoice, ConfigError>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::PolicyChoice {}
    impl Sealed for super::PolicyName {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
}

impl IntoPolicyChoice for PolicyChoice {
    fn into_policy_choice(self, _key: &str) -> Result<PolicyChoice, ConfigError> {
        Ok(self)
    }
}

impl IntoPolicyChoice for PolicyName {
    fn into_policy_choice(self, _key: &str) -> Result<PolicyChoice, ConfigError> {
        Ok(PolicyChoice::all(self))
    }
}

impl IntoPolicyChoice for &str {
    fn into_policy_choice(self, key: &str) -> Result<PolicyChoice, ConfigError> {
        PolicyChoice::parse_at(key, self)
    }
}

impl IntoPolicyChoice for String {
    fn into_policy_choice(self, key: &str) -> Result<PolicyChoice, ConfigError> {
        PolicyChoice::parse_at(key, &self)
    }
}

impl IntoPolicyChoice for &String {
    fn into_policy_choice(self, key: &str) -> Result<PolicyChoice, ConfigError> {
        PolicyChoice::parse_at(key, self)
    }
}

impl Flow {
    /// A builder of a flow named `name` whose root loop is asked `task`,
    /// with no step limit, streaming, no tools, no workers and the
    /// runtime's configuration for everything else.
    pub fn builder(name: impl Into<String>, task: impl Into<String>) -> FlowBuilder {
        FlowBuilder {
            flow: Flow {
                max_tokens: None,
                keyed_limits: Default::default(),
                name: name.into(),
                task: task.into(),
                system_prompt: String::new(),
                max_steps: 0,
                stream: true,
                tools: Vec::new(),
                workers: Default::default(),
                milestones: Vec::new(),
                leases: LeaseOverrides::default(),
                supervision: SupervisionOverrides::default(),
                budget: BudgetOverrides::default(),
                spawn: SpawnOverrides::default(),
                retention: None,
                notify: Vec::new(),
            },
            refused: None,
        }
    }

    /// Reads and checks a flow written as JSON: an unknown key, a value of
    /// the wrong type or what [`Flow::validate`] refuses is a [`FlowError`]
    /// naming the key (`leases.tool_call`, `workers.research.max_steps`).
    ///
    /// ```
    /// use leasehold_actors::Flow;
    ///
    /// let refused = Flow::from_json(serde_json::json!({
    ///     "name": "triage", "task": "Sort them.", "max_steps": 3,
    ///     "leases": {"tool_call": "soon"}
    /// }))
    /// .unwrap_err();
    /// assert_eq!(refused.path, "leases.tool_call");
    /// ```
    pub fn from_json(value: serde_json::Value) -> Result<Self, FlowError> {
        let flow: Self = serde_path_to_error::deserialize(value).map_err(|error| {
            let path = error.path().to_string();
            FlowError::new(path, error.into_inner().to_string())
        })?;
        flow.validate()?;
        Ok(flow)
    }
}

impl FlowBuilder {
    /// The root loop's system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.flow.system_prompt = prompt.into();
        self
    }

    /// Steps of the root loop; 0 (the default) is unlimited.
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.flow.max_steps = steps;
        self
    }

    /// Streams model answers (the default) or not.
    pub fn stream(mut self, stream: bool) -> Self {
        self.flow.stream = stream;
        self
    }

    /// A tool server the run may use.
    pub fn tool_server(mut self, server: ToolServer) -> Self {
        self.flow.tools.push(server);
        self
    }

    /// A kind of worker the run may spawn, by name.
    pub fn worker(mut self, name: impl Into<String>, worker: WorkerKind) -> Self {
        self.flow.workers.insert(name.into(), worker);
        self
    }

    /// A milestone the root loop reports as it reaches it.
    pub fn milestone(mut self, milestone: impl Into<String>) -> Self {
        self.flow.milestones.push(milestone.into());
        self
    }

    /// The lease of every `kind` operation of the run.
    pub fn lease(mut self, kind: LeaseKind, lease: Duration) -> Self {
        let leases = &mut self.flow.leases;
        let slot = match kind {
            LeaseKind::ModelStream => &mut leases.model_stream,
            LeaseKind::ModelBlocking => &mut leases.model_blocking,
            LeaseKind::ToolCall => &mut leases.tool_call,
            LeaseKind::WorkerStep => &mut leases.worker_step,
        };
        *slot = Some(lease);
        self
    }

    /// Renewals a lease may have before its next expiry stops the
    /// operation.
    pub fn max_renewals(mut self, renewals: u32) -> Self {
        self.flow.leases.max_renewals = Some(renewals);
        self
    }

    /// Expiries renewed without asking the evaluator.
    pub fn free_renewals(mut self, renewals: u32) -> Self {
        self.flow.leases.free_renewals = Some(renewals);
        self
    }

    /// Renewals on evidence alone in a row before the evaluator is asked.
    pub fn evidence_renewals(mut self, renewals: u32) -> Self {
        self.flow.leases.evidence_renewals = Some(renewals);
        self
    }

    /// The verdict policy, for every lease kind or per kind; kinds it does
    /// not name keep the configuration's. A name must be registered with
    /// the engine that runs the flow (the built-ins are). Text is read as
    /// a flow file's `leases.policy` (`"mine"`, `"leasehold, tool_call =
    /// mine"`); [`Self::build`] refuses text that is not a choice.
    pub fn policy(mut self, choice: impl IntoPolicyChoice) -> Self {
        match choice.into_policy_choice("leases.policy") {
            Ok(choice) => self.flow.leases.policy = Some(choice),
            Err(error) => {
                self.refused.get_or_insert_with(|| {
                    FlowError::new(error.field.clone(), error.expected_got())
                });
            }
        }
        self
    }

    /// The verdict policy of `kind` leases alone, over any choice so far.
    pub fn policy_for(mut self, kind: LeaseKind, name: PolicyName) -> Self {
        let choice = self.flow.leases.policy.take().unwrap_or_default();
        self.flow.leases.policy = Some(choice.with_kind(kind, name));
        self
    }

    /// All of the lease overrides at once.
    pub fn leases(mut self, leases: LeaseOverrides) -> Self {
        self.flow.leases = leases;
        self
    }

    /// The supervision overrides.
    pub fn supervision(mut self, supervision: SupervisionOverrides) -> Self {
        self.flow.supervision = supervision;
        self
    }

    /// The budget overrides.
    pub fn budget(mut self, budget: BudgetOverrides) -> Self {
        self.flow.budget = budget;
        self
    }

    /// Limits on the workers the run spawns.
    pub fn spawn(mut self, spawn: SpawnOverrides) -> Self {
        self.flow.spawn = spawn;
        self
    }

    /// How long the run is kept once it has finished (at most the
    /// runtime's retention).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.flow.retention = Some(retention);
        self
    }

    /// Tells the webhook receiver the runtime's configuration names
    /// `receiver` when the run pauses for a person or ends.
    pub fn notify(mut self, receiver: impl Into<String>) -> Self {
        self.flow.notify.push(receiver.into());
        self
    }

    /// The flow, checked as a flow file is ([`Flow::validate`]).
    pub fn build(self) -> Result<Flow, FlowError> {
        if let Some(refused) = self.refused {
            return Err(refused);
        }
        self.flow.validate()?;
        Ok(self.flow)
    }
}

impl ToolServer {
    /// A server the runtime provides by name: one given to the engine in
    /// process ([`EngineBuilder::tool_server`](crate::EngineBuilder::tool_server)),
    /// or one the configuration declares.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            command: None,
            url: None,
            env: Default::default(),
            idempotent: Default::default(),
        }
    }

    /// A stdio server: `program` and its arguments, started as a child
    /// process.
    pub fn command(
        name: impl Into<String>,
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let mut command = vec![super::CommandArg::from(program.into())];
        command.extend(args.into_iter().map(|a| super::CommandArg::from(a.into())));
        Self {
            command: Some(command),
            ..Self::named(name)
        }
    }

    /// A streamable-HTTP server at `url`.
    pub fn url(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::named(name)
        }
    }

    /// An environment variable of a stdio server's process.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Says whether `tool` is idempotent (a tool of unknown idempotency is
    /// put to a person rather than called again after a crash).
    #[must_use]
    pub fn idempotent(mut self, tool: impl Into<String>, idempotent: bool) -> Self {
        self.idempotent.insert(tool.into(), idempotent);
        self
    }
}

impl WorkerKind {
    /// A worker kind with this system prompt and step limit (0 is
    /// unlimited), using all of the flow's tool servers.
    pub fn new(prompt: impl Into<String>, max_steps: u32) -> Self {
        Self {
            max_tokens: None,
            prompt: prompt.into(),
            max_steps,
            tools: None,
            milestones: Vec::new(),
        }
    }

    /// The tool servers it may use, by name.
    #[must_use]
    pub fn tools(mut self, servers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tools = Some(servers.into_iter().map(Into::into).collect());
        self
    }

    /// A milestone it reports as it reaches it.
    #[must_use]
    pub fn milestone(mut self, milestone: impl Into<String>) -> Self {
        self.milestones.push(milestone.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_named_by_text_as_a_flow_file_names_it() {
        let flow = Flow::builder("triage", "Sort them.")
            .policy("mine")
            .build()
            .expect("a flow");
        let policy = flow.leases.policy.expect("a policy");
        for kind in LeaseKind::ALL {
            assert_eq!(policy.name_for(kind).as_str(), "mine", "{kind}");
        }
        let flow = Flow::builder("triage", "Sort them.")
            .policy(String::from("leasehold, tool_call = mine"))
            .build()
            .expect("a flow");
        let policy = flow.leases.policy.expect("a policy");
        assert_eq!(policy.name_for(LeaseKind::ToolCall).as_str(), "mine");
        assert_eq!(
            policy.name_for(LeaseKind::ModelStream).as_str(),
            "leasehold"
        );
    }

    #[test]
    fn a_policy_text_that_is_no_choice_is_refused_at_build_naming_the_key() {
        let refused = Flow::builder("triage", "Sort them.")
            .policy("Mine!")
            .policy(PolicyName::DEADLINE)
            .build()
            .expect_err("refused");
        assert_eq!(refused.path, "leases.policy");
        assert!(refused.message.contains("\"Mine!\""), "{}", refused.message);
        let refused = Flow::builder("triage", "Sort them.")
            .policy("leasehold, tool_cal = mine")
            .build()
            .expect_err("refused");
        assert_eq!(refused.path, "leases.policy");
        assert!(
            refused.message.contains("a lease kind"),
            "{}",
            refused.message
        );
    }
}
