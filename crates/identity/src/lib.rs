//! Keystone, used the way keystonemiddleware's `auth_token` uses it, natively.
//!
//! This crate owns every conversation berth has with Keystone:
//! - [`Session`]: a token of berth's own (or an agent's), from password
//!   credentials, re-issued before it expires or when Keystone refuses it.
//! - [`Validator`]: checks a caller's token with `GET /v3/auth/tokens`
//!   (`X-Subject-Token`), authenticated by the service's own session, and
//!   caches valid answers by a SHA-256 of the token for
//!   min(token expiry, cache time). Concurrent first uses of one token
//!   share one Keystone call. Invalid tokens are not cached (as
//!   keystonemiddleware), so a token Keystone refuses costs one call each
//!   time it is presented.
//!
//! It knows nothing of HTTP serving or policy: the binary adapts an
//! [`Identity`] into the request context the APIs' policies read.
//!
//! What a cache means for revocation: a token revoked in Keystone keeps
//! working here until its cache entry runs out (at most the cache time,
//! 300 s by default), exactly as with keystonemiddleware's token cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// How many times a Keystone call is tried before Keystone counts as
/// unreachable (keystonemiddleware's `http_request_max_retries`).
const ATTEMPTS: usize = 3;
/// A session token is re-issued this long before it expires (or after
/// three quarters of its life, when it lives shorter than 8 minutes).
const RENEW_MARGIN_SECS: u64 = 120;
/// The cache is swept of expired entries when it grows past this.
const CACHE_SWEEP_AT: usize = 100_000;

/// Why a token or a credential was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Keystone says no: unknown, expired or revoked token, or wrong
    /// credentials. The caller gets 401.
    Invalid(String),
    /// Keystone could not be asked (down, timing out, misconfigured). The
    /// caller gets 503; nobody is let in.
    Unavailable(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Invalid(m) => write!(f, "invalid credentials: {m}"),
            Error::Unavailable(m) => write!(f, "identity service unavailable: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Password credentials of one Keystone user, scoped to a project.
#[derive(Clone)]
pub struct Credentials {
    /// Keystone's v3 root, e.g. `http://127.0.0.1:5000/v3`.
    pub url: String,
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
    /// Project the token is scoped to.
    pub project: String,
    /// Domain (by name) of the user and of the project.
    pub domain: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("url", &self.url)
            .field("user", &self.user)
            .field("project", &self.project)
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Credentials against `url` (with or without the trailing `/v3`).
    pub fn new(url: &str, user: &str, password: &str, project: &str, domain: &str) -> Self {
        Credentials {
            url: v3_root(url),
            user: user.to_owned(),
            password: password.to_owned(),
            project: project.to_owned(),
            domain: domain.to_owned(),
        }
    }
}

/// `http://ks:5000`, `http://ks:5000/`, `http://ks:5000/v3/` → `http://ks:5000/v3`.
pub fn v3_root(url: &str) -> String {
    let base = url.trim_end_matches('/');
    let base = base.strip_suffix("/v3").unwrap_or(base);
    format!("{base}/v3")
}

/// What a valid token says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// User id.
    pub user_id: String,
    /// User name.
    pub user_name: String,
    /// The user's domain id.
    pub user_domain_id: Option<String>,
    /// Project id, for a project-scoped token.
    pub project_id: Option<String>,
    /// Project name.
    pub project_name: Option<String>,
    /// The project's domain id.
    pub project_domain_id: Option<String>,
    /// Role names, lower-cased.
    pub roles: Vec<String>,
    /// Keystone's `is_admin_project` (true when the token does not say).
    pub is_admin_project: bool,
    /// A system-scoped token (`"system": {"all": true}`).
    pub system_all: bool,
    /// Expiry, seconds since the epoch.
    pub expires_at: u64,
}

impl Identity {
    /// Parse the body of `GET`/`POST /v3/auth/tokens`.
    pub fn from_token_body(body: &Value) -> Option<Identity> {
        let token = body.get("token")?;
        let s = |v: &Value, path: &[&str]| -> Option<String> {
            let mut cur = v;
            for key in path {
                cur = cur.get(key)?;
            }
            cur.as_str().map(str::to_owned)
        };
        let project = token.get("project");
        Some(Identity {
            user_id: s(token, &["user", "id"])?,
            user_name: s(token, &["user", "name"]).unwrap_or_default(),
            user_domain_id: s(token, &["user", "domain", "id"]),
            project_id: project.and_then(|p| s(p, &["id"])),
            project_name: project.and_then(|p| s(p, &["name"])),
            project_domain_id: project.and_then(|p| s(p, &["domain", "id"])),
            roles: token
                .get("roles")
                .and_then(Value::as_array)
                .map(|roles| {
                    roles
                        .iter()
                        .filter_map(|r| r.get("name").and_then(Value::as_str))
                        .map(str::to_ascii_lowercase)
                        .collect()
                })
                .unwrap_or_default(),
            is_admin_project: token.get("is_admin_project").and_then(Value::as_bool).unwrap_or(true),
            system_all: token.pointer("/system/all").and_then(Value::as_bool).unwrap_or(false),
            expires_at: token.get("expires_at").and_then(Value::as_str).and_then(parse_time)?,
        })
    }

    /// Does the token carry `role`?
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// Seconds since the epoch of Keystone's `2026-11-26T11:47:08.000000Z`.
pub fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim();
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.trim_end_matches('Z');
    let time = time.split(['+']).next()?;
    let mut t = time.splitn(3, ':');
    let (h, min) = (t.next()?.parse::<i64>().ok()?, t.next()?.parse::<i64>().ok()?);
    let sec = t.next().map(|v| v.split('.').next().unwrap_or("0")).unwrap_or("0").parse::<i64>().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || sec > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + min * 60 + sec).ok()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `builder` trusting, besides the system's roots, the certificates (PEM)
/// in `ca_file`: for a server whose certificate a private CA signed. Every
/// berth HTTP client that takes a CA file (Keystone's, the agent's, the
/// admin commands') loads it here.
pub fn add_trusted_roots(
    mut builder: reqwest::ClientBuilder,
    ca_file: Option<&std::path::Path>,
) -> Result<reqwest::ClientBuilder, Error> {
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| Error::Unavailable(format!("reading {}: {e}", path.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| Error::Unavailable(format!("{}: not PEM certificates: {e}", path.display())))?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    Ok(builder)
}

/// A plain HTTP client for Keystone calls; `ca_file` adds trusted roots
/// (keystonemiddleware's `cafile`).
pub fn client(timeout: Duration, ca_file: Option<&std::path::Path>) -> Result<reqwest::Client, Error> {
    let builder = reqwest::Client::builder().timeout(timeout).pool_idle_timeout(Duration::from_secs(30));
    add_trusted_roots(builder, ca_file)?.build().map_err(|e| Error::Unavailable(format!("http client: {e}")))
}

#[derive(Debug, Clone)]
struct Issued {
    token: String,
    /// When it is to be replaced.
    renew_at: u64,
}

/// A token of one's own from password credentials, kept fresh.
#[derive(Debug)]
pub struct Session {
    client: reqwest::Client,
    creds: Credentials,
    current: tokio::sync::Mutex<Option<Issued>>,
    issued: AtomicU64,
}

impl Session {
    /// A session for `creds`; no call is made until the first [`token`](Self::token).
    pub fn new(client: reqwest::Client, creds: Credentials) -> Self {
        Session { client, creds, current: tokio::sync::Mutex::new(None), issued: AtomicU64::new(0) }
    }

    /// The credentials in use.
    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }

    /// How many tokens this session has asked Keystone for.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    /// A token valid for at least two more minutes (issued when needed).
    pub async fn token(&self) -> Result<String, Error> {
        let mut current = self.current.lock().await;
        if let Some(issued) = current.as_ref() {
            if unix_now() < issued.renew_at {
                return Ok(issued.token.clone());
            }
        }
        let fresh = self.issue().await?;
        let token = fresh.token.clone();
        *current = Some(fresh);
        Ok(token)
    }

    /// Forget `stale` (Keystone refused it); the next [`token`](Self::token) issues a new one.
    pub async fn invalidate(&self, stale: &str) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|i| i.token == stale) {
            *current = None;
        }
    }

    async fn issue(&self) -> Result<Issued, Error> {
        let c = &self.creds;
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": c.user, "domain": {"name": c.domain}, "password": c.password}}},
            "scope": {"project": {"name": c.project, "domain": {"name": c.domain}}},
        }});
        let url = format!("{}/auth/tokens?nocatalog", c.url);
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let response = match self.client.post(&url).json(&body).send().await {
                Ok(r) => r,
                Err(e) => {
                    last = format!("POST {url}: {e}");
                    continue;
                }
            };
            let status = response.status().as_u16();
            match status {
                200 | 201 => {
                    let token = response
                        .headers()
                        .get("x-subject-token")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                        .ok_or_else(|| Error::Unavailable("Keystone issued a token without X-Subject-Token".into()))?;
                    let body: Value = response.json().await.map_err(|e| Error::Unavailable(e.to_string()))?;
                    let expires_at = body
                        .pointer("/token/expires_at")
                        .and_then(Value::as_str)
                        .and_then(parse_time)
                        .ok_or_else(|| Error::Unavailable("Keystone token without expires_at".into()))?;
                    self.issued.fetch_add(1, Ordering::Relaxed);
                    let life = expires_at.saturating_sub(unix_now());
                    let renew_at = expires_at - RENEW_MARGIN_SECS.min(life / 4).min(expires_at);
                    return Ok(Issued { token, renew_at });
                }
                400 | 401 | 403 | 404 => {
                    return Err(Error::Invalid(format!(
                        "Keystone refused the credentials of user {:?} in project {:?} (HTTP {status})",
                        c.user, c.project
                    )))
                }
                _ => last = format!("POST {url}: HTTP {status}"),
            }
        }
        Err(Error::Unavailable(last))
    }
}

#[derive(Debug, Clone)]
struct Cached {
    identity: Arc<Identity>,
    until: Instant,
}

type Key = [u8; 32];

/// Validates callers' tokens against Keystone, with a cache.
#[derive(Debug)]
pub struct Validator {
    client: reqwest::Client,
    session: Session,
    cache_time: Duration,
    cache: Mutex<HashMap<Key, Cached>>,
    inflight: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    calls: AtomicU64,
    www_authenticate: String,
}

impl Validator {
    /// A validator that authenticates its calls with `service` (berth's
    /// own credentials) and caches valid tokens for up to `cache_time`.
    pub fn new(client: reqwest::Client, service: Credentials, cache_time: Duration) -> Self {
        let root = service.url.strip_suffix("/v3").unwrap_or(&service.url).to_owned();
        Validator {
            session: Session::new(client.clone(), service),
            client,
            cache_time,
            cache: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
            www_authenticate: format!("Keystone uri=\"{root}\""),
        }
    }

    /// A token for a user's password, scoped to `project` (names, in
    /// `domain`), from the same Keystone (the dashboard's login form).
    pub async fn issue_user_token(
        &self,
        user: &str,
        password: &str,
        project: &str,
        domain: &str,
    ) -> Result<String, Error> {
        let url = &self.session.credentials().url;
        Session::new(self.client.clone(), Credentials::new(url, user, password, project, domain)).token().await
    }

    /// The `WWW-Authenticate` value of a 401 (`Keystone uri="…"`).
    pub fn www_authenticate(&self) -> &str {
        &self.www_authenticate
    }

    /// How many times Keystone was asked to validate a token.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// How many tokens the service session has issued.
    pub fn service_tokens_issued(&self) -> u64 {
        self.session.issued()
    }

    /// Tokens currently cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Get a service token now, so a misconfiguration shows at start.
    pub async fn check_service_credentials(&self) -> Result<(), Error> {
        self.session.token().await.map(|_| ())
    }

    fn lookup(&self, key: &Key) -> Option<Arc<Identity>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(key).filter(|c| c.until > Instant::now()).map(|c| c.identity.clone())
    }

    /// Who bears `token`: from the cache, else from Keystone.
    pub async fn validate(&self, token: &str) -> Result<Arc<Identity>, Error> {
        let key: Key = Sha256::digest(token.as_bytes()).into();
        if let Some(hit) = self.lookup(&key) {
            return Ok(hit);
        }
        // One Keystone call per token however many requests bring it at once.
        let gate = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            inflight.entry(key).or_default().clone()
        };
        let result = {
            let _turn = gate.lock().await;
            match self.lookup(&key) {
                Some(hit) => Ok(hit),
                None => self.fetch(token).await.map(|identity| {
                    let identity = Arc::new(identity);
                    // To the sub-second: a cached token must not outlive its expiry.
                    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                    let left = Duration::from_secs(identity.expires_at).saturating_sub(since_epoch);
                    let until = Instant::now() + self.cache_time.min(left);
                    let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                    if cache.len() >= CACHE_SWEEP_AT {
                        let now = Instant::now();
                        cache.retain(|_, c| c.until > now);
                    }
                    cache.insert(key, Cached { identity: identity.clone(), until });
                    identity
                }),
            }
        };
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if inflight.get(&key).is_some_and(|g| Arc::ptr_eq(g, &gate)) && Arc::strong_count(&gate) <= 2 {
            inflight.remove(&key);
        }
        result
    }

    async fn fetch(&self, token: &str) -> Result<Identity, Error> {
        let url = format!("{}/auth/tokens?nocatalog", self.session.creds.url);
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let service = self.session.token().await.map_err(|e| match e {
                // Our own credentials being refused is a deployment fault,
                // not the caller's: nobody can be validated.
                Error::Invalid(m) => Error::Unavailable(m),
                e => e,
            })?;
            self.calls.fetch_add(1, Ordering::Relaxed);
            let response = match self
                .client
                .get(&url)
                .header("X-Auth-Token", &service)
                .header("X-Subject-Token", token)
                .send()
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    last = format!("GET {url}: {e}");
                    continue;
                }
            };
            match response.status().as_u16() {
                200 => {
                    let body: Value = response.json().await.map_err(|e| Error::Unavailable(e.to_string()))?;
                    let identity = Identity::from_token_body(&body)
                        .ok_or_else(|| Error::Unavailable("Keystone answered a token body berth cannot read".into()))?;
                    if identity.expires_at <= unix_now() {
                        return Err(Error::Invalid("token expired".into()));
                    }
                    return Ok(identity);
                }
                // Unknown, expired or revoked: Keystone says 404.
                404 => return Err(Error::Invalid("token not found".into())),
                // Our service token went stale: get another and ask again.
                401 => {
                    self.session.invalidate(&service).await;
                    last = format!("GET {url}: Keystone refused the service token");
                }
                403 => {
                    return Err(Error::Unavailable(format!(
                        "the service user {:?} may not validate tokens (it needs the admin or service role)",
                        self.session.creds.user
                    )))
                }
                status => last = format!("GET {url}: HTTP {status}"),
            }
        }
        Err(Error::Unavailable(last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keystone_times_parse_to_epoch_seconds() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2026-11-26T11:47:08.000000Z"), Some(1_795_693_628));
        assert_eq!(parse_time("2000-03-01T00:00:00.5Z"), Some(951_868_800));
        assert_eq!(parse_time("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_time("garbage"), None);
    }

    #[test]
    fn roots_are_normalised_to_v3() {
        assert_eq!(v3_root("http://ks:5000"), "http://ks:5000/v3");
        assert_eq!(v3_root("http://ks:5000/v3/"), "http://ks:5000/v3");
        assert_eq!(v3_root("http://ks/identity/"), "http://ks/identity/v3");
    }

    #[test]
    fn token_bodies_give_scope_and_roles() {
        let body = json!({"token": {
            "user": {"id": "u1", "name": "alice", "domain": {"id": "default"}},
            "project": {"id": "p1", "name": "demo", "domain": {"id": "default"}},
            "roles": [{"id": "r", "name": "Member"}, {"id": "s", "name": "reader"}],
            "expires_at": "2030-01-01T00:00:00.000000Z"}});
        let id = Identity::from_token_body(&body).unwrap();
        assert_eq!(id.user_id, "u1");
        assert_eq!(id.project_id.as_deref(), Some("p1"));
        assert_eq!(id.roles, vec!["member", "reader"]);
        assert!(id.is_admin_project);
        assert!(!id.system_all);
        let system = json!({"token": {"user": {"id": "u"}, "system": {"all": true}, "roles": [],
            "is_admin_project": false, "expires_at": "2030-01-01T00:00:00Z"}});
        let id = Identity::from_token_body(&system).unwrap();
        assert!(id.system_all && !id.is_admin_project && id.project_id.is_none());
        assert!(Identity::from_token_body(&json!({"token": {"user": {"id": "u"}}})).is_none());
    }
}
