//! `/keys`: a tenant's API keys, made, listed and revoked by a key of
//! scope `admin` of that tenant, or by the operator for any tenant. A
//! key's secret is in the answer that makes it, and nowhere else.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use leasehold::tenancy::{KeyView, NewKey, Scope};
use serde::{Deserialize, Serialize};

use super::App;
use super::api::read_json_body;
use super::caller::Caller;
use super::error::{ApiError, ErrorBody};

/// A key just made: its view and its secret, given in this answer only.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct NewKeyView {
    #[serde(flatten)]
    key: KeyView,
    /// The key to send as `Authorization: Bearer lh_ID_SECRET`.
    secret: String,
}

/// The body of `POST /keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    /// The key's tenant: the caller's when not given.
    tenant: Option<String>,
    /// What it may do.
    scope: Scope,
    /// A name for people.
    name: Option<String>,
}

/// The query of `GET /keys`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListParams {
    /// The tenant whose keys (the operator only; a key: its own).
    tenant: Option<String>,
}

/// A key in a path (`/keys/{id}/…`).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the handler as `Path<String>`.
pub(super) struct KeyPath {
    /// The key's id.
    id: String,
}

/// The tenant whose keys `caller` asks for: its own, or, for the operator,
/// any; another tenant's is a 403 naming it.
fn tenant_for(caller: &Caller, asked: Option<String>) -> Result<String, ApiError> {
    let tenant = asked.unwrap_or_else(|| caller.tenant.clone());
    if tenant == caller.tenant || caller.is_operator() {
        leasehold::tenancy::check_tenant(&tenant).map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_tenant",
                e.to_string(),
            )
        })?;
        return Ok(tenant);
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden_tenant",
        format!(
            "{} manages the keys of tenant `{}` only, not of `{tenant}`",
            caller.describe(),
            caller.tenant
        ),
    ))
}

/// `POST /keys`: `{"scope": "read" | "operate" | "admin", "tenant", "name"}`:
/// a new key (201), its secret given in this answer only.
#[utoipa::path(post, path = "/keys", tag = "keys",
    request_body = CreateBody,
    responses(
        (status = 201, description = "The key, with its secret", body = NewKeyView,
            headers(("Location" = String, description = "`/keys/{id}`"))),
        (status = 400, description = "A body that is not a key to make", body = ErrorBody),
        (status = 403, description = "Another tenant's key, asked by a tenant's key (`forbidden_tenant`)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "The body is larger than its limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "An invalid tenant or name", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn create(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let bytes = read_json_body(&app, &headers, body).await?;
    let body: CreateBody = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not a key to make: {e}")))?;
    let tenant = tenant_for(&caller, body.tenant)?;
    let now = app.engine().clock().now_unix_ms();
    let made = NewKey::make(&tenant, body.scope, body.name, now)
        .map_err(|why| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_key", why))?;
    app.engine()
        .store()
        .create_api_key(made.key.clone())
        .await?;
    tracing::info!(key = %made.key.id, %tenant, scope = %made.key.scope, by = %caller.describe(), "an API key was made");
    let view = NewKeyView {
        key: KeyView::from(made.key.clone()),
        secret: made.secret,
    };
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/keys/{}", made.key.id))],
        Json(view),
    )
        .into_response())
}

/// `GET /keys[?tenant=T]`: the keys of the caller's tenant (the operator:
/// of every tenant, or of `T`), revoked ones included.
#[utoipa::path(get, path = "/keys", tag = "keys", params(ListParams),
    responses(
        (status = 200, description = "The keys, revoked ones included", body = Vec<KeyView>),
        (status = 400, description = "A query that is not what this route takes", body = ErrorBody),
        (status = 403, description = "Another tenant's keys, asked by a tenant's key (`forbidden_tenant`)", body = ErrorBody),
        (status = 422, description = "An invalid tenant", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn list(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<Vec<KeyView>>, ApiError> {
    let Query(params) = params.map_err(|rejection| {
        ApiError::bad_request(format!(
            "the query is not what this route takes: {}",
            rejection.body_text()
        ))
    })?;
    let tenant = match (params.tenant, caller.is_operator()) {
        (None, true) => None,
        (asked, _) => Some(tenant_for(&caller, asked)?),
    };
    let keys = app.engine().store().list_api_keys(tenant).await?;
    Ok(Json(keys.into_iter().map(KeyView::from).collect()))
}

/// `POST /keys/{id}/revoke`: the key revoked, refused from now on by every
/// executor of the store. A key of another tenant is 404, as one that does
/// not exist.
#[utoipa::path(post, path = "/keys/{id}/revoke", tag = "keys", params(KeyPath),
    responses(
        (status = 200, description = "The key, revoked", body = KeyView),
        (status = 404, description = "No such key of the caller's tenant (`unknown_key`)", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn revoke(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<KeyView>, ApiError> {
    let id = path.map(|Path(id)| id).map_err(|rejection| {
        ApiError::bad_request(format!(
            "the key id in the path could not be read: {}",
            rejection.body_text()
        ))
    })?;
    let unknown = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_key",
            format!("no API key {id}"),
        )
    };
    let store = app.engine().store();
    let key = store.load_api_key(&id).await?.ok_or_else(unknown)?;
    if key.tenant != caller.tenant && !caller.is_operator() {
        return Err(unknown());
    }
    let now = app.engine().clock().now_unix_ms();
    let revoked = store.revoke_api_key(&id, now).await?.ok_or_else(unknown)?;
    tracing::info!(key = %id, tenant = %revoked.tenant, by = %caller.describe(), "an API key was revoked");
    Ok(Json(KeyView::from(revoked)))
}
