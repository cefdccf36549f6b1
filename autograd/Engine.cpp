#include "autograd/Engine.h"

#include "autograd/ActivationCheckpoint.h"
#include "autograd/Derivatives.h"
#include "ir/Error.h"
#include "ir/GraphBuilder.h"
#include "ir/ModuleCalls.h"
#include "ir/TensorMetaUtils.h"

#include "llvm/ADT/DenseSet.h"

#include <map>
#include <numeric>
#include <queue>

namespace commlens {

llvm::DenseSet<const Value *> gradLeaves(const Graph &g, const ShardingPlan &plan,
                                         const llvm::DenseSet<const Value *> *retrained) {
  llvm::DenseSet<const Value *> leaves;
  for (const InputSpec &in : g.inputs()) {
    if (!in.value || !in.value->meta() || !isFloating(in.value->meta()->dtype))
      continue;
    if (in.kind == InputKind::Parameter) {
      bool frozen = false;
      for (const std::string &p : plan.frozen)
        frozen |= matchesGlob(p, in.target) || (!in.aliasOf.empty() && matchesGlob(p, in.aliasOf));
      frozen &= !(retrained && retrained->count(in.value));
      for (const std::string &p : plan.frozenAfterParallelize)
        frozen |= matchesGlob(p, in.target) || (!in.aliasOf.empty() && matchesGlob(p, in.aliasOf));
      if (!frozen)
        leaves.insert(in.value);
    } else if (in.kind == InputKind::UserInput) {
      for (const InputSetting &s : plan.inputs)
        if (s.requiresGrad) {
          std::optional<Argument> input = g.userInput(s.key);
          if (input && input->isTensor() && input->tensor() == in.value)
            leaves.insert(in.value);
        }
    }
  }
  return leaves;
}

llvm::DenseSet<const Value *> valuesRequiringGrad(const Graph &g, const ShardingPlan &plan,
                                                  const llvm::DenseSet<const Value *> *retrained) {
  llvm::DenseSet<const Value *> requiresGrad = gradLeaves(g, plan, retrained);
  for (const auto &n : g.nodes())
    if (n->gradEnabled() && llvm::any_of(n->operands(), [&](Value *v) { return requiresGrad.count(v); }))
      for (Value *r : n->results())
        if (r->meta() && isFloating(r->meta()->dtype))
          requiresGrad.insert(r);
  return requiresGrad;
}

namespace {


StringList placementsList(const Placements &p) {
  StringList out;
  for (const Placement &x : p)
    out.push_back(x.str());
  return out;
}

// ------------------------------------------------------------------------------------------------
// loss
// ------------------------------------------------------------------------------------------------

class LossBuilder {
public:
  LossBuilder(Graph &forward, const ShardingPlan &plan, PredictionState &state) : plan_(plan), state_(state), g_(forward) {}

  llvm::Error run() {
    std::vector<Value *> outs;
    for (const OutputSpec &o : g_.outputs())
      if (o.kind == OutputKind::UserOutput)
        for (Value *v : o.value.tensors())
          if (v && v->meta())
            outs.push_back(v);
    if (outs.empty())
      return makeError("the model output contains no tensor to compute a loss from");
    const LossSpec &loss = plan_.loss;
    if (loss.kind == LossSpec::Kind::Sum) {
      Value *total = nullptr;
      for (Value *t : outs) {
        TensorMeta sumMeta = metaOf(sumDtype(t->meta()->dtype), {}, t->meta()->device);
        Value *s = emit("aten::sum.default", {{"self", t, false}}, sumMeta, "loss_sum");
        total = total ? emit("aten::add.Tensor", {{"self", total, false}, {"other", s, false}},
                             metaOf(promoted(total->meta()->dtype, s->meta()->dtype), {}, t->meta()->device),
                             "loss_add")
                      : s;
      }
      state_.loss = total;
      return llvm::Error::success();
    }
    Value *logits = outs.front();
    const TensorMeta &lm = *logits->meta();
    if (lm.rank() < 2)
      return makeError("cross_entropy loss needs logits of rank >= 2, got {}", lm.str());
    auto sizes = sizesOf(lm);
    int64_t classes = sizes.back(), rows = 1;
    for (size_t i = 0; i + 1 < sizes.size(); ++i)
      rows *= sizes[i];
    Value *flat = logits;
    if (lm.rank() > 2)
      flat = emit("aten::view.default", {{"self", logits, false}, {"size", IntList{rows, classes}, false}},
                  metaOf(lm.dtype, {rows, classes}, lm.device), "loss_logits");
    ScalarType dtype = loss.logitsDtype.value_or(lm.dtype);
    if (dtype != lm.dtype)
      flat = emit("aten::_to_copy.default", {{"self", flat, false}, {"dtype", dtype, true}},
                  metaOf(dtype, {rows, classes}, lm.device), "loss_logits_cast");
    // Targets: a plain int64 tensor of the logits' leading shape (random or a user input).
    Value *targets = nullptr;
    if (llvm::StringRef(loss.targets).startswith("input:")) {
      unsigned k = 0;
      llvm::StringRef(loss.targets).drop_front(6).getAsInteger(10, k);
      unsigned idx = 0;
      for (const InputSpec &in : g_.inputs())
        if (in.kind == InputKind::UserInput) {
          if (idx++ == k)
            targets = in.value;
        }
      if (!targets)
        return makeError("cross_entropy targets '{}': no such user input", loss.targets);
    } else {
      targets = g_.createUniqueValue("loss_targets", ValueKind::Tensor);
      targets->setMeta(metaOf(ScalarType::Long, llvm::ArrayRef<int64_t>(sizes).drop_back(), lm.device));
    }
    // from_local(targets, Replicate) when the logits are a DTensor (decided at propagation).
    Value *tdt = emit(boundaryOpTarget(BoundaryOp::LossTargets), {{"self", targets, false}, {"logits", logits, false},
                                                 {"loss_parallel", plan_.lossParallel, false}},
                      *targets->meta(), "loss_targets_dt");
    Value *tflat = tdt;
    if (targets->meta()->rank() != 1)
      tflat = emit("aten::view.default", {{"self", tdt, false}, {"size", IntList{rows}, false}},
                   metaOf(ScalarType::Long, {rows}, lm.device), "loss_targets_flat");
    Value *logp = emit("aten::_log_softmax.default",
                       {{"self", flat, false}, {"dim", int64_t(1), false}, {"half_to_float", false, false}},
                       metaOf(dtype, {rows, classes}, lm.device), "loss_log_softmax");
    int64_t reduction = loss.reduction == "none" ? 0 : loss.reduction == "sum" ? 2 : 1;
    Value *out = g_.createUniqueValue("loss", ValueKind::Tensor);
    out->setMeta(reduction == 0 ? metaOf(dtype, {rows}, lm.device) : metaOf(dtype, {}, lm.device));
    Value *totalWeight = g_.createUniqueValue("loss_total_weight", ValueKind::Tensor);
    totalWeight->setMeta(metaOf(dtype, {}, lm.device));
    Node *n = g_.appendNode("loss", "aten::nll_loss_forward.default",
                            {{"self", logp, false}, {"target", tflat, false}, {"weight", NoneArg{}, false},
                             {"reduction", reduction, false}, {"ignore_index", loss.ignoreIndex, false}},
                            {Argument(out), Argument(totalWeight)});
    n->setScope(nullptr, {});
    if (reduction == 0)
      out = emit("aten::sum.default", {{"self", out, false}}, metaOf(dtype, {}, lm.device), "loss_sum");
    state_.loss = out;
    return llvm::Error::success();
  }

private:
  /// torch.sum's result dtype: a floating tensor keeps its own, an integral or bool one gives int64.
  static ScalarType sumDtype(ScalarType t) { return isFloating(t) ? t : ScalarType::Long; }
  /// The dtype of `a + b` for two 0-d tensors (c10::promoteTypes for the dtypes a sum loss meets):
  /// a floating one beats an integral one; of two floating ones the wider, bf16 with f16 giving f32.
  static ScalarType promoted(ScalarType a, ScalarType b) {
    if (a == b || !isFloating(b))
      return a;
    if (!isFloating(a))
      return b;
    bool halves = (a == ScalarType::BFloat16 && b == ScalarType::Half) ||
                  (a == ScalarType::Half && b == ScalarType::BFloat16);
    return halves ? ScalarType::Float : elementSize(a) >= elementSize(b) ? a : b;
  }

  Value *emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args, TensorMeta meta, llvm::StringRef hint) {
    Value *v = g_.createUniqueValue(hint, ValueKind::Tensor);
    v->setMeta(std::move(meta));
    Node *n = g_.appendNode(v->name(), op, std::move(args), {Argument(v)});
    n->setScope(nullptr, {}); // outside every module: Global
    return v;
  }

  const ShardingPlan &plan_;
  PredictionState &state_;
  Graph &g_;
};

// ------------------------------------------------------------------------------------------------
// autograd graph
// ------------------------------------------------------------------------------------------------

/// An FSDP unit's place in backward (FSDPParamGroup._training_state), which decides its hooks:
/// pre-backward runs unless the unit is PreBackward, the root's final callback runs post-backward
/// unless it is PostBackward. A unit called several times goes PreBackward -> PostBackward once
/// per call.
enum class FsdpBackwardState : uint8_t { NotStarted, PreBackward, PostBackward };

struct AGNode;
struct Edge {
  AGNode *node = nullptr;
  unsigned slot = 0;
  explicit operator bool() const { return node != nullptr; }
};

struct AGNode {
  enum class Kind : uint8_t { Op, Boundary, HookIn, HookOut, Accumulate, FsdpPostBackward, CopySlices };
  Kind kind = Kind::Op;
  uint64_t seq = 0;
  const Node *fwd = nullptr;           // Op, Boundary, CopySlices (the copy_)
  BoundaryStep step;                   // Boundary
  const ModuleScope *module = nullptr; // hooks
  llvm::SmallVector<const Value *, 2> slots; // the forward value each input slot is the grad of
  llvm::SmallVector<Edge, 4> next;     // Op: per tensor operand; others: per slot
  const Value *leaf = nullptr;         // Accumulate
  unsigned fsdpUnit = 0;               // FsdpPostBackward
  /// FSDP units whose pre-backward hook is a tensor hook on one of this node's inputs: it runs
  /// just before the node does.
  llvm::SmallVector<unsigned, 1> fsdpPreBackward;
  // engine state
  unsigned deps = 0;
  llvm::SmallVector<Value *, 2> buffer;
  bool queued = false;
};

/// One module call whose body (its nodes after its own pre-hook boundary nodes) reads `inputs`.
struct Call : ModuleCall {
  explicit Call(ModuleCall call) : ModuleCall(std::move(call)) {}
  unsigned bodyStart = 0;
  std::vector<const Value *> inputs;
};

/// One call of a checkpointed module: its autograd nodes, those that saved a tensor (found once,
/// when backward first reaches the call), and whether backward recomputed it.
struct Region {
  const Call *call;
  const ActivationCheckpointUnit *unit;
  std::vector<AGNode *> ops;
  std::optional<llvm::DenseSet<const AGNode *>> savers;
  /// Those of `savers` that saved one of their own results (saved after the op ran).
  llvm::DenseSet<const AGNode *> resultSavers;
  bool recomputed = false;
};

bool isFsdpForwardHook(const Node &n) {
  return n.boundaryOp() == BoundaryOp::FsdpPreForward || n.boundaryOp() == BoundaryOp::FsdpPostForward;
}

bool isPreHookOp(const Node &n) {
  std::optional<BoundaryOp> op = n.boundaryOp();
  return op == BoundaryOp::Annotate || op == BoundaryOp::SequenceParallelInput || op == BoundaryOp::FsdpPreForward;
}

class AutodiffBuilder : public GradEmitter {
public:
  AutodiffBuilder(const Graph &forward, const ShardingPlan &plan, PredictionState &state)
      : plan_(plan), state_(state), fwd_(forward), bw_(std::make_shared<Graph>(forward.sharedScopes())) {}

  llvm::Error run() {
    markLeaves();
    collectCalls();
    collectCheckpointRegions();
    if (llvm::Error err = record())
      return err;
    if (llvm::Error err = execute())
      return err;
    closeCheckpointingWindow();
    state_.backward = bw_;
    return llvm::Error::success();
  }

private:
  // ---- forward recording ----------------------------------------------------------------------

  void markLeaves() {
    leaves_ = gradLeaves(fwd_, plan_, &state_.retrainedByStyle);
    for (const InputSpec &in : fwd_.inputs())
      if (in.value && (in.kind == InputKind::Parameter || in.kind == InputKind::Buffer ||
                       in.kind == InputKind::TensorConstant))
        state_values_.insert(in.value);
  }

  void collectCalls() {
    ModuleCalls analysis(fwd_, [](const ModuleScope *) { return true; });
    for (ModuleCall &call : analysis.calls()) {
      Call &c = calls_.emplace_back(std::move(call));
      c.bodyStart = c.first;
      while (c.bodyStart < c.last) {
        const Node &n = *fwd_.nodes()[c.bodyStart];
        if (c.contains(n) && !(n.scope() == c.scope && isPreHookOp(n)))
          break;
        ++c.bodyStart;
      }
      c.inputs = analysis.externalTensors(c, c.bodyStart, [&](const Value *v) { return state_values_.count(v) > 0; });
    }
  }

  /// The calls of checkpointed modules (autograd/ActivationCheckpoint.h).
  void collectCheckpointRegions() {
    for (const Call &c : calls_) {
      auto unit = state_.checkpointed.find(c.scope);
      if (unit == state_.checkpointed.end())
        continue;
      for (unsigned i = c.first; i <= c.last; ++i)
        if (const Node *n = fwd_.nodes()[i].get(); c.contains(*n))
          regionOf_[n] = static_cast<unsigned>(regions_.size());
      regions_.push_back(Region{&c, unit->second, {}, std::nullopt, {}, false});
    }
  }

  Edge edgeOf(const Value *v) {
    auto it = edges_.find(v);
    if (it != edges_.end())
      return it->second;
    if (!leaves_.count(v))
      return {};
    auto acc = accumulators_.find(v);
    if (acc != accumulators_.end())
      return {acc->second, 0};
    AGNode *n = newNode(AGNode::Kind::Accumulate, UINT64_MAX);
    n->leaf = v;
    n->slots.push_back(v);
    accumulators_[v] = n;
    return {n, 0};
  }

  AGNode *newNode(AGNode::Kind kind, uint64_t seq) {
    nodes_.push_back(std::make_unique<AGNode>());
    AGNode *n = nodes_.back().get();
    n->kind = kind;
    n->seq = seq;
    return n;
  }

  static bool differentiable(const Node &n) { return !isNonDifferentiable(n.opString()); }

  llvm::Error record() {
    // Calls opening (body start) and closing (last node) at each node index.
    std::multimap<unsigned, Call *> opening, closing;
    for (Call &c : calls_) {
      opening.emplace(c.bodyStart, &c);
      closing.emplace(c.last, &c);
    }
    struct Saved {
      Call *call;
      std::vector<std::pair<const Value *, std::optional<Edge>>> inputs;
    };
    std::vector<Saved> open;
    for (const auto &np : fwd_.nodes()) {
      const Node &n = *np;
      auto [ob, oe] = opening.equal_range(n.index());
      std::vector<Call *> starting;
      for (auto it = ob; it != oe; ++it)
        starting.push_back(it->second);
      std::sort(starting.begin(), starting.end(),
                [](const Call *a, const Call *b) { return a->scope->depth() < b->scope->depth(); });
      for (Call *c : starting) {
        Saved saved{c, {}};
        // BackwardHookFunction on the call's tensor inputs (after its forward pre-hooks).
        std::vector<const Value *> rg;
        for (const Value *v : c->inputs)
          if (edgeOf(v))
            rg.push_back(v);
        if (!rg.empty()) {
          AGNode *h = newNode(AGNode::Kind::HookIn, ++seq_);
          h->module = c->scope;
          for (const Value *v : rg) {
            h->slots.push_back(v);
            h->next.push_back(edgeOf(v));
            auto it = edges_.find(v);
            saved.inputs.emplace_back(v, it == edges_.end() ? std::nullopt : std::optional<Edge>(it->second));
            edges_[v] = Edge{h, static_cast<unsigned>(h->slots.size() - 1)};
          }
        }
        open.push_back(std::move(saved));
      }

      if (n.boundaryOp()) {
        if (llvm::Error err = recordBoundary(n))
          return err;
      } else if (const Value *base = baseOfWrittenView(n)) {
        if (llvm::Error err = recordWriteIntoView(n, base))
          return err;
      } else {
        recordOp(n);
      }

      auto [cb, ce] = closing.equal_range(n.index());
      std::vector<Call *> ending;
      for (auto it = cb; it != ce; ++it)
        ending.push_back(it->second);
      std::sort(ending.begin(), ending.end(),
                [](const Call *a, const Call *b) { return a->scope->depth() > b->scope->depth(); });
      for (Call *c : ending) {
        // Restore the edges the call's input hook had replaced.
        for (auto it = open.rbegin(); it != open.rend(); ++it)
          if (it->call == c) {
            for (auto &[v, old] : it->inputs) {
              if (old)
                edges_[v] = *old;
              else
                edges_.erase(v);
            }
            open.erase(std::next(it).base());
            break;
          }
        // BackwardHookFunction on the call's outputs (after its forward hooks): its backward is
        // where CommDebugMode's full-backward pre-hook names the module.
        std::vector<const Value *> rg;
        for (const Value *v : c->outputs)
          if (edgeOf(v))
            rg.push_back(v);
        if (rg.empty())
          continue;
        AGNode *h = newNode(AGNode::Kind::HookOut, ++seq_);
        h->module = c->scope;
        for (const Value *v : rg) {
          h->slots.push_back(v);
          h->next.push_back(edgeOf(v));
          edges_[v] = Edge{h, static_cast<unsigned>(h->slots.size() - 1)};
        }
      }
    }
    return llvm::Error::success();
  }

  /// fully_shard's forward hooks. Pre-forward wraps the grad-requiring inputs in one
  /// RegisterPostBackwardFunction (its backward is the unit's post-backward); post-forward hooks
  /// each grad-requiring output (`register_hook`: it runs before the output's grad_fn). A list
  /// unit does the first on its first module's inputs and the second on its last module's outputs
  /// (torch 2.13 FSDPParamGroup.pre_forward, _register_group_forward_hooks); its other hooks pass
  /// their tensors through.
  void recordFsdpHook(const Node &n) {
    unsigned unit = static_cast<unsigned>(*n.input("unit")->asInt());
    size_t members = state_.fsdp.units[unit].members.size();
    auto in = n.input("inputs")->tensors();
    auto out = n.results();
    auto passThrough = [&] {
      for (size_t i = 0; i < in.size() && i < out.size(); ++i)
        if (Edge e = edgeOf(in[i]))
          edges_[out[i]] = e;
    };
    if (n.boundaryOp() == BoundaryOp::FsdpPostForward) {
      if (++fsdpMembersForwarded_[unit] % members == 0)
        for (const Value *v : in)
          if (Edge e = edgeOf(v); e && !llvm::is_contained(e.node->fsdpPreBackward, unit))
            e.node->fsdpPreBackward.push_back(unit);
      return passThrough();
    }
    if (fsdpMembersEntered_[unit]++ % members != 0)
      return passThrough();
    AGNode *f = nullptr;
    for (size_t i = 0; i < in.size() && i < out.size(); ++i) {
      Edge e = edgeOf(in[i]);
      if (!e)
        continue;
      if (!f) {
        f = newNode(AGNode::Kind::FsdpPostBackward, ++seq_);
        f->fsdpUnit = unit;
      }
      f->slots.push_back(out[i]);
      f->next.push_back(e);
      edges_[out[i]] = Edge{f, static_cast<unsigned>(f->slots.size() - 1)};
    }
  }

  llvm::Error recordBoundary(const Node &n) {
    if (n.boundaryOp() == BoundaryOp::LossTargets || !n.gradEnabled())
      return llvm::Error::success(); // integer targets / under no_grad: no autograd Function, no grad
    if (isFsdpForwardHook(n)) {
      recordFsdpHook(n);
      return llvm::Error::success();
    }
    const Value *x = n.input("self")->tensor();
    const Value *out = n.results()[0];
    Edge e = edgeOf(x);
    auto it = state_.boundarySteps.find(&n);
    if (e && it != state_.boundarySteps.end())
      for (const BoundaryStep &s : it->second) {
        AGNode *b = newNode(AGNode::Kind::Boundary, ++seq_);
        b->fwd = &n;
        b->step = s;
        b->slots.push_back(out);
        b->next.push_back(e);
        e = Edge{b, 0};
      }
    if (e)
      edges_[out] = e;
    return llvm::Error::success();
  }

  void recordOp(const Node &n) {
    auto operands = n.tensorOperands();
    bool any = false;
    for (Value *v : operands)
      any |= static_cast<bool>(edgeOf(v));
    if (!n.gradEnabled() && isInPlace(n)) {
      // An in-place op under no_grad leaves its tensor's history as it was (torch bumps only the
      // version counter): the written value keeps self's edge (cosine_similarity's clamp_min_).
      if (Edge e = edgeOf(n.input("self")->tensor()))
        edges_[n.results()[0]] = e;
      return;
    }
    if (!any || !differentiable(n) || !n.gradEnabled())
      return;
    AGNode *a = newNode(AGNode::Kind::Op, ++seq_);
    a->fwd = &n;
    if (auto r = regionOf_.find(&n); r != regionOf_.end())
      regions_[r->second].ops.push_back(a);
    for (Value *v : operands)
      a->next.push_back(edgeOf(v));
    for (Value *r : n.results()) {
      if (r->kind() != ValueKind::Tensor)
        continue;
      a->slots.push_back(r);
      if (r->meta() && isFloating(r->meta()->dtype))
        edges_[r] = Edge{a, static_cast<unsigned>(a->slots.size() - 1)};
    }
  }

  /// An in-place op is named with a trailing underscore and returns its self (schema alias a!).
  static bool isInPlace(const Node &n) {
    return n.resultAliasesSelf() && llvm::StringRef(n.op().name).endswith("_");
  }

  /// A view op: its result shares storage with its one tensor operand, `self`.
  static bool isViewOp(const Node &n) {
    const Argument *self = n.input("self");
    return n.resultAliasesSelf() && !isInPlace(n) && n.op().name != "detach" && self && self->isTensor() &&
           n.tensorOperands().size() == 1;
  }

  /// The tensor whose view an in-place op writes into (`base[:, i] = x` is copy_ into a select
  /// of base), or null: the op writes into no view.
  static const Value *baseOfWrittenView(const Node &n) {
    if (!isInPlace(n))
      return nullptr;
    const Argument *self = n.input("self");
    if (!self || !self->isTensor() || !self->tensor()->producer() || !isViewOp(*self->tensor()->producer()))
      return nullptr;
    const Value *base = self->tensor();
    while (base->producer() && isViewOp(*base->producer()))
      base = base->producer()->input("self")->tensor();
    return base;
  }

  /// An in-place write into a view of `base`: autograd rebases the base's history onto
  /// CopySlices (torch/csrc/autograd/functions/tensor.cpp), so whatever reads the base afterwards
  /// differentiates through the write; the program's later nodes read the base's value from
  /// before it, which is why the edge of `base` moves here. Modelled for copy_ (`base[idx] = x`);
  /// another in-place op whose other operands need a gradient is refused by name.
  llvm::Error recordWriteIntoView(const Node &n, const Value *base) {
    const Value *view = n.input("self")->tensor();
    llvm::SmallVector<Value *, 2> others;
    for (Value *v : n.tensorOperands())
      if (v != view && edgeOf(v))
        others.push_back(v);
    if (!n.gradEnabled() || (others.empty() && !edgeOf(base))) {
      recordOp(n);
      return llvm::Error::success();
    }
    auto refuse = [&](llvm::StringRef why) {
      return makeError("autodiff: {} writes in place into a view of '{}': the gradient through the write is not "
                       "modelled ({})",
                       n.where(), base->name(), why);
    };
    if (n.op().name != "copy_") {
      if (!others.empty())
        return refuse("an operand other than the view requires grad");
      recordOp(n); // the base's gradient flows on unchanged in which values it reaches
      return llvm::Error::success();
    }
    const Value *src = n.input("src")->tensor();
    if (src->meta()->dtype != view->meta()->dtype)
      return refuse("the source's dtype differs");
    AGNode *a = newNode(AGNode::Kind::CopySlices, ++seq_);
    a->fwd = &n;
    a->slots.push_back(base);
    a->next.push_back(edgeOf(base));
    a->next.push_back(edgeOf(src));
    edges_[base] = Edge{a, 0};
    return llvm::Error::success();
  }

  // ---- engine -----------------------------------------------------------------------------------

  struct Later {
    bool operator()(const AGNode *a, const AGNode *b) const { return a->seq < b->seq; }
  };

  llvm::Error execute() {
    const Value *loss = state_.loss;
    if (!loss)
      return makeError("autodiff needs a loss (the loss pass)");
    Edge root = edgeOf(loss);
    if (!root)
      return llvm::Error::success(); // nothing requires grad: backward() would raise; no ops
    // Dependencies: every edge of every node reachable from the root.
    std::vector<AGNode *> stack{root.node};
    llvm::DenseSet<AGNode *> seen{root.node};
    while (!stack.empty()) {
      AGNode *n = stack.back();
      stack.pop_back();
      n->buffer.assign(n->slots.size(), nullptr);
      for (const Edge &e : n->next) {
        if (!e)
          continue;
        ++e.node->deps;
        if (seen.insert(e.node).second)
          stack.push_back(e.node);
      }
    }
    // loss.backward(): a ones_like gradient (Partial normalised to Replicate).
    Value *seed = bw_->createUniqueValue("grad_loss", ValueKind::Tensor);
    seed->setMeta(metaOf(loss->meta()->dtype, sizesOf(*loss->meta()), loss->meta()->device));
    if (const DTensorLayout *l = state_.layout(loss)) {
      Placements p;
      for (const Placement &x : l->placements)
        p.push_back(x.isPartial() ? Placement::replicate() : x);
      state_.dtensors[seed] = DTensorLayout{p, l->mesh};
    }
    root.node->buffer[root.slot] = seed;
    std::priority_queue<AGNode *, std::vector<AGNode *>, Later> ready;
    ready.push(root.node);
    root.node->queued = true;
    while (!ready.empty()) {
      AGNode *n = ready.top();
      ready.pop();
      for (unsigned unit : n->fsdpPreBackward)
        fsdpPreBackward(unit);
      if (n->kind == AGNode::Kind::Op)
        if (auto r = regionOf_.find(n->fwd); r != regionOf_.end() && !regions_[r->second].recomputed &&
                                             savers(regions_[r->second]).count(n))
          recompute(regions_[r->second]);
      auto grads = apply(*n);
      if (!grads)
        return grads.takeError();
      // validate_outputs: every broadcast gradient is reduced before any is routed.
      if (n->kind == AGNode::Kind::Op)
        for (size_t i = 0; i < n->next.size() && i < grads->size(); ++i)
          if (n->next[i] && (*grads)[i])
            (*grads)[i] = sumTo((*grads)[i], *n->next[i].node->slots[n->next[i].slot]->meta());
      for (size_t i = 0; i < n->next.size(); ++i) {
        const Edge &e = n->next[i];
        if (!e)
          continue;
        Value *g = i < grads->size() ? (*grads)[i] : nullptr;
        if (g) {
          Value *&slot = e.node->buffer[e.slot];
          slot = slot ? emit("aten::add.Tensor", {{"self", slot, false}, {"other", g, false}}, *slot->meta(),
                             "grad_acc")
                      : g;
        }
        if (--e.node->deps == 0 && !e.node->queued) {
          e.node->queued = true;
          ready.push(e.node);
        }
      }
    }
    // FSDP's final callbacks, one per root, queued by the first pre-backward of a unit sharing
    // that root's context, run in that order: each runs the post-backward of its units whose
    // inputs needed no gradient, in the root's named_modules order (forward order here).
    std::vector<unsigned> units(state_.fsdp.units.size());
    std::iota(units.begin(), units.end(), 0u);
    llvm::stable_sort(units, [&](unsigned a, unsigned b) {
      return state_.fsdp.units[a].scope()->forwardIndex() < state_.fsdp.units[b].scope()->forwardIndex();
    });
    for (unsigned root : fsdpCallbackRoots_)
      for (unsigned unit : units)
        if (state_.fsdp.units[unit].root == root && fsdpBackward_.lookup(unit) != FsdpBackwardState::PostBackward)
          fsdpPostBackward(unit);
    return llvm::Error::success();
  }

  // ---- activation checkpointing ------------------------------------------------------------------

  /// What the node's autograd Function saved: whether its backward formula reads a forward value,
  /// and whether one of them is its own result (emitted into a scratch graph to find out).
  struct Saved {
    bool any = false, result = false;
  };
  Saved savedTensors(AGNode &a) {
    auto scratch = std::make_shared<Graph>(fwd_.sharedScopes());
    std::swap(bw_, scratch);
    llvm::SmallVector<Value *, 2> buffer = a.buffer;
    a.buffer.resize(a.slots.size(), nullptr);
    for (size_t i = 0; i < a.slots.size(); ++i)
      if (!a.buffer[i] && a.slots[i]->meta()) {
        a.buffer[i] = bw_->createUniqueValue("grad", ValueKind::Tensor);
        a.buffer[i]->setMeta(like(a.slots[i]));
      }
    auto grads = opBackward(a, llvm::SmallVector<Value *, 4>(a.next.size(), nullptr));
    if (!grads)
      llvm::consumeError(grads.takeError()); // the real application reports it
    a.buffer = std::move(buffer);
    std::swap(bw_, scratch);
    Saved saved;
    llvm::SmallVector<Value *, 4> results = a.fwd->results();
    for (const auto &n : scratch->nodes())
      for (Value *v : n->operands())
        if (fwd_.lookupValue(v->name()) == v) {
          saved.any = true;
          saved.result |= llvm::is_contained(results, v);
        }
    return saved;
  }

  /// The call's autograd nodes that saved a tensor.
  const llvm::DenseSet<const AGNode *> &savers(Region &r) {
    if (!r.savers) {
      r.savers.emplace();
      for (AGNode *a : r.ops)
        if (Saved saved = savedTensors(*a); saved.any) {
          r.savers->insert(a);
          if (saved.result)
            r.resultSavers.insert(a);
        }
    }
    return *r.savers;
  }

  /// Non-reentrant checkpoint's recomputation, at the first unpack of a tensor the call saved:
  /// its forward nodes again, up to the one whose autograd Function saved last (early stop), or
  /// all of them (early_stop=False).
  /// Copies read values from outside the call as they are and each other's results inside. Each
  /// is charged to the module CommDebugMode's tracker names then: in backward a module's forward
  /// pre-hook names it and its forward post-hook names nothing back (torch 2.13
  /// `_CommModeModuleTracker`, `activation_checkpointing`), so the module entered last, not the
  /// op's own (a parent's output hook after a submodule's call is charged to that submodule).
  /// fully_shard's hooks
  /// skip recomputation (FSDP2 unshards in its pre-backward instead); so do the ops a selective
  /// policy kept (later copies read the forward's outputs), and the collectives it kept.
  void recompute(Region &r) {
    r.recomputed = true;
    if (!checkpointingFrom_) // the recomputed module's forward pre-hook
      checkpointingFrom_ = bw_->nodes().size();
    unsigned stop = 0;
    bool stopRuns = true; // whether the op at `stop` itself runs again
    if (!r.unit->earlyStop) {
      stop = r.call->last;
    } else {
      // Early stop ends recomputation when the last tensor the call saved is packed again: an op
      // saves its inputs before it runs (autograd's VariableType), so a last saver that saved no
      // result of its own is not run again, nor dispatched (torch.utils.checkpoint's
      // _StopRecomputationError).
      for (const AGNode *a : savers(r))
        if (a->fwd->index() >= stop) {
          stop = a->fwd->index();
          stopRuns = r.resultSavers.contains(a);
        }
    }
    const std::string kept = keptCollectives(*r.unit);
    llvm::StringMap<unsigned> calls; // per op, its calls so far in this run of the module
    // the calls recomputation enters, in the order their pre-hooks run (outer before inner)
    std::vector<const Call *> entered;
    for (const Call &c : calls_)
      if (c.first <= stop && c.scopeDepth >= r.call->scopeDepth && r.call->contains(*fwd_.nodes()[c.first]))
        entered.push_back(&c);
    llvm::stable_sort(entered, [](const Call *a, const Call *b) {
      return std::make_pair(a->first, a->scopeDepth) < std::make_pair(b->first, b->scopeDepth);
    });
    size_t nextEntered = 0;
    const Call *tracked = r.call;
    llvm::DenseMap<const Value *, Value *> copies;
    auto operand = [&](const Value *v) {
      Value *copy = copies.lookup(v);
      return copy ? copy : const_cast<Value *>(v);
    };
    for (unsigned i = r.call->first; i <= stop; ++i) {
      if (i == stop && !stopRuns)
        break;
      while (nextEntered < entered.size() && entered[nextEntered]->first <= i)
        tracked = entered[nextEntered++];
      const Node &n = *fwd_.nodes()[i];
      if (!r.call->contains(n))
        continue;
      if (isFsdpForwardHook(n)) {
        auto in = n.input("inputs")->tensors();
        auto out = n.results();
        for (size_t k = 0; k < in.size() && k < out.size(); ++k)
          copies[out[k]] = operand(in[k]);
        continue;
      }
      bool hook = n.boundaryOp().has_value();
      if (!hook && keptByCheckpoint(*r.unit, n, calls))
        continue;
      Node *copy = copyNodeInto(*bw_, n, "recompute_" + n.name(), operand,
                   [&](const Value *old) {
                     Value *v = bw_->createUniqueValue("recompute_" + old->name(), old->kind());
                     if (old->meta())
                       v->setMeta(*old->meta());
                     v->setSymbol(old->symbol());
                     copies[old] = v;
                     return v;
                   });
      if (hook && !kept.empty())
        copy->setMetadata(kKeptCollectives, kept);
      if (tracked->scope != n.scope())
        copy->setScope(const_cast<ModuleScope *>(tracked->scope), tracked->callPath);
    }
  }

  /// A module's full-backward pre-hook, or the end of backward: the ops since a recomputation's
  /// forward hooks are CommDebugMode's activation checkpointing ones (state.checkpointingOps).
  void closeCheckpointingWindow() {
    if (!checkpointingFrom_)
      return;
    for (size_t i = *checkpointingFrom_; i < bw_->nodes().size(); ++i)
      state_.checkpointingOps.insert(bw_->nodes()[i].get());
    checkpointingFrom_.reset();
  }

  /// Emits an FSDP hook into the backward graph, in the current module.
  void emitFsdpHook(llvm::StringRef op, unsigned unit, llvm::SmallVector<NamedArgument, 4> args) {
    args.push_back({"unit", static_cast<int64_t>(unit), true});
    Node *n = bw_->appendNode(fmt::format("{}_{}", op.rsplit(':').second, unit), op, std::move(args), {});
    n->setScope(const_cast<ModuleScope *>(current_), {});
  }

  /// A post-accumulate-grad hook that all-reduces the parameter's gradient in place, run where
  /// the gradient accumulates, in the current module.
  void emitGradAllReduce(const Value *param, Value *grad, const ModuleScope &hookOwner, MeshId mesh) {
    Value *out = newValue("grad_all_reduce", *grad->meta());
    llvm::SmallVector<NamedArgument, 4> args{{"self", grad, false}, {"param", const_cast<Value *>(param), false}};
    appendMeshArgument(args, mesh);
    args.push_back({"module", hookOwner.displayName(), true});
    emitNode(out->name(), boundaryOpTarget(BoundaryOp::GradAllReduce), std::move(args), {Argument(out)});
  }


  /// A call's pre-backward hook (torch 2.13 FSDPParamGroup.pre_backward: nothing while the unit
  /// is already in pre-backward; a unit called twice enters it again after a post-backward).
  void fsdpPreBackward(unsigned unit) {
    FsdpBackwardState &state = fsdpBackward_[unit];
    if (state == FsdpBackwardState::PreBackward)
      return;
    state = FsdpBackwardState::PreBackward;
    if (!llvm::is_contained(fsdpCallbackRoots_, state_.fsdp.units[unit].root))
      fsdpCallbackRoots_.push_back(state_.fsdp.units[unit].root);
    emitFsdpHook(boundaryOpTarget(BoundaryOp::FsdpPreBackward), unit, {});
  }

  /// A post-backward of the unit, with the gradients its parameters received so far and no
  /// earlier post-backward took (it reduces them and clears `.grad`).
  void fsdpPostBackward(unsigned unit) {
    fsdpBackward_[unit] = FsdpBackwardState::PostBackward;
    TensorList grads, params;
    for (const Value *p : state_.fsdp.units[unit].params)
      if (Value *g = leafGrads_.lookup(p); g && fsdpGradsTaken_.insert(p).second) {
        grads.push_back(g);
        params.push_back(const_cast<Value *>(p));
      }
    emitFsdpHook(boundaryOpTarget(BoundaryOp::FsdpPostBackward), unit, {{"grads", grads, false}, {"params", params, false}});
  }

  // ---- GradEmitter --------------------------------------------------------------------------------

  /// A backward value (in the graph being built).
  Value *newValue(llvm::StringRef hint, TensorMeta meta) override {
    Value *v = bw_->createUniqueValue(hint, ValueKind::Tensor);
    v->setMeta(std::move(meta));
    return v;
  }
  /// Appends one backward runtime op in the current module.
  Node *emitNode(llvm::StringRef name, llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args,
                 llvm::SmallVector<Argument, 1> &&results) override {
    Node *n = bw_->appendNode(name, op, std::move(args), std::move(results));
    n->setScope(const_cast<ModuleScope *>(current_), {});
    return n;
  }
  bool lossParallel() const override { return plan_.lossParallel; }
  bool isDTensor(const Value *v) const override { return state_.layout(v) != nullptr; }

  /// all_to_all_single_autograd's backward: the gradient goes back the reverse way, one
  /// all_to_all_single that sends what the forward received and receives what it sent.
  Value *allToAllBackward(const Node &fwd, MeshId mesh, Value *g) {
    const Value *sent = fwd.input("self")->tensor();
    llvm::SmallVector<NamedArgument, 4> args{
        {"self", g, false},
        {"autograd", false, false},
        {"sends_routed", fwd.boolInput("receives_routed"), false},
        {"receives_routed", fwd.boolInput("sends_routed"), false},
        {"rows", *fwd.input("rows")->asInt(), false},
        {"what", "sends back the gradient of the all-to-all that " + fwd.input("what")->get<std::string>(), false}};
    appendMeshArgument(args, mesh);
    args.push_back({"module", fwd.input("module")->get<std::string>(), true});
    return emit(boundaryOpTarget(BoundaryOp::AllToAll), std::move(args),
                metaOf(g->meta()->dtype, sizesOf(*sent->meta()), g->meta()->device), "grad_all_to_all");
  }

  /// Runs one autograd node; returns the gradient per next edge (null: undefined).
  llvm::Expected<llvm::SmallVector<Value *, 4>> apply(AGNode &a) {
    llvm::SmallVector<Value *, 4> out(a.next.size(), nullptr);
    switch (a.kind) {
    case AGNode::Kind::HookOut:
      current_ = a.module; // CommDebugMode's global full-backward pre-hook
      closeCheckpointingWindow();
      [[fallthrough]];
    case AGNode::Kind::HookIn:
      for (size_t i = 0; i < a.buffer.size() && i < out.size(); ++i)
        out[i] = a.buffer[i];
      return out;
    case AGNode::Kind::Accumulate:
      if (a.buffer[0]) {
        emit("aten::detach.default", {{"self", a.buffer[0], false}}, like(a.buffer[0]), "grad_leaf");
        leafGrads_[a.leaf] = a.buffer[0];
        if (auto hook = state_.gradAllReduced.find(a.leaf); hook != state_.gradAllReduced.end())
          emitGradAllReduce(a.leaf, a.buffer[0], *hook->second.first, hook->second.second);
      }
      return out;
    case AGNode::Kind::FsdpPostBackward:
      for (size_t i = 0; i < a.buffer.size() && i < out.size(); ++i)
        out[i] = a.buffer[i];
      fsdpPostBackward(a.fsdpUnit);
      return out;
    case AGNode::Kind::Boundary: {
      Value *g = a.buffer[0];
      if (!g)
        return out;
      if (a.step.kind == BoundaryStep::Kind::AllToAll) {
        out[0] = allToAllBackward(*a.fwd, a.step.mesh, g);
        return out;
      }
      if (a.step.kind == BoundaryStep::Kind::AllReduceGradient) { // in the module whose backward runs now
        llvm::SmallVector<NamedArgument, 4> args{
            {"self", g, false}, {"what", "sums the gradient of its " + a.fwd->input("what")->get<std::string>(), false}};
        appendMeshArgument(args, a.step.mesh);
        args.push_back({"module", a.fwd->input("module")->get<std::string>(), true});
        out[0] = emit(boundaryOpTarget(BoundaryOp::AllReduceSum), std::move(args),
                      metaOf(g->meta()->dtype, sizesOf(*g->meta()), g->meta()->device), "grad_all_reduce");
        return out;
      }
      llvm::StringRef op = boundaryOpTarget(a.step.kind == BoundaryStep::Kind::FromLocal ? BoundaryOp::FromLocalBackward
                                            : a.step.kind == BoundaryStep::Kind::Redistribute
                                                ? BoundaryOp::RedistributeBackward
                                                : BoundaryOp::ToLocalBackward);
      // from_local: its placements; redistribute: its source; to_local: the gradient's placements.
      const Placements &p = a.step.kind == BoundaryStep::Kind::Redistribute ? a.step.from : a.step.to;
      std::string module = a.fwd->input("module") && a.fwd->input("module")->is<std::string>()
                               ? a.fwd->input("module")->get<std::string>()
                               : a.fwd->moduleName();
      // The gradient keeps its strides: to_local / from_local wrap the same local tensor.
      llvm::SmallVector<NamedArgument, 4> args{{"self", g, false}, {"placements", placementsList(p), false}};
      appendMeshArgument(args, a.step.mesh);
      args.push_back({"module", module, true});
      out[0] = emit(op, std::move(args),
                    metaOf(g->meta()->dtype, sizesOf(*g->meta()), g->meta()->device, stridesOf(*g->meta())),
                    "grad_boundary");
      return out;
    }
    case AGNode::Kind::CopySlices: {
      Value *g = a.buffer[0];
      if (!g)
        return out;
      // CopySlices::apply (torch/csrc/autograd/functions/tensor.cpp): the base's gradient copied
      // into a new tensor of the base's strides, the written view of it cloned for CopyBackwards,
      // which gives the overwritten values zeros (copied back into the view) and the source the
      // gradient. The view is as_strided of a plain tensor's; a DTensor's views are replayed (its
      // view_fn: the slices and selects that made the view, each a DTensor op).
      const TensorMeta &base = *a.slots[0]->meta(), &view = *a.fwd->input("self")->tensor()->meta();
      Value *result = emit("aten::new_empty_strided.default",
                           {{"self", g, false}, {"size", IntList(sizesOf(base)), false},
                            {"stride", IntList(stridesOf(base)), false}},
                           metaOf(g->meta()->dtype, sizesOf(base), g->meta()->device, stridesOf(base)),
                           "grad_copy_slices");
      emit("aten::copy_.default", {{"self", result, false}, {"src", g, false}}, *result->meta(), "grad_copy_slices_copy");
      Value *written = state_.layout(a.slots[0])
                           ? replayView(*a.fwd->input("self")->tensor(), a.slots[0], result)
                           : emit("aten::as_strided.default",
                                  {{"self", result, false}, {"size", IntList(sizesOf(view)), false},
                                   {"stride", IntList(stridesOf(view)), false},
                                   {"storage_offset", view.storageOffset.hint, false}},
                                  metaOf(g->meta()->dtype, sizesOf(view), g->meta()->device, stridesOf(view)),
                                  "grad_written_view");
      Value *grad = emit("aten::clone.default", {{"self", written, false}, {"memory_format", MemoryFormat::Contiguous, true}},
                         metaOf(g->meta()->dtype, sizesOf(view), g->meta()->device), "grad_copy_slices_clone");
      if (a.next[0]) {
        Value *zeros = emit("aten::zeros_like.default", {{"self", grad, false}}, *grad->meta(), "grad_overwritten");
        emit("aten::copy_.default", {{"self", written, false}, {"src", zeros, false}}, *written->meta(),
             "grad_overwritten_copy");
        out[0] = result;
      }
      if (a.next[1])
        out[1] = sumTo(grad, *a.fwd->input("src")->tensor()->meta());
      return out;
    }
    case AGNode::Kind::Op:
      return opBackward(a, out);
    }
    return out;
  }

  /// The view ops that made `view` from `base`, run again on `on` (a tensor like base).
  Value *replayView(const Value &view, const Value *base, Value *on) {
    llvm::SmallVector<const Node *, 4> chain;
    for (const Value *v = &view; v != base; v = v->producer()->input("self")->tensor())
      chain.push_back(v->producer());
    Value *x = on;
    for (const Node *n : llvm::reverse(chain)) {
      llvm::SmallVector<NamedArgument, 4> args(n->inputs().begin(), n->inputs().end());
      for (NamedArgument &arg : args)
        if (arg.name == "self")
          arg.value = Argument(x);
      x = emit(n->opString(), std::move(args), *n->results()[0]->meta(), "grad_written_view");
    }
    return x;
  }

  llvm::Expected<llvm::SmallVector<Value *, 4>> opBackward(AGNode &a, llvm::SmallVector<Value *, 4> out) {
    const Node &n = *a.fwd;
    if (llvm::none_of(a.buffer, [](Value *v) { return v != nullptr; }))
      return out; // no gradient reached the node: autograd does not run it
    DerivativeFormula formula = findDerivative(n.opString());
    if (!formula)
      return makeError("autodiff: no derivative formula for {} (node '{}' in {})", n.opString(), n.name(),
                       n.moduleName());
    llvm::SmallVector<bool, 4> needed;
    for (const Edge &e : a.next)
      needed.push_back(static_cast<bool>(e));
    GradCall call{*this, n, a.buffer, needed, out};
    if (llvm::Error err = formula(call))
      return err;
    return out;
  }


  const ShardingPlan &plan_;
  PredictionState &state_;
  const Graph &fwd_;
  std::shared_ptr<Graph> bw_;
  llvm::DenseSet<const Value *> leaves_, state_values_;
  std::vector<Call> calls_;
  std::vector<std::unique_ptr<AGNode>> nodes_;
  llvm::DenseMap<const Value *, Edge> edges_;
  llvm::DenseMap<const Value *, AGNode *> accumulators_;
  uint64_t seq_ = 0;
  const ModuleScope *current_ = nullptr; // Global until the first module output hook fires
  /// The first backward node since a recomputation's forward hooks, while no module's backward
  /// pre-hook has run since (CommDebugMode's activation_checkpointing is on).
  std::optional<size_t> checkpointingFrom_;
  llvm::DenseMap<const Value *, Value *> leafGrads_; // parameter -> the gradient AccumulateGrad got
  /// Per FSDP unit, where its backward hooks stand; the parameters whose gradient a post-backward
  /// took.
  llvm::DenseMap<unsigned, FsdpBackwardState> fsdpBackward_;
  llvm::DenseSet<const Value *> fsdpGradsTaken_;
  /// Per FSDP unit, its modules' forward pre-hooks / post-hooks seen so far (list units).
  llvm::DenseMap<unsigned, unsigned> fsdpMembersEntered_, fsdpMembersForwarded_;
  std::vector<Region> regions_;
  llvm::DenseMap<const Node *, unsigned> regionOf_;
  /// Roots whose final callback is queued, in queue order.
  llvm::SmallVector<unsigned, 2> fsdpCallbackRoots_;
};

} // namespace

llvm::Error appendLoss(Graph &forward, const ShardingPlan &plan, PredictionState &state) {
  return LossBuilder(forward, plan, state).run();
}

llvm::Error runAutograd(const Graph &forward, const ShardingPlan &plan, PredictionState &state) {
  return AutodiffBuilder(forward, plan, state).run();
}

} // namespace commlens
