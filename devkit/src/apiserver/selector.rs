//! Label and field selectors in the forms shardring's clients send, and the
//! [`FilterKey`] each stored object and watch event carries so that lists and
//! watches filter without looking into the object again. Label selectors:
//! `k=v`, `k==v`, `k!=v`, `k`, `!k`; field selectors: `metadata.name` and
//! `metadata.namespace` with `=`, `==`, `!=`. Set-based label requirements
//! (`in`, `notin`) and other fields are a 400 that says the mock does not
//! serve them (the real server's full grammar is its own to test).

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
        }
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        }
    }
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
    if s.contains(" in ") || s.contains(" notin ") {
        return Err(ApiError::bad_request(format!(
            "set-based label selectors are not served by the mock API server: {raw}"
        )));
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
        s.split(',')
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
}

/// A parsed `fieldSelector` (`=`, `==`, `!=`; comma = AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(Field, bool, String)>);

impl FieldSelector {
    /// Parses a selector; other fields are a 400.
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
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported by the mock API server: {other}"
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
        assert!(ok("app,!missing"));
        assert!(!ok("tier,!app"));
        assert!(ok(""));
        assert_eq!(LabelSelector::parse("a in (x)").unwrap_err().code, 400);
    }

    #[test]
    fn field_selector_forms() {
        let key = FilterKey {
            namespace: "ns".into(),
            name: "p".into(),
            ..FilterKey::default()
        };
        let ok = |s: &str| FieldSelector::parse(s).unwrap().matches(&key);
        assert!(ok("metadata.name=p,metadata.namespace==ns"));
        assert!(!ok("metadata.name!=p"));
        assert_eq!(
            FieldSelector::parse("spec.nodeName=x").unwrap_err().code,
            400
        );
    }
}
