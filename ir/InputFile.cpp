#include "ir/InputFile.h"

#include "ir/Error.h"

#include "llvm/Support/FileSystem.h"

namespace commlens {

llvm::Error checkInputFile(llvm::StringRef path, uint64_t maxBytes) {
  namespace fs = llvm::sys::fs;
  fs::file_status status;
  if (fs::status(path, status)) // follows symbolic links
    return llvm::Error::success();
  if (status.type() == fs::file_type::directory_file)
    return makeError("is a directory");
  if (status.type() != fs::file_type::regular_file)
    return makeError("is not a regular file (a FIFO, socket or device)");
  if (status.getSize() > maxBytes)
    return makeError("is {} bytes, more than the {} read", status.getSize(), maxBytes);
  return llvm::Error::success();
}

} // namespace commlens
