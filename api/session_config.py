"""Checking a session's config at create time, so a misspelt key or a wrong
type is a 400 naming it instead of a session that fails later.

A config holds two kinds of keys:

- the runner's keys, declared by ``domain.session_config.SessionConfig``
  (``interval_s``, ``max_steps``, budgets, retries; other parts of the service
  add theirs there, e.g. ``tools``);
- the moniker's own keys, declared by its ``Moniker.config_model`` (a pydantic
  model with ``extra="forbid"``: ``countdown``'s ``n``, ``baml``'s ``llm``).

A key that is in neither is refused.  A plugin moniker that declares no
``config_model`` gets its keys passed through unchecked (as before config
models existed), so installed plugins keep working; ``GET /api/monikers``
shows its ``config_schema`` as null.  Its ``llm``, if any, is checked all the
same (the worker writes summaries with it): every config's ``llm`` names one
of the operator's endpoints and never a URL or a key
(monikers/llm_settings.py), also through a fork or a replay.
"""
from pydantic import BaseModel, ValidationError

from api.errors import ApiError
from monikers.frame import Moniker
from domain.redact import is_secret_key
from monikers.llm_settings import LLMConfig
from domain.session_config import SessionConfig
from profiles.resolve import ResolveError, check_changes

RUNNER_KEYS = frozenset(SessionConfig.model_fields)


def _problems(exc: ValidationError, prefix: str = "config") -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join([prefix, *(str(p) for p in err["loc"])])
        parts.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def check_llm(config: dict) -> None:
    """A 400 unless the config's ``llm`` (if any) names an endpoint of the
    operator's and a model it serves, and no URL, key or key variable."""
    if "llm" not in config:
        return
    try:
        LLMConfig.model_validate(config["llm"])
    except ValidationError as exc:
        raise ApiError(400, "invalid_config", _problems(exc, "config.llm")) from None


def unknown_key_message(key: str, moniker: Moniker) -> str:
    own = sorted(moniker.config_model.model_fields) if moniker.config_model else []
    mine = f"{moniker.name} accepts {', '.join(own)}" if own else f"{moniker.name} accepts no keys of its own"
    return (f"config.{key}: unknown key ({mine}; every session accepts "
            f"{', '.join(sorted(RUNNER_KEYS))})")


def check(config: SessionConfig, moniker: Moniker) -> dict:
    """The config as it will be stored: runner keys already validated by
    ``SessionConfig``, the rest validated against the moniker's model (values
    normalised, e.g. ``"5"`` -> ``5``).  Raises a 400 naming the first bad key,
    or any key named like a secret, at any depth: a config is stored and shown,
    so it never holds one (model endpoints and their keys are the operator's)."""
    runner = config.model_dump(exclude=set(config.model_extra or {}))
    extra = dict(config.model_extra or {})
    model: type[BaseModel] | None = moniker.config_model
    if model is None:
        check_llm(extra)
        checked = {**runner, **extra}
    else:
        for key in extra:
            if key not in model.model_fields:
                raise ApiError(400, "invalid_config", unknown_key_message(key, moniker))
        try:
            own = model.model_validate(extra)
        except ValidationError as exc:
            raise ApiError(400, "invalid_config", _problems(exc)) from None
        checked = {**runner, **own.model_dump(mode="json", include=set(extra))}
    refuse_secrets(checked)  # after the model's own checks, whose messages name the setting to use instead
    return checked


def refuse_secrets(config: dict) -> None:
    secret = secret_path(config)
    if secret:
        raise ApiError(400, "secret_in_config", f"config.{secret}: a config never holds a secret (it is stored "
                                                "and shown); the operator keeps keys with the model endpoints "
                                                "(docs/llm.md) and tools")


def secret_path(value, path: str = "") -> str | None:
    """The dotted path of the first key named like a secret in ``value`` (domain/redact.py), or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if is_secret_key(key):
                return where
            found = secret_path(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = secret_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


def runner_schema() -> dict:
    """JSON Schema of the keys every session accepts (for GET /api/monikers and the form)."""
    return SessionConfig.model_json_schema()


def changed_config(original: dict | None, changes: dict | None, moniker: Moniker | None = None) -> dict:
    """The original config with ``changes`` applied (one level deep), validated
    as a create's would be: a session from a profile keeps to the profile's
    rules (profiles/resolve.py ``check_changes``; else 409 ``exceeds_profile``), and with ``moniker`` its own
    keys are checked against its config model."""
    config = dict(original or {})
    if "profile" in (changes or {}):  # the record of the profile a session started from is not for editing
        raise ApiError(400, "invalid_request", "config.profile: set from a profile, never changed by a fork or replay")
    try:
        check_changes(config, changes)
    except ResolveError as exc:  # the body is valid; the source session's profile forbids it: a conflict
        raise ApiError(409, "exceeds_profile", str(exc)) from None
    for key, value in (changes or {}).items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    check_llm(config)
    try:
        validated = SessionConfig.model_validate(config)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        raise ApiError(400, "invalid_request", f"config.{where}: {err['msg']}") from None
    return check(validated, moniker) if moniker is not None else validated.model_dump()
