// The files commlens reads (archives, plans, counts, cluster topologies, IR text) must be regular
// files: a FIFO would block a read and a device may never end (/dev/zero read whole ran out of
// memory), so each is checked, by its path, before it is opened.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <limits>

namespace commlens {

/// The size bound of a file read whole into memory (plans, counts, topologies, IR text).
inline constexpr uint64_t kMaxTextFileBytes = uint64_t(1) << 30;
/// A .pt2 archive is mapped, not read, and only the records used are read out of it.
inline constexpr uint64_t kNoSizeBound = std::numeric_limits<uint64_t>::max();

/// Fails with "is a directory", "is not a regular file (a FIFO, socket or device)" or "is N bytes,
/// more than the M read"; succeeds when `path` cannot be looked at (the open that follows says
/// why, in its caller's words).
llvm::Error checkInputFile(llvm::StringRef path, uint64_t maxBytes);

} // namespace commlens
