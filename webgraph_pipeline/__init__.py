"""WebGraph pipeline: Common Crawl WAT files to a link-prediction dataset, with Apache Beam."""

__version__ = "0.1.0"
