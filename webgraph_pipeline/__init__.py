"""WebGraph pipeline: Common Crawl WAT files to a link-prediction dataset, with Apache Beam."""

from webgraph_contract import __version__

__all__ = ["__version__"]
