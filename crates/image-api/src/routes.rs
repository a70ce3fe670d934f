//! The image API's route table (Glance v2 subset, paths relative to
//! `/image`) and Glance's error body.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method as M, Response};
use berth_http::routes::{Endpoint, Route};
use berth_http::{error_response, Api, ApiError, ApiResult, Policy, Req, Resp, Version, VersionSpec};
use serde_json::json;

use crate::metadef_catalog as md;
use crate::metadef_tags as mdt;
use crate::{actions, data, handlers, import, listing, members, metadefs, patch, ImageCtx};

type Sync = fn(&ImageCtx, &Req) -> ApiResult<Resp>;

/// Glance's error body, in the type the request accepts, as webob picks
/// it from `text/html` and `application/json`: JSON
/// `{"code": ..., "title": ..., "message": ...}` (openstackclient prints
/// `message`) for a client that asks for JSON; HTML for one that takes
/// anything (`*/*`, glanceclient's: it reads an HTML error's text, and
/// fails on a JSON one whose values are not objects, which turned Nova's
/// 400 for an unknown image into a 500); plain text otherwise.
pub fn render_image_error(err: &ApiError, _: Option<Version>, _: &str, headers: &HeaderMap) -> Response<Body> {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or("");
    let (status, title) = (err.status.as_u16(), err.title());
    match error_type(accept) {
        ErrorType::Json => {
            let body = json!({"code": status, "title": title, "message": err.detail});
            error_response(err, "application/json", body.to_string())
        }
        ErrorType::Html => {
            let body = format!(
                "<html>\n <head>\n  <title>{status} {title}</title>\n </head>\n <body>\n  <h1>{status} {title}</h1>\n  \
                 {}<br /><br />\n\n\n\n </body>\n</html>",
                berth_http::html_escape(&err.detail)
            );
            error_response(err, "text/html; charset=UTF-8", body)
        }
        ErrorType::Plain => {
            error_response(err, "text/plain; charset=UTF-8", format!("{status} {title}\n\n{}\n\n   ", err.detail))
        }
    }
}

/// The type of an error body.
#[derive(Debug, PartialEq, Eq)]
enum ErrorType {
    Json,
    Html,
    Plain,
}

/// The first media range of `accept` that `text/html` or
/// `application/json` matches decides (q-values aside). Without the
/// header: JSON (webob would answer HTML; berth's own clients send none
/// and read JSON, Python's send `*/*`).
fn error_type(accept: &str) -> ErrorType {
    if accept.trim().is_empty() {
        return ErrorType::Json;
    }
    for range in accept.split(',') {
        let media = range.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match media.as_str() {
            "application/json" | "application/*" => return ErrorType::Json,
            "text/html" | "text/*" | "*/*" => return ErrorType::Html,
            _ => {}
        }
    }
    ErrorType::Plain
}

fn g(method: M, handler: Sync) -> Endpoint<ImageCtx> {
    Endpoint::sync(method, Version(2, 0), handler)
}

/// The image (Glance v2 subset) API.
pub fn image_api(overrides: &BTreeMap<String, String>) -> anyhow::Result<Api<ImageCtx>> {
    let routes = vec![
        Route::new("/", vec![g(M::GET, handlers::versions).public()]),
        Route::new("/versions", vec![g(M::GET, handlers::versions_explicit).public()]),
        Route::new("/v2/info/import", vec![g(M::GET, handlers::info_import)]),
        Route::new("/v2/info/stores", vec![g(M::GET, handlers::info_stores)]),
        Route::new("/v2/images", vec![g(M::GET, listing::index), g(M::POST, handlers::create)]),
        Route::new(
            "/v2/images/{id}",
            vec![g(M::GET, handlers::show), g(M::PATCH, patch::update), g(M::DELETE, handlers::delete)],
        ),
        Route::new(
            "/v2/images/{id}/file",
            vec![
                Endpoint::stream(M::GET, Version(2, 0), data::download),
                Endpoint::stream(M::PUT, Version(2, 0), data::upload),
            ],
        ),
        Route::new("/v2/images/{id}/tasks", vec![g(M::GET, handlers::image_tasks)]),
        Route::new("/v2/images/{id}/stage", vec![Endpoint::stream(M::PUT, Version(2, 0), import::stage)]),
        Route::new("/v2/images/{id}/import", vec![Endpoint::async_(M::POST, Version(2, 0), import::import)]),
        Route::new("/v2/tasks", vec![g(M::POST, import::create_task)]),
        Route::new("/v2/images/{id}/tags/{tag}", vec![g(M::PUT, actions::add_tag), g(M::DELETE, actions::delete_tag)]),
        Route::new("/v2/images/{id}/actions/deactivate", vec![g(M::POST, actions::deactivate)]),
        Route::new("/v2/images/{id}/actions/reactivate", vec![g(M::POST, actions::reactivate)]),
        Route::new("/v2/images/{id}/members", vec![g(M::GET, members::index), g(M::POST, members::create)]),
        Route::new(
            "/v2/images/{id}/members/{member}",
            vec![g(M::GET, members::show), g(M::PUT, members::update), g(M::DELETE, members::delete)],
        ),
        Route::new("/v2/schemas/image", vec![g(M::GET, handlers::image_schema)]),
        Route::new("/v2/schemas/images", vec![g(M::GET, handlers::images_schema)]),
        Route::new("/v2/schemas/member", vec![g(M::GET, |_, _| Ok(Resp::ok(members::member_schema())))]),
        Route::new("/v2/schemas/members", vec![g(M::GET, |_, _| Ok(Resp::ok(members::members_schema())))]),
        Route::new("/v2/schemas/metadefs/{kind}", vec![g(M::GET, metadefs::schema)]),
        Route::new("/v2/metadefs/resource_types", vec![g(M::GET, mdt::resource_types)]),
        Route::new("/v2/metadefs/namespaces", vec![g(M::GET, md::index), g(M::POST, md::create)]),
        Route::new(
            "/v2/metadefs/namespaces/{ns}",
            vec![g(M::GET, md::show), g(M::PUT, md::update), g(M::DELETE, md::delete)],
        ),
        Route::new("/v2/metadefs/namespaces/{ns}/objects", vec![g(M::GET, md::objects), g(M::POST, md::create_object)]),
        Route::new(
            "/v2/metadefs/namespaces/{ns}/objects/{name}",
            vec![g(M::GET, md::show_object), g(M::PUT, md::update_object), g(M::DELETE, md::delete_object)],
        ),
        Route::new(
            "/v2/metadefs/namespaces/{ns}/properties",
            vec![g(M::GET, md::properties), g(M::POST, md::create_property)],
        ),
        Route::new(
            "/v2/metadefs/namespaces/{ns}/properties/{name}",
            vec![g(M::GET, md::show_property), g(M::PUT, md::update_property), g(M::DELETE, md::delete_property)],
        ),
        Route::new(
            "/v2/metadefs/namespaces/{ns}/tags",
            vec![g(M::GET, mdt::index), g(M::POST, mdt::create_many), g(M::DELETE, mdt::delete_all)],
        ),
        Route::new(
            "/v2/metadefs/namespaces/{ns}/tags/{tag}",
            vec![g(M::GET, mdt::show), g(M::POST, mdt::create), g(M::PUT, mdt::update), g(M::DELETE, mdt::delete)],
        ),
        Route::new(
            "/v2/metadefs/namespaces/{ns}/resource_types",
            vec![g(M::GET, mdt::index_associations), g(M::POST, mdt::create_association)],
        ),
        Route::new("/v2/metadefs/namespaces/{ns}/resource_types/{name}", vec![g(M::DELETE, mdt::delete_association)]),
    ];
    Ok(Api {
        name: "image",
        versions: VersionSpec::single(Version(2, 0), "image"),
        routes,
        policy: Arc::new(Policy::new(berth_compute_api::RULES, overrides)?),
        render_error: render_image_error,
        adjust_auth: berth_compute_api::api::adjust_auth,
        request_id_alias: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_take_the_type_the_client_accepts_as_webobs() {
        assert_eq!(error_type("application/json"), ErrorType::Json);
        assert_eq!(error_type("application/json, */*"), ErrorType::Json);
        assert_eq!(error_type("*/*"), ErrorType::Html);
        assert_eq!(error_type(""), ErrorType::Json);
        assert_eq!(error_type("text/html;q=0.9"), ErrorType::Html);
        assert_eq!(error_type("text/plain"), ErrorType::Plain);
    }
}
