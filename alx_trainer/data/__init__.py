"""Input: records -> row chunks (`records`), TFDS datasets (`tfds_input`), row chunks -> dense
batches (`batching`)."""
