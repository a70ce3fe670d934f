//! The route tables of the compute-side APIs: compute (Nova 2.1–2.104,
//! paths relative to `/compute`), agent (`/agent/v1`), admin (`/admin/v1`)
//! and identity (`/identity`). The image and reservation APIs have crates
//! of their own (`berth-image-api`, `berth-reservation-api`). One list per API; each endpoint names the microversion
//! it appears at and, when Nova removed it, the last one serving it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::Method as M;
use berth_http::routes::{Endpoint, Route};
use berth_http::{Api, ApiResult, HandlerFuture, Policy, Req, Resp, Version, VersionSpec};

use crate::api::{self, ComputeCtx};
use crate::handlers::{
    agents, credentials, events, flavors, hosts, images, keypairs, migrations, resources, servers, usage,
};

type Sync = fn(&ComputeCtx, &Req) -> ApiResult<Resp>;
type Async = fn(Arc<ComputeCtx>, Req) -> HandlerFuture;

fn s(method: M, handler: Sync) -> Endpoint<ComputeCtx> {
    Endpoint::sync(method, Version(2, 1), handler)
}

fn a(method: M, handler: Async) -> Endpoint<ComputeCtx> {
    Endpoint::async_(method, Version(2, 1), handler)
}

fn since(minor: u16, mut endpoint: Endpoint<ComputeCtx>) -> Endpoint<ComputeCtx> {
    endpoint.min_version = Version(endpoint.min_version.0, minor);
    endpoint
}

/// Served up to and including 2.`minor` (Nova removed it after).
fn until(minor: u16, endpoint: Endpoint<ComputeCtx>) -> Endpoint<ComputeCtx> {
    endpoint.until(Version(2, minor))
}

/// The compute API's routes.
pub fn compute_routes() -> Vec<Route<ComputeCtx>> {
    vec![
        Route::new("/", vec![s(M::GET, resources::versions).public()]),
        Route::new("/v2", vec![s(M::GET, resources::version_show_v20).public()]),
        Route::new("/v2/", vec![s(M::GET, resources::version_show_v20).public()]),
        Route::new("/v2.1", vec![s(M::GET, resources::version_show).public()]),
        Route::new("/v2.1/", vec![s(M::GET, resources::version_show).public()]),
        Route::new("/v2.1/servers", vec![a(M::GET, servers::index), s(M::POST, servers::create)]),
        Route::new("/v2.1/servers/detail", vec![a(M::GET, servers::detail)]),
        Route::new(
            "/v2.1/servers/{id}",
            vec![a(M::GET, servers::show), a(M::PUT, servers::update), a(M::DELETE, servers::delete)],
        ),
        Route::new("/v2.1/servers/{id}/action", vec![a(M::POST, servers::action)]),
        Route::new(
            "/v2.1/servers/{id}/metadata",
            vec![
                a(M::GET, servers::list_metadata),
                a(M::POST, servers::create_metadata),
                a(M::PUT, servers::update_all_metadata),
            ],
        ),
        Route::new(
            "/v2.1/servers/{id}/metadata/{key}",
            vec![
                a(M::GET, servers::show_metadata),
                a(M::PUT, servers::update_metadata),
                a(M::DELETE, servers::delete_metadata),
            ],
        ),
        Route::new(
            "/v2.1/servers/{id}/tags",
            vec![
                since(26, a(M::GET, servers::list_tags)),
                since(26, a(M::PUT, servers::replace_tags)),
                since(26, a(M::DELETE, servers::delete_all_tags)),
            ],
        ),
        Route::new(
            "/v2.1/servers/{id}/tags/{tag}",
            vec![
                since(26, a(M::GET, servers::show_tag)),
                since(26, a(M::PUT, servers::add_tag)),
                since(26, a(M::DELETE, servers::delete_tag)),
            ],
        ),
        Route::new("/v2.1/servers/{id}/ips", vec![a(M::GET, servers::list_ips)]),
        Route::new("/v2.1/servers/{id}/ips/{network}", vec![a(M::GET, servers::show_ips)]),
        Route::new("/v2.1/servers/{id}/os-instance-actions", vec![a(M::GET, servers::list_actions)]),
        Route::new("/v2.1/servers/{id}/diagnostics", vec![a(M::GET, servers::diagnostics)]),
        Route::new(
            "/v2.1/servers/{id}/os-server-password",
            vec![a(M::GET, servers::show_password), a(M::DELETE, servers::clear_password)],
        ),
        Route::new("/v2.1/servers/{id}/migrations", vec![since(23, a(M::GET, migrations::list_server_migrations))]),
        Route::new(
            "/v2.1/servers/{id}/migrations/{mid}",
            vec![
                since(23, a(M::GET, migrations::show_server_migration)),
                since(24, a(M::DELETE, migrations::delete_server_migration)),
            ],
        ),
        Route::new(
            "/v2.1/servers/{id}/migrations/{mid}/action",
            vec![since(22, a(M::POST, migrations::server_migration_action))],
        ),
        Route::new("/v2.1/os-migrations", vec![a(M::GET, migrations::list_migrations)]),
        Route::new("/v2.1/servers/{id}/os-instance-actions/{request_id}", vec![a(M::GET, servers::show_action)]),
        Route::new("/v2.1/flavors", vec![s(M::GET, flavors::index), s(M::POST, flavors::create)]),
        Route::new("/v2.1/flavors/detail", vec![s(M::GET, flavors::detail)]),
        Route::new(
            "/v2.1/flavors/{id}",
            vec![s(M::GET, flavors::show), since(55, s(M::PUT, flavors::update)), s(M::DELETE, flavors::delete)],
        ),
        Route::new("/v2.1/flavors/{id}/action", vec![s(M::POST, flavors::action)]),
        Route::new("/v2.1/flavors/{id}/os-flavor-access", vec![s(M::GET, flavors::list_access)]),
        Route::new(
            "/v2.1/flavors/{id}/os-extra_specs",
            vec![s(M::GET, flavors::list_extra_specs), s(M::POST, flavors::create_extra_specs)],
        ),
        Route::new(
            "/v2.1/flavors/{id}/os-extra_specs/{key}",
            vec![
                s(M::GET, flavors::show_extra_spec),
                s(M::PUT, flavors::update_extra_spec),
                s(M::DELETE, flavors::delete_extra_spec),
            ],
        ),
        Route::new("/v2.1/images", vec![until(35, s(M::GET, images::index))]),
        Route::new("/v2.1/images/detail", vec![until(35, s(M::GET, images::detail))]),
        Route::new(
            "/v2.1/images/{id}",
            vec![until(35, s(M::GET, images::show)), until(35, s(M::DELETE, images::delete))],
        ),
        Route::new(
            "/v2.1/images/{id}/metadata",
            vec![
                until(35, s(M::GET, images::list_metadata)),
                until(35, s(M::POST, images::create_metadata)),
                until(35, s(M::PUT, images::update_all_metadata)),
            ],
        ),
        Route::new(
            "/v2.1/images/{id}/metadata/{key}",
            vec![
                until(35, s(M::GET, images::show_metadata)),
                until(35, s(M::PUT, images::update_metadata)),
                until(35, s(M::DELETE, images::delete_metadata)),
            ],
        ),
        Route::new("/v2.1/os-keypairs", vec![s(M::GET, keypairs::index), s(M::POST, keypairs::create)]),
        Route::new("/v2.1/os-keypairs/{name}", vec![s(M::GET, keypairs::show), s(M::DELETE, keypairs::delete)]),
        Route::new(
            "/v2.1/os-server-groups",
            vec![s(M::GET, resources::list_groups), s(M::POST, resources::create_group)],
        ),
        Route::new(
            "/v2.1/os-server-groups/{id}",
            vec![s(M::GET, resources::show_group), s(M::DELETE, resources::delete_group)],
        ),
        Route::new(
            "/v2.1/os-quota-sets/{project}",
            vec![
                s(M::GET, resources::show_quota),
                s(M::PUT, resources::update_quota),
                s(M::DELETE, resources::delete_quota),
            ],
        ),
        Route::new("/v2.1/os-quota-sets/{project}/defaults", vec![s(M::GET, resources::quota_defaults)]),
        Route::new("/v2.1/os-quota-sets/{project}/detail", vec![s(M::GET, resources::quota_detail)]),
        Route::new(
            "/v2.1/os-quota-class-sets/{class}",
            vec![s(M::GET, resources::show_quota_class), s(M::PUT, resources::update_quota_class)],
        ),
        Route::new("/v2.1/limits", vec![s(M::GET, resources::limits)]),
        Route::new("/v2.1/extensions", vec![s(M::GET, resources::list_extensions)]),
        Route::new("/v2.1/extensions/{alias}", vec![s(M::GET, resources::show_extension)]),
        Route::new("/v2.1/os-simple-tenant-usage", vec![a(M::GET, usage::list_tenant_usages)]),
        Route::new("/v2.1/os-simple-tenant-usage/{tenant}", vec![a(M::GET, usage::show_tenant_usage)]),
        Route::new("/v2.1/os-instance_usage_audit_log", vec![a(M::GET, usage::list_audit_logs)]),
        Route::new("/v2.1/os-instance_usage_audit_log/{before}", vec![a(M::GET, usage::show_audit_log)]),
        Route::new("/v2.1/os-server-external-events", vec![a(M::POST, events::create_events)]),
        Route::new("/v2.1/os-hypervisors", vec![a(M::GET, resources::list_hypervisors)]),
        Route::new("/v2.1/os-hypervisors/detail", vec![a(M::GET, resources::detail_hypervisors)]),
        Route::new("/v2.1/os-networks", vec![until(35, s(M::GET, resources::list_networks))]),
        Route::new("/v2.1/os-networks/{id}", vec![until(35, s(M::GET, resources::show_network))]),
        Route::new("/v2.1/os-hypervisors/statistics", vec![until(87, a(M::GET, hosts::hypervisor_statistics))]),
        Route::new("/v2.1/os-hypervisors/{id}", vec![a(M::GET, resources::show_hypervisor)]),
        Route::new("/v2.1/os-hypervisors/{id}/uptime", vec![until(87, a(M::GET, hosts::hypervisor_uptime))]),
        Route::new("/v2.1/os-hypervisors/{pattern}/search", vec![until(52, a(M::GET, hosts::search_hypervisors))]),
        Route::new("/v2.1/os-hypervisors/{pattern}/servers", vec![until(52, a(M::GET, hosts::hypervisor_servers))]),
        Route::new("/v2.1/os-hosts", vec![until(42, a(M::GET, hosts::list_hosts))]),
        Route::new(
            "/v2.1/os-hosts/{host}",
            vec![until(42, a(M::GET, hosts::show_host)), until(42, a(M::PUT, hosts::update_host))],
        ),
        Route::new("/v2.1/os-hosts/{host}/reboot", vec![until(42, a(M::GET, hosts::host_power_action))]),
        Route::new("/v2.1/os-hosts/{host}/shutdown", vec![until(42, a(M::GET, hosts::host_power_action))]),
        Route::new("/v2.1/os-hosts/{host}/startup", vec![until(42, a(M::GET, hosts::host_power_action))]),
        Route::new("/v2.1/os-services", vec![a(M::GET, resources::list_services)]),
        Route::new(
            "/v2.1/os-services/{id}",
            vec![a(M::PUT, resources::update_service), a(M::DELETE, resources::delete_service)],
        ),
        Route::new(
            "/v2.1/os-aggregates",
            vec![s(M::GET, resources::list_aggregates), s(M::POST, resources::create_aggregate)],
        ),
        Route::new(
            "/v2.1/os-aggregates/{id}",
            vec![
                s(M::GET, resources::show_aggregate),
                s(M::PUT, resources::update_aggregate),
                s(M::DELETE, resources::delete_aggregate),
            ],
        ),
        Route::new("/v2.1/os-aggregates/{id}/action", vec![s(M::POST, resources::aggregate_action)]),
        Route::new("/v2.1/os-availability-zone", vec![a(M::GET, resources::list_zones)]),
        Route::new("/v2.1/os-availability-zone/detail", vec![a(M::GET, resources::detail_zones)]),
    ]
}

/// Is `segment` the first path segment after `/v2.1/` of some compute
/// route (`servers`, `os-hosts`, ...)? Anything else there is read as
/// the optional `{project_id}` segment of Nova's URLs.
pub fn is_collection(segment: &str) -> bool {
    static COLLECTIONS: std::sync::OnceLock<std::collections::BTreeSet<String>> = std::sync::OnceLock::new();
    COLLECTIONS
        .get_or_init(|| {
            compute_routes()
                .iter()
                .filter_map(|r| r.pattern.strip_prefix("/v2.1/"))
                .filter_map(|rest| rest.split('/').next())
                .filter(|first| !first.is_empty() && !first.starts_with('{'))
                .map(str::to_owned)
                .collect()
        })
        .contains(segment)
}

/// The compute API with the policy file's `overrides`.
pub fn compute_api(overrides: &BTreeMap<String, String>) -> anyhow::Result<Api<ComputeCtx>> {
    Ok(Api {
        name: "compute",
        versions: api::VERSIONS,
        routes: compute_routes(),
        policy: Arc::new(Policy::new(crate::policy_rules::RULES, overrides)?),
        render_error: api::render_error,
        adjust_auth: api::adjust_auth,
        request_id_alias: Some("x-compute-request-id"),
    })
}

fn v1s(method: M, handler: Sync) -> Endpoint<ComputeCtx> {
    Endpoint::sync(method, Version(1, 0), handler)
}

fn v1a(method: M, handler: Async) -> Endpoint<ComputeCtx> {
    Endpoint::async_(method, Version(1, 0), handler)
}

/// The agent API (`/agent/v1`).
pub fn agent_api(overrides: &BTreeMap<String, String>) -> anyhow::Result<Api<ComputeCtx>> {
    let routes = vec![
        Route::new("/register", vec![v1a(M::POST, agents::register)]),
        Route::new("/heartbeat", vec![v1a(M::POST, agents::heartbeat)]),
        Route::new("/work", vec![v1a(M::GET, agents::work)]),
        Route::new("/events", vec![v1a(M::POST, agents::events)]),
        Route::new("/queues", vec![v1s(M::GET, agents::queues)]),
        Route::new("/claim", vec![v1a(M::POST, agents::claim)]),
        Route::new("/guests", vec![v1a(M::POST, agents::guests)]),
    ];
    Ok(Api {
        name: "agent",
        versions: VersionSpec::single(Version(1, 0), "agent"),
        routes,
        policy: Arc::new(Policy::new(agents::RULES, overrides)?),
        render_error: api::render_plain_error,
        adjust_auth: berth_http::keep_auth,
        request_id_alias: None,
    })
}

/// berth's admin API (`/admin/v1`).
pub fn admin_api(overrides: &BTreeMap<String, String>) -> anyhow::Result<Api<ComputeCtx>> {
    let routes = vec![
        Route::new("/cells", vec![v1s(M::GET, agents::list_cells), v1s(M::POST, agents::create_cell)]),
        Route::new("/cells/{name}/disable", vec![v1s(M::POST, agents::disable_cell)]),
        Route::new("/cells/{name}/enable", vec![v1s(M::POST, agents::enable_cell)]),
        Route::new("/discover-hosts", vec![v1a(M::POST, agents::discover_hosts)]),
        Route::new("/hosts/{host}/binding", vec![v1s(M::DELETE, agents::unbind_host)]),
        Route::new("/agent-credentials", vec![v1s(M::GET, credentials::list), v1s(M::POST, credentials::issue)]),
        Route::new("/agent-credentials/{host}", vec![v1s(M::DELETE, credentials::revoke)]),
        Route::new("/heal", vec![v1a(M::POST, agents::heal)]),
        Route::new("/test/hold", vec![v1s(M::POST, agents::hold)]),
        Route::new("/test/release", vec![v1s(M::POST, agents::release)]),
        Route::new("/test/waiting", vec![v1s(M::POST, agents::waiting)]),
        Route::new("/test/clock", vec![v1s(M::POST, agents::advance_clock)]),
    ];
    Ok(Api {
        name: "admin",
        versions: VersionSpec::single(Version(1, 0), "admin"),
        routes,
        policy: Arc::new(Policy::new(agents::RULES, overrides)?),
        render_error: api::render_plain_error,
        adjust_auth: berth_http::keep_auth,
        request_id_alias: None,
    })
}

/// The identity endpoints openstackclient needs without Keystone.
pub fn identity_api(overrides: &BTreeMap<String, String>) -> anyhow::Result<Api<ComputeCtx>> {
    let routes = vec![
        Route::new("/", vec![v1s(M::GET, agents::identity_versions).public()]),
        Route::new("/v3", vec![v1s(M::GET, agents::identity_version).public()]),
        Route::new("/v3/projects", vec![v1s(M::GET, agents::list_projects).public()]),
        Route::new("/v3/projects/{id}", vec![v1s(M::GET, agents::show_project).public()]),
    ];
    Ok(Api {
        name: "identity",
        versions: VersionSpec::single(Version(1, 0), "identity"),
        routes,
        policy: Arc::new(Policy::new(agents::RULES, overrides)?),
        render_error: api::render_plain_error,
        adjust_auth: berth_http::keep_auth,
        request_id_alias: None,
    })
}
