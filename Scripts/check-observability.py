#!/usr/bin/python3
"""Checks the Grafana dashboard and the Prometheus alerts against the metrics.

Run: /usr/bin/python3 Scripts/check-observability.py METRICS_FILE \
         deploy/grafana/wallet-dashboard.json deploy/prometheus/wallet-alerts.yml

METRICS_FILE is Prometheus exposition text, as GET /metrics serves it
(curl -s http://127.0.0.1:8080/metrics > /tmp/metrics.txt); only its
`# TYPE <name> <type>` lines are read.

The dashboard must have a `datasource` variable of type `datasource`, and
every panel and every panel target must use it as
{"type": "prometheus", "uid": "${datasource}"}. Every alert in the rules
file must have a `summary` and a `runbook` annotation. Every metric name the
dashboard's expressions (targets and variable queries) and the alerts'
expressions use (`wallet_…`; `_bucket`, `_sum` and `_count` of a histogram
count as the histogram) must be declared by a TYPE line. Exits 1 naming
each problem; prints the metric names used on success.
"""
import json
import re
import sys

import yaml

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRIC = re.compile(r"\bwallet_[a-z0-9_]+")
TYPE_LINE = re.compile(r"^#\s*TYPE\s+(\S+)\s+(\S+)")


def declared_metrics(path):
    types = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = TYPE_LINE.match(line)
            if m:
                types[m.group(1)] = m.group(2)
    return types


def all_panels(panels):
    """Panels, including those nested in collapsed rows."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def check_dashboard(path, problems):
    """Returns the PromQL expressions of the dashboard."""
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    variables = dashboard.get("templating", {}).get("list", [])
    if not any(v.get("name") == "datasource" and v.get("type") == "datasource" for v in variables):
        problems.append(f"{path}: no templating variable `datasource` of type datasource")
    expressions = []
    for v in variables:
        if v.get("type") != "query":
            continue
        if v.get("datasource") != DATASOURCE:
            problems.append(f"{path}: variable {v.get('name')!r} does not use ${{datasource}}")
        query = v.get("query")
        expressions.append(query.get("query", "") if isinstance(query, dict) else query or "")
    panels = list(all_panels(dashboard.get("panels", [])))
    if not panels:
        problems.append(f"{path}: no panels")
    for panel in panels:
        title = panel.get("title", f"id {panel.get('id')}")
        if panel.get("type") == "row":
            continue
        if panel.get("datasource") != DATASOURCE:
            problems.append(f"{path}: panel {title!r} does not use ${{datasource}}")
        targets = panel.get("targets", [])
        if not targets:
            problems.append(f"{path}: panel {title!r} has no targets")
        for target in targets:
            if target.get("datasource") != DATASOURCE:
                problems.append(f"{path}: panel {title!r} target {target.get('refId')} "
                                "does not use ${datasource}")
            expressions.append(target.get("expr", ""))
    return expressions


def check_rules(path, problems):
    """Returns the PromQL expressions of the rules."""
    with open(path, encoding="utf-8") as f:
        document = yaml.safe_load(f)
    expressions = []
    alerts = 0
    for group in (document or {}).get("groups", []):
        for rule in group.get("rules", []):
            expressions.append(str(rule.get("expr", "")))
            if "alert" not in rule:
                continue
            alerts += 1
            annotations = rule.get("annotations") or {}
            for key in ("summary", "runbook"):
                if not str(annotations.get(key, "")).strip():
                    problems.append(f"{path}: alert {rule['alert']} has no {key} annotation")
    if alerts == 0:
        problems.append(f"{path}: no alerts")
    return expressions


def base_name(name, types):
    """The declared name: a histogram's series map to the histogram."""
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def main(argv):
    if len(argv) != 4:
        sys.exit(f"usage: {argv[0]} METRICS_FILE DASHBOARD_JSON RULES_YAML")
    metrics_path, dashboard_path, rules_path = argv[1:]
    types = declared_metrics(metrics_path)
    problems = []
    used = {}
    for path, expressions in ((dashboard_path, check_dashboard(dashboard_path, problems)),
                              (rules_path, check_rules(rules_path, problems))):
        for expression in expressions:
            for name in METRIC.findall(expression):
                used.setdefault(base_name(name, types), set()).add(path)
    for name in sorted(used):
        if name not in types:
            problems.append(f"metric {name} (used in {', '.join(sorted(used[name]))}) "
                            f"is not declared in {metrics_path}")
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        sys.exit(1)
    print(f"ok: {len(used)} metrics used, all declared in {metrics_path}")
    for name in sorted(used):
        print(f"  {name} ({types[name]})")


if __name__ == "__main__":
    main(sys.argv)
