//! A sandbox on one host of a pool: the host's container, whose every call fails at once
//! (with the reason) once the host is lost, and which tells the trial so.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use super::host::{Generation, Host, Lease, Slot};
use crate::docker::DockerSandbox;
use crate::{
    CopyOut, ExecOpts, ExecOutput, LeftoverPolicy, Result, Sandbox, SandboxError, SandboxSpec,
};

/// One trial's container on a pool host.
pub(crate) struct PoolSandbox {
    inner: DockerSandbox,
    host: Arc<Host>,
    /// The engine's client (for the ping after a failed call).
    docker: bollard::Docker,
    gen: Arc<Generation>,
    notes: Vec<String>,
    _slot: Slot,
}

impl PoolSandbox {
    /// Wraps a container created under `lease`; `notes` say where else it was tried.
    pub(crate) fn new(inner: DockerSandbox, lease: Lease, notes: Vec<String>) -> PoolSandbox {
        PoolSandbox {
            inner,
            host: lease.host,
            docker: lease.backend.docker().clone(),
            gen: lease.gen,
            notes,
            _slot: lease.slot,
        }
    }

    /// The error every call returns once the host is lost.
    fn lost_error(&self, why: &str) -> SandboxError {
        SandboxError::Backend(format!(
            "{why}; the sandbox is lost (its trial is re-run on another host)"
        ))
    }

    /// Runs one engine call, unless the host is lost (before or during it); a failed call
    /// checks whether the host still answers.
    async fn guarded<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        if let Some(why) = self.gen.reason() {
            return Err(self.lost_error(&why));
        }
        let r = tokio::select! {
            biased;
            why = self.gen.wait() => return Err(self.lost_error(&why)),
            r = call => r,
        };
        match r {
            Err(e) if self.host.lost_after(&self.gen, &self.docker, &e).await => {
                let why = self.gen.reason().unwrap_or_else(|| e.to_string());
                Err(self.lost_error(&why))
            }
            r => r,
        }
    }
}

#[async_trait::async_trait]
impl Sandbox for PoolSandbox {
    async fn exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput> {
        self.guarded(self.inner.exec(command, opts)).await
    }

    async fn exec_argv(&self, argv: &[String], opts: ExecOpts) -> Result<ExecOutput> {
        self.guarded(self.inner.exec_argv(argv, opts)).await
    }

    fn exec_direct(&self) -> bool {
        self.inner.exec_direct()
    }

    async fn put(&self, src: &Path, dest: &str) -> Result<()> {
        self.guarded(self.inner.put(src, dest)).await
    }

    async fn get(&self, src: &str, dest: &Path) -> Result<CopyOut> {
        self.guarded(self.inner.get(src, dest)).await
    }

    fn workdir(&self) -> &str {
        self.inner.workdir()
    }

    fn handover_command(&self, policy: LeftoverPolicy, start_secs: u32) -> Option<String> {
        self.inner.handover_command(policy, start_secs)
    }

    fn path_writable(&self) -> bool {
        self.inner.path_writable()
    }

    fn seal(&self) {
        self.inner.seal()
    }

    fn tools_dir(&self) -> Option<String> {
        self.inner.tools_dir()
    }

    async fn image_of_now(&self) -> Result<Option<String>> {
        self.guarded(self.inner.image_of_now()).await
    }

    async fn forget_image(&self, image: &str) {
        if self.gen.reason().is_none() {
            self.inner.forget_image(image).await
        }
    }

    /// On this sandbox's host (the image of [`Sandbox::image_of_now`] is there only).
    async fn create_beside(&self, spec: &SandboxSpec) -> Option<Result<Box<dyn Sandbox>>> {
        let Some(backend) = self.host.backend() else {
            return Some(Err(self.lost_error("the host is down")));
        };
        let created = self.guarded(backend.create_docker(spec)).await;
        Some(created.map(|sb| Box::new(sb) as Box<dyn Sandbox>))
    }

    async fn layer(&self) -> Option<crate::Layer> {
        if self.host.remote() {
            return None;
        }
        self.inner.layer().await
    }

    /// A lost sandbox is left alone: its container goes when the host answers again.
    async fn destroy(&self) -> Result<()> {
        if self.gen.reason().is_some() {
            self.inner.abandon();
            return Ok(());
        }
        self.inner.destroy().await
    }

    fn notes(&self) -> Vec<String> {
        let mut n = self.notes.clone();
        n.extend(self.inner.notes());
        n
    }

    fn host(&self) -> Option<String> {
        Some(self.host.name().to_string())
    }

    fn lost(&self) -> Option<String> {
        self.gen.reason()
    }

    async fn wait_lost(&self) -> String {
        self.gen.wait().await
    }
}

impl Drop for PoolSandbox {
    /// A sandbox dropped after its host was lost is not removed through the dead engine.
    fn drop(&mut self) {
        if self.gen.reason().is_some() {
            self.inner.abandon();
        }
    }
}
