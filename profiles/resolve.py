"""A profile (+ a create's config overrides) -> the session's config.

The session keeps what is resolved here in its persisted config, never the
file: editing or deleting the file later changes no session that started
from it.  ``config.profile`` records the profile's name, file and content
hash, and the parts the runner applies at each step (prompt segments,
observers, flow rules, inbox priorities).

What a create's ``config`` may override (the profile's ``overridable`` list,
by default every runner key below except the profile's own parts):

- ``interval_s``, ``max_steps``, ``max_runtime_s``, ``step_timeout_s``,
  ``repeat_limit``, ``budget_tokens``, ``budget_cost``, ``stop_on_done``,
  ``retries``, ``tool_concurrency``, ``pause_expiry_s``: replace the profile's;
- ``tools``: only narrowed (a subset of the profile's allowed tools);
- ``approve``: only widened (the profile's list plus more of the allowed tools);
- ``llm`` (when listed) is merged key by key over the profile's;
- a moniker's own key, when the profile lists it.
Never: ``profile`` (prompt, observers, flow, inbox priorities), nor anything
the profile does not list.
"""
from typing import Any

from pydantic import ValidationError

from profiles.entry import Entry, Problem
from profiles.model import OVERRIDABLE_KEYS, Profile
from profiles import observers


class ResolveError(ValueError):
    """A create's overrides are not allowed by the profile; the message says which and why."""


def profile_record(entry: Entry) -> dict:
    """What ``config.profile`` holds: identity, and what the runner applies per step."""
    p = entry.profile
    return {
        "name": p.name, "hash": entry.hash, "file": entry.file,
        "prompt": [s.model_dump(exclude_none=True) for s in p.prompt],
        "observers": [o.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True) | {
            "name": o.name, "when": o.when} for o in p.observers],
        "flow": [r.model_dump(by_alias=True, exclude_none=True) for r in p.flow],
        "inbox_priorities": dict(p.inbox_priorities),
        # the bounds a fork or replay of the session is held to (check_changes), as a create was
        "tools_allowed": list(p.tools.allowed), "approve_required": list(p.tools.approve),
        "overridable": sorted(p.overridable),
    }


def base_config(entry: Entry) -> dict:
    """The profile's settings as session config keys (before overrides)."""
    p: Profile = entry.profile
    config: dict[str, Any] = dict(p.config)
    if p.interval_s is not None:
        config["interval_s"] = p.interval_s
    if p.stop_on_done is not None:
        config["stop_on_done"] = p.stop_on_done
    config.update(p.limits.model_dump(exclude_none=True))
    config["tools"] = list(p.tools.allowed)
    config["approve"] = list(p.tools.approve)
    if p.llm is not None:  # the keys the file gives (a default the runner applies is not written down)
        config["llm"] = {k: v for k, v in p.llm.model_dump(exclude_none=True).items() if k in p.llm.model_fields_set}
    config["profile"] = profile_record(entry)
    return config


def check_changes(config: dict, changes: dict | None) -> None:
    """A fork's or replay's changes to the config of a session that started
    from a profile, held to the rules a create from that profile is held to
    (raises :class:`ResolveError`): only overridable keys, tools only narrowed,
    approvals only widened.  The bounds are the ones recorded when the session
    started (``config.profile``), so an edit of the file since changes nothing;
    a session recorded before the bounds were kept is bounded by its own tools
    and approvals instead."""
    record = config.get("profile")
    if not isinstance(record, dict) or not changes:
        return
    name = record.get("name")
    allowed = record.get("tools_allowed", config.get("tools") or [])
    required = record.get("approve_required", config.get("approve") or [])
    overridable = record.get("overridable")
    for key in changes:
        if overridable is not None and key not in overridable:
            raise ResolveError(f"config.{key}: profile {name!r} does not let a create (nor a fork or replay) "
                               f"override it (overridable: {', '.join(overridable) or 'none'})")
    tools = changes.get("tools", config.get("tools") or [])
    extra = [t for t in tools if t not in allowed]
    if extra:
        raise ResolveError(f"config.tools: {extra} not allowed by profile {name!r} (only narrowed from {allowed})")
    approve = changes.get("approve", config.get("approve") or [])
    missing = [t for t in required if t in tools and t not in approve]
    if missing:
        raise ResolveError(f"config.approve: profile {name!r} requires approval of {missing} "
                           f"(a fork or replay may only add to it)")


def resolve(entry: Entry, overrides: dict | None) -> dict:
    """The session config for a create from ``entry`` with ``overrides``;
    raises :class:`ResolveError` naming the first key the profile does not allow."""
    p: Profile = entry.profile
    config = base_config(entry)
    allowed = set(p.overridable)
    for key, value in (overrides or {}).items():
        if key == "profile":
            raise ResolveError("config.profile: set from the profile, never by a create")
        if key not in allowed:
            raise ResolveError(f"config.{key}: profile {p.name!r} does not let a create override it "
                               f"(overridable: {', '.join(sorted(allowed)) or 'none'})")
        if key == "tools":
            extra = [t for t in value or [] if t not in p.tools.allowed]
            if extra:
                raise ResolveError(f"config.tools: {extra} not allowed by profile {p.name!r} "
                                   f"(a create may only narrow {p.tools.allowed})")
            config["approve"] = [t for t in config["approve"] if t in value]
        elif key == "approve":
            missing = [t for t in p.tools.approve if t not in (value or [])]
            if missing:
                raise ResolveError(f"config.approve: profile {p.name!r} requires approval of {missing} "
                                   f"(a create may only add to it)")
            stray = [t for t in value or [] if t not in p.tools.allowed]
            if stray:
                raise ResolveError(f"config.approve: {stray} are not tools profile {p.name!r} allows "
                                   f"({p.tools.allowed})")
        elif key == "llm" and isinstance(value, dict):
            value = {**config.get("llm", {}), **value}
        config[key] = value
    return config


def reference_problems(entry: Entry, monikers, tool_names: set[str] | None) -> list[Problem]:
    """What the running service cannot satisfy: an unknown moniker or tool, a
    python observer not installed, moniker config keys it does not accept."""
    p, out = entry.profile, []

    def problem(path: tuple, message: str):
        field = "".join(f"[{x}]" if isinstance(x, int) else ("." if i else "") + str(x) for i, x in enumerate(path))
        out.append(Problem(entry.file, message, line=entry.line_of(path), field=field))

    moniker = None
    if monikers is not None:
        if p.moniker not in monikers:
            problem(("moniker",), f"no moniker {p.moniker!r} is installed (installed: {', '.join(monikers.names())})")
        else:
            moniker = monikers.get(p.moniker)
    if tool_names is not None:
        for i, name in enumerate(p.tools.allowed):
            if name not in tool_names:
                problem(("tools", "allowed", i), f"no tool {name!r} is installed")
    plugins = observers.observer_plugins()
    for i, observer in enumerate(p.observers):
        if observer.python and observer.python not in plugins:
            problem(("observers", i, "python"), f"no observer {observer.python!r} is installed under the "
                                                 f"agentsvc.observers entry-point group")
    own_keys = set(moniker.config_model.model_fields) if moniker is not None and moniker.config_model else None
    for i, key in enumerate(p.overridable):
        if key not in OVERRIDABLE_KEYS and (own_keys is None or key not in own_keys):
            problem(("overridable", i), f"{key!r} is neither an overridable runner key nor a key of "
                                        f"moniker {p.moniker!r}")
    if moniker is not None and moniker.config_model is not None:
        own = {k: v for k, v in base_config(entry).items() if k in p.config or k == "llm"}
        unknown = [k for k in own if k not in moniker.config_model.model_fields]
        for key in unknown:
            problem(("llm",) if key == "llm" else ("config", key),
                    f"moniker {p.moniker!r} takes no {key!r} setting")
        if not unknown:
            try:
                moniker.config_model.model_validate(own)
            except ValidationError as exc:
                for err in exc.errors()[:5]:
                    loc = tuple(err["loc"])
                    path = loc if loc[:1] == ("llm",) else ("config", *loc)
                    problem(path, err["msg"])
    return out
