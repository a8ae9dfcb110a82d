"""Errors that cross from one part of the service to another."""


class ActionError(Exception):
    """A control action is well formed but cannot be applied; the message says
    why.  A handler raises it, and the dispatcher marks the action failed with
    that message (an action that raises anything else is retried, then parked)."""
