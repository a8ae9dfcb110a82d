"""The app's JSON answers, with the values of secret-named keys redacted
(domain/redact.py): the last of the places a secret could leave by, after the
tables and the live events.  Keys keep the order they were built in."""
from flask.json.provider import DefaultJSONProvider

from domain.redact import redact_json_text


class RedactingJSONProvider(DefaultJSONProvider):
    sort_keys = False

    def dumps(self, obj, **kwargs) -> str:
        return redact_json_text(super().dumps(obj, **kwargs))
