//! `ahe check` of `[sandbox] backend = "harbor"`.

use ahe_runner::config::RunConfig;

use super::Acc;

/// `backend = "harbor"`: the venv's bridge answers and its Harbor offers the environment;
/// Harbor's docker environment also needs `docker compose` (Compose v2). Images are Harbor's
/// to build or pull, at each trial's start.
pub(super) async fn check_harbor(cfg: &RunConfig, acc: &mut Acc) {
    let hc = cfg.sandbox.harbor.clone().unwrap_or_default();
    let env = hc.environment.clone();
    let b =
        tokio::task::spawn_blocking(move || ahe_sandbox::harbor::HarborBackend::connect(hc)).await;
    match b {
        Ok(Ok(b)) => acc.good(
            "harbor",
            "sandbox",
            format!(
                "Harbor {} offers environment {env:?}; images are built or pulled by Harbor at each trial's start",
                b.harbor_version()
            ),
        ),
        Ok(Err(e)) => acc.bad("harbor", "sandbox", format!("{e:#}")),
        Err(e) => acc.bad("harbor", "sandbox", e.to_string()),
    }
    if env == "docker" {
        let compose = tokio::process::Command::new("docker")
            .args(["compose", "version"])
            .output()
            .await
            .is_ok_and(|o| o.status.success());
        if compose {
            acc.good("harbor", "docker compose", "Compose v2 answers");
        } else {
            acc.bad(
                "harbor",
                "docker compose",
                "`docker compose` (Compose v2) does not run: Harbor's docker environment needs it (scripts/setup-harbor.sh installs it)",
            );
        }
    }
}
