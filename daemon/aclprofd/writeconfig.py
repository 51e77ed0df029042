"""``aclprofd --write-config PATH``: the annotated example configuration (every key, commented,
at its default), shipped inside the package so that a pip or venv install can create the
file the systemd unit reads (``/etc/aclprof/aclprofd.toml``) with one command.

An existing file is never replaced unless ``--force`` is given: the file is written under a
random name beside PATH, then hard-linked to PATH (which fails if PATH exists, so a file
appearing meanwhile is not clobbered either) or, with ``force``, renamed over it. Missing
parent directories are created (mode 0755). The file is 0644: it holds no secret, and the
daemon's user (a systemd ``DynamicUser``) must read it.
"""

from __future__ import annotations

import os
import secrets
import stat
from importlib import resources

__all__ = ["EXAMPLE_NAME", "WriteConfigError", "example_text", "write_config"]

EXAMPLE_NAME = "aclprofd.example.toml"


class WriteConfigError(Exception):
    """The file cannot be written; ``code`` is the exit status (2: refused, 1: the system said no)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def example_text() -> str:
    """The example configuration shipped with the package (daemon/aclprofd/aclprofd.example.toml)."""
    return resources.files("aclprofd").joinpath(EXAMPLE_NAME).read_text(encoding="utf-8")


def write_config(path: str, *, force: bool = False) -> str:
    """Write the example to ``path``; the absolute path written. WriteConfigError otherwise."""
    text = example_text().encode("utf-8")
    target = os.path.abspath(path)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise WriteConfigError(f"--write-config: cannot check {path}: {exc.strerror}", 1) from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise WriteConfigError(f"--write-config: {path} exists and is not a regular file; "
                                   "choose another path", 2)
        if not force:
            raise WriteConfigError(f"--write-config: {path} exists; not replacing it "
                                   "(add --force to replace it with the example)", 2)
    parent = os.path.dirname(target)
    tmp = os.path.join(parent, f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # whatever the umask: the daemon's user must read it
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if force:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)  # fails if the path appeared since the check
            except FileExistsError:
                raise WriteConfigError(f"--write-config: {path} exists; not replacing it "
                                       "(add --force to replace it with the example)", 2) from None
    except OSError as exc:
        raise WriteConfigError(f"--write-config: cannot write {path}: {exc.strerror or exc}", 1) from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        except OSError:
            pass
    return target
