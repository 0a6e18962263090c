//! View sources that poll a file kubelet maintains: the mounted assignment
//! ConfigMap (a directory holding `assignment.json` or `assignment.json.gz`,
//! or one of those files) or the downward-API annotations file. Kubelet
//! replaces both atomically (a symlink swap of the `..data` directory), so a
//! read never sees half a file; polling the contents at an interval notices
//! every swap without inotify (which misses symlink swaps on some setups).

use std::path::{Path, PathBuf};
use std::time::Duration;

use shardring_crds::assignment::{CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY, PodView};
use tokio::task::JoinHandle;

use super::ViewPublisher;
use super::parse::{self, ParseError};

/// Why a file source could not produce a view.
#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Its contents are not a valid view.
    #[error("{path}: {source}")]
    Parse {
        /// The path.
        path: String,
        /// The parse error.
        source: ParseError,
    },
}

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// The whole assignment document (a mounted ConfigMap): this pod's entry is picked.
    Document,
    /// The downward-API annotations file: the annotation of this ShardGroup is read.
    Annotations {
        /// `<namespace>/<name>` or the ShardGroup's name.
        shard_group: String,
    },
}

/// A polled file holding this pod's view.
#[derive(Debug, Clone)]
pub struct FileSource {
    /// A file, or (for [`FileFormat::Document`]) the ConfigMap's mount directory.
    pub path: PathBuf,
    /// This pod's name.
    pub pod: String,
    /// What the file holds.
    pub format: FileFormat,
    /// How often to look again.
    pub interval: Duration,
}

impl FileSource {
    /// Reads the view once; `Ok(None)` when the file exists but holds no
    /// annotation for this pod: not written yet, or removed because the pod
    /// holds nothing (the poller then withdraws every shard).
    pub fn read_once(&self) -> Result<Option<PodView>, FileSourceError> {
        let path = self.resolve();
        let display = path.display().to_string();
        let bytes = std::fs::read(&path).map_err(|source| FileSourceError::Io {
            path: display.clone(),
            source,
        })?;
        let parse_error = |source| FileSourceError::Parse {
            path: display.clone(),
            source,
        };
        match &self.format {
            FileFormat::Document => {
                let document = parse::document_from_bytes(&bytes).map_err(parse_error)?;
                Ok(Some(parse::view_from_document(&document, &self.pod)))
            }
            FileFormat::Annotations { shard_group } => {
                let text = String::from_utf8_lossy(&bytes);
                parse::view_from_annotations_file(&text, shard_group).map_err(parse_error)
            }
        }
    }

    /// The file to read: for a directory, `assignment.json` when present,
    /// else `assignment.json.gz` (exactly one exists in a mounted ConfigMap).
    fn resolve(&self) -> PathBuf {
        if !self.path.is_dir() {
            return self.path.clone();
        }
        let plain = self.path.join(CONFIGMAP_KEY);
        if plain.exists() {
            plain
        } else {
            self.path.join(CONFIGMAP_GZIP_KEY)
        }
    }

    /// Polls the file until every reader of `publisher` is gone, offering
    /// each view read. When a view this file held disappears, every shard is
    /// withdrawn unless another source offered a newer view since
    /// ([`ViewPublisher::withdraw_if_newest`]). Read errors are logged and never clear the view: the
    /// last good view stays (a missing file mid-swap is not a revoke).
    pub fn spawn(self, publisher: ViewPublisher) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut last_error = None::<String>;
            // The epoch of the last view this file held: its annotation's
            // disappearance withdraws only views no newer than that (another
            // source may be ahead of the kubelet's refresh).
            let mut last_epoch = None::<u64>;
            loop {
                let source = self.clone();
                let read = tokio::task::spawn_blocking(move || source.read_once()).await;
                match read {
                    Ok(Ok(Some(view))) => {
                        last_error = None;
                        last_epoch = Some(view.epoch);
                        if publisher.offer(view.clone()) {
                            tracing::info!(epoch = view.epoch, active = ?view.active, revoking = ?view.revoking, "assignment view changed");
                        }
                    }
                    Ok(Ok(None)) => {
                        last_error = None;
                        if let Some(epoch) = last_epoch
                            && publisher.withdraw_if_newest(epoch)
                        {
                            tracing::info!("assignment annotation removed: no shards");
                        }
                    }
                    Ok(Err(error)) => {
                        let text = error.to_string();
                        if last_error.as_ref() != Some(&text) {
                            tracing::warn!(error = %text, "cannot read the assignment view; keeping the last one");
                        }
                        last_error = Some(text);
                    }
                    Err(join) => tracing::warn!(error = %join, "view poll task failed"),
                }
                if publisher.is_closed() {
                    return;
                }
                tokio::time::sleep(self.interval).await;
            }
        })
    }
}

/// Writes `bytes` to `path` atomically (temp file + rename), the way tests
/// and the demo stand in for kubelet's volume updates.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardring_crds::assignment::{AssignmentDocument, PodAssignment};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "shardring-consumer-{name}-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn document(epoch: u64, active: &[&str]) -> Vec<u8> {
        let mut doc = AssignmentDocument::new("ns/g", epoch);
        doc.pods.insert(
            "pod-a".into(),
            PodAssignment {
                active: active.iter().map(|s| (*s).to_owned()).collect(),
                ..PodAssignment::default()
            },
        );
        serde_json::to_vec(&doc).unwrap()
    }

    #[tokio::test]
    async fn polls_a_mounted_configmap_directory() {
        let dir = temp_dir("cm");
        write_atomically(&dir.join(CONFIGMAP_KEY), &document(1, &["s1"])).unwrap();
        let (publisher, mut view) = crate::view::channel();
        let task = FileSource {
            path: dir.clone(),
            pod: "pod-a".into(),
            format: FileFormat::Document,
            interval: Duration::from_millis(10),
        }
        .spawn(publisher);
        assert_eq!(view.first().await.unwrap().active, vec!["s1"]);
        // A stale document (older epoch) is ignored, a newer one is taken.
        write_atomically(&dir.join(CONFIGMAP_KEY), &document(0, &["s9"])).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(view.can_acquire("s1"));
        write_atomically(&dir.join(CONFIGMAP_KEY), &document(2, &["s2"])).unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), view.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(next.epoch, 2);
        assert!(!view.can_acquire("s1"));
        // A broken file keeps the last good view.
        write_atomically(&dir.join(CONFIGMAP_KEY), b"{broken").unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(view.can_acquire("s2"));
        task.abort();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_an_annotations_file() {
        let dir = temp_dir("annotations");
        let path = dir.join("annotations");
        let value = PodView {
            epoch: 5,
            active: vec!["s1".into()],
            ..PodView::default()
        }
        .to_annotation()
        .replace('"', "\\\"");
        std::fs::write(&path, format!("assignment.shardring.io/g=\"{value}\"\n")).unwrap();
        let source = FileSource {
            path: path.clone(),
            pod: "pod-a".into(),
            format: FileFormat::Annotations {
                shard_group: "ns/g".into(),
            },
            interval: Duration::from_secs(1),
        };
        assert_eq!(source.read_once().unwrap().unwrap().epoch, 5);
        std::fs::write(&path, "other=\"x\"\n").unwrap();
        assert_eq!(source.read_once().unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
