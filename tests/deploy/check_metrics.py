#!/usr/bin/python3
"""Checks every pdserve metric name the deployment uses against the contract, deploy/metrics.txt.

  - metrics.txt itself: "<name> <counter|gauge|histogram> <roles> [labels=...] [buckets=...]"
    lines, counters end in _total, no name twice, every histogram names a bucket layout that a
    "buckets <layout> <bound>..." line defines with strictly increasing bounds;
  - the Grafana dashboard (deploy/grafana/*.json) parses as JSON, declares a datasource template
    variable and uses it in every panel and target (no hard-coded datasource);
  - every pdserve_* name in the dashboard's queries, the Prometheus rules (deploy/prometheus/
    *.rules.yml), the Prometheus Adapter rules and the HPAs' metrics (deploy/k8s) is in the
    contract: a counter or gauge by its name, a histogram as <name>_bucket, _sum or _count;
  - every recording-rule name (pdserve:...) that a rule or the dashboard reads is recorded;
  - deploy/prometheus/prometheus.yml scrapes every pdserve-* job over HTTPS (the processes run
    with TLS): scheme https and a tls_config with the CA (ca_file), and for the cluster's jobs
    (DNS discovery of pod IPs) the server_name the certificates carry.
Every problem is printed as "<file>: <where>: <what is wrong>"; the exit status is 1 when there is
any.
"""

import argparse
import glob
import json
import os
import re
import sys

try:
    import yaml
except ImportError:
    sys.exit("check_metrics.py: PyYAML is missing (Debian: apt-get install python3-yaml; "
             "scripts/setup.sh installs it)")

TYPES = ("counter", "gauge", "histogram")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
METRIC = re.compile(r"(?<![A-Za-z0-9_:])pdserve_[A-Za-z0-9_]+")
RECORDED = re.compile(r"(?<![A-Za-z0-9_:])pdserve:[A-Za-z0-9_:]+")


def load_contract(path, problems):
    contract = {}
    layouts = {}
    wanted_layouts = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            where = "{}:{}".format(path, number)
            if fields[0] == "buckets":
                load_layout(fields, where, layouts, problems)
                continue
            if len(fields) < 3 or fields[1] not in TYPES:
                problems.append("{}: '{}': want '<name> <{}> <roles> [labels=...] [buckets=...]'"
                                .format(where, line, "|".join(TYPES)))
                continue
            name, kind = fields[0], fields[1]
            options = dict(field.split("=", 1) for field in fields[3:] if "=" in field)
            if any("=" not in field or field.split("=", 1)[0] not in ("labels", "buckets")
                   for field in fields[3:]):
                problems.append("{}: '{}': only labels= and buckets= may follow the roles".format(
                    where, line))
            if not re.fullmatch(r"pdserve_[a-z0-9_]+", name):
                problems.append("{}: '{}' is not a pdserve_ metric name".format(where, name))
            if name in contract:
                problems.append("{}: {} is listed twice".format(where, name))
            if kind == "counter" and not name.endswith("_total"):
                problems.append("{}: counter {} must be named with _total".format(where, name))
            if kind != "counter" and name.endswith("_total"):
                problems.append("{}: {} {} must not end in _total".format(where, kind, name))
            if (kind == "histogram") != ("buckets" in options):
                problems.append("{}: {}: buckets= is required for histograms and only for them"
                                .format(where, name))
            if "buckets" in options:
                wanted_layouts.append((where, options["buckets"]))
            contract[name] = kind
    for where, layout in wanted_layouts:
        if layout not in layouts:
            problems.append("{}: bucket layout '{}' is not defined".format(where, layout))
    if not contract:
        problems.append("{}: no metrics".format(path))
    return contract


def load_layout(fields, where, layouts, problems):
    """A 'buckets <layout> <bound>...' line: finite bounds, strictly increasing."""
    if len(fields) < 3:
        problems.append("{}: want 'buckets <layout> <upper bound>...'".format(where))
        return
    try:
        bounds = [float(field) for field in fields[2:]]
    except ValueError:
        problems.append("{}: bucket bounds of '{}' must be numbers".format(where, fields[1]))
        return
    if any(b != b or b in (float("inf"), float("-inf")) for b in bounds) or any(
            a >= b for a, b in zip(bounds, bounds[1:])):
        problems.append("{}: bucket bounds of '{}' must be finite and strictly increasing".format(
            where, fields[1]))
    if fields[1] in layouts:
        problems.append("{}: bucket layout '{}' is defined twice".format(where, fields[1]))
    layouts[fields[1]] = bounds


def check_names(text, where, contract, problems, used):
    for name in sorted(set(METRIC.findall(text))):
        if name in contract:
            if contract[name] == "histogram":
                problems.append("{}: {} is a histogram: use {}_bucket, _sum or _count".format(
                    where, name, name))
            used.add(name)
            continue
        base = next((name[:-len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        if base in contract:
            if contract[base] != "histogram":
                problems.append("{}: {}: {} of a {} (only histograms have {})".format(
                    where, name, name[len(base):], contract[base], "/".join(HISTOGRAM_SUFFIXES)))
            used.add(base)
            continue
        problems.append("{}: {} is not in the metrics contract (deploy/metrics.txt)".format(
            where, name))


def dashboard_queries(node, path=""):
    """(json path, query text) of every expr/query string in a Grafana dashboard."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = "{}.{}".format(path, key) if path else key
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield here, value
            else:
                yield from dashboard_queries(value, here)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from dashboard_queries(value, "{}[{}]".format(path, i))


def check_dashboard(path, contract, problems, used, recorded_refs):
    try:
        with open(path) as f:
            dashboard = json.load(f)
    except ValueError as error:
        problems.append("{}: does not parse as JSON: {}".format(path, error))
        return
    variables = [v for v in (dashboard.get("templating") or {}).get("list", [])
                 if v.get("type") == "datasource"]
    if not variables:
        problems.append("{}: templating: no datasource variable".format(path))
    names = {v.get("name") for v in variables}

    def check_datasource(where, ds):
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        if not isinstance(uid, str) or not any(uid in ("${%s}" % n, "$" + n) for n in names):
            problems.append("{}: {}.datasource: {!r} is not the ${{{}}} template variable".format(
                path, where, uid, next(iter(names), "datasource")))

    def panels(items, prefix):
        for i, panel in enumerate(items or []):
            where = "{}[{}]({})".format(prefix, i, panel.get("title"))
            if panel.get("type") != "row":
                check_datasource(where, panel.get("datasource"))
                if not panel.get("targets"):
                    problems.append("{}: {}: no queries".format(path, where))
                for j, target in enumerate(panel.get("targets") or []):
                    check_datasource("{}.targets[{}]".format(where, j), target.get("datasource"))
            panels(panel.get("panels"), where + ".panels")

    panels(dashboard.get("panels"), "panels")
    for i, variable in enumerate((dashboard.get("templating") or {}).get("list", [])):
        if variable.get("type") == "query":
            check_datasource("templating.list[{}]({})".format(i, variable.get("name")),
                             variable.get("datasource"))
    count = 0
    for where, query in dashboard_queries(dashboard):
        count += 1
        check_names(query, "{}: {}".format(path, where), contract, problems, used)
        for name in RECORDED.findall(query):
            recorded_refs.append(("{}: {}".format(path, where), name))
    if count == 0:
        problems.append("{}: no queries".format(path))


def check_rules(path, contract, problems, used, recorded, recorded_refs):
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except yaml.YAMLError as error:
        problems.append("{}: does not parse: {}".format(path, error))
        return
    for group in doc.get("groups", []) or []:
        for i, rule in enumerate(group.get("rules", []) or []):
            label = rule.get("record") or rule.get("alert")
            where = "{}: group {} rule[{}]({})".format(path, group.get("name"), i, label)
            expr = str(rule.get("expr", ""))
            check_names(expr, where, contract, problems, used)
            if rule.get("record"):
                if METRIC.fullmatch(rule["record"]):
                    problems.append("{}: records into pdserve_ (the contract's namespace): "
                                    "name it pdserve:...".format(where))
                recorded.add(rule["record"])
            for name in RECORDED.findall(expr):
                recorded_refs.append((where, name))


def check_k8s(directory, contract, problems, used):
    for path in sorted(glob.glob(os.path.join(directory, "**", "*.yaml"), recursive=True)):
        with open(path) as f:
            try:
                docs = [d for d in yaml.safe_load_all(f) if d]
            except yaml.YAMLError as error:
                problems.append("{}: does not parse: {}".format(path, error))
                continue
        for doc in docs:
            kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name")
            where = "{}: {}/{}".format(path, kind, name)
            if kind == "ConfigMap":
                for key, text in (doc.get("data") or {}).items():
                    if "seriesQuery" in text:
                        check_names(text, "{}.data.{}".format(where, key), contract, problems,
                                    used)
            if kind == "HorizontalPodAutoscaler":
                for i, metric in enumerate((doc.get("spec") or {}).get("metrics") or []):
                    for spec in metric.values():
                        if isinstance(spec, dict) and "metric" in spec:
                            check_names(spec["metric"].get("name", ""), "{}.spec.metrics[{}]"
                                        .format(where, i), contract, problems, used)


def check_scrape_config(path, problems):
    """pdserve's /metrics is HTTPS: every pdserve-* job verifies it under the CA."""
    try:
        with open(path) as f:
            config = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as error:
        problems.append("{}: cannot read: {}".format(path, error))
        return
    jobs = [j for j in config.get("scrape_configs") or []
            if str(j.get("job_name", "")).startswith("pdserve-")]
    if not jobs:
        problems.append("{}: no pdserve-* scrape job".format(path))
    for job in jobs:
        where = "{}: job {}".format(path, job.get("job_name"))
        if job.get("scheme") != "https":
            problems.append("{}: scheme {}: want https (pdserve's /metrics is HTTPS with TLS)"
                            .format(where, job.get("scheme", "http (the default)")))
        tls = job.get("tls_config") or {}
        if not tls.get("ca_file"):
            problems.append("{}: tls_config.ca_file missing: verify the processes under the "
                            "cluster's CA".format(where))
        if tls.get("insecure_skip_verify"):
            problems.append("{}: tls_config.insecure_skip_verify: verify under the CA "
                            "instead".format(where))
        if job.get("dns_sd_configs") and not tls.get("server_name"):
            problems.append("{}: tls_config.server_name missing: the discovered targets are pod "
                            "IPs, which the certificates do not name".format(where))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploy", required=True, help="the deploy/ directory")
    args = parser.parse_args()
    problems = []
    contract = load_contract(os.path.join(args.deploy, "metrics.txt"), problems)
    used = set()
    recorded = set()
    recorded_refs = []
    rules = sorted(glob.glob(os.path.join(args.deploy, "prometheus", "*.rules.yml")))
    dashboards = sorted(glob.glob(os.path.join(args.deploy, "grafana", "*.json")))
    if not rules:
        problems.append("{}/prometheus: no *.rules.yml".format(args.deploy))
    if not dashboards:
        problems.append("{}/grafana: no dashboard".format(args.deploy))
    for path in rules:
        check_rules(path, contract, problems, used, recorded, recorded_refs)
    for path in dashboards:
        check_dashboard(path, contract, problems, used, recorded_refs)
    check_k8s(os.path.join(args.deploy, "k8s"), contract, problems, used)
    check_scrape_config(os.path.join(args.deploy, "prometheus", "prometheus.yml"), problems)
    for where, name in recorded_refs:
        if name not in recorded:
            problems.append("{}: {} is not recorded by any rule in {}".format(
                where, name, ", ".join(os.path.basename(r) for r in rules)))
    if problems:
        print("{} problem(s) with the metrics the deployment uses:".format(len(problems)))
        for problem in problems:
            print("  " + problem)
        return 1
    unused = sorted(set(contract) - used)
    print("{} contract metrics; {} used by the rules, dashboard and autoscaling{}".format(
        len(contract), len(used), "; unused: " + ", ".join(unused) if unused else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
