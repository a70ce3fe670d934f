//! `createImage` and `createBackup` (`POST /servers/{id}/action`): the
//! server's disk becomes an image (berth-compute's `snapshot` module does
//! the work). Before 2.45 the answer is an empty 202 with the image's
//! `Location`; from 2.45 it is `{"image_id": ...}`.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use berth_compute::servers::ServerRecord;
use berth_compute::snapshot::{Backup, SnapshotRequest};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{caller, rule};
use crate::api::{authorize_on, body, version, ComputeCtx, NovaResult};
use crate::schemas;

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default()
}

/// `createImage` and `createBackup` (`None`: neither).
pub(super) async fn snapshot_action(
    ctx: &ComputeCtx,
    req: &Req,
    id: &Uuid,
    name: &str,
    value: &Value,
    record: &ServerRecord,
) -> ApiResult<Option<Resp>> {
    let backup = match name {
        "createImage" => false,
        "createBackup" => true,
        _ => return Ok(None),
    };
    let project = record.project_id();
    let args = &value[name];
    if backup {
        body(req, &schemas::servers::create_backup())?;
        let user = record.user_id();
        authorize_on(req, "os_compute_api:os-create-backup", project, user)?;
    } else {
        body(req, &schemas::servers::create_image())?;
        authorize_on(req, &rule("create_image"), project, None)?;
    }
    let metadata = string_map(&args["metadata"]);
    // Up to 2.38 the image's metadata counts against `metadata_items`.
    if !version(req).at_least(39) {
        let world = ctx.core.read();
        crate::handlers::images::check_quota(&world, req, metadata.len())?;
    }
    let rotation = match &args["rotation"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    let backup = if backup {
        let rotation = rotation.ok_or_else(|| ApiError::bad_request("Invalid rotation value"))?;
        Some(Backup {
            backup_type: args["backup_type"].as_str().unwrap_or_default().to_owned(),
            rotation: usize::try_from(rotation).unwrap_or(usize::MAX),
        })
    } else {
        None
    };
    let with_location = backup.as_ref().is_none_or(|b| b.rotation > 0);
    let request = SnapshotRequest {
        name: args["name"].as_str().unwrap_or_default().trim().to_owned(),
        metadata,
        backup: backup.clone(),
    };
    let image = ctx.compute.snapshot_server(id, request, &caller(req)).await.nova()?;
    if version(req).at_least(45) {
        return Ok(Some(Resp::json(StatusCode::ACCEPTED, json!({"image_id": image.to_string()}))));
    }
    let mut resp = Resp::empty(StatusCode::ACCEPTED);
    if with_location {
        // Nova: the image service's URL for a snapshot, the compute API's
        // image proxy for a backup.
        let location = if backup.is_some() {
            format!("{}/images/{image}", ctx.links(req).versioned_base())
        } else {
            format!("{}/image/images/{image}", req.base_url)
        };
        resp = resp.location(location);
    }
    Ok(Some(resp))
}
