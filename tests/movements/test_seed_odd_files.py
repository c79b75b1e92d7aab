"""`movements seed` with a deep UTF-16 file, and a seed after an operator demoted the file's
video (spec B 4.5 /seed; DESIGN 6: every bad input gets a clear error and changes nothing)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from gymctl.errors import DomainError
from gymctl.models import Movement
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.library import FORMAT, parse_library
from gymctl.movements.ranking import demote
from gymctl.movements.seed import seed_library
from gymctl.providers.storage import FolderObjectStore
from tests.conftest import NOW

# A UTF-16 JSON text json.loads reads (it detects the encoding from the NUL bytes), whose
# string "\u4e22" carries the byte 0x22 (an ASCII quote) in UTF-16-LE: the byte-level depth
# check sees an unterminated string there and counts one level, while the document nests
# 100 000 levels deep.
DEEP_UTF16 = ('["\u4e22\u5c22", ' + "[" * 100_000 + "]" * 100_000 + "]").encode("utf-16")


def test_a_deep_utf16_library_file_is_refused_not_a_recursion_crash():
    """The library file is checked like a body (decisions s38: depth 32): a file nesting deeper
    is 400 library_file_invalid. Here json.loads raised RecursionError out of parse_library
    (the CLI's exit 70, a seed job failing three times with `error: RecursionError`)."""
    with pytest.raises(DomainError) as refused:
        parse_library(DEEP_UTF16)
    assert refused.value.code == "library_file_invalid"


@pytest.mark.embedded
def test_seeding_a_deep_utf16_file_is_a_clear_refusal_and_writes_nothing(session, tmp_path):
    store = FolderObjectStore(tmp_path / "objects", url_base="http://x/storage", secret=b"s")
    store.put("libraries/deep.json", DEEP_UTF16, content_type="application/json")
    with pytest.raises(DomainError) as refused:
        seed_library(session, store, LocalEmbedder(), key="libraries/deep.json", now=NOW)
    assert refused.value.code == "library_file_invalid"
    assert session.scalar(select(func.count()).select_from(Movement)) == 0


def _publish(store, *entries) -> None:
    body = json.dumps({"format": FORMAT, "movements": list(entries)}).encode()
    store.put("lib.json", body, content_type="application/json")


@pytest.mark.embedded
@pytest.mark.parametrize("rebuild", [False, True], ids=["plain", "rebuild"])
def test_a_seed_does_not_put_back_a_video_an_operator_demoted(
    session, store, library_settings, rebuild
):
    """Spec B 3: demote rejects the current video ("falls through to the next scored candidate
    or null"); a plain seed only fills enriched fields "where empty" (decisions: Seed). The
    published file predates the operator's decision, as for aliases (decisions s50: "A seed never
    puts back an alias an operator removed"). The next seed wrote the rejected video back, as
    `manual`: a status ranking never touches and members' reports never demote."""
    bad = "https://www.youtube.com/watch?v=badvideo01"
    _publish(store, {"name": "Goblet Squat", "videoUrl": bad})
    seed_library(session, store, LocalEmbedder(), key="lib.json", now=NOW)
    row = session.scalar(select(Movement).where(Movement.slug == "goblet-squat"))
    assert (row.video_url, row.video_status) == (bad, "manual")
    demote(session, row.id, library_settings, now=NOW)
    session.commit()
    assert row.video_url is None
    assert "badvideo01" in row.video_rejected_ids

    seed_library(session, store, LocalEmbedder(), key="lib.json", rebuild=rebuild, now=NOW)
    session.expire_all()
    row = session.get(Movement, row.id)
    assert row.video_url is None, "the demoted video came back with the next seed"
    assert row.video_status == "none"
