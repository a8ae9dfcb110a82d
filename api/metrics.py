"""Prometheus metrics of the HTTP side, on a registry of the app's own (so
several apps in one test process do not collide)."""
import time

from flask import Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self, store):
        self.registry = CollectorRegistry()
        self.requests = Counter("agentsvc_http_requests_total", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("agentsvc_http_request_seconds", "HTTP request latency", ["route"],
                                 registry=self.registry)
        self.actions_enqueued = Counter("agentsvc_actions_enqueued_total", "actions accepted into the queue",
                                        ["type"], registry=self.registry)
        pending = Gauge("agentsvc_actions_pending", "actions waiting in the queue", registry=self.registry)
        pending.set_function(lambda: store.actions.count("pending"))

    def install(self, app: Flask) -> None:
        @app.before_request
        def _start():
            g.started = time.perf_counter()

        @app.after_request
        def _count(response):
            route = request.url_rule.rule if request.url_rule else "unmatched"
            self.requests.labels(request.method, route, str(response.status_code)).inc()
            if "started" in g:
                self.latency.labels(route).observe(time.perf_counter() - g.started)
            return response

        @app.get("/metrics")
        def metrics():
            return Response(generate_latest(self.registry), mimetype=CONTENT_TYPE_LATEST)
