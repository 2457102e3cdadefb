"""The `gpuaudit` command's entry point (issue #48 item 6): what must hold before the CLI is even imported.

* Ctrl-C while the CLI's libraries load (boto3, pydantic, rich take a second or more) ends the command as Ctrl-C
  does later — one line, exit 130 — not with an import traceback.
* A closed stdout (`gpuaudit … >&-`: Python then has no `sys.stdout`) is a stream that refuses writes with
  EBADF: an output meant for stdout is the CLI's "cannot write output" (exit 2); outputs to files still work.

Only the standard library is imported here, so nothing heavy runs before the handlers are in place.
"""

from __future__ import annotations

import errno
import io
import sys

EXIT_INTERRUPTED = 130  # gpuaudit.access.EXIT_INTERRUPTED, not imported: this module loads before anything else


class ClosedStream(io.TextIOBase):
    """What stdout is when the process was started with it closed: every write refuses, naming why."""

    def write(self, _text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed (started with >&-); write the output with --out FILE")

    def isatty(self) -> bool:
        return False


def main() -> None:
    if sys.stdout is None:
        sys.stdout = ClosedStream()
    try:
        from gpuaudit.cli import main as cli_main
    except KeyboardInterrupt:
        if sys.stderr is not None:
            sys.stderr.write("gpuaudit: interrupted (Ctrl-C)\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    cli_main()
