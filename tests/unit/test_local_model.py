"""`agentsvc serve --local-model` names its model as the operator's endpoint
``local`` without overwriting the operator's endpoints (local_model.py): the
combined file holds the operator's entries unchanged, ``default`` is the local
model only when the operator chose no default, a file that already names
``local`` is refused, and an edit of the operator's file reaches the combined
one.  tests/service/test_local_model.py runs the whole thing with the model."""
import json

import pytest

import local_model
from monikers.endpoints import load_file

URL = "http://127.0.0.1:5555/v1"
OPENAI = {"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY", "models": ["gpt-4o-mini"],
          "rate_limits": {"gpt-4o-mini": {"requests_per_minute": 500}}}


def write(path, endpoints: dict) -> str:
    path.write_text(json.dumps({"endpoints": endpoints}))
    return str(path)


def make(tmp_path, operator: dict | None, environ=None):
    """The combined file as serve.py makes it; returns it, its endpoints as the service reads them, and what was said."""
    said = []
    operator_path = write(tmp_path / "operator.json", operator) if operator is not None else None
    data = local_model.read_endpoints(operator_path) if operator_path else None
    endpoints = local_model.Endpoints(operator_path, str(tmp_path / local_model.MERGED_NAME), URL, data, said.append,
                                      environ={} if environ is None else environ)
    return endpoints, load_file(endpoints.path), said


def test_operator_endpoints_are_kept_as_they_are_and_local_is_added(tmp_path):
    endpoints, read, _ = make(tmp_path, {"openai": OPENAI})
    assert json.load(open(endpoints.path))["endpoints"]["openai"] == OPENAI
    assert json.loads((tmp_path / "operator.json").read_text()) == {"endpoints": {"openai": OPENAI}}  # not touched
    local = read["local"]
    assert (local.base_url, local.models, local.model, local.structured) == (URL, [local_model.MODEL_NAME],
                                                                             local_model.MODEL_NAME, "grammar")
    # No default configured (no AGENTSVC_LLM_BASE_URL, none in the file): default is the local model too.
    assert endpoints.as_default and read["default"] == local


@pytest.mark.parametrize("operator, environ", [
    ({"default": OPENAI}, {}),
    ({"openai": OPENAI}, {"AGENTSVC_LLM_BASE_URL": "http://127.0.0.1:11434/v1"}),
    (None, {"AGENTSVC_LLM_BASE_URL": "http://127.0.0.1:11434/v1"}),
])
def test_a_default_the_operator_chose_stays_the_default(tmp_path, operator, environ):
    endpoints, read, _ = make(tmp_path, operator, environ)
    assert not endpoints.as_default
    assert "local" in read
    if operator and "default" in operator:
        assert read["default"].base_url == OPENAI["base_url"]
    else:
        assert "default" not in read  # the service builds it from AGENTSVC_LLM_BASE_URL, as without --local-model


def test_a_file_that_already_names_local_is_refused(tmp_path):
    path = write(tmp_path / "operator.json", {"local": OPENAI})
    with pytest.raises(local_model.LocalModelError, match="already names an endpoint 'local'"):
        local_model.read_endpoints(path)


def test_a_bad_operator_file_is_refused_saying_why(tmp_path):
    path = write(tmp_path / "operator.json", {"openai": {**OPENAI, "models": []}})
    with pytest.raises(local_model.LocalModelError, match="models"):
        local_model.read_endpoints(path)


def test_an_edit_of_the_operator_file_reaches_the_combined_file_and_a_refused_one_does_not(tmp_path):
    endpoints, _, said = make(tmp_path, {"openai": OPENAI})
    write(tmp_path / "operator.json", {"openai": OPENAI, "other": {**OPENAI, "rate_limits": {}}})
    endpoints.refresh()
    assert set(load_file(endpoints.path)) == {"openai", "other", "local", "default"}

    write(tmp_path / "operator.json", {"local": OPENAI})  # now names local: said, and the last good file stays
    endpoints.refresh()
    assert set(load_file(endpoints.path)) == {"openai", "other", "local", "default"}
    assert "already names an endpoint 'local'" in said[-1]

    write(tmp_path / "operator.json", {"default": OPENAI})  # the operator's own default wins from now on
    endpoints.refresh()
    read = load_file(endpoints.path)
    assert set(read) == {"default", "local"} and read["default"].base_url == OPENAI["base_url"]
    assert not endpoints.as_default
