//! `GET /openapi.json`: the API's OpenAPI 3.1 document, made from the
//! handlers' own annotations and the types they answer with, so that a
//! field renamed in Rust is renamed in the document.
//!
//! What every route shares is added here from the rules that apply it,
//! not written on each handler: the scope a route needs comes from
//! [`caller::needed`], the routes open without a key from
//! [`guard::is_open`], and the guard's refusals (401, 403, 503) are added
//! to every route behind it. The document holds no data and is served
//! without a key, as `/health` is.

use std::sync::LazyLock;

use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

use super::caller;
use super::commands::ControlAnswer;
use super::error::ErrorBody;
use super::guard;

/// The name of the bearer scheme in the document.
const BEARER: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "leasehold",
        description = "The HTTP API of a leasehold executor: runs, their events and trace, a \
                       person's controls, keys and endpoints. Errors are `ErrorBody`.",
    ),
    paths(
        super::assets::index,
        super::assets::asset,
        super::api::health,
        serve_document,
        super::metrics::scrape,
        super::executor::status,
        super::api::paces,
        super::endpoints::list,
        super::endpoints::down,
        super::endpoints::up,
        super::keys::create,
        super::keys::list,
        super::keys::revoke,
        super::api::create_run,
        super::api::list_runs,
        super::many::act,
        super::api::show_run,
        super::events::stream,
        super::api::trace,
        super::recording::recording,
        super::api::resume,
        super::api::cancel,
        super::by_hand::pause,
        super::by_hand::message,
        super::by_hand::extend,
        super::by_hand::intervene,
        super::api::reconcile,
        super::api::fork,
        super::mcp::endpoint,
    ),
    components(schemas(ErrorBody, ControlAnswer, leasehold::Event, leasehold::TextDelta)),
    modifiers(&Guarded),
    tags(
        (name = "runs", description = "Runs: posted, listed, shown, followed, forked"),
        (name = "controls", description = "A person's controls of runs"),
        (name = "keys", description = "API keys (scope `admin`)"),
        (name = "mcp", description = "Runs over MCP: the same runs, keys and tenants as tools"),
        (name = "endpoints", description = "The endpoints the runs call"),
        (name = "server", description = "The server and its executor"),
        (name = "dashboard", description = "The dashboard's files"),
    )
)]
struct ApiDoc;

/// The API's OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as served, made once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    document()
        .to_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"the document could not be written: {e}\"}}"))
});

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", operation_id = "document", tag = "server",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)))]
pub(super) async fn serve_document() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

/// What the guard adds to every route: its security and its refusals.
struct Guarded;

impl utoipa::Modify for Guarded {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The server's token (LEASEHOLD_API_TOKEN), or an API key \
                         `lh_ID_SECRET` of scope read, operate or admin. A server without a \
                         token takes requests without one as the operator's.",
                    ))
                    .build(),
            ),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                (Method::GET, &mut item.get),
                (Method::POST, &mut item.post),
                (Method::PUT, &mut item.put),
                (Method::DELETE, &mut item.delete),
                (Method::PATCH, &mut item.patch),
            ];
            for (method, operation) in operations {
                if let Some(operation) = operation {
                    guard_operation(&method, path, operation);
                }
            }
        }
    }
}

/// The guard's part of one operation.
fn guard_operation(method: &Method, path: &str, operation: &mut Operation) {
    add_refusal(
        operation,
        "403",
        "A `Host` other than the server's without a token (`host_not_allowed`), or a request \
         from another origin (`cross_origin`)",
    );
    if guard::is_open(path) {
        return;
    }
    let scope = caller::needed(method, path);
    operation.security = Some(vec![SecurityRequirement::new(BEARER, [scope.name()])]);
    add_refusal(
        operation,
        "401",
        "No key where the server has a token, or a wrong, unknown or revoked one \
         (`unauthorized`)",
    );
    add_refusal(
        operation,
        "403",
        &format!("A key without scope `{scope}` (`forbidden_scope`)"),
    );
    add_refusal(
        operation,
        "503",
        "The store could not check the key (`store_unavailable`)",
    );
    if caller::run_in_path(path).is_some() {
        add_refusal(
            operation,
            "404",
            "No such run of the caller's tenant (`not_found`)",
        );
        add_refusal(operation, "500", "The store failed (`internal`)");
    }
}

/// Adds `status` with an [`ErrorBody`] to `operation`, or, when it is
/// there already, adds `why` to its description.
fn add_refusal(operation: &mut Operation, status: &str, why: &str) {
    let responses = &mut operation.responses.responses;
    if let Some(RefOr::T(response)) = responses.get_mut(status) {
        if !response.description.contains(why) {
            response.description = format!("{}; or: {why}", response.description);
        }
        return;
    }
    responses.insert(
        status.to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description(why)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build(),
        ),
    );
}
