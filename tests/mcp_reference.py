"""The official reference MCP servers ``mcp-server-time`` and ``mcp-server-git``
(PyPI), for the tests: where their executables are, a small git repository for
the git server to read, and an ``--mcp-config`` that runs both over stdio.

scripts/test_deps/mcp_reference.sh installs them into their own virtualenv,
.venv-mcp (their pins must not meet the service's).  Without them a test is
skipped with the reason on a developer's machine, and fails under CI=true (a
CI machine that lacks them is a broken setup, not a reason to test less), as
tests/servers.py ``require`` does for redis-server and moto.
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import ROOT

VENV_BIN = Path(ROOT) / ".venv-mcp" / "bin"
INSTALL = "bash scripts/test_deps/mcp_reference.sh"
COMMITS = ("first: a README", "second: the notes")  # the temp repo's messages, oldest first


def _missing(message: str):
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def executable(name: str) -> str:
    """The path of a reference server's executable in .venv-mcp/bin."""
    path = VENV_BIN / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"{name} is not installed in {VENV_BIN} ({INSTALL} installs it)")
    return str(path)


def git_repo(path: Path) -> list[str]:
    """A git repository at ``path`` with two commits; their shas, oldest first.
    Any user or system git configuration is ignored (no signing, no hooks)."""
    git = shutil.which("git")
    if git is None:
        _missing("git is not installed (the git MCP server needs it)")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
           "GIT_COMMITTER_NAME": "Test Author", "GIT_COMMITTER_EMAIL": "author@example.com"}

    def run(*args: str) -> str:
        return subprocess.run([git, *args], cwd=path, env=env, check=True, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    path.mkdir(parents=True, exist_ok=True)
    run("init", "-q", "-b", "main")
    shas = []
    for i, message in enumerate(COMMITS):
        (path / ("README.md" if i == 0 else "notes.txt")).write_text(f"{message}\n")
        run("add", "-A")
        run("commit", "-q", "-m", message)
        shas.append(run("rev-parse", "HEAD"))
    return shas


def servers(repo: Path, mark: str, **options) -> dict:
    """The ``servers`` of an MCP config: ``time`` (its local timezone fixed to UTC,
    so results do not depend on the machine) and ``git`` confined to ``repo``.
    Both get ``MCP_REFERENCE_MARK=<mark>`` in their environment, so that
    :func:`running` finds them; ``options`` (timeout_s...) apply to both."""
    env = {MARK: mark}
    return {"time": {"command": executable("mcp-server-time"), "args": ["--local-timezone", "UTC"], "env": env,
                     **options},
            "git": {"command": executable("mcp-server-git"), "args": ["--repository", str(repo)], "env": env,
                    **options}}


def write_config(path: Path, repo: Path, mark: str, **options) -> Path:
    """An ``--mcp-config`` file at ``path`` that runs both reference servers."""
    path.write_text(json.dumps({"servers": servers(repo, mark, **options)}, indent=2))
    return path


MARK = "MCP_REFERENCE_MARK"


def running(mark: str) -> list[int]:
    """The pids of live processes whose environment holds ``MCP_REFERENCE_MARK=<mark>``
    (the servers started from a config written with that mark); zombies are not live."""
    needle = f"{MARK}={mark}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:  # gone meanwhile, or not ours
            continue
        pids.append(int(entry))
    return pids
