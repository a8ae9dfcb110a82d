"""A llama.cpp endpoint whose model has no chat template of its own is told apart
(monikers/chat_template.py): from its server's ``/props`` (served here by the
fake OpenAI-compatible server), asked once per URL, only for endpoints in the
llama.cpp mode, and never for a server without ``/props``."""
import logging

from monikers import chat_template
from monikers.endpoints import Endpoint
from tests.fake_openai import FakeOpenAI

# SmolLM2-135M-Instruct's own template (its start, as llama.cpp's /props shows it), and its tokens.
SMOLLM2 = {"chat_template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                            "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM<|im_end|>\\n' }}"
                            "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                            "'<|im_end|>' + '\\n'}}{% endfor %}",
           "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
# What llama.cpp shows for a GGUF without a template (the base Gemma 3 270M): its ChatML fallback.
GEMMA_BASE = {"chat_template": chat_template.CHATML_FALLBACK, "bos_token": "<bos>", "eos_token": "<eos>"}


def endpoint(server, structured="grammar"):
    return Endpoint(base_url=server.base_url, models=["m"], structured=structured)


def test_a_model_with_its_own_template_is_not_warned_about_and_one_without_is():
    assert chat_template.warning_of(SMOLLM2) is None
    assert "falls back to ChatML" in chat_template.warning_of(GEMMA_BASE)
    assert "'<eos>'" in chat_template.warning_of(GEMMA_BASE)
    # the fallback's whitespace as another build prints it is still the fallback
    squeezed = {**GEMMA_BASE, "chat_template": chat_template.CHATML_FALLBACK.replace("\n", " ")}
    assert chat_template.warning_of(squeezed)
    # a ChatML model whose own template is exactly llama.cpp's is ChatML-trained: no warning
    assert chat_template.warning_of({**GEMMA_BASE, "eos_token": "<|im_end|>"}) is None
    assert "no chat template" in chat_template.warning_of({"chat_template": "", "eos_token": "</s>"})
    assert chat_template.warning_of({"eos_token": "</s>"})


def test_props_are_read_once_per_url_logged_once_and_only_for_llama_cpp_endpoints(caplog):
    caplog.set_level(logging.WARNING, logger="monikers.chat_template")
    with FakeOpenAI() as server:
        server.props = GEMMA_BASE
        warnings = chat_template.TemplateWarnings()
        first = warnings.of("local", endpoint(server))
        assert first and warnings.of("local", endpoint(server)) == first
        assert server.props_reads == 1
        assert [r.getMessage() for r in caplog.records].count(f"endpoint local (model m): {first}") == 1
        # another mode is not a llama.cpp endpoint: its server is not asked
        assert warnings.of("openai", endpoint(server, structured="json_schema")) is None
        assert server.props_reads == 1
    with FakeOpenAI() as plain:  # an OpenAI-compatible server without /props: nothing to say
        assert chat_template.TemplateWarnings().of("other", endpoint(plain)) is None
    with FakeOpenAI() as own:
        own.props = SMOLLM2
        assert chat_template.TemplateWarnings().of("smol", endpoint(own)) is None


def test_a_server_that_does_not_answer_yet_is_asked_again_later(monkeypatch):
    import requests

    answers = [requests.ConnectionError("refused"), GEMMA_BASE]

    def read(url, timeout_s):
        found = answers.pop(0)
        if isinstance(found, Exception):
            raise found
        return found
    monkeypatch.setattr(chat_template, "read_props", read)
    local = Endpoint(base_url="http://127.0.0.1:9/v1", models=["m"], structured="grammar")
    warnings = chat_template.TemplateWarnings()
    assert warnings.of("local", local) is None  # not answered: not remembered as "no warning"
    assert warnings.of("local", local) is None and len(answers) == 1  # nor asked again at once
    monkeypatch.setattr(chat_template, "RETRY_S", 0.0)
    assert warnings.of("local", local) and answers == []
    assert chat_template.server_root("http://127.0.0.1:8080/v1/") == "http://127.0.0.1:8080"
