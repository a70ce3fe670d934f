//! `/servers`: create (boot), list, detail, show, update, delete, actions
//! (`os-start`, `os-stop`, `reboot`, lock, the moves) and
//! `os-instance-actions`, one file each under `servers/`: `create`,
//! `list`, `server` (show, update, delete), `actions`,
//! `instance_actions`, `diagnostics` (diagnostics and
//! `os-server-password`). Here: what they share (the policy rule names,
//! the caller's view of a server, loading a server the caller may see,
//! the lock check).

use berth_compute::servers::{Caller, ServerRecord};
use berth_compute_model::cell::Instance;
use berth_http::{ApiError, ApiResult, Req};
use uuid::Uuid;

use crate::api::{self, is_admin, ComputeCtx, NovaResult};
use crate::views::servers::{HostStatus, HostStatusAccess, ServerAccess};

mod actions;
mod create;
mod diagnostics;
mod instance_actions;
mod list;
mod metadata;
mod rebuild;
mod server;
mod snapshot;

pub use actions::action;
pub use create::create;
pub use diagnostics::{clear_password, diagnostics, show_password};
pub use instance_actions::{list_actions, show_action};
pub use list::{detail, index};
pub use metadata::{
    add_tag, create_metadata, delete_all_tags, delete_metadata, delete_tag, list_ips, list_metadata, list_tags,
    replace_tags, show_ips, show_metadata, show_tag, update_all_metadata, update_metadata,
};
pub use server::{delete, show, update};

const RULE: &str = "os_compute_api:servers:";

fn rule(name: &str) -> String {
    format!("{RULE}{name}")
}

/// A random string of `n` characters from `alphabet`.
fn random_string(n: usize, alphabet: &[u8]) -> String {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        for byte in Uuid::new_v4().as_bytes() {
            if out.len() < n {
                out.push(alphabet[*byte as usize % alphabet.len()] as char);
            }
        }
    }
    out
}

/// The last path segment of a `flavorRef`/`imageRef` (ids or links).
fn ref_id(text: &str) -> &str {
    text.trim_end_matches('/').rsplit('/').next().unwrap_or(text)
}

fn access(req: &Req) -> ServerAccess {
    let host_status = if api::allowed(req, "os_compute_api:servers:show:host_status") {
        HostStatusAccess::All
    } else if api::allowed(req, "os_compute_api:servers:show:host_status:unknown-only") {
        HostStatusAccess::UnknownOnly
    } else {
        HostStatusAccess::Hidden
    };
    ServerAccess {
        show_admin_fields: is_admin(req),
        show_extended_attributes: api::allowed(req, "os_compute_api:os-extended-server-attributes"),
        show_flavor_extra_specs: api::allowed(req, "os_compute_api:servers:show:flavor-extra-specs"),
        host_status,
    }
}

fn host_status(ctx: &ComputeCtx, instance: &Instance) -> HostStatus {
    let Some(host) = instance.host.as_deref() else { return HostStatus::NoHost };
    let compute = &ctx.compute;
    let now = compute.now();
    if !compute.health.is_up_at(host, now) {
        return HostStatus::Down;
    }
    if berth_scheduler::HostHealth::is_disabled(&compute.health.at(now), host) {
        return HostStatus::Maintenance;
    }
    HostStatus::Up
}

fn groups_of(ctx: &ComputeCtx, instance: &Uuid) -> Vec<Uuid> {
    ctx.core.read().compute.group_of_instance.get(instance).copied().into_iter().collect()
}

fn server_id(req: &Req) -> ApiResult<Uuid> {
    let text = req.param(0);
    Uuid::parse_str(text).map_err(|_| ApiError::not_found(format!("Instance {text} could not be found.")))
}

/// Load a server the caller may see (404 for other projects' servers
/// unless admin).
async fn visible(ctx: &ComputeCtx, req: &Req, id: &Uuid) -> ApiResult<ServerRecord> {
    let record = ctx.compute.get_server(id).await.nova()?;
    if record.project_id() != api::project(req) && !is_admin(req) {
        return Err(ApiError::not_found(format!("Instance {id} could not be found.")));
    }
    Ok(record)
}

pub(crate) fn caller(req: &Req) -> Caller {
    Caller { request_id: req.request_id.clone(), user_id: api::user(req), project_id: api::project(req) }
}

/// `accessIPv4` and `accessIPv6` of a create or update body, checked as
/// Nova's `ipv4`/`ipv6` formats check them and written as Nova's
/// `IPAddressField` writes them back (`str(netaddr.IPAddress(x))`: an
/// IPv6 address compressed and lower-case). `None`: not in the body.
fn access_ips(server: &serde_json::Value) -> ApiResult<(Option<String>, Option<String>)> {
    fn invalid(field: &str, text: &str, format: &str) -> ApiError {
        ApiError::bad_request(format!(
            "Invalid input for field/attribute {field}. Value: {text}. '{text}' is not a '{format}'"
        ))
    }
    let text = |key: &str| server.get(key).and_then(serde_json::Value::as_str);
    let v4 = match text("accessIPv4") {
        None => None,
        Some(t) => {
            let addr: std::net::Ipv4Addr = t.parse().map_err(|_| invalid("accessIPv4", t, "ipv4"))?;
            Some(addr.to_string())
        }
    };
    let v6 = match text("accessIPv6") {
        None => None,
        Some(t) => {
            let addr: std::net::Ipv6Addr = t.parse().map_err(|_| invalid("accessIPv6", t, "ipv6"))?;
            Some(addr.to_string())
        }
    };
    Ok((v4, v6))
}

/// `OS-DCF:diskConfig` of a create, update or resize body (`AUTO` is
/// Nova's `auto_disk_config = True`); `None`: not given. The schema has
/// already limited it to `AUTO` and `MANUAL`.
fn disk_config_requested(body: &serde_json::Value) -> Option<bool> {
    body.get("OS-DCF:diskConfig").and_then(serde_json::Value::as_str).map(|v| v == "AUTO")
}

/// The personality files of a create or rebuild body (before 2.57, which
/// the schema enforces) against the caller's `injected_file*` limits
/// (403 with Nova's texts), after their contents' base64 (400). berth's
/// hosts inject nothing: the files are only checked.
fn check_personality(ctx: &ComputeCtx, req: &Req, body: &serde_json::Value) -> ApiResult<()> {
    let Some(files) = body.get("personality").and_then(serde_json::Value::as_array) else { return Ok(()) };
    // The schema's `format: base64` on `contents` (Nova's 400).
    for contents in files.iter().filter_map(|f| f.get("contents").and_then(serde_json::Value::as_str)) {
        if !create::is_base64(contents) {
            return Err(ApiError::bad_request(format!(
                "Invalid input for field/attribute contents. Value: {contents}. '{contents}' is not a 'base64'"
            )));
        }
    }
    let text_len = |f: &serde_json::Value, k: &str| f.get(k).and_then(serde_json::Value::as_str).map_or(0, str::len);
    let sizes: Vec<(usize, usize)> = files.iter().map(|f| (text_len(f, "path"), text_len(f, "contents"))).collect();
    let world = ctx.core.read();
    berth_compute_model::quota::check_injected_files(&world, &api::project(req), &api::user(req), &sizes).nova()
}

/// Nova's `check_instance_lock`: a locked server takes state-changing
/// actions from admins only (409 `Instance X is locked`), checked after
/// the body and the policy, as Nova's compute API checks it.
pub(crate) fn check_lock(req: &Req, record: &ServerRecord) -> ApiResult<()> {
    match record {
        ServerRecord::Placed { instance, .. } if instance.locked && !api::is_admin(req) => {
            Err(ApiError::conflict(format!("Instance {} is locked", instance.uuid)))
        }
        _ => Ok(()),
    }
}
