// `commlens compare PREDICTED MEASURED [--json] [--phase forward|backward|both] [-o FILE]`
#pragma once

namespace commlens {

/// Runs `commlens compare`; argv[1] is "compare". Exit codes: 0 every cell identical, 1 some
/// cell differs, 2 bad input or usage (one line `commlens: error: ...` on stderr).
int runCompare(int argc, char **argv);

} // namespace commlens
