"""The WebGraph dataset contract: its file layout, record codec, stats.json and the conventions of
the command lines, shared by the pipeline, the TFDS builder and the trainer (no Beam, no
TensorFlow).
"""
