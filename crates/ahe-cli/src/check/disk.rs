//! `ahe check`'s free-space check: where a run writes, against `[sandbox] min_free_disk`.

use std::path::Path;

use ahe_runner::config::RunConfig;

use super::Acc;

/// Free space against the host reserve (`[sandbox] min_free_disk`) where a run writes: the
/// run directory, and the docker engine's data root (when the engine is on this host) or the
/// local backend's temp dir.
pub(super) async fn check_reserve(cfg: &RunConfig, acc: &mut Acc) {
    use ahe_bench::disk::gib;
    use ahe_sandbox::Backend;
    let min = cfg.sandbox.min_free_disk;
    let runs = Path::new("runs");
    let mut paths = vec![(
        "run directory",
        if runs.is_dir() { runs } else { Path::new(".") }.to_path_buf(),
    )];
    let backend = cfg.sandbox.backend.as_str();
    let mut docker_root = Vec::new();
    if backend != "local" && cfg.sandbox.hosts.is_empty() {
        let b = tokio::task::spawn_blocking(|| {
            ahe_sandbox::docker::DockerBackend::available()
                .then(ahe_sandbox::docker::DockerBackend::connect)
        })
        .await;
        if let Ok(Some(Ok(b))) = b {
            docker_root = b.disk_paths().await;
            if docker_root.is_empty() {
                acc.good(
                    "disk",
                    "docker data root",
                    "not on this host: its free space is not watched",
                );
            }
        } else if backend == "auto" {
            paths.push(("local sandboxes", std::env::temp_dir()));
        }
    } else if backend == "local" {
        paths.push(("local sandboxes", std::env::temp_dir()));
    }
    paths.extend(docker_root.into_iter().map(|p| ("docker data root", p)));
    let reserve = if min == 0 {
        "0 (off)".to_string()
    } else {
        gib(min)
    };
    for (what, p) in paths {
        let subject = format!("{what} {}", p.display());
        match ahe_sandbox::docker::free_bytes(&p) {
            None => acc.good("disk", subject, "free space unknown (cannot stat it)"),
            Some(f) if f < min => acc.bad(
                "disk",
                subject,
                format!(
                    "{} free, below [sandbox] min_free_disk = {reserve}: no trial would start; free space or lower the reserve",
                    gib(f)
                ),
            ),
            Some(f) => acc.good(
                "disk",
                subject,
                format!("{} free; reserve [sandbox] min_free_disk = {reserve}", gib(f)),
            ),
        }
    }
}
