//! The client at a terminal: rustyline's line editing, history in `~/.weir_history`, tab
//! completion, and psql's prompts (`weir=>` for a new statement, `weir->` while one goes on,
//! `weir'>` inside a string, `weir*>` inside a comment, `weir(>` inside parentheses).

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

use crate::client::{Client, Flow};
use crate::completion::{Completions, complete};
use crate::statements::{self, Open};

/// The line editor's helper: completion over what the client knows.
struct WeirHelper {
    completions: Arc<Mutex<Completions>>,
}

impl Completer for WeirHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let completions = self.completions.lock().unwrap_or_else(|p| p.into_inner());
        let (start, words) = complete(&completions, line, pos);
        Ok((start, words.into_iter().map(|w| Pair { display: w.clone(), replacement: w }).collect()))
    }
}

impl Hinter for WeirHelper {
    type Hint = String;
}

impl Highlighter for WeirHelper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(&'s self, prompt: &'p str, _default: bool) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for WeirHelper {}

impl Helper for WeirHelper {}

/// Where history is kept: `~/.weir_history`.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".weir_history"))
}

/// The prompt for what `pending` is waiting for.
fn prompt(pending: &str) -> &'static str {
    if pending.trim().is_empty() {
        return "weir=> ";
    }
    match statements::split(pending).open {
        Open::Quote('\'') => "weir'> ",
        Open::Quote(_) => "weir\"> ",
        Open::Comment => "weir*> ",
        Open::Paren => "weir(> ",
        Open::Nothing => "weir-> ",
    }
}

/// Reads and runs statements until `\q` or end of input (Ctrl-D).
pub fn run(client: &mut Client, completions: Arc<Mutex<Completions>>) -> rustyline::Result<()> {
    let mut editor: Editor<WeirHelper, DefaultHistory> = Editor::new()?;
    editor.set_helper(Some(WeirHelper { completions: completions.clone() }));
    let history = history_path();
    if let Some(path) = &history {
        // A first run has no history yet.
        let _ = editor.load_history(path);
    }
    println!("weir sql, connected to {} (\\? for help, \\q to quit)", client.connection.url());
    let mut pending = String::new();
    loop {
        {
            let mut known = completions.lock().unwrap_or_else(|p| p.into_inner());
            known.tables = client.tables.clone();
            known.pending = pending.clone();
        }
        let line = match editor.readline(prompt(&pending)) {
            Ok(line) => line,
            // Ctrl-C at the prompt drops what was typed, as in psql.
            Err(ReadlineError::Interrupted) => {
                pending.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(error) => return Err(error),
        };
        let before = pending.clone();
        let flow = client.line(&mut pending, &line);
        // History keeps whole statements: what this line completed.
        if pending.is_empty() && !(before.is_empty() && line.trim().is_empty()) {
            let entry = if before.is_empty() { line.clone() } else { format!("{before}\n{line}") };
            let _ = editor.add_history_entry(entry.trim());
            if let Some(path) = &history {
                let _ = editor.save_history(path);
            }
        }
        if flow == Flow::Quit {
            break;
        }
    }
    Ok(())
}
