//! Attribution (docs/attribution.md) as functions over a run's records: flips, per-change verdicts,
//! file-matched regressions, prediction quality against the counterfactual truth, the
//! statistical layer, and when a flip within noise is decided. The phases that run extra
//! trials (confirm, counterfactual, canary) live in `ahe-evolve` and call these.

pub mod attribute;
pub mod confirm;
pub mod stats;
