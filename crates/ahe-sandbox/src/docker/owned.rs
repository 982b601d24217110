//! The containers ahe owns on an engine: the labels that name their owner (host, process and
//! its start time), reaping those of dead owners, and removing them off the async runtime.

use super::*;

/// This machine's hostname (for the `ahe.host` label).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The start time of a process (field 22 of `/proc/<pid>/stat`), if it is alive.
pub(crate) fn pid_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // After ") " come fields 3.. ; the start time is field 22.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the ahe process named by a container's labels is alive on this host.
fn owner_alive(labels: &HashMap<String, String>) -> bool {
    let Some(pid) = labels.get(LABEL_PID).and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    match pid_start_time(pid) {
        None => false,
        Some(start) => match labels
            .get(LABEL_PID_START)
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(expected) => start == expected,
            None => true,
        },
    }
}

/// Removes ahe containers (labelled `ahe.run`): with `only_dead`, those created on this host
/// by an ahe process that no longer runs; otherwise all of them. Returns how many it removed.
pub async fn reap(docker: &Docker, only_dead: bool) -> Result<usize> {
    let host = hostname();
    remove_labelled(docker, LABEL_RUN, |labels| {
        !only_dead || (labels.get(LABEL_HOST) == Some(&host) && !owner_alive(labels))
    })
    .await
}

/// Removes every container this process created on `docker` (labelled with its pid, pid
/// start time and hostname): what a pool removes from an engine that answers again after it
/// was lost. Returns how many it removed.
pub async fn remove_own(docker: &Docker) -> Result<usize> {
    let pid_label = format!("{LABEL_PID}={}", std::process::id());
    let host = hostname();
    let start = pid_start_time(std::process::id()).map(|s| s.to_string());
    remove_labelled(docker, &pid_label, |labels| {
        labels.get(LABEL_HOST) == Some(&host)
            && (start.is_none() || labels.get(LABEL_PID_START) == start.as_ref())
    })
    .await
}

/// Removes, all at once, the containers matching the label filter `label` whose labels pass
/// `keep`; returns how many it removed.
async fn remove_labelled(
    docker: &Docker,
    label: &str,
    keep: impl Fn(&HashMap<String, String>) -> bool,
) -> Result<usize> {
    let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![label])]);
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let list = docker
        .list_containers(Some(opts))
        .await
        .map_err(|e| api_err("listing containers", e))?;
    let doomed: Vec<String> = list
        .into_iter()
        .filter(|c| keep(&c.labels.clone().unwrap_or_default()))
        .filter_map(|c| c.id)
        .collect();
    let removals = doomed.iter().map(|id| remove_container(docker, id));
    let mut removed = 0;
    for r in futures_util::future::join_all(removals).await {
        if r? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Force-removes a container (and its anonymous volumes); `Ok(false)` when it was gone.
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> Result<bool> {
    let opts = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(opts)).await {
        Ok(()) => Ok(true),
        Err(e) if status_of(&e) == Some(404) => Ok(false),
        // 409: a removal is already in progress (e.g. a concurrent reap).
        Err(e) if status_of(&e) == Some(409) => Ok(false),
        Err(e) => Err(api_err(&format!("removing container {id}"), e)),
    }
}

/// Removes containers now, blocking on a helper thread (for `Drop`: also works while the
/// runtime shuts down); failures and timeouts (30 s) are logged with `what`.
pub(crate) fn remove_blocking(docker: &Docker, ids: Vec<String>, what: &'static str) {
    if ids.is_empty() {
        return;
    }
    let docker = docker.clone();
    block_on_thread(async move {
        let limit = Duration::from_secs(30);
        let removals = ids.iter().map(|id| remove_container(&docker, id));
        match tokio::time::timeout(limit, futures_util::future::join_all(removals)).await {
            Ok(results) => {
                for (id, r) in ids.iter().zip(results) {
                    if let Err(e) = r {
                        tracing::warn!("docker: removing {what} {id}: {e}");
                    }
                }
            }
            Err(_) => tracing::warn!("docker: removing {what} {ids:?} timed out"),
        }
    });
}

/// Runs `fut` on the current runtime, or on a helper thread when there is none (for `Drop`).
pub(crate) fn spawn_detached<F>(fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            h.spawn(fut);
        }
        Err(_) => {
            std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(fut);
                }
            });
        }
    }
}
