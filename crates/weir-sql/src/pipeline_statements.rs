//! Statements about pipelines rather than data: `SHOW PIPELINES`, `SHOW CHECKPOINTS FOR
//! PIPELINE n`, `STOP PIPELINE n [NOW]`, `RESUME PIPELINE n [FROM CHECKPOINT k]`, `DROP
//! PIPELINE n`, and `SHOW WORKERS` (the workers that joined the service). sqlparser knows none of them, so they are taken out of the token stream before
//! it parses the rest; the session hands each back in its place among the other statements'
//! outputs as [`crate::Output::Command`], and the service carries it out. Parsed here, once,
//! every client (REST, `weir sql`, the web page) has them.
//!
//! Flink's statement sets, `EXECUTE STATEMENT SET BEGIN INSERT ...; INSERT ...; END` (and the
//! SQL client's `BEGIN STATEMENT SET; ... END;`), are taken out here too: their INSERTs stay,
//! and the set's bounds are handed back, so that the session makes them one pipeline, as Flink
//! makes them one job (weir makes consecutive INSERTs one pipeline anyway; the bounds keep a set
//! apart from INSERTs around it).

use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan};

use crate::error::{Error, Result};

/// A statement about pipelines, for the service to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineCommand {
    /// `SHOW PIPELINES`
    Show,
    /// `SHOW CHECKPOINTS FOR PIPELINE n`
    ShowCheckpoints { pipeline: i64 },
    /// `STOP PIPELINE n` (with a savepoint) or `STOP PIPELINE n NOW` (without).
    Stop { pipeline: i64, now: bool },
    /// `RESUME PIPELINE n [FROM CHECKPOINT k]`
    Resume { pipeline: i64, checkpoint: Option<u64> },
    /// `DROP PIPELINE n`
    Drop { pipeline: i64 },
    /// `SHOW WORKERS`
    ShowWorkers,
}

/// A pipeline command with the number of ordinary statements written before it (so that its
/// output takes its place among theirs).
pub type PlacedCommand = (usize, PipelineCommand);

/// What [`take_commands`] takes out of the statements.
pub struct Taken {
    /// The tokens sqlparser is to parse.
    pub tokens: Vec<TokenWithSpan>,
    pub commands: Vec<PlacedCommand>,
    /// The bounds of statement sets, as numbers of ordinary statements before them: the
    /// INSERTs between two bounds make one pipeline.
    pub set_bounds: Vec<usize>,
}

/// Takes the pipeline commands and statement-set brackets out of `tokens`.
pub fn take_commands(tokens: Vec<TokenWithSpan>) -> Result<Taken> {
    let mut kept = Vec::with_capacity(tokens.len());
    let mut commands = Vec::new();
    let mut set_bounds = Vec::new();
    // Where the open statement set began.
    let mut open_set: Option<Location> = None;
    let mut statements = 0;
    let mut statement: Vec<TokenWithSpan> = Vec::new();
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        let end = token.token == Token::SemiColon;
        let last = tokens.peek().is_none();
        statement.push(token);
        if !end && !last {
            continue;
        }
        let mut group = std::mem::take(&mut statement);
        let words = Words::new(&group);
        let opens = match () {
            _ if words.starts_with(&["EXECUTE", "STATEMENT", "SET", "BEGIN"]) => Some(4),
            _ if words.starts_with(&["BEGIN", "STATEMENT", "SET"]) && words.tokens.len() == 3 => Some(3),
            _ => None,
        };
        if let Some(opening) = opens {
            let at = words.tokens[0].span.start;
            if let Some(open) = open_set {
                return Err(Error::Syntax {
                    message: format!(
                        "a statement set is open already (since line {}, column {}): end it with END first",
                        open.line, open.column
                    ),
                    line: at.line,
                    column: at.column,
                });
            }
            open_set = Some(at);
            set_bounds.push(statements);
            // The words opening it go; what follows them is the set's first statement.
            let after = words.tokens[opening - 1].span.end;
            group.retain(|t| t.span.start >= after);
            if !group.iter().any(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon | Token::EOF)) {
                continue;
            }
        } else if open_set.is_some() && words.starts_with(&["END"]) && words.tokens.len() == 1 {
            open_set = None;
            set_bounds.push(statements);
            continue;
        }
        match command(&group)? {
            Some(found) => commands.push((statements, found)),
            None => {
                if group.iter().any(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon | Token::EOF)) {
                    statements += 1;
                }
                kept.extend(group);
            }
        }
    }
    if let Some(open) = open_set {
        return Err(Error::Syntax {
            message: "this statement set has no END: write EXECUTE STATEMENT SET BEGIN INSERT ...; INSERT ...; END"
                .into(),
            line: open.line,
            column: open.column,
        });
    }
    Ok(Taken { tokens: kept, commands, set_bounds })
}

/// The words and numbers of one statement, with where each starts.
struct Words<'a> {
    tokens: Vec<&'a TokenWithSpan>,
    at: usize,
    /// Where the statement ends, for "expected ..., found the end".
    end: Location,
}

impl<'a> Words<'a> {
    fn new(group: &'a [TokenWithSpan]) -> Self {
        let tokens: Vec<&TokenWithSpan> =
            group.iter().filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon | Token::EOF)).collect();
        let end = tokens.last().map_or(Location::new(1, 1), |t| t.span.end);
        Self { tokens, at: 0, end }
    }

    /// The upper-cased unquoted word at `i` from here, if it is one.
    fn word(&self, i: usize) -> Option<String> {
        match self.tokens.get(self.at + i).map(|t| &t.token) {
            Some(Token::Word(word)) if word.quote_style.is_none() => Some(word.value.to_ascii_uppercase()),
            _ => None,
        }
    }

    fn starts_with(&self, words: &[&str]) -> bool {
        words.iter().enumerate().all(|(i, w)| self.word(i).as_deref() == Some(*w))
    }

    fn error(&self, expected: &str) -> Error {
        match self.tokens.get(self.at) {
            Some(token) => Error::Syntax {
                message: format!("Expected: {expected}, found: {}", token.token),
                line: token.span.start.line,
                column: token.span.start.column,
            },
            None => Error::Syntax {
                message: format!("Expected: {expected}, found: the end of the statement"),
                line: self.end.line,
                column: self.end.column,
            },
        }
    }

    /// Takes the words `words`, or fails naming the first one missing.
    fn expect(&mut self, words: &[&str]) -> Result<()> {
        for word in words {
            if self.word(0).as_deref() != Some(*word) {
                return Err(self.error(word));
            }
            self.at += 1;
        }
        Ok(())
    }

    /// Takes a whole number (a pipeline or checkpoint id).
    fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let parsed = match self.tokens.get(self.at).map(|t| &t.token) {
            Some(Token::Number(text, _)) => text.parse().ok(),
            _ => None,
        };
        let Some(value) = parsed else { return Err(self.error(what)) };
        self.at += 1;
        Ok(value)
    }

    /// Takes `word` if it is next.
    fn optional(&mut self, word: &str) -> bool {
        let found = self.word(0).as_deref() == Some(word);
        self.at += usize::from(found);
        found
    }

    fn finish(&self, value: PipelineCommand, expected: &str) -> Result<Option<PipelineCommand>> {
        if self.at < self.tokens.len() { Err(self.error(expected)) } else { Ok(Some(value)) }
    }
}

/// The pipeline command one statement's tokens are, if they are one.
fn command(group: &[TokenWithSpan]) -> Result<Option<PipelineCommand>> {
    let mut words = Words::new(group);
    if words.starts_with(&["SHOW", "PIPELINES"]) {
        words.at = 2;
        return words.finish(PipelineCommand::Show, "the end of SHOW PIPELINES");
    }
    if words.starts_with(&["SHOW", "WORKERS"]) {
        words.at = 2;
        return words.finish(PipelineCommand::ShowWorkers, "the end of SHOW WORKERS");
    }
    if words.starts_with(&["SHOW", "CHECKPOINTS"]) {
        words.at = 2;
        words.expect(&["FOR", "PIPELINE"])?;
        let pipeline = words.number("a pipeline id")?;
        return words.finish(PipelineCommand::ShowCheckpoints { pipeline }, "the end of SHOW CHECKPOINTS");
    }
    if words.starts_with(&["STOP"]) {
        words.at = 1;
        words.expect(&["PIPELINE"])?;
        let pipeline = words.number("a pipeline id")?;
        let now = words.optional("NOW");
        return words.finish(PipelineCommand::Stop { pipeline, now }, "NOW or the end of STOP PIPELINE");
    }
    if words.starts_with(&["RESUME"]) {
        words.at = 1;
        words.expect(&["PIPELINE"])?;
        let pipeline = words.number("a pipeline id")?;
        let checkpoint = match words.optional("FROM") {
            true => {
                words.expect(&["CHECKPOINT"])?;
                Some(words.number("a checkpoint id")?)
            }
            false => None,
        };
        return words.finish(PipelineCommand::Resume { pipeline, checkpoint }, "FROM CHECKPOINT or the end of RESUME");
    }
    if words.starts_with(&["DROP", "PIPELINE"]) {
        words.at = 2;
        let pipeline = words.number("a pipeline id")?;
        return words.finish(PipelineCommand::Drop { pipeline }, "the end of DROP PIPELINE");
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn split(sql: &str) -> Result<(String, Vec<PlacedCommand>)> {
        let taken = take_commands(Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap())?;
        Ok((taken.tokens.iter().map(|t| t.token.to_string()).collect(), taken.commands))
    }

    #[test]
    fn a_statement_sets_brackets_are_taken_out_and_its_bounds_kept() {
        let sql = "INSERT INTO a SELECT 1; EXECUTE STATEMENT SET BEGIN INSERT INTO b SELECT 2; INSERT INTO c SELECT 3; END; INSERT INTO d SELECT 4";
        let taken = take_commands(Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap()).unwrap();
        let text: String = taken.tokens.iter().map(|t| t.token.to_string()).collect();
        assert_eq!(
            text,
            "INSERT INTO a SELECT 1; INSERT INTO b SELECT 2; INSERT INTO c SELECT 3; INSERT INTO d SELECT 4"
        );
        assert_eq!(taken.set_bounds, vec![1, 3]);
        let client = "BEGIN STATEMENT SET;\nINSERT INTO b SELECT 2;\nEND;";
        let taken =
            take_commands(Tokenizer::new(&GenericDialect {}, client).tokenize_with_location().unwrap()).unwrap();
        assert_eq!(taken.set_bounds, vec![0, 1]);
        let position = |sql: &str| match split(sql) {
            Err(Error::Syntax { message, line, column }) => (message, line, column),
            other => panic!("{other:?}"),
        };
        let (message, line, column) = position("SELECT 1;\nEXECUTE STATEMENT SET BEGIN INSERT INTO b SELECT 2;");
        assert_eq!((line, column), (2, 1));
        assert!(message.contains("has no END"), "{message}");
        let (message, _, _) = position("BEGIN STATEMENT SET; BEGIN STATEMENT SET; END;");
        assert!(message.contains("open already (since line 1, column 1)"), "{message}");
    }

    #[test]
    fn commands_are_taken_out_in_their_place() {
        let (rest, commands) = split(
            "show pipelines; CREATE VIEW v AS SELECT 1; STOP PIPELINE 3 now;\n-- c\nresume pipeline 3 from checkpoint 7; SELECT ';'; drop Pipeline 2",
        )
        .unwrap();
        // A command goes with the whitespace and comments before it.
        assert_eq!(rest, " CREATE VIEW v AS SELECT 1; SELECT ';';");
        assert_eq!(
            commands,
            vec![
                (0, PipelineCommand::Show),
                (1, PipelineCommand::Stop { pipeline: 3, now: true }),
                (1, PipelineCommand::Resume { pipeline: 3, checkpoint: Some(7) }),
                (2, PipelineCommand::Drop { pipeline: 2 }),
            ]
        );
        let (_, commands) = split("SHOW CHECKPOINTS FOR PIPELINE 12; show workers").unwrap();
        assert_eq!(
            commands,
            vec![(0, PipelineCommand::ShowCheckpoints { pipeline: 12 }), (0, PipelineCommand::ShowWorkers)]
        );
    }

    #[test]
    fn other_statements_are_left_alone() {
        let (rest, commands) = split("SHOW TABLES; DROP TABLE pipeline; SELECT stop FROM t").unwrap();
        assert!(commands.is_empty());
        assert_eq!(rest, "SHOW TABLES; DROP TABLE pipeline; SELECT stop FROM t");
    }

    #[test]
    fn a_malformed_command_names_what_was_expected_where() {
        let position = |sql: &str| match split(sql) {
            Err(Error::Syntax { message, line, column }) => (message, line, column),
            other => panic!("{other:?}"),
        };
        let (message, line, column) = position("SELECT 1;\nSTOP PIPELINE x");
        assert_eq!((line, column), (2, 15), "{message}");
        assert!(message.contains("a pipeline id") && message.contains("found: x"), "{message}");
        let (message, _, _) = position("RESUME PIPELINE 1 FROM 4");
        assert!(message.contains("Expected: CHECKPOINT"), "{message}");
        let (message, line, column) = position("SHOW CHECKPOINTS FOR PIPELINE");
        assert!(message.contains("found: the end of the statement"), "{message}");
        assert_eq!((line, column), (1, 30));
        let (message, _, _) = position("STOP PIPELINE 1 LATER");
        assert!(message.contains("NOW"), "{message}");
    }
}
