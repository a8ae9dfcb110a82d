"""A POST whose answer was lost is retried safely (issue 37: "Idempotency-Key").

Between the CLI and app.py sits a proxy that forwards each request but, the
first time, cuts the connection before the answer gets back: the request was
queued, and the client cannot know.  The CLI sends it again with the same
Idempotency-Key, and the service answers as the first time and queues
nothing new.  The same through a kill of app.py after it queued the request.
"""
import json
import socket
import threading

from tests.harness import free_port, wait_for


class AnswerEater:
    """A TCP proxy to ``target_port`` that swallows the first ``eat`` answers to POSTs."""

    def __init__(self, target_port: int, eat: int = 1):
        self.port, self.target, self.eat, self.posts = free_port(), target_port, eat, 0
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        with client, socket.create_connection(("127.0.0.1", self.target)) as upstream:
            request = _read_message(client)
            if not request:
                return
            upstream.sendall(request)
            answer = _read_message(upstream)
            if request.startswith(b"POST"):
                self.posts += 1
                if self.eat > 0:
                    self.eat -= 1
                    return  # the request reached the service; its answer never reaches the client
            client.sendall(answer)

    def close(self):
        self.server.close()


def _read_message(sock) -> bytes:
    """One HTTP/1.1 message with a Content-Length body (what requests and werkzeug send here)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_the_cli_retries_a_lost_answer_with_its_key_and_the_action_is_queued_once(shared_service):
    svc = shared_service
    made = svc.create("countdown", config={"n": 100000, "interval_s": 0.2})
    svc.action(made["action_id"])
    proxy = AnswerEater(svc.port)
    try:
        run = svc.cli("interrupt", made["session_id"], "tell me about owls", "--json",
                      env={"AGENTSVC_URL": f"http://127.0.0.1:{proxy.port}"})
    finally:
        proxy.close()
    assert run.returncode == 0, run.stderr
    assert proxy.posts == 2  # the first answer was eaten; the retry got through
    assert json.loads(run.stdout)["status"] == "done"
    interrupts = svc.get("/api/actions", session_id=made["session_id"], type="interrupt").json()["actions"]
    assert len(interrupts) == 1, interrupts  # without the key the retry would have queued a second one


def test_a_key_survives_a_restart_of_app_py(service):
    """The key and the first answer are kept in the store with the actions,
    so a retry after app.py was killed and started again is answered alike."""
    svc = service
    made = svc.create("countdown", config={"n": 100000, "interval_s": 0.2})
    svc.action(made["action_id"])
    headers = {"Idempotency-Key": "pause-after-crash", "Content-Type": "application/json"}
    first = svc.post(f"/api/agents/{made['agent_id']}/pause", data="{}", headers=headers)
    assert first.status_code == 202
    svc.app.kill()
    svc.app.wait(timeout=30)
    svc.start_app()
    again = svc.post(f"/api/agents/{made['agent_id']}/pause", data="{}", headers=headers)
    assert again.status_code == 202 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    wait_for(lambda: svc.session(made["session_id"])["status"] == "paused", timeout=60, what="the pause")
    pauses = svc.get("/api/actions", session_id=made["session_id"], type="pause").json()["actions"]
    assert len(pauses) == 1
