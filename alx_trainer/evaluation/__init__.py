"""Fold-in evaluation (`evaluate`: sharded top-k scoring) and the ranking metrics (`metrics`)."""
