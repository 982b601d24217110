//! What each phase of the loop gets from the run: typed inputs built from a [`Run`]'s parts
//! (the phases never see the run itself).

use crate::attribute::AttributeInputs;
use crate::debug::overlap::DebugOverlap;
use crate::debug::DebugInputs;
use crate::evolve::EvolvePhaseInputs;
use crate::final_eval::FinalInputs;
use crate::inputs::run::Run;
use crate::rollout::RolloutInputs;
use ahe_rundir::run_dir::IterationDir;

/// What the rollout of `it` (evaluating `evaluated`) reads; `ahead` are the debuggers that
/// start during it.
pub fn rollout_inputs<'a>(
    run: &'a Run,
    it: &'a IterationDir,
    evaluated: &'a str,
    ahead: Option<&'a DebugOverlap>,
) -> RolloutInputs<'a> {
    RolloutInputs {
        it,
        evaluated,
        k: run.cfg.k,
        split: run.split(),
        dir: &run.dir,
        ahead: ahead.map(|a| (a, run.cfg.evolve.debugger_concurrency)),
    }
}

/// What attribution (and the phases that add evidence to it) read.
pub fn attribute_inputs(run: &Run) -> AttributeInputs<'_> {
    AttributeInputs {
        dir: &run.dir,
        k: run.cfg.k,
        visible: &run.visible,
        policy: &run.cfg.attribution,
    }
}

/// What the debug phase of `it` reads.
pub fn debug_inputs<'a>(run: &'a Run, it: &'a IterationDir) -> DebugInputs<'a> {
    DebugInputs {
        it,
        k: run.cfg.k,
        visible: &run.visible,
        dir: &run.dir,
        evolve: &run.cfg.evolve,
        model: run.cfg.model("debugger"),
        opts: run.client_opts(),
        ledger: run.ledger(),
    }
}

/// What the evolve phase of `it` (which evaluated `evaluated`) reads.
pub fn evolve_inputs<'a>(
    run: &'a Run,
    it: &'a IterationDir,
    evaluated: &'a str,
) -> EvolvePhaseInputs<'a> {
    EvolvePhaseInputs {
        it,
        evaluated,
        dir: &run.dir,
        split: run.split(),
        k: run.cfg.k,
        evolve: &run.cfg.evolve,
        policy: &run.cfg.attribution,
        model: run.cfg.model("evolve"),
    }
}

/// What the final re-evaluation reads.
pub fn final_inputs(run: &Run) -> FinalInputs<'_> {
    FinalInputs {
        dir: &run.dir,
        split: run.split(),
        trials_per_task: run.cfg.evolve.final_trials.unwrap_or(2 * run.cfg.k),
        policy: &run.cfg.attribution,
    }
}
