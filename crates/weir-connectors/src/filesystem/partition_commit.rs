//! Flink's partition commit with its `success-file` policy: once a partition directory is
//! complete, an empty `_SUCCESS` file (`sink.partition-commit.success-file.name`) is written
//! into it, for whatever reads the table downstream (Hive, Spark, a batch job) to wait on.
//!
//! When a partition is complete is Flink's `sink.partition-commit.trigger`:
//! - `process-time` (the default): `sink.partition-commit.delay` after its first rows were
//!   committed, by the wall clock (imprecise, as in Flink: rows may still come).
//! - `partition-time`: when the watermark passes the partition's time plus the delay. Its
//!   time comes from its values through `partition.time-extractor.timestamp-pattern` (`$dt
//!   $hm:00`; by default the first partition value), read as `yyyy-MM-dd HH:mm:ss` (or a
//!   date). The sink's subtasks each see their own watermark, so each writes its watermark at
//!   every completed checkpoint, after its files are in place, into `.pending/` (one marker per
//!   subtask and parallelism); after a commit a subtask takes the least of the markers of
//!   every subtask, and commits every partition of the table that this watermark completes.
//!   So no partition is marked while a subtask may still hold rows for it in a checkpoint not
//!   yet committed. (Flink runs a single committer task for the same reason.)
//!
//! At the end of a bounded input every partition written is committed, as in Flink. Marking
//! twice is harmless: the file is empty.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::NaiveDateTime;

use super::files_under;
use crate::options::ConnectorOptions;
use crate::{Error, Result};

/// What completes a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    ProcessTime,
    PartitionTime,
}

/// A table's partition commit (only with policy `success-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCommit {
    pub trigger: Trigger,
    pub delay_ms: i64,
    pub success_file: String,
    /// `$name` placeholders for partition values; `None`: the first value.
    pattern: Option<String>,
}

/// The marker of a subtask's committed watermark, under `.pending/`.
fn marker(subtask: usize, parallelism: usize) -> String {
    format!(".watermark-{subtask:04}-of-{parallelism:04}")
}

impl PartitionCommit {
    /// The commit a partitioned table's options ask for, if any; the error names the option.
    pub fn of(options: &ConnectorOptions, partitioned: bool) -> std::result::Result<Option<Self>, String> {
        let Some(policy) = options.get("sink.partition-commit.policy.kind") else {
            return Ok(None);
        };
        if !partitioned {
            return Err("a partition commit policy needs partition columns (PARTITIONED BY (...))".into());
        }
        if policy != "success-file" {
            return Err(format!(
                "'sink.partition-commit.policy.kind' = '{policy}' is not supported: weir commits partitions with 'success-file' (no metastore, no custom policy)"
            ));
        }
        let trigger = match options.get("sink.partition-commit.trigger") {
            None | Some("process-time") => Trigger::ProcessTime,
            Some("partition-time") => Trigger::PartitionTime,
            Some(other) => {
                return Err(format!(
                    "'sink.partition-commit.trigger' = '{other}' is not 'process-time' or 'partition-time'"
                ));
            }
        };
        if let Some(kind) = options.get("partition.time-extractor.kind").filter(|k| *k != "default") {
            return Err(format!("'partition.time-extractor.kind' = '{kind}' is not supported: only 'default'"));
        }
        if let Some(formatter) = options.get("partition.time-extractor.timestamp-formatter") {
            return Err(format!(
                "'partition.time-extractor.timestamp-formatter' = '{formatter}' is not supported: partition times are read as yyyy-MM-dd HH:mm:ss"
            ));
        }
        let delay = options.duration("sink.partition-commit.delay").unwrap_or_default();
        Ok(Some(Self {
            trigger,
            delay_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
            success_file: options.get("sink.partition-commit.success-file.name").unwrap_or("_SUCCESS").to_string(),
            pattern: options.get("partition.time-extractor.timestamp-pattern").map(str::to_string),
        }))
    }

    /// The time of a partition with `values` (in the PARTITIONED BY order), in ms.
    pub fn partition_time(&self, values: &[(String, String)]) -> Option<i64> {
        let text = match &self.pattern {
            Some(pattern) => {
                // Longer names first, so `$dt` does not take part of `$dtx`.
                let mut sorted: Vec<&(String, String)> = values.iter().collect();
                sorted.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
                sorted.iter().fold(pattern.clone(), |text, (name, value)| text.replace(&format!("${name}"), value))
            }
            None => values.first()?.1.clone(),
        };
        let text = text.trim();
        ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
            .or_else(|| chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)))
            .map(|t| t.and_utc().timestamp_millis())
    }

    /// Records `watermark` as subtask `subtask`'s (of `parallelism`), then the least watermark
    /// of every subtask, once each has recorded one.
    pub fn shared_watermark(dir: &Path, subtask: usize, parallelism: usize, watermark: i64) -> Result<Option<i64>> {
        let pending = dir.join(super::sink::PENDING_DIR);
        std::fs::create_dir_all(&pending).map_err(Error::file(&pending))?;
        let path = pending.join(marker(subtask, parallelism));
        let temporary = path.with_extension("tmp");
        std::fs::write(&temporary, watermark.to_string()).map_err(Error::file(&temporary))?;
        std::fs::rename(&temporary, &path).map_err(Error::file(&path))?;
        let mut least: Option<i64> = None;
        for subtask in 0..parallelism {
            let path = pending.join(marker(subtask, parallelism));
            let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
            let Ok(watermark) = text.trim().parse::<i64>() else { return Ok(None) };
            least = Some(least.map_or(watermark, |l| l.min(watermark)));
        }
        Ok(least)
    }

    /// The partition directories under the table's `dir` holding committed files and no
    /// success file yet.
    pub fn uncommitted(&self, dir: &Path) -> Result<Vec<String>> {
        let mut directories: BTreeMap<String, bool> = BTreeMap::new();
        for file in files_under(dir, false)? {
            if file.starts_with(super::sink::PENDING_DIR) {
                continue;
            }
            let Some((directory, name)) = file.rsplit_once('/') else { continue };
            let done = directories.entry(directory.to_string()).or_default();
            *done |= name == self.success_file;
        }
        Ok(directories.into_iter().filter(|(_, done)| !done).map(|(directory, _)| directory).collect())
    }

    /// Writes the success file into partition `directory` of `dir`.
    pub fn mark(&self, dir: &Path, directory: &str) -> Result<()> {
        let path = dir.join(directory).join(&self.success_file);
        std::fs::write(&path, b"").map_err(Error::file(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(pairs: &[(&str, &str)]) -> std::result::Result<Option<PartitionCommit>, String> {
        let values = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        PartitionCommit::of(&ConnectorOptions { connector: "filesystem".into(), values }, true)
    }

    #[test]
    fn a_partitions_time_comes_from_its_values_by_the_pattern() {
        let values =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let with_pattern = commit(&[
            ("sink.partition-commit.policy.kind", "success-file"),
            ("sink.partition-commit.trigger", "partition-time"),
            ("partition.time-extractor.timestamp-pattern", "$dt $hm:00"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(with_pattern.trigger, Trigger::PartitionTime);
        assert_eq!(
            with_pattern.partition_time(&values(&[("dt", "2023-11-14"), ("hm", "22:13")])),
            Some(1_700_000_000_000 - 20_000)
        );
        let by_default = commit(&[("sink.partition-commit.policy.kind", "success-file")]).unwrap().unwrap();
        assert_eq!(by_default.partition_time(&values(&[("dt", "2023-11-14")])), Some(1_699_920_000_000));
        assert_eq!(by_default.partition_time(&values(&[("dt", "tomorrow")])), None);
        assert_eq!(commit(&[]).unwrap(), None);
        assert!(commit(&[("sink.partition-commit.policy.kind", "metastore")]).unwrap_err().contains("not supported"));
    }

    #[test]
    fn the_shared_watermark_waits_for_every_subtask_and_is_the_least() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(PartitionCommit::shared_watermark(dir.path(), 0, 2, 50).unwrap(), None);
        assert_eq!(PartitionCommit::shared_watermark(dir.path(), 1, 2, 30).unwrap(), Some(30));
        assert_eq!(PartitionCommit::shared_watermark(dir.path(), 1, 2, 90).unwrap(), Some(50));
        // Another parallelism's markers count for nothing.
        assert_eq!(PartitionCommit::shared_watermark(dir.path(), 0, 3, 90).unwrap(), None);
    }
}
