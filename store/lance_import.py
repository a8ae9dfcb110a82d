"""Loading LanceDB without paying at start for a client the service never calls.

``import lancedb`` imports ``lance_namespace``, which imports
``lance_namespace_urllib3_client``: the OpenAPI-generated client of Lance's REST
namespace server, about 500 methods each decorated with pydantic's
``@validate_call``.  Pydantic builds each decorator's validator when the module
is imported, and that was most of every process's start: of the 4.9 s that
``python -X importtime -c "import agents"`` counted on the shared 2-core machine,
the client's modules took 3.3 s (``table_api`` 0.73 s, ``metadata_api`` 0.69 s,
...), and agents.py and app.py are started ~70 times by the suite.

The service opens a local directory or object storage, never a REST namespace,
so :func:`import_lancedb` imports LanceDB with those decorators given pydantic's
own ``defer_build`` option: a validator is built on its method's first call
instead of at import.  A call validates exactly as before; only when the cost is
paid changes.  ``pydantic.validate_call`` is itself again once the import is
done, so no other module's decorators are touched.
"""
import contextlib
import functools
import sys

import pydantic


@contextlib.contextmanager
def deferred_validate_call():
    """While inside, ``pydantic.validate_call`` defers building its validators."""
    original = pydantic.validate_call

    @functools.wraps(original)
    def deferred(func=None, /, *, config=None, validate_return=False):
        config = {**(config or {}), "defer_build": True}
        if func is None:  # used as @validate_call(...)
            return original(config=config, validate_return=validate_return)
        return original(func, config=config, validate_return=validate_return)

    pydantic.validate_call = deferred  # what `from pydantic import validate_call` finds during the import
    try:
        yield
    finally:
        pydantic.validate_call = original


def import_lancedb() -> None:
    """Import lancedb (once per process) with the REST client's validators deferred."""
    if "lancedb" in sys.modules:
        return
    with deferred_validate_call():
        import lancedb  # noqa: F401
