#!/usr/bin/env python3
"""weir and Apache Flink side by side, on the same Nexmark bids from the same Parquet files.

    python3 tests/bench/flink_side_by_side.py [--events N] [--only NAME,...] [--skip-flink] [--no-check]

1. Provisions Flink 2.3 (PyFlink from PyPI into a venv, the flink-sql-parquet and Hadoop client
   jars from Maven Central) under ~/.cache/weir/flink, and builds weir's bench-fast binary.
2. Writes N Nexmark events' bids as Parquet with weir (once per N, kept under
   ~/.cache/weir/bench-data), by one writer, so that the files follow one another in event time
   and a reader taking them in turn never goes back in time: no engine drops late rows.
3. Runs each query on weir (`weir run`) and on Flink (PyFlink's local mini-cluster): the same
   files, parallelism 2, exactly-once checkpoints every second, a blackhole sink. Wall time
   includes each engine's start-up; CPU-seconds are the process tree's user + system time.
4. Checks that both engines give the same number of result rows (unless --no-check): each runs
   `SELECT count(*) FROM (<query>)` over the same files as a stream, with the same watermarks,
   and the count's last update is compared (Flink's with mini-batches, so that it does not send
   an update per row to the Python side). For an updating query that is the number of rows its
   changelog leaves, which a blackhole sink cannot show. Not timed.
5. Prints one table: wall time, rows/s, CPU-seconds, rows per CPU-second, weir/Flink, and the
   result rows of each engine.

A benchmark: it prints numbers and asserts nothing. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "weir"
FLINK = CACHE / "flink"
MAVEN = "https://repo1.maven.org/maven2"
JARS = [
    "org/apache/flink/flink-sql-parquet/2.3.0/flink-sql-parquet-2.3.0.jar",
    "org/apache/hadoop/hadoop-client-api/3.3.6/hadoop-client-api-3.3.6.jar",
    "org/apache/hadoop/hadoop-client-runtime/3.3.6/hadoop-client-runtime-3.3.6.jar",
]
PARALLELISM = 2
INTERVAL_MS = 1000

WEIR_BIDS = """CREATE TABLE bids (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR,
    WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND
) WITH (connector = 'filesystem', path = '{path}', format = 'parquet');
CREATE TABLE sink ({sink}) WITH (connector = 'blackhole');
SET parallelism = '{parallelism}';
SET checkpoint.interval = '{interval_ms} ms';
SET checkpoint.retained = '2';
"""

FLINK_BIDS = """CREATE TABLE bids (
    auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
    date_time TIMESTAMP(3), extra STRING,
    WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{uri}', 'format' = 'parquet')
;
CREATE TABLE sink ({sink}) WITH ('connector' = 'blackhole')
;
"""

BID_COLUMNS = (
    "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time TIMESTAMP(3), extra STRING"
)

# name, what it shows, weir's SELECT, Flink's SELECT (None: the same), the sink's columns (Flink's
# types; weir's are the same with VARCHAR and TIMESTAMP).
QUERIES = [
    ("passthrough", "every column of every bid", "SELECT * FROM bids", None, BID_COLUMNS),
    (
        "filter_project",
        "projection + filter",
        "SELECT auction, bidder, price * 908 / 1000 AS euros FROM bids WHERE price > 1000000",
        None,
        "auction BIGINT, bidder BIGINT, euros BIGINT",
    ),
    (
        "tumbling_1s",
        "1 s tumbling window, count and max per auction",
        "SELECT tumble(date_time, INTERVAL '1' SECOND) AS window_start, auction, count(*) AS bids, "
        "max(price) AS top FROM bids GROUP BY tumble(date_time, INTERVAL '1' SECOND), auction",
        "SELECT window_start, auction, count(*) AS bids, max(price) AS top "
        "FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) "
        "GROUP BY window_start, window_end, auction",
        "window_start TIMESTAMP(3), auction BIGINT, bids BIGINT, top BIGINT",
    ),
    (
        "hop_table_function",
        "HOP window table function, 10 s every 2 s, count and max per auction",
        "SELECT window_start, window_end, auction, count(*) AS bids, max(price) AS top "
        "FROM TABLE(HOP(TABLE bids, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end, auction",
        None,
        "window_start TIMESTAMP(3), window_end TIMESTAMP(3), auction BIGINT, bids BIGINT, top BIGINT",
    ),
    (
        "over_rows",
        "OVER aggregate: each bid with the max and count of its auction's last 10 bids and itself",
        "SELECT auction, price, max(price) OVER w AS recent_top, count(*) OVER w AS recent_bids FROM bids "
        "WINDOW w AS (PARTITION BY auction ORDER BY date_time ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)",
        None,
        "auction BIGINT, price BIGINT, recent_top BIGINT, recent_bids BIGINT",
    ),
    (
        "group_by_auction",
        "non-windowed GROUP BY auction, count and max (updating)",
        "SELECT auction, count(*) AS bids, max(price) AS top FROM bids GROUP BY auction",
        None,
        "auction BIGINT, bids BIGINT, top BIGINT",
    ),
    (
        "auction_statistics",
        "Nexmark q17 without the day: counts by price rank, min/max/avg/sum per auction",
        "SELECT auction, count(*) AS total, count(*) FILTER (WHERE price < 10000) AS rank1, "
        "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2, "
        "count(*) FILTER (WHERE price >= 1000000) AS rank3, min(price) AS low, max(price) AS high, "
        "avg(price) AS average, sum(price) AS total_price FROM bids GROUP BY auction",
        "SELECT auction, count(*) AS total, count(*) FILTER (WHERE price < 10000) AS rank1, "
        "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2, "
        "count(*) FILTER (WHERE price >= 1000000) AS rank3, min(price) AS low, max(price) AS high, "
        "CAST(avg(CAST(price AS DOUBLE)) AS DOUBLE) AS average, sum(price) AS total_price FROM bids GROUP BY auction",
        "auction BIGINT, total BIGINT, rank1 BIGINT, rank2 BIGINT, rank3 BIGINT, low BIGINT, high BIGINT, "
        "average DOUBLE, total_price BIGINT",
    ),
    (
        "q7_highest_bid",
        "Nexmark q7: the bids at each 10 s window's highest price (window aggregate joined back)",
        "SELECT b.auction, b.price, b.bidder, b.date_time FROM bids b JOIN ("
        "SELECT max(price) AS top, window_start, window_end "
        "FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end) m "
        "ON b.price = m.top AND b.date_time >= m.window_start AND b.date_time < m.window_end",
        None,
        "auction BIGINT, price BIGINT, bidder BIGINT, date_time TIMESTAMP(3)",
    ),
    (
        "q18_last_bid",
        "Nexmark q18: each bidder's last bid on each auction (deduplication, updating)",
        "SELECT auction, bidder, price, channel, date_time FROM ("
        "SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rn "
        "FROM bids) WHERE rn <= 1",
        None,
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, date_time TIMESTAMP(3)",
    ),
    (
        "q19_auction_top10",
        "Nexmark q19: the ten highest bids of each auction (top-N, updating)",
        "SELECT auction, bidder, price, date_time, rn FROM ("
        "SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn "
        "FROM bids) WHERE rn <= 10",
        None,
        "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3), rn BIGINT",
    ),
    (
        "group_by_bidder_auction",
        "GROUP BY bidder, auction: many groups",
        "SELECT bidder, auction, count(*) AS bids, max(price) AS top FROM bids GROUP BY bidder, auction",
        None,
        "bidder BIGINT, auction BIGINT, bids BIGINT, top BIGINT",
    ),
]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def provision_flink() -> Path:
    """The venv's Python with PyFlink, and the jars beside it."""
    python = FLINK / "venv" / "bin" / "python"
    if not (FLINK / "venv" / ".installed-2.3.0").exists():
        log("provisioning PyFlink 2.3.0 from PyPI (several hundred MB, once)...")
        subprocess.run([sys.executable, "-m", "venv", str(FLINK / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--progress-bar", "off", "apache-flink==2.3.0"], check=True)
        (FLINK / "venv" / ".installed-2.3.0").touch()
    jars = FLINK / "jars"
    jars.mkdir(parents=True, exist_ok=True)
    for path in JARS:
        target = jars / Path(path).name
        if not target.exists():
            log(f"downloading {target.name} from Maven Central...")
            with urllib.request.urlopen(f"{MAVEN}/{path}") as response, open(f"{target}.part", "wb") as out:
                shutil.copyfileobj(response, out)
            os.replace(f"{target}.part", target)
    return python


def build_weir() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", CACHE / "target"))
    log("building weir (bench-fast profile; the first build takes a long time on 2 cores)...")
    env = {**os.environ, "CARGO_TARGET_DIR": str(target)}
    subprocess.run(["cargo", "build", "--profile", "bench-fast", "--bin", "weir"], cwd=ROOT, env=env, check=True)
    return target / "bench-fast" / "weir"


def tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Records the CPU-seconds so far of `root` and every process under it, by pid."""
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            for task in os.listdir(f"/proc/{pid}/task"):
                stack.extend(int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # The fields after the command name (which may hold spaces) are space-separated:
        # utime and stime are the 12th and 13th.
        fields = stat[stat.rindex(")") + 2 :].split()
        seen[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(command: list[str], log_file: Path) -> tuple[float, float, int]:
    """Runs `command` to its end: wall seconds, CPU-seconds of its process tree, exit code.

    The tree is sampled every 100 ms: PyFlink's JVM is a process the Python one does not wait
    for, so its time is not in the children's rusage. A process's last 100 ms may be missed,
    for either engine alike.
    """
    seen: dict[int, float] = {}
    started = time.monotonic()
    with open(log_file, "w") as out:
        # A session of its own, so that nothing of it (PyFlink's JVM) outlives an interrupted run.
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while process.poll() is None:
                tree_cpu(process.pid, seen)
                time.sleep(0.1)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    wall = time.monotonic() - started
    return wall, sum(seen.values()), process.returncode


def without_state(run: tuple[float, float, int], state: Path) -> tuple[float, float, int]:
    """`run`'s result, after deleting the checkpoints it left (gigabytes for 46 M bids; the
    logs stay)."""
    shutil.rmtree(state, ignore_errors=True)
    return run


def write_bids(weir: Path, events: int, work: Path) -> tuple[Path, int]:
    """The Parquet files of `events` events' bids (written once), and how many bids they hold."""
    data = CACHE / "bench-data" / f"bids-{events}-in-order"
    count_file = data / "bids.count"
    if not count_file.exists():
        shutil.rmtree(data, ignore_errors=True)
        (data / "files").mkdir(parents=True)
        log(f"writing the bids of {events:,} Nexmark events as Parquet with weir...")
        sql = work / "write_bids.sql"
        sql.write_text(
            f"""CREATE TABLE nexmark WITH (connector = 'nexmark', events = '{events}', as_fast_as_possible = 'true');
CREATE TABLE bids (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'filesystem', path = '{data / "files"}', format = 'parquet');
SET parallelism = '1';
INSERT INTO bids SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url, date_time, bid.extra
FROM nexmark WHERE event_type = 2;
"""
        )
        wall, _, code = timed([str(weir), "run", str(sql), "--data-dir", str(work / "write")], work / "write_bids.log")
        if code != 0:
            sys.exit(f"writing the bids failed; see {work / 'write_bids.log'}")
        # The Nexmark mix: 46 bids in every 50 events (`events` is a multiple of 50).
        count_file.write_text(str(events // 50 * 46))
        log(f"  written in {wall:.1f} s")
    return data / "files", int(count_file.read_text())


def run_weir(weir: Path, files: Path, select: str, sink: str, work: Path, name: str) -> tuple[float, float, int]:
    sql = work / f"weir_{name}.sql"
    sink = sink.replace("STRING", "VARCHAR").replace("TIMESTAMP(3)", "TIMESTAMP")
    header = WEIR_BIDS.format(path=files, sink=sink, parallelism=PARALLELISM, interval_ms=INTERVAL_MS)
    sql.write_text(f"{header}INSERT INTO sink {select};\n")
    return without_state(
        timed([str(weir), "run", str(sql), "--data-dir", str(work / f"weir_{name}")], work / f"weir_{name}.log"),
        work / f"weir_{name}",
    )


def run_flink(python: Path, files: Path, select: str, sink: str, work: Path, name: str) -> tuple[float, float, int]:
    sql = work / f"flink_{name}.sql"
    sql.write_text(FLINK_BIDS.format(uri=files.resolve().as_uri(), sink=sink) + f"INSERT INTO sink {select}\n")
    job = Path(__file__).with_name("flink_job.py")
    checkpoints = work / f"flink_{name}_checkpoints"
    command = [str(python), str(job), str(FLINK / "jars"), str(checkpoints), str(PARALLELISM), str(INTERVAL_MS), str(sql)]
    return without_state(timed(command, work / f"flink_{name}.log"), checkpoints)


def weir_count(weir: Path, files: Path, select: str, work: Path, name: str) -> int | None:
    """The number of result rows `select` leaves on weir: the last update of a streamed count."""
    sql = work / f"weir_{name}_count.sql"
    header = WEIR_BIDS.format(path=files, sink="n BIGINT", parallelism=PARALLELISM, interval_ms=INTERVAL_MS)
    sql.write_text(f"{header}SELECT count(*) AS n FROM ({select});\n")
    log_file = work / f"weir_{name}_count.log"
    command = [str(weir), "run", str(sql), "--data-dir", str(work / f"weir_{name}_count"), "--max-rows", "1"]
    _, _, code = without_state(timed(command, log_file), work / f"weir_{name}_count")
    return last_number(log_file) if code == 0 else None


def flink_count(python: Path, files: Path, select: str, work: Path, name: str) -> int | None:
    """The number of result rows `select` leaves on Flink: the last update of a streamed count."""
    sql = work / f"flink_{name}_count.sql"
    sql.write_text(FLINK_BIDS.format(uri=files.resolve().as_uri(), sink="n BIGINT") + f"SELECT count(*) FROM ({select})\n")
    job = Path(__file__).with_name("flink_job.py")
    log_file = work / f"flink_{name}_count.log"
    checkpoints = work / f"flink_{name}_count_checkpoints"
    command = [str(python), str(job), str(FLINK / "jars"), str(checkpoints), str(PARALLELISM), str(INTERVAL_MS), str(sql)]
    _, _, code = without_state(timed(command, log_file), checkpoints)
    return last_number(log_file) if code == 0 else None


def last_number(log_file: Path) -> int | None:
    """The number opening the log's last line that opens with one: a table row (`| 1234 | +U |`,
    weir's last update of the count) or a bare line (Flink's)."""
    cells = [line.strip().strip("|").split("|")[0].strip() for line in log_file.read_text().splitlines()]
    numbers = [c for c in cells if c.isdigit()]
    return int(numbers[-1]) if numbers else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="Nexmark events (46 in 50 are bids)")
    parser.add_argument("--only", default="", help="comma-separated query names")
    parser.add_argument("--skip-flink", action="store_true", help="run weir only")
    parser.add_argument("--no-check", action="store_true", help="do not compare the result row counts")
    args = parser.parse_args()
    if args.events <= 0 or args.events % 50:
        parser.error("--events: a positive multiple of 50 (the Nexmark mix repeats every 50 events)")
    only = {n for n in args.only.split(",") if n}
    queries = [q for q in QUERIES if not only or q[0] in only]
    python = None if args.skip_flink else provision_flink()
    weir = build_weir()
    work = Path(tempfile.mkdtemp(prefix="weir-vs-flink-"))
    files, bids = write_bids(weir, args.events, work)
    results = []
    for name, what, weir_select, flink_select, sink in queries:
        log(f"{name}: {what}")
        weir_run = run_weir(weir, files, weir_select, sink, work, name)
        log(f"  weir  {weir_run[0]:7.1f} s  {weir_run[1]:7.1f} cpu-s  exit {weir_run[2]}")
        flink_run = None
        if python is not None:
            flink_run = run_flink(python, files, flink_select or weir_select, sink, work, name)
            log(f"  flink {flink_run[0]:7.1f} s  {flink_run[1]:7.1f} cpu-s  exit {flink_run[2]}")
        counts = (None, None)
        if not args.no_check:
            counts = (
                weir_count(weir, files, weir_select, work, name),
                None if python is None else flink_count(python, files, flink_select or weir_select, work, name),
            )
            log(f"  result rows: weir {counts[0]}, flink {counts[1]}")
        results.append((name, weir_run, flink_run, counts))
    print(f"\n{bids:,} bids ({args.events:,} Nexmark events), parallelism {PARALLELISM}, "
          f"exactly-once checkpoints every {INTERVAL_MS} ms, blackhole sink; logs in {work}")
    print("weir/flink: weir's wall time over Flink's (Flink's includes its start-up, about 10 s here);")
    print("cpu x: how many times more rows per CPU-second weir gets through.")
    print("result rows: the rows the query leaves (a count in each engine); 'same' when both agree.")
    print(f"{'query':<26}{'engine':<7}{'wall s':>9}{'M rows/s':>10}{'cpu-s':>9}{'M rows/cpu-s':>14}"
          f"{'weir/flink':>12}{'cpu x':>8}{'result rows':>14}")
    mismatches = []
    for name, weir_run, flink_run, counts in results:
        if None not in counts and counts[0] != counts[1]:
            mismatches.append(name)
        for engine, run, count in (("weir", weir_run, counts[0]), ("flink", flink_run, counts[1])):
            if run is None:
                continue
            wall, cpu, code = run
            if code != 0:
                print(f"{name:<26}{engine:<7}{'failed (exit ' + str(code) + ')':>30}")
                continue
            ratio, cpu_ratio = "", ""
            if engine == "flink" and weir_run[2] == 0:
                ratio = f"{weir_run[0] / wall:.3f}"
                cpu_ratio = f"{cpu / max(weir_run[1], 0.01):.1f}"
            rows = "" if count is None else f"{count:,}"
            if engine == "flink" and count is not None and count == counts[0]:
                rows = "same"
            print(f"{name:<26}{engine:<7}{wall:>9.1f}{bids / wall / 1e6:>10.2f}{cpu:>9.1f}"
                  f"{bids / max(cpu, 0.01) / 1e6:>14.2f}{ratio:>12}{cpu_ratio:>8}{rows:>14}")
    if mismatches:
        print(f"RESULT ROW COUNTS DIFFER: {', '.join(mismatches)}")


if __name__ == "__main__":
    main()
