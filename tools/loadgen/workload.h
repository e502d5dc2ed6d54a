// loadgen workload: what each request asks for (prompt token ids, output length, arrival offset),
// built from length distributions (fixed or uniform), from a Mooncake-format JSONL trace, or as
// multi-turn chat conversations (each turn's prompt the whole history plus a new message).
//
// Prompts are random token ids in [3, vocab) (0..2 are unk/BOS/EOS). With a trace, the prompt is
// made of 512-token blocks, one per hash id: block ids are drawn from a generator seeded by
// (seed, hash id), so requests sharing a hash id really share that block of prompt tokens.
// Everything is deterministic for a given seed. Plain functions and values; thread-compatible.
#ifndef PDSERVE_TOOLS_LOADGEN_WORKLOAD_H_
#define PDSERVE_TOOLS_LOADGEN_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::loadgen {

// Tokens per hash block in the Mooncake traces.
inline constexpr int kTraceBlockTokens = 512;

// A length: fixed (min == max) or uniform over the integers [min, max].
struct LengthSpec {
  int min = 1;
  int max = 1;
  std::string Describe() const;
};

// One line of a Mooncake trace:
//   {"timestamp": <ms since start>, "input_length": N, "output_length": M, "hash_ids": [..]}
struct TraceEntry {
  double timestamp_ms = 0;
  int input_length = 0;
  int output_length = 0;
  std::vector<int64_t> hash_ids;
};

// Parses one trace line; InvalidArgument "<file>:<line>: <what is wrong>" for a bad one.
absl::StatusOr<TraceEntry> ParseTraceLine(const std::string& line, const std::string& file,
                                          int line_number);

// Reads a whole trace (blank lines skipped). NotFound when the file cannot be read;
// InvalidArgument naming file:line for the first bad line, or for an empty trace.
absl::StatusOr<std::vector<TraceEntry>> ReadTrace(const std::string& path);

// What one request sends.
struct RequestSpec {
  int index = 0;  // position in the run, warm-up requests first
  bool warmup = false;
  double arrival_s = 0;  // offset from the start of the run (open loop; unused when closed)
  std::vector<int> prompt;
  int output_tokens = 0;
  // Chat: the conversation this turn belongs to (turns of one conversation are sent in order, each
  // after the previous one ends; RunOptions::think_time_s) and its turn; -1 for a lone request.
  int conversation = -1;
  int turn = 0;
};

struct SyntheticOptions {
  int count = 0;  // requests, warm-up included
  LengthSpec prompt;
  LengthSpec output;
  int vocab = 512;
  uint64_t seed = 0;
  // Shared prefixes (system prompts): request i's prompt starts with the `shared_prefix` tokens of
  // group i mod prefix_groups, then its own tokens up to its drawn length (at least one of its
  // own). 0 = no shared prefix.
  int shared_prefix = 0;
  int prefix_groups = 1;
  uint64_t prefix_seed = 0;  // draws the shared prefixes
};

// `count` requests with lengths drawn from the specs (arrival offsets left at 0).
std::vector<RequestSpec> SyntheticWorkload(const SyntheticOptions& options);

struct ChatOptions {
  int conversations = 0;  // warm-up included
  int turns = 1;
  LengthSpec first;    // the first user message (after the shared prefix, if any)
  LengthSpec message;  // each later user message
  LengthSpec answer;   // each answer's length: max_tokens, and the reply the next turn repeats
  int vocab = 512;
  uint64_t seed = 0;
  int shared_prefix = 0;  // a system prompt: conversation c uses prefix c mod prefix_groups
  int prefix_groups = 1;
  uint64_t prefix_seed = 0;
};

// `conversations` × `turns` requests, conversation-major (arrival offsets left at 0). Turn t + 1's
// prompt is turn t's prompt, then an answer of turn t's output length, then a new message: the
// whole history, as a chat client resends it. The answers in the history are drawn tokens, not
// what the server generated, so every server sees the same prompts and reuses at most the previous
// turn's prompt from a prefix cache. Deterministic per (seed, conversation).
std::vector<RequestSpec> ChatWorkload(const ChatOptions& options);

// One request per trace entry: arrival = timestamp / speedup, prompt built from the hash blocks
// (tokens past the last hash block come from a per-request generator).
std::vector<RequestSpec> TraceWorkload(const std::vector<TraceEntry>& trace, int vocab,
                                       uint64_t seed, double speedup);

// The prompt tokens of one trace entry (exposed for tests).
std::vector<int> TracePrompt(const TraceEntry& entry, int vocab, uint64_t seed, uint64_t salt);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_WORKLOAD_H_
