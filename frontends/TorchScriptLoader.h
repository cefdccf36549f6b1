// TorchScript input (torch.jit.save of a scripted or traced module): the archive is converted to a
// torch.export program's JSON by libcommlens_torchscript, the one library linking LibTorch, which
// is loaded with dlopen on first use, so .pt2 input never loads LibTorch.
#pragma once

#include "frontends/Pt2Archive.h"

#include "llvm/Support/Error.h"

#include <string>

namespace commlens {

/// Whether the archive is torch.jit.save's (data.pkl and code/ under its root folder).
bool isTorchScriptArchive(const Pt2Archive &archive);

struct TorchScriptProgram {
  std::string programJson;       // torch.export's program schema
  std::string weightsConfigJson; // torch.export's weights config (tied parameters share a record)
};

/// The program of a TorchScript archive held in `bytes`. The library is found through
/// $COMMLENS_TORCHSCRIPT_LIBRARY, beside the binary holding this code, where the install puts it,
/// or in the build tree; errors are one line.
llvm::Expected<TorchScriptProgram> convertTorchScript(llvm::StringRef bytes);

} // namespace commlens
