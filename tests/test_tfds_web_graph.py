"""The `web_graph` TFDS builder on its dummy data: TFDS's own builder checks, for two source layouts."""

import tensorflow_datasets as tfds

from tfds_builder.web_graph import WebGraph


class WebGraphFromPipelineDirTest(tfds.testing.DatasetBuilderTestCase):
    """`de-dense` from `dummy_data/`: a pipeline output directory (stats.json + one shard per split)."""

    DATASET_CLASS = WebGraph
    BUILDER_CONFIG_NAMES_TO_TEST = ["de-dense"]
    SPLITS = {"train": 5, "train_t": 5, "test": 1}
    OVERLAPPING_SPLITS = ["train", "train_t"]
    SKIP_CHECKSUMS = True


class WebGraphFromOfficialLayoutTest(tfds.testing.DatasetBuilderTestCase):
    """`in-dense` from `dummy_data/web_graph_tld_in_min_50/`: the official layout, two shards per split."""

    DATASET_CLASS = WebGraph
    BUILDER_CONFIG_NAMES_TO_TEST = ["in-dense"]
    SPLITS = {"train": 10, "train_t": 12, "test": 2}
    OVERLAPPING_SPLITS = ["train", "train_t"]
    SKIP_CHECKSUMS = True
