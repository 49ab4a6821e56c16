#!/usr/bin/env python3
"""Tests of the benchmark's floor: its SQL keeps what it claims to keep, its
books check finds a broken ledger, and the report states the targets
against it.

Run from the repository root:  /usr/bin/python3 bench/test_floor.py
Starts a PostgreSQL 15 cluster of its own in a temporary directory (as the
`postgres` user when run as root), like bench/run.py, and removes it after;
about ten seconds. Needs PostgreSQL's binaries (BENCH_PG_BIN, default
/usr/lib/postgresql/15/bin), not wrk and not the service.

Uses the Python 3 standard library only.
"""

import importlib.util
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent

spec = importlib.util.spec_from_file_location("bench_run", BENCH_DIR / "run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


class FloorSQLTests(unittest.TestCase):
    """The floor's schema, seed and scripts on a real PostgreSQL."""

    @classmethod
    def setUpClass(cls):
        cls.bench = run.Bench()
        cls.bench.with_floor = True
        cls.bench.start_postgres()
        cls.bench.seed_floor()

    @classmethod
    def tearDownClass(cls):
        cls.bench.stop_postgres()
        shutil.rmtree(cls.bench.temp_dir, ignore_errors=True)

    def sql(self, text):
        return self.bench.psql(text, database=run.FLOOR_DATABASE)

    def failing_sql(self, text):
        """Runs text in one psql session that must fail; returns its error output."""
        completed = self.bench.run([str(self.bench.pg_bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                                    "-h", "127.0.0.1", "-p", str(self.bench.pg_port), "-U", "postgres",
                                    "-d", run.FLOOR_DATABASE, "-c", text], 60, check=False)
        self.assertNotEqual(completed.returncode, 0, text)
        return completed.stderr

    def pgbench(self, scenario_name, transactions=25, clients=4):
        scenario = next(s for s in run.SCENARIOS if s.name == scenario_name)
        variables = dict(scenario.pgbench_variables, **scenario.floor_variables)
        arguments = [str(self.bench.pg_bin / "pgbench"), "-M", "prepared", "-n", "-t", str(transactions),
                     "-c", str(clients), "-j", "2", "-h", "127.0.0.1", "-p", str(self.bench.pg_port),
                     "-U", "postgres", "-f", str(BENCH_DIR / "sql" / scenario.floor_sql)]
        for name, value in variables.items():
            arguments += ["-D", f"{name}={value}"]
        completed = self.bench.run(arguments + [run.FLOOR_DATABASE], 120)
        self.assertIn(f"number of transactions actually processed: {transactions * clients}/", completed.stdout)

    def balance(self, user_id):
        return int(self.sql(f"SELECT balance FROM floor.wallets WHERE user_id = '{user_id}'"))

    def test_01_seed_matches_the_services_seed(self):
        # One to three grants per wallet in the other databases: 10^9, then 1,000 each.
        self.assertEqual(self.sql("SELECT count(*) FROM floor.wallets WHERE user_id LIKE 'pg-u%'"), str(run.WALLETS))
        self.assertEqual(self.balance("pg-u0"), run.SEED_COINS_SPREAD)
        self.assertEqual(self.balance("pg-u5"), run.SEED_COINS_SPREAD + 2000)
        self.assertEqual(self.balance(run.PGBENCH_HOT_WALLET), run.SEED_COINS_HOT)
        self.bench.check_floor()
        self.assertEqual(self.bench.floor_check[0], 0, self.bench.floor_check[1])

    def test_02_every_floor_script_keeps_the_books(self):
        hot_before = self.balance(run.PGBENCH_HOT_WALLET)
        for scenario in run.SCENARIOS:
            if scenario.floor_sql:
                with self.subTest(scenario.name):
                    self.pgbench(scenario.name)
        self.assertEqual(self.balance(run.PGBENCH_HOT_WALLET), hot_before - 100)
        self.assertEqual(self.sql("SELECT count(*) FROM floor.debit_keys"), "200")
        self.assertEqual(self.sql("SELECT count(*) FROM floor.credits"), "100")
        self.assertEqual(self.sql("SELECT count(*) FROM floor.holds WHERE entry_id IS NOT NULL"), "100")
        self.assertEqual(self.sql("SELECT sum(held) FROM floor.wallets"), "0")
        self.bench.check_floor()
        self.assertEqual(self.bench.floor_check[0], 0, self.bench.floor_check[1])

    def test_03_a_retried_key_or_flow_no_moves_nothing(self):
        self.sql("INSERT INTO floor.wallets (user_id, balance) VALUES ('retry', 10)")
        debit = """BEGIN;
            WITH w AS (UPDATE floor.wallets SET balance = balance - 1 WHERE user_id = 'retry' RETURNING balance),
                 e AS (INSERT INTO floor.entries (user_id, amount, balance_after)
                       SELECT 'retry', -1, balance FROM w RETURNING id)
            INSERT INTO floor.debit_keys (key, entry_id) SELECT 'k-retry', id FROM e;
            COMMIT;"""
        self.sql(debit)
        self.assertIn("debit_keys_pkey", self.failing_sql(debit))
        self.assertEqual(self.balance("retry"), 9)
        credit = """BEGIN;
            UPDATE floor.wallets SET balance = balance + 600 WHERE user_id = 'retry';
            INSERT INTO floor.credits (flow_no, entry_id) VALUES ('f-retry', 1);
            COMMIT;"""
        self.sql(credit)
        self.assertIn("credits_pkey", self.failing_sql(credit))
        self.assertEqual(self.balance("retry"), 609)
        self.sql("""DELETE FROM floor.debit_keys WHERE key = 'k-retry';
                    DELETE FROM floor.credits WHERE flow_no = 'f-retry';
                    DELETE FROM floor.entries WHERE user_id = 'retry';
                    DELETE FROM floor.wallets WHERE user_id = 'retry'""")

    def test_04_an_overdraft_or_a_hold_beyond_the_balance_is_refused(self):
        self.sql("INSERT INTO floor.wallets (user_id, balance, held) VALUES ('poor', 2, 1)")
        self.assertIn("wallets_no_overdraft",
                      self.failing_sql("UPDATE floor.wallets SET balance = balance - 2 WHERE user_id = 'poor'"))
        self.assertIn("wallets_no_overdraft",
                      self.failing_sql("UPDATE floor.wallets SET held = held + 2 WHERE user_id = 'poor'"))
        self.assertEqual(self.sql("SELECT balance || ' ' || held FROM floor.wallets WHERE user_id = 'poor'"), "2 1")
        self.sql("DELETE FROM floor.wallets WHERE user_id = 'poor'")

    def test_05_the_books_check_finds_a_broken_ledger(self):
        self.sql("UPDATE floor.wallets SET balance = balance + 1 WHERE user_id = 'pg-u7'")
        self.sql("INSERT INTO floor.entries (user_id, amount, balance_after) VALUES ('pg-u8', 0, 0)")
        try:
            self.bench.check_floor()
            violations, text = self.bench.floor_check
            self.assertEqual(violations, 2, text)
            self.assertIn("not the sum of their entries: 1", text)
            self.assertIn("exactly one key, credit or captured hold: 1", text)
        finally:
            self.sql("""UPDATE floor.wallets SET balance = balance - 1 WHERE user_id = 'pg-u7';
                        DELETE FROM floor.entries WHERE user_id = 'pg-u8' AND amount = 0""")
        self.bench.check_floor()
        self.assertEqual(self.bench.floor_check[0], 0, self.bench.floor_check[1])


class ReportTests(unittest.TestCase):
    """The targets are stated against the floor, met or NOT met."""

    @staticmethod
    def result(name, service_ops, floor_ops, own_ops, p99_ms=10.0):
        scenario = next(s for s in run.SCENARIOS if s.name == name)
        result = run.ScenarioResult(scenario)
        result.service = run.Measurement(ops=service_ops, p99_ms=p99_ms, requests=100)
        result.floor = {8: run.Measurement(ops=floor_ops / 2), 32: run.Measurement(ops=floor_ops)}
        result.pgbench = {8: run.Measurement(ops=own_ops), 32: run.Measurement(ops=own_ops / 2)}
        return result

    def rows(self, bench):
        return {line.split(" | ")[0].lstrip("| "): line for line in run.targets(bench) if line.startswith("| ")}

    def test_ratios_and_verdicts_are_against_the_floor(self):
        bench = run.Bench.__new__(run.Bench)
        bench.results = [self.result("debit-spread", 12_000, 6_000, 4_000),
                         self.result("debit-hot", 16_000, 1_600, 1_000, p99_ms=30.0)]
        bench.rss_peak_kb, bench.events, bench.seconds, bench.connections = None, None, 10, 64
        bench.unanalyzed = []
        rows = self.rows(bench)
        self.assertEqual(rows["debit spread ≥ 2.5× the floor (4× the aim)"],
                         "| debit spread ≥ 2.5× the floor (4× the aim) | 2.00× (own tables 3.00×) | NOT met |")
        self.assertEqual(rows["hot wallet ≥ 8× the hot floor"],
                         "| hot wallet ≥ 8× the hot floor | 10.00× (own tables 16.00×) | met |")
        self.assertTrue(rows["p99 ≤ 25 ms in every scenario"].endswith("| NOT met |"))
        self.assertIn("not measured", rows["credits ≥ 2.5× the floor"])

    def test_a_scenario_without_a_floor_has_no_floor_ratio(self):
        result = self.result("read-spread", 30_000, 0, 40_000)
        result.floor = {}
        self.assertIsNone(result.floor_ratio)
        self.assertEqual(result.ratio, 0.75)


if __name__ == "__main__":
    if shutil.which("pgbench") is None and not (Path(run.Bench().pg_bin) / "pgbench").exists():
        sys.exit("pgbench is missing; set BENCH_PG_BIN")
    unittest.main()
