//! An honest `best`: with no real improvement (every harness solves the same tasks; the
//! evolve agent's lessons change nothing), best stays the seed, the final re-evaluation on
//! fresh trials says best − seed covers 0 in `final.json`, report.md, report.html and
//! `ahe show`; the matched-budget baseline runs as the last phase (`[evolve] baseline =
//! true`) and is shown beside it.

use crate::attribution_sim;
use crate::common;

use attribution_sim::{Effect, Scenario, SimChange, FILES};
use common::{root, text};

#[test]
fn no_real_improvement_is_reported_as_such() {
    let d = tempfile::tempdir().unwrap();
    let mut later = SimChange::new("c2", Effect::Nothing, 4, true, FILES[1], false);
    later.iteration = 2;
    let sc = Scenario {
        tasks: 12,
        changes: vec![
            SimChange::new("c1", Effect::Nothing, 2, true, FILES[0], true),
            later,
        ],
        evolve: "baseline = true\nbaseline_trials = 4\n".into(),
        failing: vec![2, 4, 6, 8, 10],
        ..Default::default()
    };
    let (o, run) = sc.run(d.path(), &root(), env!("CARGO_BIN_EXE_ahe").as_ref());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let best = common::json_file(&run.join("best.json"));
    assert_eq!(best["iteration"], 1, "nothing beat the seed: {best}");
    let fin = common::json_file(&run.join("final.json"));
    assert_eq!(fin["trials_per_task"], 4, "2 × k by default: {fin}");
    let roles: Vec<&str> = fin["harnesses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["best, seed", "runner-up"], "{fin}");
    let d = &fin["runner_up_vs_seed"];
    let (lo, hi) = (d["ci"][0].as_f64().unwrap(), d["ci"][1].as_f64().unwrap());
    assert!(lo <= 0.0 && hi >= 0.0, "{fin}");
    assert_eq!(d["delta"].as_f64(), Some(0.0), "{fin}");
    let fresh = &fin["harnesses"][0]["visible"];
    assert!(
        (fresh["pass_at_1"].as_f64().unwrap() - 7.0 / 12.0).abs() < 1e-9,
        "{fin}"
    );
    // 3 harness commits at most, 4 trials on 12 tasks each, all journaled as extra trials.
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    let finals = journal.matches("\"set\":\"final/").count();
    assert_eq!(finals, 2 * 4 * 12, "{finals}");

    let base = common::json_file(&run.join("baseline/baseline.json"));
    assert_eq!(base["basis"], "tokens", "the mock names no prices: {base}");
    assert!(base["n"].as_u64().unwrap() >= 2, "{base}");
    assert!((base["seed_pass_at_n"].as_f64().unwrap() - 7.0 / 12.0).abs() < 1e-9);

    let o = common::ahe(&["report", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let o = common::ahe(&["show", run.to_str().unwrap()], &[]);
    let shown = text(&o);
    for (name, doc) in [
        ("report.md", &md),
        ("report.html", &html),
        ("ahe show", &shown),
    ] {
        assert!(doc.contains("covers 0"), "{name}: {doc}");
        assert!(doc.contains("matched budget"), "{name}: {doc}");
        assert!(doc.contains("perfect picker"), "{name}: {doc}");
    }
}
