// The TorchScript options of the commands that read a model (tools/Cli.h).
#include "tools/Cli.h"

#include "ir/Error.h"

namespace commlens::cli {

llvm::Expected<TorchScriptOptions> torchScriptOptionsFrom(const Args &args) {
  TorchScriptOptions ts;
  ts.enabled = args.flag("--torchscript");
  auto count = [&](const char *name, std::optional<uint64_t> &out) -> llvm::Error {
    std::string v = args.option(name);
    if (v.empty())
      return llvm::Error::success();
    uint64_t n = 0;
    if (llvm::StringRef(v).getAsInteger(10, n) || n < 1 || n > (uint64_t{1} << 32))
      return makeError("{} needs a positive integer, got '{}'", name, v);
    out = n;
    return llvm::Error::success();
  };
  if (std::string v = args.option("--torchscript-memory"); !v.empty()) {
    ts.limits.memoryBytes = parseByteSize(v);
    if (!ts.limits.memoryBytes)
      return makeError("--torchscript-memory needs a size in bytes, optionally with K, M, G or T (4G), got '{}'", v);
  }
  if (llvm::Error err = count("--torchscript-cpu-seconds", ts.limits.cpuSeconds))
    return err;
  if (llvm::Error err = count("--torchscript-open-files", ts.limits.openFiles))
    return err;
  if (llvm::Error err = count("--torchscript-wall-seconds", ts.limits.wallSeconds))
    return err;
  if (!ts.enabled)
    for (const char *name : {COMMLENS_TORCHSCRIPT_OPTIONS})
      if (!args.option(name).empty())
        return makeError("{} applies only with --torchscript", name);
  return ts;
}

} // namespace commlens::cli
