//! Who asks: the tenant and scope a request acts with, from its key, and
//! what it may reach.
//!
//! A request is one of:
//!
//! - **the operator**: it carries the server's own token
//!   (`LEASEHOLD_API_TOKEN`), or, on a server without one (loopback only),
//!   no key at all. It acts for the [default tenant](DEFAULT_TENANT) with
//!   scope `admin`, and may also make, list and revoke every tenant's keys;
//! - **a tenant's key** (`lh_ID_SECRET`, made with `leasehold keys create`
//!   or `POST /keys`): it acts for its tenant with its scope. Each is read
//!   from the store at each request, so a key revoked on any executor
//!   sharing the store is refused by all at once.
//!
//! Each route needs a scope ([`needed`]): a read needs `read`; starting,
//! controlling and forking runs needs `operate`; keys and marking an
//! endpoint down or up, which reaches every tenant's runs, need `admin`.
//! `/mcp` itself needs `read`: each of its tools asks for the scope of the
//! route it stands for. A key without it gets 403 `forbidden_scope`,
//! naming the scope. A request for a run of another tenant gets the same
//! 404 as a run that does not exist ([`check_run`]): it does not learn the
//! run exists.

use axum::http::{Method, StatusCode};
use leasehold::tenancy::{self, DEFAULT_TENANT, Scope};

use super::App;
use super::error::ApiError;

/// Who a request acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The tenant it acts for.
    pub(crate) tenant: String,
    /// What it may do.
    pub(crate) scope: Scope,
    /// Its key's id; `None` for the operator.
    pub(crate) key_id: Option<String>,
}

impl Caller {
    /// The operator: the server's token, or no key on a server without one.
    pub(crate) fn operator() -> Self {
        Self {
            tenant: DEFAULT_TENANT.to_owned(),
            scope: Scope::Admin,
            key_id: None,
        }
    }

    /// Whether it is the operator, who manages every tenant's keys.
    pub(crate) fn is_operator(&self) -> bool {
        self.key_id.is_none()
    }

    /// The tenant as a new run's options carry it.
    pub(crate) fn run_tenant(&self) -> Option<String> {
        tenancy::stored_tenant(&self.tenant)
    }

    /// Who asked for a control, as its trace entry keeps it: the name the
    /// request gives (`by`) or `default`, and for a key, which key of which
    /// tenant, so that a name given is never all the trace knows.
    ///
    /// # Errors
    /// A name [`by_hand::who`](leasehold::executor::control::by_hand::who)
    /// refuses, saying why.
    pub(crate) fn who(&self, given: Option<&str>, default: &str) -> Result<String, String> {
        let name = leasehold::executor::control::by_hand::who(given, default)?;
        Ok(match &self.key_id {
            Some(id) => format!("{name} (key {id} of tenant `{}`)", self.tenant),
            None => name,
        })
    }

    /// The caller the guard handed a request, in its extensions.
    pub(crate) fn of(extensions: &axum::http::Extensions) -> Result<Self, ApiError> {
        extensions
            .get::<Self>()
            .cloned()
            .ok_or_else(|| ApiError::internal("the request reached a route without its caller"))
    }

    /// Who it is, in a message: `the key ID of tenant T` or `the operator`.
    pub(crate) fn describe(&self) -> String {
        match &self.key_id {
            Some(id) => format!("the key {id} of tenant `{}`", self.tenant),
            None => "the operator".to_owned(),
        }
    }
}

/// The scope a request needs: `admin` for keys and an endpoint marked down
/// or up; `read` for any other `GET` or `HEAD`, and for `/mcp`, whose
/// tools each ask for the scope of the route they stand for; `operate` for
/// the rest.
pub(crate) fn needed(method: &Method, path: &str) -> Scope {
    if path == "/keys" || path.starts_with("/keys/") || path.starts_with("/endpoints/") {
        return Scope::Admin;
    }
    if path == "/mcp" {
        return Scope::Read;
    }
    if *method == Method::GET || *method == Method::HEAD {
        Scope::Read
    } else {
        Scope::Operate
    }
}

/// 403 naming the scope `caller` lacks for the request.
pub(crate) fn check_scope(caller: &Caller, method: &Method, path: &str) -> Result<(), ApiError> {
    let needed = needed(method, path);
    if caller.scope.allows(needed) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden_scope",
        format!(
            "{method} {path} needs a key of scope `{needed}`; {} has scope `{}`",
            caller.describe(),
            caller.scope
        ),
    ))
}

/// The run a path names: `/runs/{id}` and everything under it (but not
/// `/runs/actions`).
pub(crate) fn run_in_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/runs/")?;
    let id = rest.split('/').next().unwrap_or_default();
    let is_actions = id == "actions" && !rest.contains('/');
    (!id.is_empty() && !is_actions).then_some(id)
}

/// Whether `caller` may reach the run `run_id`: a run of another tenant is
/// answered as one that does not exist, 404 `unknown_run`, word for word.
/// A run that does not exist is left to the route, which answers the same.
pub(crate) async fn check_run(app: &App, caller: &Caller, run_id: &str) -> Result<(), ApiError> {
    let Some(record) = app.engine().store().load_run(run_id).await? else {
        return Ok(());
    };
    if tenancy::tenant_or_default(record.tenant.as_deref()) == caller.tenant {
        Ok(())
    } else {
        Err(ApiError::unknown_run(run_id))
    }
}

/// The caller a key's secret names: its key, read from the store, if the
/// secret is its and it is not revoked; 401 otherwise, saying which.
pub(crate) async fn of_key(app: &App, secret: &str) -> Result<Caller, ApiError> {
    let unauthorized = |why: String| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why);
    let Some(id) = tenancy::key_id(secret) else {
        return Err(unauthorized(
            "the key given is neither this server's token nor an API key (`lh_ID_SECRET`)"
                .to_owned(),
        ));
    };
    let key = app.engine().store().load_api_key(id).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("the key could not be checked: {e}"),
        )
    })?;
    match key {
        Some(key) if key.accepts(secret) => Ok(Caller {
            tenant: key.tenant,
            scope: key.scope,
            key_id: Some(key.id),
        }),
        Some(key) if key.is_secret(secret) => {
            Err(unauthorized(format!("the key {} was revoked", key.id)))
        }
        _ => Err(unauthorized("unknown key".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_needs_its_scope() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(needed(&get, "/runs"), Scope::Read);
        assert_eq!(needed(&get, "/runs/r1/events"), Scope::Read);
        assert_eq!(needed(&post, "/runs"), Scope::Operate);
        assert_eq!(needed(&post, "/runs/r1/fork"), Scope::Operate);
        assert_eq!(needed(&post, "/runs/actions"), Scope::Operate);
        assert_eq!(needed(&get, "/keys"), Scope::Admin);
        assert_eq!(needed(&Method::DELETE, "/keys/abc"), Scope::Admin);
        assert_eq!(needed(&post, "/endpoints/down"), Scope::Admin);
        assert_eq!(needed(&get, "/endpoints"), Scope::Read);
        assert_eq!(needed(&post, "/mcp"), Scope::Read);
    }

    #[test]
    fn a_run_is_named_by_its_path_and_its_sub_paths() {
        assert_eq!(run_in_path("/runs/r1"), Some("r1"));
        assert_eq!(run_in_path("/runs/r1/leases/l/extend"), Some("r1"));
        assert_eq!(run_in_path("/runs/actions"), None);
        assert_eq!(run_in_path("/runs"), None);
        assert_eq!(run_in_path("/runs/"), None);
        assert_eq!(run_in_path("/keys/r1"), None);
    }
}
