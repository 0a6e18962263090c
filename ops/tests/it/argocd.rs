//! The Argo CD health checks under `config/argocd/`: every case of both
//! `health_test.yaml` files through Debian's lua5.4, the scripts held to
//! Argo CD's Lua sandbox, `argocd-cm.yaml` held to the scripts (rewritten
//! with `SHARDRING_UPDATE_GOLDEN=1`), and the documented relation between
//! Argo CD's health and Flux's kstatus on every testdata object.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{Value, json};
use shardring_ops::argocd::{
    self, ARGOCD_CM, ArgoError, HealthCheck, KINDS, lua_literal, render_argocd_cm,
};
use shardring_ops::kstatus::{self, Status};
use shardring_ops::lua_sandbox::sandbox_violations;
use shardring_ops::tools::{find_or_skip, workspace_root};

/// Environment variable that makes the tests rewrite committed files
/// instead of comparing them (the workspace's convention).
const UPDATE_ENV: &str = "SHARDRING_UPDATE_GOLDEN";

fn lua() -> Option<PathBuf> {
    find_or_skip("Argo CD health checks", "lua5.4", "LUA")
}

fn check(lua: &std::path::Path, kind: &str) -> HealthCheck {
    HealthCheck::load(lua, kind).unwrap_or_else(|e| panic!("{e}"))
}

/// The fewest cases each kind's `health_test.yaml` must have: one per
/// branch of its rules (docs: the health table), so a deleted case fails.
const MIN_CASES: [(&str, usize); 2] = [("ShardGroup", 19), ("ConsumerPool", 7)];

#[test]
fn every_health_test_case_passes_under_lua() {
    let Some(lua) = lua() else { return };
    // Both kinds are run before anything is asserted, so one failure report
    // lists every case that differs.
    let mut failures = Vec::new();
    for kind in KINDS {
        let check = check(&lua, kind);
        let (cases, mismatches) = check.mismatches().unwrap_or_else(|e| panic!("{e}"));
        let minimum = MIN_CASES
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n);
        if cases < minimum {
            failures.push(format!(
                "{kind}: {cases} cases in health_test.yaml, expected at least {minimum} (one per rule branch)"
            ));
        }
        if !mismatches.is_empty() {
            failures.push(format!(
                "{kind}/health.lua: {} of {cases} cases differ:",
                mismatches.len()
            ));
            failures.extend(mismatches.iter().map(ToString::to_string));
        }
        println!(
            "{kind}: {} of {cases} health cases pass under {}",
            cases - mismatches.len(),
            lua.display()
        );
    }
    assert!(
        failures.is_empty(),
        "under {}:\n{}",
        lua.display(),
        failures.join("\n")
    );
}

/// Every object in `testdata/` is a case, and every case's object exists:
/// a captured object added without its expected health fails here.
#[test]
fn every_testdata_object_is_a_case() {
    for kind in KINDS {
        let dir = argocd::kind_dir(kind);
        let listed: BTreeSet<String> = argocd::health_tests(&dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|t| t.input_path)
            .collect();
        let present: BTreeSet<String> = testdata(kind)
            .into_iter()
            .map(|(name, _)| format!("testdata/{name}"))
            .collect();
        assert_eq!(
            listed, present,
            "{kind}: health_test.yaml's inputPaths and the files in testdata/ differ; \
             give every testdata object a case with its expected health"
        );
    }
}

#[test]
fn scripts_use_only_what_argo_cds_sandbox_offers() {
    for kind in KINDS {
        let path = argocd::kind_dir(kind).join("health.lua");
        let script = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let found = sandbox_violations(&script);
        assert!(
            found.is_empty(),
            "{}: Argo CD's Lua (gopher-lua, Lua 5.1; base, string, table and math only) would not run:\n{}",
            path.display(),
            found.join("\n")
        );
        // The words the brief names, as plain text outside comments: a
        // second, cruder net under the lexer's.
        for line in script.lines().filter(|l| !l.trim_start().starts_with("--")) {
            for word in ["os.", "io.", "require", "load(", "loadstring", "dofile"] {
                assert!(
                    !line.contains(word),
                    "{}: {word:?} in {line:?} is not in Argo CD's sandbox",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn the_sandbox_check_finds_what_argo_cd_lacks() {
    let bad = "local x = os.getenv('HOME')\n\
               io.write('x')\n\
               local m = require \"json\"\n\
               local f = load(\"return 1\")\n\
               dofile('/etc/passwd')\n\
               local n = 7 // 2\n\
               local b = 1 | 2\n\
               goto done\n\
               local c <const> = 1\n\
               local s = 'a' .. os.time()\n";
    let found = sandbox_violations(bad);
    for needle in [
        "line 1: `os`",
        "line 2: `io`",
        "line 3: `require`",
        "line 4: `load`",
        "line 5: `dofile`",
        "line 6: `//`",
        "line 7: a bitwise",
        "line 8: `goto`",
        "line 9: the attribute <const>",
        "line 10: `os`",
    ] {
        assert!(
            found.iter().any(|f| f.starts_with(needle)),
            "expected {needle:?} among {found:#?}"
        );
    }
    let fine = "-- os.exit() and require in a comment\n\
                --[[ io.write, load ]]\n\
                local s = \"os.getenv // io\" .. [[ dofile ]]\n\
                local r = obj.status.load\n\
                if a ~= b then return string.format('%d', math.floor(n)) end\n";
    assert_eq!(sandbox_violations(fine), Vec::<String>::new());
}

/// `argocd-cm.yaml` carries each script byte for byte: rendered from the
/// scripts it must equal the committed file, and read back as YAML its keys
/// must equal the scripts.
#[test]
fn argocd_cm_carries_the_scripts_verbatim() {
    let scripts: Vec<(&str, String)> = KINDS
        .iter()
        .map(|kind| {
            let path = argocd::kind_dir(kind).join("health.lua");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (*kind, text)
        })
        .collect();
    let pairs: Vec<(&str, &str)> = scripts.iter().map(|(k, s)| (*k, s.as_str())).collect();
    let rendered = render_argocd_cm(&pairs).unwrap_or_else(|e| panic!("{e}"));
    check_file(ARGOCD_CM, &rendered);

    let committed = std::fs::read_to_string(workspace_root().join(ARGOCD_CM))
        .unwrap_or_else(|e| panic!("{ARGOCD_CM}: {e}"));
    let cm: Value = serde_yaml::from_str(&committed).unwrap_or_else(|e| panic!("{ARGOCD_CM}: {e}"));
    assert_eq!(cm["metadata"]["name"], "argocd-cm");
    assert_eq!(cm["metadata"]["namespace"], "argocd");
    let data = cm["data"].as_object().expect("argocd-cm.yaml has data");
    assert_eq!(data.len(), KINDS.len(), "one key per kind in {ARGOCD_CM}");
    for (kind, script) in &scripts {
        let key = format!("resource.customizations.health.{}_{kind}", argocd::GROUP);
        assert_eq!(
            data.get(&key).and_then(Value::as_str),
            Some(script.as_str()),
            "{ARGOCD_CM}: {key} is not {kind}/health.lua byte for byte"
        );
    }
}

/// Asserts that the committed file at `relative` equals `expected` byte for
/// byte; with `SHARDRING_UPDATE_GOLDEN=1` writes it instead.
fn check_file(relative: &str, expected: &str) {
    let path = workspace_root().join(relative);
    if std::env::var(UPDATE_ENV).is_ok_and(|v| v == "1") {
        std::fs::write(&path, expected)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{relative} is out of date with config/argocd/shardring.io/*/health.lua.\n\
         Regenerate it with:\n\
         \n    {UPDATE_ENV}=1 cargo test -p shardring-ops --test it argocd\n\n\
         then review and commit the diff."
    );
}

/// How Argo CD's health and kstatus's status may pair on one object, per
/// kind; the docs' comparison table states the same. Exact both ways: a
/// pair seen on a testdata object that is not listed fails, and so does a
/// listed pair no object shows (the table would claim a case nobody
/// checks). Argo CD Healthy pairs only with Current: where Argo CD calls a
/// group healthy, Flux must too.
const RELATION: [(&str, &str, Status, &str); 12] = [
    (
        "ShardGroup",
        "Healthy",
        Status::Current,
        "both: Ready=True for the observed generation and nothing else wrong",
    ),
    (
        "ShardGroup",
        "Progressing",
        Status::InProgress,
        "both: generation not observed yet, FirstPublishHeld, Ready=Unknown",
    ),
    (
        "ShardGroup",
        "Progressing",
        Status::Current,
        "kstatus reads Reconciling, not the group's Progressing (handoffs), and calls a status without observedGeneration or Ready Current",
    ),
    (
        "ShardGroup",
        "Degraded",
        Status::InProgress,
        "Ready=False with a problem: kstatus cannot tell a stuck Ready=False from one in progress",
    ),
    (
        "ShardGroup",
        "Degraded",
        Status::Current,
        "Ready=True but Degraded=True (stale topology) or Balanced=False UnassignedShards/OutOfBand: kstatus reads only Ready",
    ),
    (
        "ShardGroup",
        "Suspended",
        Status::Current,
        "Balanced=False MovesDeferred, Progressing=True WaitingForReturn: kstatus reads only Ready",
    ),
    (
        "ShardGroup",
        "Progressing",
        Status::Terminating,
        "being deleted: Argo CD says Pending deletion without running the script",
    ),
    (
        "ConsumerPool",
        "Healthy",
        Status::Current,
        "both: Ready=True, no status at all, or a status without Ready",
    ),
    (
        "ConsumerPool",
        "Progressing",
        Status::InProgress,
        "both: generation not observed yet, Ready=Unknown",
    ),
    (
        "ConsumerPool",
        "Progressing",
        Status::Current,
        "a status without observedGeneration: kstatus skips the generation check",
    ),
    (
        "ConsumerPool",
        "Degraded",
        Status::InProgress,
        "Ready=False (NoReadyPods): kstatus cannot tell a stuck Ready=False from one in progress",
    ),
    (
        "ConsumerPool",
        "Progressing",
        Status::Terminating,
        "being deleted: Argo CD says Pending deletion without running the script",
    ),
];

/// For every testdata object of both kinds (and each again as being
/// deleted): Argo CD's health and kstatus's status, printed as a table and
/// held to [`RELATION`].
#[test]
fn kstatus_and_argo_cd_relate_as_documented() {
    let Some(lua) = lua() else { return };
    let mut rows = Vec::new();
    for kind in KINDS {
        let check = check(&lua, kind);
        for (name, obj) in testdata(kind) {
            let mut deleting = obj.clone();
            deleting["metadata"]["deletionTimestamp"] = json!("2026-11-20T12:00:00Z");
            for (case, obj) in [
                (name.clone(), obj),
                (format!("{name} (deleting)"), deleting),
            ] {
                let argo = check
                    .resource_health(&obj)
                    .unwrap_or_else(|e| panic!("{kind}/{case}: {e}"));
                let flux = kstatus::compute(&obj).unwrap_or_else(|e| panic!("{kind}/{case}: {e}"));
                rows.push((kind, case, argo.status, flux.status, flux.message));
            }
        }
    }

    println!("{:<13} {:<46} {:<12} kstatus", "kind", "case", "Argo CD");
    for (kind, case, argo, flux, message) in &rows {
        println!("{kind:<13} {case:<46} {argo:<12} {flux} ({message})");
    }

    let unexplained: Vec<String> = rows
        .iter()
        .filter(|(kind, _, argo, flux, _)| {
            !RELATION
                .iter()
                .any(|(k, a, f, _)| k == kind && a == argo && f == flux)
        })
        .map(|(kind, case, argo, flux, _)| format!("{kind}/{case}: Argo CD {argo}, kstatus {flux}"))
        .collect();
    assert!(
        unexplained.is_empty(),
        "pairs the documented relation does not allow (fix the script, or document the new difference \
         in RELATION and the docs' comparison table):\n{}",
        unexplained.join("\n")
    );
    let unused: Vec<String> = RELATION
        .iter()
        .filter(|(k, a, f, _)| {
            !rows
                .iter()
                .any(|(kind, _, argo, flux, _)| kind == k && argo == a && flux == f)
        })
        .map(|(k, a, f, why)| format!("{k}: Argo CD {a}, kstatus {f} ({why})"))
        .collect();
    assert!(
        unused.is_empty(),
        "pairs in RELATION that no testdata object shows (add a case, or drop the pair):\n{}",
        unused.join("\n")
    );
}

/// The kstatus rules on objects built for each of them, where the testdata
/// (what the operator writes) does not reach: Reconciling, Stalled, a
/// generation ahead, wrong types.
#[test]
fn kstatus_follows_cli_utils() {
    let object = |status: Value| {
        json!({
            "apiVersion": "shardring.io/v1alpha1",
            "kind": "ShardGroup",
            "metadata": {"name": "orders", "generation": 3},
            "status": status,
        })
    };
    let ready =
        |status: &str| json!({"type": "Ready", "status": status, "reason": "R", "message": "m"});
    let cases = [
        (object(json!(null)), Status::Current, "Resource is current"),
        (
            object(json!({"observedGeneration": 2})),
            Status::InProgress,
            "ShardGroup generation is 3, but latest observed generation is 2",
        ),
        (
            object(json!({"observedGeneration": 4})),
            Status::InProgress,
            "ShardGroup generation is 3, but latest observed generation is 4",
        ),
        (
            object(json!({"conditions": [ready("True")]})),
            Status::Current,
            "Resource is Ready",
        ),
        (
            object(json!({"observedGeneration": 3, "conditions": [ready("False")]})),
            Status::InProgress,
            "m",
        ),
        (
            object(json!({"observedGeneration": 3, "conditions": [ready("Unknown")]})),
            Status::InProgress,
            "m",
        ),
        (
            object(json!({"observedGeneration": 3, "conditions": [ready("Maybe"), ready("True")]})),
            Status::Current,
            "Resource is Ready",
        ),
        (
            object(json!({"observedGeneration": 3, "conditions": [
                ready("True"),
                {"type": "Reconciling", "status": "True", "reason": "R", "message": "reconciling"},
            ]})),
            Status::InProgress,
            "reconciling",
        ),
        (
            object(json!({"observedGeneration": 3, "conditions": [
                {"type": "Stalled", "status": "True", "reason": "R", "message": "stalled"},
                {"type": "Reconciling", "status": "True", "reason": "R", "message": "reconciling"},
            ]})),
            Status::Failed,
            "stalled",
        ),
    ];
    for (obj, status, message) in cases {
        let verdict = kstatus::compute(&obj).unwrap_or_else(|e| panic!("{obj}: {e}"));
        assert_eq!(
            (verdict.status, verdict.message.as_str()),
            (status, message),
            "{obj}"
        );
    }

    let mut deleting = object(json!({"observedGeneration": 2}));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-20T12:00:00Z");
    assert_eq!(
        kstatus::compute(&deleting).map(|v| v.status),
        Ok(Status::Terminating)
    );

    let mut float_generation = object(json!({"observedGeneration": 3}));
    float_generation["metadata"]["generation"] = json!(3.5);
    assert!(kstatus::compute(&float_generation).is_err());
    assert!(kstatus::compute(&object(json!({"conditions": {"type": "Ready"}}))).is_err());
}

/// The literal the driver builds reads back in Lua as the same strings,
/// numbers, arrays and nils.
#[test]
fn objects_reach_lua_unchanged() {
    let Some(lua) = lua() else { return };
    let tricky = "quote \" backslash \\ newline \n tab \t ]] [[ NUL \0 ÷ ± ✓ \\ddd \\065";
    let script = "-- echoes obj.text, and the shape of the rest\n\
                  local parts = {obj.text, '|', tostring(obj.count), '|', tostring(#obj.list)}\n\
                  for _, v in ipairs(obj.list) do parts[#parts + 1] = ',' .. tostring(v) end\n\
                  parts[#parts + 1] = '|' .. tostring(obj.missing) .. '|' .. tostring(obj.nested.deep[1].x)\n\
                  parts[#parts + 1] = '|' .. tostring(obj[\"key with \\\"quotes\\\"\"])\n\
                  return {status = 'Healthy', message = table.concat(parts)}\n";
    let check = HealthCheck::from_source(&lua, "echo.lua", &workspace_root(), script);
    let obj = json!({
        "text": tricky,
        "count": 42,
        "list": ["a", 1, true, 2.5],
        "missing": null,
        "nested": {"deep": [{"x": -7}]},
        "key with \"quotes\"": "k",
    });
    let health = check
        .run(&obj)
        .unwrap_or_else(|e| panic!("{e}\nliteral: {}", lua_literal(&obj)));
    assert_eq!(health.status, "Healthy");
    assert_eq!(
        health.message,
        format!("{tricky}|42|4,a,1,true,2.5|nil|-7|k")
    );
}

/// A failing script, or one returning what Argo CD would not take, is an
/// error that says so (with lua's own message), never a health.
#[test]
fn failures_are_errors_that_say_what_failed() {
    let Some(lua) = lua() else { return };
    let dir = workspace_root();
    let run =
        |source: &str| HealthCheck::from_source(&lua, "bad.lua", &dir, source).run(&json!({}));

    let raised = run("-- fails\nerror('boom from the script')\n");
    assert!(
        matches!(&raised, Err(ArgoError::Lua { stderr, .. }) if stderr.contains("boom from the script")),
        "{raised:?}"
    );
    let indexed = run("-- indexes nil\nreturn {status = obj.status.conditions[1].type}\n");
    assert!(
        matches!(&indexed, Err(ArgoError::Lua { stderr, .. }) if stderr.contains("attempt to index")),
        "{indexed:?}"
    );
    let not_a_table = run("-- returns a string\nreturn 'Healthy'\n");
    assert!(
        matches!(&not_a_table, Err(ArgoError::Lua { stderr, .. }) if stderr.contains("not a table")),
        "{not_a_table:?}"
    );
    let unknown_status = run("-- an invented status\nreturn {status = 'Fine', message = 'x'}\n");
    assert!(
        matches!(&unknown_status, Err(ArgoError::Output { .. })),
        "{unknown_status:?}"
    );
    let missing = HealthCheck::from_source(
        std::path::Path::new("/nonexistent/lua5.4"),
        "x.lua",
        &dir,
        "return {status = 'Healthy'}\n",
    )
    .run(&json!({}));
    assert!(
        matches!(&missing, Err(ArgoError::Spawn { .. })),
        "{missing:?}"
    );
    let message = missing.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("apt-get install lua5.4"), "{message}");
}

/// The objects in `kind`'s `testdata/` (every file, so that a stray one
/// fails [`every_testdata_object_is_a_case`] instead of being skipped), by
/// file name, sorted.
fn testdata(kind: &str) -> Vec<(String, Value)> {
    let dir = argocd::kind_dir(kind).join("testdata");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let obj = argocd::load_object(&dir.join(&name)).unwrap_or_else(|e| panic!("{e}"));
            (name, obj)
        })
        .collect()
}
