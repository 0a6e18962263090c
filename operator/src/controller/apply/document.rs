//! The document's write: the ConfigMap `<sg>-assignment` that carries it
//! (owner reference to the ShardGroup, controller and blockOwnerDeletion;
//! the `managed-by` and group labels) and the one request that publishes
//! it, always conditioned on the ConfigMap the reconcile observed
//! ([`PublishedVersion`]), so a write the client gave up on (a timeout) that
//! lands late can never replace a newer document with an older one:
//!
//! - when a ConfigMap was observed, an update (PUT) carrying the observed
//!   `metadata.resourceVersion` (409 Conflict once the ConfigMap changed,
//!   404 once it was deleted: either way [`ApplyError::ConfigMapConflict`]);
//! - when none was observed (the first publish, or a lost ConfigMap rebuilt
//!   from the pods' annotations), a create (POST, 409 AlreadyExists when one
//!   appeared meanwhile). Never an unconditional write that could create it.
//!
//! Why an update and not server-side apply: on a real API server an apply
//! of the document's ConfigMap took about twice as long as a PUT of the same
//! bytes, and about as long as a JSON patch with a `test` of the version
//! (`cargo bench -p shardring --bench apiserver_scale -- --verbs` prints
//! the times), and it sits on the path from a pod event to the
//! published document. The update replaces the whole object, so it carries
//! over what others set on the observed ConfigMap: labels, annotations,
//! finalizers, other owner references and data keys other than the
//! document's two. The document's keys are replaced whole: the key of the
//! encoding not written (plain `assignment.json` or gzip
//! `assignment.json.gz`) goes with the same request.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource, ResourceExt};
use shardring_core::codec;
use shardring_core::observation::PublishedVersion;

use super::error::ApplyError;
use super::names::{GROUP_LABEL, MANAGED_BY, MANAGED_BY_LABEL, MANAGER};
use crate::controller::own_writes::OwnWrites;
use crate::crds::assignment::{CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY};
use crate::crds::{AssignmentDocument, ShardGroup};

/// The ConfigMap that carries `doc` for `group`.
pub fn document_config_map(
    group: &ShardGroup,
    doc: &AssignmentDocument,
) -> Result<ConfigMap, ApplyError> {
    encoded_config_map(group, codec::encode(doc)?)
}

/// The ConfigMap that carries an encoded document for `group`.
fn encoded_config_map(
    group: &ShardGroup,
    encoded: codec::EncodedDocument,
) -> Result<ConfigMap, ApplyError> {
    let mut owner = group
        .controller_owner_ref(&())
        .ok_or(ApplyError::Incomplete("uid"))?;
    // Foreground deletion of the ShardGroup waits for its document.
    owner.block_owner_deletion = Some(true);
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(group.config_map_name()),
            namespace: group.namespace(),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
                (GROUP_LABEL.to_owned(), group.name_any()),
            ])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: (!encoded.data.is_empty()).then_some(encoded.data),
        binary_data: (!encoded.binary_data.is_empty()).then_some(encoded.binary_data),
        ..Default::default()
    })
}

/// The body of the update that replaces `observed` (the ConfigMap at
/// `version`) with `document`: the document's own labels, owner reference
/// and keys over everything else `observed` holds, at `version`.
pub fn update_body(document: ConfigMap, observed: Option<&ConfigMap>, version: &str) -> ConfigMap {
    let mut body = document;
    body.metadata.resource_version = Some(version.to_owned());
    let Some(observed) = observed else {
        return body;
    };
    let meta = &observed.metadata;
    let ours = body.metadata.labels.take().unwrap_or_default();
    let mut labels = meta.labels.clone().unwrap_or_default();
    labels.extend(ours);
    body.metadata.labels = Some(labels);
    body.metadata.annotations.clone_from(&meta.annotations);
    body.metadata.finalizers.clone_from(&meta.finalizers);
    let ours = body.metadata.owner_references.take().unwrap_or_default();
    let mut owners: Vec<_> = meta
        .owner_references
        .iter()
        .flatten()
        .filter(|o| ours.iter().all(|mine| mine.uid != o.uid))
        .cloned()
        .collect();
    owners.extend(ours);
    body.metadata.owner_references = Some(owners);
    body.data = merged(observed.data.as_ref(), body.data.take());
    body.binary_data = merged(observed.binary_data.as_ref(), body.binary_data.take());
    body
}

/// `observed`'s entries but the document's keys, then `ours`; `None` when
/// empty.
fn merged<V: Clone>(
    observed: Option<&BTreeMap<String, V>>,
    ours: Option<BTreeMap<String, V>>,
) -> Option<BTreeMap<String, V>> {
    let mut all: BTreeMap<String, V> = observed
        .into_iter()
        .flatten()
        .filter(|(key, _)| *key != CONFIGMAP_KEY && *key != CONFIGMAP_GZIP_KEY)
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    all.extend(ours.into_iter().flatten());
    (!all.is_empty()).then_some(all)
}

/// Publishes the document's ConfigMap, conditioned on `published`: a create
/// when no ConfigMap was observed, else an update of `observed` carrying its
/// resourceVersion. A 409 (or a 404 on the update) is
/// [`ApplyError::ConfigMapConflict`]. Returns the resourceVersion at which
/// the API server stores exactly the document sent (`None` when the stored
/// content differs from it).
///
/// The write is announced to `own` before it is sent, so its echo wakes
/// nothing even when the watch delivers it before the answer; `wake` wakes
/// the group for any other change of the ConfigMap the watch delivered
/// meanwhile (see [`OwnWrites::begin`]).
pub(crate) async fn publish_document(
    client: &Client,
    group: &ShardGroup,
    encoded: codec::EncodedDocument,
    published: &PublishedVersion,
    observed: Option<&ConfigMap>,
    own: &OwnWrites,
    wake: impl FnOnce() + Send + 'static,
) -> Result<Option<String>, ApplyError> {
    let cm = encoded_config_map(group, encoded)?;
    let name = group.config_map_name();
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &group.namespace().unwrap_or_default());
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let flight = own.begin::<ConfigMap>(&group.namespace().unwrap_or_default(), &name, wake);
    let (sent, written) = match published {
        PublishedVersion::Absent => {
            let written = api.create(&params, &cm).await;
            (cm, written)
        }
        PublishedVersion::At(version) => {
            let body = update_body(cm, observed, version);
            let written = api.replace(&name, &params, &body).await;
            (body, written)
        }
    };
    let written = written.map_err(|source| match &source {
        kube::Error::Api(status)
            if status.code == 409
                || (status.code == 404 && matches!(published, PublishedVersion::At(_))) =>
        {
            ApplyError::ConfigMapConflict {
                name: name.clone(),
                expected: published.clone(),
                source,
            }
        }
        _ => ApplyError::ConfigMap {
            name: name.clone(),
            source,
        },
    })?;
    let version = stored_as_sent(&sent, &written);
    // Its echo is what this reconcile wrote: no need to wake for it.
    flight.land(version.is_some().then_some(&written));
    Ok(version)
}

/// The resourceVersion of `written` when its data keys hold exactly what
/// `sent` carried.
fn stored_as_sent(sent: &ConfigMap, written: &ConfigMap) -> Option<String> {
    let same = same_entries(sent.data.as_ref(), written.data.as_ref())
        && same_entries(sent.binary_data.as_ref(), written.binary_data.as_ref());
    same.then(|| written.metadata.resource_version.clone())
        .flatten()
        .filter(|v| !v.is_empty())
}

/// Whether two optional maps hold the same entries (absent = empty).
fn same_entries<V: PartialEq>(
    a: Option<&BTreeMap<String, V>>,
    b: Option<&BTreeMap<String, V>>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        (Some(m), None) | (None, Some(m)) => m.is_empty(),
        (None, None) => true,
    }
}

#[cfg(test)]
mod tests;
