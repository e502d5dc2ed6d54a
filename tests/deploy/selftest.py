#!/usr/bin/python3
"""Proves that the deploy checks fail: copies deploy/ (and the Dockerfile) to a temporary
directory, breaks one thing at a time, runs the check that should notice, and requires it to fail
naming the problem. Usage: selftest.py --source-dir REPO --pdserve BINARY"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# (check, file under the copy, text to replace, replacement, text the report must contain)
MUTATIONS = [
    ("manifests", "deploy/k8s/base/decode.yaml", "--max-sequences=64", "--max-sequencez=64",
     "pdserve has no flag --max-sequencez"),
    ("manifests", "deploy/k8s/base/decode.yaml", "            - decode\n", "            - decoder\n",
     "'decoder' is not a pdserve command"),
    ("manifests", "deploy/k8s/base/kvstore.yaml", "            - --pool-mib=4096\n",
     "            - --pool-mib\n            - \"4096\"\n", "write --pool-mib=VALUE"),
    ("manifests", "deploy/k8s/base/router.yaml", "--policy=kv-aware",
     "--policy=kv-aware\n            - --pool-mib=64", "is a flag of kvstore, not of `pdserve router`"),
    ("manifests", "deploy/k8s/base/router.yaml", "--listen=0.0.0.0:50051", "--listen=0.0.0.0:50052",
     "port 50052 is not a declared containerPort"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "--http-listen=0.0.0.0:8080",
     "--http-listen=0.0.0.0:9090", "port 9090 is not a declared containerPort"),
    ("manifests", "deploy/k8s/base/kvstore.yaml", "httpGet: {path: /readyz, port: http, scheme: HTTPS}",
     "httpGet: {path: /readyz, port: 50060, scheme: HTTPS}", "50060 is not the --http-listen port"),
    ("manifests", "deploy/k8s/base/router.yaml",
     "            httpGet: {path: /healthz, port: http, scheme: HTTPS}\n            periodSeconds: 2",
     "            httpGet: {path: /healthz, port: 50099, scheme: HTTPS}\n            periodSeconds: 2",
     "50099 is not a declared containerPort"),
    ("manifests", "deploy/k8s/base/decode.yaml", "  selector:\n    app.kubernetes.io/name: pdserve\n"
     "    app.kubernetes.io/component: decode", "  selector:\n    app.kubernetes.io/name: pdserve\n"
     "    app.kubernetes.io/component: decoder", "selects no pod template"),
    ("manifests", "deploy/k8s/base/router.yaml", "      targetPort: http", "      targetPort: web",
     "web is not a container port"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "spec:\n  maxUnavailable: 1\n  selector:\n"
     "    matchLabels:\n      app.kubernetes.io/name: pdserve\n      app.kubernetes.io/component: prefill",
     "spec:\n  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: pdserve\n"
     "      app.kubernetes.io/component: prefil", "selects no pod template"),
    ("manifests", "deploy/k8s/base/kvstore.yaml", "  endpoints:\n    - port: http",
     "  endpoints:\n    - port: metrics", "has no port named 'metrics'"),
    ("manifests", "deploy/k8s/base/decode.yaml", "          name: pdserve_decode_queue_requests",
     "          name: pdserve_decode_queue_depth", "is not served by the Prometheus Adapter"),
    ("manifests", "deploy/k8s/base/decode.yaml", "            - --kvstore=$(NODE_IP):50060",
     "            - --kvstore=$(NODE_IP):50061", "not the kvstore DaemonSet's hostPort"),
    ("manifests", "deploy/k8s/base/decode.yaml", "fieldRef: {fieldPath: status.hostIP}",
     "fieldRef: {fieldPath: status.podIP}", "downward API status.hostIP"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "      hostIPC: true\n", "",
     "hostIPC: must be true"),
    ("manifests", "deploy/k8s/base/kvstore.yaml", "terminationGracePeriodSeconds: 40",
     "terminationGracePeriodSeconds: 25", "does not cover preStop 0 s + the drain budget"),
    ("manifests", "deploy/k8s/base/router.yaml", "terminationGracePeriodSeconds: 45",
     "terminationGracePeriodSeconds: 32", "does not cover preStop 5 s + the drain budget"),
    ("manifests", "deploy/k8s/base/decode.yaml", "--threads=$(CPU_THREADS)",
     "--threads=$(CPU_THREAD)", "$(CPU_THREAD) is not in the container's env"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "key: KCACHE_TOPN}", "key: KCACHE_TOP_N}",
     "has no key 'KCACHE_TOP_N'"),
    ("manifests", "deploy/k8s/base/decode.yaml", "--router=pdserve-router.pdserve.svc:50051",
     "--router=pdserve-router.pdserve.svc:8080", "not a router's --listen port"),
    ("manifests", "deploy/k8s/overlays/gpu/workers-gpu.yaml",
     "limits: {cpu: \"4\", memory: 16Gi, nvidia.com/gpu: \"1\"}\n---\n# The store",
     "limits: {cpu: \"4\", memory: 16Gi}\n---\n# The store", "no nvidia.com/gpu limit"),
    ("manifests", "deploy/k8s/overlays/cpu/workers-cpu.yaml",
     "limits: {cpu: \"8\", memory: 8Gi}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
     "  name: pdserve-router", "limits: {cpu: \"8\", memory: 8Gi, nvidia.com/gpu: \"1\"}\n---\n"
     "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: pdserve-router",
     "requests nvidia.com/gpu outside a GPU overlay"),
    ("manifests", "deploy/k8s/base/router.yaml", "            limits: {cpu: \"2\", memory: 2Gi}\n",
     "", "resources.limits.cpu: missing"),
    ("manifests", "deploy/k8s/base/kustomization.yaml", "  - kvstore.yaml\n", "  - kvstore.yml\n",
     "kubectl kustomize"),
    # TLS: identities from the role's Secret, HTTPS probes and scrapes, cert-manager's names.
    ("manifests", "deploy/k8s/base/router.yaml", "            - --tls-ca=/etc/pdserve/tls/ca.crt\n",
     "            - --tls-ca=/etc/pdserve/tls/ca.crt\n            - --insecure=true\n",
     "plaintext (--insecure)"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "            - --tls-key=/etc/pdserve/tls/tls.key\n",
     "", "no --tls-key"),
    ("manifests", "deploy/k8s/base/kvstore.yaml", "--tls-cert=/etc/pdserve/tls/tls.crt",
     "--tls-cert=/etc/pdserve/certs/tls.crt", "is not the file tls.crt of the mounted Secret"),
    ("manifests", "deploy/k8s/base/decode.yaml", "--tls-ca=/etc/pdserve/tls/ca.crt",
     "--tls-ca=/etc/pdserve/tls/tls.crt", "is not the file ca.crt of the mounted Secret"),
    ("manifests", "deploy/k8s/base/decode.yaml", "secretName: pdserve-decode-tls",
     "secretName: pdserve-prefill-tls", "mounts Secret pdserve-prefill-tls, not its role's"),
    ("manifests", "deploy/k8s/base/kvstore.yaml",
     "            - {name: tls, mountPath: /etc/pdserve/tls, readOnly: true}\n", "",
     "does not mount its role's Secret pdserve-kvstore-tls"),
    ("manifests", "deploy/k8s/base/router.yaml",
     "httpGet: {path: /healthz, port: http, scheme: HTTPS}\n            periodSeconds: 10",
     "grpc: {port: 50051}\n            periodSeconds: 10", "gRPC probes cannot speak TLS"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "httpGet: {path: /readyz, port: http, scheme: HTTPS}",
     "httpGet: {path: /readyz, port: http}", "want scheme HTTPS"),
    ("manifests", "deploy/k8s/base/decode.yaml", "httpGet: {path: /readyz, port: http, scheme: HTTPS}",
     "httpGet: {path: /healthz, port: http, scheme: HTTPS}", "/healthz: want /readyz"),
    ("manifests", "deploy/k8s/base/kvstore.yaml",
     "httpGet: {path: /healthz, port: http, scheme: HTTPS}\n            periodSeconds: 2",
     "httpGet: {path: /healthz, port: grpc, scheme: HTTPS}\n            periodSeconds: 2",
     "is not the --http-listen port 8080"),
    ("manifests", "deploy/k8s/base/router.yaml", "      scheme: https\n", "",
     "want scheme: https"),
    ("manifests", "deploy/k8s/base/prefill.yaml", "        serverName: pdserve-prefill.pdserve.svc\n",
     "", "tlsConfig.serverName: missing"),
    ("manifests", "deploy/k8s/components/cert-manager/certificates.yaml", "commonName: kvstore",
     "commonName: kv-store", "must be the role 'kvstore'"),
    ("manifests", "deploy/k8s/components/cert-manager/certificates.yaml",
     "    - pdserve-router.pdserve.svc\n", "",
     "does not name pdserve-router.pdserve.svc (pdserve-router-tls), which the workers' --router"),
    ("manifests", "deploy/k8s/components/cert-manager/certificates.yaml",
     "    - kvstore.pdserve.internal   # what its peers verify (core/rpc/tls.h ComponentServerName)\n",
     "", "does not name kvstore.pdserve.internal (pdserve-kvstore-tls), which every internal caller"),
    ("manifests", "deploy/k8s/components/cert-manager/certificates.yaml",
     "  secretName: pdserve-decode-tls\n", "  secretName: pdserve-decoder-tls\n",
     "0 Certificates issue Secret pdserve-decode-tls"),
    ("manifests", "deploy/k8s/overlays/dev-insecure/kustomization.yaml",
     "      - {op: replace, path: /spec/template/spec/containers/0/readinessProbe/httpGet/scheme,\n"
     "         value: \"HTTP\"}\n", "", "HTTPS against a plaintext (--insecure) process"),
    ("manifests", "deploy/k8s/overlays/dev-insecure/kustomization.yaml",
     "      - {op: replace, path: /spec/endpoints/0/scheme, value: http}\n", "",
     "https against plaintext (--insecure) processes"),
    ("manifests", "deploy/k8s/overlays/dev-insecure/kustomization.yaml",
     "  - target: {kind: DaemonSet, name: pdserve-kvstore}", "  - target: {kind: DaemonSet, name: nothing}",
     "--insecure while other components use TLS"),
    ("metrics", "deploy/prometheus/prometheus.yml",
     "    scheme: https\n    tls_config:\n      ca_file: /etc/prometheus/pdserve/ca.crt\n"
     "      server_name: pdserve-decode.pdserve.svc\n", "",
     "job pdserve-decode: scheme http (the default): want https"),
    ("metrics", "deploy/prometheus/prometheus.yml", "      server_name: pdserve-kvstore.pdserve.svc\n",
     "", "job pdserve-kvstore: tls_config.server_name missing"),
    ("metrics", "deploy/prometheus/pdserve-recording.rules.yml",
     "rate(pdserve_prefill_kv_stored_bytes_total[5m])", "rate(pdserve_prefill_kv_saved_bytes_total[5m])",
     "pdserve_prefill_kv_saved_bytes_total is not in"),
    ("metrics", "deploy/prometheus/pdserve-alerts.rules.yml", "pdserve:kvstore_slots_used:ratio > 0.9",
     "pdserve:kvstore_slot_use:ratio > 0.9", "pdserve:kvstore_slot_use:ratio is not recorded"),
    ("metrics", "deploy/grafana/pdserve-dashboard.json", "pdserve_decode_step_seconds_bucket",
     "pdserve_decode_step_seconds_total", "pdserve_decode_step_seconds_total is not in"),
    ("metrics", "deploy/grafana/pdserve-dashboard.json", "pdserve_router_requests_inflight{",
     "pdserve_router_requests_inflight_bucket{", "_bucket of a gauge"),
    ("metrics", "deploy/grafana/pdserve-dashboard.json", "\"title\": \"pdserve\",",
     "\"title\": \"pdserve\",,", "does not parse"),
    ("metrics", "deploy/grafana/pdserve-dashboard.json", "\"uid\": \"${datasource}\"",
     "\"uid\": \"P1809F7CD0C75ACF3\"", "not the ${datasource} template variable"),
    ("metrics", "deploy/grafana/pdserve-dashboard.json",
     "\"refId\": \"A\",\n          \"expr\": \"sum(rate(pdserve_router_generation_tokens_total",
     "\"refId\": \"A\",\n              \"datasource\": \"Prometheus\",\n"
     "          \"expr\": \"sum(rate(pdserve_router_generation_tokens_total",
     "'Prometheus' is not the ${datasource} template variable"),
    ("metrics", "deploy/k8s/base/prometheus-adapter-rules.yaml", "'pdserve_decode_queue_requests{",
     "'pdserve_decode_queue_len{", "pdserve_decode_queue_len is not in"),
    ("metrics", "deploy/metrics.txt", "pdserve_decode_generated_tokens_total counter decode",
     "pdserve_decode_generated_tokens counter decode", "counter pdserve_decode_generated_tokens"),
    ("metrics", "deploy/metrics.txt", "pdserve_decode_step_seconds histogram decode buckets=latency",
     "pdserve_decode_step_seconds histogram decode", "buckets= is required for histograms"),
    ("metrics", "deploy/metrics.txt", "buckets=sequences", "buckets=sequence",
     "bucket layout 'sequence' is not defined"),
    ("metrics", "deploy/metrics.txt", "buckets prompts 1 2 4 8", "buckets prompts 1 4 2 8",
     "bucket bounds of 'prompts' must be finite and strictly increasing"),
    ("promtool", "deploy/prometheus/pdserve-alerts.rules.yml", "expr: pdserve_serving == 0",
     "expr: pdserve_serving === 0", "pdserve-alerts.rules.yml"),
    ("promtool", "deploy/prometheus/prometheus.yml", "scrape_interval: 15s", "scrape_interval: 15",
     "prometheus.yml"),
    ("promtool", "deploy/prometheus/pdserve-recording.rules.yml",
     "sum by (namespace) (rate(pdserve_prefill_kv_uncompressed_bytes_total[5m]))",
     "2 * sum by (namespace) (rate(pdserve_prefill_kv_uncompressed_bytes_total[5m]))",
     "pdserve:prefill_kv_compression_ratio:rate5m"),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--pdserve", required=True)
    args = parser.parse_args()
    failures = []
    tested = 0
    with tempfile.TemporaryDirectory(prefix="pdserve-deploy-selftest-") as tmp:
        for check, path, old, new, expect in MUTATIONS:
            copy = os.path.join(tmp, "repo")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(os.path.join(args.source_dir, "deploy"), os.path.join(copy, "deploy"))
            shutil.copytree(HERE, os.path.join(copy, "tests", "deploy"))
            shutil.copy(os.path.join(args.source_dir, "Dockerfile"), copy)
            target = os.path.join(copy, path)
            text = open(target).read()
            if text.count(old) < 1:
                failures.append("{}: the text to break is gone: {!r}".format(path, old))
                continue
            open(target, "w").write(text.replace(old, new, 1))
            deploy = os.path.join(copy, "deploy")
            tests = os.path.join(copy, "tests", "deploy")
            if check == "manifests":
                cmd = [sys.executable, os.path.join(tests, "check_manifests.py"), "--pdserve",
                       args.pdserve, "--k8s", os.path.join(deploy, "k8s"), "--dockerfile",
                       os.path.join(copy, "Dockerfile")]
            elif check == "metrics":
                cmd = [sys.executable, os.path.join(tests, "check_metrics.py"), "--deploy", deploy]
            else:
                cmd = [os.path.join(tests, "promtool_check.sh"), os.path.join(deploy, "prometheus"),
                       os.path.join(tests, "prometheus_rules_test.yml")]
            result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            tested += 1
            label = "{} on {} ({!r} -> {!r})".format(check, path, old[:60], new[:60])
            if result.returncode == 0:
                failures.append("{}: the check passed".format(label))
            elif expect not in result.stdout:
                failures.append("{}: failed without saying {!r}:\n{}".format(
                    label, expect, result.stdout[-3000:]))
    if failures:
        print("{} of {} broken deployments were not reported:".format(len(failures), tested))
        for failure in failures:
            print("  " + failure)
        return 1
    print("every one of {} broken deployments was reported".format(tested))
    return 0


if __name__ == "__main__":
    sys.exit(main())
