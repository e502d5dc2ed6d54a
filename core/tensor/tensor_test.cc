// Tensor helpers: owned f32 tensors, conversions between dtypes (round to nearest even, shape and
// ownership preserved), element access for every dtype, descriptions and dtype names.
#include "core/tensor/tensor.h"

#include <cmath>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor/dtype.h"
#include "core/tensor/float16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

const std::vector<float> kValues = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-6f, -0.0f, 3.14159f, 1e5f};

TEST(TensorTest, MakeF32Tensor) {
  Tensor t = MakeF32Tensor(kValues, {2, 4});
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t.NumElements(), 8);
  EXPECT_EQ(t.NumBytes(), 32u);
  EXPECT_EQ(t.rows(), 2);
  EXPECT_EQ(t.cols(), 4);
  EXPECT_FALSE(t.empty());
  ASSERT_NE(t.owner, nullptr);
  for (size_t i = 0; i < kValues.size(); ++i) EXPECT_EQ(t.as<float>()[i], kValues[i]);
}

TEST(TensorTest, DefaultTensorIsEmpty) {
  Tensor t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.rows(), 0);
  EXPECT_EQ(t.cols(), 0);
  EXPECT_EQ(t.NumElements(), 1);  // the product over no dimensions
}

TEST(TensorTest, ConvertToF16AndBack) {
  Tensor t = MakeF32Tensor(kValues, {4, 2});
  Tensor h = ConvertTensor(t, DType::kF16);
  EXPECT_EQ(h.dtype, DType::kF16);
  EXPECT_EQ(h.shape, t.shape);
  EXPECT_EQ(h.NumBytes(), 16u);
  for (size_t i = 0; i < kValues.size(); ++i) {
    EXPECT_EQ(h.as<uint16_t>()[i], F32ToF16(kValues[i])) << "element " << i;
    EXPECT_EQ(ElementAsFloat(h, static_cast<int64_t>(i)), F16ToF32(F32ToF16(kValues[i])));
  }
  EXPECT_EQ(ElementAsFloat(h, 0), 1.0f);
  EXPECT_EQ(ElementAsFloat(h, 3), 65504.0f);
  EXPECT_TRUE(std::signbit(ElementAsFloat(h, 5)));
  EXPECT_TRUE(std::isinf(ElementAsFloat(h, 7))) << "1e5 overflows f16";

  Tensor back = ToF32(h);
  EXPECT_EQ(back.dtype, DType::kF32);
  EXPECT_EQ(back.shape, t.shape);
  for (int64_t i = 0; i < back.NumElements(); ++i) {
    EXPECT_EQ(back.as<float>()[i], ElementAsFloat(h, i));
  }
}

TEST(TensorTest, ConvertToBF16) {
  Tensor t = MakeF32Tensor(kValues, {8});
  Tensor b = ConvertTensor(t, DType::kBF16);
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.shape, t.shape);
  for (size_t i = 0; i < kValues.size(); ++i) {
    EXPECT_EQ(b.as<uint16_t>()[i], F32ToBF16(kValues[i]));
    EXPECT_EQ(ElementAsFloat(b, static_cast<int64_t>(i)), BF16ToF32(F32ToBF16(kValues[i])));
    EXPECT_NEAR(ElementAsFloat(b, static_cast<int64_t>(i)), kValues[i],
                std::fabs(kValues[i]) / 256.0f);
  }
  EXPECT_FALSE(std::isinf(ElementAsFloat(b, 7))) << "bf16 has f32's range";
}

TEST(TensorTest, ConvertBetween16BitTypesGoesThroughF32) {
  Tensor h = ConvertTensor(MakeF32Tensor(kValues, {8}), DType::kF16);
  Tensor b = ConvertTensor(h, DType::kBF16);
  ASSERT_EQ(b.dtype, DType::kBF16);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(b.as<uint16_t>()[i], F32ToBF16(ElementAsFloat(h, i))) << "element " << i;
  }
  Tensor h2 = ConvertTensor(b, DType::kF16);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(h2.as<uint16_t>()[i], F32ToF16(ElementAsFloat(b, i))) << "element " << i;
  }
}

TEST(TensorTest, ConvertToSameDtypeSharesData) {
  Tensor t = MakeF32Tensor(kValues, {8});
  Tensor same = ConvertTensor(t, DType::kF32);
  EXPECT_EQ(same.data, t.data);
  EXPECT_EQ(same.owner, t.owner);
  Tensor h = ConvertTensor(t, DType::kF16);
  EXPECT_EQ(ConvertTensor(h, DType::kF16).data, h.data);
}

TEST(TensorTest, ConvertedTensorOwnsItsBytes) {
  Tensor h;
  {
    Tensor t = MakeF32Tensor(kValues, {8});
    h = ConvertTensor(t, DType::kF16);
  }
  // The source is gone; the converted tensor keeps its own storage alive.
  EXPECT_EQ(ElementAsFloat(h, 1), -2.5f);
  Tensor copy = h;
  h = Tensor();
  EXPECT_EQ(ElementAsFloat(copy, 1), -2.5f);
}

TEST(TensorTest, ElementAsFloatReadsRawPatterns) {
  std::vector<uint16_t> bits = {0x3c00, 0xc000, 0x7c00, 0x0001};
  Tensor f16{DType::kF16, {4}, bits.data(), nullptr};
  EXPECT_EQ(ElementAsFloat(f16, 0), 1.0f);
  EXPECT_EQ(ElementAsFloat(f16, 1), -2.0f);
  EXPECT_TRUE(std::isinf(ElementAsFloat(f16, 2)));
  EXPECT_EQ(ElementAsFloat(f16, 3), 0x1p-24f);
  Tensor bf16{DType::kBF16, {4}, bits.data(), nullptr};
  EXPECT_EQ(ElementAsFloat(bf16, 0), BF16ToF32(0x3c00));
  EXPECT_EQ(ElementAsFloat(bf16, 1), -2.0f);  // 0xc000 is -2 in bf16 too
}

TEST(TensorTest, DescribeTensor) {
  Tensor t =
      ConvertTensor(MakeF32Tensor(std::vector<float>(768 * 288, 0.5f), {768, 288}), DType::kBF16);
  EXPECT_EQ(DescribeTensor(t), "[768, 288] bf16");
  EXPECT_EQ(DescribeTensor(MakeF32Tensor({1, 2, 3}, {3})), "[3] f32");
  EXPECT_EQ(DescribeTensor(ConvertTensor(MakeF32Tensor({1, 2}, {1, 1, 2}), DType::kF16)),
            "[1, 1, 2] f16");
  EXPECT_EQ(DescribeTensor(Tensor()), "[] f32");
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_STREQ(DTypeName(DType::kF32), "f32");
  EXPECT_STREQ(DTypeName(DType::kF16), "f16");
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  // Stored in files: the numbering never changes.
  EXPECT_EQ(static_cast<int>(DType::kF32), 0);
  EXPECT_EQ(static_cast<int>(DType::kF16), 1);
  EXPECT_EQ(static_cast<int>(DType::kBF16), 2);
}

TEST(DTypeTest, Parse) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("Float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("fp16"), DType::kF16);
  absl::StatusOr<DType> bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("int8"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bf16"));
  EXPECT_FALSE(ParseDType("").ok());
}

}  // namespace
}  // namespace pdserve
