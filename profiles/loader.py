"""Loading the profiles directory: YAML -> validated :class:`Profile`, or errors
that name the file, the line and the field, and say why.

A broken file never stops the others from loading, nor the service from
starting: it is listed with its errors (``GET /api/profiles``), logged, and
refused when a create names it.  Files are ``<name>.yaml`` (or ``.yml``) and
their ``name`` must be that stem, so a broken file is still found by name.

Each loaded profile carries a content hash (sha256 of the file's bytes, first
16 hex digits): a session records it, so which version of the file it started
from is always known, and an edited file is a new version.

References to the rest of the service (the moniker, the tools, the moniker's
own config keys) are checked against the registries of the process that
loads them (:meth:`ProfileLibrary.check`), at load and again at each use:
a tool offered by an MCP server may appear after app.py started.
"""
import hashlib
import logging
import os
import re
import threading
from datetime import datetime, timezone

import yaml
from pydantic import ValidationError

from profiles.entry import Entry, Problem
from profiles.model import NAME_PATTERN, Profile
from profiles.resolve import base_config, reference_problems

log = logging.getLogger("profiles")

MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 500
EXTENSIONS = (".yaml", ".yml")


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _lines(node, path=()) -> dict:
    """Field path -> line, from a composed YAML node tree (keys and list items)."""
    out = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = path + (key.value,)
            out[sub] = key.start_mark.line + 1
            out.update({k: v for k, v in _lines(value, sub).items() if k != sub})
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(_lines(item, path + (i,)))
    return out


def _field(loc) -> str:
    parts = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def _loc_path(loc) -> tuple:
    """A pydantic error location as a path into the YAML (aliases are the YAML keys;
    union branch names such as 'str' or 'bool' are not part of it)."""
    return tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(("function-", "union[")))


SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built in: ~10x faster


def _compose_and_construct(text: str):
    """Parse once: the node tree (for line numbers) and the data built from it."""
    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def parse(path: str) -> Entry:
    """One file -> an Entry (with a profile, or with problems)."""
    file = os.path.basename(path)
    stem = os.path.splitext(file)[0]
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    entry = Entry(name=stem, file=file, hash=None, profile=None, loaded_at=now)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        entry.problems.append(Problem(file, f"cannot read: {exc.strerror or exc}"))
        return entry
    entry.hash = content_hash(data)
    if len(data) > MAX_FILE_BYTES:
        entry.problems.append(Problem(file, f"larger than {MAX_FILE_BYTES} bytes"))
        return entry
    try:
        node, raw = _compose_and_construct(data.decode("utf-8"))
    except UnicodeDecodeError:
        entry.problems.append(Problem(file, "not UTF-8 text"))
        return entry
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        context = getattr(exc, "context_mark", None)
        problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
        if context is not None and mark is not None and context.line != mark.line:
            problem += f" (what is unclosed or misplaced began on line {context.line + 1})"
        entry.problems.append(Problem(file, f"YAML syntax error: {problem or exc}",
                                      line=mark.line + 1 if mark else None))
        return entry
    entry._lines = _lines(node) if node is not None else {}
    if not isinstance(raw, dict):
        entry.problems.append(Problem(file, "a profile is a YAML mapping (name: ..., moniker: ...)", line=1))
        return entry
    try:
        profile = Profile.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors()[:10]:
            path = _loc_path(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            entry.problems.append(Problem(file, message, line=entry.line_of(path), field=_field(path)))
        return entry
    if profile.name != stem:
        entry.problems.append(Problem(file, f"name {profile.name!r} must match the file name {stem!r}",
                                      line=entry.line_of(("name",)), field="name"))
        return entry
    entry.profile = profile
    return entry


class ProfileLibrary:
    """The profiles of one directory, reloadable while the process runs.

    ``monikers`` (a MonikerRegistry) and ``tool_names`` (a callable returning
    the names of the tools this service knows) are what references are
    checked against; either may be None to skip that check.
    """

    def __init__(self, directory: str, monikers=None, tool_names=None):
        self.directory = directory
        self.monikers = monikers
        self.tool_names = tool_names
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self.loaded_at: str | None = None

    def load(self) -> dict[str, Entry]:
        """(Re)read every file; the new set replaces the old one at once.  Logs
        one line per profile loaded and one per problem."""
        entries: dict[str, Entry] = {}
        if not os.path.isdir(self.directory):
            log.warning("profiles directory %s does not exist; no profiles loaded", self.directory)
        else:
            files = sorted(f for f in os.listdir(self.directory) if f.endswith(EXTENSIONS))
            for file in files[:MAX_FILES]:
                entry = parse(os.path.join(self.directory, file))
                if entry.name in entries:
                    entry.problems.append(Problem(file, f"another file ({entries[entry.name].file}) defines "
                                                        f"profile {entry.name!r}"))
                    entry.profile = None
                    entries[entry.name + ":" + file] = entry
                    continue
                entries[entry.name] = entry
        with self._lock:
            self._entries = entries
            self.loaded_at = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        tools = self.known_tools()
        for entry in entries.values():
            problems = self.check(entry, tools)
            if problems:
                for problem in problems:
                    log.error("profile %s refused: %s", entry.name, problem.describe())
            else:
                log.info("profile %s loaded from %s hash=%s moniker=%s", entry.name, entry.file, entry.hash,
                         entry.profile.moniker)
        return entries

    def get(self, name: str) -> Entry | None:
        with self._lock:
            return self._entries.get(name)

    def entries(self) -> list[Entry]:
        with self._lock:
            return [self._entries[k] for k in sorted(self._entries)]

    def lookup(self, name: str) -> dict:
        """``{moniker, config}`` of a usable profile, for code that starts sessions
        inside agents.py (a sub-agent spawned by profile); KeyError naming the
        problems when the profile is unknown or broken."""
        entry = self.get(name)
        if entry is None:
            raise KeyError(f"no profile {name!r}")
        problems = self.check(entry)
        if problems:
            raise KeyError(f"profile {name!r} cannot be used: " + "; ".join(p.describe() for p in problems))
        return {"moniker": entry.profile.moniker, "config": base_config(entry)}

    def known_tools(self) -> set[str] | None:
        """The names of the tools installed now (None: tools are not checked)."""
        return self.tool_names() if self.tool_names else None

    def check(self, entry: Entry, tool_names: set[str] | None = None) -> list[Problem]:
        """The entry's problems: parse/validation ones, then references the
        running service cannot satisfy (moniker, tools, moniker config).
        ``tool_names``: :meth:`known_tools`, when checking many at once."""
        if entry.profile is None:
            return list(entry.problems)
        return reference_problems(entry, self.monikers, tool_names if tool_names is not None else self.known_tools())


def valid_name(name: str) -> bool:
    return re.fullmatch(NAME_PATTERN, name) is not None
