// A plain main() for a fuzz target, built with the normal compiler (no libFuzzer): it feeds every
// file of the directories (and files) it is given to LLVMFuzzerTestOneInput, one at a time, as
// libFuzzer does when it replays a corpus. A seed that crashes or aborts the target fails the
// run; so does finding no seed at all, which would check nothing.
//   fuzz_replay_<target> CORPUS_DIR|FILE...
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    if (!llvm::sys::fs::is_directory(argv[i])) {
      seeds.push_back(argv[i]);
      continue;
    }
    std::error_code ec;
    for (llvm::sys::fs::recursive_directory_iterator it(argv[i], ec), end; it != end && !ec; it.increment(ec))
      if (llvm::sys::fs::is_regular_file(it->path()))
        seeds.push_back(it->path());
    if (ec) {
      std::fprintf(stderr, "fuzz_replay: %s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "fuzz_replay: no seed given\n");
    return 1;
  }
  std::sort(seeds.begin(), seeds.end());
  for (const std::string &seed : seeds) {
    auto buffer = llvm::MemoryBuffer::getFile(seed, /*IsText=*/false, /*RequiresNullTerminator=*/false);
    if (!buffer) {
      std::fprintf(stderr, "fuzz_replay: %s: %s\n", seed.c_str(), buffer.getError().message().c_str());
      return 1;
    }
    // An exact-size copy, as libFuzzer passes its inputs: a read past the end is a read past the
    // allocation (ASan catches it in a sanitizer build), not into the file buffer's padding.
    std::vector<uint8_t> data((*buffer)->getBufferStart(), (*buffer)->getBufferEnd());
    std::fprintf(stderr, "fuzz_replay: %s\n", seed.c_str());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::printf("fuzz_replay: %zu seeds replayed\n", seeds.size());
  return 0;
}
