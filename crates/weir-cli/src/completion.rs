//! Tab completion: meta-commands at the start of a line, option names inside `WITH (...)` and
//! after `SET`, table and view names where a table goes, SQL keywords elsewhere.

use crate::meta::COMMANDS;

/// What completion draws on; the client keeps the server's part up to date.
#[derive(Debug, Clone, Default)]
pub struct Completions {
    /// Tables and views (from the server).
    pub tables: Vec<String>,
    /// Every connector's option names (from the server).
    pub table_options: Vec<String>,
    /// `SET` option names (from the server).
    pub pipeline_options: Vec<String>,
    /// The lines of the statement typed so far, before the current one.
    pub pending: String,
}

/// SQL keywords offered where nothing more specific fits.
const KEYWORDS: &[&str] = &[
    "ALL",
    "AND",
    "AS",
    "ASC",
    "BETWEEN",
    "BIGINT",
    "BOOLEAN",
    "BY",
    "CASE",
    "CAST",
    "CHECKPOINT",
    "CHECKPOINTS",
    "COUNT",
    "CREATE",
    "CROSS",
    "CUMULATE",
    "DESC",
    "DESCRIBE",
    "DESCRIPTOR",
    "DISTINCT",
    "DOUBLE",
    "DROP",
    "ELSE",
    "END",
    "EXISTS",
    "EXPLAIN",
    "FALSE",
    "FILTER",
    "FOR",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "HOP",
    "IF",
    "IN",
    "INNER",
    "INSERT",
    "INT",
    "INTEGER",
    "INTERVAL",
    "INTO",
    "IS",
    "JOIN",
    "JSON",
    "LAG",
    "LEFT",
    "LIKE",
    "LIMIT",
    "MAX",
    "MIN",
    "NOT",
    "NOW",
    "NULL",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "PARTITIONED",
    "PIPELINE",
    "PIPELINES",
    "PROCTIME",
    "RANGE",
    "REPLACE",
    "RESUME",
    "RIGHT",
    "ROWS",
    "ROW_NUMBER",
    "SECOND",
    "SELECT",
    "SESSION",
    "SET",
    "SHOW",
    "STOP",
    "SUM",
    "TABLE",
    "TABLES",
    "TEXT",
    "THEN",
    "TIMESTAMP",
    "TRUE",
    "TUMBLE",
    "UNION",
    "UNNEST",
    "VARCHAR",
    "VIEW",
    "WATERMARK",
    "WHEN",
    "WHERE",
    "WINDOW",
    "WITH",
];

/// The words before which a table name goes.
const BEFORE_TABLE: &[&str] = &["from", "join", "into", "table", "describe", "\\d", "view"];

/// Where the word being completed starts in `line` (at `pos`), and the candidates for it.
pub fn complete(completions: &Completions, line: &str, pos: usize) -> (usize, Vec<String>) {
    let before = &line[..pos.min(line.len())];
    let start = before
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '\\' | '\'' | '"' | '?')))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[start..];
    let context = format!("{}\n{}", completions.pending, &before[..start]).to_ascii_lowercase();
    let previous = context.split_whitespace().next_back().unwrap_or_default().to_string();
    let first_on_line = completions.pending.trim().is_empty() && before[..start].trim().is_empty();
    let candidates: Vec<String> = if first_on_line && word.starts_with('\\') {
        let mut names: Vec<String> =
            COMMANDS.iter().map(|(c, _)| c.split_whitespace().next().unwrap_or_default().to_string()).collect();
        names.dedup();
        names
    } else if previous == "\\d" || BEFORE_TABLE.contains(&previous.as_str()) {
        completions.tables.clone()
    } else if inside_with(&context) {
        completions.table_options.clone()
    } else if previous == "set" {
        completions.pipeline_options.clone()
    } else {
        let lower = word.chars().next().is_some_and(char::is_lowercase);
        let keywords = KEYWORDS.iter().map(|k| if lower { k.to_ascii_lowercase() } else { k.to_string() });
        keywords.chain(completions.tables.iter().cloned()).collect()
    };
    // A quoted word completes to a quoted name.
    let (quote, bare) = match word.chars().next() {
        Some(q @ ('\'' | '"')) => (Some(q), &word[1..]),
        _ => (None, word),
    };
    let mut matches: Vec<String> = candidates
        .into_iter()
        .filter(|c| c.to_ascii_lowercase().starts_with(&bare.to_ascii_lowercase()))
        .map(|c| match quote {
            Some(q) => format!("{q}{c}{q}"),
            None => c,
        })
        .collect();
    matches.sort();
    matches.dedup();
    (start, matches)
}

/// Whether `text` (lower-cased) ends inside the parentheses of a `WITH (`.
fn inside_with(text: &str) -> bool {
    let Some(at) = text.rfind("with") else { return false };
    let after = text[at + 4..].trim_start();
    let Some(inside) = after.strip_prefix('(') else { return false };
    // Between options (after '(' or ','), not in a value (after '=').
    let depth = inside.matches('(').count() as i64 - inside.matches(')').count() as i64;
    let last = inside.trim_end().chars().last();
    depth >= 0 && !inside.contains(')') && !matches!(last, Some('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completions() -> Completions {
        Completions {
            tables: vec!["bids".into(), "bidders".into(), "auctions".into()],
            table_options: vec!["connector".into(), "scan.startup.mode".into(), "topic".into()],
            pipeline_options: vec!["checkpoint.interval".into(), "parallelism".into()],
            pending: String::new(),
        }
    }

    fn words(line: &str) -> Vec<String> {
        complete(&completions(), line, line.len()).1
    }

    #[test]
    fn each_place_completes_what_goes_there() {
        assert_eq!(words("SELECT * FROM bi"), ["bidders", "bids"]);
        assert_eq!(words("\\d auc"), ["auctions"]);
        assert_eq!(words("\\wa"), ["\\watch"]);
        assert_eq!(words("sel"), ["select"]);
        assert_eq!(words("SEL"), ["SELECT"]);
        assert_eq!(words("CREATE TABLE t (a INT) WITH (connector = 'kafka', 'scan"), ["'scan.startup.mode'"]);
        assert_eq!(words("CREATE TABLE t (a INT) WITH (to"), ["topic"]);
        assert_eq!(words("SET par"), ["parallelism"]);
        let (start, _) = complete(&completions(), "SELECT * FROM bi", 16);
        assert_eq!(start, 14);
    }

    #[test]
    fn earlier_lines_of_the_statement_count() {
        let mut c = completions();
        c.pending = "CREATE TABLE t (a INT)\nWITH (".into();
        assert_eq!(complete(&c, "  conn", 6).1, ["connector"]);
    }
}
