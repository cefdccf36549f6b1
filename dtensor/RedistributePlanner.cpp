#include "dtensor/RedistributePlanner.h"

#include "ir/Error.h"
#include "ir/TensorMetaUtils.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <limits>
#include <map>
#include <set>

namespace commlens {

llvm::StringRef name(RedistributeAction a) {
  switch (a) {
  case RedistributeAction::AllReduce: return "all_reduce";
  case RedistributeAction::ReduceScatter: return "reduce_scatter";
  case RedistributeAction::AllGather: return "all_gather";
  case RedistributeAction::ShardDimAllToAll: return "shard_dim_alltoall";
  case RedistributeAction::AllGatherChunk: return "all_gather+chunk";
  case RedistributeAction::LocalChunk: return "local_chunk";
  case RedistributeAction::LocalPartition: return "local_partition";
  case RedistributeAction::SkippedSize1: return "skipped_size1";
  }
  return "?";
}

llvm::StringRef commDebugOpKey(RedistributeAction a) {
  switch (a) {
  case RedistributeAction::AllReduce: return "c10d_functional.all_reduce";
  case RedistributeAction::ReduceScatter: return "c10d_functional.reduce_scatter_tensor";
  case RedistributeAction::AllGather:
  case RedistributeAction::AllGatherChunk: return "c10d_functional.all_gather_into_tensor";
  case RedistributeAction::ShardDimAllToAll: return "_dtensor.shard_dim_alltoall";
  case RedistributeAction::LocalChunk:
  case RedistributeAction::LocalPartition:
  case RedistributeAction::SkippedSize1: return "";
  }
  return "";
}

namespace {

std::string dimsStr(llvm::ArrayRef<unsigned> dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i ? "+" : "") + std::to_string(dims[i]);
  return out;
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

} // namespace

std::string RedistributeStep::str() const {
  std::string what = opKey().empty() ? name(action).str() : opKey().str();
  if (action == RedistributeAction::AllGatherChunk)
    what += " (+ local chunk: CPU has no all-to-all)";
  std::string out = fmt::format("{} on mesh dim {}: {} -> {}", what, dimsStr(meshDims), src.str(), dst.str());
  if (isCollective())
    out += fmt::format(", group {}, {} B in, {} B out", groupSize, inputBytes, outputBytes);
  out += fmt::format(", local {} -> {}", shapeStr(localShapeBefore), shapeStr(localShapeAfter));
  return out;
}

llvm::SmallVector<const RedistributeStep *, 4> RedistributePlan::collectives() const {
  llvm::SmallVector<const RedistributeStep *, 4> out;
  for (const RedistributeStep &s : steps)
    if (s.isCollective())
      out.push_back(&s);
  return out;
}

int64_t RedistributePlan::totalInputBytes() const {
  int64_t n = 0;
  for (const RedistributeStep &s : steps)
    n += s.inputBytes;
  return n;
}

std::string RedistributePlan::str() const {
  if (steps.empty())
    return "  (no steps)\n";
  std::string out;
  for (const RedistributeStep &s : steps)
    out += "  " + s.str() + "\n";
  return out;
}

namespace {

using Shape = llvm::SmallVector<int64_t, 4>;

/// Rank-0 chunk of `size` split n ways with torch.chunk semantics: ceil(size / n).
int64_t chunk0(int64_t size, int64_t n) { return n <= 0 ? size : (size + n - 1) / n; }

bool isShardLike(const Placement &p) {
  return p.kind == Placement::Kind::Shard || p.kind == Placement::Kind::StridedShard;
}

/// Placement equality on the fields that matter for each kind (the IR's operator== also compares
/// fields a kind does not use).
bool same(const Placement &a, const Placement &b) {
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case Placement::Kind::Replicate: return true;
  case Placement::Kind::Shard: return a.dim == b.dim;
  case Placement::Kind::StridedShard: return a.dim == b.dim && a.splitFactor == b.splitFactor;
  case Placement::Kind::Partial:
  case Placement::Kind::MaskPartial: return a.reduceOp == b.reduceOp;
  case Placement::Kind::NormPartial: return a.normType == b.normType;
  }
  return false;
}
bool same(llvm::ArrayRef<Placement> a, llvm::ArrayRef<Placement> b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i]))
      return false;
  return true;
}

/// One planned transform (DTensor's _TransformInfo / _FlattenedTransformInfo).
struct Transform {
  llvm::SmallVector<unsigned, 2> meshDims;
  Placement src, dst;
  Shape logicalShape;
};

/// DTensor's `_comm_type_key`: which collective family a step belongs to, for merging.
enum class CommType { None, AllReduce, ReduceScatter, AllGather, AllToAll };
CommType commType(const Transform &t) {
  if (t.src.isPartial() && t.dst.isReplicate())
    return CommType::AllReduce;
  if (t.src.isPartial() && isShardLike(t.dst))
    return CommType::ReduceScatter;
  if (isShardLike(t.src) && t.dst.isReplicate())
    return CommType::AllGather;
  if (isShardLike(t.src) && isShardLike(t.dst))
    return CommType::AllToAll;
  return CommType::None;
}
bool mergeableComm(CommType c) {
  return c == CommType::AllReduce || c == CommType::ReduceScatter || c == CommType::AllGather;
}
bool isSumOrAvg(const Placement &p) { return p.reduceOp == ReduceOp::Sum || p.reduceOp == ReduceOp::Avg; }
/// `are_placements_mergeable`: identical (src, dst), or sum/avg Partials with the same dst.
bool placementsMergeable(const Transform &a, const Transform &b) {
  if (same(a.src, b.src) && same(a.dst, b.dst))
    return true;
  if (!same(a.dst, b.dst))
    return false;
  return a.src.isPartial() && b.src.isPartial() && isSumOrAvg(a.src) && isSumOrAvg(b.src);
}

/// The greedy planner (`generate_greedy_transform_infos`).
llvm::SmallVector<Transform, 4> greedyTransforms(const DeviceMesh &mesh, const Shape &global,
                                                 llvm::ArrayRef<Placement> src, llvm::ArrayRef<Placement> dst) {
  llvm::SmallVector<Transform, 4> out;
  unsigned ndim = mesh.ndim();
  if (ndim == 1) {
    if (!same(src[0], dst[0]))
      out.push_back({{0}, src[0], dst[0], global});
    return out;
  }
  // Logical shape seen at each mesh dim: the source's sharding on earlier mesh dims applied, with
  // the chunk sizes of the planning rank (rank 0 here: coordinate 0 on every mesh dim).
  llvm::SmallVector<Shape, 4> logical{global};
  for (unsigned i = 0; i < ndim; ++i) {
    Shape cur = logical[i];
    if (src[i].isShard()) {
      if (i + 1 < ndim) {
        cur[src[i].dim] = chunk0(cur[src[i].dim], mesh.shape[i]);
        logical.push_back(cur);
      }
    } else {
      logical.push_back(cur);
    }
  }
  Placements current(src.begin(), src.end());
  int64_t numShards = 1;
  for (unsigned i = 0; i < ndim; ++i)
    if (isShardLike(src[i]))
      numShards *= mesh.shape[i];
  if (numShards > 1) {
    // Inner to outer: replicate mesh dims whose target Shard(d) sits under a different nesting of
    // tensor dim d than the current placements have.
    for (unsigned m = ndim; m-- > 0;) {
      Placement target = dst[m];
      if (target.isShard()) {
        llvm::SmallVector<unsigned, 2> curSharding, tgtSharding;
        for (unsigned i = 0; i < m; ++i) {
          if (current[i].isShard(target.dim))
            curSharding.push_back(i);
          if (dst[i].isShard(target.dim))
            tgtSharding.push_back(i);
        }
        if (curSharding != tgtSharding)
          target = Placement::replicate();
      }
      if (!same(current[m], target)) {
        out.push_back({{m}, current[m], target, logical[m]});
        current[m] = target;
      }
    }
  }
  // Outer to inner: whatever is left.
  for (unsigned m = 0; m < ndim; ++m) {
    if (!same(current[m], dst[m])) {
      out.push_back({{m}, current[m], dst[m], logical[m]});
      current[m] = dst[m];
    }
  }
  return out;
}

bool hasFlattened(const RedistributeOptions &options, llvm::ArrayRef<unsigned> sortedDims) {
  for (const auto &group : options.flattenedDims) {
    llvm::SmallVector<unsigned, 2> g(group.begin(), group.end());
    llvm::sort(g);
    if (llvm::ArrayRef<unsigned>(g) == sortedDims)
      return true;
  }
  return false;
}

/// `_optimize_transform_infos`: merge runs of consecutive same-kind collectives into one
/// collective over a user-created flattened mesh. Never reorders.
llvm::SmallVector<Transform, 4> mergeFlattened(const DeviceMesh &mesh, llvm::SmallVector<Transform, 4> in,
                                               const RedistributeOptions &options) {
  bool named = llvm::any_of(mesh.dimNames, [](const std::string &n) { return !n.empty(); });
  if (in.size() < 2 || options.disableTransformOptimization || options.flattenedDims.empty() || !named)
    return in;
  llvm::SmallVector<Transform, 4> out;
  size_t i = 0;
  while (i < in.size()) {
    CommType key = commType(in[i]);
    if (!mergeableComm(key)) {
      out.push_back(in[i++]);
      continue;
    }
    size_t j = i + 1;
    while (j < in.size() && mergeableComm(commType(in[j])) && placementsMergeable(in[j], in[i]))
      ++j;
    llvm::ArrayRef<Transform> group(in.data() + i, j - i);
    auto tryMerge = [&]() -> std::optional<Transform> {
      if (group.size() < 2)
        return std::nullopt;
      llvm::SmallVector<unsigned, 2> dims, sorted;
      for (const Transform &t : group)
        dims.push_back(t.meshDims.front());
      sorted = dims;
      llvm::sort(sorted);
      if (key == CommType::ReduceScatter && dims != sorted)
        return std::nullopt; // reduce_scatter must run outer to inner
      if (key == CommType::AllGather && !std::equal(dims.begin(), dims.end(), sorted.rbegin()))
        return std::nullopt; // all_gather must run inner to outer
      if (!hasFlattened(options, sorted))
        return std::nullopt;
      const Transform *outermost = &group.front();
      int64_t groupSize = 1;
      for (const Transform &t : group)
        groupSize *= mesh.shape[t.meshDims.front()];
      if (key == CommType::AllGather || key == CommType::ReduceScatter) {
        int64_t d = key == CommType::AllGather ? group.front().src.dim : group.front().dst.dim;
        for (const Transform &t : group) // first maximum, as Python's max()
          if (t.logicalShape[d] > outermost->logicalShape[d])
            outermost = &t;
        if (key == CommType::ReduceScatter && outermost->logicalShape[d] % groupSize != 0)
          return std::nullopt; // uneven: no merge
      }
      Transform merged{sorted, group.front().src, group.front().dst, outermost->logicalShape};
      if (merged.src.isPartial()) {
        int64_t avgScale = 1;
        for (const Transform &t : group)
          if (t.src.reduceOp == ReduceOp::Avg)
            avgScale *= mesh.shape[t.meshDims.front()];
        if (avgScale > 1) // sum/avg mix runs as a sum and divides afterwards
          merged.src = Placement::partial(ReduceOp::Sum);
      }
      return merged;
    };
    if (std::optional<Transform> merged = tryMerge())
      out.push_back(std::move(*merged));
    else
      out.append(group.begin(), group.end());
    i = j;
  }
  return out;
}

int64_t numel(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

llvm::Error checkNoMixedPartials(llvm::ArrayRef<Placement> placements, llvm::StringRef which) {
  std::set<ReduceOp> ops;
  for (const Placement &p : placements)
    if (p.isPartial())
      ops.insert(p.reduceOp);
  if (ops.size() > 1 && ops != std::set<ReduceOp>{ReduceOp::Sum, ReduceOp::Avg})
    return makeError("mixed Partial reduce ops in {} placements {} (DTensor raises ValueError; only sum with avg may mix)",
                     which.str(), str(placements));
  return llvm::Error::success();
}

/// Python's str() of a placement (the IR's short form writes _StridedShard as "_S(0,2)").
std::string pyStr(const Placement &p) {
  if (p.kind == Placement::Kind::StridedShard)
    return fmt::format("_S({}, {})", p.dim, p.splitFactor);
  return p.str();
}

/// Rank 0's size of a dim of `size` under _StridedShard(split_factor=sf) over n ranks: torch.chunk
/// into sf pieces, each piece torch.chunk'ed n ways, rank 0 keeping the first chunk of every piece.
int64_t stridedChunk0(int64_t size, int64_t n, int64_t sf) {
  if (sf < 1)
    sf = 1;
  int64_t c1 = chunk0(size, sf), total = 0;
  for (int64_t j = 0; j < sf; ++j) {
    int64_t len = std::clamp<int64_t>(size - j * c1, 0, c1);
    total += chunk0(len, n);
  }
  return total;
}

/// DTensorSpec._maybe_convert_StridedShard_to_shard_order succeeds: every split factor equals the
/// product of the sizes of the mesh dims placed before it in some right-to-left order.
bool stridedShardDecodable(const DeviceMesh &mesh, llvm::ArrayRef<Placement> placements) {
  std::map<int64_t, llvm::SmallVector<unsigned, 4>> order; // tensor dim -> mesh dims in shard order
  for (unsigned m = placements.size(); m-- > 0;) {
    const Placement &p = placements[m];
    if (!isShardLike(p))
      continue;
    auto &dims = order[p.dim];
    int64_t sf = p.kind == Placement::Kind::StridedShard ? p.splitFactor : 1, acc = 1;
    bool found = false;
    for (size_t i = 0; i <= dims.size(); ++i) {
      if (acc == sf) {
        dims.insert(dims.begin() + i, m);
        found = true;
        break;
      }
      if (i < dims.size())
        acc *= mesh.shape[dims[i]];
    }
    if (!found)
      return false;
  }
  return true;
}

bool hasStrided(llvm::ArrayRef<Placement> placements) {
  return llvm::any_of(placements, [](const Placement &p) { return p.kind == Placement::Kind::StridedShard; });
}

/// Checks the mesh and placement counts and returns the placements with shard dims normalised.
llvm::Expected<std::pair<Placements, Placements>> validated(const DeviceMesh &mesh, const TensorMeta &meta,
                                                           llvm::ArrayRef<Placement> srcIn,
                                                           llvm::ArrayRef<Placement> dstIn) {
  unsigned ndim = mesh.ndim();
  if (ndim == 0)
    return makeError("redistribute: the device mesh has no dims");
  for (int64_t s : mesh.shape)
    if (s < 1)
      return makeError("redistribute: bad mesh shape (a dim of size {})", s);
  if (srcIn.size() != ndim || dstIn.size() != ndim)
    return makeError("redistribute: {} source and {} target placements for a {}-D mesh", srcIn.size(), dstIn.size(),
                     ndim);
  int64_t rank = meta.rank();
  Placements src = normalized(srcIn, rank), dst = normalized(dstIn, rank);
  for (const Placements *ps : {&src, &dst})
    for (const Placement &p : *ps)
      if (isShardLike(p) && (p.dim < 0 || p.dim >= rank))
        return makeError("redistribute: {} is out of range for a rank-{} tensor", p.str(), rank);
  return std::make_pair(std::move(src), std::move(dst));
}

/// DTensorSpec.is_default_device_order fails for the source's given shard order.
bool hasNonDefaultOrder(const RedistributeOptions &options) {
  if (options.srcShardOrder)
    for (const ShardOrderEntry &e : *options.srcShardOrder)
      for (size_t k = 1; k < e.meshDims.size(); ++k)
        if (e.meshDims[k - 1] >= e.meshDims[k])
          return true;
  return false;
}


// ---------------------------------------------------------------------------------------------
// DTensor's cost model (_collective_utils.py), shared by redistributeCost and the graph planner.

constexpr double kInf = std::numeric_limits<double>::infinity();

struct CostModel {
  const DeviceMesh &mesh;
  llvm::SmallVector<double, 4> bandwidth, latency;

  CostModel(const DeviceMesh &m, int64_t devicesPerHost) : mesh(m), bandwidth(m.ndim(), 87.7), latency(m.ndim(), 0.6) {
    // MeshTopoInfo.build_from_mesh: walk mesh dims innermost first; once the devices covered
    // exceed one host, that dim and every outer one are inter-host.
    if (devicesPerHost <= 0)
      devicesPerHost = m.deviceType == MeshDeviceType::Cuda ? 8 : 1;
    int64_t total = 1;
    for (unsigned d = m.ndim(); d-- > 0;) {
      total *= m.shape[d];
      if (total > devicesPerHost) {
        bandwidth[d] *= 0.22;
        latency[d] = 2.7;
      }
    }
  }

  // Same operation order as the Python, so the doubles match bit for bit.
  double ring(double bytesGb, unsigned m, double hopsPerDevice) const {
    double n = static_cast<double>(mesh.shape[m]);
    double hops = hopsPerDevice * (n - 1);
    double lat = 6.6 + hops * latency[m];
    double bw = (bytesGb * hops / n) / bandwidth[m];
    return lat + bw * 1e6;
  }

  /// _compute_placement_transition_cost: the cost of one mesh dim's change; updates the bytes.
  double transition(const Placement &cur, const Placement &tgt, unsigned m, double &bytesGb) const {
    if (same(cur, tgt))
      return 0.0;
    double n = static_cast<double>(mesh.shape[m]);
    if (cur.isShard() && tgt.isReplicate()) {
      bytesGb *= n;
      return ring(bytesGb, m, 1);
    }
    if (cur.isShard() && tgt.isShard())
      return ring(bytesGb, m, 1) + 1.0; // no all-to-all model: all_gather cost plus a penalty
    if (cur.isPartial() && tgt.isReplicate())
      return ring(bytesGb, m, 2);
    if (cur.isPartial() && tgt.isShard()) {
      double c = ring(bytesGb, m, 1);
      bytesGb /= n;
      return c;
    }
    if ((cur.isShard() && tgt.isPartial()) || (cur.isPartial() && tgt.isPartial()))
      return kInf;
    if (cur.isReplicate() && tgt.isShard())
      bytesGb /= n;
    return 0.0;
  }

  int64_t numShards(llvm::ArrayRef<Placement> placements) const {
    int64_t n = 1;
    for (unsigned m = 0; m < placements.size(); ++m)
      if (isShardLike(placements[m]))
        n *= mesh.shape[m];
    return n;
  }
};

double bytesGbOf(const TensorMeta &meta, int64_t numShards) {
  int64_t bytes = elementSize(meta.dtype) * numel(sizesOf(meta));
  return static_cast<double>(bytes) / static_cast<double>(numShards) / 1024 / 1024 / 1024;
}

// ---------------------------------------------------------------------------------------------
// Shard orders and DTensor's graph-based planner (DTensorRedistributePlanner, Dijkstra).

/// tensor dim -> mesh dims in sharding order (DTensorSpec.shard_order); empty lists are dropped.
using ShardOrderMap = std::map<int64_t, llvm::SmallVector<unsigned, 4>>;

ShardOrderMap defaultShardOrder(llvm::ArrayRef<Placement> placements) {
  ShardOrderMap order;
  for (unsigned m = 0; m < placements.size(); ++m)
    if (isShardLike(placements[m]))
      order[placements[m].dim].push_back(m);
  return order;
}

/// _maybe_convert_StridedShard_to_shard_order + _normalize_placements_into_shard_order: the
/// placements with every _StridedShard made a Shard, and the shard order the split factors
/// encode; nullopt when they do not decode.
std::optional<std::pair<Placements, ShardOrderMap>> decodeStrided(const DeviceMesh &mesh, llvm::ArrayRef<Placement> ps) {
  if (!stridedShardDecodable(mesh, ps))
    return std::nullopt;
  ShardOrderMap order;
  for (unsigned m = ps.size(); m-- > 0;) {
    const Placement &p = ps[m];
    if (!isShardLike(p))
      continue;
    auto &dims = order[p.dim];
    int64_t sf = p.kind == Placement::Kind::StridedShard ? p.splitFactor : 1, acc = 1;
    for (size_t i = 0; i <= dims.size(); ++i) {
      if (acc == sf) {
        dims.insert(dims.begin() + i, m);
        break;
      }
      if (i < dims.size())
        acc *= mesh.shape[dims[i]];
    }
  }
  Placements out(ps.begin(), ps.end());
  for (Placement &p : out)
    if (p.kind == Placement::Kind::StridedShard)
      p = Placement::shard(p.dim);
  return std::make_pair(std::move(out), std::move(order));
}

struct DistState {
  Placements placements;
  ShardOrderMap order;
  std::string key;
};

std::string stateKey(llvm::ArrayRef<Placement> placements, const ShardOrderMap &order) {
  std::string k = str(placements);
  for (const auto &[dim, dims] : order)
    if (!dims.empty())
      k += fmt::format(" {}:{}", dim, dimsStr(dims));
  return k;
}

DistState makeState(Placements placements, ShardOrderMap order) {
  for (auto it = order.begin(); it != order.end();)
    it = it->second.empty() ? order.erase(it) : std::next(it);
  std::string key = stateKey(placements, order);
  return {std::move(placements), std::move(order), std::move(key)};
}

class GraphPlanner {
public:
  GraphPlanner(const DeviceMesh &mesh, const TensorMeta &meta, const CostModel &cost, std::set<ReduceOp> reduceOps)
      : mesh(mesh), meta(meta), cost(cost), rank(meta.rank()), reduceOps(std::move(reduceOps)) {}

  /// find_min_cost_path + generate_graph_based_transform_infos.
  llvm::Expected<llvm::SmallVector<Transform, 4>> plan(const DistState &src, const DistState &dst) const {
    struct Entry {
      double cost;
      uint64_t counter;
      std::vector<DistState> path;
    };
    auto later = [](const Entry &a, const Entry &b) {
      return a.cost != b.cost ? a.cost > b.cost : a.counter > b.counter;
    };
    std::priority_queue<Entry, std::vector<Entry>, decltype(later)> pq(later);
    uint64_t counter = 0;
    pq.push({0.0, counter, {src}});
    std::set<std::string> visited;
    while (!pq.empty()) {
      Entry e = pq.top();
      pq.pop();
      const DistState &cur = e.path.back();
      if (cur.key == dst.key)
        return transformsOf(e.path);
      if (!visited.insert(cur.key).second)
        continue;
      for (auto &[next, c] : nextStates(cur)) {
        if (visited.count(next.key))
          continue;
        std::vector<DistState> path = e.path;
        path.push_back(next);
        pq.push({e.cost + c, ++counter, std::move(path)});
      }
    }
    return makeError("no redistribution path from {} to {} (DTensor raises AssertionError)", src.key, dst.key);
  }

private:
  const DeviceMesh &mesh;
  const TensorMeta &meta;
  const CostModel &cost;
  int64_t rank;
  std::set<ReduceOp> reduceOps;

  double stepCost(const DistState &a, const DistState &b) const {
    for (unsigned m = 0; m < a.placements.size(); ++m)
      if (!same(a.placements[m], b.placements[m])) {
        double bytesGb = bytesGbOf(meta, cost.numShards(a.placements));
        return cost.transition(a.placements[m], b.placements[m], m, bytesGb);
      }
    return 0.0;
  }

  /// get_next_state, enumerating edges in DTensor's order (ties go to the first pushed).
  std::vector<std::pair<DistState, double>> nextStates(const DistState &cur) const {
    std::vector<std::pair<DistState, double>> out;
    auto add = [&](Placements p, ShardOrderMap order) {
      DistState next = makeState(std::move(p), std::move(order));
      double c = stepCost(cur, next);
      for (auto &existing : out) // a dict: a repeated state keeps its first position
        if (existing.first.key == next.key) {
          existing.second = c;
          return;
        }
      out.emplace_back(std::move(next), c);
    };
    const Placements &ps = cur.placements;
    // 1. Shard(a) -> Shard(b) on the last mesh dim sharding a: all-to-all.
    for (const auto &[a, dims] : cur.order) {
      unsigned m = dims.back();
      if (!ps[m].isShard())
        continue;
      for (int64_t b = 0; b < rank; ++b) {
        if (b == a)
          continue;
        ShardOrderMap order = cur.order;
        order[a].pop_back();
        order[b].push_back(m);
        Placements np = ps;
        np[m] = Placement::shard(b);
        add(std::move(np), std::move(order));
      }
    }
    // 2. Shard -> Replicate on the last mesh dim sharding a tensor dim: all_gather.
    for (const auto &[a, dims] : cur.order) {
      unsigned m = dims.back();
      if (!ps[m].isShard())
        continue;
      ShardOrderMap order = cur.order;
      order[a].pop_back();
      Placements np = ps;
      np[m] = Placement::replicate();
      add(std::move(np), std::move(order));
    }
    // 3. Partial -> Replicate: all_reduce.
    for (unsigned m = 0; m < ps.size(); ++m)
      if (ps[m].isPartial()) {
        Placements np = ps;
        np[m] = Placement::replicate();
        add(std::move(np), cur.order);
      }
    // 4. Replicate -> Shard(d), appended to d's order: local chunk.
    for (unsigned m = 0; m < ps.size(); ++m)
      if (ps[m].isReplicate())
        for (int64_t d = 0; d < rank; ++d) {
          ShardOrderMap order = cur.order;
          order[d].push_back(m);
          Placements np = ps;
          np[m] = Placement::shard(d);
          add(std::move(np), std::move(order));
        }
    // 5. Partial -> Shard(d): reduce_scatter.
    for (unsigned m = 0; m < ps.size(); ++m)
      if (ps[m].isPartial())
        for (int64_t d = 0; d < rank; ++d) {
          ShardOrderMap order = cur.order;
          order[d].push_back(m);
          Placements np = ps;
          np[m] = Placement::shard(d);
          add(std::move(np), std::move(order));
        }
    // 6. Replicate -> Partial(op) for the reduce ops of source and target, never mixing (but
    //    sum with avg).
    for (unsigned m = 0; m < ps.size(); ++m)
      if (ps[m].isReplicate())
        for (ReduceOp op : reduceOps) {
          Placements np = ps;
          np[m] = Placement::partial(op);
          std::set<ReduceOp> ops;
          for (const Placement &p : np)
            if (p.isPartial())
              ops.insert(p.reduceOp);
          if (ops.size() > 1 && ops != std::set<ReduceOp>{ReduceOp::Sum, ReduceOp::Avg})
            continue;
          add(std::move(np), cur.order);
        }
    return out;
  }

  /// get_logical_shape: the global shape with every *other* sharding mesh dim of the state applied
  /// (rank 0's chunks), in shard order.
  Shape logicalShape(const DistState &st, unsigned meshDim) const {
    Shape shape = sizesOf(meta);
    for (const auto &[d, dims] : st.order)
      for (unsigned m : dims)
        if (m != meshDim)
          shape[d] = chunk0(shape[d], mesh.shape[m]);
    return shape;
  }

  llvm::SmallVector<Transform, 4> transformsOf(const std::vector<DistState> &path) const {
    llvm::SmallVector<Transform, 4> out;
    for (size_t i = 0; i + 1 < path.size(); ++i)
      for (unsigned m = 0; m < path[i].placements.size(); ++m)
        if (!same(path[i].placements[m], path[i + 1].placements[m]))
          out.push_back({{m}, path[i].placements[m], path[i + 1].placements[m], logicalShape(path[i], m)});
    return out;
  }
};

/// `_gen_transform_infos_non_cached`: which planner runs, and its steps (before merging).
/// `normalizedSrc` receives the source placements the steps start from (a decoded _StridedShard
/// becomes a Shard on the graph path).
llvm::Expected<llvm::SmallVector<Transform, 4>> planTransforms(const DeviceMesh &mesh, const TensorMeta &meta,
                                                               const Placements &src, const Placements &dst,
                                                               const RedistributeOptions &options,
                                                               Placements &normalizedSrc, bool &usedGraph) {
  normalizedSrc = src;
  usedGraph = false;
  bool nonDefaultOrder = hasNonDefaultOrder(options);
  bool strided = hasStrided(src) || hasStrided(dst);
  if (nonDefaultOrder || strided || options.forceMinCostPlan) {
    std::optional<std::pair<Placements, ShardOrderMap>> s, d;
    if (hasStrided(src)) {
      s = decodeStrided(mesh, src);
    } else {
      ShardOrderMap order = defaultShardOrder(src);
      if (options.srcShardOrder) {
        order.clear();
        for (const ShardOrderEntry &e : *options.srcShardOrder)
          order[e.tensorDim].assign(e.meshDims.begin(), e.meshDims.end());
      }
      s = std::make_pair(src, std::move(order));
    }
    d = hasStrided(dst) ? decodeStrided(mesh, dst) : std::make_pair(dst, defaultShardOrder(dst));
    if (s && d) { // otherwise DTensor catches _StridedShardNotDecodableError and goes greedy
      std::set<ReduceOp> reduceOps;
      for (const Placements *ps : {&s->first, &d->first})
        for (const Placement &p : *ps)
          if (p.isPartial())
            reduceOps.insert(p.reduceOp);
      CostModel cost(mesh, options.devicesPerHost);
      GraphPlanner planner(mesh, meta, cost, std::move(reduceOps));
      usedGraph = true;
      normalizedSrc = s->first;
      return planner.plan(makeState(s->first, s->second), makeState(d->first, d->second));
    }
  }
  return greedyTransforms(mesh, sizesOf(meta), src, dst);
}
} // namespace

llvm::SmallVector<int64_t, 4> rank0LocalShape(const DeviceMesh &mesh, llvm::ArrayRef<int64_t> globalSizes,
                                              llvm::ArrayRef<Placement> placements) {
  Shape local(globalSizes.begin(), globalSizes.end());
  for (unsigned i = 0; i < placements.size() && i < mesh.ndim(); ++i) {
    const Placement &p = placements[i];
    if (p.isShard())
      local[p.dim] = chunk0(local[p.dim], mesh.shape[i]);
    else if (p.kind == Placement::Kind::StridedShard)
      local[p.dim] = stridedChunk0(local[p.dim], mesh.shape[i], p.splitFactor);
  }
  return local;
}

llvm::Expected<RedistributePlan> planRedistribute(const DeviceMesh &mesh, const TensorMeta &meta,
                                                  llvm::ArrayRef<Placement> srcIn,
                                                  llvm::ArrayRef<Placement> dstIn,
                                                  const RedistributeOptions &options) {
  auto checked = validated(mesh, meta, srcIn, dstIn);
  if (!checked)
    return checked.takeError();
  Placements &src = checked->first, &dst = checked->second;

  if (llvm::Error e = checkNoMixedPartials(src, "source"))
    return e;
  if (llvm::Error e = checkNoMixedPartials(dst, "target"))
    return e;

  RedistributePlan plan;
  if (same(src, dst) && (hasStrided(src) || !hasNonDefaultOrder(options)))
    return plan; // same spec (an order-only change still plans: only op dispatch asks for one)

  Shape global = sizesOf(meta);
  Placements start;
  bool usedGraph = false;
  auto planned = planTransforms(mesh, meta, src, dst, options, start, usedGraph);
  if (!planned)
    return planned.takeError();
  plan.usedGraphPlanner = usedGraph;
  llvm::SmallVector<Transform, 4> transforms = mergeFlattened(mesh, std::move(*planned), options);
  for (const Transform &t : transforms)
    if (t.meshDims.size() > 1 && (t.src.kind == Placement::Kind::StridedShard || t.dst.kind == Placement::Kind::StridedShard))
      return makeError("redistribute {} -> {}: a _StridedShard step merged over a flattened mesh (DTensor asserts)",
                       str(src), str(dst));

  Shape local = rank0LocalShape(mesh, global, start);

  int64_t elem = elementSize(meta.dtype);
  for (const Transform &t : transforms) {
    RedistributeStep step;
    step.meshDims = t.meshDims;
    step.src = t.src;
    step.dst = t.dst;
    step.logicalShape = t.logicalShape;
    step.localShapeBefore = local;
    int64_t n = 1;
    for (unsigned m : t.meshDims)
      n *= mesh.shape[m];
    step.groupSize = n;
    const Placement &cur = t.src, &tgt = t.dst;
    auto stepName = [&] { return fmt::format("{} -> {} on mesh dim {}", cur.str(), tgt.str(), dimsStr(t.meshDims)); };

    // Shard(d) -> Replicate: pad to the full chunk of the logical size, all_gather, unpad.
    auto shardGather = [&](int64_t d) -> bool {
      int64_t logicalSize = t.logicalShape[d];
      step.action = RedistributeAction::AllGather;
      Shape padded = local;
      if (logicalSize % n != 0)
        padded[d] = chunk0(logicalSize, n);
      else if (local[d] * n < logicalSize)
        return false; // the gathered dim is shorter than the logical shape: torch._check fails
      step.inputBytes = numel(padded) * elem;
      step.outputBytes = step.inputBytes * n;
      local[d] = logicalSize;
      return true;
    };
    auto gatherCheckFailed = [&] {
      // The greedy planner's logical shapes ignore a _StridedShard that an earlier step put on the
      // same tensor dim, so the all_gather comes back short and DTensor's unpad check fails.
      return makeError("redistribute {} -> {}: DTensor fails a torch._check at {}: the all_gather returns fewer "
                       "elements than the planner's logical shape (greedy planner with a nested _StridedShard)",
                       str(src), str(dst), stepName());
    };
    // _StridedShard -> Replicate: pad to rank 0's (largest) strided chunk, all_gather, reorder.
    auto stridedGather = [&](const Placement &ss) {
      int64_t logicalSize = t.logicalShape[ss.dim];
      step.action = RedistributeAction::AllGather;
      Shape padded = local;
      padded[ss.dim] = stridedChunk0(logicalSize, n, ss.splitFactor);
      step.inputBytes = numel(padded) * elem;
      step.outputBytes = step.inputBytes * n;
      local[ss.dim] = logicalSize;
    };
    bool curStrided = cur.kind == Placement::Kind::StridedShard;

    if (n == 1) {
      step.action = RedistributeAction::SkippedSize1;
    } else if (tgt.isReplicate()) {
      if (cur.isPartial()) {
        step.action = RedistributeAction::AllReduce;
        step.inputBytes = step.outputBytes = numel(local) * elem;
      } else if (curStrided) {
        stridedGather(cur);
      } else if (!shardGather(cur.dim)) {
        return gatherCheckFailed();
      }
    } else if (tgt.isShard()) {
      int64_t d = tgt.dim;
      if (cur.isPartial()) { // reduce_scatter; uneven: every chunk padded to the full chunk size
        step.action = RedistributeAction::ReduceScatter;
        Shape in = local;
        if (local[d] % n != 0)
          in[d] = chunk0(local[d], n) * n;
        step.inputBytes = numel(in) * elem;
        step.outputBytes = step.inputBytes / n;
        local[d] = in[d] / n;
      } else if (cur.isReplicate()) {
        step.action = RedistributeAction::LocalChunk;
        local[d] = chunk0(local[d], n);
      } else if (curStrided) { // via Replicate: all_gather, then a local chunk
        stridedGather(cur);
        local[d] = chunk0(local[d], n);
      } else { // Shard(a) -> Shard(b), a != b
        int64_t a = cur.dim, b = d;
        int64_t logicalA = t.logicalShape[a], logicalB = t.logicalShape[b];
        Shape padded = local;
        bool padA = logicalA % n != 0, padB = logicalB % n != 0;
        if (padA)
          padded[a] = chunk0(logicalA, n);
        if (padB)
          padded[b] = chunk0(logicalB, n) * n;
        step.inputBytes = numel(padded) * elem;
        if (mesh.deviceType == MeshDeviceType::Cuda) {
          step.action = RedistributeAction::ShardDimAllToAll;
          step.outputBytes = step.inputBytes;
        } else {
          step.action = RedistributeAction::AllGatherChunk;
          step.outputBytes = step.inputBytes * n;
        }
        local = padded;
        local[a] = padA ? logicalA : padded[a] * n;
        local[b] = padded[b] / n;
      }
    } else if (tgt.kind == Placement::Kind::StridedShard) {
      // Everything goes through Replicate: P all_reduces (no reduce_scatter), Shard and
      // _StridedShard all_gather, then the strided split is local.
      if (cur.isPartial()) {
        step.action = RedistributeAction::AllReduce;
        step.inputBytes = step.outputBytes = numel(local) * elem;
      } else if (cur.isReplicate()) {
        step.action = RedistributeAction::LocalChunk;
      } else if (curStrided) {
        stridedGather(cur);
      } else if (!shardGather(cur.dim)) {
        return gatherCheckFailed();
      }
      local[tgt.dim] = stridedChunk0(local[tgt.dim], n, tgt.splitFactor);
    } else { // target is Partial
      if (cur.isReplicate()) {
        if (tgt.kind == Placement::Kind::Partial && tgt.reduceOp == ReduceOp::Product)
          return makeError("redistribute {} -> {}: Replicate to Partial(product) conversion is not supported "
                           "(DTensor raises ValueError at {})",
                           str(src), str(dst), stepName());
        step.action = RedistributeAction::LocalPartition;
      } else if (isShardLike(cur)) {
        return makeError("redistribute {} -> {}: redistribute from {} to {} not supported yet (DTensor raises "
                         "RuntimeError at {})",
                         str(src), str(dst), cur.str(), tgt.str(), stepName());
      } else {
        return makeError("redistribute {} -> {}: redistribution from one partial type ({}) to another ({}) is "
                         "unsupported (DTensor raises AssertionError at {})",
                         str(src), str(dst), cur.str(), tgt.str(), stepName());
      }
    }
    step.localShapeAfter = local;
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

std::optional<std::string> userRedistributeRefusal(llvm::ArrayRef<Placement> srcIn, llvm::ArrayRef<Placement> dst,
                                                   int64_t tensorRank) {
  Placements src = tensorRank >= 0 ? normalized(srcIn, tensorRank) : Placements(srcIn.begin(), srcIn.end());
  for (size_t i = 0; i < dst.size() && i < src.size(); ++i)
    if (dst[i].isPartial() && !same(src[i], dst[i]))
      return fmt::format("Can not redistribute from {} to {}, redistributing to Partial is for internal use only!",
                         pyStr(src[i]), pyStr(dst[i]));
  return std::nullopt;
}

Placements redistributeBackwardTarget(llvm::ArrayRef<Placement> gradPlacements, llvm::ArrayRef<Placement> forwardSrc) {
  Placements out;
  for (size_t i = 0; i < forwardSrc.size(); ++i) {
    const Placement &target = forwardSrc[i];
    bool gradShardOrRep = i < gradPlacements.size() && (isShardLike(gradPlacements[i]) || gradPlacements[i].isReplicate());
    out.push_back(gradShardOrRep && target.isPartial() ? Placement::replicate() : target);
  }
  return out;
}

llvm::Expected<double> redistributeCost(const DeviceMesh &mesh, const TensorMeta &meta, llvm::ArrayRef<Placement> srcIn,
                                        llvm::ArrayRef<Placement> dstIn, int64_t devicesPerHost,
                                        const RedistributeOptions &options) {
  auto checked = validated(mesh, meta, srcIn, dstIn);
  if (!checked)
    return checked.takeError();
  Placements &src = checked->first, &dst = checked->second;
  if (llvm::all_of(src, [](const Placement &p) { return p.isReplicate(); }))
    return 0.0;
  if (same(src, dst) && (hasStrided(src) || !hasNonDefaultOrder(options)))
    return 0.0;
  // A _StridedShard spec has no shard_order (it encodes one), and redistribute_cost bails.
  for (const Placements *ps : {&src, &dst})
    for (const Placement &p : *ps)
      if (p.kind == Placement::Kind::StridedShard)
        return kInf;
  RedistributeOptions withHost = options;
  withHost.devicesPerHost = devicesPerHost > 0 ? devicesPerHost : options.devicesPerHost;
  Placements start;
  bool usedGraph = false;
  auto planned = planTransforms(mesh, meta, src, dst, withHost, start, usedGraph);
  if (!planned)
    return planned.takeError();
  CostModel model(mesh, withHost.devicesPerHost);
  double commBytesGb = bytesGbOf(meta, model.numShards(src));
  double cost = 0.0;
  for (const Transform &t : *planned) {
    double step = model.transition(t.src, t.dst, t.meshDims.front(), commBytesGb);
    if (std::isinf(step))
      return kInf;
    cost += step;
  }
  return cost;
}

} // namespace commlens
