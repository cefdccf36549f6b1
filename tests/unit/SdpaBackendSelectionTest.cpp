// SDPA backend choice on CUDA, each expectation derived by hand from ATen's select_sdp_backend
// (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp): default priority flash, efficient,
// math, cuDNN; cuDNN first on sm90/sm100 when the runtime cuDNN is newer than 9.15.0.
#include "aten/SdpaBackendSelection.h"

#include <gtest/gtest.h>

namespace commlens {
namespace {

/// [B, H, L, D] in the layout view(B, L, H, D).transpose(1, 2) gives (what GPT-2 / Llama pass).
TensorMeta bhld(ScalarType dtype, int64_t B, int64_t H, int64_t L, int64_t D, int64_t offset = 0) {
  TensorMeta m;
  m.dtype = dtype;
  for (int64_t s : {B, H, L, D})
    m.sizes.push_back(SymInt::concrete(s));
  for (int64_t s : {L * H * D, D, H * D, int64_t{1}})
    m.strides.push_back(SymInt::concrete(s));
  m.storageOffset = SymInt::concrete(offset);
  return m;
}

SdpaBackend choose(const TensorMeta &q, const CudaTarget &t, const TensorMeta *mask = nullptr, bool causal = true,
                   double dropout = 0.0, bool grad = true, const TensorMeta *kv = nullptr) {
  SdpaOperands ops;
  ops.query = &q;
  ops.key = kv ? kv : &q;
  ops.value = kv ? kv : &q;
  ops.mask = mask;
  ops.isCausal = causal;
  ops.dropout = dropout;
  ops.requiresGrad = grad;
  return selectCudaSdpaBackend(ops, t).backend;
}

CudaTarget gpu(const char *name, int64_t cudnn = 91002) {
  CudaTarget t = llvm::cantFail(cudaTargetByName(name));
  t.cudnnVersion = cudnn;
  return t;
}

TEST(SdpaBackendSelection, H100Bf16CausalRunsFlash) {
  // flash: no mask, head dim 64 <= 256, sm90 in [sm80, sm121], bf16, square causal.
  EXPECT_EQ(choose(bhld(ScalarType::BFloat16, 2, 8, 128, 64), gpu("h100")), SdpaBackend::Flash);
}

TEST(SdpaBackendSelection, Float32RunsEfficient) {
  // flash needs fp16/bf16; efficient takes fp32 on sm80+ when head dims are multiples of 4.
  EXPECT_EQ(choose(bhld(ScalarType::Float, 2, 8, 16, 8), gpu("h100")), SdpaBackend::Efficient);
}

TEST(SdpaBackendSelection, MaskRulesOutFlash) {
  TensorMeta mask = bhld(ScalarType::BFloat16, 1, 1, 128, 128);
  EXPECT_EQ(choose(bhld(ScalarType::BFloat16, 2, 8, 128, 64), gpu("h100"), &mask, false), SdpaBackend::Efficient);
}

TEST(SdpaBackendSelection, NewCudnnIsPreferredOnSm90Only) {
  // cuDNN 9.17.0 > 9.15.0 on sm90: cuDNN first; on sm89 (L40S) the default order stays.
  TensorMeta q = bhld(ScalarType::BFloat16, 2, 8, 128, 64);
  EXPECT_EQ(choose(q, gpu("h100", 91700)), SdpaBackend::Cudnn);
  EXPECT_EQ(choose(q, gpu("l40s", 91700)), SdpaBackend::Flash);
  // cuDNN 9.15.0 exactly is not newer than 9.15.0.
  EXPECT_EQ(choose(q, gpu("h100", 91500)), SdpaBackend::Flash);
}

TEST(SdpaBackendSelection, CudnnRejectsHeadDimNotMultipleOf8) {
  // head dim 12: cuDNN needs multiples of 8, flash accepts it (padded to 16 by the composite).
  EXPECT_EQ(choose(bhld(ScalarType::BFloat16, 2, 8, 128, 12), gpu("h100", 91700)), SdpaBackend::Flash);
}

TEST(SdpaBackendSelection, UnalignedFloat32HeadDimFallsBackToMath) {
  // fp32 head dim 6: flash rejects fp32, efficient needs a multiple of 4: math.
  EXPECT_EQ(choose(bhld(ScalarType::Float, 2, 8, 16, 6), gpu("h100")), SdpaBackend::Math);
}

TEST(SdpaBackendSelection, V100HasNoFlashAndNoBf16) {
  // sm70: flash needs sm80+; efficient on sm70 takes fp16/fp32 only.
  EXPECT_EQ(choose(bhld(ScalarType::Half, 2, 8, 16, 64), gpu("v100")), SdpaBackend::Efficient);
  EXPECT_EQ(choose(bhld(ScalarType::BFloat16, 2, 8, 16, 64), gpu("v100")), SdpaBackend::Math);
}

TEST(SdpaBackendSelection, CausalNonSquareRulesOutFlash) {
  TensorMeta q = bhld(ScalarType::BFloat16, 2, 8, 4, 64), kv = bhld(ScalarType::BFloat16, 2, 8, 16, 64);
  EXPECT_EQ(choose(q, gpu("h100"), nullptr, true, 0.0, true, &kv), SdpaBackend::Efficient);
}

TEST(SdpaBackendSelection, EfficientNeedsAlignedStorageOffsets) {
  // fp32 on sm90: alignment 4 elements = 16 bytes; an offset of 2 elements is 8 bytes.
  EXPECT_EQ(choose(bhld(ScalarType::Float, 2, 8, 16, 8, 2), gpu("h100")), SdpaBackend::Math);
  EXPECT_EQ(choose(bhld(ScalarType::Float, 2, 8, 16, 8, 8), gpu("h100")), SdpaBackend::Efficient);
}

TEST(SdpaBackendSelection, WhyNamesTheRejectedBackends) {
  SdpaOperands ops;
  TensorMeta q = bhld(ScalarType::Float, 2, 8, 16, 8);
  ops.query = ops.key = ops.value = &q;
  SdpaSelection s = selectCudaSdpaBackend(ops, gpu("h100"));
  EXPECT_EQ(s.why, "efficient_attention on h100 (sm90, cuDNN 9.10.2); priority flash_attention, efficient_attention, "
                   "math, cudnn_attention; not flash_attention: dtype torch.float32 (needs float16 or bfloat16)");
}

TEST(SdpaBackendSelection, Torch211CudnnTakesDropoutNotAMultipleOfSixteenth) {
  // GPT-2's bf16 attention with dropout 0.1 on an H200 (cuDNN 9.19, CUDA 13: cuDNN first). torch
  // 2.13's check_cudnn_dropout refuses 0.1 (1.6/16), so flash runs; torch 2.11 has no such check and
  // ran cuDNN attention on the lent H200 (docs/cuda-dispatch.md, GPU runs).
  CudaTarget t = gpu("h200", 91900);
  t.cudaMajor = 13;
  TensorMeta q = bhld(ScalarType::BFloat16, 2, 3, 16, 8);
  EXPECT_EQ(choose(q, t, nullptr, true, 0.1), SdpaBackend::Flash);
  EXPECT_EQ(choose(q, t, nullptr, true, 0.125), SdpaBackend::Cudnn); // 2/16
  ASSERT_FALSE(static_cast<bool>(setTorchVersion(t, "2.11.0+cu130")));
  EXPECT_EQ(t.torchMinor, 11);
  EXPECT_EQ(choose(q, t, nullptr, true, 0.1), SdpaBackend::Cudnn);
  EXPECT_EQ(t.str(), "h200 (sm90, cuDNN 9.19.0, torch 2.11)");
}

TEST(SdpaBackendSelection, TorchVersionsOutsideTheModelledOnesAreRefused) {
  CudaTarget t;
  ASSERT_FALSE(static_cast<bool>(setTorchVersion(t, "2.12")));
  EXPECT_EQ(t.torchMinor, 12);
  EXPECT_EQ(llvm::toString(setTorchVersion(t, "2.10.1")),
            "torch 2.10: the CUDA dispatch is modelled for torch 2.11 to 2.13");
  EXPECT_EQ(llvm::toString(setTorchVersion(t, "two")),
            "bad torch version 'two' (expected torch.__version__, such as 2.11.0+cu130)");
  EXPECT_EQ(llvm::toString(setTorchVersion(t, "2.11x")),
            "bad torch version '2.11x' (expected torch.__version__, such as 2.11.0+cu130)");
  EXPECT_EQ(t.torchMinor, 12);
}

TEST(SdpaBackendSelection, TargetsByNameAndCapability) {
  EXPECT_EQ(gpu("B200").major, 10);
  CudaTarget t;
  ASSERT_FALSE(static_cast<bool>(setComputeCapability(t, "8.6")));
  EXPECT_EQ(t.major, 8);
  EXPECT_EQ(t.minor, 6);
  ASSERT_FALSE(static_cast<bool>(setComputeCapability(t, "sm90")));
  EXPECT_EQ(t.major, 9);
  EXPECT_EQ(t.minor, 0);
  llvm::Error bad = setComputeCapability(t, "nine");
  ASSERT_TRUE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(std::move(bad)),
            "bad compute capability 'nine' (expected MAJOR.MINOR such as 9.0, or smXY such as sm90)");
  auto unknown = cudaTargetByName("k80");
  ASSERT_FALSE(static_cast<bool>(unknown));
  EXPECT_EQ(llvm::toString(unknown.takeError()),
            "unknown GPU 'k80' (known: v100, t4, a100, a10, a10g, l4, l40s, h100, h200, h20, b200, gb200, b300, "
            "rtx4090, rtx5090)");
}

} // namespace
} // namespace commlens
