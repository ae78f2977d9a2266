"""TensorFlow Datasets builder for the WebGraph dataset (`web_graph`)."""
