#include "runtime/OpDispatch.h"

#include "autograd/ActivationCheckpoint.h"
#include "dtensor/RedistributePlanner.h"
#include "dtensor/ShardingDecisionCache.h"
#include "dtensor/ShardingRules.h"
#include "fsdp/FullyShard.h"
#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"
#include "runtime/LocalShards.h"

#include <cmath>

namespace commlens {
namespace {

std::optional<Placement> placementArg(const Node &n, llvm::StringRef name) {
  const Argument *a = n.input(name);
  if (!a || !a->is<std::string>())
    return std::nullopt;
  auto p = Placement::parse(a->get<std::string>());
  if (!p) {
    llvm::consumeError(p.takeError());
    return std::nullopt;
  }
  return *p;
}


std::optional<Placements> placementsArg(const Node &n, llvm::StringRef name) {
  const Argument *a = n.input(name);
  if (!a || !a->is<StringList>())
    return std::nullopt;
  Placements out;
  for (const std::string &text : a->get<StringList>()) {
    llvm::StringRef t(text);
    if (t.consume_front("MP(") && t.consume_back(")")) { // MaskPartial (the IR's short form)
      auto inner = Placement::parse(("P(" + t + ")").str());
      if (!inner) {
        llvm::consumeError(inner.takeError());
        return std::nullopt;
      }
      out.push_back(Placement{Placement::Kind::MaskPartial, 0, 1, inner->reduceOp});
      continue;
    }
    auto p = Placement::parse(text);
    if (!p) {
      llvm::consumeError(p.takeError());
      return std::nullopt;
    }
    out.push_back(*p);
  }
  return out;
}

class Propagator {
public:
  Propagator(const ExportedProgram &program, const ShardingPlan *plan, const DispatchOptions &options,
             PredictionState &state, const Graph &graph, Phase phase)
      : plan_(plan), allowUnsupported_(options.allowUnsupported), routingSkew_(options.routingSkew), state_(state),
        graph_(graph), phase_(phase), castReason_(computeCastReason(program, state)) {
    if (&graph == &program.graph())
      localShards_.programInputs(graph);
  }

  llvm::Error run() {
    size_t first = state_.collectives.size();
    for (const auto &n : graph_.nodes()) {
      node_ = n.get();
      if (n->op().ns == "commlens" && !n->boundaryOp())
        return makeError("{}: unknown commlens boundary op (ir/BoundaryOps.def)", n->where());
      llvm::Error err = n->boundaryOp() ? boundary(*n, *n->boundaryOp()) : atenOp(*n);
      if (err)
        return err;
    }
    auto added = llvm::make_range(state_.collectives.begin() + first, state_.collectives.end());
    if (auto unknown = llvm::count_if(added, [](const CollectiveRecord &r) { return !r.bytesKnown; }))
      state_.warnings.push_back(fmt::format("bytes of the {} {} DTensor collectives are unknown: {}", unknown,
                                            phase_ == Phase::Forward ? "forward" : "backward", *castReason_));
    return llvm::Error::success();
  }

private:
  /// The DTensor mesh of the op being dispatched (its DTensor operands', a hook's style's).
  const DeviceMesh &mesh() const { return state_.dtensorMeshes[meshId_].mesh; }

  /// Appends the plan mesh dims of dim `d` of the op's DTensor mesh to `out`.
  void appendPlanDims(unsigned d, llvm::SmallVectorImpl<unsigned> &out) const {
    const MeshDimGroup &dims = state_.dtensorMeshes[meshId_].planDims[d];
    out.append(dims.begin(), dims.end());
  }

  /// Replicates `placements` to the DTensor mesh's rank (one entry per mesh dim).
  Placements onMesh(Placement p) const { return Placements(mesh().ndim(), p); }

  bool approximate(const Value *v) const { return state_.approximate.lookup(v); }

  /// `issuedAs`: the op that issues the collectives where it is not DTensor's own (a c10d call on
  /// the local tensor, such as transformers' in-place dist.all_reduce).
  llvm::Error redistribute(const Value *v, const Placements &from, const Placements &to, const Node &n,
                           llvm::StringRef argument, const std::string &why, bool approx,
                           llvm::StringRef issuedAs = "") {
    auto plan = planRedistribute(mesh(), *v->meta(), from, to);
    if (!plan)
      return makeError("{}: cannot redistribute '{}' from {} to {}: {}", n.where(), argument.str(), str(from), str(to),
                       takeMessage(plan.takeError()));
    auto kept = n.metadata().find(kKeptCollectives);
    for (const RedistributeStep *step : plan->collectives()) {
      if (kept != n.metadata().end() && llvm::is_contained(llvm::split(kept->second, ','), step->opKey()))
        continue; // recomputation reuses the output selective checkpointing kept
      CollectiveRecord r;
      r.opKey = issuedAs.empty() ? step->opKey().str() : issuedAs.str();
      r.phase = phase_;
      r.module = n.scope();
      r.node = &n;
      r.argument = argument.str();
      for (unsigned d : step->meshDims)
        appendPlanDims(d, r.meshDims);
      r.src = step->src;
      r.dst = step->dst;
      r.fromPlacements = normalized(from, v->meta()->rank());
      r.toPlacements = normalized(to, v->meta()->rank());
      r.bytesPerRank = step->inputBytes;
      r.bytesKnown = !castReason_;
      r.why = why;
      r.approximate = approx;
      state_.collectives.push_back(std::move(r));
    }
    return llvm::Error::success();
  }

  /// `v` is a DTensor with placements `p` on the op's mesh.
  void setDTensor(const Value *v, Placements p, bool approx) {
    state_.dtensors[v] = DTensorLayout{normalized(p, v->meta() ? v->meta()->rank() : 0), meshId_};
    if (approx)
      state_.approximate[v] = true;
  }

  /// FSDP's hooks (fsdp/FullyShard.h). The forward ones pass their tensors through unchanged.
  llvm::Error fsdpHook(const Node &n, BoundaryOp op) {
    FsdpRuntime fsdp(state_.fsdp, state_, state_.collectives);
    auto unit = n.input("unit") ? n.input("unit")->asInt() : std::nullopt;
    if (!unit || *unit < 0 || static_cast<size_t>(*unit) >= state_.fsdp.units.size())
      return makeError("{}: no such FSDP unit", n.where());
    if (op == BoundaryOp::FsdpPreForward || op == BoundaryOp::FsdpPostForward) {
      auto in = n.input("inputs")->tensors();
      auto out = n.results();
      for (size_t i = 0; i < in.size() && i < out.size(); ++i) {
        if (const DTensorLayout *l = state_.layout(in[i])) {
          meshId_ = l->mesh; // each tensor on its own mesh
          setDTensor(out[i], l->placements, approximate(in[i]));
        }
        localShards_.passThrough(in[i], out[i]);
      }
      if (op == BoundaryOp::FsdpPreForward)
        fsdp.preForward(*unit, n);
      else
        fsdp.postForward(*unit);
      return llvm::Error::success();
    }
    if (op == BoundaryOp::FsdpPreBackward) {
      fsdp.preBackward(*unit, n);
      return llvm::Error::success();
    }
    // fsdp_post_backward:
    // FSDPParam.unsharded_grad_data: a DTensor gradient goes to its parameter's placements first
    // (only read when the unit reduces its gradients).
    auto grads = n.input("grads")->tensors();
    auto params = n.input("params")->tensors();
    llvm::SmallVector<const Value *, 8> received(params.begin(), params.end());
    for (size_t i = 0; fsdp.reducesGradients(*unit) && i < grads.size() && i < params.size(); ++i) {
      const DTensorLayout *g = state_.layout(grads[i]), *p = state_.layout(params[i]);
      if (!g || !p)
        continue;
      if (g->mesh != p->mesh)
        return makeError("{}: the gradient of {} is a DTensor on {}, the parameter one on {} (FSDP's post-backward "
                         "would raise)",
                         n.where(), params[i]->name(), state_.dtensorMeshes[g->mesh].mesh.str(),
                         state_.dtensorMeshes[p->mesh].mesh.str());
      meshId_ = g->mesh;
      int64_t rank = grads[i]->meta()->rank();
      Placements have = normalized(g->placements, rank), want = normalized(p->placements, rank);
      if (have == want)
        continue;
      std::string why = fmt::format("FSDP post-backward of {} redistributes the gradient of {} from {} to {}",
                                    state_.fsdp.units[*unit].label(), params[i]->name(), str(have),
                                    str(want));
      if (llvm::Error err = redistribute(grads[i], have, want, n, grads[i]->name(), why, approximate(grads[i])))
        return err;
    }
    fsdp.reduceGradients(*unit, n, received);
    return llvm::Error::success();
  }

  /// The plan's boundary ops: what the styles' hooks do at module entry and exit.
  llvm::Error boundary(const Node &n, BoundaryOp op) {
    switch (op) {
    case BoundaryOp::FsdpPreForward:
    case BoundaryOp::FsdpPostForward:
    case BoundaryOp::FsdpPreBackward:
    case BoundaryOp::FsdpPostBackward:
      return fsdpHook(n, op);
    default:
      break;
    }
    if (state_.dtensorMeshes.empty())
      return makeError("{}: a plan boundary op, but no plan gave DTensors a mesh (the apply-plan pass did not run)",
                       n.where());
    const Value *x = n.input("self")->tensor();
    const Value *out = n.results()[0];
    const DTensorLayout *in = state_.layout(x);
    bool approx = approximate(x);
    // A DTensor keeps its mesh (redistribute, to_local); from_local and the hooks' own collectives
    // run on their style's (the op's `mesh`, the first mesh where it has none).
    meshId_ = 0;
    if (in)
      meshId_ = in->mesh;
    else if (const Argument *mesh = n.input("mesh")) {
      std::optional<int64_t> id = mesh->asInt();
      if (!id || *id < 0 || static_cast<size_t>(*id) >= state_.dtensorMeshes.size())
        return makeError("{}: mesh {} is not one of the plan's {} DTensor meshes", n.where(),
                         id ? std::to_string(*id) : std::string("(not an int)"), state_.dtensorMeshes.size());
      meshId_ = static_cast<MeshId>(*id);
    }
    std::string module = n.input("module") ? n.input("module")->get<std::string>() : n.moduleName();
    auto step = [&](BoundaryStep::Kind kind, Placements from, Placements to) {
      state_.boundarySteps[&n].push_back(BoundaryStep{kind, std::move(from), std::move(to), meshId_});
    };
    // DTensor.to_local of a DTensor with `placements` (a shard LocalShards follows), its gradient
    // taken as `grad` (none: the default gradient placements).
    auto toLocal = [&](const Placements &placements, const std::optional<Placement> &grad) {
      Placements local = normalized(placements, x->meta()->rank());
      step(BoundaryStep::Kind::ToLocal, local,
           grad ? normalized(onMesh(*grad), x->meta()->rank()) : gradientPlacements(local));
      localShards_.toLocal(out, local, meshId_);
    };
    // A hook's result: a DTensor, or its local tensor with use_local_output.
    auto handBack = [&](const Placements &result) {
      if (n.boolInput("use_local_output"))
        toLocal(result, std::nullopt);
      else
        setDTensor(out, result, approx);
    };
    // A hook's redistribute: its collectives, and the step its backward replays.
    auto redistributeStep = [&](const Placements &from, const Placements &to, const std::string &why) -> llvm::Error {
      if (llvm::Error err = redistribute(x, from, to, n, x->name(), why, approx))
        return err;
      step(BoundaryStep::Kind::Redistribute, normalized(from, x->meta()->rank()), normalized(to, x->meta()->rank()));
      return llvm::Error::success();
    };
    switch (op) {
    case BoundaryOp::LossTargets: { // from_local(targets, Replicate) when the logits are a DTensor
      if (const DTensorLayout *logits = state_.layout(n.input("logits")->tensor())) {
        meshId_ = logits->mesh; // on the logits' mesh
        setDTensor(out, onMesh(Placement::replicate()), approx);
      }
      return llvm::Error::success();
    }
    case BoundaryOp::FromLocalBackward:
    case BoundaryOp::ToLocalBackward:
    case BoundaryOp::RedistributeBackward:
      return boundaryBackward(n, op, x, out, in, approx);
    case BoundaryOp::Annotate: {
      std::optional<Placement> layout = placementArg(n, "layout"), desired = placementArg(n, "desired");
      Placements current = in ? in->placements : onMesh(*layout);
      if (!in) {
        if (llvm::Error err = localShards_.fromLocal(n, x, current, meshId_))
          return err;
        step(BoundaryStep::Kind::FromLocal, {}, normalized(current, x->meta()->rank()));
      }
      Placements result = current;
      if (desired && !(layout == desired)) { // torch compares the layouts unnormalised
        if (auto refusal = userRedistributeRefusal(current, onMesh(*desired), x->meta()->rank()))
          return makeError("{}: {}", n.where(), *refusal);
        std::string why = fmt::format("{} redistributes {} from {} to {}", module, x->name(), str(current),
                                      str(onMesh(*desired)));
        if (llvm::Error err = redistributeStep(current, onMesh(*desired), why))
          return err;
        result = onMesh(*desired);
      }
      handBack(result);
      return llvm::Error::success();
    }
    case BoundaryOp::ToLocal: { // DTensor.to_local(grad_placements=...)
      if (!in)
        return makeError("{}: to_local of {}, which is not a DTensor here", n.where(), x->name());
      toLocal(in->placements, placementArg(n, "grad_placement"));
      return llvm::Error::success();
    }
    case BoundaryOp::SequenceParallelInput: {
      Placement sharding = *placementArg(n, "sharding");
      Placements target = normalized(onMesh(sharding), x->meta()->rank());
      if (!in) {
        if (llvm::Error err = localShards_.fromLocal(n, x, target, meshId_))
          return err;
        step(BoundaryStep::Kind::FromLocal, {}, target);
        setDTensor(out, onMesh(sharding), approx);
        return llvm::Error::success();
      }
      if (in->placements != onMesh(sharding)) {
        std::string why = fmt::format("SequenceParallel on {} redistributes {} from {} to {}", module, x->name(),
                                      str(in->placements), str(target));
        if (llvm::Error err = redistributeStep(in->placements, target, why))
          return err;
        setDTensor(out, target, approx);
      } else {
        setDTensor(out, in->placements, approx);
      }
      return llvm::Error::success();
    }
    case BoundaryOp::RedistributeOutput: {
      if (!in)
        return makeError("{}: the output of {} is not a DTensor (the style's output hook would fail)", n.where(), module);
      Placements result = in->placements;
      if (std::optional<Placement> layout = placementArg(n, "layout"); layout && in->placements != onMesh(*layout)) {
        std::string why = fmt::format("{} redistributes its output {} from {} to {}", module, x->name(),
                                      str(in->placements), str(onMesh(*layout)));
        if (llvm::Error err = redistributeStep(in->placements, onMesh(*layout), why))
          return err;
        result = onMesh(*layout);
      }
      handBack(result);
      return llvm::Error::success();
    }
    case BoundaryOp::GradAllReduce: {
      // dist.all_reduce(param.grad) over the styles' mesh: a plain gradient's bytes, charged where
      // the gradient accumulated.
      if (in)
        return makeError("{}: the gradient of {} is a DTensor ({}), which {}'s gradient all-reduce hook does not "
                         "expect", n.where(), n.input("param")->tensor()->name(), str(in->placements), module);
      recordPlainAllReduce(n, x,
                           fmt::format("{}'s hook all-reduces the gradient of {} (dist.all_reduce on param.grad)",
                                       module, n.input("param")->tensor()->name()),
                           approx);
      return llvm::Error::success();
    }
    case BoundaryOp::AllReduceLocal: {
      // The local tensor of a Partial DTensor summed in place by c10d: DTensor's Partial ->
      // Replicate all-reduce, issued as c10d.allreduce_ on the same bytes; the sum comes back plain.
      if (!in || llvm::none_of(in->placements, [](const Placement &p) { return p.isPartial(); }))
        return makeError("{}: the output of {} is not a partial sum ({}), which its row-wise layer all-reduces",
                         n.where(), module, in ? str(in->placements) : "a plain tensor");
      Placements summed = in->placements;
      for (Placement &p : summed)
        if (p.isPartial())
          p = Placement::replicate();
      std::string why = fmt::format("{} all-reduces its local output {} in place (dist.all_reduce, no grad)", module,
                                    x->name());
      if (llvm::Error err = redistribute(x, in->placements, summed, n, x->name(), why, approx, "c10d.allreduce_"))
        return err;
      localShards_.toLocal(out, normalized(summed, x->meta()->rank()), meshId_);
      return llvm::Error::success();
    }
    case BoundaryOp::AllReduceSum: {
      // transformers' _AllReduceForward (and _AllReduceBackward's backward): dist.all_reduce in
      // place of a plain tensor each rank holds whole-sized, its partial sums (c10d.allreduce_).
      if (in)
        return makeError("{}: {} hands dist.all_reduce a DTensor ({}); transformers' all-reduce expects the plain "
                         "tensor of its partial sums",
                         n.where(), module, str(in->placements));
      recordPlainAllReduce(n, x,
                           fmt::format("{} {} (dist.all_reduce in place of {})", module,
                                       n.input("what")->get<std::string>(), x->name()),
                           approx);
      localShards_.toLocal(out, onMesh(Placement::replicate()), meshId_); // the sum: whole on every rank
      return llvm::Error::success();
    }
    case BoundaryOp::AllReduceInBackward: {
      // transformers' _AllReduceBackward: the tensor itself in forward (the plain tensor its input
      // hook takes), its gradient summed over the mesh dim in backward.
      if (in)
        return makeError("{}: {} takes a DTensor ({}) through its backward all-reduce; commlens models it on the "
                         "plain tensors transformers' local layers hand on",
                         n.where(), module, str(in->placements));
      localShards_.passThrough(x, out);
      if (n.gradEnabled())
        step(BoundaryStep::Kind::AllReduceGradient, {}, {});
      return llvm::Error::success();
    }
    case BoundaryOp::AllToAll:
      return allToAll(n, x, in, module, approx);
    case BoundaryOp::AllToAllCounts: {
      // dist.all_to_all_single of one int64 count per expert, outside autograd: its bytes are the
      // counts', whatever the routing (the tensor it is computed from is not sent).
      int64_t experts = *n.input("experts")->asInt();
      recordCollective(n, x, "c10d.alltoall_base_", 0, Placement::shard(0), Placement::shard(0), {Placement::shard(0)},
                       {Placement::shard(0)}, experts * static_cast<int64_t>(sizeof(int64_t)),
                       fmt::format("{} {} (dist.all_to_all_single of {} int64 counts, from {})", module,
                                   n.input("what")->get<std::string>(), experts, x->name()))
          .approximate = approx;
      return llvm::Error::success();
    }
    default: // the FSDP hooks, above
      return makeError("{}: not a style or loss boundary op", n.where());
    }
  }

  /// `dist.all_reduce` in place of a plain tensor over the styles' mesh dim, outside DTensor
  /// (c10d.allreduce_ of its bytes): the ranks' partial values summed.
  void recordPlainAllReduce(const Node &n, const Value *x, std::string why, bool approx) {
    recordCollective(n, x, "c10d.allreduce_", 0, Placement::partial(), Placement::replicate(), {Placement::partial()},
                     {Placement::replicate()}, x->meta()->nbytes(), std::move(why))
        .approximate = approx;
  }

  /// An expert-parallel style's all_to_all_single over the styles' mesh dim: each rank sends its
  /// plain tensor's rows, split by destination, and gets back what the others send it. Where the
  /// sent rows are routed tokens their number depends on the routing: the program's rows are the
  /// balanced value, and a rank sends from none to all of the group's tokens (the group's size
  /// times the program's rows). Its result is a plain tensor of another origin (LocalShards does
  /// not follow it); all_to_all_single_autograd records the step its backward replays.
  llvm::Error allToAll(const Node &n, const Value *x, const DTensorLayout *in, const std::string &module,
                       bool approx) {
    if (in)
      return makeError("{}: {} hands all_to_all_single a DTensor ({}), which expects the plain tensor of its "
                       "tokens",
                       n.where(), module, str(in->placements));
    // the rows sent, of x's row size (x's own rows, or each token once per top-k expert)
    int64_t rows = *n.input("rows")->asInt();
    int64_t xRows = rowsOf(*x->meta());
    int64_t rowBytes = xRows ? x->meta()->nbytes() / xRows : 0;
    CollectiveRecord &r = recordCollective(
        n, x, "c10d_functional.all_to_all_single", 0, Placement::shard(0), Placement::shard(0), {Placement::shard(0)},
        {Placement::shard(0)}, rows * rowBytes,
        fmt::format("{} {} (all_to_all_single{} of {}{})", module, n.input("what")->get<std::string>(),
                    n.boolInput("autograd") ? "_autograd" : "", x->name(),
                    rows == xRows ? "" : fmt::format(", {} rows of its row size", rows)));
    r.approximate = approx;
    if (n.boolInput("sends_routed")) { // from no row to all of the styles' sub-mesh's
      r.bytesRange = std::make_pair(int64_t{0}, mesh().size() * r.bytesPerRank);
      // The busiest rank under the routing model: the skew times the balanced rows, whole rows.
      if (routingSkew_ != 1.0 && rows > 0) {
        // compared as doubles: a skew past the group's size (1e300 included) is every row of it
        int64_t groupRows = mesh().size() * rows;
        double wanted = std::ceil(routingSkew_ * static_cast<double>(rows));
        int64_t skewed = wanted >= static_cast<double>(groupRows) ? groupRows : static_cast<int64_t>(wanted);
        r.bytesPerRank = r.bytesPerRank / rows * skewed;
        r.routingSkew = routingSkew_;
      }
    }
    if (n.boolInput("autograd") && n.gradEnabled())
      state_.boundarySteps[&n].push_back(BoundaryStep{BoundaryStep::Kind::AllToAll, {}, {}, meshId_});
    return llvm::Error::success();
  }

  /// The backward of the boundary steps (DTensor's autograd Functions, torch 2.13 `_api.py`,
  /// `_redistribute.py`), placements given as a list argument `placements`:
  ///   from_local_backward: the grad is redistributed to the from_local placements with Partial
  ///     normalised to Replicate, then handed back as a plain tensor;
  ///   to_local_backward: the plain grad is wrapped (from_local) with `placements`, the
  ///     gradient's (to_local's grad_placements, by default the forward's with Partial as Replicate);
  ///   redistribute_backward: the grad goes back to the forward source placements, except that
  ///     a Partial source with a Shard/Replicate grad stays Replicate.
  llvm::Error boundaryBackward(const Node &n, BoundaryOp op, const Value *x, const Value *out,
                               const DTensorLayout *in, bool approx) {
    std::optional<Placements> placements = placementsArg(n, "placements");
    if (!placements)
      return makeError("{}: missing placements", n.where());
    int64_t rank = x->meta()->rank();
    if (op == BoundaryOp::ToLocalBackward) {
      Placements target = normalized(*placements, rank);
      if (in) { // already a DTensor (not expected): keep it
        setDTensor(out, in->placements, approx);
        return llvm::Error::success();
      }
      setDTensor(out, target, approx);
      return llvm::Error::success();
    }
    if (!in)
      return llvm::Error::success(); // a plain gradient: nothing to redistribute
    Placements have = normalized(in->placements, rank);
    Placements target = op == BoundaryOp::FromLocalBackward ? gradientPlacements(normalized(*placements, rank))
                                                    : redistributeBackwardTarget(have, normalized(*placements, rank));
    std::string module = n.input("module") ? n.input("module")->get<std::string>() : n.moduleName();
    if (have != target) {
      std::string why = fmt::format("{} backward of {}: gradient {} from {} to {}",
                                    op == BoundaryOp::FromLocalBackward ? "from_local" : "redistribute", module, x->name(),
                                    str(have), str(target));
      if (llvm::Error err = redistribute(x, have, target, n, x->name(), why, approx))
        return err;
    }
    if (op == BoundaryOp::RedistributeBackward)
      setDTensor(out, target, approx);
    return llvm::Error::success();
  }

  llvm::Error atenOp(const Node &n) {
    llvm::SmallVector<const Value *, 4> tensors;
    llvm::SmallVector<std::optional<DTensorSpec>, 4> specs;
    const Value *first = nullptr, *otherMesh = nullptr; // the first DTensor operand, one on another mesh
    MeshId firstMesh = 0;
    bool approx = false;
    n.forEachOperand([&](Value *v) {
      if (v->kind() != ValueKind::Tensor)
        return;
      tensors.push_back(v);
      if (const DTensorLayout *l = state_.layout(v)) {
        specs.push_back(DTensorSpec{l->placements, *v->meta()});
        if (!first) {
          first = v;
          firstMesh = l->mesh;
        } else if (l->mesh != firstMesh && !otherMesh) {
          otherMesh = v;
        }
        approx |= approximate(v);
      } else {
        specs.push_back(std::nullopt);
      }
    });
    if (!first) // plain tensors: no DTensor dispatch, no communication
      return localShards_.plainOp(n);
    meshId_ = firstMesh;
    if (otherMesh) // DTensor's sharding propagation (torch 2.13 _op_schema.py, _ops/single_dim_strategy.py)
      return makeError("{}: '{}' is a DTensor on {} and '{}' one on {}; DTensor raises (the operands of an op must "
                       "share one device mesh)",
                       n.where(), first->name(), mesh().str(), otherMesh->name(),
                       state_.dtensorMeshes[state_.layout(otherMesh)->mesh].mesh.str());
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!specs[i] && tensors[i]->meta() && tensors[i]->meta()->numel() != 1)
        return makeError("{}: mixes DTensor and plain torch.Tensor operands ('{}' is a plain tensor); DTensor "
                         "would raise here",
                         n.where(), tensors[i]->name());
    if (plan_ && plan_->lossParallel && isLossParallelOp(n.opString()))
      return lossParallelOp(n, tensors, specs);
    if (isArgMinMax(n.opString()))
      return argMinMaxOp(n, tensors[0], specs, approx);
    const ShardingRules &rules = ShardingRules::get();
    if (!rules.supports(n.opString())) {
      if (!allowUnsupported_)
        return makeError("unsupported op {} at node '{}' in {} (no DTensor sharding rule in commlens)", n.opString(),
                         n.name(), n.moduleName());
      return replicateUnsupported(n, tensors, specs);
    }
    bool convolution = isConvolution(n.opString());
    if (n.opString() == "aten::convolution_backward.default" && specs.size() >= 2 && specs[0] && specs[1]) {
      // convolution_backward_handler redistributes grad_output to the input's placements first.
      Placements have = normalized(specs[0]->placements, tensors[0]->meta()->rank());
      Placements want = normalized(specs[1]->placements, tensors[0]->meta()->rank());
      if (have != want) {
        std::string why = fmt::format("{} takes grad_output {} as the input's placements {} "
                                      "(convolution_backward_handler)",
                                      n.opString(), tensors[0]->name(), str(want));
        if (llvm::Error err = redistribute(tensors[0], have, want, n, "grad_output", why, approx))
          return err;
        specs[0]->placements = want;
      }
    }
    auto decided = decisions_.decide(rules, n, specs, mesh());
    if (!decided) {
      std::string msg = takeMessage(decided.takeError());
      if (!allowUnsupported_)
        return makeError("{}: {}", n.where(), msg);
      return replicateUnsupported(n, tensors, specs);
    }
    const ShardingDecision *decision = *decided;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!specs[i] || i >= decision->operandPlacements.size() || !decision->operandPlacements[i])
        continue;
      Placements want = normalized(*decision->operandPlacements[i], tensors[i]->meta()->rank());
      Placements have = normalized(specs[i]->placements, tensors[i]->meta()->rank());
      if (want == have)
        continue;
      if (convolution)
        return makeError("{}: DTensor's convolution handler (torch 2.13 _tp_conv.py) runs the local kernel on the "
                         "shards as they are, without redistributing '{}' from {} to {} as the strategy asks: not "
                         "modelled",
                         n.where(), operandName(n, tensors[i]), str(have), str(want));
      std::string why = fmt::format("{} needs {} as {} (has {}): {}", n.opString(), tensors[i]->name(), str(want),
                                    str(have), decision->why);
      if (llvm::Error err = redistribute(tensors[i], have, want, n, operandName(n, tensors[i]), why, approx))
        return err;
    }
    auto results = n.results();
    for (size_t i = 0; i < results.size() && i < decision->resultPlacements.size(); ++i)
      if (decision->resultPlacements[i] && results[i]->kind() == ValueKind::Tensor)
        setDTensor(results[i], *decision->resultPlacements[i], approx);
    return llvm::Error::success();
  }

  /// A collective a handler or hook issues itself (not a redistribution's step): `meshDim` of the
  /// DTensor mesh, `bytes` handed to it on one rank. Returns the record for what else it marks.
  CollectiveRecord &recordCollective(const Node &n, const Value *x, llvm::StringRef opKey, unsigned meshDim, Placement src,
                        Placement dst, const Placements &from, const Placements &to, int64_t bytes, std::string why) {
    CollectiveRecord r;
    r.opKey = opKey.str();
    r.phase = phase_;
    r.module = n.scope();
    r.node = &n;
    r.argument = x->name();
    appendPlanDims(meshDim, r.meshDims);
    r.src = src;
    r.dst = dst;
    r.fromPlacements = from;
    r.toPlacements = to;
    r.bytesPerRank = bytes;
    r.bytesKnown = !castReason_;
    r.why = std::move(why);
    state_.collectives.push_back(std::move(r));
    return state_.collectives.back();
  }

  /// convolution and its backward run DTensor's custom handlers (torch 2.13 `_tp_conv.py`): the
  /// strategy gives the output placements, the kernel runs on the local shards unredistributed
  /// (only the backward's grad_output is redistributed, to the input's placements).
  static bool isConvolution(llvm::StringRef op) {
    return op == "aten::convolution.default" || op == "aten::convolution_backward.default";
  }

  static bool isArgMinMax(llvm::StringRef op) { return op == "aten::argmax.default" || op == "aten::argmin.default"; }

  /// argmax / argmin run DTensor's custom handler (torch 2.13 `_nonlinear_redux.py`,
  /// argminmax_handler), not their strategy's redistributions: Partials are replicated first; each
  /// rank reduces its shard to values and indices (the reduced dim kept; a [1] tensor when every
  /// dim is reduced); then, for each mesh dim sharding the reduced dim (any Shard when every dim is
  /// reduced), values and global indices are all-gathered along it (all_gather_single: one
  /// all_gather_into_tensor each), growing by that mesh dim's size. The result takes the placements
  /// the op's strategy gives.
  llvm::Error argMinMaxOp(const Node &n, const Value *x, llvm::ArrayRef<std::optional<DTensorSpec>> specs,
                          bool approx) {
    int64_t rank = x->meta()->rank();
    Placements have = normalized(specs[0]->placements, rank), local = have;
    for (Placement &p : local) {
      if (p.kind == Placement::Kind::StridedShard)
        return makeError("{}: a _StridedShard input (DTensor raises: {} does not support _StridedShard)", n.where(),
                         n.opString());
      if (p.isPartial())
        p = Placement::replicate();
    }
    if (local != have) {
      std::string why = fmt::format("{} replicates the Partial input {} (argminmax_handler)", n.opString(), x->name());
      if (llvm::Error err = redistribute(x, have, local, n, "self", why, approx))
        return err;
    }
    std::optional<int64_t> dim = n.input("dim") ? n.input("dim")->asInt() : std::nullopt;
    if (dim && *dim < 0)
      *dim += rank;
    llvm::SmallVector<int64_t, 4> gathered{1};
    if (dim) {
      gathered = localShape(sizesOf(*x->meta()), local, mesh(), llvm::SmallVector<int64_t, 2>(mesh().ndim(), 0));
      gathered[*dim] = 1;
    }
    unsigned gatherDim = dim ? static_cast<unsigned>(*dim) : 0;
    for (unsigned m = 0; m < local.size(); ++m) {
      if (!local[m].isShard() || (dim && local[m].dim != *dim))
        continue;
      for (auto [what, dtype] : {std::pair{"values", x->meta()->dtype}, std::pair{"indices", ScalarType::Long}})
        recordCollective(n, x, "c10d_functional.all_gather_into_tensor", m, local[m], Placement::replicate(), local,
                         local, numelOf(gathered) * elementSize(dtype),
                         fmt::format("{} all-gathers the {} of each shard's reduction along mesh dim {}",
                                     n.opString(), what, m));
      gathered[gatherDim] *= mesh().shape[m];
    }
    auto decided = decisions_.decide(ShardingRules::get(), n, specs, mesh());
    if (!decided)
      return makeError("{}: {}", n.where(), takeMessage(decided.takeError()));
    for (size_t i = 0; i < n.results().size() && i < (*decided)->resultPlacements.size(); ++i)
      if ((*decided)->resultPlacements[i])
        setDTensor(n.results()[i], *(*decided)->resultPlacements[i], approx);
    return llvm::Error::success();
  }

  static bool isLossParallelOp(llvm::StringRef op) {
    return op == "aten::_log_softmax.default" || op == "aten::_log_softmax_backward_data.default" ||
           op == "aten::nll_loss_forward.default" || op == "aten::nll_loss_backward.default";
  }

  /// Inside loss_parallel() these ops run DTensor's custom handlers (torch 2.13
  /// `parallel/loss.py`) on class-dim-sharded logits: _log_softmax all-reduces the row max (MAX)
  /// and the sum of exponentials (SUM); nll_loss_forward all-reduces the MaskPartial gather of
  /// the target logits (SUM); their backwards (log_softmax's only casts, nll_loss's is fused with
  /// it) communicate nothing. Outputs keep the logits' placements; the loss is replicated on the
  /// class dim's mesh dim, Partial on other Shard dims.
  llvm::Error lossParallelOp(const Node &n, llvm::ArrayRef<const Value *> tensors,
                             llvm::ArrayRef<std::optional<DTensorSpec>> specs) {
    llvm::StringRef op = n.opString();
    bool backward = op.endswith("_backward_data.default") || op == "aten::nll_loss_backward.default";
    unsigned xIdx = op == "aten::_log_softmax.default" || op == "aten::nll_loss_forward.default" ? 0 : 1;
    if (op == "aten::_log_softmax_backward_data.default")
      xIdx = 0;
    if (xIdx >= specs.size() || !specs[xIdx])
      return makeError("{}: loss_parallel expects DTensor logits", n.where());
    const Value *x = tensors[xIdx];
    Placements xp = normalized(specs[xIdx]->placements, x->meta()->rank());
    int64_t channel = x->meta()->rank() >= 2 ? 1 : 0;
    if (op == "aten::_log_softmax.default")
      if (const Argument *d = n.input("dim"); d && d->asInt())
        channel = *d->asInt() < 0 ? *d->asInt() + x->meta()->rank() : *d->asInt();
    std::optional<unsigned> meshDim;
    for (unsigned i = 0; i < xp.size(); ++i)
      if (xp[i].isShard(channel))
        meshDim = i;
    if (!meshDim)
      return makeError("{}: loss_parallel needs the logits sharded on the class dim {}, got {}", n.where(), channel,
                       str(xp));
    auto allReduce = [&](const char *what, int64_t bytes) {
      recordCollective(n, x, "c10d_functional.all_reduce", *meshDim, Placement::partial(), Placement::replicate(), xp,
                       xp, bytes, fmt::format("loss_parallel {}: {}", op.str(), what));
    };
    int64_t rows = x->meta()->numel() / std::max<int64_t>(1, x->meta()->sizes[channel].hint);
    if (op == "aten::_log_softmax.default") {
      // _log_softmax upcasts to utils.elementwise_dtypes' computation dtype before both reductions
      // (float32 for half and bfloat16 logits); the result goes back to the logits' dtype.
      ScalarType dtype = x->meta()->dtype;
      int64_t elem = elementSize(dtype == ScalarType::Half || dtype == ScalarType::BFloat16 ? ScalarType::Float
                                                                                            : dtype);
      allReduce("MAX of the row max", rows * elem);
      allReduce("SUM of the sum of exponentials", rows * elem);
    } else if (op == "aten::nll_loss_forward.default") {
      allReduce("SUM of the MaskPartial gather of the target logits", rows * elementSize(x->meta()->dtype));
    }
    (void)backward;
    auto results = n.results();
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i]->kind() != ValueKind::Tensor)
        continue;
      if (op == "aten::nll_loss_forward.default") {
        Placements out;
        for (unsigned k = 0; k < xp.size(); ++k)
          out.push_back(k == *meshDim ? Placement::replicate()
                                      : xp[k].isShard() ? Placement::partial() : xp[k]);
        setDTensor(results[i], out, false);
      } else {
        setDTensor(results[i], xp, false);
      }
    }
    return llvm::Error::success();
  }

  /// --allow-unsupported: the op's DTensor operands are replicated first and its results are
  /// replicated; every count from here on that depends on them is approximate.
  llvm::Error replicateUnsupported(const Node &n, llvm::ArrayRef<const Value *> tensors,
                                   llvm::ArrayRef<std::optional<DTensorSpec>> specs) {
    state_.warnings.push_back(fmt::format("unsupported op {} at node '{}' in {}: operands replicated, counts "
                                          "that depend on it are approximate",
                                          n.opString(), n.name(), n.moduleName()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!specs[i] || specs[i]->placements == onMesh(Placement::replicate()))
        continue;
      if (llvm::Error err = redistribute(tensors[i], specs[i]->placements, onMesh(Placement::replicate()), n,
                                         operandName(n, tensors[i]), "replicated for an unsupported op", true))
        return err;
    }
    for (Value *r : n.results())
      if (r->kind() == ValueKind::Tensor)
        setDTensor(r, onMesh(Placement::replicate()), true);
    return llvm::Error::success();
  }

  static std::string operandName(const Node &n, const Value *v) {
    for (const NamedArgument &a : n.inputs())
      for (Value *t : a.value.tensors())
        if (t == v)
          return a.name.empty() ? v->name() : a.name;
    return v->name();
  }

  const ShardingPlan *plan_;
  const bool allowUnsupported_;
  const double routingSkew_; // DispatchOptions::routingSkew
  /// Why the run computes in another dtype than the program records, if it does (then the DTensor
  /// collectives' bytes are unknown: commlens does not re-type activations, since export bakes
  /// trace-time dtypes into casts). A program exported under the plan's FSDP MixedPrecisionPolicy
  /// (commlens.export --plan) already holds the run-time dtypes. FSDP leaves non-floating
  /// parameters uncast.
  static std::optional<std::string> computeCastReason(const ExportedProgram &program, const PredictionState &state) {
    for (const FsdpUnit &u : state.fsdp.units) {
      if (!u.spec->paramDtype)
        continue;
      for (const Value *p : u.params)
        if (p->meta() && isFloating(p->meta()->dtype) && p->meta()->dtype != *u.spec->paramDtype)
          return fmt::format("FSDP unit '{}' ({}) computes in {} under its MixedPrecisionPolicy, but the program "
                             "holds parameter '{}' in {} (export with the plan, `python -m commlens.export ... "
                             "--plan PLAN`, to record the run-time dtypes)",
                             u.spec->pattern, u.label(), torchName(*u.spec->paramDtype),
                             parameterFqn(program.graph(), p), torchName(p->meta()->dtype));
    }
    if (program.autocastRegions)
      return std::string("a torch.autocast region runs the compute in another dtype than the program records");
    return std::nullopt;
  }
  static std::string parameterFqn(const Graph &g, const Value *p) {
    for (const InputSpec &in : g.inputs())
      if (in.value == p)
        return in.target;
    return p->name();
  }
  PredictionState &state_;
  MeshId meshId_ = 0; // mesh()'s index
  const Graph &graph_;
  Phase phase_;
  const std::optional<std::string> castReason_;
  ShardingDecisionCache decisions_; // repeated layers ask the same questions
  LocalShards localShards_{state_.dtensorMeshes, decisions_};
  const Node *node_ = nullptr;
};

} // namespace

llvm::Error setRoutingSkew(DispatchOptions &options, double skew) {
  if (!std::isfinite(skew) || skew < 1)
    return makeError("the routing skew needs a number of at least 1 (the busiest expert-parallel rank's routed rows "
                     "over the balanced number), got {}",
                     skew);
  options.routingSkew = skew;
  return llvm::Error::success();
}

llvm::Error dispatchRuntimeOps(const ExportedProgram &program, const ShardingPlan *plan, const Graph &graph, Phase phase,
                               const DispatchOptions &options, PredictionState &state) {
  return Propagator(program, plan, options, state, graph, phase).run();
}

} // namespace commlens
