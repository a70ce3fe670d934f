//! Who is calling: Keystone tokens (validated through a [`TokenValidator`]),
//! noauth2 tokens, or keystonemiddleware's trusted headers.

use std::future::Future;
use std::pin::Pin;

use axum::http::{HeaderMap, StatusCode};

use crate::error::ApiError;

/// How callers are identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Development/test mode: `X-Auth-Token: user[:project]`, `admin` is admin.
    NoAuth2,
    /// Behind a proxy that ran keystonemiddleware: trust `X-User-Id`,
    /// `X-Project-Id`, `X-Roles`, `X-Identity-Status`.
    TrustedHeaders,
    /// Production: every `X-Auth-Token` is validated by Keystone (the
    /// listener's [`TokenValidator`]); identity headers a client sends are
    /// ignored.
    Keystone,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Unknown, expired or revoked (401).
    Invalid,
    /// The identity service cannot be asked (503): nobody is let in.
    Unavailable,
}

/// The future a [`TokenValidator`] returns.
pub type ValidateFuture<'a> = Pin<Box<dyn Future<Output = Result<AuthContext, TokenError>> + Send + 'a>>;

/// Turns a token into an identity (Keystone in production).
pub trait TokenValidator: Send + Sync + std::fmt::Debug {
    /// Who bears `token`.
    fn validate<'a>(&'a self, token: &'a str) -> ValidateFuture<'a>;
    /// The `WWW-Authenticate` value of a 401 (`Keystone uri="…"`).
    fn www_authenticate(&self) -> String;
    /// Whether `token` is of this validator's kind (a validator consulted
    /// before the listener's auth mode takes only its own tokens).
    fn recognizes(&self, _token: &str) -> bool {
        true
    }
}

/// The caller's identity as policy sees it.
#[derive(Debug, Clone, Default)]
pub struct AuthContext {
    /// User id.
    pub user_id: Option<String>,
    /// Project id (None when system scoped).
    pub project_id: Option<String>,
    /// Lower-cased role names.
    pub roles: Vec<String>,
    /// True when the token is system scoped (`OpenStack-System-Scope: all`).
    pub system_scope: bool,
    /// Keystone's `is_admin_project` (true outside keystone mode).
    pub is_admin_project: bool,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty())
}

fn split_roles(value: &str) -> Vec<String> {
    value.split(',').map(|r| r.trim().to_ascii_lowercase()).filter(|r| !r.is_empty()).collect()
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "This server could not verify that you are authorized to access the document you requested.",
    )
}

/// The answer to a token `validator` did not accept: 401 with its
/// `WWW-Authenticate`, or 503 saying `unavailable` when it could not ask.
fn refusal(validator: &dyn TokenValidator, e: TokenError, unavailable: &str) -> ApiError {
    match e {
        TokenError::Invalid => {
            let mut err = unauthorized();
            err.headers.push(("www-authenticate", validator.www_authenticate()));
            err
        }
        TokenError::Unavailable => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, unavailable),
    }
}

/// Identify the caller in keystone mode, as keystonemiddleware does: the
/// user token must be valid; an `X-Service-Token`, when sent, must be
/// valid and carry the `service` role. 401 carries `WWW-Authenticate`;
/// an unreachable Keystone gives 503.
pub async fn authenticate_keystone(
    validator: &dyn TokenValidator,
    headers: &HeaderMap,
) -> Result<AuthContext, ApiError> {
    let refuse =
        |e: TokenError| refusal(validator, e, "The identity service is unavailable; the token could not be validated.");
    let token = header(headers, "x-auth-token").ok_or_else(|| refuse(TokenError::Invalid))?;
    let ctx = validator.validate(token).await.map_err(refuse)?;
    if let Some(service) = header(headers, "x-service-token") {
        let service = validator.validate(service).await.map_err(refuse)?;
        if !service.roles.iter().any(|r| r == "service") {
            return Err(refuse(TokenError::Invalid));
        }
    }
    Ok(ctx)
}

/// The `X-Auth-Token` when `credentials` recognizes it as one of its own.
pub fn agent_credential_token<'h>(credentials: &dyn TokenValidator, headers: &'h HeaderMap) -> Option<&'h str> {
    header(headers, "x-auth-token").filter(|t| credentials.recognizes(t))
}

/// Identify an agent by its credential: a wrong or revoked secret is a
/// 401, never a fallback to the other modes.
pub async fn authenticate_agent_credential(
    credentials: &dyn TokenValidator,
    token: &str,
) -> Result<AuthContext, ApiError> {
    credentials.validate(token).await.map_err(|e| refusal(credentials, e, "The agent credential could not be checked."))
}

/// Identify the caller from headers alone (noauth2, trusted headers).
/// Fails with 401 when no identity is present, and always in keystone
/// mode (see [`authenticate_keystone`]).
pub fn authenticate(mode: AuthMode, headers: &HeaderMap) -> Result<AuthContext, ApiError> {
    let mut ctx = match mode {
        AuthMode::Keystone => return Err(unauthorized()),
        AuthMode::NoAuth2 => {
            let token = header(headers, "x-auth-token").ok_or_else(unauthorized)?;
            // As upstream's NoAuthMiddleware: `user:project`, and the
            // user is the project when none is given (`user` or `user:`).
            let (user, project) = match token.split_once(':') {
                Some((user, project)) if !project.is_empty() => (user, project),
                Some((user, _)) => (user, user),
                None => (token, token),
            };
            let roles = match header(headers, "x-roles") {
                Some(roles) => split_roles(roles),
                // `admin`, and `notused`: what keystoneauth's `none` plugin
                // sends (`--os-auth-type none`), which only an operator
                // talking to a noauth2 server uses.
                None if user == "admin" || token == "notused" => vec!["admin".to_owned()],
                None => Vec::new(),
            };
            AuthContext {
                user_id: Some(user.to_owned()),
                project_id: Some(project.to_owned()),
                roles,
                system_scope: false,
                is_admin_project: true,
            }
        }
        AuthMode::TrustedHeaders => {
            if header(headers, "x-identity-status").is_some_and(|s| !s.eq_ignore_ascii_case("confirmed")) {
                return Err(unauthorized());
            }
            let user = header(headers, "x-user-id").or_else(|| header(headers, "x-user"));
            if user.is_none() && header(headers, "x-project-id").is_none() {
                return Err(unauthorized());
            }
            AuthContext {
                user_id: user.map(str::to_owned),
                project_id: None,
                roles: header(headers, "x-roles").map(split_roles).unwrap_or_default(),
                system_scope: false,
                is_admin_project: true,
            }
        }
    };
    // oslo.context reads X-Project-Id (then X-Tenant-Id) before anything
    // the token implies.
    if let Some(project) = header(headers, "x-project-id").or_else(|| header(headers, "x-tenant-id")) {
        ctx.project_id = Some(project.to_owned());
    }
    if header(headers, "openstack-system-scope").is_some_and(|s| s.eq_ignore_ascii_case("all")) {
        ctx.system_scope = true;
        ctx.project_id = None;
    }
    Ok(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noauth(token: &str) -> AuthContext {
        let mut headers = HeaderMap::new();
        headers.insert("x-auth-token", token.parse().unwrap());
        authenticate(AuthMode::NoAuth2, &headers).unwrap()
    }

    #[test]
    fn a_noauth2_token_without_a_project_uses_the_user_as_project() {
        for (token, user, project) in [
            ("xuser:", "xuser", "xuser"),
            ("yuser:", "yuser", "yuser"),
            ("xuser", "xuser", "xuser"),
            ("xuser:projA", "xuser", "projA"),
        ] {
            let ctx = noauth(token);
            assert_eq!(ctx.user_id.as_deref(), Some(user), "{token}");
            assert_eq!(ctx.project_id.as_deref(), Some(project), "{token}");
        }
    }
}
