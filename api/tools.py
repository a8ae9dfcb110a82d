"""Tool routes.  ``GET /api/tools``: the tools agents can call, with the JSON
schema of their args, merged from every agents.py worker's catalog (MCP tools
included) over this app's own built-ins and plugins (tools/catalog.py)."""
from typing import Any, Literal

from flask import Blueprint, current_app, jsonify
from pydantic import BaseModel, ConfigDict

from tools import catalog

bp = Blueprint("tools", __name__, url_prefix="/api")

EXTENSION = "agentsvc_tools"  # app.extensions key of this app's own ToolRegistry


class McpToolInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    server: str
    tool: str
    status: str
    error: str | None = None


class ToolInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str
    args_schema: dict[str, Any]
    timeout_s: float
    idempotent: bool
    needs_approval: bool
    external: bool
    source: Literal["installed", "mcp"]
    mcp: McpToolInfo | None = None
    workers: list[str]


class ToolList(BaseModel):
    model_config = ConfigDict(extra="allow")

    tools: list[ToolInfo]


MODELS = [McpToolInfo, ToolInfo, ToolList]


@bp.get("/tools")
def list_tools():
    store = current_app.extensions["agentsvc"].store
    return jsonify({"tools": catalog.list_tools(store, current_app.extensions.get(EXTENSION))})
