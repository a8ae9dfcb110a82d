"""Finding monikers by name: the built-ins plus plugins installed as packages.

A plugin package exposes a :class:`~monikers.frame.Moniker` object through the
entry-point group ``agentsvc.monikers``, e.g. in its pyproject.toml::

    [project.entry-points."agentsvc.monikers"]
    summarize = "my_pkg.steps:SUMMARIZE"
"""
import logging
from importlib.metadata import entry_points

from monikers.frame import Moniker

log = logging.getLogger("monikers")

ENTRY_POINT_GROUP = "agentsvc.monikers"


class UnknownMoniker(KeyError):
    pass


class MonikerRegistry:
    def __init__(self):
        self._monikers: dict[str, Moniker] = {}

    def register(self, moniker: Moniker) -> Moniker:
        if not isinstance(moniker, Moniker):
            raise TypeError(f"expected a Moniker, got {type(moniker).__name__}")
        self._monikers[moniker.name] = moniker
        return moniker

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register every moniker installed under ``group``; a broken plugin is
        logged and skipped so it cannot take the service down."""
        loaded = []
        for ep in entry_points(group=group):
            try:
                moniker = ep.load()
                if callable(moniker) and not isinstance(moniker, Moniker):
                    moniker = moniker()
                self.register(moniker)
                loaded.append(moniker.name)
            except Exception as exc:
                log.error("moniker plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)
        return loaded

    def get(self, name: str) -> Moniker:
        try:
            return self._monikers[name]
        except KeyError:
            raise UnknownMoniker(name) from None

    def __contains__(self, name: str) -> bool:
        return name in self._monikers

    def names(self) -> list[str]:
        return sorted(self._monikers)

    def describe(self) -> list[dict]:
        return [self._monikers[n].describe() for n in self.names()]


def default_registry() -> MonikerRegistry:
    """The built-in monikers and every installed plugin."""
    from monikers import baml_moniker, builtin, orchestrator, scripted

    registry = MonikerRegistry()
    for moniker in (*builtin.BUILTINS, scripted.SCRIPTED):
        registry.register(moniker)
    baml_moniker.register(registry)  # logs and skips the moniker if BAML cannot load
    orchestrator.register(registry)  # sub-agents in a conversation (BAML too)
    registry.load_entry_points()
    return registry
