//! Handlers per route and verb: `/version`, get, list (with delay and
//! selectors), watch, create, replace, patch by content type, delete (one or
//! a collection), and TokenReviews. They translate HTTP into store calls
//! and store results into the real server's response shapes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

use super::exchange::{Body, Req, Shared, json_response};
use super::resources::ResourceType;
use super::route::{Route, route};
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::status::{ApiError, success_status};
use super::store::delete::{DeleteOpts, Deleted};
use super::store::read::{Page, WatchFrom};
use super::store::write::UpdateOp;
use super::store::{Written, partial_value};
use super::watch::{self, WatchSpec};

/// A watch with no `timeoutSeconds` lasts this long.
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).expect("JSON values serialize"))
}

fn ok_json(code: u16, v: &Value) -> Response<Body> {
    json_response(code, to_bytes(v))
}

/// `GET /version`, which clients use to tell that an API server answers.
/// The discovery lists (`/api`, `/apis`) are not served: nothing that runs
/// against the mock discovers kinds (kube's typed clients know their paths).
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "gitVersion": "v1.35.0-shardring-mock",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// Handles an authorized request that passed the fault checks.
pub(crate) async fn dispatch(shared: &Arc<Shared>, req: Req) -> Result<Response<Body>, ApiError> {
    let registry = &shared.store.registry;
    let method = req.method.as_str();
    match route(registry, &req.path)? {
        Route::Version => Ok(ok_json(200, &version())),
        Route::Health => Ok(json_response(200, Bytes::from_static(b"ok"))),
        Route::Collection { rt, .. } if rt.is_token_review() => match method {
            "POST" => token_review(shared, &req),
            _ => Err(ApiError::method_not_allowed(method)),
        },
        Route::Collection { rt, namespace } => match method {
            "GET" if req.flag("watch") => watch(shared, &req, &rt, namespace),
            "GET" => list(shared, &req, &rt, namespace).await,
            "POST" if namespace.is_some() || !rt.namespaced => {
                let body = req.json()?;
                let w = shared.store.create(
                    &rt,
                    namespace.as_deref(),
                    body,
                    &req.manager(),
                    false,
                    false,
                )?;
                Ok(object_response(201, &w, req.partial))
            }
            "DELETE" => delete_collection(shared, &req, &rt, namespace),
            _ => Err(ApiError::method_not_allowed(method)),
        },
        Route::Object { rt, .. } if rt.is_token_review() => {
            Err(ApiError::method_not_allowed(method))
        }
        Route::Object {
            rt,
            namespace,
            name,
            status,
        } => {
            let ns = namespace.as_deref();
            match method {
                "GET" => {
                    let (obj, bytes) = shared
                        .store
                        .get(&rt, ns, &name)
                        .ok_or_else(|| ApiError::not_found(&rt, &name))?;
                    Ok(if req.partial {
                        ok_json(200, &partial_value(&obj))
                    } else {
                        json_response(200, bytes)
                    })
                }
                "PUT" => {
                    let op = UpdateOp::Replace(req.json()?);
                    let w = shared
                        .store
                        .update(&rt, ns, &name, status, op, &req.manager())?;
                    Ok(object_response(200, &w, req.partial))
                }
                "PATCH" => {
                    let (op, manager) = patch_op(&req)?;
                    let w = shared.store.update(&rt, ns, &name, status, op, &manager)?;
                    Ok(object_response(
                        if w.created { 201 } else { 200 },
                        &w,
                        req.partial,
                    ))
                }
                "DELETE" if !status => {
                    let opts = delete_opts(&req)?;
                    match shared.store.delete(&rt, ns, &name, &opts)? {
                        Deleted::Pending(w) => Ok(object_response(200, &w, req.partial)),
                        Deleted::Removed(w) if rt.is_pod() => {
                            Ok(object_response(200, &w, req.partial))
                        }
                        Deleted::Removed(w) => Ok(ok_json(
                            200,
                            &success_status(&rt, &name, w.obj["metadata"]["uid"].as_str()),
                        )),
                    }
                }
                _ => Err(ApiError::method_not_allowed(method)),
            }
        }
    }
}

fn object_response(code: u16, w: &Written, partial: bool) -> Response<Body> {
    if partial {
        ok_json(code, &partial_value(&w.obj))
    } else {
        json_response(code, w.bytes.clone())
    }
}

/// The update a PATCH asks for, by content type, and its field manager.
fn patch_op(req: &Req) -> Result<(UpdateOp, String), ApiError> {
    let op = match req.content_type.as_str() {
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            if req.q("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: \
                     is required for apply patch",
                ));
            }
            UpdateOp::Apply { body: req.json()? }
        }
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            UpdateOp::Merge(req.json()?)
        }
        "application/json-patch+json" => UpdateOp::Json(
            serde_json::from_slice(&req.body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?,
        ),
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                ),
            ));
        }
    };
    Ok((op, req.manager()))
}

fn delete_opts(req: &Req) -> Result<DeleteOpts, ApiError> {
    let mut opts = DeleteOpts::default();
    if !req.body.is_empty() {
        let body = req.json()?;
        opts.grace = body["gracePeriodSeconds"].as_i64();
        if !body["preconditions"].is_null() {
            return Err(ApiError::bad_request(
                "delete preconditions are not served by the mock API server",
            ));
        }
    }
    if let Some(g) = req.q("gracePeriodSeconds") {
        opts.grace = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request("invalid gracePeriodSeconds"))?,
        );
    }
    Ok(opts)
}

fn filter(req: &Req, namespace: Option<String>) -> Result<Filter, ApiError> {
    Ok(Filter {
        namespace,
        labels: LabelSelector::parse(req.q("labelSelector").unwrap_or_default())?,
        fields: FieldSelector::parse(req.q("fieldSelector").unwrap_or_default())?,
    })
}

/// A list item without `apiVersion`/`kind`, as typed lists carry them.
struct Item<'a>(&'a Value);

impl Serialize for Item<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_object() {
            Some(map) => s.collect_map(
                map.iter()
                    .filter(|(k, _)| k.as_str() != "apiVersion" && k.as_str() != "kind"),
            ),
            None => self.0.serialize(s),
        }
    }
}

fn list_body(rt: &ResourceType, page: &Page, partial: bool) -> Bytes {
    let metadata = json!({ "resourceVersion": page.rv.to_string() });
    let (kind, api_version) = if partial {
        (
            "PartialObjectMetadataList".to_owned(),
            "meta.k8s.io/v1".to_owned(),
        )
    } else {
        (rt.list_kind(), rt.api_version())
    };
    let head = json!({ "kind": kind, "apiVersion": api_version, "metadata": metadata }).to_string();
    let mut out = Vec::with_capacity(head.len() + page.items.len() * 1024);
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let written = if partial {
            serde_json::to_writer(&mut out, &partial_value(item))
        } else {
            serde_json::to_writer(&mut out, &Item(item))
        };
        written.expect("JSON values serialize");
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

async fn list(
    shared: &Arc<Shared>,
    req: &Req,
    rt: &ResourceType,
    namespace: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let delay = shared.faults.knobs().list_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let filter = filter(req, namespace)?;
    let page = shared.store.list(rt, &filter);
    Ok(json_response(200, list_body(rt, &page, req.partial)))
}

fn watch(
    shared: &Arc<Shared>,
    req: &Req,
    rt: &ResourceType,
    namespace: Option<String>,
) -> Result<Response<Body>, ApiError> {
    if req.flag("sendInitialEvents") {
        return Err(ApiError::bad_request(
            "streaming lists (sendInitialEvents) are not served by the mock API server",
        ));
    }
    let filter = filter(req, namespace)?;
    let rv = req.q("resourceVersion").unwrap_or_default();
    let from = if rv.is_empty() || rv == "0" {
        WatchFrom::Current
    } else {
        WatchFrom::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        )
    };
    let timeout = req
        .q("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(DEFAULT_WATCH, Duration::from_secs);
    let lifetime = shared.options.max_watch.map_or(timeout, |m| m.min(timeout));
    let spec = WatchSpec {
        resource: rt.key(),
        api_version: rt.api_version(),
        kind: rt.kind.clone(),
        bookmarks: req.flag("allowWatchBookmarks"),
        partial: req.partial,
        lifetime,
        bookmark_interval: shared
            .options
            .bookmark_interval
            .max(Duration::from_millis(10)),
        filter: filter.clone(),
    };
    let body: Body = match shared.store.start_watch(rt, &filter, from) {
        Ok(start) => StreamBody::new(
            watch::stream(start, spec, shared.shutdown.clone())
                .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))),
        )
        .boxed_unsync(),
        Err(e) if e.code == 410 => {
            let line = format!("{}\n", json!({ "type": "ERROR", "object": e.to_status() }));
            http_body_util::Full::new(Bytes::from(line)).boxed_unsync()
        }
        Err(e) => return Err(e),
    };
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn delete_collection(
    shared: &Arc<Shared>,
    req: &Req,
    rt: &ResourceType,
    namespace: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let filter = filter(req, namespace)?;
    let opts = delete_opts(req)?;
    let page = shared.store.list(rt, &filter);
    let rt = shared
        .store
        .registry
        .by_path(&rt.group, &rt.version, &rt.plural)
        .ok_or_else(|| ApiError::no_route(&req.path))?;
    let mut items = Vec::new();
    for obj in &page.items {
        let (ns, name) = (
            obj["metadata"]["namespace"].as_str(),
            obj["metadata"]["name"].as_str().unwrap_or_default(),
        );
        match shared.store.delete(&rt, ns, name, &opts) {
            Ok(Deleted::Pending(w) | Deleted::Removed(w)) => items.push(w.obj),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let page = Page {
        rv: shared.store.resource_version(),
        items,
    };
    Ok(json_response(200, list_body(&rt, &page, req.partial)))
}

fn token_review(shared: &Arc<Shared>, req: &Req) -> Result<Response<Body>, ApiError> {
    let body = req.json()?;
    let spec = &body["spec"];
    let token = spec["token"].as_str().unwrap_or_default();
    let audiences = super::tokens::strings(&spec["audiences"]);
    let status = shared.faults.review(token, &audiences);
    Ok(ok_json(
        201,
        &json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": { "creationTimestamp": null },
            "spec": spec,
            "status": status,
        }),
    ))
}
