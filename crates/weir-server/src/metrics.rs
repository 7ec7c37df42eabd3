//! `GET /metrics`: Prometheus text for every live pipeline: per operator subtask records in
//! and out, back-pressure, bad records and Kafka transactions committed and aborted; per
//! channel records, bytes and blocked time; per pipeline restarts and its checkpoints' count,
//! last duration and size.

use std::fmt::Write;

use weir_engine::metrics::{ChannelSample, OperatorSample};
use weir_engine::{CheckpointStatus, PipelineStatus};

/// What the metrics page shows of one live pipeline.
pub struct LivePipeline {
    pub id: i64,
    pub status: PipelineStatus,
    pub operators: Vec<OperatorSample>,
    pub channels: Vec<ChannelSample>,
}

pub fn prometheus_text(live: &[LivePipeline]) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let operators = |value: fn(&OperatorSample) -> f64| {
        samples(live, |p| &p.operators, value, |o| format!("operator=\"{}\",subtask=\"{}\"", o.operator, o.subtask))
    };
    family(
        "weir_records_in_total",
        "counter",
        "Records an operator subtask received.",
        operators(|o| o.records_in as f64),
    );
    family(
        "weir_records_out_total",
        "counter",
        "Records an operator subtask emitted.",
        operators(|o| o.records_out as f64),
    );
    family(
        "weir_backpressure_seconds_total",
        "counter",
        "Time an operator subtask could not hand on its output.",
        operators(|o| o.backpressure_ms as f64 / 1000.0),
    );
    family(
        "weir_bad_records_total",
        "counter",
        "Input records skipped or dead-lettered.",
        operators(|o| o.bad_records as f64),
    );
    family(
        "weir_late_records_dropped_total",
        "counter",
        "Rows an event-time operator dropped because the watermark had passed their window.",
        operators(|o| o.late_records_dropped as f64),
    );
    family(
        "weir_null_time_records_total",
        "counter",
        "Rows an event-time operator skipped because their event time was NULL.",
        operators(|o| o.null_time_records as f64),
    );
    family(
        "weir_transactions_committed_total",
        "counter",
        "Kafka transactions an operator subtask committed (a sink, or a source's dead-letter writer).",
        operators(|o| o.transactions_committed as f64),
    );
    family(
        "weir_transactions_aborted_total",
        "counter",
        "Kafka transactions an operator subtask aborted (lingering ones in recovery, the open one at shutdown).",
        operators(|o| o.transactions_aborted as f64),
    );
    family(
        "weir_transactions_open",
        "gauge",
        "Kafka transactions of an operator subtask taking records or pre-committed, waiting for their checkpoint.",
        operators(|o| o.transactions.as_ref().map_or(0.0, |t| (t.open + t.pending) as f64)),
    );
    let channels = |value: fn(&ChannelSample) -> f64| {
        samples(
            live,
            |p| &p.channels,
            value,
            |c| {
                format!(
                    "from=\"{}\",from_subtask=\"{}\",to=\"{}\",to_subtask=\"{}\"",
                    c.from, c.from_subtask, c.to, c.to_subtask
                )
            },
        )
    };
    family(
        "weir_channel_records_total",
        "counter",
        "Records sent over a channel between two tasks.",
        channels(|c| c.records as f64),
    );
    family(
        "weir_channel_bytes_total",
        "counter",
        "Bytes (Arrow buffer sizes) sent over a channel between two tasks.",
        channels(|c| c.bytes as f64),
    );
    family(
        "weir_channel_blocked_seconds_total",
        "counter",
        "Time senders waited for room in a channel (back-pressure).",
        channels(|c| c.blocked_ms as f64 / 1000.0),
    );
    let pipelines = |value: fn(&PipelineStatus) -> f64| {
        live.iter().map(|p| (format!("pipeline=\"{}\"", p.id), value(&p.status))).collect::<Vec<_>>()
    };
    family("weir_restarts_total", "counter", "Restarts after failures.", pipelines(|s| f64::from(s.restarts)));
    family(
        "weir_checkpoints_completed",
        "gauge",
        "Completed checkpoints in the kept history.",
        pipelines(|s| completed(s) as f64),
    );
    family(
        "weir_last_checkpoint_duration_seconds",
        "gauge",
        "Duration of the latest completed checkpoint.",
        pipelines(|s| last(s).map_or(0.0, |c| c.duration_ms as f64 / 1000.0)),
    );
    family(
        "weir_last_checkpoint_state_bytes",
        "gauge",
        "State bytes of the latest completed checkpoint.",
        pipelines(|s| last(s).map_or(0.0, |c| c.state_bytes as f64)),
    );
    family(
        "weir_last_checkpoint_written_bytes",
        "gauge",
        "Bytes the latest completed checkpoint wrote (less than its state when incremental).",
        pipelines(|s| last(s).map_or(0.0, |c| c.written_bytes as f64)),
    );
    out
}

/// One sample per item of every live pipeline (its operators, its channels), labelled with the
/// pipeline and the item.
fn samples<T>(
    live: &[LivePipeline],
    items: fn(&LivePipeline) -> &[T],
    value: fn(&T) -> f64,
    labels: fn(&T) -> String,
) -> Vec<(String, f64)> {
    live.iter()
        .flat_map(|p| items(p).iter().map(move |item| (format!("pipeline=\"{}\",{}", p.id, labels(item)), value(item))))
        .collect()
}

fn completed(status: &PipelineStatus) -> usize {
    status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count()
}

fn last(status: &PipelineStatus) -> Option<&weir_engine::CheckpointReport> {
    status.checkpoints.iter().rev().find(|c| c.status == CheckpointStatus::Completed)
}

#[cfg(test)]
mod tests {
    use weir_engine::PipelineState;

    use super::*;

    #[test]
    fn channels_and_transactions_are_on_the_page() {
        let live = LivePipeline {
            id: 7,
            status: PipelineStatus {
                state: PipelineState::Running,
                attempts: 1,
                restarts: 0,
                restored_from: None,
                placement: None,
                errors: Vec::new(),
                checkpoints: Vec::new(),
            },
            operators: vec![OperatorSample {
                operator: "kafka_sink".into(),
                subtask: 1,
                records_in: 10,
                records_out: 0,
                backpressure_ms: 1500,
                watermark: None,
                bad_records: 0,
                transactions_committed: 4,
                transactions_aborted: 1,
                late_records_dropped: 3,
                null_time_records: 0,
                transactions: None,
            }],
            channels: vec![ChannelSample {
                from: "kafka".into(),
                from_subtask: 0,
                to: "window".into(),
                to_subtask: 1,
                records: 10,
                bytes: 4096,
                blocked_ms: 20,
                queued_batches: 0,
            }],
        };
        let text = prometheus_text(&[live]);
        for line in [
            "weir_transactions_committed_total{pipeline=\"7\",operator=\"kafka_sink\",subtask=\"1\"} 4",
            "weir_transactions_aborted_total{pipeline=\"7\",operator=\"kafka_sink\",subtask=\"1\"} 1",
            "weir_late_records_dropped_total{pipeline=\"7\",operator=\"kafka_sink\",subtask=\"1\"} 3",
            "weir_backpressure_seconds_total{pipeline=\"7\",operator=\"kafka_sink\",subtask=\"1\"} 1.5",
            "weir_channel_bytes_total{pipeline=\"7\",from=\"kafka\",from_subtask=\"0\",to=\"window\",to_subtask=\"1\"} 4096",
            "weir_restarts_total{pipeline=\"7\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }
}
