"""Evaluating agents on their own record: diffs of a replay against its source
(diff.py), scorers (scorers.py) and the LLM judge (judge.py)."""
