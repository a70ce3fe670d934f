//! `POST /servers/{id}/action`: `rebuild`, `rescue`/`unrescue`, soft
//! delete's `restore` and `forceDelete`, `addSecurityGroup`/
//! `removeSecurityGroup` and the admin's `injectNetworkInfo` (Nova's
//! `servers.py` `_rebuild`, `rescue.py`, `deferred_delete.py`,
//! `security_groups.py`, `admin_actions.py`).

use std::collections::BTreeMap;

use axum::http::StatusCode;
use berth_compute::rebuild::RebuildRequest;
use berth_compute::servers::{ServerAction, ServerRecord};
use berth_compute_model::ImageRef;
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use super::create::check_user_data;
use super::{access, caller, check_lock, disk_config_requested, groups_of, host_status, random_string, rule};
use crate::api::{authorize_on, body, is_admin, version, ComputeCtx, NovaResult};
use crate::schemas;
use crate::views::servers::{self as view, ServerExtras};

const PASSWORD_ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// `rebuild`, `rescue`, `unrescue`, `restore`, `forceDelete` (`None`:
/// none of them).
pub(super) async fn rebuild_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let project = record.project_id();
    match name {
        "rebuild" => rebuild(ctx, req, id, &value[name], record).await.map(Some),
        "rescue" => {
            body(req, &schemas::servers::rescue())?;
            authorize_on(req, "os_compute_api:os-rescue", project, None)?;
            check_lock(req, record)?;
            let rescue = &value[name];
            // The rescue image must be one the caller can boot.
            let image = match rescue.get("rescue_image_ref").and_then(Value::as_str) {
                Some(image) => Some(visible_image(ctx, req, image)?.id),
                None => None,
            };
            let password = rescue
                .get("adminPass")
                .and_then(Value::as_str)
                .map_or_else(|| random_string(12, PASSWORD_ALPHABET), str::to_owned);
            ctx.compute.server_action(id, ServerAction::Rescue { image }, &caller(req)).await.nova()?;
            Ok(Some(Resp::ok(serde_json::json!({"adminPass": password}))))
        }
        "unrescue" | "restore" | "forceDelete" => {
            body(req, &schemas::servers::any_action(name))?;
            let policy = match name {
                "unrescue" => "os_compute_api:os-unrescue",
                "restore" => "os_compute_api:os-deferred-delete:restore",
                _ => "os_compute_api:os-deferred-delete:force",
            };
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            match name {
                "unrescue" => ctx.compute.server_action(id, ServerAction::Unrescue, &caller(req)).await.nova()?,
                "restore" => ctx.compute.server_action(id, ServerAction::Restore, &caller(req)).await.nova()?,
                _ => ctx.compute.force_delete_server(id, &caller(req)).await.nova()?,
            }
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "injectNetworkInfo" => {
            // Admin; Nova casts it to the host with no state check and no
            // instance action. berth's servers have no network to inject:
            // nothing changes.
            body(req, &schemas::servers::any_action(name))?;
            authorize_on(req, "os_compute_api:os-admin-actions:inject_network_info", project, None)?;
            check_lock(req, record)?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "addSecurityGroup" | "removeSecurityGroup" => {
            body(req, &schemas::servers::security_group_action(name))?;
            let add = name == "addSecurityGroup";
            let policy =
                if add { "os_compute_api:os-security-groups:add" } else { "os_compute_api:os-security-groups:remove" };
            authorize_on(req, policy, project, None)?;
            let group = value[name]["name"].as_str().unwrap_or_default();
            ctx.compute.change_security_group(id, group, add).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        _ => Ok(None),
    }
}

/// An image the caller may see, by id (Nova: 400 "Cannot find image for
/// rebuild" when Glance does not show it).
fn visible_image(ctx: &ComputeCtx, req: &Req, text: &str) -> ApiResult<berth_compute_model::Image> {
    let not_found = || ApiError::bad_request("Cannot find image for rebuild");
    let id = Uuid::parse_str(text).map_err(|_| not_found())?;
    let world = ctx.core.read();
    world
        .compute
        .images
        .get(&id)
        .filter(|i| i.visible_to(req.auth.project_id.as_deref(), is_admin(req)))
        .cloned()
        .ok_or_else(not_found)
}

async fn rebuild(ctx: &ComputeCtx, req: &Req, id: &Uuid, rebuild: &Value, record: &ServerRecord) -> ApiResult<Resp> {
    let v = version(req);
    body(req, &schemas::servers::rebuild(v))?;
    authorize_on(req, &rule("rebuild"), record.project_id(), None)?;
    if v.at_least(63) && rebuild.get("trusted_image_certificates").is_some_and(|c| !c.is_null()) {
        authorize_on(req, &rule("rebuild:trusted_certs"), record.project_id(), None)?;
        // berth verifies no image signatures (as Nova with
        // `verify_glance_signatures` off, where certificates are refused).
        return Err(ApiError::bad_request(
            "Image certificate validation is not supported when image signature verification is disabled.",
        ));
    }
    check_lock(req, record)?;
    if v.at_least(57) {
        check_user_data(rebuild)?;
    }
    let (access_ip_v4, access_ip_v6) = super::access_ips(rebuild)?;
    let image = visible_image(ctx, req, rebuild["imageRef"].as_str().unwrap_or(""))?;
    if image.status != "active" {
        return Err(ApiError::bad_request(format!("Image {} is not active.", image.id)));
    }
    if let ServerRecord::Placed { instance, .. } = record {
        let flavor = &instance.spec.flavor;
        if image.min_ram > flavor.memory_mb {
            return Err(ApiError::bad_request("Flavor's memory is too small for requested image."));
        }
        if flavor.root_gb > 0 && image.min_disk > flavor.root_gb {
            return Err(ApiError::bad_request("Flavor's disk is too small for requested image."));
        }
    }
    super::check_personality(ctx, req, rebuild)?;
    let auto_disk_config = disk_config_requested(rebuild);
    if auto_disk_config == Some(true)
        && image.properties.get("auto_disk_config").is_some_and(|p| p.trim().eq_ignore_ascii_case("disabled"))
    {
        return Err(ApiError::bad_request(format!("Requested image {} has automatic disk resize disabled.", image.id)));
    }
    let metadata: Option<BTreeMap<String, String>> = rebuild
        .get("metadata")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect());
    let key_pair = match rebuild.get("key_name") {
        Some(_) if !v.at_least(54) => None,
        None => None,
        Some(Value::Null) => Some(None),
        Some(name) => {
            // The caller's own key pair (Nova: `context.user_id`, not the
            // server's owner).
            let name = name.as_str().unwrap_or_default().to_owned();
            let world = ctx.core.read();
            let key_pair = world
                .compute
                .key_pairs
                .get(&(crate::api::user(req), name))
                .ok_or_else(|| ApiError::bad_request("Invalid key_name provided."))?;
            Some(Some((key_pair.name.clone(), key_pair.public_key.clone())))
        }
    };
    let user_data = match rebuild.get("user_data") {
        Some(data) if v.at_least(57) => Some(data.as_str().map(str::to_owned)),
        _ => None,
    };
    let request = RebuildRequest {
        image: ImageRef { id: image.id, disk_format: image.disk_format.clone(), properties: image.properties.clone() },
        name: rebuild.get("name").and_then(Value::as_str).map(str::to_owned),
        description: rebuild.get("description").filter(|_| v.at_least(19)).map(|d| d.as_str().map(str::to_owned)),
        metadata,
        access_ip_v4,
        access_ip_v6,
        auto_disk_config,
        key_pair,
        user_data,
        hostname: rebuild.get("hostname").and_then(Value::as_str).filter(|_| v.at_least(90)).map(str::to_owned),
    };
    let password = rebuild
        .get("adminPass")
        .and_then(Value::as_str)
        .map_or_else(|| random_string(12, PASSWORD_ALPHABET), str::to_owned);
    ctx.compute.rebuild_server(id, request, &caller(req)).await.nova()?;
    let record = ctx.compute.get_server(id).await.nova()?;
    let ServerRecord::Placed { instance, fault, .. } = &record else {
        return Err(ApiError::not_found("Instance could not be found"));
    };
    let links = ctx.links(req);
    let groups = groups_of(ctx, id);
    let spec = ctx.core.read().compute.request_specs.get(id).cloned();
    let extras = ServerExtras {
        fault: fault.as_ref(),
        host_status: Some(host_status(ctx, instance)),
        server_groups: &groups,
        request_spec: spec.as_ref(),
    };
    let body = view::rebuild(v, &links, &access(req), instance, &extras, &password);
    let location = links.self_href("servers", &id.to_string());
    Ok(Resp::json(StatusCode::ACCEPTED, body).header("Location", location))
}
