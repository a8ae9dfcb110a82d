"""Does a llama.cpp endpoint's model have a chat template of its own?

A GGUF without one (the base Gemma 3 270M on the package registries is such a
model: FACTS.md) still answers, because llama.cpp's server then formats every
conversation as ChatML; a model not trained on ChatML reads those markers as
plain text and its replies are poor for no visible reason.  llama.cpp's
``GET /props`` shows the template it uses (``chat_template``) and the model's
own end-of-turn token (``eos_token``): the template is the model's own unless it
is empty or is llama.cpp's ChatML fallback for a model whose end-of-turn token
is not ChatML's.

Only endpoints in the ``grammar`` structured mode (the llama.cpp mode,
monikers/endpoints.py) are asked, once per URL per process (a server that did
not answer is asked again after ``RETRY_S``): agents.py at start logs the
warning once, app.py's ``GET /api/endpoints`` carries it
(``chat_template_warning``) and the dashboard's create form shows it beside the
endpoint.  An endpoint that is not llama.cpp (no ``/props``) is never warned about.
"""
from __future__ import annotations

import logging
import threading
import time

import requests

log = logging.getLogger("monikers.chat_template")

# llama.cpp's own fallback when a model has none (common/chat.cpp, CHATML_TEMPLATE_SRC;
# read from the installed libllama-common.so): compared without whitespace.
CHATML_FALLBACK = ("{%- for message in messages -%}\n"
                   "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
                   "{%- endfor -%}\n"
                   "{%- if add_generation_prompt -%}\n"
                   "  {{- '<|im_start|>assistant\\n' -}}\n"
                   "{%- endif -%}")
CHATML_END = "<|im_end|>"
TIMEOUT_S = 3.0
RETRY_S = 60.0
MODE = "grammar"  # the structured mode of llama.cpp endpoints: only these are asked


def _squeezed(text: str) -> str:
    return "".join(text.split())


def warning_of(props: dict) -> str | None:
    """The warning for a llama.cpp server's ``/props``, or None when its model has a template of its own."""
    template = props.get("chat_template")
    if not isinstance(template, str) or not template.strip():
        return "its model has no chat template: llama.cpp formats the conversation its own way"
    if _squeezed(template) == _squeezed(CHATML_FALLBACK) and props.get("eos_token") != CHATML_END:
        return ("its model has no chat template of its own: llama.cpp falls back to ChatML, which this model "
                f"was not trained on (its end-of-turn token is {props.get('eos_token')!r}); expect poor replies")
    return None


def server_root(base_url: str) -> str:
    """llama.cpp serves ``/props`` beside ``/v1``: the base URL without its ``/v1``."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def read_props(base_url: str, timeout_s: float = TIMEOUT_S) -> dict | None:
    """The server's ``/props``; None when it has none (not llama.cpp). Raises when it does not answer."""
    answer = requests.get(f"{server_root(base_url)}/props", timeout=timeout_s)
    if answer.status_code != 200:
        return None
    try:
        found = answer.json()
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


class TemplateWarnings:
    """What each llama.cpp endpoint's ``/props`` said, asked once per URL; a warning is logged once."""

    def __init__(self, timeout_s: float = TIMEOUT_S):
        self._timeout_s = timeout_s
        self._known: dict[str, str | None] = {}  # base URL -> warning (None: none)
        self._failed: dict[str, float] = {}  # base URL -> when it last did not answer
        self._lock = threading.Lock()

    def of(self, name: str, endpoint) -> str | None:
        """The warning for endpoint ``name`` (an ``Endpoint``), or None."""
        if endpoint.structured != MODE:
            return None
        url = endpoint.base_url
        with self._lock:
            if url in self._known:
                return self._known[url]
            if time.monotonic() - self._failed.get(url, -RETRY_S) < RETRY_S:
                return None
        try:
            props = read_props(url, self._timeout_s)
        except requests.RequestException as exc:
            with self._lock:
                self._failed[url] = time.monotonic()
            log.info("endpoint %s: /props not read (%s); its chat template is not checked yet", name, exc)
            return None
        found = warning_of(props) if props is not None else None
        with self._lock:
            first = url not in self._known
            self._known[url] = found
        if found and first:
            log.warning("endpoint %s (model %s): %s", name, endpoint.model, found)
        return found

    def check_all(self, catalog) -> None:
        """Ask every llama.cpp endpoint of ``catalog`` (agents.py at start: the warnings land in its log)."""
        for name, endpoint in catalog.endpoints().items():
            self.of(name, endpoint)


_warnings = TemplateWarnings()


def warnings() -> TemplateWarnings:
    """This process's (app.py's routes and agents.py's start share one per process)."""
    return _warnings
