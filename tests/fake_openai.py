"""A scriptable OpenAI-compatible chat server for tests and benchmarks.

Real BAML clients talk to it over real HTTP on 127.0.0.1 (no LLM exists in the
test environment), so everything between the moniker and the socket is the
production path.  Each request is answered by a *responder*: a function from
the parsed request to a :class:`Reply`.  :func:`scripted` plays replies in
order; :func:`by_model` picks a script by the requested model.  Every request
is recorded (path, model, headers, body) for assertions.

``POST /embeddings`` answers with deterministic bag-of-words vectors
(:func:`embed`): texts that share words get close vectors, so a paraphrase
ranks its source first.  ``embeddings_status`` other than 200 makes the route
fail (an endpoint that is down).

A request with ``"stream": true`` is answered as Server-Sent Events, the
content in ``chunk_chars`` pieces ``chunk_delay_s`` apart (a slow stream), with
a final usage chunk when ``stream_options.include_usage`` asks for one.
``reject_fields`` makes the server answer 400 naming the first request field
it does not take (a server without structured output: ``{"response_format"}``).
"""
import hashlib
import json
import math
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Reply:
    """One answer: a chat completion with ``content``, or an HTTP error ``status``."""

    content: str = ""
    status: int = 200
    delay_s: float = 0.0
    prompt_tokens: int | None = None      # default: derived from the prompt's length
    completion_tokens: int | None = None  # default: derived from the content's length
    headers: dict | None = None  # extra response headers (e.g. {"Retry-After": "2"} on a 429)
    chunk_chars: int = 8  # streamed replies: characters per chunk
    chunk_delay_s: float = 0.0  # streamed replies: the pause before each chunk
    before_chunk: Callable[[int], None] | None = None  # streamed replies: called with each chunk's index first
    finish_reason: str = "stop"  # "length": the reply was cut at max_tokens


@dataclass
class Received:
    path: str
    model: str | None
    headers: dict
    body: dict
    at: float

    @property
    def prompt(self) -> str:
        """All message texts of the request, joined."""
        parts = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            parts.append(content or "")
        return "\n".join(parts)


Responder = Callable[[Received], Reply]


def scripted(*replies: Reply, then: Reply | None = None) -> Responder:
    """Play ``replies`` in order, then ``then`` forever (default: HTTP 500)."""
    queue = list(replies)
    lock = threading.Lock()
    last = then or Reply(status=500, content="script exhausted")

    def respond(_request: Received) -> Reply:
        with lock:
            return queue.pop(0) if queue else last
    return respond


def by_model(scripts: dict[str, Responder]) -> Responder:
    def respond(request: Received) -> Reply:
        responder = scripts.get(request.model)
        return responder(request) if responder else Reply(status=404, content=f"no model {request.model!r}")
    return respond


def completion(reply: Reply, request: Received) -> dict:
    prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else len(request.prompt) // 4 + 1
    completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else len(reply.content) // 4 + 1
    return {
        "id": f"chatcmpl-fake-{int(request.at * 1e6)}", "object": "chat.completion", "created": int(request.at),
        "model": request.model or "fake",
        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                     "message": {"role": "assistant", "content": reply.content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


EMBEDDING_DIM = 64
_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "of", "to", "and", "in", "on", "is", "it", "for", "about", "with", "that", "this"}


def embed(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """Hash each word (crudely stemmed, stop words dropped) to a signed slot; L2-normalise."""
    vector = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        word = word[:-1] if len(word) > 3 and word.endswith("s") else word
        digest = hashlib.sha1(word.encode()).digest()
        vector[digest[0] % dim] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        """llama.cpp's ``/props`` when the test set ``fake.props`` (else 404, as other servers)."""
        if self.path.rstrip("/") == "/props" and self.server.fake.props is not None:
            self.server.fake.props_reads += 1
            return self._send(200, self.server.fake.props)
        return self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        request = Received(path=self.path, model=body.get("model"), at=time.time(),
                           headers={k.lower(): v for k, v in self.headers.items()}, body=body)
        if self.path.rstrip("/") in ("/embeddings", "/v1/embeddings"):
            return self._embeddings(request)
        if self.path.rstrip("/") not in ("/chat/completions", "/v1/chat/completions"):
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        self.server.fake.record(request)
        rejected = sorted(set(body) & self.server.fake.reject_fields)
        if rejected:
            return self._send(400, {"error": {"message": f"unrecognized request argument supplied: {rejected[0]}",
                                              "type": "invalid_request_error", "param": rejected[0]}})
        reply = self.server.fake.responder(request)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200:
            return self._send(reply.status, {"error": {"message": reply.content or "fake error", "type": "fake"}},
                              reply.headers)
        if body.get("stream"):
            return self._stream(reply, request)
        self._send(200, completion(reply, request), reply.headers)

    def _stream(self, reply: Reply, request: Received) -> None:
        """The reply as chat.completion.chunk events, then the usage chunk if asked, then [DONE]."""
        whole = completion(reply, request)
        base = {"id": whole["id"], "object": "chat.completion.chunk", "created": whole["created"],
                "model": whole["model"]}
        pieces = [reply.content[i:i + reply.chunk_chars] for i in range(0, len(reply.content), reply.chunk_chars)]
        try:
            self.send_response(200)
            for name, value in (reply.headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for i, piece in enumerate(pieces):
                if reply.chunk_delay_s:
                    time.sleep(reply.chunk_delay_s)
                if reply.before_chunk:
                    reply.before_chunk(i)  # a test holds the rest of the reply until it saw the start
                delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                self._event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            self._event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]})
            if (request.body.get("stream_options") or {}).get("include_usage"):
                self._event({**base, "choices": [], "usage": whole["usage"]})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass

    def _event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _embeddings(self, request: Received) -> None:
        fake = self.server.fake
        fake.record_embedding(request)
        if fake.embeddings_status != 200:
            return self._send(fake.embeddings_status, {"error": {"message": "embeddings down", "type": "fake"}})
        inputs = request.body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        data = [{"object": "embedding", "index": i, "embedding": embed(str(t), fake.embedding_dim)}
                for i, t in enumerate(inputs)]
        tokens = sum(len(str(t).split()) for t in inputs)
        self._send(200, {"object": "list", "data": data, "model": request.model or "fake-embed",
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class FakeOpenAI:
    """``with FakeOpenAI(scripted(...)) as server: ... server.base_url ... server.requests``"""

    def __init__(self, responder: Responder | None = None):
        self.responder: Responder = responder or scripted()
        self.requests: list[Received] = []
        self.embedding_requests: list[Received] = []
        self.embedding_dim = EMBEDDING_DIM
        self.embeddings_status = 200  # set to e.g. 503 to make /embeddings fail
        self.reject_fields: set[str] = set()  # request fields answered with a 400 that names them
        self.props: dict | None = None  # GET /props as llama.cpp's server answers it (None: 404)
        self.props_reads = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def record(self, request: Received) -> None:
        with self._lock:
            self.requests.append(request)

    def record_embedding(self, request: Received) -> None:
        with self._lock:
            self.embedding_requests.append(request)

    def start(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
