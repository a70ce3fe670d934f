//! `POST /servers/{id}/action`: power (`os-start`, `os-stop`, `reboot`),
//! `lock` and `unlock`, `pause`/`unpause`, `suspend`/`resume`,
//! `os-getConsoleOutput`, `os-resetState`, `rebuild`, `rescue`/`unrescue`,
//! `restore`/`forceDelete` (in `rebuild.rs`), `createImage`/`createBackup`
//! (in `snapshot`), and the moves (resize, migrate, confirm and
//! revert, evacuate, live migration, shelve, shelve offload, unshelve),
//! older microversions' shapes upgraded where they are parsed.

use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::evacuate::EvacuateRequest;
use berth_compute::live::LiveMigrateRequest;
use berth_compute::moves::MoveRequest;
use berth_compute::pause::ResetState;
use berth_compute::servers::{ServerAction, ServerRecord};
use berth_compute::shelve::UnshelveRequest;
use berth_http::{ApiError, ApiResult, HandlerFuture, Req, Resp};
use serde_json::Value;
use uuid::Uuid;

use super::{caller, check_lock, disk_config_requested, random_string, rule, server_id, visible};
use crate::api::{self, authorize_on, body, version, ComputeCtx, NovaResult};
use crate::schemas;

/// `POST /servers/{id}/action`: `os-start`, `os-stop`, `reboot`.
pub fn action(ctx: Arc<ComputeCtx>, req: Req) -> HandlerFuture {
    Box::pin(async move {
        let id = server_id(&req)?;
        let value: Value = crate::api::parse_body(&req)?;
        let Some((name, _)) = value.as_object().and_then(|o| o.iter().next()) else {
            return Err(ApiError::bad_request("Malformed request body"));
        };
        let name = name.clone();
        let record = visible(&ctx, &req, &id).await?;
        if let Some(resp) = lock_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        if let Some(resp) = move_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        if let Some(resp) = state_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        if let Some(resp) = super::rebuild::rebuild_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        if let Some(resp) = super::snapshot::snapshot_action(&ctx, &req, &id, &name, &value, &record).await? {
            return Ok(resp);
        }
        let (action, schema, policy) = match name.as_str() {
            "os-start" => (ServerAction::Start, schemas::servers::start(), rule("start")),
            "os-stop" => (ServerAction::Stop, schemas::servers::stop(), rule("stop")),
            "reboot" => {
                let hard = value["reboot"]["type"].as_str().is_some_and(|t| t.eq_ignore_ascii_case("HARD"));
                (ServerAction::Reboot { hard }, schemas::servers::reboot(), rule("reboot"))
            }
            other => return Err(ApiError::bad_request(format!("There is no such action: {other}"))),
        };
        body(&req, &schema)?;
        authorize_on(&req, &policy, record.project_id(), None)?;
        check_lock(&req, &record)?;
        ctx.compute.server_action(&id, action, &caller(&req)).await.nova()?;
        Ok(Resp::empty(StatusCode::ACCEPTED))
    })
}

/// `pause`, `unpause`, `suspend`, `resume` (the host's agent does them),
/// `os-getConsoleOutput` and the admin's `os-resetState` (`None`: none of
/// them).
async fn state_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let project = record.project_id();
    let user = record.user_id();
    let (action, policy, with_user) = match name {
        "pause" => (ServerAction::Pause, "os_compute_api:os-pause-server:pause", true),
        "unpause" => (ServerAction::Unpause, "os_compute_api:os-pause-server:unpause", false),
        "suspend" => (ServerAction::Suspend, "os_compute_api:os-suspend-server:suspend", true),
        "resume" => (ServerAction::Resume, "os_compute_api:os-suspend-server:resume", false),
        "os-getConsoleOutput" => {
            body(req, &schemas::servers::console_output())?;
            authorize_on(req, "os_compute_api:os-console-output", project, None)?;
            let length = match &value[name]["length"] {
                Value::Number(n) => n.as_i64(),
                // The schema's pattern admits only digits with a sign; one
                // too long for an integer is as good as all the lines.
                Value::String(s) => {
                    Some(s.parse::<i64>().unwrap_or(if s.starts_with('-') { i64::MIN } else { i64::MAX }))
                }
                _ => None,
            };
            let output = ctx.compute.console_output(id, length).await.nova()?;
            return Ok(Some(Resp::ok(serde_json::json!({"output": output}))));
        }
        "os-resetState" => {
            body(req, &schemas::servers::reset_state())?;
            authorize_on(req, "os_compute_api:os-admin-actions:reset_state", project, None)?;
            let state = match value[name]["state"].as_str() {
                Some("error") => ResetState::Error,
                _ => ResetState::Active,
            };
            ctx.compute.reset_state(id, state, &caller(req)).await.nova()?;
            return Ok(Some(Resp::empty(StatusCode::ACCEPTED)));
        }
        _ => return Ok(None),
    };
    body(req, &schemas::servers::any_action(name))?;
    authorize_on(req, policy, project, if with_user { user } else { None })?;
    check_lock(req, record)?;
    ctx.compute.server_action(id, action, &caller(req)).await.nova()?;
    Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
}

/// `lock` and `unlock` (`None`: neither).
async fn lock_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let project = record.project_id();
    match name {
        "lock" => {
            let v = version(req);
            body(req, &schemas::servers::lock(v.0))?;
            let user = record.user_id();
            authorize_on(req, "os_compute_api:os-lock-server:lock", project, user)?;
            let reason = if v.at_least(73) { value["lock"]["locked_reason"].as_str().map(str::to_owned) } else { None };
            ctx.compute.lock_server(id, reason, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "unlock" => {
            body(req, &schemas::servers::unlock())?;
            authorize_on(req, "os_compute_api:os-lock-server:unlock", project, None)?;
            // Nova's `is_expected_locked_by`: undoing the other side's
            // lock needs the override (admin by default).
            let expected = if api::project(req) == project { "owner" } else { "admin" };
            if let ServerRecord::Placed { instance, .. } = record {
                if instance.locked_by.as_deref().is_some_and(|by| by != expected) {
                    authorize_on(req, "os_compute_api:os-lock-server:unlock:unlock_override", project, None)?;
                }
            }
            ctx.compute.unlock_server(id, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        _ => Ok(None),
    }
}

/// The move actions: `resize`, `migrate`, `confirmResize`, `revertResize`,
/// `evacuate`, `shelve`, `shelveOffload`, `unshelve` (`None`: not a move
/// action).
async fn move_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let project = record.project_id();
    match name {
        "resize" => {
            body(req, &schemas::servers::resize())?;
            authorize_on(req, &rule("resize"), project, None)?;
            check_lock(req, record)?;
            let flavor_id = match &value["resize"]["flavorRef"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let auto_disk_config = disk_config_requested(&value["resize"]);
            ctx.compute
                .move_server(id, MoveRequest::Resize { flavor_id, auto_disk_config }, &caller(req))
                .await
                .nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "migrate" => {
            let v256 = version(req).at_least(56);
            body(req, &schemas::servers::migrate(v256))?;
            let host = if v256 { value["migrate"]["host"].as_str().map(str::to_owned) } else { None };
            let policy = if host.is_some() {
                "os_compute_api:os-migrate-server:migrate:host"
            } else {
                "os_compute_api:os-migrate-server:migrate"
            };
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            ctx.compute.move_server(id, MoveRequest::Migrate { host }, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "confirmResize" | "revertResize" => {
            let confirm = name == "confirmResize";
            let (schema, policy) = if confirm {
                (schemas::servers::confirm_resize(), rule("confirm_resize"))
            } else {
                (schemas::servers::revert_resize(), rule("revert_resize"))
            };
            body(req, &schema)?;
            authorize_on(req, &policy, project, None)?;
            check_lock(req, record)?;
            ctx.compute.finish_move(id, confirm, &caller(req)).await.nova()?;
            Ok(Some(if confirm { Resp::no_content() } else { Resp::empty(StatusCode::ACCEPTED) }))
        }
        "evacuate" => {
            let v = version(req);
            body(req, &schemas::servers::evacuate(v.0))?;
            authorize_on(req, "os_compute_api:os-evacuate", project, None)?;
            let evacuate = &value["evacuate"];
            let host = evacuate["host"].as_str().map(str::to_owned);
            // Older shapes are upgraded here: before 2.14 `onSharedStorage`
            // only decides whether a password is made up (berth's fake
            // hosts have no disks to share); 2.29–2.67 `force` is taken as
            // a requested host (the scheduler still checks it, where Nova
            // would skip its filters).
            let shared = !v.at_least(14) && bool_value(&evacuate["onSharedStorage"]);
            if v.at_least(29) && !v.at_least(68) && bool_value(&evacuate["force"]) && host.is_none() {
                return Err(ApiError::bad_request("Can't force to a non-provided destination"));
            }
            let password = match evacuate["adminPass"].as_str() {
                Some(_) if shared => {
                    return Err(ApiError::bad_request("admin password can't be changed on existing disk"));
                }
                Some(given) => Some(given.to_owned()),
                None if shared => None,
                None => Some(random_string(12, b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")),
            };
            let request = EvacuateRequest { host, stop: v.at_least(95) };
            ctx.compute.evacuate_server(id, request, &caller(req)).await.nova()?;
            if v.at_least(14) {
                return Ok(Some(Resp::empty(StatusCode::OK)));
            }
            Ok(Some(Resp::ok(serde_json::json!({"adminPass": password}))))
        }
        "os-migrateLive" => {
            let v = version(req);
            body(req, &schemas::servers::migrate_live(v.0))?;
            let args = &value["os-migrateLive"];
            let host = args["host"].as_str().map(str::to_owned);
            let policy = if host.is_some() {
                "os_compute_api:os-migrate-server:migrate_live:host"
            } else {
                "os_compute_api:os-migrate-server:migrate_live"
            };
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            // Older shapes are upgraded here: `block_migration` and
            // `disk_over_commit` mean nothing to fake hosts without disks;
            // 2.30–2.67 `force` keeps the requested host (the scheduler
            // still checks it, where Nova would skip its filters).
            if v.at_least(30) && !v.at_least(68) && bool_value(&args["force"]) && host.is_none() {
                return Err(ApiError::bad_request("Can't force to a non-provided destination"));
            }
            let request = LiveMigrateRequest { host, synchronous: !v.at_least(34) };
            ctx.compute.live_migrate_server(id, request, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "shelve" | "shelveOffload" => {
            let offload = name == "shelveOffload";
            let (schema, policy) = if offload {
                (schemas::servers::shelve_offload(), "os_compute_api:os-shelve:shelve_offload")
            } else {
                (schemas::servers::shelve(), "os_compute_api:os-shelve:shelve")
            };
            body(req, &schema)?;
            authorize_on(req, policy, project, None)?;
            check_lock(req, record)?;
            if offload {
                ctx.compute.shelve_offload_server(id, &caller(req)).await.nova()?;
            } else {
                ctx.compute.shelve_server(id, &caller(req)).await.nova()?;
            }
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        "unshelve" => {
            let v = version(req);
            body(req, &schemas::servers::unshelve(v.0))?;
            authorize_on(req, "os_compute_api:os-shelve:unshelve", project, None)?;
            let mut request = UnshelveRequest::default();
            if let Some(args) = value["unshelve"].as_object() {
                if v.at_least(77) {
                    if let Some(zone) = args.get("availability_zone") {
                        request.availability_zone = Some(zone.as_str().map(str::to_owned));
                    }
                }
                if v.at_least(91) {
                    request.host = args.get("host").and_then(Value::as_str).map(str::to_owned);
                }
            }
            if request.host.is_some() {
                authorize_on(req, "os_compute_api:os-shelve:unshelve_to_host", project, None)?;
            }
            check_lock(req, record)?;
            ctx.compute.unshelve_server(id, request, &caller(req)).await.nova()?;
            Ok(Some(Resp::empty(StatusCode::ACCEPTED)))
        }
        _ => Ok(None),
    }
}

/// A schema-valid boolean (`true`, or a string oslo reads as true).
fn bool_value(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::String(s) => api::parse_bool(s).unwrap_or(false),
        _ => false,
    }
}
