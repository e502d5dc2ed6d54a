#!/usr/bin/env bash
# promtool on deploy/prometheus: `check rules` on every *.rules.yml, `check config` on
# prometheus.yml (which loads the rule files too), and `test rules` on the unit tests of the rules.
# Usage: promtool_check.sh DEPLOY_PROMETHEUS_DIR RULES_TEST_FILE
set -euo pipefail
dir="${1:?usage: promtool_check.sh DEPLOY_PROMETHEUS_DIR RULES_TEST_FILE}"
test_file="${2:?usage: promtool_check.sh DEPLOY_PROMETHEUS_DIR RULES_TEST_FILE}"
if ! command -v promtool >/dev/null 2>&1; then
  echo "FAIL: promtool is not installed (Debian package 'prometheus'; scripts/setup.sh installs it)" >&2
  exit 1
fi
shopt -s nullglob
rules=("$dir"/*.rules.yml)
if [ ${#rules[@]} -eq 0 ]; then
  echo "FAIL: no *.rules.yml in $dir" >&2
  exit 1
fi
failed=0
promtool check rules "${rules[@]}" || { echo "FAIL: promtool check rules ${rules[*]}" >&2; failed=1; }
promtool check config "$dir/prometheus.yml" ||
  { echo "FAIL: promtool check config $dir/prometheus.yml" >&2; failed=1; }
# The unit tests name the rule files relative to themselves; run them from a copy beside the rules.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "${rules[@]}" "$work/"
cp "$test_file" "$work/rules_test.yml"
(cd "$work" && promtool test rules rules_test.yml) ||
  { echo "FAIL: promtool test rules $test_file (against ${rules[*]})" >&2; failed=1; }
exit "$failed"
