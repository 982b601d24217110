//! The architecture stays as `docs/architecture.md` draws it: no import cycle between the
//! modules of any crate (edges read from `crate::`/`super::` paths in every `src/**/*.rs`),
//! every crate depends only on the `ahe-*` crates its row of the table allows, and the runner
//! layer holds: only the loop's commands in `ahe-cli` name `ahe_evolve`, and `ahe-runner`
//! names neither the loop nor the CLI.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn crates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    v.sort();
    v
}

pub(crate) fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file below `src/` (`a/b.rs` and `a/b/mod.rs` → `[a, b]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments (line comments, doc comments, block comments).
pub(crate) fn code(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else if let Some(r) = rest.strip_prefix("r#\"") {
            // raw strings may hold quotes
            rest = r.find("\"#").map_or("", |i| &r[i + 2..]);
            out.push_str("\"\"");
        } else if rest.starts_with('"') {
            // skip string literals (they may hold `crate::` in messages or templates)
            let b = rest.as_bytes();
            let mut i = 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            rest = rest.get(i + 1..).unwrap_or("");
        } else {
            let c = rest.chars().next().unwrap();
            // a char literal '"' must not open a string
            if rest.starts_with("'\"'") {
                rest = &rest[3..];
                continue;
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// `code` without its `#[cfg(test)] mod … { … }` blocks: unit tests may reach across
/// modules (they build fixtures with the loader, check a backend is available, …); the
/// architecture is what the code itself imports.
pub(crate) fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = rest[i + "#[cfg(test)]".len()..].trim_start();
        let is_block = after.starts_with("mod ")
            && after
                .find('{')
                .is_some_and(|b| after.find(';').is_none_or(|s| b < s));
        if !is_block {
            rest = &rest[i + 1..];
            out.push('#');
            continue;
        }
        let open = after.find('{').unwrap();
        let mut depth = 0usize;
        let mut end = after.len();
        for (j, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The first names after each `crate::` in `code`, with the names of `crate::{a, b::c}` groups.
fn crate_paths(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let n = ident(item.trim());
                if !n.is_empty() {
                    out.push(n.to_string());
                }
            }
        } else {
            let n = ident(rest);
            if !n.is_empty() {
                out.push(n.to_string());
            }
        }
    }
    out
}

/// `super::super::x` in module `m` → the absolute path `[.., x]` (first segments only).
fn super_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        let before = rest[..i].chars().last();
        rest = &rest[i..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            rest = &rest["super::".len()..];
            continue;
        }
        let mut base: Vec<String> = module.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let names: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|s| ident(s.trim()).to_string())
                .filter(|s| !s.is_empty())
                .collect()
        } else {
            vec![ident(rest).to_string()]
        };
        for n in names {
            let mut p = base.clone();
            p.push(n);
            out.push(p);
        }
    }
    out
}

/// Items re-exported at the crate root (`pub use a::{B, C};`) → the module they come from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in code(lib).split(';') {
        let s = stmt.trim();
        let Some(path) = s.strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim();
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit("::").next().unwrap_or(item);
            let name = name.split(" as ").last().unwrap_or(name).trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.to_string());
            }
        }
    }
    map
}

/// Edges between the top-level modules of one crate (a module's own files excluded).
fn module_edges(krate: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = krate.join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let reexports = root_reexports(&lib);
    let mut modules: BTreeSet<String> = BTreeSet::new();
    for f in &files {
        if let Some(m) = module_of(&src, f).first() {
            modules.insert(m.clone());
        }
    }
    let resolve = |name: &str| -> Option<String> {
        if modules.contains(name) {
            Some(name.to_string())
        } else {
            reexports.get(name).cloned()
        }
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let module = module_of(&src, f);
        let Some(top) = module.first().cloned() else {
            continue; // the crate root may name every module
        };
        let text = without_test_modules(&code(&std::fs::read_to_string(f).unwrap()));
        let mut targets: Vec<String> = crate_paths(&text, "crate::");
        for p in super_paths(&text, &module) {
            if let Some(first) = p.first() {
                targets.push(first.clone());
            }
        }
        for t in targets {
            if let Some(m) = resolve(&t) {
                if m != top {
                    edges.entry(top.clone()).or_default().insert(m);
                }
            }
        }
    }
    edges
}

/// Every strongly connected component of more than one node (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        e: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T, v: &str) {
        let i = t.index.len();
        t.index.insert(v.into(), i);
        t.low.insert(v.into(), i);
        t.stack.push(v.into());
        t.on.insert(v.into());
        let next: Vec<String> = t.e.get(v).into_iter().flatten().cloned().collect();
        for w in next {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let l = t.low[&w].min(t.low[v]);
                t.low.insert(v.into(), l);
            } else if t.on.contains(&w) {
                let l = t.index[&w].min(t.low[v]);
                t.low.insert(v.into(), l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                c.push(w);
                if done {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t = T {
        e: edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    let nodes: BTreeSet<String> = edges
        .iter()
        .flat_map(|(k, v)| std::iter::once(k.clone()).chain(v.iter().cloned()))
        .collect();
    for n in nodes {
        if !t.index.contains_key(&n) {
            visit(&mut t, &n);
        }
    }
    t.out
}

#[test]
fn no_module_import_cycle_in_any_crate() {
    let mut bad = Vec::new();
    for k in crates() {
        let edges = module_edges(&k);
        for c in cycles(&edges) {
            let arrows: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{a} → {b}"))
                })
                .collect();
            bad.push(format!(
                "{}: cycle through {:?} ({})",
                k.file_name().unwrap().to_string_lossy(),
                c,
                arrows.join(", ")
            ));
        }
    }
    assert!(bad.is_empty(), "module import cycles:\n{}", bad.join("\n"));
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod b;\npub mod c;\npub use b::Thing;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a.rs"),
        "// crate::c is only a comment\nuse crate::Thing;\n",
    )
    .unwrap();
    std::fs::write(src.join("b/mod.rs"), "pub struct Thing;\nmod inner;\n").unwrap();
    std::fs::write(
        src.join("b/inner.rs"),
        "use super::super::a;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("c.rs"), "use crate::b;\n").unwrap();
    let edges = module_edges(d.path());
    assert_eq!(cycles(&edges), vec![vec!["a".to_string(), "b".to_string()]]);
    assert!(!edges["a"].contains("c"), "{edges:?}");
    assert!(
        !edges["b"].contains("c"),
        "a test module's import is no edge: {edges:?}"
    );
}

/// The `ahe-*` crates a crate's `[dependencies]` name (dev-dependencies are free).
fn ahe_deps(krate: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    v.get("dependencies")
        .and_then(|d| d.as_table())
        .map(|t| {
            t.keys()
                .filter(|k| k.starts_with("ahe-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The table of `docs/architecture.md`: crate → the `ahe-*` crates it may import.
fn table() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut t = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || !cells[1].starts_with("`ahe-") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let may: BTreeSet<String> = cells[cells.len() - 2]
            .split(',')
            .map(|s| s.trim().trim_matches('`').to_string())
            .filter(|s| s.starts_with("ahe-"))
            .collect();
        t.insert(name, may);
    }
    t
}

#[test]
fn crate_dependencies_follow_the_architecture_table() {
    let table = table();
    let mut bad = Vec::new();
    for k in crates() {
        let name = k.file_name().unwrap().to_string_lossy().into_owned();
        let Some(may) = table.get(&name) else {
            bad.push(format!("{name} is not in docs/architecture.md's table"));
            continue;
        };
        for d in ahe_deps(&k) {
            if !may.contains(&d) {
                bad.push(format!("{name} imports {d}, which its row does not allow"));
            }
        }
    }
    for name in table.keys() {
        if !root().join("crates").join(name).exists() {
            bad.push(format!(
                "docs/architecture.md names {name}, which does not exist"
            ));
        }
    }
    // The allowed arrows themselves point only downward (no cycle between crates).
    for c in cycles(&table) {
        bad.push(format!("the table allows a cycle between crates: {c:?}"));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The `ahe-cli` source files that may name the loop crate (`docs/architecture.md`, "The
/// runner layer"): `ahe evolve`; the commands that read runs (`show`, `report`, `view`);
/// `ahe debug`, which runs the loop's debug phase over an evaluation directory. An entry
/// ending in `/` covers a folder.
const CLI_LOOP_FILES: &[&str] = &[
    "evolve.rs",
    "show.rs",
    "show/",
    "report.rs",
    "view.rs",
    "view/",
    "debug.rs",
];

/// Whether `code` names `name` as a whole word (`my_ahe_evolve` does not name `ahe_evolve`).
pub(crate) fn names(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(i, _)| {
        let before = code[..i].chars().last();
        let after = code[i + name.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The `src/`-relative paths (with `/`) of a crate's source files whose code — comments and
/// string literals left out, test modules included — names the crate `name` (`ahe_evolve`).
fn files_naming(krate: &Path, name: &str) -> Vec<String> {
    let src = krate.join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut out: Vec<String> = files
        .iter()
        .filter(|f| names(&code(&std::fs::read_to_string(f).unwrap()), name))
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            parts.join("/")
        })
        .collect();
    out.sort();
    out
}

/// The files of `ahe-cli` at `krate` that name `ahe_evolve` but are not in [`CLI_LOOP_FILES`].
fn cli_files_using_the_loop(krate: &Path) -> Vec<String> {
    files_naming(krate, "ahe_evolve")
        .into_iter()
        .filter(|f| {
            !CLI_LOOP_FILES.iter().any(|a| match a.strip_suffix('/') {
                Some(dir) => f.starts_with(&format!("{dir}/")),
                None => f == a,
            })
        })
        .collect()
}

/// Every `ahe-*` crate any dependency table of a crate names (dev and build ones too).
fn ahe_deps_all(krate: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    ["dependencies", "dev-dependencies", "build-dependencies"]
        .iter()
        .filter_map(|t| v.get(t).and_then(|d| d.as_table()))
        .flat_map(|t| t.keys().filter(|k| k.starts_with("ahe-")).cloned())
        .collect()
}

#[test]
fn only_the_loop_commands_use_the_loop_crate() {
    let cli = root().join("crates/ahe-cli");
    let bad = cli_files_using_the_loop(&cli);
    assert!(
        bad.is_empty(),
        "ahe-cli files that name ahe_evolve but are no loop command (use ahe_runner, or add \
         the file to CLI_LOOP_FILES and docs/architecture.md with the reason): {bad:?}"
    );
    // The list is no dead letter: the loop's own command does use the loop.
    assert!(files_naming(&cli, "ahe_evolve").contains(&"evolve.rs".to_string()));
    for f in ["eval.rs", "matrix.rs", "bench.rs", "check.rs", "export.rs"] {
        assert!(
            cli.join("src").join(f).exists(),
            "{f} moved: update this test"
        );
    }
}

#[test]
fn the_runner_does_not_use_the_loop_or_the_cli() {
    let runner = root().join("crates/ahe-runner");
    let mut bad = Vec::new();
    for name in ["ahe_evolve", "ahe_cli"] {
        for f in files_naming(&runner, name) {
            bad.push(format!("src/{f} names {name}"));
        }
    }
    for d in ahe_deps_all(&runner) {
        if d == "ahe-evolve" || d == "ahe-cli" {
            bad.push(format!("Cargo.toml depends on {d}"));
        }
    }
    assert!(bad.is_empty(), "ahe-runner reaches up: {bad:?}");
}

#[test]
fn the_loop_check_sees_a_command_that_uses_the_loop() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("view")).unwrap();
    std::fs::create_dir_all(src.join("check")).unwrap();
    let uses = "use ahe_evolve::inputs::start;\n";
    std::fs::write(src.join("evolve.rs"), uses).unwrap();
    std::fs::write(src.join("view/pages.rs"), uses).unwrap();
    std::fs::write(src.join("check/disk.rs"), "fn f() { ahe_evolve::x() }\n").unwrap();
    std::fs::write(src.join("eval.rs"), "use ahe_evolve::{a, b};\n").unwrap();
    std::fs::write(
        src.join("export.rs"),
        "// ahe_evolve::RunConfig was here\nconst S: &str = \"ahe_evolve::x\";\nuse my_ahe_evolve::y;\n",
    )
    .unwrap();
    std::fs::write(src.join("viewer.rs"), uses).unwrap();
    assert_eq!(
        cli_files_using_the_loop(d.path()),
        vec!["check/disk.rs", "eval.rs", "viewer.rs"],
        "a folder entry covers its files only; comments, strings and longer names do not count"
    );
    std::fs::write(
        d.path().join("Cargo.toml"),
        "[dev-dependencies]\nahe-evolve = { path = \"x\" }\n",
    )
    .unwrap();
    assert!(ahe_deps_all(d.path()).contains("ahe-evolve"));
}
