"""weir through psycopg 3, as a Python program talks to Postgres; exits non-zero on the
first thing that is not as expected. Arguments: host, port, token (the password)."""

import sys

import psycopg
from psycopg import errors

host, port, token = sys.argv[1], sys.argv[2], sys.argv[3]
BOUNDED = "CREATE TABLE nx WITH (connector = 'nexmark', events = '200', as_fast_as_possible = 'true')"


def check(what, actual, expected):
    if actual != expected:
        sys.exit(f"psycopg: {what}: {actual!r}, expected {expected!r}")
    print(f"psycopg: {what}: ok")


# A wrong password is refused.
try:
    psycopg.connect(host=host, port=port, user="weir", dbname="weir", password="wrong", autocommit=True)
    sys.exit("psycopg: a wrong password was let in")
except psycopg.OperationalError as error:
    check("a wrong password is refused", "password authentication failed" in str(error).lower(), True)

with psycopg.connect(host=host, port=port, user="weir", dbname="weir", password=token, autocommit=True) as conn:
    # Postgres's session settings, which tools set and read.
    conn.execute("SET application_name = 'weir-tests'")
    check("SHOW TimeZone", conn.execute("SHOW TimeZone").fetchall(), [("UTC",)])
    conn.execute(BOUNDED)
    conn.execute("CREATE TABLE live WITH (connector = 'nexmark', rate = '200')")

    # Parameters bound by the driver; rows typed.
    rows = conn.execute(
        "SELECT person.id, person.name FROM nx WHERE event_type = 0 AND person.id < %s", [1002]
    ).fetchall()
    check("rows with a bound parameter", sorted(rows), [(1000, "Walter Abrams"), (1001, "Deiter White")])
    rows = conn.execute("SELECT count(*) FROM nx WHERE bid.channel = %s", ["Google"]).fetchall()
    check("a text parameter", isinstance(rows[0][0], int) and rows[0][0] > 0, True)

    # An updating query's final rows.
    rows = conn.execute("SELECT event_type, count(*) FROM nx GROUP BY event_type").fetchall()
    check("an updating query's final rows", sorted(rows), [(0, 4), (1, 12), (2, 184)])

    # A stream read through a cursor, and through COPY.
    conn.execute("DECLARE c CURSOR FOR SELECT bid.auction, bid.price FROM live WHERE event_type = 2")
    rows = conn.execute("FETCH 5 FROM c").fetchall()
    check("a cursor's rows over a stream", (len(rows), all(len(r) == 2 for r in rows)), (5, True))
    conn.execute("CLOSE c")
    with conn.cursor() as cur:
        lines = []
        with cur.copy("COPY (SELECT bid.price FROM nx WHERE event_type = 2) TO STDOUT") as copy:
            for row in copy.rows():
                lines.append(row)
        check("COPY TO STDOUT's rows", len(lines), 184)

    # Errors with their SQLSTATE.
    try:
        conn.execute("SELECT nope FROM nx")
        sys.exit("psycopg: an unknown column was not an error")
    except errors.UndefinedColumn as error:
        check("an unknown column's SQLSTATE", error.sqlstate, "42703")
    try:
        conn.execute("SELECT bid.price FROM live")
        sys.exit("psycopg: a stream's SELECT was not refused")
    except errors.FeatureNotSupported as error:
        check("a stream's SELECT refused", "COPY" in (error.diag.message_hint or ""), True)
    check("the connection still works", conn.execute("SELECT count(*) FROM nx WHERE event_type = 0").fetchall(), [(4,)])
print("psycopg: all ok")
