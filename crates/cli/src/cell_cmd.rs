//! `berth cell`: create, list, disable/enable cells and discover hosts
//! (Nova's `nova-manage cell_v2`). With `--url` the command asks a running
//! berth (its admin API); without, it works on the control database
//! directly (PostgreSQL at any time; SQLite only while no server holds the
//! data directory).

#![expect(clippy::print_stdout, reason = "a CLI command prints its results")]

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use berth_compute_model::plan::{plan_map_host, plan_put_cell};
use berth_compute_model::CellMapping;
use serde_json::{json, Value};
use uuid::Uuid;

/// Options of `berth cell`.
#[derive(Debug, clap::Args)]
pub(crate) struct CellOpts {
    #[command(subcommand)]
    action: CellAction,
    /// A running berth to ask (its admin API), e.g. http://127.0.0.1:8778.
    #[arg(long, global = true, env = "BERTH_URL")]
    url: Option<String>,
    /// X-Auth-Token for `--url`.
    #[arg(long, global = true, default_value = "admin")]
    token: String,
    /// Data directory of the embedded control database (without `--url`).
    #[arg(long, global = true, env = "BERTH_DATA_DIR", default_value = "berth-data")]
    data_dir: PathBuf,
    /// Control database URL (without `--url`).
    #[arg(long, global = true, env = "BERTH_DATABASE")]
    database: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum CellAction {
    /// Create a cell (its database is created and migrated).
    Create {
        /// Cell name.
        #[arg(long)]
        name: String,
        /// Cell database URL (default: beside the control database).
        #[arg(long = "database-connection", alias = "cell-database")]
        database_connection: Option<String>,
    },
    /// List cells.
    List,
    /// Stop scheduling to a cell.
    Disable {
        /// Cell name.
        name: String,
    },
    /// Schedule to a cell again.
    Enable {
        /// Cell name.
        name: String,
    },
    /// Map every compute host found in a cell without a host mapping.
    DiscoverHosts,
}

pub(crate) fn run(opts: CellOpts) -> anyhow::Result<()> {
    match &opts.url {
        Some(url) => remote(url, &opts.token, &opts.action),
        None => local(&opts),
    }
}

fn remote(url: &str, token: &str, action: &CellAction) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let base = format!("{}/admin/v1", url.trim_end_matches('/'));
        let (method, path, body) = match action {
            CellAction::Create { name, database_connection } => {
                let mut body = json!({"name": name});
                if let Some(db) = database_connection {
                    body["database_connection"] = json!(db);
                }
                (reqwest::Method::POST, "/cells".to_owned(), Some(body))
            }
            CellAction::List => (reqwest::Method::GET, "/cells".to_owned(), None),
            CellAction::Disable { name } => (reqwest::Method::POST, format!("/cells/{name}/disable"), Some(json!({}))),
            CellAction::Enable { name } => (reqwest::Method::POST, format!("/cells/{name}/enable"), Some(json!({}))),
            CellAction::DiscoverHosts => (reqwest::Method::POST, "/discover-hosts".to_owned(), Some(json!({}))),
        };
        let mut req = client.request(method, format!("{base}{path}")).header("x-auth-token", token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.context("asking the server")?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        anyhow::ensure!(status.is_success(), "{status}: {text}");
        if !text.is_empty() {
            let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
        Ok(())
    })
}

fn local(opts: &CellOpts) -> anyhow::Result<()> {
    let store = crate::serve::open_store(opts.database.as_deref(), &opts.data_dir, None)?;
    let app = Arc::new(berth_core::App::new(store)?);
    let template = crate::compute_wiring::cell_database_template(opts.database.as_deref(), &opts.data_dir);
    let put = |cell: CellMapping| -> anyhow::Result<()> {
        app.write(|w| plan_put_cell(w, cell.clone()).map(|s| (s, ())).map_err(|e| anyhow::anyhow!("{e}")))
            .map_err(|e: anyhow::Error| e)
    };
    let find = |name: &str| -> anyhow::Result<CellMapping> {
        app.read().compute.cells.values().find(|c| c.name == name).cloned().with_context(|| format!("no cell {name}"))
    };
    match &opts.action {
        CellAction::Create { name, database_connection } => {
            let cell = CellMapping {
                uuid: Uuid::new_v4(),
                name: name.clone(),
                database_connection: database_connection.clone().unwrap_or_else(|| template.replace("{name}", name)),
                disabled: false,
            };
            crate::compute_wiring::open_cell(&cell).context("opening the cell database")?;
            put(cell.clone())?;
            println!("{}", cell.uuid);
        }
        CellAction::List => {
            let mut cells: Vec<CellMapping> = app.read().compute.cells.values().cloned().collect();
            cells.sort_by_key(|c| c.name.clone());
            for cell in cells {
                let state = if cell.disabled { "disabled" } else { "enabled" };
                println!(
                    "{}\t{}\t{}\t{}",
                    cell.name,
                    cell.uuid,
                    state,
                    berth_compute_api::handlers::agents::redact(&cell.database_connection)
                );
            }
        }
        CellAction::Disable { name } | CellAction::Enable { name } => {
            let mut cell = find(name)?;
            cell.disabled = matches!(opts.action, CellAction::Disable { .. });
            put(cell)?;
        }
        CellAction::DiscoverHosts => {
            let cells: Vec<CellMapping> = app.read().compute.cells.values().cloned().collect();
            for cell in cells.iter().filter(|c| c.uuid != berth_compute_model::CELL0_UUID) {
                let store = crate::compute_wiring::open_cell(cell)?;
                let services = store.services()?;
                let nodes = store.compute_nodes()?;
                for service in services.iter().filter(|s| s.binary == "nova-compute") {
                    if app.read().compute.host_mappings.contains_key(&service.host) {
                        continue;
                    }
                    let mine: Vec<(Uuid, String)> = nodes
                        .iter()
                        .filter(|n| n.host == service.host)
                        .map(|n| (n.uuid, n.hypervisor_hostname.clone()))
                        .collect();
                    app.write(|w| {
                        plan_map_host(w, &service.host, cell.uuid, &mine)
                            .map(|s| (s, ()))
                            .map_err(|e| anyhow::anyhow!("{e}"))
                    })?;
                    println!("mapped {} to {}", service.host, cell.name);
                }
            }
        }
    }
    Ok(())
}
