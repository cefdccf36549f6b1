#include "ir/Mesh.h"

#include "ir/Error.h"

#include <fmt/format.h>

#include <algorithm>

namespace commlens {

int64_t DeviceMesh::size() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

std::optional<unsigned> DeviceMesh::dimIndex(llvm::StringRef name) const {
  for (unsigned i = 0; i < dimNames.size(); ++i)
    if (dimNames[i] == name)
      return i;
  return std::nullopt;
}

std::optional<MeshDimGroup> DeviceMesh::dimGroup(llvm::StringRef name) const {
  if (auto dim = dimIndex(name))
    return MeshDimGroup{*dim};
  for (const auto &[flatName, dims] : flattened)
    if (flatName == name)
      return dims;
  return std::nullopt;
}

int64_t DeviceMesh::groupSize(llvm::ArrayRef<unsigned> dims) const {
  int64_t n = 1;
  for (unsigned d : dims)
    n *= shape[d];
  return n;
}

std::string DeviceMesh::groupName(llvm::ArrayRef<unsigned> dims) const {
  if (dims.size() > 1)
    for (const auto &[flatName, group] : flattened)
      if (llvm::ArrayRef<unsigned>(group) == dims)
        return flatName;
  std::string out;
  for (unsigned d : dims) {
    if (!out.empty())
      out += ",";
    out += d < dimNames.size() && !dimNames[d].empty() ? dimNames[d] : std::to_string(d);
  }
  return out;
}

DeviceMesh DeviceMesh::subMesh(llvm::ArrayRef<MeshDimGroup> dims) const {
  DeviceMesh m;
  m.deviceType = deviceType;
  for (const MeshDimGroup &group : dims) {
    m.shape.push_back(groupSize(group));
    if (!dimNames.empty())
      m.dimNames.push_back(groupName(group));
  }
  return m;
}

std::string DeviceMesh::str() const {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1)
    dims += ",";
  std::string out = fmt::format("DeviceMesh(({}), '{}'", dims, deviceType == MeshDeviceType::Cuda ? "cuda" : "cpu");
  bool named = false;
  for (const std::string &n : dimNames)
    named |= !n.empty();
  if (named) {
    std::string names;
    for (size_t i = 0; i < dimNames.size(); ++i)
      names += fmt::format("{}'{}'", i ? ", " : "", dimNames[i]);
    if (dimNames.size() == 1)
      names += ",";
    out += fmt::format(", mesh_dim_names=({})", names);
  }
  return out + ")";
}

llvm::StringRef name(ReduceOp op) {
  static constexpr const char *kNames[] = {"sum", "avg", "max", "min", "product"};
  return kNames[static_cast<size_t>(op)];
}

std::string Placement::str() const {
  switch (kind) {
  case Kind::Replicate: return "R";
  case Kind::Shard: return fmt::format("S({})", dim);
  case Kind::Partial: return fmt::format("P({})", name(reduceOp).str());
  case Kind::StridedShard: return fmt::format("_S({},{})", dim, splitFactor);
  case Kind::MaskPartial: return fmt::format("MP({})", name(reduceOp).str());
  case Kind::NormPartial: return fmt::format("NP({})", normType);
  }
  return "?";
}

std::string Placement::torchStr() const {
  switch (kind) {
  case Kind::Replicate: return "Replicate()";
  case Kind::Shard: return fmt::format("Shard(dim={})", dim);
  case Kind::Partial: return fmt::format("Partial({})", name(reduceOp).str());
  case Kind::StridedShard: return fmt::format("_StridedShard(dim={}, sf={})", dim, splitFactor);
  case Kind::MaskPartial: return fmt::format("MaskPartial({})", name(reduceOp).str());
  case Kind::NormPartial: return fmt::format("_NormPartial({})", normType);
  }
  return "?";
}

llvm::Expected<Placement> Placement::parse(llvm::StringRef text) {
  llvm::StringRef t = text.trim();
  auto reduceOf = [&](llvm::StringRef arg) -> std::optional<ReduceOp> {
    arg = arg.trim().trim("'\"");
    arg.consume_front("reduce_op=");
    arg = arg.trim("'\"");
    if (arg.empty() || arg == "sum")
      return ReduceOp::Sum;
    for (ReduceOp op : {ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product})
      if (arg == name(op))
        return op;
    return std::nullopt;
  };
  auto call = [&](llvm::StringRef head, llvm::StringRef &arg) {
    if (!t.startswith(head) || !t.endswith(")"))
      return false;
    llvm::StringRef rest = t.drop_front(head.size());
    if (!rest.consume_front("("))
      return false;
    arg = rest.drop_back().trim();
    return true;
  };
  llvm::StringRef arg;
  if (t == "R" || t == "Replicate()" || t == "Replicate")
    return Placement::replicate();
  if (call("S", arg) || call("Shard", arg)) {
    arg.consume_front("dim=");
    int64_t d;
    if (!arg.trim().getAsInteger(10, d))
      return Placement::shard(d);
  } else if (call("_StridedShard", arg) || call("_S", arg)) { // torch's repr "_StridedShard(dim=1, sf=2)"
    auto [dimArg, factorArg] = arg.split(',');
    dimArg = dimArg.trim();
    dimArg.consume_front("dim=");
    factorArg = factorArg.trim();
    if (!factorArg.consume_front("sf="))
      factorArg.consume_front("split_factor=");
    int64_t d, factor;
    if (!dimArg.trim().getAsInteger(10, d) && !factorArg.trim().getAsInteger(10, factor) && factor >= 1)
      return Placement{Kind::StridedShard, d, factor, ReduceOp::Sum};
  } else if (call("P", arg) || call("Partial", arg)) {
    if (auto op = reduceOf(arg))
      return Placement::partial(*op);
  } else if (t == "P" || t == "Partial") {
    return Placement::partial();
  } else if (call("NP", arg) || call("_NormPartial", arg) || call("_NormP", arg)) {
    arg.consume_front("norm_type=");
    double p;
    if (!arg.trim().getAsDouble(p))
      return Placement::normPartial(p);
  }
  return makeError("bad placement '{}' (expected Shard(d), Replicate(), Partial(op) or _StridedShard(dim=d, sf=k))",
                   text.str());
}

std::string str(llvm::ArrayRef<Placement> placements) {
  std::string out = "[";
  for (size_t i = 0; i < placements.size(); ++i)
    out += (i ? ", " : "") + placements[i].str();
  return out + "]";
}

Placements normalized(llvm::ArrayRef<Placement> placements, int64_t rank) {
  Placements out(placements.begin(), placements.end());
  for (Placement &p : out)
    if ((p.kind == Placement::Kind::Shard || p.kind == Placement::Kind::StridedShard) && p.dim < 0)
      p.dim += rank;
  return out;
}

Placements gradientPlacements(llvm::ArrayRef<Placement> placements) {
  Placements out;
  for (const Placement &p : placements)
    out.push_back(p.isPartial() ? Placement::replicate() : p);
  return out;
}

llvm::SmallVector<int64_t, 4> localShape(llvm::ArrayRef<int64_t> global, llvm::ArrayRef<Placement> placements,
                                         const DeviceMesh &mesh, llvm::ArrayRef<int64_t> coord) {
  llvm::SmallVector<int64_t, 4> local(global.begin(), global.end());
  for (size_t m = 0; m < placements.size() && m < mesh.ndim(); ++m) {
    const Placement &p = placements[m];
    if (!p.isShard() || p.dim < 0 || static_cast<size_t>(p.dim) >= local.size())
      continue;
    int64_t &size = local[p.dim];
    int64_t n = mesh.shape[m];
    int64_t chunk = (size + n - 1) / n;
    size = std::max<int64_t>(0, std::min(chunk, size - coord[m] * chunk));
  }
  return local;
}

llvm::Error forEachMeshCoordinate(const DeviceMesh &mesh,
                                  llvm::function_ref<llvm::Error(llvm::ArrayRef<int64_t>)> visit) {
  llvm::SmallVector<int64_t, 2> coord(mesh.ndim(), 0);
  while (true) {
    if (llvm::Error err = visit(coord))
      return err;
    size_t k = mesh.ndim();
    while (k > 0 && ++coord[k - 1] == mesh.shape[k - 1])
      coord[--k] = 0;
    if (k == 0)
      return llvm::Error::success();
  }
}

} // namespace commlens
