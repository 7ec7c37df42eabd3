//! One client session: runs statements on the server and meta-commands here, prints results
//! and errors psql's way, and keeps the settings meta-commands change (`\x`, `\timing`, `\o`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::connection::{Connection, StatementResult};
use crate::display::{self, Expanded, Format, Table};
use crate::error::{Error, Result};
use crate::interrupt;
use crate::live::{self, LiveSettings};
use crate::meta::{self, Meta};
use crate::statements;

/// What to do after a statement or meta-command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `\q`, or a failure with `--on-error-stop`.
    Quit,
}

/// Settings given on the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    pub format: Format,
    pub quiet: bool,
    pub on_error_stop: bool,
    pub keep_running: bool,
    /// Reading from a terminal: ask before stopping a detached pipeline.
    pub interactive: bool,
}

pub struct Client {
    pub connection: Connection,
    settings: Settings,
    expanded: Expanded,
    timing: bool,
    /// `\o FILE`: where results go instead of standard output.
    output: Option<(String, std::fs::File)>,
    /// The last statement or meta-command run, for `\watch`.
    last: Option<String>,
    /// Whether any statement failed.
    pub failed: bool,
    /// Whether a failure stopped the run (`--on-error-stop`).
    pub stopped_on_error: bool,
    /// Whether the server went away (or refused the token) in a script.
    pub lost_server: bool,
    /// Table and view names, for completion; refreshed after DDL.
    pub tables: Vec<String>,
    /// Nesting of `\i` files, against a file that includes itself.
    depth: usize,
}

/// The deepest `\i` nesting.
const MAX_INCLUDE_DEPTH: usize = 16;

impl Client {
    pub fn new(connection: Connection, settings: Settings) -> Self {
        Self {
            connection,
            settings,
            expanded: Expanded::Off,
            timing: false,
            output: None,
            last: None,
            failed: false,
            stopped_on_error: false,
            lost_server: false,
            tables: Vec::new(),
            depth: 0,
        }
    }

    /// Asks the server for its tables: checks that it is there and takes our token.
    pub fn connect(&mut self) -> Result<()> {
        self.tables = self.connection.tables()?.into_iter().map(|t| t.name).collect();
        Ok(())
    }

    fn out(&mut self) -> Box<dyn Write + '_> {
        match &mut self.output {
            Some((_, file)) => Box::new(file),
            None => Box::new(std::io::stdout().lock()),
        }
    }

    /// The terminal's (width, height) when results go to one (80x24 if it does not say).
    fn terminal(&self) -> Option<(usize, usize)> {
        if self.output.is_some() || !std::io::stdout().is_terminal() {
            return None;
        }
        let size = terminal_size::terminal_size().map(|(w, h)| (usize::from(w.0), usize::from(h.0)));
        Some(size.filter(|(w, h)| *w > 0 && *h > 0).unwrap_or((80, 24)))
    }

    fn notice(&self, message: &str) {
        if !self.settings.quiet {
            eprintln!("{message}");
        }
    }

    /// Runs a whole script (a file, `-c` text or piped input): statements end at `;`,
    /// meta-commands at the end of their line; a statement left open at the end runs too.
    pub fn run_script(&mut self, text: &str) -> Flow {
        let mut pending = String::new();
        for line in text.lines() {
            if self.line(&mut pending, line) == Flow::Quit {
                return Flow::Quit;
            }
        }
        if !statements::only_comments(&pending) {
            let statement = std::mem::take(&mut pending);
            return self.run(statement.trim());
        }
        Flow::Continue
    }

    /// Takes one line into `pending`, and runs what it completes.
    pub fn line(&mut self, pending: &mut String, line: &str) -> Flow {
        if pending.trim().is_empty() && line.trim_start().starts_with('\\') {
            pending.clear();
            return self.run(line.trim());
        }
        if !pending.is_empty() {
            pending.push('\n');
        }
        pending.push_str(line);
        let split = statements::split(pending);
        *pending = split.rest;
        if pending.trim().is_empty() {
            pending.clear();
        }
        for statement in split.complete {
            if self.run(&statement) == Flow::Quit {
                return Flow::Quit;
            }
        }
        Flow::Continue
    }

    /// Runs one statement or meta-command, printing its result or error.
    pub fn run(&mut self, command: &str) -> Flow {
        if !command.starts_with("\\watch") {
            self.last = Some(command.to_string());
        }
        let started = Instant::now();
        let result = if command.starts_with('\\') { self.meta(command) } else { self.statement(command) };
        if self.timing && !command.starts_with("\\timing") {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            self.notice(&format!("Time: {ms:.3} ms"));
        }
        match result {
            Ok(flow) => flow,
            Err(error) => {
                print_error(&error, command);
                self.failed = true;
                // A script cannot go on without the server; at a terminal the server may be
                // back for the next statement.
                let lost = error.is_connection() && !self.settings.interactive;
                if self.settings.on_error_stop || lost {
                    self.stopped_on_error = true;
                    self.lost_server |= lost;
                    return Flow::Quit;
                }
                Flow::Continue
            }
        }
    }

    fn statement(&mut self, sql: &str) -> Result<Flow> {
        let results = self.connection.statements(sql)?;
        for result in results {
            match result {
                StatementResult::Done { message } => {
                    if !self.settings.quiet {
                        writeln!(self.out(), "{message}")?;
                    }
                }
                StatementResult::Rows { columns, rows } => {
                    let rows = rows.into_iter().map(|r| r.into_iter().map(Value::String).collect()).collect();
                    self.print(&Table { columns, rows })?;
                }
                StatementResult::Pipeline { id, name, preview: false } => {
                    self.notice(&format!(
                        "pipeline {id} ({name}) started: \\dp {id} shows it, STOP PIPELINE {id} stops it"
                    ));
                }
                StatementResult::Pipeline { id, preview: true, .. } => {
                    let settings = LiveSettings {
                        format: self.settings.format,
                        expanded: self.expanded,
                        quiet: self.settings.quiet,
                        ask: self.settings.interactive,
                        keep_running: self.settings.keep_running,
                        terminal: self.terminal(),
                    };
                    let connection = self.connection.clone();
                    live::show(&connection, id, &mut *self.out(), &settings)?;
                }
            }
        }
        let first = sql.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
        if ["CREATE", "DROP"].contains(&first.as_str())
            && let Ok(tables) = self.connection.tables()
        {
            self.tables = tables.into_iter().map(|t| t.name).collect();
        }
        Ok(Flow::Continue)
    }

    /// Prints a finished table in the chosen format and display.
    pub fn print(&mut self, table: &Table) -> Result<()> {
        let width = self.terminal().map_or(usize::MAX, |(w, _)| w);
        let (format, expanded, footer) = (self.settings.format, self.expanded, !self.settings.quiet);
        display::print_table(&mut *self.out(), table, format, expanded, footer, width)
    }

    fn meta(&mut self, command: &str) -> Result<Flow> {
        match meta::parse(command)? {
            Meta::Help => {
                write!(self.out(), "{}", meta::help())?;
            }
            Meta::Quit => return Ok(Flow::Quit),
            Meta::Tables => {
                let tables = self.connection.tables()?;
                self.tables = tables.iter().map(|t| t.name.clone()).collect();
                let rows = tables
                    .into_iter()
                    .map(|t| vec![t.name.into(), t.kind.into(), t.connector.unwrap_or_default().into()])
                    .collect();
                self.print(&Table { columns: vec!["name".into(), "kind".into(), "connector".into()], rows })?;
            }
            Meta::Describe(name) => {
                let tables = self.connection.tables()?;
                let Some(table) = tables.into_iter().find(|t| t.name == name) else {
                    return Err(Error::Usage(format!("there is no table or view named '{name}'")));
                };
                let (table, notes) = meta::describe(&table);
                self.print(&table)?;
                let mut out = self.out();
                for note in notes {
                    writeln!(out, "{note}")?;
                }
            }
            Meta::Pipelines => return self.statement("SHOW PIPELINES"),
            Meta::Pipeline(id) => {
                let view: Value = self.connection.get(&format!("/pipelines/{id}"))?;
                let checkpoints = self.connection.statements(&format!("SHOW CHECKPOINTS FOR PIPELINE {id}"))?;
                let (header, operators) = meta::pipeline_view(&view);
                writeln!(self.out(), "{header}")?;
                self.print(&operators)?;
                if let Some(StatementResult::Rows { columns, mut rows }) = checkpoints.into_iter().next() {
                    let recent = rows.split_off(rows.len().saturating_sub(meta::RECENT_CHECKPOINTS));
                    writeln!(self.out(), "Checkpoints (the last {}):", recent.len())?;
                    let rows = recent.into_iter().map(|r| r.into_iter().map(Value::String).collect()).collect();
                    self.print(&Table { columns, rows })?;
                }
            }
            Meta::Expanded(mode) => {
                self.expanded = mode.unwrap_or(match self.expanded {
                    Expanded::Off => Expanded::On,
                    _ => Expanded::Off,
                });
                let state = match self.expanded {
                    Expanded::Off => "off",
                    Expanded::On => "on",
                    Expanded::Auto => "used automatically",
                };
                self.notice(&format!("Expanded display is {state}."));
            }
            Meta::Timing(on) => {
                self.timing = on.unwrap_or(!self.timing);
                self.notice(&format!("Timing is {}.", if self.timing { "on" } else { "off" }));
            }
            Meta::Include(path) => {
                if self.depth >= MAX_INCLUDE_DEPTH {
                    return Err(Error::Usage(format!("\\i {path}: files include each other too deeply")));
                }
                let text = std::fs::read_to_string(&path).map_err(|error| Error::File { path: path.clone(), error })?;
                self.depth += 1;
                let flow = self.run_script(&text);
                self.depth -= 1;
                return Ok(flow);
            }
            Meta::Output(path) => {
                self.output = match path {
                    Some(path) => {
                        let file =
                            std::fs::File::create(&path).map_err(|error| Error::File { path: path.clone(), error })?;
                        Some((path, file))
                    }
                    None => None,
                };
            }
            Meta::Watch { seconds, count } => return self.watch(seconds, count),
        }
        Ok(Flow::Continue)
    }

    /// `\watch`: the last statement or meta-command again every `seconds`, until Ctrl-C or
    /// `count` runs.
    fn watch(&mut self, seconds: f64, count: Option<u64>) -> Result<Flow> {
        let Some(command) = self.last.clone() else {
            return Err(Error::Usage("\\watch repeats the previous statement, and there is none yet".into()));
        };
        let interrupts = interrupt::count();
        let mut runs = 0;
        loop {
            if !self.settings.quiet {
                let title = format!("-- every {seconds} s: {command}");
                writeln!(self.out(), "{title}")?;
            }
            if self.run(&command) == Flow::Quit {
                return Ok(Flow::Quit);
            }
            runs += 1;
            if count.is_some_and(|c| runs >= c) {
                return Ok(Flow::Continue);
            }
            let until = Instant::now() + Duration::from_secs_f64(seconds);
            while Instant::now() < until {
                if interrupt::count() != interrupts {
                    return Ok(Flow::Continue);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// psql's error form: `ERROR:  message`, then for SQL errors the line of the statement and a
/// caret under the column the server named.
pub fn print_error(error: &Error, statement: &str) {
    eprintln!("ERROR:  {error}");
    if let Error::Server { line: Some(line), column: Some(column), .. } = error
        && *line > 0
        && let Some(text) = statement.lines().nth(*line as usize - 1)
    {
        let prefix = format!("LINE {line}: ");
        let before: String = text.chars().take((*column as usize).saturating_sub(1)).collect();
        let indent = unicode_width::UnicodeWidthStr::width(prefix.as_str())
            + unicode_width::UnicodeWidthStr::width(before.as_str());
        eprintln!("{prefix}{text}");
        eprintln!("{}^", " ".repeat(indent));
    }
}
