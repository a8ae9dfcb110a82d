"""One error shape for every failure: ``{"error": {"code", "message"}}`` with a 4xx.

A 5xx is always a bug; it is logged with its traceback and answered in the same
shape without internals.
"""
import logging

from flask import Flask, jsonify
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from store.filters import InvalidId

log = logging.getLogger("api")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str):
    return jsonify({"error": {"code": code, "message": message}}), status


def describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def install(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.code, exc.message)

    @app.errorhandler(ValidationError)
    def _validation(exc: ValidationError):
        return error_response(400, "invalid_request", describe(exc))

    @app.errorhandler(InvalidId)
    def _invalid_id(exc: InvalidId):
        return error_response(400, "invalid_id", str(exc))

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        code = (exc.name or "error").lower().replace(" ", "_")
        body, status = error_response(exc.code or 500, code, exc.description or exc.name)
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:  # RFC 9110: a 405 says what is allowed
            body.headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        return body, status

    @app.errorhandler(Exception)
    def _bug(exc: Exception):
        log.exception("unhandled error")
        return error_response(500, "internal", "internal server error (logged)")
