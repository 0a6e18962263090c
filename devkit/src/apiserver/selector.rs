//! Label and field selectors as the real server parses them, and the
//! [`FilterKey`] each stored object and watch event carries so that lists and
//! watches filter without looking into the object again.

use std::collections::BTreeMap;

use serde_json::Value;

use super::status::ApiError;

/// The parts of an object selectors look at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FilterKey {
    /// `metadata.namespace` (empty when cluster-scoped).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.nodeName` (pods).
    pub node_name: Option<String>,
    /// `status.phase` (pods, namespaces).
    pub phase: Option<String>,
}

impl FilterKey {
    /// Reads the selectable parts of `obj`.
    pub fn of(obj: &Value) -> Self {
        let meta = &obj["metadata"];
        let text = |v: &Value| v.as_str().map(str::to_owned);
        FilterKey {
            namespace: text(&meta["namespace"]).unwrap_or_default(),
            name: text(&meta["name"]).unwrap_or_default(),
            labels: meta["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default(),
            node_name: text(&obj["spec"]["nodeName"]),
            phase: text(&obj["status"]["phase"]),
        }
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_set(key: &str, rest: &str, raw: &str) -> Result<(String, Vec<String>), ApiError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {raw}")))?;
    let values = inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((key.trim().to_owned(), values))
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_requirement(raw: &str) -> Result<Requirement, ApiError> {
    let s = raw.trim();
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {raw}"));
    if let Some(key) = s.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key)
            .then(|| Requirement::NotExists(key.to_owned()))
            .ok_or_else(bad);
    }
    if let Some((k, v)) = s.split_once("!=") {
        return Ok(Requirement::NotEquals(
            k.trim().to_owned(),
            v.trim().to_owned(),
        ));
    }
    if let Some((k, v)) = s.split_once("==").or_else(|| s.split_once('=')) {
        return Ok(Requirement::Equals(
            k.trim().to_owned(),
            v.trim().to_owned(),
        ));
    }
    if let Some((k, rest)) = s.split_once(" notin ") {
        let (k, vs) = parse_set(k, rest, raw)?;
        return Ok(Requirement::NotIn(k, vs));
    }
    if let Some((k, rest)) = s.split_once(" in ") {
        let (k, vs) = parse_set(k, rest, raw)?;
        return Ok(Requirement::In(k, vs));
    }
    valid_key(s)
        .then(|| Requirement::Exists(s.to_owned()))
        .ok_or_else(bad)
}

/// A parsed `labelSelector`: every requirement must hold (comma = AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses a selector; the empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        if s.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        split_top_level(s)
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()
            .map(LabelSelector)
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

/// Fields a field selector may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
    NodeName,
    Phase,
}

/// A parsed `fieldSelector` (`=`, `==`, `!=`; comma = AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(Field, bool, String)>);

impl FieldSelector {
    /// Parses a selector; unknown fields are a 400 as on the real server.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for raw in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (key, equal, value) = if let Some((k, v)) = raw.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = raw.split_once("==").or_else(|| raw.split_once('=')) {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{raw}'; can't understand '{raw}'"
                )));
            };
            let field = match key.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                "spec.nodeName" => Field::NodeName,
                "status.phase" => Field::Phase,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {other}"
                    )));
                }
            };
            terms.push((field, equal, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether `key` satisfies every term.
    pub fn matches(&self, key: &FilterKey) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = match field {
                Field::Name => key.name.as_str(),
                Field::Namespace => key.namespace.as_str(),
                Field::NodeName => key.node_name.as_deref().unwrap_or(""),
                Field::Phase => key.phase.as_deref().unwrap_or(""),
            };
            (actual == value) == *equal
        })
    }
}

/// What a list or watch selects: a namespace (or all) and the selectors.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// Only this namespace; `None` for all namespaces or cluster scope.
    pub namespace: Option<String>,
    /// The label selector.
    pub labels: LabelSelector,
    /// The field selector.
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether an object with `key` is selected.
    pub fn matches(&self, key: &FilterKey) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == key.namespace)
            && self.labels.matches(&key.labels)
            && self.fields.matches(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selector_forms() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let ok = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(!ok("app!=web"));
        assert!(ok("app in (api, web),!missing"));
        assert!(!ok("app notin (web)"));
        assert!(ok("missing notin (x)"));
        assert!(!ok("missing in (x)"));
        assert!(!ok("tier,!app"));
        assert!(ok(""));
        assert!(LabelSelector::parse("a in x").is_err());
    }

    #[test]
    fn field_selector_forms() {
        let key = FilterKey {
            namespace: "ns".into(),
            name: "p".into(),
            node_name: Some("n1".into()),
            ..FilterKey::default()
        };
        let ok = |s: &str| FieldSelector::parse(s).unwrap().matches(&key);
        assert!(ok("metadata.name=p,metadata.namespace==ns"));
        assert!(ok("spec.nodeName=n1"));
        assert!(!ok("spec.nodeName!=n1"));
        assert!(FieldSelector::parse("spec.other=x").is_err());
    }
}
