"""The ``agentsvc`` command line: runs the service, and talks to a running one over HTTP.

``cli.main`` holds the commands, ``cli.client`` every HTTP call they make (one
small module, so a change of route is one change), ``cli.sse`` the resumable
reader of ``GET /api/stream`` and ``cli.render`` the tables.
"""
