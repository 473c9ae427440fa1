"""Running a command with a folder or file the user cannot write.

Tests run as root, where `chmod` does not stop writes, so the target is
bind-mounted read-only in a private mount namespace (`unshare -m`; a file
can be bind-mounted too), and a probe write proves the mount took; as
another user, `chmod -R a-w` does the same. Either way a write fails with
EROFS/EACCES.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

__all__ = ["run_read_only"]


def run_read_only(
    root: Path, command: list[str], *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command` with `root` (a folder and all below it, or a file) read-only."""
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
        try:
            return subprocess.run(command, capture_output=True, text=True, env=env)
        finally:
            subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) is needed to mount read-only"
    quoted = shlex.quote(str(root))
    # The probe must fail: creating a file in the folder, or opening the file
    # for appending (`: >>` writes nothing even where it succeeds).
    probe = f"touch {quoted}/probe" if root.is_dir() else f": >> {quoted}"
    script = (
        f"mount --bind -o ro {quoted} {quoted} && "
        f"({probe}) 2>/dev/null && exit 99; exec {shlex.join(command)}"
    )
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode != 99, "the bind mount did not make the target read-only"
    return done
