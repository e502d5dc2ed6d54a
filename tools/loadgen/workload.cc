#include "tools/loadgen/workload.h"

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdserve::loadgen {
namespace {

// SplitMix64: a well-mixed 64-bit seed from (seed, key).
uint64_t Mix(uint64_t seed, uint64_t key) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (key + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void AppendRandom(std::mt19937_64& rng, int vocab, int n, std::vector<int>& out) {
  std::uniform_int_distribution<int> id(3, vocab - 1);
  for (int i = 0; i < n; ++i) out.push_back(id(rng));
}

int Draw(std::mt19937_64& rng, const LengthSpec& spec) {
  if (spec.min >= spec.max) return spec.min;
  return std::uniform_int_distribution<int>(spec.min, spec.max)(rng);
}

absl::Status LineError(const std::string& file, int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", what));
}

}  // namespace

std::string LengthSpec::Describe() const {
  return min == max ? absl::StrCat(min) : absl::StrCat("uniform[", min, ",", max, "]");
}

absl::StatusOr<TraceEntry> ParseTraceLine(const std::string& line, const std::string& file,
                                          int line_number) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return LineError(file, line_number, "not valid JSON");
  if (!j.is_object()) return LineError(file, line_number, "not a JSON object");
  TraceEntry entry;
  auto integer = [&](const char* key, bool required, int minimum, int& out) -> absl::Status {
    auto it = j.find(key);
    if (it == j.end()) {
      return required ? LineError(file, line_number, absl::StrCat("missing \"", key, "\""))
                      : absl::OkStatus();
    }
    if (!it->is_number_integer() || it->get<int64_t>() < minimum ||
        it->get<int64_t>() > (int64_t{1} << 30)) {
      return LineError(
          file, line_number,
          absl::StrCat("\"", key, "\" must be an integer ≥ ", minimum, ", got ", it->dump()));
    }
    out = static_cast<int>(it->get<int64_t>());
    return absl::OkStatus();
  };
  auto ts = j.find("timestamp");
  if (ts == j.end()) return LineError(file, line_number, "missing \"timestamp\"");
  if (!ts->is_number() || ts->get<double>() < 0) {
    return LineError(file, line_number,
                     absl::StrCat("\"timestamp\" must be a number ≥ 0 (ms), got ", ts->dump()));
  }
  entry.timestamp_ms = ts->get<double>();
  if (absl::Status s = integer("input_length", true, 1, entry.input_length); !s.ok()) return s;
  if (absl::Status s = integer("output_length", true, 1, entry.output_length); !s.ok()) return s;
  if (auto h = j.find("hash_ids"); h != j.end()) {
    if (!h->is_array()) return LineError(file, line_number, "\"hash_ids\" must be an array");
    for (const nlohmann::json& id : *h) {
      if (!id.is_number_integer()) {
        return LineError(file, line_number,
                         absl::StrCat("\"hash_ids\" holds a non-integer: ", id.dump()));
      }
      entry.hash_ids.push_back(id.get<int64_t>());
    }
  }
  return entry;
}

absl::StatusOr<std::vector<TraceEntry>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read trace file '", path, "'"));
  std::vector<TraceEntry> entries;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    absl::StatusOr<TraceEntry> entry = ParseTraceLine(line, path, number);
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the trace has no requests"));
  }
  return entries;
}

std::vector<RequestSpec> SyntheticWorkload(const SyntheticOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::vector<RequestSpec> specs(static_cast<size_t>(options.count));
  for (int i = 0; i < options.count; ++i) {
    RequestSpec& spec = specs[static_cast<size_t>(i)];
    spec.index = i;
    const int prompt_length = Draw(rng, options.prompt);
    spec.output_tokens = Draw(rng, options.output);
    spec.prompt.reserve(static_cast<size_t>(std::max(prompt_length, options.shared_prefix + 1)));
    if (options.shared_prefix > 0) {
      const uint64_t group = static_cast<uint64_t>(i % std::max(1, options.prefix_groups));
      std::mt19937_64 group_rng(Mix(options.prefix_seed ^ 0x243f6a8885a308d3ULL, group));
      AppendRandom(group_rng, options.vocab, options.shared_prefix, spec.prompt);
    }
    const int own = std::max(1, prompt_length - static_cast<int>(spec.prompt.size()));
    AppendRandom(rng, options.vocab, own, spec.prompt);
  }
  return specs;
}

std::vector<RequestSpec> ChatWorkload(const ChatOptions& options) {
  std::vector<RequestSpec> specs;
  specs.reserve(static_cast<size_t>(options.conversations) * options.turns);
  for (int c = 0; c < options.conversations; ++c) {
    std::mt19937_64 rng(Mix(options.seed ^ 0x6a09e667f3bcc908ULL, static_cast<uint64_t>(c)));
    std::vector<int> history;
    if (options.shared_prefix > 0) {
      const uint64_t group = static_cast<uint64_t>(c % std::max(1, options.prefix_groups));
      std::mt19937_64 group_rng(Mix(options.prefix_seed ^ 0x243f6a8885a308d3ULL, group));
      AppendRandom(group_rng, options.vocab, options.shared_prefix, history);
    }
    for (int t = 0; t < options.turns; ++t) {
      AppendRandom(rng, options.vocab, Draw(rng, t == 0 ? options.first : options.message),
                   history);
      RequestSpec& spec = specs.emplace_back();
      spec.index = static_cast<int>(specs.size()) - 1;
      spec.conversation = c;
      spec.turn = t;
      spec.prompt = history;
      spec.output_tokens = Draw(rng, options.answer);
      AppendRandom(rng, options.vocab, spec.output_tokens, history);  // the reply, as resent
    }
  }
  return specs;
}

std::vector<int> TracePrompt(const TraceEntry& entry, int vocab, uint64_t seed, uint64_t salt) {
  std::vector<int> prompt;
  prompt.reserve(static_cast<size_t>(entry.input_length));
  for (int64_t hash_id : entry.hash_ids) {
    const int n = std::min(kTraceBlockTokens, entry.input_length - static_cast<int>(prompt.size()));
    if (n <= 0) break;
    std::mt19937_64 block_rng(Mix(seed, static_cast<uint64_t>(hash_id)));
    AppendRandom(block_rng, vocab, n, prompt);
  }
  const int rest = entry.input_length - static_cast<int>(prompt.size());
  if (rest > 0) {
    std::mt19937_64 rng(Mix(seed ^ 0x5bd1e995ULL, salt));
    AppendRandom(rng, vocab, rest, prompt);
  }
  return prompt;
}

std::vector<RequestSpec> TraceWorkload(const std::vector<TraceEntry>& trace, int vocab,
                                       uint64_t seed, double speedup) {
  std::vector<RequestSpec> specs(trace.size());
  double start_ms = trace.empty() ? 0 : trace.front().timestamp_ms;
  for (const TraceEntry& entry : trace) start_ms = std::min(start_ms, entry.timestamp_ms);
  for (size_t i = 0; i < trace.size(); ++i) {
    RequestSpec& spec = specs[i];
    spec.index = static_cast<int>(i);
    spec.arrival_s = std::max(0.0, trace[i].timestamp_ms - start_ms) / 1e3 / speedup;
    spec.prompt = TracePrompt(trace[i], vocab, seed, i);
    spec.output_tokens = trace[i].output_length;
  }
  return specs;
}

}  // namespace pdserve::loadgen
