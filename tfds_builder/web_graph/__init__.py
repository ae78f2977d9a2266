"""TFDS dataset `web_graph`: `WebGraph` (the builder) and `WebGraphConfig` (named and custom
variants)."""

from .web_graph_dataset_builder import Builder, WebGraph, WebGraphConfig

__all__ = ["Builder", "WebGraph", "WebGraphConfig"]
