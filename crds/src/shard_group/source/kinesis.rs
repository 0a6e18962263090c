//! A Kinesis data stream as a source, and the optional KCL lease table read
//! as evidence of handoffs and parent completion; with the accessors that
//! read a stream's name and region from its ARN.

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::shard_group::error::positive;
use crate::shard_group::{ENDPOINT_URL, REGION, SpecError};

/// A Kinesis data stream, read with ListShards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.streamName) != has(self.streamARN)").message("set exactly one of kinesis.streamName or kinesis.streamARN"),
    validation = Rule::new("(has(self.streamName) ? self.streamName : '') == (has(oldSelf.streamName) ? oldSelf.streamName : '') && (has(self.streamARN) ? self.streamARN : '') == (has(oldSelf.streamARN) ? oldSelf.streamARN : '')").message("the stream cannot be changed (shard ids repeat across streams, so leases and the published assignment cannot carry over); create a new ShardGroup instead")
)]
pub struct KinesisSource {
    /// Stream name (1 to 128 of `a-z A-Z 0-9 _ . -`); set this or `streamARN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z0-9_.-]{1,128}$')").message("kinesis.streamName must be 1 to 128 characters of a-z, A-Z, 0-9, '_', '.', '-'"))]
    pub stream_name: Option<String>,
    /// Stream ARN, `arn:aws:kinesis:<region>:<account>:stream/<name>`; set this
    /// or `streamName`.
    #[serde(default, rename = "streamARN", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("size(self) <= 2048 && self.matches('^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:stream/[a-zA-Z0-9_.-]{1,128}$')").message("kinesis.streamARN must look like arn:aws:kinesis:us-east-1:123456789012:stream/my-stream"))]
    pub stream_arn: Option<String>,
    /// AWS region, e.g. `us-east-1`; defaults to the region in the stream ARN,
    /// else the operator's region from the default AWS chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(REGION).message("kinesis.region must be an AWS region such as us-east-1"))]
    pub region: Option<String>,
    /// Endpoint URL override (`http://` or `https://`), for VPC endpoints and
    /// local emulators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(ENDPOINT_URL).message("kinesis.endpoint must be an http:// or https:// URL"))]
    pub endpoint: Option<String>,
    /// How often the shard list is refreshed (jittered): a duration of at least
    /// 1s such as `30s` (the default) or `1m`.
    #[serde(default = "default_refresh_interval")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) >= duration('1s')").message("kinesis.refreshInterval must be a duration of at least 1s, such as 30s or 1m"))]
    pub refresh_interval: String,
}

/// A DynamoDB lease table in the KCL format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseTableSpec {
    /// Table name (the KCL application name by default): 3 to 255 of
    /// `a-z A-Z 0-9 _ . -`.
    #[schemars(length(max = 255))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z0-9_.-]{3,255}$')").message("leaseTable.tableName must be a DynamoDB table name: 3 to 255 characters of a-z, A-Z, 0-9, '_', '.', '-'"))]
    pub table_name: String,
    /// AWS region; defaults to the Kinesis source's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(REGION).message("leaseTable.region must be an AWS region such as us-east-1"))]
    pub region: Option<String>,
    /// Endpoint URL override (`http://` or `https://`), for VPC endpoints and
    /// local emulators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(ENDPOINT_URL).message("leaseTable.endpoint must be an http:// or https:// URL"))]
    pub endpoint: Option<String>,
}

fn default_refresh_interval() -> String {
    "30s".into()
}

impl KinesisSource {
    /// Short description for the `Source` printer column: `kinesis:<stream>`.
    pub(super) fn summary(&self) -> String {
        format!("kinesis:{}", self.stream_name().unwrap_or("?"))
    }

    /// `refreshInterval` as a duration.
    pub fn refresh_interval(&self) -> Result<Duration, SpecError> {
        positive("source.kinesis.refreshInterval", &self.refresh_interval)
    }

    /// The stream name: `streamName`, else the name part of `streamARN`.
    pub fn stream_name(&self) -> Option<&str> {
        self.stream_name.as_deref().or_else(|| {
            self.stream_arn
                .as_deref()?
                .rsplit_once(":stream/")
                .map(|(_, name)| name)
        })
    }

    /// The region: `region`, else the region field of `streamARN`.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref().or_else(|| {
            self.stream_arn
                .as_deref()?
                .split(':')
                .nth(3)
                .filter(|r| !r.is_empty())
        })
    }
}
