//! Layered configuration: config file < environment < command-line flags.
//! clap resolves flags over `BERTH_*` environment variables; anything still
//! unset is taken from the YAML file named by `--config`/`BERTH_CONFIG`,
//! then from the documented defaults.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// Keys accepted in the config file (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    /// Address to listen on.
    pub(crate) listen: Option<String>,
    /// Data directory for the embedded SQLite database.
    pub(crate) data_dir: Option<PathBuf>,
    /// Database URL (`sqlite://PATH`); default is SQLite in `data_dir`.
    pub(crate) database: Option<String>,
    /// Policy file.
    pub(crate) policy_file: Option<PathBuf>,
    /// `noauth2` or `trusted-headers`.
    pub(crate) auth: Option<String>,
    /// CORS allowed origin.
    pub(crate) cors_allowed_origin: Option<String>,
    /// CORS extra allowed headers (comma separated).
    pub(crate) cors_allow_headers: Option<String>,
    /// Largest request body in bytes.
    pub(crate) max_body_bytes: Option<usize>,
    /// Log filter (tracing env-filter syntax).
    pub(crate) log: Option<String>,
    /// Log line format: text or json.
    pub(crate) log_format: Option<String>,
    /// Change-feed poll interval in milliseconds (PostgreSQL).
    pub(crate) change_poll_ms: Option<u64>,
    /// Change-feed retention in seconds (PostgreSQL).
    pub(crate) change_feed_retention_secs: Option<u64>,
    /// Shuffle / randomly sample allocation candidates.
    pub(crate) randomize_allocation_candidates: Option<bool>,
    /// Cap on allocation candidates generated per request (-1: unlimited).
    pub(crate) max_allocation_candidates: Option<i64>,
}

impl FileConfig {
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_yaml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}
