#!/usr/bin/env python3
"""Times the statements the support console's overview issues, as it
issued them before the rollups (an aggregation of wallet.entries and a scan
of wallet.wallets) and as it issues them now (wallet.console_totals and
wallet.console_balances), on one database, for 7, 30 and 90 days; prints
the median, min and max of each overview's total over `runs` runs.

How to run, against a database migrated by this build and seeded (for
example with Tests/Browser/seed.sql scaled up: see docs/console.md):

  python3 bench/console_overview.py "host=/path/to/socket dbname=wallet" 5
"""
import re, statistics, subprocess, sys

conn = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5

def common(days):
    window = f"(now() AT TIME ZONE 'UTC')::date - {days - 1}"
    start = f"(({window})::timestamp AT TIME ZONE 'UTC')"
    return window, start, [
        f"SELECT outcome, count(*) FROM wallet.appstore_notifications WHERE received_at >= {start} GROUP BY outcome ORDER BY outcome",
        f"SELECT reason, sum(refusals)::bigint FROM wallet.appstore_refused_notifications WHERE received_at >= {start} GROUP BY reason ORDER BY reason",
        f"SELECT outcome, count(*) FROM wallet.googleplay_notifications WHERE received_at >= {start} GROUP BY outcome ORDER BY outcome",
        f"""SELECT received_at, reason, apple_signed, refusals::bigint FROM (
            (SELECT * FROM wallet.appstore_refused_notifications WHERE apple_signed AND received_at >= {start} ORDER BY id DESC LIMIT 10)
            UNION ALL
            (SELECT * FROM wallet.appstore_refused_notifications WHERE NOT apple_signed AND received_at >= {start} ORDER BY id DESC LIMIT 10)
        ) r ORDER BY id DESC""",
    ]

def before(days):
    window, start, rest = common(days)
    return [f"""WITH sums AS (
        SELECT (e.created_at AT TIME ZONE 'UTC')::date AS day,
               coalesce(sum(e.amount) FILTER (WHERE e.kind = 'credit'), 0) AS credited,
               coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'debit'), 0) AS debited,
               coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
        FROM wallet.entries e WHERE e.created_at >= {start} AND e.kind IN ('credit', 'debit', 'refund') GROUP BY 1)
        SELECT d::date, coalesce(s.credited, 0)::bigint, coalesce(s.debited, 0)::bigint, coalesce(s.refunded, 0)::bigint
        FROM generate_series({window}, (now() AT TIME ZONE 'UTC')::date, INTERVAL '1 day') d
        LEFT JOIN sums s ON s.day = d::date ORDER BY d""",
        f"""SELECT (SELECT count(*) FROM wallet.credits WHERE created_at >= {start}),
               (SELECT count(*) FROM wallet.entries WHERE kind = 'refund' AND created_at >= {start}),
               (SELECT count(*) FROM wallet.outbox WHERE kind = 'appstore_consumption' AND created_at >= {start})""",
        "SELECT user_id, currency, balance FROM wallet.wallets ORDER BY balance DESC, user_id, currency LIMIT 10",
        "SELECT user_id, currency, balance FROM wallet.wallets WHERE balance < 0 ORDER BY balance, user_id, currency LIMIT 10",
    ] + rest

def after(days):
    window, start, rest = common(days)
    return [f"SELECT d::date FROM generate_series({window}, (now() AT TIME ZONE 'UTC')::date, INTERVAL '1 day') d ORDER BY d",
        f"SELECT day::text, kind, amount::bigint, entries FROM wallet.console_totals(({window})::date)",
        f"SELECT count(*) FROM wallet.outbox WHERE kind = 'appstore_consumption' AND created_at >= {start}",
        "SELECT user_id, currency, balance FROM wallet.console_balances('largest')",
        "SELECT user_id, currency, balance FROM wallet.console_balances('negative')",
    ] + rest

def run(statements):
    script = "\\timing on\n" + "".join(s.replace("\n", " ") + ";\n" for s in statements)
    out = subprocess.run(["psql", "-X", "-q", "-o", "/dev/null", conn], input=script, capture_output=True, text=True, check=True)
    times = [float(t) for t in re.findall(r"Time: ([0-9.]+) ms", out.stdout + out.stderr)]
    assert len(times) == len(statements), out
    return sum(times)

for name, build in (("before", before), ("after", after)):
    for days in (7, 30, 90):
        totals = sorted(run(build(days)) for _ in range(runs))
        print(f"{name:6} days={days:2}  median {statistics.median(totals):8.1f} ms  min {totals[0]:8.1f}  max {totals[-1]:8.1f}")
