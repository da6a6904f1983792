"""Running the app under uvicorn, with a drain phase on SIGTERM.

On SIGTERM (or Ctrl-C) the replica first turns not-ready: /ready answers 503 and new
scoring requests get 503 (a load balancer sends them to another replica, nginx with
``proxy_next_upstream http_503``), while requests already in flight finish. After
``drain_seconds`` uvicorn stops as usual: it closes the listening socket, waits for the
last requests (at most ``graceful_seconds``), and the lifespan shutdown stops the
batchers. A second signal stops at once.
"""

from __future__ import annotations

import logging
import threading

import uvicorn

from rewardserve.service.app import create_app
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state, drain_seconds: float):
        super().__init__(config)
        self.state = state
        self.drain_seconds = drain_seconds
        self._drain: threading.Timer | None = None

    def handle_exit(self, sig, frame) -> None:
        if self._drain is None and self.drain_seconds > 0:
            log.info("draining for %.1fs before shutting down", self.drain_seconds)
            self.state.draining = True
            self._drain = threading.Timer(self.drain_seconds, super().handle_exit, (sig, frame))
            self._drain.daemon = True
            self._drain.start()
            return
        super().handle_exit(sig, frame)


def run(settings: Settings) -> None:
    if settings.malloc_keep_activations:
        from rewardserve.service.memory import keep_activation_memory

        keep_activation_memory()  # process-wide: only for the process that serves
    app = create_app(settings)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        timeout_graceful_shutdown=settings.graceful_seconds,
    )
    DrainingServer(config, app.state.svc, settings.drain_seconds).run()
