// commlens._core.FxGraphWriter: the graphs of an in-memory ExportedProgram written as the JSON that
// frontends/ExportedProgramReader.cpp decodes, from the FX nodes themselves. It is the per-node part
// of python/commlens/_program_json.py (which writes the program around the graph and says what the
// document holds); in C++ because at some 9,000 nodes the Python walk was most of the in-memory
// prediction's time.
#pragma once

#include <nanobind/nanobind.h>

namespace commlens::python {

/// Adds the FxGraphWriter class to the extension module.
void bindFxGraphWriter(nanobind::module_ &module);

} // namespace commlens::python
