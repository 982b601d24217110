//! A container's overlay2 layers as host directories (when the engine runs on this host and
//! its data root is readable), for reward-integrity checks.

use bollard::Docker;

use crate::Layer;

/// The container's layer, from the engine's inspect (`GraphDriver`, `Config.Env`): `None` for
/// a driver other than overlay2 or directories this process cannot read (a remote engine).
pub(crate) async fn inspect(docker: &Docker, id: &str) -> Option<Layer> {
    let info = docker.inspect_container(id, None).await.ok()?;
    let gd = info.graph_driver?;
    if gd.name != "overlay2" && gd.name != "overlay" {
        return None;
    }
    let upper = gd.data.get("UpperDir")?.clone();
    let lower = gd.data.get("LowerDir").cloned().unwrap_or_default();
    let path_env = info
        .config
        .and_then(|c| c.env)
        .unwrap_or_default()
        .iter()
        .find_map(|e| e.strip_prefix("PATH=").map(String::from))
        .unwrap_or_else(|| crate::dockerfile::DEFAULT_PATH.to_string());
    let layer = Layer {
        upper: vec![("/".into(), upper.into())],
        lower: lower
            .split(':')
            .filter(|s| !s.is_empty())
            .map(Into::into)
            .collect(),
        lower_tops: None,
        overlay: true,
        path_env,
        image_paths: None,
    };
    layer.readable().then_some(layer)
}
