//! How a [`ShardSource`] is read and written: as the map every manifest
//! holds, one optional field per kind (`{kinesis: {...}}`), whatever the
//! format. Serde's own externally tagged enum would do in JSON, but YAML
//! readers (serde_yaml) take an enum as a YAML tag (`!static`) and refuse
//! the map form, so a sample read with serde_yaml would no longer parse.
//! Reading a map with no kind or several fails with the message the CEL
//! rule gives.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{KinesisSource, RabbitMqSource, ShardSource, StaticSource};

/// What a source that names no kind, or several, is told.
const EXACTLY_ONE: &str = "set exactly one of source.kinesis, source.static or source.rabbitmq";

/// The map as read: every kind optional.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Fields {
    #[serde(default)]
    kinesis: Option<KinesisSource>,
    #[serde(default, rename = "static")]
    static_source: Option<StaticSource>,
    #[serde(default)]
    rabbitmq: Option<RabbitMqSource>,
}

/// The map as written: the one kind set.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FieldsRef<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kinesis: Option<&'a KinesisSource>,
    #[serde(rename = "static", skip_serializing_if = "Option::is_none")]
    static_source: Option<&'a StaticSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rabbitmq: Option<&'a RabbitMqSource>,
}

impl Serialize for ShardSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = FieldsRef {
            kinesis: None,
            static_source: None,
            rabbitmq: None,
        };
        match self {
            Self::Kinesis(kinesis) => fields.kinesis = Some(kinesis),
            Self::Static(fixed) => fields.static_source = Some(fixed),
            Self::Rabbitmq(rabbitmq) => fields.rabbitmq = Some(rabbitmq),
        }
        fields.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ShardSource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = Fields::deserialize(deserializer)?;
        match (fields.kinesis, fields.static_source, fields.rabbitmq) {
            (Some(kinesis), None, None) => Ok(Self::Kinesis(kinesis)),
            (None, Some(fixed), None) => Ok(Self::Static(fixed)),
            (None, None, Some(rabbitmq)) => Ok(Self::Rabbitmq(rabbitmq)),
            _ => Err(D::Error::custom(EXACTLY_ONE)),
        }
    }
}
