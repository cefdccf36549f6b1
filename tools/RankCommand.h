// `commlens rank`: predicts several plans for one model in one process (the archive read once, a
// fresh program decoded per plan) and ranks them by communication time per step on a cluster.
#pragma once

#include "tools/Cli.h"

namespace commlens {

int runRank(int argc, char **argv);

} // namespace commlens
