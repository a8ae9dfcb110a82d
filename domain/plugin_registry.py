"""Finding things by name that the service has built in and that others may
add: the one registry shape behind monikers (monikers/moniker_registry.py)
and tools (tools/tool_registry.py), so both load and refuse plugins the same way.

Plugins come from two places:

- **Installed packages**, through an entry-point group (``agentsvc.monikers``,
  ``agentsvc.tools``).  A broken entry point is logged and skipped: a package
  someone installed must not take the service down.
- **Modules the operator names** in ``AGENTSVC_PLUGINS``: a comma-separated
  list of importable modules, each exposing ``MONIKERS``, ``TOOLS`` and/or ``SCORERS`` (an
  iterable of :class:`~monikers.frame.Moniker` / :class:`~tools.tool_registry.Tool` /
  :class:`~evals.scorers.Scorer`).
  It is read from the environment of agents.py and app.py at startup (both
  must see the same list: app.py validates a create's moniker and config),
  never from a request.  A module that cannot be imported, exposes neither
  name or holds something else is a startup error (:class:`PluginError`): the
  operator asked for it by name, so running without it would be a surprise.
  The test suite uses it to add monikers and tools that only tests need
  (``tests/plugins.py``).

A later registration under a name replaces the earlier one.
"""
import importlib
import logging
import os
from importlib.metadata import entry_points
from types import ModuleType
from typing import ClassVar, Generic, Iterable, TypeVar

log = logging.getLogger("plugins")

PLUGINS_ENV = "AGENTSVC_PLUGINS"
PLUGIN_ATTRIBUTES = ("MONIKERS", "TOOLS", "SCORERS")  # what a module named in AGENTSVC_PLUGINS may expose

T = TypeVar("T")


class PluginError(RuntimeError):
    """A plugin module the operator named cannot be used; the message says which and why."""


def plugin_modules(environ=os.environ) -> list[str]:
    """The module names in ``AGENTSVC_PLUGINS``, in order."""
    return [name.strip() for name in environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def import_plugin_module(name: str) -> ModuleType:
    """The module, or a :class:`PluginError` saying why it cannot be used."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise PluginError(f"{PLUGINS_ENV} names {name!r}, which cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not any(hasattr(module, attribute) for attribute in PLUGIN_ATTRIBUTES):
        raise PluginError(f"{PLUGINS_ENV} names {name!r}, which exposes neither "
                          f"{' nor '.join(PLUGIN_ATTRIBUTES)}")
    return module


class UnknownName(KeyError):
    """No item of this name is registered."""


class PluginRegistry(Generic[T]):
    """Items of one type by name.  A subclass says what it holds:

    - ``item_type``: the class every item must be;
    - ``kind``: its name in messages (``moniker``, ``tool``);
    - ``entry_point_group``: where installed packages offer them;
    - ``module_attribute``: what a module in ``AGENTSVC_PLUGINS`` exposes them as;
    - ``unknown``: the KeyError that :meth:`get` raises for a name it lacks.
    """

    item_type: ClassVar[type]
    kind: ClassVar[str]
    entry_point_group: ClassVar[str]
    module_attribute: ClassVar[str]
    unknown: ClassVar[type[KeyError]] = UnknownName

    def __init__(self):
        self._items: dict[str, T] = {}

    def register(self, item: T) -> T:
        if not isinstance(item, self.item_type):
            raise TypeError(f"expected a {self.item_type.__name__}, got {type(item).__name__}")
        self._items[item.name] = item
        return item

    def load_entry_points(self, group: str | None = None) -> list[str]:
        """Register every item installed under ``group`` (an entry point may
        name the item, or a callable that makes it); a broken plugin is logged
        and skipped so it cannot take the service down."""
        loaded = []
        for ep in entry_points(group=group or self.entry_point_group):
            try:
                item = ep.load()
                if callable(item) and not isinstance(item, self.item_type):
                    item = item()
                self.register(item)
                loaded.append(item.name)
            except Exception as exc:
                log.error("%s plugin %s (%s) failed to load: %s", self.kind, ep.name, ep.value, exc)
        return loaded

    def load_modules(self, names: Iterable[str]) -> list[str]:
        """Register what each named module exposes as ``module_attribute``;
        raises :class:`PluginError` for a module that cannot be used."""
        loaded = []
        for name in names:
            module = import_plugin_module(name)
            for item in getattr(module, self.module_attribute, ()):
                if not isinstance(item, self.item_type):
                    raise PluginError(f"{PLUGINS_ENV}: {name}.{self.module_attribute} holds a "
                                      f"{type(item).__name__}, not a {self.item_type.__name__}")
                self.register(item)
                loaded.append(item.name)
        if loaded:
            log.info("%ss from %s: %s", self.kind, PLUGINS_ENV, ", ".join(loaded))
        return loaded

    def load_plugins(self, environ=os.environ) -> list[str]:
        """Installed entry points, then the operator's ``AGENTSVC_PLUGINS`` modules."""
        return [*self.load_entry_points(), *self.load_modules(plugin_modules(environ))]

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise self.unknown(name) from None

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def names(self) -> list[str]:
        return sorted(self._items)

    def describe(self) -> list[dict]:
        return [self._items[n].describe() for n in self.names()]
