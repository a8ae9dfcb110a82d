"""A profile file as loaded (:class:`Entry`) and a reason it cannot be used
(:class:`Problem`): what the loader (profiles/loader.py) produces and the
resolver (profiles/resolve.py) reads, so neither needs the other to describe them.
"""
from dataclasses import dataclass, field

from profiles.model import Profile


@dataclass
class Problem:
    """One reason a profile cannot be used."""

    file: str
    message: str
    line: int | None = None
    field: str | None = None

    def describe(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{where}: " + (f"{self.field}: " if self.field else "") + self.message

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


@dataclass
class Entry:
    """A profile file as loaded: the profile, or why it could not be loaded."""

    name: str
    file: str
    hash: str | None
    profile: Profile | None
    problems: list[Problem] = field(default_factory=list)
    loaded_at: str = ""
    _lines: dict = field(default_factory=dict, repr=False)  # field path -> line

    def line_of(self, path: tuple) -> int | None:
        """The line of the deepest known node on ``path`` (1-based)."""
        for cut in range(len(path), -1, -1):
            line = self._lines.get(tuple(path[:cut]))
            if line is not None:
                return line
        return None
