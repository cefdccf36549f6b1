// The command-line helpers every commlens command shares (defined in commlens.cpp).
#pragma once

#include "frontends/TorchScriptLoader.h"
#include "passes/PassManager.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace commlens {

namespace cli {

/// Exit codes: 0 success, 1 a comparison found differences, 2 bad input or usage.
constexpr int kExitDifferent = 1;
constexpr int kExitBadInput = 2;

/// A command's arguments: positionals, the flags and options it knows (each at most once, an
/// option with a non-empty value), and whether --help / -h was given.
struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> flags;
  std::vector<std::pair<std::string, std::string>> options;
  bool help = false;

  bool flag(const char *name) const;
  /// The option's value, or "" when not given (a repeatable option: its last value).
  std::string option(const char *name) const;
  /// Every value of an option, in order (repeatable options).
  std::vector<std::string> all(const char *name) const;
};

/// Splits argv[first..] into positionals, known flags and known options ("--opt VALUE" or
/// "--opt=VALUE"). Unknown and empty options are errors, and so is an option given twice unless
/// it is `repeatable`.
llvm::Expected<Args> parseArgs(int argc, char **argv, int first, std::initializer_list<const char *> flags,
                               std::initializer_list<const char *> options,
                               std::initializer_list<const char *> repeatable = {});

/// Prints "commlens: error: <message>" (one line) and returns kExitBadInput.
int fail(const std::string &message);

/// Writes what `write` writes to FILE, or to stdout when the path is empty, as it is written; a
/// failed write is an error.
int emit(llvm::function_ref<void(llvm::raw_ostream &)> write, const std::string &outPath);
/// Writes the text to FILE, or to stdout when the path is empty; a failed write is an error.
inline int emit(const std::string &text, const std::string &outPath) {
  return emit([&](llvm::raw_ostream &os) { os << text; }, outPath);
}

/// Prints a command's usage for `commlens <command> --help`.
int printUsage(const char *command);

/// TorchScript input, which every command reading a model takes: the --torchscript flag (without
/// it a TorchScript archive is refused) and the worker's limits, --torchscript-memory BYTES[K|M|G|T],
/// --torchscript-cpu-seconds N, --torchscript-open-files N, --torchscript-wall-seconds N (only
/// with --torchscript). These are the names to add to parseArgs' flags and options.
#define COMMLENS_TORCHSCRIPT_FLAGS "--torchscript"
#define COMMLENS_TORCHSCRIPT_OPTIONS                                                                               \
  "--torchscript-memory", "--torchscript-cpu-seconds", "--torchscript-open-files", "--torchscript-wall-seconds"
llvm::Expected<TorchScriptOptions> torchScriptOptionsFrom(const Args &args);

/// The TorchScript options of every command reading a model, for its usage.
#define COMMLENS_TORCHSCRIPT_USAGE                                                                                 \
  "  --torchscript reads a TorchScript archive (torch.jit.save) by running its code in a worker process\n"          \
  "  under limits: --torchscript-memory BYTES[K|M|G] (address space beyond the worker's own; default\n"           \
  "  2G + 2 x the archive + 256 x the inputs), --torchscript-cpu-seconds N (default 60 + the weights'\n"          \
  "  work on the inputs), --torchscript-open-files N (32), --torchscript-wall-seconds N (CPU + 30);\n"            \
  "  without it such an archive is refused. Only for files you trust: README.md, Security and trust\n"

/// predict's and rank's --routing-skew (docs/plan-format.md, "The routing model").
#define COMMLENS_ROUTING_SKEW_USAGE                                                                                \
  "  --routing-skew F: the routing model of MoE tokens, the busiest expert-parallel rank getting F times\n"         \
  "  the balanced number of routed rows (at most all of its group's; default 1, balanced top-k routing)\n"

/// The prediction options predict and rank share: --allow-unsupported, the CUDA target
/// (--gpu, --gpu-arch, --cudnn-version, --cuda-version, --torch-version), --routing-skew and
/// --cluster.
llvm::Expected<PassOptions> passOptionsFrom(const Args &args);

} // namespace cli
} // namespace commlens
