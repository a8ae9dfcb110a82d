"""The vocabulary both processes share: agents.py (which runs agents) and
app.py (which serves the API and the dashboard) read and write the same rows,
so they agree here on what a session's config is (session_config.py), which
statuses a row can have (statuses.py), what a live event looks like
(events.py) and which errors cross from one part to another (errors.py).

Nothing in this package imports another package of the service: every layer
(api/, runtime/, tools/, monikers/, store/, profiles/) may import it.
"""
