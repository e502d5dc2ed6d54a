#!/usr/bin/env bash
# Installs pdserve's build and test dependencies from Debian packages. Idempotent: packages that
# are already installed are skipped, so a second run costs one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libucx-dev libcpp-httplib-dev
  libsentencepiece-dev
  nlohmann-json3-dev prometheus-cpp-dev libssl-dev openssl
  clang-14 libclang-rt-14-dev clang-format clang-tidy
  python3
  python3-yaml python3-jinja2
  prometheus gnuplot-nox curl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present" >&2
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
