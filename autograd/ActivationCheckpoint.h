// Non-reentrant activation checkpointing (torch 2.13 torch/utils/checkpoint.py, as
// checkpoint_wrapper and HF's gradient checkpointing call it), as the prediction passes model it.
//
// A checkpointed module call keeps none of the tensors its forward saved for backward. The first
// time backward unpacks one of them, the call's forward runs again -- module hooks and DTensor
// redistributions included, so its collectives repeat, in the backward phase, charged to the
// modules whose forward issues them -- and stops early, right after the op that saved the last
// tensor the original forward saved: collectives after it (say, a RowwiseParallel output
// reduce-scatter at the end of the block) are not repeated.
//
// checkpoint_wrapper (torchtitan's full AC) also renames: the wrapper takes the module's place,
// class CheckpointWrapper, and the module becomes its child `_checkpoint_wrapped_module`, which is
// how CommDebugMode names every module below it.
#pragma once

#include "ir/Graph.h"
#include "ir/ShardingPlan.h"
#include "state/PredictionState.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

namespace commlens {

/// The modules the plan checkpoints, each recorded in `state.checkpointed`; wrapper entries put a
/// CheckpointWrapper scope above theirs (and a call-path level into the nodes below it). Runs
/// after the tensor-parallel styles are matched and before fully_shard units are, as torchtitan
/// applies them.
llvm::Error applyActivationCheckpointing(const ShardingPlan &plan, Graph &graph, PredictionState &state);

// Selective checkpointing (an op list): its policy sees the ops DTensor's dispatch receives, and
// the functional collectives the styles' hooks call directly (those DTensor issues inside an op's
// dispatch are below it: they run again whenever their op does).

/// Whether the entry's policy keeps the output of node `n` (its op named as the IR names it,
/// "aten::mm.default"); `calls` counts the calls of each op the policy counts in this run of the
/// module (an mm it forces to recompute by its operand's shape is not counted).
bool keptByCheckpoint(const ActivationCheckpointUnit &unit, const Node &n, llvm::StringMap<unsigned> &calls);
/// Metadata on a recomputed hook node: the collectives (CommDebugMode names, comma-separated) the
/// op list keeps, which its redistribution does not issue again.
inline constexpr const char *kKeptCollectives = "checkpoint_kept_collectives";
std::string keptCollectives(const ActivationCheckpointUnit &unit);

} // namespace commlens
