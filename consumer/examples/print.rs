//! The smallest complete consumer (the example in docs/consumer.md): reads
//! its view from the mounted assignment ConfigMap, holds KCL leases only for
//! its active shards, prints each record, and drains on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use shardring_consumer::lease::{LeaseConfig, LeaseManager};
use shardring_consumer::reader::Record;
use shardring_consumer::view::file::{FileFormat, FileSource};
use shardring_consumer::worker::{
    RecordHandler, ShardContext, Worker, WorkerConfig, termination_signal,
};
use shardring_consumer::{clients, view};

struct Print;

impl RecordHandler for Print {
    async fn handle(&self, ctx: &ShardContext, records: &[Record]) -> anyhow::Result<()> {
        for r in records {
            println!(
                "{} {} {}",
                ctx.shard,
                r.sequence_number,
                String::from_utf8_lossy(&r.data)
            );
        }
        Ok(()) // the batch is checkpointed after this returns
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pod = std::env::var("POD_NAME")?;
    let aws = clients::sdk_config(None, false).await;
    let (publisher, assignment) = view::channel();
    FileSource {
        path: "/etc/shardring".into(),
        pod: pod.clone(),
        format: FileFormat::Document,
        interval: Duration::from_millis(500),
    }
    .spawn(publisher);
    let failover = Duration::from_secs(10);
    let leases = Arc::new(LeaseManager::new(
        clients::dynamodb_client(&aws, None),
        LeaseConfig {
            table: "orders-leases".into(),
            worker_id: pod,
            failover,
        },
    ));
    let report = Worker::new(
        clients::kinesis_client(&aws, None),
        leases,
        assignment,
        Arc::new(Print),
        WorkerConfig::new("orders", failover),
    )
    .run(termination_signal())
    .await;
    eprintln!("done: {report:?}");
    Ok(())
}
