//! The chart's RBAC as helm renders it: with the default values its
//! ClusterRole is `config/rbac/role.yaml`; `rbac.podAnnotations: false`
//! takes Pod `patch` away everywhere but the operator's own namespace (its
//! endpoint-leader label); `watchNamespaces` turns every rule on namespaced
//! objects into a Role in each of those namespaces, leaves the ClusterRole
//! only what has no namespace, and reaches `shardring run` as
//! `--watch-namespaces`.

use serde_json::Value;

use super::command_line::parse_run_args;
use super::helm_render::run_helm;
use super::policy::objects;
use super::{read, root, yaml};

const RELEASE_NAMESPACE: &str = "shardring-system";

fn render(sets: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        "shardring",
        "deploy/helm/shardring",
        "--namespace",
        RELEASE_NAMESPACE,
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    objects(&run_helm(&args))
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn cluster_role(objects: &[Value]) -> &Value {
    let roles = of_kind(objects, "ClusterRole");
    assert_eq!(roles.len(), 1, "one ClusterRole");
    roles[0]
}

/// `(namespace, name)` of every Role that grants `verb` on `resource`.
fn roles_granting(objects: &[Value], resource: &str, verb: &str) -> Vec<(String, String)> {
    of_kind(objects, "Role")
        .into_iter()
        .filter(|role| grants(role, resource, verb))
        .map(|role| {
            let meta = &role["metadata"];
            (
                meta["namespace"].as_str().unwrap_or_default().to_owned(),
                meta["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn grants(role: &Value, resource: &str, verb: &str) -> bool {
    role["rules"].as_array().into_iter().flatten().any(|rule| {
        let has = |field: &str, value: &str| {
            rule[field]
                .as_array()
                .is_some_and(|list| list.iter().any(|v| v == value))
        };
        has("resources", resource) && has("verbs", verb)
    })
}

fn config_rules() -> Value {
    let text = read(&root().join("config/rbac/role.yaml"));
    serde_json::to_value(&yaml(&text, "config/rbac/role.yaml")["rules"]).expect("rules as JSON")
}

fn manager_args(objects: &[Value]) -> Vec<String> {
    let deployment = of_kind(objects, "Deployment")[0];
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the manager has args")
        .iter()
        .map(|a| a.as_str().expect("string args").to_owned())
        .collect()
}

#[test]
fn by_default_the_cluster_role_is_config_rbac() {
    let objects = render(&[]);
    assert_eq!(cluster_role(&objects)["rules"], config_rules());
    assert!(grants(cluster_role(&objects), "pods", "patch"));
    assert!(
        roles_granting(&objects, "pods", "patch").is_empty(),
        "no Role of its own for the leader label: the ClusterRole covers it"
    );
}

#[test]
fn without_pod_annotations_only_the_release_namespace_grants_pod_patch() {
    let default = render(&[]);
    let objects = render(&["rbac.podAnnotations=false"]);
    let role = cluster_role(&objects);
    assert!(!grants(role, "pods", "patch"));
    assert!(grants(role, "pods", "watch"), "pods are still watched");
    // Nothing else changed in the ClusterRole.
    let without_pods = |rules: &Value| -> Vec<Value> {
        rules
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"][0] != "pods")
            .cloned()
            .collect()
    };
    assert_eq!(
        without_pods(&role["rules"]),
        without_pods(&cluster_role(&default)["rules"])
    );
    assert_eq!(
        roles_granting(&objects, "pods", "patch"),
        [(
            RELEASE_NAMESPACE.to_owned(),
            "shardring-endpoint-leader".to_owned()
        )]
    );
    // Without the endpoint there is no leader label to write.
    let objects = render(&["rbac.podAnnotations=false", "endpoint.enabled=false"]);
    assert!(roles_granting(&objects, "pods", "patch").is_empty());
}

#[test]
fn watch_namespaces_grant_roles_in_those_namespaces_only() {
    let default = render(&[]);
    let objects = render(&["watchNamespaces={team-a,team-b}"]);
    let role = cluster_role(&objects);
    let cluster_resources: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(
        cluster_resources,
        ["nodes", "tokenreviews", "customresourcedefinitions"],
        "the ClusterRole keeps only what has no namespace"
    );
    let namespaced_rules: Vec<Value> = cluster_role(&default)["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            let resource = r["resources"][0].as_str().unwrap();
            !cluster_resources.contains(&resource)
        })
        .cloned()
        .collect();
    for namespace in ["team-a", "team-b"] {
        let role = of_kind(&objects, "Role")
            .into_iter()
            .find(|r| {
                r["metadata"]["namespace"] == namespace && r["metadata"]["name"] == "shardring"
            })
            .unwrap_or_else(|| panic!("a Role in {namespace}"));
        assert_eq!(role["rules"].as_array().unwrap(), &namespaced_rules);
        let binding = of_kind(&objects, "RoleBinding")
            .into_iter()
            .find(|b| b["metadata"]["namespace"] == namespace)
            .unwrap_or_else(|| panic!("a RoleBinding in {namespace}"));
        assert_eq!(binding["roleRef"]["name"], "shardring");
        assert_eq!(binding["subjects"][0]["name"], "shardring");
        assert_eq!(binding["subjects"][0]["namespace"], RELEASE_NAMESPACE);
    }
    // Pod patch: in the watched namespaces, and on its own pods for the
    // endpoint-leader label.
    let mut patching = roles_granting(&objects, "pods", "patch");
    patching.sort();
    assert_eq!(
        patching,
        [
            (RELEASE_NAMESPACE.into(), "shardring-endpoint-leader".into()),
            ("team-a".into(), "shardring".into()),
            ("team-b".into(), "shardring".into()),
        ]
    );
    let args = manager_args(&objects);
    assert!(args.contains(&"--watch-namespaces=team-a,team-b".to_owned()));
    let args: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let parsed = parse_run_args(&args, "the chart with watchNamespaces");
    assert_eq!(parsed.watch_namespaces, ["team-a", "team-b"]);
    assert!(
        !manager_args(&default)
            .iter()
            .any(|a| a.starts_with("--watch-namespaces")),
        "by default every namespace is watched"
    );
}

/// The rules of the Role granting `get` on Secrets other than the
/// endpoint's own: the RabbitMQ sources' credentials.
fn credentials_role(objects: &[Value]) -> Option<&Value> {
    of_kind(objects, "Role").into_iter().find(|role| {
        role["metadata"]["name"]
            .as_str()
            .is_some_and(|name| name.ends_with("-rabbitmq-credentials"))
    })
}

#[test]
fn rabbitmq_credentials_are_read_by_name_only() {
    let install = objects(&read(&root().join("deploy/install.yaml")));
    let chart = render(&[]);
    for objects in [&install, &chart] {
        let role = credentials_role(objects).expect("a Role for the credentials Secrets");
        assert_eq!(role["metadata"]["namespace"], RELEASE_NAMESPACE);
        assert_eq!(
            role["rules"],
            serde_json::json!([{"apiGroups": [""], "resources": ["secrets"],
                                "resourceNames": ["shardring-rabbitmq"], "verbs": ["get"]}]),
            "get, by name, nothing else"
        );
    }
    // Nothing anywhere lists or watches Secrets.
    for verb in ["list", "watch"] {
        assert!(
            roles_granting(&install, "secrets", verb).is_empty(),
            "{verb} on secrets"
        );
        assert!(
            !grants(cluster_role(&install), "secrets", verb),
            "{verb} on secrets"
        );
    }
    let named = render(&["rabbitmq.credentialsSecrets={orders-broker,billing-broker}"]);
    let role = credentials_role(&named).expect("a Role for the named Secrets");
    assert_eq!(
        role["rules"][0]["resourceNames"],
        serde_json::json!(["orders-broker", "billing-broker"])
    );
    let none = render(&["rabbitmq.credentialsSecrets=null"]);
    assert!(credentials_role(&none).is_none(), "no names, no Role");
}
