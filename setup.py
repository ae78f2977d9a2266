"""WebGraph + ALX: Common Crawl link graphs as a benchmark, and sharded implicit ALS in JAX."""

from setuptools import find_namespace_packages, setup

BASE = [
    "numpy>=1.26,<3",
    "jax>=0.5,<1",
    "jaxlib>=0.5,<1",
    "orbax-checkpoint>=0.11,<1",
    # CRC-32C of every TFRecord read or written (webgraph_contract.tfrecord)
    "google-crc32c>=1.5,<2",
    # gs://, s3://, ... paths (webgraph_contract.fileio); the store's package is an extra
    "fsspec>=2023.1",
    "tqdm>=4.66,<5",
    "threadpoolctl>=3.1,<4",  # the host gramian runs BLAS at one thread
    "matplotlib>=3.8,<4",  # the sweep's heatmap
    "tensorboardx>=2.6,<3",
    "pyyaml>=6,<7",
]
PIPELINE = [  # python -m webgraph_pipeline: the Beam job from Common Crawl or edge lists
    "apache-beam>=2.60,<3",
    "warcio>=1.7,<2",
    "orjson>=3.9,<4",
    "pandas>=2.0,<4",  # hash_array: the graph stage's vectorized node fingerprints
    # node names as string arrays: sorted, taken and compared without a Python object each
    "pyarrow>=14,<26",
    # --tlds and TFDS configs are checked against its Public Suffix List
    "publicsuffixlist>=1.0,<2",
]
# --data web_graph/<config> and `tfds build tfds_builder/web_graph` (which also runs the pipeline)
TFDS = [
    "tensorflow>=2.16,<3",
    "tensorflow-datasets>=4.9.6,<5",
    "mlcroissant>=1.0,<2",  # the `tfds` command line (tfds build) imports it
    "importlib_resources>=6,<8",  # etils.epath needs it when TFDS loads a builder from its folder
]

setup(
    name="webgraph-alx",
    version="0.1.0",
    description=(
        "Build the WebGraph link-prediction dataset from Common Crawl with Apache Beam, "
        "serve it through TensorFlow Datasets, and factorize it with sharded implicit ALS in JAX "
        "(installed alone: pip install webgraph-alx; the pipeline and TFDS are extras)."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # The packages sit at the repository root: said so, `pip install -e .` puts the root on sys.path
    # with a .pth file, without setuptools' import-hook finder and the "Editable installation"
    # warning box that finder prints to every new user (`make install`).
    package_dir={"": "."},
    # Namespace discovery also lists the builder's dummy_data folders (data, no __init__.py), so
    # setuptools knows they are meant to ship and their files can be declared as package data.
    packages=find_namespace_packages(
        include=["webgraph_contract*", "webgraph_pipeline*", "tfds_builder*", "alx_trainer*"],
        exclude=["*.__pycache__"],
    ),
    package_data={
        "tfds_builder.web_graph": ["*.md", "*.bib", "*.tsv"],
        "tfds_builder.web_graph.dummy_data": ["*"],
        "tfds_builder.web_graph.dummy_data.web_graph_tld_in_min_50": ["*"],
    },
    # The base install is what training needs (`python -m alx_trainer ...` on a dataset directory):
    # JAX and NumPy, no TensorFlow, no Beam. The extras add the other users' parts (see README
    # "Install").
    install_requires=BASE,
    extras_require={
        "pipeline": PIPELINE,
        "tfds": TFDS,
        "all": PIPELINE + TFDS,
        "test": [
            "pytest>=8,<10",
            "pytest-xdist>=3.5,<4",  # `make test` runs the suite in 2 worker processes
            "scipy>=1.11,<2",
            "implicit>=0.7,<0.8",
            "dill>=0.3.6,<1",
            "fastwarc>=2.0,<3",
            "ruff>=0.6,<1",
            "triton>=3.4,<4",  # compiles the Pallas kernel for sm_90 on a host without a GPU
        ],
        "gcs": ["gcsfs>=2023.1"],  # gs:// paths (fsspec's Google Cloud Storage filesystem)
        "s3": ["s3fs>=2023.1"],  # s3:// paths
        "dataflow": ["apache-beam[gcp]>=2.60,<3", "gcsfs>=2023.1"],
        "gpu": ["jax[cuda12]>=0.5,<1"],
        "tpu": ["jax[tpu]>=0.5,<1"],
        "fast": ["fastwarc>=2.0,<3"],
    },
    entry_points={
        "console_scripts": [
            "webgraph-pipeline=webgraph_pipeline.__main__:main",
            "alx=alx_trainer.__main__:main",
        ]
    },
    classifiers=["Programming Language :: Python :: 3"],  # the license is the SPDX `license` above
)
