"""weir as a BI tool's SQL layer sees it: SQLAlchemy 2 (what Superset and many notebooks
build on) over psycopg 3 connects (it parses version(), asks the isolation level, sets
savepoints, looks up types by to_regtype), reflects weir's tables and views through its
inspector (pg_catalog queries with joins, unnest and generate_subscripts), then runs a query it
builds over a reflected view. Exits non-zero on the first thing that is not as expected.
Arguments: host, port, token (the password)."""

import sys

import sqlalchemy as sa

host, port, token = sys.argv[1], sys.argv[2], sys.argv[3]


def check(what, actual, expected):
    if actual != expected:
        sys.exit(f"sqlalchemy: {what}: {actual!r}, expected {expected!r}")
    print(f"sqlalchemy: {what}: ok")


engine = sa.create_engine(f"postgresql+psycopg://weir:{token}@{host}:{port}/weir")
with engine.connect() as conn:
    check("the server's version", engine.dialect.server_version_info[0], 16)
    conn.execute(sa.text(
        "CREATE OR REPLACE TABLE sa_nx WITH (connector = 'nexmark', events = '200', as_fast_as_possible = 'true')"
    ))
    conn.execute(sa.text(
        "CREATE OR REPLACE VIEW sa_bids AS SELECT bid.auction, bid.price FROM sa_nx WHERE event_type = 2"
    ))
    inspector = sa.inspect(conn)
    check("schemas", inspector.get_schema_names(), ["public"])
    check("tables include sa_nx", "sa_nx" in inspector.get_table_names(), True)
    check("views include sa_bids", "sa_bids" in inspector.get_view_names(), True)
    columns = {c["name"]: (str(c["type"]), c["nullable"]) for c in inspector.get_columns("sa_bids")}
    check("a view's columns", columns, {"auction": ("BIGINT", True), "price": ("BIGINT", True)})
    columns = [c["name"] for c in inspector.get_columns("sa_nx")]
    check("a table's columns", columns, ["event_type", "person", "auction", "bid", "date_time"])
    check("no primary key", inspector.get_pk_constraint("sa_nx")["constrained_columns"], [])
    check("no foreign keys", inspector.get_foreign_keys("sa_nx"), [])
    check("no indexes", inspector.get_indexes("sa_nx"), [])

    bids = sa.Table("sa_bids", sa.MetaData(), autoload_with=conn)
    query = sa.select(sa.func.count()).select_from(bids).where(bids.c.price > sa.bindparam("least", 0))
    everything = conn.execute(query, {"least": 0}).scalar_one()
    check("a built query over a reflected view", everything, 184)
    some = conn.execute(query, {"least": 1000}).scalar_one()
    check("the same with another parameter", 0 < some < everything, True)
print("sqlalchemy: all ok")
