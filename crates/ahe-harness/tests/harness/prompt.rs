//! Prompt variables of a loaded harness (moved out of `prompt.rs` so that `prompt` does not
//! import the loader that imports it).

use ahe_harness::prompt::{render, sample_vars};

#[test]
fn limits_are_template_variables() {
    let h = ahe_harness::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harness-seed"),
    )
    .unwrap();
    let mut v = sample_vars(&h);
    assert_eq!(
        (v.timeout_sec, v.max_turns),
        (1800, 100),
        "the harness's own limits"
    );
    v.timeout_sec = 900;
    v.max_turns = 12;
    let s = render("{{ timeout_sec }}s/{{ max_turns }}", &v).unwrap();
    assert_eq!(s, "900s/12");
}
