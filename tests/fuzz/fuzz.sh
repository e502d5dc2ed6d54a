#!/usr/bin/env bash
# Builds one libFuzzer target of tests/fuzz (TARGET_fuzzer.cc and the few sources of the parser it
# calls) with clang++-14, libFuzzer, ASan and UBSan, then fuzzes it briefly from its committed
# seeds (tests/fuzz/corpus/TARGET). Fails when the fuzzer finds a crash, a sanitizer report, a
# violated invariant, a slow input (-timeout) or runaway memory (-rss_limit_mb); the reproducer is
# left in OUT_DIR/TARGET. Exits 77 (skip) without clang++-14 or its libFuzzer runtime.
#
# Objects are shared by the targets in OUT_DIR/obj, each compiled under a lock (ctest runs targets
# in parallel) and again only when its source, a header it includes or this script is newer.
#
# Usage: tests/fuzz/fuzz.sh TARGET OUT_DIR [libFuzzer flags; default -max_total_time=20]
# TARGET: gguf, safetensors, llama2c, tokenizer, openai or jinja. The openai target compiles the
# generated protobuf sources in $PDSERVE_PROTO_GEN_DIR (default build/release/proto/gen).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 TARGET OUT_DIR [libFuzzer flags]" >&2
  exit 2
fi
src="$(cd "$(dirname "$0")/../.." && pwd)"
script="$src/tests/fuzz/fuzz.sh"
target="$1"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
shift 2
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-max_total_time=20)

cxx=clang++-14
if ! command -v "$cxx" >/dev/null ||
   ! compgen -G "/usr/lib/llvm-14/lib/clang/14*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  echo "${target}_fuzz: SKIP: clang++-14 with libFuzzer (libclang-rt-14-dev) not installed" >&2
  exit 77
fi

# Sources by module; a target lists the modules its parser needs (the linker's closure).
base=(core/base/mapped_file.cc)
json=(core/base/json_fields.cc)
tensor=(core/tensor/dtype.cc core/tensor/tensor.cc core/tensor/quant_blocks.cc
        core/tensor/quantize.cc)
model=(core/model/model_config.cc core/model/model_family.cc core/model/model_weights.cc
       core/model/layer_tensors.cc core/model/swiftkv_weights.cc kernels/cpu/rope.cc)
tokenizer=(core/tokenizer/unicode.cc core/tokenizer/byte_level.cc core/tokenizer/pre_tokenizer.cc
           core/tokenizer/vocabulary.cc core/tokenizer/merge_tokenizer.cc
           core/tokenizer/bpe_tokenizer.cc core/tokenizer/create_tokenizer.cc
           core/tokenizer/text_stream.cc)
jinja=(core/template/jinja_value.cc core/template/jinja_parser.cc
       core/template/jinja_builtin_args.cc core/template/jinja_strings.cc core/template/jinja_builtins.cc
       core/template/jinja_template.cc core/chat/chat_template.cc)
absl_modules=(absl_status absl_statusor absl_strings absl_flat_hash_map absl_hash absl_time)
gen="${PDSERVE_PROTO_GEN_DIR:-$src/build/release/proto/gen}"
libs=()
max_len=4096
case "$target" in
  gguf)
    sources=(core/formats/gguf_file.cc core/formats/gguf_model.cc core/formats/gguf_vocabulary.cc
             core/formats/gguf_writer.cc core/model/llama_file_type.cc
             "${base[@]}" "${tensor[@]}" "${model[@]}" "${tokenizer[@]}")
    max_len=65536
    ;;
  safetensors)
    sources=(core/formats/safetensors.cc core/formats/hf_config.cc
             "${base[@]}" "${json[@]}" "${tensor[@]}" "${model[@]}" "${tokenizer[@]}")
    max_len=16384
    ;;
  llama2c)
    sources=(core/formats/llama2c_checkpoint.cc core/tokenizer/llama2c_tokenizer.cc
             "${base[@]}" "${tensor[@]}" "${model[@]}" "${tokenizer[@]}")
    max_len=65536
    ;;
  tokenizer)
    sources=(core/tokenizer/hf_tokenizer_json.cc core/tokenizer/sentencepiece_tokenizer.cc
             "${base[@]}" "${json[@]}" "${tokenizer[@]}")
    libs+=(-ldl)
    max_len=16384
    ;;
  openai)
    sources=(services/router/openai_protocol.cc services/router/plain_chat_template.cc
             "$gen/pdserve/v1/router.pb.cc" "$gen/pdserve/v1/common.pb.cc"
             "${base[@]}" "${jinja[@]}" "${tokenizer[@]}")
    read -ra protobuf_libs <<<"$(pkg-config --libs protobuf)"
    libs+=("${protobuf_libs[@]}")
    ;;
  jinja)
    sources=("${base[@]}" "${jinja[@]}" "${tokenizer[@]}")
    max_len=8192
    ;;
  *)
    echo "$0: unknown target '$target'" >&2
    exit 2
    ;;
esac
sources=("tests/fuzz/${target}_fuzzer.cc" "${sources[@]}")

# One set of flags for every object, so that the targets can share them. The tokenizer target's
# SentencePiece loader finds pdserve_spm_shim next to the fuzzer.
spm_shim=libpdserve_spm_shim.so
read -ra dependency_cflags <<<"$(pkg-config --cflags "${absl_modules[@]}" protobuf)"
read -ra absl_libs <<<"$(pkg-config --libs "${absl_modules[@]}")"
cxxflags=(-std=c++20 -O1 -gline-tables-only -fno-omit-frame-pointer -march=x86-64-v3
          "-fsanitize=fuzzer-no-link,address,undefined" -fno-sanitize-recover=undefined
          -DPDSERVE_SPM_SHIM_NAME="\"$spm_shim\"" -DPDSERVE_SPM_SHIM_PATH="\"$spm_shim\""
          -I"$src" -I"$gen" "${dependency_cflags[@]}")
libs+=("${absl_libs[@]}")

# stale OBJECT DEPFILE: true when OBJECT is missing or older than this script or a prerequisite
# DEPFILE (the compiler's -MMD output) names.
stale() {
  [ -f "$1" ] && [ -f "$2" ] && [ ! "$script" -nt "$1" ] || return 0
  local deps dep
  read -ra deps <<<"$(sed -e 's/^[^:]*://' -e 's/\\$//' "$2" | tr '\n' ' ')"
  for dep in "${deps[@]}"; do
    [ "$dep" -nt "$1" ] && return 0
  done
  return 1
}

mkdir -p "$out/obj" "$out/$target"
objects=()
for source in "${sources[@]}"; do
  path="$source"
  [ "${source:0:1}" = / ] || path="$src/$source"
  object="$out/obj/$(echo "${source#/}" | tr / _)"
  object="${object%.cc}.o"
  objects+=("$object")
  (
    flock 9
    if stale "$object" "${object%.o}.d"; then
      "$cxx" "${cxxflags[@]}" -MMD -MF "${object%.o}.d" -c "$path" -o "$object"
    fi
  ) 9>"$object.lock"
done
binary="$out/$target/${target}_fuzzer"
relink=0
[ -x "$binary" ] || relink=1
for object in "${objects[@]}"; do
  [ "$object" -nt "$binary" ] && relink=1
done
if [ "$relink" = 1 ]; then
  "$cxx" "-fsanitize=fuzzer,address,undefined" "${objects[@]}" "${libs[@]}" -o "$binary"
fi
# libsentencepiece in its own link namespace has no sanitizer runtime: the module is built without.
shim="$src/core/tokenizer/sentencepiece_shim/spm_shim"
if [ "$target" = tokenizer ] &&
   { [ "$shim.cc" -nt "$out/$target/$spm_shim" ] || [ "$shim.h" -nt "$out/$target/$spm_shim" ]; }; then
  read -ra sentencepiece <<<"$(pkg-config --cflags --libs sentencepiece)"
  "$cxx" -std=c++20 -O1 -fPIC -shared -fvisibility=hidden -Wl,-z,defs -I"$src" "$shim.cc" \
    "${sentencepiece[@]}" -o "$out/$target/$spm_shim"
fi

dict=()
[ ! -f "$src/tests/fuzz/$target.dict" ] || dict=(-dict="$src/tests/fuzz/$target.dict")
# New inputs go to the first directory, a fresh one each run; the committed seeds stay as they are.
rm -rf "$out/$target/corpus"
mkdir -p "$out/$target/corpus"
# libFuzzer's default exit code for a crash is 77, which ctest would read as "skipped".
"$binary" -seed=1 -max_len="$max_len" -timeout=20 -rss_limit_mb=2048 -error_exitcode=1 \
  -timeout_exitcode=1 -artifact_prefix="$out/$target/" -print_final_stats=1 "${dict[@]}" \
  "${flags[@]}" "$out/$target/corpus" "$src/tests/fuzz/corpus/$target"
