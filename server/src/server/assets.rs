//! The dashboard: plain HTML, CSS and JavaScript modules compiled into the
//! binary, so `serve` needs no build step and no files beside it.
//!
//! The page loads `app.js` as an ES module (`<script type="module">`),
//! which imports one module per section by a relative path; each is served
//! here under `/assets/`, with a JavaScript content type, as browsers
//! require of a module script.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::error::{ApiError, ErrorBody};

const INDEX: &str = include_str!("dashboard/index.html");

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file under `/assets/`: its name, content type and body.
const ASSETS: &[(&str, &str, &str)] = &[
    ("style.css", CSS, include_str!("dashboard/style.css")),
    ("app.js", JAVASCRIPT, include_str!("dashboard/app.js")),
    ("api.js", JAVASCRIPT, include_str!("dashboard/api.js")),
    (
        "compare.js",
        JAVASCRIPT,
        include_str!("dashboard/compare.js"),
    ),
    (
        "controls.js",
        JAVASCRIPT,
        include_str!("dashboard/controls.js"),
    ),
    ("dom.js", JAVASCRIPT, include_str!("dashboard/dom.js")),
    (
        "endpoints.js",
        JAVASCRIPT,
        include_str!("dashboard/endpoints.js"),
    ),
    ("events.js", JAVASCRIPT, include_str!("dashboard/events.js")),
    ("fork.js", JAVASCRIPT, include_str!("dashboard/fork.js")),
    ("lease.js", JAVASCRIPT, include_str!("dashboard/lease.js")),
    ("run.js", JAVASCRIPT, include_str!("dashboard/run.js")),
    ("runs.js", JAVASCRIPT, include_str!("dashboard/runs.js")),
    ("state.js", JAVASCRIPT, include_str!("dashboard/state.js")),
    ("text.js", JAVASCRIPT, include_str!("dashboard/text.js")),
    (
        "timeline.js",
        JAVASCRIPT,
        include_str!("dashboard/timeline.js"),
    ),
    ("trace.js", JAVASCRIPT, include_str!("dashboard/trace.js")),
    ("tree.js", JAVASCRIPT, include_str!("dashboard/tree.js")),
    ("usage.js", JAVASCRIPT, include_str!("dashboard/usage.js")),
];

/// `GET /`: the dashboard's page.
#[utoipa::path(get, path = "/", tag = "dashboard",
    responses((status = 200, description = "The dashboard's page", content_type = "text/html; charset=utf-8", body = String)))]
pub(super) async fn index() -> Html<&'static str> {
    Html(INDEX)
}

/// An asset's name in the path (`/assets/{name}`).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the handler as `Path<String>`.
pub(super) struct AssetPath {
    /// The file: `app.js`, `style.css`, …
    name: String,
}

/// `GET /assets/{name}`: its script modules and style sheet.
#[utoipa::path(get, path = "/assets/{name}", tag = "dashboard", params(AssetPath),
    responses(
        (status = 200, description = "A script module or the style sheet", content(
            (String = "text/javascript; charset=utf-8"),
            (String = "text/css; charset=utf-8"),
        )),
        (status = 404, description = "No such asset", body = ErrorBody),
    ))]
pub(super) async fn asset(Path(name): Path<String>) -> Response {
    let Some(&(_, content_type, body)) = ASSETS.iter().find(|(file, _, _)| *file == name) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            format!("no asset {name}"),
        )
        .into_response();
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
