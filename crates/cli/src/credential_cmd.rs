//! `berth agent credential`: issue, list and revoke the per-host agent
//! credentials of a running berth (its admin API). An agent started with
//! `--credential-file FILE` then authenticates as its host and nobody else
//! may register, heartbeat or report for that host.

#![expect(clippy::print_stdout, reason = "a CLI command prints its results")]

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};

/// Options of `berth agent credential`.
#[derive(Debug, clap::Args)]
pub(crate) struct CredentialOpts {
    #[command(subcommand)]
    action: CredentialAction,
    /// The berth to ask (its admin API).
    #[arg(long, global = true, env = "BERTH_URL", default_value = "http://127.0.0.1:8778")]
    url: String,
    /// An admin's X-Auth-Token (noauth2: `admin`; with Keystone, e.g.
    /// `$(openstack token issue -f value -c id)` as an admin).
    #[arg(long, global = true, env = "BERTH_TOKEN", default_value = "admin", hide_env_values = true)]
    token: String,
    /// Extra trusted root certificates (PEM) for an `https` URL.
    #[arg(long, global = true)]
    ca_file: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum CredentialAction {
    /// Issue the credential of HOST (a new one replaces the old, which
    /// stops working). The host is bound to it at once.
    Create {
        /// Host name (the agent's service host).
        host: String,
        /// Write the credential to this file (mode 0600) instead of
        /// printing it.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// List the hosts that have a credential.
    List,
    /// Revoke HOST's credential; the host is unbound.
    Delete {
        /// Host name.
        host: String,
    },
}

/// Run `berth agent credential …`.
pub(crate) fn run(opts: CredentialOpts) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
        let client = berth_identity::add_trusted_roots(builder, opts.ca_file.as_deref())?.build()?;
        let base = format!("{}/admin/v1/agent-credentials", opts.url.trim_end_matches('/'));
        let request = match &opts.action {
            CredentialAction::Create { host, .. } => client.post(&base).json(&json!({"host": host})),
            CredentialAction::List => client.get(&base),
            CredentialAction::Delete { host } => {
                let mut url = reqwest::Url::parse(&base).context("--url")?;
                url.path_segments_mut().map_err(|()| anyhow::anyhow!("--url cannot be a base"))?.push(host);
                client.delete(url)
            }
        };
        let response = request.header("x-auth-token", &opts.token).send().await.context("asking berth")?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(status.is_success(), "berth answered {status}: {}", text.trim());
        match &opts.action {
            CredentialAction::Create { host, output } => {
                let body: Value = serde_json::from_str(&text)?;
                let token = body["credential"]["token"].as_str().context("no token in the answer")?;
                match output {
                    Some(path) => {
                        write_secret(path, token)?;
                        println!("credential of host {host} written to {}", path.display());
                    }
                    None => println!("{token}"),
                }
            }
            CredentialAction::List => {
                let body: Value = serde_json::from_str(&text)?;
                for c in body["credentials"].as_array().into_iter().flatten() {
                    println!(
                        "{}\tcreated_at={}\tregistered={}",
                        c["host"].as_str().unwrap_or_default(),
                        c["created_at"],
                        c["registered"]
                    );
                }
            }
            CredentialAction::Delete { host } => println!("credential of host {host} revoked"),
        }
        Ok(())
    })
}

/// Write `token` to `path`, readable by its owner only (the file is made
/// 0600 before the secret goes in).
fn write_secret(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    writeln!(file, "{token}")?;
    Ok(())
}
