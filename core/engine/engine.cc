#include "core/engine/engine.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {

namespace {

// How many rows [first, first + count) name (count < 0: to the sequence's length), once they are
// rows of a live sequence's cache layer: NotFound for an unknown sequence, OutOfRange otherwise.
absl::StatusOr<int> RowCount(const Engine& engine, int sequence, int cache_layer, int first,
                             int count) {
  const int length = engine.SequenceLength(sequence);
  if (length < 0) return absl::NotFoundError(absl::StrCat("engine: no live sequence ", sequence));
  if (count < 0) count = length - first;
  if (cache_layer >= 0 && cache_layer < static_cast<int>(engine.plan().caches.size()) &&
      first >= 0 && count >= 0 && first + count <= length) {
    return count;
  }
  return absl::OutOfRangeError(absl::StrCat("engine: no rows [", first, ", ", first + count,
                                            ") of cache layer ", cache_layer, " in sequence ",
                                            sequence, " of ", length, " tokens"));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> Engine::RowPositions(int sequence, int cache_layer, int first,
                                                          int count) const {
  PDSERVE_ASSIGN_OR_RETURN(count, RowCount(*this, sequence, cache_layer, first, count));
  std::vector<int32_t> positions(count);
  for (int r = 0; r < count; ++r) {
    positions[r] = RowPosition(sequence, cache_layer, first + r);
    if (positions[r] < 0) {
      return absl::FailedPreconditionError(absl::StrCat("engine: sequence ", sequence,
                                                        " was given its position; its rows' "
                                                        "positions are unknown"));
    }
  }
  return positions;
}

absl::StatusOr<std::vector<float>> Engine::RowScoreBiases(int sequence, int cache_layer, int first,
                                                          int count) const {
  PDSERVE_ASSIGN_OR_RETURN(count, RowCount(*this, sequence, cache_layer, first, count));
  std::vector<float> biases(count);
  for (int r = 0; r < count; ++r) biases[r] = RowScoreBias(sequence, cache_layer, first + r);
  return biases;
}

absl::Status Engine::SetRowScoreBiases(int sequence, int cache_layer, int first,
                                       std::span<const float> biases) {
  PDSERVE_RETURN_IF_ERROR(
      RowCount(*this, sequence, cache_layer, first, static_cast<int>(biases.size())).status());
  for (size_t r = 0; r < biases.size(); ++r) {
    if (!(std::isfinite(biases[r]) && biases[r] >= 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("engine: row ", first + r, "'s score bias ",
                                                     biases[r], " is not finite and ≥ 0"));
    }
  }
  return StoreRowScoreBiases(sequence, cache_layer, first, biases);
}

absl::Status Engine::StoreRowScoreBiases(int sequence, int cache_layer, int first,
                                         std::span<const float> biases) {
  (void)sequence;
  (void)cache_layer;
  (void)first;
  if (std::all_of(biases.begin(), biases.end(), [](float b) { return b == 0.0f; })) {
    return absl::OkStatus();
  }
  return absl::UnimplementedError("engine: token retention is not supported on this device");
}

const char* DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

absl::StatusOr<Device> ParseDevice(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "cpu") return Device::kCpu;
  if (lower == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(absl::StrCat(
      "device \"", absl::string_view(name.data(), name.size()), "\" is not one of: cpu, cuda"));
}

absl::Status EngineOptions::Validate() const {
  if (num_threads < 0 || num_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("threads ", num_threads, " not in [0, 1024]"));
  }
  if (max_batch_tokens < 1 || max_sequences < 1 || kv_page_size < 1 || max_context < 0 ||
      kv_pages < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine options: max_batch_tokens ", max_batch_tokens, ", max_sequences ", max_sequences,
        ", kv_page_size ", kv_page_size, " must be positive; max_context ", max_context,
        " and kv_pages ", kv_pages, " non-negative"));
  }
  return compression.Validate();
}

absl::StatusOr<int> EngineOptions::ResolvedKvPages(int context) const {
  const int64_t pages_per_sequence = (int64_t{context} + kv_page_size - 1) / kv_page_size;
  const int64_t pages = kv_pages > 0 ? kv_pages : max_sequences * pages_per_sequence;
  if (pages > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("engine: ", pages, " KV pages is too many"));
  }
  return static_cast<int>(pages);
}

}  // namespace pdserve
