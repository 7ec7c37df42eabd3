//! A bare SELECT's rows as they arrive (Flink's tableau mode): the header once, rows as the
//! server's output stream delivers them, the header again every screenful, an `op` column for
//! updating results, and at the end "N rows, M changes, in T s". A result that ends within the
//! first moment is printed whole instead, as a psql table. Ctrl-C detaches.

use std::io::Write;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::connection::{Connection, OutputEvent};
use crate::display::{self, Expanded, Format, Table, Tableau};
use crate::error::{Error, Result};
use crate::interrupt;

/// How long rows are gathered before they are printed live on a terminal: a bounded result
/// that ends within it is printed as one table.
const FIRST_WAIT: Duration = Duration::from_millis(800);

/// The same when the output is not a terminal (a script's): nobody watches it live, and a
/// bounded result is wanted whole even on a loaded machine.
const FIRST_WAIT_SCRIPTED: Duration = Duration::from_secs(10);

/// The most rows gathered before a script's output turns live.
const GATHERED_SCRIPTED: usize = 10_000;

/// How a live result is shown and left.
#[derive(Debug, Clone, Copy)]
pub struct LiveSettings {
    pub format: Format,
    pub expanded: Expanded,
    pub quiet: bool,
    /// Ask before stopping a detached pipeline (a terminal); otherwise stop it unless
    /// `keep_running`.
    pub ask: bool,
    pub keep_running: bool,
    /// Terminal (width, height), when the output is one.
    pub terminal: Option<(usize, usize)>,
}

/// How a live result ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The pipeline ended by itself (finished, failed, stopped elsewhere).
    Ended(String),
    /// Ctrl-C: the client stopped reading.
    Detached,
}

/// The rows of an updating result so far, its changes applied.
#[derive(Debug, Default)]
struct Materialized {
    rows: Vec<Vec<Value>>,
    changes: u64,
}

impl Materialized {
    fn apply(&mut self, op: &str, row: Vec<Value>) {
        self.changes += 1;
        if op.starts_with('-') {
            if let Some(at) = self.rows.iter().position(|r| *r == row) {
                self.rows.swap_remove(at);
            }
        } else {
            self.rows.push(row);
        }
    }
}

/// Prints pipeline `id`'s output until it ends or Ctrl-C; then, on a detach, stops the
/// pipeline (asking first on a terminal).
pub fn show(connection: &Connection, id: i64, out: &mut dyn Write, settings: &LiveSettings) -> Result<Ending> {
    let started = Instant::now();
    let interrupts = interrupt::count();
    let events = connection.output(id)?;
    let interrupted = || interrupt::count() != interrupts;
    let first_wait = if settings.terminal.is_some() { FIRST_WAIT } else { FIRST_WAIT_SCRIPTED };
    let mut columns: Vec<(String, String)> = Vec::new();
    let mut updating = false;
    let mut gathered: Vec<(String, Vec<Value>)> = Vec::new();
    let mut live: Option<Live> = None;
    let mut all = Materialized::default();
    let mut received = 0u64;
    let ending = loop {
        if interrupted() {
            break Ending::Detached;
        }
        let event = match events.recv_timeout(Duration::from_millis(50)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                if live.is_none() && started.elapsed() > first_wait && !columns.is_empty() {
                    live = Some(start_live(out, settings, &columns, updating, &gathered)?);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Protocol(format!("pipeline {id}'s output stream ended without a word")));
            }
        };
        match event {
            OutputEvent::Schema { columns: names, updating: changes, reading } => {
                columns = names;
                updating = changes;
                if !settings.quiet {
                    let detach = if settings.ask { "; Ctrl-C detaches" } else { "" };
                    eprintln!("pipeline {id}: reading {}{detach}", reading.join("; "));
                }
            }
            OutputEvent::Row(mut row) => {
                received += 1;
                let op = row.remove("_change").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                let values: Vec<Value> =
                    columns.iter().map(|(name, _)| row.remove(name).unwrap_or(Value::Null)).collect();
                all.apply(&op, values.clone());
                match live.as_mut() {
                    Some(live) => live_row(out, settings, live, updating, &op, values)?,
                    None => {
                        gathered.push((op, values));
                        // A screenful on a terminal; elsewhere enough to size the columns.
                        let enough =
                            settings.terminal.map_or(GATHERED_SCRIPTED, |(_, height)| height.saturating_sub(4));
                        if gathered.len() >= enough.max(5) {
                            live = Some(start_live(out, settings, &columns, updating, &gathered)?);
                        }
                    }
                }
            }
            OutputEvent::Skipped(n) => {
                if !settings.quiet {
                    eprintln!("({n} rows were dropped by the server before they could be read: it keeps the latest)");
                }
            }
            OutputEvent::End { status } => break Ending::Ended(status),
            OutputEvent::Broken(reason) => return Err(Error::Protocol(format!("pipeline {id}'s output: {reason}"))),
        }
    };
    if live.is_none() && matches!(ending, Ending::Ended(_)) {
        // Ended within the first moment: the final result, as a table.
        let table = Table { columns: columns.iter().map(|(n, _)| n.clone()).collect(), rows: all.rows.clone() };
        let width = settings.terminal.map_or(usize::MAX, |(w, _)| w);
        display::print_table(out, &table, settings.format, settings.expanded, !settings.quiet, width)?;
    } else if live.is_none() {
        start_live(out, settings, &columns, updating, &gathered)?;
    }
    out.flush()?;
    if !settings.quiet {
        let seconds = started.elapsed().as_secs_f64();
        let rows = all.rows.len();
        let summary = match updating {
            true => format!("{rows} rows, {} changes, in {seconds:.1} s", all.changes),
            false => format!("{received} rows in {seconds:.1} s"),
        };
        match &ending {
            Ending::Ended(status) => eprintln!("pipeline {id} {status}: {summary}"),
            Ending::Detached => eprintln!("detached from pipeline {id}: {summary}"),
        }
    }
    if ending == Ending::Detached {
        detach(connection, id, settings)?;
    }
    Ok(ending)
}

/// Starts printing live: the header, then the rows gathered so far.
fn start_live(
    out: &mut dyn Write,
    settings: &LiveSettings,
    columns: &[(String, String)],
    updating: bool,
    gathered: &[(String, Vec<Value>)],
) -> Result<Live> {
    let shown = shown_columns(columns, updating);
    let first: Vec<Vec<Value>> = gathered.iter().map(|(op, row)| shown_row(updating, op, row.clone())).collect();
    let page = settings.terminal.map_or(usize::MAX, |(_, height)| height.saturating_sub(3));
    let names: Vec<String> = shown.iter().map(|(n, _)| n.clone()).collect();
    let mut live = Live { table: Tableau::new(&shown, &first, page), names };
    match settings.format {
        Format::Aligned => live.table.start(out)?,
        Format::Csv => writeln!(out, "{}", display::csv_line(&live.names))?,
        Format::Json => {}
    }
    for (op, row) in gathered {
        live_row(out, settings, &mut live, updating, op, row.clone())?;
    }
    out.flush()?;
    Ok(live)
}

fn shown_columns(columns: &[(String, String)], updating: bool) -> Vec<(String, String)> {
    let op = updating.then(|| ("op".to_string(), "Utf8".to_string()));
    op.into_iter().chain(columns.iter().cloned()).collect()
}

fn shown_row(updating: bool, op: &str, row: Vec<Value>) -> Vec<Value> {
    let op = updating.then(|| Value::String(op.to_string()));
    op.into_iter().chain(row).collect()
}

/// The live table and the names of the columns it shows (`op` first for changes).
struct Live {
    table: Tableau,
    names: Vec<String>,
}

fn live_row(
    out: &mut dyn Write,
    settings: &LiveSettings,
    live: &mut Live,
    updating: bool,
    op: &str,
    row: Vec<Value>,
) -> Result<()> {
    let row = shown_row(updating, op, row);
    match settings.format {
        Format::Aligned => live.table.row(out, &row),
        Format::Csv => {
            writeln!(out, "{}", display::csv_line(&row.iter().map(display::text).collect::<Vec<_>>()))?;
            Ok(out.flush()?)
        }
        Format::Json => {
            writeln!(out, "{}", display::json_line(&live.names, &row))?;
            Ok(out.flush()?)
        }
    }
}

/// After Ctrl-C: stop the pipeline, asking first on a terminal (Enter or "y" stops it); a
/// second Ctrl-C while asking ends the client.
fn detach(connection: &Connection, id: i64, settings: &LiveSettings) -> Result<()> {
    let stop = if settings.ask {
        eprint!("stop pipeline {id}? [Y/n] ");
        interrupt::set_asking(true);
        let mut answer = String::new();
        let read = std::io::stdin().read_line(&mut answer);
        interrupt::set_asking(false);
        read.is_ok() && !answer.trim().to_ascii_lowercase().starts_with('n')
    } else {
        !settings.keep_running
    };
    if stop {
        for result in connection.statements(&format!("STOP PIPELINE {id}"))? {
            if let crate::connection::StatementResult::Done { message } = result
                && !settings.quiet
            {
                eprintln!("{message}");
            }
        }
    } else if !settings.quiet {
        eprintln!("pipeline {id} keeps running: STOP PIPELINE {id} stops it, \\dp {id} shows it");
    }
    Ok(())
}
