//! `GET /metrics`: Prometheus text for every live pipeline: per operator subtask records in
//! and out, back-pressure, bad records and Kafka transactions committed and aborted; per pipeline restarts and its checkpoints' count,
//! last duration and size.

use std::fmt::Write;

use weir_engine::metrics::OperatorSample;
use weir_engine::{CheckpointStatus, PipelineStatus};

pub fn prometheus_text(live: &[(i64, PipelineStatus, Vec<OperatorSample>)]) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let operators = |value: fn(&OperatorSample) -> f64| {
        live.iter()
            .flat_map(|(id, _, ops)| {
                ops.iter().map(move |o| {
                    (format!("pipeline=\"{id}\",operator=\"{}\",subtask=\"{}\"", o.operator, o.subtask), value(o))
                })
            })
            .collect::<Vec<_>>()
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
        "weir_transactions_committed_total",
        "counter",
        "Kafka transactions a sink subtask committed.",
        operators(|o| o.transactions_committed as f64),
    );
    family(
        "weir_transactions_aborted_total",
        "counter",
        "Kafka transactions a sink subtask aborted (lingering ones in recovery, the open one at shutdown).",
        operators(|o| o.transactions_aborted as f64),
    );
    let pipelines = |value: fn(&PipelineStatus) -> f64| {
        live.iter().map(|(id, status, _)| (format!("pipeline=\"{id}\""), value(status))).collect::<Vec<_>>()
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
    out
}

fn completed(status: &PipelineStatus) -> usize {
    status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count()
}

fn last(status: &PipelineStatus) -> Option<&weir_engine::CheckpointReport> {
    status.checkpoints.iter().rev().find(|c| c.status == CheckpointStatus::Completed)
}
