"""The app's HTTP routes, one module per resource, each a Blueprint whose
routes declare their inputs and answers (api/openapi.py ``operation``).

Adding a route: write it in its resource's module, with its declaration.  A
new resource is a new module here and one entry in ``BLUEPRINTS``.  Nothing
else lists routes: the OpenAPI document is read off the registered routes.
"""
from flask import Flask

from api.requests import IdConverter
from api.routes import (actions, agents, bulk, conversations, dashboard, decisions, diff, document, endpoints,
                        evals, export, fork, health, login, model_io, monikers, profiles, questions, replay, search,
                        sessions, steps, stream, subagents, tools, trace, turns)

BLUEPRINTS = [agents.bp, sessions.bp, steps.bp, actions.bp, monikers.bp, health.bp, conversations.bp, tools.bp,
              search.bp, fork.bp, questions.bp, profiles.bp, turns.bp, subagents.bp, stream.bp, document.bp,
              dashboard.bp, diff.bp, bulk.bp, decisions.bp, evals.bp, export.bp, trace.bp, replay.bp, endpoints.bp,
              login.bp, model_io.bp, health.ready_bp]


def register(app: Flask) -> None:
    app.url_map.converters["id"] = IdConverter  # before the rules that use it
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
