// Reads a cluster topology file (docs/cluster-format.md, "commlens-cluster" version 1): a preset
// to start from, GPU generation, GPUs per node, link bandwidths, per mesh dim placement, and
// measured nccl-tests tables (inline rows or nccl-tests' own output files) to calibrate from.
#pragma once

#include "ir/Cluster.h"

#include "llvm/Support/Error.h"

namespace commlens {

/// Parses topology JSON text; `baseDir` resolves relative nccl-tests file names. Messages name
/// the JSON path ("calibration[0].ranks: expected an integer").
llvm::Expected<Cluster> parseCluster(llvm::StringRef text, llvm::StringRef baseDir);

/// Reads a topology file; messages are not prefixed by its name (the caller names it).
llvm::Expected<Cluster> readClusterFile(llvm::StringRef path);

/// The out-of-place (size, time) rows of nccl-tests output (all_reduce_perf, all_gather_perf,
/// ...): columns found from its "# size count type redop root time algbw busbw" header.
llvm::Expected<std::vector<MeasuredTime>> parseNcclTestsOutput(llvm::StringRef text);

/// A preset name or a topology file path (anything with a '/' or ending in ".json").
llvm::Expected<Cluster> resolveCluster(llvm::StringRef nameOrPath);

} // namespace commlens
