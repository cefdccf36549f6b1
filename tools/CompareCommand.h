// `commlens compare`.
#pragma once

#include "tools/Cli.h"

namespace commlens {

int runCompare(int argc, char **argv);

} // namespace commlens
