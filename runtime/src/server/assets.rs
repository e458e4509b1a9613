//! The dashboard: plain HTML, CSS and JavaScript compiled into the binary,
//! so `serve` needs no build step and no files beside it.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::error::ApiError;

const INDEX: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const STYLE_CSS: &str = include_str!("dashboard/style.css");

/// `GET /`: the dashboard's page.
pub(super) async fn index() -> Html<&'static str> {
    Html(INDEX)
}

/// `GET /assets/{name}`: its script and style sheet.
pub(super) async fn asset(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE_CSS, "text/css; charset=utf-8"),
        _ => {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                "no_route",
                format!("no asset {name}"),
            )
            .into_response();
        }
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
