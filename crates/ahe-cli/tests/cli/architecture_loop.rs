//! The loop crate's layout (docs/architecture.md): at its top level only the algorithm, its
//! inputs and one module per phase of Algorithm 1 (plus the final answer after the last
//! iteration); everything else lives inside one of those.

use std::collections::BTreeSet;
use std::path::Path;

/// The top-level modules `ahe-evolve` may have.
const LOOP_TOP: &[&str] = &[
    "algorithm",
    "attribute",
    "commit",
    "debug",
    "evolve",
    "final_eval",
    "inputs",
    "rollout",
];

/// The top-level modules of the crate at `src`: those `lib.rs` declares, and every `.rs`
/// file or folder beside it (a file nobody declares is a module-to-be).
fn top_modules(src: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut found: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').trim().to_string())
        })
        .collect();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name != "lib" && (p.is_dir() || p.extension().is_some_and(|x| x == "rs")) {
            found.insert(name);
        }
    }
    found
}

/// What [`top_modules`] finds beyond [`LOOP_TOP`].
fn outside_the_phases(src: &Path) -> Vec<String> {
    let allowed: BTreeSet<&str> = LOOP_TOP.iter().copied().collect();
    (top_modules(src).into_iter())
        .filter(|m| !allowed.contains(m.as_str()))
        .collect()
}

#[test]
fn the_loop_crate_has_only_its_phases_the_algorithm_and_its_inputs_at_the_top() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ahe-evolve/src");
    let extra = outside_the_phases(&src);
    assert!(
        extra.is_empty(),
        "top-level modules of ahe-evolve outside its phases, the algorithm and its inputs: \
         {extra:?} (put each in the phase that owns it, or in `inputs`)"
    );
    // Every allowed name is there: the list names the real layout.
    let found = top_modules(&src);
    for m in LOOP_TOP {
        assert!(
            found.contains(*m),
            "ahe-evolve has no module {m}: {found:?}"
        );
    }
}

#[test]
fn the_layout_check_sees_a_module_outside_the_phases() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path();
    std::fs::write(src.join("lib.rs"), "pub mod algorithm;\npub mod history;\n").unwrap();
    std::fs::write(src.join("algorithm.rs"), "").unwrap();
    std::fs::write(src.join("history.rs"), "").unwrap();
    std::fs::create_dir(src.join("spend")).unwrap();
    std::fs::write(src.join("text.rs"), "").unwrap();
    assert_eq!(outside_the_phases(src), ["history", "spend", "text"]);
}
