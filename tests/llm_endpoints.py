"""How tests name their model servers: as the operator does, in an endpoints file.

A config never gives a model server's URL (monikers/endpoints.py), so a test
that starts a fake OpenAI server (tests/fake_openai.py) adds it to the
endpoints file of the service it drives, under a name, and its sessions name
that endpoint.  The service re-reads the file when it changes, so a test adds
endpoints while the service runs:

    llm = svc.endpoints.llm(fake, model="fake-model")   # {"endpoint": "fake-41235", "model": "fake-model"}
    svc.create("baml", "task", config={"llm": llm})

In-process tests use the ``llm_endpoints`` fixture (tests/conftest.py), the
same file installed as this process's catalog.
"""
import json
import os
import threading


class EndpointsFile:
    """An operator's endpoints file (JSON) that tests add endpoints to."""

    def __init__(self, path: str):
        self.path = str(path)
        self._lock = threading.Lock()
        self._endpoints: dict[str, dict] = {}
        if os.path.exists(self.path):  # a service started again on the same data directory keeps them
            with open(self.path) as f:
                self._endpoints = json.load(f)["endpoints"]
        self._write()

    def add(self, name: str, base_url: str, *, models="*", default_model: str | None = None,
            api_key_env: str | None = None, **more) -> str:
        """Add (or replace) the endpoint ``name``; returns the name."""
        entry = {"base_url": base_url, "models": models, **more}
        if models == "*":
            entry["default_model"] = default_model or "fake-model"
        elif default_model is not None:
            entry["default_model"] = default_model
        if api_key_env is not None:
            entry["api_key_env"] = api_key_env
        with self._lock:
            self._endpoints[name] = entry
            self._write()
        return name

    def remove(self, name: str) -> None:
        with self._lock:
            self._endpoints.pop(name, None)
            self._write()

    def serve(self, server, name: str | None = None, **options) -> str:
        """Add a fake server (anything with a ``base_url``) as an endpoint; its name."""
        port = server.base_url.split(":")[-1].split("/")[0]
        return self.add(name or f"fake-{port}", server.base_url, **options)

    def llm(self, server, model: str = "fake-model", name: str | None = None, **llm) -> dict:
        """A config's ``llm`` for ``server`` (added as an endpoint first): endpoint, model and ``llm``'s keys."""
        return {"endpoint": self.serve(server, name), "model": model, **llm}

    def _write(self) -> None:
        # A new file renamed over the old: a reader sees the old file or the new one, never half of one.
        temporary = f"{self.path}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            json.dump({"endpoints": self._endpoints}, f, indent=1)
        os.replace(temporary, self.path)
