//! Per-host agent credentials: the identity berth issues to an agent when
//! there is no Keystone (`POST /admin/v1/agent-credentials`), and the
//! validator that turns `X-Auth-Token: berth-agent:HOST:SECRET` into that
//! agent's identity. Only a digest of the secret is stored; the secret is
//! shown once. Issuing binds the host to the credential in the same planned
//! write, so from then on only the credential registers, heartbeats and
//! reports for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use berth_compute::control::{read, write};
use berth_compute_model::plan::{agent_credential_matches, plan_issue_agent_credential, plan_revoke_agent_credential};
use berth_compute_model::{credential_identity, AGENT_CREDENTIAL_PREFIX};
use berth_http::auth::{AuthContext, TokenError, TokenValidator, ValidateFuture};
use berth_http::{ApiError, ApiResult, Req, Resp};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::{ComputeCtx, NovaResult};
use crate::handlers::agents::{admin_only, json_body};

/// Lower-case hex SHA-256 of a secret.
fn digest(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A new secret: 256 random bits (two v4 uuids' worth of the OS's
/// randomness, 244 bits of it random), as hex.
fn new_secret() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Checks agent credentials against the control snapshot. A credential
/// issued through another process may not have reached this one's
/// snapshot yet: on a miss the snapshot catches up (at most once a second)
/// and the check runs again.
#[derive(Debug)]
pub struct AgentCredentials {
    core: Arc<berth_core::App>,
    last_catch_up: AtomicI64,
}

impl AgentCredentials {
    /// The validator over `core`'s control state.
    pub fn new(core: Arc<berth_core::App>) -> Self {
        AgentCredentials { core, last_catch_up: AtomicI64::new(0) }
    }

    fn matches(&self, host: &str, digest: &str) -> bool {
        read(&*self.core, |w| agent_credential_matches(w, host, digest))
    }
}

impl TokenValidator for AgentCredentials {
    fn validate<'a>(&'a self, token: &'a str) -> ValidateFuture<'a> {
        Box::pin(async move {
            let (host, secret) = token
                .strip_prefix(AGENT_CREDENTIAL_PREFIX)
                .and_then(|t| t.rsplit_once(':'))
                .ok_or(TokenError::Invalid)?;
            let digest = digest(secret);
            let mut ok = self.matches(host, &digest);
            if !ok {
                let now = berth_core::now();
                let last = self.last_catch_up.load(Ordering::Relaxed);
                if now > last
                    && self.last_catch_up.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
                {
                    // One short read of the change feed.
                    self.core.catch_up().map_err(|_| TokenError::Unavailable)?;
                    ok = self.matches(host, &digest);
                }
            }
            if !ok {
                return Err(TokenError::Invalid);
            }
            // The agent's identity: the service role (placement's
            // inventories, the agent API), bound to its host alone.
            Ok(AuthContext {
                user_id: Some(credential_identity(host)),
                project_id: Some("service".to_owned()),
                roles: vec!["service".to_owned()],
                system_scope: false,
                is_admin_project: false,
            })
        })
    }

    fn www_authenticate(&self) -> String {
        "Berth-Agent-Credential realm=\"berth\"".to_owned()
    }

    fn recognizes(&self, token: &str) -> bool {
        token.starts_with(AGENT_CREDENTIAL_PREFIX)
    }
}

/// `POST /admin/v1/agent-credentials {"host": H}`: issue (or rotate) the
/// credential of host H; the old one stops working. 201 with the token,
/// which is never shown again.
pub fn issue(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let body = json_body(req)?;
    let host = body
        .get("host")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("'host' is a required string"))?
        .to_owned();
    if let Some(extra) = body.as_object().and_then(|o| o.keys().find(|k| *k != "host")) {
        return Err(ApiError::bad_request(format!("Unknown field '{extra}'.")));
    }
    let secret = new_secret();
    let now = ctx.compute.now();
    write(&*ctx.compute.control, |w| Ok((plan_issue_agent_credential(w, &host, &digest(&secret), now)?, ()))).nova()?;
    Ok(Resp::json(
        StatusCode::CREATED,
        json!({"credential": {
            "host": host,
            "token": format!("{AGENT_CREDENTIAL_PREFIX}{host}:{secret}"),
            "created_at": now,
        }}),
    ))
}

/// `GET /admin/v1/agent-credentials`: the hosts with a credential (never
/// the secrets).
pub fn list(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let credentials: Vec<Value> = read(&*ctx.compute.control, |w| {
        w.compute
            .agent_credentials
            .values()
            .map(|c| {
                let registered = w.compute.host_mappings.contains_key(&c.host);
                json!({"host": c.host, "created_at": c.created_at, "registered": registered})
            })
            .collect()
    });
    Ok(Resp::json(StatusCode::OK, json!({"credentials": credentials})))
}

/// `DELETE /admin/v1/agent-credentials/{host}`: revoke; the host is
/// unbound (204).
pub fn revoke(ctx: &ComputeCtx, req: &Req) -> ApiResult<Resp> {
    admin_only(req, "admin:manage")?;
    let host = req.param(0).to_owned();
    write(&*ctx.compute.control, |w| Ok((plan_revoke_agent_credential(w, &host)?, ()))).nova()?;
    Ok(Resp::no_content())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_long_random_hex_and_digests_are_sha256() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_eq!(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
