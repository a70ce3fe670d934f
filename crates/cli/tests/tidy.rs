//! Tidy checks that keep the architecture honest: the pure crates depend on
//! nothing that does I/O, only store crates know SQL, nothing depends on
//! the binary or (but the binary) on the benchmarks, and every Rust file
//! starts with a `//!` module doc.

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn dependencies(crate_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                deps.push(name.trim().to_owned());
            }
        }
    }
    deps
}

/// The pure crates: the placement model, the candidate engine, the compute
/// model and the scheduler pipeline.
const PURE: [&str; 4] = ["model", "candidates", "compute-model", "scheduler"];

/// The pure crates never get I/O, async, HTTP, SQL or serialisation
/// dependencies.
#[test]
fn pure_crates_have_no_io_dependencies() {
    let forbidden =
        ["tokio", "axum", "hyper", "rusqlite", "sqlx", "postgres", "tokio-postgres", "serde", "serde_json", "reqwest"];
    for name in PURE {
        let dir = workspace_root().join("crates").join(name);
        if !dir.exists() {
            continue;
        }
        for dep in dependencies(&dir) {
            assert!(!forbidden.contains(&dep.as_str()), "pure crate {name} depends on {dep}");
        }
    }
}

/// Only store backends know SQL.
#[test]
fn only_store_backends_depend_on_sql() {
    let sql = ["rusqlite", "sqlx", "postgres", "tokio-postgres"];
    let crates = std::fs::read_dir(workspace_root().join("crates")).expect("crates dir");
    for entry in crates.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("store-") {
            continue;
        }
        for dep in dependencies(&entry.path()) {
            assert!(!sql.contains(&dep.as_str()), "crate {name} depends on SQL driver {dep}");
        }
    }
}

/// Pure crates never read the clock or the environment.
#[test]
fn pure_crates_do_not_read_clock_or_env() {
    for name in PURE {
        let src = workspace_root().join("crates").join(name).join("src");
        if !src.exists() {
            continue;
        }
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).expect("read");
            for needle in ["SystemTime::now", "Instant::now", "std::env::var", "std::fs::"] {
                assert!(!text.contains(needle), "{} uses {needle}", file.display());
            }
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// Every Rust file starts with a `//!` doc comment saying what it is for.
#[test]
fn every_file_has_module_docs() {
    let mut missing = Vec::new();
    for file in rust_files(&workspace_root().join("crates")) {
        let text = std::fs::read_to_string(&file).expect("read");
        if !text.trim_start().starts_with("//!") {
            missing.push(file.display().to_string());
        }
    }
    assert!(missing.is_empty(), "files without a //! module doc: {missing:?}");
}

/// Only the HTTP foundation and the API crates (and the binary, which
/// composes them) know axum/hyper; the core, the compute runtime and the
/// stores do not.
#[test]
fn only_http_crates_depend_on_axum() {
    let http = ["http", "placement-api", "compute-api", "cli"];
    let crates = std::fs::read_dir(workspace_root().join("crates")).expect("crates dir");
    for entry in crates.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if http.contains(&name.as_str()) {
            continue;
        }
        for dep in dependencies(&entry.path()) {
            assert!(!["axum", "hyper"].contains(&dep.as_str()), "crate {name} depends on {dep}");
        }
    }
}

/// Every dependency a crate declares, in any dependency table
/// (`[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, and
/// their `[target.….dependencies]` forms).
fn all_dependencies(crate_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(table) = line.strip_prefix('[') {
            let table = table.trim_end_matches(']');
            in_deps = table.ends_with("dependencies");
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                deps.push(name.trim().to_owned());
            }
        }
    }
    deps
}

/// The binary is the top of the graph: no crate depends on it, and the
/// benchmarks (`berth-bench`) are a dependency of the binary alone.
#[test]
fn nothing_depends_on_the_binary_or_the_benchmarks() {
    let binary = ["berth", "berth-cli"];
    let crates = std::fs::read_dir(workspace_root().join("crates")).expect("crates dir");
    for entry in crates.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.path().join("Cargo.toml").exists() {
            continue;
        }
        for dep in all_dependencies(&entry.path()) {
            assert!(!binary.contains(&dep.as_str()), "crate {name} depends on the binary ({dep})");
            if name != "cli" {
                assert!(dep != "berth-bench", "crate {name} depends on berth-bench; only cli may");
            }
        }
    }
}
