//! `weir run FILE`: runs a SQL file in this process, without the service. DDL and SET apply in
//! order; each INSERT or SELECT starts a pipeline with its own checkpoints under
//! `<data dir>/run/<file name>/<n>` (or `<checkpoint URL>/<file name>/<n>`). weir waits for the pipelines (bounded ones finish; Ctrl-C
//! stops unbounded ones with a savepoint, so their Kafka transactions are committed and none is
//! left open; a second Ctrl-C stops them at once, as a crash would; either way `--resume`
//! continues from their checkpoints), then prints the rows each SELECT produced.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use datafusion::arrow::util::pretty::pretty_format_batches;
use weir_engine::operators::PreviewBuffer;
use weir_engine::{CheckpointStatus, PipelineHandle, PipelineState};
use weir_sql::{Output, Session};
use weir_state::CheckpointStorage;

/// How `weir run` runs a file.
pub struct RunOptions {
    pub data_dir: PathBuf,
    /// Where the pipelines' checkpoints go: `<data dir>/run` unless a URL says otherwise.
    pub checkpoints: CheckpointStorage,
    /// Continue from the checkpoints a previous run of the same file left, instead of starting
    /// over.
    pub resume: bool,
    /// Rows printed per SELECT at most (the latest ones).
    pub max_rows: usize,
    /// The `sql.dialect` the file is read in.
    pub dialect: String,
}

struct Running {
    number: usize,
    sql: String,
    handle: PipelineHandle,
    preview: Option<PreviewBuffer>,
}

pub async fn run_file(path: &Path, options: &RunOptions) -> anyhow::Result<()> {
    let sql = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let stem = path.file_stem().map_or_else(|| "sql".into(), |s| s.to_string_lossy().into_owned());
    let _lock = weir_state::DataDirLock::acquire(&options.data_dir, &format!("weir run {}", path.display()))
        .map_err(anyhow::Error::msg)?;
    let mut session = Session::new();
    // The file's pipelines name their Kafka transactional ids after it and this data
    // directory's identity for it (a SET in the file overrides), so a --resume run recovers the
    // transactions of the run before it, and the same file run from another data directory
    // does not fence them.
    let name: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let identity = run_identity(&options.data_dir.join("run").join(&stem))?;
    session.options.pipeline_name = Some(format!("run-{name}-{identity}"));
    // Another data directory's runs of a file of the same name must not share its checkpoints.
    options.checkpoints.claim(&stem, &format!("weir run of {stem} ({identity})")).await?;
    session.options.set("sql.dialect", &options.dialect).map_err(anyhow::Error::msg)?;
    let outputs = session.execute(&sql).await.with_context(|| format!("in {}", path.display()))?;
    let mut running = Vec::new();
    for output in outputs {
        match output {
            Output::Done(message) => println!("{message}"),
            Output::Rows { columns, rows } => print_rows(&columns, &rows),
            Output::Command(_) => {
                anyhow::bail!(
                    "in {}: statements about pipelines (SHOW PIPELINES, STOP PIPELINE, ...) need the service, `weir serve`",
                    path.display()
                )
            }
            Output::Pipeline(pipeline) => {
                let number = running.len() + 1;
                let relative = format!("{stem}/{number}");
                let place = options.checkpoints.describe(&relative);
                if !options.resume {
                    options.checkpoints.clear(&relative).await.with_context(|| format!("clearing {place}"))?;
                }
                let store = options.checkpoints.store(&relative)?;
                let handle = weir_engine::start(pipeline.graph, pipeline.config, store)?;
                println!("pipeline {number} started (checkpoints in {place}): {}", pipeline.sql);
                running.push(Running {
                    number,
                    sql: pipeline.sql,
                    handle,
                    preview: pipeline.preview.map(|p| p.buffer),
                });
            }
        }
    }
    wait_for(&running).await;
    let mut failed = false;
    for pipeline in running {
        let status = pipeline.handle.status();
        let completed = status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count();
        let finished = pipeline.handle.is_finished();
        if finished {
            if let Err(error) = pipeline.handle.wait().await {
                eprintln!("pipeline {} failed: {error}", pipeline.number);
                failed = true;
                continue;
            }
            let resumed = status.restored_from.map(|id| format!(", resumed from checkpoint {id}")).unwrap_or_default();
            if status.state == PipelineState::Stopped {
                println!(
                    "pipeline {} stopped with a savepoint after {completed} checkpoints{resumed}; --resume continues it",
                    pipeline.number
                );
            } else {
                println!("pipeline {} finished: {completed} checkpoints{resumed}", pipeline.number);
            }
        } else {
            pipeline.handle.kill().await;
            println!(
                "pipeline {} stopped at once after {completed} checkpoints; --resume continues it from the last",
                pipeline.number
            );
        }
        if let Some(preview) = pipeline.preview {
            print_preview(&pipeline.sql, &preview, options.max_rows)?;
        }
    }
    if failed {
        anyhow::bail!("a pipeline failed");
    }
    Ok(())
}

/// The identity of a file's runs in one data directory (`dir` is `<data dir>/run/<file>`): made
/// at the first run and kept by every later one.
fn run_identity(dir: &Path) -> anyhow::Result<String> {
    let file = dir.join("identity");
    if let Ok(identity) = std::fs::read_to_string(&file)
        && !identity.trim().is_empty()
    {
        return Ok(identity.trim().to_string());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // RandomState's keys are random per process: eight hex digits that no other directory shares
    // but by a 1 in 4 billion chance.
    let identity = format!("{:08x}", RandomState::new().build_hasher().finish() as u32);
    std::fs::write(&file, &identity).with_context(|| format!("writing {}", file.display()))?;
    Ok(identity)
}

/// Until every pipeline finished. The first Ctrl-C stops them with a savepoint (a last
/// checkpoint, its transactions committed, the rest aborted: nothing left open to pin a
/// reader); a second one stops them at once.
async fn wait_for(running: &[Running]) {
    let all_finished = || async {
        while !running.iter().all(|r| r.handle.is_finished()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        _ = all_finished() => return,
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("stopping with a savepoint (Ctrl-C again stops at once)");
    for pipeline in running.iter().filter(|r| !r.handle.is_finished()) {
        pipeline.handle.request_stop();
    }
    tokio::select! {
        _ = all_finished() => {}
        _ = tokio::signal::ctrl_c() => eprintln!("stopping at once"),
    }
}

fn print_preview(sql: &str, preview: &PreviewBuffer, max_rows: usize) -> anyhow::Result<()> {
    let batches = preview.batches();
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut skip = total.saturating_sub(max_rows);
    let mut shown = Vec::new();
    for batch in batches {
        if skip >= batch.num_rows() {
            skip -= batch.num_rows();
            continue;
        }
        shown.push(batch.slice(skip, batch.num_rows() - skip));
        skip = 0;
    }
    println!("{sql}");
    println!("{}", pretty_format_batches(&shown)?);
    println!(
        "({} rows{})",
        shown.iter().map(|b| b.num_rows()).sum::<usize>(),
        if total > max_rows { ", the latest" } else { "" }
    );
    Ok(())
}

fn print_rows(columns: &[String], rows: &[Vec<String>]) {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| rows.iter().map(|r| r.get(i).map_or(0, String::len)).max().unwrap_or(0).max(c.len()))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join(" | ").trim_end());
    };
    line(columns);
    println!("{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("-+-"));
    for row in rows {
        line(row);
    }
}
