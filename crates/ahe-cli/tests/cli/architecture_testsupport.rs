//! The test-support crate stays out of what ships (docs/architecture.md): `ahe-testsupport`
//! (the scripted model server and the strict stand-ins) is named only in
//! `[dev-dependencies]`, and in `src/` only inside `#[cfg(test)]` modules.

use std::path::Path;

use super::architecture::{code, crates, names, rs_files, without_test_modules};

/// The dev-only crate, as Cargo and as Rust code name it.
const PACKAGE: &str = "ahe-testsupport";
const CRATE: &str = "ahe_testsupport";

/// The dependency tables of a manifest that are not for tests: `[dependencies]`,
/// `[build-dependencies]` and their `[target.'cfg(…)'.…]` forms, as `(label, table)`.
fn shipped_tables(manifest: &toml::Value) -> Vec<(String, &toml::Table)> {
    let mut out = Vec::new();
    add_shipped("", manifest, &mut out);
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for (cfg, v) in targets {
            add_shipped(&format!("target.{cfg} "), v, &mut out);
        }
    }
    out
}

/// The `[dependencies]` and `[build-dependencies]` of `v`, labelled after `prefix`.
fn add_shipped<'a>(prefix: &str, v: &'a toml::Value, out: &mut Vec<(String, &'a toml::Table)>) {
    for t in ["dependencies", "build-dependencies"] {
        if let Some(table) = v.get(t).and_then(toml::Value::as_table) {
            out.push((format!("{prefix}[{t}]"), table));
        }
    }
}

/// Where the crate at `krate` uses the test-support crate outside its tests: manifest
/// tables that are not dev-dependencies, and `src/` files whose code outside `#[cfg(test)]`
/// modules (comments and strings left out) names `ahe_testsupport`.
fn test_support_outside_tests(krate: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    let manifest: toml::Value = toml::from_str(&text).unwrap();
    let mut out: Vec<String> = shipped_tables(&manifest)
        .into_iter()
        .filter(|(_, table)| table.contains_key(PACKAGE))
        .map(|(label, _)| format!("Cargo.toml {label} names {PACKAGE}"))
        .collect();
    let src = krate.join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    for f in files {
        let shipped = without_test_modules(&code(&std::fs::read_to_string(&f).unwrap()));
        if names(&shipped, CRATE) {
            let rel = f.strip_prefix(krate).unwrap().display().to_string();
            out.push(format!("{rel} names {CRATE} outside a #[cfg(test)] module"));
        }
    }
    out
}

#[test]
fn the_test_support_crate_is_a_dev_dependency_only() {
    let mut bad = Vec::new();
    let mut dev_users = 0;
    for k in crates() {
        let name = k.file_name().unwrap().to_string_lossy().into_owned();
        for b in test_support_outside_tests(&k) {
            bad.push(format!("{name}: {b}"));
        }
        let text = std::fs::read_to_string(k.join("Cargo.toml")).unwrap();
        let manifest: toml::Value = toml::from_str(&text).unwrap();
        let dev = manifest
            .get("dev-dependencies")
            .and_then(toml::Value::as_table);
        dev_users += usize::from(dev.is_some_and(|d| d.contains_key(PACKAGE)));
    }
    assert!(
        bad.is_empty(),
        "{PACKAGE} is for tests only (name it in [dev-dependencies], use it in tests, \
         examples or #[cfg(test)] modules):\n{}",
        bad.join("\n")
    );
    // The check is no dead letter: the crates whose tests talk to a model server use it.
    assert!(
        dev_users >= 5,
        "{dev_users} crates name {PACKAGE} as a dev-dependency"
    );
}

#[test]
fn the_test_support_check_sees_a_shipped_use() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        d.path().join("Cargo.toml"),
        "[dependencies]\nahe-model = { path = \"m\" }\n\n\
         [target.'cfg(unix)'.build-dependencies]\nahe-testsupport = { path = \"t\" }\n\n\
         [dev-dependencies]\nahe-testsupport = { path = \"t\" }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "// ahe_testsupport in a comment\nconst S: &str = \"ahe_testsupport\";\n\
         #[cfg(test)]\nmod tests {\n    use ahe_testsupport::TestServer;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("serve.rs"), "use ahe_testsupport::StandIn;\n").unwrap();
    std::fs::write(src.join("other.rs"), "use my_ahe_testsupport::X;\n").unwrap();
    assert_eq!(
        test_support_outside_tests(d.path()),
        vec![
            "Cargo.toml target.cfg(unix) [build-dependencies] names ahe-testsupport".to_string(),
            "src/serve.rs names ahe_testsupport outside a #[cfg(test)] module".to_string(),
        ],
        "dev-dependencies, test modules, comments, strings and longer names do not count"
    );
}
