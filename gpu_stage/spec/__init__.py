"""Speculative decoding on the GPU stage's side, attached to the ModelRunner as its hook
(verifier.py): a verifying row's sampled rows and their acceptance (verify.py), the draft
model that guesses for the draft_model method (draft_model.py), and the CUDA graph shapes of
both, handed to their graph runners as families (graph_shapes.py)."""
