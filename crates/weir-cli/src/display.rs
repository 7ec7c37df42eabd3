//! How results look: psql's aligned tables and `\x` records, CSV, JSON (one object per row),
//! and the live table a streaming query's rows are printed into as they arrive.

use std::io::Write;

use serde_json::Value;
use unicode_width::UnicodeWidthStr;

use crate::error::Result;

/// `--format`: how result rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// psql's aligned table (or records, with `\x`).
    Aligned,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per row.
    Json,
}

/// `\x`: records instead of a table: never, always, or when a table would be wider than the
/// terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expanded {
    Off,
    On,
    Auto,
}

/// Rows to print: column names and one JSON value per cell (text for the server's tables).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

/// A cell as text: NULL is empty, as in psql; strings without quotes.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn is_number(value: &Value) -> bool {
    match value {
        Value::Number(_) => true,
        Value::String(s) => !s.is_empty() && s.parse::<f64>().is_ok(),
        _ => false,
    }
}

/// Whether each column holds numbers only (right-aligned, as psql does).
fn numeric_columns(table: &Table) -> Vec<bool> {
    (0..table.columns.len())
        .map(|i| {
            let mut cells = table.rows.iter().filter_map(|r| r.get(i)).filter(|v| !v.is_null()).peekable();
            cells.peek().is_some() && cells.all(is_number)
        })
        .collect()
}

fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// `text` padded to `width` columns (on the left if `right`), or cut to it with an ellipsis.
pub fn fit(text: &str, width: usize, right: bool) -> String {
    // One line per cell: a newline would break the table's rows.
    let text = text.replace('\n', "\\n");
    let shown = width_of_fitted(&text, width);
    let pad = " ".repeat(width.saturating_sub(self::width(&shown)));
    if right { format!("{pad}{shown}") } else { format!("{shown}{pad}") }
}

fn width_of_fitted(text: &str, width: usize) -> String {
    if self::width(text) <= width {
        return text.to_string();
    }
    let mut cut = String::new();
    for c in text.chars() {
        if self::width(&cut) + unicode_width::UnicodeWidthChar::width(c).unwrap_or(0) + 1 > width {
            break;
        }
        cut.push(c);
    }
    cut.push('…');
    cut
}

fn centered(text: &str, width: usize) -> String {
    let room = width.saturating_sub(self::width(text));
    format!("{}{text}{}", " ".repeat(room / 2), " ".repeat(room - room / 2))
}

/// Prints `table` in `format`; `footer` adds psql's "(N rows)"; `terminal_width` decides
/// `\x auto`.
pub fn print_table(
    out: &mut dyn Write,
    table: &Table,
    format: Format,
    expanded: Expanded,
    footer: bool,
    terminal_width: usize,
) -> Result<()> {
    match format {
        Format::Csv => print_csv(out, table),
        Format::Json => print_json(out, table),
        Format::Aligned => {
            let lines = aligned(table);
            let too_wide = lines.iter().any(|line| width(line) > terminal_width);
            let records = expanded == Expanded::On || (expanded == Expanded::Auto && too_wide);
            if records {
                print_records(out, table)?;
            } else {
                for line in lines {
                    writeln!(out, "{}", line.trim_end())?;
                }
            }
            if footer {
                let n = table.rows.len();
                writeln!(out, "({n} row{})", if n == 1 { "" } else { "s" })?;
                writeln!(out)?;
            }
            Ok(())
        }
    }
}

/// psql's aligned table: centred header, a rule, numbers to the right.
fn aligned(table: &Table) -> Vec<String> {
    let numeric = numeric_columns(table);
    let cells: Vec<Vec<String>> = table.rows.iter().map(|row| row.iter().map(text).collect()).collect();
    let widths: Vec<usize> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            cells.iter().filter_map(|r| r.get(i)).map(|c| width(&c.replace('\n', "\\n"))).fold(width(name), usize::max)
        })
        .collect();
    let mut lines = Vec::with_capacity(cells.len() + 2);
    let header: Vec<String> = table.columns.iter().zip(&widths).map(|(name, w)| centered(name, *w)).collect();
    lines.push(format!(" {} ", header.join(" | ")));
    lines.push(widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
    for row in &cells {
        let row: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(i, w)| fit(row.get(i).map_or("", String::as_str), *w, numeric[i]))
            .collect();
        lines.push(format!(" {} ", row.join(" | ")));
    }
    lines
}

/// psql's expanded display: one block per row, "-[ RECORD n ]".
fn print_records(out: &mut dyn Write, table: &Table) -> Result<()> {
    let name_width = table.columns.iter().map(|c| width(c)).max().unwrap_or(0);
    let value_width = table.rows.iter().flatten().map(|v| width(&text(v))).max().unwrap_or(0);
    for (n, row) in table.rows.iter().enumerate() {
        let title = format!("-[ RECORD {} ]", n + 1);
        let rule = (name_width + value_width + 3).saturating_sub(width(&title)).max(1);
        writeln!(out, "{title}{}", "-".repeat(rule))?;
        for (name, value) in table.columns.iter().zip(row) {
            writeln!(out, "{} | {}", fit(name, name_width, false), text(value).replace('\n', "\\n"))?;
        }
    }
    if table.rows.is_empty() {
        writeln!(out, "(0 rows)")?;
    }
    Ok(())
}

/// One CSV field, quoted when it must be.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

pub fn csv_line(cells: &[String]) -> String {
    cells.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(",")
}

fn print_csv(out: &mut dyn Write, table: &Table) -> Result<()> {
    writeln!(out, "{}", csv_line(&table.columns))?;
    for row in &table.rows {
        writeln!(out, "{}", csv_line(&row.iter().map(text).collect::<Vec<_>>()))?;
    }
    Ok(())
}

/// One row as a JSON object, in column order.
pub fn json_line(columns: &[String], row: &[Value]) -> String {
    let fields: Vec<String> =
        columns.iter().zip(row).map(|(name, value)| format!("{}:{}", Value::String(name.clone()), value)).collect();
    format!("{{{}}}", fields.join(","))
}

fn print_json(out: &mut dyn Write, table: &Table) -> Result<()> {
    for row in &table.rows {
        writeln!(out, "{}", json_line(&table.columns, row))?;
    }
    Ok(())
}

/// The live table of a streaming query: widths fixed from the first rows, each row printed
/// as it arrives, the header again every `page` rows.
pub struct Tableau {
    columns: Vec<String>,
    widths: Vec<usize>,
    right: Vec<bool>,
    page: usize,
    /// Rows printed under the last header (`None` before the first header).
    under_header: Option<usize>,
}

/// The widest a live column starts (longer values are cut with an ellipsis).
const MAX_LIVE_WIDTH: usize = 40;

impl Tableau {
    /// A live table for `columns` (their types say which are numbers), sized to `first` rows.
    pub fn new(columns: &[(String, String)], first: &[Vec<Value>], page: usize) -> Self {
        let numeric_type = |t: &str| {
            let t = t.to_ascii_lowercase();
            ["int", "float", "decimal", "double"].iter().any(|n| t.contains(n))
        };
        let widths = columns
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let widest = first.iter().filter_map(|r| r.get(i)).map(|v| width(&text(v))).max().unwrap_or(0);
                widest.min(MAX_LIVE_WIDTH).max(width(name)).max(2)
            })
            .collect();
        Self {
            columns: columns.iter().map(|(n, _)| n.clone()).collect(),
            widths,
            right: columns.iter().map(|(_, t)| numeric_type(t)).collect(),
            page: page.max(5),
            under_header: None,
        }
    }

    fn header(&mut self, out: &mut dyn Write) -> Result<()> {
        self.under_header = Some(0);
        let names: Vec<String> = self.columns.iter().zip(&self.widths).map(|(n, w)| centered(n, *w)).collect();
        writeln!(out, "{}", format!(" {} ", names.join(" | ")).trim_end())?;
        writeln!(out, "{}", self.widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"))?;
        Ok(())
    }

    /// Prints one row (the header first, at the top of every page).
    pub fn row(&mut self, out: &mut dyn Write, row: &[Value]) -> Result<()> {
        match self.under_header {
            None => self.header(out)?,
            Some(n) if n >= self.page => {
                writeln!(out)?;
                self.header(out)?;
            }
            Some(_) => {}
        }
        let cells: Vec<String> = self
            .widths
            .iter()
            .enumerate()
            .map(|(i, w)| fit(&row.get(i).map(text).unwrap_or_default(), *w, self.right[i]))
            .collect();
        writeln!(out, "{}", format!(" {} ", cells.join(" | ")).trim_end())?;
        out.flush()?;
        self.under_header = Some(self.under_header.map_or(1, |n| n + 1));
        Ok(())
    }

    /// Prints the header alone (a query that has no rows yet).
    pub fn start(&mut self, out: &mut dyn Write) -> Result<()> {
        if self.under_header.is_none() {
            self.header(out)?;
            out.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn table() -> Table {
        Table {
            columns: vec!["id".into(), "name".into()],
            rows: vec![vec![json!(1), json!("widget")], vec![json!(22), Value::Null]],
        }
    }

    fn printed(format: Format, expanded: Expanded) -> String {
        let mut out = Vec::new();
        print_table(&mut out, &table(), format, expanded, true, 80).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn aligned_tables_look_like_psql() {
        assert_eq!(
            printed(Format::Aligned, Expanded::Off),
            " id |  name\n----+--------\n  1 | widget\n 22 |\n(2 rows)\n\n"
        );
    }

    #[test]
    fn expanded_records_look_like_psql() {
        assert_eq!(
            printed(Format::Aligned, Expanded::On),
            "-[ RECORD 1 ]-\nid   | 1\nname | widget\n-[ RECORD 2 ]-\nid   | 22\nname | \n(2 rows)\n\n"
        );
        let mut out = Vec::new();
        print_table(&mut out, &table(), Format::Aligned, Expanded::Auto, false, 8).unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("-[ RECORD 1 ]"));
    }

    #[test]
    fn csv_and_json_keep_values() {
        let mut t = table();
        t.rows.push(vec![json!(3), json!("a,\"b\"")]);
        let mut out = Vec::new();
        print_table(&mut out, &t, Format::Csv, Expanded::Off, true, 80).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "id,name\n1,widget\n22,\n3,\"a,\"\"b\"\"\"\n");
        let mut out = Vec::new();
        print_table(&mut out, &t, Format::Json, Expanded::Off, true, 80).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":1,\"name\":\"widget\"}\n{\"id\":22,\"name\":null}\n{\"id\":3,\"name\":\"a,\\\"b\\\"\"}\n"
        );
    }

    #[test]
    fn a_live_table_repeats_its_header_and_cuts_long_values() {
        let columns = vec![("n".to_string(), "Int64".to_string()), ("s".to_string(), "Utf8".to_string())];
        let mut live = Tableau::new(&columns, &[vec![json!(10), json!("ab")]], 5);
        let mut out = Vec::new();
        live.start(&mut out).unwrap();
        for i in 0..6 {
            live.row(&mut out, &[json!(i), json!("abcdef")]).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..3], [" n  | s", "----+----", "  0 | a…"]);
        assert_eq!(lines[7..], ["", " n  | s", "----+----", "  5 | a…"]);
    }
}
