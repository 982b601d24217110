//! Evolve: the evolve agent edits the harness inside a jail, records each logical change
//! (`commit_change`) and submits a change manifest; the orchestrator then enforces the edit
//! boundary and validates the harness.

mod changes;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahe_bench::TrialDir;
use ahe_harness::TraceWriter;
use ahe_model::{ModelClient, Role, ToolSpec};
use minijinja::context;
use serde_json::Value;

use crate::commit::rollback::Rollback;
use crate::debug::host_agent::{arg_str, run_host_agent, schema, HostLimits, HostTool, ToolReply};
use crate::debug::text;
use crate::evolve::jail::{any, Jail};
use crate::evolve::leak::Guard;
use ahe_rundir::manifest::{is_editable, Manifest};
use ahe_rundir::run_dir::analysis::Proposed;
use ahe_rundir::run_dir::IterationDir;
use ahe_rundir::snapshots::{ChangeSnapshot, ChangeSnapshots};
use ahe_runner::repo::caps::WriteCaps;
use ahe_runner::repo::HarnessRepo;

const SYSTEM: &str = include_str!("../../templates/evolve_system.md");
const USER: &str = include_str!("../../templates/evolve_user.md");
/// The concise harness-format guide the evolve agent gets (component observability); a
/// template of the write caps `max_file_bytes` and `max_harness_bytes`.
pub const GUIDE: &str = include_str!("../../templates/harness_guide.md");

/// Everything the evolve phase needs.
#[derive(Clone)]
pub struct EvolveInputs<'a> {
    /// Iteration number (the manifest's `iteration`).
    pub iteration: u32,
    /// `iterations/NNN/`.
    pub iter_dir: &'a IterationDir,
    /// The run's harness repository.
    pub repo: &'a HarnessRepo,
    /// Commit that was evaluated this iteration.
    pub evaluated: &'a str,
    /// Visible (not held-out) task names.
    pub visible: &'a BTreeSet<String>,
    /// Rollbacks already applied to the working tree (recorded first in the manifest, each
    /// its own commit).
    pub rollbacks: &'a [Rollback],
    /// Template variables of the user prompt (pass@1, history, change summary, overview...).
    pub prompt: minijinja::Value,
    /// Evolve model.
    pub model: ModelClient,
    /// Turn limit.
    pub max_turns: u32,
    /// Wall-time limit.
    pub timeout: Duration,
    /// Whether verifier output may be read.
    pub show_verifier_output: bool,
    /// Size caps of harness writes (`[evolve] max_file_bytes`, `max_harness_bytes`).
    pub caps: WriteCaps,
    /// The leak guard (`None` = `leak_guard = "off"`).
    pub leak: Option<crate::evolve::leak::LeakSettings>,
    /// Earlier changes with their fates: a change repeating a reverted or refused one must
    /// say why (`lineage::repeat_problem`).
    pub history: Vec<crate::evolve::lineage::PastChange>,
    /// Where the agent's own files go (trace, log, manifest, snapshots, proposals); None:
    /// the iteration's `evolve/` (a variant writes into `evolve/variants/v<i>/`).
    pub out: Option<PathBuf>,
}

/// What the evolve phase produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvolveOutcome {
    /// The manifest written to `evolve/manifest.json` (rollbacks + the agent's changes).
    pub manifest: Manifest,
    /// Files changed in the working tree relative to the evaluated commit.
    pub changed_files: Vec<String>,
    /// What the orchestrator reverted and why.
    pub notes: Vec<String>,
    /// Evolve tokens.
    pub usage: ahe_model::Usage,
    /// Evolve cost.
    pub cost_usd: f64,
}

/// Builds the evolve agent's jail over an iteration (harness writes capped by `caps`).
pub fn build_jail(
    iter_dir: &IterationDir,
    harness: &Path,
    visible: &BTreeSet<String>,
    show_verifier: bool,
    caps: WriteCaps,
) -> anyhow::Result<Jail> {
    let vis = visible.clone();
    let traces_allow = Box::new(move |rel: &str| {
        let parts: Vec<&str> = rel.split('/').collect();
        vis.contains(parts[0])
            && match parts.len() {
                1 | 2 => true,
                3 => {
                    [TrialDir::CLEAN_FILE, TrialDir::RESULT_FILE].contains(&parts[2])
                        || (show_verifier && parts[2] == "verifier")
                }
                _ => show_verifier && parts[2] == "verifier",
            }
    });
    Jail::new()
        .root(
            "harness",
            harness,
            true,
            Box::new(|rel: &str| is_editable(rel)),
        )?
        .caps(caps)
        .root("analysis", &iter_dir.analysis(), false, any())?
        .root("inputs", &iter_dir.evolve_inputs(), false, any())?
        .root("traces", &iter_dir.trials(), false, traces_allow)
}

struct Tools {
    jail: Jail,
    manifest: Mutex<Option<Manifest>>,
    iteration: u32,
    visible: BTreeSet<String>,
    guard: Option<Guard>,
    /// Submissions the leak guard refused.
    refused: std::sync::atomic::AtomicU32,
    /// The harness working tree (what `commit_change` snapshots).
    harness: PathBuf,
    /// Tree the agent started from (the evaluated harness after the automatic rollbacks).
    start: String,
    /// Change ids the manifest already holds (the automatic rollbacks).
    reserved: BTreeSet<String>,
    /// The `commit_change` calls, in order.
    recorded: Mutex<Vec<changes::Recorded>>,
    /// Earlier changes with their fates (for the repeat check).
    past: Vec<crate::evolve::lineage::PastChange>,
}

struct ListFiles(Arc<Tools>);
struct ReadFile(Arc<Tools>);
struct WriteFile(Arc<Tools>);
struct EditFile(Arc<Tools>);
struct DeleteFile(Arc<Tools>);

fn spec(name: &str, props: &[(&str, &str)], optional: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: text::describe("evolve", name),
        input_schema: schema(props, optional),
    }
}

/// The evolve tool `tool`'s answer `key` (from `templates/tools.toml`).
fn say(tool: &str, key: &str, ctx: minijinja::Value) -> String {
    text::say("evolve", tool, key, ctx)
}

#[async_trait::async_trait]
impl HostTool for ListFiles {
    fn spec(&self) -> ToolSpec {
        spec("list_files", &[("path", "string")], &["path"])
    }
    async fn call(&self, a: &Value) -> ToolReply {
        match self
            .0
            .jail
            .list(a.get("path").and_then(Value::as_str).unwrap_or(""))
        {
            Ok(v) => ToolReply::Text(v.join("\n")),
            Err(e) => ToolReply::Error(e),
        }
    }
}

#[async_trait::async_trait]
impl HostTool for ReadFile {
    fn spec(&self) -> ToolSpec {
        spec(
            "read_file",
            &[
                ("path", "string"),
                ("start_line", "integer"),
                ("end_line", "integer"),
            ],
            &["start_line", "end_line"],
        )
    }
    async fn call(&self, a: &Value) -> ToolReply {
        let text = match arg_str(a, "path").and_then(|p| self.0.jail.read(p)) {
            Ok(t) => t,
            Err(e) => return ToolReply::Error(e),
        };
        let s = a
            .get("start_line")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let e = a
            .get("end_line")
            .and_then(Value::as_u64)
            .map(|x| x as usize)
            .unwrap_or(usize::MAX);
        let lines: Vec<&str> = text
            .lines()
            .skip(s - 1)
            .take(e.saturating_sub(s - 1))
            .collect();
        let out = lines.join("\n");
        let (out, _) = ahe_harness::tools::truncate_middle(&out, 40_000);
        ToolReply::Text(out)
    }
}

#[async_trait::async_trait]
impl HostTool for WriteFile {
    fn spec(&self) -> ToolSpec {
        spec(
            "write_file",
            &[("path", "string"), ("content", "string")],
            &[],
        )
    }
    async fn call(&self, a: &Value) -> ToolReply {
        match (arg_str(a, "path"), arg_str(a, "content")) {
            (Ok(p), Ok(c)) => match self.0.jail.write(p, c) {
                Ok(()) => ToolReply::Text(say(
                    "write_file",
                    "wrote",
                    context! { bytes => c.len(), path => p },
                )),
                Err(e) => ToolReply::Error(e),
            },
            (Err(e), _) | (_, Err(e)) => ToolReply::Error(e),
        }
    }
}

#[async_trait::async_trait]
impl HostTool for EditFile {
    fn spec(&self) -> ToolSpec {
        spec(
            "edit_file",
            &[
                ("path", "string"),
                ("old_text", "string"),
                ("new_text", "string"),
            ],
            &[],
        )
    }
    async fn call(&self, a: &Value) -> ToolReply {
        let (p, old, new) = match (
            arg_str(a, "path"),
            arg_str(a, "old_text"),
            arg_str(a, "new_text"),
        ) {
            (Ok(p), Ok(o), Ok(n)) => (p, o, n),
            _ => return ToolReply::Error(say("edit_file", "missing_args", context! {})),
        };
        let text = match self.0.jail.read(p) {
            Ok(t) => t,
            Err(e) => return ToolReply::Error(e),
        };
        match text.matches(old).count() {
            0 => ToolReply::Error(say("edit_file", "not_found", context! { path => p })),
            1 => match self.0.jail.write(p, &text.replacen(old, new, 1)) {
                Ok(()) => ToolReply::Text(say("edit_file", "edited", context! { path => p })),
                Err(e) => ToolReply::Error(e),
            },
            n => ToolReply::Error(say(
                "edit_file",
                "ambiguous",
                context! { n => n, path => p },
            )),
        }
    }
}

#[async_trait::async_trait]
impl HostTool for DeleteFile {
    fn spec(&self) -> ToolSpec {
        spec("delete_file", &[("path", "string")], &[])
    }
    async fn call(&self, a: &Value) -> ToolReply {
        match arg_str(a, "path").and_then(|p| self.0.jail.remove(p)) {
            Ok(()) => ToolReply::Text(say("delete_file", "deleted", context! {})),
            Err(e) => ToolReply::Error(e),
        }
    }
}

/// The evolve agent's shared tool state: the jail, the leak guard, the reserved ids of
/// the automatic rollbacks, the tree the agent starts from.
fn build_tools(
    inp: &EvolveInputs<'_>,
    rollbacks: &[ahe_rundir::manifest::Change],
) -> anyhow::Result<Arc<Tools>> {
    Ok(Arc::new(Tools {
        jail: build_jail(
            inp.iter_dir,
            inp.repo.dir(),
            inp.visible,
            inp.show_verifier_output,
            inp.caps,
        )?,
        manifest: Mutex::new(None),
        iteration: inp.iteration,
        visible: inp.visible.clone(),
        guard: inp.leak.clone().map(|l| {
            let files: Vec<String> = rollbacks.iter().flat_map(|c| c.files.clone()).collect();
            Guard::new(l, inp.repo.dir(), inp.evaluated, &files)
        }),
        refused: 0.into(),
        harness: inp.repo.dir().to_path_buf(),
        start: match inp.rollbacks.last() {
            Some(r) => r.tree.clone(),
            None => inp.repo.tree_of(inp.evaluated)?,
        },
        reserved: rollbacks.iter().map(|c| c.id.clone()).collect(),
        recorded: Mutex::new(Vec::new()),
        past: inp.history.clone(),
    }))
}

/// Renders the evolve agent's prompts and runs it with its tools (trace in `evolve/`).
async fn run_agent(
    inp: &EvolveInputs<'_>,
    tools: &Arc<Tools>,
    evolve_dir: &Path,
) -> anyhow::Result<crate::debug::host_agent::HostOutcome> {
    let host_tools: Vec<Box<dyn HostTool>> = vec![
        Box::new(ListFiles(tools.clone())),
        Box::new(ReadFile(tools.clone())),
        Box::new(WriteFile(tools.clone())),
        Box::new(EditFile(tools.clone())),
        Box::new(DeleteFile(tools.clone())),
        Box::new(changes::CommitChange(tools.clone())),
        Box::new(changes::Submit(tools.clone())),
    ];
    let env = ahe_harness::text::env();
    let guide = env.render_str(
        GUIDE,
        context! { max_file_bytes => inp.caps.max_file_bytes, max_harness_bytes => inp.caps.max_total_bytes },
    )?;
    let system = env.render_str(SYSTEM, context! { guide => guide })?;
    let user = env.render_str(USER, inp.prompt.clone())?;
    let (trace, log) = ahe_bench::layout::trace_files(evolve_dir);
    let tw = TraceWriter::open(&trace, &log)?;
    let limits = HostLimits {
        max_turns: inp.max_turns,
        last_turn_note: None,
        timeout: inp.timeout,
    };
    Ok(run_host_agent(
        &inp.model,
        Role::Evolve,
        &system,
        &user,
        &host_tools,
        limits,
        &tw,
    )
    .await)
}

/// An agent that stopped without `submit_manifest` keeps the changes it committed
/// (`commit_change`); edits after the last one may be half done and are reverted.
fn salvage_committed(
    inp: &EvolveInputs<'_>,
    recorded: &[changes::Recorded],
    error: Option<&str>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<Manifest>> {
    let Some(last) = recorded.last() else {
        return Ok(None);
    };
    // Edits after the last commit_change may be half done: they go.
    let after = inp
        .repo
        .tree_diff_files(&last.tree, &inp.repo.snapshot_worktree()?)?;
    inp.repo.restore_files(&last.tree, &after)?;
    notes.push(format!(
        "the evolve agent stopped without submit_manifest ({}); its {} committed change(s) \
         are kept{}",
        error.unwrap_or("it stopped"),
        recorded.len(),
        if after.is_empty() {
            String::new()
        } else {
            format!(", its later edits reverted: {}", after.join(", "))
        }
    ));
    Ok(Some(Manifest {
        iteration: inp.iteration,
        changes: changes::merge(recorded, Vec::new()),
        leak_guard: None,
    }))
}

/// Where `evolve/<name of path>` goes for this agent (`inp.out`, else `evolve/` itself).
fn agent_file(inp: &EvolveInputs<'_>, path: PathBuf) -> PathBuf {
    match (&inp.out, path.file_name()) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => path,
    }
}

/// Writes `evolve/snapshots.json` and `evolve/manifest.json` (into `inp.out` when set) — on
/// every run of the phase, so a resumed one replaces a killed one's.
fn write_records(
    inp: &EvolveInputs<'_>,
    recorded: &[changes::Recorded],
    manifest: &Manifest,
) -> anyhow::Result<()> {
    let snapshot = |r: &changes::Recorded| ChangeSnapshot {
        id: r.change.id.clone(),
        tree: r.tree.clone(),
    };
    let snapshots = ChangeSnapshots {
        rollbacks: inp
            .rollbacks
            .iter()
            .map(|r| ChangeSnapshot {
                id: r.change.id.clone(),
                tree: r.tree.clone(),
            })
            .collect(),
        agent: recorded.iter().map(snapshot).collect(),
    };
    let it = inp.iter_dir;
    ahe_rundir::write_json(&agent_file(inp, it.change_snapshots_path()), &snapshots)?;
    ahe_rundir::write_json(&agent_file(inp, it.manifest_path()), manifest)
}

/// The note naming agent edits that neither the manifest nor a `commit_change` names.
fn unlisted_note(
    m: &Manifest,
    recorded: &[changes::Recorded],
    agent_edits: &[String],
) -> Option<String> {
    let committed = recorded.iter().flat_map(|r| &r.files);
    let listed: BTreeSet<&String> = m
        .changes
        .iter()
        .flat_map(|c| &c.files)
        .chain(committed)
        .collect();
    let unlisted: Vec<&String> = agent_edits.iter().filter(|f| !listed.contains(f)).collect();
    (!unlisted.is_empty()).then(|| {
        format!(
            "edited but named by no change: {}",
            unlisted
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Runs the evolve agent and enforces the edit boundary; writes `evolve/manifest.json`.
pub async fn evolve(inp: EvolveInputs<'_>) -> anyhow::Result<EvolveOutcome> {
    let evolve_dir = inp.out.clone().unwrap_or_else(|| inp.iter_dir.evolve());
    std::fs::create_dir_all(&evolve_dir)?;
    let rollbacks: Vec<ahe_rundir::manifest::Change> =
        inp.rollbacks.iter().map(|r| r.change.clone()).collect();
    let tools = build_tools(&inp, &rollbacks)?;
    let out = run_agent(&inp, &tools, &evolve_dir).await?;
    // Whatever wrote the files: no git metadata, nothing over the caps.
    let mut notes = inp.repo.guard(inp.evaluated, &inp.caps)?;
    let mut submitted = tools
        .manifest
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let recorded = std::mem::take(&mut *tools.recorded.lock().unwrap_or_else(|p| p.into_inner()));
    if submitted.is_none() {
        if let Some(m) = salvage_committed(&inp, &recorded, out.error.as_deref(), &mut notes)? {
            submitted = Some(m);
        }
    }
    let mut proposed = Proposed {
        changes: submitted
            .as_ref()
            .map(|m| m.changes.clone())
            .unwrap_or_default(),
        validation_refused: Vec::new(),
    };
    let agent_edits = agent_edits(&inp, &rollbacks, &mut notes)?;
    let leak_guard = match (&tools.guard, submitted.as_mut()) {
        (Some(g), Some(m)) => g.finish(m, tools.refused.load(Ordering::Relaxed), &mut notes)?,
        _ => None,
    };
    let reverted = leak_guard.iter().flat_map(|r| &r.reverted);
    let reverted: BTreeSet<&String> = reverted.collect();
    let agent_edits: Vec<String> = agent_edits
        .into_iter()
        .filter(|f| !reverted.contains(f))
        .collect();
    let mut keep = submitted.is_some();
    if submitted.is_none() && !agent_edits.is_empty() {
        notes.push(format!(
            "the evolve agent edited {} but submitted no manifest ({}); its edits were reverted",
            agent_edits.join(", "),
            out.error
                .as_deref()
                .unwrap_or("it stopped without submit_manifest")
        ));
    }
    if keep {
        if let Some(list) = validation_problems(&inp, &mut notes) {
            proposed.validation_refused = list;
            keep = false;
        }
    }
    if !keep && !agent_edits.is_empty() {
        inp.repo.restore_files(inp.evaluated, &agent_edits)?;
    }
    let mut changes = rollbacks;
    if keep {
        if let Some(m) = submitted {
            notes.extend(unlisted_note(&m, &recorded, &agent_edits));
            changes.extend(m.changes);
        }
    }
    let manifest = Manifest {
        iteration: inp.iteration,
        changes,
        leak_guard,
    };
    write_records(&inp, &recorded, &manifest)?;
    ahe_rundir::write_json(&agent_file(&inp, inp.iter_dir.proposed_path()), &proposed)?;
    Ok(EvolveOutcome {
        manifest,
        changed_files: inp.repo.changed_files(inp.evaluated)?,
        notes,
        usage: out.usage,
        cost_usd: out.cost_usd,
    })
}

/// The files the agent edited (rollbacks' files aside), after reverting any edit outside the
/// component paths (defence in depth: the jail already refuses those), with a note.
fn agent_edits(
    inp: &EvolveInputs,
    rollbacks: &[ahe_rundir::manifest::Change],
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<String>> {
    let rollback_files: BTreeSet<&String> = rollbacks.iter().flat_map(|c| &c.files).collect();
    let changed = inp.repo.changed_files(inp.evaluated)?;
    let outside: Vec<String> = changed
        .iter()
        .filter(|f| !is_editable(f))
        .cloned()
        .collect();
    if !outside.is_empty() {
        inp.repo.restore_files(inp.evaluated, &outside)?;
        notes.push(format!(
            "reverted edits outside the component paths: {}",
            outside.join(", ")
        ));
    }
    Ok(changed
        .into_iter()
        .filter(|f| is_editable(f) && !rollback_files.contains(f))
        .collect())
}

/// The problems of the edited harness when it does not validate (noted: its edits are
/// reverted); None when it does.
fn validation_problems(inp: &EvolveInputs, notes: &mut Vec<String>) -> Option<Vec<String>> {
    let Err(problems) = ahe_harness::load(inp.repo.dir()) else {
        return None;
    };
    let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    notes.push(format!(
        "the edited harness does not validate, edits reverted:\n  {}",
        list.join("\n  ")
    ));
    Some(list)
}

#[cfg(test)]
mod jail_tests;
