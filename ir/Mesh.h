// Device meshes and DTensor placements, as plain data (no LibTorch).
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

/// The device type changes which collectives DTensor issues (e.g. Shard->Shard is an
/// all-to-all on CUDA but an all_gather plus a local chunk on CPU).
enum class MeshDeviceType : uint8_t { Cpu, Cuda };

/// Dims of a mesh taken together as one: a single dim, or several flattened into one
/// (`mesh["efsdp", "ep"]._flatten("fsdp")`), in the mesh's order (row-major ranks).
using MeshDimGroup = llvm::SmallVector<unsigned, 2>;

struct DeviceMesh {
  llvm::SmallVector<int64_t, 2> shape;
  llvm::SmallVector<std::string, 2> dimNames; // empty names allowed when unnamed
  MeshDeviceType deviceType = MeshDeviceType::Cpu;
  /// Named flattenings of several dims (DeviceMesh._flatten, torch/distributed/device_mesh.py),
  /// as torchtitan's fsdp dim over efsdp x ep: a name FSDP may take as its mesh.
  std::vector<std::pair<std::string, MeshDimGroup>> flattened{};

  size_t ndim() const { return shape.size(); }
  int64_t size() const;
  /// Index of a named mesh dim.
  std::optional<unsigned> dimIndex(llvm::StringRef name) const;
  /// The dims a name stands for: a mesh dim, or a flattened one's dims.
  std::optional<MeshDimGroup> dimGroup(llvm::StringRef name) const;
  /// The ranks of a group of dims (the product of their sizes).
  int64_t groupSize(llvm::ArrayRef<unsigned> dims) const;
  /// "tp", a flattened group's own name ("fsdp"), or the dims' names joined ("dp,tp").
  std::string groupName(llvm::ArrayRef<unsigned> dims) const;
  /// The sub-mesh of some dims, each a dim or a flattened group, as `mesh["tp"]`,
  /// `mesh["ep"]` (flattened) or `mesh["ep", "etp"]` give it.
  DeviceMesh subMesh(llvm::ArrayRef<MeshDimGroup> dims) const;
  std::string str() const; // "DeviceMesh((2, 4), 'cpu', mesh_dim_names=('dp', 'tp'))"
};

/// A mesh DTensors live on (DTensor's `device_mesh`): the plan's mesh, or the sub-mesh a
/// parallelize_module call gives its styles (`mesh["tp"]`, a flattened `mesh["ep"]`).
struct DTensorMesh {
  DeviceMesh mesh;
  /// Per dim of `mesh`: the plan's mesh dims it is (several where flattened).
  llvm::SmallVector<MeshDimGroup, 2> planDims;
};

/// Index of a DTensorMesh in PredictionState::dtensorMeshes (state/).
using MeshId = uint8_t;

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min, Product };
llvm::StringRef name(ReduceOp op);

/// One mesh dim's placement of a tensor.
struct Placement {
  /// NormPartial is DTensor's _NormPartial (torch/distributed/tensor/_ops/_math_ops.py): a partial
  /// p-norm, a Partial("sum") subclass that reduces x^p -> all_reduce(sum) -> x^(1/p). Like
  /// MaskPartial it is a Partial (is_partial()) equal to no plain Partial.
  enum class Kind : uint8_t { Replicate, Shard, Partial, StridedShard, MaskPartial, NormPartial };
  Kind kind = Kind::Replicate;
  int64_t dim = 0;          // Shard / StridedShard: the tensor dim
  int64_t splitFactor = 1;  // StridedShard
  ReduceOp reduceOp = ReduceOp::Sum; // Partial / MaskPartial (NormPartial: always Sum)
  double normType = 0;      // NormPartial: the p of the p-norm

  static Placement replicate() { return {}; }
  static Placement shard(int64_t d) { return {Kind::Shard, d, 1, ReduceOp::Sum}; }
  static Placement partial(ReduceOp op = ReduceOp::Sum) { return {Kind::Partial, 0, 1, op}; }
  static Placement normPartial(double p) { return {Kind::NormPartial, 0, 1, ReduceOp::Sum, p}; }

  bool isReplicate() const { return kind == Kind::Replicate; }
  bool isShard() const { return kind == Kind::Shard; }
  bool isShard(int64_t d) const { return kind == Kind::Shard && dim == d; }
  bool isPartial() const { return kind == Kind::Partial || kind == Kind::MaskPartial || kind == Kind::NormPartial; }
  bool operator==(const Placement &) const = default;

  /// Short form: "R", "S(0)", "P(sum)", "_S(0,2)", "MP(sum)", "NP(2)".
  std::string str() const;
  /// torch's repr: "Replicate()", "Shard(dim=0)", "Partial(sum)", "_NormPartial(2)".
  std::string torchStr() const;
  /// Parses the short form, torch's repr or the constructor form ("Shard(0)", "Partial()").
  static llvm::Expected<Placement> parse(llvm::StringRef text);
};

/// A placement per mesh dim.
using Placements = llvm::SmallVector<Placement, 2>;
std::string str(llvm::ArrayRef<Placement> placements); // "[S(0), R]"

/// Normalises negative shard dims against a tensor rank.
Placements normalized(llvm::ArrayRef<Placement> placements, int64_t rank);
/// The gradient placements from_local / to_local give by default (DTensor's
/// _normalize_placements_for_grad, torch/distributed/tensor/_api.py): Partial becomes Replicate.
Placements gradientPlacements(llvm::ArrayRef<Placement> placements);

/// The shape of the local shard on the rank at mesh coordinate `coord` (DTensor's
/// compute_local_shape_and_global_offset, torch/distributed/tensor/_utils.py: mesh dims in order,
/// torch.chunk sizes of the progressively sharded size). Only Shard placements (normalised) shrink a
/// dim; uneven chunks leave the last ranks smaller or empty.
llvm::SmallVector<int64_t, 4> localShape(llvm::ArrayRef<int64_t> global, llvm::ArrayRef<Placement> placements,
                                         const DeviceMesh &mesh, llvm::ArrayRef<int64_t> coord);

/// Calls `visit` on each mesh coordinate, row-major from all zeros (so a failure names the lowest
/// rank it hits), and stops at its first error.
llvm::Error forEachMeshCoordinate(const DeviceMesh &mesh,
                                  llvm::function_ref<llvm::Error(llvm::ArrayRef<int64_t>)> visit);

} // namespace commlens
