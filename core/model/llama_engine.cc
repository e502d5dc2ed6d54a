#include "core/model/llama_engine.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/system_memory.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/rms_norm.h"
#include "kernels/swiglu.h"

namespace pdserve {

// Activation buffers sized for max_batch_tokens rows.
struct LlamaEngine::Buffers {
  std::vector<int32_t> tokens;  // [n]
  std::vector<int32_t> positions;
  std::vector<float> x, xb, qkv, attn, gate_up, hb;  // [n, width]
  std::vector<float> logits;                         // [n, vocab]
  std::vector<float> matmul_workspace;
  std::vector<float> attention_workspace;
  std::vector<kernels::AttentionSequence> attention;
  std::vector<size_t> pages_before;  // per chunk, while reserving KV
  std::vector<char> seen;            // per sequence slot, while validating a batch
};

namespace {

// The weights Forward streams, in `dtype` and in memory of the engine's own (huge pages, see
// CopyTensor): matrices that conversion left shared with `source` (often a file mapping) are
// copied. q/k/v and gate/up are copied anyway when stacked.
ModelWeights OwnedWeights(const ModelWeights& source, DType dtype) {
  ModelWeights run = ConvertWeights(source, dtype);
  auto own = [](const Tensor& t, const Tensor& from) {
    return t.data == from.data ? CopyTensor(t) : t;
  };
  for (size_t l = 0; l < run.layers.size(); ++l) {
    run.layers[l].wo = own(run.layers[l].wo, source.layers[l].wo);
    run.layers[l].w2 = own(run.layers[l].w2, source.layers[l].w2);
  }
  run.classifier = own(run.classifier, source.classifier);
  return run;
}

// Threads for num_threads = 0. Below ~2M layer parameters a matmul is a few microseconds of work
// and waking a second thread costs more than it saves (stories260K: 1 thread ~5x faster than 2).
int AutoThreads(const ModelConfig& c) {
  const int64_t layer_parameters = c.NumParameters() - int64_t{c.vocab_size} * c.dim;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return layer_parameters < 2'000'000 ? 1 : cores;
}

// Bytes Create allocates for buffers, workspaces, the RoPE table and the KV pool (weights aside).
double PlannedBytes(const ModelConfig& c, const EngineOptions& o, int max_context, int kv_pages) {
  const double n = o.max_batch_tokens, threads = o.num_threads;
  const double activations =
      n * (3.0 * c.dim + 2.0 * c.kv_dim() + 3.0 * c.hidden_dim + c.vocab_size);
  const double workspaces =
      kernels::MatmulWorkspaceFloats(o.num_threads, std::max(c.dim, c.hidden_dim)) +
      threads * max_context * (2.0 * c.head_dim() + 64) +
      static_cast<double>(max_context) * c.head_dim();
  const double kv = 2.0 * c.n_layers * kv_pages * o.kv_page_size * c.kv_dim();
  return (activations + workspaces + kv) * sizeof(float);
}

}  // namespace

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
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LlamaEngine>> LlamaEngine::Create(const ModelWeights& weights,
                                                                 const EngineOptions& options) {
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  const ModelConfig& c = weights.config;
  const int max_context = options.max_context > 0 ? options.max_context : c.max_seq_len;
  EngineOptions resolved = options;
  if (resolved.num_threads == 0) resolved.num_threads = AutoThreads(c);
  const int64_t pages_per_sequence =
      (int64_t{max_context} + options.kv_page_size - 1) / options.kv_page_size;
  const int64_t pages =
      options.kv_pages > 0 ? options.kv_pages : options.max_sequences * pages_per_sequence;
  if (pages > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("engine: ", pages, " KV pages is too many"));
  }
  resolved.kv_pages = static_cast<int>(pages);
  const double planned = PlannedBytes(c, resolved, max_context, resolved.kv_pages);
  if (planned > kMaxMemoryShare * static_cast<double>(PhysicalMemoryBytes())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("engine: buffers and KV cache for a context of ", max_context, " tokens, ",
                     options.max_sequences, " sequences and batches of ", options.max_batch_tokens,
                     " tokens need ", planned / 1e9, " GB; the machine has ",
                     PhysicalMemoryBytes() / 1e9, " GB. Reduce the context or the sequences."));
  }
  auto engine = std::unique_ptr<LlamaEngine>(
      new LlamaEngine(OwnedWeights(weights, options.weight_dtype), resolved, max_context));
  KvCacheConfig kv;
  kv.n_layers = c.n_layers;
  kv.n_kv_heads = c.n_kv_heads;
  kv.head_dim = c.head_dim();
  kv.page_size = options.kv_page_size;
  kv.num_pages = resolved.kv_pages;
  PDSERVE_ASSIGN_OR_RETURN(engine->kv_, PagedKvCache::Create(kv));
  return engine;
}

LlamaEngine::LlamaEngine(ModelWeights weights, const EngineOptions& options, int max_context)
    : weights_(std::move(weights)),
      options_(options),
      max_context_(max_context),
      pool_(options.num_threads),
      rope_(weights_.config.head_dim(), max_context, weights_.config.rope_theta),
      sequences_(options.max_sequences),
      buffers_(std::make_unique<Buffers>()) {
  const ModelConfig& c = weights_.config;
  const size_t n = options.max_batch_tokens;
  Buffers& b = *buffers_;
  b.tokens.resize(n);
  b.positions.resize(n);
  for (auto [buffer, width] :
       {std::pair{&b.x, c.dim}, std::pair{&b.xb, c.dim}, std::pair{&b.qkv, c.dim + 2 * c.kv_dim()},
        std::pair{&b.attn, c.dim}, std::pair{&b.gate_up, 2 * c.hidden_dim},
        std::pair{&b.hb, c.hidden_dim}}) {
    buffer->resize(n * width);
  }
  for (LayerWeights& layer : weights_.layers) {
    fused_.push_back(
        {ConcatRows({layer.wq, layer.wk, layer.wv}), ConcatRows({layer.w1, layer.w3})});
    layer.wq = layer.wk = layer.wv = layer.w1 = layer.w3 = Tensor{};  // now only in fused_
  }
  b.logits.resize(n * c.vocab_size);
  b.matmul_workspace.resize(
      kernels::MatmulWorkspaceFloats(pool_.size(), std::max(c.dim, c.hidden_dim)));
  b.attention_workspace.resize(kernels::AttentionWorkspaceFloats(
      {c.n_heads, c.n_kv_heads, c.head_dim()}, pool_.size(), max_context));
  b.attention.reserve(options.max_sequences);
  b.pages_before.resize(options.max_sequences);
  b.seen.resize(options.max_sequences);
}

LlamaEngine::~LlamaEngine() = default;

absl::StatusOr<int> LlamaEngine::AddSequence() {
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].live) {
      sequences_[i].live = true;
      return static_cast<int>(i);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("engine: all ", sequences_.size(), " sequence slots are in use"));
}

absl::Status LlamaEngine::RemoveSequence(int sequence) {
  if (SequenceLength(sequence) < 0) {
    return absl::NotFoundError(absl::StrCat("engine: no live sequence ", sequence));
  }
  sequences_[sequence].table.Release(*kv_);
  sequences_[sequence].live = false;
  return absl::OkStatus();
}

int LlamaEngine::SequenceLength(int sequence) const {
  if (sequence < 0 || sequence >= static_cast<int>(sequences_.size()) ||
      !sequences_[sequence].live) {
    return -1;
  }
  return sequences_[sequence].table.num_tokens();
}

absl::Status LlamaEngine::ValidateChunks(std::span<const ForwardChunk> chunks) const {
  if (chunks.empty()) return absl::InvalidArgumentError("engine: no chunks to run");
  if (chunks.size() > sequences_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: ", chunks.size(), " chunks in one batch; at most one per sequence (",
                     sequences_.size(), ")"));
  }
  int64_t total = 0;
  std::vector<char>& seen = buffers_->seen;
  std::fill(seen.begin(), seen.end(), 0);
  for (const ForwardChunk& chunk : chunks) {
    const int length = SequenceLength(chunk.sequence);
    if (length < 0)
      return absl::InvalidArgumentError(absl::StrCat("engine: unknown sequence ", chunk.sequence));
    if (seen[chunk.sequence]) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine: sequence ", chunk.sequence, " appears twice in one batch"));
    }
    seen[chunk.sequence] = 1;
    if (chunk.tokens.empty()) return absl::InvalidArgumentError("engine: empty chunk");
    if (length + static_cast<int64_t>(chunk.tokens.size()) > max_context_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine: sequence ", chunk.sequence, " would hold ", length + chunk.tokens.size(),
          " tokens; the context limit is ", max_context_));
    }
    for (int32_t token : chunk.tokens) {
      if (token < 0 || token >= config().vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine: token id ", token, " outside the vocabulary [0, ", config().vocab_size, ")"));
      }
    }
    total += static_cast<int64_t>(chunk.tokens.size());
  }
  if (total > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: ", total, " tokens in one batch; the limit is ", options_.max_batch_tokens));
  }
  return absl::OkStatus();
}

absl::Status LlamaEngine::ReserveKv(std::span<const ForwardChunk> chunks) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    BlockTable& table = sequences_[chunks[i].sequence].table;
    buffers_->pages_before[i] = table.pages().size();
    absl::Status status =
        table.Reserve(*kv_, table.num_tokens() + static_cast<int>(chunks[i].tokens.size()));
    if (!status.ok()) {
      for (size_t j = 0; j < i; ++j) {  // give back what earlier chunks took: nothing changes
        sequences_[chunks[j].sequence].table.ShrinkTo(*kv_, buffers_->pages_before[j]);
      }
      return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> LlamaEngine::Forward(std::span<const ForwardChunk> chunks) {
  PDSERVE_RETURN_IF_ERROR(ValidateChunks(chunks));
  PDSERVE_RETURN_IF_ERROR(ReserveKv(chunks));
  Buffers& b = *buffers_;
  int n = 0;
  for (const ForwardChunk& chunk : chunks) {
    const int start = sequences_[chunk.sequence].table.num_tokens();
    for (size_t i = 0; i < chunk.tokens.size(); ++i, ++n) {
      b.tokens[n] = chunk.tokens[i];
      b.positions[n] = start + static_cast<int>(i);
    }
  }
  kernels::EmbeddingLookup(weights_.token_embedding, b.tokens.data(), n, b.x.data());
  for (int layer = 0; layer < config().n_layers; ++layer) Layer(layer, chunks, n);
  const int rows = ComputeLogits(chunks);
  for (const ForwardChunk& chunk : chunks) {
    BlockTable& table = sequences_[chunk.sequence].table;
    table.set_num_tokens(table.num_tokens() + static_cast<int>(chunk.tokens.size()));
  }
  return std::span<const float>(b.logits.data(), static_cast<size_t>(rows) * config().vocab_size);
}

void LlamaEngine::ForTokens(int n, const ThreadPool::RangeFn& fn) {
  constexpr int kMinTokensPerThread = 8;
  if (n < 2 * kMinTokensPerThread) {
    fn(0, n, 0);
  } else {
    pool_.ParallelFor(n, kMinTokensPerThread, fn);
  }
}

void LlamaEngine::Layer(int layer, std::span<const ForwardChunk> chunks, int n) {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_.layers[layer];
  Buffers& b = *buffers_;
  std::span<float> ws(b.matmul_workspace);
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    kernels::RmsNorm(b.x.data() + begin * c.dim, w.attn_norm.as<float>(), end - begin, c.dim,
                     c.norm_eps, b.xb.data() + begin * c.dim);
  });
  kernels::Matmul(pool_, b.xb.data(), n, fused_[layer].wqkv, b.qkv.data(), ws);
  RotateAndStoreKv(layer, chunks, n);
  Attend(layer, chunks);
  kernels::Matmul(pool_, b.attn.data(), n, w.wo, b.xb.data(), ws);
  const int64_t hidden = c.hidden_dim;
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin * c.dim; i < end * c.dim; ++i) b.x[i] += b.xb[i];
    kernels::RmsNorm(b.x.data() + begin * c.dim, w.ffn_norm.as<float>(), end - begin, c.dim,
                     c.norm_eps, b.xb.data() + begin * c.dim);
  });
  kernels::Matmul(pool_, b.xb.data(), n, fused_[layer].w13, b.gate_up.data(), ws);
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = b.gate_up.data() + t * 2 * hidden;
      kernels::SwiGlu(gate, gate + hidden, hidden, b.hb.data() + t * hidden);
    }
  });
  kernels::Matmul(pool_, b.hb.data(), n, w.w2, b.xb.data(), ws);
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin * c.dim; i < end * c.dim; ++i) b.x[i] += b.xb[i];
  });
}

void LlamaEngine::RotateAndStoreKv(int layer, std::span<const ForwardChunk> chunks, int n) {
  const ModelConfig& c = config();
  const int d = c.head_dim(), page_size = kv_->config().page_size;
  const int64_t width = c.dim + 2 * c.kv_dim();
  Buffers& b = *buffers_;
  // The sequence of each token, found by walking the chunks (tokens are in chunk order).
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    size_t chunk = 0;
    int64_t chunk_end = static_cast<int64_t>(chunks[0].tokens.size());
    for (int64_t t = begin; t < end; ++t) {
      while (t >= chunk_end) chunk_end += static_cast<int64_t>(chunks[++chunk].tokens.size());
      float* q = b.qkv.data() + t * width;
      float* k = q + c.dim;
      const float* v = k + c.kv_dim();
      const int pos = b.positions[t];
      kernels::ApplyRope(q, c.n_heads, rope_, pos, c.rope_pairing);
      kernels::ApplyRope(k, c.n_kv_heads, rope_, pos, c.rope_pairing);
      const int32_t page = sequences_[chunks[chunk].sequence].table.pages()[pos / page_size];
      for (int g = 0; g < c.n_kv_heads; ++g) {
        std::memcpy(kv_->KRow(layer, page, pos % page_size, g), k + g * d, d * sizeof(float));
        std::memcpy(kv_->VRow(layer, page, pos % page_size, g), v + g * d, d * sizeof(float));
      }
    }
  });
}

void LlamaEngine::Attend(int layer, std::span<const ForwardChunk> chunks) {
  const ModelConfig& c = config();
  Buffers& b = *buffers_;
  b.attention.clear();
  int t = 0;
  for (const ForwardChunk& chunk : chunks) {
    const BlockTable& table = sequences_[chunk.sequence].table;
    kernels::AttentionSequence seq;
    seq.q = b.qkv.data() + int64_t{t} * (c.dim + 2 * c.kv_dim());
    seq.q_row_stride = c.dim + 2 * c.kv_dim();
    seq.out = b.attn.data() + int64_t{t} * c.dim;
    seq.n_queries = static_cast<int>(chunk.tokens.size());
    seq.start_pos = b.positions[t];
    seq.kv = {kv_->k_pool(layer), kv_->v_pool(layer), table.pages().data(), kv_->config().page_size,
              kv_->page_stride()};
    b.attention.push_back(seq);
    t += seq.n_queries;
  }
  kernels::Attention(pool_, {c.n_heads, c.n_kv_heads, c.head_dim()}, b.attention,
                     b.attention_workspace);
}

int LlamaEngine::ComputeLogits(std::span<const ForwardChunk> chunks) {
  const ModelConfig& c = config();
  Buffers& b = *buffers_;
  // Gather the rows that need logits into xb, normalize, project.
  int rows = 0, t = 0;
  for (const ForwardChunk& chunk : chunks) {
    const int count = static_cast<int>(chunk.tokens.size());
    const int first = chunk.all_logits ? t : t + count - 1;
    for (int r = first; r < t + count; ++r, ++rows) {
      std::memmove(b.xb.data() + int64_t{rows} * c.dim, b.x.data() + int64_t{r} * c.dim,
                   c.dim * sizeof(float));
    }
    t += count;
  }
  kernels::RmsNorm(b.xb.data(), weights_.final_norm.as<float>(), rows, c.dim, c.norm_eps,
                   b.xb.data());
  kernels::Matmul(pool_, b.xb.data(), rows, weights_.classifier, b.logits.data(),
                  b.matmul_workspace);
  return rows;
}

}  // namespace pdserve
