"""Input: a dataset opened, checked and read as row chunks (`dataset`), CSR transposes
(`csr_transpose`), row chunks -> dense batches (`batching`).
"""
