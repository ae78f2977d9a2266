"""The `web_graph` TFDS builder on its dummy data: TFDS's own builder checks, for two source
layouts."""

import tensorflow_datasets as tfds

from tfds_builder.web_graph import WebGraph
from tfds_builder.web_graph.make_dummy_data import DUMMY_DIR, OFFICIAL_SUBDIR
from webgraph_contract import dataset_reader


def source_rows(directory) -> dict[str, int]:
    """Records per split of a dummy source directory, read with the contract's reader."""
    return {
        split: len(dataset_reader.read_split(str(directory), split))
        for split in ("train", "train_t", "test")
    }


class WebGraphFromPipelineDirTest(tfds.testing.DatasetBuilderTestCase):
    """`de-dense` from `dummy_data/`: a pipeline output directory (stats.json + one shard per
    split)."""

    DATASET_CLASS = WebGraph
    BUILDER_CONFIG_NAMES_TO_TEST = ["de-dense"]
    SPLITS = source_rows(DUMMY_DIR)
    OVERLAPPING_SPLITS = ["train", "train_t"]
    SKIP_CHECKSUMS = True


class WebGraphFromOfficialLayoutTest(tfds.testing.DatasetBuilderTestCase):
    """`in-dense` from `dummy_data/web_graph_tld_in_min_50/`: the official layout, two shards per
    split."""

    DATASET_CLASS = WebGraph
    BUILDER_CONFIG_NAMES_TO_TEST = ["in-dense"]
    SPLITS = source_rows(DUMMY_DIR / OFFICIAL_SUBDIR)
    OVERLAPPING_SPLITS = ["train", "train_t"]
    SKIP_CHECKSUMS = True
