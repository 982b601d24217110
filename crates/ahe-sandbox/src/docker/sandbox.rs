//! One trial's container: creation, exec, put/get, teardown.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bollard::Docker;

use super::api::{blocking, Api};
use super::exec::{self, ExecRequest};
use super::keeper::Keeper;
use super::lifecycle::{NetnsLease, Removals};
use super::transfer::Transfer;
use super::{files, remove_blocking};
use crate::{dockerfile, CopyOut, ExecOpts, ExecOutput, Result, Sandbox, SandboxError};

mod create;

use create::check_env;
pub(crate) use create::{create, Shared};

/// One trial's container (removed by `destroy`, or when dropped).
/// The keeper a sealed sandbox's transfers see (none).
static NO_KEEPER: std::sync::LazyLock<Keeper> = std::sync::LazyLock::new(Keeper::disabled);

pub struct DockerSandbox {
    docker: Docker,
    id: String,
    name: String,
    image: String,
    workdir: String,
    keeper: Keeper,
    root_user: bool,
    no_bash: AtomicBool,
    /// Set by [`Sandbox::seal`]: the keeper is not used and commands are not guarded.
    sealed: AtomicBool,
    /// Whether the image's `setpriv` can drop the guard's capability (see `can_drop`).
    can_drop: tokio::sync::OnceCell<bool>,
    /// ahe's keeper after the seal (see `keeper_now`).
    own: tokio::sync::OnceCell<Keeper>,
    /// Whether ahe's read-only busybox volume is mounted (see `tools`).
    tools: bool,
    /// Whether ahe checks this container from inside (its engine is remote).
    inside: bool,
    no_tar: AtomicBool,
    destroyed: AtomicBool,
    removals: Arc<Removals>,
    netns: Mutex<Option<NetnsLease>>,
    /// The container's overlay layers on this host (inspected once, on first use).
    layer: tokio::sync::OnceCell<Option<crate::Layer>>,
    /// How the image was had, when the researcher should know (a failed pull...).
    pub(crate) notes: Vec<String>,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("image", &self.image)
            .field("workdir", &self.workdir)
            .finish()
    }
}

impl DockerSandbox {
    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container name (`ahe-<trial>-...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many execs ran through the keeper (the fast path) rather than `docker exec`.
    pub fn fast_execs(&self) -> u64 {
        self.keeper.served() + self.own.get().map_or(0, Keeper::served)
    }

    /// Gives the container up without removing it (its engine was lost; whoever reaches the
    /// engine again removes it): nothing runs through this sandbox afterwards.
    pub fn abandon(&self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            self.keeper.close();
        }
    }

    /// The image id the container runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    fn check_live(&self) -> Result<()> {
        if self.destroyed.load(Ordering::SeqCst) {
            Err(SandboxError::Backend("the sandbox was destroyed".into()))
        } else {
            Ok(())
        }
    }

    /// The Engine API on this container.
    fn api(&self) -> Api<'_> {
        Api {
            docker: &self.docker,
            id: &self.id,
        }
    }

    /// Whether the image's `setpriv` can drop the ptrace guard's capability (asked once).
    async fn can_drop(&self) -> bool {
        *self
            .can_drop
            .get_or_init(|| async {
                let req = ExecRequest {
                    argv: crate::ptrace_guard::probe(),
                    cwd: "/".into(),
                    env: Vec::new(),
                    stdin: None,
                    timeout: Some(std::time::Duration::from_secs(30)),
                    user: None,
                };
                let out = exec::run(&self.docker, &self.id, req).await;
                matches!(out, Ok(o) if o.exit_code == Some(0))
            })
            .await
    }

    /// The keeper commands go through: the agent's before the seal; after it ahe's own (an
    /// exec holding the ptrace guard's capability) where the layer is read on this host, else
    /// none (the in-sandbox checks end every process with a direct exec, this one too).
    async fn keeper_now(&self) -> &Keeper {
        if !self.sealed.load(Ordering::SeqCst) {
            return &self.keeper;
        }
        // Where the checks run inside (a remote engine: the tools volume is mounted; no layer
        // readable here), their hand-over would end ahe's keeper too.
        if self.inside || Sandbox::layer(self).await.is_none() {
            return &NO_KEEPER;
        }
        let start = || Keeper::after_seal(&self.docker, &self.id, &self.workdir, "docker");
        self.own.get_or_init(start).await
    }

    /// The keeper transport for put/get through `keeper`.
    fn transfer<'a>(&'a self, keeper: &'a Keeper) -> Transfer<'a> {
        Transfer {
            keeper,
            docker: &self.docker,
            container: &self.id,
            unavailable: &self.no_tar,
        }
    }

    /// `mkdir -p` inside the container.
    async fn mkdir(&self, path: &str) -> Result<()> {
        let quoted = crate::sh_quote(path);
        let out = self
            .exec(&format!("mkdir -p -- {quoted}"), ExecOpts::default())
            .await?;
        if out.exit_code != Some(0) {
            return Err(SandboxError::Backend(format!(
                "put: mkdir {path}: {}",
                out.stderr.trim()
            )));
        }
        Ok(())
    }

    /// An absolute, normalised sandbox path (relative ones are taken from the workdir).
    fn abs(&self, path: &str) -> String {
        dockerfile::resolve(&self.workdir, path)
    }
}

/// Environment variables as `KEY=value` pairs for an exec (each checked).
pub(crate) fn env_pairs<'a>(
    vars: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<Vec<String>> {
    let mut env = Vec::new();
    for (k, v) in vars {
        check_env(k, v)?;
        env.push(format!("{k}={v}"));
    }
    Ok(env)
}

#[async_trait::async_trait]
impl Sandbox for DockerSandbox {
    async fn exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput> {
        self.check_live()?;
        let cwd = match &opts.cwd {
            Some(c) => self.abs(c),
            None => self.workdir.clone(),
        };
        let env = env_pairs(&opts.env)?;
        let no_bash = self.no_bash.load(Ordering::Relaxed);
        let sealed = self.sealed.load(Ordering::SeqCst);
        let request = |argv: Vec<String>, stdin: Option<Vec<u8>>| ExecRequest {
            argv,
            cwd: cwd.clone(),
            env: env.clone(),
            stdin,
            timeout: opts.timeout,
            user: None,
        };
        let plain = |shell: &str| vec![shell.to_string(), "-c".into(), command.to_string()];
        if !no_bash {
            let req = request(plain("bash"), opts.stdin.clone());
            let keeper = self.keeper_now().await;
            if let Some(r) = keeper.try_exec(&self.docker, &self.id, &req).await {
                return r;
            }
        }
        // Past the keeper, a command before the seal is the agent's: it drops the ptrace
        // guard's capability as the keeper did; after the seal it is ahe's and holds it.
        let guarded = !sealed && self.can_drop().await;
        let argv = |shell: &str| match guarded {
            true => crate::ptrace_guard::setpriv(&plain(shell)),
            false => plain(shell),
        };
        if no_bash {
            return exec::run(&self.docker, &self.id, request(argv("sh"), opts.stdin)).await;
        }
        let r = exec::run(
            &self.docker,
            &self.id,
            request(argv("bash"), opts.stdin.clone()),
        )
        .await;
        let missing = match &r {
            Err(SandboxError::Backend(m)) => m.contains(exec::NOT_FOUND) && m.contains("\"bash\""),
            Ok(o) => o.exit_code == Some(127) && o.stderr == crate::ptrace_guard::missing("bash"),
            _ => false,
        };
        if !missing {
            return r;
        }
        // An image without bash: run commands with sh from now on.
        tracing::warn!("docker: {} has no bash; commands run with sh", self.image);
        self.no_bash.store(true, Ordering::Relaxed);
        exec::run(&self.docker, &self.id, request(argv("sh"), opts.stdin)).await
    }

    async fn exec_argv(&self, argv: &[String], opts: ExecOpts) -> Result<ExecOutput> {
        self.check_live()?;
        let env = env_pairs(&opts.env)?;
        let cwd = opts
            .cwd
            .as_deref()
            .map_or_else(|| "/".into(), |c| self.abs(c));
        let req = ExecRequest {
            argv: argv.to_vec(),
            cwd,
            env,
            stdin: opts.stdin,
            timeout: opts.timeout,
            user: Some("0".into()),
        };
        exec::run(&self.docker, &self.id, req).await
    }

    fn exec_direct(&self) -> bool {
        true
    }

    fn seal(&self) {
        self.sealed.store(true, Ordering::SeqCst);
        self.keeper.close();
    }

    fn tools_dir(&self) -> Option<String> {
        self.tools.then(|| super::tools::MOUNT.to_string())
    }

    async fn put(&self, src: &Path, dest: &str) -> Result<()> {
        self.check_live()?;
        let dest_abs = self.abs(dest);
        let Some(tar) = self.api().put_archive(src, dest, &dest_abs).await? else {
            return self.mkdir(&dest_abs).await;
        };
        // Through the keeper when it can (as root, like the archive API), else the API; ahe's
        // own tools never through the keeper (its shell is the image's).
        let own = dest_abs.starts_with(crate::INSIDE_PREFIX);
        if self.root_user && !own && self.transfer(self.keeper_now().await).put(&tar).await {
            return Ok(());
        }
        self.api().upload("/", tar).await
    }

    async fn get(&self, src: &str, dest: &Path) -> Result<CopyOut> {
        self.check_live()?;
        let src_abs = self.abs(src);
        let own = src_abs.starts_with(crate::INSIDE_PREFIX);
        let fast = if own {
            None
        } else {
            self.transfer(self.keeper_now().await).get(&src_abs).await
        };
        let data = match fast {
            Some(d) => d,
            None => self.api().download(&src_abs).await?,
        };
        let dest = dest.to_path_buf();
        blocking(move || files::unpack(&data, &src_abs, &dest)).await
    }

    async fn image_of_now(&self) -> Result<Option<String>> {
        // A tag: at most 128 of [a-z0-9_.-], from the container's (unique) name.
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        let tag: String = (self.name.to_ascii_lowercase().chars())
            .map(|c| if ok(c) { c } else { '-' })
            .take(120)
            .collect();
        super::snapshot::commit(&self.docker, &self.id, &tag)
            .await
            .map(Some)
    }

    async fn forget_image(&self, image: &str) {
        super::snapshot::remove(&self.docker, image).await
    }

    async fn layer(&self) -> Option<crate::Layer> {
        self.layer
            .get_or_init(|| super::layer::inspect(&self.docker, &self.id))
            .await
            .clone()
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    /// Stops serving execs and hands the container to a background removal (the backend's
    /// `drain` waits for it).
    async fn destroy(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.keeper.close();
        if let Some(k) = self.own.get() {
            k.close();
        }
        let lease = self.netns.lock().unwrap().take();
        self.removals.spawn(self.id.clone(), lease);
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}

impl Drop for DockerSandbox {
    /// Removes the container unless `destroy` did. This blocks (on a helper thread) rather
    /// than spawning a task, so the removal also happens when the runtime is shutting down
    /// (an interrupted run, a panicking trial). Its network holder goes back to the pool after.
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            remove_blocking(&self.docker, vec![self.id.clone()], "dropped container");
        }
    }
}
