"""Finding tools by name: the built-ins, plugins installed as packages,
modules the operator names in ``AGENTSVC_PLUGINS`` (domain/plugin_registry.py
says how plugins load and fail), and tools that MCP servers offer (added by
tools/mcp.py).

A plugin package exposes a :class:`~tools.tool.Tool` through the entry-point
group ``agentsvc.tools``, e.g.::

    [project.entry-points."agentsvc.tools"]
    lookup = "my_pkg.tools:LOOKUP"

A module named in ``AGENTSVC_PLUGINS`` exposes them as ``TOOLS``.
"""
from domain.plugin_registry import PluginRegistry, UnknownName
from tools import builtin
from tools.tool import Deferred, Tool, ToolContext, ToolFn

__all__ = ["Deferred", "Tool", "ToolContext", "ToolFn", "ToolRegistry", "UnknownTool", "default_tool_registry"]

ENTRY_POINT_GROUP = "agentsvc.tools"


class UnknownTool(UnknownName):
    pass


class ToolRegistry(PluginRegistry[Tool]):
    item_type = Tool
    kind = "tool"
    entry_point_group = ENTRY_POINT_GROUP
    module_attribute = "TOOLS"
    unknown = UnknownTool


def default_tool_registry() -> ToolRegistry:
    """The built-in tools and every plugin (agents.py and app.py each build
    one; MCP tools are added to it by the MCP bridge)."""
    registry = ToolRegistry()
    for tool in builtin.BUILTINS:
        registry.register(tool)
    registry.load_plugins()
    return registry
