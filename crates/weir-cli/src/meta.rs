//! Meta-commands (`\d`, `\dp`, `\x`, ...): parsed here, and the views of tables and pipelines
//! they print, built from the server's answers.

use serde_json::Value;

use crate::connection::TableView;
use crate::display::{Expanded, Table, text};
use crate::error::{Error, Result};

/// One meta-command.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    Help,
    Quit,
    /// `\d`: tables and views.
    Tables,
    /// `\d NAME`: one table's columns, connector, options, watermark and key.
    Describe(String),
    /// `\dp`: pipelines.
    Pipelines,
    /// `\dp ID`: one pipeline's SQL, graph, operators and checkpoints.
    Pipeline(i64),
    /// `\x [on|off|auto]` (no argument toggles).
    Expanded(Option<Expanded>),
    /// `\timing [on|off]` (no argument toggles).
    Timing(Option<bool>),
    /// `\i FILE`
    Include(String),
    /// `\o [FILE]` (no file: standard output again).
    Output(Option<String>),
    /// `\watch [SECONDS] [c=COUNT]`
    Watch {
        seconds: f64,
        count: Option<u64>,
    },
}

/// The meta-commands with what they do, for `\?` and completion.
pub const COMMANDS: &[(&str, &str)] = &[
    ("\\?", "this help"),
    ("\\q", "quit"),
    ("\\d", "list tables and views"),
    ("\\d NAME", "describe a table or view: columns, connector, options, watermark, key"),
    ("\\dp", "list pipelines: status, uptime, rates, last checkpoint, restarts, last error"),
    ("\\dp ID", "show a pipeline: SQL, dataflow, operators' rates, back-pressure and watermarks, checkpoints"),
    ("\\x [on|off|auto]", "expanded display: one record per row (auto: when a table is too wide)"),
    ("\\timing [on|off]", "show how long each statement takes"),
    ("\\i FILE", "run the statements of a file"),
    ("\\o [FILE]", "send results to a file (or back to standard output)"),
    (
        "\\watch [SECONDS] [c=N]",
        "run the previous statement or meta-command again every SECONDS (default 2), N times or until Ctrl-C",
    ),
];

/// `\?`'s text.
pub fn help() -> String {
    let mut text = String::from(
        "weir sql: statements end with ';' and run on the server; meta-commands start with '\\'.\n\n\
         Statements:\n  \
         CREATE TABLE, CREATE VIEW, DROP TABLE, SHOW TABLES, DESCRIBE, SET, EXPLAIN\n  \
         SELECT ...                a live result: rows appear as they arrive; Ctrl-C detaches\n  \
         INSERT INTO t SELECT ...  starts a pipeline\n  \
         SHOW PIPELINES, SHOW CHECKPOINTS FOR PIPELINE n, STOP PIPELINE n [NOW],\n  \
         RESUME PIPELINE n [FROM CHECKPOINT k], DROP PIPELINE n, SHOW WORKERS\n\nMeta-commands:\n",
    );
    for (command, what) in COMMANDS {
        text.push_str(&format!("  {command:<24} {what}\n"));
    }
    text
}

/// How many of a pipeline's checkpoints `\dp ID` shows.
pub const RECENT_CHECKPOINTS: usize = 5;

/// Parses one meta-command line.
pub fn parse(line: &str) -> Result<Meta> {
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or_default();
    let args: Vec<&str> = words.collect();
    let one = |what: &str| -> Result<String> {
        match args.as_slice() {
            [arg] => Ok(arg.to_string()),
            _ => Err(Error::Usage(format!("{name} takes {what}"))),
        }
    };
    let none = || -> Result<()> {
        if args.is_empty() { Ok(()) } else { Err(Error::Usage(format!("{name} takes no argument"))) }
    };
    let on_off = |arg: &str| match arg {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(Error::Usage(format!("{name}: expected on or off, not '{other}'"))),
    };
    Ok(match name {
        "\\?" | "\\help" => Meta::Help,
        "\\q" | "\\quit" => none().map(|()| Meta::Quit)?,
        "\\d" if args.is_empty() => Meta::Tables,
        "\\d" => Meta::Describe(one("one table or view name")?.trim_matches('"').to_string()),
        "\\dp" if args.is_empty() => Meta::Pipelines,
        "\\dp" => {
            let id = one("one pipeline id")?;
            Meta::Pipeline(id.parse().map_err(|_| Error::Usage(format!("\\dp: '{id}' is not a pipeline id")))?)
        }
        "\\x" => Meta::Expanded(match args.as_slice() {
            [] => None,
            ["auto"] => Some(Expanded::Auto),
            [arg] => Some(if on_off(arg)? { Expanded::On } else { Expanded::Off }),
            _ => return Err(Error::Usage("\\x takes on, off or auto".into())),
        }),
        "\\timing" => Meta::Timing(match args.as_slice() {
            [] => None,
            [arg] => Some(on_off(arg)?),
            _ => return Err(Error::Usage("\\timing takes on or off".into())),
        }),
        "\\i" => Meta::Include(one("one file name")?),
        "\\o" => Meta::Output(match args.as_slice() {
            [] => None,
            _ => Some(one("at most one file name")?),
        }),
        "\\watch" => {
            let mut seconds = 2.0;
            let mut count = None;
            for arg in &args {
                let bad = || Error::Usage(format!("\\watch: '{arg}' is neither SECONDS nor c=N"));
                if let Some(n) = arg.strip_prefix("c=").or_else(|| arg.strip_prefix("count=")) {
                    count = Some(n.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(bad)?);
                } else {
                    let value = arg.strip_prefix("i=").or_else(|| arg.strip_prefix("interval=")).unwrap_or(arg);
                    seconds = value.parse::<f64>().ok().filter(|s| *s > 0.0 && s.is_finite()).ok_or_else(bad)?;
                }
            }
            Meta::Watch { seconds, count }
        }
        other => return Err(Error::Usage(format!("invalid command {other}: \\? lists the meta-commands"))),
    })
}

/// `\d NAME`: the columns as a table, then notes (connector, options, watermark, key, a
/// view's query).
pub fn describe(table: &TableView) -> (Table, Vec<String>) {
    let options = &table.options;
    let event_time = options.get("event_time");
    let proctime = options.get("proctime");
    let rows = table
        .columns
        .iter()
        .map(|[name, data_type]| {
            let note = if Some(name) == event_time {
                let delay = options.get("watermark_delay").map_or(String::new(), |d| format!(" - {d}"));
                format!("event time; watermark {name}{delay}")
            } else if Some(name) == proctime {
                "processing time".to_string()
            } else {
                String::new()
            };
            vec![Value::String(name.clone()), Value::String(data_type.clone()), Value::String(note)]
        })
        .collect();
    let columns = vec!["column".into(), "type".into(), "note".into()];
    let mut notes = Vec::new();
    match &table.query {
        Some(query) => notes.push(format!("View \"{}\":\n  {query}", table.name)),
        None => {
            let connector = table.connector.clone().unwrap_or_default();
            notes.push(format!("Table \"{}\", connector '{connector}'", table.name));
            let shown: Vec<String> = options
                .iter()
                .filter(|(k, _)| !["event_time", "watermark_delay", "proctime"].contains(&k.as_str()))
                .map(|(k, v)| format!("  {k} = '{v}'"))
                .collect();
            if !shown.is_empty() {
                notes.push(format!("Options:\n{}", shown.join("\n")));
            }
            if let Some(key) = options.get("key.fields") {
                notes.push(format!("Key: {key}"));
            }
            match (event_time, options.get("watermark_delay")) {
                (Some(column), Some(delay)) => notes.push(format!("Watermark: {column} - {delay}")),
                (Some(column), None) => notes.push(format!("Watermark: {column}")),
                _ => {}
            }
        }
    }
    notes.push(String::new());
    (Table { columns, rows }, notes)
}

/// `\dp ID`: a header (status, SQL, dataflow, errors) and the operators' table.
pub fn pipeline_view(view: &Value) -> (String, Table) {
    let mut header = format!("Pipeline {} ({}): {}", text(&view["id"]), text(&view["name"]), text(&view["status"]));
    if let Some(ms) = view["uptime_ms"].as_u64() {
        header.push_str(&format!(", up {:.1} s", ms as f64 / 1000.0));
    }
    if let Some(restarts) = view["restarts"].as_u64() {
        header.push_str(&format!(", {restarts} restarts"));
    }
    if let Some(from) = view["restored_from"].as_u64() {
        header.push_str(&format!(", restored from checkpoint {from}"));
    }
    header.push_str(&format!("\nSQL:\n  {}\n", text(&view["sql"]).replace('\n', "\n  ")));
    if let Some(graph) = view["graph"].as_array().filter(|g| !g.is_empty()) {
        header.push_str("Dataflow:\n");
        for line in graph {
            header.push_str(&format!("  {}\n", text(line)));
        }
    }
    if let Some(error) = view["errors"].as_array().and_then(|e| e.last()) {
        header.push_str(&format!("Last error: {}\n", text(&error["message"])));
    }
    header.push_str("Operators:");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let rows = view["operators"]
        .as_array()
        .map(|operators| {
            operators
                .iter()
                .map(|o| {
                    let rate = |key: &str| Value::String(format!("{:.0}", o[key].as_f64().unwrap_or(0.0)));
                    let watermark = o["watermark"].as_i64();
                    let lag = watermark.map_or(String::new(), |w| format!("{:.1} s", (now_ms - w) as f64 / 1000.0));
                    vec![
                        o["operator"].clone(),
                        o["subtask"].clone(),
                        o["records_in"].clone(),
                        rate("records_in_per_second"),
                        o["records_out"].clone(),
                        rate("records_out_per_second"),
                        Value::String(format!("{:.0}%", o["backpressure_ratio"].as_f64().unwrap_or(0.0) * 100.0)),
                        watermark.map_or(Value::Null, Value::from),
                        Value::String(lag),
                        o["bad_records"].clone(),
                        o["late_records_dropped"].clone(),
                        o["null_time_records"].clone(),
                        o["transactions_committed"].clone(),
                        o["transactions_aborted"].clone(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let columns = [
        "operator",
        "subtask",
        "rows in",
        "in/s",
        "rows out",
        "out/s",
        "back-pressure",
        "watermark",
        "watermark lag",
        "bad records",
        "late dropped",
        "null time",
        "txns committed",
        "txns aborted",
    ];
    (header, Table { columns: columns.iter().map(|c| c.to_string()).collect(), rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_commands_parse_with_their_arguments() {
        assert_eq!(parse("\\d").unwrap(), Meta::Tables);
        assert_eq!(parse("\\d bids").unwrap(), Meta::Describe("bids".into()));
        assert_eq!(parse("\\dp 3").unwrap(), Meta::Pipeline(3));
        assert_eq!(parse("\\x auto").unwrap(), Meta::Expanded(Some(Expanded::Auto)));
        assert_eq!(parse("\\x").unwrap(), Meta::Expanded(None));
        assert_eq!(parse("\\timing on").unwrap(), Meta::Timing(Some(true)));
        assert_eq!(parse("\\o").unwrap(), Meta::Output(None));
        assert_eq!(parse("\\watch 0.5 c=3").unwrap(), Meta::Watch { seconds: 0.5, count: Some(3) });
        assert_eq!(parse("\\watch").unwrap(), Meta::Watch { seconds: 2.0, count: None });
        for bad in ["\\dp x", "\\x sideways", "\\watch -1", "\\zz", "\\q now"] {
            assert!(matches!(parse(bad), Err(Error::Usage(_))), "{bad}");
        }
    }
}
