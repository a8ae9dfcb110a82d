"""Model endpoints belong to the operator: each has a name, and a session, a
profile, a sub-agent, a replay or an eval judge picks one by that name.

Why: a model call sends the endpoint's key as a bearer token to the
endpoint's URL.  When API callers could give ``base_url`` and the *name* of an
environment variable, anyone allowed to create a session could make the
worker send any of its secrets (the API token, the events token, the LLM key)
to a host of their choosing.  So a caller now says only ``config.llm.endpoint``
(a name the operator gave) and ``config.llm.model`` (one of the models that
endpoint serves); the URL and where its key comes from are never in a config.

The operator names endpoints in one file, JSON or TOML by its suffix (as the
rate limits file), given to agents.py and app.py alike with
``--llm-endpoints FILE`` (``AGENTSVC_LLM_ENDPOINTS``)::

    [endpoints.openai]
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"            # the variable of agents.py's environment that holds its key
    models = ["gpt-4o-mini", "gpt-4o"]        # or "*": any model
    default_model = "gpt-4o-mini"             # default: the first of models ("*" needs one)
    structured = "json_schema"                # the default of its sessions' llm.structured (auto);
                                              # "grammar" for a llama.cpp server (monikers/gbnf.py)

    [endpoints.openai.rate_limits."gpt-4o"]   # shared rate limits, as in the rate limits file
    requests_per_minute = 500

The endpoint ``default`` is what a config that names none gets.  Unless the
file names it, it is built from the environment as before endpoints existed,
so ``AGENTSVC_LLM_BASE_URL=... ./scripts/run.sh`` still works:
``AGENTSVC_LLM_BASE_URL`` (a local Ollama if unset), the key in
``AGENTSVC_LLM_API_KEY`` (none if unset), any model, ``AGENTSVC_LLM_MODEL``
(``llama3.2``) by default, ``AGENTSVC_LLM_STRUCTURED`` (``auto``).

The file is read at start (a bad one stops the process, saying why) and again
whenever it changes: every lookup compares the file's stat with the last one
read (a stat is a microsecond; a model call is hundreds of milliseconds), so an
operator adds an endpoint without restarting anything, and both processes see
the same file.  A change that does not parse keeps the endpoints read last and
is logged.  Rate limits are read at start only (agents.py builds its limiter
then).

:func:`catalog` is this process's catalog: agents.py and app.py
:func:`install` theirs at start, before anything checks a config.
"""
import functools
import json
import logging
import os
import threading
import tomllib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints, ValidationError, model_validator

from monikers.llm_gate import ModelLimit

log = logging.getLogger("monikers.endpoints")

FILE_ENV = "AGENTSVC_LLM_ENDPOINTS"
DEFAULT = "default"
ANY = "*"
STRUCTURED = ("auto", "json_schema", "grammar", "json_object", "off")
DEFAULT_BASE_URL = "http://127.0.0.1:11434/v1"  # a local Ollama: an unconfigured service never pays a cloud API
DEFAULT_MODEL = "llama3.2"
DEFAULT_KEY_ENV = "AGENTSVC_LLM_API_KEY"

EndpointName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class EndpointError(ValueError):
    """A name that is no endpoint, a model an endpoint does not serve, or a bad file."""


class Endpoint(BaseModel):
    """One entry of the endpoints file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    base_url: str = Field(pattern=r"^https?://\S+$", max_length=2000,
                          description="the OpenAI-compatible API's base URL (requests go to {base_url}/chat/completions)")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
                                    description="the environment variable of agents.py that holds its key (none: no key)")
    models: list[ModelName] | Literal["*"] = Field(description="the models it may serve, or \"*\" for any")
    default_model: ModelName | None = Field(None, description="for sessions that name no model (default: the first "
                                                              "of models)")
    structured: Literal["auto", "json_schema", "grammar", "json_object", "off"] = Field(
        "auto", description="how replies are held to a shape, unless a session's llm.structured says otherwise "
                            "(grammar: llama.cpp's own grammar field, a compact one; see monikers/gbnf.py)")
    rate_limits: dict[ModelName, ModelLimit] = Field(default_factory=dict,
                                                     description="shared rate limits of its models")
    # The default endpoint from the environment only: no AGENTSVC_LLM_API_KEY means no key.
    _key_optional: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _consistent(self) -> "Endpoint":
        if self.models == ANY:
            if self.default_model is None:
                raise ValueError('an endpoint with models = "*" needs a default_model')
        else:
            if not self.models:
                raise ValueError('models must list at least one model (or be "*")')
            if self.default_model is not None and self.default_model not in self.models:
                raise ValueError(f"default_model {self.default_model!r} is not one of its models {self.models}")
            stray = sorted(set(self.rate_limits) - set(self.models))
            if stray:
                raise ValueError(f"rate_limits name models it does not serve: {stray}")
        return self

    @property
    def model(self) -> str:
        """The model of a session that names none."""
        return self.default_model or self.models[0]

    def allows(self, model: str) -> bool:
        return self.models == ANY or model in self.models

    def key(self, environ=os.environ) -> str:
        """Its API key, from the operator's environment ("" for none).  A key the
        operator named but did not set is an error, never a keyless request."""
        if self.api_key_env is None:
            return ""
        value = environ.get(self.api_key_env) or ""
        if not value and not self._key_optional:
            raise EndpointError(f"the variable {self.api_key_env} that holds this endpoint's key is not set")
        return value

    def public(self, name: str) -> dict:
        """What API callers may see: its name and models, not its URL or key variable."""
        return {"name": name, "models": self.models, "default_model": self.model, "structured": self.structured}


class EndpointsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoints: dict[EndpointName, Endpoint] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_limit_per_model(self) -> "EndpointsFile":
        """Rate limits are kept per model (runtime/base/rate_limits.py): one model limited
        by two endpoints would be one budget with two limits."""
        seen: dict[str, str] = {}
        for name, endpoint in self.endpoints.items():
            for model in endpoint.rate_limits:
                if model in seen:
                    raise ValueError(f"model {model!r} has rate limits in endpoints {seen[model]!r} and {name!r}; "
                                     f"limits are per model, give them once")
                seen[model] = name
        return self


def load_file(path: str) -> dict[str, Endpoint]:
    """The endpoints of ``path``; :class:`EndpointError` saying what is wrong."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f) if path.endswith(".toml") else json.load(f)
        return dict(EndpointsFile.model_validate(data).endpoints)
    except OSError as exc:
        raise EndpointError(f"endpoints file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EndpointError(f"endpoints file {path} does not parse: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors()[:5])
        raise EndpointError(f"endpoints file {path}: {problems}") from None


def default_endpoint(environ=os.environ) -> Endpoint:
    """``default`` from the environment (when the file does not name it)."""
    return _default_endpoint(environ.get("AGENTSVC_LLM_BASE_URL") or DEFAULT_BASE_URL,
                             environ.get("AGENTSVC_LLM_MODEL") or DEFAULT_MODEL,
                             environ.get("AGENTSVC_LLM_STRUCTURED") or "auto")


@functools.lru_cache(maxsize=16)
def _default_endpoint(base_url: str, model: str, structured: str) -> Endpoint:
    """Built once per set of values: every model call looks it up (and checks a model against it)."""
    if structured not in STRUCTURED:
        raise EndpointError(f"environment variable AGENTSVC_LLM_STRUCTURED={structured!r} is not valid: "
                            f"one of {', '.join(STRUCTURED)}")
    endpoint = Endpoint(base_url=base_url, api_key_env=DEFAULT_KEY_ENV, models=ANY, default_model=model,
                        structured=structured)
    endpoint._key_optional = True
    return endpoint


def _stamp(path: str) -> tuple:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


class EndpointCatalog:
    """The operator's endpoints: the file's (re-read when it changes) and the
    default one.  Safe to use from several threads (app.py's requests)."""

    def __init__(self, path: str | None = None, environ=os.environ):
        self.path, self.environ = path, environ
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._file: dict[str, Endpoint] = {}
        if path:
            self._stamp = _stamp(path) if os.path.exists(path) else None
            self._file = load_file(path)  # a bad file at start stops the start

    def _from_file(self) -> dict[str, Endpoint]:
        if not self.path:
            return self._file
        try:
            stamp = _stamp(self.path)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self._file = load_file(self.path)
                        log.info("endpoints file %s read again: %s", self.path, ", ".join(self._file) or "none")
                    except EndpointError as exc:
                        log.error("%s; keeping the endpoints read before (%s)", exc, ", ".join(self._file) or "none")
                    # Marked read only now: a request that sees the new stamp while another
                    # reads the file waits on the lock for what it reads, never returns the old
                    # endpoints (a test's create was refused an endpoint it had just added).
                    self._stamp = stamp
        return self._file

    def endpoints(self, environ=None) -> dict[str, Endpoint]:
        """Every endpoint by name, ``default`` first."""
        found = self._from_file()
        if DEFAULT in found:
            return {DEFAULT: found[DEFAULT], **found}
        return {DEFAULT: default_endpoint(self.environ if environ is None else environ), **found}

    def get(self, name: str | None, environ=None) -> Endpoint:
        """The endpoint called ``name`` (None: ``default``); :class:`EndpointError` naming those there are."""
        name = name or DEFAULT
        found = self._from_file()
        if name in found:
            return found[name]
        if name == DEFAULT:
            return default_endpoint(self.environ if environ is None else environ)
        raise EndpointError(f"no endpoint {name!r}: the operator's endpoints are "
                            f"{', '.join(self.endpoints(environ))} (GET /api/endpoints)")

    def check(self, name: str | None, model: str | None) -> Endpoint:
        """The endpoint, when it exists and serves ``model`` (None: its default)."""
        endpoint = self.get(name)
        if model is not None and not endpoint.allows(model):
            raise EndpointError(f"endpoint {name or DEFAULT!r} does not serve model {model!r}; it serves "
                                f"{', '.join(endpoint.models)} (GET /api/endpoints)")
        return endpoint

    def rate_limits(self) -> dict[str, ModelLimit]:
        """The rate limits the file gives, per model (agents.py, at start)."""
        return {model: limit for endpoint in self._from_file().values() for model, limit in endpoint.rate_limits.items()}

    def public(self) -> list[dict]:
        """Names and models, for GET /api/endpoints."""
        return [endpoint.public(name) for name, endpoint in self.endpoints().items()]


_catalog: EndpointCatalog | None = None
_catalog_lock = threading.Lock()


def install(catalog: EndpointCatalog) -> EndpointCatalog:
    """Make ``catalog`` this process's (agents.py and app.py, at start)."""
    global _catalog
    _catalog = catalog
    return catalog


def catalog() -> EndpointCatalog:
    """This process's catalog; without one installed, the file named by
    ``AGENTSVC_LLM_ENDPOINTS`` (if any) and the default endpoint."""
    global _catalog
    if _catalog is None:
        with _catalog_lock:
            if _catalog is None:
                _catalog = EndpointCatalog(os.environ.get(FILE_ENV) or None)
    return _catalog
