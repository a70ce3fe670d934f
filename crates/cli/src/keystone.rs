//! Keystone wiring of the binary: credentials from flags and files, and the
//! adapter that lets the HTTP foundation validate tokens through
//! [`berth_identity::Validator`].

use std::sync::Arc;

use berth_http::{AuthContext, TokenError, TokenValidator, ValidateFuture};
use berth_identity::{Credentials, Error, Validator};

/// Password credentials from the `--keystone-*` options: `None` without a
/// URL; an error when the URL is given without a user or password.
pub(crate) fn credentials(
    url: Option<&str>,
    user: Option<&str>,
    password: Option<&str>,
    project: Option<&str>,
    domain: Option<&str>,
) -> anyhow::Result<Option<Credentials>> {
    let Some(url) = url.filter(|u| !u.trim().is_empty()) else { return Ok(None) };
    let user = user.filter(|u| !u.is_empty()).ok_or_else(|| anyhow::anyhow!("--keystone-url needs --keystone-user"))?;
    let password = password.ok_or_else(|| anyhow::anyhow!("--keystone-url needs --keystone-password"))?;
    Ok(Some(Credentials::new(url, user, password, project.unwrap_or("service"), domain.unwrap_or("Default"))))
}

/// [`Validator`] as the HTTP foundation's [`TokenValidator`]: a Keystone
/// identity becomes the request context the APIs' policies read.
#[derive(Debug)]
pub(crate) struct KeystoneAuth(pub(crate) Arc<Validator>);

impl TokenValidator for KeystoneAuth {
    fn validate<'a>(&'a self, token: &'a str) -> ValidateFuture<'a> {
        Box::pin(async move {
            match self.0.validate(token).await {
                Ok(id) => Ok(AuthContext {
                    user_id: Some(id.user_id.clone()),
                    project_id: if id.system_all { None } else { id.project_id.clone() },
                    roles: id.roles.clone(),
                    system_scope: id.system_all,
                    is_admin_project: id.is_admin_project,
                }),
                Err(Error::Invalid(reason)) => {
                    tracing::info!(reason = %reason, "token refused");
                    Err(TokenError::Invalid)
                }
                Err(Error::Unavailable(reason)) => {
                    tracing::warn!(reason = %reason, "Keystone unavailable: token not validated");
                    Err(TokenError::Unavailable)
                }
            }
        })
    }

    fn www_authenticate(&self) -> String {
        self.0.www_authenticate().to_owned()
    }
}
