//! Where pipelines keep their checkpoints, named by a URL: a local directory (a plain path or
//! `file:///dir`, the default) or S3-compatible object storage (`s3://bucket/prefix`), which
//! several machines can share and which outlives any one of them.
//!
//! Each pipeline's [`StateStore`] sits under a relative path of its own (the service's
//! pipeline id, `weir run`'s file and statement number). S3's endpoint, region and credentials
//! come from `options` (object_store's S3 settings: `endpoint`, `region`, `access_key_id`,
//! `secret_access_key`, `allow_http`, ...) over the usual `AWS_*` environment variables.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, Result};
use crate::store::StateStore;

/// The object under a claimed path that names its owner.
const OWNER: &str = "owner";

/// A checkpoint location, opened.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    place: Place,
}

#[derive(Debug, Clone)]
enum Place {
    Local(PathBuf),
    Remote { url: String, store: Arc<dyn ObjectStore>, prefix: Path },
}

impl CheckpointStorage {
    /// Checkpoints under a local directory.
    pub fn local(dir: &FsPath) -> Self {
        Self { place: Place::Local(dir.to_path_buf()) }
    }

    /// Opens `url`: a plain path, `file:///dir` or `s3://bucket[/prefix]`, with S3 `options`
    /// (`key = value`, object_store's names, with or without their `aws_` prefix).
    pub fn open(url: &str, options: &[(String, String)]) -> Result<Self> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Self::local_only(Self::local(FsPath::new(url)), options);
        };
        match scheme {
            "file" => {
                let parsed = url::Url::parse(url).map_err(|e| Error::Location(format!("{url}: {e}")))?;
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| Error::Location(format!("{url}: not an absolute local path")))?;
                Self::local_only(Self::local(&dir), options)
            }
            "s3" | "s3a" => {
                let parsed = url::Url::parse(url).map_err(|e| Error::Location(format!("{url}: {e}")))?;
                let Some(bucket) = parsed.host_str().filter(|b| !b.is_empty()) else {
                    return Err(Error::Location(format!("{url}: no bucket (s3://bucket/prefix)")));
                };
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                for (key, value) in options {
                    let config: AmazonS3ConfigKey = key
                        .parse()
                        .or_else(|_| format!("aws_{key}").parse())
                        .map_err(|_| Error::Location(format!("unknown S3 option '{key}'")))?;
                    builder = builder.with_config(config, value);
                }
                let store = builder.build().map_err(|e| Error::Location(format!("{url}: {e}")))?;
                let prefix = Path::from(parsed.path().trim_matches('/'));
                Ok(Self {
                    place: Place::Remote { url: url.trim_end_matches('/').to_string(), store: Arc::new(store), prefix },
                })
            }
            other => Err(Error::Location(format!(
                "{url}: checkpoints go to a local directory (a path or file:///dir) or to S3 (s3://bucket/prefix), not '{other}://'"
            ))),
        }
    }

    /// [`Self::open`] of `url` if given, else the local directory `default`; options without
    /// a URL are refused (they would be silently unused).
    pub fn open_or_local(url: Option<&str>, options: &[(String, String)], default: &FsPath) -> Result<Self> {
        match url {
            Some(url) => Self::open(url, options),
            None if options.is_empty() => Ok(Self::local(default)),
            None => Err(Error::Location(
                "checkpoint options are given but no --checkpoint-url (s3://bucket/prefix) to use them".into(),
            )),
        }
    }

    fn local_only(self, options: &[(String, String)]) -> Result<Self> {
        match options.first() {
            Some((key, _)) => Err(Error::Location(format!("option '{key}' is for S3; the checkpoints here are local"))),
            None => Ok(self),
        }
    }

    /// The state store of the pipeline at `relative` (`/`-separated).
    pub fn store(&self, relative: &str) -> Result<StateStore> {
        match &self.place {
            Place::Local(dir) => StateStore::local(&local_path(dir, relative)),
            Place::Remote { store, prefix, .. } => Ok(StateStore::new(store.clone(), join(prefix, relative))),
        }
    }

    /// The location as [`Self::open`] takes it again elsewhere (a worker): the URL, or the
    /// directory made absolute.
    pub fn url(&self) -> String {
        match &self.place {
            Place::Local(dir) => std::path::absolute(dir).unwrap_or_else(|_| dir.clone()).display().to_string(),
            Place::Remote { url, .. } => url.clone(),
        }
    }

    /// Where `relative` is, for people: a directory or a URL.
    pub fn describe(&self, relative: &str) -> String {
        match &self.place {
            Place::Local(dir) => local_path(dir, relative).display().to_string(),
            Place::Remote { url, .. } if relative.trim_matches('/').is_empty() => url.clone(),
            Place::Remote { url, .. } => format!("{url}/{}", relative.trim_matches('/')),
        }
    }

    /// Deletes everything under `relative` (a dropped pipeline's checkpoints, or a run started
    /// over).
    pub async fn clear(&self, relative: &str) -> Result<()> {
        match &self.place {
            Place::Local(dir) => {
                let path = local_path(dir, relative);
                match std::fs::remove_dir_all(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(Error::Directory { path: path.display().to_string(), source: e })
                    }
                    _ => Ok(()),
                }
            }
            Place::Remote { store, prefix, .. } => {
                let under = join(prefix, relative);
                let objects: Vec<_> = store.list(Some(&under)).try_collect().await?;
                for object in objects {
                    store.delete(&object.location).await?;
                }
                Ok(())
            }
        }
    }

    /// Claims `relative` for `owner` (a service's or a run's identity): the first claim writes
    /// the owner there; a later one by the same owner passes, by any other fails. Two services
    /// given one checkpoint URL would otherwise number their pipelines alike and overwrite, or
    /// delete, each other's checkpoints.
    pub async fn claim(&self, relative: &str, owner: &str) -> Result<()> {
        let (store, location): (Arc<dyn ObjectStore>, Path) = match &self.place {
            Place::Local(dir) => {
                let dir = local_path(dir, relative);
                std::fs::create_dir_all(&dir)
                    .map_err(|source| Error::Directory { path: dir.display().to_string(), source })?;
                (Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&dir)?), Path::from(OWNER))
            }
            Place::Remote { store, prefix, .. } => (store.clone(), join(&join(prefix, relative), OWNER)),
        };
        let create = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        match store.put_opts(&location, PutPayload::from(owner.to_string()), create).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let found = store.get(&location).await?.bytes().await?;
                let found = String::from_utf8_lossy(&found);
                if found.trim() == owner {
                    Ok(())
                } else {
                    Err(Error::Claimed { location: self.describe(relative), owner: found.trim().to_string() })
                }
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn local_path(dir: &FsPath, relative: &str) -> PathBuf {
    relative.split('/').filter(|p| !p.is_empty()).fold(dir.to_path_buf(), |path, part| path.join(part))
}

fn join(prefix: &Path, relative: &str) -> Path {
    prefix.parts().chain(Path::from(relative.trim_matches('/')).parts()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_directory_or_a_bucket_and_nothing_else() {
        assert!(
            matches!(CheckpointStorage::open("some/dir", &[]).unwrap().place, Place::Local(ref d) if d == FsPath::new("some/dir"))
        );
        assert!(
            matches!(CheckpointStorage::open("file:///tmp/x", &[]).unwrap().place, Place::Local(ref d) if d == FsPath::new("/tmp/x"))
        );
        let s3 = CheckpointStorage::open("s3://bucket/a/b/", &[("region".into(), "us-east-1".into())]).unwrap();
        assert_eq!(s3.describe("7"), "s3://bucket/a/b/7");
        assert_eq!(s3.describe(""), "s3://bucket/a/b");
        let Place::Remote { prefix, .. } = &s3.place else { panic!("not remote") };
        assert_eq!(join(prefix, "run/1").as_ref(), "a/b/run/1");

        let error =
            |url: &str, options: &[(String, String)]| CheckpointStorage::open(url, options).unwrap_err().to_string();
        assert!(error("gs://bucket", &[]).contains("not 'gs://'"), "{}", error("gs://bucket", &[]));
        assert!(error("s3:///prefix", &[]).contains("no bucket"));
        assert!(error("s3://b", &[("colour".into(), "red".into())]).contains("unknown S3 option 'colour'"));
        assert!(error("/tmp/x", &[("endpoint".into(), "http://x".into())]).contains("is for S3"));
    }

    #[tokio::test]
    async fn a_claimed_location_refuses_another_owner() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::local(dir.path());
        storage.claim("", "service-a").await.unwrap();
        storage.claim("", "service-a").await.unwrap();
        let refused = storage.claim("", "service-b").await.unwrap_err().to_string();
        assert!(refused.contains("service-a"), "{refused}");
        storage.claim("elsewhere", "service-b").await.unwrap();
    }

    #[tokio::test]
    async fn clearing_removes_one_pipelines_checkpoints_only() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::local(dir.path());
        for id in ["1", "2"] {
            storage.claim(id, "me").await.unwrap();
        }
        storage.clear("1").await.unwrap();
        storage.clear("1").await.unwrap();
        assert!(!dir.path().join("1").exists());
        assert!(dir.path().join("2").join(OWNER).exists());
    }
}
