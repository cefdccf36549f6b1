// Which kernel scaled_dot_product_attention runs on a CUDA device, decided as ATen's
// select_sdp_backend does it (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp and
// sdp_utils_cpp.h): backends are tried in priority order and the first whose checks all pass
// runs. The checks read the (global, for DTensors) shapes, strides, dtypes and the mask, the GPU's
// compute capability and the runtime cuDNN version, so a prediction names its GPU target.
#pragma once

#include "ir/Types.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace commlens {

/// The GPU a cuda plan runs on, as far as ATen's kernel choices depend on it.
struct CudaTarget {
  std::string name = "h100";
  int major = 9, minor = 0;
  /// torch.backends.cudnn.version() of the runtime (e.g. 91002 for cuDNN 9.10.2).
  int64_t cudnnVersion = 91002;
  /// CUDA toolkit the torch build was compiled with (major): below 13, cuDNN attention is only
  /// preferred on minor revisions 0 and 3 of sm9x/sm10x.
  int cudaMajor = 12;
  /// torch.__version__'s minor (torch 2.MINOR): releases before 2.12 lack check_cudnn_dropout
  /// (pytorch#174245), the one selection difference modelled between the releases accepted.
  static constexpr int kPinnedTorchMinor = 13; ///< the torch commlens models (scripts/setup.sh)
  int torchMinor = kPinnedTorchMinor;

  std::string str() const; ///< "h100 (sm90, cuDNN 9.10.2)", ", torch 2.11" added for an older torch
};

/// A named preset ("h100", "a100", ...), case-insensitive; the error lists the known names.
llvm::Expected<CudaTarget> cudaTargetByName(llvm::StringRef name);
/// "MAJOR.MINOR" (e.g. "9.0") or "smXY".
llvm::Error setComputeCapability(CudaTarget &t, llvm::StringRef text);
/// torch.__version__ (e.g. "2.11.0+cu130" or "2.11"): 2.11 to 2.13, the releases whose selection
/// this file follows (2.13's sdp_utils.cpp; 2.11's checked on a GPU).
llvm::Error setTorchVersion(CudaTarget &t, llvm::StringRef text);

enum class SdpaBackend : uint8_t { Cudnn, Flash, Efficient, Math };
llvm::StringRef name(SdpaBackend b);

/// The operands of one SDPA call as the selection sees them.
struct SdpaOperands {
  const TensorMeta *query = nullptr, *key = nullptr, *value = nullptr;
  const TensorMeta *mask = nullptr; ///< null: no attn_mask
  double dropout = 0.0;
  bool isCausal = false;
  bool enableGqa = false;
  /// Some input requires grad and grad mode is on (input_requires_grad).
  bool requiresGrad = false;
};

struct SdpaSelection {
  SdpaBackend backend = SdpaBackend::Math;
  /// Why: the priority order and, for each backend tried before the chosen one, the first check
  /// that failed ("flash: attn_mask is set; efficient: ...").
  std::string why;
};

SdpaSelection selectCudaSdpaBackend(const SdpaOperands &ops, const CudaTarget &target);

} // namespace commlens
