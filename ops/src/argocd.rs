//! The Argo CD health checks (`config/argocd/shardring.io/<Kind>/health.lua`)
//! run outside Argo CD: each script is evaluated by Debian's `lua5.4` on one
//! object, the way Argo CD evaluates it (the object as the global `obj`, the
//! script's returned table `{status = ..., message = ...}` as the health),
//! against Argo CD's own test format (`health_test.yaml` with
//! `testdata/*.yaml`). Also what keeps the scripts inside Argo CD's sandbox
//! (base, `string`, `table`, `math`; Lua 5.1 syntax, as gopher-lua runs it)
//! and the `argocd-cm` patch that carries them verbatim.
//!
//! Argo CD runs gopher-lua (Lua 5.1), not Lua 5.4: the checks run here are
//! only as faithful as the scripts are portable, which is why
//! [`crate::lua_sandbox::sandbox_violations`] refuses the 5.2+ syntax and the libraries the
//! sandbox lacks, and why JSON integers are given to Lua as integers (so
//! `tostring` prints `3` in both, where gopher-lua's float would too).

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::Value;

use crate::tools::workspace_root;

/// The API group of the checked kinds (the `<group>` of Argo CD's
/// `resource_customizations/<group>/<kind>/` layout and of the
/// `resource.customizations.health.<group>_<kind>` keys).
pub const GROUP: &str = "shardring.io";

/// The kinds with a health check, in the order `argocd-cm.yaml` lists them.
pub const KINDS: [&str; 2] = ["ShardGroup", "ConsumerPool"];

/// The `argocd-cm` patch, relative to the workspace root.
pub const ARGOCD_CM: &str = "config/argocd/argocd-cm.yaml";

/// Argo CD's health statuses (gitops-engine `pkg/health`), from healthiest
/// to least healthy as it orders them when it aggregates an Application.
pub const HEALTH_STATUSES: [&str; 6] = [
    "Healthy",
    "Suspended",
    "Progressing",
    "Missing",
    "Degraded",
    "Unknown",
];

/// The directory of `kind`'s check: `health.lua`, `health_test.yaml`,
/// `testdata/`.
pub fn kind_dir(kind: &str) -> PathBuf {
    workspace_root()
        .join("config/argocd")
        .join(GROUP)
        .join(kind)
}

/// What a health check said of one object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// One of [`HEALTH_STATUSES`].
    pub status: String,
    /// Free text; empty when the script gave none.
    #[serde(default)]
    pub message: String,
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.status, self.message)
    }
}

/// Why a check could not be run or read.
#[derive(Debug, thiserror::Error)]
pub enum ArgoError {
    /// A file of the check is missing or unreadable.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A YAML file does not parse (or is not shaped as Argo CD expects).
    #[error("{path} is not what Argo CD expects: {source}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: serde_yaml::Error,
    },
    /// `lua5.4` could not be started or fed.
    #[error(
        "running {lua}: {source}; install Debian's lua5.4 (apt-get install lua5.4) or point $LUA at a Lua 5.4"
    )]
    Spawn {
        /// The interpreter.
        lua: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The script raised an error (or did not return a table with a status).
    #[error(
        "{script} failed under lua ({exit}); in its messages, stdin line N is line N-2 of the script:\n{stderr}"
    )]
    Lua {
        /// The script.
        script: String,
        /// How lua exited.
        exit: String,
        /// What lua printed.
        stderr: String,
    },
    /// The script returned something Argo CD would not take.
    #[error("{script} returned {output:?}: {why}")]
    Output {
        /// The script.
        script: String,
        /// What the driver printed.
        output: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `argocd-cm.yaml` cannot carry a script verbatim.
    #[error("{script} cannot be carried verbatim in a YAML block scalar: {why}")]
    Unquotable {
        /// The script.
        script: String,
        /// What to change in it.
        why: &'static str,
    },
}

/// One case of a `health_test.yaml`, in Argo CD's format.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthTest {
    /// The health the script must return.
    pub health_status: Health,
    /// The object, relative to the check's directory.
    pub input_path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthTests {
    tests: Vec<HealthTest>,
}

/// A case whose health differs from the expected one, or that failed.
#[derive(Debug)]
pub struct Mismatch {
    /// The case's `inputPath`.
    pub input_path: String,
    /// What `health_test.yaml` expects.
    pub expected: Health,
    /// What the script returned, or why it could not run.
    pub actual: Result<Health, ArgoError>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:\n  expected {}\n  ", self.input_path, self.expected)?;
        match &self.actual {
            Ok(health) => write!(f, "got      {health}"),
            Err(error) => write!(f, "failed:  {error}"),
        }
    }
}

/// One health check, ready to run under a Lua interpreter.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    lua: PathBuf,
    name: String,
    dir: PathBuf,
    source: String,
}

impl HealthCheck {
    /// The check of `kind` (`<kind_dir>/health.lua`), run by `lua`.
    ///
    /// # Errors
    /// When the script cannot be read.
    pub fn load(lua: &Path, kind: &str) -> Result<Self, ArgoError> {
        let dir = kind_dir(kind);
        let path = dir.join("health.lua");
        let source = read(&path)?;
        Ok(Self {
            lua: lua.to_path_buf(),
            name: relative(&path),
            dir,
            source,
        })
    }

    /// A check from `source` (named `name` in errors), for scripts that are
    /// not files; its `health_test.yaml` would be in `dir`.
    pub fn from_source(lua: &Path, name: &str, dir: &Path, source: &str) -> Self {
        Self {
            lua: lua.to_path_buf(),
            name: name.to_owned(),
            dir: dir.to_path_buf(),
            source: source.to_owned(),
        }
    }

    /// What the script returns for `obj`, as Argo CD's Lua health check
    /// would (the script alone: see [`HealthCheck::resource_health`] for
    /// what Argo CD decides before running it).
    ///
    /// # Errors
    /// When lua cannot run, the script fails, or it returns no table with
    /// one of Argo CD's health statuses.
    pub fn run(&self, obj: &Value) -> Result<Health, ArgoError> {
        let chunk = driver_chunk(&self.source, obj);
        let spawn = |source| ArgoError::Spawn {
            lua: self.lua.clone(),
            source,
        };
        let mut child = Command::new(&self.lua)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn)?;
        // lua reads the whole chunk before it runs it, so writing all of it
        // before reading any output cannot deadlock.
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(chunk.as_bytes()).map_err(spawn)?;
        }
        let output = child.wait_with_output().map_err(spawn)?;
        if !output.status.success() {
            return Err(ArgoError::Lua {
                script: self.name.clone(),
                exit: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        let bad = |output: String, why| ArgoError::Output {
            script: self.name.clone(),
            output,
            why,
        };
        let text = String::from_utf8(output.stdout).map_err(|e| {
            bad(
                String::from_utf8_lossy(e.as_bytes()).into_owned(),
                "the status or message is not UTF-8",
            )
        })?;
        let Some((status, message)) = text.split_once('\n') else {
            return Err(bad(text, "the driver printed no `<status>\\n<message>`"));
        };
        if !HEALTH_STATUSES.contains(&status) {
            return Err(bad(
                text.clone(),
                "the status is not one of Argo CD's (Healthy, Suspended, Progressing, Missing, Degraded, Unknown); \
                 Argo CD would show Unknown",
            ));
        }
        Ok(Health {
            status: status.to_owned(),
            message: message.to_owned(),
        })
    }

    /// The health Argo CD shows for `obj`: an object being deleted is
    /// Progressing ("Pending deletion") without running the script
    /// (gitops-engine `pkg/health/health.go`, `GetResourceHealth`); any
    /// other object gets what the script returns.
    ///
    /// # Errors
    /// As [`HealthCheck::run`].
    pub fn resource_health(&self, obj: &Value) -> Result<Health, ArgoError> {
        let deleting = obj
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        if deleting {
            return Ok(Health {
                status: "Progressing".into(),
                message: "Pending deletion".into(),
            });
        }
        self.run(obj)
    }

    /// The cases of the check's `health_test.yaml`.
    ///
    /// # Errors
    /// When the file is missing or not in Argo CD's format.
    pub fn tests(&self) -> Result<Vec<HealthTest>, ArgoError> {
        health_tests(&self.dir)
    }

    /// Runs every case of `health_test.yaml` and returns the ones whose
    /// health differs from the expected one (or that failed), with the
    /// number of cases run.
    ///
    /// # Errors
    /// When `health_test.yaml` cannot be read; a case whose object cannot
    /// be read or whose run fails is a mismatch.
    pub fn mismatches(&self) -> Result<(usize, Vec<Mismatch>), ArgoError> {
        let tests = self.tests()?;
        let mismatches = tests
            .iter()
            .filter_map(|test| {
                let actual =
                    load_object(&self.dir.join(&test.input_path)).and_then(|obj| self.run(&obj));
                match &actual {
                    Ok(health) if *health == test.health_status => None,
                    _ => Some(Mismatch {
                        input_path: test.input_path.clone(),
                        expected: test.health_status.clone(),
                        actual,
                    }),
                }
            })
            .collect();
        Ok((tests.len(), mismatches))
    }
}

/// The cases of the `health_test.yaml` in `dir`.
///
/// # Errors
/// When the file is missing or not in Argo CD's format.
pub fn health_tests(dir: &Path) -> Result<Vec<HealthTest>, ArgoError> {
    let path = dir.join("health_test.yaml");
    let text = read(&path)?;
    let tests: HealthTests =
        serde_yaml::from_str(&text).map_err(|source| ArgoError::Yaml { path, source })?;
    Ok(tests.tests)
}

/// The object in the YAML file at `path` (as `kubectl get -o yaml` prints it).
///
/// # Errors
/// When the file is missing or not YAML.
pub fn load_object(path: &Path) -> Result<Value, ArgoError> {
    let text = read(path)?;
    serde_yaml::from_str(&text).map_err(|source| ArgoError::Yaml {
        path: path.to_path_buf(),
        source,
    })
}

/// The chunk given to `lua5.4 -`: `obj` set to the object, the script as
/// the body of a function (so its top-level `return` returns from it), and
/// a tail that prints the returned status and message separated by a
/// newline. The object's literal is one line, so line N of the script is
/// line N+2 of the chunk.
pub fn driver_chunk(script: &str, obj: &Value) -> String {
    let mut chunk = String::with_capacity(script.len() + 4096);
    chunk.push_str("obj = ");
    write_literal(obj, &mut chunk);
    chunk.push_str("\nlocal function health_check()\n");
    chunk.push_str(script);
    chunk.push_str("\nend\n");
    chunk.push_str(DRIVER_TAIL);
    chunk
}

/// Checks the returned value as Argo CD does (a table with a string
/// status) and prints it; `io` is the driver's, never the script's.
const DRIVER_TAIL: &str = r#"local hs = health_check()
if type(hs) ~= "table" then
  error("the health check returned a " .. type(hs) .. ", not a table {status = ..., message = ...}")
end
if type(hs.status) ~= "string" then
  error("the health check's table has no string status")
end
if hs.message ~= nil and type(hs.message) ~= "string" then
  error("the health check's message is a " .. type(hs.message) .. ", not a string")
end
io.write(hs.status, "\n", hs.message or "")
"#;

/// `value` as a Lua table constructor, as Argo CD hands it to the script:
/// objects as tables keyed by string, arrays as sequences from 1, JSON null
/// as nil, integers as integers.
pub fn lua_literal(value: &Value) -> String {
    let mut out = String::new();
    write_literal(value, &mut out);
    out
}

fn write_literal(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("nil"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // serde_json prints integers as integers and finite floats in a
        // form Lua reads back (JSON has no NaN or infinity).
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('{');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write_literal(item, out);
            }
            out.push('}');
        }
        Value::Object(members) => {
            out.push('{');
            for (index, (key, item)) in members.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                out.push('[');
                write_string(key, out);
                out.push_str("] = ");
                write_literal(item, out);
            }
            out.push('}');
        }
    }
}

/// A quoted Lua string with every byte that is not printable ASCII, and the
/// quote and backslash, as a three-digit `\ddd` escape: Lua strings are
/// bytes, so the UTF-8 comes back unchanged, and no text of the object can
/// end the literal or start an escape of its own.
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'"' && byte != b'\\' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("\\{byte:03}"));
        }
    }
    out.push('"');
}

/// The `argocd-cm` patch carrying each `(kind, script)` verbatim under
/// `resource.customizations.health.<group>_<kind>` (Argo CD's documented
/// key for a custom health check), as literal block scalars.
///
/// # Errors
/// When a script has a form a block scalar would not give back byte for
/// byte (no final newline, blank lines at its end, carriage returns, a
/// first line that starts with a space).
pub fn render_argocd_cm(scripts: &[(&str, &str)]) -> Result<String, ArgoError> {
    let mut out = String::from(ARGOCD_CM_HEADER);
    for (kind, script) in scripts {
        let unquotable = |why| ArgoError::Unquotable {
            script: format!("{kind}/health.lua"),
            why,
        };
        if !script.ends_with('\n') || script.ends_with("\n\n") {
            return Err(unquotable(
                "end it with exactly one newline (a block scalar keeps one, and drops blank lines at the end)",
            ));
        }
        if script.contains('\r') {
            return Err(unquotable("use LF line endings"));
        }
        if script.starts_with([' ', '\t']) {
            return Err(unquotable(
                "start it with a line that is not indented (a comment)",
            ));
        }
        out.push_str(&format!(
            "  resource.customizations.health.{GROUP}_{kind}: |\n"
        ));
        for line in script.lines() {
            if !line.is_empty() {
                out.push_str("    ");
                out.push_str(line);
            }
            out.push('\n');
        }
    }
    Ok(out)
}

/// What `argocd-cm.yaml` says before the scripts.
const ARGOCD_CM_HEADER: &str = "\
# Argo CD health checks for shardring's ShardGroup and ConsumerPool, as a
# patch of Argo CD's argocd-cm ConfigMap: each key
# resource.customizations.health.<group>_<kind> holds a health.lua verbatim.
#
# Generated from config/argocd/shardring.io/<Kind>/health.lua: do not edit
# here. Change the scripts (and their health_test.yaml), then regenerate with
#
#     SHARDRING_UPDATE_GOLDEN=1 cargo test -p shardring-ops --test it argocd
#
# Apply with
#
#     kubectl -n argocd patch configmap argocd-cm --patch-file config/argocd/argocd-cm.yaml
#
# or copy the two keys into the argocd-cm you manage (with the Argo CD Helm
# chart, under configs.cm).
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: argocd
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
data:
";

fn read(path: &Path) -> Result<String, ArgoError> {
    std::fs::read_to_string(path).map_err(|source| ArgoError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// `path` from the workspace root, for messages.
fn relative(path: &Path) -> String {
    let root = workspace_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}
