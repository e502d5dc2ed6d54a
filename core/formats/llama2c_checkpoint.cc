#include "core/formats/llama2c_checkpoint.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/base/byte_reader.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr size_t kHeaderInts = 7;

// Hands out consecutive fp32 tensors of a mapped file; the caller checked the total size.
class TensorCursor {
 public:
  TensorCursor(std::shared_ptr<const MappedFile> file, size_t offset)
      : file_(std::move(file)), offset_(offset) {}

  Tensor Next(std::vector<int64_t> shape) {
    Tensor t;
    t.dtype = DType::kF32;
    t.shape = std::move(shape);
    t.data = file_->data() + offset_;
    t.owner = file_;
    offset_ += t.NumBytes();
    return t;
  }
  // [layers, shape...] tensors stored layer-major: returns one Tensor per layer.
  std::vector<Tensor> NextPerLayer(int layers, const std::vector<int64_t>& shape) {
    std::vector<Tensor> out;
    for (int l = 0; l < layers; ++l) out.push_back(Next(shape));
    return out;
  }
  void Skip(size_t bytes) { offset_ += bytes; }

 private:
  std::shared_ptr<const MappedFile> file_;
  size_t offset_;
};

absl::StatusOr<ModelConfig> ReadHeader(ByteReader& reader) {
  std::array<int32_t, kHeaderInts> h{};
  for (size_t i = 0; i < kHeaderInts; ++i) {
    PDSERVE_ASSIGN_OR_RETURN(h[i], reader.Read<int32_t>("the 28-byte header"));
  }
  ModelConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.tied_embeddings = h[5] > 0;
  c.vocab_size = h[5] == INT32_MIN ? 0 : std::abs(h[5]);
  c.max_seq_len = h[6];
  c.rope_pairing = RopePairing::kAdjacent;
  if (absl::Status s = c.Validate(); !s.ok()) {
    return reader.Error(absl::StrCat("not a llama2.c checkpoint: ", s.message()));
  }
  return c;
}

// Bytes of all fp32 tensors after the header, RoPE tables included.
uint64_t ExpectedPayloadBytes(const ModelConfig& c) {
  uint64_t floats = static_cast<uint64_t>(c.NumParameters()) +
                    static_cast<uint64_t>(c.max_seq_len) * c.head_dim();  // two half tables
  return floats * sizeof(float);
}

}  // namespace

absl::StatusOr<ModelWeights> LoadLlama2cCheckpoint(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  ByteReader reader(file->bytes(), path);
  PDSERVE_ASSIGN_OR_RETURN(ModelConfig c, ReadHeader(reader));
  const uint64_t expected = kHeaderInts * sizeof(int32_t) + ExpectedPayloadBytes(c);
  if (file->size() != expected) {
    return reader.Error(absl::StrCat(file->size() < expected ? "truncated" : "has trailing bytes",
                                     ": the header (", c.Describe(), ") implies ", expected,
                                     " bytes, the file has ", file->size()));
  }
  ModelWeights w;
  w.config = c;
  const int64_t d = c.dim, kv = c.kv_dim(), h = c.hidden_dim, L = c.n_layers;
  TensorCursor cur(file, reader.offset());
  w.token_embedding = cur.Next({c.vocab_size, d});
  w.layers.resize(L);
  auto assign = [&](Tensor LayerWeights::*field, const std::vector<int64_t>& shape) {
    std::vector<Tensor> per_layer = cur.NextPerLayer(L, shape);
    for (int l = 0; l < L; ++l) w.layers[l].*field = per_layer[l];
  };
  assign(&LayerWeights::attn_norm, {d});
  assign(&LayerWeights::wq, {d, d});
  assign(&LayerWeights::wk, {kv, d});
  assign(&LayerWeights::wv, {kv, d});
  assign(&LayerWeights::wo, {d, d});
  assign(&LayerWeights::ffn_norm, {d});
  assign(&LayerWeights::w1, {h, d});
  assign(&LayerWeights::w2, {d, h});
  assign(&LayerWeights::w3, {h, d});
  w.final_norm = cur.Next({d});
  cur.Skip(static_cast<size_t>(c.max_seq_len) * c.head_dim() * sizeof(float));
  w.classifier = c.tied_embeddings ? w.token_embedding : cur.Next({c.vocab_size, d});
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(w));
  return w;
}

absl::Status WriteLlama2cCheckpoint(const std::string& path, const ModelWeights& weights) {
  if (weights.config.traits().qkv_bias || weights.config.traits().qk_norm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c checkpoints cannot store ", weights.config.traits().name,
        " models' q/k/v biases or head norms; write GGUF or a Hugging Face directory"));
  }
  if (weights.config.rope_scaling.enabled()) {
    return absl::InvalidArgumentError(
        "llama2.c checkpoints cannot store RoPE scaling; write GGUF or a Hugging Face directory");
  }
  if (weights.config.explicit_head_dim > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c checkpoints cannot store a head dim (", weights.config.explicit_head_dim,
        ") other than dim / heads; write GGUF or a Hugging Face directory"));
  }
  ModelWeights w = WithRopePairing(ConvertWeights(weights, DType::kF32), RopePairing::kAdjacent);
  const ModelConfig& c = w.config;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  }
  int32_t header[kHeaderInts] = {c.dim,        c.hidden_dim,
                                 c.n_layers,   c.n_heads,
                                 c.n_kv_heads, c.tied_embeddings ? c.vocab_size : -c.vocab_size,
                                 c.max_seq_len};
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  auto put = [&out](const Tensor& t) {
    out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.NumBytes()));
  };
  put(w.token_embedding);
  for (Tensor LayerWeights::*field :
       {&LayerWeights::attn_norm, &LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv,
        &LayerWeights::wo, &LayerWeights::ffn_norm, &LayerWeights::w1, &LayerWeights::w2,
        &LayerWeights::w3}) {
    for (const LayerWeights& layer : w.layers) put(layer.*field);
  }
  put(w.final_norm);
  // RoPE tables (unused by readers, kept for format compatibility): cos and sin of pos·freq.
  const int half = c.head_dim() / 2;
  for (bool sine : {false, true}) {
    std::vector<float> table(static_cast<size_t>(c.max_seq_len) * half);
    for (int pos = 0; pos < c.max_seq_len; ++pos) {
      for (int i = 0; i < half; ++i) {
        double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim());
        table[pos * half + i] =
            static_cast<float>(sine ? std::sin(pos * freq) : std::cos(pos * freq));
      }
    }
    out.write(reinterpret_cast<const char*>(table.data()),
              static_cast<std::streamsize>(table.size() * sizeof(float)));
  }
  if (!c.tied_embeddings) put(w.classifier);
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace pdserve
