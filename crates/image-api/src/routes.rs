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

/// Glance's error body: `{"code": ..., "title": ..., "message": ...}`
/// (openstackclient prints `message`).
pub fn render_image_error(err: &ApiError, _: Option<Version>, _: &str, _: &HeaderMap) -> Response<Body> {
    let body = json!({"code": err.status.as_u16(), "title": err.title(), "message": err.detail});
    error_response(err, "application/json", body.to_string())
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
