//! The client's only way to weir: its REST API under `/api/v1`, and the Server-Sent Events of
//! a pipeline's output (read on a thread of its own, so that Ctrl-C never waits on a socket).

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};

/// What `POST /statements` answers for one statement.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatementResult {
    Done { message: String },
    Rows { columns: Vec<String>, rows: Vec<Vec<String>> },
    Pipeline { id: i64, name: String, preview: bool },
}

/// The server's error body.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    code: String,
    message: String,
    line: Option<u64>,
    column: Option<u64>,
}

/// A table or view as `GET /tables` shows it.
#[derive(Debug, Clone, Deserialize)]
pub struct TableView {
    pub name: String,
    pub kind: String,
    pub connector: Option<String>,
    pub columns: Vec<[String; 2]>,
    pub options: std::collections::BTreeMap<String, String>,
    pub query: Option<String>,
}

/// One event of a pipeline's output.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputEvent {
    /// Before the rows: the columns (name, type), whether rows are changes, where reading starts.
    Schema { columns: Vec<(String, String)>, updating: bool, reading: Vec<String> },
    /// One row, by column name.
    Row(serde_json::Map<String, Value>),
    /// Rows dropped by the server before they could be read (its preview keeps the latest).
    Skipped(u64),
    /// The pipeline ended (finished, failed, stopped, dropped); no rows follow.
    End { status: String },
    /// The stream broke off.
    Broken(String),
}

/// A weir server at a URL, with a token if it needs one.
#[derive(Clone)]
pub struct Connection {
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Connection {
    pub fn new(url: &str, token: Option<String>) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .build()
            .into();
        Self { url: url.trim_end_matches('/').to_string(), token, agent }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(token) => request.header("Authorization", format!("Bearer {token}")),
            None => request,
        }
    }

    fn unreachable(&self, error: ureq::Error) -> Error {
        let reason = match error {
            ureq::Error::Io(io) => io.to_string(),
            other => other.to_string(),
        };
        Error::Unreachable { url: self.url.clone(), reason }
    }

    /// The answer to one request: its JSON body, or the server's error.
    fn answer<T: DeserializeOwned>(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T> {
        let mut response = response.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| Error::Protocol(e.to_string()))?;
        if status == 401 {
            return Err(Error::Unauthorized { url: self.url.clone(), token_given: self.token.is_some() });
        }
        if !(200..300).contains(&status) {
            return Err(refusal(status, &text));
        }
        let text = if text.is_empty() { "null" } else { text.as_str() };
        serde_json::from_str(text).map_err(|e| Error::Protocol(format!("{e} in the answer {text}")))
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let request = self.authorized(self.agent.get(format!("{}/api/v1{path}", self.url)));
        self.answer(request.call())
    }

    /// Runs one statement (or several) on the server.
    pub fn statements(&self, sql: &str) -> Result<Vec<StatementResult>> {
        let request = self.authorized(self.agent.post(format!("{}/api/v1/statements", self.url)));
        self.answer(request.send_json(serde_json::json!({ "sql": sql })))
    }

    pub fn tables(&self) -> Result<Vec<TableView>> {
        self.get("/tables")
    }

    /// Reads pipeline `id`'s output on a thread of its own, event by event, until it ends or
    /// the receiver is dropped.
    pub fn output(&self, id: i64) -> Result<mpsc::Receiver<OutputEvent>> {
        let request = self.authorized(self.agent.get(format!("{}/api/v1/pipelines/{id}/output", self.url)));
        let mut response = request.call().map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(refusal(status, &response.body_mut().read_to_string().unwrap_or_default()));
        }
        let (sender, receiver) = mpsc::channel();
        let reader = BufReader::new(response.into_body().into_reader());
        std::thread::spawn(move || read_events(reader, &sender));
        Ok(receiver)
    }
}

/// The server's refusal of a request: its JSON error, or the answer as it came.
fn refusal(status: u16, text: &str) -> Error {
    match serde_json::from_str::<ErrorBody>(text) {
        Ok(body) => Error::Server { code: body.code, message: body.message, line: body.line, column: body.column },
        Err(_) => Error::Protocol(format!("HTTP {status}: {text}")),
    }
}

/// Sends each Server-Sent Event of `reader` as an [`OutputEvent`].
fn read_events(reader: impl BufRead, sender: &mpsc::Sender<OutputEvent>) {
    let mut kind = String::new();
    let mut data = String::new();
    for line in reader.lines() {
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                let _ = sender.send(OutputEvent::Broken(error.to_string()));
                return;
            }
        };
        if let Some(value) = line.strip_prefix("event:") {
            kind = value.trim().to_string();
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        } else if line.is_empty() && !data.is_empty() {
            let event = parse_event(&kind, &data);
            let end = matches!(event, OutputEvent::End { .. });
            if sender.send(event).is_err() || end {
                return;
            }
            kind.clear();
            data.clear();
        } else if line.is_empty() {
            kind.clear();
        }
    }
    let _ = sender.send(OutputEvent::Broken("the server closed the output stream".into()));
}

fn parse_event(kind: &str, data: &str) -> OutputEvent {
    let value: Value = match serde_json::from_str(data) {
        Ok(value) => value,
        Err(error) => return OutputEvent::Broken(format!("an output event is not JSON ({error}): {data}")),
    };
    match kind {
        "schema" => {
            let columns = value["columns"]
                .as_array()
                .map(|columns| {
                    columns
                        .iter()
                        .map(|c| {
                            let text = |key: &str| c[key].as_str().unwrap_or_default().to_string();
                            (text("name"), text("type"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let reading = value["reading"]
                .as_array()
                .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            OutputEvent::Schema { columns, updating: value["updating"].as_bool().unwrap_or(false), reading }
        }
        "skipped" => OutputEvent::Skipped(value.as_u64().unwrap_or(0)),
        "end" => OutputEvent::End { status: value["status"].as_str().unwrap_or("ended").to_string() },
        _ => match value {
            Value::Object(row) => OutputEvent::Row(row),
            other => OutputEvent::Broken(format!("an output row is not an object: {other}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_sent_events_become_output_events() {
        let text = "event: schema\ndata: {\"columns\":[{\"name\":\"a\",\"type\":\"Int64\"}],\"updating\":true,\"reading\":[\"t: x\"]}\n\n\
                    data: {\"a\":1,\"_change\":\"+I\"}\n\n:keep-alive\n\nevent: skipped\ndata: 3\n\n\
                    event: end\ndata: {\"status\":\"finished\",\"rows\":1}\n\ndata: {\"a\":2}\n\n";
        let (sender, receiver) = mpsc::channel();
        read_events(text.as_bytes(), &sender);
        let events: Vec<OutputEvent> = receiver.try_iter().collect();
        let mut row = serde_json::Map::new();
        row.insert("a".into(), 1.into());
        row.insert("_change".into(), "+I".into());
        assert_eq!(
            events,
            vec![
                OutputEvent::Schema {
                    columns: vec![("a".into(), "Int64".into())],
                    updating: true,
                    reading: vec!["t: x".into()]
                },
                OutputEvent::Row(row),
                OutputEvent::Skipped(3),
                OutputEvent::End { status: "finished".into() },
            ]
        );
    }
}
