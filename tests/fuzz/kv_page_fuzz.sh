#!/usr/bin/env bash
# Builds the KV page decoder fuzzer (core/kv/kv_page_fuzzer.cc) with clang++-14, libFuzzer, ASan
# and UBSan into OUT_DIR, writes a fresh seed corpus there and fuzzes briefly. Fails when the
# fuzzer finds a crash (the reproducer is left in OUT_DIR); exits 77 (skip) without clang++-14 or
# its libFuzzer runtime. Rebuilds only when a source is newer than the binaries.
#
# Usage: tests/fuzz/kv_page_fuzz.sh OUT_DIR [libFuzzer flags; default -runs=200000]
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [libFuzzer flags]" >&2
  exit 2
fi
src="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-runs=200000)

cxx=clang++-14
if ! command -v "$cxx" >/dev/null ||
   ! compgen -G "/usr/lib/llvm-14/lib/clang/14*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  echo "kv_page_fuzz: SKIP: clang++-14 with libFuzzer (libclang-rt-14-dev) not installed" >&2
  exit 77
fi

sources=(core/kv/kv_page.cc core/kv/kv_layout.cc)
deps=("${sources[@]}" core/kv/kv_page.h core/kv/kv_layout.h core/base/byte_reader.h
      core/base/hash.h core/base/status_macros.h core/kv/kv_page_fuzzer.cc
      tests/fuzz/kv_page_seeds.cc)
cxxflags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=undefined -I"$src"
          $(pkg-config --cflags absl_status absl_statusor absl_strings))
libs=($(pkg-config --libs absl_status absl_statusor absl_strings))

stale() {  # stale BINARY: true when BINARY is missing or older than a source
  [ -x "$1" ] || return 0
  local dep
  for dep in "${deps[@]}"; do
    [ "$src/$dep" -nt "$1" ] && return 0
  done
  return 1
}

cd "$src"
if stale "$out/kv_page_fuzzer"; then
  "$cxx" "${cxxflags[@]}" -fsanitize=fuzzer,address,undefined core/kv/kv_page_fuzzer.cc \
    "${sources[@]}" "${libs[@]}" -o "$out/kv_page_fuzzer"
fi
if stale "$out/kv_page_seeds"; then
  "$cxx" "${cxxflags[@]}" -fsanitize=address,undefined tests/fuzz/kv_page_seeds.cc \
    "${sources[@]}" "${libs[@]}" -o "$out/kv_page_seeds"
fi

rm -rf "$out/corpus"
mkdir -p "$out/corpus"
"$out/kv_page_seeds" "$out/corpus"
# libFuzzer's default exit code for a crash is 77, which ctest would read as "skipped".
"$out/kv_page_fuzzer" -seed=1 -max_len=4096 -error_exitcode=1 -artifact_prefix="$out/" \
  "${flags[@]}" "$out/corpus"
