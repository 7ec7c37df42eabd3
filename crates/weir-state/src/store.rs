//! Where snapshots live: an object store (a local directory by default) under a root path.
//!
//! ```text
//! <root>/checkpoints/<checkpoint id, 20 digits>/<operator>/<subtask>/<table>.parquet
//!                                                                    <table>.deletes.parquet
//!                                                                    <table>.base.parquet
//!                                                                    <table>.changes.parquet
//!                                                                    <table>.changes.deletes.parquet
//! <root>/manifests/<checkpoint id, 20 digits>.json
//! ```
//! Zero-padded ids make listings sort by checkpoint. A table's `.parquet` is its full snapshot
//! or its upserts, `.deletes.parquet` its removed keys, and `.base.parquet` a compaction of its
//! chain up to that checkpoint, written after the checkpoint's own files; `.changes.parquet`
//! and `.changes.deletes.parquet` are a compaction of the changes after the chain's base.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::chain::{self, Link};
use crate::error::{Error, Result};
use crate::key_range::owned_rows;
use crate::manifest::{FileRole, Manifest, StateFile};
use crate::parquet_codec;
use crate::parquet_codec::FileBatches;

const CHECKPOINTS: &str = "checkpoints";
const MANIFESTS: &str = "manifests";

/// What `retain_last` removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RetentionReport {
    pub deleted_manifests: Vec<u64>,
    pub deleted_files: usize,
}

/// Reads and writes one pipeline's snapshots.
#[derive(Debug, Clone)]
pub struct StateStore {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// For a local directory: written files are synced to disk, with the directories that name
    /// them, before they count (object_store's local store does not sync). A checkpoint must
    /// survive a host crash, not only a process crash: a manifest that outlived its state files,
    /// or a completed checkpoint that vanished after its sinks committed, loses data.
    local_dir: Option<std::path::PathBuf>,
    /// Held while a manifest is committed, by a task of its own that runs to its end even when
    /// the committing attempt is dropped (killed, or failed and restarted): the put underneath
    /// goes on in a blocking thread, so a manifest could otherwise appear after a new attempt
    /// chose the newest checkpoint to restore. [`Self::settled`] waits for it.
    commits: Arc<tokio::sync::Mutex<()>>,
}

impl StateStore {
    pub fn new(store: Arc<dyn ObjectStore>, root: Path) -> Self {
        Self { store, root, local_dir: None, commits: Arc::default() }
    }

    /// A store in a local directory, created if missing.
    pub fn local(dir: &std::path::Path) -> Result<Self> {
        let directory_error = |source| Error::Directory { path: dir.display().to_string(), source };
        std::fs::create_dir_all(dir).map_err(directory_error)?;
        let store = LocalFileSystem::new_with_prefix(dir)?;
        let local_dir = std::path::absolute(dir).map_err(directory_error)?;
        Ok(Self { local_dir: Some(local_dir), ..Self::new(Arc::new(store), Path::default()) })
    }

    /// Encodes `batches` as one Parquet file (off the async workers) and stores it.
    pub async fn write_table(
        &self,
        checkpoint_id: u64,
        operator: &str,
        subtask: usize,
        table: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<StateFile> {
        let target = FileTarget { checkpoint_id, operator, subtask, table, role: FileRole::Full, key: &[] };
        self.write(target, FULL_SUFFIX, schema, batches).await
    }

    /// Writes one file of an incremental table: its base, upserts or deletes at a checkpoint.
    pub async fn write_change(
        &self,
        target: FileTarget<'_>,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<StateFile> {
        let suffix = if target.role == FileRole::Deletes { DELETES_SUFFIX } else { FULL_SUFFIX };
        self.write(target, suffix, schema, batches).await
    }

    /// Merges the chain `files` (one table of one subtask, oldest first) into one base file in
    /// the directory of checkpoint `checkpoint_id`, the chain's newest: a chain that stands for
    /// the same rows, one file long. Unnamed by any manifest until a later checkpoint adopts it;
    /// retention spares it meanwhile (see [`Self::retain_last`]).
    pub async fn compact(&self, files: &[StateFile], checkpoint_id: u64) -> Result<StateFile> {
        let Some(last) = files.last() else { return Err(Error::EmptyChain) };
        let (schema, merged) = self.read_whole(files).await?;
        self.write(FileTarget::base(last, checkpoint_id), BASE_SUFFIX, schema, merged).await
    }

    /// Merges a run of a chain's changes (`files`, oldest first, no base) into at most two
    /// files in the directory of checkpoint `checkpoint_id`, the run's newest: the keys it
    /// leaves removed, then the rows it leaves (each written only when it has any). Put in the
    /// run's place, they stand for the same rows over the chain's base. Unnamed by any manifest
    /// until a later checkpoint adopts them; retention spares them meanwhile.
    pub async fn compact_changes(&self, files: &[StateFile], checkpoint_id: u64) -> Result<Vec<StateFile>> {
        let Some(last) = files.last() else { return Err(Error::EmptyChain) };
        let links = self.read_links(files).await?;
        let key = last.key.clone();
        let merged = tokio::task::spawn_blocking(move || chain::merge_changes(links, &key)).await??;
        let mut written = Vec::new();
        for (role, suffix, batches) in [
            (FileRole::Deletes, CHANGES_DELETES_SUFFIX, merged.deletes),
            (FileRole::Upserts, CHANGES_SUFFIX, merged.upserts),
        ] {
            let Some(schema) = batches.first().map(RecordBatch::schema) else { continue };
            let target = FileTarget { role, ..FileTarget::base(last, checkpoint_id) };
            written.push(self.write(target, suffix, schema, batches).await?);
        }
        Ok(written)
    }

    /// Copies checkpoint `checkpoint_id` into `target` as a self-contained checkpoint of the
    /// same id: each table's chain merged into one full file, in-flight data copied, and a
    /// manifest naming only those. For moving a pipeline's state elsewhere: the copy needs none
    /// of the older checkpoints an incremental chain reaches back to.
    pub async fn export(&self, checkpoint_id: u64, target: &StateStore) -> Result<Manifest> {
        let manifest = self.manifest(checkpoint_id).await?;
        let chains = manifest.chains();
        let mut files = Vec::with_capacity(chains.len());
        for chain in &chains {
            let first = &chain[0];
            let (schema, batches) = self.read_whole(chain).await?;
            files.push(
                target
                    .write_table(checkpoint_id, &first.operator, first.subtask, &first.table, schema, batches)
                    .await?,
            );
        }
        let copy = Manifest { files, ..manifest };
        target.commit_manifest(&copy).await?;
        Ok(copy)
    }

    /// A chain's rows with their schema (an empty table's from its first file, which decodes
    /// to no batches).
    async fn read_whole(&self, files: &[StateFile]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let merged = self.read_chain(files).await?;
        if let Some(batch) = merged.first() {
            return Ok((batch.schema(), merged));
        }
        let Some(first) = files.first() else { return Err(Error::EmptyChain) };
        let bytes = self.store.get(&self.absolute(&Path::from(first.path.as_str()))).await?.bytes().await?;
        let schema = tokio::task::spawn_blocking(move || parquet_codec::schema(bytes)).await??;
        Ok((schema, merged))
    }

    async fn write(
        &self,
        target: FileTarget<'_>,
        suffix: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<StateFile> {
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let key_hashes = crate::key_range::key_hashes(&batches);
        let encoded = tokio::task::spawn_blocking(move || parquet_codec::encode(schema, &batches)).await??;
        let relative = Path::from_iter([
            CHECKPOINTS.to_string(),
            checkpoint_dir(target.checkpoint_id),
            target.operator.to_string(),
            target.subtask.to_string(),
            format!("{}{suffix}", target.table),
        ]);
        let bytes = encoded.len() as u64;
        self.store.put(&self.absolute(&relative), PutPayload::from(encoded)).await?;
        self.sync(&relative).await?;
        Ok(StateFile {
            operator: target.operator.to_string(),
            subtask: target.subtask,
            table: target.table.to_string(),
            path: relative.to_string(),
            bytes,
            rows,
            role: target.role,
            key: target.key.to_vec(),
            key_hashes,
        })
    }

    /// The rows one table's chain (oldest first) stands for, latest wins.
    pub async fn read_chain(&self, files: &[StateFile]) -> Result<Vec<RecordBatch>> {
        let links = self.read_links(files).await?;
        let key = files.iter().find(|f| !f.key.is_empty()).map_or(&[][..], |f| f.key.as_slice()).to_vec();
        tokio::task::spawn_blocking(move || chain::merge(links, &key)).await?
    }

    /// The files of a chain (or a run of one), read and decoded at once (each decodes off the
    /// async workers).
    async fn read_links(&self, files: &[StateFile]) -> Result<Vec<Link>> {
        let reads = files
            .iter()
            .map(|file| async move { Ok::<_, Error>(Link { role: file.role, batches: self.read_file(file).await? }) });
        futures::future::try_join_all(reads).await
    }

    /// The batches of one state file, each decoded as it is taken (the file's bytes are read
    /// whole first): for a restore that applies a large file batch by batch and lets each go,
    /// so that the next one is decoded into the memory it freed.
    pub async fn file_batches(&self, file: &StateFile) -> Result<FileBatches> {
        let bytes = self.store.get(&self.absolute(&Path::from(file.path.as_str()))).await?.bytes().await?;
        parquet_codec::batches(bytes)
    }

    /// The batches of one state file.
    pub async fn read_file(&self, file: &StateFile) -> Result<Vec<RecordBatch>> {
        let bytes = self.store.get(&self.absolute(&Path::from(file.path.as_str()))).await?.bytes().await?;
        tokio::task::spawn_blocking(move || parquet_codec::decode(bytes)).await?
    }

    /// Every row of one table of `operator`, from all the subtasks that wrote it.
    pub async fn read_table(&self, manifest: &Manifest, operator: &str, table: &str) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        for file in manifest.files_of(operator, table) {
            batches.extend(self.read_file(file).await?);
        }
        Ok(batches)
    }

    /// The rows of a keyed table that subtask `subtask` of `parallelism` owns, whatever the
    /// parallelism the snapshot was taken at. (Tables written in full only; a restore of
    /// incremental ones merges each subtask's chain first.)
    pub async fn read_key_range(
        &self,
        manifest: &Manifest,
        operator: &str,
        table: &str,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Vec<RecordBatch>> {
        self.read_table(manifest, operator, table)
            .await?
            .iter()
            .map(|batch| owned_rows(batch, subtask, parallelism))
            .filter(|batch| batch.as_ref().map_or(true, |b| b.num_rows() > 0))
            .collect()
    }

    /// Commits a checkpoint: writes its manifest atomically and only if none exists yet
    /// (a conditional put), so a checkpoint is completed exactly once.
    pub async fn commit_manifest(&self, manifest: &Manifest) -> Result<()> {
        let guard = self.commits.clone().lock_owned().await;
        let (store, manifest) = (self.clone(), manifest.clone());
        // Awaited here, but not cancelled with this future: it ends, and lets go of the guard,
        // only once the manifest is in place or failed.
        tokio::spawn(async move {
            let _guard = guard;
            store.put_manifest(&manifest).await
        })
        .await?
    }

    /// Waits until no manifest commit of any attempt over this store is under way, so the
    /// newest manifest read next is the newest there will be from the attempts before.
    pub async fn settled(&self) {
        drop(self.commits.lock().await);
    }

    async fn put_manifest(&self, manifest: &Manifest) -> Result<()> {
        let checkpoint_id = manifest.checkpoint_id;
        let json = serde_json::to_vec_pretty(manifest).map_err(|source| Error::Manifest { checkpoint_id, source })?;
        let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        let path = self.manifest_path(checkpoint_id);
        match self.store.put_opts(&path, PutPayload::from(json), options).await {
            Err(object_store::Error::AlreadyExists { .. }) => Err(Error::ManifestExists(checkpoint_id)),
            other => other.map(|_| ()).map_err(Error::from),
        }?;
        self.sync(&Path::from(self.relative(&path))).await
    }

    /// Syncs the local file `relative` and every directory from it up to the store's root.
    async fn sync(&self, relative: &Path) -> Result<()> {
        let Some(root) = self.local_dir.clone() else { return Ok(()) };
        let file = relative.parts().fold(root.clone(), |path, part| path.join(part.as_ref()));
        tokio::task::spawn_blocking(move || {
            let synced = |path: &std::path::Path| {
                std::fs::File::open(path)
                    .and_then(|f| f.sync_all())
                    .map_err(|source| Error::Sync { path: path.display().to_string(), source })
            };
            synced(&file)?;
            let mut directory = file.parent();
            while let Some(dir) = directory.filter(|d| d.starts_with(&root)) {
                synced(dir)?;
                directory = dir.parent();
            }
            Ok(())
        })
        .await?
    }

    /// Where checkpoint `checkpoint_id`'s manifest is, for messages.
    pub fn manifest_location(&self, checkpoint_id: u64) -> String {
        let relative = self.relative(&self.manifest_path(checkpoint_id));
        match &self.local_dir {
            Some(dir) => dir.join(relative).display().to_string(),
            None => relative,
        }
    }

    pub async fn manifest(&self, checkpoint_id: u64) -> Result<Manifest> {
        let bytes: Bytes = self.store.get(&self.manifest_path(checkpoint_id)).await?.bytes().await?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Manifest { checkpoint_id, source })
    }

    /// Ids of the completed (manifested) checkpoints, oldest first.
    pub async fn completed_checkpoints(&self) -> Result<Vec<u64>> {
        let prefix = self.absolute(&Path::from(MANIFESTS));
        let metas: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        let mut ids: Vec<u64> =
            metas.iter().filter_map(|meta| meta.location.filename()?.strip_suffix(".json")?.parse().ok()).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// The manifest of the newest completed checkpoint, if any: where a restore starts.
    pub async fn latest_manifest(&self) -> Result<Option<Manifest>> {
        match self.completed_checkpoints().await?.last() {
            Some(&id) => Ok(Some(self.manifest(id).await?)),
            None => Ok(None),
        }
    }

    /// Keeps the newest `keep` completed checkpoints (at least one) and deletes the other
    /// manifests, then every state file that no retained manifest names, except the files of
    /// checkpoints newer than the newest manifest (they may still be in progress) and the
    /// compacted files (bases, merged changes) a later checkpoint may still adopt: one whose
    /// table's chain in the newest manifest still holds a file of its checkpoint or older. A
    /// file shared by several checkpoints' chains stays while any retained one names it. Manifests go first: a crash
    /// half-way leaves unreferenced files, never a manifest without its files.
    pub async fn retain_last(&self, keep: usize) -> Result<RetentionReport> {
        let completed = self.completed_checkpoints().await?;
        let Some(&newest) = completed.last() else {
            return Ok(RetentionReport::default());
        };
        let split = completed.len().saturating_sub(keep.max(1));
        let (expired, retained) = completed.split_at(split);
        let mut named = std::collections::HashSet::new();
        // Per (operator, subtask, table), the oldest checkpoint the newest chain reaches back to.
        let mut chain_starts: std::collections::HashMap<(String, usize, String), u64> = Default::default();
        for &id in retained {
            let manifest = self.manifest(id).await?;
            if id == newest {
                for file in &manifest.files {
                    let written_by = file.written_by().unwrap_or(id);
                    let start = chain_starts.entry((file.operator.clone(), file.subtask, file.table.clone()));
                    let start = start.or_insert(written_by);
                    *start = (*start).min(written_by);
                }
            }
            named.extend(manifest.files.into_iter().map(|f| f.path));
        }
        let adoptable = |relative: &str, checkpoint: u64| {
            let compacted = [CHANGES_DELETES_SUFFIX, CHANGES_SUFFIX, BASE_SUFFIX];
            let Some(rest) = compacted.iter().find_map(|suffix| relative.strip_suffix(suffix)) else { return false };
            let mut parts = rest.rsplitn(3, '/');
            let (Some(table), Some(subtask), Some(prefix)) = (parts.next(), parts.next(), parts.next()) else {
                return false;
            };
            let Some(operator) = prefix.splitn(3, '/').nth(2) else { return false };
            let Ok(subtask) = subtask.parse::<usize>() else { return false };
            chain_starts
                .get(&(operator.to_string(), subtask, table.to_string()))
                .is_some_and(|&start| start <= checkpoint)
        };
        for &id in expired {
            self.store.delete(&self.manifest_path(id)).await?;
        }
        let prefix = self.absolute(&Path::from(CHECKPOINTS));
        let files: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        let mut deleted_files = 0;
        for meta in files {
            let relative = self.relative(&meta.location);
            let checkpoint = checkpoint_of_path(&relative);
            let in_progress = checkpoint.is_none_or(|id| id > newest);
            let spared = in_progress || checkpoint.is_some_and(|id| adoptable(&relative, id));
            if !spared && !named.contains(&relative) {
                self.store.delete(&meta.location).await?;
                deleted_files += 1;
            }
        }
        Ok(RetentionReport { deleted_manifests: expired.to_vec(), deleted_files })
    }

    fn manifest_path(&self, checkpoint_id: u64) -> Path {
        self.absolute(&Path::from_iter([MANIFESTS.to_string(), format!("{}.json", checkpoint_dir(checkpoint_id))]))
    }

    fn absolute(&self, relative: &Path) -> Path {
        self.root.parts().chain(relative.parts()).collect()
    }

    fn relative(&self, absolute: &Path) -> String {
        absolute.prefix_match(&self.root).map(|parts| parts.collect::<Path>().to_string()).unwrap_or_default()
    }
}

fn checkpoint_dir(checkpoint_id: u64) -> String {
    format!("{checkpoint_id:020}")
}

const FULL_SUFFIX: &str = ".parquet";
const DELETES_SUFFIX: &str = ".deletes.parquet";
const BASE_SUFFIX: &str = ".base.parquet";
const CHANGES_SUFFIX: &str = ".changes.parquet";
const CHANGES_DELETES_SUFFIX: &str = ".changes.deletes.parquet";

/// The checkpoint whose directory holds the state file at `relative`.
pub(crate) fn checkpoint_of_path(relative: &str) -> Option<u64> {
    let mut parts = relative.split('/');
    (parts.next() == Some(CHECKPOINTS)).then_some(())?;
    parts.next()?.parse().ok()
}

/// Where one file of an incremental table goes and what it holds.
#[derive(Debug, Clone, Copy)]
pub struct FileTarget<'a> {
    pub checkpoint_id: u64,
    pub operator: &'a str,
    pub subtask: usize,
    pub table: &'a str,
    pub role: FileRole,
    /// The columns that identify a row.
    pub key: &'a [String],
}

impl<'a> FileTarget<'a> {
    /// The compacted base of `last`'s table, in checkpoint `checkpoint_id`'s directory.
    fn base(last: &'a StateFile, checkpoint_id: u64) -> Self {
        let (operator, subtask, table) = (last.operator.as_str(), last.subtask, last.table.as_str());
        Self { checkpoint_id, operator, subtask, table, role: FileRole::Full, key: &last.key }
    }
}

/// Milliseconds since the epoch, for manifests.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::{Int64Array, StringArray, UInt64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::{KEY_HASH_COLUMN, owner_of};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(KEY_HASH_COLUMN, DataType::UInt64, false),
            Field::new("key", DataType::Utf8, false),
            Field::new("count", DataType::Int64, false),
        ]))
    }

    /// Rows key-0..key-n with hashes spread over the whole u64 range.
    fn keyed_batch(from: u64, to: u64) -> RecordBatch {
        let hashes: UInt64Array = (from..to).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let keys: StringArray = (from..to).map(|i| Some(format!("key-{i}"))).collect();
        let counts: Int64Array = (from..to).map(|i| i as i64).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(hashes), Arc::new(keys), Arc::new(counts)]).unwrap()
    }

    fn keys_of(batches: &[RecordBatch]) -> Vec<String> {
        let mut keys: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let column = b.column_by_name("key").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
                column.iter().map(|k| k.unwrap().to_string()).collect::<Vec<_>>()
            })
            .collect();
        keys.sort();
        keys
    }

    async fn checkpoint(store: &StateStore, id: u64, parallelism: usize, rows: u64) -> Manifest {
        let mut files = Vec::new();
        for subtask in 0..parallelism {
            let batch = keyed_batch(0, rows);
            let mine = owned_rows(&batch, subtask, parallelism).unwrap();
            files.push(store.write_table(id, "count", subtask, "counts", schema(), vec![mine]).await.unwrap());
        }
        let manifest = Manifest {
            checkpoint_id: id,
            completed_at_ms: now_ms(),
            parallelism: BTreeMap::from([("count".to_string(), parallelism)]),
            files,
            finished: false,
        };
        store.commit_manifest(&manifest).await.unwrap();
        manifest
    }

    #[tokio::test]
    async fn a_table_round_trips_through_parquet() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        let batches = vec![keyed_batch(0, 100), keyed_batch(100, 250)];
        let file = store.write_table(7, "agg", 1, "groups", schema(), batches.clone()).await.unwrap();
        assert_eq!(file.rows, 250);
        assert_eq!(file.path, "checkpoints/00000000000000000007/agg/1/groups.parquet");
        assert!(dir.path().join(&file.path).exists());
        let read = store.read_file(&file).await.unwrap();
        assert_eq!(keys_of(&read), keys_of(&batches));
        let total: usize = read.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(total, 250);
    }

    #[tokio::test]
    async fn a_manifest_is_committed_once_and_the_latest_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        assert_eq!(store.latest_manifest().await.unwrap(), None);
        let first = checkpoint(&store, 1, 2, 10).await;
        let second = checkpoint(&store, 2, 2, 10).await;
        assert_eq!(store.completed_checkpoints().await.unwrap(), vec![1, 2]);
        assert_eq!(store.latest_manifest().await.unwrap(), Some(second));
        assert!(matches!(store.commit_manifest(&first).await, Err(Error::ManifestExists(1))));
        assert_eq!(store.manifest(1).await.unwrap(), first);
    }

    /// The same store on a real S3-compatible server (tests/s3/seaweedfs.sh's SeaweedFS): files
    /// round-trip, a manifest is committed once (S3's conditional put), a store opened afresh
    /// (another process, another machine) sees what the first wrote, retention deletes what no
    /// kept manifest names, and clearing a pipeline removes its objects and no one else's.
    #[tokio::test]
    async fn checkpoints_on_s3_commit_once_are_seen_by_another_client_and_are_retained_and_cleared() {
        use crate::CheckpointStorage;
        use crate::test_servers::TestS3;
        let s3 = TestS3::get().unwrap();
        let url = s3.fresh_url("store");
        let storage = CheckpointStorage::open(&url, &s3.options()).unwrap();
        storage.claim("", "service-a").await.unwrap();
        let store = storage.store("7").unwrap();
        assert_eq!(store.latest_manifest().await.unwrap(), None);
        let first = checkpoint(&store, 1, 2, 100).await;
        for id in 2..=3 {
            checkpoint(&store, id, 2, 100).await;
        }
        assert!(matches!(store.commit_manifest(&first).await, Err(Error::ManifestExists(1))));

        let elsewhere = CheckpointStorage::open(&url, &s3.options()).unwrap();
        let refused = elsewhere.claim("", "service-b").await.unwrap_err().to_string();
        assert!(refused.contains("belong to service-a"), "{refused}");
        let seen = elsewhere.store("7").unwrap();
        assert_eq!(seen.completed_checkpoints().await.unwrap(), vec![1, 2, 3]);
        let latest = seen.latest_manifest().await.unwrap().unwrap();
        let mut rows = Vec::new();
        for subtask in 0..3 {
            rows.extend(seen.read_key_range(&latest, "count", "counts", subtask, 3).await.unwrap());
        }
        assert_eq!(keys_of(&rows), keys_of(&[keyed_batch(0, 100)]), "every key exactly once, at another parallelism");

        let report = seen.retain_last(1).await.unwrap();
        assert_eq!((report.deleted_manifests, report.deleted_files), (vec![1, 2], 4));
        assert_eq!(store.completed_checkpoints().await.unwrap(), vec![3]);

        let other = storage.store("8").unwrap();
        checkpoint(&other, 1, 1, 10).await;
        storage.clear("7").await.unwrap();
        assert_eq!(store.completed_checkpoints().await.unwrap(), Vec::<u64>::new());
        assert_eq!(other.completed_checkpoints().await.unwrap(), vec![1], "another pipeline's checkpoints stay");
        storage.claim("", "service-a").await.unwrap();
    }

    /// Wrong credentials: a clear error, not a hang or a silent success.
    #[tokio::test]
    async fn s3_with_wrong_credentials_fails_with_the_servers_answer() {
        use crate::CheckpointStorage;
        use crate::test_servers::TestS3;
        let s3 = TestS3::get().unwrap();
        let mut options = s3.options();
        options.retain(|(key, _)| key != "secret_access_key");
        options.push(("secret_access_key".into(), "not-the-secret".into()));
        let storage = CheckpointStorage::open(&s3.fresh_url("denied"), &options).unwrap();
        let store = storage.store("1").unwrap();
        let error = store.completed_checkpoints().await.unwrap_err().to_string();
        assert!(
            error.contains("403") || error.contains("SignatureDoesNotMatch") || error.contains("AccessDenied"),
            "{error}"
        );
    }

    /// A commit whose caller is dropped halfway (an attempt killed while committing) still
    /// lands, and before `settled` returns: a new attempt looking for the newest manifest then
    /// finds it, rather than restoring an older checkpoint and seeing this one appear later.
    /// (A slow store: each put waits 50 ms before it writes.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_of_a_dropped_attempt_lands_before_settled_returns() {
        use object_store::throttle::{ThrottleConfig, ThrottledStore};
        let slow =
            ThrottleConfig { wait_put_per_call: std::time::Duration::from_millis(50), ..ThrottleConfig::default() };
        let inner = ThrottledStore::new(object_store::memory::InMemory::new(), slow);
        let store = StateStore::new(Arc::new(inner), Path::from("state"));
        let manifest = Manifest {
            checkpoint_id: 7,
            completed_at_ms: now_ms(),
            parallelism: BTreeMap::new(),
            files: Vec::new(),
            finished: false,
        };
        let committing = store.clone();
        let attempt = tokio::spawn(async move { committing.commit_manifest(&manifest).await });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        attempt.abort();
        assert!(attempt.await.unwrap_err().is_cancelled());
        store.settled().await;
        assert_eq!(store.completed_checkpoints().await.unwrap(), [7]);
    }

    #[tokio::test]
    async fn keyed_state_taken_at_two_restores_at_three_by_key_range() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        let manifest = checkpoint(&store, 1, 2, 1000).await;
        let mut all = Vec::new();
        for subtask in 0..3 {
            let mine = store.read_key_range(&manifest, "count", "counts", subtask, 3).await.unwrap();
            for batch in &mine {
                let hashes = batch.column_by_name(KEY_HASH_COLUMN).unwrap();
                let hashes = hashes.as_any().downcast_ref::<UInt64Array>().unwrap();
                assert!(hashes.iter().all(|h| owner_of(h.unwrap(), 3) == subtask));
            }
            assert!(!mine.is_empty(), "every new subtask gets some keys");
            all.extend(mine);
        }
        assert_eq!(keys_of(&all), keys_of(&[keyed_batch(0, 1000)]), "every key exactly once");
    }

    #[tokio::test]
    async fn retention_keeps_the_last_k_and_files_of_checkpoints_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        for id in 1..=4 {
            checkpoint(&store, id, 2, 10).await;
        }
        // An aborted checkpoint between completed ones, and one still in progress after them.
        let aborted = store.write_table(3, "count", 0, "orphan", schema(), vec![keyed_batch(0, 5)]).await.unwrap();
        let in_progress = store.write_table(5, "count", 0, "counts", schema(), vec![keyed_batch(0, 5)]).await.unwrap();

        let report = store.retain_last(2).await.unwrap();
        assert_eq!(report.deleted_manifests, vec![1, 2]);
        assert_eq!(report.deleted_files, 2 + 2 + 1, "two files each of 1 and 2, and the orphan of 3");
        assert_eq!(store.completed_checkpoints().await.unwrap(), vec![3, 4]);
        for id in [3, 4] {
            let manifest = store.manifest(id).await.unwrap();
            for file in &manifest.files {
                assert!(dir.path().join(&file.path).exists(), "{} kept", file.path);
            }
        }
        assert!(!dir.path().join(&aborted.path).exists());
        assert!(dir.path().join(&in_progress.path).exists());
        assert!(!dir.path().join("checkpoints/00000000000000000001").join("count/0/counts.parquet").exists());
        // Idempotent.
        assert_eq!(store.retain_last(2).await.unwrap(), RetentionReport::default());
    }

    /// Commits checkpoint `id` naming `files`.
    async fn commit(store: &StateStore, id: u64, files: Vec<StateFile>) {
        let parallelism = BTreeMap::from([("count".to_string(), 1)]);
        let manifest = Manifest { checkpoint_id: id, completed_at_ms: now_ms(), parallelism, files, finished: false };
        store.commit_manifest(&manifest).await.unwrap();
    }

    #[tokio::test]
    async fn chains_share_files_and_retention_spares_what_is_named_or_adoptable() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        let key = vec!["key".to_string()];
        let target = |id, role| FileTarget {
            checkpoint_id: id,
            operator: "count",
            subtask: 0,
            table: "counts",
            role,
            key: &key,
        };
        let base = store.write_change(target(1, FileRole::Full), schema(), vec![keyed_batch(0, 100)]).await.unwrap();
        commit(&store, 1, vec![base.clone()]).await;
        let mut chain = vec![base.clone()];
        for id in 2..=4 {
            // Each checkpoint removes key-(id) and rewrites key-(10 id) with another count.
            let gone = keyed_batch(id, id + 1);
            let gone = gone.project(&[0, 1]).unwrap();
            let deletes = store.write_change(target(id, FileRole::Deletes), gone.schema(), vec![gone]).await.unwrap();
            let changed = keyed_batch(10 * id, 10 * id + 1);
            let upserts = store.write_change(target(id, FileRole::Upserts), schema(), vec![changed]).await.unwrap();
            chain.extend([deletes, upserts]);
            commit(&store, id, chain.clone()).await;
        }
        let merged = store.read_chain(&chain).await.unwrap();
        let mut expected: Vec<String> = (0..100).filter(|i| !(2..=4).contains(i)).map(|i| format!("key-{i}")).collect();
        expected.sort();
        assert_eq!(keys_of(&merged), expected);
        assert_eq!(store.manifest(4).await.unwrap().written_bytes(), chain[5].bytes + chain[6].bytes);
        // Exported, checkpoint 4 stands alone: one full file per table, in its own directory.
        let elsewhere = tempfile::tempdir().unwrap();
        let moved = StateStore::local(elsewhere.path()).unwrap();
        let copy = store.export(4, &moved).await.unwrap();
        assert_eq!(moved.completed_checkpoints().await.unwrap(), vec![4]);
        assert!(copy.files.len() == 1 && copy.files[0].role.is_full() && copy.files[0].written_by() == Some(4));
        assert_eq!(copy.written_bytes(), copy.state_bytes());
        assert_eq!(keys_of(&moved.read_chain(&copy.files).await.unwrap()), expected);

        // Checkpoint 1's base is shared by every chain: it outlives checkpoint 1's manifest.
        let report = store.retain_last(2).await.unwrap();
        assert_eq!(report.deleted_manifests, vec![1, 2]);
        assert_eq!(report.deleted_files, 0, "every file is in checkpoint 4's chain");
        // A compaction of the chain, not adopted yet, survives retention while checkpoint 4's
        // chain is the newest; it holds the same rows in one file.
        let compacted = store.compact(&chain, 4).await.unwrap();
        assert!(compacted.path.ends_with("counts.base.parquet"), "{}", compacted.path);
        assert_eq!(keys_of(&store.read_file(&compacted).await.unwrap()), expected);
        // So does a compaction of the changes alone: the keys they leave removed, then the rows
        // they leave, which over the base hold the same rows.
        let changes = store.compact_changes(&chain[1..], 4).await.unwrap();
        assert_eq!(changes.iter().map(|f| f.role).collect::<Vec<_>>(), [FileRole::Deletes, FileRole::Upserts]);
        assert!(changes[0].path.ends_with("4/count/0/counts.changes.deletes.parquet"), "{}", changes[0].path);
        assert!(changes[1].path.ends_with("counts.changes.parquet"), "{}", changes[1].path);
        assert_eq!((changes[0].rows, changes[1].rows), (3, 3));
        let over_base: Vec<StateFile> = [base.clone()].into_iter().chain(changes.clone()).collect();
        assert_eq!(keys_of(&store.read_chain(&over_base).await.unwrap()), expected);
        assert_eq!(store.retain_last(2).await.unwrap().deleted_files, 0);
        // Adopted by checkpoint 5 (its chain: the base and 5's own upserts), the old chain goes
        // once no retained manifest names it.
        let upserts =
            store.write_change(target(5, FileRole::Upserts), schema(), vec![keyed_batch(7, 8)]).await.unwrap();
        commit(&store, 5, vec![compacted.clone(), upserts.clone()]).await;
        store.retain_last(1).await.unwrap();
        for file in &chain {
            assert!(!dir.path().join(&file.path).exists(), "{} deleted", file.path);
        }
        assert!(dir.path().join(&compacted.path).exists() && dir.path().join(&upserts.path).exists());
        // Once the newest chain starts after it (a full snapshot rebased the table), a base is
        // deleted like any unnamed file.
        let rebased = store.write_change(target(6, FileRole::Full), schema(), vec![keyed_batch(0, 3)]).await.unwrap();
        commit(&store, 6, vec![rebased]).await;
        store.retain_last(1).await.unwrap();
        assert!(!dir.path().join(&compacted.path).exists());
        assert!(changes.iter().all(|f| !dir.path().join(&f.path).exists()));
    }

    #[tokio::test]
    async fn a_store_that_cannot_write_reports_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        // A file where the checkpoint directory must go: the write fails, nothing panics.
        std::fs::write(dir.path().join("checkpoints"), b"not a directory").unwrap();
        let result = store.write_table(1, "count", 0, "counts", schema(), vec![keyed_batch(0, 5)]).await;
        assert!(matches!(result, Err(Error::ObjectStore(_))), "{result:?}");
    }
}
