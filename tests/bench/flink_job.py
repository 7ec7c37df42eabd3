"""One query of the side-by-side benchmark on Apache Flink (PyFlink's local mini-cluster).

Run by flink_side_by_side.py with the venv's Python:
    flink_job.py JARS_DIR CHECKPOINT_DIR PARALLELISM INTERVAL_MS SQL_FILE

The SQL file holds the table definitions and the INSERT, separated by lines holding only ';'.
Exactly-once checkpoints every INTERVAL_MS to filesystem storage (the default in-memory storage
refuses state over 5 MB), the hashmap state backend, as Flink's own Nexmark runs use.

When the last statement is a SELECT (the benchmark's row-count check), its changelog is printed
one row per line, values only, with mini-batches of a second so that an aggregate sends an
update per batch rather than per row.
"""

import sys
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment


def main() -> None:
    jars_dir, checkpoint_dir, parallelism, interval_ms, sql_file = sys.argv[1:6]
    jars = ";".join(p.resolve().as_uri() for p in sorted(Path(jars_dir).glob("*.jar")))
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("pipeline.jars", jars)
    config.set("parallelism.default", parallelism)
    config.set("execution.checkpointing.interval", f"{interval_ms} ms")
    config.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set("state.backend.type", "hashmap")
    config.set("execution.checkpointing.storage", "filesystem")
    config.set("execution.checkpointing.dir", Path(checkpoint_dir).resolve().as_uri())
    statements = [s.strip() for s in Path(sql_file).read_text().split("\n;\n") if s.strip()]
    select = statements[-1].upper().startswith("SELECT")
    if select:
        config.set("table.exec.mini-batch.enabled", "true")
        config.set("table.exec.mini-batch.allow-latency", "1 s")
        config.set("table.exec.mini-batch.size", "100000")
    for statement in statements[:-1]:
        env.execute_sql(statement)
    result = env.execute_sql(statements[-1])
    if select:
        with result.collect() as rows:
            for row in rows:
                print(*row, flush=True)
    else:
        result.wait()


if __name__ == "__main__":
    main()
