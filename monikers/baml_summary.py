"""Archive summaries written by a session's own LLM, through the BAML function
``SummarizeRecord`` (baml_src/summary.baml), with the same settings (config
``llm`` over environment over defaults) and client as the ``baml`` moniker."""
from monikers.baml_moniker import CallInfo, baml_api, baml_call, endpoint_error, resolve_settings
from monikers.llm_gate import estimate_tokens


async def summarize(config: dict, *, kind: str, task: str, transcript: str) -> dict:
    """``{"text", "key_points", "usage"}``; raises StepError when the model fails."""
    settings = resolve_settings(config or {})
    api = baml_api()
    collector = api.Collector(name=f"summary:{kind}")
    info = CallInfo()
    try:
        out = await baml_call(api, settings, "SummarizeRecord", (kind, task, transcript), collector, info,
                              estimate_tokens(task, transcript, reply_tokens=settings.max_tokens))
    except api.errors.BamlError as exc:
        raise endpoint_error(api, exc, settings) from None
    usage = None
    if collector.last is not None:
        tokens_in = collector.last.usage.input_tokens or 0
        tokens_out = collector.last.usage.output_tokens or 0
        usage = {"model": settings.model, "input_tokens": tokens_in, "output_tokens": tokens_out,
                 "cost": settings.cost(tokens_in, tokens_out), "rate_wait_ms": round(info.waited_s * 1000, 1)}
    return {"text": out.summary.strip(), "key_points": [p.strip() for p in out.key_points if p.strip()][:5],
            "usage": usage}
