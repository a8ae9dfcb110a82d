"""Dispatch: the action queue's dispatcher (dispatcher.py), the table of verbs
(actions.py) and their handlers: sessions (handlers.py), tool calls
(tool_controls.py), child sessions (child_controls.py) and questions
(questions.py).  Imports runtime/session/ and runtime/base/."""
