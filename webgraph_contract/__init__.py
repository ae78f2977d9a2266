"""The WebGraph dataset contract: its file layout, record codec, stats.json and the conventions of
the command lines, shared by the pipeline, the TFDS builder and the trainer (no Beam, no
TensorFlow).
"""

# the code version every writer of a dataset records in its stats.json (the pipeline, the TFDS
# builder, `dataset_writer`)
__version__ = "0.1.0"
