#!/usr/bin/env python3
"""One process against two workers: the same pipelines in `weir serve` alone, and with their
tasks on two `weir worker` processes on this machine (the hash exchange between them over
Arrow Flight), to show what the network exchange costs.

    python3 tests/bench/workers.py [--events N] [--only NAME,...]

For each query: starts a fresh `weir serve` (with a cluster secret and two workers of one slot
each in the second run), submits the query over the HTTP API (a bounded Nexmark source of N
events, as fast as possible, parallelism 2, exactly-once checkpoints every second, a blackhole
sink), and waits for it to finish. Wall time runs from the submission to the finished status;
CPU-seconds are the user + system time of every weir process (controller and workers). The
network's cost is the extra CPU time of the worker run, per row that crossed the hash
exchange (the bids; with two subtasks on two workers, about half of them cross the network,
the rest stay on their worker, through the same Flight path to itself).

A benchmark: it prints numbers and asserts nothing. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET = "bench-secret"
QUERIES = {
    "group_by_auction": "INSERT INTO sink SELECT bid.auction, count(*), max(bid.price) FROM nexmark "
    "WHERE event_type = 2 GROUP BY bid.auction",
    "group_by_bidder": "INSERT INTO sink SELECT bid.bidder, count(*), max(bid.price) FROM nexmark "
    "WHERE event_type = 2 GROUP BY bid.bidder",
}
SINKS = {
    "group_by_auction": "auction BIGINT, bids BIGINT, top BIGINT",
    "group_by_bidder": "bidder BIGINT, bids BIGINT, top BIGINT",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "weir" / "target"))
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    log("building weir (bench-fast profile; the first build takes a long time on 2 cores)...")
    subprocess.run(["cargo", "build", "--profile", "bench-fast", "--bin", "weir"], cwd=ROOT, env=env, check=True)
    return target / "bench-fast" / "weir"


def cpu_seconds(pid: int) -> float:
    """User + system time of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def started(command: list[str], prefix: str, log_file: Path) -> tuple[subprocess.Popen, str]:
    """Starts a weir process and reads the address it prints first."""
    env = dict(os.environ, RUST_LOG="warn")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file.open("a"), text=True, env=env)
    line = process.stdout.readline().strip()
    if not line.startswith(prefix):
        sys.exit(f"{command[1]} did not start ({line!r}); see {log_file}")
    return process, line[len(prefix):].split()[0]


def call(base: str, method: str, path: str, body: dict | None = None) -> object:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def run(weir: Path, name: str, events: int, workers: int, work: Path) -> tuple[float, float, list]:
    """Runs query `name` over `events` events; returns wall seconds, CPU-seconds and placement."""
    data = work / f"{name}-{workers}"
    data.mkdir()
    log_file = work / f"{name}-{workers}.log"
    serve = [str(weir), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)]
    if workers:
        serve += ["--cluster-secret", SECRET]
    controller, address = started(serve, "weir listening on ", log_file)
    processes = [controller]
    try:
        for n in range(workers):
            worker, _ = started(
                [str(weir), "worker", "--controller", address, "--listen", "127.0.0.1:0", "--slots", "1",
                 "--cluster-secret", SECRET, "--id", f"bench-{n}"],
                "weir worker listening on ",
                log_file,
            )
            processes.append(worker)
        while workers and len([w for w in call(address, "GET", "/api/v1/workers") if w["status"] == "alive"]) < workers:
            time.sleep(0.05)
        sql = f"""CREATE TABLE nexmark WITH (connector = 'nexmark', events = '{events}', as_fast_as_possible = 'true');
CREATE TABLE sink ({SINKS[name]}) WITH (connector = 'blackhole');
SET parallelism = '2';
SET checkpoint.interval = '1000 ms';
{QUERIES[name]};"""
        before = sum(cpu_seconds(p.pid) for p in processes)
        begun = time.monotonic()
        results = call(address, "POST", "/api/v1/statements", {"sql": sql})
        pipeline = next(r["id"] for r in results if r["kind"] == "pipeline")
        while True:
            view = call(address, "GET", f"/api/v1/pipelines/{pipeline}")
            if view["status"] in ("finished", "failed"):
                break
            time.sleep(0.05)
        wall = time.monotonic() - begun
        cpu = sum(cpu_seconds(p.pid) for p in processes) - before
        if view["status"] != "finished":
            sys.exit(f"{name} failed: {view['errors']}")
        return wall, cpu, (view.get("placement") or {}).get("workers", [])
    finally:
        for process in processes:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--only", default=",".join(QUERIES))
    args = parser.parse_args()
    weir = build()
    bids = args.events // 50 * 46
    rows = []
    with tempfile.TemporaryDirectory(prefix="weir-bench-workers-") as work:
        for name in args.only.split(","):
            for workers in (0, 2):
                where = "two workers" if workers else "one process"
                log(f"{name}: {args.events:,} events in {where}...")
                wall, cpu, placement = run(weir, name, args.events, workers, Path(work))
                if workers and len(placement) != workers:
                    sys.exit(f"{name} was not placed on {workers} workers: {placement}")
                rows.append((name, where, wall, cpu))
                log(f"  {wall:.1f} s, {cpu:.1f} cpu-s")
    print(f"{args.events:,} Nexmark events ({bids:,} bids cross the hash exchange), parallelism 2, checkpoints every 1 s")
    print(f"{'query':<20} {'where':<12} {'wall s':>8} {'events/s':>12} {'cpu-s':>8} {'events/cpu-s':>13} {'net cpu-us/bid':>15}")
    local = {}
    for name, where, wall, cpu in rows:
        extra = ""
        if where == "one process":
            local[name] = cpu
        else:
            extra = f"{(cpu - local[name]) / bids * 1e6:>15.2f}"
        print(f"{name:<20} {where:<12} {wall:>8.1f} {args.events / wall:>12,.0f} {cpu:>8.1f} {args.events / cpu:>13,.0f} {extra}")


if __name__ == "__main__":
    main()
