#!/usr/bin/env bash
# Renders deploy/k8s/base, every deploy/k8s/overlays/*/ and the base plus each
# deploy/k8s/components/*/ (a kustomize Component cannot render alone) with `kubectl kustomize`
# and checks that each gives a non-empty list of objects. Usage: kustomize_render.sh DEPLOY_K8S_DIR
set -euo pipefail
k8s="${1:?usage: kustomize_render.sh DEPLOY_K8S_DIR}"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "FAIL: kubectl is not installed: it renders the kustomizations (kustomize is built in)." >&2
  echo "      Install kubectl (https://kubernetes.io/docs/tasks/tools/) and run ctest again." >&2
  exit 1
fi
failed=0
dirs=("$k8s/base")
for overlay in "$k8s"/overlays/*/; do
  [ -f "$overlay/kustomization.yaml" ] && dirs+=("${overlay%/}")
done
if [ ${#dirs[@]} -lt 2 ]; then
  echo "FAIL: no overlays under $k8s/overlays" >&2
  failed=1
fi
# Each component on top of the base, from a scratch kustomization (kustomize wants relative paths).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
base_abs="$(cd "$k8s/base" && pwd)"
for component in "$k8s"/components/*/; do
  [ -f "$component/kustomization.yaml" ] || continue
  name="$(basename "$component")"
  mkdir -p "$work/$name"
  component_abs="$(cd "$component" && pwd)"
  cat >"$work/$name/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$work/$name" "$base_abs")
components:
  - $(realpath --relative-to="$work/$name" "$component_abs")
EOF
  dirs+=("$work/$name")
done
for dir in "${dirs[@]}"; do
  if ! out="$(kubectl kustomize "$dir" 2>&1)"; then
    echo "FAIL: kubectl kustomize $dir:" >&2
    echo "$out" >&2
    failed=1
    continue
  fi
  kinds="$(printf '%s\n' "$out" | grep -c '^kind: ' || true)"
  if [ "$kinds" -eq 0 ]; then
    echo "FAIL: kubectl kustomize $dir rendered no objects" >&2
    failed=1
    continue
  fi
  echo "ok: $dir renders $kinds objects"
done
exit "$failed"
