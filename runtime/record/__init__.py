"""Record-keeping chores, off the step's path: summaries (archive.py), turns
(turn_tracker.py), conversation messages (conversation_log.py), embeddings
(record_keeping.py) and eval runs (eval_runner.py).  Imports runtime/base/
only."""
