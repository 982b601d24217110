use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{ExecOpts, Sandbox, SandboxSpec};
use std::time::Instant;
#[tokio::test(flavor = "multi_thread")]
async fn scratch() {
    let sb = LocalBackend::bubblewrap()
        .create_local(&SandboxSpec {
            task: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..5 {
        let t = Instant::now();
        sb.exec("true", ExecOpts::default()).await.unwrap();
        eprintln!(
            "total {:?} at {:?}",
            t.elapsed(),
            std::time::SystemTime::now()
        );
    }
    std::env::set_var("AHE_TRACE", "1");
    for _ in 0..5 {
        let t = Instant::now();
        sb.exec("true", ExecOpts::default()).await.unwrap();
        eprintln!("total {:?}", t.elapsed());
    }
    std::env::remove_var("AHE_TRACE");
    let t = Instant::now();
    for _ in 0..100 {
        sb.exec("true", ExecOpts::default()).await.unwrap();
    }
    eprintln!("100 execs: {:?}", t.elapsed());
    let t = Instant::now();
    for _ in 0..100 {
        std::process::Command::new("/bin/bash")
            .args(["-c", "true"])
            .status()
            .unwrap();
    }
    eprintln!("100 host bash: {:?}", t.elapsed());
    sb.destroy().await.unwrap();
}
