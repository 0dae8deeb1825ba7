"""Speculative decoding on the scheduler's side: who gets draft tokens in a step (drafts.py), the
n-gram proposer that guesses them from the sequence itself (ngram.py), and the counters."""
