//! The image's Python modules and packages as the rules ask about them, each directory
//! looked up once per judged change set (a pip install is thousands of modules in a few
//! hundred directories).

use std::collections::HashMap;

use ahe_sandbox::Layer;

use crate::changes::Changed;

/// The top-level modules of the image's Python installations (listed once when needed), and
/// which directories are packages, asked once per directory.
#[derive(Default)]
pub(super) struct ModuleIndex {
    modules: Option<HashMap<String, String>>,
    /// Whether a directory holds an `__init__.py` as the sandbox sees it.
    packages: HashMap<String, bool>,
    /// Whether the image has an `__init__.py` in a directory.
    image_packages: HashMap<String, bool>,
}

impl ModuleIndex {
    /// Where the image has a module named `m`.
    pub(super) fn image_module(&mut self, layer: &Layer, m: &str) -> Option<String> {
        self.modules
            .get_or_insert_with(|| list_modules(layer))
            .get(m)
            .cloned()
    }

    /// The top-level Python module a created file would be imported as (`json` for
    /// `json.py`, `json/__init__.py`, `json.cpython-311-x86_64-linux-gnu.so`, a sourceless
    /// `json.pyc`); none for a file inside a package (its directory has an `__init__.py`).
    pub(super) fn module_name(&mut self, layer: &Layer, c: &Changed) -> Option<String> {
        let name = c.name();
        let (stem, holder) = if name == "__init__.py" {
            let pkg = c.dir();
            let (parent, stem) = pkg.rsplit_once('/')?;
            (stem, if parent.is_empty() { "/" } else { parent })
        } else if let Some(s) = name
            .strip_suffix(".py")
            .or_else(|| name.strip_suffix(".pyc"))
        {
            (s, c.dir())
        } else if name.ends_with(".so") {
            (name.split('.').next()?, c.dir())
        } else {
            return None;
        };
        let ok = !stem.is_empty()
            && stem
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        (ok && !self.is_package(layer, holder)).then(|| stem.to_string())
    }

    /// Whether directory `dir` holds an `__init__.py` as the sandbox sees it.
    fn is_package(&mut self, layer: &Layer, dir: &str) -> bool {
        if let Some(&k) = self.packages.get(dir) {
            return k;
        }
        let init = format!("{}/__init__.py", dir.trim_end_matches('/'));
        let k = layer.visible_file(&init).is_some();
        self.packages.insert(dir.to_string(), k);
        k
    }

    /// The image's Python package a created module was put into: its directory has an
    /// `__init__.py` in the image.
    pub(super) fn image_package(&mut self, layer: &Layer, dir: &str) -> Option<String> {
        let has = match self.image_packages.get(dir) {
            Some(&k) => k,
            None => {
                let k = layer.image_file(&format!("{dir}/__init__.py")).is_some();
                self.image_packages.insert(dir.to_string(), k);
                k
            }
        };
        has.then(|| dir.to_string())
    }
}

/// Python library directories of the image and the modules in them.
fn list_modules(layer: &Layer) -> HashMap<String, String> {
    let mut dirs: Vec<String> = vec!["/usr/lib/python3/dist-packages".into()];
    for base in ["/usr/lib", "/usr/local/lib", "/opt/conda/lib"] {
        for name in layer.image_names(base) {
            if name.starts_with("python3") {
                let d = format!("{base}/{name}");
                dirs.push(format!("{d}/site-packages"));
                dirs.push(format!("{d}/dist-packages"));
                dirs.push(format!("{d}/lib-dynload"));
                dirs.push(d);
            }
        }
    }
    let mut out = HashMap::new();
    for d in dirs {
        for name in layer.image_names(&d) {
            let m = name
                .strip_suffix(".py")
                .or_else(|| {
                    name.ends_with(".so")
                        .then(|| name.split('.').next().unwrap_or(""))
                })
                .unwrap_or(&name);
            if !m.is_empty() && !m.contains('.') && !m.contains('-') {
                out.entry(m.to_string())
                    .or_insert_with(|| format!("{d}/{name}"));
            }
        }
    }
    out
}
