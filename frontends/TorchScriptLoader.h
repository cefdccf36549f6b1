// TorchScript input (torch.jit.save of a scripted or traced module). Reading it means running the
// model's own code (TorchScript's unpickler, then the forward op by op), so commlens does it only
// when asked (TorchScriptOptions::enabled: the CLI's --torchscript, commlens.predict's
// torchscript=True), and then never in its own process: the archive is handed to a worker process,
// commlens-torchscript-worker, which loads libcommlens_torchscript (the one library linking
// LibTorch) under hard limits (address space, CPU time, open files, no file writes, a seccomp
// filter refusing file creation, network, exec) and returns a torch.export program's JSON. See
// README.md, "Security and trust".
#pragma once

#include "frontends/Pt2Archive.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace commlens {

/// Whether the archive is torch.jit.save's (data.pkl and code/ under its root folder).
bool isTorchScriptArchive(const Pt2Archive &archive);

/// The worker's limits; unset ones get defaults sized from the archive (defaultTorchScriptLimits).
struct TorchScriptLimits {
  /// Bytes of address space the model may take beyond the worker's own once LibTorch is loaded
  /// (RLIMIT_AS is set to the worker's size then plus this).
  std::optional<uint64_t> memoryBytes;
  std::optional<uint64_t> cpuSeconds; // RLIMIT_CPU, beyond what the worker used to start
  std::optional<uint64_t> openFiles;  // RLIMIT_NOFILE
  std::optional<uint64_t> wallSeconds; // killed by commlens after this long
};

/// How commlens treats an archive that is TorchScript.
struct TorchScriptOptions {
  /// Without it a TorchScript archive is refused in one line saying how to opt in.
  bool enabled = false;
  TorchScriptLimits limits;
};

/// The limits in force for an archive of `archiveBytes` whose commlens_inputs.json asks for
/// `inputBytes` bytes in `inputElements` elements: each unset one gets its default,
///   memory:  2 GiB + 2 x the archive's size + 256 x the inputs' bytes, at most 3/4 of the RAM;
///   CPU:     60 s + 1 s per 10^9 multiply-adds of (archive bytes / 4) weights on each input element;
///   files:   32 open files;
///   wall:    the CPU limit + 30 s.
TorchScriptLimits defaultTorchScriptLimits(const TorchScriptLimits &given, uint64_t archiveBytes, uint64_t inputBytes,
                                           uint64_t inputElements);

/// The one-line refusal of a TorchScript archive without the opt-in.
std::string torchScriptRefusal();

struct TorchScriptProgram {
  std::string programJson;       // torch.export's program schema
  std::string weightsConfigJson; // torch.export's weights config (tied parameters share a record)
  /// What the worker took (wait4's rusage) and the limits it ran under.
  struct Stats {
    uint64_t peakRssBytes = 0;
    uint64_t addressSpaceAtStart = 0, residentAtStart = 0; // once LibTorch was loaded, before the limits
    double cpuSeconds = 0, wallSeconds = 0;
    TorchScriptLimits limits;
  } stats;
};

/// The program of a TorchScript archive, converted by the worker under `options.limits` (an
/// error unless `options.enabled`). The library and the worker beside it are found through
/// $COMMLENS_TORCHSCRIPT_LIBRARY, beside the binary holding this code, where the install puts
/// them, or in the build tree; errors are one line. With $COMMLENS_TORCHSCRIPT_STATS set, one
/// line of the worker's peak RSS, CPU and wall time and limits goes to stderr.
llvm::Expected<TorchScriptProgram> convertTorchScript(const Pt2Archive &archive, const TorchScriptOptions &options);

/// Parses a size for --torchscript-memory: an integer of bytes, or with a K, M, G or T suffix
/// (powers of 1024; "4G", "512M").
std::optional<uint64_t> parseByteSize(llvm::StringRef text);

} // namespace commlens
