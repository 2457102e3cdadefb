"""Local files the CLI writes (issue #48 item 3): a write never destroys what was there, and never an input.

* `write_atomically`: the text goes to a temporary file beside the target, is flushed to disk, then renamed over
  it (one rename: a reader sees the old file or the new one, never a part). A full disk or any other failure
  leaves the previous file as it was and no temporary file behind. A target that exists and is not a regular
  file (a terminal, /dev/null, a pipe) is written in place: there is nothing there to destroy, and renaming over
  it would replace the device with a file.
* `same_file`: whether two paths name one file (the same inode when both exist, else the same resolved path), so
  an output naming one of the run's inputs (the world, the cache, the history, the result rendered) is refused.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """`text` (UTF-8) as the whole content of `path`, or `path` untouched and OSError raised."""
    target = Path(os.path.realpath(path))  # a symlink's target is replaced, the link kept
    try:
        existing = os.stat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    # O_EXCL: never someone else's file; 0o666 less the umask, as a plain open would create it
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if existing is not None:
            os.chmod(temporary, stat.S_IMODE(existing.st_mode))  # the file replaced keeps its permissions
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one file: the same inode when both exist (hard links, symlinks, `./x` and `x`),
    else the same absolute path once symlinks are resolved."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
