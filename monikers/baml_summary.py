"""Archive summaries written by a session's own LLM, through the BAML function
``SummarizeRecord`` (baml_src/summary.baml), with the same settings (config
``llm`` over environment over defaults) and the same call path
(monikers/llm_call.py) as the ``baml`` moniker."""
from monikers import llm_call, output_schemas
from monikers.llm_call import CallInfo, baml_api, endpoint_error
from monikers.llm_gate import estimate_tokens
from monikers.llm_settings import resolve_settings


async def summarize(config: dict, *, kind: str, task: str, transcript: str) -> dict:
    """``{"text", "key_points", "usage"}``; raises StepError when the model fails."""
    settings = resolve_settings(config or {})
    api = baml_api()
    info = CallInfo()
    try:
        out = await llm_call.call(api, settings, "SummarizeRecord", (kind, task, transcript), info=info,
                                  prompt_tokens=estimate_tokens(task, transcript, reply_tokens=0),
                                  schema=output_schemas.SUMMARY)
    except (api.errors.BamlError, llm_call.CallFailed) as exc:
        raise endpoint_error(api, exc, settings, info) from None
    return {"text": out.summary.strip(), "key_points": [p.strip() for p in out.key_points if p.strip()][:5],
            "usage": llm_call.usage_entry(settings, info)}
