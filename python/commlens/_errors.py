"""The one exception type of the commlens Python package, the CLI wrapper
that turns it into ``commlens: error: <subject>: <what>`` plus exit status 2,
and the processes' fast exit."""

import functools
import os
import sys


class CommlensError(Exception):
    """A user-facing error about ``subject`` (a file name or a factory spec).

    ``str(err)`` is ``"<subject>: <message>"``; the CLIs print it as
    ``commlens: error: <subject>: <message>`` on one line and exit with 2.
    """

    def __init__(self, subject, message):
        self.subject = str(subject)
        self.message = " ".join(str(message).split())  # always one line
        super().__init__(f"{self.subject}: {self.message}")


EXIT_USAGE = 2


def error_line(err):
    return f"commlens: error: {err}"


def cli_main(fn):
    """Decorate a ``main(argv=None) -> int`` so a :class:`CommlensError`
    becomes one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(argv=None):
        try:
            return fn(argv)
        except CommlensError as err:
            sys.stderr.write(error_line(err) + "\n")
            sys.stderr.flush()
            return EXIT_USAGE

    return wrapper


def exit_without_teardown(status):
    """Flush stdout and stderr and leave the process now, skipping the interpreter's teardown:
    for a process whose output is all written, where the teardown only costs (it frees a traced
    program object by object) or fails (torch's c10d/gloo threads now and then abort it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
