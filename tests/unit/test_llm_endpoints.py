"""The operator's endpoints file (monikers/endpoints.py): what it accepts, the
default endpoint from the environment, reading it again when it changes, and
what API callers see of it."""
import argparse
import json
import os

import pytest

import settings
from monikers.endpoints import DEFAULT, EndpointCatalog, EndpointError, load_file
from monikers.llm_gate import ModelLimit
from runtime.base.rate_limits import load_config


def write(path, endpoints: dict) -> str:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as f:
        json.dump({"endpoints": endpoints}, f)
    os.replace(temporary, path)  # as an operator's editor or a config tool would, in one step
    return str(path)


OPENAI = {"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY",
          "models": ["gpt-4o-mini", "gpt-4o"], "rate_limits": {"gpt-4o": {"requests_per_minute": 500}}}


def test_a_toml_file_names_endpoints_and_the_default_comes_from_the_environment(tmp_path):
    path = tmp_path / "endpoints.toml"
    path.write_text('[endpoints.openai]\nbase_url = "https://api.openai.com/v1"\napi_key_env = "OPENAI_API_KEY"\n'
                    'models = ["gpt-4o-mini", "gpt-4o"]\nstructured = "json_schema"\n'
                    '[endpoints.openai.rate_limits."gpt-4o"]\nrequests_per_minute = 500\n')
    environ = {"AGENTSVC_LLM_BASE_URL": "http://10.0.0.5:8000/v1", "AGENTSVC_LLM_MODEL": "qwen",
               "AGENTSVC_LLM_API_KEY": "k0", "OPENAI_API_KEY": "k1"}
    catalog = EndpointCatalog(str(path), environ=environ)
    assert list(catalog.endpoints()) == [DEFAULT, "openai"]
    default, openai = catalog.get(None), catalog.get("openai")
    assert (default.base_url, default.model, default.key(environ), default.allows("anything")) == \
        ("http://10.0.0.5:8000/v1", "qwen", "k0", True)
    assert default.key({}) == ""  # the default endpoint without AGENTSVC_LLM_API_KEY sends no key
    assert (openai.model, openai.structured, openai.key(environ)) == ("gpt-4o-mini", "json_schema", "k1")
    with pytest.raises(EndpointError, match="OPENAI_API_KEY that holds this endpoint's key is not set"):
        openai.key({})  # a key the operator named is never silently left out
    assert catalog.check("openai", "gpt-4o") is openai
    with pytest.raises(EndpointError, match="does not serve model 'o1'; it serves gpt-4o-mini, gpt-4o"):
        catalog.check("openai", "o1")
    with pytest.raises(EndpointError, match=r"no endpoint 'azure': the operator's endpoints are default, openai"):
        catalog.get("azure")
    assert catalog.rate_limits() == {"gpt-4o": ModelLimit(requests_per_minute=500)}
    # API callers see names and models: no URL, no key variable
    assert catalog.public() == [
        {"name": "default", "models": "*", "default_model": "qwen", "structured": "auto"},
        {"name": "openai", "models": ["gpt-4o-mini", "gpt-4o"], "default_model": "gpt-4o-mini",
         "structured": "json_schema"}]


def test_a_default_in_the_file_replaces_the_environments(tmp_path):
    path = write(tmp_path / "e.json", {"default": {"base_url": "http://127.0.0.1:8081/v1", "models": ["smol"]}})
    catalog = EndpointCatalog(path, environ={"AGENTSVC_LLM_BASE_URL": "http://elsewhere/v1"})
    assert catalog.get(None).base_url == "http://127.0.0.1:8081/v1" and not catalog.get(None).allows("llama3.2")


@pytest.mark.parametrize("entry,problem", [
    ({"base_url": "ftp://x", "models": ["m"]}, "base_url"),
    ({"base_url": "http://x/v1", "models": "*"}, 'models = "\\*" needs a default_model'),
    ({"base_url": "http://x/v1", "models": []}, "at least one model"),
    ({"base_url": "http://x/v1", "models": ["a"], "default_model": "b"}, "default_model 'b' is not one of"),
    ({"base_url": "http://x/v1", "models": ["a"], "rate_limits": {"b": {"requests_per_minute": 1}}},
     "rate_limits name models it does not serve"),
    ({"base_url": "http://x/v1", "models": ["a"], "api_key": "sk-1"}, "Extra inputs are not permitted"),
    ({"base_url": "http://x/v1", "models": ["a"], "api_key_env": "NOT A NAME"}, "api_key_env"),
])
def test_a_bad_entry_is_refused_saying_what(tmp_path, entry, problem):
    with pytest.raises(EndpointError, match=problem):
        load_file(write(tmp_path / "e.json", {"x": entry}))


def test_one_model_limited_by_two_endpoints_is_refused(tmp_path):
    other = {**OPENAI, "base_url": "https://azure.example/v1"}
    with pytest.raises(EndpointError, match="model 'gpt-4o' has rate limits in endpoints 'openai' and 'azure'"):
        load_file(write(tmp_path / "e.json", {"openai": OPENAI, "azure": other}))


def test_the_file_is_read_again_when_it_changes_and_a_bad_change_keeps_the_last_good_one(tmp_path):
    path = write(tmp_path / "e.json", {"openai": OPENAI})
    catalog = EndpointCatalog(path)
    assert list(catalog.endpoints()) == ["default", "openai"]
    write(path, {"openai": OPENAI, "local": {"base_url": "http://127.0.0.1:8081/v1", "models": ["smol"]}})
    assert list(catalog.endpoints()) == ["default", "openai", "local"]  # seen at the next lookup
    with open(path, "w") as f:
        f.write("{ not json")
    assert list(catalog.endpoints()) == ["default", "openai", "local"]
    os.remove(path)
    assert list(catalog.endpoints()) == ["default", "openai", "local"]
    write(path, {"local": {"base_url": "http://127.0.0.1:8081/v1", "models": ["smol"]}})
    assert list(catalog.endpoints()) == ["default", "local"]


def test_a_lookup_while_another_thread_reads_the_changed_file_gets_the_new_endpoints(tmp_path, monkeypatch):
    """app.py answers requests on several threads: one that sees the file changed while
    another is reading it must wait for that read, not answer from the old endpoints
    (a create was refused the endpoint its test had just added: "no endpoint 'fake-…':
    the operator's endpoints are default, fake-…")."""
    import threading
    import monikers.endpoints as endpoints_module

    path = write(tmp_path / "e.json", {"openai": OPENAI})
    catalog = EndpointCatalog(path)
    write(path, {"openai": OPENAI, "local": {"base_url": "http://127.0.0.1:8081/v1", "models": ["smol"]}})
    reading, release = threading.Event(), threading.Event()
    real_load = endpoints_module.load_file

    def slow_load(p):
        reading.set()
        assert release.wait(30)
        return real_load(p)

    monkeypatch.setattr(endpoints_module, "load_file", slow_load)
    first = threading.Thread(target=catalog.endpoints)
    first.start()
    assert reading.wait(30)  # the first lookup is reading the changed file
    seen = []
    second = threading.Thread(target=lambda: seen.append(catalog.get("local")))
    second.start()
    second.join(0.5)  # it waits for the read (a positive control: it finishes below)
    release.set()
    first.join(30)
    second.join(30)
    assert [e.base_url for e in seen] == ["http://127.0.0.1:8081/v1"]


def test_a_bad_or_missing_file_stops_the_start(tmp_path):
    args = argparse.Namespace(llm_endpoints=str(tmp_path / "missing.toml"))
    with pytest.raises(SystemExit, match="--llm-endpoints: endpoints file .*missing.toml"):
        settings.llm_endpoints(args)
    args.llm_endpoints = write(tmp_path / "bad.json", {"x": {"models": ["m"]}})
    with pytest.raises(SystemExit, match="x.base_url: Field required"):
        settings.llm_endpoints(args)


def test_endpoint_rate_limits_join_the_rate_limits_file_and_flags(tmp_path):
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"models": {"gpt-4o": {"requests_per_minute": 100}, "x": {"tokens_per_minute": 5}}}))
    from_endpoints = {"gpt-4o": ModelLimit(requests_per_minute=500), "gpt-4o-mini": ModelLimit(requests_per_minute=9)}
    config = load_config(str(limits), ["x=7"], endpoint_limits=from_endpoints)
    assert config.models == {"gpt-4o": ModelLimit(requests_per_minute=100),  # the rate limits file over the endpoints
                             "gpt-4o-mini": ModelLimit(requests_per_minute=9),
                             "x": ModelLimit(requests_per_minute=7)}  # a flag over both


def test_the_deploy_example_is_a_valid_endpoints_file():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = load_file(os.path.join(root, "deploy", "llm-endpoints.toml"))
    assert list(found) == ["default", "openai", "gpu-box"] and found["openai"].api_key_env == "OPENAI_API_KEY"
