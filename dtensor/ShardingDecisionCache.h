#pragma once
// ShardingDecisionCache: ShardingRules::decide asked once per distinct question. A model's
// repeated blocks (126 identical decoder layers) ask the same questions layer after layer; DTensor
// itself caches its strategy choice on the op schema (ShardingPropagator's lru cache over the
// OpSchema: op, argument specs and non-tensor arguments). The key here holds everything decide
// and the rules read: the op, every non-tensor argument by value, which operand each tensor argument
// is (so `mul(x, x)` and `mul(x, y)` differ), each operand's placements and global meta, each
// result's meta, and the mesh. A value that is not a tensor operand (a symbolic size) keys by its
// identity, so such nodes share nothing.
#include "dtensor/ShardingRules.h"

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/Allocator.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/StringSaver.h>

#include <deque>
#include <optional>

namespace commlens {

class ShardingDecisionCache {
public:
  /// `rules.decide(node, operands, mesh)`, or the decision an earlier node with the same key got.
  /// Errors are returned, never cached. The pointer lives as long as the cache.
  llvm::Expected<const ShardingDecision *> decide(const ShardingRules &rules, const Node &node,
                                                   llvm::ArrayRef<std::optional<DTensorSpec>> operands,
                                                   const DeviceMesh &mesh);

  /// The cache key: equal keys mean decide cannot tell the two calls apart.
  static void key(const Node &node, llvm::ArrayRef<std::optional<DTensorSpec>> operands, const DeviceMesh &mesh,
                  llvm::SmallVectorImpl<char> &out);

  size_t hits() const { return hits_; }
  size_t size() const { return decisions_.size(); }

private:
  // Keys are a few hundred bytes: DenseMap hashes them with hash_combine_range, in blocks
  // (StringMap's byte-at-a-time hash was a third of the lookup).
  llvm::BumpPtrAllocator keyMemory_;
  llvm::StringSaver keys_{keyMemory_};
  llvm::DenseMap<llvm::StringRef, const ShardingDecision *> index_;
  std::deque<ShardingDecision> decisions_; // stable addresses
  llvm::SmallString<512> scratch_;
  size_t hits_ = 0;
};

} // namespace commlens
