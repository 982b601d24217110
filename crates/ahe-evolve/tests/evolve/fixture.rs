//! A run's harness repository and one iteration directory, and the real evolve agent
//! (`ahe_evolve::evolve::agent::evolve`) driven by a scripted mock evolve model
//! (`mock:script=FILE`): what the change-chain and rollback tests are built on.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ahe_evolve::commit::rollback::Rollback;
use ahe_evolve::evolve::agent::{self, EvolveOutcome};
use ahe_evolve::evolve::leak::LeakSettings;
use ahe_model::ModelConfig;
use ahe_rundir::IterationDir;
use ahe_runner::repo::caps::WriteCaps;
use ahe_runner::repo::HarnessRepo;

/// The seed's `memory/MEMORY.md`: lines a change can insert above and below.
pub const SEED_MEMORY: &str = "# Notes\n\n- seed note one\n- seed note two\n";

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A temporary run: `harness/` (seeded from `harness-seed/` with [`SEED_MEMORY`]) and
/// `iterations/`.
pub struct Fixture {
    /// Owns the directory.
    pub dir: tempfile::TempDir,
    /// The harness repository.
    pub repo: HarnessRepo,
}

impl Fixture {
    /// A fresh run whose harness is the seed (tagged iter-000).
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("seed");
        ahe_runner::repo::copy_tree(&root().join("harness-seed"), &seed).unwrap();
        std::fs::write(seed.join("memory/MEMORY.md"), SEED_MEMORY).unwrap();
        let repo = HarnessRepo::init(&dir.path().join("harness"), &seed).unwrap();
        Fixture { dir, repo }
    }

    /// `iterations/NNN/` (created).
    pub fn iteration(&self, t: u32) -> IterationDir {
        let it = IterationDir::at(&self.dir.path().join(format!("iterations/{t:03}")));
        it.create().unwrap();
        it
    }

    /// A harness file in the working tree.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.repo.dir().join(rel)).unwrap_or_default()
    }

    /// A harness file as committed in `rev`.
    pub fn read_at(&self, rev: &str, rel: &str) -> Option<String> {
        let out = self.dir.path().join("export");
        let _ = std::fs::remove_dir_all(&out);
        self.repo
            .export(&self.repo.resolve(rev).unwrap(), &out)
            .unwrap();
        std::fs::read_to_string(out.join(rel)).ok()
    }

    /// Files a commit changed relative to its parent.
    pub fn files_of(&self, commit: &str) -> Vec<String> {
        let parent = self.repo.parent_of(commit).unwrap().unwrap();
        self.repo
            .tree_diff_files(
                &self.repo.tree_of(&parent).unwrap(),
                &self.repo.tree_of(commit).unwrap(),
            )
            .unwrap()
    }

    /// Commits reachable from HEAD.
    pub fn history(&self) -> Vec<String> {
        let repo = git2::Repository::open(self.repo.dir()).unwrap();
        let mut w = repo.revwalk().unwrap();
        w.push_head().unwrap();
        w.map(|c| c.unwrap().to_string()).collect()
    }

    /// The tree one `commit_all` of the working tree would commit now (on a copy of the
    /// repository, so this one is untouched).
    pub fn commit_all_tree(&self) -> String {
        let copy = self.dir.path().join("copy");
        let _ = std::fs::remove_dir_all(&copy);
        let st = std::process::Command::new("cp")
            .args(["-a"])
            .arg(self.repo.dir())
            .arg(&copy)
            .status()
            .unwrap();
        assert!(st.success());
        let r = HarnessRepo::open(&copy).unwrap();
        let id = r.commit_all("iter-999: reference", "iter-999").unwrap();
        let tree = r.tree_of(&id).unwrap();
        std::fs::remove_dir_all(&copy).unwrap();
        tree
    }

    /// Runs the real evolve phase of iteration `it` on `evaluated` with the evolve model
    /// answering from `script` (TOML `[[evolve]]` entries).
    pub async fn evolve(
        &self,
        it: &IterationDir,
        evaluated: &str,
        script: &str,
        rollbacks: &[Rollback],
        leak: Option<LeakSettings>,
    ) -> EvolveOutcome {
        self.evolve_with(it, evaluated, script, rollbacks, leak, Vec::new())
            .await
    }

    /// [`Fixture::evolve`] with the earlier changes' history (for the repeat check).
    pub async fn evolve_with(
        &self,
        it: &IterationDir,
        evaluated: &str,
        script: &str,
        rollbacks: &[Rollback],
        leak: Option<LeakSettings>,
        history: Vec<ahe_evolve::evolve::lineage::PastChange>,
    ) -> EvolveOutcome {
        let path = self
            .dir
            .path()
            .join(format!("script-{:03}.toml", it.number()));
        std::fs::write(&path, script).unwrap();
        let cfg = ModelConfig::from_spec(&format!("mock:script={}", path.display())).unwrap();
        let model = ahe_model::build_client(&cfg).unwrap();
        let visible: BTreeSet<String> = ["count-errors", "fix-sum", "hello-file"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        agent::evolve(agent::EvolveInputs {
            iteration: it.number(),
            iter_dir: it,
            repo: &self.repo,
            evaluated,
            visible: &visible,
            rollbacks,
            prompt: minijinja::context! { iteration => it.number() },
            model,
            max_turns: 30,
            timeout: Duration::from_secs(60),
            show_verifier_output: false,
            caps: WriteCaps {
                max_file_bytes: 1 << 20,
                max_total_bytes: 1 << 22,
            },
            leak,
            history,
            out: None,
        })
        .await
        .unwrap()
    }

    /// The tool answers of iteration `it`'s evolve trace (errors included).
    pub fn tool_answers(&self, it: &IterationDir) -> String {
        std::fs::read_to_string(it.evolve_trace()).unwrap()
    }
}

/// The leak guard (reject) over the smoke benchmark's tasks.
pub fn leak_guard() -> LeakSettings {
    let (tasks, _) = ahe_bench::load_benchmark(&root().join("benchmarks/smoke")).unwrap();
    LeakSettings::build(
        ahe_rundir::leak::LeakPolicy::Reject,
        &tasks,
        &BTreeSet::new(),
    )
    .unwrap()
}

/// A `commit_change` script entry for change `id` of `files` (memory component).
pub fn commit_change(id: &str, files: &[&str], fixes: &[&str], risks: &[&str]) -> String {
    let list = |v: &[&str]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "[[evolve]]\ntool = \"commit_change\"\nargs = {{ id = \"{id}\", type = \"new\", \
         description = \"change {id}\", files = [{}], predicted_fixes = [{}], risk_tasks = [{}], \
         component = \"memory\" }}\n\n",
        list(files),
        list(fixes),
        list(risks)
    )
}

/// A `write_file` script entry.
pub fn write(rel: &str, content: &str) -> String {
    format!(
        "[[evolve]]\ntool = \"write_file\"\nargs = {{ path = \"harness/{rel}\", content = {content:?} }}\n\n"
    )
}

/// A `submit_manifest` entry without changes (everything was committed).
pub const SUBMIT: &str = "[[evolve]]\ntool = \"submit_manifest\"\nargs = {}\n\n";
