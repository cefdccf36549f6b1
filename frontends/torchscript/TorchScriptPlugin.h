// The C interface of libcommlens_torchscript, the one library that links LibTorch: it turns a
// TorchScript archive (torch.jit.save of a scripted or traced module) into the JSON of a
// torch.export program (the schema frontends/ExportedProgramReader decodes), so that the rest of
// commlens reads TorchScript through the same decoder and checks, and the predict path of .pt2
// files never loads LibTorch. Only commlens-torchscript-worker (TorchScriptWorker.cpp), the process
// commlens starts for TorchScript input the user asked for, loads it (dlopen), under limits.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Converts the archive held in `bytes`. On success returns 0 and sets `*programJson` and
/// `*weightsConfigJson` (torch.export's weights config: which parameters share storage); on
/// failure returns 1 and sets `*error` to a one-line message, or returns 2 when an allocation
/// failed (the worker's memory limit) and sets `*error` to what was being allocated ("" when not
/// known). The strings are malloc'ed: release them with commlens_torchscript_free.
int commlens_torchscript_to_program_json(const char *bytes, size_t size, char **programJson,
                                         char **weightsConfigJson, char **error);
void commlens_torchscript_free(char *p);
/// Where the conversion writes where it is, NUL-terminated ("in 'aten::mm' in w (Linear)", "while
/// loading the archive"), for the message of a limit that kills the worker.
void commlens_torchscript_set_progress(char *buffer, size_t size);
/// Starts LibTorch's CPU thread pool, so that its threads exist before the worker sets its limits.
void commlens_torchscript_init(void);

#ifdef __cplusplus
}
#endif
