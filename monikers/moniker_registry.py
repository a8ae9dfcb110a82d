"""Finding monikers by name: the built-ins, plugins installed as packages,
and modules the operator names in ``AGENTSVC_PLUGINS``
(domain/plugin_registry.py says how plugins load and fail).

A plugin package exposes a :class:`~monikers.frame.Moniker` object through the
entry-point group ``agentsvc.monikers``, e.g. in its pyproject.toml::

    [project.entry-points."agentsvc.monikers"]
    summarize = "my_pkg.steps:SUMMARIZE"

A module named in ``AGENTSVC_PLUGINS`` exposes them as ``MONIKERS``.
"""
from domain.plugin_registry import PluginRegistry, UnknownName
from monikers import baml_moniker, builtin, orchestrator, scripted
from monikers.frame import Moniker

ENTRY_POINT_GROUP = "agentsvc.monikers"


class UnknownMoniker(UnknownName):
    pass


class MonikerRegistry(PluginRegistry[Moniker]):
    item_type = Moniker
    kind = "moniker"
    entry_point_group = ENTRY_POINT_GROUP
    module_attribute = "MONIKERS"
    unknown = UnknownMoniker


def default_registry() -> MonikerRegistry:
    """The built-in monikers and every plugin (installed, or named in ``AGENTSVC_PLUGINS``)."""
    registry = MonikerRegistry()
    for moniker in (*builtin.BUILTINS, scripted.SCRIPTED):
        registry.register(moniker)
    baml_moniker.register(registry)  # logs and skips the moniker if BAML cannot load
    orchestrator.register(registry)  # sub-agents in a conversation (BAML too)
    registry.load_plugins()
    return registry
