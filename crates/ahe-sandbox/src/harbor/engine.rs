//! Commands and copies through the Engine API on the `main` container of Harbor's docker
//! environment (`[sandbox.harbor] exec = "engine"`, the default there): Harbor starts and
//! deletes the environment (its compose project, network mode and limits), and ahe execs in
//! its container as `docker compose exec` would — `bash -c` as the image's user, in the
//! working directory, with the environment's variables under the exec's own — but without a
//! `docker compose` process (≈ 0.2 CPU-s of Go start-up each) per command and per copy.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use bollard::Docker;

use crate::docker::api::{blocking, Api};
use crate::docker::exec::{self, ExecRequest};
use crate::docker::files;
use crate::docker::keeper::{Keeper, EXEC_KEEPER};
use crate::docker::sandbox::env_pairs;
use crate::docker::transfer::Transfer;
use crate::{ptrace_guard, CopyOut, ExecOpts, ExecOutput, Result, SandboxError, SandboxSpec};

/// How the harbor backend runs commands and copies in a `docker` environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HarborExec {
    /// Through the Engine API on the environment's `main` container (when this host reaches
    /// the engine and reads its layer: `host_layer = true`); Harbor's own otherwise.
    #[default]
    Engine,
    /// Every command and copy through Harbor's environment object (`docker compose exec`,
    /// `docker compose cp`), as on environments of other kinds.
    Harbor,
}

/// The containers of compose project `project` on the engine of `DOCKER_HOST` (the one
/// Harbor's docker environment drives), `service` alone when given; `None`: the engine did
/// not answer.
async fn compose_containers(project: &str, service: Option<&str>) -> Option<(Docker, Vec<String>)> {
    use bollard::query_parameters::ListContainersOptionsBuilder;
    let docker = Docker::connect_with_defaults().ok()?;
    let mut labels = vec![format!("com.docker.compose.project={project}")];
    labels.extend(service.map(|s| format!("com.docker.compose.service={s}")));
    let filters = std::collections::HashMap::from([("label".to_string(), labels)]);
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let list = docker.list_containers(Some(opts)).await.ok()?;
    let ids = list.into_iter().filter_map(|c| c.id).collect();
    Some((docker, ids))
}

/// The `main` container of compose project `project`: its engine's client and id.
pub(super) async fn compose_main(project: &str) -> Option<(Docker, String)> {
    let (docker, ids) = compose_containers(project, Some("main")).await?;
    let id = ids.into_iter().next()?;
    Some((docker, id))
}

/// Whether the engine answered that compose project `project` has no container (Harbor's
/// start then has nothing to take down first).
pub(super) async fn project_is_new(project: &str) -> bool {
    compose_containers(project, None)
        .await
        .is_some_and(|(_, ids)| ids.is_empty())
}

/// `bash -c command` in `cwd` with the variables `vars`, as the image's user, no stdin, no
/// time limit (the caller sets those it needs).
fn bash(command: &str, cwd: String, vars: &BTreeMap<String, String>) -> Result<ExecRequest> {
    Ok(ExecRequest {
        argv: vec!["bash".into(), "-c".into(), command.to_string()],
        cwd,
        env: env_pairs(vars)?,
        stdin: None,
        timeout: None,
        user: None,
    })
}

/// One environment's container reached through the engine.
pub(super) struct Engine {
    docker: Docker,
    id: String,
    /// The environment's own variables (Harbor's `persistent_env`), under each exec's.
    env: BTreeMap<String, String>,
    /// Whether it runs a counterfactual copy (an image [`Engine::commit`] made).
    copy: bool,
    /// A bash in the container serving commands over an exec's streams (the docker
    /// backend's fast path: a fork there instead of a `runc exec` per command).
    keeper: Keeper,
    /// Whether the container's user is root (only then do copies go through the keeper,
    /// which runs as that user).
    root_user: bool,
    /// Set once the image turned out to lack `tar` or `base64` for the keeper's copies.
    no_tar: AtomicBool,
    /// Whether Harbor's compose gave the container the ptrace guard's capability.
    cap_added: bool,
    /// The agent's commands past the keeper drop the guard's capabilities (it is on).
    pub(super) guarded: bool,
    /// Set by the sandbox's seal: the agent's keeper is not used any more.
    sealed: AtomicBool,
    /// ahe's keeper after the seal (see `keeper_now`).
    own: tokio::sync::OnceCell<Keeper>,
    /// The keeper's working directory (the image's).
    workdir: String,
}

impl Engine {
    /// The container `id` on `docker`, whose execs get `env` beneath their own.
    pub fn new(docker: Docker, id: String, spec: &SandboxSpec) -> Engine {
        let copy = (spec.docker_image.as_deref())
            .is_some_and(|i| i.starts_with(crate::docker::snapshot::REPO));
        let env = spec.env.clone();
        Engine {
            docker,
            id,
            env,
            copy,
            keeper: Keeper::disabled(),
            root_user: false,
            no_tar: AtomicBool::new(false),
            cap_added: false,
            guarded: false,
            sealed: AtomicBool::new(false),
            own: tokio::sync::OnceCell::new(),
            workdir: "/".into(),
        }
    }

    /// Copies through the keeper (`tar` in the container): a fork there, not the archive
    /// API's re-executed dockerd (ahe's own keeper once sealed); `None` for ahe's own tools
    /// and when the user is not root.
    async fn transfer(&self, path: &str) -> Option<Transfer<'_>> {
        let keeper = self.keeper_now().await;
        (self.root_user && !path.starts_with(crate::INSIDE_PREFIX)).then_some(Transfer {
            keeper,
            docker: &self.docker,
            container: &self.id,
            unavailable: &self.no_tar,
        })
    }

    /// Starts the keeper: [`EXEC_KEEPER`] as an exec of the image's user in `workdir`, its
    /// streams attached (without it every command is a `docker exec`).
    pub async fn start_keeper(&mut self, workdir: &str) {
        self.workdir = workdir.to_string();
        // The agent's shell: without the ptrace guard's capabilities (see `ptrace_guard`).
        let argv = ptrace_guard::dropped(
            &["sh", "-c", EXEC_KEEPER, "ahe-keeper", workdir].map(String::from),
        );
        let started = Keeper::start_exec(&self.docker, &self.id, argv).await;
        let (user, caps) = match self.docker.inspect_container(&self.id, None).await {
            Ok(c) => (
                c.config.and_then(|c| c.user).unwrap_or_default(),
                c.host_config.and_then(|h| h.cap_add).unwrap_or_default(),
            ),
            Err(_) => ("?".into(), Vec::new()),
        };
        let cap = ptrace_guard::CAP;
        self.cap_added = caps
            .iter()
            .any(|c| c == cap || Some(c.as_str()) == cap.strip_prefix("CAP_"));
        self.root_user = matches!(user.split(':').next(), Some("" | "root" | "0"));
        match started {
            Ok(k) => self.keeper = k,
            Err(e) => tracing::warn!("harbor docker: no keeper ({e}); every command is an exec"),
        }
    }

    fn api(&self) -> Api<'_> {
        Api {
            docker: &self.docker,
            id: &self.id,
        }
    }

    /// `bash -c command` in `cwd` (absolute), as Harbor's docker environment runs it.
    pub async fn exec(&self, command: &str, cwd: String, opts: ExecOpts) -> Result<ExecOutput> {
        let mut vars = self.env.clone();
        vars.extend(opts.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut req = bash(command, cwd, &vars)?;
        (req.stdin, req.timeout) = (opts.stdin, opts.timeout);
        self.run(req).await
    }

    /// Runs `req` through the keeper when it can take it (the image's user, no stdin, idle),
    /// else as an exec of its own.
    async fn run(&self, mut req: ExecRequest) -> Result<ExecOutput> {
        let sealed = self.sealed.load(Ordering::SeqCst);
        if req.user.is_none() {
            if let Some(r) = self
                .keeper_now()
                .await
                .try_exec(&self.docker, &self.id, &req)
                .await
            {
                return r;
            }
            if self.guarded && !sealed {
                // The agent's command past its shell drops what the shell dropped.
                req.argv = ptrace_guard::setpriv(&req.argv);
            }
        }
        exec::run(&self.docker, &self.id, req).await
    }

    /// The keeper commands go through: the agent's before the seal, ahe's own after it (an
    /// exec holding the ptrace guard's capability, started at the first command).
    async fn keeper_now(&self) -> &Keeper {
        if !self.sealed.load(Ordering::SeqCst) {
            return &self.keeper;
        }
        let start = || Keeper::after_seal(&self.docker, &self.id, &self.workdir, "harbor docker");
        self.own.get_or_init(start).await
    }

    /// Stops using the keeper and ends it (its input closes: its bash and loop end), so the
    /// hand-over does not wait for it as for a leftover.
    pub fn seal(&self) {
        self.sealed.store(true, Ordering::SeqCst);
        self.keeper.close();
    }

    /// The ptrace guard's mask (see `ptrace_guard`), asked of the keeper (the agent's shell)
    /// before the agent runs, or why it is off.
    pub async fn guard_mask(&self) -> std::result::Result<u64, String> {
        if !self.cap_added {
            return Err(format!(
                "Harbor's compose gave the container no {}",
                ptrace_guard::CAP
            ));
        }
        let req = bash(
            &ptrace_guard::shell_probe_script(),
            "/".into(),
            &BTreeMap::new(),
        )
        .map_err(|e| e.to_string())?;
        let out = match self.keeper.try_exec(&self.docker, &self.id, &req).await {
            Some(r) => r.map_err(|e| e.to_string())?,
            None => return Err("ahe's command shell is not running".into()),
        };
        // What ahe's commands hold: Docker's set with the capability Harbor's compose added.
        let ahe = format!("ahe {:x}\n", ptrace_guard::BIT);
        ptrace_guard::mask_of(&(ahe + &out.stdout))
    }

    /// The commands Harbor's start left to ahe (`then` of its answer: `ensure_dirs`, as the
    /// user it names), in order; the first failure is the start's.
    pub async fn finish_start(&self, then: &serde_json::Value, workdir: &str) -> Result<()> {
        for step in then.as_array().into_iter().flatten() {
            let mut command = step["command"].as_str().unwrap_or("true").to_string();
            if self.copy {
                // A copy of a verified sandbox has the verifier's link at /logs/verifier (to
                // its process's fd, gone): a directory is made there again, as the verifier's
                // own reset would.
                command =
                    format!("{{ [ ! -h /logs/verifier ] || rm -f /logs/verifier; }} && {command}");
            }
            let command = command.as_str();
            let mut req = bash(command, workdir.to_string(), &self.env)?;
            req.timeout = Some(std::time::Duration::from_secs(60));
            req.user = step["user"].as_str().map(str::to_string);
            if self.root_user && matches!(req.user.as_deref(), Some("root" | "0")) {
                req.user = None; // the keeper's user already
            }
            let out = self.run(req).await?;
            if out.exit_code != Some(0) {
                return Err(SandboxError::Backend(format!(
                    "harbor docker: the start's `{command}` failed ({:?}): {}",
                    out.exit_code,
                    out.stderr.trim()
                )));
            }
        }
        Ok(())
    }

    /// `argv` as root in `cwd` without the image's shell (what ahe's own checks run).
    pub async fn exec_argv(
        &self,
        argv: &[String],
        cwd: String,
        opts: ExecOpts,
    ) -> Result<ExecOutput> {
        let req = ExecRequest {
            argv: argv.to_vec(),
            cwd,
            env: env_pairs(&opts.env)?,
            stdin: opts.stdin,
            timeout: opts.timeout,
            user: Some("0".into()),
        };
        exec::run(&self.docker, &self.id, req).await
    }

    /// Copies host `src` to `dest` (`dest_abs` absolute) with `docker cp` semantics.
    pub async fn put(&self, src: &Path, dest: &str, dest_abs: &str) -> Result<()> {
        match self.api().put_archive(src, dest, dest_abs).await? {
            Some(tar) => match self.transfer(dest_abs).await {
                Some(t) if t.put(&tar).await => Ok(()),
                _ => self.api().upload("/", tar).await,
            },
            None => {
                let mkdir = format!("mkdir -p -- {}", crate::sh_quote(dest_abs));
                let out = self.exec(&mkdir, "/".into(), ExecOpts::default()).await?;
                match out.exit_code {
                    Some(0) => Ok(()),
                    _ => Err(SandboxError::Backend(format!(
                        "put: mkdir {dest_abs}: {}",
                        out.stderr.trim()
                    ))),
                }
            }
        }
    }

    /// Copies `src_abs` out of the container to host `dest`.
    pub async fn get(&self, src_abs: &str, dest: &Path) -> Result<CopyOut> {
        let fast = match self.transfer(src_abs).await {
            Some(t) => t.get(src_abs).await,
            None => None,
        };
        let data = match fast {
            Some(d) => d,
            None => self.api().download(src_abs).await?,
        };
        let (src, dest) = (src_abs.to_string(), dest.to_path_buf());
        blocking(move || files::unpack(&data, &src, &dest)).await
    }

    /// The container's file system now as an image (`docker commit`, tagged `tag`), for a
    /// counterfactual copy that Harbor starts from it.
    pub async fn commit(&self, tag: &str) -> Result<String> {
        crate::docker::snapshot::commit(&self.docker, &self.id, tag).await
    }

    /// Removes an image made by [`Engine::commit`].
    pub async fn forget(&self, image: &str) {
        crate::docker::snapshot::remove(&self.docker, image).await
    }

    /// The container's overlay layers on this host.
    pub async fn layer(&self) -> Option<crate::Layer> {
        crate::docker::layer::inspect(&self.docker, &self.id).await
    }
}

/// Whether `cfg` runs commands through the Engine API (a `docker` environment read from this
/// host, `exec = "engine"`).
pub(super) fn wanted(cfg: &super::HarborConfig) -> bool {
    cfg.environment == "docker" && cfg.host_layer && cfg.exec == HarborExec::Engine
}

/// The Engine API on the environment's container where `cfg` asks for it (a `docker`
/// environment read from this host, `exec = "engine"`); the notes say which path runs.
pub(super) async fn engine_of(
    cfg: &super::HarborConfig,
    session: &str,
    spec: &SandboxSpec,
    notes: &mut Vec<String>,
) -> Option<Engine> {
    if !wanted(cfg) {
        return None;
    }
    match compose_main(session).await {
        Some((docker, id)) => {
            notes.push(format!(
                "commands and copies: the Engine API on Harbor's container {} (as `docker \
                 compose exec` runs them; stderr kept apart)",
                &id[..id.len().min(12)]
            ));
            Some(Engine::new(docker, id, spec))
        }
        None => {
            notes.push(
                "commands and copies: through Harbor (its container was not found on the \
                 engine ahe reaches, DOCKER_HOST's)"
                    .into(),
            );
            None
        }
    }
}

/// Finishes a start: what Harbor's start left to ahe (`then`: its `ensure_dirs` command, as
/// the user it names) through `engine`, or through the bridge when the container was not
/// found on the engine ahe reaches (a Docker context other than `DOCKER_HOST`'s).
pub(super) async fn finish(
    engine: Option<&Engine>,
    bridge: &super::bridge::Bridge,
    session: &str,
    then: &serde_json::Value,
    workdir: &str,
) -> Result<()> {
    if let Some(e) = engine {
        return e.finish_start(then, workdir).await;
    }
    for step in then.as_array().into_iter().flatten() {
        let command = step["command"].as_str().unwrap_or("true");
        let req = serde_json::json!({"op": "exec", "session": session, "command": command,
                                     "user": step["user"], "timeout_sec": 60});
        let a = (bridge.call(req).await).map_err(|r| SandboxError::Backend(r.message))?;
        if a["exit_code"] != serde_json::json!(0) {
            return Err(SandboxError::Backend(format!(
                "harbor docker: the start's `{command}` failed: {}",
                a["output"].as_str().unwrap_or_default().trim()
            )));
        }
    }
    Ok(())
}
