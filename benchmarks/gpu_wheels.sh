#!/usr/bin/env bash
# Fetch, on a machine with internet, the wheel files that give implicit its CUDA model on the lent GPU
# machine (Python 3.12, CUDA 13, offline) into ./.whl (gitignored): implicit 0.7.3 (its PyPI wheel
# carries the CUDA 13 extension), rmm-cu13 and librmm-cu13 26.4.0 (26.10 lacks a symbol the extension
# needs), rapids-logger, tensorboardX (which the trainer imports and that machine lacks) and google-crc32c
# (the TFRecord reader checks every record with it; only needed to train from a dataset directory). About 14 MB.
# Run from the project root; copy .whl with the project. benchmarks.speed installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
for spec in implicit==0.7.3 rmm-cu13==26.4.0 librmm-cu13==26.4.0 rapids-logger==0.2.3 tensorboardX==2.6.5 google-crc32c==1.7.1; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$spec"
done
ls -la .whl
