"""Top-level domains as the TLD filter takes them: one label, lower case, IDNA (punycode) like the
hosts it is compared with (`urls.py` encodes hosts with Python's `idna` codec), and a real TLD.

Real means: a top-level entry of the ICANN section of the Public Suffix List, as shipped inside the
`publicsuffixlist` package (a maintained snapshot, no network at run time). A TLD the list does not
know can match no host of a crawl, so it is refused rather than silently keeping nothing.
The pipeline's `--tlds` and the TFDS builder's `tlds` config value both go through `parse_tlds`.
"""

from __future__ import annotations

import functools
from typing import Any

from publicsuffixlist import PublicSuffixList


@functools.lru_cache(maxsize=1)
def _suffix_list() -> PublicSuffixList:
    return PublicSuffixList(only_icann=True, accept_unknown=False)


def normalize_tld(text: str) -> str:
    """`' .DE '` -> `'de'`, `'ü'` -> `'xn--tda'`, `'РФ'` -> `'xn--p1ai'` (no validation)."""
    tld = text.strip().lstrip(".").lower()
    if not tld.isascii():
        try:
            tld = tld.encode("idna").decode("ascii").lower()
        except UnicodeError:
            pass  # left as it is: check_tld names it
    return tld


def check_tld(tld: str, given: str = "") -> None:
    """Raise ValueError unless `tld` is a normalized, known top-level domain (`given`: what the user
    wrote)."""
    shown = repr(given) if given and given != tld else ""
    label = f"{shown} ({tld!r})" if shown else repr(tld)
    if not tld or "." in tld or tld != tld.lower() or not tld.isascii():
        raise ValueError(
            f"bad top-level domain {label}: expected one label such as 'de' or 'xn--p1ai'"
        )
    if not _suffix_list().is_public(tld):
        raise ValueError(f"unknown top-level domain {label}: not a TLD of the Public Suffix List")


def parse_tlds(value: Any, where: str = "--tlds") -> tuple[str, ...]:
    """A comma-separated string or a list of strings -> sorted, unique, normalized, checked TLDs.

    `'de, IN'` and `['de', 'in']` give `('de', 'in')`; `''` and `[]` give `()`. Anything else (a
    number, a dict, a list holding a non-string) is a ValueError naming `where`.
    """
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise ValueError(
            f"{where}: expected a comma-separated string or a list of strings, got {value!r}"
        )
    out = set()
    for item in items:
        if not item.strip():
            continue
        tld = normalize_tld(item)
        try:
            check_tld(tld, item.strip())
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        out.add(tld)
    return tuple(sorted(out))
