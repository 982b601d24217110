//! Whether each task's environment can be had on the docker backend before a run starts
//! (`ahe check`): its `docker_image` local or pullable, else its `environment/` buildable
//! (every `FROM` base local or pullable). Images are probed once each, many at once.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ahe_sandbox::docker::pull::{availability, Availability};
use ahe_sandbox::PullPolicy;
use serde::Serialize;

use crate::task::Task;

/// How one task's environment would be had, or why it cannot.
#[derive(Debug, Clone, Serialize)]
pub struct ImageFinding {
    /// Task name.
    pub task: String,
    /// How the environment is had (`image X (local)`, `pull X`, `build environment/ …`).
    pub how: Option<String>,
    /// Why it cannot be had, and what to run (`None`: it can).
    pub problem: Option<String>,
    /// Images a run would pull first.
    pub pulls: Vec<String>,
}

/// Finds how each task's environment would be had under `policy`.
pub async fn check_images(
    docker: &bollard::Docker,
    policy: PullPolicy,
    tasks: &[Task],
    timeout: Duration,
) -> Vec<ImageFinding> {
    let bases: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            t.environment
                .context_dir
                .as_ref()
                .and_then(|c| std::fs::read_to_string(c.join("Dockerfile")).ok())
                .map(|text| ahe_sandbox::docker::dockerfile_bases(&text))
                .unwrap_or_default()
        })
        .collect();
    let mut all = BTreeSet::new();
    for (t, b) in tasks.iter().zip(&bases) {
        all.extend(t.environment.docker_image.iter().cloned());
        all.extend(b.iter().cloned());
    }
    let avail = availability(docker, policy, all.into_iter().collect(), timeout).await;
    tasks
        .iter()
        .zip(&bases)
        .map(|(t, b)| finding(t, b, &avail))
        .collect()
}

fn finding(t: &Task, bases: &[String], avail: &HashMap<String, Availability>) -> ImageFinding {
    let state = |i: &String| avail.get(i).cloned().unwrap_or(Availability::Local);
    let mut f = ImageFinding {
        task: t.name.clone(),
        how: None,
        problem: None,
        pulls: Vec::new(),
    };
    let mut image_why = None;
    if let Some(img) = &t.environment.docker_image {
        match state(img) {
            Availability::Local => {
                f.how = Some(format!("image {img} (local)"));
                return f;
            }
            Availability::Pullable => {
                f.how = Some(format!("pull {img}"));
                f.pulls.push(img.clone());
                return f;
            }
            Availability::Unavailable(why) => image_why = Some(format!("image {img}: {why}")),
        }
    }
    let Some(ctx) = t
        .environment
        .context_dir
        .as_ref()
        .filter(|c| c.join("Dockerfile").is_file())
    else {
        f.problem = Some(match image_why {
            Some(w) => format!("{w}; and there is no environment/Dockerfile to build instead"),
            None => "names no docker_image and has no environment/Dockerfile".into(),
        });
        return f;
    };
    let mut missing = Vec::new();
    for b in bases {
        match state(b) {
            Availability::Local => {}
            Availability::Pullable => f.pulls.push(b.clone()),
            Availability::Unavailable(why) => missing.push(format!("base image {b}: {why}")),
        }
    }
    if missing.is_empty() {
        f.how = Some(format!(
            "build {}{}",
            ctx.display(),
            image_why
                .map(|w| format!(" (instead of the {w})"))
                .unwrap_or_default()
        ));
        return f;
    }
    let mut parts: Vec<String> = image_why.into_iter().collect();
    parts.push(format!(
        "{}/Dockerfile cannot be built: {}",
        ctx.display(),
        missing.join("; ")
    ));
    let first = t
        .environment
        .docker_image
        .clone()
        .or_else(|| bases.first().cloned())
        .unwrap_or_default();
    parts.push(format!(
        "run `docker pull {first}` where its registry is reachable (or `docker load` it){}",
        if bases.is_empty() {
            String::new()
        } else {
            format!(", or pull the bases: `docker pull {}`", bases.join(" "))
        }
    ));
    f.problem = Some(parts.join("; "));
    f
}
