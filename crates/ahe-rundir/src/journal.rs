//! `journal.jsonl`: append-only record of phases and finished trials; resume reads it.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// A phase of one iteration (Algorithm 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Run the harness on the tasks.
    Rollout,
    /// Canonical traces.
    Clean,
    /// Verdicts, rollback, best.
    Attribute,
    /// The new harness's canary set, rolled out before the full rollout (canary = true).
    Canary,
    /// Extra trials of flips within noise.
    Confirm,
    /// Regressed (or disputed fixed) tasks re-run with one change reverted.
    Counterfactual,
    /// Failure analysis.
    Debug,
    /// Harness edits + manifest.
    Evolve,
    /// Git commit and tag.
    Commit,
    /// best, seed and runner-up re-run on fresh trials after the last iteration.
    Final,
    /// The matched-budget baseline (`[evolve] baseline = true`).
    Baseline,
}

impl Phase {
    /// snake_case name (as in the journal and the reports).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Rollout => "rollout",
            Phase::Clean => "clean",
            Phase::Attribute => "attribute",
            Phase::Canary => "canary",
            Phase::Confirm => "confirm",
            Phase::Counterfactual => "counterfactual",
            Phase::Debug => "debug",
            Phase::Evolve => "evolve",
            Phase::Commit => "commit",
            Phase::Final => "final",
            Phase::Baseline => "baseline",
        }
    }
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Entry {
    /// A phase started.
    PhaseStart {
        /// Iteration.
        iter: u32,
        /// Phase.
        phase: Phase,
        /// Time (RFC 3339).
        ts: String,
    },
    /// A phase finished; its outputs are on disk.
    PhaseEnd {
        /// Iteration.
        iter: u32,
        /// Phase.
        phase: Phase,
        /// Time (RFC 3339).
        ts: String,
        /// Wall time of the phase.
        secs: f64,
    },
    /// A trial finished and its `result.json` is written.
    TrialDone {
        /// Iteration.
        iter: u32,
        /// Task.
        task: String,
        /// Attempt (1-based).
        attempt: u32,
        /// Status.
        status: String,
    },
    /// A trial beyond the rollout's (canary, confirmation or counterfactual) finished.
    ExtraTrialDone {
        /// Iteration.
        iter: u32,
        /// The trial set (`canary`, `confirm`, `counterfactual/<change>`...).
        set: String,
        /// Task.
        task: String,
        /// Attempt (1-based, within the set).
        attempt: u32,
        /// Status.
        status: String,
    },
    /// Something the researcher should know (reverted edits, budget stop...).
    Note {
        /// Iteration.
        iter: u32,
        /// Text.
        message: String,
    },
    /// The run finished.
    RunEnd {
        /// Time (RFC 3339).
        ts: String,
        /// Why it ended (completed, budget...).
        reason: String,
    },
}

/// Appender and reader of a run's journal.
pub struct Journal {
    path: PathBuf,
    file: Mutex<File>,
    entries: Mutex<Vec<Entry>>,
}

/// Now, RFC 3339 with milliseconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Journal {
    /// Opens (creating) a journal and reads what it already holds. A torn last line
    /// (crash mid-write) is ignored.
    pub fn open(path: &Path) -> anyhow::Result<Journal> {
        let entries = Journal::read(path);
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        // A crash mid-write leaves a torn last line: end it so the next entry stays whole.
        let text = std::fs::read(path)?;
        if text.last().is_some_and(|b| *b != b'\n') {
            file.write_all(b"\n")?;
        }
        Ok(Journal {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            entries: Mutex::new(entries),
        })
    }

    /// Reads the entries of a journal file (missing file = none).
    pub fn read(path: &Path) -> Vec<Entry> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry as a single write of one line, then syncs it to disk.
    pub fn append(&self, e: Entry) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(&e)?;
        line.push('\n');
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
        Ok(())
    }

    /// A copy of all entries.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a phase of an iteration has finished.
    pub fn phase_done(&self, iter: u32, phase: Phase) -> bool {
        self.entries().iter().any(
            |e| matches!(e, Entry::PhaseEnd { iter: i, phase: p, .. } if *i == iter && *p == phase),
        )
    }

    /// The (task, attempt) pairs of an iteration whose trials finished.
    pub fn trials_done(&self, iter: u32) -> BTreeSet<(String, u32)> {
        self.entries()
            .iter()
            .filter_map(|e| match e {
                Entry::TrialDone {
                    iter: i,
                    task,
                    attempt,
                    ..
                } if *i == iter => Some((task.clone(), *attempt)),
                _ => None,
            })
            .collect()
    }

    /// The (task, attempt) pairs of one extra trial set of an iteration that finished.
    pub fn extra_trials_done(&self, iter: u32, set: &str) -> BTreeSet<(String, u32)> {
        self.entries()
            .iter()
            .filter_map(|e| match e {
                Entry::ExtraTrialDone {
                    iter: i,
                    set: s,
                    task,
                    attempt,
                    ..
                } if *i == iter && s == set => Some((task.clone(), *attempt)),
                _ => None,
            })
            .collect()
    }

    /// Whether the run already ended.
    pub fn ended(&self) -> bool {
        self.entries()
            .iter()
            .any(|e| matches!(e, Entry::RunEnd { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_survive_reopen_and_torn_lines_are_ignored() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("journal.jsonl");
        let j = Journal::open(&p).unwrap();
        j.append(Entry::PhaseStart {
            iter: 1,
            phase: Phase::Rollout,
            ts: now(),
        })
        .unwrap();
        j.append(Entry::TrialDone {
            iter: 1,
            task: "a".into(),
            attempt: 2,
            status: "pass".into(),
        })
        .unwrap();
        j.append(Entry::PhaseEnd {
            iter: 1,
            phase: Phase::Rollout,
            ts: now(),
            secs: 1.0,
        })
        .unwrap();
        drop(j);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"ev\":\"trial_done\",\"iter\":1,\"ta")
            .unwrap();
        let j = Journal::open(&p).unwrap();
        j.append(Entry::Note {
            iter: 1,
            message: "after the tear".into(),
        })
        .unwrap();
        let j = Journal::open(&p).unwrap();
        assert!(j.phase_done(1, Phase::Rollout));
        assert!(!j.phase_done(1, Phase::Clean));
        assert!(!j.phase_done(2, Phase::Rollout));
        assert_eq!(j.trials_done(1), [("a".to_string(), 2)].into());
        assert_eq!(j.entries().len(), 4);
    }
}
