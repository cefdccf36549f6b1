// The C interface of libcommlens_torchscript, the one library that links LibTorch: it turns a
// TorchScript archive (torch.jit.save of a scripted or traced module) into the JSON of a
// torch.export program (the schema frontends/ExportedProgramReader decodes), so that the rest of
// commlens reads TorchScript through the same decoder and checks, and the predict path of .pt2
// files never loads LibTorch. commlens loads the library with dlopen only for TorchScript input.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Converts the archive held in `bytes`. On success returns 0 and sets `*programJson` and
/// `*weightsConfigJson` (torch.export's weights config: which parameters share storage); on
/// failure returns nonzero and sets `*error` to a one-line message. The strings are malloc'ed:
/// release them with commlens_torchscript_free.
int commlens_torchscript_to_program_json(const char *bytes, size_t size, char **programJson,
                                         char **weightsConfigJson, char **error);
void commlens_torchscript_free(char *p);

#ifdef __cplusplus
}
#endif
