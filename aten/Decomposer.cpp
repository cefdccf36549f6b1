#include "aten/Decomposer.h"

#include "aten/SdpaBackendSelection.h"
#include "ir/Error.h"
#include "ir/GraphBuilder.h"
#include "ir/TensorMetaUtils.h"

#include <cmath>
#include <cstring>

#include <functional>
#include <limits>
#include <numeric>

namespace commlens {

namespace {

TensorMeta withShape(const TensorMeta &like, llvm::ArrayRef<int64_t> sizes,
                     std::optional<llvm::ArrayRef<int64_t>> strides = std::nullopt) {
  TensorMeta m = like;
  m.sizes.clear();
  for (int64_t s : sizes)
    m.sizes.push_back(SymInt::concrete(s));
  if (strides) {
    m.strides.clear();
    for (int64_t s : *strides)
      m.strides.push_back(SymInt::concrete(s));
  } else {
    m.strides = contiguousStrides(sizes);
  }
  m.storageOffset = SymInt::concrete(0);
  return m;
}

/// F.interpolate's composite overloads, each run as its .default kernel.
constexpr llvm::StringLiteral kUpsampleVec[] = {
    "aten::upsample_nearest1d.vec", "aten::upsample_nearest2d.vec",  "aten::upsample_nearest3d.vec",
    "aten::_upsample_nearest_exact1d.vec", "aten::_upsample_nearest_exact2d.vec",
    "aten::_upsample_nearest_exact3d.vec", "aten::upsample_linear1d.vec", "aten::upsample_bilinear2d.vec",
    "aten::upsample_bicubic2d.vec",  "aten::upsample_trilinear3d.vec", "aten::_upsample_bilinear2d_aa.vec",
    "aten::_upsample_bicubic2d_aa.vec", "aten::_upsample_lanczos2d_aa.vec"};

/// ATen's alias ops and the op each runs (aten/AliasOps.def).
const llvm::StringMap<llvm::StringRef> &aliasTargets() {
  static const llvm::StringMap<llvm::StringRef> m = {
#define ALIAS(ALIAS_OP, TARGET) {ALIAS_OP, TARGET},
#include "aten/AliasOps.def"
#undef ALIAS
  };
  return m;
}

/// Emits the runtime ops of one exported node.
class Decomposer {
public:
  /// `cuda`: the target of a device_type="cuda" plan (its kernels' dispatch), else CPU dispatch.
  Decomposer(GraphBuilder &b, const CudaTarget *cuda, llvm::DenseSet<const Value *> requiresGrad)
      : b_(b), cuda_(cuda), requiresGrad_(std::move(requiresGrad)) {}

  llvm::Error rewrite(const Node &n) {
    n_ = &n;
    llvm::StringRef op = n.opString();
    if (op == "aten::linear.default")
      return linear();
    if (op == "aten::matmul.default") {
      auto out = matmul(in("self"), in("other"), *result(0)->meta(), result(0)->name());
      if (!out)
        return out.takeError();
      b_.bind(n.results()[0], *out);
      return llvm::Error::success();
    }
    if (op == "aten::layer_norm.default")
      return layerNorm();
    if (op == "aten::group_norm.default")
      return groupNorm();
    if (op == "aten::rms_norm.default")
      return rmsNorm();
    if (op == "aten::dropout.default")
      return dropout();
    if (op == "aten::feature_dropout.default" || op == "aten::alpha_dropout.default" ||
        op == "aten::feature_alpha_dropout.default")
      return noiseDropout();
    if (op == "aten::softmax.int" || op == "aten::log_softmax.int")
      return softmax(op == "aten::log_softmax.int" ? "aten::_log_softmax.default" : "aten::_softmax.default");
    if (op == "aten::reshape.default" || op == "aten::flatten.using_ints") {
      b_.bind(n.results()[0], reshape(in("self"), hints(result(0)->meta()->sizes), result(0)->name()));
      return llvm::Error::success();
    }
    if (op == "aten::contiguous.default") {
      b_.bind(n.results()[0], contiguous(in("self"), result(0)->name()));
      return llvm::Error::success();
    }
    if (op == "aten::type_as.default")
      return conversion(/*forced=*/false);
    if (op == "aten::scaled_dot_product_attention.default")
      return cuda_ ? sdpaCuda() : sdpa();
    if (op.startswith("aten::to.")) {
      const Argument *copy = n.input("copy");
      return conversion(/*forced=*/copy && copy->is<bool>() && copy->get<bool>());
    }
    if (op == "aten::chunk.default" || op == "aten::unsafe_chunk.default")
      return chunk(op == "aten::chunk.default" ? "aten::split.Tensor" : "aten::unsafe_split.Tensor");
    if (op == "transformers::grouped_mm_fallback.default")
      return transformersGroupedMm();
    if (op == "aten::_assert_tensor_metadata.default")
      return llvm::Error::success(); // export's check of a .to() call: eager code never dispatches it
    if (op == "aten::movedim.int" || op == "aten::movedim.intlist")
      return movedim();
    if (op == "aten::std.dim" || op == "aten::var.dim")
      return stdVarDim(op == "aten::std.dim" ? "aten::std.correction" : "aten::var.correction");
    if (op == "aten::linalg_svd.default")
      return linalgSvd();
    if (op == "aten::pad.default")
      return pad();
    if (op == "aten::cross_entropy_loss.default")
      return crossEntropyLoss();
    if (llvm::is_contained(kUpsampleVec, op))
      return upsampleVec();
    if (auto alias = aliasTargets().find(op); alias != aliasTargets().end())
      return runAs(alias->second);
    if (auto composite = compositeOps().find(op); composite != compositeOps().end()) {
      keepExported_ = false;
      if (llvm::Error err = (this->*composite->second)())
        return err;
      if (keepExported_)
        b_.copy(n);
      return llvm::Error::success();
    }
    b_.copy(n);
    return llvm::Error::success();
  }

private:
  /// Tensor.to / type_as (TensorConversions.cpp): self when the result keeps the dtype and device
  /// and no copy is `forced`, else _to_copy to the result's dtype.
  llvm::Error conversion(bool forced) {
    Value *x = in("self");
    const TensorMeta &out = *result(0)->meta();
    if (!forced && out.dtype == x->meta()->dtype && out.device == x->meta()->device)
      b_.bind(n_->results()[0], x);
    else
      b_.bind(n_->results()[0],
              unary("aten::_to_copy.default", x, out, result(0)->name(), {{"dtype", out.dtype, true}}));
    return llvm::Error::success();
  }

  /// The node as the op it calls with the same arguments (an alias op).
  llvm::Error runAs(llvm::StringRef target) {
    if (n_->results().size() != 1 || !result(0)->meta())
      return makeError("node '{}' ({}): expected one tensor result", n_->name(), n_->opString());
    llvm::SmallVector<NamedArgument, 4> args;
    for (const NamedArgument &a : n_->inputs())
      args.push_back({a.name, b_.map(a.value), a.keyword});
    b_.bind(result(0), emit1(target, std::move(args), *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  /// vstack / hstack / dstack / column_stack (TensorShape.cpp): one cat of the tensors made
  /// atleast_2d (vstack, on dim 0), atleast_1d (hstack: dim 0 when the first is 1-D, else 1),
  /// atleast_3d (dstack, dim 2), or, for column_stack, each of at most one dim reshaped to a column
  /// (numel, 1), then hstack's cat on dim 1.
  llvm::Error stacked() {
    llvm::StringRef op = n_->opString();
    const Argument *tensors = n_->input("tensors");
    if (!tensors || !tensors->is<TensorList>() || tensors->get<TensorList>().empty())
      return makeError("node '{}' ({}): expected a non-empty tensor list 'tensors'", n_->name(), op.str());
    TensorList parts;
    for (const Value *old : tensors->get<TensorList>()) {
      Value *x = b_.map(old);
      if (op == "aten::column_stack.default") {
        if (x->meta()->rank() <= 1)
          x = reshape(x, {numelOf(hints(x->meta()->sizes)), 1}, tmp("column"));
      } else {
        int64_t want = op == "aten::vstack.default" ? 2 : op == "aten::dstack.default" ? 3 : 1;
        x = atLeast(x, want, tmp(fmt::format("atleast_{}d", want)));
      }
      parts.push_back(x);
    }
    int64_t dim = op == "aten::vstack.default" ? 0 : op == "aten::dstack.default" ? 2
                  : parts.front()->meta()->rank() == 1 ? 0 : 1;
    b_.bind(result(0), emit1("aten::cat.default", {{"tensors", parts, false}, {"dim", dim, false}}, *result(0)->meta(),
                             result(0)->name()));
    return llvm::Error::success();
  }

  /// linalg_multi_dot (LinearAlgebra.cpp): a 1-D first operand unsqueezed to a row, a 1-D last one
  /// to a column; two matrices one mm, three in the cheaper of (AB)C and A(BC) (multi_dot_three),
  /// more in the order of the matrix-chain dynamic programme (multi_dot_impl's); the product viewed
  /// to the result's shape.
  llvm::Error multiDot() {
    const Argument *tensors = n_->input("tensors");
    if (!tensors || !tensors->is<TensorList>() || tensors->get<TensorList>().size() < 2)
      return makeError("node '{}' (aten::linalg_multi_dot.default): expected a list of at least two tensors",
                       n_->name());
    std::vector<Value *> ms;
    for (const Value *old : tensors->get<TensorList>())
      ms.push_back(b_.map(old));
    auto sizes = [](const Value *v) { return hints(v->meta()->sizes); };
    if (ms.front()->meta()->rank() == 1)
      ms.front() = unary("aten::unsqueeze.default", ms.front(), withShape(*ms.front()->meta(), {1, sizes(ms.front())[0]}),
                         tmp("row"), {{"dim", int64_t{0}, false}});
    if (ms.back()->meta()->rank() == 1)
      ms.back() = unary("aten::unsqueeze.default", ms.back(), withShape(*ms.back()->meta(), {sizes(ms.back())[0], 1}),
                        tmp("column"), {{"dim", int64_t{-1}, false}});
    for (const Value *m : ms)
      if (m->meta()->rank() != 2)
        return makeError("node '{}' (aten::linalg_multi_dot.default): expected matrices (and 1-D first and last "
                         "operands), got a {}-D one", n_->name(), m->meta()->rank());
    size_t n = ms.size();
    Value *out;
    if (n == 2) {
      out = mm(ms[0], ms[1], tmp("mm"));
    } else if (n == 3) {
      auto a = sizes(ms[0]), b = sizes(ms[1]), c = sizes(ms[2]);
      int64_t costAB = a[0] * b[1] * (a[1] + c[1]), costBC = b[0] * c[1] * (a[0] + b[1]);
      out = costAB > costBC ? mm(ms[0], mm(ms[1], ms[2], tmp("mm")), tmp("mm"))
                            : mm(mm(ms[0], ms[1], tmp("mm")), ms[2], tmp("mm"));
    } else {
      // p: the chain's dims; cost[i][j] the cheapest product of ms[i..j], split[i][j] its split
      std::vector<int64_t> p{sizes(ms[0])[0]};
      for (const Value *m : ms)
        p.push_back(sizes(m)[1]);
      std::vector<std::vector<int64_t>> cost(n, std::vector<int64_t>(n, 0));
      std::vector<std::vector<size_t>> split(n, std::vector<size_t>(n, 0));
      for (size_t len = 1; len < n; ++len)
        for (size_t i = 0; i + len < n; ++i) {
          size_t j = i + len;
          cost[i][j] = std::numeric_limits<int64_t>::max();
          for (size_t k = i; k < j; ++k) {
            int64_t q = cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1];
            if (q < cost[i][j]) {
              cost[i][j] = q;
              split[i][j] = k;
            }
          }
        }
      std::function<Value *(size_t, size_t)> chain = [&](size_t i, size_t j) -> Value * {
        if (i == j)
          return ms[i];
        Value *left = chain(i, split[i][j]);
        Value *right = chain(split[i][j] + 1, j);
        return mm(left, right, tmp("mm"));
      };
      out = chain(0, n - 1);
    }
    auto shape = hints(result(0)->meta()->sizes);
    b_.bind(result(0), emit1("aten::view.default", {{"self", out, false}, {"size", IntList(shape.begin(), shape.end()), false}},
                             withShape(*out->meta(), shape), result(0)->name()));
    return llvm::Error::success();
  }

  /// transformers' MoE experts (transformers 5.23 integrations/moe.py, `_grouped_mm`) call the
  /// custom op transformers::grouped_mm_fallback(input, weight, offs) where torch._grouped_mm
  /// cannot run: while dynamo traces float32 weights, so in every float32 program torch.export
  /// writes. Eagerly (`_can_use_grouped_mm`: any CUDA torch, CPU torch after 2.10) the same call
  /// runs torch._grouped_mm on the same operands, which the fallback's torch.mm loop over the
  /// offsets computes.
  llvm::Error transformersGroupedMm() {
    Value *input = in("input"), *weight = in("weight"), *offs = in("offs");
    if (!input || !weight || !offs || n_->results().size() != 1 || !result(0)->meta())
      return makeError("node '{}' ({}): expected tensors input, weight and offs and one tensor result", n_->name(),
                       n_->opString());
    b_.bind(result(0), emit1("aten::_grouped_mm.default", {{"self", input, false}, {"mat2", weight, false},
                                                           {"offs", offs, false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  // ---- CompositeImplicitAutograd ops that run one or a few other ops (TensorShape.cpp,
  // ReduceOps.cpp, Sorting.cpp, UnaryOps.cpp, LinearAlgebra.cpp in torch 2.13): DTensor and
  // autograd see only what they run. Each emits exactly the ops a TorchDispatchMode sees them run.
  using Composite = llvm::Error (Decomposer::*)();
  static const llvm::StringMap<Composite> &compositeOps() {
    static const llvm::StringMap<Composite> m = {
        {"aten::mT.default", &Decomposer::lastTwoDimsTransposed},
        {"aten::mH.default", &Decomposer::lastTwoDimsTransposed},
        {"aten::matrix_H.default", &Decomposer::lastTwoDimsTransposed},
        {"aten::adjoint.default", &Decomposer::lastTwoDimsTransposed},
        {"aten::numpy_T.default", &Decomposer::dimsReversed},
        {"aten::expand_as.default", &Decomposer::expandedToResult},
        {"aten::broadcast_to.default", &Decomposer::expandedToResult},
        {"aten::broadcast_tensors.default", &Decomposer::broadcastTensors},
        {"aten::view_as.default", &Decomposer::viewedAsResult},
        {"aten::unflatten.int", &Decomposer::viewedAsResult},
        {"aten::reshape_as.default", &Decomposer::reshapedAsResult},
        {"aten::ravel.default", &Decomposer::ravel},
        {"aten::fliplr.default", &Decomposer::flippedSide},
        {"aten::flipud.default", &Decomposer::flippedSide},
        {"aten::narrow.default", &Decomposer::narrow},
        {"aten::std.default", &Decomposer::correctionOverload},
        {"aten::var.default", &Decomposer::correctionOverload},
        {"aten::var_mean.default", &Decomposer::correctionOverload},
        {"aten::var_mean.dim", &Decomposer::correctionOverload},
        {"aten::std_mean.default", &Decomposer::correctionOverload},
        {"aten::std_mean.dim", &Decomposer::correctionOverload},
        {"aten::msort.default", &Decomposer::sortResult},
        {"aten::argsort.default", &Decomposer::sortResult},
        {"aten::real.default", &Decomposer::selfWhenReal},
        {"aten::resolve_conj.default", &Decomposer::selfWhenReal},
        {"aten::resolve_neg.default", &Decomposer::selfWhenReal},
        {"aten::conj_physical.default", &Decomposer::selfWhenReal},
        {"aten::isreal.default", &Decomposer::isreal},
        {"aten::vstack.default", &Decomposer::stacked},
        {"aten::hstack.default", &Decomposer::stacked},
        {"aten::dstack.default", &Decomposer::stacked},
        {"aten::column_stack.default", &Decomposer::stacked},
        {"aten::linalg_multi_dot.default", &Decomposer::multiDot},
        {"aten::isfinite.default", &Decomposer::isfinite},
        {"aten::atleast_1d.default", &Decomposer::atLeastNd},
        {"aten::atleast_2d.default", &Decomposer::atLeastNd},
        {"aten::atleast_3d.default", &Decomposer::atLeastNd},
        {"aten::outer.default", &Decomposer::outer},
        {"aten::special_ndtr.default", &Decomposer::ndtr},
        {"aten::hsplit.int", &Decomposer::splitBySections},
        {"aten::hsplit.array", &Decomposer::splitBySections},
        {"aten::vsplit.int", &Decomposer::splitBySections},
        {"aten::vsplit.array", &Decomposer::splitBySections},
        {"aten::dsplit.int", &Decomposer::splitBySections},
        {"aten::dsplit.array", &Decomposer::splitBySections},
        {"aten::diff.default", &Decomposer::diff},
        {"aten::rrelu.default", &Decomposer::rrelu},
        {"aten::gradient.scalarint", &Decomposer::gradient},
        {"aten::gradient.scalararray", &Decomposer::gradient},
        {"aten::gradient.array", &Decomposer::gradient},
        {"aten::gradient.scalarrayint", &Decomposer::gradient},
        {"aten::gradient.scalarrayarray", &Decomposer::gradient},
        {"aten::linalg_vander.default", &Decomposer::linalgVander},
        {"aten::batch_norm.default", &Decomposer::batchNorm},
        {"aten::instance_norm.default", &Decomposer::instanceNorm},
        {"aten::cosine_similarity.default", &Decomposer::cosineSimilarity},
        {"aten::margin_ranking_loss.default", &Decomposer::marginRankingLoss},
        {"aten::hinge_embedding_loss.default", &Decomposer::hingeEmbeddingLoss},
        {"aten::poisson_nll_loss.default", &Decomposer::poissonNllLoss},
        {"aten::cosine_embedding_loss.default", &Decomposer::cosineEmbeddingLoss},
        {"aten::linalg_vecdot.default", &Decomposer::linalgVecdot},
        {"aten::isclose.default", &Decomposer::isclose},
        {"aten::item.default", &Decomposer::item},
        {"aten::linalg_ldl_factor.default", &Decomposer::linalgLdlFactor},
        {"aten::meshgrid.indexing", &Decomposer::meshgrid},
        {"aten::linalg_matrix_rank.atol_rtol_tensor", &Decomposer::linalgMatrixRank},
        {"aten::linalg_matrix_power.default", &Decomposer::linalgMatrixPower},
        {"aten::linalg_cholesky.default", &Decomposer::linalgCholesky},
        {"aten::linalg_inv.default", &Decomposer::linalgInv},
        {"aten::linalg_det.default", &Decomposer::linalgDet},
        {"aten::det.default", &Decomposer::linalgDet},
        {"aten::linalg_slogdet.default", &Decomposer::linalgSlogdet},
        {"aten::logdet.default", &Decomposer::logdet},
        {"aten::linalg_solve.default", &Decomposer::linalgSolve},
        {"aten::linalg_solve_ex.default", &Decomposer::linalgSolveEx},
        {"aten::linalg_svdvals.default", &Decomposer::linalgSvdvals},
        {"aten::svd.default", &Decomposer::svd},
        {"aten::linalg_cond.default", &Decomposer::linalgCond},
        {"aten::linalg_eigh.default", &Decomposer::linalgEighVectors},
        {"aten::linalg_eigvalsh.default", &Decomposer::linalgEigvalsh},
        {"aten::linalg_eigvals.default", &Decomposer::linalgEigvals},
        {"aten::linalg_lu_factor.default", &Decomposer::linalgLuFactor},
        {"aten::_lu_with_info.default", &Decomposer::luWithInfo},
        {"aten::lu_solve.default", &Decomposer::luSolve},
        {"aten::matrix_exp.default", &Decomposer::matrixExp},
        {"aten::qr.default", &Decomposer::qr},
        {"aten::pinverse.default", &Decomposer::pinverse},
        {"aten::linalg_tensorinv.default", &Decomposer::linalgTensorinv},
        {"aten::linalg_tensorsolve.default", &Decomposer::linalgTensorsolve},
        {"aten::sum_to_size.default", &Decomposer::sumToSize},
        {"aten::linalg_norm.default", &Decomposer::linalgNorm},
        {"aten::linalg_matrix_norm.str_ord", &Decomposer::linalgMatrixNormStr},
        {"aten::adaptive_avg_pool2d.default", &Decomposer::adaptiveAvgPool2d},
        {"aten::adaptive_avg_pool1d.default", &Decomposer::adaptiveAvgPool1d},
        {"aten::nll_loss_nd.default", &Decomposer::nllLossNd},
        {"aten::l1_loss.default", &Decomposer::l1Loss},
        {"aten::grid_sampler.default", &Decomposer::gridSampler},
        {"aten::kl_div.default", &Decomposer::klDiv},
        {"aten::selu.default", &Decomposer::selu},
        {"aten::tile.default", &Decomposer::tile},
        {"aten::diag.default", &Decomposer::diag},
        {"aten::take_along_dim.default", &Decomposer::takeAlongDim},
        {"aten::nanmean.default", &Decomposer::nanmean},
        {"aten::cross.default", &Decomposer::cross},
        {"aten::chalf.default", &Decomposer::chalf},
        {"aten::cartesian_prod.default", &Decomposer::cartesianProd},
        {"aten::max_pool1d_with_indices.default", &Decomposer::maxPool1dWithIndices},
        {"aten::pairwise_distance.default", &Decomposer::pairwiseDistanceOp},
        {"aten::triplet_margin_loss.default", &Decomposer::tripletMarginLoss},
        {"aten::trapezoid.x", &Decomposer::trapezoid},
        {"aten::trapz.x", &Decomposer::trapezoid},
        {"aten::cumulative_trapezoid.x", &Decomposer::trapezoid},
        {"aten::fft_fft.default", &Decomposer::fft},
        {"aten::fft_fft2.default", &Decomposer::fft},
        {"aten::fft_fftn.default", &Decomposer::fft},
        {"aten::fft_ifft.default", &Decomposer::fft},
        {"aten::fft_ifft2.default", &Decomposer::fft},
        {"aten::fft_ifftn.default", &Decomposer::fft},
        {"aten::fft_rfft.default", &Decomposer::fft},
        {"aten::fft_rfft2.default", &Decomposer::fft},
        {"aten::fft_rfftn.default", &Decomposer::fft},
        {"aten::fft_irfft.default", &Decomposer::fft},
        {"aten::fft_irfft2.default", &Decomposer::fft},
        {"aten::fft_irfftn.default", &Decomposer::fft},
        {"aten::fft_hfft.default", &Decomposer::fft},
        {"aten::fft_hfft2.default", &Decomposer::fft},
        {"aten::fft_hfftn.default", &Decomposer::fft},
        {"aten::fft_ihfft.default", &Decomposer::fft},
        {"aten::fft_ihfft2.default", &Decomposer::fft},
        {"aten::fft_ihfftn.default", &Decomposer::fft},
        {"aten::fft_fftshift.default", &Decomposer::fftShift},
        {"aten::fft_ifftshift.default", &Decomposer::fftShift},
        {"aten::diagflat.default", &Decomposer::diagflat},
        {"aten::linalg_diagonal.default", &Decomposer::linalgDiagonal},
        {"aten::float_power.Tensor_Tensor", &Decomposer::floatPower},
        {"aten::float_power.Tensor_Scalar", &Decomposer::floatPower},
        {"aten::float_power.Scalar", &Decomposer::floatPower},
        {"aten::kron.default", &Decomposer::kron},
        {"aten::repeat_interleave.self_int", &Decomposer::repeatInterleaveInt},
        {"aten::tensordot.default", &Decomposer::tensordot},
        {"aten::inner.default", &Decomposer::inner},
        {"aten::conv1d.default", &Decomposer::convNd},
        {"aten::conv_transpose1d.default", &Decomposer::convTransposeNd},
        {"aten::conv_transpose2d.input", &Decomposer::convTransposeNd},
        {"aten::conv_transpose3d.input", &Decomposer::convTransposeNd},
        {"aten::conv2d.default", &Decomposer::convNd},
        {"aten::conv3d.default", &Decomposer::convNd},
        {"aten::conv1d.padding", &Decomposer::convNd},
        {"aten::conv2d.padding", &Decomposer::convNd},
        {"aten::conv3d.padding", &Decomposer::convNd},
    };
    return m;
  }

  /// The node's one result as `op` run on `self` with `args` after it.
  llvm::Error runOnSelf(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args = {}) {
    b_.bind(result(0), unary(op, in("self"), *result(0)->meta(), result(0)->name(), std::move(args)));
    return llvm::Error::success();
  }
  /// A form of a composite op this table does not model stays the op export kept, as before
  /// the table had it: propagation passes it through on plain tensors and refuses it by name on a
  /// DTensor. Returned before anything is emitted.
  llvm::Error keepExported() {
    keepExported_ = true;
    return llvm::Error::success();
  }
  /// The conjugating ops (mH, adjoint, resolve_conj, ...) are the identity on a real tensor; their
  /// complex forms (conjugate and real views) are not modelled.
  bool complexSelf() const { return isComplex(in("self")->meta()->dtype); }

  /// mT / mH / matrix_H / adjoint: transpose(-2, -1) (and conj(), the identity on a real tensor).
  llvm::Error lastTwoDimsTransposed() {
    if (complexSelf())
      return keepExported();
    return runOnSelf("aten::transpose.int", {{"dim0", int64_t{-2}, false}, {"dim1", int64_t{-1}, false}});
  }
  /// Tensor.T (numpy_T): permute with the dims reversed.
  llvm::Error dimsReversed() {
    IntList dims;
    for (int64_t d = in("self")->meta()->rank() - 1; d >= 0; --d)
      dims.push_back(d);
    return runOnSelf("aten::permute.default", {{"dims", dims, false}});
  }
  /// expand_as(other): expand(other.sizes()); broadcast_to(size): expand(size).
  llvm::Error expandedToResult() {
    const Argument *size = n_->input("size");
    return runOnSelf("aten::expand.default",
                     {{"size", size ? b_.map(*size) : Argument(IntList(hints(result(0)->meta()->sizes))), false}});
  }
  /// broadcast_tensors: each tensor whose sizes differ from the broadcast shape expanded to it.
  llvm::Error broadcastTensors() {
    const Argument *tensors = n_->input("tensors");
    if (!tensors || !tensors->is<TensorList>() || tensors->get<TensorList>().size() != n_->results().size())
      return keepExported();
    const TensorList &xs = tensors->get<TensorList>();
    for (size_t i = 0; i < xs.size(); ++i) {
      Value *x = b_.map(xs[i]);
      const Value *r = n_->results()[i];
      auto sizes = hints(r->meta()->sizes);
      b_.bind(r, hints(x->meta()->sizes) == sizes
                     ? x
                     : unary("aten::expand.default", x, *r->meta(), r->name(), {{"size", IntList(sizes), false}}));
    }
    return llvm::Error::success();
  }
  /// view_as(other): view(other.sizes()); unflatten: view(the unflattened sizes).
  llvm::Error viewedAsResult() { return runOnSelf("aten::view.default", {{"size", IntList(hints(result(0)->meta()->sizes)), false}}); }
  /// reshape_as(other): reshape(other.sizes()), itself a view or clone + _unsafe_view.
  llvm::Error reshapedAsResult() {
    b_.bind(result(0), reshape(in("self"), hints(result(0)->meta()->sizes), result(0)->name()));
    return llvm::Error::success();
  }
  /// ravel: contiguous().view(-1).
  llvm::Error ravel() {
    b_.bind(result(0), unary("aten::view.default", contiguous(in("self"), tmp("contiguous")), *result(0)->meta(),
                             result(0)->name(), {{"size", IntList{-1}, false}}));
    return llvm::Error::success();
  }
  /// fliplr: flip([1]); flipud: flip([0]).
  llvm::Error flippedSide() {
    return runOnSelf("aten::flip.default", {{"dims", IntList{n_->opString() == "aten::fliplr.default" ? 1 : 0}, false}});
  }
  /// narrow(dim, start, length): slice(dim, start, start + length).
  llvm::Error narrow() {
    auto dim = intInput("dim"), start = intInput("start"), length = intInput("length");
    if (!dim || !start || !length)
      return keepExported();
    int64_t rank = in("self")->meta()->rank(), d = *dim < 0 ? *dim + rank : *dim;
    if (d < 0 || d >= rank)
      return keepExported();
    int64_t size = hints(in("self")->meta()->sizes)[d];
    int64_t from = *start < 0 ? *start + size : *start;
    return runOnSelf("aten::slice.Tensor",
                     {{"dim", *dim, false}, {"start", from, false}, {"end", from + *length, false}});
  }
  /// std / var / var_mean / std_mean over every dim or with `unbiased` (ReduceOps.cpp): their
  /// .correction overload.
  llvm::Error correctionOverload() {
    llvm::StringRef op = n_->opString();
    return stdVarDim((op.split('.').first + ".correction").str());
  }
  /// msort: sort(dim 0)'s values; argsort(dim, descending): sort(dim, descending)'s indices.
  llvm::Error sortResult() {
    bool indices = n_->opString() == "aten::argsort.default";
    Value *x = in("self");
    llvm::SmallVector<NamedArgument, 4> args{{"self", x, false}};
    args.push_back({"dim", indices && n_->input("dim") ? b_.map(*n_->input("dim")) : Argument(int64_t{indices ? -1 : 0}),
                    false});
    if (const Argument *descending = n_->input("descending"); indices && descending)
      args.push_back({"descending", b_.map(*descending), false});
    TensorMeta values = withShape(*x->meta(), hints(x->meta()->sizes)), order = values;
    order.dtype = ScalarType::Long;
    Value *v = b_.tensor(indices ? tmp("values") : result(0)->name(), indices ? values : *result(0)->meta());
    Value *i = b_.tensor(indices ? result(0)->name() : tmp("indices"), indices ? *result(0)->meta() : order);
    b_.emit("aten::sort.default", std::move(args), {Argument(v), Argument(i)}, *n_);
    b_.bind(result(0), indices ? i : v);
    return llvm::Error::success();
  }
  /// real / resolve_conj / resolve_neg / conj_physical of a real tensor: the tensor itself, no op.
  llvm::Error selfWhenReal() {
    if (complexSelf())
      return keepExported();
    b_.bind(result(0), in("self"));
    return llvm::Error::success();
  }
  /// isreal of a real tensor: ones_like(self, dtype=bool).
  /// tile (TensorShape.cpp): repeat, the dims padded with leading 1s to the tensor's rank.
  llvm::Error tile() {
    auto dims = intListInput("dims");
    if (!dims)
      return keepExported();
    IntList reps(static_cast<size_t>(std::max<int64_t>(0, in("self")->meta()->rank() - static_cast<int64_t>(dims->size()))),
                 1);
    reps.append(dims->begin(), dims->end());
    return runOnSelf("aten::repeat.default", {{"repeats", reps, false}});
  }
  /// repeat_interleave(self, int repeats, dim) (Repeat.cpp): self flattened when no dim is given;
  /// then unsqueeze(dim + 1), expand `repeats` times there, clone, viewed as the result.
  llvm::Error repeatInterleaveInt() {
    Value *x = in("self");
    auto repeats = intInput("repeats");
    const Argument *dimArg = n_->input("dim");
    std::optional<int64_t> dim = dimArg && !dimArg->isNone() ? dimArg->asInt() : std::optional<int64_t>(0);
    bool flatten = !dimArg || dimArg->isNone();
    if (!x || !repeats || !dim || (x->meta()->rank() == 0 && !flatten))
      return keepExported();
    if (flatten && x->meta()->rank() != 1) // flatten(): a scalar becomes one element
      x = reshape(x, {x->meta()->numel()}, tmp("flatten"));
    auto sizes = hints(x->meta()->sizes), strides = hints(x->meta()->strides);
    int64_t rank = static_cast<int64_t>(sizes.size()), d = *dim < 0 ? *dim + rank : *dim;
    if (d < 0 || d >= rank)
      return keepExported();
    llvm::SmallVector<int64_t, 4> usizes(sizes.begin(), sizes.end()), ustrides(strides.begin(), strides.end());
    usizes.insert(usizes.begin() + d + 1, 1);
    ustrides.insert(ustrides.begin() + d + 1, d + 1 < rank ? sizes[d + 1] * strides[d + 1] : 1);
    Value *u = emit1("aten::unsqueeze.default", {{"self", x, false}, {"dim", d + 1, false}},
                     withShape(*x->meta(), usizes, llvm::ArrayRef<int64_t>(ustrides)), tmp("unsqueeze"));
    usizes[d + 1] = *repeats;
    Value *e = expand(u, usizes, tmp("expand"));
    Value *c = unary("aten::clone.default", e, withShape(*e->meta(), usizes), tmp("clone"),
                     {{"memory_format", MemoryFormat::Contiguous, true}});
    return bindView(c);
  }
  /// A convolution's per-spatial-dim argument: `fallback` per dim when absent, a one-element list
  /// repeated (expand_param_if_needed), nullopt for any other length.
  std::optional<IntList> spatialList(llvm::StringRef name, size_t dims, int64_t fallback) const {
    const Argument *a = n_->input(name);
    if (!a)
      return IntList(dims, fallback);
    auto list = a->asIntList();
    if (list && list->size() == 1 && dims > 1)
      list = IntList(dims, list->front());
    return list && list->size() == dims ? list : std::nullopt;
  }
  /// conv1d / conv2d / conv3d (Convolution.cpp): convolution with transposed=False and zero
  /// output padding; padding="valid" is 0, padding="same" the symmetric padding of an odd
  /// dilated kernel (an even one pads with constant_pad_nd first: not modelled, kept).
  llvm::Error convNd() {
    Value *input = in("input"), *weight = in("weight");
    if (!input || !weight || weight->meta()->rank() < 3)
      return keepExported();
    size_t dims = static_cast<size_t>(weight->meta()->rank() - 2);
    auto listOr = [&](llvm::StringRef name, int64_t fallback) { return spatialList(name, dims, fallback); };
    auto stride = listOr("stride", 1), dilation = listOr("dilation", 1);
    auto groups = n_->input("groups") ? intInput("groups") : std::optional<int64_t>(1);
    std::optional<IntList> padding;
    if (const Argument *p = n_->input("padding"); p && p->is<std::string>()) {
      const std::string &mode = p->get<std::string>();
      auto kernel = hints(weight->meta()->sizes);
      if (mode == "valid") {
        padding = IntList(dims, 0);
      } else if (mode == "same" && stride && llvm::all_of(*stride, [](int64_t s) { return s == 1; }) && dilation) {
        padding = IntList();
        for (size_t i = 0; i < dims; ++i) {
          int64_t total = (*dilation)[i] * (kernel[2 + i] - 1);
          if (total % 2)
            return keepExported();
          padding->push_back(total / 2);
        }
      }
    } else {
      padding = listOr("padding", 0);
    }
    if (!stride || !dilation || !padding || !groups)
      return keepExported();
    const Argument *bias = n_->input("bias");
    return emitConvolution(input, weight, bias ? b_.map(*bias) : Argument(NoneArg{}), *stride, *padding, *dilation,
                           *groups, false, IntList(dims, 0));
  }
  /// conv_transpose1d/2d/3d (Convolution.cpp): at::convolution with transposed set; stride,
  /// padding, output_padding and dilation default to 1, 0, 0, 1 per spatial dim.
  llvm::Error convTransposeNd() {
    Value *input = in("input"), *weight = in("weight");
    if (!input || !weight || weight->meta()->rank() < 3)
      return keepExported();
    size_t dims = static_cast<size_t>(weight->meta()->rank() - 2);
    auto listOr = [&](llvm::StringRef name, int64_t fallback) { return spatialList(name, dims, fallback); };
    auto stride = listOr("stride", 1), padding = listOr("padding", 0), outputPadding = listOr("output_padding", 0),
         dilation = listOr("dilation", 1);
    auto groups = n_->input("groups") ? intInput("groups") : std::optional<int64_t>(1);
    if (!stride || !padding || !outputPadding || !dilation || !groups)
      return keepExported();
    const Argument *bias = n_->input("bias");
    return emitConvolution(input, weight, bias ? b_.map(*bias) : Argument(NoneArg{}), *stride, *padding, *dilation,
                           *groups, true, *outputPadding);
  }
  /// at::convolution of the node's operands; an unbatched input (one dim fewer than the weight)
  /// is batched first (batchify: unsqueeze(0)) and the result squeezed back (squeeze.dim 0).
  llvm::Error emitConvolution(Value *input, Value *weight, Argument bias, const IntList &stride, const IntList &padding,
                              const IntList &dilation, int64_t groups, bool transposed, const IntList &outputPadding) {
    bool unbatched = input->meta()->rank() == weight->meta()->rank() - 1;
    TensorMeta outMeta = *result(0)->meta();
    if (unbatched) {
      auto in = hints(input->meta()->sizes), out = hints(outMeta.sizes);
      in.insert(in.begin(), 1);
      out.insert(out.begin(), 1);
      input = unary("aten::unsqueeze.default", input, withShape(*input->meta(), in), tmp("batched"),
                    {{"dim", int64_t(0), false}});
      outMeta = withShape(outMeta, out);
    }
    Value *conv = emit1("aten::convolution.default",
                        {{"input", input, false}, {"weight", weight, false}, {"bias", std::move(bias), false},
                         {"stride", stride, false}, {"padding", padding, false}, {"dilation", dilation, false},
                         {"transposed", transposed, false}, {"output_padding", outputPadding, false},
                         {"groups", groups, false}},
                        outMeta, unbatched ? tmp("convolution") : result(0)->name());
    if (unbatched)
      conv = unary("aten::squeeze.dim", conv, *result(0)->meta(), result(0)->name(), {{"dim", int64_t(0), false}});
    b_.bind(result(0), conv);
    return llvm::Error::success();
  }
  /// The node's one result as view(x, its sizes).
  llvm::Error bindView(Value *x) {
    b_.bind(result(0), unary("aten::view.default", x, *result(0)->meta(), result(0)->name(),
                             {{"size", IntList(hints(result(0)->meta()->sizes)), false}}));
    return llvm::Error::success();
  }
  /// kron (LinearAlgebra.cpp KronImpl): both operands padded to the larger rank and viewed with
  /// their dims interleaved (self's at even positions, other's at odd ones, 1 elsewhere), multiplied,
  /// the product viewed as the result.
  llvm::Error kron() {
    Value *a = in("self"), *b = in("other");
    if (!a || !b)
      return keepExported();
    auto as = hints(a->meta()->sizes), bs = hints(b->meta()->sizes);
    size_t maxdim = std::max(as.size(), bs.size()), padA = maxdim - as.size(), padB = maxdim - bs.size();
    IntList aView, bView, prod;
    for (size_t i = 0; i < maxdim; ++i) {
      int64_t ai = i >= padA ? as[i - padA] : 1, bi = i >= padB ? bs[i - padB] : 1;
      aView.append({ai, 1});
      bView.append({1, bi});
      prod.append({ai, bi});
    }
    Value *av = unary("aten::_unsafe_view.default", a, withShape(*a->meta(), aView), tmp("self_view"),
                      {{"size", aView, false}});
    Value *bv = unary("aten::_unsafe_view.default", b, withShape(*b->meta(), bView), tmp("other_view"),
                      {{"size", bView, false}});
    Value *m = emit1("aten::mul.Tensor", {{"self", av, false}, {"other", bv, false}}, withShape(*result(0)->meta(), prod),
                     tmp("mul"));
    b_.bind(result(0), unary("aten::_unsafe_view.default", m, *result(0)->meta(), result(0)->name(),
                             {{"size", IntList(hints(result(0)->meta()->sizes)), false}}));
    return llvm::Error::success();
  }
  /// torch.fft.* of a real tensor (SpectralOps.cpp), as the ATen kernels they call: the input resized
  /// per transformed dim (slice where longer, one constant_pad_nd where shorter), then
  ///   fft/ifft (1-D): _fft_r2c(onesided=False), ifft's result conjugated (_conj);
  ///   fft2/fftn/ifft2/ifftn: the input made complex (_to_copy), then _fft_c2c;
  ///   rfft*: _fft_r2c(onesided=True);
  ///   ihfft: _fft_r2c(onesided=True) then _conj; ihfft2/n: r2c over the last dim, _conj_physical,
  ///     _fft_c2c(forward=False) over the others;
  ///   irfft*: made complex, _fft_c2r with the last dim's size (given, or 2 * (size - 1));
  ///   hfft*: made complex, _fft_c2c over all but the last dim (n-D), _conj and the clone that
  ///     resolves it, then _fft_c2r over the last dim.
  /// `norm` becomes the kernels' normalization (0 none, 1 by sqrt(n), 2 by n) for the direction.
  /// An input other than float32 / float64 (a complex one included) is not modelled (stays the
  /// exported op).
  llvm::Error fft() {
    Value *x = in("self");
    llvm::StringRef base = llvm::StringRef(n_->opString()).drop_front(std::strlen("aten::fft_")).split('.').first;
    bool nd = base.endswith("2") || base.endswith("n");
    llvm::StringRef kind = nd ? base.drop_back() : base;
    if (!x || (x->meta()->dtype != ScalarType::Float && x->meta()->dtype != ScalarType::Double))
      return keepExported();
    auto sizes = hints(x->meta()->sizes);
    int64_t rank = static_cast<int64_t>(sizes.size());
    auto wrap = [&](int64_t d) { return d < 0 ? d + rank : d; };
    IntList dims, shape;
    if (!nd) {
      dims = {wrap(intInput("dim").value_or(-1))};
      const Argument *n = n_->input("n");
      shape = {n && !n->isNone() ? n->asInt().value_or(-1) : -1};
    } else {
      std::optional<IntList> sArg = intListInput("s"), dimArg = intListInput("dim");
      if (!dimArg && base.endswith("2"))
        dimArg = IntList{-2, -1};
      if (dimArg) {
        for (int64_t d : *dimArg)
          dims.push_back(wrap(d));
        if (sArg && sArg->size() != dims.size())
          return keepExported();
      } else {
        for (int64_t d = sArg ? rank - static_cast<int64_t>(sArg->size()) : 0; d < rank; ++d)
          dims.push_back(d);
      }
      shape = sArg ? *sArg : IntList(dims.size(), -1);
    }
    if (dims.empty())
      return keepExported();
    for (int64_t d : dims)
      if (d < 0 || d >= rank)
        return keepExported();
    bool forward = kind == "fft" || kind == "rfft" || kind == "hfft";
    const Argument *normArg = n_->input("norm");
    std::string norm = normArg && normArg->is<std::string>() ? normArg->get<std::string>() : "backward";
    int64_t normalization;
    if (norm == "backward")
      normalization = forward ? 0 : 2;
    else if (norm == "forward")
      normalization = forward ? 2 : 0;
    else if (norm == "ortho")
      normalization = 1;
    else
      return keepExported();
    ScalarType real = x->meta()->dtype;
    ScalarType complex = real == ScalarType::Double ? ScalarType::ComplexDouble : ScalarType::ComplexFloat;
    auto withType = [&](const Value *v, ScalarType t, llvm::ArrayRef<int64_t> sz) {
      TensorMeta m = withShape(*v->meta(), sz);
      m.dtype = t;
      return m;
    };
    auto toComplex = [&](Value *v) {
      return unary("aten::_to_copy.default", v, withType(v, complex, hints(v->meta()->sizes)), tmp("complex"),
                   {{"dtype", complex, true}});
    };
    auto resize = [&](Value *v) {
      auto vs = hints(v->meta()->sizes);
      IntList pad(2 * vs.size(), 0);
      bool padded = false;
      for (size_t i = 0; i < dims.size(); ++i) {
        int64_t want = shape[i], d = dims[i];
        if (want == -1)
          continue;
        if (vs[d] < want) {
          padded = true;
          pad[pad.size() - 2 * d - 1] = want - vs[d];
        }
        if (vs[d] > want) {
          auto cut = hints(v->meta()->sizes);
          cut[d] = want;
          v = unary("aten::slice.Tensor", v, withShape(*v->meta(), cut), tmp("resized"),
                    {{"dim", d, false}, {"start", int64_t{0}, false}, {"end", want, false}});
        }
      }
      if (!padded)
        return v;
      auto grown = hints(v->meta()->sizes);
      for (size_t i = 0; i < dims.size(); ++i)
        if (shape[i] != -1)
          grown[dims[i]] = shape[i];
      return unary("aten::constant_pad_nd.default", v, withShape(*v->meta(), grown), tmp("padded"),
                   {{"pad", pad, false}});
    };
    auto r2c = [&](Value *v, IntList ds, bool onesided) {
      auto out = hints(v->meta()->sizes);
      if (onesided)
        out[ds.back()] = out[ds.back()] / 2 + 1;
      return unary("aten::_fft_r2c.default", v, withType(v, complex, out), tmp("r2c"),
                   {{"dim", ds, false}, {"normalization", normalization, false}, {"onesided", onesided, false}});
    };
    auto c2c = [&](Value *v, IntList ds, bool fwd) {
      return unary("aten::_fft_c2c.default", v, *v->meta(), tmp("c2c"),
                   {{"dim", ds, false}, {"normalization", normalization, false}, {"forward", fwd, false}});
    };
    auto same = [&](llvm::StringRef op, Value *v, llvm::StringRef what) { return unary(op, v, *v->meta(), tmp(what)); };
    IntList last{dims.back()}, rest(dims.begin(), dims.end() - 1);
    Value *out = nullptr;
    if (kind == "fft" || kind == "ifft") {
      if (nd) {
        out = c2c(resize(toComplex(x)), dims, forward);
      } else {
        out = r2c(resize(x), dims, false);
        if (!forward)
          out = same("aten::_conj.default", out, "conj");
      }
    } else if (kind == "rfft") {
      out = r2c(resize(x), dims, true);
    } else if (kind == "ihfft") {
      out = r2c(resize(x), last, true);
      if (rest.empty()) {
        out = same("aten::_conj.default", out, "conj");
      } else {
        out = same("aten::_conj_physical.default", out, "conj");
        out = c2c(out, rest, false);
      }
    } else { // irfft, hfft: complex to real
      int64_t lastSize = shape.back() != -1 ? shape.back() : 2 * (sizes[dims.back()] - 1);
      shape.back() = lastSize / 2 + 1;
      Value *v = resize(toComplex(x));
      if (kind == "hfft") {
        if (!rest.empty())
          v = c2c(v, rest, true);
        v = same("aten::clone.default", same("aten::_conj.default", v, "conj"), "resolved");
      }
      auto outSizes = hints(v->meta()->sizes);
      outSizes[dims.back()] = lastSize;
      out = unary("aten::_fft_c2r.default", v, withType(v, real, outSizes), tmp("c2r"),
                  {{"dim", kind == "hfft" ? last : dims, false}, {"normalization", normalization, false},
                   {"last_dim_size", lastSize, false}});
    }
    b_.bind(result(0), out);
    return llvm::Error::success();
  }
  /// fftshift / ifftshift (torch/fft): roll by size // 2 (ifftshift: (size + 1) // 2) over `dim`,
  /// every dim when none is given.
  llvm::Error fftShift() {
    auto sizes = hints(in("self")->meta()->sizes);
    int64_t rank = static_cast<int64_t>(sizes.size());
    bool inverse = n_->opString() == "aten::fft_ifftshift.default";
    IntList dims;
    if (auto d = intListInput("dim"))
      for (int64_t x : *d)
        dims.push_back(x < 0 ? x + rank : x);
    else if (auto d = intInput("dim"))
      dims.push_back(*d < 0 ? *d + rank : *d);
    else
      for (int64_t d = 0; d < rank; ++d)
        dims.push_back(d);
    IntList shifts;
    for (int64_t d : dims)
      shifts.push_back((sizes[d] + (inverse ? 1 : 0)) / 2);
    return runOnSelf("aten::roll.default", {{"shifts", shifts, false}, {"dims", dims, false}});
  }
  /// trapezoid / trapz / cumulative_trapezoid with sample points x of y's shape (Integration.cpp):
  /// dx = x[1:] - x[:-1] along dim, then (dx * (y[:-1] + y[1:])).sum(dim) (cumsum(dim)) / 2. Sample
  /// points of another shape (viewed to broadcast) and the .dx forms are not modelled.
  llvm::Error trapezoid() {
    Value *y = in("y"), *x = in("x");
    if (!y || !x || hints(x->meta()->sizes) != hints(y->meta()->sizes))
      return keepExported();
    auto sizes = hints(y->meta()->sizes);
    int64_t rank = static_cast<int64_t>(sizes.size()), dim = intInput("dim").value_or(-1);
    dim = dim < 0 ? dim + rank : dim;
    if (dim < 0 || dim >= rank || sizes[dim] == 0)
      return keepExported();
    auto shorter = sizes;
    shorter[dim] -= 1;
    auto slice = [&](Value *v, bool right) {
      TensorMeta m = withShape(*v->meta(), shorter);
      if (right)
        return unary("aten::slice.Tensor", v, m, tmp("right"), {{"dim", dim, false}, {"start", int64_t{1}, false}});
      return unary("aten::slice.Tensor", v, m, tmp("left"),
                   {{"dim", dim, false}, {"start", int64_t{0}, false}, {"end", int64_t{-1}, false}});
    };
    auto binaryOp = [&](llvm::StringRef op, Value *a, Value *b, llvm::StringRef what) {
      return emit1(op, {{"self", a, false}, {"other", b, false}}, withShape(*y->meta(), shorter), tmp(what));
    };
    Value *xl = slice(x, false), *xr = slice(x, true);
    Value *dx = binaryOp("aten::sub.Tensor", xr, xl, "dx");
    Value *yl = slice(y, false), *yr = slice(y, true);
    Value *area = binaryOp("aten::mul.Tensor", dx, binaryOp("aten::add.Tensor", yl, yr, "heights"), "areas");
    bool cumulative = n_->opString() == "aten::cumulative_trapezoid.x";
    auto summed = shorter;
    if (!cumulative)
      summed.erase(summed.begin() + dim);
    TensorMeta sm = withShape(*area->meta(), summed);
    Value *total = nullptr;
    if (cumulative)
      total = unary("aten::cumsum.default", area, sm, tmp("sum"), {{"dim", dim, false}});
    else
      total = unary("aten::sum.dim_IntList", area, sm, tmp("sum"), {{"dim", IntList{dim}, false}});
    b_.bind(result(0), unary("aten::div.Scalar", total, *result(0)->meta(), result(0)->name(), {{"other", 2.0, false}}));
    return llvm::Error::success();
  }
  /// cross (Cross.cpp): linalg_cross over `dim`, by default the first dim of size 3.
  llvm::Error cross() {
    Value *a = in("self"), *b = in("other");
    auto sizes = hints(a->meta()->sizes);
    int64_t rank = static_cast<int64_t>(sizes.size());
    std::optional<int64_t> dim = intInput("dim");
    if (!dim)
      for (int64_t d = 0; d < rank && !dim; ++d)
        if (sizes[d] == 3)
          dim = d;
    if (!b || !dim || hints(b->meta()->sizes) != sizes)
      return keepExported();
    b_.bind(result(0), emit1("aten::linalg_cross.default", {{"self", a, false}, {"other", b, false}, {"dim", *dim, true}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// chalf: _to_copy to complex32.
  llvm::Error chalf() { return runOnSelf("aten::_to_copy.default", {{"dtype", ScalarType::ComplexHalf, true}}); }
  /// cartesian_prod (Itertools.cpp): one tensor is itself; more are meshgrid ('ij'), each grid
  /// flattened (a copy: the expanded grid is not viewable), stacked as columns.
  llvm::Error cartesianProd() {
    const Argument *tensors = n_->input("tensors");
    if (!tensors || !tensors->is<TensorList>() || tensors->get<TensorList>().empty())
      return keepExported();
    const TensorList &xs = tensors->get<TensorList>();
    if (xs.size() == 1) {
      b_.bind(result(0), b_.map(xs[0]));
      return llvm::Error::success();
    }
    auto grids = meshgridOf(xs, false, {});
    if (!grids)
      return grids.takeError();
    TensorList columns;
    for (Value *g : *grids)
      columns.push_back(reshape(g, {numelOf(hints(g->meta()->sizes))}, tmp("column")));
    b_.bind(result(0), emit1("aten::stack.default", {{"tensors", columns, false}, {"dim", int64_t{1}, false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// max_pool1d_with_indices (MaxPooling.cpp): max_pool2d_with_indices of the input unsqueezed at -2
  /// with a window of height 1, both results squeezed at -2.
  llvm::Error maxPool1dWithIndices() {
    Value *x = in("self");
    auto kernel = intListInput("kernel_size");
    if (!x || !kernel || kernel->size() != 1 || n_->results().size() != 2)
      return keepExported();
    auto one = [&](llvm::StringRef name, int64_t dflt) -> std::optional<int64_t> {
      auto l = intListInput(name);
      if (!l || l->empty())
        return dflt;
      return l->size() == 1 ? std::optional<int64_t>((*l)[0]) : std::nullopt;
    };
    auto stride = one("stride", (*kernel)[0]), padding = one("padding", 0), dilation = one("dilation", 1);
    if (!stride || !padding || !dilation)
      return keepExported();
    const Argument *ceil = n_->input("ceil_mode");
    bool ceilMode = ceil && ceil->is<bool>() && ceil->get<bool>();
    auto sizes = hints(x->meta()->sizes);
    auto wide = sizes;
    wide.insert(wide.end() - 1, 1);
    Value *x2 = unary("aten::unsqueeze.default", x, withShape(*x->meta(), wide), tmp("unsqueeze"),
                      {{"dim", int64_t{-2}, false}});
    auto pooled = hints(result(0)->meta()->sizes);
    pooled.insert(pooled.end() - 1, 1);
    TensorMeta vm = withShape(*result(0)->meta(), pooled), im = withShape(*result(1)->meta(), pooled);
    Value *values = b_.tensor(tmp("values2d"), vm), *indices = b_.tensor(tmp("indices2d"), im);
    b_.emit("aten::max_pool2d_with_indices.default",
            {{"self", x2, false}, {"kernel_size", IntList{1, (*kernel)[0]}, false},
             {"stride", IntList{1, *stride}, false}, {"padding", IntList{0, *padding}, false},
             {"dilation", IntList{1, *dilation}, false}, {"ceil_mode", ceilMode, false}},
            {values, indices}, *n_);
    b_.bind(result(0), unary("aten::squeeze.dim", values, *result(0)->meta(), result(0)->name(), {{"dim", int64_t{-2}, false}}));
    b_.bind(result(1), unary("aten::squeeze.dim", indices, *result(1)->meta(), result(1)->name(), {{"dim", int64_t{-2}, false}}));
    return llvm::Error::success();
  }
  /// take_along_dim over a dim (TensorAdvancedIndexing.cpp): indices and self broadcast to each
  /// other's shape outside `dim` (expand, always called), the indices wrapped by the dim's size
  /// (remainder), then gather. Without a dim (the flattened form) it is not modelled.
  llvm::Error takeAlongDim() {
    Value *x = in("self"), *idx = in("indices");
    auto dimArg = intInput("dim");
    if (!x || !idx || !dimArg || x->meta()->rank() != idx->meta()->rank() || x->meta()->rank() == 0)
      return keepExported();
    auto xs = hints(x->meta()->sizes), is = hints(idx->meta()->sizes);
    int64_t rank = static_cast<int64_t>(xs.size()), dim = *dimArg < 0 ? *dimArg + rank : *dimArg;
    if (dim < 0 || dim >= rank)
      return keepExported();
    auto broadcast = [&](llvm::SmallVector<int64_t, 4> a, llvm::ArrayRef<int64_t> b) -> std::optional<IntList> {
      IntList out;
      for (int64_t i = 0; i < rank; ++i) {
        if (a[i] != b[i] && a[i] != 1 && b[i] != 1)
          return std::nullopt;
        out.push_back(a[i] == 1 ? b[i] : a[i]);
      }
      return out;
    };
    auto selfWithIdxDim = xs;
    selfWithIdxDim[dim] = is[dim];
    auto idxWithSelfDim = is;
    idxWithSelfDim[dim] = xs[dim];
    auto idxShape = broadcast(selfWithIdxDim, is), selfShape = broadcast(idxWithSelfDim, xs);
    if (!idxShape || !selfShape)
      return keepExported();
    Value *ib = expand(idx, *idxShape, tmp("indices"));
    Value *xb = expand(x, *selfShape, tmp("self"));
    Value *wrapped = unary("aten::remainder.Scalar", ib, withShape(*ib->meta(), *idxShape), tmp("wrapped"),
                           {{"other", xs[dim], false}});
    b_.bind(result(0), emit1("aten::gather.default", {{"self", xb, false}, {"dim", dim, false}, {"index", wrapped, false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// nanmean (ReduceOps.cpp): nansum(self, dim, keepdim) divided by the count of non-NaN entries,
  /// (self != self).logical_not_().sum(dim, keepdim). Floating self only; a dtype is not modelled.
  llvm::Error nanmean() {
    Value *x = in("self");
    const Argument *dtype = n_->input("dtype");
    if (!x || (dtype && !dtype->isNone()) ||
        (x->meta()->dtype != ScalarType::Float && x->meta()->dtype != ScalarType::Double))
      return keepExported();
    const Argument *dim = n_->input("dim");
    const Argument *keepdim = n_->input("keepdim");
    Argument dimArg = dim ? *dim : Argument(NoneArg{});
    Argument keepArg = keepdim ? *keepdim : Argument(false);
    const TensorMeta &out = *result(0)->meta();
    TensorMeta mask = withDtype(*x->meta(), ScalarType::Bool);
    Value *nan = emit1("aten::ne.Tensor", {{"self", x, false}, {"other", x, false}}, mask, tmp("isnan"));
    Value *kept = unary("aten::logical_not_.default", nan, mask, tmp("not_nan"));
    TensorMeta countMeta = out;
    countMeta.dtype = ScalarType::Long;
    Value *count = emit1("aten::sum.dim_IntList", {{"self", kept, false}, {"dim", dimArg, false}, {"keepdim", keepArg, false}},
                         countMeta, tmp("count"));
    Value *total = emit1("aten::nansum.default", {{"self", x, false}, {"dim", dimArg, false}, {"keepdim", keepArg, false}},
                         out, tmp("nansum"));
    b_.bind(result(0), emit1("aten::div.Tensor", {{"self", total, false}, {"other", count, false}}, out, result(0)->name()));
    return llvm::Error::success();
  }
  /// diag (TensorShape.cpp): diag_embed of a vector, diagonal_copy of a matrix, at offset `diagonal`.
  llvm::Error diag() {
    int64_t rank = in("self")->meta()->rank();
    if (rank != 1 && rank != 2)
      return keepExported();
    return runOnSelf(rank == 1 ? "aten::diag_embed.default" : "aten::diagonal_copy.default",
                     {{"offset", intInput("diagonal").value_or(0), false}});
  }
  /// diagflat (TensorShape.cpp): self.contiguous().view(-1).diag(offset), the vector's diag_embed.
  llvm::Error diagflat() {
    Value *x = in("self");
    int64_t numel = 1;
    for (int64_t s : hints(x->meta()->sizes))
      numel *= s;
    Value *flat = unary("aten::view.default", contiguous(x, tmp("contiguous")), withShape(*x->meta(), {numel}),
                        tmp("flat"), {{"size", IntList{-1}, false}});
    b_.bind(result(0), unary("aten::diag_embed.default", flat, *result(0)->meta(), result(0)->name(),
                             {{"offset", intInput("offset").value_or(0), false}}));
    return llvm::Error::success();
  }
  /// linalg.diagonal (LinearAlgebra.cpp): A.diagonal(offset, dim1, dim2), its dims defaulting to the
  /// last two.
  llvm::Error linalgDiagonal() {
    Value *a = in("A");
    if (!a)
      return keepExported();
    b_.bind(result(0), unary("aten::diagonal.default", a, *result(0)->meta(), result(0)->name(),
                             {{"offset", intInput("offset").value_or(0), false},
                              {"dim1", intInput("dim1").value_or(-2), false},
                              {"dim2", intInput("dim2").value_or(-1), false}}));
    return llvm::Error::success();
  }
  /// float_power (Pow.cpp): pow with the tensor operands cast to double (`.to`: a _to_copy where the
  /// dtype differs) and a Scalar operand as a double. Complex operands are not modelled.
  llvm::Error floatPower() {
    const TensorMeta &out = *result(0)->meta();
    if (out.dtype != ScalarType::Double)
      return keepExported();
    auto asDouble = [&](llvm::StringRef name) -> std::optional<Argument> {
      const Argument *a = n_->input(name);
      if (!a)
        return std::nullopt;
      if (Value *x = in(name)) {
        if (x->meta()->dtype == ScalarType::Double)
          return Argument(x);
        TensorMeta m = *x->meta();
        m.dtype = ScalarType::Double;
        return Argument(unary("aten::_to_copy.default", x, m, tmp(name), {{"dtype", ScalarType::Double, true}}));
      }
      if (a->is<double>())
        return *a;
      if (auto i = a->asInt())
        return Argument(static_cast<double>(*i));
      return std::nullopt;
    };
    auto self = asDouble("self");
    auto exponent = asDouble("exponent");
    if (!self || !exponent)
      return keepExported();
    llvm::StringRef op = !in("self") ? "aten::pow.Scalar" : in("exponent") ? "aten::pow.Tensor_Tensor" : "aten::pow.Tensor_Scalar";
    b_.bind(result(0), emit1(op, {{"self", *self, false}, {"exponent", *exponent, false}}, out, result(0)->name()));
    return llvm::Error::success();
  }
  /// selu (Activation.cpp): elu with SELU's alpha and scale.
  llvm::Error selu() {
    return runOnSelf("aten::elu.default",
                     {{"alpha", 1.6732632423543772848170429916717, false}, {"scale", 1.0507009873554804934193349852946, false}});
  }
  llvm::Error isreal() {
    if (complexSelf())
      return keepExported();
    return runOnSelf("aten::ones_like.default",
                     {{"dtype", ScalarType::Bool, true}, {"memory_format", MemoryFormat::Preserve, true}});
  }
  /// atleast_{1,2,3}d: a 0-d tensor reshaped to [1]*n; a 1-d one unsqueezed at 0 (and, for 3-d,
  /// at -1 too); a 2-d one for atleast_3d at -1; higher ranks the tensor itself.
  llvm::Error atLeastNd() {
    b_.bind(result(0), atLeast(in("self"), n_->opString()[std::strlen("aten::atleast_")] - '0', result(0)->name()));
    return llvm::Error::success();
  }
  /// x as atleast_{want}d makes it: itself at `want` dims or more; a 0-d x reshaped to ones; a 1-D
  /// one unsqueezed at 0, then, for 3 dims, at -1; a 2-D one (3 dims) unsqueezed at -1.
  Value *atLeast(Value *x, int64_t want, llvm::StringRef name) {
    int64_t rank = x->meta()->rank();
    if (rank >= want)
      return x;
    if (rank == 0)
      return reshape(x, IntList(want, 1), name);
    auto sizes = hints(x->meta()->sizes);
    if (rank == 1) {
      sizes.insert(sizes.begin(), 1);
      x = unary("aten::unsqueeze.default", x, withShape(*x->meta(), sizes), want == 2 ? name : tmp("unsqueeze"),
                {{"dim", int64_t{0}, false}});
      if (want == 2)
        return x;
    }
    sizes.push_back(1);
    return unary("aten::unsqueeze.default", x, withShape(*x->meta(), sizes), name, {{"dim", int64_t{-1}, false}});
  }
  /// outer(self, vec2): self.reshape({n, 1}) * vec2.
  llvm::Error outer() {
    Value *x = in("self");
    Value *column = reshape(x, {hints(x->meta()->sizes)[0], 1}, tmp("view"));
    b_.bind(result(0), emit1("aten::mul.Tensor", {{"self", column, false}, {"other", in("vec2"), false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// special_ndtr: (1 + erf(x * M_SQRT1_2)) * 0.5.
  llvm::Error ndtr() {
    Value *x = in("self");
    TensorMeta m = *result(0)->meta();
    Value *scaled = unary("aten::mul.Scalar", x, m, tmp("scaled"), {{"other", 0.7071067811865476, false}});
    Value *erf = unary("aten::erf.default", scaled, m, tmp("erf"));
    Value *shifted = unary("aten::add.Scalar", erf, m, tmp("shifted"), {{"other", int64_t{1}, false}});
    b_.bind(result(0), unary("aten::mul.Scalar", shifted, m, result(0)->name(), {{"other", 0.5, false}}));
    return llvm::Error::success();
  }

  /// A view of `x` on [start, end) of `dim` (slice.Tensor's strides, sizes and storage offset).
  Value *slice(Value *x, int64_t dim, int64_t start, int64_t end, llvm::StringRef name, const TensorMeta *meta = nullptr) {
    auto sizes = hints(x->meta()->sizes);
    auto strides = hints(x->meta()->strides);
    sizes[dim] = end - start;
    TensorMeta m = meta ? *meta : withShape(*x->meta(), sizes, llvm::ArrayRef<int64_t>(strides));
    if (!meta)
      m.storageOffset = SymInt::concrete(x->meta()->storageOffset.hint + start * strides[dim]);
    return unary("aten::slice.Tensor", x, m, name, {{"dim", dim, false}, {"start", start, false}, {"end", end, false}});
  }
  /// hsplit / vsplit / dsplit (TensorShape.cpp): tensor_split on dim 1 (0 for a 1-D tensor), 0
  /// or 2, into equal sections or at the indices: one slice per piece.
  llvm::Error splitBySections() {
    Value *x = in("self");
    llvm::StringRef op = n_->opString();
    int64_t rank = x->meta()->rank();
    int64_t dim = op.startswith("aten::vsplit.") ? 0 : op.startswith("aten::dsplit.") ? 2 : (rank == 1 ? 0 : 1);
    if (dim >= rank)
      return keepExported();
    int64_t size = hints(x->meta()->sizes)[dim];
    IntList bounds{0};
    if (const Argument *sections = n_->input("sections")) {
      auto k = sections->asInt();
      if (!k || *k <= 0 || size % *k != 0)
        return keepExported();
      for (int64_t i = 1; i <= *k; ++i)
        bounds.push_back(size / *k * i);
    } else {
      auto indices = intListInput("indices");
      if (!indices)
        return keepExported();
      for (int64_t i : *indices)
        bounds.push_back(std::clamp<int64_t>(i < 0 ? i + size : i, bounds.back(), size));
      bounds.push_back(size);
    }
    if (bounds.size() - 1 != n_->results().size())
      return keepExported();
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      const Value *r = n_->results()[i];
      b_.bind(r, slice(x, dim, bounds[i], bounds[i + 1], r->name(), &*r->meta()));
    }
    return llvm::Error::success();
  }
  /// diff (ReduceOps.cpp): prepend and append concatenated to self along dim first (cat), then n
  /// times result[1:] - result[:-1] along dim, the second slice taken first.
  llvm::Error diff() {
    Value *x = in("self");
    if (!isFloating(x->meta()->dtype) || (n_->input("n") && !intInput("n")) || (n_->input("dim") && !intInput("dim")))
      return keepExported();
    int64_t n = intInput("n").value_or(1), rank = x->meta()->rank(), dim = intInput("dim").value_or(-1);
    dim = dim < 0 ? dim + rank : dim;
    if (n == 0 && !in("prepend") && !in("append")) { // a copy: zeros_like(self).copy_(self)
      Value *z = unary("aten::zeros_like.default", x, *result(0)->meta(), tmp("zeros"));
      b_.bind(result(0), emit1("aten::copy_.default", {{"self", z, false}, {"src", x, false}}, *result(0)->meta(),
                               result(0)->name()));
      return llvm::Error::success();
    }
    if (n < 1 || dim < 0 || dim >= rank)
      return keepExported();
    auto sizes = hints(x->meta()->sizes);
    TensorList parts;
    for (llvm::StringRef name : {"prepend", "self", "append"}) {
      Value *part = name == "self" ? x : in(name);
      if (!part)
        continue; // no prepend / append (both are Tensor?)
      if (part->meta()->dtype != x->meta()->dtype || part->meta()->rank() != rank)
        return keepExported(); // another dtype (cat promotes) or rank: not modelled
      auto partSizes = hints(part->meta()->sizes);
      for (int64_t d = 0; d < rank; ++d)
        if (d != dim && partSizes[d] != sizes[d])
          return keepExported();
      parts.push_back(part);
    }
    if (parts.size() > 1) {
      auto joined = sizes;
      joined[dim] = 0;
      for (Value *p : parts)
        joined[dim] += hints(p->meta()->sizes)[dim];
      x = emit1("aten::cat.default", {{"tensors", parts, false}, {"dim", dim, false}}, withShape(*x->meta(), joined),
                tmp("joined"));
    }
    int64_t len = hints(x->meta()->sizes)[dim];
    if (n >= len) // torch caps n at the length: every difference is taken, leaving an empty dim
      return keepExported();
    for (int64_t i = 0; i < n; ++i, --len) {
      Value *before = slice(x, dim, 0, len - 1, tmp("before"));
      Value *after = slice(x, dim, 1, len, tmp("after"));
      auto shorter = hints(x->meta()->sizes);
      shorter[dim] = len - 1;
      bool last = i + 1 == n;
      x = emit1("aten::sub.Tensor", {{"self", after, false}, {"other", before, false}},
                last ? *result(0)->meta() : withShape(*x->meta(), shorter), last ? result(0)->name() : tmp("diff"));
    }
    b_.bind(result(0), x);
    return llvm::Error::success();
  }
  /// gradient with scalar spacing (ReduceOps.cpp's gradient_helper_float), one result per dim (the
  /// dims given, else every dim), each: center = (x[2:] - x[:-2]) / h, the edges one-sided
  /// (edge_order 1: the first and last differences / h; 2: -1.5 x0 + 2 x1 - 0.5 x2 and 0.5 x[-3]
  /// - 2 x[-2] + 1.5 x[-1], / h), then cat([prepend, center / 2, append]) on the dim. Ops in the
  /// order the CPU kernel runs them (`a - b` evaluates b first). Tensor spacings (coordinates),
  /// and what torch raises on (a dim shorter than edge_order + 1, spacings not one per dim), stay
  /// the exported op.
  llvm::Error gradient() {
    Value *x = in("self");
    if (!isFloating(x->meta()->dtype))
      return keepExported();
    auto sizes = hints(x->meta()->sizes);
    int64_t rank = static_cast<int64_t>(sizes.size());
    IntList dims;
    const Argument *dimArg = n_->input("dim");
    if (!dimArg || dimArg->isNone()) {
      for (int64_t d = 0; d < rank; ++d)
        dims.push_back(d);
    } else if (auto d = dimArg->asInt()) {
      dims.push_back(*d);
    } else if (dimArg->is<IntList>()) {
      dims = dimArg->get<IntList>();
    } else {
      return keepExported();
    }
    for (int64_t &d : dims) {
      d = d < 0 ? d + rank : d;
      if (d < 0 || d >= rank)
        return keepExported();
    }
    llvm::SmallVector<Argument, 4> spacing;
    const Argument *h = n_->input("spacing");
    if (!h || h->isNone())
      spacing.assign(dims.size(), Argument(1.0));
    else if (h->is<double>() || h->is<int64_t>())
      spacing.assign(dims.size(), *h);
    else if (h->is<FloatList>())
      for (double v : h->get<FloatList>())
        spacing.push_back(v);
    else if (h->is<IntList>())
      for (int64_t v : h->get<IntList>())
        spacing.push_back(v);
    int64_t edgeOrder = intInput("edge_order").value_or(1);
    if (spacing.size() != dims.size() || (edgeOrder != 1 && edgeOrder != 2) || n_->results().size() != dims.size())
      return keepExported();
    for (int64_t d : dims)
      if (sizes[d] < edgeOrder + 1)
        return keepExported();
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t d = dims[i], n = sizes[d];
      auto part = [&](int64_t start, int64_t end) { return slice(x, d, start, end, tmp("slice")); };
      auto op = [&](llvm::StringRef name, Value *a, Argument b) { return binaryOp(name, a, std::move(b), "gradient"); };
      Value *before = part(0, n - 2);
      Value *center = op("aten::div.Scalar", op("aten::sub.Tensor", part(2, n), before), spacing[i]);
      Value *prepend, *append;
      if (edgeOrder == 1) {
        Value *first = part(0, 1);
        prepend = op("aten::div.Scalar", op("aten::sub.Tensor", part(1, 2), first), spacing[i]);
        Value *secondLast = part(n - 2, n - 1);
        append = op("aten::div.Scalar", op("aten::sub.Tensor", part(n - 1, n), secondLast), spacing[i]);
      } else {
        Value *x2 = op("aten::mul.Scalar", part(2, 3), 0.5);
        Value *x1 = op("aten::mul.Scalar", part(1, 2), int64_t{2});
        Value *x0 = op("aten::mul.Scalar", part(0, 1), -1.5);
        prepend = op("aten::div.Scalar", op("aten::sub.Tensor", op("aten::add.Tensor", x0, x1), x2), spacing[i]);
        Value *last = op("aten::mul.Scalar", part(n - 1, n), 1.5);
        Value *secondLast = op("aten::mul.Scalar", part(n - 2, n - 1), int64_t{2});
        Value *thirdLast = op("aten::mul.Scalar", part(n - 3, n - 2), 0.5);
        append = op("aten::div.Scalar", op("aten::add.Tensor", op("aten::sub.Tensor", thirdLast, secondLast), last),
                    spacing[i]);
      }
      Value *halved = op("aten::div.Scalar", center, int64_t{2});
      const Value *r = n_->results()[i];
      b_.bind(r, emit1("aten::cat.default", {{"tensors", TensorList{prepend, halved, append}, false}, {"dim", d, false}},
                       *r->meta(), r->name()));
    }
    return llvm::Error::success();
  }
  /// linalg_vander (LinearAlgebra.cpp): x.unsqueeze(-1) expanded to N - 1 columns, cumprod over
  /// them, and new_ones of one column (from the cumprod) concatenated in front (a 0-d x gives a
  /// vector of N). N < 2 raises in torch and stays the exported op.
  llvm::Error linalgVander() {
    Value *x = in("x");
    const Argument *nArg = n_->input("N");
    std::optional<int64_t> given = intInput("N");
    if (!isFloating(x->meta()->dtype) || (nArg && !nArg->isNone() && !given))
      return keepExported();
    auto sizes = hints(x->meta()->sizes);
    if (!given && sizes.empty()) // N defaults to x.size(-1): a 0-d x raises
      return keepExported();
    int64_t n = given.value_or(sizes.empty() ? 0 : sizes.back());
    if (n < 2)
      return keepExported();
    auto column = sizes;
    column.push_back(1);
    Value *u = unary("aten::unsqueeze.default", x, withShape(*x->meta(), column), tmp("unsqueeze"),
                     {{"dim", int64_t{-1}, false}});
    auto powers = sizes;
    powers.push_back(n - 1);
    Value *cumprod = unary("aten::cumprod.default", expand(u, powers, tmp("expand")), withShape(*x->meta(), powers),
                           tmp("cumprod"), {{"dim", int64_t{-1}, false}});
    Value *ones = unary("aten::new_ones.default", cumprod, withShape(*x->meta(), column), tmp("ones"),
                        {{"size", IntList(column.begin(), column.end()), false}});
    b_.bind(result(0), emit1("aten::cat.default", {{"tensors", TensorList{ones, cumprod}, false}, {"dim", int64_t{-1}, false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// sum_to_size (at::sum_to): sum over the leading dims and the dims the size makes 1, keepdim,
  /// then a view without the leading dims; the tensor itself when nothing is summed.
  llvm::Error sumToSize() {
    Value *x = in("self");
    auto xs = hints(x->meta()->sizes);
    auto size = intListInput("size");
    if (!size || size->size() > xs.size())
      return keepExported();
    const IntList &to = *size;
    size_t leading = xs.size() - std::min(xs.size(), to.size());
    IntList dims;
    for (size_t i = 0; i < xs.size(); ++i)
      if (i < leading || (to[i - leading] == 1 && xs[i] != 1))
        dims.push_back(static_cast<int64_t>(i));
    if (dims.empty()) {
      b_.bind(result(0), x);
      return llvm::Error::success();
    }
    auto kept = xs;
    for (int64_t d : dims)
      kept[d] = 1;
    Value *sum = emit1("aten::sum.dim_IntList", {{"self", x, false}, {"dim", dims, false}, {"keepdim", true, false}},
                       leading ? withShape(*x->meta(), kept) : *result(0)->meta(),
                       leading ? tmp("sum") : result(0)->name());
    b_.bind(result(0), leading ? unary("aten::view.default", sum, *result(0)->meta(), result(0)->name(),
                                       {{"size", to, false}})
                               : sum);
    return llvm::Error::success();
  }
  /// linalg_norm (LinearAlgebra.cpp): linalg_vector_norm(ord or 2.0, dim, keepdim, dtype) unless
  /// ord is given for a matrix (two dims, or no dim and a 2-D input): matrix norms are not modelled.
  llvm::Error linalgNorm() {
    const Argument *ord = n_->input("ord"), *dim = n_->input("dim");
    bool hasOrd = ord && !ord->isNone(), hasDim = dim && !dim->isNone();
    size_t dims = hasDim ? dim->asIntList().value_or(IntList{0}).size() : 0;
    if (hasOrd && (dims == 2 || (!hasDim && in("self")->meta()->rank() == 2)))
      return keepExported();
    llvm::SmallVector<NamedArgument, 4> args{{"ord", hasOrd ? b_.map(*ord) : Argument(2.0), false}};
    if (hasDim)
      args.push_back({"dim", b_.map(*dim), false});
    for (llvm::StringRef name : {"keepdim", "dtype"})
      if (const Argument *a = n_->input(name); a && !a->isNone())
        args.push_back({name.str(), b_.map(*a), name == "dtype"});
    return runOnSelf("aten::linalg_vector_norm.default", std::move(args));
  }
  /// linalg_matrix_norm.str_ord (LinearAlgebra.cpp): 'fro' is linalg_vector_norm(A, 2, dim, keepdim,
  /// dtype) over the two dims, wrapped; 'nuc' the singular values of A with the two dims moved last
  /// (a permute, even the identity one), summed (keepdim or a dtype: kept, and refused).
  llvm::Error linalgMatrixNormStr() {
    const Argument *ord = n_->input("ord");
    bool nuc = ord && ord->is<std::string>() && ord->get<std::string>() == "nuc";
    if (ord && !nuc && !(ord->is<std::string>() && ord->get<std::string>() == "fro"))
      return keepExported();
    Value *a = in("self");
    int64_t rank = a->meta()->rank();
    IntList dims{-2, -1};
    if (auto d = intListInput("dim"))
      dims = *d;
    if (dims.size() != 2 || rank < 2)
      return keepExported();
    for (int64_t &d : dims)
      d = d < 0 ? d + rank : d;
    if (nuc) {
      const Argument *k = n_->input("keepdim"), *dt = n_->input("dtype");
      if ((k && k->is<bool>() && k->get<bool>()) || (dt && !dt->isNone()) || isComplex(a->meta()->dtype) ||
          dims[0] == dims[1])
        return keepExported();
      IntList order;
      for (int64_t d = 0; d < rank; ++d)
        if (d != dims[0] && d != dims[1])
          order.push_back(d);
      order.append({dims[0], dims[1]});
      Value *moved = permute(a, order, tmp("moved"));
      Value *s = svdvals(moved, "self", {})[1];
      b_.bind(result(0), unary("aten::sum.dim_IntList", s, *result(0)->meta(), result(0)->name(),
                               {{"dim", IntList{-1}, false}}));
      return llvm::Error::success();
    }
    llvm::SmallVector<NamedArgument, 4> args{{"ord", int64_t(2), false}, {"dim", dims, false}};
    if (const Argument *k = n_->input("keepdim"); k && k->is<bool>() && k->get<bool>())
      args.push_back({"keepdim", true, false});
    if (const Argument *dt = n_->input("dtype"); dt && !dt->isNone())
      args.push_back({"dtype", b_.map(*dt), true});
    return runOnSelf("aten::linalg_vector_norm.default", std::move(args));
  }
  /// adaptive_avg_pool2d (AdaptiveAveragePooling.cpp) of `x` to `out`: mean over the last two dims
  /// (keepdim) for a 1x1 output, else _adaptive_avg_pool2d.
  Value *adaptiveAvgPool2dOf(Value *x, const IntList &out, const TensorMeta &meta, llvm::StringRef name) {
    if (out == IntList{1, 1})
      return unary("aten::mean.dim", x, meta, name, {{"dim", IntList{-1, -2}, false}, {"keepdim", true, false}});
    return unary("aten::_adaptive_avg_pool2d.default", x, meta, name, {{"output_size", out, false}});
  }
  llvm::Error adaptiveAvgPool2d() {
    auto outputSize = intListInput("output_size");
    if (!outputSize)
      return keepExported();
    b_.bind(result(0), adaptiveAvgPool2dOf(in("self"), IntList(*outputSize), *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// adaptive_avg_pool1d (AdaptiveAveragePooling.cpp): unsqueeze(-2), adaptive_avg_pool2d to
  /// [1, size], squeeze(-2).
  llvm::Error adaptiveAvgPool1d() {
    Value *x = in("self");
    IntList out = intListInput("output_size").value_or(IntList{});
    if (out.size() != 1)
      return keepExported();
    int64_t width = out[0];
    auto sizes = hints(x->meta()->sizes);
    sizes.insert(sizes.end() - 1, 1);
    Value *wide = unary("aten::unsqueeze.default", x, withShape(*x->meta(), sizes), tmp("unsqueeze"),
                        {{"dim", int64_t{-2}, false}});
    sizes.back() = width;
    Value *pooled = adaptiveAvgPool2dOf(wide, IntList{1, width}, withShape(*x->meta(), sizes), tmp("pool"));
    b_.bind(result(0), unary("aten::squeeze.dim", pooled, *result(0)->meta(), result(0)->name(),
                             {{"dim", int64_t{-2}, false}}));
    return llvm::Error::success();
  }
  /// kl_div (Loss.cpp): with log_target=False xlogy(target, target) - target * input (target *
  /// input first), with log_target=True exp(target) * (target - input) (the difference first); then
  /// the reduction (0 none, 1 mean, 2 sum).
  llvm::Error klDiv() {
    auto reduction = lossReduction();
    if (!reduction)
      return keepExported();
    Value *x = in("self"), *target = in("target");
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes));
    if (const Argument *logTarget = n_->input("log_target"); logTarget && logTarget->is<bool>() && logTarget->get<bool>()) {
      Value *diff = emit1("aten::sub.Tensor", {{"self", target, false}, {"other", x, false}}, m, tmp("sub"));
      Value *weight = unary("aten::exp.default", target, m, tmp("exp"));
      bindLoss(*reduction, "aten::mul.Tensor", {{"self", weight, false}, {"other", diff, false}}, m);
      return llvm::Error::success();
    }
    Value *product = emit1("aten::mul.Tensor", {{"self", target, false}, {"other", x, false}}, m, tmp("mul"));
    Value *entropy = emit1("aten::xlogy.Tensor", {{"self", target, false}, {"other", target, false}}, m, tmp("xlogy"));
    bindLoss(*reduction, "aten::sub.Tensor", {{"self", entropy, false}, {"other", product, false}}, m);
    return llvm::Error::success();
  }

  /// pairwise_distance (Distance.cpp): norm(x1 - x2 + eps, p, innermost dim, keepdim), as
  /// norm.ScalarOpt_dim. `out` is the result's meta and name.
  Value *pairwiseDistance(Value *x1, Value *x2, const Argument &p, const Argument &eps, bool keepdim,
                          const TensorMeta &out, llvm::StringRef name) {
    auto s1 = hints(x1->meta()->sizes), s2 = hints(x2->meta()->sizes);
    auto wide = s1.size() >= s2.size() ? s1 : s2;
    int64_t innermost = std::max<int64_t>(static_cast<int64_t>(wide.size()) - 1, 0);
    TensorMeta m = withShape(*x1->meta(), wide);
    Value *diff = emit1("aten::sub.Tensor", {{"self", x1, false}, {"other", x2, false}}, m, (name + "_diff").str());
    Value *shifted = emit1("aten::add.Scalar", {{"self", diff, false}, {"other", eps, false}}, m, (name + "_eps").str());
    return unary("aten::norm.ScalarOpt_dim", shifted, out, name,
                 {{"p", p, false}, {"dim", IntList{innermost}, false}, {"keepdim", keepdim, false}});
  }
  llvm::Error pairwiseDistanceOp() {
    Value *x1 = in("x1"), *x2 = in("x2");
    if (!x1 || !x2 || x1->meta()->rank() == 0 || x2->meta()->rank() == 0)
      return keepExported();
    const Argument *p = n_->input("p"), *eps = n_->input("eps"), *keepdim = n_->input("keepdim");
    b_.bind(result(0), pairwiseDistance(x1, x2, p ? *p : Argument(2.0), eps ? *eps : Argument(1e-6),
                                        keepdim && keepdim->is<bool>() && keepdim->get<bool>(), *result(0)->meta(),
                                        result(0)->name()));
    return llvm::Error::success();
  }
  /// triplet_margin_loss without swap (Loss.cpp): clamp_min(margin + d(anchor, positive) -
  /// d(anchor, negative), 0), reduced; d is pairwise_distance.
  llvm::Error tripletMarginLoss() {
    Value *a = in("anchor"), *pos = in("positive"), *neg = in("negative");
    const Argument *swap = n_->input("swap");
    auto reduction = lossReduction();
    if (!a || !pos || !neg || (swap && swap->is<bool>() && swap->get<bool>()) || !reduction ||
        hints(a->meta()->sizes) != hints(pos->meta()->sizes) || hints(a->meta()->sizes) != hints(neg->meta()->sizes) ||
        a->meta()->rank() == 0)
      return keepExported();
    const Argument *p = n_->input("p"), *eps = n_->input("eps"), *margin = n_->input("margin");
    auto sizes = hints(a->meta()->sizes);
    sizes.pop_back();
    TensorMeta m = withShape(*a->meta(), sizes);
    Argument pArg = p ? *p : Argument(2.0), epsArg = eps ? *eps : Argument(1e-6);
    Value *dPos = pairwiseDistance(a, pos, pArg, epsArg, false, m, tmp("dist_pos"));
    Value *dNeg = pairwiseDistance(a, neg, pArg, epsArg, false, m, tmp("dist_neg"));
    Value *shifted = emit1("aten::add.Scalar", {{"self", dPos, false}, {"other", margin ? *margin : Argument(1.0), false}},
                           m, tmp("margin"));
    Value *gap = emit1("aten::sub.Tensor", {{"self", shifted, false}, {"other", dNeg, false}}, m, tmp("gap"));
    bindLoss(*reduction, "aten::clamp_min.default", {{"self", gap, false}, {"min", int64_t{0}, false}}, m);
    return llvm::Error::success();
  }

  /// A loss's `reduction` (at::Reduction: 0 none, 1 mean, the default, 2 sum).
  std::optional<int64_t> lossReduction() const {
    const Argument *a = n_->input("reduction");
    int64_t reduction = a ? a->asInt().value_or(1) : 1;
    if (reduction < 0 || reduction > 2)
      return std::nullopt;
    return reduction;
  }
  /// apply_loss_reduction (Loss.cpp) of the pointwise loss `op(args)` of meta `m`: the result
  /// itself for reduction 0, else reduced by mean.default / sum.default.
  void bindLoss(int64_t reduction, llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args, const TensorMeta &m) {
    if (reduction == 0) {
      b_.bind(result(0), emit1(op, std::move(args), *result(0)->meta(), result(0)->name()));
      return;
    }
    Value *pointwise = emit1(op, std::move(args), m, tmp("pointwise"));
    b_.bind(result(0), unary(reduction == 1 ? "aten::mean.default" : "aten::sum.default", pointwise,
                             *result(0)->meta(), result(0)->name()));
  }

  /// The node's argument `name` as an int / an int list; nullopt when absent or of another form.
  std::optional<int64_t> intInput(llvm::StringRef name) const {
    const Argument *a = n_->input(name);
    return a ? a->asInt() : std::nullopt;
  }
  std::optional<IntList> intListInput(llvm::StringRef name) const {
    const Argument *a = n_->input(name);
    return a ? a->asIntList() : std::nullopt;
  }

  Value *in(llvm::StringRef name) const {
    const Argument *a = n_->input(name);
    return a && a->isTensor() ? b_.map(a->tensor()) : nullptr;
  }
  const Value *result(unsigned i) const { return n_->results()[i]; }

  Value *emit1(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args, const TensorMeta &meta,
               llvm::StringRef name) {
    Value *out = b_.tensor(name, meta);
    b_.emit(op, std::move(args), {out}, *n_);
    return out;
  }
  Value *unary(llvm::StringRef op, Value *x, const TensorMeta &meta, llvm::StringRef name,
               llvm::SmallVector<NamedArgument, 4> extra = {}) {
    llvm::SmallVector<NamedArgument, 4> args{{"self", x, false}};
    args.append(extra.begin(), extra.end());
    return emit1(op, std::move(args), meta, name);
  }
  std::string tmp(llvm::StringRef what) const { return n_->name() + "_" + what.str(); }

  Value *t(Value *w) {
    auto s = hints(w->meta()->sizes);
    auto st = hints(w->meta()->strides);
    std::reverse(s.begin(), s.end());
    std::reverse(st.begin(), st.end());
    return unary("aten::t.default", w, withShape(*w->meta(), s, llvm::ArrayRef<int64_t>(st)), tmp("t"));
  }

  /// Tensor.contiguous(): `x` itself when it is, else a contiguous clone named `name`.
  Value *contiguous(Value *x, llvm::StringRef name) {
    if (isContiguous(*x->meta()))
      return x;
    return unary("aten::clone.default", x, withShape(*x->meta(), hints(x->meta()->sizes)), name,
                 {{"memory_format", MemoryFormat::Contiguous, true}});
  }

  /// expand(x, sizes) (`sizes` right-aligned with x's): stride 0 on the broadcast dims, x's own
  /// strides on the others.
  Value *expand(Value *x, llvm::ArrayRef<int64_t> sizes, llvm::StringRef name) {
    auto xs = hints(x->meta()->sizes), st = hints(x->meta()->strides);
    llvm::SmallVector<int64_t, 4> strides(sizes.size(), 0);
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t src = static_cast<int64_t>(i) - static_cast<int64_t>(sizes.size() - xs.size());
      if (src >= 0 && xs[src] == sizes[i])
        strides[i] = st[src];
    }
    return emit1("aten::expand.default", {{"self", x, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
                 withShape(*x->meta(), sizes, llvm::ArrayRef<int64_t>(strides)), name);
  }
  /// reshape: a view when the strides allow it, else clone + _unsafe_view.
  Value *reshape(Value *x, llvm::ArrayRef<int64_t> sizes, llvm::StringRef name) {
    if (auto st = viewStrides(*x->meta(), sizes))
      return emit1("aten::view.default", {{"self", x, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
                   withShape(*x->meta(), sizes, llvm::ArrayRef<int64_t>(*st)), name);
    Value *c = unary("aten::clone.default", x, withShape(*x->meta(), hints(x->meta()->sizes)), tmp("clone"),
                     {{"memory_format", MemoryFormat::Contiguous, true}});
    return emit1("aten::_unsafe_view.default", {{"self", c, false}, {"size", IntList(sizes.begin(), sizes.end()), false}},
                 withShape(*x->meta(), sizes), name);
  }

  Value *mm(Value *a, Value *b, llvm::StringRef name) {
    int64_t m = a->meta()->sizes[0].hint, k = b->meta()->sizes[1].hint;
    return emit1("aten::mm.default", {{"self", a, false}, {"mat2", b, false}}, withShape(*a->meta(), {m, k}), name);
  }

  /// at::matmul's dispatch (ATen LinearAlgebra.cpp _matmul_impl): vector . vector is dot, matrix .
  /// vector mv, vector . matrix unsqueeze(0), mm, squeeze_(0); a contiguous tensor of 3 or more dims
  /// times a vector folds its leading dims into rows for mv. A vector times a batch of matrices
  /// (expanded, bmm) is refused by name.
  llvm::Expected<Value *> matmul(Value *a, Value *b, const TensorMeta &outMeta, llvm::StringRef outName) {
    const TensorMeta &am = *a->meta(), &bm = *b->meta();
    auto outSizes = hints(outMeta.sizes);
    int64_t da = am.rank(), db = bm.rank();
    if (da == 1 && db == 1)
      return emit1("aten::dot.default", {{"self", a, false}, {"tensor", b, false}}, outMeta, outName);
    if (da == 2 && db == 1)
      return emit1("aten::mv.default", {{"self", a, false}, {"vec", b, false}}, outMeta, outName);
    if (da == 1 && db == 2) {
      int64_t k = am.sizes[0].hint;
      Value *row = unary("aten::unsqueeze.default", a, withShape(am, {1, k}), tmp("unsqueeze"), {{"dim", int64_t{0}, false}});
      Value *prod = mm(row, b, tmp("mm"));
      return unary("aten::squeeze_.dim", prod, outMeta, outName, {{"dim", int64_t{0}, false}});
    }
    // fold the batch dims of a into rows: reshape, mm (a matrix b) or mv (a vector b), _unsafe_view
    if (da >= 3 && (db == 2 || (db == 1 && isContiguous(am)))) {
      int64_t rows = 1;
      for (int64_t i = 0; i + 1 < da; ++i)
        rows *= am.sizes[i].hint;
      Value *flat = reshape(a, {rows, am.sizes.back().hint}, tmp("view"));
      Value *prod = db == 2 ? mm(flat, b, tmp("mm"))
                            : emit1("aten::mv.default", {{"self", flat, false}, {"vec", b, false}},
                                    withShape(am, {rows}), tmp("mv"));
      return emit1("aten::_unsafe_view.default", {{"self", prod, false}, {"size", IntList(outSizes), false}},
                   outMeta, outName);
    }
    if (da < 2 || db < 2)
      return makeError("node '{}' ({}): at::matmul of a {}-D and a {}-D tensor (its batched vector path) is not "
                       "modelled",
                       n_->name(), n_->opString(), da, db);
    if (da == 2 && db == 2)
      return mm(a, b, outName);
    // Batched: expand both to the broadcast batch shape, fold batches, bmm, _unsafe_view.
    auto as = hints(am.sizes), bs = hints(bm.sizes);
    llvm::SmallVector<int64_t, 4> batch(outSizes.begin(), outSizes.end() - 2);
    int64_t nb = std::accumulate(batch.begin(), batch.end(), int64_t{1}, std::multiplies<>());
    auto fold = [&](Value *x, llvm::ArrayRef<int64_t> sizes, llvm::StringRef tag) {
      llvm::SmallVector<int64_t, 4> expanded(batch);
      expanded.push_back(sizes[sizes.size() - 2]);
      expanded.push_back(sizes.back());
      Value *e = expand(x, expanded, tmp(("expand" + tag).str()));
      return reshape(e, {nb, sizes[sizes.size() - 2], sizes.back()}, tmp(("view" + tag).str()));
    };
    Value *fa = fold(a, as, "");
    Value *fb = fold(b, bs, "_1");
    int64_t m = as[as.size() - 2], p = bs.back();
    Value *prod = emit1("aten::bmm.default", {{"self", fa, false}, {"mat2", fb, false}}, withShape(am, {nb, m, p}),
                        tmp("bmm"));
    return emit1("aten::_unsafe_view.default", {{"self", prod, false}, {"size", IntList(outSizes), false}},
                 outMeta, outName);
  }

  llvm::Error linear() {
    Value *x = in("input"), *w = in("weight"), *bias = in("bias");
    const Value *out = result(0);
    int64_t dim = x->meta()->rank();
    if (dim == 2 && bias) {
      Value *wt = t(w);
      b_.bind(out, emit1("aten::addmm.default", {{"self", bias, false}, {"mat1", x, false}, {"mat2", wt, false}},
                         *out->meta(), out->name()));
      return llvm::Error::success();
    }
    if (bias && isContiguous(*x->meta()) && (dim == 3 || bias->meta()->rank() == 1)) {
      // _flatten_nd_linear: reshape to 2-D, addmm, view back.
      auto sizes = hints(x->meta()->sizes);
      int64_t rows = 1;
      for (int64_t i = 0; i + 1 < dim; ++i)
        rows *= sizes[i];
      Value *flat = reshape(x, {rows, sizes.back()}, tmp("view"));
      Value *wt = t(w);
      int64_t n = w->meta()->sizes[0].hint;
      Value *prod = emit1("aten::addmm.default", {{"self", bias, false}, {"mat1", flat, false}, {"mat2", wt, false}},
                          withShape(*x->meta(), {rows, n}), tmp("addmm"));
      b_.bind(out, emit1("aten::view.default", {{"self", prod, false}, {"size", IntList(hints(out->meta()->sizes)), false}},
                         *out->meta(), out->name()));
      return llvm::Error::success();
    }
    Value *wt = t(w);
    if (!bias) {
      auto prod = matmul(x, wt, *out->meta(), out->name());
      if (!prod)
        return prod.takeError();
      b_.bind(out, *prod);
      return llvm::Error::success();
    }
    // matmul then an out-of-place add (the bias is a tensor subclass under DTensor).
    auto prod = matmul(x, wt, *out->meta(), tmp("matmul"));
    if (!prod)
      return prod.takeError();
    b_.bind(out, emit1("aten::add.Tensor", {{"self", *prod, false}, {"other", bias, false}}, *out->meta(), out->name()));
    return llvm::Error::success();
  }

  /// chunk is CompositeImplicitAutograd: it runs split.Tensor with ceil(size / chunks) per piece
  /// (TensorShape.cpp), so DTensor and autograd see a split.
  /// chunk / unsafe_chunk: `splitOp` (split / unsafe_split) into pieces of ceil(size / chunks).
  llvm::Error chunk(llvm::StringRef splitOp) {
    Value *x = in("self");
    const Argument *chunks = n_->input("chunks"), *dimArg = n_->input("dim");
    if (!chunks || !chunks->is<int64_t>() || chunks->get<int64_t>() <= 0)
      return makeError("node '{}' ({}): expected a positive int 'chunks'", n_->name(), n_->opString());
    int64_t rank = x->meta()->rank();
    int64_t dim = dimArg && dimArg->is<int64_t>() ? dimArg->get<int64_t>() : 0;
    if (dim < -rank || dim >= std::max<int64_t>(rank, 1))
      return makeError("node '{}' ({}): dim {} is out of range for a tensor of rank {}", n_->name(), n_->opString(),
                       dim, rank);
    int64_t size = hints(x->meta()->sizes)[dim < 0 ? dim + rank : dim];
    int64_t n = chunks->get<int64_t>();
    TensorList pieces;
    for (const Value *r : n_->results())
      pieces.push_back(b_.tensor(r->name(), *r->meta()));
    b_.emit(splitOp, {{"self", x, false}, {"split_size", (size + n - 1) / n, false}, {"dim", dim, false}},
            {Argument(pieces)}, *n_);
    for (size_t i = 0; i < pieces.size(); ++i)
      b_.bind(n_->results()[i], pieces[i]);
    return llvm::Error::success();
  }

  llvm::Error layerNorm() {
    Value *x = in("input");
    const TensorMeta &xm = *x->meta();
    auto normalized = intListInput("normalized_shape").value_or(IntList{});
    auto statSizes = hints(xm.sizes);
    for (size_t i = 0; i < normalized.size() && i < statSizes.size(); ++i)
      statSizes[statSizes.size() - 1 - i] = 1;
    TensorMeta stat = withShape(xm, statSizes);
    stat.dtype = xm.dtype;
    const Value *out = result(0);
    Value *y = b_.tensor(out->name(), *out->meta());
    Value *mean = b_.tensor(tmp("mean"), stat), *rstd = b_.tensor(tmp("rstd"), stat);
    llvm::SmallVector<NamedArgument, 4> args{{"input", x, false}, {"normalized_shape", IntList(normalized), false}};
    args.push_back({"weight", optionalIn("weight"), false});
    args.push_back({"bias", optionalIn("bias"), false});
    args.push_back({"eps", n_->input("eps") ? *n_->input("eps") : Argument(1e-5), false});
    b_.emit("aten::native_layer_norm.default", std::move(args), {y, mean, rstd}, *n_);
    b_.bind(out, y);
    return llvm::Error::success();
  }

  /// group_norm (torch 2.13 aten/src/ATen/native/group_norm.cpp): native_group_norm(input
  /// .contiguous(memory_format), weight, bias, N, C, HxW, num_groups, eps)'s output, N and C the
  /// first two sizes, HxW the product of the others. An input not contiguous is refused: torch
  /// copies it to its suggested memory format (channels-last stays as it is).
  llvm::Error groupNorm() {
    Value *x = in("input");
    const TensorMeta &xm = *x->meta();
    if (!isContiguous(xm))
      return makeError("node '{}' ({}): a non-contiguous input (strides [{}]) is not modelled", n_->name(),
                       n_->opString(), fmt::join(hints(xm.strides), ", "));
    auto sizes = hints(xm.sizes);
    auto groups = intInput("num_groups");
    if (sizes.size() < 2 || !groups || *groups <= 0)
      return makeError("node '{}' ({}): expected an input of at least 2 dims and a positive num_groups", n_->name(),
                       n_->opString());
    int64_t hxw = 1;
    for (size_t i = 2; i < sizes.size(); ++i)
      hxw *= sizes[i];
    TensorMeta stat = withShape(xm, {sizes[0], *groups});
    const Value *out = result(0);
    Value *y = b_.tensor(out->name(), *out->meta());
    Value *mean = b_.tensor(tmp("mean"), stat), *rstd = b_.tensor(tmp("rstd"), stat);
    llvm::SmallVector<NamedArgument, 4> args{{"input", x, false}};
    args.push_back({"weight", optionalIn("weight"), false});
    args.push_back({"bias", optionalIn("bias"), false});
    args.append({{"N", sizes[0], false}, {"C", sizes[1], false}, {"HxW", hxw, false}, {"group", *groups, false}});
    args.push_back({"eps", n_->input("eps") ? *n_->input("eps") : Argument(1e-5), false});
    b_.emit("aten::native_group_norm.default", std::move(args), {y, mean, rstd}, *n_);
    b_.bind(out, y);
    return llvm::Error::success();
  }

  llvm::Error rmsNorm() {
    // CPU composite path of torch 2.13: pow, mean.dim(keepdim), add_(eps), rsqrt, mul, mul(weight).
    Value *x = in("input");
    const TensorMeta &xm = *x->meta();
    auto normalized = intListInput("normalized_shape").value_or(IntList{});
    IntList dims;
    for (size_t i = 0; i < normalized.size(); ++i)
      dims.push_back(-1 - static_cast<int64_t>(normalized.size() - 1 - i));
    auto statSizes = hints(xm.sizes);
    for (size_t i = 0; i < normalized.size() && i < statSizes.size(); ++i)
      statSizes[statSizes.size() - 1 - i] = 1;
    double eps = 1.1920928955078125e-07; // torch.finfo(float32).eps, the default when eps is None
    if (const Argument *e = n_->input("eps"); e && e->is<double>())
      eps = e->get<double>();
    Value *sq = emit1("aten::pow.Tensor_Scalar", {{"self", x, false}, {"exponent", int64_t{2}, false}}, withShape(xm, hints(xm.sizes)), tmp("pow"));
    Value *mean = emit1("aten::mean.dim", {{"self", sq, false}, {"dim", dims, false}, {"keepdim", true, false}},
                        withShape(xm, statSizes), tmp("mean"));
    Value *shifted = emit1("aten::add_.Scalar", {{"self", mean, false}, {"other", eps, false}}, withShape(xm, statSizes), tmp("add"));
    Value *r = unary("aten::rsqrt.default", shifted, withShape(xm, statSizes), tmp("rsqrt"));
    const Value *out = result(0);
    Value *weight = in("weight");
    Value *scaled = emit1("aten::mul.Tensor", {{"self", x, false}, {"other", r, false}},
                          weight ? withShape(xm, hints(xm.sizes)) : *out->meta(), weight ? tmp("mul") : out->name());
    if (weight)
      scaled = emit1("aten::mul.Tensor", {{"self", scaled, false}, {"other", weight, false}}, *out->meta(), out->name());
    b_.bind(out, scaled);
    return llvm::Error::success();
  }

  /// A dropout's p (default 0.5) and train (default true) arguments.
  std::pair<double, bool> dropoutArgs() const {
    const Argument *p = n_->input("p");
    const Argument *train = n_->input("train");
    return {p && p->is<double>() ? p->get<double>() : 0.5, !train || !train->is<bool>() || train->get<bool>()};
  }

  llvm::Error dropout() {
    Value *x = in("input");
    auto [prob, training] = dropoutArgs();
    if (prob == 0.0 || !training) { // at::dropout returns its input
      b_.bind(result(0), x);
      return llvm::Error::success();
    }
    if (cuda_) {
      // is_fused_kernel_acceptable (Dropout.cpp): a CUDA input with 0 < p < 1 and elements runs
      // the fused native_dropout.
      if (prob > 0.0 && prob < 1.0 && x->meta()->numel() > 0) {
        Value *y = b_.tensor(result(0)->name(), *result(0)->meta());
        TensorMeta mm = withDtype(withShape(*x->meta(), hints(x->meta()->sizes)), ScalarType::Bool);
        mm.requiresGrad = false;
        Value *mask = b_.tensor(tmp("mask"), mm);
        b_.emit("aten::native_dropout.default", {{"input", x, false}, {"p", prob, false}, {"train", true, false}},
                {y, mask}, *n_);
        b_.bind(result(0), y);
        return llvm::Error::success();
      }
    }
    // CPU path: a Bernoulli mask scaled in place, then multiplied in.
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes));
    Value *mask = unary("aten::empty_like.default", x, m, tmp("mask"));
    Value *drawn = emit1("aten::bernoulli_.float", {{"self", mask, false}, {"p", 1.0 - prob, false}}, m, tmp("bernoulli"));
    Value *scaled = emit1("aten::div_.Scalar", {{"self", drawn, false}, {"other", 1.0 - prob, false}}, m, tmp("div"));
    b_.bind(result(0), emit1("aten::mul.Tensor", {{"self", x, false}, {"other", scaled, false}}, *result(0)->meta(),
                             result(0)->name()));
    return llvm::Error::success();
  }

  /// rrelu (Activation.cpp): rrelu_with_noise on a noise buffer from empty_like (contiguous), in
  /// training and out of it (the kernel draws the noise, or uses the mean slope, itself).
  llvm::Error rrelu() {
    Value *x = in("self");
    if (!isFloating(x->meta()->dtype))
      return keepExported();
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes));
    m.requiresGrad = false;
    Value *noise = unary("aten::empty_like.default", x, m, tmp("noise"),
                         {{"memory_format", MemoryFormat::Contiguous, true}});
    b_.bind(result(0), emit1("aten::rrelu_with_noise.default",
                             {{"self", x, false}, {"noise", noise, false}, {"lower", doubleArg("lower", 1.0 / 8), false},
                              {"upper", doubleArg("upper", 1.0 / 3), false}, {"training", boolArg("training", false), false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  /// feature_dropout / alpha_dropout / feature_alpha_dropout (Dropout.cpp _dropout_impl): the
  /// input itself with p = 0 or outside training; their noise masks otherwise are not modelled.
  llvm::Error noiseDropout() {
    auto [prob, training] = dropoutArgs();
    if (prob == 0.0 || !training || in("input")->meta()->numel() == 0) {
      b_.bind(result(0), in("input"));
      return llvm::Error::success();
    }
    return makeError("{}: dropout with p = {} in training (a noise mask per feature or the alpha variant's affine "
                     "noise) is not modelled",
                     n_->where(), prob);
  }

  /// linalg_svd (BatchLinearAlgebra.cpp): _linalg_svd(A, full_matrices, compute_uv=True, driver),
  /// full_matrices defaulting to True here (False in _linalg_svd's own schema).
  llvm::Error linalgSvd() {
    const Argument *full = n_->input("full_matrices");
    llvm::SmallVector<NamedArgument, 4> args{{"A", in("A"), false},
                                             {"full_matrices", !full || !full->is<bool>() || full->get<bool>(), false},
                                             {"compute_uv", true, false}};
    if (const Argument *driver = n_->input("driver"); driver && !driver->isNone())
      args.push_back({"driver", *driver, true});
    llvm::SmallVector<Argument, 1> outs;
    for (Value *r : n_->results()) {
      Value *v = b_.tensor(r->name(), *r->meta());
      outs.push_back(v);
      b_.bind(r, v);
    }
    b_.emit("aten::_linalg_svd.default", std::move(args), std::move(outs), *n_);
    return llvm::Error::success();
  }

  // ---- linear algebra: the composite wrappers, as BatchLinearAlgebra.cpp / LinearAlgebra.cpp run
  // them, down to the kernels DTensor registers (_ops/_math_ops.py _LINALG_NUM_PLACEMENTS) ------

  /// A meta of `dtype` whose sizes are x's batch dims (all but its last `matrixDims`) then `tail`.
  static TensorMeta batchMeta(const Value *x, ScalarType dtype, llvm::ArrayRef<int64_t> tail, unsigned matrixDims = 2) {
    auto sizes = hints(x->meta()->sizes);
    sizes.resize(sizes.size() >= matrixDims ? sizes.size() - matrixDims : 0);
    sizes.append(tail.begin(), tail.end());
    return metaOf(dtype, sizes, x->meta()->device);
  }
  /// Emits the multi-result kernel `op`, result i of meta metas[i]; node result i is bound to the
  /// kernel's result bound[i] (the others are the kernel's own, named after the node).
  llvm::SmallVector<Value *, 4> emitKernel(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args,
                                           llvm::ArrayRef<TensorMeta> metas, llvm::ArrayRef<unsigned> bound) {
    llvm::SmallVector<Value *, 4> outs;
    for (unsigned i = 0; i < metas.size(); ++i)
      outs.push_back(b_.tensor(tmp("r" + std::to_string(i)), metas[i]));
    for (unsigned i = 0; i < bound.size() && i < n_->results().size(); ++i) {
      const Value *r = result(i);
      outs[bound[i]] = b_.tensor(r->name(), *r->meta());
      b_.bind(r, outs[bound[i]]);
    }
    llvm::SmallVector<Argument, 1> outArgs(outs.begin(), outs.end());
    b_.emit(op, std::move(args), std::move(outArgs), *n_);
    return outs;
  }
  /// _linalg_check_errors(info, api_name, is_matrix=True): the check of the ops without `_ex`.
  void checkErrors(Value *info, llvm::StringRef api) {
    b_.emit("aten::_linalg_check_errors.default",
            {{"info", info, false}, {"api_name", std::string(api), false}, {"is_matrix", true, true}}, {}, *n_);
  }
  TensorMeta infoMeta(const Value *a) const { return batchMeta(a, ScalarType::Int, {}); }
  TensorMeta pivotsMeta(const Value *a) const {
    auto s = hints(a->meta()->sizes);
    return batchMeta(a, ScalarType::Int, {std::min(s[s.size() - 2], s.back())});
  }

  /// linalg_cholesky: linalg_cholesky_ex then the error check.
  llvm::Error linalgCholesky() {
    Value *a = in("self");
    auto outs = emitKernel("aten::linalg_cholesky_ex.default",
                           {{"self", a, false}, {"upper", boolArg("upper", false), true}},
                           {*result(0)->meta(), infoMeta(a)}, {0});
    checkErrors(outs[1], "linalg.cholesky");
    return llvm::Error::success();
  }
  /// linalg_inv: linalg_inv_ex then the error check.
  llvm::Error linalgInv() {
    Value *a = in("A");
    auto outs = emitKernel("aten::linalg_inv_ex.default", {{"A", a, false}}, {*result(0)->meta(), infoMeta(a)}, {0});
    checkErrors(outs[1], "linalg.inv");
    return llvm::Error::success();
  }
  /// linalg_det and det: _linalg_det's first result.
  llvm::Error linalgDet() {
    Value *a = in("A") ? in("A") : in("self");
    emitKernel("aten::_linalg_det.default", {{"A", a, false}}, {*result(0)->meta(), *a->meta(), pivotsMeta(a)}, {0});
    return llvm::Error::success();
  }
  llvm::SmallVector<Value *, 4> slogdet(Value *a, llvm::ArrayRef<unsigned> bound) {
    TensorMeta scalar = batchMeta(a, a->meta()->dtype, {});
    return emitKernel("aten::_linalg_slogdet.default", {{"A", a, false}}, {scalar, scalar, *a->meta(), pivotsMeta(a)},
                      bound);
  }
  /// linalg_slogdet: _linalg_slogdet's sign and logabsdet.
  llvm::Error linalgSlogdet() {
    if (isComplex(in("A")->meta()->dtype))
      return keepExported();
    slogdet(in("A"), {0, 1});
    return llvm::Error::success();
  }
  /// logdet: _linalg_slogdet, its logabsdet where the sign is not -1, NaN where it is.
  llvm::Error logdet() {
    if (complexSelf())
      return keepExported();
    Value *a = in("self");
    auto outs = slogdet(a, {});
    Value *negative = emit1("aten::eq.Scalar", {{"self", outs[0], false}, {"other", -1.0, false}},
                            batchMeta(a, ScalarType::Bool, {}), tmp("negative"));
    Value *nan = emit1("aten::scalar_tensor.default", {{"s", std::nan(""), false}, {"dtype", a->meta()->dtype, true}},
                       metaOf(a->meta()->dtype, {}, a->meta()->device), tmp("nan"));
    b_.bind(result(0), emit1("aten::where.self", {{"condition", negative, false}, {"self", nan, false}, {"other", outs[1], false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// _linalg_solve_ex(A, B, left, check_errors): result, LU, pivots, info; node result i bound to
  /// the kernel's `bound[i]`.
  llvm::SmallVector<Value *, 4> solveEx(Value *a, Value *b, bool left, bool checkErrors, const TensorMeta &resultMeta,
                                        llvm::ArrayRef<unsigned> bound) {
    return emitKernel("aten::_linalg_solve_ex.default",
                      {{"A", a, false}, {"B", b, false}, {"left", left, true}, {"check_errors", checkErrors, true}},
                      {resultMeta, *a->meta(), pivotsMeta(a), infoMeta(a)}, bound);
  }
  /// linalg_solve: _linalg_solve_ex then the error check; linalg_solve_ex: its result and info.
  llvm::Error linalgSolve() {
    auto outs = solveEx(in("A"), in("B"), boolArg("left", true), false, *result(0)->meta(), {0});
    checkErrors(outs[3], "torch.linalg.solve");
    return llvm::Error::success();
  }
  llvm::Error linalgSolveEx() {
    solveEx(in("A"), in("B"), boolArg("left", true), boolArg("check_errors", false), *result(0)->meta(), {0, 3});
    return llvm::Error::success();
  }
  /// _linalg_svd's three results for a `compute_uv` call of A (U and Vh empty without it).
  llvm::SmallVector<TensorMeta, 3> svdMetas(const Value *a, bool fullMatrices, bool computeUv) const {
    auto s = hints(a->meta()->sizes);
    int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
    ScalarType dt = a->meta()->dtype;
    if (!computeUv)
      return {metaOf(dt, {0}, a->meta()->device), batchMeta(a, dt, {k}), metaOf(dt, {0}, a->meta()->device)};
    return {batchMeta(a, dt, {m, fullMatrices ? m : k}), batchMeta(a, dt, {k}), batchMeta(a, dt, {fullMatrices ? n : k, n})};
  }
  /// Whether autograd may need A's decomposition (`_may_require_fw_or_bw_grad`): the kernels then
  /// compute the vectors too. A CUDA target's decomposition knows which values require grad; the
  /// CPU decomposition is shared by every plan, so there a floating A in grad mode is taken to need
  /// it (the vectors change no forward collective: the kernels' strategies follow A's placements).
  bool mayNeedGrad(llvm::StringRef input) const {
    const Value *a = n_->input(input)->tensor();
    if (!n_->gradEnabled())
      return false;
    return cuda_ ? requiresGrad_.count(a) != 0 : isFloating(a->meta()->dtype);
  }
  /// linalg_svdvals: _linalg_svd(A, full_matrices=False, compute_uv=<A needs a gradient>)'s S.
  llvm::SmallVector<Value *, 4> svdvals(Value *a, llvm::StringRef input, llvm::ArrayRef<unsigned> bound) {
    bool uv = mayNeedGrad(input);
    llvm::SmallVector<NamedArgument, 4> args{{"A", a, false}, {"full_matrices", false, true}, {"compute_uv", uv, true}};
    if (const Argument *driver = n_->input("driver"); driver && !driver->isNone())
      args.push_back({"driver", *driver, true});
    return emitKernel("aten::_linalg_svd.default", std::move(args), svdMetas(a, false, uv), bound);
  }
  llvm::Error linalgSvdvals() {
    if (isComplex(in("A")->meta()->dtype))
      return keepExported();
    svdvals(in("A"), "A", {1});
    return llvm::Error::success();
  }
  /// svd(self, some, compute_uv=True): _linalg_svd(full_matrices=!some), V = Vh.mH().
  llvm::Error svd() {
    if (!boolArg("compute_uv", true) || complexSelf())
      return keepExported();
    Value *a = in("self");
    bool full = !boolArg("some", true);
    auto outs = emitKernel("aten::_linalg_svd.default",
                           {{"A", a, false}, {"full_matrices", full, true}, {"compute_uv", true, true}},
                           svdMetas(a, full, true), {0, 1});
    b_.bind(result(2), unary("aten::transpose.int", outs[2], *result(2)->meta(), result(2)->name(),
                             {{"dim0", int64_t{-2}, false}, {"dim1", int64_t{-1}, false}}));
    return llvm::Error::success();
  }
  /// linalg_cond with p None or 2: the singular values' first over their last (SVD of A).
  llvm::Error linalgCond() {
    const Argument *p = n_->input("p");
    if (p && !p->isNone() && doubleArg("p", 0.0) != 2.0)
      return keepExported();
    if (complexSelf())
      return keepExported();
    Value *a = in("self");
    Value *s = svdvals(a, "self", {})[1];
    int64_t k = hints(s->meta()->sizes).back(), last = s->meta()->rank() - 1;
    Value *largest = slice(s, last, 0, 1, tmp("largest"));
    Value *smallest = slice(s, last, k - 1, k, tmp("smallest"));
    Value *ratio = emit1("aten::div.Tensor", {{"self", largest, false}, {"other", smallest, false}}, *largest->meta(),
                         tmp("ratio"));
    b_.bind(result(0), unary("aten::squeeze.dim", ratio, *result(0)->meta(), result(0)->name(), {{"dim", int64_t{-1}, false}}));
    return llvm::Error::success();
  }
  /// _linalg_eigh(A, UPLO, compute_v) with the vectors when asked or when A may need a gradient.
  llvm::SmallVector<Value *, 4> eigh(Value *a, llvm::StringRef input, bool vectors, llvm::ArrayRef<unsigned> bound) {
    bool v = vectors || mayNeedGrad(input);
    llvm::SmallVector<NamedArgument, 4> args{{"A", a, false}};
    if (const Argument *uplo = n_->input("UPLO"))
      args.push_back({"UPLO", *uplo, false});
    args.push_back({"compute_v", v, true});
    int64_t n = hints(a->meta()->sizes).back();
    ScalarType dt = a->meta()->dtype;
    return emitKernel("aten::_linalg_eigh.default", std::move(args),
                      {batchMeta(a, dt, {n}), v ? *a->meta() : metaOf(dt, {0}, a->meta()->device)}, bound);
  }
  /// linalg_eigh (compute_v) and linalg_eigvalsh (the vectors only when A may need a gradient).
  llvm::Error linalgEigh(bool vectors) {
    llvm::StringRef input = in("A") ? "A" : "self";
    Value *a = in(input);
    if (isComplex(a->meta()->dtype))
      return keepExported();
    eigh(a, input, vectors, vectors ? llvm::ArrayRef<unsigned>{0, 1} : llvm::ArrayRef<unsigned>{0});
    return llvm::Error::success();
  }
  llvm::Error linalgEighVectors() { return linalgEigh(true); }
  llvm::Error linalgEigvalsh() { return linalgEigh(false); }
  /// linalg_eigvals (LinearAlgebra.cpp): linalg_eig's eigenvalues where A may need a gradient, which
  /// `_may_require_fw_or_bw_grad` says of every tensor subclass (a DTensor in any grad mode), else
  /// _linalg_eigvals. The plain kernel's choice moves nothing, so linalg_eig stands for both.
  llvm::Error linalgEigvals() {
    Value *a = in("self");
    ScalarType dt = a->meta()->dtype;
    if (dt != ScalarType::Float && dt != ScalarType::Double)
      return keepExported();
    ScalarType complex = dt == ScalarType::Double ? ScalarType::ComplexDouble : ScalarType::ComplexFloat;
    int64_t n = hints(a->meta()->sizes).back();
    emitKernel("aten::linalg_eig.default", {{"self", a, false}}, {batchMeta(a, complex, {n}), batchMeta(a, complex, {n, n})},
               {0});
    return llvm::Error::success();
  }
  /// linalg_matrix_rank(A) without atol / rtol (LinearAlgebra.cpp): atol 0 and rtol eps * max(m, n)
  /// as float64 0-dim plain tensors; the singular values and their largest (S[..., :1]), or for a
  /// hermitian A the eigenvalues' magnitudes and their amax; tol = max(atol, rtol * largest) (atol
  /// and rtol unsqueezed), and the count of values above it.
  llvm::Error linalgMatrixRank() {
    Value *a = in("input");
    const Argument *atolArg = n_->input("atol"), *rtolArg = n_->input("rtol");
    ScalarType dt = a->meta()->dtype;
    if ((atolArg && !atolArg->isNone()) || (rtolArg && !rtolArg->isNone()) ||
        (dt != ScalarType::Float && dt != ScalarType::Double))
      return keepExported();
    auto sizes = hints(a->meta()->sizes);
    int64_t m = sizes[sizes.size() - 2], n = sizes.back(), last = a->meta()->rank() - 2;
    double eps = dt == ScalarType::Double ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    const Device &device = a->meta()->device;
    Value *atol = emit1("aten::zeros.default", {{"size", IntList{}, false}, {"dtype", ScalarType::Double, true}},
                        metaOf(ScalarType::Double, {}, device), tmp("atol"));
    Value *rtol = tolerance(eps * std::max(m, n), a, "rtol");
    Value *values, *largest;
    if (boolArg("hermitian", false)) {
      Value *eigenvalues = eigh(a, "input", false, {})[0];
      values = unary("aten::abs.default", eigenvalues, *eigenvalues->meta(), tmp("abs"));
      largest = unary("aten::amax.default", values, batchMeta(a, dt, {1}), tmp("largest"),
                      {{"dim", IntList{-1}, false}, {"keepdim", true, false}});
    } else {
      values = svdvals(a, "input", {})[1];
      largest = slice(values, last, 0, 1, tmp("largest"));
    }
    auto unsqueezed = [&](Value *x, llvm::StringRef what) {
      return unary("aten::unsqueeze.default", x, metaOf(ScalarType::Double, {1}, device), tmp(what),
                   {{"dim", int64_t{-1}, false}});
    };
    TensorMeta tolMeta = batchMeta(a, ScalarType::Double, {1});
    Value *scaled = emit1("aten::mul.Tensor", {{"self", unsqueezed(rtol, "rtol_unsqueezed"), false}, {"other", largest, false}},
                          tolMeta, tmp("scaled"));
    Value *tol = emit1("aten::maximum.default", {{"self", unsqueezed(atol, "atol_unsqueezed"), false}, {"other", scaled, false}},
                       tolMeta, tmp("tol"));
    Value *above = emit1("aten::gt.Tensor", {{"self", values, false}, {"other", tol, false}},
                         batchMeta(a, ScalarType::Bool, {std::min(m, n)}), tmp("above"));
    b_.bind(result(0), unary("aten::sum.dim_IntList", above, *result(0)->meta(), result(0)->name(),
                             {{"dim", IntList{-1}, false}}));
    return llvm::Error::success();
  }
  /// linalg_lu_factor: linalg_lu_factor_ex then the error check; torch.lu (_lu_with_info):
  /// linalg_lu_factor_ex checking errors itself when asked.
  llvm::Error linalgLuFactor() {
    Value *a = in("A");
    auto outs = emitKernel("aten::linalg_lu_factor_ex.default", {{"A", a, false}, {"pivot", boolArg("pivot", true), true}},
                           {*result(0)->meta(), *result(1)->meta(), infoMeta(a)}, {0, 1});
    checkErrors(outs[2], "torch.linalg.lu_factor");
    return llvm::Error::success();
  }
  llvm::Error luWithInfo() {
    Value *a = in("self");
    emitKernel("aten::linalg_lu_factor_ex.default",
               {{"A", a, false}, {"pivot", boolArg("pivot", true), true},
                {"check_errors", boolArg("check_errors", true), true}},
               {*result(0)->meta(), *result(1)->meta(), *result(2)->meta()}, {0, 1, 2});
    return llvm::Error::success();
  }
  /// lu_solve(B, LU_data, LU_pivots): linalg_lu_solve(LU, pivots, B).
  llvm::Error luSolve() {
    b_.bind(result(0), emit1("aten::linalg_lu_solve.default",
                             {{"LU", in("LU_data"), false}, {"pivots", in("LU_pivots"), false}, {"B", in("self"), false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  llvm::Error matrixExp() { return runAs("aten::linalg_matrix_exp.default"); }
  /// qr(self, some): linalg_qr(self, 'reduced' when some else 'complete').
  llvm::Error qr() {
    emitKernel("aten::linalg_qr.default",
               {{"A", in("self"), false}, {"mode", std::string(boolArg("some", true) ? "reduced" : "complete"), false}},
               {*result(0)->meta(), *result(1)->meta()}, {0, 1});
    return llvm::Error::success();
  }
  /// A float64 0-dim plain tensor of `v` on `like`'s device (a tolerance torch makes with at::full).
  Value *tolerance(double v, const Value *like, llvm::StringRef what) {
    return emit1("aten::full.default",
                 {{"size", IntList{}, false}, {"fill_value", v, false}, {"dtype", ScalarType::Double, true}},
                 metaOf(ScalarType::Double, {}, like->meta()->device), tmp(what));
  }
  /// pinverse(self, rcond): linalg_pinv with atol 0 and rtol rcond as float64 0-dim tensors.
  llvm::Error pinverse() {
    Value *a = in("self");
    Value *atol = tolerance(0.0, a, "atol"), *rtol = tolerance(doubleArg("rcond", 1e-15), a, "rtol");
    b_.bind(result(0), emit1("aten::linalg_pinv.atol_rtol_tensor",
                             {{"self", a, false}, {"atol", atol, true}, {"rtol", rtol, true},
                              {"hermitian", false, true}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// linalg_tensorinv(A, ind): A as a square matrix (its first `ind` dims by the rest), inverted as
  /// linalg_inv, viewed back to the rest's sizes then the first `ind`.
  llvm::Error linalgTensorinv() {
    Value *a = in("self");
    auto s = hints(a->meta()->sizes);
    int64_t ind = intInput("ind").value_or(2);
    if (ind <= 0 || ind >= static_cast<int64_t>(s.size()))
      return keepExported();
    int64_t rows = numelOf(llvm::ArrayRef<int64_t>(s).take_front(ind));
    Value *m = reshape(a, {rows, numelOf(s) / std::max<int64_t>(rows, 1)}, tmp("matrix"));
    auto outs = emitKernel("aten::linalg_inv_ex.default", {{"A", m, false}}, {*m->meta(), infoMeta(m)}, {});
    checkErrors(outs[1], "inv");
    b_.bind(result(0), reshape(outs[0], hints(result(0)->meta()->sizes), result(0)->name()));
    return llvm::Error::success();
  }
  /// linalg_tensorsolve(A, B) without dims: A as a (B.numel(), rest) matrix, B flattened, solved as
  /// linalg_solve, the result viewed to A's trailing sizes.
  llvm::Error linalgTensorsolve() {
    if (const Argument *dims = n_->input("dims"); dims && !dims->isNone())
      return keepExported();
    Value *a = in("self"), *b = in("other");
    int64_t rows = numelOf(hints(b->meta()->sizes));
    Value *m = reshape(a, {rows, numelOf(hints(a->meta()->sizes)) / std::max<int64_t>(rows, 1)}, tmp("matrix"));
    Value *v = reshape(b, {rows}, tmp("vector"));
    auto outs = solveEx(m, v, true, false, withShape(*v->meta(), {hints(m->meta()->sizes).back()}), {});
    checkErrors(outs[3], "torch.linalg.solve");
    b_.bind(result(0), reshape(outs[0], hints(result(0)->meta()->sizes), result(0)->name()));
    return llvm::Error::success();
  }

  /// Operands of one floating dtype and one shape (the composites below broadcast nothing: their
  /// expand_outplace / broadcasting paths are left to the exported op, refused by name).
  static bool sameShapeFloating(std::initializer_list<const Value *> vs) {
    const Value *first = *vs.begin();
    return llvm::all_of(vs, [&](const Value *v) {
      return v && isFloating(v->meta()->dtype) && !isComplex(v->meta()->dtype) &&
             v->meta()->dtype == first->meta()->dtype && hints(v->meta()->sizes) == hints(first->meta()->sizes);
    });
  }
  Value *binaryOp(llvm::StringRef op, Value *a, Argument b, llvm::StringRef name) {
    return emit1(op, {{"self", a, false}, {"other", std::move(b), false}}, withShape(*a->meta(), hints(a->meta()->sizes)),
                 tmp(name));
  }
  /// `s - x` for a Scalar s, as ATen's operator-(Scalar, Tensor) runs it: empty_like(x), fill_(s),
  /// sub_(x).
  Value *scalarMinus(Argument s, Value *x, llvm::StringRef what) {
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes));
    Value *e = unary("aten::empty_like.default", x, m, tmp(what.str() + "_scalar"),
                     {{"memory_format", MemoryFormat::Preserve, true}});
    e = emit1("aten::fill_.Scalar", {{"self", e, false}, {"value", std::move(s), false}}, m, tmp(what.str() + "_filled"));
    return binaryOp("aten::sub_.Tensor", e, x, what);
  }
  /// where(cmp(target, label), kept, zeros): the part of an embedding loss a target label selects.
  Value *labelled(llvm::StringRef cmp, Value *target, double label, Value *kept, Value *zeros, llvm::StringRef what) {
    Value *mask = emit1(cmp, {{"self", target, false}, {"other", label, false}},
                        withDtype(*zeros->meta(), ScalarType::Bool), tmp(what.str() + "_mask"));
    return emit1("aten::where.self", {{"condition", mask, false}, {"self", kept, false}, {"other", zeros, false}},
                 *zeros->meta(), tmp(what));
  }
  /// cosine_similarity (Distance.cpp): each operand's 2-norm over `dim` (kept) cloned and, under
  /// no_grad, clamped in place to at least eps; the two quotients multiplied and summed over dim.
  llvm::Error cosineSimilarity() {
    Value *x1 = in("x1"), *x2 = in("x2");
    if (!sameShapeFloating({x1, x2}) || x1->meta()->rank() == 0)
      return keepExported();
    int64_t rank = x1->meta()->rank(), dim = intInput("dim").value_or(1);
    dim = dim < 0 ? dim + rank : dim;
    if (dim < 0 || dim >= rank)
      return keepExported();
    auto normSizes = hints(x1->meta()->sizes);
    normSizes[dim] = 1;
    TensorMeta nm = withShape(*x1->meta(), normSizes);
    auto norm = [&](Value *x, llvm::StringRef what) {
      Value *n = emit1("aten::linalg_vector_norm.default",
                       {{"self", x, false}, {"ord", int64_t{2}, false}, {"dim", IntList{dim}, false}, {"keepdim", true, false}},
                       nm, tmp(what.str() + "_norm"));
      return unary("aten::clone.default", n, nm, tmp(what.str() + "_norm_clone"));
    };
    Value *n1 = norm(x1, "x1"), *n2 = norm(x2, "x2");
    ScalarType dt = x1->meta()->dtype;
    Value *eps = emit1("aten::scalar_tensor.default", {{"s", doubleArg("eps", 1e-8), false}, {"dtype", dt, true}},
                       metaOf(dt, {}, x1->meta()->device), tmp("eps"));
    auto clamped = [&](Value *n) {
      Value *out = b_.tensor(tmp("norm_clamped"), *n->meta());
      b_.emit("aten::clamp_min_.Tensor", {{"self", n, false}, {"min", eps, false}}, {out}, *n_)->setGradEnabled(false);
      return out;
    };
    n1 = clamped(n1);
    n2 = clamped(n2);
    Value *q1 = binaryOp("aten::div.Tensor", x1, n1, "x1_unit"), *q2 = binaryOp("aten::div.Tensor", x2, n2, "x2_unit");
    Value *prod = binaryOp("aten::mul.Tensor", q1, q2, "products");
    b_.bind(result(0), unary("aten::sum.dim_IntList", prod, *result(0)->meta(), result(0)->name(),
                             {{"dim", IntList{dim}, false}}));
    return llvm::Error::success();
  }
  /// cosine_embedding_loss (Loss.cpp): cos = (x1 * x2).sum(d) / sqrt_((|x1|^2 + eps) * (|x2|^2 + eps))
  /// over the last dim d (eps 1e-12), then where(target == 1, 1 - cos, 0) + where(target == -1,
  /// (cos - margin).clamp_min_(0), 0), reduced; `1 - cos` runs as empty_like, fill_, sub_.
  llvm::Error cosineEmbeddingLoss() {
    Value *x1 = in("input1"), *x2 = in("input2"), *target = in("target");
    auto reduction = lossReduction();
    if (!sameShapeFloating({x1, x2}) || !target || !reduction || x1->meta()->rank() < 1 || x1->meta()->rank() > 2)
      return keepExported();
    int64_t dim = x1->meta()->rank() - 1;
    auto rowSizes = hints(x1->meta()->sizes);
    rowSizes.pop_back();
    TensorMeta row = withShape(*x1->meta(), rowSizes);
    auto dotOf = [&](Value *a, Value *b, llvm::StringRef what) {
      Value *prod = binaryOp("aten::mul.Tensor", a, b, what.str() + "_prod");
      return unary("aten::sum.dim_IntList", prod, row, tmp(what), {{"dim", IntList{dim}, false}});
    };
    Value *prodSum = dotOf(x1, x2, "prod_sum");
    Value *mag1 = binaryOp("aten::add.Scalar", dotOf(x1, x1, "mag1"), 1e-12, "mag_square1");
    Value *mag2 = binaryOp("aten::add.Scalar", dotOf(x2, x2, "mag2"), 1e-12, "mag_square2");
    Value *denom = unary("aten::sqrt_.default", binaryOp("aten::mul.Tensor", mag1, mag2, "mag_product"), row,
                         tmp("denom"));
    Value *cos = binaryOp("aten::div.Tensor", prodSum, denom, "cos");
    Value *zeros = unary("aten::zeros_like.default", cos, row, tmp("zeros"), {{"memory_format", MemoryFormat::Contiguous, true}});
    Value *pos = scalarMinus(int64_t{1}, cos, "pos");
    Value *neg = emit1("aten::clamp_min_.default",
                       {{"self", binaryOp("aten::sub.Scalar", cos, doubleArg("margin", 0.0), "shifted"), false},
                        {"min", int64_t{0}, false}},
                       row, tmp("neg"));
    Value *outPos = labelled("aten::eq.Scalar", target, 1.0, pos, zeros, "output_pos");
    Value *outNeg = labelled("aten::eq.Scalar", target, -1.0, neg, zeros, "output_neg");
    bindLoss(*reduction, "aten::add.Tensor", {{"self", outPos, false}, {"other", outNeg, false}}, row);
    return llvm::Error::success();
  }
  /// margin_ranking_loss (Loss.cpp): (-target * (input1 - input2) + margin).clamp_min_(0), reduced
  /// (the right operand of `*` runs first, as torch's compiler evaluates it).
  llvm::Error marginRankingLoss() {
    Value *a = in("input1"), *b = in("input2"), *target = in("target");
    auto reduction = lossReduction();
    if (!sameShapeFloating({a, b, target}) || !reduction)
      return keepExported();
    Value *diff = binaryOp("aten::sub.Tensor", a, b, "diff");
    Value *negTarget = unary("aten::neg.default", target, *diff->meta(), tmp("neg_target"));
    Value *prod = binaryOp("aten::mul.Tensor", negTarget, diff, "signed_diff");
    Value *shifted = binaryOp("aten::add.Scalar", prod, doubleArg("margin", 0.0), "shifted");
    bindLoss(*reduction, "aten::clamp_min_.default", {{"self", shifted, false}, {"min", int64_t{0}, false}},
             *shifted->meta());
    return llvm::Error::success();
  }
  /// hinge_embedding_loss (Loss.cpp): where(target != 1, (margin - self).clamp_min_(0), 0) +
  /// where(target != -1, self, 0), reduced; `margin - self` runs as empty_like, fill_, sub_.
  llvm::Error hingeEmbeddingLoss() {
    Value *x = in("self"), *target = in("target");
    auto reduction = lossReduction();
    if (!sameShapeFloating({x, target}) || !reduction)
      return keepExported();
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes));
    Value *zeros = unary("aten::zeros_like.default", x, m, tmp("zeros"), {{"memory_format", MemoryFormat::Contiguous, true}});
    Value *gap = scalarMinus(doubleArg("margin", 1.0), x, "margin_gap");
    Value *hinge = emit1("aten::clamp_min_.default", {{"self", gap, false}, {"min", int64_t{0}, false}}, m, tmp("hinge"));
    Value *margins = labelled("aten::ne.Scalar", target, 1.0, hinge, zeros, "margin_part");
    Value *selves = labelled("aten::ne.Scalar", target, -1.0, x, zeros, "self_part");
    bindLoss(*reduction, "aten::add.Tensor", {{"self", margins, false}, {"other", selves, false}}, m);
    return llvm::Error::success();
  }
  /// poisson_nll_loss (Loss.cpp): exp(input) - target * input (log_input) or input - target *
  /// log(input + eps); with `full` the Stirling term target * log(target) - target + 0.5 *
  /// log(2 pi target), zero where target <= 1, added in place; reduced.
  llvm::Error poissonNllLoss() {
    Value *x = in("input"), *target = in("target");
    auto reduction = lossReduction();
    if (!sameShapeFloating({x, target}) || !reduction)
      return keepExported();
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes)), bm = withDtype(m, ScalarType::Bool);
    auto un = [&](llvm::StringRef op, Value *v, llvm::StringRef what) { return unary(op, v, m, tmp(what)); };
    Value *loss;
    if (boolArg("log_input", true)) {
      Value *prod = binaryOp("aten::mul.Tensor", target, x, "target_input");
      loss = binaryOp("aten::sub.Tensor", un("aten::exp.default", x, "exp"), prod, "loss");
    } else {
      Value *logs = un("aten::log.default", binaryOp("aten::add.Scalar", x, doubleArg("eps", 1e-8), "shifted"), "log");
      loss = binaryOp("aten::sub.Tensor", x, binaryOp("aten::mul.Tensor", target, logs, "target_log"), "loss");
    }
    if (boolArg("full", false)) {
      Value *half = binaryOp("aten::mul.Scalar", un("aten::log.default",
                                                    binaryOp("aten::mul.Scalar", target, 2 * M_PI, "two_pi_target"),
                                                    "log_two_pi_target"),
                             0.5, "half_log");
      Value *tlog = binaryOp("aten::mul.Tensor", target, un("aten::log.default", target, "log_target"), "target_log_target");
      Value *stirling = binaryOp("aten::add.Tensor", binaryOp("aten::sub.Tensor", tlog, target, "stirling_head"), half,
                                 "stirling");
      Value *small = emit1("aten::le.Scalar", {{"self", target, false}, {"other", int64_t{1}, false}},
                           bm, tmp("small_target"));
      Value *term = emit1("aten::masked_fill.Scalar", {{"self", stirling, false}, {"mask", small, false},
                                                       {"value", int64_t{0}, false}},
                          m, tmp("stirling_term"));
      loss = binaryOp("aten::add_.Tensor", loss, term, "loss_full");
    }
    b_.bind(result(0), *reduction == 0 ? loss
                                       : unary(*reduction == 1 ? "aten::mean.default" : "aten::sum.default", loss,
                                               *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  /// Tensor.item() (Scalar.cpp): _local_scalar_dense of the tensor, its scalar result the node's.
  llvm::Error item() {
    Value *x = in("self");
    const Value *r = result(0);
    if (!x || n_->results().size() != 1 || r->kind() == ValueKind::Tensor)
      return keepExported();
    b_.emit("aten::_local_scalar_dense.default", {{"self", x, false}}, {Argument(b_.copyValue(r))}, *n_);
    return llvm::Error::success();
  }
  /// linalg_vecdot (LinearAlgebra.cpp), real operands: vdot for two vectors, else x * y summed over
  /// `dim` (x.conj() is x itself).
  llvm::Error linalgVecdot() {
    Value *x = in("x"), *y = in("y");
    if (!sameShapeFloating({x, y}))
      return keepExported();
    if (x->meta()->rank() == 1) {
      b_.bind(result(0), emit1("aten::vdot.default", {{"self", x, false}, {"other", y, false}}, *result(0)->meta(),
                               result(0)->name()));
      return llvm::Error::success();
    }
    Value *prod = binaryOp("aten::mul.Tensor", x, y, "products");
    b_.bind(result(0), unary("aten::sum.dim_IntList", prod, *result(0)->meta(), result(0)->name(),
                             {{"dim", IntList{intInput("dim").value_or(-1)}, false}}));
    return llvm::Error::success();
  }
  /// isfinite (TensorCompare.cpp) of a real floating tensor, as it runs: (e == e) * (|e| != inf),
  /// each comparison reading e itself (a Partial e is all-reduced for abs and for both operands of
  /// eq). Other dtypes keep the node (a pointwise rule).
  llvm::Error isfinite() {
    Value *x = in("self");
    if (!x || !isFloating(x->meta()->dtype) || isComplex(x->meta()->dtype))
      return keepExported();
    b_.bind(result(0), finiteOf(x, result(0)->name()));
    return llvm::Error::success();
  }
  /// isfinite's composite of e, the product named `name`.
  Value *finiteOf(Value *e, llvm::StringRef name) {
    TensorMeta bm = withDtype(*e->meta(), ScalarType::Bool);
    auto cmp = [&](llvm::StringRef op, Value *a, Argument b, llvm::StringRef out) {
      return emit1(op, {{"self", a, false}, {"other", std::move(b), false}}, bm, out);
    };
    Value *notInf = cmp("aten::ne.Scalar", unary("aten::abs.default", e, *e->meta(), tmp("abs")),
                        std::numeric_limits<double>::infinity(), tmp("not_inf"));
    Value *notNan = cmp("aten::eq.Tensor", e, e, tmp("not_nan"));
    return cmp("aten::mul.Tensor", notNan, notInf, name);
  }
  /// isclose (TensorCompare.cpp) of real operands without equal_nan: self == other, or a finite
  /// |self - other| within atol + |rtol * other| (isfinite as its composite: (e == e) * (|e| != inf)).
  llvm::Error isclose() {
    Value *x = in("self"), *y = in("other");
    double rtol = doubleArg("rtol", 1e-5), atol = doubleArg("atol", 1e-8);
    if (!x || !y || !isFloating(x->meta()->dtype) || isComplex(x->meta()->dtype) ||
        x->meta()->dtype != y->meta()->dtype || boolArg("equal_nan", false) || (rtol == 0 && atol == 0))
      return keepExported();
    // the comparisons broadcast self and other (the result's sizes); rtol * |other| keeps other's
    auto broadcast = hints(result(0)->meta()->sizes);
    TensorMeta fm = withShape(*x->meta(), broadcast), bm = withDtype(fm, ScalarType::Bool);
    auto cmp = [&](llvm::StringRef op, Value *a, Argument b, llvm::StringRef what) {
      return emit1(op, {{"self", a, false}, {"other", std::move(b), false}}, bm, tmp(what));
    };
    Value *close = cmp("aten::eq.Tensor", x, y, "equal");
    Value *scaled = binaryOp("aten::mul.Scalar", y, rtol, "rtol_other");
    Value *allowed = binaryOp("aten::add.Scalar", unary("aten::abs.default", scaled, *scaled->meta(), tmp("abs")), atol,
                              "allowed_error");
    Value *diff = emit1("aten::sub.Tensor", {{"self", x, false}, {"other", y, false}}, fm, tmp("diff"));
    Value *actual = unary("aten::abs.default", diff, *diff->meta(), tmp("actual_error"));
    Value *finite = finiteOf(actual, tmp("finite"));
    Value *within = cmp("aten::le.Tensor", actual, allowed, "within");
    Value *finiteWithin = cmp("aten::bitwise_and_.Tensor", finite, within, "finite_within");
    b_.bind(result(0), emit1("aten::bitwise_or_.Tensor", {{"self", close, false}, {"other", finiteWithin, false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }
  /// linalg_ldl_factor: linalg_ldl_factor_ex then the error check.
  llvm::Error linalgLdlFactor() {
    Value *a = in("self");
    llvm::SmallVector<NamedArgument, 4> args{{"self", a, false}};
    if (const Argument *h = n_->input("hermitian"))
      args.push_back({"hermitian", *h, true});
    auto outs = emitKernel("aten::linalg_ldl_factor_ex.default", std::move(args),
                           {*result(0)->meta(), *result(1)->meta(), infoMeta(a)}, {0, 1});
    checkErrors(outs[2], "torch.linalg.ldl_factor");
    return llvm::Error::success();
  }

  /// meshgrid (TensorShape.cpp): each 0- or 1-dim tensor viewed with -1 at its own position and 1
  /// elsewhere, expanded to the grid; 'xy' swaps the first two tensors before and the outputs after.
  /// The grids in the tensors' order, with the metas of `like` (the node's results) where given.
  llvm::Expected<llvm::SmallVector<Value *, 4>> meshgridOf(const TensorList &xs, bool xy,
                                                           llvm::ArrayRef<const Value *> like) {
    size_t n = xs.size();
    auto position = [&](size_t k) { return xy && k < 2 ? 1 - k : k; }; // tensor index at grid dim k
    llvm::SmallVector<int64_t, 4> grid;
    for (size_t k = 0; k < n; ++k)
      grid.push_back(numelOf(hints(b_.map(xs[position(k)])->meta()->sizes)));
    llvm::SmallVector<Value *, 4> out(n);
    for (size_t k = 0; k < n; ++k) {
      size_t i = position(k);
      Value *x = b_.map(xs[i]);
      if (x->meta()->rank() > 1)
        return makeError("node '{}' ({}): expected 0- or 1-dim tensors", n_->name(), n_->opString());
      IntList shape(n, 1);
      shape[k] = -1;
      llvm::SmallVector<int64_t, 4> viewSizes(n, 1), strides(n, 0); // the expand's: 0 on broadcast dims
      viewSizes[k] = grid[k];
      strides[k] = 1;
      Value *v = emit1("aten::view.default", {{"self", x, false}, {"size", shape, false}}, withShape(*x->meta(), viewSizes),
                       tmp("view"));
      out[i] = unary("aten::expand.default", v,
                     like.empty() ? withShape(*x->meta(), grid, llvm::ArrayRef<int64_t>(strides)) : *like[i]->meta(),
                     like.empty() ? tmp("grid") : like[i]->name(), {{"size", IntList(grid), false}});
    }
    return out;
  }
  llvm::Error meshgrid() {
    const Argument *tensors = n_->input("tensors");
    const Argument *indexing = n_->input("indexing");
    if (!tensors || !tensors->is<TensorList>() || tensors->get<TensorList>().size() != n_->results().size())
      return keepExported();
    const TensorList &xs = tensors->get<TensorList>();
    bool xy = indexing && indexing->is<std::string>() && indexing->get<std::string>() == "xy" && xs.size() >= 2;
    llvm::SmallVector<const Value *, 4> like(n_->results().begin(), n_->results().end());
    auto grids = meshgridOf(xs, xy, like);
    if (!grids)
      return grids.takeError();
    for (size_t i = 0; i < xs.size(); ++i)
      b_.bind(result(i), (*grids)[i]);
    return llvm::Error::success();
  }
  /// linalg_matrix_power(A, n >= 0) (LinearAlgebra.cpp): n = 0 a contiguous clone overwritten by
  /// eye, n = 1 a contiguous clone, n = 2 and 3 matmuls, larger n by binary decomposition (z the
  /// running square, result the product of the squares of set bits).
  llvm::Error linalgMatrixPower() {
    Value *a = in("self");
    auto power = intInput("n");
    if (!power || *power < 0 || a->meta()->rank() != 2)
      return keepExported();
    int64_t n = *power;
    const TensorMeta &out = *result(0)->meta();
    if (n <= 1) {
      Value *c = unary("aten::clone.default", a, out, n == 0 ? tmp("clone") : result(0)->name(),
                       {{"memory_format", MemoryFormat::Contiguous, true}});
      if (n == 1) {
        b_.bind(result(0), c);
        return llvm::Error::success();
      }
      int64_t order = hints(a->meta()->sizes).back();
      Value *eye = emit1("aten::eye.default", {{"n", order, false}, {"dtype", a->meta()->dtype, true}},
                         metaOf(a->meta()->dtype, {order, order}, a->meta()->device), tmp("eye"));
      b_.bind(result(0), emit1("aten::copy_.default", {{"self", c, false}, {"src", eye, false}}, out, result(0)->name()));
      return llvm::Error::success();
    }
    auto product = [&](Value *x, Value *y, bool last) -> llvm::Expected<Value *> {
      return matmul(x, y, out, last ? result(0)->name() : tmp("power"));
    };
    if (n <= 3) {
      auto sq = product(a, a, n == 2);
      if (!sq)
        return sq.takeError();
      if (n == 2) {
        b_.bind(result(0), *sq);
        return llvm::Error::success();
      }
      auto cube = product(*sq, a, true);
      if (!cube)
        return cube.takeError();
      b_.bind(result(0), *cube);
      return llvm::Error::success();
    }
    Value *z = nullptr, *acc = nullptr;
    while (n > 0) {
      int64_t bit = n % 2;
      n /= 2;
      if (z) {
        auto zz = product(z, z, false);
        if (!zz)
          return zz.takeError();
        z = *zz;
      } else {
        z = a;
      }
      if (bit == 1) {
        if (!acc) {
          acc = z;
          if (n == 0)
            break;
          continue;
        }
        auto next = product(acc, z, n == 0);
        if (!next)
          return next.takeError();
        acc = *next;
      }
    }
    b_.bind(result(0), acc);
    return llvm::Error::success();
  }

  /// An optional tensor input: the mapped tensor, or None when the node has none.
  Argument optionalIn(llvm::StringRef name) const {
    Value *v = in(name);
    return v ? Argument(v) : Argument(NoneArg{});
  }
  /// native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps) with
  /// node result 0 bound to its output: the kernel batch_norm runs on the CPU
  /// (Normalization.cpp _batch_norm_impl_index; its cuDNN / MIOpen paths are a CUDA target's).
  /// The saved statistics are [C] in training, empty outside it.
  Value *nativeBatchNorm(Value *x, Argument weight, Argument bias, Argument mean, Argument var, bool training,
                         const TensorMeta &outMeta, llvm::StringRef outName) {
    auto s = hints(x->meta()->sizes);
    ScalarType dt = x->meta()->dtype;
    ScalarType statType = dt == ScalarType::Half || dt == ScalarType::BFloat16 ? ScalarType::Float : dt;
    TensorMeta stat = metaOf(statType, {training ? (s.size() > 1 ? s[1] : 1) : 0}, x->meta()->device);
    Value *out = b_.tensor(outName, outMeta);
    llvm::SmallVector<Argument, 1> outs{out, b_.tensor(tmp("save_mean"), stat), b_.tensor(tmp("save_invstd"), stat)};
    b_.emit("aten::native_batch_norm.default",
            {{"input", x, false}, {"weight", std::move(weight), false}, {"bias", std::move(bias), false},
             {"running_mean", std::move(mean), false}, {"running_var", std::move(var), false},
             {"training", training, false}, {"momentum", doubleArg("momentum", 0.1), false},
             {"eps", doubleArg("eps", 1e-5), false}},
            std::move(outs), *n_);
    return out;
  }
  llvm::Error batchNorm() {
    if (cuda_)
      return keepExported();
    b_.bind(result(0), nativeBatchNorm(in("input"), optionalIn("weight"), optionalIn("bias"), optionalIn("running_mean"),
                                       optionalIn("running_var"), boolArg("training", false), *result(0)->meta(),
                                       result(0)->name()));
    return llvm::Error::success();
  }
  /// instance_norm (Normalization.cpp): weight, bias and the running statistics repeated per
  /// sample, the input viewed as one sample of N*C channels, batch norm over it, each running
  /// statistic updated in place with the mean of its per-sample copies, the output viewed back.
  llvm::Error instanceNorm() {
    Value *x = in("input");
    auto s = hints(x->meta()->sizes);
    if (cuda_ || s.size() < 2 || !isContiguous(*x->meta()))
      return keepExported();
    int64_t batch = s[0], channels = s[1];
    auto repeated = [&](llvm::StringRef name) -> Value * {
      Value *v = in(name);
      if (!v)
        return nullptr;
      return unary("aten::repeat.default", v, withShape(*v->meta(), {batch * channels}), tmp(name.str() + "_repeated"),
                   {{"repeats", IntList{batch}, false}});
    };
    Value *weight = repeated("weight"), *bias = repeated("bias"), *mean = repeated("running_mean"),
          *var = repeated("running_var");
    auto flat = s;
    flat.erase(flat.begin());
    flat[0] = batch * channels;
    flat.insert(flat.begin(), 1);
    Value *reshaped = emit1("aten::view.default", {{"self", x, false}, {"size", IntList(flat.begin(), flat.end()), false}},
                            withShape(*x->meta(), flat), tmp("as_one_sample"));
    auto orNone = [](Value *v) { return v ? Argument(v) : Argument(NoneArg{}); };
    Value *out = nativeBatchNorm(reshaped, orNone(weight), orNone(bias), orNone(mean), orNone(var),
                                 boolArg("use_input_stats", true), *reshaped->meta(), tmp("normalized"));
    for (auto [name, copies] : {std::pair{"running_mean", mean}, std::pair{"running_var", var}}) {
      if (!copies)
        continue;
      Value *stat = in(name);
      Value *alias = unary("aten::alias.default", stat, *stat->meta(), tmp(std::string(name) + "_alias"));
      Value *perSample = emit1("aten::view.default", {{"self", copies, false}, {"size", IntList{batch, channels}, false}},
                               withShape(*copies->meta(), {batch, channels}), tmp(std::string(name) + "_per_sample"));
      Value *avg = unary("aten::mean.dim", perSample, withShape(*stat->meta(), {channels}), tmp(std::string(name) + "_mean"),
                         {{"dim", IntList{0}, false}});
      b_.emit("aten::copy_.default", {{"self", alias, false}, {"src", avg, false}},
              {b_.tensor(tmp(std::string(name) + "_updated"), *alias->meta())}, *n_);
    }
    b_.bind(result(0), emit1("aten::view.default", {{"self", out, false}, {"size", IntList(s.begin(), s.end()), false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  /// permute(x, dims): a view with x's sizes and strides in `dims`' order (dims as passed).
  Value *permute(Value *x, const IntList &dims, llvm::StringRef name) {
    auto xs = hints(x->meta()->sizes), st = hints(x->meta()->strides);
    int64_t rank = static_cast<int64_t>(xs.size());
    llvm::SmallVector<int64_t, 4> sizes, strides;
    for (int64_t d : dims) {
      int64_t k = d < 0 ? d + rank : d;
      sizes.push_back(xs[k]);
      strides.push_back(st[k]);
    }
    return unary("aten::permute.default", x, withShape(*x->meta(), sizes, llvm::ArrayRef<int64_t>(strides)), name,
                 {{"dims", dims, false}});
  }
  /// tensordot (ATen Linear.cpp) of a over dims1 with b over dims2: a contracted dim of size 1 on
  /// one side sums the other side's over it first (sum keepdim, in its dtype); a permuted to its
  /// free dims then dims1, b to dims2 then its free dims (the dims as passed); when both sides'
  /// free sizes multiply to 1, dot of the two flattened (b's first, as the call's arguments are
  /// evaluated) where views flatten both, else the sum of their squeezed product (traced), and the
  /// scalar reshaped to the free sizes; else both reshaped to matrices, mm, the product reshaped.
  llvm::Error tensordotOf(Value *a, Value *b, const IntList &dims1, const IntList &dims2) {
    auto as = hints(a->meta()->sizes), bs = hints(b->meta()->sizes);
    int64_t ra = static_cast<int64_t>(as.size()), rb = static_cast<int64_t>(bs.size());
    if (dims1.size() != dims2.size())
      return makeError("node '{}' {}: both dim lists must have the same length", n_->name(), n_->opString());
    llvm::SmallVector<bool, 4> contractedA(ra, false), contractedB(rb, false);
    int64_t csize = 1;
    auto sumOver = [&](Value *x, int64_t dim, int64_t normalized) {
      auto kept = hints(x->meta()->sizes);
      kept[normalized] = 1;
      return emit1("aten::sum.dim_IntList", {{"self", x, false}, {"dim", IntList{dim}, false}, {"keepdim", true, false},
                                              {"dtype", x->meta()->dtype, true}},
                   withShape(*x->meta(), kept), tmp("sum"));
    };
    for (size_t i = 0; i < dims1.size(); ++i) {
      int64_t da = dims1[i] < 0 ? dims1[i] + ra : dims1[i], db = dims2[i] < 0 ? dims2[i] + rb : dims2[i];
      if (da < 0 || da >= ra || db < 0 || db >= rb)
        return keepExported();
      contractedA[da] = contractedB[db] = true;
      if (bs[db] == 1) {
        a = sumOver(a, dims1[i], da);
      } else if (as[da] == 1) {
        b = sumOver(b, dims2[i], db);
      } else if (as[da] != bs[db]) {
        return makeError("node '{}' {}: contracted dimensions need to match, but the first has size {} in dim {} and "
                         "the second size {} in dim {}",
                         n_->name(), n_->opString(), as[da], dims1[i], bs[db], dims2[i]);
      } else {
        csize *= as[da];
      }
    }
    IntList p1, p2, rsizes;
    int64_t size1 = 1, size2 = 1;
    for (int64_t i = 0; i < ra; ++i)
      if (!contractedA[i]) {
        p1.push_back(i);
        size1 *= as[i];
        rsizes.push_back(as[i]);
      }
    p1.append(dims1.begin(), dims1.end());
    p2.append(dims2.begin(), dims2.end());
    for (int64_t i = 0; i < rb; ++i)
      if (!contractedB[i]) {
        p2.push_back(i);
        size2 *= bs[i];
        rsizes.push_back(bs[i]);
      }
    Value *prod;
    if (size1 == 1 && size2 == 1) {
      Value *pa = permute(a, p1, tmp("permute_self")), *pb = permute(b, p2, tmp("permute_other"));
      auto flat = [&](const Value *x) { return x->meta()->rank() == 1 || viewStrides(*x->meta(), {csize}); };
      if (flat(pa) && flat(pb)) {
        // flatten(): a vector as it is, anything else viewed as its element count
        auto flatten = [&](Value *x, llvm::StringRef name) {
          return x->meta()->rank() == 1 ? x : reshape(x, {csize}, name);
        };
        Value *fb = flatten(pb, tmp("view_other")), *fa = flatten(pa, tmp("view_self"));
        prod = emit1("aten::dot.default", {{"self", fa, false}, {"tensor", fb, false}}, withShape(*a->meta(), {}),
                     tmp("dot"));
      } else {
        // a permuted side no view flattens: (a.squeeze() * b.squeeze()).sum(), b's squeeze first
        auto squeeze = [&](Value *x, llvm::StringRef name) {
          llvm::SmallVector<int64_t, 4> sizes, strides;
          auto xs = hints(x->meta()->sizes), st = hints(x->meta()->strides);
          for (size_t i = 0; i < xs.size(); ++i)
            if (xs[i] != 1) {
              sizes.push_back(xs[i]);
              strides.push_back(st[i]);
            }
          return unary("aten::squeeze.default", x, withShape(*x->meta(), sizes, llvm::ArrayRef<int64_t>(strides)), name);
        };
        Value *sb = squeeze(pb, tmp("squeeze_other")), *sa = squeeze(pa, tmp("squeeze_self"));
        Value *products = emit1("aten::mul.Tensor", {{"self", sa, false}, {"other", sb, false}},
                                withShape(*sa->meta(), broadcastSizes(hints(sa->meta()->sizes), hints(sb->meta()->sizes))),
                                tmp("mul"));
        prod = unary("aten::sum.default", products, withShape(*a->meta(), {}), tmp("sum"),
                     {{"dtype", a->meta()->dtype, true}});
      }
    } else {
      Value *ma = reshape(permute(a, p1, tmp("permute_self")), {size1, csize}, tmp("view_self"));
      Value *mb = reshape(permute(b, p2, tmp("permute_other")), {csize, size2}, tmp("view_other"));
      prod = emit1("aten::mm.default", {{"self", ma, false}, {"mat2", mb, false}}, withShape(*a->meta(), {size1, size2}),
                   tmp("mm"));
    }
    b_.bind(result(0), reshape(prod, rsizes, result(0)->name()));
    return llvm::Error::success();
  }
  llvm::Error tensordot() {
    Value *a = in("self"), *b = in("other");
    auto d1 = intListInput("dims_self"), d2 = intListInput("dims_other");
    if (!a || !b || !d1 || !d2)
      return keepExported();
    return tensordotOf(a, b, *d1, *d2);
  }
  /// inner (LinearAlgebra.cpp): self * other when either is 0-d, else tensordot over both last dims.
  llvm::Error inner() {
    Value *a = in("self"), *b = in("other");
    if (!a || !b)
      return keepExported();
    if (a->meta()->rank() == 0 || b->meta()->rank() == 0) {
      b_.bind(result(0), emit1("aten::mul.Tensor", {{"self", a, false}, {"other", b, false}}, *result(0)->meta(),
                               result(0)->name()));
      return llvm::Error::success();
    }
    return tensordotOf(a, b, IntList{-1}, IntList{-1});
  }
  /// movedim (TensorShape.cpp): a permute whose order puts each source dim at its destination
  /// and the other dims, in order, in the remaining places.
  llvm::Error movedim() {
    Value *x = in("self");
    int64_t rank = x->meta()->rank();
    auto norm = [&](int64_t d) { return d < 0 ? d + rank : d; };
    IntList src, dst;
    for (auto [name, list] : {std::pair{"source", &src}, std::pair{"destination", &dst}}) {
      const Argument *a = n_->input(name);
      if (auto one = a ? a->asInt() : std::nullopt)
        list->push_back(norm(*one));
      else if (auto many = a ? a->asIntList() : std::nullopt)
        for (int64_t d : *many)
          list->push_back(norm(d));
    }
    if (src.size() != dst.size())
      return makeError("node '{}' {}: source and destination differ in length", n_->name(), n_->opString());
    IntList perm(rank, -1);
    llvm::SmallVector<bool, 4> used(rank, false);
    for (size_t i = 0; i < src.size(); ++i) {
      perm[dst[i]] = src[i];
      used[src[i]] = true;
    }
    int64_t next = 0;
    for (int64_t &p : perm)
      if (p < 0) {
        while (used[next])
          ++next;
        p = next++;
      }
    b_.bind(result(0), unary("aten::permute.default", x, *result(0)->meta(), result(0)->name(), {{"dims", perm, false}}));
    return llvm::Error::success();
  }

  /// std.dim / var.dim (ReduceOps.cpp): the .correction overload, correction 1 when unbiased;
  /// every result bound (var_mean's two).
  llvm::Error stdVarDim(llvm::StringRef runtimeOp) {
    const Argument *unbiased = n_->input("unbiased");
    int64_t correction = unbiased && unbiased->is<bool>() && !unbiased->get<bool>() ? 0 : 1;
    llvm::SmallVector<NamedArgument, 4> args{{"self", in("self"), false}};
    if (const Argument *dim = n_->input("dim"))
      args.push_back({"dim", b_.map(*dim), false});
    args.push_back({"correction", correction, true});
    if (const Argument *keepdim = n_->input("keepdim"))
      args.push_back({"keepdim", b_.map(*keepdim), true});
    llvm::SmallVector<Argument, 1> outs;
    for (const Value *r : n_->results())
      outs.push_back(b_.tensor(r->name(), *r->meta()));
    b_.emit(runtimeOp, std::move(args), llvm::SmallVector<Argument, 1>(outs), *n_);
    for (size_t i = 0; i < outs.size(); ++i)
      b_.bind(n_->results()[i], outs[i].tensor());
    return llvm::Error::success();
  }

  /// F.pad's aten::pad (PadNd.cpp): mode "constant" runs constant_pad_nd; the other modes' kernels
  /// (reflection/replication/circular) are not modelled.
  llvm::Error pad() {
    const Argument *mode = n_->input("mode");
    std::string m = mode && mode->is<std::string>() ? mode->get<std::string>() : "constant";
    if (m == "circular")
      return padCircular();
    if (m != "constant")
      return makeError("node '{}' aten::pad.default with mode '{}' in {}: only modes 'constant' and 'circular' are "
                       "supported",
                       n_->name(), m, n_->moduleName());
    const Argument *padding = n_->input("pad");
    if (!padding)
      return makeError("node '{}' aten::pad.default: expected a 'pad' argument", n_->name());
    llvm::SmallVector<NamedArgument, 4> args{{"self", in("self"), false}, {"pad", b_.map(*padding), false}};
    if (const Argument *value = n_->input("value"); value && !value->isNone())
      args.push_back({"value", b_.map(*value), false});
    b_.bind(result(0), emit1("aten::constant_pad_nd.default", std::move(args), *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  /// pad(mode='circular') as torch 2.13's _pad_circular_symint (PadNd.cpp) runs it: an empty
  /// output (new_empty), the input copied into its middle (the slices of every padded dim, the
  /// last dim first), then per padded dim, last first, each side's pad copied from the other end
  /// of the output. Under DTensor the new tensor is Replicate, so the first copy_ redistributes
  /// the input to Replicate and the others move nothing.
  llvm::Error padCircular() {
    std::string where = fmt::format("node '{}' aten::pad.default with mode 'circular' in {}", n_->name(),
                                    n_->moduleName());
    Value *x = in("self");
    auto pad = intListInput("pad");
    if (!x || !pad || pad->size() % 2 != 0 || pad->size() / 2 > static_cast<size_t>(x->meta()->rank()))
      return makeError("{}: expected a tensor and pairs of pads for at most its dims", where);
    auto sizes = hints(x->meta()->sizes);
    auto outSizes = sizes;
    struct Padded {
      int64_t dim, left, right;
    };
    llvm::SmallVector<Padded, 3> padded; // the last dim first, as pad lists them
    for (size_t i = 0; i < pad->size() / 2; ++i) {
      Padded p{x->meta()->rank() - 1 - static_cast<int64_t>(i), (*pad)[2 * i], (*pad)[2 * i + 1]};
      if (p.left < 0 || p.right < 0)
        return makeError("{}: negative circular padding is not modelled", where);
      outSizes[p.dim] += p.left + p.right;
      padded.push_back(p);
    }
    Value *out = unary("aten::new_empty.default", x, withShape(*x->meta(), outSizes), tmp("out"),
                       {{"size", IntList(outSizes), false}});
    Value *outMiddle = out, *inMiddle = x;
    for (const Padded &p : padded) {
      outMiddle = slice(outMiddle, p.dim, p.left, outSizes[p.dim] - p.right, tmp("out_middle"));
      inMiddle = slice(inMiddle, p.dim, 0, sizes[p.dim], tmp("in_middle"));
    }
    auto copyInto = [&](Value *dst, Value *src) {
      emit1("aten::copy_.default", {{"self", dst, false}, {"src", src, false}}, *dst->meta(), tmp("copy"));
    };
    copyInto(outMiddle, inMiddle);
    for (const Padded &p : padded) {
      int64_t size = outSizes[p.dim];
      if (p.left > 0)
        copyInto(slice(out, p.dim, 0, p.left, tmp("left")),
                 slice(out, p.dim, size - p.right - p.left, size - p.right, tmp("wrap")));
      if (p.right > 0)
        copyInto(slice(out, p.dim, size - p.right, size, tmp("right")),
                 slice(out, p.dim, p.left, p.left + p.right, tmp("wrap")));
    }
    b_.bind(result(0), out);
    return llvm::Error::success();
  }

  /// cross_entropy_loss (LossNLL.cpp) with class-index targets and no label smoothing:
  /// log_softmax over the class dim, then nll_loss_nd.
  llvm::Error crossEntropyLoss() {
    Value *x = in("self"), *target = in("target");
    const Argument *smoothing = n_->input("label_smoothing");
    bool smoothed = smoothing && ((smoothing->is<double>() && smoothing->get<double>() != 0) ||
                                  (smoothing->asInt() && *smoothing->asInt() != 0));
    std::string where = fmt::format("node '{}' aten::cross_entropy_loss.default in {}", n_->name(),
                                    n_->moduleName());
    if (!target)
      return keepExported();
    if (smoothed && isFloating(target->meta()->dtype))
      return makeError("{}: label_smoothing with class-probability targets is not supported", where);
    if (const Argument *w = n_->input("weight"); smoothed && w && !w->isNone())
      return makeError("{}: label_smoothing with class weights is not supported", where);
    int64_t classDim = x->meta()->rank() == 1 ? 0 : 1;
    Value *logp = emit1("aten::_log_softmax.default",
                        {{"self", x, false}, {"dim", classDim, false}, {"half_to_float", false, false}},
                        withShape(*x->meta(), hints(x->meta()->sizes)), tmp("log_softmax"));
    if (smoothed) {
      int64_t rank = x->meta()->rank();
      if (rank > 2 && rank != 4) // nll_loss_nd's views around nll_loss2d
        return makeError("{}: label_smoothing with a {}-D input is not supported", where, rank);
      return labelSmoothedLoss(logp, target, classDim);
    }
    if (!isFloating(target->meta()->dtype))
      return nllLossNdOf(logp, target);
    // Class probabilities (LossNLL.cpp cross_entropy_loss_prob_target): -(logp * target) summed,
    // over the class dim (none), every element (sum), or every element over numel / classes (mean).
    if (const Argument *w = n_->input("weight"); w && !w->isNone())
      return makeError("{}: class-probability targets with class weights are not supported", where);
    auto reduction = lossReduction();
    if (!reduction || hints(target->meta()->sizes) != hints(x->meta()->sizes) || x->meta()->numel() == 0)
      return keepExported();
    Value *prod = binaryOp("aten::mul.Tensor", logp, target, "weighted_log_probs");
    const TensorMeta &out = *result(0)->meta();
    if (*reduction == 0) {
      Value *perRow = unary("aten::sum.dim_IntList", prod, out, tmp("sum"), {{"dim", IntList{classDim}, false}});
      b_.bind(result(0), unary("aten::neg.default", perRow, out, result(0)->name()));
      return llvm::Error::success();
    }
    Value *total = unary("aten::neg.default", unary("aten::sum.default", prod, out, tmp("sum")), out,
                         *reduction == 1 ? tmp("neg") : result(0)->name());
    if (*reduction == 1)
      total = binaryOp("aten::div.Scalar", total, x->meta()->numel() / hints(x->meta()->sizes)[classDim], "mean");
    b_.bind(result(0), total);
    return llvm::Error::success();
  }

  /// cross_entropy_loss_label_smoothing (LossNLL.cpp), class indices without weights: the
  /// nll_loss of log-probabilities `logp`, and the smoothing term -logp.sum(class dim), zero where the
  /// target is ignore_index, reduced (mean: over the targets not ignored); (1 - s) * nll + term *
  /// (s / classes), each product's right operand first as torch's compiler runs them.
  llvm::Error labelSmoothedLoss(Value *logp, Value *target, int64_t classDim) {
    auto reduction = lossReduction();
    if (!reduction)
      return keepExported();
    double s = doubleArg("label_smoothing", 0.0);
    int64_t ignore = intInput("ignore_index").value_or(-100), classes = hints(logp->meta()->sizes)[classDim];
    auto perTarget = hints(target->meta()->sizes);
    TensorMeta rowMeta = withShape(*logp->meta(), perTarget), maskMeta = withDtype(rowMeta, ScalarType::Bool),
               scalar = withShape(*logp->meta(), {});
    const TensorMeta &outMeta = *result(0)->meta();
    Value *nll = nllLoss(logp->meta()->rank() == 4 ? "aten::nll_loss2d_forward.default" : "aten::nll_loss_forward.default",
                         logp, target, outMeta, tmp("nll"));
    Value *classSum = unary("aten::sum.dim_IntList", logp, rowMeta, tmp("class_sum"), {{"dim", IntList{classDim}, false}});
    Value *smooth = unary("aten::neg.default", classSum, rowMeta, tmp("smooth"));
    Value *ignored = emit1("aten::eq.Scalar", {{"self", target, false}, {"other", ignore, false}}, maskMeta, tmp("ignored"));
    smooth = emit1("aten::masked_fill_.Scalar", {{"self", smooth, false}, {"mask", ignored, false}, {"value", 0.0, false}},
                   rowMeta, tmp("smooth_kept"));
    if (*reduction == 1) {
      Value *kept = unary("aten::bitwise_not.default", ignored, maskMeta, tmp("kept"));
      Value *count = unary("aten::sum.default", kept, withDtype(scalar, ScalarType::Long), tmp("kept_count"));
      Value *total = unary("aten::sum.default", smooth, scalar, tmp("smooth_sum"));
      smooth = binaryOp("aten::div.Tensor", total, count, "smooth_mean");
    } else if (*reduction == 2) {
      smooth = unary("aten::sum.default", smooth, scalar, tmp("smooth_sum"));
    }
    Value *smoothPart = binaryOp("aten::mul.Scalar", smooth, s / static_cast<double>(classes), "smooth_part");
    Value *nllPart = binaryOp("aten::mul.Scalar", nll, 1.0 - s, "nll_part");
    b_.bind(result(0), emit1("aten::add.Tensor", {{"self", nllPart, false}, {"other", smoothPart, false}}, outMeta,
                             result(0)->name()));
    return llvm::Error::success();
  }

  /// nll_loss_forward / nll_loss2d_forward of `x` and `target` with the node's weight, reduction
  /// and ignore_index, the defaults of cross_entropy_loss / nll_loss_nd spelled out (the forward
  /// ops have none); the output (total_weight a temporary).
  Value *nllLoss(llvm::StringRef op, Value *x, Value *target, const TensorMeta &outMeta, llvm::StringRef name) {
    llvm::SmallVector<NamedArgument, 4> args{{"self", x, false}, {"target", target, false}};
    for (auto [arg, fallback] : {std::pair<const char *, Argument>{"weight", NoneArg{}},
                                 {"reduction", int64_t{1}}, {"ignore_index", int64_t{-100}}})
      if (const Argument *a = n_->input(arg))
        args.push_back({arg, b_.map(*a), false});
      else
        args.push_back({arg, fallback, false});
    Value *totalWeight = b_.tensor(tmp("total_weight"), withShape(*x->meta(), {}));
    Value *out = b_.tensor(name, outMeta);
    b_.emit(op, std::move(args), {out, totalWeight}, *n_);
    return out;
  }

  /// nll_loss_nd (LossNLL.cpp): nll_loss for 1-D and 2-D input, nll_loss2d for 4-D; otherwise
  /// input and target viewed as [N, C, 1, -1] and [N, 1, -1] for nll_loss2d, its unreduced output
  /// viewed back to [N, d1, ...].
  llvm::Error nllLossNd() { return nllLossNdOf(in("self"), in("target")); }
  llvm::Error nllLossNdOf(Value *x, Value *target) {
    int64_t rank = x->meta()->rank();
    if (rank < 1 || !target)
      return keepExported();
    auto reduction = lossReduction();
    if (!reduction)
      return keepExported();
    if (rank <= 2 || rank == 4) {
      b_.bind(result(0), nllLoss(rank == 4 ? "aten::nll_loss2d_forward.default" : "aten::nll_loss_forward.default", x,
                                 target, *result(0)->meta(), result(0)->name()));
      return llvm::Error::success();
    }
    auto xs = hints(x->meta()->sizes);
    int64_t n = xs[0], c = xs[1], rest = 1;
    for (size_t i = 2; i < xs.size(); ++i)
      rest *= xs[i];
    Value *xv = unary("aten::view.default", contiguous(x, tmp("input_contiguous")), withShape(*x->meta(), {n, c, 1, rest}),
                      tmp("input_view"), {{"size", IntList{n, c, 1, -1}, false}});
    Value *tv = unary("aten::view.default", contiguous(target, tmp("target_contiguous")),
                      withShape(*target->meta(), {n, 1, rest}), tmp("target_view"), {{"size", IntList{n, 1, -1}, false}});
    if (*reduction != 0) {
      b_.bind(result(0), nllLoss("aten::nll_loss2d_forward.default", xv, tv, *result(0)->meta(), result(0)->name()));
      return llvm::Error::success();
    }
    Value *flat = nllLoss("aten::nll_loss2d_forward.default", xv, tv, withShape(*x->meta(), {n, 1, rest}), tmp("flat"));
    b_.bind(result(0), unary("aten::view.default", flat, *result(0)->meta(), result(0)->name(),
                             {{"size", IntList(hints(result(0)->meta()->sizes)), false}}));
    return llvm::Error::success();
  }

  /// l1_loss (Loss.cpp): (self - target).abs(), then the reduction (0 none, 1 mean, 2 sum).
  llvm::Error l1Loss() {
    auto reduction = lossReduction();
    if (!reduction)
      return keepExported();
    Value *x = in("self"), *target = in("target");
    TensorMeta m = withShape(*x->meta(), hints(x->meta()->sizes));
    Value *diff = emit1("aten::sub.Tensor", {{"self", x, false}, {"other", target, false}}, m, tmp("sub"));
    bindLoss(*reduction, "aten::abs.default", {{"self", diff, false}}, m);
    return llvm::Error::success();
  }

  /// grid_sampler (GridSampler.cpp): grid_sampler_2d for a 4-D input, grid_sampler_3d for 5-D, with
  /// the same arguments (on CUDA cudnn_grid_sampler may run instead: not modelled).
  llvm::Error gridSampler() {
    if (cuda_)
      return keepExported();
    int64_t rank = in("input")->meta()->rank();
    if (rank != 4 && rank != 5)
      return keepExported();
    return runAs(rank == 4 ? "aten::grid_sampler_2d.default" : "aten::grid_sampler_3d.default");
  }

  /// upsample_*.vec (UpSample.cpp): the .default kernel with the output size the result has and
  /// each scale factor as its scales_* argument (None when sizes were given).
  llvm::Error upsampleVec() {
    llvm::StringRef op = n_->opString();
    std::string runtimeOp = (op.drop_back(llvm::StringRef(".vec").size()) + ".default").str();
    auto outSizes = hints(result(0)->meta()->sizes);
    int64_t spatial = static_cast<int64_t>(outSizes.size()) - 2;
    llvm::SmallVector<NamedArgument, 4> args{
        {"self", in("input"), false},
        {"output_size", IntList(outSizes.begin() + 2, outSizes.end()), false}};
    if (const Argument *align = n_->input("align_corners"))
      args.push_back({"align_corners", b_.map(*align), false});
    const Argument *factors = n_->input("scale_factors");
    static const char *kScales1[] = {"scales"}, *kScales2[] = {"scales_h", "scales_w"},
                      *kScales3[] = {"scales_d", "scales_h", "scales_w"};
    llvm::ArrayRef<const char *> names = spatial == 1   ? llvm::ArrayRef<const char *>(kScales1)
                                         : spatial == 2 ? llvm::ArrayRef<const char *>(kScales2)
                                                        : llvm::ArrayRef<const char *>(kScales3);
    for (size_t i = 0; i < names.size(); ++i) {
      Argument scale = NoneArg{};
      if (factors && factors->is<FloatList>() && i < factors->get<FloatList>().size())
        scale = factors->get<FloatList>()[i];
      args.push_back({names[i], scale, false});
    }
    b_.bind(result(0), emit1(runtimeOp, std::move(args), *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  /// softmax / log_softmax (SoftMax.cpp): with a dtype other than the input's, the input cast to
  /// it first (input.toType(dtype), _to_copy), then _softmax / _log_softmax of the cast.
  llvm::Error softmax(llvm::StringRef runtimeOp) {
    Value *x = in("self");
    if (const TensorMeta &out = *result(0)->meta(); out.dtype != x->meta()->dtype)
      x = unary("aten::_to_copy.default", x, withDtype(*x->meta(), out.dtype), tmp("to"),
                {{"dtype", out.dtype, true}});
    int64_t dim = intInput("dim").value_or(-1);
    b_.bind(result(0), emit1(runtimeOp, {{"self", x, false}, {"dim", dim, false}, {"half_to_float", false, false}},
                             *result(0)->meta(), result(0)->name()));
    return llvm::Error::success();
  }

  llvm::Error sdpa() {
    // On CPU the math-free flash kernel serves SDPA (ATen picks it for CPU tensors).
    Value *q = in("query"), *k = in("key"), *v = in("value");
    const Value *out = result(0);
    auto qs = hints(q->meta()->sizes);
    llvm::SmallVector<int64_t, 4> lseSizes(qs.begin(), qs.end() - 1);
    TensorMeta lse = withShape(*q->meta(), lseSizes);
    lse.dtype = ScalarType::Float;
    Value *y = b_.tensor(out->name(), *out->meta());
    Value *logsumexp = b_.tensor(tmp("logsumexp"), lse);
    llvm::SmallVector<NamedArgument, 4> args{{"query", q, false}, {"key", k, false}, {"value", v, false}};
    for (const char *name : {"dropout_p", "is_causal", "attn_mask", "scale"})
      if (const Argument *a = n_->input(name))
        args.push_back({name, b_.map(*a), true});
    b_.emit("aten::_scaled_dot_product_flash_attention_for_cpu.default", std::move(args), {y, logsumexp}, *n_);
    b_.bind(out, y);
    return llvm::Error::success();
  }

  double doubleArg(llvm::StringRef name, double fallback) const {
    const Argument *a = n_->input(name);
    if (a && a->is<double>())
      return a->get<double>();
    if (a && a->is<int64_t>())
      return static_cast<double>(a->get<int64_t>());
    return fallback;
  }
  bool boolArg(llvm::StringRef name, bool fallback) const {
    const Argument *a = n_->input(name);
    return a && a->is<bool>() ? a->get<bool>() : fallback;
  }

  /// SDPA on a cuda mesh (attention.cpp scaled_dot_product_attention): the backend
  /// selectCudaSdpaBackend picks, with the argument preparation ATen's composite does for it.
  llvm::Error sdpaCuda() {
    Value *q = in("query"), *k = in("key"), *v = in("value"), *mask = in("attn_mask");
    const Value *out = result(0);
    SdpaOperands ops;
    ops.query = &*q->meta();
    ops.key = &*k->meta();
    ops.value = &*v->meta();
    ops.mask = mask ? &*mask->meta() : nullptr;
    ops.dropout = doubleArg("dropout_p", 0.0);
    ops.isCausal = boolArg("is_causal", false);
    ops.enableGqa = boolArg("enable_gqa", false);
    // should_compute_logsumexp / input_requires_grad: grad mode on and some input requires grad.
    for (const char *name : {"query", "key", "value"})
      ops.requiresGrad |= n_->gradEnabled() && requiresGrad_.count(n_->input(name)->tensor());
    SdpaSelection sel = selectCudaSdpaBackend(ops, *cuda_);
    const Argument *scaleArg = n_->input("scale");
    Argument scale = scaleArg ? b_.map(*scaleArg) : Argument(NoneArg{});
    const TensorMeta &qm = *q->meta();
    auto qs = hints(qm.sizes);
    int64_t B = qs[0], H = qs[1], L = qs[2], S = hints(k->meta()->sizes)[2];
    auto sideTensor = [&](llvm::StringRef what, ScalarType dtype, llvm::ArrayRef<int64_t> sizes) {
      TensorMeta m = withShape(qm, sizes);
      m.dtype = dtype;
      m.requiresGrad = false;
      return b_.tensor(tmp(what), m);
    };
    switch (sel.backend) {
    case SdpaBackend::Math:
      return makeError("node '{}' in module '{}': scaled_dot_product_attention runs the math backend on CUDA ({}); "
                       "commlens does not model that decomposition yet",
                       n_->name(), n_->scope() ? n_->scope()->displayName() : std::string("Global"), sel.why);
    case SdpaBackend::Flash: {
      // pad_last_dim<8>: head dims padded to a multiple of 8, the output sliced back; the scale is
      // computed from the unpadded head dim and passed explicitly.
      int64_t d = qs[3];
      int64_t pad = d % 8 ? 8 - d % 8 : 0;
      auto padded = [&](Value *x, llvm::StringRef tag) {
        if (!pad)
          return x;
        auto sizes = hints(x->meta()->sizes);
        sizes.back() += pad;
        return emit1("aten::constant_pad_nd.default",
                     {{"self", x, false}, {"pad", IntList{0, pad}, false}, {"value", int64_t{0}, false}},
                     withShape(*x->meta(), sizes), tmp(("pad" + tag).str()));
      };
      Value *qp = padded(q, "_q"), *kp = padded(k, "_k"), *vp = padded(v, "_v");
      double s = scaleArg && scaleArg->is<double>() ? scaleArg->get<double>() : 1.0 / std::sqrt(static_cast<double>(d));
      TensorMeta ym = pad ? withShape(*qp->meta(), hints(qp->meta()->sizes)) : *out->meta();
      Value *y = b_.tensor(pad ? tmp("flash_out") : out->name(), ym);
      Value *lse = sideTensor("logsumexp", ScalarType::Float, {B, H, L});
      Value *seed = sideTensor("philox_seed", ScalarType::UInt64, {2});
      Value *offset = sideTensor("philox_offset", ScalarType::UInt64, {});
      Value *debug = sideTensor("debug_attn_mask", qm.dtype, {0});
      b_.emit("aten::_scaled_dot_product_flash_attention.default",
              {{"query", qp, false}, {"key", kp, false}, {"value", vp, false}, {"dropout_p", ops.dropout, false},
               {"is_causal", ops.isCausal, false}, {"return_debug_mask", false, false}, {"scale", s, true}},
              {y, lse, Argument(NoneArg{}), Argument(NoneArg{}), L, S, seed, offset, debug}, *n_);
      if (pad)
        y = emit1("aten::slice.Tensor",
                  {{"self", y, false}, {"dim", int64_t{-1}, false}, {"start", int64_t{0}, false}, {"end", d, false}},
                  *out->meta(), out->name());
      b_.bind(out, y);
      return llvm::Error::success();
    }
    case SdpaBackend::Efficient:
    case SdpaBackend::Cudnn: {
      bool cudnn = sel.backend == SdpaBackend::Cudnn;
      Argument bias = NoneArg{};
      if (mask) {
        Value *m = mask;
        if (m->meta()->dtype == ScalarType::Bool) {
          // convert_boolean_attn_mask: where(!mask, -inf (cuDNN: -65504), 0.0) in the query's dtype.
          TensorMeta bm = withShape(*m->meta(), hints(m->meta()->sizes));
          Value *inv = unary("aten::logical_not.default", m, bm, tmp("mask_not"));
          TensorMeta zm = withShape(qm, {});
          zm.requiresGrad = false;
          Value *zero = b_.tensor(tmp("mask_zero"), zm);
          b_.emit("aten::scalar_tensor.default", {{"s", 0.0, false}, {"dtype", qm.dtype, true}}, {zero}, *n_);
          TensorMeta fm = bm;
          fm.dtype = qm.dtype;
          m = emit1("aten::where.ScalarSelf",
                    {{"condition", inv, false}, {"self", cudnn ? -65504.0 : -INFINITY, false}, {"other", zero, false}},
                    fm, tmp("mask_bias"));
        }
        if (!cudnn) {
          // preprocess_mask: pad the last dim to a multiple of 8 (then slice back) unless every
          // stride but the last is a multiple of 8 and the last is 1; expand to [B, H, L, S].
          const TensorMeta &mm = *m->meta();
          bool aligned = !mm.strides.empty() && mm.strides.back().hint == 1;
          for (size_t i = 0; i + 1 < mm.strides.size(); ++i)
            aligned = aligned && mm.strides[i].hint % 8 == 0;
          if (!aligned) {
            auto sizes = hints(mm.sizes);
            int64_t last = sizes.back(), padCount = 8 - last % 8;
            auto padSizes = sizes;
            padSizes.back() += padCount;
            Value *pm = emit1("aten::constant_pad_nd.default",
                              {{"self", m, false}, {"pad", IntList{0, padCount}, false}, {"value", int64_t{0}, false}},
                              withShape(mm, padSizes), tmp("mask_pad"));
            auto pst = hints(pm->meta()->strides);
            m = emit1("aten::slice.Tensor",
                      {{"self", pm, false}, {"dim", int64_t{-1}, false}, {"start", int64_t{0}, false}, {"end", last, false}},
                      withShape(mm, sizes, llvm::ArrayRef<int64_t>(pst)), tmp("mask_slice"));
          }
          llvm::SmallVector<int64_t, 4> full{B, H, L, S};
          auto mst = hints(m->meta()->strides);
          auto msz = hints(m->meta()->sizes);
          llvm::SmallVector<int64_t, 4> est(4, 0);
          for (size_t i = 0; i < 4; ++i) {
            int64_t src = static_cast<int64_t>(i) - static_cast<int64_t>(4 - msz.size());
            if (src >= 0 && msz[src] == full[i])
              est[i] = mst[src];
          }
          m = emit1("aten::expand.default", {{"self", m, false}, {"size", IntList(full), false}},
                    withShape(*m->meta(), full, llvm::ArrayRef<int64_t>(est)), tmp("mask_expand"));
        }
        bias = m;
      }
      Value *y = b_.tensor(out->name(), *out->meta());
      if (cudnn) {
        Value *lse = sideTensor("logsumexp", ScalarType::Float, {B, H, L, 1});
        Value *seed = sideTensor("philox_seed", ScalarType::Long, {});
        Value *offset = sideTensor("philox_offset", ScalarType::Long, {});
        b_.emit("aten::_scaled_dot_product_cudnn_attention.default",
                {{"query", q, false}, {"key", k, false}, {"value", v, false}, {"attn_bias", bias, false},
                 {"compute_log_sumexp", ops.requiresGrad, false}, {"dropout_p", ops.dropout, false},
                 {"is_causal", ops.isCausal, false}, {"return_debug_mask", false, false}, {"scale", scale, true}},
                {y, lse, Argument(NoneArg{}), Argument(NoneArg{}), L, S, seed, offset, Argument(NoneArg{})}, *n_);
      } else {
        // Logsumexp rows are padded to a multiple of 32 (empty when not computed).
        Value *lse = sideTensor("logsumexp", ScalarType::Float, {B, H, ops.requiresGrad ? (L + 31) / 32 * 32 : 0});
        Value *seed = sideTensor("philox_seed", ScalarType::Long, {});
        Value *offset = sideTensor("philox_offset", ScalarType::Long, {});
        b_.emit("aten::_scaled_dot_product_efficient_attention.default",
                {{"query", q, false}, {"key", k, false}, {"value", v, false}, {"attn_bias", bias, false},
                 {"compute_log_sumexp", ops.requiresGrad, false}, {"dropout_p", ops.dropout, false},
                 {"is_causal", ops.isCausal, false}, {"scale", scale, true}},
                {y, lse, seed, offset}, *n_);
      }
      b_.bind(out, y);
      return llvm::Error::success();
    }
    }
    return llvm::Error::success();
  }

  GraphBuilder &b_;
  bool keepExported_ = false;
  const CudaTarget *cuda_ = nullptr;
  /// Exported values that require grad at run time (gradLeaves and what grad-enabled ops make
  /// of them), for the kernels whose arguments depend on it.
  llvm::DenseSet<const Value *> requiresGrad_;
  const Node *n_ = nullptr;
};

} // namespace

llvm::Error decomposeToRuntimeOps(ExportedProgram &program, const CudaTarget *cuda,
                                  llvm::DenseSet<const Value *> requiresGrad) {
  GraphBuilder builder(program.graph());
  Decomposer d(builder, cuda, std::move(requiresGrad));
  for (const auto &n : program.graph().nodes())
    if (llvm::Error err = d.rewrite(*n))
      return err;
  program.replaceGraph(builder.finish());
  return llvm::Error::success();
}

} // namespace commlens
