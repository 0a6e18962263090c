//! Request paths to routes: `/version` and the health endpoints, and for
//! resources the
//! collection (`/api/v1/pods`, `/apis/{g}/{v}/namespaces/{ns}/{plural}`) or
//! the object and subresource
//! (`.../{plural}/{name}[/status]`), resolved against the registry.

use std::sync::Arc;

use super::resources::{Registry, ResourceType};
use super::status::ApiError;

/// Where a request goes.
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// `GET /version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// A collection; `namespace` `None` for cluster scope or all namespaces.
    Collection {
        rt: Arc<ResourceType>,
        namespace: Option<String>,
    },
    /// One object, or its `status` subresource.
    Object {
        rt: Arc<ResourceType>,
        namespace: Option<String>,
        name: String,
        status: bool,
    },
}

/// Resolves `path`.
pub(crate) fn route(registry: &Registry, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => return Ok(Route::Health),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    let resolve = |plural: &str| {
        registry
            .by_path(group, version, plural)
            .ok_or_else(|| ApiError::no_route(path))
    };
    let object = |rt: Arc<ResourceType>, ns: Option<&str>, tail: &[&str]| match tail {
        [] => Ok(Route::Collection {
            rt,
            namespace: ns.map(str::to_owned),
        }),
        [name] | [name, "status"] if !name.is_empty() => {
            if tail.len() == 2 && !rt.status_subresource {
                return Err(ApiError::no_route(path));
            }
            Ok(Route::Object {
                rt,
                namespace: ns.map(str::to_owned),
                name: (*name).to_owned(),
                status: tail.len() == 2,
            })
        }
        _ => Err(ApiError::no_route(path)),
    };
    match rest {
        [] => Err(ApiError::no_route(path)),
        ["namespaces", ns, plural, tail @ ..]
            if !(tail.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            let rt = resolve(plural)?;
            if !rt.namespaced {
                return Err(ApiError::no_route(path));
            }
            object(rt, Some(ns), tail)
        }
        [plural, tail @ ..] => {
            let rt = resolve(plural)?;
            if rt.namespaced && !tail.is_empty() {
                return Err(ApiError::no_route(path));
            }
            object(rt, None, tail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(path: &str) -> Route {
        route(&Registry::new(), path).unwrap()
    }

    #[test]
    fn paths_resolve() {
        assert!(matches!(
            r("/api/v1/pods"),
            Route::Collection {
                namespace: None,
                ..
            }
        ));
        assert!(matches!(
            r("/api/v1/namespaces/a/pods/p/status"),
            Route::Object { status: true, ref name, .. } if name == "p"
        ));
        assert!(matches!(
            r("/api/v1/namespaces/a"),
            Route::Object { ref name, ref rt, .. } if name == "a" && rt.is_namespace()
        ));
        assert!(matches!(
            r("/api/v1/namespaces/a/status"),
            Route::Object { status: true, ref rt, .. } if rt.is_namespace()
        ));
        assert!(matches!(
            r("/apis/shardring.io/v1alpha1/namespaces/a/shardgroups"),
            Route::Collection {
                namespace: Some(_),
                ..
            }
        ));
        let reg = Registry::new();
        // Discovery lists are not served.
        assert_eq!(
            route(&reg, "/apis/coordination.k8s.io/v1")
                .unwrap_err()
                .code,
            404
        );
        assert_eq!(route(&reg, "/apis").unwrap_err().code, 404);
        assert_eq!(
            route(&reg, "/api/v1/namespaces/a/configmaps/c/status")
                .unwrap_err()
                .code,
            404
        );
        assert_eq!(route(&reg, "/api/v1/widgets").unwrap_err().code, 404);
        assert_eq!(route(&reg, "/api/v1/pods/p").unwrap_err().code, 404);
    }
}
