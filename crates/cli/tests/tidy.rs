//! Tidy checks that keep the architecture honest: the pure crates depend on
//! nothing that does I/O, only store crates know SQL, the API crates reach
//! storage only through the runtime, no crate depends on a crate on a floor
//! above its own, nothing depends on the binary or (but the binary) on the
//! benchmarks, no two modules of a crate import each other (directly or in
//! a longer circle), every Rust file starts with a `//!` module doc, and
//! README.md and ARCHITECTURE.md keep to their line budgets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// The names a crate's `Cargo.toml` lists in the tables `table` accepts
/// (given each table's name without brackets).
fn dependencies_in(crate_dir: &Path, table: impl Fn(&str) -> bool) -> Vec<String> {
    let text = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[') {
            in_deps = table(name.trim_end_matches(']'));
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

/// What a crate's `[dependencies]` lists.
fn dependencies(crate_dir: &Path) -> Vec<String> {
    dependencies_in(crate_dir, |t| t == "dependencies")
}

/// The pure crates: the placement model, the candidate engine, the compute
/// model, the scheduler pipeline and lease planning.
const PURE: [&str; 5] = ["model", "candidates", "compute-model", "scheduler", "reservation-model"];

/// The API crates (wire formats and route tables over the runtimes).
const API: [&str; 4] = ["placement-api", "compute-api", "reservation-api", "image-api"];

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
    let sql = ["rusqlite", "sqlx", "postgres", "tokio-postgres", "mysql_async"];
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
    let http = ["http", "placement-api", "compute-api", "reservation-api", "image-api", "cli"];
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

/// The API crates never depend on a store crate (`berth-store*`) directly:
/// they reach storage through `berth-core` (the control state's one write
/// path) and the runtimes. Only `[dependencies]` count; a test may still
/// build a real store (`placement-api`'s fuzz test has `berth-store-sqlite`
/// as a dev-dependency). No exceptions today.
#[test]
fn api_crates_do_not_depend_on_stores() {
    for name in API {
        let dir = workspace_root().join("crates").join(name);
        assert!(dir.exists(), "API crate {name} is missing");
        for dep in dependencies(&dir) {
            assert!(!dep.starts_with("berth-store"), "API crate {name} depends on {dep} directly");
        }
    }
}

/// Each crate's floor, bottom to top. A crate may depend on crates on its
/// own floor or below, never above (cargo already forbids cycles). A new
/// crate must be given a floor here.
const FLOORS: &[(&str, u8)] = &[
    // Pure: domain models, then the engines and plans over them.
    ("model", 0),
    ("identity", 0),
    ("candidates", 1),
    ("compute-model", 1),
    ("scheduler", 2),
    ("reservation-model", 2),
    // Storage: the store trait, then the backends and the one write path.
    ("store", 3),
    ("store-sqlite", 4),
    ("store-mysql", 4),
    ("store-postgres", 4),
    ("core", 4),
    // Runtimes.
    ("compute", 5),
    ("reservations", 5),
    ("agent", 5),
    ("pull", 5),
    // HTTP: the foundation, then the APIs.
    ("http", 6),
    ("placement-api", 7),
    ("compute-api", 7),
    ("reservation-api", 7),
    ("image-api", 7),
    // The benchmarks (they drive the binary's servers and agents).
    ("bench", 8),
    // The binary.
    ("cli", 9),
];

/// No crate depends on a crate on a higher floor.
#[test]
fn no_crate_depends_upwards() {
    let floor_of = |name: &str| FLOORS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f);
    let crates = std::fs::read_dir(workspace_root().join("crates")).expect("crates dir");
    for entry in crates.flatten() {
        if !entry.path().join("Cargo.toml").exists() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(own) = floor_of(&name) else { panic!("crate {name} has no floor in tidy.rs FLOORS") };
        for dep in dependencies(&entry.path()) {
            let Some(dep_crate) = dep.strip_prefix("berth-") else { continue };
            let dep_floor = floor_of(dep_crate).unwrap_or_else(|| panic!("{name} depends on unknown crate {dep}"));
            assert!(dep_floor <= own, "crate {name} (floor {own}) depends on {dep} (floor {dep_floor}), a floor above");
        }
    }
}

/// Every dependency a crate declares, in any dependency table
/// (`[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, and
/// their `[target.….dependencies]` forms).
fn all_dependencies(crate_dir: &Path) -> Vec<String> {
    dependencies_in(crate_dir, |t| t.ends_with("dependencies"))
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

/// ARCHITECTURE.md's crate graph (between the `crate-graph` markers) is
/// the graph the manifests declare: each crate's floor as `FLOORS` gives
/// it and the `berth-*` crates its `[dependencies]` name, no more, no less.
#[test]
fn the_architecture_crate_graph_is_current() {
    let doc = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = doc.find("<!-- crate-graph").expect("crate-graph start marker");
    let end = doc.find("<!-- /crate-graph -->").expect("crate-graph end marker");
    let mut documented = BTreeMap::new();
    for line in doc[start..end].lines().filter(|l| l.starts_with("| ") && !l.starts_with("| floor")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [floor, name, uses] = cells[..] else { panic!("bad crate-graph row: {line}") };
        let uses: Vec<String> = if uses == "—" { Vec::new() } else { uses.split(", ").map(str::to_owned).collect() };
        documented.insert(name.trim_matches('`').to_owned(), (floor.parse::<u8>().expect("floor"), uses));
    }
    let mut actual = BTreeMap::new();
    for entry in std::fs::read_dir(workspace_root().join("crates")).expect("crates dir").flatten() {
        if !entry.path().join("Cargo.toml").exists() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let floor = FLOORS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).expect("floor");
        let mut uses: Vec<String> =
            dependencies(&entry.path()).iter().filter_map(|d| d.strip_prefix("berth-")).map(str::to_owned).collect();
        uses.sort();
        actual.insert(name, (floor, uses));
    }
    assert_eq!(documented, actual, "ARCHITECTURE.md's crate graph is out of date");
}

/// README.md and ARCHITECTURE.md keep to their line budgets (issue 36):
/// each capability gets a line or two and a link, and detail goes to
/// `docs/` in the same change that would push either file over.
#[test]
fn readme_and_architecture_keep_to_their_line_budgets() {
    for (file, budget) in [("README.md", 250), ("ARCHITECTURE.md", 500)] {
        let text = std::fs::read_to_string(workspace_root().join(file)).expect(file);
        let n_lines = text.lines().count();
        assert!(
            n_lines <= budget,
            "{file} has {n_lines} lines, over its budget of {budget}: move detail to docs/ (see the note at its top)"
        );
    }
}

/// Each module of a crate, with the modules it refers to and, for each,
/// one file where it does.
type ModuleGraph = BTreeMap<String, BTreeMap<String, String>>;

/// A crate's modules: the files and folders directly under `src/` (the
/// crate root, `lib.rs` or `main.rs`, and `src/bin/` are not modules of
/// it).
fn crate_modules(src: &Path) -> BTreeSet<String> {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("read src").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "bin" {
                modules.insert(name);
            }
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if stem != "lib" && stem != "main" {
                modules.insert(stem.to_owned());
            }
        }
    }
    modules
}

/// A file's text without its `//` comments (doc comments may name any
/// module; only code makes a dependency).
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.split_once("//").map_or(line, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

/// The first names of the paths after each `prefix` in `code`:
/// `crate::hub::Task` gives `hub`, `crate::{hub::Task, pull}` gives `hub`
/// and `pull`.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut names = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            names.push(ident(rest));
            continue;
        };
        // A `{…}` group: the names at its top level, after `{` and each `,`.
        let mut depth = 1;
        let mut expect_name = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ',' if depth == 1 => expect_name = true,
                c if c.is_whitespace() => {}
                _ if expect_name && depth == 1 => {
                    names.push(ident(&group[i..]));
                    expect_name = false;
                }
                _ => {}
            }
        }
    }
    names
}

/// Which modules of the crate whose sources are `src` each module refers
/// to (`crate::m…`, `use crate::{m, …}`, and `super::m…` from a file that
/// is a module of the crate root), with one file where it does.
fn module_graph(src: &Path) -> ModuleGraph {
    let modules = crate_modules(src);
    let mut graph: ModuleGraph = modules.iter().map(|m| (m.clone(), Default::default())).collect();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).expect("under src");
        let parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let owner = parts[0].trim_end_matches(".rs").to_owned();
        if !modules.contains(&owner) {
            continue;
        }
        // `super::` as many times as the file is deep reaches the crate root
        // (`a.rs` and `a/mod.rs`: once; `a/b.rs`: twice).
        let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod.rs"));
        let to_root = "super::".repeat(depth);
        let code = code_of(&std::fs::read_to_string(&file).expect("read"));
        let mut names = names_after(&code, "crate::");
        names.extend(names_after(&code, &to_root));
        for name in names {
            if name != owner && modules.contains(&name) {
                let edges = graph.get_mut(&owner).expect("owner");
                edges.entry(name).or_insert_with(|| relative.display().to_string());
            }
        }
    }
    graph
}

/// A cycle in `graph`, as the modules along it and back to the first, if
/// there is one.
fn find_cycle(graph: &ModuleGraph) -> Option<Vec<String>> {
    fn visit(
        graph: &ModuleGraph,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph[node].keys() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

/// Module references the cycle check does not follow, as (crate, module,
/// module it refers to): knots known and left for later. Keep it short.
const KNOWN_KNOTS: &[(&str, &str, &str)] = &[
    // `plan`'s forget drops the shelve snapshot through `rehome`, and
    // `rehome`'s tests claim with `plan` and build worlds with its test
    // fixtures (test code only).
    ("compute-model", "rehome", "plan"),
];

/// Inside every crate the modules (the files and folders under `src/`)
/// refer to each other in one direction only: no module reaches, through
/// `crate::` (or `super::` to the crate root) paths, a module that reaches
/// it back. What two modules share goes into a third that both use. Only
/// code counts, not comments; names the crate root re-exports
/// (`crate::World` for `world::World`) are not followed.
#[test]
fn no_import_cycles_inside_crates() {
    let mut cycles = Vec::new();
    for entry in std::fs::read_dir(workspace_root().join("crates")).expect("crates dir").flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut graph = module_graph(&src);
        for (_, from, to) in KNOWN_KNOTS.iter().filter(|(krate, _, _)| *krate == name) {
            let known = graph.get_mut(*from).and_then(|edges| edges.remove(*to));
            assert!(known.is_some(), "crates/{name}: {from} no longer refers to {to}; drop it from KNOWN_KNOTS");
        }
        if let Some(cycle) = find_cycle(&graph) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|pair| format!("{} → {} (in {})", pair[0], pair[1], graph[&pair[0]][&pair[1]]))
                .collect();
            cycles.push(format!("crates/{name}: {}", steps.join(", ")));
        }
    }
    cycles.sort();
    assert!(cycles.is_empty(), "modules that import each other in a circle:\n{}", cycles.join("\n"));
}
