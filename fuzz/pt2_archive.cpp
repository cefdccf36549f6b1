// libFuzzer target: the .pt2 zip archive reader on a memory buffer (Pt2Archive::openBuffer, over
// libzip) and the loader on top of it (loadPt2Buffer: archive format record, model record,
// weights config, tied parameters).
#include "FuzzCommon.h"

#include "frontends/Pt2Archive.h"
#include "frontends/Pt2Loader.h"

using namespace commlens;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes = fuzz::asText(data, size);
  auto archive = Pt2Archive::openBuffer(bytes);
  if (fuzz::expectMessage(archive)) {
    auto records = (*archive)->records();
    for (const std::string &name : records ? *records : std::vector<std::string>{}) {
      if (!(*archive)->hasRecord(name))
        continue;
      auto record = (*archive)->read(name);
      (void)fuzz::expectMessage(record);
    }
    if (!records)
      fuzz::expectMessage(records.takeError());
  }
  auto program = loadPt2Buffer(bytes);
  (void)fuzz::expectMessage(program);
  return 0;
}
