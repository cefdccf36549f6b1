#include "aten/SdpaBackendSelection.h"

#include "ir/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace commlens {

std::string CudaTarget::str() const {
  return fmt::format("{} (sm{}{}, cuDNN {}.{}.{}{})", name, major, minor, cudnnVersion / 10000, cudnnVersion / 100 % 100,
                     cudnnVersion % 100, torchMinor == kPinnedTorchMinor ? "" : fmt::format(", torch 2.{}", torchMinor));
}

namespace {

struct Preset {
  const char *name;
  int major, minor;
};
// Compute capabilities of common data-centre and workstation GPUs (NVIDIA's CUDA GPU list).
constexpr Preset kPresets[] = {
    {"v100", 7, 0}, {"t4", 7, 5},   {"a100", 8, 0}, {"a10", 8, 6},  {"a10g", 8, 6},  {"l4", 8, 9},
    {"l40s", 8, 9}, {"h100", 9, 0}, {"h200", 9, 0}, {"h20", 9, 0},  {"b200", 10, 0}, {"gb200", 10, 0},
    {"b300", 10, 3}, {"rtx4090", 8, 9}, {"rtx5090", 12, 0},
};

} // namespace

llvm::Expected<CudaTarget> cudaTargetByName(llvm::StringRef name) {
  std::string lower = name.lower();
  for (const Preset &p : kPresets)
    if (lower == p.name) {
      CudaTarget t;
      t.name = p.name;
      t.major = p.major;
      t.minor = p.minor;
      return t;
    }
  llvm::SmallVector<llvm::StringRef, 16> names;
  for (const Preset &p : kPresets)
    names.push_back(p.name);
  return makeError("unknown GPU '{}' (known: {})", name.str(), llvm::join(names, ", "));
}

llvm::Error setComputeCapability(CudaTarget &t, llvm::StringRef text) {
  llvm::StringRef s = text;
  unsigned major = 0, minor = 0;
  bool ok = false;
  if (s.consume_front("sm") || s.consume_front("sm_")) {
    // smXY / smXYZ: the last digit is the minor revision.
    if (s.size() >= 2 && llvm::all_of(s, llvm::isDigit)) {
      ok = !s.drop_back().getAsInteger(10, major);
      minor = static_cast<unsigned>(s.back() - '0');
    }
  } else {
    auto [a, b] = s.split('.');
    ok = !b.empty() && !a.getAsInteger(10, major) && !b.getAsInteger(10, minor);
  }
  if (!ok || major == 0 || major > 99 || minor > 9)
    return makeError("bad compute capability '{}' (expected MAJOR.MINOR such as 9.0, or smXY such as sm90)",
                     text.str());
  t.major = static_cast<int>(major);
  t.minor = static_cast<int>(minor);
  t.name = fmt::format("sm{}{}", major, minor);
  return llvm::Error::success();
}

llvm::Error setTorchVersion(CudaTarget &t, llvm::StringRef text) {
  // "2.11.0+cu130", "2.11.0a0+git...", "2.11": the major and minor are all the selection reads.
  llvm::StringRef s = text;
  unsigned major = 0, minor = 0;
  bool ok = !s.consumeInteger(10, major) && s.consume_front(".") && !s.consumeInteger(10, minor) &&
            (s.empty() || s.startswith(".") || s.startswith("+"));
  if (!ok)
    return makeError("bad torch version '{}' (expected torch.__version__, such as 2.11.0+cu130)", text.str());
  if (major != 2 || minor < 11 || minor > 13)
    return makeError("torch {}.{}: the CUDA dispatch is modelled for torch 2.11 to 2.13", major, minor);
  t.torchMinor = static_cast<int>(minor);
  return llvm::Error::success();
}

llvm::StringRef name(SdpaBackend b) {
  switch (b) {
  case SdpaBackend::Cudnn:
    return "cudnn_attention";
  case SdpaBackend::Flash:
    return "flash_attention";
  case SdpaBackend::Efficient:
    return "efficient_attention";
  case SdpaBackend::Math:
    return "math";
  }
  return "?";
}

namespace {

/// A failed check: its reason; nullopt when the check passes.
using Check = std::optional<std::string>;

int64_t sz(const TensorMeta &m, int64_t d) { return m.sizes[d < 0 ? d + m.rank() : d].hint; }
int64_t st(const TensorMeta &m, int64_t d) { return m.strides[d < 0 ? d + m.rank() : d].hint; }
bool isHalf(ScalarType t) { return t == ScalarType::Half || t == ScalarType::BFloat16; }
bool smIn(const CudaTarget &t, int loMajor, int loMinor, int hiMajor, int hiMinor) {
  bool ge = t.major > loMajor || (t.major == loMajor && t.minor >= loMinor);
  bool le = t.major < hiMajor || (t.major == hiMajor && t.minor <= hiMinor);
  return ge && le;
}

/// Evaluates the checks of one backend in ATen's order, stopping at the first failure.
class Checker {
public:
  Checker(const SdpaOperands &o, const CudaTarget &t) : o_(o), t_(t), q_(*o.query), k_(*o.key), v_(*o.value) {}

  Check cudnn() const {
    if (o_.dropout > 0.0 && t_.cudnnVersion > 91100 && t_.cudnnVersion < 91400)
      return "cuDNN 9.11-9.13 does not support dropout in SDPA";
    if (t_.cudnnVersion < 90000)
      return "cuDNN older than 9.0.0";
    if (Check c = tensorShapes())
      return c;
    if (!isHalf(q_.dtype) || (t_.major < 8 && q_.dtype != ScalarType::Half))
      return fmt::format("dtype {} (needs float16 or bfloat16)", torchName(q_.dtype));
    if (Check c = maskShape())
      return c;
    if (!smIn(t_, 8, 0, 12, 1))
      return fmt::format("sm{}{} outside [sm80, sm121]", t_.major, t_.minor);
    if (t_.torchMinor >= 12 && o_.dropout * 16.0 != std::floor(o_.dropout * 16.0))
      return "dropout probability is not a multiple of 1/16";
    if (Check c = nonzeroSeqLens())
      return c;
    if (Check c = lastDimStride1(/*ignoreSingleton=*/true))
      return c;
    if (Check c = batchAndHeads(/*requiresSameNumHeads=*/false))
      return c;
    if (sz(q_, 0) > 65535 || sz(q_, 1) > 65535)
      return "batch size or num_heads above 65535";
    int64_t dqk = sz(q_, 3), dv = sz(v_, 3);
    bool sm90or10x = (t_.major == 9 && t_.minor == 0) || t_.major == 10;
    bool unsupportedSm107 = t_.major == 10 && t_.minor == 7 && t_.cudnnVersion <= 92500;
    bool d256 = sm90or10x && !unsupportedSm107 && t_.cudnnVersion > 92200;
    int64_t limit = 128;
    if (d256)
      limit = 256;
    else if (sm90or10x && t_.cudnnVersion >= 91100 && dqk == 192 && dv == 128)
      limit = 192;
    if (dqk > limit || dv > limit)
      return fmt::format("head_dim above {}", limit);
    if (dqk % 8 || dv % 8)
      return "head_dim not a multiple of 8";
    if (sz(k_, 2) == 1)
      return "key/value sequence length 1";
    if (o_.dropout != 0.0 && sz(q_, 2) == 1)
      return "query sequence length 1 with dropout";
    if (o_.requiresGrad && d256 &&
        !((dqk <= 128 && dv <= 128) || (dqk == 192 && dv == 128) || (dqk == 256 && dv == 256)))
      return "no cuDNN backward for these head dims";
    return std::nullopt;
  }

  Check flash() const {
    if (Check c = tensorShapes())
      return c;
    if (o_.mask)
      return "attn_mask is set";
    int64_t dq = sz(q_, -1);
    if (dq != sz(k_, -1) || dq != sz(v_, -1) || dq > 256)
      return "q/k/v head dims differ or exceed 256";
    if (!smIn(t_, 8, 0, 12, 1))
      return fmt::format("sm{}{} outside [sm80, sm121]", t_.major, t_.minor);
    if (o_.requiresGrad && (smIn(t_, 8, 6, 8, 9) || smIn(t_, 12, 0, 12, 1)) &&
        !(dq <= 192 || (o_.dropout <= 0.0 && dq > 224)))
      return "training with this head_dim is not supported on sm86-89/sm120";
    if (o_.isCausal && sz(q_, -2) != sz(k_, -2))
      return "is_causal with seqlen_q != seqlen_k";
    if (!(q_.dtype == ScalarType::Half || (t_.major >= 8 && q_.dtype == ScalarType::BFloat16)))
      return fmt::format("dtype {} (needs float16 or bfloat16)", torchName(q_.dtype));
    if (Check c = batchAndHeads(/*requiresSameNumHeads=*/true))
      return c;
    if (Check c = nonzeroSeqLens())
      return c;
    return lastDimStride1(/*ignoreSingleton=*/true);
  }

  Check efficient() const {
    if (!smIn(t_, 5, 0, 12, 1))
      return fmt::format("sm{}{} outside [sm50, sm121]", t_.major, t_.minor);
    if (Check c = tensorShapes())
      return c;
    bool half = isHalf(q_.dtype);
    // minimum_gemm_alignment: tensor cores from sm80 (sm70 for half) need 128-bit rows.
    bool tensorCores = t_.major >= 8 || (t_.major >= 7 && half);
    int64_t alignment = t_.major >= 8 ? 4 : 1;
    if (tensorCores)
      alignment = std::max<int64_t>(alignment, 128 / (half ? 16 : 32));
    int64_t dq = sz(q_, -1), dv = sz(v_, -1);
    if (dq != sz(k_, -1) || dq % alignment || dq <= 0 || dv % alignment || dv <= 0)
      return fmt::format("head dims not multiples of {}", alignment);
    if (t_.major >= 8) {
      int64_t bytes = alignment * elementSize(q_.dtype);
      for (const TensorMeta *m : {&q_, &k_, &v_})
        if (m->numel() != 0 && (m->storageOffset.hint * elementSize(m->dtype)) % bytes)
          return fmt::format("a q/k/v storage offset is not {}-byte aligned", bytes);
    }
    if (Check c = nonzeroSeqLens())
      return c;
    if (Check c = lastDimStride1(/*ignoreSingleton=*/false))
      return c;
    if (Check c = batchAndHeads(/*requiresSameNumHeads=*/true))
      return c;
    bool dtypeOk = q_.dtype == ScalarType::Half || q_.dtype == ScalarType::Float ||
                   (t_.major >= 8 && q_.dtype == ScalarType::BFloat16);
    if (!dtypeOk)
      return fmt::format("dtype {}", torchName(q_.dtype));
    return std::nullopt;
  }

private:
  Check tensorShapes() const {
    if (q_.rank() != 4 || k_.rank() != 4 || v_.rank() != 4)
      return "q/k/v are not 4-D";
    return std::nullopt;
  }
  Check nonzeroSeqLens() const {
    if (sz(q_, -2) == 0 || sz(k_, -2) == 0)
      return "a zero sequence length";
    return std::nullopt;
  }
  Check lastDimStride1(bool ignoreSingleton) const {
    bool qkv = st(q_, -1) == 1 && st(k_, -1) == 1 && st(v_, -1) == 1;
    if (ignoreSingleton)
      qkv = qkv || sz(q_, -1) == 1;
    bool mask = !o_.mask || o_.mask->rank() == 0 || st(*o_.mask, -1) == 1;
    if (!qkv || !mask)
      return "a last dim stride is not 1";
    return std::nullopt;
  }
  Check batchAndHeads(bool requiresSameNumHeads) const {
    if (sz(q_, 0) != sz(k_, 0) || sz(q_, 0) != sz(v_, 0))
      return "q/k/v batch sizes differ";
    int64_t hq = sz(q_, -3), hk = sz(k_, -3), hv = sz(v_, -3);
    if (o_.enableGqa) {
      if (requiresSameNumHeads && hk != hv)
        return "key and value head counts differ";
      if (hq % hk || (!requiresSameNumHeads && hq % hv))
        return "key/value heads do not divide query heads";
      return std::nullopt;
    }
    if (hq != hk || hq != hv)
      return "q/k/v head counts differ (enable_gqa is False)";
    return std::nullopt;
  }
  Check maskShape() const {
    if (!o_.mask)
      return std::nullopt;
    const TensorMeta &m = *o_.mask;
    if (m.requiresGrad)
      return "attn_mask requires grad";
    if (m.rank() < 2 || (sz(m, -2) != sz(q_, 2) && sz(m, -2) != 1) || (sz(m, -1) != sz(k_, 2) && sz(m, -1) != 1))
      return "attn_mask shape";
    if (m.rank() == 2)
      return std::nullopt;
    if (m.rank() == 4 && (sz(m, 0) == 1 || sz(m, 0) == sz(q_, 0)) && (sz(m, 1) == 1 || sz(m, 1) == sz(q_, 1)))
      return std::nullopt;
    return "attn_mask shape";
  }

  const SdpaOperands &o_;
  const CudaTarget &t_;
  const TensorMeta &q_, &k_, &v_;
};

} // namespace

SdpaSelection selectCudaSdpaBackend(const SdpaOperands &ops, const CudaTarget &target) {
  // priority_order: the context's default (flash, efficient, math, cudnn) unless
  // check_prefer_cudnn_attention puts cuDNN first (cuDNN newer than 9.15.0 on sm9x/sm10x, only
  // minor revisions 0 and 3 for CUDA 12 builds; TORCH_CUDNN_SDPA_DEPRIORITIZED=1 turns it off).
  bool preferCudnn = target.cudnnVersion > 91500 && (target.major == 9 || target.major == 10) &&
                     (target.cudaMajor >= 13 || target.minor == 0 || target.minor == 3);
  llvm::SmallVector<SdpaBackend, 4> order =
      preferCudnn ? llvm::SmallVector<SdpaBackend, 4>{SdpaBackend::Cudnn, SdpaBackend::Flash, SdpaBackend::Efficient,
                                                      SdpaBackend::Math}
                  : llvm::SmallVector<SdpaBackend, 4>{SdpaBackend::Flash, SdpaBackend::Efficient, SdpaBackend::Math,
                                                      SdpaBackend::Cudnn};
  llvm::SmallVector<std::string, 4> orderNames, rejected;
  for (SdpaBackend b : order)
    orderNames.push_back(name(b).str());
  Checker checker(ops, target);
  SdpaSelection sel;
  for (SdpaBackend b : order) {
    Check failed;
    if (b == SdpaBackend::Cudnn)
      failed = checker.cudnn();
    else if (b == SdpaBackend::Flash)
      failed = checker.flash();
    else if (b == SdpaBackend::Efficient)
      failed = checker.efficient();
    if (!failed) {
      sel.backend = b;
      break;
    }
    rejected.push_back(fmt::format("{}: {}", name(b), *failed));
  }
  sel.why = fmt::format("{} on {}; priority {}", name(sel.backend), target.str(), llvm::join(orderNames, ", "));
  if (!rejected.empty())
    sel.why += "; not " + llvm::join(rejected, "; not ");
  return sel;
}

} // namespace commlens
