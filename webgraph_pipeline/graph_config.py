"""Graph configurations: the six WebGraph variants of the ALX paper (Table 1) and custom ones."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from webgraph_pipeline.tlds import check_tld

DEFAULT_ID_BUCKETS = 1024


@dataclasses.dataclass(frozen=True)
class GraphConfig:
    """Everything that decides which graph the job builds (the input aside).

    name: the variant name, or "custom".
    tlds: keep an edge only if both endpoints' hosts end in one of these top-level domains
      (normalized and known: `tlds.parse_tlds` makes them from user input); empty keeps every edge.
    min_links: K of the degree filter: keep nodes with at least K in-links and K out-links
      (0 disables the filter).
    degree_passes: how many times the degree filter is applied (the paper applies it once).
    seed: seed of the hash that picks test rows and held-out links.
    test_fraction: share of source rows that go to the test split.
    holdout_fraction: share of each test row's outlinks held out as ground truth (gt_tag).
    validation_fraction: given splits only: share of each user's training items held out as the
      `validation` split's ground truth, for tuning (0: no validation splits).
    bipartite: interaction data (users x items): sources and targets are separate node sets
      with separate id ranges, and the degree filter counts sources' out-links and targets'
      in-links only.
    id_buckets: hash buckets used to number nodes (ids are ordered by bucket, then by name).
    """

    name: str = "custom"
    tlds: tuple[str, ...] = ()
    min_links: int = 0
    degree_passes: int = 1
    seed: int = 0
    test_fraction: float = 0.1
    holdout_fraction: float = 0.25
    validation_fraction: float = 0.0
    bipartite: bool = False
    id_buckets: int = DEFAULT_ID_BUCKETS

    def __post_init__(self) -> None:
        if self.min_links < 0:
            raise ValueError(f"min_links must be >= 0, got {self.min_links}")
        if self.degree_passes < 1:
            raise ValueError(f"degree_passes must be >= 1, got {self.degree_passes}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(
                "test_fraction must be in [0, 1) (1 leaves no training row), got "
                f"{self.test_fraction}"
            )
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {self.holdout_fraction}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(
                f"validation_fraction must be in [0, 1), got {self.validation_fraction}"
            )
        if self.id_buckets < 1:
            raise ValueError(f"id_buckets must be >= 1, got {self.id_buckets}")
        for tld in self.tlds:
            check_tld(tld)
        if self.bipartite and self.tlds:
            raise ValueError(
                "a TLD filter needs URLs on both ends; it cannot apply to bipartite data"
            )

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able values (for stats.json)."""
        out = dataclasses.asdict(self)
        out["tlds"] = list(self.tlds)
        return out

    def replace(self, **changes: Any) -> "GraphConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


VARIANTS: Mapping[str, GraphConfig] = {
    "sparse": GraphConfig(name="sparse", min_links=10),
    "dense": GraphConfig(name="dense", min_links=50),
    "de-sparse": GraphConfig(name="de-sparse", tlds=("de",), min_links=10),
    "de-dense": GraphConfig(name="de-dense", tlds=("de",), min_links=50),
    "in-sparse": GraphConfig(name="in-sparse", tlds=("in",), min_links=10),
    "in-dense": GraphConfig(name="in-dense", tlds=("in",), min_links=50),
}


def get_variant(name: str) -> GraphConfig:
    """The named paper variant; a clear error listing the known names otherwise."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(
            f"unknown variant {name!r}; expected one of {', '.join(VARIANTS)}"
        ) from None
