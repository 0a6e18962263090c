//! Creating a KCL-layout lease table (tests, demos, first deploys): hash key
//! `leaseKey` (S), on-demand billing; waits until the table is ACTIVE.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
};

/// Why the table could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// CreateTable or DescribeTable failed.
    #[error("lease table {table}: {detail}")]
    DynamoDb {
        /// The table.
        table: String,
        /// What failed.
        detail: String,
    },
    /// The table did not become ACTIVE in time.
    #[error("lease table {0} not ACTIVE within the timeout")]
    Timeout(String),
}

/// Creates `table` unless it exists, then waits up to `timeout` for ACTIVE.
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    timeout: Duration,
) -> Result<(), TableError> {
    let fail = |detail: String| TableError::DynamoDb {
        table: table.to_owned(),
        detail,
    };
    let attribute = AttributeDefinition::builder()
        .attribute_name("leaseKey")
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let key = KeySchemaElement::builder()
        .attribute_name("leaseKey")
        .key_type(KeyType::Hash)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let created = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attribute)
        .key_schema(key)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    if let Err(error) = created {
        let exists = error
            .as_service_error()
            .is_some_and(|e| e.is_resource_in_use_exception());
        if !exists {
            return Err(fail(format!(
                "CreateTable: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(&error)
            )));
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        let status = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .ok()
            .and_then(|out| out.table().and_then(|t| t.table_status().cloned()));
        if status == Some(TableStatus::Active) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TableError::Timeout(table.to_owned()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
