//! Shared application state and the single write path.

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use berth_model::{ChangeSet, State, Timestamp};
use berth_store::Store;

use crate::auth::AuthMode;
use crate::error::{ApiError, ApiResult};
use crate::policy::Policy;

/// CORS settings (oslo.middleware semantics), off when `None`.
#[derive(Debug, Clone)]
pub struct CorsConfig {
    /// Allowed origins.
    pub allowed_origins: Vec<String>,
    /// Extra headers a preflight may ask for.
    pub allow_headers: Vec<String>,
}

/// Server settings the API needs.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// How callers are identified.
    pub auth_mode: AuthMode,
    /// The policy in force.
    pub policy: Policy,
    /// CORS, when enabled.
    pub cors: Option<CorsConfig>,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
}

/// Everything a handler can reach.
pub struct App {
    /// Settings.
    pub config: ApiConfig,
    state: RwLock<State>,
    writer: Mutex<()>,
    store: Arc<dyn Store>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("store", &self.store.backend_name()).finish_non_exhaustive()
    }
}

/// Current wall-clock time in Unix seconds.
pub fn now() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl App {
    /// Load the state from `store` (adding any missing standard traits and
    /// resource classes) and build the app.
    pub fn new(store: Arc<dyn Store>, config: ApiConfig) -> anyhow::Result<Self> {
        let mut state = store.load()?;
        let standard = state.standard_data_changes(now());
        if !standard.is_empty() {
            store.commit(&standard)?;
            state.apply(&standard);
        }
        Ok(Self { config, state: RwLock::new(state), writer: Mutex::new(()), store })
    }

    /// Read access to the current snapshot.
    pub fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The one write path: plan against the current state (writers are
    /// serialised, so nothing changes between plan and apply), commit the
    /// change set durably, then apply it to the snapshot so this process
    /// reads its own write.
    pub fn write<T>(&self, plan: impl FnOnce(&State) -> ApiResult<(ChangeSet, T)>) -> ApiResult<T> {
        let _writer = self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (changes, out) = plan(&self.read())?;
        if changes.is_empty() {
            return Ok(out);
        }
        let committed = tokio::task::block_in_place(|| self.store.commit(&changes));
        committed.map_err(ApiError::from)?;
        self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner()).apply(&changes);
        Ok(out)
    }
}
