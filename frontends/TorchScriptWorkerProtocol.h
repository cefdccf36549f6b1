// What commlens (frontends/TorchScriptLoader.cpp) and its TorchScript worker
// (frontends/torchscript/TorchScriptWorker.cpp) exchange. No LibTorch here.
//
//   commlens-torchscript-worker LIBRARY MEMORY_BYTES CPU_SECONDS OPEN_FILES
//
// fd 0 and fd 1 are one end of a socket pair: commlens writes the archive's bytes and shuts its
// end for writing; the worker reads them to the end, converts, and writes one response:
//   'O' u64 n, n bytes of program JSON, u64 m, m bytes of weights config JSON
//   'E' u64 n, n bytes of a one-line error
//   'M' u64 n, n bytes: the memory limit ran out (what was being allocated, or nothing)
// (u64 little-endian). fd 2 is /dev/null. fd 3 is a shared page (kProgressPageSize bytes): the
// worker's address space and resident set once LibTorch was loaded (u64s at offsets 0 and 8; the
// first is the base of RLIMIT_AS) and where the conversion is, NUL-terminated text from offset 16
// ("in 'aten::mm' in layers.0.attn (Attention)"), which commlens reads when the worker dies of a
// limit.
#pragma once

#include <cstddef>

namespace commlens::torchscript_worker {

constexpr const char *kWorkerName = "commlens-torchscript-worker";
constexpr int kProgressFd = 3;
constexpr size_t kProgressPageSize = 4096;
constexpr size_t kProgressTextOffset = 16;

} // namespace commlens::torchscript_worker
