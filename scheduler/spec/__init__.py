"""Speculative decoding on the scheduler's side, attached to it as a step hook: who gets draft
tokens in a step and what a verifying row's result adds (drafts.py), the n-gram proposer that
guesses them from the sequence itself (ngram.py), and the counters."""
