"""What every route needs from the app it runs in, kept in ``app.extensions``
so that several apps (one per test, say) can live in one process."""
import threading

from flask import current_app

from api.storage_health import StorageHealth

KEY = "agentsvc"  # app.extensions key of the ApiContext


class ApiContext:
    """The store, the installed monikers and the app's metrics."""

    def __init__(self, store, monikers, metrics, storage_health=None):
        self.store = store
        self.monikers = monikers
        self.metrics = metrics
        self.storage_health = storage_health or StorageHealth(store)
        # Two identical creates racing inside this process must not both enqueue.
        self.create_lock = threading.Lock()


def ctx() -> ApiContext:
    return current_app.extensions[KEY]
