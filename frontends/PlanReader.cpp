#include "frontends/PlanReader.h"

#include "ir/JsonRef.h"
#include "parallel/StyleParts.h"
#include "ir/Error.h"
#include "ir/InputFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <fstream>
#include <set>
#include <sstream>

namespace commlens {
namespace {

/// The largest world a plan may describe (2^20 ranks, beyond any machine built so far).
constexpr int64_t kMaxMeshDevices = int64_t{1} << 20;

unsigned meshDimByName(const DeviceMesh &mesh, const JsonRef &r) {
  std::string dimName = r.asString();
  if (auto idx = mesh.dimIndex(dimName))
    return *idx;
  if (mesh.dimGroup(dimName))
    r.fail(fmt::format("'{}' is a flattened dim (mesh.flattened_dims), which only fully_shard's mesh_dims and "
                       "parallelize steps may name (DTensor placements on a flattened dim are not modelled)",
                       dimName));
  std::string names;
  for (const std::string &n : mesh.dimNames)
    names += (names.empty() ? "'" : ", '") + n + "'";
  r.fail(fmt::format("mesh dim '{}' is not in the mesh (dim names: [{}])", dimName, names));
}

/// A name FSDP or a parallelize step may take as its mesh: a mesh dim or a flattened one
/// (mesh.flattened_dims).
MeshDimGroup meshDimGroupByName(const DeviceMesh &mesh, const JsonRef &r) {
  if (auto group = mesh.dimGroup(r.asStringRef()))
    return *group;
  return {meshDimByName(mesh, r)}; // fails, naming the mesh's dims
}

PlacementSpec decodePlacementSpec(const DeviceMesh &mesh, const JsonRef &r) {
  r.rejectUnknownKeys({"mesh_dims", "placements"});
  PlacementSpec spec;
  if (auto dims = r.optField("mesh_dims"))
    for (const JsonRef &d : dims->items())
      spec.meshDims.push_back(meshDimByName(mesh, d));
  for (const JsonRef &p : r.field("placements").items())
    spec.placements.push_back(decodePlacement(p));
  size_t want = spec.meshDims.empty() ? mesh.ndim() : spec.meshDims.size();
  if (spec.placements.size() != want)
    r.fail(fmt::format("{} placements for {} mesh dims", spec.placements.size(), want));
  return spec;
}

std::optional<ScalarType> decodeDtype(const JsonRef &policy, const char *field) {
  auto f = policy.optField(field);
  if (!f)
    return std::nullopt;
  static const std::pair<const char *, ScalarType> kDtypes[] = {
      {"float32", ScalarType::Float}, {"bfloat16", ScalarType::BFloat16}, {"float16", ScalarType::Half}};
  std::string text = f->asString();
  for (const auto &[n, t] : kDtypes)
    if (text == n)
      return t;
  f->fail(fmt::format("dtype '{}' (expected \"float32\", \"bfloat16\" or \"float16\")", text));
}

/// mesh.flattened_dims: {name: [dim, dim, ...]}, each as `mesh[dims]._flatten(name)` makes it
/// (docs/plan-format.md, "mesh").
std::vector<std::pair<std::string, MeshDimGroup>> decodeFlattenedDims(const DeviceMesh &mesh, const JsonRef &r) {
  std::vector<std::pair<std::string, MeshDimGroup>> out;
  for (const auto &[name, dims] : r.members()) {
    if (mesh.dimIndex(name) || llvm::any_of(out, [&](const auto &seen) { return seen.first == name; }))
      dims.fail(fmt::format("flattened dim '{}' is named twice (or is a mesh dim's name)", name.str()));
    MeshDimGroup group;
    for (const JsonRef &d : dims.items()) {
      unsigned dim = meshDimByName(mesh, d);
      // DeviceMesh slices dims in the mesh's order: a flattened dim's ranks are row-major in them.
      if (!group.empty() && dim <= group.back())
        d.fail(fmt::format("mesh dim '{}' is out of the mesh's order (a flattened dim takes dims in mesh order, "
                           "each once)",
                           d.asString()));
      group.push_back(dim);
    }
    if (group.size() < 2)
      dims.fail(fmt::format("flattened dim '{}' of {} mesh dims (it flattens two or more)", name.str(), group.size()));
    out.emplace_back(name.str(), std::move(group));
  }
  return out;
}

/// One fully_shard entry (docs/plan-format.md, "fully_shard").
FullyShardUnit decodeFullyShard(const DeviceMesh &mesh, const JsonRef &r) {
  r.rejectUnknownKeys({"fqn", "mesh_dims", "reshard_after_forward", "mp_policy", "offload_policy",
                        "requires_gradient_sync", "requires_all_reduce", "forward_prefetch", "backward_prefetch",
                        "gradient_divide_factor", "shard_dims", "force_sum_reduction_for_comms"});
  FullyShardUnit u;
  if (JsonRef fqn = r.field("fqn"); fqn.isArray()) {
    for (const JsonRef &item : fqn.items())
      u.listPatterns.push_back(item.asString());
    if (u.listPatterns.empty())
      fqn.fail("an empty list of modules (fully_shard takes a module or a non-empty list of them)");
    u.pattern = fmt::format("[{}]", fmt::join(u.listPatterns, ", "));
  } else {
    u.pattern = fqn.asString();
  }
  JsonRef dims = r.field("mesh_dims");
  for (const JsonRef &d : dims.items()) {
    MeshDimGroup group = meshDimGroupByName(mesh, d);
    for (const MeshDimGroup &seen : u.meshDims)
      if (llvm::any_of(group, [&](unsigned dim) { return llvm::is_contained(seen, dim); }))
        d.fail(fmt::format("mesh dim '{}' given twice", d.asString()));
    u.meshDims.push_back(std::move(group));
  }
  if (u.meshDims.empty() || u.meshDims.size() > 2)
    dims.fail(fmt::format("{} mesh dims (fully_shard takes a 1-D mesh, or a 2-D (replicate, shard) mesh for HSDP)",
                          u.meshDims.size()));
  if (auto raf = r.optField("reshard_after_forward")) {
    if (raf->isBool()) {
      u.reshard = raf->asBool() ? FullyShardUnit::Reshard::Yes : FullyShardUnit::Reshard::No;
    } else {
      int64_t group = raf->asInt();
      int64_t shard = mesh.groupSize(u.meshDims.back());
      if (group < 1 || group > shard || shard % group != 0)
        raf->fail(fmt::format("reshard_after_forward {} is not a factor of the shard group size {}", group, shard));
      // As fully_shard normalises it: 1 is False, the whole shard group is True.
      u.reshard = group == 1       ? FullyShardUnit::Reshard::No
                  : group == shard ? FullyShardUnit::Reshard::Yes
                                   : FullyShardUnit::Reshard::ToGroup;
      u.reshardGroupSize = group;
    }
  }
  if (auto mp = r.optField("mp_policy")) {
    mp->rejectUnknownKeys({"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"});
    u.paramDtype = decodeDtype(*mp, "param_dtype");
    u.reduceDtype = decodeDtype(*mp, "reduce_dtype");
    u.outputDtype = decodeDtype(*mp, "output_dtype");
    u.castForwardInputs = boolOr(*mp, "cast_forward_inputs", true);
  }
  if (auto off = r.optField("offload_policy")) {
    std::string kind = off->field("kind").asString();
    if (kind == "cpu") {
      off->rejectUnknownKeys({"kind", "pin_memory"});
      u.offloadToCpu = true;
      u.pinMemory = boolOr(*off, "pin_memory", true);
    } else if (kind == "none") {
      off->rejectUnknownKeys({"kind"});
    } else {
      off->field("kind").fail(fmt::format("offload policy '{}' (expected \"none\" or \"cpu\")", kind));
    }
  }
  // set_gradient_divide_factor changes only how FSDP divides (a pre-multiplied sum instead of an
  // average, torch 2.13 _get_gradient_divide_factors): no collective or byte, so it is checked,
  // not kept.
  if (auto factor = r.optField("gradient_divide_factor"); factor && !(factor->asFloat() > 0))
    factor->fail(fmt::format("gradient divide factor {} (expected a positive number)", factor->dump()));
  // set_force_sum_reduction_for_comms: a SUM reduction and a division after it (the same
  // _get_gradient_divide_factors): checked, not kept, for the same reason.
  boolOr(r, "force_sum_reduction_for_comms", false);
  u.requiresGradientSync = boolOr(r, "requires_gradient_sync", true);
  u.requiresAllReduce = boolOr(r, "requires_all_reduce", true);
  for (auto [key, list] : {std::pair{"forward_prefetch", &u.forwardPrefetch}, {"backward_prefetch", &u.backwardPrefetch}})
    if (auto targets = r.optField(key))
      for (const JsonRef &t : targets->items())
        list->push_back(t.asString());
  if (auto dims = r.optField("shard_dims")) {
    if (!u.listPatterns.empty())
      dims->fail("shard_dims of a list unit is not modelled");
    for (const auto &[param, dim] : dims->members()) {
      int64_t d = dim.asInt();
      if (d < 1 || d > 64)
        dim.fail(fmt::format("shard dim {} (expected a dim above 0, FSDP's default)", d));
      u.shardDims[param.str()] = d;
    }
  }
  return u;
}

/// A step of expert-parallel styles only: torchtitan and transformers shard the experts with FSDP
/// on a mesh of their own, so the dense units may use the step's dim (checked per parameter in
/// fsdp/FullyShard).
bool onlyExpertParallel(const ParallelizeStep &step) {
  return !step.styles.empty() && llvm::all_of(step.styles, [](const ParallelStyle &s) {
    return s.kind == ParallelStyle::Kind::TorchtitanExpertParallel ||
           s.kind == ParallelStyle::Kind::TorchtitanExpertTensorParallel ||
           s.kind == ParallelStyle::Kind::TransformersEpDispatchExpertsParallel;
  });
}

ShardingPlan decodePlan(const JsonRef &root) {
  if (root.field("format").asString() != "commlens-plan")
    root.field("format").fail("not a commlens plan (expected \"commlens-plan\")");
  if (root.field("version").asInt() != 1)
    root.field("version").fail(fmt::format("unsupported plan version {} (commlens reads version 1)",
                                           root.field("version").asInt()));
  root.rejectUnknownKeys({"format", "version", "name", "source", "mesh", "parallelize", "fully_shard",
                           "src_data_rank", "placements", "inputs", "frozen", "frozen_after_parallelize", "loss",
                           "loss_parallel", "activation_checkpoint", "module_subclasses"});
  ShardingPlan plan;
  if (auto n = root.optField("name"))
    plan.name = n->asString();
  if (auto s = root.optField("source"))
    plan.source = s->asString();

  JsonRef mesh = root.field("mesh");
  mesh.rejectUnknownKeys({"shape", "dim_names", "device_type", "flattened_dims"});
  int64_t devices = 1;
  for (const JsonRef &d : mesh.field("shape").items()) {
    int64_t size = d.asInt();
    if (size < 1)
      d.fail("mesh sizes must be positive");
    // The predictor visits every mesh coordinate in places (uneven local shards): bound the world.
    if (llvm::MulOverflow(devices, size, devices) || devices > kMaxMeshDevices)
      mesh.field("shape").fail(fmt::format("the mesh has more than {} devices", kMaxMeshDevices));
    plan.mesh.shape.push_back(size);
  }
  if (plan.mesh.shape.empty())
    mesh.field("shape").fail("the mesh needs at least one dim");
  if (auto names = mesh.optField("dim_names")) {
    for (const JsonRef &n : names->items())
      plan.mesh.dimNames.push_back(n.asString());
    if (plan.mesh.dimNames.size() != plan.mesh.shape.size())
      names->fail(fmt::format("{} dim names for a {}-D mesh", plan.mesh.dimNames.size(), plan.mesh.shape.size()));
  } else if (plan.mesh.shape.size() > 1) {
    mesh.fail("an N-D mesh needs dim_names");
  }
  if (auto flattened = mesh.optField("flattened_dims"))
    plan.mesh.flattened = decodeFlattenedDims(plan.mesh, *flattened);
  std::string device = mesh.field("device_type").asString();
  if (device != "cpu" && device != "cuda")
    mesh.field("device_type").fail(fmt::format("device type '{}' (expected \"cpu\" or \"cuda\")", device));
  plan.mesh.deviceType = device == "cuda" ? MeshDeviceType::Cuda : MeshDeviceType::Cpu;

  for (const JsonRef &step : root.field("parallelize").items()) {
    ParallelizeStep s;
    step.rejectUnknownKeys({"mesh_dim", "plan"});
    if (auto dim = step.optField("mesh_dim")) {
      if (dim->isArray()) { // a 2-D sub-mesh, mesh["ep", "etp"]
        for (const JsonRef &name : dim->items())
          s.meshDims.push_back(meshDimGroupByName(plan.mesh, name));
        if (s.meshDims.size() != 2)
          dim->fail(fmt::format("a list of {} mesh dims (a sub-mesh of 2 dims, or one dim's name)", s.meshDims.size()));
        for (unsigned d : s.meshDims[0])
          if (llvm::is_contained(s.meshDims[1], d))
            dim->fail(fmt::format("mesh dim '{}' is in both dims of the sub-mesh", plan.mesh.dimNames[d]));
        if (s.meshDims[0].back() > s.meshDims[1].front()) // DeviceMesh.__getitem__ raises KeyError
          dim->fail("the sub-mesh's dims are not in the mesh's order (torch raises \"Mesh dim indices should be in "
                    "ascending order\")");
      } else {
        s.meshDims.push_back(meshDimGroupByName(plan.mesh, *dim));
      }
    } else if (plan.mesh.ndim() > 1)
      step.fail("mesh_dim may be null only on a 1-D mesh");
    for (const JsonRef &entry : step.field("plan").items()) {
      s.styles.push_back(decodeParallelStyle(entry, entry.field("fqn").asString()));
      if (auto tp = entry.optField("tp_mesh_dim")) // a plain dim: torch slices mesh["tp"]
        s.styles.back().tpMeshDim = meshDimByName(plan.mesh, *tp);
    }
    plan.steps.push_back(std::move(s));
  }
  if (auto units = root.optField("fully_shard"))
    for (const JsonRef &u : units->items()) {
      plan.fullyShard.push_back(decodeFullyShard(plan.mesh, u));
      for (const MeshDimGroup &group : plan.fullyShard.back().meshDims)
        for (unsigned dim : group)
          for (const ParallelizeStep &step : plan.steps)
          if (llvm::any_of(step.subMeshDims(), [&](const MeshDimGroup &g) { return llvm::is_contained(g, dim); }) &&
              !onlyExpertParallel(step))
            u.field("mesh_dims").fail(fmt::format("mesh dim '{}' is used by a parallelize step too (FSDP and tensor "
                                                  "parallel dims must differ)",
                                                  plan.mesh.dimNames[dim]));
    }
  if (auto units = root.optField("activation_checkpoint"))
    for (const JsonRef &u : units->items()) {
      u.rejectUnknownKeys({"fqn", "wrapper", "save_ops", "early_stop", "recompute_every_second",
                           "recompute_mm_rhs_shapes"});
      ActivationCheckpointUnit unit;
      unit.pattern = u.field("fqn").asString();
      unit.wrapper = boolOr(u, "wrapper", true);
      unit.earlyStop = boolOr(u, "early_stop", true);
      auto opName = [](const JsonRef &op) {
        std::string name = op.asString();
        if (std::count(name.begin(), name.end(), '.') != 2)
          op.fail(fmt::format("'{}' is not an op overload name (namespace.op.overload, e.g. 'aten.mm.default')",
                              name));
        return name;
      };
      if (auto ops = u.optField("save_ops"))
        for (const JsonRef &op : ops->items())
          unit.saveOps.push_back(opName(op));
      if (auto ops = u.optField("recompute_every_second"))
        for (const JsonRef &op : ops->items()) {
          std::string name = opName(op);
          if (!llvm::is_contained(unit.saveOps, name))
            op.fail(fmt::format("'{}' is not in save_ops (recompute_every_second recomputes every other call of "
                                "an op the policy saves)",
                                name));
          if (llvm::StringRef(name).startswith("_c10d_functional.") || llvm::StringRef(name).startswith("c10d_functional."))
            op.fail(fmt::format("'{}' is a collective (recompute_every_second is modelled for compute ops)", name));
          unit.recomputeEverySecond.push_back(std::move(name));
        }
      if (auto shapes = u.optField("recompute_mm_rhs_shapes")) {
        if (!llvm::is_contained(unit.recomputeEverySecond, "aten.mm.default"))
          shapes->fail("recompute_mm_rhs_shapes needs 'aten.mm.default' in recompute_every_second (torchtitan's "
                       "per-op policy)");
        for (const JsonRef &shape : shapes->items()) {
          auto dims = shape.items();
          if (dims.size() != 2)
            shape.fail("expected [rows, columns] of an mm's second operand");
          std::array<int64_t, 2> rc{dims[0].asInt(), dims[1].asInt()};
          if (rc[0] < 1 || rc[1] < 1)
            shape.fail("sizes must be positive");
          unit.recomputeMmRhsShapes.push_back(rc);
        }
      }
      if (!unit.saveOps.empty() && !unit.wrapper)
        u.field("save_ops").fail("save_ops needs wrapper=true (a selective policy is passed to checkpoint_wrapper)");
      if (!unit.earlyStop && !unit.wrapper)
        u.field("early_stop").fail("early_stop=false needs wrapper=true (it is passed to checkpoint_wrapper)");
      plan.activationCheckpoint.push_back(std::move(unit));
    }
  if (auto r = root.optField("src_data_rank"))
    plan.srcDataRank = r->asInt();
  else
    plan.srcDataRank.reset();
  if (auto placements = root.optField("placements"))
    for (const auto &[pattern, spec] : placements->members())
      plan.placements.emplace_back(pattern, decodePlacementSpec(plan.mesh, spec));
  if (auto inputs = root.optField("inputs"))
    for (const auto &[key, setting] : inputs->members()) {
      setting.rejectUnknownKeys({"requires_grad", "placements"});
      InputSetting in;
      in.key = key;
      in.requiresGrad = boolOr(setting, "requires_grad", false);
      if (auto p = setting.optField("placements"))
        in.placements = decodePlacementSpec(plan.mesh, *p);
      plan.inputs.push_back(std::move(in));
    }
  for (auto [key, list] : {std::pair{"frozen", &plan.frozen}, {"frozen_after_parallelize", &plan.frozenAfterParallelize}})
    if (auto patterns = root.optField(key))
      for (const JsonRef &f : patterns->items())
        list->push_back(f.asString());
  if (auto loss = root.optField("loss")) {
    loss->rejectUnknownKeys({"kind", "targets", "seed", "reduction", "ignore_index", "logits_dtype"});
    std::string kind = loss->field("kind").asString();
    if (kind == "sum") {
      plan.loss.kind = LossSpec::Kind::Sum;
    } else if (kind == "cross_entropy") {
      plan.loss.kind = LossSpec::Kind::CrossEntropy;
      if (auto t = loss->optField("targets")) {
        plan.loss.targets = t->asString();
        llvm::StringRef targets(plan.loss.targets);
        uint64_t k;
        if (targets != "random" && !(targets.consume_front("input:") && !targets.getAsInteger(10, k)))
          t->fail(fmt::format("cross_entropy targets '{}' (expected \"random\" or \"input:K\")", plan.loss.targets));
      }
      if (auto seed = loss->optField("seed"))
        (void)seed->asInt(); // the random targets' values change no collective: checked, not kept
      if (auto r = loss->optField("reduction")) {
        plan.loss.reduction = r->asString();
        if (plan.loss.reduction != "mean" && plan.loss.reduction != "sum")
          r->fail(fmt::format("cross_entropy reduction '{}' (expected \"mean\" or \"sum\")", plan.loss.reduction));
      }
      if (auto i = loss->optField("ignore_index"))
        plan.loss.ignoreIndex = i->asInt();
      plan.loss.logitsDtype = decodeDtype(*loss, "logits_dtype");
    } else {
      loss->field("kind").fail(fmt::format("unknown loss '{}' (expected \"sum\" or \"cross_entropy\")", kind));
    }
  }
  if (auto lp = root.optField("loss_parallel"))
    plan.lossParallel = lp->asBool();
  if (plan.lossParallel && plan.loss.kind != LossSpec::Kind::CrossEntropy)
    root.field("loss_parallel").fail("loss_parallel requires the cross_entropy loss");
  if (auto classes = root.optField("module_subclasses"))
    for (const auto &[cls, base] : classes->members()) {
      std::string name = base.asString();
      if (name == "torch.nn.modules.linear.Linear")
        plan.moduleSubclasses[cls.str()] = TorchModuleBase::Linear;
      else if (name == "torch.nn.modules.sparse.Embedding")
        plan.moduleSubclasses[cls.str()] = TorchModuleBase::Embedding;
      else
        base.fail(fmt::format("'{}' is not a base class commlens' styles test (expected "
                              "\"torch.nn.modules.linear.Linear\" or \"torch.nn.modules.sparse.Embedding\")",
                              name));
    }
  return plan;
}

/// A Shard placement's dim must name a dim of the tensor (negative dims count from the end).
llvm::Error checkShardDims(const PlacementSpec &spec, size_t rank, const std::string &what) {
  for (const Placement &p : spec.placements) {
    if (p.kind != Placement::Kind::Shard && p.kind != Placement::Kind::StridedShard)
      continue;
    auto r = static_cast<int64_t>(rank);
    if (p.dim < -r || p.dim >= r)
      return makeError("{}: {} is out of range for a tensor of rank {}", what, p.torchStr(), rank);
  }
  return llvm::Error::success();
}

bool anyMatch(llvm::StringRef pattern, const std::vector<std::string> &names) {
  for (const std::string &n : names)
    if (matchesGlob(pattern, n))
      return true;
  return false;
}

} // namespace

llvm::Expected<ShardingPlan> parsePlan(llvm::StringRef text) {
  auto doc = parseJsonText(text, "plan");
  if (!doc)
    return doc.takeError();
  try {
    return decodePlan((*doc)->root());
  } catch (const ParseError &e) {
    return makeError("{}", e.message);
  }
}

llvm::Expected<ShardingPlan> readPlanFile(llvm::StringRef path) {
  if (llvm::Error err = checkInputFile(path, kMaxTextFileBytes))
    return err;
  std::ifstream in(path.str(), std::ios::binary);
  if (!in)
    return makeError("cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parsePlan(buffer.str());
}

llvm::Error checkPlanAgainstProgram(const ShardingPlan &plan, const ExportedProgram &program,
                                    std::optional<int64_t> worldSize, std::vector<std::string> *skippedStyles) {
  const Graph &g = program.graph();
  if (worldSize && *worldSize != plan.mesh.size())
    return makeError("mesh shape {} has {} devices but the world size is {}", plan.mesh.str(), plan.mesh.size(),
                     *worldSize);
  std::set<std::string> paths(program.modulePaths.begin(), program.modulePaths.end());
  for (const ModuleScope *s : g.scopes().inForwardOrder())
    paths.insert(s->path());
  const std::string &rootName = g.scopes().root()->displayName();
  for (const ParallelizeStep &step : plan.steps)
    for (const ParallelStyle &style : step.styles) {
      if (llvm::any_of(paths, [&](const std::string &p) { return matchesModulePath(style.pattern, p); }))
        continue;
      std::string unmatched = fmt::format("plan pattern '{}' matches no module of {}", style.pattern, rootName);
      if (!skippedStyles)
        return makeError("{}", unmatched);
      skippedStyles->push_back(unmatched + ": skipped, as torch's parallelize_module skips it");
    }
  std::map<std::string, std::string> checkpointedBy; // module path -> its activation_checkpoint pattern
  for (const ActivationCheckpointUnit &unit : plan.activationCheckpoint) {
    bool matched = false;
    for (const std::string &p : paths) {
      if (!matchesModulePath(unit.pattern, p))
        continue;
      matched = true;
      if (p.empty())
        return makeError("activation_checkpoint pattern '{}' matches the root module {} (checkpoint its children)",
                         unit.pattern, rootName);
      for (const auto &[other, by] : checkpointedBy)
        if (p == other || llvm::StringRef(p).startswith(other + ".") || llvm::StringRef(other).startswith(p + "."))
          return makeError("activation_checkpoint pattern '{}': module '{}' overlaps checkpointed module '{}' "
                           "(nested checkpointing is not supported)",
                           unit.pattern, p, other);
      checkpointedBy.emplace(p, unit.pattern);
    }
    if (!matched)
      return makeError("activation_checkpoint pattern '{}' matches no module of {}", unit.pattern, rootName);
  }
  std::map<std::string, std::string> shardedBy; // module path -> the fully_shard pattern that took it
  std::set<std::string> wrappedPaths; // fully_shard comes after the checkpoint wrappers
  for (const std::string &p : paths) {
    std::string wrapped = pathAfterCheckpointWrappers(plan, p);
    if (wrapped == p + "._checkpoint_wrapped_module")
      wrappedPaths.insert(p); // the wrapper
    wrappedPaths.insert(std::move(wrapped));
  }
  for (const FullyShardUnit &unit : plan.fullyShard)
    for (const std::string &pattern : unit.patterns()) {
      bool matched = false;
      for (const std::string &p : wrappedPaths) {
        if (!matchesModulePath(pattern, p))
          continue;
        matched = true;
        auto [it, fresh] = shardedBy.emplace(p, unit.pattern);
        if (!fresh)
          return makeError("fully_shard pattern '{}' matches module '{}' already sharded by pattern '{}'",
                           unit.pattern, p.empty() ? rootName : p, it->second);
      }
      if (!matched)
        return makeError("fully_shard pattern '{}' matches no module of {}", pattern, rootName);
    }
  std::vector<std::string> params, tensors;
  for (const InputSpec &in : g.inputs()) {
    if (in.kind == InputKind::Parameter)
      params.push_back(in.target);
    if (in.kind == InputKind::Parameter || in.kind == InputKind::Buffer)
      tensors.push_back(in.target);
  }
  for (const auto &[pattern, spec] : plan.placements) {
    if (!anyMatch(pattern, tensors))
      return makeError("placement pattern '{}' matches no parameter or buffer of {}", pattern, rootName);
    for (const InputSpec &in : g.inputs())
      if ((in.kind == InputKind::Parameter || in.kind == InputKind::Buffer) && in.value && in.value->meta() &&
          matchesGlob(pattern, in.target))
        if (llvm::Error err = checkShardDims(spec, in.value->meta()->sizes.size(),
                                             fmt::format("placements['{}'] on '{}'", pattern, in.target)))
          return err;
  }
  for (auto [key, list] : {std::pair{"frozen", &plan.frozen}, {"frozen_after_parallelize", &plan.frozenAfterParallelize}})
    for (const std::string &pattern : *list)
      if (!anyMatch(pattern, params))
        return makeError("{} pattern '{}' matches no parameter of {}", key, pattern, rootName);
  size_t numUserInputs = 0;
  for (const InputSpec &in : g.inputs())
    numUserInputs += in.kind == InputKind::UserInput;
  for (const InputSetting &in : plan.inputs) {
    std::optional<Argument> arg = g.userInput(in.key);
    if (!arg)
      return makeError("plan input '{}' is not an input of {} ({} user inputs)", in.key, rootName, numUserInputs);
    if (in.placements && arg->isTensor() && arg->tensor()->meta())
      if (llvm::Error err = checkShardDims(*in.placements, arg->tensor()->meta()->sizes.size(),
                                           fmt::format("inputs['{}'].placements", in.key)))
        return err;
  }
  return llvm::Error::success();
}

} // namespace commlens
