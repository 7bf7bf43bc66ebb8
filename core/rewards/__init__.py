"""Reward execution: worker processes with deadlines, weighting and summaries, failure
accounting, scoring a JSONL file, and the answer-extraction helpers reward authors share."""
