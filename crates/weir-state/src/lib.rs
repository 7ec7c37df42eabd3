//! Operator snapshots: Arrow batches written to and read from Parquet files on object storage,
//! one file per (checkpoint, operator, subtask, table), with a manifest per checkpoint and
//! retention of the last completed checkpoints. (Built in the runtime issue.)
