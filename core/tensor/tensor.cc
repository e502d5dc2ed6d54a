#include "core/tensor/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "core/tensor/quantize.h"

namespace pdserve {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Uninitialized storage for `bytes` bytes. Buffers of a huge page or more are 2 MiB aligned and
// advised into transparent huge pages (the decode weight stream then misses the TLB 512× less),
// each its own anonymous mapping, unmapped when freed: through malloc, whose mmap threshold rises
// to the size of each mapped buffer freed, the weights' copies freed once packed at load stayed in
// its heap (llama3.2-1B Q4_0's peak RSS 970 MB against 862 before its matrices were packed).
std::shared_ptr<uint8_t> AllocateStorage(size_t bytes) {
  if (bytes < kHugePage) {
    return std::shared_ptr<uint8_t>(new uint8_t[std::max<size_t>(bytes, 1)],
                                    std::default_delete<uint8_t[]>());
  }
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Mapped a huge page larger, then trimmed to the aligned part.
  void* mapped = ::mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) ::munmap(mapped, aligned - begin);
  if (const size_t tail = begin + kHugePage - aligned; tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + rounded), tail);
  }
  auto* p = reinterpret_cast<uint8_t*>(aligned);
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves normal pages
  return std::shared_ptr<uint8_t>(p, [rounded](uint8_t* q) { ::munmap(q, rounded); });
}

}  // namespace

std::pair<Tensor, uint8_t*> NewTensor(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  std::shared_ptr<uint8_t> storage = AllocateStorage(t.NumBytes());
  uint8_t* data = storage.get();
  t.data = data;
  t.owner = std::move(storage);
  return {std::move(t), data};
}

Tensor MakeF32Tensor(std::vector<float> values, std::vector<int64_t> shape) {
  auto storage = std::make_shared<std::vector<float>>(std::move(values));
  Tensor t;
  t.shape = std::move(shape);
  t.data = storage->data();
  t.owner = std::move(storage);
  return t;
}

float ElementAsFloat(const Tensor& tensor, int64_t index) {
  switch (tensor.dtype) {
    case DType::kF32:
      return tensor.as<float>()[index];
    case DType::kF16:
      return F16ToF32(tensor.as<uint16_t>()[index]);
    case DType::kBF16:
      return BF16ToF32(tensor.as<uint16_t>()[index]);
    default:
      break;
  }
  const int64_t block = BlockElements(tensor.dtype);
  float values[quant::kQK_K];
  quant::DequantizeRow(tensor.dtype,
                       static_cast<const uint8_t*>(tensor.data) +
                           static_cast<size_t>(index / block) * BlockBytes(tensor.dtype),
                       block, values);
  return values[index % block];
}

void RowAsFloat(const Tensor& tensor, int64_t row, float* dst) {
  const int64_t cols = tensor.cols();
  quant::DequantizeRow(
      tensor.dtype, static_cast<const uint8_t*>(tensor.data) + row * RowBytes(tensor.dtype, cols),
      cols, dst);
}

Tensor ToF32(const Tensor& tensor) { return ConvertTensor(tensor, DType::kF32); }

Tensor ConvertOwned(const Tensor& tensor, DType dtype) {
  Tensor converted = ConvertTensor(tensor, dtype);
  return converted.data == tensor.data ? CopyTensor(converted) : converted;
}

Tensor ConvertTensor(const Tensor& tensor, DType dtype) {
  if (tensor.dtype == dtype) {
    return tensor;
  }
  const int64_t n = tensor.NumElements();
  auto [out, bytes] = NewTensor(dtype, tensor.shape);
  if (dtype == DType::kF32) {
    auto* values = reinterpret_cast<float*>(bytes);
    if (IsQuantized(tensor.dtype)) {
      for (int64_t r = 0; r < n / tensor.cols(); ++r) {
        RowAsFloat(tensor, r, values + r * tensor.cols());
      }
    } else {
      for (int64_t i = 0; i < n; ++i) values[i] = ElementAsFloat(tensor, i);
    }
    return out;
  }
  const Tensor source = IsQuantized(tensor.dtype) ? ToF32(tensor) : tensor;
  if (IsQuantized(dtype)) {
    const int64_t cols = tensor.cols();
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < n / cols; ++r) {
      RowAsFloat(source, r, row.data());
      quant::QuantizeRow(dtype, row.data(), cols, bytes + r * RowBytes(dtype, cols));
    }
    return out;
  }
  auto* values = reinterpret_cast<uint16_t*>(bytes);
  for (int64_t i = 0; i < n; ++i) {
    float v = ElementAsFloat(source, i);
    values[i] = dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
  }
  return out;
}

Tensor CopyTensor(const Tensor& tensor) {
  auto [out, data] = NewTensor(tensor.dtype, tensor.shape);
  std::memcpy(data, tensor.data, tensor.NumBytes());
  return out;
}

void ReleaseResidentPages(const Tensor& tensor) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(tensor.data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + tensor.NumBytes()) / page * page;
  if (tensor.data != nullptr && last > first) {
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);  // advice only
  }
}

Tensor ConcatRows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.rows();
  auto [out, data] = NewTensor(parts.front().dtype, {rows, parts.front().cols()});
  size_t offset = 0;
  for (const Tensor& part : parts) {
    std::memcpy(data + offset, part.data, part.NumBytes());
    offset += part.NumBytes();
  }
  return out;
}

std::string DescribeTensor(const Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.shape, ", "), "] ", DTypeName(tensor.dtype));
}

}  // namespace pdserve
