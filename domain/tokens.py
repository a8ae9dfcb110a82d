"""Who may use the API: named tokens, each with a role, kept hashed in a file
the operator owns.

The file (``--tokens-file`` / AGENTSVC_TOKENS_FILE) is TOML, one table per
token; ``agentsvc token new NAME --role ROLE`` makes a token, prints it once and
appends its entry::

    [[token]]
    name = "ann"                 # recorded as the actor of every action ann's requests queue
    role = "operator"            # viewer | operator | admin
    sha256 = "9f86d08…"          # hex SHA-256 of the token; the token itself is never stored

The tokens are random (256 bits), so one SHA-256 is as good as a slow password
hash and costs a microsecond per request.  The file is read again when its
modification time changes (checked at most once a second), so adding or
revoking a token needs no restart; a file that stops parsing keeps the last
good set and says so in the log.

``--api-token`` (AGENTSVC_API_TOKEN) remains: a single token named ``admin``
with the admin role, which is what the CLI, serve.py and the tests use when no
file is given.

Roles, each including the ones before it:

- ``viewer``: every read (lists, records, search, live events, metrics);
- ``operator``: creates, forks, replays, controls, answers, approvals, messages;
- ``admin``: what acts on many sessions or spends without a bound: bulk destroy,
  eval runs, reloading profiles.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
import tomllib
from dataclasses import dataclass

log = logging.getLogger("domain.tokens")

ROLES = ("viewer", "operator", "admin")
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
RELOAD_CHECK_S = 1.0


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a token's name and role."""

    name: str
    role: str
    digest: str  # the token's SHA-256: a login cookie names it, so revoking the token ends the cookie too

    def may(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "agt_" + secrets.token_urlsafe(32)


def entry_text(name: str, role: str, token: str) -> str:
    """The TOML entry of a new token (its hash only)."""
    return f'\n[[token]]\nname = "{name}"\nrole = "{role}"\nsha256 = "{digest(token)}"\n'


class TokenError(ValueError):
    """The tokens file is not valid; the message says where."""


def parse(text: str) -> dict[str, Principal]:
    """The tokens of a file's text, by digest."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenError(f"not valid TOML: {exc}") from None
    unknown = set(data) - {"token"}
    if unknown:
        raise TokenError(f"unknown top-level keys {sorted(unknown)} (only [[token]] tables)")
    by_digest: dict[str, Principal] = {}
    names: set[str] = set()
    for i, entry in enumerate(data.get("token") or []):
        where = f"token #{i + 1}"
        if not isinstance(entry, dict) or set(entry) - {"name", "role", "sha256"}:
            raise TokenError(f"{where}: keys are name, role and sha256")
        name, role, hashed = entry.get("name"), entry.get("role"), entry.get("sha256")
        if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
            raise TokenError(f"{where}: name must match {NAME_PATTERN}")
        if role not in ROLES:
            raise TokenError(f"{where} ({name}): role must be one of {', '.join(ROLES)}")
        if not isinstance(hashed, str) or not re.fullmatch("[0-9a-f]{64}", hashed):
            raise TokenError(f"{where} ({name}): sha256 must be 64 lowercase hex digits")
        if name in names:
            raise TokenError(f"{where}: the name {name!r} is used twice")
        names.add(name)
        by_digest[hashed] = Principal(name, role, hashed)
    return by_digest


class TokenRing:
    """The tokens a request may present: the file's, plus the one ``--api-token``."""

    def __init__(self, path: str | None = None, api_token: str | None = None):
        self.path = path
        self._fixed: dict[str, Principal] = {}
        if api_token:
            self._fixed[digest(api_token)] = Principal("admin", "admin", digest(api_token))
        self._from_file: dict[str, Principal] = {}
        self._mtime: int | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if path:
            self._load(initial=True)

    @property
    def enabled(self) -> bool:
        """Whether anything is checked: a token or a file was given (an empty file still locks the API)."""
        return bool(self._fixed) or self.path is not None

    def identify(self, token: str | None) -> Principal | None:
        """The principal a presented token belongs to, or None."""
        if not token:
            return None
        self._maybe_reload()
        given = digest(token)
        for known, principal in (*self._fixed.items(), *self._from_file.items()):
            if hmac.compare_digest(given, known):
                return principal
        return None

    def by_digest(self, hashed: str) -> Principal | None:
        """The principal whose token has this digest (a login cookie's), if still valid."""
        self._maybe_reload()
        return self._fixed.get(hashed) or self._from_file.get(hashed)

    # ---- the file ---------------------------------------------------------------

    def _maybe_reload(self) -> None:
        if not self.path or time.monotonic() - self._checked < RELOAD_CHECK_S:
            return
        with self._lock:
            if time.monotonic() - self._checked >= RELOAD_CHECK_S:
                self._load()

    def _load(self, initial: bool = False) -> None:
        self._checked = time.monotonic()
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            if initial:
                raise TokenError(f"tokens file {self.path} does not exist "
                                 f"(make one with: agentsvc token new NAME --role ROLE --file {self.path})") from None
            log.error("tokens file %s is gone; keeping the %d tokens read before", self.path, len(self._from_file))
            return
        if mtime == self._mtime:
            return
        with open(self.path, encoding="utf-8") as f:
            text = f.read()
        try:
            tokens = parse(text)
        except TokenError as exc:
            if initial:
                raise TokenError(f"{self.path}: {exc}") from None
            log.error("tokens file %s: %s; keeping the %d tokens read before", self.path, exc, len(self._from_file))
            self._mtime = mtime
            return
        self._from_file, self._mtime = tokens, mtime
        log.info("tokens file %s: %d tokens (%s)", self.path, len(tokens),
                 ", ".join(f"{p.name}:{p.role}" for p in tokens.values()) or "none")
