//! The guard in front of every route: who may ask, from where.
//!
//! In order, each refusal a JSON 4xx:
//!
//! 1. **Host.** Without a token, the `Host` must be the bound loopback
//!    address (by its address, or as `localhost`) or one the configuration
//!    allows (`server.allowed_hosts`): a page on another site that rebinds
//!    its own name to 127.0.0.1 (DNS rebinding) is refused with 403
//!    `host_not_allowed`.
//! 2. **Origin.** A request that carries an `Origin` other than the
//!    server's own (the scheme and the `Host` it was sent to) or one the
//!    configuration allows (`server.allowed_origins`), or a state-changing
//!    request without an `Origin` whose `Sec-Fetch-Site` is other than
//!    `same-origin` or `none`, is refused with 403 `cross_origin`: a browser
//!    says where a cross-site request comes from, and no page of another
//!    site may drive this server.
//! 3. **Who asks.** With a token, everything but the dashboard's files,
//!    `/health` and `/openapi.json` ([`is_open`]) needs `Authorization: Bearer KEY`: the server's token or an
//!    API key ([`caller`](super::caller)); only the event stream
//!    (`GET /runs/{id}/events`) also takes `?token=`, since a browser's
//!    `EventSource` cannot set headers. Without a token, a request is the
//!    operator's unless it carries an API key, which is checked and acts as
//!    that key; a token it carries is not asked for, and not checked. Tokens
//!    and keys are compared as SHA-256 digests, so the comparison takes the
//!    same time whatever the length or the first difference. A wrong,
//!    unknown or revoked key is 401.
//! 4. **Scope and tenant.** A key without the scope the route needs is 403
//!    `forbidden_scope`; a route of a run of another tenant is the 404 of a
//!    run that does not exist.
//!
//! Bodies are checked by the handlers that read them (`api.rs`): a
//! state-changing route takes only `application/json` (and `POST /runs`
//! also `application/toml`), never sniffs, and refuses anything else with
//! 415 — which is what a cross-site `<form>` or a `text/plain` fetch would
//! send.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::App;
use super::caller::{self, Caller};
use super::error::ApiError;

/// The guard: host, origin, then who asks ([`Caller`]), the scope the
/// route needs, and, for a route of one run, that the run is the caller's.
/// The caller is handed to the route as a request extension. A refusal of
/// a request that came with a body (which may be left unread) closes the
/// connection, so that no client reuses a connection whose next bytes are
/// that body.
pub(super) async fn guard(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let has_body = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let mut response = match check(&app, &method, &uri, request.headers()).await {
        Err(refusal) => refusal.into_response(),
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
    };
    let status = response.status();
    if has_body && (status.is_client_error() || status.is_server_error()) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

async fn check(
    app: &App,
    method: &Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let token = app.options.token();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .unwrap_or_default();
    if token.is_none() && !host_allowed(host, app.bound.get(), &app.options.allowed_hosts) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "this server answers requests for its loopback address only, not for Host \
                 {host:?}: list the name in server.allowed_hosts (LEASEHOLD_SERVER_ALLOWED_HOSTS), \
                 or set a token"
            ),
        ));
    }
    check_origin(method, headers, host, &app.options.allowed_origins)?;
    let path = uri.path();
    if is_open(path) {
        return Ok(Caller::operator());
    }
    let in_query = is_event_stream(method, path)
        .then(|| query_token(uri.query()))
        .flatten();
    let caller = match (bearer(headers).or(in_query), token) {
        (None, None) => Caller::operator(),
        (None, Some(_)) => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this server needs `Authorization: Bearer KEY`, the server's token \
                 (LEASEHOLD_API_TOKEN) or an API key; only the event stream also takes `?token=`",
            ));
        }
        (Some(given), Some(token)) if same_token(&given, token) => Caller::operator(),
        // An API key is checked whether or not the server has a token.
        (Some(given), _) if leasehold::tenancy::key_id(&given).is_some() => {
            caller::of_key(app, &given).await?
        }
        // Without a token, anything else a client sends is not asked for:
        // the request is the operator's, as it was before keys.
        (Some(_), None) => Caller::operator(),
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "wrong token",
            ));
        }
    };
    caller::check_scope(&caller, method, path)?;
    if let Some(run_id) = caller::run_in_path(path) {
        caller::check_run(app, &caller, run_id).await?;
    }
    Ok(caller)
}

/// Whether `path` is served to anyone the host and origin checks let
/// through, without a key: the dashboard's files, `/health` and the API's
/// document, none of which holds a run's data.
pub(super) fn is_open(path: &str) -> bool {
    path == "/" || path == "/health" || path == "/openapi.json" || path.starts_with("/assets/")
}

/// Whether the request carries the server's token (for `/health`'s
/// details).
pub(super) fn authorized(app: &App, headers: &HeaderMap) -> bool {
    match (app.options.token(), bearer(headers)) {
        (Some(token), Some(given)) => same_token(&given, token),
        _ => false,
    }
}

fn is_event_stream(method: &Method, path: &str) -> bool {
    method == Method::GET
        && path
            .strip_prefix("/runs/")
            .and_then(|rest| rest.strip_suffix("/events"))
            .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// Whether `host` (a `Host` header: a name or address, maybe a port)
/// names this server on `bound`, or is allowed.
fn host_allowed(host: &str, bound: Option<&SocketAddr>, allowed: &[String]) -> bool {
    if host.is_empty() {
        return false;
    }
    if allowed.iter().any(|a| {
        a.eq_ignore_ascii_case(host) || split_host(host).0.eq_ignore_ascii_case(a.as_str())
    }) {
        return true;
    }
    let Some(bound) = bound else {
        return false;
    };
    let (name, port) = split_host(host);
    if port.is_some_and(|p| p != bound.port()) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if name.eq_ignore_ascii_case("localhost") {
        return bound.ip().is_loopback();
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip == bound.ip() || (ip.is_loopback() && bound.ip().is_loopback()))
}

/// `host:port`, `[v6]:port`, `host` or `[v6]`, split.
fn split_host(host: &str) -> (&str, Option<u16>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((name, tail)) => (
                name,
                tail.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()),
            ),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => match port.parse::<u16>() {
            Ok(port) => (name, Some(port)),
            Err(_) => (host, None),
        },
        _ => (host, None),
    }
}

/// An `Origin`, when there is one, must be the server's own or an allowed
/// one. Without one, a request that changes something must not come from
/// another site by the browser's own account (`Sec-Fetch-Site`); a
/// cross-site read (a link followed to the dashboard, an image) changes
/// nothing and cannot be read back, and is served.
fn check_origin(
    method: &Method,
    headers: &HeaderMap,
    host: &str,
    allowed: &[String],
) -> Result<(), ApiError> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("(not text)").trim();
        let own = [format!("http://{host}"), format!("https://{host}")];
        let listed = |o: &String| o.trim_end_matches('/').eq_ignore_ascii_case(origin);
        if !host.is_empty() && own.iter().any(|o| o.eq_ignore_ascii_case(origin))
            || allowed.iter().any(listed)
        {
            return Ok(());
        }
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!(
                "a request from origin {origin:?} is refused: only this server's own pages may \
                 use it (list other origins in server.allowed_origins, \
                 LEASEHOLD_SERVER_ALLOWED_ORIGINS)"
            ),
        ));
    }
    let reads = *method == Method::GET || *method == Method::HEAD;
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        let site = site.trim();
        if !reads && !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none")
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "a request from another site ({site}) is refused: only this server's own \
                     pages may use it"
                ),
            ));
        }
    }
    Ok(())
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?;
    Some(token.trim().to_owned())
}

fn query_token(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.into_owned())
}

/// Compares the SHA-256 digests of the two, every byte: the time taken
/// says nothing of the token's length or of where the two differ.
fn same_token(given: &str, token: &str) -> bool {
    let given = Sha256::digest(given.as_bytes());
    let token = Sha256::digest(token.as_bytes());
    given
        .iter()
        .zip(token.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_token_is_percent_decoded() {
        assert_eq!(
            query_token(Some("after=3&token=a%2Bb")),
            Some("a+b".to_owned())
        );
        assert_eq!(query_token(Some("token=x+y")), Some("x y".to_owned()));
        assert_eq!(query_token(Some("after=3")), None);
    }

    #[test]
    fn tokens_are_compared_as_digests_of_any_length() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("", "a-very-long-token-indeed"));
        // The two sides of the compare are always 32 bytes, whatever the
        // lengths given.
        assert_eq!(Sha256::digest(b"").len(), Sha256::digest([7u8; 4096]).len());
    }

    #[test]
    fn only_the_event_stream_takes_the_token_in_its_query() {
        assert!(is_event_stream(&Method::GET, "/runs/01J/events"));
        assert!(!is_event_stream(&Method::GET, "/runs/01J"));
        assert!(!is_event_stream(&Method::GET, "/runs"));
        assert!(!is_event_stream(&Method::POST, "/runs/01J/events"));
        assert!(!is_event_stream(&Method::GET, "/runs/a/b/events"));
    }

    #[test]
    fn hosts_name_the_bound_loopback_address_or_an_allowed_name() {
        let bound: SocketAddr = "127.0.0.1:7878".parse().unwrap_or_else(|e| panic!("{e}"));
        let allowed = vec!["ops.example.com".to_owned()];
        for host in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST:7878",
            "127.0.0.1",
        ] {
            assert!(host_allowed(host, Some(&bound), &[]), "{host}");
        }
        for host in [
            "evil.example:7878",
            "127.0.0.1:9999",
            "",
            "localhost.evil.example:7878",
        ] {
            assert!(!host_allowed(host, Some(&bound), &[]), "{host}");
        }
        assert!(host_allowed("ops.example.com:7878", Some(&bound), &allowed));
        let v6: SocketAddr = "[::1]:7878".parse().unwrap_or_else(|e| panic!("{e}"));
        assert!(host_allowed("[::1]:7878", Some(&v6), &[]));
        assert!(host_allowed("localhost:7878", Some(&v6), &[]));
    }
}
