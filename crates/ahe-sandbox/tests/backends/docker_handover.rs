//! The verifier hand-over in a docker container: what the agent left running ends (servers
//! kept on request), the keeper keeps serving.

use crate::docker_support;

use std::time::Duration;

use ahe_sandbox::{Backend, LeftoverPolicy, Sandbox};
use docker_support::*;

/// Processes in the container that the agent's commands started.
async fn agent_processes(sb: &dyn Sandbox) -> usize {
    let out = sh(
        sb,
        "n=0; for d in /proc/[0-9]*; do read -r c < $d/comm 2>/dev/null || continue; \
         read -r st < $d/stat 2>/dev/null || continue; case \"${st##*) }\" in Z*) continue;; esac; \
         case $c in sleep|python3) n=$((n+1));; esac; done; echo $n",
    )
    .await;
    out.stdout.trim().parse().unwrap()
}

#[tokio::test]
async fn hand_over_ends_leftovers_and_keeps_the_keeper() {
    let Some(b) = backend() else { return };
    let ctx = base_context();
    let start = "nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' \
         >/dev/null 2>&1 & setsid sleep 1000 >/dev/null 2>&1 & \
         nohup python3 -c 'import socket,time; s=socket.socket(); \
         s.bind((\"127.0.0.1\", 5328)); s.listen(); time.sleep(1000)' >/dev/null 2>&1 & \
         sleep 0.5; echo started";
    for policy in [LeftoverPolicy::KeepServers, LeftoverPolicy::Kill] {
        let sb = b.create(&spec("handover", ctx.path())).await.unwrap();
        assert_eq!(sh(sb.as_ref(), start).await.stdout, "started\n");
        assert!(agent_processes(sb.as_ref()).await >= 2);
        let h = crate::end_leftovers_in_window(sb.as_ref(), policy).await;
        let left = agent_processes(sb.as_ref()).await;
        sh(sb.as_ref(), "echo 0 > /logs/verifier/reward.txt").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let reward = sh(sb.as_ref(), "cat /logs/verifier/reward.txt")
            .await
            .stdout;
        assert_eq!(reward, "0\n", "{policy:?}: a leftover rewrote the reward");
        match policy {
            LeftoverPolicy::KeepServers => {
                assert_eq!(h.kept.len(), 1, "{h:?}");
                assert_eq!(h.kept[0].ports, [5328]);
                assert_eq!(left, 1);
            }
            LeftoverPolicy::Kill => {
                assert!(h.kept.is_empty(), "{h:?}");
                assert_eq!(left, 0);
            }
        }
        assert!(h.killed >= 2, "{h:?}");
        assert_eq!(sh(sb.as_ref(), "echo alive").await.stdout, "alive\n");
        sb.destroy().await.unwrap();
    }
}
