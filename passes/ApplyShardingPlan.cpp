#include "passes/ApplyShardingPlan.h"

#include "ir/Error.h"
#include "ir/GraphBuilder.h"
#include "autograd/ActivationCheckpoint.h"
#include "autograd/Engine.h"
#include "fsdp/FullyShard.h"
#include "ir/ModuleCalls.h"
#include "ir/TensorMetaUtils.h"
#include "parallel/StyleModel.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Sequence.h"

#include <map>

namespace commlens {
namespace {

/// isinstance(module, nn.Linear / nn.Embedding) as torch's styles test it: the class itself, or a
/// subclass the plan names (the program keeps only class names).
bool isInstance(const ModuleScope &s, TorchModuleBase base, const ShardingPlan &plan) {
  llvm::StringRef cls = s.type();
  if (cls == (base == TorchModuleBase::Linear ? "torch.nn.modules.linear.Linear" : "torch.nn.modules.sparse.Embedding"))
    return true;
  auto subclass = plan.moduleSubclasses.find(cls);
  return subclass != plan.moduleSubclasses.end() && subclass->second == base;
}

Argument placementArg(const std::optional<Placement> &p) {
  return p ? Argument(p->str()) : Argument(NoneArg{});
}

/// One call of a styled module or fully_shard unit, with what its hooks need.
struct StyledCall : ModuleCall {
  explicit StyledCall(ModuleCall call) : ModuleCall(std::move(call)) {}
  /// The tensors the call receives, as FSDP's pre-hook flattens them: by the call signature, or
  /// (none recorded) the tensors from outside the call in order of first use.
  std::vector<const Value *> inputs;
  /// The arguments the styles' pre-hooks see (null: not a tensor). Without a signature, `inputs`
  /// taken as positional arguments.
  std::vector<const Value *> args;
  std::vector<std::pair<std::string, const Value *>> kwargs;
  bool hasSignature = false;
  std::vector<const ParallelStyle *> styles;
  std::optional<unsigned> fsdpUnit; // the fully_shard unit this module is
  bool gradEnabled = true;          // the grad mode the call runs in (its hooks' too)
};

/// One node of the call's hooks, in its scope and grad mode: `op` of `args`, one result `meta`.
Value *emitInCall(GraphBuilder &b, const StyledCall &c, llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> args,
                  TensorMeta meta, const std::string &name) {
  Value *out = b.tensor(name, std::move(meta));
  Node *n = b.graph().appendNode(out->name(), op, std::move(args), {out});
  n->setScope(const_cast<ModuleScope *>(c.scope), c.callPath);
  n->setGradEnabled(c.gradEnabled);
  return out;
}

Value *emitHook(GraphBuilder &b, const StyledCall &c, llvm::StringRef op, Value *x,
                llvm::SmallVector<NamedArgument, 4> extra, llvm::StringRef tag) {
  llvm::SmallVector<NamedArgument, 4> args{{"self", x, false}};
  args.append(extra.begin(), extra.end());
  args.push_back({"module", c.scope->displayName(), true});
  return emitInCall(b, c, op, std::move(args), *x->meta(), (x->name() + "_" + tag).str());
}

/// One style's hooks at one call: each step a `commlens::` boundary op in the call's scope, on the
/// style's DTensor mesh (`mesh`: its index, an argument of the op where not the first mesh).
class CallHooks final : public StyleHooks {
public:
  /// `meshes`: the plan's DTensor meshes, `mesh` the style's; the 1-D meshes its hooks may turn
  /// to (onMeshDim, onPlanMeshDim) are among them (chooseMeshes made them).
  CallHooks(GraphBuilder &b, const StyledCall &c, StyledModule module, const std::vector<DTensorMesh> &meshes,
            MeshId mesh, const llvm::DenseSet<const Value *> &requiresGrad,
            llvm::DenseMap<const Value *, int64_t> &tokenSplits)
      : b_(b), c_(c), module_(std::move(module)), meshes_(meshes), mesh_(mesh), requiresGrad_(requiresGrad),
        tokenSplits_(tokenSplits) {}
  const StyledModule &module() const override { return module_; }
  Value *annotate(Value *x, const std::optional<Placement> &layout, const std::optional<Placement> &desired,
                  bool useLocalOutput, llvm::StringRef tag) override {
    return hook(boundaryOpTarget(BoundaryOp::Annotate), x,
                {{"layout", placementArg(layout), false},
                 {"desired", placementArg(desired), false},
                 {"use_local_output", useLocalOutput, false}},
                tag);
  }
  Value *sequenceParallelInput(Value *x, const Placement &sharding) override {
    return hook(boundaryOpTarget(BoundaryOp::SequenceParallelInput), x, {{"sharding", placementArg(sharding), false}},
                "in");
  }
  Value *redistributeOutput(Value *x, const std::optional<Placement> &layout, bool useLocalOutput) override {
    return hook(boundaryOpTarget(BoundaryOp::RedistributeOutput), x,
                {{"layout", placementArg(layout), false}, {"use_local_output", useLocalOutput, false}}, "out");
  }
  Value *toLocal(Value *x, const std::optional<Placement> &gradPlacement) override {
    return hook(boundaryOpTarget(BoundaryOp::ToLocal), x, {{"grad_placement", placementArg(gradPlacement), false}},
                "local");
  }
  Value *allReduceLocal(Value *x) override {
    return hook(boundaryOpTarget(BoundaryOp::AllReduceLocal), x, {}, "out");
  }
  Value *allReduceSum(Value *x, llvm::StringRef what) override {
    return hook(boundaryOpTarget(BoundaryOp::AllReduceSum), x, {{"what", what.str(), false}}, "summed");
  }
  Value *allReduceInBackward(Value *x, llvm::StringRef what) override {
    return hook(boundaryOpTarget(BoundaryOp::AllReduceInBackward), x, {{"what", what.str(), false}}, "in");
  }
  Value *allToAll(Value *x, bool autograd, bool sendsRouted, bool receivesRouted, int64_t rows,
                  llvm::StringRef what) override {
    return hook(boundaryOpTarget(BoundaryOp::AllToAll), x,
                {{"autograd", autograd, false},
                 {"sends_routed", sendsRouted, false},
                 {"receives_routed", receivesRouted, false},
                 {"rows", rows, false},
                 {"what", what.str(), false}},
                sendsRouted ? "combined" : receivesRouted ? "dispatched" : "exchanged");
  }
  Value *allToAllCounts(Value *routing, int64_t experts, llvm::StringRef what) override {
    Value *out = hook(boundaryOpTarget(BoundaryOp::AllToAllCounts), routing,
                      {{"experts", experts, false}, {"what", what.str(), false}}, "counts");
    out->setMeta(metaOf(ScalarType::Long, {experts}, routing->meta()->device));
    return out;
  }
  const Value *callArgument(size_t i) const override { return i < c_.args.size() ? c_.args[i] : nullptr; }
  bool requiresGrad(const Value *programValue) const override { return requiresGrad_.contains(programValue); }
  Value *sliceLastDim(Value *x, int64_t start, int64_t end) override {
    llvm::SmallVector<int64_t, 4> sizes = sizesOf(*x->meta()), strides = stridesOf(*x->meta());
    int64_t dim = static_cast<int64_t>(sizes.size()) - 1;
    sizes.back() = end - start; // a view: the strides stay
    return emitInCall(b_, c_, "aten::slice.Tensor", {{"self", x, false}, {"dim", dim, false}, {"start", start, false},
                                                      {"end", end, false}},
                      metaOf(x->meta()->dtype, sizes, x->meta()->device, llvm::ArrayRef<int64_t>(strides)),
                      x->name() + "_slice");
  }
  Value *catLastDim(llvm::ArrayRef<Value *> parts) override {
    llvm::SmallVector<int64_t, 4> sizes = sizesOf(*parts.front()->meta());
    sizes.back() = 0;
    for (const Value *p : parts)
      sizes.back() += sizesOf(*p->meta()).back();
    int64_t dim = static_cast<int64_t>(sizes.size()) - 1;
    return emitInCall(b_, c_, "aten::cat.default", {{"tensors", TensorList(parts.begin(), parts.end()), false},
                                                     {"dim", dim, false}},
                      metaOf(parts.front()->meta()->dtype, sizes, parts.front()->meta()->device),
                      parts.front()->name() + "_cat");
  }
  int64_t meshSize() const override { return meshes_[mesh_].mesh.size(); }
  StyleHooks &onMeshDim(unsigned dim) override {
    llvm::ArrayRef<MeshDimGroup> dims = meshes_[mesh_].planDims;
    if (dims.size() == 1)
      return *this;
    assert(dim < dims.size() && "a dim of the style's mesh");
    return onMesh(dims[dim]);
  }
  StyleHooks &onPlanMeshDim(unsigned planDim) override { return onMesh(MeshDimGroup{planDim}); }
  bool gradEnabled() const override { return c_.gradEnabled; }
  void splitTokens(const Value *x) override { tokenSplits_[x] = meshSize(); }
  int64_t tokensSplitBy(const Value *x) const override {
    if (tokenSplits_.empty())
      return 1;
    // The producers of x inside the styled module's parent (an MoE layer: its reorderer, the
    // token gather, the experts' hooks), back to a marked value.
    const ModuleScope *parent = c_.scope->parent();
    llvm::SmallVector<const Value *, 16> work{x};
    llvm::DenseSet<const Value *> seen{x};
    while (!work.empty()) {
      const Value *v = work.pop_back_val();
      if (int64_t split = tokenSplits_.lookup(v))
        return split;
      const Node *n = v->producer();
      if (!n || !parent || (n->scope() != parent && !parent->isAncestorOf(n->scope())))
        continue;
      n->forEachOperand([&](const Value *operand) {
        if (seen.insert(operand).second)
          work.push_back(operand);
      });
    }
    return 1;
  }

private:
  /// The hooks on the 1-D mesh of these plan dims, made on first use.
  StyleHooks &onMesh(const MeshDimGroup &dims) {
    auto it = llvm::find_if(meshes_,
                            [&](const DTensorMesh &m) { return m.planDims.size() == 1 && m.planDims[0] == dims; });
    assert(it != meshes_.end() && "chooseMeshes made the meshes the hooks use");
    auto id = static_cast<MeshId>(it - meshes_.begin());
    if (id == mesh_)
      return *this;
    std::unique_ptr<CallHooks> &hooks = meshHooks_[id];
    if (!hooks)
      hooks = std::make_unique<CallHooks>(b_, c_, module_, meshes_, id, requiresGrad_, tokenSplits_);
    return *hooks;
  }

  Value *hook(llvm::StringRef op, Value *x, llvm::SmallVector<NamedArgument, 4> extra, llvm::StringRef tag) {
    appendMeshArgument(extra, mesh_);
    return emitHook(b_, c_, op, x, std::move(extra), tag);
  }

  GraphBuilder &b_;
  const StyledCall &c_;
  StyledModule module_;
  const std::vector<DTensorMesh> &meshes_;
  MeshId mesh_;
  std::map<MeshId, std::unique_ptr<CallHooks>> meshHooks_; // onMesh's
  const llvm::DenseSet<const Value *> &requiresGrad_;
  llvm::DenseMap<const Value *, int64_t> &tokenSplits_;
};

class PlanApplier {
public:
  PlanApplier(PassContext &ctx) : ctx_(ctx), plan_(*ctx.plan), graph_(ctx.program.graph()) {}

  llvm::Error run() {
    if (llvm::Error err = chooseMeshes())
      return err;
    if (llvm::Error err = collectStyledModules())
      return err;
    if (llvm::Error err = distributeParameters())
      return err;
    requiresGrad_ = valuesRequiringGrad(graph_, plan_, &ctx_.state.retrainedByStyle);
    if (llvm::Error err = applyActivationCheckpointing(plan_, ctx_.program.graph(), ctx_.state))
      return err;
    auto units = resolveFsdpUnits(plan_, ctx_.program.graph(), ctx_.state.dtensors, ctx_.state.dtensorMeshes);
    if (!units)
      return units.takeError();
    ctx_.state.fsdp.units = std::move(*units);
    for (const FsdpUnit &u : ctx_.state.fsdp.units)
      for (const Value *p : u.params)
        if (const InputSpec *in = explicitlyPlaced_.lookup(p))
          return makeError("placements for '{}': it is already a DTensor after fully_shard ('{}' on {})", in->target,
                           u.spec->pattern, u.label());
    for (unsigned i = 0; i < ctx_.state.fsdp.units.size(); ++i)
      for (const ModuleScope *m : ctx_.state.fsdp.units[i].members)
        fsdpUnitOf_[m] = i;
    // Each call runs the styles' hooks again and CommDebugMode names every call alike, so the
    // counts add up under one module; said once, as a reader of the table may expect one call.
    for (const ModuleScope *s : graph_.scopes().inForwardOrder())
      if (s->numCalls() > 1 && s->parent()->numCalls() == 1) // the outermost repeated module
        ctx_.state.warnings.push_back(
            fmt::format("{} is called {} times per forward: its calls' counts are added up under its name, "
                        "as CommDebugMode does",
                        s->displayName(), s->numCalls()));
    if (llvm::Error err = collectCalls())
      return err;
    if (llvm::Error err = collectCallsWithoutOps())
      return err;
    return rewrite();
  }

private:
  /// The meshes DTensors live on: each parallelize step's sub-mesh (`mesh["tp"]`, a flattened
  /// `mesh["ep"]`, a 2-D `mesh["ep", "etp"]` and the 1-D mesh of each of its dims), one per distinct
  /// sub-mesh in plan order; the sub-meshes explicit placements name. The plan's mesh where neither
  /// names one.
  llvm::Error chooseMeshes() {
    for (const ParallelizeStep &step : plan_.steps) {
      std::vector<MeshDimGroup> dims = step.subMeshDims();
      for (const ParallelStyle &style : step.styles)
        if (unsigned ndim = styleModel(style.kind).meshNdim(); ndim != dims.size())
          return makeError("{} on '{}' takes a {}-D device mesh; its parallelize step gives a {}-D one", name(style.kind),
                           style.pattern, ndim, dims.size());
      auto id = meshOf(dims);
      if (!id)
        return id.takeError();
      if (dims.size() > 1) // the 1-D meshes of its dims, which its hooks may use (StyleHooks::onMeshDim)
        for (const MeshDimGroup &dim : dims)
          if (auto sub = meshOf({dim}); !sub)
            return sub.takeError();
      for (const ParallelStyle &style : step.styles) {
        meshOfStyle_[&style] = *id;
        if (style.tpMeshDim) // the TP group its hooks slice the batch over (StyleHooks::onPlanMeshDim)
          if (auto tp = meshOf({MeshDimGroup{*style.tpMeshDim}}); !tp)
            return tp.takeError();
      }
    }
    for (const auto &[pattern, spec] : plan_.placements)
      if (auto id = placementMesh(spec); !id)
        return id.takeError();
    for (const InputSetting &setting : plan_.inputs)
      if (setting.placements)
        if (auto id = placementMesh(*setting.placements); !id)
          return id.takeError();
    if (ctx_.state.dtensorMeshes.empty()) // no DTensor: FSDP alone
      ctx_.state.dtensorMeshes.push_back(DTensorMesh{plan_.mesh, wholeMeshDims()});
    return llvm::Error::success();
  }

  llvm::SmallVector<MeshDimGroup, 2> wholeMeshDims() const {
    llvm::SmallVector<MeshDimGroup, 2> dims;
    for (unsigned i = 0; i < plan_.mesh.ndim(); ++i)
      dims.push_back({i});
    return dims;
  }

  /// The DTensor mesh of these plan mesh dims (one group per dim of it), made on first use.
  llvm::Expected<MeshId> meshOf(llvm::ArrayRef<MeshDimGroup> dims) {
    std::vector<DTensorMesh> &meshes = ctx_.state.dtensorMeshes;
    for (size_t i = 0; i < meshes.size(); ++i)
      if (llvm::equal(meshes[i].planDims, dims))
        return static_cast<MeshId>(i);
    if (meshes.size() > std::numeric_limits<MeshId>::max())
      return makeError("the plan's DTensors live on more than {} meshes (not supported)",
                       std::numeric_limits<MeshId>::max() + 1);
    meshes.push_back(DTensorMesh{llvm::equal(dims, wholeMeshDims()) ? plan_.mesh : plan_.mesh.subMesh(dims),
                                 {dims.begin(), dims.end()}});
    return static_cast<MeshId>(meshes.size() - 1);
  }

  /// The mesh of explicit placements: the sub-mesh of their dims, or the plan's mesh.
  llvm::Expected<MeshId> placementMesh(const PlacementSpec &spec) {
    if (spec.meshDims.empty())
      return meshOf(wholeMeshDims());
    llvm::SmallVector<MeshDimGroup, 2> dims;
    for (unsigned d : spec.meshDims)
      dims.push_back({d});
    return meshOf(dims);
  }

  /// (module, weight) of the program's aten::embedding lookups.
  using EmbeddingLookups = llvm::DenseSet<std::pair<const ModuleScope *, const Value *>>;

  llvm::Error collectStyledModules() {
    // Each module's own parameters (named_parameters(recurse=False), in the program's input order),
    // the first parameter below each module that is not its own, and the embedding lookups, each
    // found in one walk rather than per styled module.
    llvm::StringMap<std::vector<const InputSpec *>> ownParams;
    for (const InputSpec &in : graph_.inputs()) {
      if (in.kind != InputKind::Parameter || !in.value)
        continue;
      llvm::StringRef target = in.target;
      llvm::StringRef owner = target.contains('.') ? target.rsplit('.').first : "";
      ownParams[owner].push_back(&in);
      for (llvm::StringRef above = owner; !above.empty();) {
        above = above.contains('.') ? above.rsplit('.').first : "";
        childParams_.try_emplace(above, target.drop_front(above.empty() ? 0 : above.size() + 1));
      }
    }
    EmbeddingLookups lookups;
    for (const auto &n : graph_.nodes())
      if (n->opString() == "aten::embedding.default")
        if (const Argument *w = n->input("weight"); w && w->isTensor())
          lookups.insert({n->scope(), w->tensor()});
    // A pattern matches paths of as many segments only: the scopes by dot count (in forward
    // order), so that a 126-layer model's every style is not matched against every module.
    std::map<size_t, std::vector<const ModuleScope *>> scopesByDots;
    for (const ModuleScope *s : graph_.scopes().inForwardOrder())
      scopesByDots[s->path().empty() ? 0 : llvm::StringRef(s->path()).count('.') + 1].push_back(s);
    for (const ParallelizeStep &step : plan_.steps)
      for (const ParallelStyle &style : step.styles)
        for (const ModuleScope *s : scopesByDots[style.pattern.empty() ? 0 : llvm::StringRef(style.pattern).count('.') + 1])
          if (matchesModulePath(style.pattern, s->path())) {
            auto own = ownParams.find(s->path());
            const auto &params =
                directParams_.try_emplace(s, own == ownParams.end() ? std::vector<const InputSpec *>() : own->second)
                    .first->second;
            bool linear = isInstance(*s, TorchModuleBase::Linear, plan_);
            bool embedding =
                isInstance(*s, TorchModuleBase::Embedding, plan_) || isEmbeddingSubclass(*s, params, lookups);
            if (llvm::Error err = styleModel(style.kind).checkModule(
                    style, StyledModule{*s, linear, embedding, params, childParams_.lookup(s->path())}))
              return err;
            // decided now: fully_shard later renames the class (FSDPLinear, FSDPEmbedding)
            if (linear)
              linears_.insert(s);
            if (embedding)
              embeddings_.insert(s);
            styles_[s].push_back(&style);
            applications_.emplace_back(s, &style);
          }
    return llvm::Error::success();
  }

  /// A subclass of nn.Embedding (Gemma's scaled word embedding) that the plan does not name: the
  /// module is recognised by what nn.Embedding is: one direct parameter, `weight`,
  /// that an aten::embedding lookup in the module itself reads. The styles then treat it as torch's
  /// isinstance(module, nn.Embedding) does.
  static bool isEmbeddingSubclass(const ModuleScope &s, llvm::ArrayRef<const InputSpec *> params,
                                  const EmbeddingLookups &lookups) {
    if (params.size() != 1 || params.front()->target != (s.path().empty() ? "" : s.path() + ".") + "weight")
      return false;
    const Value *weight = params.front()->value;
    return weight->meta() && weight->meta()->rank() == 2 && lookups.contains({&s, weight});
  }

  void setParam(const InputSpec &in, Placements p, MeshId mesh) {
    ctx_.state.dtensors[in.value] = DTensorLayout{std::move(p), mesh};
  }

  StyledModule styledModule(const ModuleScope *s) const {
    auto params = directParams_.find(s); // none: a module only fully_shard wraps
    return {*s, linears_.contains(s), embeddings_.contains(s),
            params == directParams_.end() ? llvm::ArrayRef<const InputSpec *>()
                                          : llvm::ArrayRef<const InputSpec *>(params->second),
            childParams_.lookup(s->path())};
  }

  llvm::Error distributeParameters() {
    // Parameters and buffers by FQN, so that those below a module are one range (its path and a dot).
    std::vector<const InputSpec *> params;
    for (const InputSpec &in : graph_.inputs())
      if ((in.kind == InputKind::Parameter || in.kind == InputKind::Buffer) && in.value)
        params.push_back(&in);
    llvm::sort(params, [](const InputSpec *a, const InputSpec *b) { return a->target < b->target; });
    // In plan order: a later style on the same parameter overrides, as re-registration does.
    for (const auto &[scope, style] : applications_) {
      const StyleModel &model = styleModel(style->kind);
      StyledModule module = styledModule(scope);
      std::string prefix = scope->path().empty() ? "" : scope->path() + ".";
      auto first = llvm::partition_point(params, [&](const InputSpec *in) { return in->target < prefix; });
      for (auto it = first; it != params.end() && llvm::StringRef((*it)->target).startswith(prefix); ++it) {
        const InputSpec &in = **it;
        llvm::StringRef local = llvm::StringRef(in.target).drop_front(prefix.size());
        if (in.kind == InputKind::Buffer) {
          MeshId mesh = meshOfStyle_.lookup(style);
          if (model.replicatesBuffers() && !ctx_.state.dtensors.count(in.value))
            setParam(in, Placements(ctx_.state.dtensorMeshes[mesh].mesh.ndim(), Placement::replicate()), mesh);
          continue;
        }
        if (model.allReducesParameterGradients() && !local.contains('.'))
          ctx_.state.gradAllReduced[in.value] = {scope, meshOfStyle_.lookup(style)};
        if (model.parametersUsedLocally() && !local.contains('.') && !llvm::is_contained(localParams_[scope], in.value))
          localParams_[scope].push_back(in.value);
        std::optional<Placements> placement = model.parameterPlacements(*style, module, local, !local.contains('.'));
        if (!placement)
          continue;
        setParam(in, *placement, meshOfStyle_.lookup(style));
        if (model.retrainsParameters())
          ctx_.state.retrainedByStyle.insert(in.value);
      }
    }
    // Explicit placements are applied after every parallelize step.
    for (const auto &[pattern, spec] : plan_.placements)
      for (const InputSpec &in : graph_.inputs())
        if ((in.kind == InputKind::Parameter || in.kind == InputKind::Buffer) && in.value &&
            matchesModulePath(pattern, in.target)) {
          if (ctx_.state.dtensors.count(in.value))
            return makeError("placements for '{}': it is already a DTensor after parallelize_module", in.target);
          explicitlyPlaced_[in.value] = &in;
          ctx_.state.dtensors[in.value] = DTensorLayout{spec.placements, cantFail(placementMesh(spec))};
        }
    for (const InputSetting &setting : plan_.inputs) {
      if (!setting.placements)
        continue;
      std::optional<Argument> input = graph_.userInput(setting.key);
      if (!input || !input->isTensor())
        return makeError("plan placements for input '{}': the model has no tensor input '{}'", setting.key,
                         setting.key);
      ctx_.state.dtensors[input->tensor()] =
          DTensorLayout{setting.placements->placements, cantFail(placementMesh(*setting.placements))};
    }
    return llvm::Error::success();
  }

  llvm::Error collectCalls() {
    ModuleCalls analysis(graph_, [&](const ModuleScope *s) { return styles_.count(s) || fsdpUnitOf_.count(s); });
    llvm::DenseMap<const Value *, const InputSpec *> inputSpecOf;
    for (const InputSpec &in : graph_.inputs())
      if (in.value)
        inputSpecOf[in.value] = &in;
    for (ModuleCall &call : analysis.calls()) {
      StyledCall &c = calls_.emplace_back(std::move(call));
      // A call under no_grad runs every op without grad; one that only opens a no_grad block
      // (torchtitan's experts start with one) still runs its hooks with grad.
      c.gradEnabled = !ctx_.options.inference && llvm::any_of(llvm::seq(c.first, c.last + 1), [&](unsigned i) {
                        return graph_.nodes()[i]->gradEnabled();
                      });
      if (auto styled = styles_.find(c.scope); styled != styles_.end())
        c.styles = styled->second;
      if (auto unit = fsdpUnitOf_.find(c.scope); unit != fsdpUnitOf_.end())
        c.fsdpUnit = unit->second;
      if (const CallSignature *sig = callSignature(c.scope, c.number())) {
        if (llvm::Error err = takeSignature(c, *sig))
          return err;
        if (llvm::Error err = checkInputsPrecede(c))
          return err;
        continue;
      }
      std::string prefix = c.scope->path().empty() ? "" : c.scope->path() + ".";
      c.inputs = analysis.externalTensors(c, c.first, [&](const Value *v) {
        const InputSpec *spec = inputSpecOf.lookup(v);
        // module state (parameters, own buffers), not a forward argument
        return spec && (spec->kind == InputKind::Parameter ||
                        ((spec->kind == InputKind::Buffer || spec->kind == InputKind::TensorConstant) &&
                         llvm::StringRef(pathAfterCheckpointWrappers(plan_, spec->target)).startswith(prefix)));
      });
      c.args = c.inputs;
      if (llvm::Error err = checkInputsPrecede(c))
        return err;
    }
    return llvm::Error::success();
  }

  /// The call's arguments and inputs from its signature.
  static llvm::Error takeSignature(StyledCall &c, const CallSignature &sig) {
    c.hasSignature = true;
    llvm::DenseSet<const Value *> seen;
    llvm::Error err = llvm::Error::success();
    auto take = [&](const Argument &a) -> const Value * {
      for (const Value *v : a.tensors()) {
        if (v->producer() && c.contains(*v->producer()) && !err)
          err = makeError("{}: argument '{}' of its call {} is computed inside the call", c.scope->displayName(),
                          v->name(), c.number());
        if (seen.insert(v).second)
          c.inputs.push_back(v);
      }
      return a.isTensor() ? a.tensor() : nullptr;
    };
    for (const Argument &a : sig.args)
      c.args.push_back(take(a));
    for (const auto &[key, a] : sig.kwargs)
      c.kwargs.emplace_back(key, take(a));
    return err;
  }

  /// A styled module that runs no op (an identity) has no node for its hooks to go before. Where
  /// its tensor arguments reach no op of the program, only its outputs (as an identity's return
  /// value, its argument after the pre-hooks, does), its call and hooks go after the program's
  /// last node, and the program returns what they give; its collectives are the same wherever
  /// the call stands. Otherwise the graph does not tell which uses of an argument read the
  /// module's return value (no op in between): refused rather than predicted without the hooks.
  llvm::Error collectCallsWithoutOps() {
    llvm::DenseSet<const Value *> readByOps, returned;
    for (const auto &n : graph_.nodes())
      for (const Value *v : n->operands())
        readByOps.insert(v);
    for (const OutputSpec &out : graph_.outputs())
      for (const Value *v : out.value.tensors())
        returned.insert(v);
    for (const auto &entry : styles_) {
      // Named, not structured bindings: the lambdas capture the scope (clang before 16 rejects
      // capturing a structured binding).
      const ModuleScope *scope = entry.first;
      const std::vector<const ParallelStyle *> &styles = entry.second;
      if (llvm::any_of(calls_, [&](const StyledCall &c) { return c.scope == scope; }))
        continue;
      auto refuse = [&](llvm::StringRef why) {
        return makeError("{} '{}' on {}: the module runs no op, and {}", name(styles.front()->kind),
                         styles.front()->pattern, scope->displayName(), why.str());
      };
      const CallSignature *sig = callSignature(scope, 0);
      if (!sig || callSignature(scope, 1))
        return refuse("commlens places hooks on such a module only when it is called once with a recorded call "
                      "signature (python -m commlens.export records them)");
      for (const ModuleScope *a = scope->parent(); a; a = a->parent())
        if (a->numCalls() > 1)
          return refuse(fmt::format("its parent {} is called {} times", a->displayName(), a->numCalls()));
      StyledCall c{ModuleCall{}};
      c.scope = scope;
      c.scopeDepth = scope->depth();
      c.callPath.assign(c.scopeDepth, 0);
      c.first = c.last = static_cast<unsigned>(graph_.nodes().size());
      c.styles = styles;
      if (llvm::Error err = takeSignature(c, *sig))
        return err;
      for (const Value *v : c.inputs) {
        if (readByOps.count(v))
          return refuse(fmt::format("its argument '{}' is read by ops too: commlens cannot tell which of them read "
                                    "the module's return value",
                                    v->name()));
        if (returned.count(v))
          c.outputs.push_back(v);
      }
      callsWithoutOps_.push_back(std::move(c));
    }
    return llvm::Error::success();
  }

  /// The program's record of a module call's signature. It names modules as the exported model
  /// did: a module the plan's checkpoint_wrapper moved below a wrapper is found by its path
  /// without the wrappers' "._checkpoint_wrapped_module".
  const CallSignature *callSignature(const ModuleScope *scope, unsigned call) const {
    if (const CallSignature *sig = graph_.callSignature(scope->path(), call))
      return sig;
    static constexpr llvm::StringLiteral kWrapped = "._checkpoint_wrapped_module";
    std::string exported = scope->path();
    for (size_t at; (at = exported.find(kWrapped.data())) != std::string::npos;)
      exported.erase(at, kWrapped.size());
    return exported == scope->path() ? nullptr : graph_.callSignature(exported, call);
  }

  /// The hooks run when the call begins, on its inputs: each must be computed before the call's
  /// first node. A program whose nn_module_stack puts a node of another module amid the call's
  /// nodes breaks that (found by fuzz/predict: the rewrite read a value not yet defined).
  llvm::Error checkInputsPrecede(const StyledCall &c) const {
    for (const Value *v : c.inputs)
      if (const Node *p = v->producer(); p && p->index() > c.first)
        return makeError("{}: argument '{}' of its call {} is computed after the call begins (at node '{}'): the "
                         "module's nodes are not contiguous",
                         c.scope->displayName(), v->name(), c.number(), graph_.nodes()[c.first]->name());
    return llvm::Error::success();
  }

  /// FSDP's forward hooks: identities over the call's tensor inputs (pre: fully_shard's pre-hook
  /// is prepended, so it runs before the styles' and wraps the raw inputs in its post-backward
  /// Function) or outputs (post: registered after the styles' output hooks).
  void fsdpHook(GraphBuilder &b, const StyledCall &c, llvm::StringRef op, std::vector<Value *> &values,
                llvm::StringRef tag) {
    TensorList in, out;
    for (Value *v : values) {
      in.push_back(v);
      out.push_back(b.tensor((v->name() + "_" + tag).str(), *v->meta()));
    }
    Node *n = b.graph().appendNode(
        fmt::format("fsdp_{}_{}", tag, c.scope->path().empty() ? "root" : c.scope->path()), op,
        {{"inputs", in, false}, {"unit", static_cast<int64_t>(*c.fsdpUnit), true},
         {"module", c.scope->displayName(), true}},
        {Argument(out)});
    n->setScope(const_cast<ModuleScope *>(c.scope), c.callPath);
    n->setGradEnabled(c.gradEnabled);
    values.assign(out.begin(), out.end());
  }

  CallHooks hooksOf(GraphBuilder &b, const StyledCall &c, const ParallelStyle &style) {
    return CallHooks(b, c, styledModule(c.scope), ctx_.state.dtensorMeshes, meshOfStyle_.lookup(&style), requiresGrad_,
                     tokenSplits_);
  }

  /// The pre-hooks of one call, in registration order; binds each argument they change to what
  /// it becomes.
  llvm::Error preHooks(GraphBuilder &b, const StyledCall &c) {
    if (c.fsdpUnit) {
      std::vector<Value *> values;
      for (const Value *v : c.inputs)
        values.push_back(b.map(v));
      fsdpHook(b, c, boundaryOpTarget(BoundaryOp::FsdpPreForward), values, "pre");
      for (size_t i = 0; i < values.size(); ++i)
        b.bind(c.inputs[i], values[i]);
    }
    HookArguments arguments;
    arguments.hasSignature = c.hasSignature;
    for (const Value *v : c.args)
      arguments.args.push_back(v ? b.map(v) : nullptr);
    for (const auto &[key, v] : c.kwargs)
      arguments.kwargs.emplace_back(key, v ? b.map(v) : nullptr);
    for (const ParallelStyle *style : c.styles) {
      CallHooks hooks = hooksOf(b, c, *style);
      if (llvm::Error err = styleModel(style->kind).preHook(*style, hooks, arguments))
        return err;
    }
    // The forward reads these parameters' local shards (param.to_local(), after the hooks ran);
    // those no plan made DTensors it reads as they are. (A style that reads them so made the
    // call's styles non-empty; to_local keeps each DTensor's own mesh.)
    if (auto local = localParams_.find(c.scope); local != localParams_.end()) {
      CallHooks hooks = hooksOf(b, c, *c.styles.front());
      for (const Value *p : local->second)
        if (ctx_.state.dtensors.count(p))
          b.bind(p, hooks.annotate(b.map(p), std::nullopt, std::nullopt, /*useLocalOutput=*/true, "local"));
    }
    // The graph has one value where the call may have several arguments: a tensor passed twice
    // must become the same value both times.
    llvm::DenseMap<const Value *, Value *> becomes;
    auto rebind = [&](const Value *old, Value *now) -> llvm::Error {
      if (!old)
        return llvm::Error::success();
      auto [it, fresh] = becomes.try_emplace(old, now);
      if (!fresh && it->second != now)
        return makeError("{}: tensor '{}' is passed as two arguments that the pre-hooks prepare differently (not "
                         "supported)",
                         c.scope->displayName(), old->name());
      return llvm::Error::success();
    };
    for (size_t i = 0; i < arguments.args.size(); ++i)
      if (llvm::Error err = rebind(c.args[i], arguments.args[i]))
        return err;
    for (size_t i = 0; i < arguments.kwargs.size(); ++i)
      if (llvm::Error err = rebind(c.kwargs[i].second, arguments.kwargs[i].second))
        return err;
    for (const auto &[old, now] : becomes)
      b.bind(old, now);
    return llvm::Error::success();
  }

  llvm::Error postHooks(GraphBuilder &b, const StyledCall &c, std::vector<Value *> &outputs) {
    for (const ParallelStyle *style : c.styles) {
      CallHooks hooks = hooksOf(b, c, *style);
      if (llvm::Error err = styleModel(style->kind).postHook(*style, hooks, outputs))
        return err;
    }
    if (c.fsdpUnit)
      fsdpHook(b, c, boundaryOpTarget(BoundaryOp::FsdpPostForward), outputs, "post");
    return llvm::Error::success();
  }

  /// Tied parameters reach the graph through one placeholder, but parallelize_module gives each
  /// module its own (it re-registers the parameters it distributes, which unties them). A use
  /// in module M reads the tied name registered on M (or its nearest ancestor).
  void untieParameters() {
    std::map<std::string, std::vector<const InputSpec *>> groups; // canonical FQN -> members
    for (const InputSpec &in : graph_.inputs())
      if (in.kind == InputKind::Parameter && in.value)
        groups[in.aliasOf.empty() ? in.target : in.aliasOf].push_back(&in);
    for (auto &[canonical, members] : groups) {
      if (members.size() < 2)
        continue;
      std::vector<TiedMember> tied;
      for (const InputSpec *m : members) { // scopes are named on the tree checkpoint_wrapper leaves
        std::string target = pathAfterCheckpointWrappers(plan_, m->target);
        llvm::StringRef owner = llvm::StringRef(target).contains('.') ? llvm::StringRef(target).rsplit('.').first : "";
        tied.push_back({m->value, owner.str()});
      }
      for (const InputSpec *m : members)
        tiedGroup_[m->value] = tied;
    }
  }

  /// The tied member registered directly on the innermost of `scope` and its ancestors; `v`
  /// itself when it is not tied or no such module registers one.
  const Value *ownerOfUse(const Value *v, const ModuleScope *scope) const {
    auto it = tiedGroup_.find(v);
    if (it == tiedGroup_.end())
      return v;
    for (const ModuleScope *s = scope; s; s = s->parent())
      for (const TiedMember &m : it->second)
        if (m.owner == s->path())
          return m.value;
    return v;
  }

  llvm::Error rewrite() {
    untieParameters();
    GraphBuilder b(graph_);
    // Calls starting / ending at each node: outer calls open first and close last.
    std::multimap<unsigned, StyledCall *> opening, closing;
    for (StyledCall &c : calls_) {
      opening.emplace(c.first, &c);
      closing.emplace(c.last, &c);
    }
    struct Saved {
      const StyledCall *call;
      std::vector<std::pair<const Value *, Value *>> inputs;
    };
    std::vector<Saved> open;
    for (const auto &n : graph_.nodes()) {
      auto [ob, oe] = opening.equal_range(n->index());
      std::vector<StyledCall *> starting;
      for (auto it = ob; it != oe; ++it)
        starting.push_back(it->second);
      std::sort(starting.begin(), starting.end(),
                [](const StyledCall *a, const StyledCall *b) { return a->scope->depth() < b->scope->depth(); });
      for (StyledCall *c : starting) {
        Saved saved{c, {}};
        for (const Value *v : c->inputs) // every argument is among them
          saved.inputs.emplace_back(v, b.map(v));
        if (auto local = localParams_.find(c->scope); local != localParams_.end())
          for (const Value *p : local->second) // their local shards are the call's own
            saved.inputs.emplace_back(p, b.map(p));
        if (llvm::Error err = preHooks(b, *c))
          return err;
        open.push_back(std::move(saved));
      }
      // Uses of a tied parameter read the copy registered on the using module.
      std::vector<std::pair<const Value *, Value *>> untied;
      for (Value *v : n->operands())
        if (const Value *owner = ownerOfUse(v, n->scope()); owner != v) {
          untied.emplace_back(v, b.map(v));
          b.bind(v, b.map(owner));
        }
      b.copy(*n);
      for (const auto &[v, mapped] : untied)
        b.bind(v, mapped);
      auto [cb, ce] = closing.equal_range(n->index());
      std::vector<StyledCall *> ending;
      for (auto it = cb; it != ce; ++it)
        ending.push_back(it->second);
      std::sort(ending.begin(), ending.end(),
                [](const StyledCall *a, const StyledCall *b) { return a->scope->depth() > b->scope->depth(); });
      for (StyledCall *c : ending) {
        assert(!open.empty() && open.back().call == c && "module calls nest");
        for (const auto &[old, mapped] : open.back().inputs)
          b.bind(old, mapped);
        open.pop_back();
        std::vector<Value *> outputs;
        for (const Value *v : c->outputs)
          outputs.push_back(b.map(v));
        if (llvm::Error err = postHooks(b, *c, outputs))
          return err;
        for (size_t i = 0; i < outputs.size(); ++i)
          b.bind(c->outputs[i], outputs[i]);
      }
    }
    for (const StyledCall &c : callsWithoutOps_) {
      std::vector<std::pair<const Value *, Value *>> saved;
      for (const Value *v : c.inputs)
        saved.emplace_back(v, b.map(v));
      if (llvm::Error err = preHooks(b, c))
        return err;
      // The module returns its argument as its pre-hooks left it.
      std::vector<Value *> outputs;
      for (const Value *v : c.outputs)
        outputs.push_back(b.map(v));
      for (const auto &[old, mapped] : saved)
        b.bind(old, mapped);
      if (llvm::Error err = postHooks(b, c, outputs))
        return err;
      for (size_t i = 0; i < outputs.size(); ++i)
        b.bind(c.outputs[i], outputs[i]);
    }
    // Parameter and input layouts were keyed by the old graph's values.
    llvm::DenseMap<const Value *, DTensorLayout> remapped;
    for (auto &[v, layout] : ctx_.state.dtensors)
      remapped[b.map(v)] = layout;
    ctx_.state.dtensors = std::move(remapped);
    for (FsdpUnit &u : ctx_.state.fsdp.units) {
      for (const Value *&p : u.params)
        p = b.map(p);
      llvm::DenseMap<const Value *, int64_t> shardDims;
      for (const auto &[p, dim] : u.shardDimOf)
        shardDims[b.map(p)] = dim;
      u.shardDimOf = std::move(shardDims);
    }
    llvm::DenseSet<const Value *> retrained;
    for (const Value *v : ctx_.state.retrainedByStyle)
      retrained.insert(b.map(v));
    ctx_.state.retrainedByStyle = std::move(retrained);
    llvm::DenseMap<const Value *, std::pair<const ModuleScope *, MeshId>> gradAllReduced;
    for (const auto &[v, owner] : ctx_.state.gradAllReduced)
      gradAllReduced[b.map(v)] = owner;
    ctx_.state.gradAllReduced = std::move(gradAllReduced);
    ctx_.program.replaceGraph(b.finish());
    return llvm::Error::success();
  }

  PassContext &ctx_;
  const ShardingPlan &plan_;
  const Graph &graph_;
  std::map<const ModuleScope *, std::vector<const ParallelStyle *>> styles_;
  /// The DTensor mesh of each style's parallelize step.
  llvm::DenseMap<const ParallelStyle *, MeshId> meshOfStyle_;
  llvm::StringMap<llvm::StringRef> childParams_; // module path -> the first parameter below its own
  llvm::DenseSet<const ModuleScope *> linears_;    // styled modules that are nn.Linear
  llvm::DenseSet<const ModuleScope *> embeddings_; // styled modules that are nn.Embedding
  /// Per styled module, its own parameters (StyledModule::parameters), found once.
  std::map<const ModuleScope *, std::vector<const InputSpec *>> directParams_;
  std::map<const ModuleScope *, unsigned> fsdpUnitOf_;
  llvm::DenseMap<const Value *, const InputSpec *> explicitlyPlaced_; // by the plan's `placements`
  /// The program's values that require grad (StyleHooks::requiresGrad).
  llvm::DenseSet<const Value *> requiresGrad_;
  /// Values holding a rank's slice of an MoE layer's tokens (StyleHooks::splitTokens).
  llvm::DenseMap<const Value *, int64_t> tokenSplits_;
  /// Per styled module, the parameters its forward uses as local shards (parametersUsedLocally).
  std::map<const ModuleScope *, std::vector<const Value *>> localParams_;
  std::vector<std::pair<const ModuleScope *, const ParallelStyle *>> applications_;
  std::vector<StyledCall> calls_;
  std::vector<StyledCall> callsWithoutOps_; // called after the program's last node (collectCallsWithoutOps)
  struct TiedMember {
    const Value *value;
    std::string owner; // the module registering it, on the tree checkpoint wrappers make ("" the root)
  };
  llvm::DenseMap<const Value *, std::vector<TiedMember>> tiedGroup_;
};

} // namespace

llvm::Error ApplyShardingPlan::run(PassContext &ctx) {
  if (!ctx.plan)
    return makeError("apply-plan needs a plan");
  return PlanApplier(ctx).run();
}

} // namespace commlens
