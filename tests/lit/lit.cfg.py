# lit configuration of commlens's per-pass tests: IR text in (ir/IRParser.h), IR or the prediction
# table out, checked with FileCheck. Run from the repository root:
#   .venv/bin/lit -sv tests/lit [--param commlens_build=BUILD_DIR] [--param filecheck=PATH]
# (ctest runs it as the `lit` test with the build directory it built.)
import os
import sys

import lit.formats

config.name = "commlens"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
root = os.path.dirname(os.path.dirname(config.test_source_root))
build = os.path.abspath(lit_config.params.get("commlens_build", os.path.join(root, "build")))
config.test_exec_root = os.path.join(build, "tests", "lit")

commlens_opt = os.path.join(build, "commlens-opt")
filecheck = lit_config.params.get("filecheck", "/usr/lib/llvm-14/bin/FileCheck")
for tool in (commlens_opt, filecheck):
    if not os.access(tool, os.X_OK):
        lit_config.fatal(f"{tool} not found (build first, or pass --param commlens_build= / --param filecheck=)")

# Bare tool names in RUN lines are the built tools (not a word inside a path or an option).
config.substitutions.append((r"(?<![\w/.-])commlens-opt\b", commlens_opt))
config.substitutions.append((r"(?<![\w/.-])FileCheck\b", filecheck))
# Plans shared by the tests.
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# `%exitcode CMD...` prints CMD's exit status (its stderr dropped), for tests of exit codes.
config.substitutions.append(
    ("%exitcode", f'"{sys.executable}" -c "import subprocess, sys; '
                f'print(subprocess.call(sys.argv[1:], stderr=subprocess.DEVNULL))"'))
